"""The golden's rounding, casts and bit packing, in torch on the CPU, bit for bit.

Every function here reproduces one helper of the golden (:mod:`w8a8.rounding`, :mod:`w8a8.int4`,
:mod:`w8a8.trans_quant_param`) under the default :data:`w8a8.ASCEND` numerics. The traps of torch
that would break bit-exactness, and how they are avoided (each one pinned by
``tests/backends/test_torch_cpu_arith.py``):

* ``number / tensor`` is ``tensor.reciprocal() * number`` in torch (``Tensor.__rtruediv__``), which
  is not the IEEE quotient: every division here is tensor / tensor (:func:`const`).
* A 0-dim tensor does not take part in type promotion: ``bf16_tensor * fp32_scalar_tensor`` is a
  bf16 multiply. Operands are widened to fp32 explicitly first.
* Mixed-dtype elementwise ops (int32 * fp32, bf16 * fp32) take torch's slow scalar-cast loop (10-60x
  slower than same-dtype ops here); widening first is both exact and fast.
* ``fp32 -> bf16`` in torch writes NaN as ``0xFFFF`` (vectorized) or ``0x7FC0`` (scalar tail), the
  golden (ml_dtypes) ``sign | 0x7FC0``: :func:`to_float` rewrites NaN lanes where a NaN may exist.
  fp32 -> fp16 agrees for every quiet NaN (arithmetic only makes quiet NaNs; signalling NaN
  payloads differ, but NaN inputs are refused under ``nan_policy="raise"``).
* ``torch.round`` is round-half-to-even (``nearbyint``), like ``np.rint``; ``clamp`` keeps NaN,
  which :func:`to_int` then writes as the golden's NaN code.
"""

from __future__ import annotations

import numpy as np
import torch

from w8a8 import dtypes as _dt

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
_BF16_QNAN = 0x7FC0
_FLAG46 = 1 << 46


def const(value: float, dtype=torch.float32) -> torch.Tensor:
    """A 1-element tensor (it takes part in type promotion and keeps divisions tensor / tensor)."""
    return torch.tensor([value], dtype=dtype)


def f32(t: torch.Tensor) -> torch.Tensor:
    """Exact widening to a *new* float32 tensor (safe to modify in place), with NumPy's NaN bits."""
    return widen(t) if t.dtype == torch.float16 else t.to(torch.float32, copy=True)


def widen(t: torch.Tensor) -> torch.Tensor:
    """float32 of a float tensor with NumPy's bits: an fp16 NaN keeps its payload shifted left by 13.

    torch's fp16 -> fp32 cast writes every NaN as ``0x7FFFFFFF`` in its scalar path and quiets
    signalling NaNs in its vector path; NumPy (and so the golden) shifts the payload unchanged. bf16
    and fp32 widen exactly in torch already. Only inputs that may hold NaN need this.
    """
    v = t.to(torch.float32)
    if t.dtype == torch.float16:
        nan = torch.isnan(v)
        if bool(nan.any()):
            h = torch.bitwise_and(t.view(torch.int16).to(torch.int64), 0xFFFF)
            bits = ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x3FF) << 13)
            v = torch.where(nan, bits.to(torch.int32).view(torch.float32), v)
    return v


def to_int(t: torch.Tensor, lo: int, hi: int, dtype: torch.dtype, *, nan_value: int = 0,
           inplace: bool = False) -> torch.Tensor:
    """:func:`w8a8.rounding.to_int` (half to even, saturate, NaN -> ``nan_value``) of a float tensor.

    The clamp runs in float64 for 32-bit outputs (2^31 - 1 is not a float32), as in the golden.
    With ``inplace`` the float tensor ``t`` is used as scratch.
    """
    r = t.round_() if inplace else torch.round(t)
    if torch.empty((), dtype=dtype).element_size() >= 4 and r.dtype != torch.float64:
        r = r.to(torch.float64)
    r.clamp_(lo, hi)  # NaN stays NaN
    r.nan_to_num_(nan=float(nan_value))
    return r.to(dtype)


def to_float(v32: torch.Tensor, dtype: torch.dtype, *, may_nan: bool = True) -> torch.Tensor:
    """:func:`w8a8.rounding.to_float`: round an fp32 tensor to bf16 / fp16 / fp32 (RNE), NaN bits as
    ml_dtypes / NumPy write them. ``may_nan=False`` promises there is no NaN (skips a pass)."""
    if v32.dtype != torch.float32:
        raise TypeError(f"to_float: argument 'v32' must be float32 (round from the fp32 result); got {v32.dtype}")
    if dtype == torch.float32:
        return v32
    out = v32.to(dtype)
    if dtype == torch.bfloat16 and may_nan:
        nan = torch.isnan(v32)
        if bool(nan.any()):
            sign = torch.signbit(v32[nan])
            bits = torch.where(sign, torch.tensor((0x8000 | _BF16_QNAN) - 0x10000, dtype=torch.int16),
                               torch.tensor(_BF16_QNAN, dtype=torch.int16))
            out.view(torch.int16)[nan] = bits
    return out


def any_nonfinite(*tensors) -> bool:
    """Whether a float tensor among ``tensors`` (None skipped) holds NaN or Inf."""
    return any(t is not None and t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all())
               for t in tensors)


