"""Quantized modules on a backend's serving path, inside the plain-torch forward.

:class:`ServingExecutor` is the executor (:mod:`.forward`) of a quantized run. For every module of
the resolved checkpoint (:func:`checkpoints.resolve`, SGLang's rules):

* a ``W8A8_DYNAMIC`` dense Linear runs ``backend.w8a8_dynamic_linear(x, weight, weight_scale,
  bias=bias)`` and a static ``W8A8`` one ``backend.w8a8_static_linear(x, weight, input_scale=...,
  input_offset=..., deq_scale=..., quant_bias=...)`` — the checkpoint tensors as stored; the ops do
  the load-time conversions the serving code does (transpose, the fp32 scale rounded to bf16, the
  reciprocal of ``input_scale`` in the model dtype, an int64 ``deq_scale`` read as FP19). The
  ``FLOAT``-tagged fp32 ``.bias`` of a static Linear is *not* passed: msModelSlim folded it into
  ``quant_bias`` and the static method adds only that. A packed module (``qkv_proj``,
  ``gate_up_proj``) runs shard by shard: the shards share the activation (dynamic: the same
  per-token quantization; static: one per-tensor pair, which ``w8a8 inspect`` checks) and their
  output columns are independent, so this is the fused GEMM's result;
* the SwiGLU between quantized ``gate`` / ``up`` and ``down`` projections is ``backend.swiglu``
  (``npu_swiglu``: fp32 inside, one rounding), not torch's two bf16 roundings;
* a ``W8A8_DYNAMIC`` MoE (routed experts; gate/up stacked into W13 as the FusedMoE loader does)
  runs ``backend.w8a8_moe(hidden, w13, w13_scale, w2, w2_scale, router_logits=..., top_k,
  scoring_func="sigmoid", correction_bias, k_group=topk_group, group_count=n_group,
  group_select_mode=1, routed_scaling_factor, serving)`` — ``npu_moe_gating_top_k`` on the router logits
  as the engine computes them (``serving``, :mod:`w8a8.serving`: SGLang a bf16 gate matmul, vllm-ascend fp32),
  then the ascend_tp dispatch / grouped matmuls / finalize and the engine's ``routed_scaling_factor``
  multiply of the routed output. The shared experts run as dense quantized Linears
  with the backend's SwiGLU and are added in bf16: the same ops and order as ``w8a8_moe``'s own
  ``shared_expert`` path (tested bit for bit), with their own per-module records.

Everything else (embedding, norms, attention core, RoPE, residual adds, FLOAT Linears, lm_head)
runs in torch on the CPU in the model dtype, from the checkpoint's own float tensors — not the
NPU's kernels for those ops. Modules outside ``select`` run in float from the reference model's
weights (one-layer-at-a-time analysis). Each quantized call is recorded (:class:`Call`); every
backend in ``compare`` runs on the same input and is compared bit for bit with the golden under its
declared numerics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

import w8a8
from backends.base import Bound
from backends.torch_common import from_torch, to_torch
from checkpoints.naming import parse_expert
from w8a8.ulp import ulp_distance

QUANT_DENSE = ("W8A8_DYNAMIC", "W8A8")


@dataclass
class BackendMatch:
    backend: str
    equal: int = 0
    elements: int = 0
    max_ulp: int = 0
    error: str | None = None

    @property
    def bitwise(self) -> bool:
        return self.error is None and self.equal == self.elements


@dataclass
class Call:
    """One quantized module call: what it saw and returned (NumPy, the model dtype)."""

    name: str
    kind: str                     # "linear" | "moe"
    scheme: str
    layer: int | None
    x: np.ndarray
    y: np.ndarray
    matches: list[BackendMatch] = field(default_factory=list)
    extra: dict = field(default_factory=dict)   # moe: router logits, serving topk ids


def layer_index(name: str) -> int | None:
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p == "layers" and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return None


class ServingExecutor:
    """The executor of a quantized run (module docstring)."""

    def __init__(self, res, cfg, float_tensors: dict, reference_tensors: dict | None, backend, *,
                 compare=(), select=None, record: bool = True, serving=None):
        self.res = res
        self.serving = w8a8.serving.get(serving)   # the engine whose composition the quantized modules follow
        self.cfg = cfg
        self.t = float_tensors
        self.ref = reference_tensors or {}
        self.backend = backend
        self.compare = [b for b in compare if b.name != "numpy"]
        self.select = select if select is not None else (lambda name: True)
        self.record = record
        self.calls: list[Call] = []
        self.dense = {p: t for p in res.linears if (t := res.types.get(p + ".weight")) in QUANT_DENSE
                      and parse_expert(p) is None}
        self.moes = {m.serving_name.rsplit(".experts", 1)[0]: m for m in res.modules
                     if m.kind == "moe" and m.scheme == "W8A8_DYNAMIC"}
        self._moe_weights: dict = {}
        self._binds: dict = {}       # (backend name, module) -> its bound op (Backend.bind)
        self._dense: dict = {}       # module -> its checkpoint tensors (_dense_args)
        self._quantized_act: set[str] = set()

    # -- helpers ---------------------------------------------------------------------------------
    def _arr(self, prefix: str, suffix: str):
        name = self.res.linears.get(prefix, {}).get(suffix)
        return None if name is None else np.asarray(self.res.tensor(name))

    def _float_weight(self, name: str):
        for src in (self.t, self.ref):
            if name + ".weight" in src:
                return src[name + ".weight"], src.get(name + ".bias")
        raise KeyError(f"no float weight for {name!r}: the checkpoint holds it quantized and the reference "
                       "model does not have it")

    def _dense_args(self, prefix: str, scheme: str) -> tuple[tuple, dict]:
        if prefix not in self._dense:
            self._dense[prefix] = self._read_dense_args(prefix, scheme)
        return self._dense[prefix]

    def _read_dense_args(self, prefix: str, scheme: str) -> tuple[tuple, dict]:
        w = self._arr(prefix, ".weight")
        if scheme == "W8A8_DYNAMIC":
            return (w, self._arr(prefix, ".weight_scale")), {"bias": self._arr(prefix, ".bias")}
        return (w,), {k: self._arr(prefix, "." + k) for k in ("input_scale", "input_offset", "deq_scale",
                                                             "quant_bias")}

    def _bound(self, backend, key: str | None, op: str, args: tuple, kwargs: dict):
        """``backend.bind(op, *args, **kwargs)`` of module ``key``, made once (its weights packed once); with
        no ``key``, a bound call that prepares every call (the direct op's cost)."""
        if key is None:
            return Bound(backend, op, args, kwargs)
        bound = self._binds.get((backend.name, key))
        if bound is None:
            bound = self._binds[(backend.name, key)] = backend.bind(op, *args, **kwargs)
        return bound

    def _run_op(self, op: str, x: np.ndarray, args: tuple, kwargs: dict, key: str | None = None,
                per_call: dict | None = None) -> tuple[np.ndarray, list[BackendMatch]]:
        """``op`` of module ``key`` on every backend (bound once per module: :meth:`_bound`; ``key`` None: not
        bound, prepared per call) and the golden; ``per_call``: the keyword arguments that change from call to
        call (a MoE's router logits), not bound."""
        per_call = per_call or {}
        y = np.asarray(self._bound(self.backend, key, op, args, kwargs)(x, **per_call))
        matches = []
        for b in ([self.backend] if self.backend.name != "numpy" else []) + \
                 [b for b in self.compare if b is not self.backend]:
            g = getattr(w8a8, op)(x, *args, numerics=b.numerics, **kwargs, **per_call)
            m = BackendMatch(b.name)
            try:
                yb = y if b is self.backend else np.asarray(self._bound(b, key, op, args, kwargs)(x, **per_call))
            except Exception as exc:  # noqa: BLE001 - reported per module, the run goes on
                m.error = f"{type(exc).__name__}: {exc}"
                matches.append(m)
                continue
            if yb.shape != g.shape or yb.dtype != g.dtype:
                m.error = f"returned {yb.dtype} {yb.shape}, golden {g.dtype} {g.shape}"
            else:
                u = ulp_distance(yb, g)
                m.equal, m.elements = int(np.count_nonzero(u == 0)), int(u.size)
                m.max_ulp = int(u.max()) if u.size else 0
            matches.append(m)
        return y, matches

    # -- the executor interface -----------------------------------------------------------------
    def linear(self, name: str, x: torch.Tensor) -> torch.Tensor:
        scheme = self.dense.get(name)
        if scheme is None or not self.select(name):
            w, b = self._float_weight(name)
            return F.linear(x, w.to(x.dtype), None if b is None else b.to(x.dtype))
        xn = from_torch(x.detach().contiguous())
        args, kwargs = self._dense_args(name, scheme)
        op = "w8a8_dynamic_linear" if scheme == "W8A8_DYNAMIC" else "w8a8_static_linear"
        y, matches = self._run_op(op, xn, args, kwargs, name)
        if self.record:
            self.calls.append(Call(name, "linear", scheme, layer_index(name), xn, y, matches))
        return to_torch(np.ascontiguousarray(y))

    def act(self, prefix: str, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """SwiGLU of an MLP: the backend's ``swiglu`` when its down projection runs quantized."""
        down = prefix + ".down_proj"
        if down not in self.dense or not self.select(down):
            return F.silu(gate) * up
        cat = from_torch(torch.cat([gate, up], dim=-1).contiguous())
        return to_torch(np.ascontiguousarray(np.asarray(self.backend.swiglu(cat))))

    def moe(self, prefix: str, x: torch.Tensor, layer: int):
        m = self.moes.get(prefix)
        if m is None or not self.select(m.name):
            return None
        return self._moe(prefix, m, x)

    def _experts(self, m):
        if m.name not in self._moe_weights:
            info = m.moe
            gate, up, down = info.naming
            get = {p: [self._arr(info.expert_prefix(e, p), ".weight") for e in info.experts] for p in info.naming}
            scl = {p: [self._arr(info.expert_prefix(e, p), ".weight_scale") for e in info.experts]
                   for p in info.naming}
            w13 = np.stack([np.concatenate([g, u], axis=0) for g, u in zip(get[gate], get[up])])
            s13 = np.stack([np.concatenate([g, u], axis=0) for g, u in zip(scl[gate], scl[up])])
            self._moe_weights[m.name] = (w13, s13, np.stack(get[down]), np.stack(scl[down]))
        return self._moe_weights[m.name]

    def routing_kwargs(self, prefix: str) -> dict:
        c = self.cfg
        bias = self.t.get(prefix + ".gate.e_score_correction_bias")
        bias = np.zeros(c.n_experts, np.float32) if bias is None else from_torch(bias.float().contiguous())
        return dict(top_k=c.top_k, scoring_func="sigmoid", correction_bias=bias, k_group=c.topk_group,
                    group_count=c.n_group, group_select_mode=1, routed_scaling_factor=c.routed_scaling_factor)

    def router_logits(self, prefix: str, h: torch.Tensor) -> np.ndarray:
        """The router logits as the engine computes them (serving row M4), as fp32 for the gating op: SGLang's
        MoEGate runs ``F.linear`` in the model dtype (bf16) and hands ``logits.float()`` to
        ``npu_moe_gating_top_k``; vllm-ascend's gate runs in fp32."""
        w = self.t[prefix + ".gate.weight"]
        if self.serving.router_logits.value == "bfloat16":
            return from_torch(F.linear(h, w.type(h.dtype)).type(torch.float32))
        return from_torch(F.linear(h.type(torch.float32), w.type(torch.float32)))

    def _moe(self, prefix: str, m, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            raise ValueError(f"{m.name}: the W8A8 MoE serving path (w8a8_moe, SGLang ascend_tp) takes bf16 hidden "
                             f"states; this model runs {x.dtype}")
        if not self.cfg.norm_topk_prob:
            raise ValueError(f"{m.name}: norm_topk_prob false: npu_moe_gating_top_k always renormalises sigmoid "
                             "scores, the serving router cannot express it")
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        hn = from_torch(h.contiguous())
        logits = self.router_logits(prefix, h)
        w13, s13, w2, s2 = self._experts(m)
        kw = dict(self.routing_kwargs(prefix), serving=self.serving.name)
        y, matches = self._run_op("w8a8_moe", hn, (w13, s13, w2, s2), kw, m.name, {"router_logits": logits})
        if self.record:
            _, ids, _ = w8a8.moe_gating_top_k(logits, self.cfg.top_k, bias=kw["correction_bias"],
                                             k_group=self.cfg.topk_group, group_count=self.cfg.n_group,
                                             group_select_mode=1, norm_type=1,
                                             routed_scaling_factor=self.cfg.routed_scaling_factor,
                                             numerics=self.backend.numerics)
            self.calls.append(Call(m.name, "moe", "W8A8_DYNAMIC", layer_index(m.name), hn, y, matches,
                                   extra={"router_logits": logits, "serving_ids": ids}))
        return to_torch(np.ascontiguousarray(y)).view(*shape)
