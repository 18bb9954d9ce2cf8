"""The INT4 ops in torch: group-wise quantize / dequantize, W4A16 / W8A16, int4 packing, A4W4 / A8W4, W4A8.

Each function reproduces the golden op of the same name (:mod:`w8a8.lowbit.int4_group`,
:mod:`~w8a8.lowbit.weight_quant_batchmatmul`, :mod:`~w8a8.lowbit.packing`, :mod:`~w8a8.lowbit.w4a8`)
under :data:`w8a8.ASCEND`; the arguments were checked beforehand by the golden's own ``<op>_args``
functions (:mod:`backends.torch_cpu.lowbit_ops`). fp32 throughout, one torch op per golden step,
tensor / tensor divisions, no fused multiply-add.

Integer GEMMs are exact (:func:`backends.torch_cpu.gemm.int_matmul`, ``torch._int_mm``). The two
float64 sums of the golden are reproduced as follows:

* ``weight_quant_batchmatmul``: ``x @ w_hat`` as a float64 GEMM, rounded once to fp32. Every product
  of two fp16 / bf16 numbers is exact in float64; the sum is exact (and so equal to the golden's
  whatever the BLAS summation order) while the products of a row and column span fewer than about
  2^30 in magnitude — always for the bf16 / fp16 weights and activations of a real layer. Outside
  that, the two float64 BLAS orders (OpenBLAS in NumPy, MKL / oneDNN in torch) may differ in the last
  float64 bit, which changes the fp32 result only at an fp32 rounding tie.
* A8W4: ``sum_g acc_g * s_g`` in float64, summed over the groups in ascending order starting from
  0.0 — the golden's ``einsum`` order; each product (int32 x an 11-bit FP19 scale) is exact.
"""

from __future__ import annotations

import torch

from w8a8 import _check
from w8a8.lowbit.int4_group import check_scale_fits

from ..torch_common import numpy_dtype
from .arith import const, decode_quant_param, fp19, pack_int4, to_float, to_int, unpack_int4
from .gemm import int_matmul
from .arith import widen
from .qmatmul import quant_matmul as _dense_quant_matmul
from .quant import dynamic_quant
from .runtime import gemm_threads

_QMM = "quant_matmul"


# -- INT4 group-wise (W4A16 weights) -----------------------------------------------------------------

def int4_group_quantize(weight: torch.Tensor, g: int, groups: int, scheme: str, scale_dtype: torch.dtype):
    """:func:`w8a8.int4_group_quantize` with checked ``G`` / ``K // G``: ``(codes, scale, zero)``."""
    shape = weight.shape
    w = weight.to(torch.float32).reshape(*shape[:-1], groups, g)
    if scheme == "asym":
        lo = w.amin(-1).clamp_(max=0.0)  # min(min w, 0), max(max w, 0): the range includes 0
        hi = w.amax(-1).clamp_(min=0.0)
        empty = (lo == 0) & (hi == 0)
        lo = torch.where(empty, -1.0, lo)
        hi = torch.where(empty, 1.0, hi)
        s32 = torch.div(hi - lo, const(15.0))
    else:
        amax = w.abs().amax(-1)
        amax = torch.where(amax == 0, 1.0, amax)
        s32 = torch.div(amax, const(7.5 if scheme == "gptq_sym" else 7.0))
    scale = to_float(s32, scale_dtype, may_nan=False)
    sf = scale.to(torch.float32)
    if sf.numel() and not bool(torch.isfinite(sf).all()):
        check_scale_fits(sf.numpy(), numpy_dtype(scale_dtype))  # raises the golden's error
    t = torch.div(w, sf[..., None])
    if scheme == "asym":
        z = to_int(torch.div(lo.neg(), sf), 0, 15, torch.uint8)
        u = to_int(t.round_().add_(z.to(torch.float32)[..., None]), 0, 15, torch.uint8, inplace=True)
        return u.reshape(shape), scale, z
    return to_int(t, -8, 7, torch.int8, inplace=True).reshape(shape), scale, None


