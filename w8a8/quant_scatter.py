"""``npu_quant_scatter``: quantize ``updates`` to int8 and write them into a copy of ``input`` at the
segments ``indices`` names (the KV-cache write of a quantized cache).

Sources, in the order they rank: the vendor documentation of ``torch_npu.npu_quant_scatter`` and of
``aclnnInplaceQuantScatter`` (hicann/ops-nn ``index/quant_update_scatter/README.md``: shapes, dtype
table, axis rules, "out-of-range indices are not checked", "overlapping segments give run-dependent
results"), and the vendor test reference ``index/quant_update_scatter/tests/assets/golden.py``
(the arithmetic: ``fp32(updates) / fp32(scales) + fp32(zero_points)``, round half to even, clip to
[-128, 127]). Not confirmed: ops-nn holds only the Ascend 950 (arch35) kernel of QuantUpdateScatter,
not the A2/A3 one, so the A2/A3 kernel's division (a true division, as the reference, or a multiply by
a reciprocal) and its behaviour beyond the int8 range are the reference's, not read from a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _check
from . import dtypes as _dt
from .registry import golden_op
from .rounding import to_int

__all__ = ["quant_scatter"]

_COMBOS = {np.dtype(_dt.bfloat16): (np.dtype(_dt.bfloat16), np.dtype(_dt.bfloat16)),
           np.dtype(np.float16): (np.dtype(np.float32), np.dtype(np.int32))}
"""updates dtype -> (quant_scales dtype, quant_zero_points dtype): the A2/A3 rows of the vendor's dtype table."""


@dataclass(frozen=True, eq=False)
class QuantScatterArgs:
    """The checked arguments of :func:`quant_scatter` (:func:`quant_scatter_args`)."""

    input: np.ndarray
    """int8, 3-D to 8-D, last dim a multiple of 32 (32-byte aligned) (as given)."""
    indices: np.ndarray
    """int32 / int64 ``[B]`` (the start along ``axis`` of batch row ``b``) or ``[B, 2]`` (the row of
    ``input``, then the start along ``axis``) (as given)."""
    updates: np.ndarray
    """float16 / bfloat16, ``input``'s rank, ``[B, ...]``; its ``axis`` size at most ``input``'s, every
    other dim (but the first) ``input``'s (as given)."""
    quant_scales: np.ndarray
    """bfloat16 (bf16 updates) / float32 (fp16 updates), ``updates.shape[-1]`` elements, non-zero (as given)."""
    quant_zero_points: np.ndarray | None
    """bfloat16 (bf16 updates) / int32 (fp16 updates), ``updates.shape[-1]`` elements, or None (as given)."""
    axis: int
    """The scatter axis, normalized to [1, ndim - 2]."""
    rows: np.ndarray
    """int64 ``[B]``: the row of ``input`` each batch row of ``updates`` is written to."""
    starts: np.ndarray
    """int64 ``[B]``: where along ``axis`` each batch row's segment starts."""


