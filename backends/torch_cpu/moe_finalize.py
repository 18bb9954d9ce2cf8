"""``moe_finalize_routing`` in torch: :func:`w8a8.moe_finalize_routing`, bit for bit.

Arguments arrive checked by :func:`w8a8.moe.moe_finalize_routing_args` (the index layout of the mode
resolved to ``slots [N, K]``). In the golden's order: ``out = skip1 + skip2``, then slot by slot
``out = out + (row + bias[expert]) * scale`` (a sequential sum over the K slots, as the kernel and the
golden: the order of additions is part of the result). The template the A3 tiling picks
(:mod:`.kernel_variants`) decides the arithmetic dtype (fp16 rows: every add and multiply rounded to
fp16; bf16 rows: fp32 and one rounding at the end) and whether a dropped slot's bias is added.
"""

from __future__ import annotations

import torch

from . import kernel_variants
from .arith import to_float
from .moe_math import F32


def slot_rows(rows: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """fp32 rows ``rows[col]`` (a new tensor), zero where ``col == -1`` (a dropped slot)."""
    r = rows.index_select(0, col.clamp(min=0).to(torch.int64)).to(F32, copy=True)
    dropped = col < 0
    if bool(dropped.any()):
        r[dropped] = 0.0
    return r


def combine(out: torch.Tensor | None, r: torch.Tensor) -> torch.Tensor:
    """``out + r`` (in place when there is an ``out``); the first term initialises it."""
    return r if out is None else out.add_(r)


def finalize_routing(rows: torch.Tensor, skip1, skip2, bias, scales, slots: torch.Tensor, experts, *,
                     drop_pad_mode: int = 0, numerics=None) -> torch.Tensor:
    """``[N, H]`` of the rows' dtype; ``rows`` ``[R, H]``, ``slots`` int32 ``[N, K]``."""
    (n, k), h = slots.shape, rows.shape[1]
    rec = kernel_variants.finalize(dtype=rows.dtype, scale_dtype=None if scales is None else scales.dtype, n=n, k=k,
                                   h=h, bias=bias is not None, skip1=skip1 is not None, skip2=skip2 is not None,
                                   drop_pad_mode=drop_pad_mode, numerics=numerics)
    # fp16 arithmetic: each fp32 op on fp16 operands rounded to fp16 is the correctly rounded fp16 op
    half = rec.finalize_precision == "io_dtype" and rows.dtype == torch.float16

    def rnd(v):
        return v.to(torch.float16).to(F32) if half else v

    skip = rec.dropped_slot_bias == "skip"
    out = None
    if skip1 is not None:
        out = skip1.to(F32, copy=True)
        if skip2 is not None:
            out = rnd(out.add_(skip2.to(F32)))
    for j in range(k):
        col = slots[:, j]
        r = slot_rows(rows, col)
        if bias is not None:
            r = rnd(r.add_(bias.index_select(0, experts[:, j].to(torch.int64)).to(F32)))
        if scales is not None:
            r = rnd(r.mul_(scales[:, j:j + 1].to(F32)))
        dropped = col < 0
        if skip and bool(dropped.any()):
            r[dropped] = 0.0
            out = r if out is None else torch.where(dropped[:, None], out, rnd(out + r))
        else:
            out = r if out is None else rnd(combine(out, r))
    if out is None:
        out = torch.zeros(n, h, dtype=F32)
    return to_float(out, rows.dtype)
