"""Reading and writing the project's own state files (``plan.json``, ``results.jsonl``, reports), safely.

One policy for every executor (the local worker pool and any other) and every command (conformance,
replay, compare, bench):

* **Only regular files are read or appended to** (:func:`regular`): a FIFO, a device or a socket where a
  state file should be is refused (:class:`StateError`) — opening a FIFO blocks forever, a device never
  ends. The check is made on the open descriptor (``O_NONBLOCK``), so a swap after the check changes
  nothing.
* **Reads are bounded** (:func:`read_bytes`): a file larger than its limit is refused naming the limit;
  JSON is parsed only after its nesting depth is checked (:func:`loads`), so a 200,000-deep document is a
  one-line error, not a ``RecursionError``.
* **JSON Lines are validated line by line** (:func:`read_records`): a line that is not UTF-8, not JSON,
  not an object, or lacks a required string key is *damaged*: skipped (its case is then not done, so a
  resume runs it again) and reported once per file and line (:class:`Damage`).
* **Writes are atomic or whole-line** (:func:`write_atomic`, :func:`append_lines`): a file is either its
  old or its new content; an append that fails (a full disk) is cut back to where it started, so the
  records written before stay valid; a temporary file is removed on any error. ``ENOSPC`` / ``EROFS`` /
  ``EACCES`` and every other ``OSError`` become :class:`DiskError`, one line naming the path.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

PLAN_BYTES = 256 << 20
"""The largest ``plan.json`` read (a thorough plan of every op and backend is a few MB)."""
RECORD_BYTES = 64 << 20
"""The largest single line of a ``results.jsonl``."""
JSON_DEPTH = 64
"""The deepest nesting of objects/arrays accepted in a state file (records nest 4-6 levels)."""


class StateError(Exception):
    """A state file that cannot be used: one line naming the path and what is wrong."""

    def __init__(self, path, problem: str):
        self.path = Path(path)
        super().__init__(f"{path}: {problem}")


class DiskError(StateError):
    """An ``OSError`` while writing a state file (full disk, read-only filesystem, no permission, ...)."""

    def __init__(self, path, exc: OSError):
        self.errno = exc.errno
        name = errno.errorcode.get(exc.errno or 0, "")
        reason = exc.strerror or str(exc)
        super().__init__(path, f"cannot write: {reason}" + (f" ({name})" if name else ""))


def regular(path, what: str = "file") -> bool:
    """True when ``path`` is a regular file (symlinks followed), False when it does not exist; raises
    :class:`StateError` for anything else there (a FIFO, a device, a socket, a folder)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StateError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise StateError(path, f"the {what} is not a regular file ({_kind(st.st_mode)}); remove it or choose "
                               "another folder")
    return True


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a plain file"


