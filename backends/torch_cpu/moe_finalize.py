"""``moe_finalize_routing`` in torch: :func:`w8a8.moe_finalize_routing`, bit for bit.

Arguments arrive checked by :func:`w8a8.moe.moe_finalize_routing_args` (the index layout of the mode
resolved to ``slots [N, K]``). fp32, in the golden's order: ``out = skip1 + skip2``, then slot by slot
``out = out + (row + bias[expert]) * scale`` (a sequential sum over the K slots, as the kernel and the
golden: the order of fp32 additions is part of the result), one rounding at the end.
"""

from __future__ import annotations

import torch

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


def finalize_routing(rows: torch.Tensor, skip1, skip2, bias, scales, slots: torch.Tensor, experts) -> torch.Tensor:
    """``[N, H]`` of the rows' dtype; ``rows`` ``[R, H]``, ``slots`` int32 ``[N, K]``."""
    (n, k), h = slots.shape, rows.shape[1]
    out = None
    if skip1 is not None:
        out = skip1.to(F32, copy=True)
        if skip2 is not None:
            out.add_(skip2.to(F32))
    for j in range(k):
        r = slot_rows(rows, slots[:, j])
        if bias is not None:
            r.add_(bias.index_select(0, experts[:, j].to(torch.int64)).to(F32))
        if scales is not None:
            r.mul_(scales[:, j:j + 1].to(F32))
        out = combine(out, r)
    if out is None:
        out = torch.zeros(n, h, dtype=F32)
    return to_float(out, rows.dtype)
