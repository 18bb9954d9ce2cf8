"""DeepSeek-V4's quantized modules on a backend's serving path, composed as an engine does (SGLang's NPU path
by default; ``serving=``, a :mod:`w8a8.serving` record or its name).

:class:`DSV4ServingExecutor` is the executor (:mod:`.forward`) of a quantized DeepSeek-V4 run. The
forward calls it with the checkpoint's native names; it maps them to the resolved (SGLang-remapped)
modules of :func:`checkpoints.resolve`, and:

* a ``W8A8_DYNAMIC`` Linear (``attn.wq_a``, ``attn.wq_b``, ``attn.wkv``, ``attn.indexer.wq_b``, the
  shared expert's ``w1`` / ``w3`` / ``w2``) runs ``backend.w8a8_dynamic_linear(x, weight, weight_scale)``
  on the tensors as stored (the op does the load-time transpose and bf16 scale);
* the shared expert: ``w1`` and ``w3`` as one merged ``gate_up_proj`` (one per-token quantization, the
  shards' columns side by side), the SwiGLU clamped at ``swiglu_limit`` in bf16 (gate ``max``, up both
  sides) then ``backend.swiglu`` (``npu_swiglu``), ``w2``;
* the routed experts: ``backend.w8a8_moe(hidden, W13, W13_scale, W2, W2_scale, top_k, router_logits,
  scoring_func="sqrtsoftplus", correction_bias | input_ids + tid2eid, swiglu_limit, serving)``. The router
  logits have the engine's dtype (row M4: SGLang bf16, vllm-ascend fp32); the layer routes as the engine
  does (row M3: SGLang's torch ops ``sqrt(softplus)``, gather, renormalise in the logits' dtype; vllm-ascend's
  ``moe_gating_top_k_hash``), hash mode ``tid2eid[input_ids]`` on the first ``num_hash_layers`` layers, the
  gate bias for selection on the others; then dispatch, grouped matmuls, the fused SwiGLU-quant — clamped per
  the engine's row M1: SGLang's ascend_tp path runs it unclamped, vllm-ascend clamps at ``swiglu_limit`` —,
  finalize; then the output times ``routed_scaling_factor`` in bf16 (row M2); the forward adds the shared
  expert in bf16.

Everything else (embedding, norms, hyper-connections, RoPE, the attention core, compressors, indexer,
FLOAT Linears — ``wo_a``, ``wo_b``, compressor and indexer projections, ``head``) runs in torch on the
CPU from the checkpoint's own float tensors, not the NPU's kernels for those ops. Modules outside
``select`` run in float from the reference's weights (one layer quantized at a time).

:func:`composition` lists the facts followed here with their sources, read from the engine's
:mod:`w8a8.serving` record (the one place they are kept).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import w8a8
from backends.torch_common import from_torch, to_torch

from ..serving import Call, ServingExecutor, layer_index

COMPOSED = {"router_logits": "M4", "routing": "M3", "routed_clamp": "M1", "routed_scaling": "M2",
            "shared_gate_up": "M6", "shared_clamp": "M5", "shared_add": "M7"}
"""The composition facts this forward follows, each the row of :mod:`w8a8.serving` it reads."""


def composition(serving=None) -> dict[str, tuple[str, str]]:
    """``{fact: (value, source)}`` of the engine ``serving`` (a :class:`w8a8.serving.Serving` or its name;
    None: SGLang): the one place the facts come from is the engine's :mod:`w8a8.serving` record."""
    sv = w8a8.serving.get(serving)
    return {fact: (getattr(sv, w8a8.serving.ROWS[row]).value, getattr(sv, w8a8.serving.ROWS[row]).source)
            for fact, row in COMPOSED.items()}


COMPOSITION = composition()
"""SGLang's facts (the default engine)."""


class DSV4ServingExecutor(ServingExecutor):
    """The executor of a quantized DeepSeek-V4 run (module docstring)."""

    fuses_gate_up = True

    def __init__(self, res, cfg, float_tensors: dict, reference_tensors: dict | None, backend, *, compare=(),
                 select=None, record: bool = True, input_ids=None, serving=None):
        super().__init__(res, cfg, float_tensors, reference_tensors, backend, compare=compare, select=select,
                         record=record, serving=serving)
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

    def router_kwargs(self, prefix: str, h: torch.Tensor, ids: torch.Tensor, layer: int) -> dict:
        """The router arguments of ``w8a8_moe`` for this layer: the router logits in the engine's dtype (row M4),
        DeepSeek-V4's sqrt-softplus scoring with the gate bias (score layers) or ``input_ids`` / ``tid2eid``
        (the first ``num_hash_layers``), which the layer composes as the engine does (row M3)."""
        w = self.t[prefix + ".gate.weight"]
        bf16 = self.serving.router_logits.value == "bfloat16"
        if bf16:
            logits = from_torch(F.linear(h, w.to(torch.bfloat16)).contiguous())
        else:
            logits = from_torch(F.linear(h.float(), w.float()).contiguous())
        kw = dict(top_k=self.cfg.top_k, router_logits=logits, scoring_func="sqrtsoftplus")
        if layer < self.cfg.hash_layers:
            kw.update(input_ids=ids.numpy().astype(np.int64), tid2eid=self.t[prefix + ".gate.tid2eid"].numpy())
        else:
            bias = self.t[prefix + ".gate.bias"].to(torch.bfloat16 if bf16 else torch.float32)
            kw.update(correction_bias=from_torch(bias.contiguous()))
        return kw

    def serving_route(self, prefix: str, h: torch.Tensor, ids: torch.Tensor, layer: int):
        """``(weights fp32 [T, k], ids int32 [T, k], logits)`` as the engine's router inside ``w8a8_moe``
        computes them (the golden's :func:`w8a8.moe.pipeline.moe_route` of the same arguments)."""
        kw = self.router_kwargs(prefix, h, ids, layer)
        a = w8a8.moe.pipeline.moe_routing_args(
            "w8a8_moe", h.shape[0], self.cfg.n_experts, kw["top_k"], kw["router_logits"], None, None,
            "sqrtsoftplus", False, kw.get("correction_bias"), 1, 1, 0, 1.0, self.backend.numerics,
            kw.get("input_ids"), kw.get("tid2eid"), self.serving)
        top, weights = w8a8.moe.pipeline.moe_route(a, self.backend.numerics)
        return weights, top, kw["router_logits"]

    def moe(self, prefix: str, h: torch.Tensor, ids: torch.Tensor, layer: int):
        m = self.moes.get(prefix)
        if m is None or not self.select(m.name) or h.dtype != torch.bfloat16:
            return None
        weights, top, logits = self.serving_route(prefix, h, ids, layer)
        w13, s13, w2, s2 = self._experts(m)
        hn = from_torch(h.contiguous())
        kw = dict(self.router_kwargs(prefix, h, ids, layer), swiglu_limit=self.cfg.swiglu_limit,
                  serving=self.serving.name)          # rows M3 (the router in the layer), M1 (the routed clamp)
        y, matches = self._run_op("w8a8_moe", hn, (w13, s13, w2, s2), kw)
        if self.record:
            self.calls.append(Call(m.name, "moe", "W8A8_DYNAMIC", layer_index(m.name), hn, y, matches,
                                   extra={"router_logits": logits, "serving_ids": top, "serving_weights": weights,
                                          "hashed": layer < self.cfg.hash_layers}))
        routed = to_torch(np.ascontiguousarray(y))
        factor = w8a8.serving.output_scaling(self.serving, self.cfg.routed_scaling_factor)   # row M2
        return routed if factor is None else routed * torch.tensor(factor, dtype=torch.bfloat16)