def absmax(t: torch.Tensor) -> float:
    """``max |t|`` as a Python number (0 for an empty tensor); exact for integer tensors."""
    if t.numel() == 0:
        return 0
    lo, hi = t.min().item(), t.max().item()
    return max(abs(lo), abs(hi))


# -- int4 ------------------------------------------------------------------------------------------

def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """:func:`w8a8.int4.pack_int4`: int8 codes in [-8, 7] ``[..., 8n]`` -> int32 ``[..., n]``, LSB first.

    Element ``2i`` is the low nibble of byte ``i``, ``2i + 1`` the high nibble; four bytes make one
    little-endian int32 word, so element ``8j + k`` lands in bits ``[4k, 4k + 3]`` of word ``j``.
    """
    h = codes.shape[-1]
    if h == 0 or codes.numel() == 0:
        return torch.zeros(*codes.shape[:-1], h // 8, dtype=torch.int32)
    pairs = codes.reshape(*codes.shape[:-1], h // 2, 2)
    low = torch.bitwise_and(pairs[..., 0], 0xF)
    high = torch.bitwise_left_shift(pairs[..., 1], 4)  # int8 shift: the nibble's bits, sign dropped
    return torch.bitwise_or(low, high).contiguous().view(torch.int32)


def unpack_int4(words: torch.Tensor) -> torch.Tensor:
    """:func:`w8a8.int4.unpack_int4`: int32 ``[..., n]`` -> int8 codes ``[..., 8n]`` in [-8, 7]."""
    if words.numel() == 0:
        return torch.zeros(*words.shape[:-1], words.shape[-1] * 8, dtype=torch.int8)
    raw = words.contiguous().view(torch.int8)  # [..., 4n] little-endian bytes
    low = torch.bitwise_right_shift(torch.bitwise_left_shift(raw, 4), 4)  # arithmetic: sign-extends
    high = torch.bitwise_right_shift(raw, 4)
    return torch.stack((low, high), dim=-1).reshape(*words.shape[:-1], words.shape[-1] * 8)


# -- FP19 and the packed int64 quant parameter ------------------------------------------------------

def _u32(t32: torch.Tensor) -> torch.Tensor:
    """The fp32 bit patterns as non-negative int64 values in [0, 2^32)."""
    return torch.bitwise_and(t32.contiguous().view(torch.int32).to(torch.int64), 0xFFFFFFFF)


def _from_u32(u: torch.Tensor) -> torch.Tensor:
    """int64 values in [0, 2^32) -> the float32 with those bits."""
    signed = torch.where(u >= (1 << 31), u - (1 << 32), u)
    return signed.to(torch.int32).view(torch.float32)


def fp19(scale32: torch.Tensor, round_mode: int = 0) -> torch.Tensor:
    """:func:`w8a8.trans_quant_param.fp19`: FP19 value of fp32 scales, as float32.

    0 truncates (``bits & 0xFFFFE000``); 1 rounds to nearest even on mantissa bit 12 with sticky bits
    0..11, a zero exponent giving a signed zero and exponent 255 kept (truncated).
    """
    u = _u32(scale32)
    kept = torch.bitwise_and(u, 0xFFFFE000)
    if round_mode == 0:
        return _from_u32(kept)
    exp = torch.bitwise_and(torch.bitwise_right_shift(u, 23), 0xFF)
    low = torch.bitwise_and(u, 0x1FFF)
    lsb = torch.bitwise_and(torch.bitwise_right_shift(u, 13), 1)
    up = (low > 0x1000) | ((low == 0x1000) & (lsb == 1))
    rounded = kept + up.to(torch.int64) * 0x2000
    rounded = torch.where(exp == 0, torch.bitwise_and(u, 0x80000000), rounded)
    rounded = torch.where(exp == 0xFF, kept, rounded)
    return _from_u32(torch.bitwise_and(rounded, 0xFFFFFFFF))


def trans_quant_param(scale: torch.Tensor, offset: torch.Tensor | None = None, *, round_mode: int = 0) -> torch.Tensor:
    """:func:`w8a8.trans_quant_param`: ``fp19(scale) | 1 << 46 | (o9 & 0x1FF) << 37`` as int64."""
    lo = _u32(fp19(scale, round_mode))
    if offset is None:
        return torch.bitwise_or(lo, _FLAG46)
    lo, o = torch.broadcast_tensors(lo, offset)
    o9 = to_int(o.to(torch.float64), -256, 255, torch.int64)  # RINT, clip, NaN -> 0
    return torch.bitwise_or(torch.bitwise_or(lo, _FLAG46), torch.bitwise_left_shift(torch.bitwise_and(o9, 0x1FF), 37))


def decode_quant_param(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`w8a8.decode_quant_param`: int64 / uint64 -> ``(fp32(low32 & 0xFFFFE000), sign-extended
    9-bit offset as fp32)``."""
    p = packed.view(torch.int64) if packed.dtype != torch.int64 else packed
    scale = _from_u32(torch.bitwise_and(p, 0xFFFFE000))
    o9 = torch.bitwise_and(torch.bitwise_right_shift(p, 37), 0x1FF)
    offset = torch.where(o9 >= 256, o9 - 512, o9).to(torch.float32)
    return scale, offset


def torch_dtype_of(dtype) -> torch.dtype:
    """torch dtype of a NumPy dtype or a golden dtype name (``"bfloat16"``...)."""
    from backends.torch_common import torch_dtype

    return torch_dtype(np.dtype(_dt.resolve(dtype)))
