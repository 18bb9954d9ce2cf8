"""Argument checks shared by the ``w8a8`` commands: every argument is checked before any work starts.

A bad argument is a :class:`UsageError`; :func:`w8a8cli.main.main` prints it as one line,
``w8a8 <cmd>: error: --flag: expected …, got …``, and exits 2 (no traceback). Numbers are checked while
parsing (the ``type=`` callables below: argparse reports them through the same one-line error);
paths, files and arguments that depend on each other are checked by each command's ``check(args)``
at the start of its ``run``.

* numbers: :func:`integer` / :func:`real` — finite, within ``[low, high]`` (``open_low``: ``> low``);
* output folders (:func:`out_dir`): a directory or creatable, not a file, writable (probed with a
  temporary file, so the check also holds for root and read-only file systems);
* output files (:func:`out_file`): not a directory or a special file, its folder writable;
* input files (:func:`in_file`): exist, a regular file (never a FIFO: reading one blocks), readable;
* worker counts (:func:`workers`): ``0 .. os.cpu_count()`` unless forced.
"""

from __future__ import annotations

import argparse
import math
import os
import stat
import tempfile
from pathlib import Path


class UsageError(ValueError):
    """A bad command-line argument: ``flag`` (``--timeout``, ``CKPT``), what was expected, what came."""

    def __init__(self, flag: str, expected: str, got: object):
        self.flag, self.expected, self.got = flag, expected, got
        super().__init__(f"{flag}: expected {expected}, got {got}")

    @classmethod
    def relay(cls, flag: str, message: str) -> "UsageError":
        """An error whose message already says what was expected and what came (a library's ValueError)."""
        err = cls(flag, "", "")
        err.args = (f"{flag}: {message}",)
        return err


def _bound_text(kind: str, low, high, open_low: bool) -> str:
    noun = "an integer" if kind == "int" else "a finite number"
    if low is not None and high is not None and not open_low:
        return f"{noun} in {low}..{high}"
    parts = []
    if low is not None:
        parts.append(f"{'>' if open_low else '>='} {low}")
    if high is not None:
        parts.append(f"<= {high}")
    return f"{noun} {' and '.join(parts)}".strip()


def check_number(value, flag: str, *, kind: str = "float", low=None, high=None, open_low: bool = False):
    """``value`` (int or float) if finite and within the bounds, else :class:`UsageError`."""
    expected = _bound_text(kind, low, high, open_low)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind == "int" and not isinstance(value, int)):
        raise UsageError(flag, expected, repr(value))
    if not math.isfinite(value) or (low is not None and (value <= low if open_low else value < low)) \
            or (high is not None and value > high):
        raise UsageError(flag, expected, repr(value))
    return value


def _number_type(kind: str, low, high, open_low: bool):
    expected = _bound_text(kind, low, high, open_low)

    def parse(text: str):
        try:
            value = int(text) if kind == "int" else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        try:
            return check_number(value, "", kind=kind, low=low, high=high, open_low=open_low)
        except UsageError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None

    parse.__name__ = kind  # argparse names the type in its own messages
    return parse


def integer(low: int | None = None, high: int | None = None):
    """An argparse ``type=``: an integer within ``[low, high]`` (either may be None: unbounded)."""
    return _number_type("int", low, high, False)


def real(low: float | None = None, high: float | None = None, *, open_low: bool = False):
    """An argparse ``type=``: a finite float within ``[low, high]`` (``open_low``: strictly above low)."""
    return _number_type("float", low, high, open_low)


def workers(n: int, flag: str = "--workers", *, force: bool = False) -> int:
    """A worker count: ``0 .. os.cpu_count()`` (more processes than cores only with ``force``)."""
    cores = os.cpu_count() or 1
    return check_number(n, flag, kind="int", low=0, high=None if force else cores)


def _existing_ancestor(p: Path) -> Path:
    p = Path(os.path.abspath(p))
    while not os.path.lexists(p):
        p = p.parent
    return p


def _probe_writable(folder: Path, flag: str, shown: str) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=".w8a8-write-probe-", dir=folder)
    except OSError as exc:
        raise UsageError(flag, "a writable location", f"{shown!r} ({folder}: {exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(name)


def out_dir(path: str, flag: str = "--out") -> Path:
    """An output folder: an existing directory or one that can be created, and writable. Creates nothing."""
    p = Path(path)
    if os.path.lexists(p) and not p.is_dir():
        raise UsageError(flag, "a directory (existing or to be created)", f"{path!r}, which is not a directory")
    base = _existing_ancestor(p)
    if not base.is_dir():
        raise UsageError(flag, "a directory (existing or to be created)", f"{path!r}: {base} is not a directory")
    _probe_writable(base, flag, path)
    return p


def out_file(path: str, flag: str) -> Path:
    """An output file: not a directory nor a special file; its folder exists or can be created, writable."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(flag, "a file path", f"{path!r}, which is a directory")
    if os.path.lexists(p):
        mode = os.stat(p).st_mode if p.exists() else 0
        if not stat.S_ISREG(mode):
            raise UsageError(flag, "a regular file path", f"{path!r}, which is not a regular file")
    base = _existing_ancestor(p.parent)
    if not base.is_dir():
        raise UsageError(flag, "a file in a directory", f"{path!r}: {base} is not a directory")
    _probe_writable(base, flag, path)
    return p


def in_file(path: str, flag: str, what: str = "an existing file") -> Path:
    """An input file: exists, a regular file (a FIFO or device would block or never end), readable."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except OSError as exc:
        raise UsageError(flag, what, f"{path!r} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise UsageError(flag, what, f"{path!r}, which is not a regular file")
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise UsageError(flag, what, f"{path!r} ({exc.strerror or exc})") from None
    return p


def in_dir(path: str, flag: str, what: str = "an existing directory") -> Path:
    """An input folder: exists and is a directory."""
    p = Path(path)
    if not p.is_dir():
        raise UsageError(flag, what, f"{path!r}" + (", which is not a directory" if p.exists() else " (no such folder)"))
    return p


def tolerance_table(path: str | None, flag: str = "--tolerances"):
    """The tolerance table at ``path`` read and validated (:meth:`ToleranceTable.load`), or None for None."""
    if path is None:
        return None
    from conformance.tolerances import ToleranceTable

    in_file(path, flag, "an existing TOML tolerance table")
    try:
        return ToleranceTable.load(path)
    except (ValueError, OSError) as exc:
        raise UsageError.relay(flag, str(exc).removeprefix("tolerance table ")) from None


def choice_list(values, known, flag: str, what: str) -> None:
    """Every item of ``values`` (may be None) is one of ``known``; else name the first stranger."""
    for v in values or []:
        if v not in known:
            raise UsageError(flag, f"{what} ({', '.join(sorted(known)[:12])}{', ...' if len(known) > 12 else ''})",
                             repr(v))


def no_match(pattern: str, names, flag: str = "--layers") -> UsageError:
    """The error for a glob that matched no name: it names the pattern and a few names it could match."""
    names = list(names)
    few = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return UsageError(flag, f"a pattern matching some module (e.g. {few or 'none: the checkpoint has none'})",
                      f"{pattern!r}, which matches nothing")
