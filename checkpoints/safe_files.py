"""Opening the files of a checkpoint directory that may be hostile.

A checkpoint is data from elsewhere: its index names the shard files, its JSON files are parsed, its
safetensors headers are trusted for offsets. What this module guarantees, for every file the
checkpoint readers open:

* **inside the directory**: a name from an index must be a relative path without ``..`` that
  resolves (symlinks followed) to a file under the checkpoint directory (:func:`inside`); an
  absolute path, a ``../`` escape or a symlink pointing out is refused;
* **a regular file**: a FIFO, a device, a socket or a directory is refused before it is opened
  (``os.stat``), and the file is opened with ``O_NONBLOCK`` and checked again with ``fstat`` so that a
  FIFO swapped in between cannot block the reader (:func:`open_regular`);
* **symlink loops** give an error naming the file, not ``RuntimeError`` / ``OSError`` tracebacks;
* **JSON nesting** is limited to :data:`MAX_JSON_DEPTH` before the parser recurses
  (:func:`loads_json`): a 100 000-deep document is an error, not a ``RecursionError``.

Every failure raises the ``error`` class the caller passes (a ``ValueError``: ``CheckpointError``,
``SafetensorsError``), with a message naming the file, what was expected and what came.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from conformance.stateio import json_depth  # noqa: F401 - one bracket counter for every JSON reader

MAX_JSON_DEPTH = 64
"""Deepest JSON nesting accepted (arrays and objects). msModelSlim descriptions, HF configs, shard
indexes and safetensors headers nest 2 to 5 levels."""

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _os_error(path, what: str, exc: OSError, error: type[Exception]) -> Exception:
    if exc.errno == errno.ELOOP:
        return error(f"{path}: {what} must be a file; got a symlink loop ({exc.strerror})")
    return error(f"{path}: {what} is not readable ({exc.strerror or exc})")


def check_regular(path: str | os.PathLike, what: str, error: type[Exception] = ValueError) -> os.stat_result:
    """``os.stat`` of ``path`` (symlinks followed): a regular file, else ``error`` naming what it is."""
    try:
        st = os.stat(path)
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError):  # Path.resolve's symlink loop on older Pythons
            raise error(f"{path}: {what} must be a file; got a symlink loop ({exc})") from None
        raise _os_error(path, what, exc, error) from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: {what} must be a regular file; got {_kind(st.st_mode)}")
    return st


def open_regular(path: str | os.PathLike, what: str, error: type[Exception] = ValueError):
    """Open ``path`` for binary reading, refusing anything but a regular file without ever blocking.

    Checked with ``os.stat`` before the open and ``os.fstat`` after it (the open is ``O_NONBLOCK``, so a
    FIFO put in place between the two returns at once instead of waiting for a writer). Returns a
    binary file object (blocking mode restored)."""
    check_regular(path, what, error)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _os_error(path, what, exc, error) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: {what} must be a regular file; got {_kind(st.st_mode)}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_text(path: str | os.PathLike, what: str, error: type[Exception] = ValueError, *,
              limit: int = 256 << 20) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``limit`` bytes)."""
    with open_regular(path, what, error) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise error(f"{path}: {what} must be at most {limit} bytes; got a larger file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} must be UTF-8 text; got {exc}") from None


def loads_json(text: str | bytes, source, what: str, error: type[Exception] = ValueError, *,
               max_depth: int = MAX_JSON_DEPTH):
    """``json.loads`` of ``text`` after checking its nesting (``source`` and ``what`` name it in errors)."""
    depth = json_depth(text)
    if depth > max_depth:
        raise error(f"{source}: {what} must be JSON nested at most {max_depth} levels deep; got {depth} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:   # JSONDecodeError, UnicodeDecodeError, an int of 5,000 digits
        raise error(f"{source}: {what} is not readable JSON ({exc})") from None


def load_json(path: str | os.PathLike, what: str, error: type[Exception] = ValueError):
    """The parsed JSON of the regular file ``path`` (depth-limited: :func:`loads_json`)."""
    return loads_json(read_text(path, what, error), path, what, error)


def inside(root: str | os.PathLike, name, source, what: str, error: type[Exception] = ValueError) -> Path:
    """The file ``root / name`` for a ``name`` read from ``source`` (an index), checked to stay inside.

    Refused, naming ``source``: a name that is not a non-empty string, an absolute path, one with a
    ``..`` component, one whose resolved path (symlinks followed) is outside ``root`` or loops, and one
    that is not a regular file. Returns the joined (unresolved) path."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise error(f"{source}: {what} must be a file name inside {root}; got {name!r:.80}")
    rel = Path(name)
    if rel.is_absolute() or rel.drive or name.startswith(("/", "\\")):
        raise error(f"{source}: {what} must be a relative file name inside {root}; got the absolute path {name!r}")
    if ".." in rel.parts or ".." in name.replace("\\", "/").split("/"):
        raise error(f"{source}: {what} must stay inside {root}; got {name!r}, which climbs out with '..'")
    joined = Path(root) / rel
    real_root = Path(os.path.realpath(root))
    try:
        real = Path(joined).resolve(strict=True)
    except FileNotFoundError:
        raise error(f"{source}: names {what} {name!r}, which does not exist in {root}") from None
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP:
            raise error(f"{source}: {what} {name!r} must be a file; got a symlink loop") from None
        raise _os_error(joined, what, exc, error) from None
    if real != real_root and real_root not in real.parents:
        raise error(f"{source}: {what} {name!r} must stay inside {root}; it resolves (through a symlink) to {real}")
    check_regular(joined, what, error)
    return joined


def contained(root: str | os.PathLike, path: str | os.PathLike, what: str, error: type[Exception] = ValueError) -> Path:
    """A file found by listing ``root`` (a glob): the same checks as :func:`inside` on its name."""
    return inside(root, Path(path).name, root, what, error)
