"""The grouped int8 matmul in torch: :func:`w8a8.grouped_matmul` (single-tensor form), bit for bit.

One Python loop over the non-empty groups; each group is one exact int8 GEMM of its rows against its
expert's weight (:class:`.moe_experts.ExpertGemm`: fbgemm's prepacked kernel where proven exact, else
``torch._int_mm``), followed by the golden's epilogue on those rows while they are in cache
(:func:`backends.torch_cpu.qmatmul.epilogue`, then the activation, then one rounding to the output).
int8 x int8 with ``K < 65536`` cannot overflow int32 (``65535 * 128 * 128 < 2^31``); an int32 bias
is added to the int32 accumulator with the golden's OverflowError (its message names the group's own
row, as the golden's).

Rows past the group-list total are not written by the device; they hold the golden's zeros here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .arith import absmax, const, decode_quant_param, to_float
from .gemm import acc_bound, add_int32
from .moe_experts import ExpertGemm
from .moe_math import F32, exp32, relu_, silu
from .qmatmul import epilogue

_OP = "grouped_matmul"
_FLT_SAFE = 1e38  # |v| below this cannot have overflowed to Inf (fp32 max is 3.4e38)
_GELU_C = float(np.float32(2 * np.sqrt(2 / np.pi)))  # the golden's constant, as an exact fp32 value
_GELU_CUBE = 0.044715
_FAST_GELU_A, _FAST_GELU_B = 1.702, 0.851
_OUT = {"int32": torch.int32, "int8": torch.int8, "bfloat16": torch.bfloat16, "float16": torch.float16}


_W_ABSMAX = 128  # |int8| bound: K * 128 * 128 < 2^31 for every K < 65536 (no overflow, no data pass)


def needs_int32(scale, bias) -> bool:
    """Whether the epilogue needs the int32 accumulator itself (int32 / int8-requant output, an int32
    bias), not just ``fp32(acc)``."""
    return scale is None or scale.dtype in (torch.int64, torch.uint64) or bias is not None


@dataclass
class GroupedScale:
    """The per-expert epilogue parameters after load: the fp32 dequant scale ``[E, N]`` (a bf16 / fp32
    scale widened, or the FP19 value of a packed int64 one), the packed 9-bit offset ``[E, N]`` (or None)
    and ``max|deq|`` (for the NaN bound of the final rounding)."""

    deq: torch.Tensor
    offset: torch.Tensor | None
    absmax: float

    @classmethod
    def load(cls, scale: torch.Tensor) -> "GroupedScale":
        if scale.dtype in (torch.int64, torch.uint64):
            deq, offset = decode_quant_param(scale)
        else:
            deq, offset = scale.to(F32), None
        return cls(deq=deq.contiguous(), offset=offset, absmax=absmax(deq))


def activate_(v: torch.Tensor, act_type: int) -> torch.Tensor:
    """The GMM epilogue's fp32 activations (the golden's ``_activate``), on ``v`` (may be reused)."""
    if act_type == 0:
        return v
    if act_type == 1:
        return relu_(v)
    if act_type == 5:
        return silu(v)
    if act_type == 2:  # v / (1 + exp(-2z)),  2z = c * (v + 0.044715 v^3)
        z2 = (v * v).mul_(v).mul_(const(_GELU_CUBE)).add_(v).mul_(const(_GELU_C))
        return torch.div(v, exp32(-z2).add_(1.0))
    a = v.abs()  # 4: fast_gelu = v / (1 + exp(-1.702 |v|)) * exp(0.851 (v - |v|))
    left = torch.div(v, exp32(a * const(-_FAST_GELU_A)).add_(1.0))
    return left.mul_(exp32(torch.sub(v, a).mul_(const(_FAST_GELU_B))))


def may_nan(bound: int, scale_absmax: float, per_token: torch.Tensor | None) -> bool:
    """Whether the fp32 epilogue can have made an Inf (and so, with an activation, a NaN): only if
    ``|acc| * max|scale| * max|token scale|`` reaches the fp32 overflow range."""
    top = float(bound) * scale_absmax
    if per_token is not None and per_token.numel():
        top *= float(absmax(per_token))
    return top >= _FLT_SAFE


def grouped_matmul(x: torch.Tensor, weight: ExpertGemm, *, scale: GroupedScale | None, bias: torch.Tensor | None,
                   per_token_scale: torch.Tensor | None, segments, total: int, out: str, act_type: int):
    """``y [M, N]``: the golden's formula per group (see :func:`w8a8.grouped_matmul`). ``weight``: the
    loaded experts (the ``int_mm`` path wherever :func:`needs_int32`)."""
    m = x.shape[0]
    n = weight.n
    out_dtype = _OUT[out]
    y = torch.empty(m, n, dtype=out_dtype)
    y[total:].zero_()
    bound = acc_bound(x, _W_ABSMAX)
    top = bound + (absmax(bias) if bias is not None else 0)  # bounds |acc + bias|
    nan = scale is not None and out_dtype != torch.int8 and may_nan(top, scale.absmax, per_token_scale)
    int32 = scale is None or scale.offset is not None or bias is not None
    for g, start, stop in segments:
        if stop == start:
            continue
        if int32:
            acc = weight.i32(g, x[start:stop], op=_OP)
            if bias is not None:
                acc = add_int32(_OP, acc, bias[g], bound)
            if scale is None:
                y[start:stop] = acc
                continue
            if scale.offset is not None:
                y[start:stop] = epilogue(acc.to(F32), scale.deq[g], scale.offset[g], None, None, None, torch.int8,
                                         top)
                continue
            v = acc.to(F32)
        else:
            v = weight.f32(g, x[start:stop])
        pt = per_token_scale[start:stop] if per_token_scale is not None else None
        v = epilogue(v, scale.deq[g], None, None, pt, None, F32, top)
        y[start:stop] = to_float(activate_(v, act_type), out_dtype, may_nan=nan)
    return y
