"""Helpers shared by the MoE ops: numerics checks, fp32 transcendental functions, group lists, row masks.

Transcendental functions (``exp``, ``log1p``) follow :attr:`Numerics.transcendental`:
``"float64"`` evaluates them in float64 and rounds the result to float32 once (correctly rounded
in all but ~2^-29 of cases, so two backends that do this agree bit for bit); ``"float32"`` uses
NumPy's float32 functions. Everything around them (the ``1 + e``, the division, the product) is
float32 arithmetic, as in the kernels. Device exp units are approximations: the difference is a
tolerance matter, not a bitwise one.
"""

from __future__ import annotations

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..numerics import Numerics

FLOATS = (_dt.float16, _dt.bfloat16, _dt.float32)
MAX_GROUPS = 1024


def check_numerics(op: str, numerics) -> Numerics:
    if not isinstance(numerics, Numerics):
        _check.fail(op, "numerics", "a w8a8.Numerics", _check.describe(numerics), TypeError)
    return numerics


def check_finite(op: str, arg: str, value: np.ndarray | None, numerics: Numerics) -> None:
    """NaN/Inf in a float input: refused under ``nan_policy="raise"`` (the device behaviour is unspecified)."""
    if value is not None and numerics.nan_policy == "raise" and _dt.is_float(value.dtype):
        _check.finite(op, arg, value)


