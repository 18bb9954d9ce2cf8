"""SwiGLU in torch: :func:`w8a8.swiglu` and :func:`w8a8.dequant_swiglu_quant`, bit for bit.

Arguments arrive checked by :func:`w8a8.moe.swiglu_args` / :func:`w8a8.moe.dequant_swiglu_quant_args`
(per-group parameters as ``[G or 1, width]``). fp32 in the kernel's order (:mod:`.moe_math`). The
golden loops over the groups of ``group_index``; here the per-group rows of the scales are expanded to
per-row tensors once (``repeat_interleave``), which is the same product for every row.
"""

from __future__ import annotations

import torch

from . import kernel_variants
from .arith import absmax, const, to_float, to_int
from .gemm import add_int32
from .moe_math import F32, clamped_swiglu, dsq_quantize_rows, exp32

_OP = "dequant_swiglu_quant"


def swiglu(x: torch.Tensor, *, dim: int, numerics=None) -> torch.Tensor:
    """``silu(first half) * second half`` along ``dim``, rounded to x's dtype, in the kernel's order:
    ``a / (1 + e) * b`` (fp16 / bf16) or ``((1 / (1 + e)) * a) * b`` (fp32), ``e = exp(-a)``."""
    a, b = x.to(F32).chunk(2, dim)
    if kernel_variants.swiglu(x.dtype, numerics=numerics).swiglu_order == "rcp_mul":
        return torch.div(const(1.0), exp32(-a).add_(1.0)).mul_(a).mul_(b)
    return to_float(clamped_swiglu(a, b, None), x.dtype)


def _rows(param: torch.Tensor, counts: torch.Tensor | None, total: int) -> torch.Tensor:
    """A ``[G or 1, W]`` fp32 parameter as one row per input row (``[total, W]``), or ``[1, W]``."""
    p = param.to(F32)
    if counts is None or p.shape[0] == 1 and counts.numel() == 1:
        return p
    return torch.repeat_interleave(p, counts, dim=0, output_size=total)


def dequant_swiglu_quant(x: torch.Tensor, *, weight_scale=None, activation_scale=None, bias=None, quant_scale=None,
                         quant_offset=None, group_counts=None, total: int, quant_mode: int, activate_left: bool,
                         swiglu_limit: float | None, scalar: bool, numerics=None):
    """``(y int8 [T, H], scale fp32 [T])``; rows past ``total`` (the group-index sum) are zeros.

    ``group_counts``: int64 ``[G]`` rows per group (None without group_index)."""
    t, h2 = x.shape
    h = h2 // 2
    n = kernel_variants.dequant_swiglu_quant(
        x_dtype=x.dtype, tokens=t, groups=None if group_counts is None else group_counts.numel(),
        quant_mode=quant_mode, quant_scale=quant_scale, bias=bias, scalar=scalar, numerics=numerics)
    y = torch.zeros(t, h, dtype=torch.int8)
    scale = torch.zeros(t, dtype=F32)
    if total == 0:
        return y, scale
    rows = x[:total]
    if x.dtype == torch.int32:
        acc = rows
        if bias is not None:
            if bias.ndim == 2:  # with group_index: bias[g] on the rows of group g (golden: one add per group)
                acc = acc.clone()
                start = 0
                for g, count in enumerate(group_counts.tolist()):
                    if count:
                        acc[start:start + count] = add_int32(_OP, acc[start:start + count], bias[g],
                                                             absmax(acc[start:start + count]))
                    start += count
            else:  # without group_index: one segment, indices as the golden's
                acc = add_int32(_OP, acc, bias, absmax(acc))
        v = acc.to(F32).mul_(_rows(weight_scale, group_counts, total))
        if activation_scale is not None:
            v.mul_(activation_scale[:total])
    else:
        v = rows.to(F32)
    gate, up = (v[:, :h], v[:, h:]) if activate_left else (v[:, h:], v[:, :h])
    o = clamped_swiglu(gate, up, swiglu_limit)
    if quant_mode == 1:
        if quant_scale is not None:
            o.mul_(_rows(quant_scale, group_counts, total))
        y[:total], scale[:total] = dsq_quantize_rows(o, n)
        return y, scale
    qs = _rows(quant_scale, group_counts, total)
    qo = _rows(quant_offset, group_counts, total) if quant_offset is not None else None
    if scalar:  # o * (1 / s) + offset; the legacy kernel takes 1 / s unguarded (s = 0: +-inf / NaN)
        s0 = torch.where(qs == 0, const(1.0), qs) if n.static_zero_scale == "as_one" else qs
        r = o.mul_(torch.div(const(1.0), s0))
    else:
        r = o.div_(qs)
    if qo is not None:  # (the golden adds a zero offset when there is none: no difference to the codes)
        r.add_(qo)
    y[:total] = to_int(r, -128, 127, torch.int8, inplace=True)
    return y, scale
