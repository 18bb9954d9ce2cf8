"""Typed reads of ``config.json`` values, each refused in one line naming the key, what was expected and
what came (a bool where an int belongs, a list, a 10 MB string, NaN, a negative epsilon...).

* :func:`integer`: an ``int`` (not a bool) in ``[lo, hi]``; ``hi`` defaults to :data:`MAX_INT` (2^31 - 1,
  far above any model dimension), so no count read from a config can ask for an unbounded allocation
  by itself (the shapes of the weights are checked separately, :mod:`modelrun.config_shapes`).
* :func:`number`: an ``int`` or ``float`` (not a bool), finite, ``> 0`` with ``positive`` or ``>= lo``.
* :func:`flag`: a JSON ``true`` / ``false`` (``"false"`` is not false).
* :func:`show`: a value as the error prints it (its type and at most 60 characters of its repr).
"""

from __future__ import annotations

import math

MAX_INT = 2 ** 31 - 1
_MISSING = object()


def show(value) -> str:
    """``value`` for an error message: its repr cut to 60 characters, with its type when not a plain number."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):          # a deeply nested list; an int too long for repr
        text = "<unprintable>"
    if len(text) > 60:
        text = text[:57] + "..."
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{type(value).__name__} {text}"
    return text


def _value(cfg: dict, key: str, default, what: str):
    value = cfg.get(key, default) if default is not _MISSING else cfg.get(key, _MISSING)
    if value is None or value is _MISSING:
        raise ValueError(f"config.json: {key!r} is required for this architecture (expected {what}); got none")
    return value


def integer(cfg: dict, key: str, *, lo: int = 0, hi: int = MAX_INT, default=_MISSING) -> int:
    what = f"an integer in [{lo}, {hi}]"
    value = _value(cfg, key, default, what)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        word = "a non-negative integer" if lo == 0 else "an integer"
        raise ValueError(f"config.json: {key!r} must be {word} in [{lo}, {hi}]; got {show(value)}")
    return value


def number(cfg: dict, key: str, *, positive: bool = False, lo: float | None = None, default=_MISSING) -> float:
    what = "a finite number" + (" > 0" if positive else f" >= {lo}" if lo is not None else "")
    value = _value(cfg, key, default, what)
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if ok:
        try:
            value = float(value)
        except OverflowError:                     # an int beyond float range
            ok = False
    if not ok or not math.isfinite(value) or (positive and value <= 0) or (lo is not None and value < lo):
        raise ValueError(f"config.json: {key!r} must be {what}; got {show(cfg.get(key, default))}")
    return value


def flag(cfg: dict, key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        typed = show(value) if not isinstance(value, (int, float)) else f"{type(value).__name__} {value!r}"
        raise ValueError(f"config.json: {key!r} must be true or false; got {typed}")
    return value