def boolean(op: str, arg: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        _check.fail(op, arg, "a bool", _check.describe(value), TypeError)
    return bool(value)


def real(op: str, arg: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        _check.fail(op, arg, "a real number", _check.describe(value), TypeError)
    if not np.isfinite(float(value)):
        _check.fail(op, arg, "finite", repr(value))
    return float(value)


def _f64_then_f32(fn, x32: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return fn(np.asarray(x32, np.float64)).astype(np.float32)


def exp(x32: np.ndarray, numerics: Numerics) -> np.ndarray:
    """fp32 ``exp`` (overflow to +Inf is IEEE, no warning)."""
    if numerics.transcendental == "float64":
        return _f64_then_f32(np.exp, x32)
    with np.errstate(over="ignore", under="ignore"):
        return np.exp(np.asarray(x32, np.float32))


def log1p(x32: np.ndarray, numerics: Numerics) -> np.ndarray:
    if numerics.transcendental == "float64":
        return _f64_then_f32(np.log1p, x32)
    return np.log1p(np.asarray(x32, np.float32))


def silu(a32: np.ndarray, numerics: Numerics) -> np.ndarray:
    """``a / (1 + exp(-a))`` in fp32 (the SwiGlu kernel's order: exp, add, divide)."""
    e = exp(-a32, numerics)
    with np.errstate(over="ignore", invalid="ignore"):
        return a32 / (np.float32(1) + e)


def sigmoid(x32: np.ndarray, numerics: Numerics) -> np.ndarray:
    """``1 / (1 + exp(-x))`` in fp32."""
    e = exp(-x32, numerics)
    with np.errstate(over="ignore", divide="ignore"):
        return np.float32(1) / (np.float32(1) + e)


def sum_f32(x32: np.ndarray, axis: int = -1, keepdims: bool = True) -> np.ndarray:
    """Row sums of fp32 data: exact-ish float64 sum rounded once to fp32.

    Order-independent (the device sums in a tree of fp32 partials; the result differs from this
    one by a few ulp at most, a tolerance matter).
    """
    with np.errstate(over="ignore"):
        return np.sum(np.asarray(x32, np.float64), axis=axis, keepdims=keepdims).astype(np.float32)


def _check_total(op: str, arg: str, counts: np.ndarray, m: int) -> None:
    """Non-negative ``counts`` must sum to at most ``m`` rows, summed in Python integers: ``[2**62] * 4``
    wraps to 0 in int64 and would pass a cumsum-based check with negative segment ends."""
    total = sum(int(c) for c in counts.tolist())
    if total > m:
        _check.fail(op, arg, f"a row total <= the row count {m}", f"total {total}")


def group_segments(op: str, group_list, group_list_type: int, m: int, num_groups: int,
                   arg: str = "group_list") -> list[tuple[int, int, int]]:
    """``[(group, start_row, stop_row), ...]`` of a group list, in row order (empty groups included).

    The public validator of every group list of the MoE ops (``grouped_matmul``'s ``group_list``,
    ``dequant_swiglu_quant``'s ``group_index``): it checks the list (errors name ``op`` and ``arg``)
    and returns its segments; the row total is the largest ``stop_row`` (0 for no segment).

    ``group_list_type`` 0: cumulative row ends ``[G]`` (non-decreasing); 1: counts ``[G]``; 2: pairs
    ``[P, 2]`` = ``(group id, count)`` consumed in order. int64, ``G == num_groups`` for types 0 and 1,
    at most 1024 entries, and a total of at most ``m`` rows (rows past the total belong to no group).
    """
    gl = _check.array(op, arg, group_list, dtypes=(_dt.int64,))
    if group_list_type in (0, 1):
        if gl.ndim != 1 or gl.shape[0] != num_groups:
            _check.fail(op, arg, f"1-D of length {num_groups} (one entry per group) for group_list_type "
                        f"{group_list_type}", _check.describe(gl))
        if num_groups > MAX_GROUPS:
            _check.fail(op, arg, f"of at most {MAX_GROUPS} groups", _check.describe(gl))
        v = gl.astype(np.int64)
        if (v < 0).any():
            _check.fail(op, arg, "non-negative", f"{v.tolist()[:16]}")
        if group_list_type == 0:
            if (np.diff(v) < 0).any():
                _check.fail(op, arg, "non-decreasing cumulative row ends (group_list_type 0)", f"{v.tolist()[:16]}")
            ends = v
        else:
            _check_total(op, arg, v, m)   # in Python integers, before an int64 cumsum could wrap
            ends = np.cumsum(v)
        total = int(ends[-1]) if ends.size else 0
        if total > m:
            _check.fail(op, arg, f"a row total <= the row count {m}", f"total {total}")
        starts = np.concatenate([[0], ends[:-1]]) if ends.size else ends
        return [(g, int(s), int(e)) for g, (s, e) in enumerate(zip(starts, ends))]
    if gl.ndim != 2 or gl.shape[1] != 2:
        _check.fail(op, arg, "of shape [P, 2] = (group id, count) pairs for group_list_type 2", _check.describe(gl))
    if gl.shape[0] > MAX_GROUPS:
        _check.fail(op, arg, f"of at most {MAX_GROUPS} pairs", _check.describe(gl))
    ids, counts = gl[:, 0].astype(np.int64), gl[:, 1].astype(np.int64)
    if ((ids < 0) | (ids >= num_groups)).any():
        _check.fail(op, arg, f"group ids (column 0) in [0, {num_groups})", f"{ids.tolist()[:16]}")
    if (counts < 0).any():
        _check.fail(op, arg, "non-negative counts (column 1)", f"{counts.tolist()[:16]}")
    _check_total(op, arg, counts, m)   # in Python integers, before an int64 cumsum could wrap
    ends = np.cumsum(counts)
    total = int(ends[-1]) if ends.size else 0
    if total > m:
        _check.fail(op, arg, f"a row total <= the row count {m}", f"total {total}")
    starts = np.concatenate([[0], ends[:-1]]) if ends.size else ends
    return [(int(g), int(s), int(e)) for g, s, e in zip(ids, starts, ends)]


def valid_rows(group_list: np.ndarray, m: int, *, group_list_type: int = 0) -> np.ndarray:
    """Rows a grouped op writes: bool ``[m]``, True for rows ``< total of group_list``.

    The device leaves the rows past the group-list total unwritten (their contents are undefined:
    uninitialised memory, possibly Inf/NaN); the golden fills them with zeros. Conformance must
    compare only where this mask is True. Use it for :func:`grouped_matmul` (``group_list``,
    ``group_list_type``) and :func:`dequant_swiglu_quant` (``group_index``, counts:
    ``group_list_type=1``).
    """
    op = "valid_rows"
    m = _check.integer(op, "m", m, minimum=0)
    group_list_type = _check.choice(op, "group_list_type", group_list_type, (0, 1, 2))
    gl = _check.array(op, "group_list", group_list, dtypes=(_dt.int64,))
    groups = gl.shape[0] if gl.ndim >= 1 else 0
    if group_list_type == 2:
        groups = int(gl[:, 0].max()) + 1 if gl.ndim == 2 and gl.shape[0] else 1
    segs = group_segments(op, gl, group_list_type, m, groups)
    total = max((stop for _, _, stop in segs), default=0)
    mask = np.zeros(m, dtype=bool)
    mask[:total] = True
    return mask
