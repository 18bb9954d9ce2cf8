"""MoE gating in torch: :func:`w8a8.moe_gating_top_k_softmax` and :func:`w8a8.moe_gating_top_k`, bit for bit.

Arguments arrive checked by the golden's own validators (:func:`w8a8.moe.moe_gating_top_k_softmax_args`,
:func:`w8a8.moe.moe_gating_top_k_args`). Scores in fp32 in the golden's order of operations
(:mod:`.moe_math`); the top-k is a stable descending sort, so equal scores keep ascending expert
order as in the golden (the device's sort is not documented stable: conformance treats swaps of exactly
equal scores as ties).
"""

from __future__ import annotations

import torch

from . import kernel_variants
from .arith import const, to_float
from .moe_math import F32, exp32, log1p32, relu_, sigmoid, sqrt32, sum_f32, topk_desc


def _softmax_exp(xf: torch.Tensor) -> torch.Tensor:
    """``exp(x - rowmax x)`` in fp32 (an empty input stays empty)."""
    shifted = xf - xf.amax(-1, keepdim=True) if xf.numel() else xf
    return exp32(shifted)


def gating_top_k_softmax(x: torch.Tensor, finished: torch.Tensor | None, *, k: int, numerics=None):
    """``(y, expert_idx int32, row_idx int32)``, each ``x.shape[:-1] + (k,)``: see the golden's docstring."""
    e = x.shape[-1]
    xf = x.reshape(-1, e).to(F32)
    n = xf.shape[0]
    ex = _softmax_exp(xf)
    p = torch.div(ex, sum_f32(ex))                       # vector division by the row sum
    fp16 = kernel_variants.gating_softmax(e=e, k=k, dtype=x.dtype, numerics=numerics).gating_precision == "fp16"
    if fp16 and x.dtype == torch.float16:
        p = p.to(torch.float16).to(F32)                  # the full-load kernels rank the fp16 probabilities
    idx = topk_desc(p, k)
    y = to_float(p.gather(-1, idx), x.dtype, may_nan=False)
    expert_idx = idx.to(torch.int32)
    if finished is not None:
        expert_idx[finished.reshape(-1)] = e
    row_idx = torch.arange(k, dtype=torch.int32)[None, :] * n + torch.arange(n, dtype=torch.int32)[:, None]
    shape = tuple(x.shape[:-1]) + (k,)
    return y.reshape(shape), expert_idx.reshape(shape), row_idx.reshape(shape)


def scores(xf: torch.Tensor, norm_type: int) -> torch.Tensor:
    """The fp32 routing scores: softmax ``exp(x - max) * (1 / sum)`` (reciprocal, then multiply),
    sigmoid, or DeepSeek-V4's ``sqrt(max(x, 0) + log1p(exp(-|x|)))``."""
    if norm_type == 0:
        ex = _softmax_exp(xf)
        return ex.mul_(torch.div(const(1.0), sum_f32(ex)))
    if norm_type == 1:
        return sigmoid(xf)
    softplus = relu_(xf.clone()).add_(log1p32(exp32(-xf.abs())))
    return sqrt32(softplus)


def gating_options(a) -> dict:
    """The scalar options of :func:`gating_top_k` from checked arguments (:class:`w8a8.moe.GatingTopKArgs`)."""
    return {"k": a.k, "k_group": a.k_group, "group_count": a.group_count, "per_group": a.per_group,
            "group_select_mode": a.group_select_mode, "renorm": a.renorm, "norm_type": a.norm_type,
            "routed_scaling_factor": float(a.routed_scaling_factor), "eps": float(a.eps)}


def gating_top_k(x: torch.Tensor, bias: torch.Tensor | None, input_ids: torch.Tensor | None,
                 tid2eid: torch.Tensor | None, *, k: int, k_group: int, group_count: int, per_group: int,
                 group_select_mode: int, renorm: int, norm_type: int, routed_scaling_factor: float, eps: float):
    """``(y [N, k] of x's dtype, expert_idx int32 [N, k], norm_out fp32 [N, E])``: see the golden's docstring.

    ``routed_scaling_factor`` and ``eps`` are the fp32 values (exact as Python floats)."""
    xf = x.to(F32)
    n, e = xf.shape
    s = scores(xf, norm_type)
    if tid2eid is not None:  # hash mode: the table, no sorting
        idx = tid2eid[input_ids.to(torch.int64)].to(torch.int64)
    else:
        sel = s + bias.to(F32) if bias is not None else s
        if group_count > 1:
            grouped = sel.reshape(n, group_count, per_group)
            if group_select_mode == 0:
                gscore = grouped.amax(-1)
            else:
                top2 = grouped.topk(2, dim=-1).values       # the two largest values (ties: equal values)
                gscore = top2[..., 0] + top2[..., 1]
            keep = topk_desc(gscore, k_group)
            mask = torch.ones(n, group_count, dtype=torch.bool)
            mask.scatter_(1, keep, False)
            sel = grouped.masked_fill(mask[..., None], float("-inf")).reshape(n, e)
        idx = topk_desc(sel, k)
    w = s.gather(-1, idx)
    if norm_type in (1, 2) or renorm == 1:
        w = torch.div(w, sum_f32(w).add_(const(eps)))
    w = w.mul_(const(routed_scaling_factor))
    return to_float(w, x.dtype), idx.to(torch.int32), s
