"""``npu_trans_quant_param``: the packed int64 dequant scale of the cube fix-pipe, and its decoder.

Bit layout (ops-nn kernel ``quant/trans_quant_param_v2/op_kernel/trans_quant_param_v2.h``)::

    bits  0..31   the fp32 scale reduced to "FP19": sign, 8 exponent bits, top 10 mantissa bits
                  (the low 13 mantissa bits are zero)
    bits 32..36   0
    bits 37..45   the offset as 9-bit two's complement: clip(rint(offset), -256, 255) & 0x1FF
    bit  46       1: "quant scale valid"
    bits 47..63   0

``round_mode=0`` (default) truncates the mantissa (``u32 & 0xFFFFE000``); ``round_mode=1`` rounds to
nearest even (round bit = mantissa bit 12, sticky = bits 0..11; a carry increments the exponent;
a zero exponent gives a signed zero; exponent 255 — Inf/NaN — is kept, truncated).

Examples: ``trans_quant_param(1.0) == 0x0000_4000_3F80_0000``; with ``offset=-3``:
``0x0000_7FA0_3F80_0000`` (-3 & 0x1FF = 0x1FD, << 37 = 0x3FA0_0000_0000, plus the flag).

Not to be confused with vllm-ascend's ``scale_from_float_to_int64`` or msModelSlim's
``deqscale2int64``, which store the raw fp32 bits with no flag (:func:`fp32_bits_to_int64`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _check
from . import dtypes as _dt
from .numerics import ASCEND, Numerics
from .registry import golden_op
from .rounding import round_half_even

__all__ = ["trans_quant_param", "decode_quant_param", "fp32_bits_to_int64"]

FLAG = np.uint64(1) << np.uint64(46)
_MANTISSA_KEEP = np.uint32(0xFFFFE000)


def fp19_truncate(scale32: np.ndarray) -> np.ndarray:
    """FP19 by truncation, as float32: ``bits & 0xFFFFE000`` (round_mode 0)."""
    u = np.asarray(scale32, dtype=np.float32).view(np.uint32)
    return (u & _MANTISSA_KEEP).view(np.float32)


def fp19_round_even(scale32: np.ndarray) -> np.ndarray:
    """FP19 by round-to-nearest-even, as float32 (round_mode 1; see module docstring)."""
    u = np.asarray(scale32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    exp = (u >> np.uint64(23)) & np.uint64(0xFF)
    low = u & np.uint64(0x1FFF)
    kept = u & np.uint64(0xFFFFE000)
    lsb = (u >> np.uint64(13)) & np.uint64(1)
    up = (low > 0x1000) | ((low == 0x1000) & (lsb == 1))
    rounded = kept + np.where(up, np.uint64(0x2000), np.uint64(0))
    rounded = np.where(exp == 0, u & np.uint64(0x80000000), rounded)
    rounded = np.where(exp == 0xFF, kept, rounded)
    return rounded.astype(np.uint32).view(np.float32)


def fp19(scale32: np.ndarray, round_mode: int = 0) -> np.ndarray:
    """FP19 value of an fp32 scale (float32 result), by ``round_mode`` 0 (truncate) or 1 (RNE)."""
    return fp19_truncate(scale32) if round_mode == 0 else fp19_round_even(scale32)


@dataclass(frozen=True, eq=False)
class TransQuantParamArgs:
    """The checked arguments of :func:`trans_quant_param` (as given)."""

    scale: np.ndarray
    """float32, 1-D or 2-D."""
    offset: np.ndarray | None
    """float32 of a shape the scale's packs with (see :func:`trans_quant_param`), or None."""
    round_mode: int
    """0 (truncate) or 1 (round to nearest even)."""


def trans_quant_param_args(scale, offset=None, *, round_mode: int = 0,
                           numerics: Numerics = ASCEND) -> TransQuantParamArgs:
    """Every argument check of :func:`trans_quant_param`, with its exceptions and messages."""
    op = "trans_quant_param"
    s = _check.array(op, "scale", scale, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2)
    round_mode = _check.choice(op, "round_mode", round_mode, (0, 1))
    o = None
    if offset is not None:
        o = _check.array(op, "offset", offset, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2)
        if s.ndim == 1 and o.ndim == 1:
            if not (o.shape[0] == s.shape[0] or 1 in (o.shape[0], s.shape[0])):
                _check.fail(op, "offset", f"1-D of size {s.shape[0]} or 1 (or the scale of size 1)",
                            _check.describe(o))
        elif o.shape != s.shape:
            _check.fail(op, "offset", f"of the scale's shape {s.shape}", _check.describe(o))
    _check.finite_under(op, numerics, (("scale", s), ("offset", o)))
    return TransQuantParamArgs(scale=s, offset=o, round_mode=0 if round_mode == 0 else 1)


