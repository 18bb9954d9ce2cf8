"""MoE token routing in torch: :func:`w8a8.moe_init_routing` (v1) and :func:`w8a8.moe_init_routing_v2`.

Arguments arrive checked by :func:`w8a8.moe.moe_init_routing_args` / :func:`w8a8.moe.moe_init_routing_v2_args`.
The index work is a stable sort of the flattened expert ids (``torch.sort(stable=True)``: the golden's
``argsort(kind="stable")``); the quantization is per row, so for the dynamic mode without a smooth scale
the ``T`` token rows are quantized once and the codes gathered (bit-identical to quantizing the
``T * K`` gathered rows, the golden's way, and ``K`` times less work).

Rows the device leaves unwritten (dropless rows past the routed ones, scatter indices past them, the
scale output of ``quant_mode=-1`` without a scale) hold the golden's fill: zeros, -1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from w8a8 import _check

from . import kernel_variants
from .arith import const, to_int
from .moe_math import F32, F64, f64_to_f16, quantize_rows_div
from .quant import _row_absmax

_OP_V2 = "moe_init_routing_v2"


def init_routing(x: torch.Tensor, row_idx: torch.Tensor, expert_idx: torch.Tensor, *, active_num: int):
    """v1: ``(expanded_x, expanded_row_idx int32 [N*K], expanded_expert_idx int32 [N*K])``."""
    n = x.shape[0]
    nk = row_idx.numel()
    flat_experts = expert_idx.reshape(-1)
    order = torch.sort(flat_experts, stable=True).indices
    dst_to_src = row_idx.reshape(-1).to(torch.int64)[order]
    expanded_row_idx = torch.empty(nk, dtype=torch.int32)
    expanded_row_idx[dst_to_src] = torch.arange(nk, dtype=torch.int32)
    rows = min(active_num, n) * row_idx.shape[1]
    expanded_x = x.index_select(0, dst_to_src[:rows] % max(n, 1))
    return expanded_x, expanded_row_idx, flat_experts[order]


@dataclass
class Routing:
    """The index work of routing v2 on checked options (the golden's ``_Routing``)."""

    src: torch.Tensor          # int64: flat (t*K + j) ids that got a row, in row order
    dst: torch.Tensor          # int64: their rows (arange, or e*C + rank with drop/pad)
    row_idx: torch.Tensor      # int32 [N*K]
    sorted_experts: torch.Tensor   # int64 [available]
    available: int


def route(expert_idx: torch.Tensor, *, start: int, end: int, drop_pad: bool, capacity: int, rows: int,
          row_idx_type: int) -> Routing:
    """Stable sort by expert id (ids below ``start`` last), then rows (dropless) or capacity slots.

    ``row_idx_type=1`` writes the whole sorted permutation, as the golden does (the sort kernels write
    it all; the gather-sort perf kernels only the active entries, which the golden's validity mask
    says)."""
    flat = expert_idx.reshape(-1).to(torch.int64)
    nk = flat.numel()
    key = torch.where(flat < start, torch.tensor(1 << 40, dtype=torch.int64), flat)
    order = torch.sort(key, stable=True).indices
    available = int(((flat >= start) & (flat < end)).sum())
    routed = order[:available]
    se = flat[routed]
    if drop_pad:
        rank = torch.arange(available) - torch.searchsorted(se, se, side="left")
        keep = rank < capacity
        src, dst = routed[keep], se[keep] * capacity + rank[keep]
    else:
        valid = min(rows, available)
        src, dst = routed[:valid], torch.arange(valid)
    row_idx = torch.full((nk,), -1, dtype=torch.int32)
    if row_idx_type == 0:
        if drop_pad:
            row_idx[src] = dst.to(torch.int32)
        else:
            row_idx[routed] = torch.arange(available, dtype=torch.int32)
    else:
        row_idx = order.to(torch.int32)
    return Routing(src=src, dst=dst, row_idx=row_idx, sorted_experts=se, available=available)


def expert_counts(r: Routing, *, start: int, end: int, count_type: int, count_flag: bool, expert_num: int):
    """``expert_token_cumsum_or_count`` (int64): counts / cumsum over ``[start, end)``, or the key-value
    pairs ``[expert_num, 2]`` (present experts ascending, then zeros)."""
    if not count_flag:
        return torch.zeros(0, dtype=torch.int64)
    counts = torch.bincount(r.sorted_experts - start, minlength=end - start).to(torch.int64)
    if count_type == 1:
        return counts
    if count_type == 0:
        return torch.cumsum(counts, 0)
    kv = torch.zeros(expert_num, 2, dtype=torch.int64)
    present = torch.nonzero(counts).reshape(-1)
    kv[:present.numel(), 0] = present + start
    kv[:present.numel(), 1] = counts[present]
    return kv


def dynamic_quant_rows(xf: torch.Tensor, rounding: str = "half_even") -> tuple[torch.Tensor, torch.Tensor]:
    """``quant_mode=1``: ``s = rowmax|x| / 127``, ``t = x / s``, then per ``rounding`` (the golden's
    ``routing_quant_round``): ``"half_even"`` ``q = rint(t)`` (the full-load kernel), or
    ``"trunc_fp16_half_away"`` fp32 -> fp16 toward zero, then half away from zero (the gather kernel).
    ``xf`` is used as scratch."""
    if rounding == "half_even":
        return quantize_rows_div(xf, "amax_div")
    s = torch.div(_row_absmax(xf), const(127.0))
    t = xf.div_(s[:, None])
    h = t.to(torch.float16)
    away = h.to(F32).abs() > t.abs()                       # RNE rounded away from zero: one step back
    if bool(away.any()):
        bits = h.view(torch.int16)
        h = torch.where(away, bits - 1, bits).view(torch.float16)   # sign-magnitude: magnitude - 1 ulp
    v = h.to(F32)
    q = torch.sign(v) * torch.floor(v.abs() + 0.5)         # half away from zero (exact: |v| <= 65504)
    return to_int(q, -127, 127, torch.int8, inplace=True), s


def static_quant(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor | None) -> torch.Tensor:
    """``quant_mode=0``: ``rint(fp16(fp16(fp16(x) * fp16(s)) + fp16(o)))`` -> int8 (saturating).

    The product of two fp16 values is exact in fp32 (22 significand bits), so it is rounded to fp16 once;
    the sum is exact in float64 and rounded once to fp16 by :func:`~.moe_math.f64_to_f16`."""
    x16 = x.to(F32).to(torch.float16)
    s16 = scale.to(torch.float16)[0]
    o16 = offset.to(torch.float16)[0] if offset is not None else torch.tensor(0.0, dtype=torch.float16)
    prod = (x16.to(F32) * s16.to(F32)).to(torch.float16)
    total = f64_to_f16(prod.to(F64) + o16.to(F64))
    return to_int(total.to(F32), -128, 127, torch.int8, inplace=True)


def init_routing_v2(x: torch.Tensor, expert_idx: torch.Tensor, *, scale, offset, quant_mode: int, k: int, h: int,
                    start: int, end: int, drop_pad: bool, capacity: int, expert_num: int, rows: int,
                    row_idx_type: int, count_type: int, count_flag: bool, numerics=None):
    """``(expanded_x, expanded_row_idx, expert_token_cumsum_or_count, expanded_scale)``: see the golden."""
    rec = kernel_variants.init_routing_v2(
        n=x.shape[0], k=k, h=h, x_dtype=kernel_variants.dtype_name(x.dtype), quant_mode=quant_mode,
        scale_shape=None if scale is None else tuple(scale.shape), offset=offset is not None, start=start, end=end,
        expert_num=expert_num, count_type=count_type, row_idx_type=row_idx_type, numerics=numerics)
    r = route(expert_idx, start=start, end=end, drop_pad=drop_pad, capacity=capacity, rows=rows,
              row_idx_type=row_idx_type)
    rounding = rec.routing_quant_round
    tokens = r.src // max(k, 1)
    out_dtype = x.dtype if quant_mode == -1 else torch.int8
    expanded_x = torch.zeros(rows, h, dtype=out_dtype)
    expanded_scale = torch.zeros(rows if quant_mode != 0 else 0, dtype=F32)
    if quant_mode == -1:
        expanded_x[r.dst] = x.index_select(0, tokens)
        if scale is not None:
            expanded_scale[r.dst] = scale.index_select(0, tokens)
    elif quant_mode == 1:
        if scale is None:  # per token once, then gathered (rows are quantized independently)
            q, qs = dynamic_quant_rows(x.to(F32, copy=True), rounding)
            expanded_x[r.dst] = q.index_select(0, tokens)
            expanded_scale[r.dst] = qs.index_select(0, tokens)
        else:
            xf = x.index_select(0, tokens).to(F32)
            smooth = scale if scale.shape[0] == 1 else scale.index_select(
                0, expert_idx.reshape(-1)[r.src].to(torch.int64) - start)
            xf.mul_(smooth)
            if xf.numel() and not bool(torch.isfinite(xf).all()):
                _check.fail(_OP_V2, "scale", "such that x * scale stays finite in fp32", "an overflow to Inf")
            q, qs = dynamic_quant_rows(xf, rounding)
            expanded_x[r.dst] = q
            expanded_scale[r.dst] = qs
    else:
        expanded_x[r.dst] = static_quant(x.index_select(0, tokens), scale, offset)
    if drop_pad:
        expanded_x = expanded_x.reshape(expert_num, capacity, h)
    counts = expert_counts(r, start=start, end=end, count_type=count_type, count_flag=count_flag,
                           expert_num=expert_num)
    return expanded_x, r.row_idx, counts, expanded_scale

