"""The shared expert on the source rank (spec/expert-parallel.md §6.1): torch-cpu's W8A8_DYNAMIC Linears.

``shared = down(bf16(silu(gate(h)) * up(h)))`` with each Linear ``w8a8_dynamic_linear`` and the SwiGLU
``swiglu`` of the golden, then ``out = bf16(fp32(routed) + fp32(shared))`` (one rounding, as
``w8a8_moe``). The Linears are loaded as SGLang loads them (the golden's
:func:`w8a8.linear.w8a8_dynamic_linear_args` gives the parameters as loaded; torch-cpu's
``load_dynamic`` prepares them), once per loaded layer.
"""

from __future__ import annotations

import torch

from w8a8.linear import w8a8_dynamic_linear_args

from ..torch_common import to_torch
from ..torch_cpu.arith import to_float
from ..torch_cpu.linear import load_dynamic, w8a8_dynamic_linear
from ..torch_cpu.moe_swiglu import swiglu
from ..torch_cpu.runtime import resolve_gemm_path
from w8a8 import dtypes as _dt

import numpy as np

_BF16 = torch.bfloat16


def load(weights: dict) -> tuple:
    """``(gate, up, down)`` loaded Linears from the checkpoint arrays ``{gate,up,down}_{weight,scale}``."""
    path = resolve_gemm_path(None)
    out = []
    for name in ("gate", "up", "down"):
        w = weights[f"{name}_weight"]
        probe = np.zeros((1, w.shape[1]), dtype=_dt.bfloat16)   # a stand-in activation: only its dtype is read
        params = w8a8_dynamic_linear_args(probe, w, weights[f"{name}_scale"]).params
        out.append(load_dynamic(_BF16, to_torch(params.weight), to_torch(params.weight_scale), None, path))
    return tuple(out)


def forward(layer: tuple, h: torch.Tensor) -> torch.Tensor:
    """bf16 ``[T, H]``: the shared expert on this rank's hidden ``h``."""
    gate, up, down = layer
    g = w8a8_dynamic_linear(h, gate)
    u = w8a8_dynamic_linear(h, up)
    return w8a8_dynamic_linear(swiglu(torch.cat([g, u], -1), dim=-1), down)


def add(routed: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    """``bf16(fp32(routed) + fp32(shared))``."""
    return to_float(routed.to(torch.float32).add_(shared.to(torch.float32)), _BF16)


__all__ = ["load", "forward", "add"]