@golden_op("dense", check=trans_quant_param_args, mirrors="torch_npu.npu_trans_quant_param")
def trans_quant_param(scale: np.ndarray, offset: np.ndarray | None = None, *, round_mode: int = 0,
                      numerics: Numerics = ASCEND) -> np.ndarray:
    """Pack an fp32 scale (and optional offset) into the int64 quant parameter.

    Parameters
    ----------
    scale : float32, 1-D ``(n,)`` / ``(1,)`` or 2-D ``(1, n)`` / ``(g, 1)`` / ``(g, n)``.
    offset : optional float32; for a 1-D scale, 1-D of size n or 1 (the output takes the larger
        shape); otherwise the scale's shape.
    round_mode : 0 (truncate, default) or 1 (round to nearest even).
    numerics : ``nan_policy`` only: under ``"raise"`` (default) NaN / Inf in scale or offset is refused;
        under ``"ieee"`` a NaN / Inf scale keeps its exponent 255 (truncated mantissa) and a NaN
        offset packs as 0, +-Inf offsets clip to 255 / -256.

    Returns int64 of the scale's shape (see the module docstring for the bits).

    Errors (:func:`trans_quant_param_args`): TypeError for dtypes, ValueError for ranks, shapes,
    ``round_mode`` outside {0, 1}, NaN/Inf in scale or offset (``nan_policy="raise"``).
    """
    a = trans_quant_param_args(scale, offset, round_mode=round_mode, numerics=numerics)
    lo = fp19(a.scale, a.round_mode).view(np.uint32).astype(np.uint64)
    if a.offset is None:
        return (lo | FLAG).view(np.int64)
    lo, o = np.broadcast_arrays(lo, a.offset)
    with np.errstate(invalid="ignore"):
        o9 = np.clip(round_half_even(o.astype(np.float64)), -256, 255)
    o9 = np.where(np.isnan(o9), 0, o9).astype(np.int64) & 0x1FF
    return (lo | FLAG | (o9.astype(np.uint64) << np.uint64(37))).view(np.int64)


def decode_quant_param(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode int64/uint64 quant parameters as the CANN golden does: ``(scale fp32, offset fp32)``.

    ``scale = fp32(low32 & 0xFFFFE000)``; ``offset = sign-extend((u64 >> 37) & 0x1FF)``. Raw fp32
    bits without the flag (msModelSlim int64 ``deq_scale``, :func:`fp32_bits_to_int64`) decode to
    their FP19 truncation.

    For raw-bit encodings the offset field is meaningless. A negative scale's int32 bit pattern is
    sign-extended to int64 (as msModelSlim does), which fills bits 32..63 with ones: the scale still
    decodes right (the low 32 bits), but the offset decodes to ``0x1FF`` = -1 (and the flag bit 46
    reads as set); a non-negative scale decodes to offset 0. Example: ``-1.0`` -> ``0xFFFF_FFFF_BF80_0000``
    -> ``(-1.0, -1.0)``; ``2.0`` -> ``0x4000_0000`` -> ``(2.0, 0.0)``. Whoever feeds such a
    parameter to an int8-output (requant) matmul without an explicit offset gets that -1 added.
    """
    op = "decode_quant_param"
    p = _check.array(op, "packed", packed, dtypes=(_dt.int64, _dt.uint64))
    u = p.view(np.uint64)
    scale = (u & np.uint64(0xFFFFE000)).astype(np.uint32).view(np.float32)
    o9 = ((u >> np.uint64(37)) & np.uint64(0x1FF)).astype(np.int64)
    offset = np.where(o9 >= 256, o9 - 512, o9).astype(np.float32)
    return scale, offset


def fp32_bits_to_int64(scale: np.ndarray) -> np.ndarray:
    """msModelSlim ``deqscale2int64`` / vllm-ascend ``scale_from_float_to_int64``.

    The fp32 bit pattern read as int32 and widened (sign-extended) to int64: no FP19 reduction, no
    flag. ``1.0 -> 0x3F800000``; a negative scale sign-extends into the high word:
    ``-1.0 -> 0xFFFF_FFFF_BF80_0000`` (int64 -1082130432), whose bits 37..45 then read as the offset
    -1 in :func:`decode_quant_param` (only the scale of a raw-bit encoding is meaningful).
    """
    s = _check.array("fp32_bits_to_int64", "scale", scale, dtypes=(_dt.float32,))
    return s.view(np.int32).astype(np.int64)
