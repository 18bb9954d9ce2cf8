"""The kernel variant each torch-cpu op computes: the golden's own selectors (:mod:`w8a8.variants`).

torch-cpu declares :data:`w8a8.ASCEND` (``variants="select"`` on A3), so for every call it computes the
arithmetic of the kernel the A3 host tiling picks, exactly as the golden does. The selection is the
golden's (pure functions of the shapes, dtypes and options, no NumPy arrays involved); only the
arithmetic is torch. This module imports no torch.
"""

from __future__ import annotations

import math

from w8a8.numerics import ASCEND, Numerics
from w8a8.variants import dynamic_quant as _dq
from w8a8.variants import matmul as _mm
from w8a8.variants import moe as _moe
from w8a8.variants import swiglu as _sw

NUMERICS = ASCEND
PLATFORM = ASCEND.platform_record


def dtype_name(dtype) -> str:
    """The golden dtype name of a torch dtype (``torch.bfloat16`` -> ``"bfloat16"``)."""
    return str(dtype).replace("torch.", "")


def dynamic_quant(shape, dtype, *, dst: str = "int8", smooth: bool = False, groups: int | None = None) -> Numerics:
    """The record of ``dynamic_quant`` on x of ``shape`` / ``dtype`` (the scale formula it decides)."""
    rows = math.prod(shape[:-1])
    v = _dq.select(rows, shape[-1], x_dtype=dtype_name(dtype), dst=dst, smooth=smooth, groups=groups, platform=PLATFORM)
    return v.numerics(NUMERICS)


def swiglu(dtype) -> Numerics:
    return _sw.swiglu(dtype_name(dtype), platform=PLATFORM).numerics(NUMERICS)


def dequant_swiglu_quant(*, x_dtype, tokens: int, groups: int | None, quant_mode: int, quant_scale, bias,
                         scalar: bool) -> Numerics:
    """``quant_scale`` / ``bias``: the checked tensors (their dtype and size) or None."""
    v = _sw.dequant_swiglu_quant(
        x_dtype=dtype_name(x_dtype), tokens=tokens, groups=groups, quant_mode=quant_mode,
        quant_scale_dtype=None if quant_scale is None else dtype_name(quant_scale.dtype),
        quant_scale_size=0 if quant_scale is None else quant_scale.numel(),
        bias_dtype=None if bias is None else dtype_name(bias.dtype), scalar=scalar, platform=PLATFORM)
    return v.numerics(NUMERICS)


def finalize(*, dtype, scale_dtype, n: int, k: int, h: int, bias: bool, skip1: bool, skip2: bool,
             drop_pad_mode: int) -> Numerics:
    v = _moe.finalize(dtype=dtype_name(dtype), scale_dtype=None if scale_dtype is None else dtype_name(scale_dtype),
                      n=n, k=k, h=h, bias=bias, skip1=skip1, skip2=skip2, drop_pad_mode=drop_pad_mode, platform=PLATFORM)
    return v.numerics(NUMERICS)


def gating_softmax(*, e: int, k: int, dtype) -> Numerics:
    return _moe.gating_softmax(e=e, k=k, dtype=dtype_name(dtype), platform=PLATFORM).numerics(NUMERICS)


def init_routing_v2(**facts) -> Numerics:
    """The record of ``moe_init_routing_v2`` (the selector's facts by keyword): its quant rounding."""
    return _moe.init_routing_v2(**facts, platform=PLATFORM).numerics(NUMERICS)


def weight_quant_batchmatmul(**facts) -> Numerics:
    return _mm.weight_quant_batchmatmul(**facts, platform=PLATFORM).numerics(NUMERICS)
