"""DeepSeek-V4's quantized modules on a backend's serving path, composed as SGLang's NPU path does.

:class:`DSV4ServingExecutor` is the executor (:mod:`.forward`) of a quantized DeepSeek-V4 run. The
forward calls it with the checkpoint's native names; it maps them to the resolved (SGLang-remapped)
modules of :func:`checkpoints.resolve`, and:

* a ``W8A8_DYNAMIC`` Linear (``attn.wq_a``, ``attn.wq_b``, ``attn.wkv``, ``attn.indexer.wq_b``, the
  shared expert's ``w1`` / ``w3`` / ``w2``) runs ``backend.w8a8_dynamic_linear(x, weight, weight_scale)``
  on the tensors as stored (the op does the load-time transpose and bf16 scale);
* the shared expert: ``w1`` and ``w3`` as one merged ``gate_up_proj`` (one per-token quantization, the
  shards' columns side by side), the SwiGLU clamped at ``swiglu_limit`` in bf16 (gate ``max``, up both
  sides) then ``backend.swiglu`` (``npu_swiglu``), ``w2``;
* the routed experts: the router as ``npu_moe_gating_top_k`` (the golden ``moe_gating_top_k``:
  ``norm_type=2`` sqrt-softplus, the gate bias for selection, hash mode ``tid2eid[input_ids]`` on the
  first ``num_hash_layers`` layers, ``routed_scaling_factor`` 1 there) on the router logits (their
  dtype per :data:`COMPOSITION`), then ``backend.w8a8_moe(hidden, W13, W13_scale, W2, W2_scale,
  topk_ids, topk_weights, swiglu_limit)`` (dispatch, grouped matmuls, the clamped fused SwiGLU-quant,
  finalize), then the output times ``routed_scaling_factor`` in bf16; the forward adds the shared
  expert in bf16.

Everything else (embedding, norms, hyper-connections, RoPE, the attention core, compressors, indexer,
FLOAT Linears — ``wo_a``, ``wo_b``, compressor and indexer projections, ``head``) runs in torch on the
CPU from the checkpoint's own float tensors, not the NPU's kernels for those ops. Modules outside
``select`` run in float from the reference's weights (one layer quantized at a time).

:data:`COMPOSITION` holds the composition facts followed here, each with its source, in one place: the
serving-composition record of the ops (``serving=``) replaces it when it lands.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import w8a8
from backends.torch_common import from_torch, to_torch

from ..serving import Call, ServingExecutor, layer_index

SGL_DSV4 = "sgl-project/sglang python/sglang/srt/models/deepseek_v4.py + layers/moe (NPU hooks hardware_backend/npu)"
COMPOSITION = {
    # fact: (value, source)
    "router_logits": ("bfloat16", f"{SGL_DSV4}: the NPU gate is a bf16 F.linear"),
    "routing": ("moe_gating_top_k", "npu_moe_gating_top_k norm_type 2 (sqrt-softplus), hash mode tid2eid"),
    "routed_clamp": ("swiglu_limit", "dequant_swiglu_quant(swiglu_limit=L) in the fused MoE"),
    "routed_scaling": ("output_mul_bf16", "weights normalised without it, the routed output times it in bf16"),
    "shared_gate_up": ("merged", "DeepseekV2MLP gate_up_proj: one quantization, one matmul"),
    "shared_clamp": ("bf16_clamp", "gate clamp(max=L), up clamp(-L, L) in bf16, then SiluAndMul (npu_swiglu)"),
    "shared_add": ("bf16_add", "routed + shared in bf16"),
}


class DSV4ServingExecutor(ServingExecutor):
    """The executor of a quantized DeepSeek-V4 run (module docstring)."""

    fuses_gate_up = True

    def __init__(self, res, cfg, float_tensors: dict, reference_tensors: dict | None, backend, *, compare=(),
                 select=None, record: bool = True, input_ids=None):
        super().__init__(res, cfg, float_tensors, reference_tensors, backend, compare=compare, select=select,
                         record=record)
        self.serving_of = {n[: -len(".weight")]: s[: -len(".weight")] for s, n in res.native_of.items()
                           if n.endswith(".weight")}
        self.input_ids = input_ids
        self.moes = {m.name.rsplit(".experts", 1)[0]: m for m in res.modules
                     if m.kind == "moe" and m.scheme == "W8A8_DYNAMIC"}

    # -- helpers ------------------------------------------------------------------------------------
    def _scheme(self, native: str) -> str | None:
        serving = self.serving_of.get(native, native)
        scheme = self.dense.get(serving)
        return scheme if scheme == "W8A8_DYNAMIC" and self.select(native) else None

    def _float(self, native: str, x: torch.Tensor) -> torch.Tensor:
        w, _ = self._float_weight(native)
        return F.linear(x, w.to(x.dtype))

    def _quant(self, native: str, x: torch.Tensor, shards: list[str] | None = None) -> torch.Tensor:
        names = shards or [native]
        ws = [self._arr(self.serving_of[n], ".weight") for n in names]
        ss = [self._arr(self.serving_of[n], ".weight_scale") for n in names]
        xn = from_torch(x.detach().reshape(-1, x.shape[-1]).contiguous())
        y, matches = self._run_op("w8a8_dynamic_linear", xn, (np.concatenate(ws), np.concatenate(ss)), {})
        if self.record:
            self.calls.append(Call(native, "linear", "W8A8_DYNAMIC", layer_index(native), xn, y, matches,
                                   extra={"shards": names}))
        return to_torch(np.ascontiguousarray(y)).view(*x.shape[:-1], -1)

    # -- the executor interface -------------------------------------------------------------------
    def linear(self, name: str, x: torch.Tensor) -> torch.Tensor:
        if self._scheme(name) is None or x.dtype != torch.bfloat16:
            return self._float(name, x)
        return self._quant(name, x)

    def linear_pair(self, a: str, b: str, x: torch.Tensor):
        if self._scheme(a) is None or self._scheme(b) is None:
            wa, wb = self._float_weight(a)[0], self._float_weight(b)[0]
            return F.linear(x, torch.cat([wa, wb]).to(x.dtype)).split([wa.shape[0], wb.shape[0]], dim=-1)
        name = a.rsplit(".", 1)[0] + ".gate_up"
        y = self._quant(name, x, [a, b])
        n = self._arr(self.serving_of[a], ".weight").shape[0]
        return y[..., :n], y[..., n:]

    def act(self, prefix: str, gate: torch.Tensor, up: torch.Tensor, limit: float | None):
        if self._scheme(prefix + ".w2") is None or gate.dtype != torch.bfloat16:
            return None
        if limit is not None:                         # bf16 clamps, then npu_swiglu
            gate, up = gate.clamp(max=limit), up.clamp(min=-limit, max=limit)
        cat = from_torch(torch.cat([gate, up], dim=-1).contiguous())
        return to_torch(np.ascontiguousarray(np.asarray(self.backend.swiglu(cat))))

    def serving_route(self, prefix: str, h: torch.Tensor, ids: torch.Tensor, layer: int):
        """``(weights [T, k] bf16, ids int32 [T, k], logits)`` as the serving router computes them."""
        c = self.cfg
        w = self.t[prefix + ".gate.weight"]
        logits = from_torch(F.linear(h, w.to(torch.bfloat16)).contiguous())
        kw = dict(norm_type=2, routed_scaling_factor=1.0, numerics=self.backend.numerics)
        if layer < c.hash_layers:
            kw.update(input_ids=ids.numpy().astype(np.int32), tid2eid=self.t[prefix + ".gate.tid2eid"].numpy())
        else:
            kw.update(bias=from_torch(self.t[prefix + ".gate.bias"].to(torch.bfloat16).contiguous()))
        y, top, _ = w8a8.moe_gating_top_k(logits, c.top_k, **kw)
        return y, top, logits

    def moe(self, prefix: str, h: torch.Tensor, ids: torch.Tensor, layer: int):
        m = self.moes.get(prefix)
        if m is None or not self.select(m.name) or h.dtype != torch.bfloat16:
            return None
        weights, top, logits = self.serving_route(prefix, h, ids, layer)
        w13, s13, w2, s2 = self._experts(m)
        hn = from_torch(h.contiguous())
        kw = dict(topk_ids=top, topk_weights=weights, swiglu_limit=self.cfg.swiglu_limit)
        y, matches = self._run_op("w8a8_moe", hn, (w13, s13, w2, s2), kw)
        if self.record:
            self.calls.append(Call(m.name, "moe", "W8A8_DYNAMIC", layer_index(m.name), hn, y, matches,
                                   extra={"router_logits": logits, "serving_ids": top, "serving_weights": weights,
                                          "hashed": layer < self.cfg.hash_layers}))
        routed = to_torch(np.ascontiguousarray(y))
        return routed * torch.tensor(self.cfg.routed_scaling_factor, dtype=torch.bfloat16)
