"""The sender's quantizers of the INT8 dispatch, in torch (spec/expert-parallel.md §1.5, §2.3, §2.5).

Each is ``fn(xf fp32 [S, H]) -> (int8 [S, H], fp32 [S])`` (``xf`` is used as scratch), bit for bit the
golden's formula of the dispatch mode:

* ``"mc2"`` (MC2 dispatch, vllm-ascend All2AllV, Ascend DeepEP low-latency): ``m = rowmax|x|``,
  ``inv = 127 / (m + amax_eps)`` (an fp32 division; ``amax_eps = 1e-12`` is Ascend DeepEP normal, the
  sum rounded to fp32 first), ``q = rint(x * inv)`` half to even (an all-zero row without the epsilon:
  ``0 * inf`` = NaN -> code 0), ``s = 1 / inv``: torch-cpu's ``dynamic_quant`` row quantizer
  (``quant_codes="mul_inv"``, ``scale_out="reciprocal"``) with the epsilon added to the row maximum;
* ``"routing"`` (the sgl-kernel-npu alltoall strategy): ``npu_moe_init_routing_v2(quant_mode=1)``'s
  ``s = m / 127``, ``q = x / s`` with the routing kernel's rounding: torch-cpu's ``dynamic_quant_rows``.
"""

from __future__ import annotations

import torch

from ..torch_cpu.arith import const
from ..torch_cpu.moe_routing import dynamic_quant_rows
from ..torch_cpu.quant import _row_absmax, quantize_rows


def mc2(xf: torch.Tensor, amax_eps: float = 0.0, scale_out: str = "reciprocal") -> tuple[torch.Tensor, torch.Tensor]:
    """The MC2 / npu_dynamic_quant formula, ``amax_eps`` added to the row maximum (module docstring).
    ``scale_out="amax_mul_rcp"`` (``s = m * fp32(1/127)``, without an epsilon) is the scale of
    ``npu_dynamic_quant``'s single-row / multi-row kernels, for an on-arrival quantization the golden
    runs through ``dynamic_quant``'s kernel selection."""
    if not amax_eps:
        return quantize_rows(xf, 127, scale_out)
    if scale_out != "reciprocal":
        raise ValueError(f"torch-dist: amax_eps is modelled with scale_out 'reciprocal' only; got {scale_out!r}")
    m = _row_absmax(xf).add_(const(amax_eps))          # fp32(m + eps)
    inv = torch.div(const(127.0), m)
    scale = torch.div(const(1.0), inv)
    t = xf.mul_(inv[:, None]).round_()
    t.nan_to_num_(nan=0.0, posinf=127.0, neginf=-127.0)
    return t.clamp_(-127, 127).to(torch.int8), scale


def quantizer(formula: str, *, amax_eps: float = 0.0, rounding: str = "half_even", scale_out: str = "reciprocal"):
    """The quantizer of a dispatch formula: ``"mc2"`` or ``"routing"`` (module docstring)."""
    if formula == "mc2":
        return lambda xf: mc2(xf, amax_eps, scale_out)
    if formula == "routing":
        return lambda xf: dynamic_quant_rows(xf, rounding)
    raise ValueError(f"torch-dist: unknown dispatch quantization formula {formula!r}; expected 'mc2' or 'routing'")


__all__ = ["mc2", "quantizer"]
