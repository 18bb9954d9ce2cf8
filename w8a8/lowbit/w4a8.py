"""W4A8 on Ascend: ``npu_quant_matmul`` with int4 weights, and the ``W4A8_DYNAMIC`` Linear path.

``npu_quant_matmul`` takes int4 operands packed 8 per int32 word, LSB first, signed (op-plugin
``test_npu_dynamic_quant.py::convert_int4_to_int8``; ops-nn ``aclnnQuantMatmulV4.md``; torch_npu docs and meta
registration; CANN ``aclnnQuantMatmulV5``):

* **A4W4** — x1 int32 ``[..., M, K/8]``, x2 int32 ``[K, N/8]`` (packed along N) or ``[K/8, N]`` (the
  transposed view of a ``[N, K/8]`` weight packed along K). The math is exactly int8
  ``quant_matmul`` on the unpacked codes, with the int4 rules: no ``offset``; without
  ``pertoken_scale`` the output must be float16 (scale int64 / fp32, bias int32); with it, bf16 or
  fp16 as for int8 (scale fp32 / bf16).
* **A8W4** (the int8-activation, int4-weight path, "K-G" / "K-C" quant modes) — x1 int8 ``[M, K]``,
  x2 int32 ``[K, N/8]``, ``scale`` int64/uint64 (packed by ``trans_quant_param``) of shape
  ``[K/256, N]`` (per group of 256 along K, what torch_npu's meta accepts) or ``(N,)`` / ``(1,)``
  (per channel; in the aclnn table, rejected by torch_npu 2.x's meta), ``pertoken_scale`` float32
  ``(M, 1)`` or ``(M,)``, ``offset`` float32 ``(N,)`` (aclnn ``yOffset``, required), no bias, output
  float16 / bfloat16.

The A8W4 ``offset`` is not an output offset. CANN documents it as an offline auxiliary that
**must equal** ``8 * sum_k w[k, n] * s[k // G, n]`` (:func:`a8w4_y_offset`) and writes the result
as ``((x1 @ (x2 * s)) + yOffset) * x1Scale``. The kernel (``..._a8w4_msd``) splits each int8
activation into two 4-bit halves, the low one stored as an offset-8 int4, and the offset term
restores the ``8 * sum w s`` those halves lose; with the documented offset the result is the plain
product. The golden therefore computes (the decomposition is inferred, **not confirmed**)::

    s[g, n] = FP19 value of the packed scale (decode_quant_param)
    v[m, n] = fp32( sum_g s[g, n] * acc_g[m, n] )          acc_g = exact int32 x1[:, g] @ w[g, :]
                                                             (float64 sum, rounded once to fp32)
    y[m, n] = cast( (v + (offset[n] - a8w4_y_offset[n])) * pertoken[m] )   fp32, RNE cast

so an offset equal to :func:`a8w4_y_offset` adds exactly 0 and any other offset shows up as the
error term the kernel would add. The fp32 order of the device's per-group accumulation is not
documented; the golden sums in float64 (exact while the group scales of a column span less than
about 2^20: each product has at most 11 + 22 significant bits) and rounds once.

Routing for the lead: ``w8a8.quant_matmul`` should delegate to :func:`quant_matmul_int4` whenever
``x1.dtype == int32`` or ``x2.dtype == int32`` (same arguments, same ``numerics``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..dynamic_quant import dynamic_quant
from ..int4 import pack_int4, unpack_int4
from ..intgemm import int_matmul
from ..numerics import ASCEND, Numerics
from ..quant_matmul import quant_matmul_args, quant_matmul_stages
from ..registry import golden_op
from ..rounding import to_float
from ..trans_quant_param import decode_quant_param, trans_quant_param

__all__ = ["quant_matmul_int4", "quant_matmul_int4_stages", "a8w4_y_offset", "w4a8_dynamic_linear",
           "w4a8_dynamic_linear_stages"]

_OP = "quant_matmul"
A8W4_GROUP = 256
"""The K group of the A8W4 per-group ("K-G") scale: fixed by the device."""
A8W4_K_LIMIT = 29576
"""A8W4 K-G: K must be a multiple of 256 and below this (aclnnQuantMatmulV5 constraints)."""


@dataclass(frozen=True, eq=False)
class QuantMatmulInt4Args:
    """The checked arguments of :func:`quant_matmul_int4` (:func:`quant_matmul_int4_args`): the
    caller's arrays (views at most), the route and its geometry."""

    mode: str
    """``"a4w4"`` (int32 x1) or ``"a8w4"`` (int8 x1)."""
    x1: np.ndarray
    """A4W4: int32 ``[..., M, K/8]``; A8W4: int8 ``[M, K]``."""
    x2: np.ndarray
    """int32 ``[K, N/8]`` or (A4W4) ``[K/8, N]``."""
    x2_layout: str
    """``"kn8"`` (``[K, N/8]``, packed along N) or ``"k8n"`` (``[K/8, N]``, packed along K; A4W4 only)."""
    k: int
    """K of the unpacked codes."""
    n: int
    """N of the unpacked codes."""
    out: np.dtype
    """float16 or bfloat16."""
    scale: np.ndarray | None = None
    """A4W4: as :func:`w8a8.quant_matmul.quant_matmul_args` normalizes it (1-D); A8W4: int64 / uint64
    ``[K/256, N]`` or ``(N,)`` / ``(1,)``."""
    group: int = 0
    """A8W4: the K group of the scale (256, or K for a per-channel scale); 0 for A4W4."""
    pertoken_scale: np.ndarray | None = None
    """float32: A4W4 ``(M,)`` or None; A8W4 ``(M,)`` / ``(M, 1)``."""
    offset: np.ndarray | None = None
    """A8W4: float32 ``(N,)``, the ``yOffset`` auxiliary; None for A4W4."""
    bias: np.ndarray | None = None
    """A4W4: as :func:`w8a8.quant_matmul.quant_matmul_args` normalizes it (``(N,)``), or None; A8W4: None."""