def quant_scatter_args(input, indices, updates, quant_scales, quant_zero_points=None, axis=0, quant_axis=1,
                       reduce="update") -> QuantScatterArgs:
    """The argument checks of :func:`quant_scatter`, in its order, with its errors (TypeError for a
    dtype or a non-integer axis, ValueError for everything else)."""
    op = "quant_scatter"
    x = _check.array(op, "input", input, dtypes=(np.int8,), min_ndim=3, max_ndim=8)
    nd = x.ndim
    idx = _check.array(op, "indices", indices, dtypes=(np.int32, np.int64), min_ndim=1, max_ndim=2)
    if idx.ndim == 2 and idx.shape[1] != 2:
        _check.fail(op, "indices", "[B] or [B, 2] (row, start)", _check.describe(idx))
    u = _check.array(op, "updates", updates, dtypes=tuple(_COMBOS), ndim=nd)
    if u.shape[0] != idx.shape[0]:
        _check.fail(op, "updates", f"of first dim indices.shape[0] = {idx.shape[0]}", _check.describe(u))
    axis = _check.integer(op, "axis", axis, minimum=-nd, maximum=nd - 1) % nd
    if axis in (0, nd - 1):
        _check.fail(op, "axis", f"neither the first nor the last dim of {nd}-D updates", str(axis))
    quant_axis = _check.integer(op, "quant_axis", quant_axis, minimum=-nd, maximum=nd - 1) % nd
    if quant_axis != nd - 1:
        _check.fail(op, "quant_axis", f"the last dim of {nd}-D updates (-1 or {nd - 1})", str(quant_axis))
    _check.choice(op, "reduce", reduce, ("update",))
    if idx.ndim == 1 and u.shape[0] > x.shape[0]:
        _check.fail(op, "updates", f"of first dim at most input.shape[0] = {x.shape[0]}", _check.describe(u))
    if u.shape[axis] > x.shape[axis]:
        _check.fail(op, "updates", f"of dim {axis} at most input's {x.shape[axis]}", _check.describe(u))
    if any(u.shape[d] != x.shape[d] for d in range(1, nd) if d != axis):
        _check.fail(op, "updates", f"of input's dims {x.shape[1:]} except dim {axis}", _check.describe(u))
    if x.shape[-1] % 32:
        _check.fail(op, "input", "of last dim a multiple of 32 (32-byte aligned int8 rows)", _check.describe(x))
    scale_dt, zp_dt = _COMBOS[u.dtype]
    n = u.shape[-1]
    s = _check.array(op, "quant_scales", quant_scales, dtypes=(scale_dt,), min_ndim=1, max_ndim=8)
    if s.size != n:
        _check.fail(op, "quant_scales", f"of {n} elements (updates.shape[-1])", _check.describe(s))
    zp = _check.optional(op, "quant_zero_points", quant_zero_points, dtypes=(zp_dt,), min_ndim=1, max_ndim=8)
    if zp is not None and zp.size != n:
        _check.fail(op, "quant_zero_points", f"of {n} elements (updates.shape[-1])", _check.describe(zp))
    wide = idx.astype(np.int64)
    rows = wide[:, 0] if idx.ndim == 2 else np.arange(idx.shape[0], dtype=np.int64)
    starts = wide[:, 1] if idx.ndim == 2 else wide
    last = x.shape[axis] - u.shape[axis]
    if idx.ndim == 2 and ((rows < 0) | (rows >= x.shape[0])).any():
        _check.fail(op, "indices", f"rows (column 0) in [0, {x.shape[0] - 1}] (the device does not check them)",
                    f"{int(rows[(rows < 0) | (rows >= x.shape[0])][0])}")
    if ((starts < 0) | (starts > last)).any():
        _check.fail(op, "indices", f"starts in [0, {last}] (input.shape[{axis}] - updates.shape[{axis}]; the device "
                    "does not check them)", f"{int(starts[(starts < 0) | (starts > last)][0])}")
    _no_overlap(op, rows, starts, int(u.shape[axis]))
    _check.finite(op, "updates", u, ieee_escape=False)
    _check.finite(op, "quant_scales", s, ieee_escape=False)
    if (s.astype(np.float32) == 0).any():
        _check.fail(op, "quant_scales", "non-zero (the op divides by it)",
                    f"0 at index {int(np.flatnonzero(s.astype(np.float32) == 0)[0])}")
    if zp is not None and zp.dtype != np.int32:
        _check.finite(op, "quant_zero_points", zp, ieee_escape=False)
    return QuantScatterArgs(input=x, indices=idx, updates=u, quant_scales=s, quant_zero_points=zp, axis=axis,
                            rows=rows, starts=starts)


