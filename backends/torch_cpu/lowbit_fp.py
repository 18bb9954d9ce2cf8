"""The block-scaled float formats in torch: MXFP4 / MXFP8, NVFP4 (+ the 128x4 scale swizzle), FP8 block.

Each function reproduces the golden op of the same name (:mod:`w8a8.lowbit.mx`,
:mod:`~w8a8.lowbit.nvfp4`, :mod:`~w8a8.lowbit.fp8_block`) under :data:`w8a8.ASCEND`, on arguments
checked beforehand by the golden's ``<op>_args`` functions. Elements and scales are decoded by
table lookup and encoded exactly (:mod:`backends.torch_cpu.lowbit_codec`); every fp32 operation is
one torch op on fp32 tensors, in the golden's order, with the golden's constants (``fp32(1/6)``,
``fp32(1/t)``) computed by the same fp32 division.

The matmuls, and why they are bit-identical:

* ``mx_matmul`` / ``nvfp4_matmul``: both operands dequantized exactly in float64 (an element times
  a power of two, or an E2M1 value times an E4M3 scale), one float64 GEMM, rounded once to fp32
  (then ``* alpha`` for NVFP4). The products have at most 8 significant bits, so the float64 sum is
  exact — in any summation order, hence equal to the golden's — while a row's and a column's
  scales span less than about 2^40 (the scales of a real tensor span a few powers of two). Beyond
  that the BLAS orders of NumPy and torch may differ in the last float64 bit (an fp32 tie only).
* ``fp8_block_matmul``: per 128-K block ``P = fp32(sum a_q w_q)``, exact in float64 (E4M3 products
  are multiples of 2^-18 below 2^18, so 128 of them stay far below 2^53 units: any order is exact).
  All blocks come from one batched float64 GEMM (chunked to bound memory); the fp32 promotion
  ``acc = acc + (P * s_a) * s_w`` then runs block by block in ascending order from 0.0, as the
  golden's loop.
"""

from __future__ import annotations

import numpy as np
import torch

from w8a8.lowbit.minifloat import E2M1_MAX, E4M3_MAX, E4M3_TINY

from .arith import const, to_float
from .runtime import gemm_threads
from .lowbit_codec import (decode_e8m0, decode_elements, decode_fp4, decode_fp8, encode_e2m1, encode_fp8, pack_fp4,
                           shared_exponent)

_NVFP4_BLOCK = 16
_GEMM_CHUNK = 1 << 24  # float64 elements of one batched block GEMM result (128 MiB)