def quant_matmul_int4_args(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None,
                           numerics: Numerics = ASCEND) -> QuantMatmulInt4Args:
    """The argument checks of :func:`quant_matmul_int4`, in its order (public: the backends run them
    before their own arithmetic). A4W4 continues with :func:`w8a8.quant_matmul`'s checks on the
    unpacked codes, run here on stand-ins of their shapes. Returns :class:`QuantMatmulInt4Args`."""
    x1 = _check.array(_OP, "x1", x1, dtypes=(_dt.int32, _dt.int8), min_ndim=2, max_ndim=6)
    x2 = _check.array(_OP, "x2", x2, dtypes=(_dt.int32,), ndim=2)
    if output_dtype is None:
        _check.fail(_OP, "output_dtype", "float16 or bfloat16 for int4 operands (the default int8 output "
                    "is not allowed)", "None")
    out = _dt.resolve(output_dtype, arg="output_dtype", op=_OP)
    if x1.dtype == _dt.int32:
        p = _check_a4w4(x1, x2, offset, pertoken_scale, out)
        q = quant_matmul_args(_check.stand_in(np.int8, x1.shape[:-1] + (p.k,)), _check.stand_in(np.int8, (p.k, p.n)),
                              scale, pertoken_scale=pertoken_scale, bias=bias, output_dtype=out, numerics=numerics)
        return replace(p, scale=q.scale, pertoken_scale=q.pertoken_scale, bias=q.bias)
    return _check_a8w4(x1, x2, scale, offset, pertoken_scale, bias, out, numerics)


@golden_op("lowbit", check=quant_matmul_int4_args, mirrors="torch_npu.npu_quant_matmul")
def quant_matmul_int4(x1: np.ndarray, x2: np.ndarray, scale: np.ndarray, *, offset: np.ndarray | None = None,
                      pertoken_scale: np.ndarray | None = None, bias: np.ndarray | None = None,
                      output_dtype=None, numerics: Numerics = ASCEND) -> np.ndarray:
    """``npu_quant_matmul`` with int4 operands (A4W4, A8W4), mirroring the torch_npu op.

    Parameters
    ----------
    x1 : int32 ``[..., M, K/8]`` (A4W4: int4 activations, 8 per word, LSB first), or int8
        ``[M, K]`` (A8W4).
    x2 : int32 ``[K, N/8]`` (packed along N), or for A4W4 also ``[K/8, N]`` (packed along K; the
        shape against x1's K tells which).
    scale : A4W4: as :func:`w8a8.quant_matmul` (int64 / uint64 / float32 ``(N,)`` / ``(1,)``;
        float32 / bfloat16 with pertoken_scale). A8W4: int64 / uint64 ``[K/256, N]`` or ``(N,)`` /
        ``(1,)``.
    offset : A4W4: must be None. A8W4: float32 ``(N,)``, the ``yOffset`` auxiliary (module
        docstring; :func:`a8w4_y_offset`).
    pertoken_scale : float32; A4W4 ``(M,)``; A8W4 ``(M, 1)`` or ``(M,)`` (required).
    bias : A4W4: as int8 quant_matmul. A8W4: must be None.
    output_dtype : A4W4: ``"float16"`` without pertoken_scale; ``"bfloat16"`` / ``"float16"`` with
        it. A8W4: ``"float16"`` or ``"bfloat16"``. The default None (= int8) is refused.
    numerics : A4W4: as quant_matmul; A8W4: ``nan_policy``.

    Returns ``[..., M, N]`` (A4W4) / ``[M, N]`` (A8W4) of ``output_dtype``. Formulas: module
    docstring (A8W4) and :func:`w8a8.quant_matmul` (A4W4, on the unpacked codes).

    Errors: TypeError for dtypes; ValueError for shapes, a forbidden or missing argument, K limits;
    OverflowError where an int32 accumulator overflows.
    """
    return quant_matmul_int4_stages(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias,
                                    output_dtype=output_dtype, numerics=numerics)["y"]


