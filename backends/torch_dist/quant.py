"""The sender's quantizers of the INT8 dispatch, in torch (the MC2 dispatch kernel, Ascend DeepEP's
normal mode, its ``alltoall`` strategy: :data:`w8a8.Numerics.ep_dispatch_quant`).

Each is ``fn(xf fp32 [S, H]) -> (int8 [S, H], fp32 [S])`` (``xf`` is used as scratch), bit for bit the
golden's formula of the dispatch mode:

* ``"mc2"`` (MC2 dispatch, vllm-ascend All2AllV, Ascend DeepEP low-latency): ``m = rowmax|x|``,
  ``inv = 127 / (m + amax_eps)`` (an fp32 division; ``amax_eps = 1e-12`` is Ascend DeepEP normal, the
  sum rounded to fp32 first), ``q = rint(x * inv)`` half to even (an all-zero row without the epsilon:
  ``0 * inf`` = NaN -> code 0), ``s = 1 / inv``: torch-cpu's ``dynamic_quant`` row quantizer
  (``quant_codes="mul_inv"``, ``scale_out="reciprocal"``) with the epsilon added to the row maximum;
* ``"routing"`` (the sgl-kernel-npu alltoall strategy, ``ep_dispatch_quant="init_routing"``):
  ``npu_moe_init_routing_v2(quant_mode=1)``'s ``s = m / 127``, ``q = x / s`` with the routing kernel's
  rounding (torch-cpu's ``dynamic_quant_rows``) on the rows rounded to bf16 first, as the golden's
  ``sender_quant`` hands them to ``w8a8.dispatch_quant`` (exact for bf16 rows without smooth scales).
"""

from __future__ import annotations

import torch

from ..torch_cpu.arith import const, to_float, to_int
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
        return lambda xf: dynamic_quant_rows(to_float(xf, torch.bfloat16).to(torch.float32), rounding)
    raise ValueError(f"torch-dist: unknown dispatch quantization formula {formula!r}; expected 'mc2' or 'routing'")


def comm_roundtrip(y: torch.Tensor) -> torch.Tensor:
    """``comm_quant_mode = 2``: the combine's int8 return trip in groups of 8 elements, as the
    golden's ``comm_quant_roundtrip``: ``s_g = max|fp32(y_g)| * fp32(1/127)``; codes
    ``rint(fp32(fp16(fp32(y) / s_g)))`` half to even, clamped to [-128, 127], NaN (an all-zero group) -> 0;
    ``y' = dtype(fp32(fp16(q)) * fp32(dtype(s_g)))``. ``y``: bf16 / fp16 ``[A, H]`` with ``H % 8 == 0``."""
    a, h = y.shape
    g = y.to(torch.float32).reshape(a, h // 8, 8)
    s = torch.maximum(g.amax(-1, keepdim=True), g.amin(-1, keepdim=True).neg_()).abs_() if g.numel() else \
        g.new_zeros(a, h // 8, 1)
    s = s.mul_(torch.div(const(1.0), const(127.0)))
    t16 = torch.div(g, s).to(torch.float16)
    q = to_int(t16.to(torch.float32), -128, 127, torch.int8, inplace=True)
    s_x = to_float(s, y.dtype).to(torch.float32)
    out = q.to(torch.float16).to(torch.float32).mul_(s_x)
    return to_float(out.reshape(a, h), y.dtype)


__all__ = ["mc2", "quantizer", "comm_roundtrip"]
