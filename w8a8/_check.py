"""Argument checks shared by the golden ops.

Every failure names the op, the argument, what was expected and what came, so that a bad call fails
at the boundary with a readable message instead of deep inside NumPy (or, worse, silently). Dtype
mismatches raise ``TypeError``; everything else (rank, shape, values) raises ``ValueError``.
"""

from __future__ import annotations

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


def finite(op: str, arg: str, value: np.ndarray) -> None:
    """Raise ``ValueError`` naming the first NaN/Inf position of a float array."""
    as_f32 = value.astype(np.float32) if value.dtype.kind == "V" else value
    bad = ~np.isfinite(as_f32)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        kind = "NaN" if np.isnan(as_f32[pos]) else "Inf"
        fail(op, arg, "finite (this op's device behaviour on NaN/Inf is not specified, so the golden "
             "refuses them; pass numerics=Numerics(nan_policy='ieee') to compute through them)",
             f"{kind} at index {pos}")


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