def quant_matmul_int4_stages(x1: np.ndarray, x2: np.ndarray, scale: np.ndarray, *, offset: np.ndarray | None = None,
                             pertoken_scale: np.ndarray | None = None, bias: np.ndarray | None = None,
                             output_dtype=None, numerics: Numerics = ASCEND) -> dict[str, np.ndarray]:
    """:func:`quant_matmul_int4` with its stages: ``x1_codes`` / ``x2_codes`` (int8, unpacked,
    ``x2_codes`` as ``[K, N]``), ``acc`` (A4W4: int32 ``[..., M, N]``; A8W4: the per-group int32
    accumulators ``[G, M, N]``), ``scale`` (the fp32 scale used) and ``y``."""
    p = quant_matmul_int4_args(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias,
                               output_dtype=output_dtype, numerics=numerics)
    if p.mode == "a4w4":
        return _a4w4(p, scale, pertoken_scale, bias, numerics)
    return _a8w4(p)


def _check_a4w4(x1, x2, offset, pertoken_scale, out) -> QuantMatmulInt4Args:
    k = x1.shape[-1] * 8
    if x2.shape[0] == k:
        layout, n = "kn8", x2.shape[1] * 8
    elif x2.shape[0] * 8 == k:
        layout, n = "k8n", x2.shape[1]
    else:
        _check.fail(_OP, "x2", f"int32 of shape [K, N/8] or [K/8, N] with K = {k} (8 * x1's last dim)",
                    _check.describe(x2))
    if offset is not None:
        _check.fail(_OP, "offset", "None for int4 x1 (offset exists only with int8 x1)", _check.describe(offset))
    if pertoken_scale is None and out != _dt.float16:
        _check.fail(_OP, "output_dtype", "float16 for int4 x1 without pertoken_scale", repr(out.name), TypeError)
    if out not in (_dt.float16, _dt.bfloat16):
        _check.fail(_OP, "output_dtype", "float16 or bfloat16 for int4 x1", repr(out.name), TypeError)
    return QuantMatmulInt4Args("a4w4", x1, x2, layout, k, n, out)


