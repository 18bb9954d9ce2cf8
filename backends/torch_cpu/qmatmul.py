"""``quant_matmul`` in torch: exact int32 accumulator, then the golden's fp32 epilogue in its order.

Contract: :func:`w8a8.quant_matmul` under :data:`w8a8.ASCEND` (arguments already checked by
:func:`w8a8.quant_matmul_args`, run by :meth:`backends.base.Backend.prepare`). In order, with every intermediate pinned::

    acc  = x1 @ x2                      exact int32 (gemm.int_matmul; OverflowError past int32)
    acc += bias                         int32 bias, inside the accumulator (OverflowError, not wrap)
    int32 out:  y = acc
    deq  = fp32 scale, FP19-truncated where the torch_npu adapter packs it (fp32 scale, no
           pertoken_scale, fp16 / int8 out), or decoded from a packed int64 / uint64 scale
    float out:  v = fp32(acc) * deq[n]; v *= pertoken[m]; v += fp32(float bias[n]); RNE -> out
    int8 out:   y = clip(s9(s9(fp32(acc) * deq[n]) + s9(offset[n])), -128, 127),
                s9(v) = clip(rint(v), -256, 255), NaN -> 0

Each step is one separate torch op on fp32 tensors (no fused multiply-add), so every product and
sum is rounded exactly once, as in NumPy.
"""

from __future__ import annotations

import torch

from .arith import I32_MAX, absmax, any_nonfinite, decode_quant_param, fp19, to_float, to_int
from .gemm import Int8Weight, acc_bound, add_int32, int8_gemm_f32, int_matmul

_FLT_SAFE = 1e38  # |v| below this cannot have overflowed to Inf (fp32 max is 3.4e38)
_OP = "quant_matmul"


def effective_scale(scale: torch.Tensor, out: torch.dtype, has_token: bool):
    """The fp32 scale of the epilogue and the offset packed in an int64 scale (or None)."""
    if scale.dtype in (torch.int64, torch.uint64):
        return decode_quant_param(scale)
    sf = scale.to(torch.float32)
    if scale.dtype == torch.float32 and not has_token and out in (torch.float16, torch.int8):
        sf = fp19(sf, 0)  # Numerics.fp19_scale="adapter", fp19_round_mode=0
    return sf, None


def quant_matmul(x1: torch.Tensor, x2, scale: torch.Tensor, *, offset=None, pertoken_scale=None, bias=None,
                 output_dtype: torch.dtype) -> torch.Tensor:
    """See the module docstring. ``x2`` is an int8 tensor ``[..., K, N]`` or a loaded :class:`Int8Weight`;
    ``scale`` and ``bias`` are 1-D."""
    w = x2 if isinstance(x2, Int8Weight) else Int8Weight(kn=x2, absmax=absmax(x2))
    int_bias = bias is not None and bias.dtype == torch.int32
    out = output_dtype
    acc_f32 = None
    if out != torch.int32 and not int_bias:  # AMX: fp32(acc) straight from the prepacked kernel
        acc_f32 = int8_gemm_f32(x1, w)
    if acc_f32 is None:
        acc = int_matmul(x1, w.kn, op=_OP, b_absmax=w.absmax)
        bound = acc_bound(x1, w.absmax)
        if int_bias:
            acc = add_int32(_OP, acc, bias, bound)
            bound = I32_MAX + 1
        if out == torch.int32:
            return acc.contiguous()
        acc_f32 = acc.to(torch.float32)
    else:
        bound = acc_bound(x1, w.absmax)
    deq, packed_offset = effective_scale(scale, out, pertoken_scale is not None)
    return epilogue(acc_f32, deq, packed_offset, offset, pertoken_scale, None if int_bias else bias, out, bound)


def epilogue(v: torch.Tensor, deq, packed_offset, offset, pertoken, float_bias, out: torch.dtype,
             bound: int) -> torch.Tensor:
    """The fp32 epilogue on ``v = fp32(acc)`` (modified in place); ``bound`` bounds ``|acc|``."""
    v.mul_(deq)
    if out == torch.int8:
        o = offset.to(torch.float32) if offset is not None else packed_offset
        r = _s9(v)
        if o is not None:
            r.add_(_s9(o.clone()))
            r = _s9(r)
        return to_int(r, -128, 127, torch.int8, inplace=True)
    if pertoken is not None:
        v.mul_(pertoken[:, None])
    if float_bias is not None:
        v.add_(float_bias.to(torch.float32))
    return to_float(v, out, may_nan=_may_nan(bound, deq, pertoken, float_bias))


def _s9(v: torch.Tensor) -> torch.Tensor:
    """The CANN golden's 9-bit step, in place: ``clip(rint(v), -256, 255)``, NaN -> 0."""
    return v.round_().clamp_(-256, 255).nan_to_num_(nan=0.0)


def _may_nan(bound: int, deq, pertoken, bias) -> bool:
    """Whether the epilogue can have made a NaN: only through an Inf (an fp32 overflow of
    ``acc * deq`` or of its product with the token scale) times 0 or plus an Inf."""
    if any_nonfinite(deq, pertoken, bias):
        return True
    top = float(bound) * absmax(deq)
    return top >= _FLT_SAFE or (pertoken is not None and top * absmax(pertoken) >= _FLT_SAFE)
