"""Argument checks shared by the golden ops.

Every failure names the op, the argument, what was expected and what came, so that a bad call fails
at the boundary with a readable message instead of deep inside NumPy (or, worse, silently). Dtype
mismatches raise ``TypeError``; everything else (rank, shape, values) raises ``ValueError``.

Beyond shapes and dtypes: the NaN policy (:func:`finite`, :func:`finite_under`,
:func:`nonzero_divisor`) and the allocation budget of argument-sized arrays (:func:`within_budget`,
:data:`BUDGET_ENV`), both checked before an op does any work.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

import numpy as np

from . import dtypes as _dt


def fail(op: str, arg: str, expected: str, got: str, exc: type[Exception] = ValueError):
    raise exc(f"{op}: argument '{arg}' must be {expected}; got {got}")


def describe(value) -> str:
    """Short description of a value for error messages."""
    if isinstance(value, np.ndarray):
        return f"{_dt.name(value.dtype)} array of shape {tuple(value.shape)}"
    mod = type(value).__module__
    if mod.startswith("torch"):
        return f"a torch tensor ({getattr(value, 'dtype', '?')}, shape {tuple(getattr(value, 'shape', ()))})"
    return f"{type(value).__name__} {value!r}"[:120]


def dtype_names(dtypes: Iterable) -> str:
    names = [_dt.name(d) for d in dtypes]
    return names[0] if len(names) == 1 else " or ".join([", ".join(names[:-1]), names[-1]])


def array(op: str, arg: str, value, *, dtypes: Iterable | None = None, ndim: int | None = None,
          min_ndim: int | None = None, max_ndim: int | None = None) -> np.ndarray:
    """Check that ``value`` is an ndarray of one of ``dtypes`` with an allowed rank; return it."""
    if not isinstance(value, np.ndarray):
        fail(op, arg, "a numpy.ndarray", describe(value), TypeError)
    if dtypes is not None:
        dtypes = tuple(np.dtype(d) for d in dtypes)
        if value.dtype not in dtypes:
            fail(op, arg, f"of dtype {dtype_names(dtypes)}", describe(value), TypeError)
    if ndim is not None and value.ndim != ndim:
        fail(op, arg, f"{ndim}-D", describe(value))
    if min_ndim is not None and value.ndim < min_ndim:
        low = f"{min_ndim}-D to {max_ndim}-D" if max_ndim is not None else f"at least {min_ndim}-D"
        fail(op, arg, low, describe(value))
    if max_ndim is not None and value.ndim > max_ndim:
        fail(op, arg, f"{min_ndim or 0}-D to {max_ndim}-D", describe(value))
    return value


def stand_in(dtype, shape) -> np.ndarray:
    """A read-only array of ``shape`` that holds no data (zero strides): the operand of a check that reads
    shapes and dtypes only, standing in for an intermediate that does not exist yet."""
    return np.broadcast_to(np.zeros((), dtype), tuple(shape))


def optional(op: str, arg: str, value, **kw) -> np.ndarray | None:
    return None if value is None else array(op, arg, value, **kw)


def shape(op: str, arg: str, value: np.ndarray, allowed: Iterable[tuple[int, ...]], what: str) -> None:
    """Require ``value.shape`` to be one of ``allowed``; ``what`` spells the rule for the message."""
    if tuple(value.shape) not in {tuple(s) for s in allowed}:
        fail(op, arg, what, describe(value))


def same_shape(op: str, arg: str, value: np.ndarray, other_arg: str, other: np.ndarray) -> None:
    """Require ``value`` to have the shape of the argument ``other_arg`` (an offset and its scale, ...)."""
    shape(op, arg, value, [other.shape], f"of {other_arg}'s shape {tuple(other.shape)}")


def finite(op: str, arg: str, value: np.ndarray, *, ieee_escape: bool = True) -> None:
    """Raise ``ValueError`` naming the first NaN/Inf position of a float array.

    ``ieee_escape``: the op takes ``numerics=`` and computes through NaN/Inf under
    ``nan_policy="ieee"`` (the message says so); False for an op that refuses them always."""
    as_f32 = value.astype(np.float32) if value.dtype.kind == "V" else value
    bad = ~np.isfinite(as_f32)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        kind = "NaN" if np.isnan(as_f32[pos]) else "Inf"
        escape = "; pass numerics=Numerics(nan_policy='ieee') to compute through them" if ieee_escape else ""
        fail(op, arg, f"finite (this op's device behaviour on NaN/Inf is not specified, so the golden "
             f"refuses them{escape})", f"{kind} at index {pos}")


def finite_under(op: str, numerics, named: Iterable[tuple[str, np.ndarray | None]]) -> None:
    """The NaN policy on several inputs: under ``numerics.nan_policy="raise"`` every float array of
    ``named`` (``(argument, value)`` pairs; None, integer arrays and non-arrays — whose type check
    comes later — are skipped) must be finite."""
    if numerics.nan_policy != "raise":
        return
    for arg, value in named:
        if isinstance(value, np.ndarray) and _dt.is_float(value.dtype):
            finite(op, arg, value)


def nonzero_divisor(op: str, arg: str, value: np.ndarray, numerics) -> None:
    """Under ``numerics.nan_policy="raise"``, a zero in a scale the op divides by is refused (it would
    make ``x / 0 = +-Inf`` codes that saturate, or ``0 / 0 = NaN``: a broken calibration, not a
    value the device behaviour is specified for). ValueError naming the first zero's index."""
    if numerics.nan_policy != "raise":
        return
    as_f32 = value.astype(np.float32)
    zero = as_f32 == 0
    if zero.any():
        pos = tuple(int(i) for i in np.argwhere(zero)[0])
        fail(op, arg, "non-zero (the op divides by it; pass numerics=Numerics(nan_policy='ieee') to compute "
             "x / 0 with IEEE semantics)", f"0 at index {pos}")