def _check_a8w4(x1, x2, scale, offset, pertoken_scale, bias, out, numerics) -> QuantMatmulInt4Args:
    if x1.ndim != 2:
        _check.fail(_OP, "x1", "2-D [M, K] for int8 x1 with int4 (int32) x2", _check.describe(x1))
    m, k = x1.shape
    if x2.shape[0] != k:
        _check.fail(_OP, "x2", f"int32 [K={k}, N/8] (packed along N) for int8 x1", _check.describe(x2))
    n = x2.shape[1] * 8
    if out not in (_dt.float16, _dt.bfloat16):
        _check.fail(_OP, "output_dtype", "float16 or bfloat16 for int8 x1 with int4 x2", repr(out.name), TypeError)
    if bias is not None:
        _check.fail(_OP, "bias", "None for int8 x1 with int4 x2 (fold it into the output)", _check.describe(bias))
    s = _check.array(_OP, "scale", scale, dtypes=(_dt.int64, _dt.uint64), min_ndim=1, max_ndim=2)
    if s.ndim == 2:
        if k % A8W4_GROUP or not 0 < k < A8W4_K_LIMIT:
            _check.fail(_OP, "x1", f"K a multiple of {A8W4_GROUP} below {A8W4_K_LIMIT} for a per-group scale",
                        _check.describe(x1))
        _check.shape(_OP, "scale", s, [(k // A8W4_GROUP, n)], f"of shape (K/256, N) = ({k // A8W4_GROUP}, {n})")
        group = A8W4_GROUP
    else:
        if s.shape[0] not in (1, n):
            _check.fail(_OP, "scale", f"of shape ({n},) or (1,) (per channel), or (K/256, N) (per group)",
                        _check.describe(s))
        group = k
    pt = _check.array(_OP, "pertoken_scale", pertoken_scale, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2) \
        if pertoken_scale is not None else None
    if pt is None or tuple(pt.shape) not in ((m,), (m, 1)):
        _check.fail(_OP, "pertoken_scale", f"float32 of shape ({m}, 1) or ({m},) (required with int4 x2)",
                    "None" if pt is None else _check.describe(pt))
    off = _check.optional(_OP, "offset", offset, dtypes=(_dt.float32,), ndim=1)
    if off is None or off.shape != (n,):
        _check.fail(_OP, "offset", f"float32 of shape ({n},): the yOffset auxiliary 8 * sum_k w * s "
                    "(a8w4_y_offset)", "None" if off is None else _check.describe(off))
    if numerics.nan_policy == "raise":
        _check.finite(_OP, "pertoken_scale", pt)
        _check.finite(_OP, "offset", off)
    return QuantMatmulInt4Args("a8w4", x1, x2, "kn8", k, n, out, s, group, pt, off)


def _a4w4(p: QuantMatmulInt4Args, scale, pertoken_scale, bias, numerics):
    a = unpack_int4(p.x1)
    b = unpack_int4(p.x2) if p.x2_layout == "kn8" else np.ascontiguousarray(unpack_int4(np.ascontiguousarray(p.x2.T)).T)
    st = quant_matmul_stages(a, b, scale, pertoken_scale=pertoken_scale, bias=bias, output_dtype=p.out,
                             numerics=numerics)
    return {"x1_codes": a, "x2_codes": b, **st}


def _a8w4(p: QuantMatmulInt4Args):
    x1, s, group, pt, off, out = p.x1, p.scale, p.group, p.pertoken_scale, p.offset, p.out
    m, k = x1.shape
    n = p.n
    w = unpack_int4(p.x2)
    sf = decode_quant_param(s)[0].reshape(-1 if s.ndim == 2 else 1, s.shape[-1])
    groups = max(k // group, 1) if k else 0
    acc = np.stack([int_matmul(x1[:, g * group:(g + 1) * group], w[g * group:(g + 1) * group], op=_OP)
                    for g in range(groups)]) if groups else np.zeros((0, m, n), np.int32)
    sg = np.broadcast_to(sf, (groups, n)).astype(np.float64)
    v = np.einsum("gmn,gn->mn", acc.astype(np.float64), sg).astype(np.float32) if groups \
        else np.zeros((m, n), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        corr = (off - _y_offset(w, sf, group)).astype(np.float32)
        y = (v + corr) * pt.reshape(m, 1)
    return {"x1_codes": x1, "x2_codes": w, "acc": acc, "scale": sf, "y": to_float(y.astype(np.float32), out)}


def _y_offset(w: np.ndarray, sf: np.ndarray, group: int) -> np.ndarray:
    """``8 * sum_k w[k, n] * s[k // group, n]``: exact in float64, rounded once to fp32."""
    k, n = w.shape
    if k == 0:
        return np.zeros(n, np.float32)
    sums = w.astype(np.float64).reshape(k // group, group, n).sum(axis=1)  # exact integers
    return (8.0 * (sums * np.broadcast_to(sf, (k // group, n))).sum(axis=0)).astype(np.float32)


def a8w4_y_offset(weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The A8W4 ``offset`` (aclnn ``yOffset``) a kernel needs: ``8 * sum_k w[k, n] * s[k // G, n]``.

    Parameters
    ----------
    weight : the ``[K, N]`` int4 weight: int8 codes in [-8, 7], or int32 ``[K, N/8]`` packed along N.
    scale : the scale :func:`quant_matmul_int4` gets: int64 / uint64 (decoded to FP19) or float32;
        ``[K/G, N]`` (per group, G = K / rows) or ``(N,)`` / ``(1,)`` (per channel).

    Returns float32 ``(N,)``: the sum is exact (float64 over integer group sums), then rounded
    once to fp32. vllm-ascend computes the same quantity as ``8 * (w * s).sum(0)`` in fp32 torch
    (its ``scale_bias``), which can differ in the last bits.
    """
    op = "a8w4_y_offset"
    weight = _check.array(op, "weight", weight, dtypes=(_dt.int8, _dt.int32), ndim=2)
    w = unpack_int4(weight) if weight.dtype == _dt.int32 else weight
    if w.size and (w.min() < -8 or w.max() > 7):
        _check.fail(op, "weight", "int4 codes in [-8, 7]", f"values in [{int(w.min())}, {int(w.max())}]")
    k, n = w.shape
    s = _check.array(op, "scale", scale, dtypes=(_dt.int64, _dt.uint64, _dt.float32), min_ndim=1, max_ndim=2)
    sf = decode_quant_param(s)[0] if s.dtype != _dt.float32 else s
    if s.ndim == 2:
        if s.shape[1] != n or s.shape[0] == 0 or k % s.shape[0]:
            _check.fail(op, "scale", f"of shape (K/G, {n}) with K/G dividing K = {k}", _check.describe(s))
        return _y_offset(w, sf.astype(np.float32), k // s.shape[0])
    if s.shape[0] not in (1, n):
        _check.fail(op, "scale", f"of shape ({n},) or (1,)", _check.describe(s))
    return _y_offset(w, sf.astype(np.float32).reshape(1, -1), max(k, 1))


def w4a8_dynamic_linear_stages(x: np.ndarray, weight: np.ndarray, weight_scale: np.ndarray, *,
                               bias: np.ndarray | None = None, numerics: Numerics = ASCEND) -> dict[str, np.ndarray]:
    """:func:`w4a8_dynamic_linear` with its intermediates: ``x_q``, ``x_scale``, ``weight_packed``
    (int32 ``[K, N/8]``), ``scale`` (int64), ``y_offset``, ``acc`` and ``y``."""
    a = w4a8_dynamic_linear_args(x, weight, weight_scale, bias=bias, numerics=numerics)
    x, weight, s32, b = a.x, a.weight, a.weight_scale_f32, a.bias
    n, k = weight.shape
    w_kn = np.ascontiguousarray(weight.T)
    packed = pack_int4(w_kn)
    scale = trans_quant_param(s32)
    y_off = a8w4_y_offset(w_kn, scale)
    x2 = x.reshape(-1, k)
    x_q, x_scale = dynamic_quant(x2, numerics=numerics)
    st = quant_matmul_int4_stages(x_q, packed, scale, offset=y_off, pertoken_scale=x_scale.reshape(-1, 1),
                                  output_dtype=x.dtype, numerics=numerics)
    y = st["y"]
    if b is not None:
        b = b.reshape(n).astype(x.dtype)
        y = to_float((y.astype(np.float32) + b.astype(np.float32)).astype(np.float32), x.dtype)
    return {"x_q": x_q, "x_scale": x_scale, "weight_packed": packed, "scale": scale, "y_offset": y_off,
            "acc": st["acc"], "y": y.reshape(x.shape[:-1] + (n,))}


@dataclass(frozen=True, eq=False)
class W4a8DynamicLinearArgs:
    """The checked arguments of :func:`w4a8_dynamic_linear` (:func:`w4a8_dynamic_linear_args`)."""

    x: np.ndarray
    """bfloat16 / float16 ``[..., K]`` (as given)."""
    weight: np.ndarray
    """int8 ``[N, K]`` holding int4 codes in [-8, 7] (as given)."""
    weight_scale_f32: np.ndarray
    """The fp32 scale the path packs (a new array): ``[N]`` (per channel) or ``[K/256, N]`` (per group)."""
    bias: np.ndarray | None
    """float ``[N]`` or ``[1, N]`` (as given), or None."""


def w4a8_dynamic_linear_args(x, weight, weight_scale, *, bias=None,
                             numerics: Numerics = ASCEND) -> W4a8DynamicLinearArgs:
    """The argument checks of :func:`w4a8_dynamic_linear` (public: the backends run them before their
    own arithmetic), with the fp32 scale the path packs.

    The checks of the ops the path calls run here too, in the path's order, on stand-ins of the
    right shapes and dtypes (no data): ``pack_int4``'s N % 8, ``dynamic_quant``'s finite x,
    ``quant_matmul_int4``'s per-group K limit; then the bias. Only the offset's finiteness (an
    ``8 * sum w * s`` beyond the fp32 range) is data-dependent; it is checked where it is computed.
    """
    op = "w4a8_dynamic_linear"
    x = _check.array(op, "x", x, dtypes=(_dt.bfloat16, _dt.float16), min_ndim=1)
    weight = _check.array(op, "weight", weight, dtypes=(_dt.int8,), ndim=2)
    n, k = weight.shape
    if x.shape[-1] != k:
        _check.fail(op, "x", f"of last dimension K = {k} (weight is [N, K] = {weight.shape})", _check.describe(x))
    if weight.size and (weight.min() < -8 or weight.max() > 7):
        _check.fail(op, "weight", "int4 codes in [-8, 7] (one per int8)",
                    f"values in [{int(weight.min())}, {int(weight.max())}]")
    ws = _check.array(op, "weight_scale", weight_scale, dtypes=(_dt.float32, _dt.bfloat16), min_ndim=1, max_ndim=2)
    if ws.shape in ((n,), (n, 1)):
        s32 = ws.astype(np.float32).reshape(n)
    elif ws.ndim == 2 and k % A8W4_GROUP == 0 and ws.shape == (n, k // A8W4_GROUP) and ws.shape[1] > 1:
        s32 = np.ascontiguousarray(ws.astype(np.float32).T)
    else:
        _check.fail(op, "weight_scale", f"per channel [{n}] / [{n}, 1], or per group of 256 [{n}, K/256]",
                    _check.describe(ws))
    _check.finite(op, "weight_scale", ws, ieee_escape=False)
    if n % 8:
        pack_int4(np.broadcast_to(np.int8(0), (k, n)))  # pack_int4's own error for the [K, N] weight
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    if numerics.nan_policy == "raise":
        _check.finite(op, "x", x)
    stand_in = _check.stand_in
    quant_matmul_int4_args(stand_in(np.int8, (m, k)), stand_in(np.int32, (k, n // 8)), stand_in(np.int64, s32.shape),
                           offset=stand_in(np.float32, (n,)), pertoken_scale=stand_in(np.float32, (m, 1)),
                           output_dtype=x.dtype, numerics=numerics)
    b = None
    if bias is not None:
        b = _check.array(op, "bias", bias, dtypes=(_dt.float32, _dt.bfloat16, _dt.float16))
        if b.shape not in ((n,), (1, n)):
            _check.fail(op, "bias", f"of shape [{n}]", _check.describe(b))
    return W4a8DynamicLinearArgs(x=x, weight=weight, weight_scale_f32=s32, bias=b)


@golden_op("lowbit", check=w4a8_dynamic_linear_args)
def w4a8_dynamic_linear(x: np.ndarray, weight: np.ndarray, weight_scale: np.ndarray, *,
                        bias: np.ndarray | None = None, numerics: Numerics = ASCEND) -> np.ndarray:
    """The Ascend ``W4A8_DYNAMIC`` Linear: per-token dynamic int8 activations, int4 weights.

    Parameters
    ----------
    x : bfloat16 or float16 ``[..., K]``.
    weight : int8 ``[N, K]`` holding int4 codes in [-8, 7], one per byte (the LLM-Compressor
        layout; unpack a msModelSlim ``[N/2, K]`` checkpoint with
        :func:`unpack_int4_msmodelslim` first).
    weight_scale : float32 / bfloat16: per channel ``[N]`` / ``[N, 1]``, or per group of 256 along
        K ``[N, K/256]`` (the older msModelSlim per-group form, channel x group scale already
        multiplied).
    bias : optional float ``[N]``, added after the matmul in x's dtype.
    numerics : passed to ``dynamic_quant`` and the matmul.

    Steps::

        load:    W = weight.T -> int32 [K, N/8] (convert_weight_to_int4pack: LSB first, along N)
                 S = trans_quant_param(fp32 weight_scale as [N] or [K/256, N])  (FP19, truncated)
                 O = a8w4_y_offset(W, S)                                        (8 * sum w * s)
        forward: x_q, s_tok = dynamic_quant(x.reshape(-1, K))
                 y = quant_matmul_int4(x_q, W, S, offset=O, pertoken_scale=s_tok[:, None],
                                       output_dtype=x.dtype)
                   = cast( fp32(sum_g S[g, n] * acc_g[m, n]) * s_tok[m] )
                 y = cast(fp32(y) + fp32(bias))                                 (if bias)

    The CANN docs prescribe ``TransQuantParamV2`` (FP19 truncation) for the A8W4 scale;
    vllm-ascend's MoE path instead rounds the scale to fp16 and stores the raw fp32 bits, which
    FP19 keeps exactly — the two differ by the fp16 rounding of the scale (<= 2^-11 relative).

    Returns ``[..., N]`` of x's dtype.
    """
    return w4a8_dynamic_linear_stages(x, weight, weight_scale, bias=bias, numerics=numerics)["y"]
