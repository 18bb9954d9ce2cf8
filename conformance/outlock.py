"""One run per output folder: an exclusive lock on ``<out>/.lock`` held for the whole run.

Two runs appending to one ``results.jsonl`` would duplicate records and tear each other's plan; the
second one is refused instead (:class:`OutLocked`, naming the holder's pid). The lock is an
``fcntl.flock`` on an open file: the kernel drops it when the holder exits, however it exits
(``kill -9`` included), so a stale lock file never blocks a later run. Where ``fcntl`` does not exist
(Windows) the lock is not taken.
"""

from __future__ import annotations

import os
from pathlib import Path

LOCK_NAME = ".lock"


class OutLocked(RuntimeError):
    """Another live process holds the folder's lock; ``pid`` is its pid (None if it could not be read)."""

    def __init__(self, folder: Path, pid: int | None):
        self.folder, self.pid = folder, pid
        holder = f"pid {pid}" if pid else "another process"
        super().__init__(f"--out {folder} is in use by another run ({holder}); wait for it to finish or "
                         "choose another --out")


class OutLock:
    """``with OutLock(folder):`` — the folder (created if missing) is this process's until the block ends.

    Raises :class:`OutLocked` when another process holds it, ``OSError`` when the folder cannot be
    created or written."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self._file = None

    def acquire(self) -> "OutLock":
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on POSIX
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        f = open(self.folder / LOCK_NAME, "a+", encoding="utf-8")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            text = f.read().strip()
            f.close()
            raise OutLocked(self.folder, int(text) if text.isdigit() else None) from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._file = f
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file drops the flock
            self._file = None

    def __enter__(self) -> "OutLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
