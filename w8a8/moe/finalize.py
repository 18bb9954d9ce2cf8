"""``npu_moe_finalize_routing``: combine the experts' rows back into tokens (op-plugin
``test_npu_moe_finalize_routing_v2.py``; ops-transformer ``moe/moe_finalize_routing_v2/``).

The V2 membase tiling picks one of seven templates from H, K, the dtype, the optional inputs and the
UB budget (ops-transformer ``moe_finalize_routing_v2_tiling_membase.cpp``, :mod:`w8a8.variants.moe`). They differ in
the arithmetic dtype (fp16 rows are combined in fp16, rounding after every add and multiply; bf16 rows in fp32) and in
what a dropped slot (index -1) contributes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from ..rounding import to_float
from ..variants import calls as _variants
from . import _common as C

__all__ = ["moe_finalize_routing"]


@dataclass(frozen=True)
class MoeFinalizeRoutingArgs:
    """The checked arguments of :func:`moe_finalize_routing` (see :func:`moe_finalize_routing_args`)."""

    rows: np.ndarray                 # the expanded rows as [R, H] (a [E, C, H] input flattened)
    skip1: np.ndarray | None         # [N, H]
    skip2: np.ndarray | None         # [N, H] (only with skip1)
    bias: np.ndarray | None          # [E, H]
    scales: np.ndarray | None        # [N, K]
    slots: np.ndarray                # int32 [N, K] view of expanded_src_to_dst_row: row of (token i, slot j), -1 dropped
    experts: np.ndarray | None       # int32 [N, K] (checked in [0, E) when bias is given)
    n: int                           # N, the tokens
    k: int                           # K, the slots per token
    h: int                           # H, the row width
    dtype: np.dtype                  # the rows' (and the output's) dtype
    drop_pad_mode: int               # 0..3: the index layout (column- or row-major) and whether -1 may occur
    expanded_permuted_rows: np.ndarray   # as given: [N*K, H], or [E, C, H] (drop/pad)
    expanded_src_to_dst_row: np.ndarray  # int32 [N*K], as given


def moe_finalize_routing_args(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                              export_for_source_row, *, drop_pad_mode: int = 0, k: int = 1,
                              numerics: Numerics = ASCEND) -> MoeFinalizeRoutingArgs:
    """The argument checks of :func:`moe_finalize_routing`, in its order, with its errors.

    Every implementation of the op (the golden, backends) calls this first; the index layout of
    ``drop_pad_mode`` is resolved into ``slots`` ``[N, K]``. TypeError for dtypes; ValueError for
    shapes, out-of-range or -1 indices where not allowed, missing companions, NaN/Inf under
    ``nan_policy="raise"``.
    """
    op = "moe_finalize_routing"
    C.check_numerics(op, numerics)
    drop_pad_mode = _check.choice(op, "drop_pad_mode", drop_pad_mode, (0, 1, 2, 3))
    rows = _check.array(op, "expanded_permuted_rows", expanded_permuted_rows, dtypes=C.FLOATS, min_ndim=2, max_ndim=3)
    dtype = rows.dtype
    if rows.ndim == 3 and drop_pad_mode in (0, 2):
        _check.fail(op, "expanded_permuted_rows", f"2-D [N*K, H] with drop_pad_mode={drop_pad_mode} (3-D [E, C, H] "
                    "is the drop/pad layout, modes 1 and 3)", _check.describe(rows))
    h = rows.shape[-1]
    flat_rows = rows.reshape(-1, h)
    idx = _check.array(op, "expanded_src_to_dst_row", expanded_src_to_dst_row, dtypes=(_dt.int32,), ndim=1)
    sc = _check.optional(op, "scales", scales, dtypes=(dtype, _dt.float32) if dtype == _dt.bfloat16 else (dtype,),
                         ndim=2)
    if sc is not None:
        n, kk = sc.shape
        if kk < 1:
            _check.fail(op, "scales", "of shape [N, K] with K >= 1", _check.describe(sc))
    else:
        kk = _check.integer(op, "k", k, minimum=1)
        if idx.shape[0] % kk:
            _check.fail(op, "k", f"a divisor of the index length {idx.shape[0]} (scales is None)", str(k))
        n = idx.shape[0] // kk
    if idx.shape[0] != n * kk:
        _check.fail(op, "expanded_src_to_dst_row", f"of shape [N*K] = [{n * kk}]", _check.describe(idx))
    if drop_pad_mode in (0, 2) and flat_rows.shape[0] != n * kk:
        _check.fail(op, "expanded_permuted_rows", f"of shape [N*K, H] = [{n * kk}, {h}]", _check.describe(rows))
    s1 = _check.optional(op, "skip1", skip1, dtypes=(dtype,), ndim=2)
    s2 = _check.optional(op, "skip2", skip2, dtypes=(dtype,), ndim=2)
    if s2 is not None and s1 is None:
        _check.fail(op, "skip1", "given when skip2 is (CANN: skip2 requires skip1)", "None")
    for arg, value in (("skip1", s1), ("skip2", s2)):
        if value is not None:
            _check.shape(op, arg, value, [(n, h)], f"of shape [N, H] = [{n}, {h}]")
    b = _check.optional(op, "bias", bias, dtypes=(dtype,), ndim=2)
    experts = _check.optional(op, "export_for_source_row", export_for_source_row, dtypes=(_dt.int32,), ndim=2)
    if b is not None:
        if b.shape[1] != h:
            _check.fail(op, "bias", f"of shape [E, H] with H = {h}", _check.describe(b))
        if experts is None:
            _check.fail(op, "export_for_source_row", "the [N, K] expert ids when bias is given", "None")
        _check.shape(op, "export_for_source_row", experts, [(n, kk)], f"of shape [N, K] = [{n}, {kk}]")
        if experts.size and (experts.min() < 0 or experts.max() >= b.shape[0]):
            _check.fail(op, "export_for_source_row", f"expert ids in [0, E = {b.shape[0]})",
                        f"values in [{experts.min()}, {experts.max()}]")
    lo = -1 if drop_pad_mode in (1, 3) else 0
    if idx.size and (idx.min() < lo or idx.max() >= flat_rows.shape[0]):
        why = " (-1 marks a dropped slot only in drop/pad modes 1 and 3)" if idx.min() == -1 else ""
        _check.fail(op, "expanded_src_to_dst_row", f"row indices in [{lo}, {flat_rows.shape[0]}){why}",
                    f"values in [{idx.min()}, {idx.max()}]")
    for arg, value in (("expanded_permuted_rows", rows), ("skip1", s1), ("skip2", s2), ("bias", b), ("scales", sc)):
        C.check_finite(op, arg, value, numerics)
    slots = idx.reshape(kk, n).T if drop_pad_mode in (0, 1) else idx.reshape(n, kk)
    return MoeFinalizeRoutingArgs(rows=flat_rows, skip1=s1, skip2=s2, bias=b, scales=sc, slots=slots,
                                  experts=experts, n=n, k=kk, h=h, dtype=dtype, drop_pad_mode=drop_pad_mode,
                                  expanded_permuted_rows=rows, expanded_src_to_dst_row=idx)


@golden_op("moe", check=moe_finalize_routing_args, mirrors="torch_npu.npu_moe_finalize_routing")
def moe_finalize_routing(expanded_permuted_rows: np.ndarray, skip1: np.ndarray | None, skip2: np.ndarray | None,
                         bias: np.ndarray | None, scales: np.ndarray | None, expanded_src_to_dst_row: np.ndarray,
                         export_for_source_row: np.ndarray | None, *, drop_pad_mode: int = 0, k: int = 1,
                         numerics: Numerics = ASCEND) -> np.ndarray:
    """Weighted sum of each token's expert rows, mirroring ``torch_npu.npu_moe_finalize_routing``.

    Parameters
    ----------
    expanded_permuted_rows : float16 / bfloat16 / float32. Modes 0/2: ``[N*K, H]``; modes 1/3
        (drop/pad): ``[E, C, H]`` (read as ``E*C`` rows), or ``[R, H]`` (SGLang passes its dropless
        rows with mode 3 under expert parallelism).
    skip1, skip2 : optional ``[N, H]`` of the rows' dtype, added to the output (shared-expert
        outputs, residuals). skip2 requires skip1 (CANN constraint).
    bias : optional ``[E, H]`` of the rows' dtype: per-expert bias added to each row; requires
        export_for_source_row.
    scales : optional ``[N, K]`` routing weights, the rows' dtype (float32 also with bfloat16 rows:
        the "mixed precision" mode). None: every weight is 1 and K is ``k``.
    expanded_src_to_dst_row : int32 ``[N*K]``: where (token i, slot j)'s row is.
        Modes 0/1: entry ``j*N + i`` (column-major: :func:`moe_init_routing` v1 layout);
        modes 2/3: entry ``i*K + j`` (row-major: :func:`moe_init_routing_v2` ``row_idx_type=0``).
        Modes 1/3 allow -1 (a dropped slot: a zero row, see below); modes 0/2 do not.
    export_for_source_row : int32 ``[N, K]`` expert of each slot (only read for ``bias``),
        in ``[0, E)``.
    drop_pad_mode : 0, 1, 2 or 3 (above).
    k : K when scales is None (``aclnnMoeFinalizeRoutingV4``); otherwise K comes from scales.
    numerics : fields used: ``nan_policy``; the template (:func:`w8a8.variants.select`) decides
        ``finalize_precision``, ``finalize_out_round`` and ``dropped_slot_bias``.

    Returns ``[N, H]`` of the rows' dtype.

    Formula, in this order (every template, ``moe_finalize_routing_v2*.h``)::

        out = skip1 + skip2                      # (skip1 alone, or nothing when absent)
        for j in 0 .. K-1:                       # slots in order
            r = rows[idx(i, j)] + bias[expert(i, j)]
            r = r * scales[i, j]
            out = out + r                        # the first term initialises out when no skip
        y = cast(out -> dtype)

    Arithmetic dtype (``finalize_precision``): bf16 rows are combined in fp32 and cast once with RINT
    (``"fp32"``: the ``Bf16*`` templates); fp16 rows in fp16, every add and multiply rounded to fp16
    and the scale an fp16 scalar (``"io_dtype"``: the ``Fp*`` templates with ``T = half``); fp32 rows
    in fp32. A dropped slot (-1, drop modes 1/3) is skipped and contributes 0 even with a bias
    (``dropped_slot_bias="skip"``: all-bias, load-H, big-K and cut-H-K2 templates, every bf16 one),
    except in the generic fp cut-H template, which zero-fills the row and still adds the bias: it
    contributes ``scale * bias[expert]`` (``"apply"``). The cut-H K=4 kernels' pair handling of
    dropped slots and missing skips is not modelled (:func:`w8a8.variants.select` says where).

    Errors: TypeError for dtypes; ValueError for shapes, out-of-range or -1 indices where not
    allowed, missing companions (skip2 without skip1, bias without export_for_source_row).
    """
    a = moe_finalize_routing_args(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                                  export_for_source_row, drop_pad_mode=drop_pad_mode, k=k, numerics=numerics)
    n = _variants.moe_finalize_routing(a, numerics).numerics(numerics)
    flat_rows, s1, s2, b, sc, experts, slot_idx = a.rows, a.skip1, a.skip2, a.bias, a.scales, a.experts, a.slots
    # The working dtype: every op is computed in fp32 and rounded to it. For fp16 operands the fp32 sum
    # or product rounded to fp16 is the correctly rounded fp16 result (a product of two fp16 values is
    # exact in fp32; a sum is exact unless the exponents differ by more than 12, and then the smaller
    # operand is below a quarter ulp of the larger, which both roundings return).
    half = n.finalize_precision == "io_dtype" and a.dtype == _dt.float16
    work = np.dtype(np.float16) if half else np.dtype(np.float32)

    def rnd(v):
        return v if work == np.float32 else v.astype(work).astype(np.float32)

    skip = n.dropped_slot_bias == "skip"
    out = None
    with np.errstate(over="ignore", invalid="ignore"):
        if s1 is not None:
            out = s1.astype(np.float32)
            if s2 is not None:
                out = rnd(out + s2.astype(np.float32))
        for j in range(a.k):
            col = slot_idx[:, j]
            dropped = col < 0
            r = flat_rows[np.maximum(col, 0)].astype(np.float32)
            r[dropped] = 0
            if b is not None:
                r = rnd(r + b[experts[:, j]].astype(np.float32))
            if sc is not None:
                r = rnd(r * sc[:, j:j + 1].astype(np.float32))
            if skip and dropped.any():
                r[dropped] = 0
                out = r if out is None else np.where(dropped[:, None], out, rnd(out + r))
            else:
                out = r if out is None else rnd(out + r)
    if out is None:
        out = np.zeros((a.n, a.h), np.float32)
    if a.dtype == _dt.bfloat16 and n.finalize_out_round == "half_away":
        return _bf16_half_away(out.astype(np.float32))
    return to_float(out.astype(np.float32), a.dtype)


def _bf16_half_away(x32: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 rounding half away from zero (``CAST_ROUND``: the V1 kernels' final cast).

    On the sign-magnitude bit pattern, adding half a bf16 ulp (0x8000) to the magnitude and truncating
    rounds ties away from zero; overflow carries into the exponent (to Inf). NaN is kept."""
    u = np.ascontiguousarray(x32, np.float32).view(np.uint32)
    r = ((u + np.uint32(0x8000)) & np.uint32(0xFFFF0000)) >> np.uint32(16)
    r = np.where(np.isnan(x32), (u >> np.uint32(16)) | np.uint32(0x40), r)
    return r.astype(np.uint16).view(_dt.bfloat16)
