"""One rank's routed experts: the grouped W8A8 chain on the received rows (step 4 of :mod:`w8a8.moe.ep_layer`).

The arithmetic is torch-cpu's, reused as is (its ``grouped_matmul`` and ``dequant_swiglu_quant`` device
functions, each bit-identical to the golden op of the same name: ``tests/backends/test_torch_cpu_moe.py``)::

    g      = grouped_matmul(x8, W13_local, scale=s13 (bf16), per_token_scale=s, group_list=counts, type 1) -> bf16
    a8, s2 = dequant_swiglu_quant(g, quant_mode=1, activate_left=True, swiglu_limit)    # no group_index
    y      = grouped_matmul(a8, W2_local, scale=s2w (bf16), per_token_scale=s2, ...)  -> bf16 [A, H]

``dequant_swiglu_quant``'s kernel variant is selected from the rows it gets (A, this rank's received
rows), as the golden's call on the same rows selects it. Weights come in the checkpoint layout
(``W13 [E_loc, 2I, H]``, ``W2 [E_loc, H, I]``, scales ``[E_loc, out]`` fp32 or bf16) and are loaded once
(:func:`load`: the int8 weights prepared for torch-cpu's exact per-expert GEMM, the scales rounded to
bf16 as SGLang loads them).

This module runs inside a rank process (it imports torch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from w8a8.moe.grouped_matmul import grouped_matmul_args
from w8a8.moe.swiglu import dequant_swiglu_quant_args

from ..torch_common import from_torch
from ..torch_cpu.arith import any_nonfinite, to_float
from ..torch_cpu.moe_experts import ExpertGemm
from ..torch_cpu.moe_gmm import GroupedScale, grouped_matmul
from ..torch_cpu.moe_swiglu import dequant_swiglu_quant

_BF16 = torch.bfloat16


@dataclass
class LocalExperts:
    """A rank's experts after load."""

    w13: ExpertGemm
    w2: ExpertGemm
    s13: GroupedScale      # the bf16 scale widened to fp32 (exact)
    s2: GroupedScale
    swiglu_limit: float | None
    w2_view: torch.Tensor   # int8 [E_loc, I, H]: W2 as the golden's GMM2 takes it (its error messages)
    s2_bf16: torch.Tensor   # bf16 [E_loc, H]

    @property
    def e_loc(self) -> int:
        return self.w13.experts


def _bf16(scale: torch.Tensor) -> torch.Tensor:
    return scale if scale.dtype == _BF16 else to_float(scale.to(torch.float32), _BF16)


def load(w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor,
         swiglu_limit: float | None) -> LocalExperts:
    """The local experts loaded (module docstring); ``w13 [E_loc, 2I, H]``, ``w2 [E_loc, H, I]`` int8."""
    s2 = _bf16(w2_scale.reshape(w2.shape[0], -1))
    return LocalExperts(w13=ExpertGemm.load(w13, layout="enk"), w2=ExpertGemm.load(w2, layout="enk"),
                        s13=GroupedScale.load(_bf16(w13_scale.reshape(w13.shape[0], -1))), s2=GroupedScale.load(s2),
                        swiglu_limit=None if swiglu_limit is None else float(swiglu_limit),
                        w2_view=w2.transpose(1, 2), s2_bf16=s2)


def run(experts: LocalExperts, x8: torch.Tensor, scale: torch.Tensor, counts: list[int], *,
        stages: bool = False) -> dict:
    """``{"gmm2": bf16 [A, H]}`` (and, with ``stages``, ``gmm1``, ``act_q``, ``act_scale``): the chain of the
    module docstring on ``x8`` int8 ``[A, H]`` with per-row ``scale`` fp32 ``[A]``, rows grouped by local
    expert (``counts[l]`` rows of expert l, in order).

    Data errors are the golden's: a NaN / Inf in GMM1's bf16 output (``dequant_swiglu_quant`` refuses it)
    or in the requant scale (GMM2's ``per_token_scale``) is raised by the golden's own check on the
    intermediate, with its message."""
    total = x8.shape[0]
    segments, start = [], 0
    for g, n in enumerate(counts):
        segments.append((g, start, start + n))
        start += n
    g = grouped_matmul(x8, experts.w13, scale=experts.s13, bias=None, per_token_scale=scale, segments=segments,
                       total=total, out="bfloat16", act_type=0)
    if any_nonfinite(g):
        _golden_refuses(dequant_swiglu_quant_args, from_torch(g), quant_mode=1, activate_left=True,
                        swiglu_limit=experts.swiglu_limit)
    a8, s2 = dequant_swiglu_quant(g, total=total, quant_mode=1, activate_left=True,
                                  swiglu_limit=experts.swiglu_limit, scalar=False)
    if any_nonfinite(s2):
        _golden_refuses(grouped_matmul_args, from_torch(a8), from_torch(experts.w2_view),
                        scale=from_torch(experts.s2_bf16),
                        per_token_scale=from_torch(s2), group_list=np.asarray(counts, np.int64), group_list_type=1,
                        output_dtype="bfloat16", split_item=2, group_type=0)
    y = grouped_matmul(a8, experts.w2, scale=experts.s2, bias=None, per_token_scale=s2, segments=segments,
                       total=total, out="bfloat16", act_type=0)
    return {"gmm1": g, "act_q": a8, "act_scale": s2, "gmm2": y} if stages else {"gmm2": y}


def _golden_refuses(check, *args, **kwargs) -> None:
    """Raise what the golden's ``check`` raises on an intermediate found not finite."""
    check(*args, **kwargs)
    raise AssertionError(f"torch-dist: {check.__name__} accepted an intermediate with NaN/Inf (internal error)")


__all__ = ["LocalExperts", "load", "run"]