def _no_overlap(op: str, rows: np.ndarray, starts: np.ndarray, length: int) -> None:
    """Two batch rows writing overlapping segments of one input row: the device's result then depends on the
    order its cores run in (vendor documentation), so the golden refuses the call."""
    if length == 0 or rows.size < 2:
        return
    order = np.lexsort((starts, rows))
    r, s = rows[order], starts[order]
    clash = (r[1:] == r[:-1]) & (s[1:] < s[:-1] + length)
    if clash.any():
        i = int(np.flatnonzero(clash)[0])
        _check.fail(op, "indices", "segments that do not overlap (overlapping writes are run-dependent on the "
                    "device)", f"row {int(r[i])}: starts {int(s[i])} and {int(s[i + 1])} with segments of {length}")


@golden_op("dense", check=quant_scatter_args, mirrors="torch_npu.npu_quant_scatter")
def quant_scatter(input: np.ndarray, indices: np.ndarray, updates: np.ndarray, quant_scales: np.ndarray,
                  quant_zero_points: np.ndarray | None = None, axis: int = 0, quant_axis: int = 1,
                  reduce: str = "update") -> np.ndarray:
    """``torch_npu.npu_quant_scatter``: ``input`` (unchanged) with the int8 codes of ``updates`` written at ``indices``.

    Parameters (torch_npu's names and defaults; the defaults ``axis=0``, ``quant_axis=1`` are refused by
    the documented rules below, so every caller passes ``axis=-2, quant_axis=-1`` or the like)
    ----------
    input : int8, 3-D to 8-D, last dim a multiple of 32.
    indices : int32 / int64. ``[B]``: batch row ``b`` of ``updates`` goes to row ``b`` of ``input``, starting at
        ``indices[b]`` along ``axis``. ``[B, 2]``: to row ``indices[b, 0]``, starting at ``indices[b, 1]``.
    updates : bfloat16 or float16, ``input``'s rank; first dim B (at most ``input.shape[0]`` for 1-D indices);
        its ``axis`` size U at most ``input``'s; every other dim ``input``'s.
    quant_scales : bfloat16 for bf16 updates, float32 for fp16 updates; ``updates.shape[-1]`` elements.
    quant_zero_points : optional; bfloat16 for bf16 updates, int32 for fp16 updates; same size.
    axis : the scatter axis, neither the first nor the last dim.  quant_axis : the last dim.  reduce : "update".

    Returns int8 of ``input``'s shape. In order of operations, per element of ``updates``
    (``s``, ``z``: the scale and zero point of its last-dim position)::

        v = fp32(updates) / fp32(s)          # a true fp32 division (the vendor reference)
        v = v + fp32(z)                      # when zero points are given (int32 z converted exactly, |z| < 2^24)
        code = int8(clip(rint(v), -128, 127))  # round half to even, saturating
        out[row_b, ..., start_b + k, ...] = code   for k < U along axis; every other element is input's

    Errors: TypeError for a dtype (input, indices, updates; the scale / zero-point dtype must be the
    updates' row of the vendor table) or a non-integer axis; ValueError for a rank, a shape rule, an axis
    or quant_axis rule, ``reduce``, an index out of range or overlapping segments (the device checks
    neither: the golden refuses what the device leaves undefined), NaN / Inf in updates, scales or bf16
    zero points, or a zero scale.
    """
    a = quant_scatter_args(input, indices, updates, quant_scales, quant_zero_points, axis, quant_axis, reduce)
    with np.errstate(over="ignore"):   # a quotient beyond fp32 is +-Inf, which saturates
        v = a.updates.astype(np.float32) / a.quant_scales.reshape(-1).astype(np.float32)
        if a.quant_zero_points is not None:
            v = v + a.quant_zero_points.reshape(-1).astype(np.float32)
    codes = to_int(v, np.int8)
    out = np.array(a.input, copy=True)
    length = a.updates.shape[a.axis]
    for b in range(a.updates.shape[0]):
        where = [slice(None)] * out.ndim
        where[0] = int(a.rows[b])
        where[a.axis] = slice(int(a.starts[b]), int(a.starts[b]) + length)
        out[tuple(where)] = codes[b]
    return out