def _blocks(t: torch.Tensor, size: int) -> torch.Tensor:
    """``[..., K]`` viewed as ``[..., K / size, size]``."""
    return t.reshape(*t.shape[:-1], t.shape[-1] // size, size)


# -- MX ----------------------------------------------------------------------------------------------

def mx_quantize(x: torch.Tensor, name: str, block_size: int, scale_mode: str):
    """:func:`w8a8.mx_quantize`: ``(data, scale)``, data packed FP4 bytes (``"e2m1"``) or an fp8 tensor."""
    blocks = _blocks(x.to(torch.float32), block_size)
    amax = blocks.abs().amax(-1)  # NaN propagates (-> scale 255)
    scale = shared_exponent(amax, name, scale_mode)
    nan = scale == 255
    inv = decode_e8m0(torch.where(nan, 127, 254 - scale.to(torch.int64)))  # 2^(127 - b), exact
    scaled = (blocks * inv[..., None]).masked_fill_(nan[..., None], 0.0).reshape(x.shape)
    if name == "e2m1":
        return pack_fp4(encode_e2m1(scaled)), scale
    if name == "e5m2":  # backends.torch_common cannot convert a float8_e5m2 tensor: hand over its bytes
        return _e5m2_array(encode_fp8(scaled, name)), scale
    return encode_fp8(scaled, name), scale


def _e5m2_array(t: torch.Tensor):
    """A ``float8_e5m2`` tensor as the ml_dtypes NumPy array with its bytes (a view, no copy).

    ``backends.torch_common.from_torch`` reads ml_dtypes dtypes through an integer view only for NumPy
    kind ``'V'``, and ml_dtypes' ``float8_e5m2`` has kind ``'f'``: the generic path fails on it. The
    backend's ``from_device`` passes a NumPy array through unchanged.
    """
    from w8a8 import dtypes as _dt

    return t.contiguous().view(torch.uint8).numpy().view(_dt.float8_e5m2)


def mx_dequantize(data: torch.Tensor, scale: torch.Tensor, name: str, output_dtype: torch.dtype) -> torch.Tensor:
    """:func:`w8a8.mx_dequantize`: ``fp32(P) * 2^(b - 127)`` in fp32, RNE to ``output_dtype``."""
    p = decode_elements(data, name)
    if p.numel() == 0:
        return torch.zeros(p.shape, dtype=output_dtype)
    v = _blocks(p, p.shape[-1] // scale.shape[-1]) * decode_e8m0(scale)[..., None]
    return to_float(v.reshape(p.shape), output_dtype)


def mx_operand64(data: torch.Tensor, scale: torch.Tensor, name: str) -> torch.Tensor:
    """An MX operand decoded exactly to float64 (``P * 2^(b - 127)``); ``mx_matmul``'s weight side
    goes through this once, at load."""
    p = decode_elements(data, name)
    if p.numel() == 0:
        return p.to(torch.float64)
    x = decode_e8m0(scale).to(torch.float64)
    return (_blocks(p.to(torch.float64), p.shape[-1] // scale.shape[-1]) * x[..., None]).reshape(p.shape)


def mx_matmul(a_data, a_scale, b: torch.Tensor, a_name: str, output_dtype: torch.dtype) -> torch.Tensor:
    """:func:`w8a8.mx_matmul` on the decoded weight ``b = mx_operand64(b_data, b_scale)``:
    ``fp32(A^ @ B^T)`` with exact float64 operands and GEMM (module docstring)."""
    a = mx_operand64(a_data, a_scale, a_name)
    with gemm_threads():
        y = torch.matmul(a, b.mT)
    return to_float(y.to(torch.float32), output_dtype)


# -- NVFP4 -------------------------------------------------------------------------------------------

_SIXTH = float(np.float32(1) / np.float32(E2M1_MAX))  # the golden's fp32(1/6)


def nvfp4_quantize(x: torch.Tensor, kind: str, t: float):
    """:func:`w8a8.nvfp4_quantize` (``kind``: ``"per_tensor_scale"`` or ``"global_scale"``; ``t`` its fp32
    value): ``(data uint8 [..., K/2], block_scale float8_e4m3fn [..., K/16])``."""
    tt = const(t)
    blocks = _blocks(x.to(torch.float32), _NVFP4_BLOCK)
    amax = blocks.abs().amax(-1)
    if kind == "per_tensor_scale":
        s = torch.div(torch.div(amax, const(E2M1_MAX)), tt).clamp_(E4M3_TINY, E4M3_MAX)
        s8 = encode_fp8(s, "e4m3")
        total = tt * decode_fp8(s8)
        scaled = torch.div(blocks, total[..., None])
    else:
        s = (tt * (amax * const(_SIXTH))).clamp_(max=E4M3_MAX)
        s8 = encode_fp8(s, "e4m3")
        prod = decode_fp8(s8) * torch.div(const(1.0), tt)
        r = torch.where(prod == 0, 0.0, torch.div(const(1.0), prod))
        scaled = blocks * r[..., None]
    scaled = scaled.clamp_(-E2M1_MAX, E2M1_MAX).reshape(x.shape)
    return pack_fp4(encode_e2m1(scaled)), s8


def nvfp4_dequantize(data: torch.Tensor, block_scale: torch.Tensor, kind: str, t: float,
                     output_dtype: torch.dtype) -> torch.Tensor:
    """:func:`w8a8.nvfp4_dequantize`: ``q * (S * s_b)`` or ``q * (s_b / gs)`` in fp32, RNE to the output."""
    q = decode_fp4(data)
    s = decode_fp8(block_scale)
    tt = const(t)
    total = tt * s if kind == "per_tensor_scale" else torch.div(s, tt)
    v = _blocks(q, _NVFP4_BLOCK) * total[..., None]
    return to_float(v.reshape(q.shape), output_dtype)


def nvfp4_operand64(data: torch.Tensor, block_scale: torch.Tensor) -> torch.Tensor:
    """An NVFP4 operand decoded exactly to float64 (``q * s_b``); ``nvfp4_matmul``'s weight side goes
    through this once, at load."""
    q = decode_fp4(data)
    s = decode_fp8(block_scale).to(torch.float64)
    return (_blocks(q, _NVFP4_BLOCK) * s[..., None]).reshape(q.shape)


def nvfp4_matmul(a_data, a_block_scale, b: torch.Tensor, alpha: float, output_dtype: torch.dtype):
    """:func:`w8a8.nvfp4_matmul` on the decoded weight ``b = nvfp4_operand64(b_data, b_block_scale)``:
    ``cast(fp32(sum (q_a s_a)(q_b s_b)) * fp32(alpha))``."""
    a = nvfp4_operand64(a_data, a_block_scale)
    with gemm_threads():
        y = torch.matmul(a, b.mT)
    y = y.to(torch.float32) * const(alpha)
    return to_float(y, output_dtype)


def swizzle_block_scales(scale: torch.Tensor) -> torch.Tensor:
    """:func:`w8a8.swizzle_block_scales` on raw integers of the element width (bits move, values don't)."""
    *lead, m, s = scale.shape
    mp, sp = -(-m // 128) * 128, -(-s // 4) * 4
    padded = scale.new_zeros(*lead, mp, sp)
    padded[..., :m, :s] = scale
    tiles = padded.reshape(*lead, mp // 128, 4, 32, sp // 4, 4)
    nl = len(lead)
    perm = tuple(range(nl)) + tuple(nl + i for i in (0, 3, 2, 1, 4))
    return tiles.permute(perm).contiguous().reshape(*lead, mp, sp)


# -- FP8 block (DeepSeek-V3) -------------------------------------------------------------------------

def _tiles(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """``x [..., R, C]`` zero-padded to whole tiles and viewed as ``[..., R/rows, rows, C/cols, cols]``."""
    *lead, r, c = x.shape
    rb, cb = -(-r // rows), -(-c // cols)
    if (rb * rows, cb * cols) != (r, c):
        padded = x.new_zeros(*lead, rb * rows, cb * cols)
        padded[..., :r, :c] = x
        x = padded
    return x.reshape(*lead, rb, rows, cb, cols)


def _untile(t: torch.Tensor, r: int, c: int) -> torch.Tensor:
    *lead, rb, rows, cb, cols = t.shape
    return t.reshape(*lead, rb * rows, cb * cols)[..., :r, :c]


def _fp8_scale(amax: torch.Tensor, scale_fmt, eps: float) -> torch.Tensor:
    """fp32 block scale: ``max(amax, eps) / 448`` or ``2^ceil(log2(max(amax, eps) / 448))`` (``"ue8m0"``)."""
    a = amax.clamp(min=eps)
    if scale_fmt == "ue8m0":
        return decode_e8m0(shared_exponent(a, "e4m3", "rceil"))
    return torch.div(a, const(E4M3_MAX))


def _quantize_blocks(x: torch.Tensor, rows: int, cols: int, scale_fmt, eps: float):
    """The golden's ``_quantize_blocks``: fp32 ``x [..., R, C]`` -> ``(e4m3 codes, fp32 scales [.., R/rows, C/cols])``."""
    r, c = x.shape[-2:]
    tiles = _tiles(x, rows, cols)
    if tiles.numel():
        amax = torch.maximum(tiles.amax(dim=(-3, -1)), tiles.amin(dim=(-3, -1)).neg_()).abs_()  # max |x|, exact
    else:
        amax = tiles.new_zeros(*tiles.shape[:-3], tiles.shape[-2])
    s = _fp8_scale(amax, scale_fmt, eps)
    q = torch.div(tiles, s[..., :, None, :, None]).clamp_(-E4M3_MAX, E4M3_MAX)
    return encode_fp8(_untile(q, r, c), "e4m3"), s


def fp8_block_quantize(weight: torch.Tensor, bn: int, bk: int, scale_fmt, eps: float):
    """:func:`w8a8.fp8_block_quantize`: ``(weight_q float8_e4m3fn [..., N, K], scale fp32 [..., N/bn, K/bk])``."""
    return _quantize_blocks(weight.to(torch.float32), bn, bk, scale_fmt, eps)


def per_token_group_quant_fp8(x: torch.Tensor, g: int, scale_fmt, eps: float):
    """:func:`w8a8.per_token_group_quant_fp8`: ``(x_q [..., K], scale [..., ceil(K/G)])``."""
    xf = x.to(torch.float32).reshape(*x.shape[:-1], 1, x.shape[-1])
    q, s = _quantize_blocks(xf, 1, g, scale_fmt, eps)
    return q.reshape(x.shape), s.reshape(*x.shape[:-1], s.shape[-1])


def fp8_block_dequantize(weight_q: torch.Tensor, scale: torch.Tensor, bn: int, bk: int,
                         output_dtype: torch.dtype) -> torch.Tensor:
    """:func:`w8a8.fp8_block_dequantize`: ``fp32(W_q) * s[n // bn, k // bk]``, RNE to ``output_dtype``."""
    n, k = weight_q.shape[-2:]
    tiles = _tiles(decode_fp8(weight_q), bn, bk)
    v = _untile(tiles * scale[..., :, None, :, None], n, k)
    return to_float(v.contiguous(), output_dtype)


def fp8_block_weight64(weight_q: torch.Tensor, bs: int, kb: int) -> torch.Tensor:
    """The load step of ``fp8_block_matmul``: the E4M3 weight ``[N, K]`` decoded to float64, zero-padded
    to ``kb * bs`` columns, as contiguous K blocks ``[KB, bs, N]`` (the batched GEMM's right side)."""
    n, k = weight_q.shape
    w = decode_fp8(weight_q).to(torch.float64)
    if kb * bs != k:
        w = torch.nn.functional.pad(w, (0, kb * bs - k))
    return w.reshape(n, kb, bs).permute(1, 2, 0).contiguous()


def fp8_block_matmul(a_q: torch.Tensor, a_scale: torch.Tensor, w_blocks: torch.Tensor, weight_scale: torch.Tensor,
                     bs: int, output_dtype: torch.dtype) -> torch.Tensor:
    """:func:`w8a8.fp8_block_matmul` on the loaded weight ``w_blocks = fp8_block_weight64(weight_q)``:
    per-128-K exact partial sums, fp32 promotion in the golden's order."""
    m = a_q.shape[0]
    kb, _, n = w_blocks.shape
    acc = torch.zeros(m, n, dtype=torch.float32)
    if kb == 0 or m == 0 or n == 0:
        return to_float(acc, output_dtype, may_nan=False)
    a = decode_fp8(a_q).to(torch.float64)
    if kb * bs != a.shape[1]:
        a = torch.nn.functional.pad(a, (0, kb * bs - a.shape[1]))
    a_blocks = a.reshape(m, kb, bs).permute(1, 0, 2)  # [KB, M, bs]
    sw_rows = weight_scale.repeat_interleave(bs, dim=0)[:n]  # [N, KB]
    step = max(1, _GEMM_CHUNK // max(m * n, 1))
    for start in range(0, kb, step):
        with gemm_threads():
            p = torch.bmm(a_blocks[start:start + step], w_blocks[start:start + step]).to(torch.float32)
        for j in range(p.shape[0]):
            b = start + j
            acc = acc + (p[j] * a_scale[:, b:b + 1]) * sw_rows[None, :, b]
    return to_float(acc, output_dtype)


__all__ = ["mx_quantize", "mx_dequantize", "mx_operand64", "mx_matmul", "nvfp4_quantize", "nvfp4_dequantize",
           "nvfp4_operand64", "nvfp4_matmul", "swizzle_block_scales", "fp8_block_quantize", "per_token_group_quant_fp8",
           "fp8_block_dequantize", "fp8_block_weight64", "fp8_block_matmul"]
