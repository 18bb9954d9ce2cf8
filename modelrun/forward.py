"""A plain-torch forward of the families in :mod:`.config`, op for op as transformers 4.51 computes
them (eager attention), so that in float32 its logits are bit-identical to transformers'
(``tests/modelrun/test_float_forward.py``).

Every Linear goes through ``executor.linear(name, x)``, every MLP activation through
``executor.act(prefix, gate, up)`` and the routed experts of every MoE block through
``executor.moe(prefix, x, layer)`` (None: the float experts below), so a run can put any module on a
backend's serving path (:mod:`.serving`) and observe what each module saw (:mod:`.analysis`).
:class:`FloatExecutor` is the float model.

Order of operations kept from transformers (``modeling_qwen2.py``, ``modeling_qwen3.py``,
``modeling_deepseek_v3.py``): RMSNorm in fp32 then ``weight * x.to(dtype)``; RoPE ``inv_freq =
1 / base^(arange(0, d, 2) / d)``, cos / sin in fp32 cast to the model dtype, ``q*cos +
rotate_half(q)*sin``; attention ``(q @ k^T) * scaling + mask`` (mask ``finfo.min`` above the diagonal),
softmax in fp32 cast back, ``@ v``; SwiGLU ``down(silu(gate(x)) * up(x))``; DeepSeek-V3 router in
fp32 (``sigmoid``, ``+ e_score_correction_bias`` for the choice, group score = sum of each group's
top 2, ``masked_fill(0)`` outside the kept groups, ``topk(sorted=False)``, weights renormalised with
``+ 1e-20`` and scaled), experts summed in fp32 in expert order (``index_add_``), then cast and the
shared experts added.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from .config import ModelConfig

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    h = x.to(torch.float32)
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return weight * h.to(dtype)


def rope_cos_sin(dim: int, base: float, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    inv = inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
    pos = positions[:, None, :].float()
    freqs = (inv.float() @ pos.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * 1.0, emb.sin() * 1.0
    return cos.to(dtype=dtype), sin.to(dtype=dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(q, k, cos, sin, interleave: bool = False):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    if interleave:
        b, h, s, d = q.shape
        q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
        b, h, s, d = k.shape
        k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def causal_mask(s: int, dtype) -> torch.Tensor:
    mask = torch.full((s, s), torch.finfo(dtype).min, dtype=dtype)
    return torch.triu(mask, diagonal=1)[None, None]


def eager_attention(q, k, v, scaling: float, groups: int, mask) -> torch.Tensor:
    if groups > 1:
        b, h, s, d = k.shape
        k = k[:, :, None].expand(b, h, groups, s, d).reshape(b, h * groups, s, d)
        b, h, s, d = v.shape
        v = v[:, :, None].expand(b, h, groups, s, d).reshape(b, h * groups, s, d)
    w = torch.matmul(q, k.transpose(2, 3)) * scaling
    w = w + mask[:, :, :, : k.shape[-2]]
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v).transpose(1, 2).contiguous()


class FloatExecutor:
    """The float model: every Linear ``F.linear(x, W, b)`` from ``tensors``, ``silu(gate) * up``, the float experts."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        self.tensors = tensors

    def linear(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.tensors[name + ".weight"], self.tensors.get(name + ".bias"))

    def act(self, prefix: str, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up

    def moe(self, prefix: str, x: torch.Tensor, layer: int):
        return None


class Model:
    """``logits = Model(cfg, tensors).forward(input_ids)``; ``tensors`` hold every non-Linear float
    tensor (embeddings, norms, the router) and, for :class:`FloatExecutor`, the Linears, in the
    compute dtype."""

    def __init__(self, cfg: ModelConfig, tensors: Mapping[str, torch.Tensor], executor=None):
        self.cfg = cfg
        self.t = tensors
        self.ex = executor if executor is not None else FloatExecutor(tensors)
        self.router_observer = None   # called (prefix, router input, topk ids, weights) by the float router

    # -- blocks ------------------------------------------------------------------------------------
    def mlp(self, p: str, x: torch.Tensor) -> torch.Tensor:
        lin = self.ex.linear
        return lin(p + ".down_proj", self.ex.act(p, lin(p + ".gate_proj", x), lin(p + ".up_proj", x)))

    def router(self, p: str, x: torch.Tensor, bias: torch.Tensor | None = None):
        """transformers' ``DeepseekV3TopkRouter.forward`` on ``x [T, H]``: ``(topk ids, weights fp32)``."""
        c = self.cfg
        logits = F.linear(x.type(torch.float32), self.t[p + ".gate.weight"].type(torch.float32))
        scores = logits.sigmoid()
        if bias is None:
            bias = self.t.get(p + ".gate.e_score_correction_bias")
        if bias is None:
            bias = torch.zeros(c.n_experts, dtype=torch.float32)
        choice = scores.view(-1, c.n_experts) + bias.unsqueeze(0)
        per = c.n_experts // c.n_group
        group_scores = choice.view(-1, c.n_group, per).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=c.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, c.n_group, per).reshape(-1, c.n_experts)
        choice = choice.masked_fill(~score_mask.bool(), 0.0)
        ids = torch.topk(choice, k=c.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, ids)
        if c.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return ids, weights * c.routed_scaling_factor

    def moe(self, p: str, x: torch.Tensor, layer: int) -> torch.Tensor:
        routed = self.ex.moe(p, x, layer)
        if routed is None:
            routed = self._float_routed(p, x)
        if self.cfg.n_shared:
            routed = routed + self.mlp(p + ".shared_experts", x)
        return routed

    def _float_routed(self, p: str, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        h = x.view(-1, shape[-1])
        ids, weights = self.router(p, h)
        if self.router_observer is not None:
            self.router_observer(p, h, ids, weights)
        final = torch.zeros_like(h, dtype=weights.dtype)
        mask = F.one_hot(ids, num_classes=self.cfg.n_experts).permute(2, 0, 1)
        for e in range(self.cfg.n_experts):
            tok, slot = torch.where(mask[e])
            if tok.numel() > 0:
                y = self.mlp(f"{p}.experts.{e}", h[tok])
                final.index_add_(0, tok, y * weights[tok, slot].unsqueeze(-1))
        return final.type(h.dtype).view(*shape)

    def attention(self, p: str, x: torch.Tensor, cos, sin, mask) -> torch.Tensor:
        c = self.cfg
        b, s, _ = x.shape
        lin = self.ex.linear
        if c.family == "deepseek_v3":
            return self._mla(p, x, cos, sin, mask)
        shape = (b, s, -1, c.head_dim)
        q = lin(p + ".q_proj", x).view(shape)
        k = lin(p + ".k_proj", x).view(shape)
        v = lin(p + ".v_proj", x).view(shape).transpose(1, 2)
        if c.family == "qwen3":
            q = rms_norm(q, self.t[p + ".q_norm.weight"], c.eps)
            k = rms_norm(k, self.t[p + ".k_norm.weight"], c.eps)
        q, k = apply_rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        o = eager_attention(q, k, v, c.head_dim ** -0.5, c.heads // c.kv_heads, mask)
        return lin(p + ".o_proj", o.reshape(b, s, -1).contiguous())

    def _mla(self, p: str, x: torch.Tensor, cos, sin, mask) -> torch.Tensor:
        c = self.cfg
        b, s, _ = x.shape
        lin = self.ex.linear
        if c.q_lora_rank:
            q = lin(p + ".q_b_proj", rms_norm(lin(p + ".q_a_proj", x), self.t[p + ".q_a_layernorm.weight"], c.eps))
        else:
            q = lin(p + ".q_proj", x)
        q = q.view(b, s, -1, c.qk_head_dim).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [c.qk_nope, c.qk_rope], dim=-1)
        kv = lin(p + ".kv_a_proj_with_mqa", x)
        k_pass, k_rot = torch.split(kv, [c.kv_lora_rank, c.qk_rope], dim=-1)
        k_pass = lin(p + ".kv_b_proj", rms_norm(k_pass, self.t[p + ".kv_a_layernorm.weight"], c.eps))
        k_pass = k_pass.view(b, s, -1, c.qk_nope + c.v_head_dim).transpose(1, 2)
        k_pass, v = torch.split(k_pass, [c.qk_nope, c.v_head_dim], dim=-1)
        k_rot = k_rot.view(b, 1, s, c.qk_rope)
        q_rot, k_rot = apply_rope(q_rot, k_rot, cos, sin, interleave=c.rope_interleave)
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        qs = torch.cat((q_pass, q_rot), dim=-1)
        ks = torch.cat((k_pass, k_rot), dim=-1)
        o = eager_attention(qs, ks, v, c.qk_head_dim ** -0.5, 1, mask)
        return lin(p + ".o_proj", o.reshape(b, s, -1).contiguous())

    # -- the model ------------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, dtype=None) -> torch.Tensor:
        """Logits ``[1, S, V]`` for token ids ``[S]`` (one sequence, no padding, no cache)."""
        c = self.cfg
        ids = input_ids.view(1, -1)
        h = F.embedding(ids, self.t["model.embed_tokens.weight"])
        dtype = h.dtype if dtype is None else dtype
        s = ids.shape[1]
        positions = torch.arange(s).unsqueeze(0)
        cos, sin = rope_cos_sin(c.head_dim, c.rope_theta, positions, dtype)
        mask = causal_mask(s, dtype)
        for layer in range(c.layers):
            p = f"model.layers.{layer}"
            res = h
            h = rms_norm(h, self.t[p + ".input_layernorm.weight"], c.eps)
            h = res + self.attention(p + ".self_attn", h, cos, sin, mask)
            res = h
            h = rms_norm(h, self.t[p + ".post_attention_layernorm.weight"], c.eps)
            h = self.moe(p + ".mlp", h, layer) if c.is_moe_layer(layer) else self.mlp(p + ".mlp", h)
            h = res + h
        h = rms_norm(h, self.t["model.norm.weight"], c.eps)
        head = "model.embed_tokens" if c.tie_embeddings and "lm_head.weight" not in self.t else "lm_head"
        return self.ex.linear(head, h) if head == "lm_head" else F.linear(h, self.t[head + ".weight"])
