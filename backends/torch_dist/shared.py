"""The shared expert on the source rank, as the golden's ``w8a8_moe`` runs it.

``shared = w8a8_dynamic_linear(swiglu(cat(w8a8_dynamic_linear(h, gate), w8a8_dynamic_linear(h, up))), down)``,
each op run by the torch-cpu backend (its public ops: the golden's checks on the real operands, so a
bad shared-expert weight is refused with the golden's message), then ``out = bf16(fp32(routed) +
fp32(shared))`` (one rounding). The torch-cpu ops load their weight on every call: the shared expert is
not part of the EP exchange this backend is about, and its time is reported apart (``shared``).
"""

from __future__ import annotations

import numpy as np
import torch

from w8a8 import _check

from ..torch_common import to_torch
from ..torch_cpu.arith import to_float

_BF16 = torch.bfloat16


def forward(weights: dict, h: np.ndarray, limit: float | None = None) -> torch.Tensor:
    """bf16 ``[T, H]``: the shared expert (checkpoint tensors ``{gate,up,down}_{weight,scale}``) on ``h``, with
    the serving engine's bf16 clamp of gate / up (``limit``, or None) before the SwiGLU."""
    import backends

    tc = backends.get("torch-cpu")
    g = tc.w8a8_dynamic_linear(h, weights["gate_weight"], weights["gate_scale"])
    u = tc.w8a8_dynamic_linear(h, weights["up_weight"], weights["up_scale"])
    if g.shape != u.shape:
        _check.fail("w8a8_moe_ep", "shared_expert", "gate and up weights of the same shape", f"{g.shape} vs {u.shape}")
    if limit is not None:   # bf16 clamps to a bound (exact): as w8a8.moe.pipeline's shared expert
        lim = np.float32(limit)
        g = np.minimum(np.asarray(g).astype(np.float32), lim).astype(g.dtype)
        u = np.clip(np.asarray(u).astype(np.float32), -lim, lim).astype(u.dtype)
    a = tc.swiglu(np.concatenate([g, u], axis=-1))
    return to_torch(tc.w8a8_dynamic_linear(a, weights["down_weight"], weights["down_scale"]))


def add(routed: torch.Tensor, shared: torch.Tensor, op: str = "w8a8_moe_ep") -> torch.Tensor:
    """``bf16(fp32(routed) + fp32(shared))``; the golden's ValueError if the shapes differ."""
    if tuple(shared.shape) != tuple(routed.shape):
        _check.fail(op, "shared_expert", f"a down projection to [T, H] = {tuple(routed.shape)}",
                    f"{tuple(shared.shape)}")
    return to_float(routed.to(torch.float32).add_(shared.to(routed.device, torch.float32)), _BF16)


__all__ = ["forward", "add"]