def int4_group_dequantize(codes: torch.Tensor, scale: torch.Tensor, zero, output_dtype: torch.dtype):
    """:func:`w8a8.int4_group_dequantize`: ``fp32(q) * fp32(s)`` or ``(fp32(u) - fp32(z)) * fp32(s)``."""
    k, groups = codes.shape[-1], scale.shape[-1]
    if k == 0 or groups == 0:
        return torch.zeros(codes.shape, dtype=output_dtype)
    lead = codes.shape[:-1]
    v = codes.to(torch.float32).reshape(*lead, groups, k // groups)
    if zero is not None:
        v.sub_(zero.to(torch.float32)[..., None])
    v.mul_(widen(scale)[..., None])  # the scale is not checked for NaN / Inf: NumPy's NaN bits
    return to_float(v.reshape(codes.shape), output_dtype)


# -- npu_weight_quant_batchmatmul ----------------------------------------------------------------------

def weight_codes(weight: torch.Tensor, layout: str) -> torch.Tensor:
    """The weight as int8 codes ``[K, N]``: int8 as is, int32 ``[K, N/8]`` or ``[K/8, N]`` unpacked."""
    if layout == "int8":
        return weight
    if layout == "int4_n":
        return unpack_int4(weight)
    return unpack_int4(weight.mT.contiguous()).mT


def _rows(v: torch.Tensor, group, k: int) -> torch.Tensor:
    """Row parameters ``[R, N or 1]`` as fp32, expanded to ``[K, N or 1]`` for a per-group form."""
    v = v.to(torch.float32)
    return v if group is None else v.repeat_interleave(group, dim=0)[:k]


def weight_quant_batchmatmul(x: torch.Tensor, w_hat: torch.Tensor, quant_scale, quant_offset, bias) -> torch.Tensor:
    """:func:`w8a8.weight_quant_batchmatmul` after the load step (:func:`antiquant_weight`, kept as float64).

    ``acc = fp32(x @ w_hat)`` (float64 GEMM, module docstring); ``acc += bias``; then RNE to x's dtype,
    or ``sat_int8(rint(acc * qs + qo))``.
    """
    with gemm_threads():
        acc = torch.matmul(widen(x).to(torch.float64), w_hat.to(torch.float64)).to(torch.float32)
    if bias is not None:
        acc = acc + bias
    if quant_scale is None:
        return to_float(acc, x.dtype)
    return to_int((acc * quant_scale).add_(quant_offset), -128, 127, torch.int8, inplace=True)


def antiquant_weight(weight, layout: str, scale, group, offset, packed: bool, dtype: torch.dtype, *,
                     precision: str = "fp32") -> torch.Tensor:
    """The load step of ``weight_quant_batchmatmul``: ``w_hat = cast_x_dtype((fp32(w) + fp32(o)) * fp32(s))``
    (``precision="fp32"``: the bf16 Custom kernel), or with the sum rounded to x's dtype before the
    multiply (``"x_dtype"``: the fp16 Custom kernel's half ``Adds`` then ``Muls``)."""
    w = weight_codes(weight, layout)
    k = w.shape[0]
    if packed:
        sf = decode_quant_param(scale)[0]
        of = None if offset is None else offset.to(torch.float32)
    else:
        sf = _rows(scale, group, k)
        of = None if offset is None else _rows(offset, group, k)
    v = w.to(torch.float32)
    if of is not None:
        v.add_(of)
        if precision == "x_dtype":
            v = to_float(v, dtype).to(torch.float32)
    v.mul_(sf)
    return to_float(v, dtype)


def quant_values(quant_scale, quant_offset):
    """fp32 ``(quant_scale, quant_offset)`` (an int64 scale decoded; a missing offset is 0), or Nones."""
    if quant_scale is None:
        return None, None
    if quant_scale.dtype == torch.int64:
        return decode_quant_param(quant_scale)
    return quant_scale, (torch.zeros(1, dtype=torch.float32) if quant_offset is None else quant_offset)


# -- int4 quant_matmul: A4W4 and A8W4 ----------------------------------------------------------------

def a4w4(x1: torch.Tensor, w_codes_kn: torch.Tensor, scale, pertoken_scale, bias, output_dtype) -> torch.Tensor:
    """A4W4: torch-cpu's int8 ``quant_matmul`` on the unpacked codes (the golden's definition)."""
    return _dense_quant_matmul(unpack_int4(x1), w_codes_kn, scale, pertoken_scale=pertoken_scale, bias=bias,
                               output_dtype=output_dtype)


def a8w4_group_scale(scale: torch.Tensor) -> torch.Tensor:
    """The fp32 FP19 value of an int64 / uint64 A8W4 scale, as ``[G or 1, N or 1]``."""
    sf = decode_quant_param(scale)[0]
    return sf.reshape(-1 if scale.ndim == 2 else 1, scale.shape[-1])


def y_offset(w: torch.Tensor, sf: torch.Tensor, group: int) -> torch.Tensor:
    """:func:`w8a8.lowbit.w4a8._y_offset`: ``8 * sum_k w[k, n] * s[k // group, n]`` as fp32 ``(N,)``.

    Integer group sums (exact in float64), times the FP19 scale (exact), summed over the groups in
    ascending order from 0.0 in float64, times 8 (exact), rounded once to fp32.
    """
    k, n = w.shape
    if k == 0:
        return torch.zeros(n, dtype=torch.float32)
    sums = w.to(torch.float64).reshape(k // group, group, n).sum(dim=1)  # exact integers
    sg = sf.to(torch.float64).expand(k // group, n)
    total = torch.zeros(n, dtype=torch.float64)
    for g in range(k // group):
        total = total + sums[g] * sg[g]
    return (total * 8.0).to(torch.float32)


def a8w4(x1: torch.Tensor, w: torch.Tensor, sf: torch.Tensor, group: int, y_off: torch.Tensor, offset: torch.Tensor,
         pertoken_scale: torch.Tensor, output_dtype: torch.dtype) -> torch.Tensor:
    """A8W4 after the load step (``w`` int8 codes ``[K, N]``, ``sf`` the FP19 scale, ``y_off`` its
    ``8 * sum w s``)::

        acc_g = x1[:, g] @ w[g, :]                       exact int32, per group of ``group`` along K
        v     = fp32( sum_g fp64(acc_g) * fp64(sf[g]) )  ascending g from 0.0 (the golden's einsum)
        y     = cast( (v + fp32(offset - y_off)) * pertoken )
    """
    m, k = x1.shape
    n = w.shape[1]
    groups = max(k // group, 1) if k else 0
    sg = sf.to(torch.float64).expand(groups, n)
    v64 = torch.zeros(m, n, dtype=torch.float64)
    for g in range(groups):
        acc = int_matmul(x1[:, g * group:(g + 1) * group], w[g * group:(g + 1) * group], op=_QMM)
        v64 = v64 + acc.to(torch.float64) * sg[g]
    corr = torch.sub(offset, y_off)
    y = (v64.to(torch.float32) + corr).mul_(pertoken_scale.reshape(m, 1))
    return to_float(y, output_dtype)


def check_y_offset(y_off: torch.Tensor) -> None:
    """The golden's ``quant_matmul`` error for an offset ``8 * sum w s`` that overflowed fp32."""
    if y_off.numel() and not bool(torch.isfinite(y_off).all()):
        _check.finite(_QMM, "offset", y_off.numpy())


# -- the W4A8_DYNAMIC Linear ----------------------------------------------------------------------------

class W4A8Layer:
    """The load step of :func:`w8a8.w4a8_dynamic_linear`: the int4 codes as ``[K, N]`` int8 (what the
    exact GEMM reads; ``convert_weight_to_int4pack`` would pack and the kernel unpack them), the FP19
    scale (``trans_quant_param`` then decode = ``fp19`` truncation), the K group and ``8 * sum w s``."""

    def __init__(self, weight: torch.Tensor, s32: torch.Tensor, bias, dtype: torch.dtype):
        self.n, self.k = weight.shape
        self.w = weight.mT.contiguous()
        per_group = s32.ndim == 2
        self.sf = fp19(s32, 0).reshape(-1 if per_group else 1, self.n)
        self.group = 256 if per_group else self.k
        self.y_off = y_offset(self.w, self.sf, max(self.group, 1))
        check_y_offset(self.y_off)
        self.bias = None if bias is None else to_float(widen(bias).reshape(self.n), dtype)


def w4a8_dynamic_linear(x: torch.Tensor, layer: W4A8Layer) -> torch.Tensor:
    """:func:`w8a8.w4a8_dynamic_linear`: dynamic int8 rows, A8W4 with the documented offset, bias in x's dtype."""
    x2 = x.reshape(-1, layer.k)
    x_q, x_scale = dynamic_quant(x2)
    y = a8w4(x_q, layer.w, layer.sf, layer.group, layer.y_off, layer.y_off, x_scale, x.dtype)
    if layer.bias is not None:
        y = to_float(y.to(torch.float32) + widen(layer.bias), x.dtype)
    return y.reshape(*x.shape[:-1], layer.n)


def convert_weight_to_int4pack(weight: torch.Tensor) -> torch.Tensor:
    """:func:`w8a8.convert_weight_to_int4pack`: int32 codes in [-8, 7] -> int32 words, LSB first."""
    return pack_int4(weight.to(torch.int8))