def integer(op: str, arg: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        fail(op, arg, "an integer", describe(value), TypeError)
    value = int(value)
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        lo = "-inf" if minimum is None else minimum
        hi = "inf" if maximum is None else maximum
        fail(op, arg, f"in [{lo}, {hi}]", str(value))
    return value


def choice(op: str, arg: str, value, allowed: Iterable):
    allowed = tuple(allowed)
    if value not in allowed:
        fail(op, arg, f"one of {allowed}", repr(value))
    return value


BUDGET_ENV = "W8A8_GOLDEN_MAX_BYTES"
"""The environment variable that sets the golden's allocation budget (bytes, an integer >= 1; ``4GiB`` /
``512MiB`` suffixes accepted)."""
DEFAULT_BUDGET = 4 << 30
"""The default allocation budget: 4 GiB per argument-sized allocation."""
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}


def allocation_budget(budget: int | None = None) -> int:
    """The allocation budget in bytes: ``budget`` if given, else :data:`BUDGET_ENV` if set, else
    :data:`DEFAULT_BUDGET`. ValueError naming the variable for a value that is not a positive size."""
    if budget is not None:
        return integer("allocation_budget", "budget", budget, minimum=1)
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return DEFAULT_BUDGET
    text = raw.lower().replace(" ", "")
    digits = text.rstrip("kmgtib")
    unit = text[len(digits):]
    if not digits.isdigit() or unit not in _UNITS or int(digits) * _UNITS[unit] < 1:
        raise ValueError(f"environment variable {BUDGET_ENV} must be a positive number of bytes (e.g. 4294967296 "
                         f"or 4GiB); got {raw!r}")
    return int(digits) * _UNITS[unit]


def _bytes_text(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n} bytes ({n / size:.3g} {unit})"
    return f"{n} bytes"


def within_budget(op: str, arg: str, shape: Iterable[int], itemsize: int, what: str,
                  budget: int | None = None) -> None:
    """Refuse, before allocating it, an array of ``shape`` x ``itemsize`` bytes whose size an argument
    decides (``arg``: a capacity, a block size, the shapes of a product) when it exceeds the allocation
    budget (:func:`allocation_budget`). ValueError naming the op, the argument, ``what`` is allocated, the
    bytes it would take and the budget. Python integers throughout: no overflow for absurd sizes."""
    nbytes = math.prod(int(d) for d in shape) * int(itemsize)
    limit = allocation_budget(budget)
    if nbytes > limit:
        fail(op, arg, f"small enough that {what} fits the golden's allocation budget of {_bytes_text(limit)} "
             f"(set {BUDGET_ENV} to raise it)", f"{tuple(int(d) for d in shape)} x {int(itemsize)} B = "
             f"{_bytes_text(nbytes)}")