def _open_regular(path, flags: int, what: str, mode: int = 0o666) -> int:
    """A descriptor on ``path``, opened without blocking (a FIFO opened for reading would wait for a
    writer) and checked to be a regular file on the descriptor itself."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise DiskError(path, exc) from None
        raise StateError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise StateError(path, f"the {what} is not a regular file ({_kind(st.st_mode)}); remove it or choose "
                               "another folder")
    os.set_blocking(fd, True)
    return fd


def read_bytes(path, limit: int, what: str = "file") -> bytes:
    """The whole content of a regular file of at most ``limit`` bytes (else :class:`StateError`)."""
    fd = _open_regular(path, os.O_RDONLY, what)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise StateError(path, f"the {what} is {size:,} bytes, over the limit of {limit:,} bytes")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise StateError(path, f"the {what} grows past the limit of {limit:,} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise StateError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


def json_depth(data: bytes | str) -> int:
    """The deepest nesting of ``[``/``{`` in a JSON text (strings skipped), computed without recursion."""
    import numpy as np

    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if b"[" not in raw and b"{" not in raw:
        return 0
    bare = _STRING.sub(b'""', raw) if b'"' in raw else raw
    codes = np.frombuffer(bare, dtype=np.uint8)
    step = ((codes == 0x5B) | (codes == 0x7B)).astype(np.int32) - ((codes == 0x5D) | (codes == 0x7D))
    return int(np.cumsum(step).max(initial=0))


def loads(data: bytes | str, where, *, depth: int = JSON_DEPTH, what: str = "JSON", pairs_hook=None):
    """``json.loads`` with the nesting depth bounded first; any failure is one :class:`StateError` line."""
    found = json_depth(data)
    if found > depth:
        raise StateError(where, f"the {what} cannot be read: JSON nested {found:,} levels deep, over the limit of {depth}")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return json.loads(text, object_pairs_hook=pairs_hook)
    except UnicodeDecodeError as exc:
        raise StateError(where, f"the {what} cannot be read: not UTF-8 text (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise StateError(where, f"the {what} cannot be read: not valid JSON ({str(exc)[:120]})") from None


def read_json(path, *, limit: int, what: str, depth: int = JSON_DEPTH, pairs_hook=None):
    """A bounded JSON file (regular, at most ``limit`` bytes, ``depth`` levels)."""
    return loads(read_bytes(path, limit, what), path, depth=depth, what=what, pairs_hook=pairs_hook)


@dataclass(frozen=True)
class Damage:
    """One damaged line of a JSON Lines file: its 1-based number and what is wrong with it."""

    line: int
    problem: str


def parse_record(raw: bytes, required: tuple[str, ...]) -> tuple[dict | None, str | None]:
    """One line (without its newline) as a record, or ``(None, problem)``."""
    if len(raw) > RECORD_BYTES:
        return None, f"a line of {len(raw):,} bytes, over the limit of {RECORD_BYTES:,}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start})"
    if not text.strip():
        return None, "an empty line"
    if json_depth(raw) > JSON_DEPTH:
        return None, f"nested deeper than {JSON_DEPTH} levels"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"not JSON ({str(exc)[:80]})"
    if not isinstance(value, dict):
        return None, f"JSON but not an object ({type(value).__name__})"
    for key in required:
        if not isinstance(value.get(key), str):
            return None, f"no string {key!r}" if key not in value else f"{key!r} is not a string"
    return value, None


def read_records(path, required: tuple[str, ...] = ("backend", "case_id")) -> tuple[list[dict], list[Damage]]:
    """Every valid record of a JSON Lines file, and its damaged lines. A last line without its newline
    (torn by a crash) is neither: :func:`torn_tail` cuts it off before appending."""
    if not regular(path, "results file"):
        return [], []
    fd = _open_regular(path, os.O_RDONLY, "results file")
    records, damaged = [], []
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            for number, line in enumerate(f, 1):
                if not line.endswith(b"\n"):
                    break
                record, problem = parse_record(line[:-1], required)
                if problem:
                    damaged.append(Damage(number, problem))
                else:
                    records.append(record)
    except OSError as exc:
        raise StateError(path, f"cannot read the results file: {exc.strerror or exc}") from None
    return records, damaged


def torn_tail(data: bytes) -> int:
    """How many bytes at the end of a JSON Lines content are a torn line (no newline, or a last line that
    does not parse): the bytes to cut before appending."""
    if not data:
        return 0
    if not data.endswith(b"\n"):
        return len(data) - (data.rfind(b"\n") + 1)
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    try:
        json.loads(data[start:])
    except (ValueError, RecursionError):
        return len(data) - start
    return 0


def cut_torn_tail(path) -> int:
    """Cut a torn last line off a JSON Lines file; the number of bytes removed."""
    if not regular(path, "results file"):
        return 0
    fd = _open_regular(path, os.O_RDWR, "results file")
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        tail_from = max(0, size - RECORD_BYTES - 1)
        os.lseek(fd, tail_from, os.SEEK_SET)
        tail = b""
        while len(tail) < size - tail_from:
            chunk = os.read(fd, size - tail_from - len(tail))
            if not chunk:
                break
            tail += chunk
        cut = torn_tail(tail)
        if cut:
            os.ftruncate(fd, size - cut)
            os.fsync(fd)
        return cut
    except OSError as exc:
        raise DiskError(path, exc) from None
    finally:
        os.close(fd)


def append_lines(path, text: str) -> None:
    """Append whole lines and fsync. On any error the file is cut back to its size before (so it holds
    only the records that were complete) and :class:`DiskError` names the path."""
    data = text.encode("utf-8")
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DiskError(path.parent, exc) from None
    regular(path, "results file")  # a FIFO without a reader would fail to open with a less clear ENXIO
    fd = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "results file")
    start = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as exc:
        try:
            os.ftruncate(fd, start)
        except OSError:
            pass
        raise DiskError(path, exc) from None
    finally:
        os.close(fd)


def write_atomic(path, text: str | bytes) -> None:
    """Write a file so that it is either the old or the new content, never half of it; the temporary
    file is removed on any error (:class:`DiskError` names the path)."""
    path = Path(path)
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DiskError(path.parent, exc) from None
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = None
        os.replace(tmp, path)
    except BaseException as exc:
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise DiskError(path, exc) from None
        raise


class DamageLog:
    """Says each damaged line of a file once (a resume reads its results several times)."""

    def __init__(self, stream=None):
        self.stream = stream
        self.said: set[tuple[str, int]] = set()

    def report(self, path, damaged: list[Damage], consequence: str) -> None:
        fresh = [d for d in damaged if (str(path), d.line) not in self.said]
        for d in fresh:
            self.said.add((str(path), d.line))
        if not fresh:
            return
        first = fresh[0]
        more = f" (and {len(fresh) - 1} more damaged line(s))" if len(fresh) > 1 else ""
        print(f"warning: {path} line {first.line}: {first.problem}; skipped{more}: {consequence}",
              file=self.stream or sys.stderr)
