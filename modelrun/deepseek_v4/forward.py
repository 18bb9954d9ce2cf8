"""A plain-torch DeepSeek-V4 forward from the checkpoint's own tensor names (one sequence, no cache).

``logits = Model(cfg, tensors, readings=..., executor=...).forward(input_ids)``. ``tensors``: the
native names of a DeepSeek-V4 release (``embed.weight``, ``layers.N.attn.wq_a.weight``,
``layers.N.ffn.experts.E.w1.weight``, ``layers.N.hc_attn_fn``, ``mtp.0.e_proj.weight``...). Every Linear
goes through ``executor.linear(name, x)`` (a fused gate / up pair through ``executor.linear_pair``),
the routed experts of an MoE block through ``executor.moe(prefix, x, input_ids, layer)`` (None: the float
router and experts here; else the routed output, scaled) and each expert's SwiGLU through
``executor.act(prefix, gate, up, limit)`` (None: torch's), so a run can put modules on a backend's
serving path. Where the references disagree the :class:`~.readings.Readings` decide.

One layer, in order of operations (``h``: the ``hc_mult`` residual streams ``[1, S, hc, D]``):

* **hyper-connection** ``hc_pre``: ``xf = flatten(h)`` in fp32; ``mixes = xf @ fn^T``, RMS-normalised
  (``hc_norm``: the mixes scaled by ``rsqrt(mean xf^2 + eps)``, or xf normalised first); ``pre =
  sigmoid(scale0 * mixes[:hc] + base) (+ hc_eps)``, ``post = 2 sigmoid(scale1 * mixes[hc:2hc] + base)``,
  ``comb = softmax(scale2 * mixes[2hc:] + base) + hc_eps``, Sinkhorn (``sinkhorn``); the sublayer input
  ``sum_i pre_i h_i`` cast to the model dtype; ``hc_post``: ``h'_j = post_j x + sum_i comb_ij h_i``;
* **attention**: ``q = wq_b(q_norm(wq_a(x)))`` per head unweighted-RMS-normalised, RoPE on the last
  ``qk_rope_head_dim`` dims (interleaved pairs); ``kv = kv_norm(wkv(x))`` + RoPE, the one K = V head;
  keys = the sliding window (``sliding_window`` tokens up to the query) plus, on ratio-4 layers, the
  compressed entries the lightning indexer picks (top ``index_topk``), on ratio-128 layers every causal
  compressed entry; softmax with the per-head ``attn_sink`` in the denominator, scale ``head_dim^-0.5``;
  inverse RoPE on the output; ``wo_a`` as a grouped projection (``o_groups``), ``wo_b``. Sliding layers
  use RoPE base ``rope_theta``; compressed layers ``compress_rope_theta`` with YaRN;
* **compressor** (ratio ``m``): ``kv = wkv(x)``, ``score = wgate(x) + ape``; each window of ``m`` tokens
  gives one entry ``sum softmax(score) * kv`` (ratio 4: overlapping, over the previous window's first
  half and this window's second half); ``norm``, RoPE at position ``i * m``; entry ``i`` is visible
  from position ``p`` when ``i < (p + 1) // m``;
* **indexer** (ratio 4): ``q = indexer.wq_b(q_norm output)`` + RoPE, its own overlapping compressor
  (``index_head_dim``), ``score_t = sum_h relu(q_h . k_t) * weights_proj(x)_h * index_head_dim^-0.5 *
  index_n_heads^-0.5`` (``indexer``: Hadamard-rotated q / k or not), causal, top-k;
* **MoE**: ``logits = x @ gate^T`` (``router_logits``), ``s = sqrt(softplus(logits))`` in fp32; the
  first ``num_hash_layers`` layers take ``tid2eid[input_ids]``, the others ``topk(s + gate.bias)``
  (bias for selection only); ``w = s[ids] / sum`` (``router_topk``), ``* routed_scaling_factor``
  (``route_scale_at``); experts ``w2(silu(min(w1 x, L)) * clamp(w3 x, -L, L))`` (``expert_math``) summed
  in fp32 in expert order; plus the shared expert (``shared_expert_clamp``);
* after the last layer ``hc_head`` (``pre = sigmoid(mixes * scale + base) + hc_eps``), ``norm``, ``head``.

MTP (``forward_mtp``): ``e = e_proj(enorm(embed(ids shifted left by one, last = argmax of the main
logits)))``, ``g = h_proj(hnorm(hc_head(h)))``, ``e + g`` repeated to the streams, one ratio-0 block
``mtp.0``, its ``hc_head``, ``norm`` and the shared ``head``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from .config import DSV4Config
from .readings import OFFICIAL, Readings

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _hadamard(n: int, dtype) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h.to(dtype)


def rotate_activation(x: torch.Tensor) -> torch.Tensor:
    """The indexer's Hadamard rotation: ``x @ H * d^-0.5`` (zero-padded to a power of two, then cut)."""
    d = x.shape[-1]
    n = 1 << max(0, math.ceil(math.log2(d)))
    xp = F.pad(x, (0, n - d)) if n != d else x
    return (F.linear(xp, _hadamard(n, x.dtype)) * d ** -0.5)[..., :d]


def inv_freq(cfg: DSV4Config, compressed: bool) -> torch.Tensor:
    """RoPE inverse frequencies (``rope_dim / 2``): base ``rope_theta``, or ``compress_rope_theta`` with YaRN."""
    dim = cfg.rope_dim
    base = cfg.compress_rope_theta if compressed else cfg.rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float) / dim)
    if not compressed or cfg.yarn is None:
        return 1.0 / pos_freqs
    y = cfg.yarn
    corr = lambda rot: dim * math.log(y["original_max_position_embeddings"] / (rot * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
    low, high = max(math.floor(corr(y["beta_fast"])), 0), min(math.ceil(corr(y["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extra = 1 - ramp
    return (1.0 / (y["factor"] * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra


class Rope:
    """cos / sin ``[P, rope_dim / 2]`` at positions ``P`` for one base, applied per :attr:`Readings.rope`."""

    def __init__(self, freqs: torch.Tensor, positions: torch.Tensor, dtype, reading: str):
        ang = (freqs[None, :, None].float() @ positions[None, None, :].float()).transpose(1, 2)[0]
        self.cos, self.sin = ang.cos(), ang.sin()
        self.dtype, self.reading = dtype, reading

    def apply(self, x: torch.Tensor, inverse: bool = False, seq_dim: int = -2) -> torch.Tensor:
        """RoPE on the trailing ``rope_dim`` channels of ``x`` (positions along ``seq_dim``)."""
        rd = 2 * self.cos.shape[-1]
        shape = [1] * x.dim()
        shape[seq_dim] = self.cos.shape[0]
        shape[-1] = rd
        nope, rope = x[..., :-rd], x[..., -rd:]
        sin = -self.sin if inverse else self.sin
        if self.reading == "hf":
            c = self.cos.to(self.dtype).repeat_interleave(2, -1).view(shape)
            s = sin.to(self.dtype).repeat_interleave(2, -1).view(shape)
            rot = torch.stack((-rope[..., 1::2], rope[..., 0::2]), dim=-1).flatten(-2)
            out = ((rope.float() * c) + (rot.float() * s)).to(x.dtype)
        else:
            half = list(shape)
            half[-1] = rd // 2
            c, s = self.cos.view(half), sin.view(half)
            re, im = rope.float()[..., 0::2], rope.float()[..., 1::2]
            out = torch.stack((re * c - im * s, re * s + im * c), dim=-1).flatten(-2).to(x.dtype)
        return torch.cat([nope, out], dim=-1)


class FloatExecutor:
    """The float model: ``F.linear(x, W)`` from ``tensors`` (W cast to x's dtype), torch SwiGLU, float experts."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        self.tensors = tensors

    def linear(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.tensors[name + ".weight"].to(x.dtype))

    def linear_pair(self, a: str, b: str, x: torch.Tensor):
        """Two Linears on one input as one GEMM over the stacked weights (a fused ``gate_up_proj``)."""
        wa, wb = self.tensors[a + ".weight"], self.tensors[b + ".weight"]
        return F.linear(x, torch.cat([wa, wb]).to(x.dtype)).split([wa.shape[0], wb.shape[0]], dim=-1)

    def act(self, prefix: str, gate: torch.Tensor, up: torch.Tensor, limit: float | None) -> torch.Tensor | None:
        return None

    def moe(self, prefix: str, x: torch.Tensor, ids: torch.Tensor, layer: int):
        return None


class Model:
    """The forward (module docstring). ``observe``: optional callable ``(event, name, **data)`` — events
    ``"attention"`` (variant, entries), ``"router"`` (ids, weights, hashed), ``"streams"`` (h after a layer)."""

    def __init__(self, cfg: DSV4Config, tensors: Mapping[str, torch.Tensor], *, readings: Readings = OFFICIAL,
                 executor=None, observe=None):
        self.cfg, self.t, self.r = cfg, tensors, readings
        self.ex = executor if executor is not None else FloatExecutor(tensors)
        self.observe = observe or (lambda *a, **k: None)

    # -- small ops --------------------------------------------------------------------------------
    def norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w, dtype = self.t[name + ".weight"], x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.cfg.eps)
        if self.r.rms_norm == "hf":
            return w.to(dtype) * h.to(dtype)
        return (w.float() * h).to(dtype)

    def _unweighted(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + self.cfg.eps).to(x.dtype)

    # -- hyper-connections -----------------------------------------------------------------------
    def _mixes(self, h: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
        xf = h.flatten(2).float()
        if self.r.hc_norm == "input":
            return F.linear(self._unweighted(xf), fn.float())
        return F.linear(xf, fn.float()) * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.cfg.eps)

    def hc_pre(self, h: torch.Tensor, p: str, site: str):
        c, hc = self.cfg, self.cfg.hc_mult
        fn, base, scale = (self.t[f"{p}.hc_{site}_{k}"].float() for k in ("fn", "base", "scale"))
        mixes = self._mixes(h, fn)
        pre = torch.sigmoid(mixes[..., :hc] * scale[0] + base[:hc])
        post = 2 * torch.sigmoid(mixes[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
        logits = mixes[..., 2 * hc:].view(*mixes.shape[:-1], hc, hc) * scale[2] + base[2 * hc:].view(hc, hc)
        comb = torch.softmax(logits, dim=-1) + c.hc_eps
        if self.r.sinkhorn == "official":
            pre = pre + c.hc_eps
            comb = comb / (comb.sum(dim=-2, keepdim=True) + c.hc_eps)
            iters = c.hc_iters - 1
        else:
            iters = c.hc_iters
        for _ in range(iters):
            comb = comb / (comb.sum(dim=-1, keepdim=True) + c.hc_eps)
            comb = comb / (comb.sum(dim=-2, keepdim=True) + c.hc_eps)
        collapsed = (pre.unsqueeze(-1) * h).sum(dim=2).to(h.dtype)
        return collapsed, post, comb

    def hc_post(self, x: torch.Tensor, h: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
        dtype = h.dtype
        return post.to(dtype).unsqueeze(-1) * x.unsqueeze(-2) + torch.matmul(comb.to(dtype).transpose(-1, -2), h)

    def hc_head(self, h: torch.Tensor, p: str = "") -> torch.Tensor:
        fn, base, scale = (self.t[f"{p}hc_head_{k}"].float() for k in ("fn", "base", "scale"))
        pre = torch.sigmoid(self._mixes(h, fn) * scale + base) + self.cfg.hc_eps
        return (pre.unsqueeze(-1) * h).sum(dim=2).to(h.dtype)

    # -- attention --------------------------------------------------------------------------------
    def _compress(self, p: str, x: torch.Tensor, ratio: int, dim: int, overlap: bool, rotate: bool) -> torch.Tensor:
        """Compressed entries ``[1, T, dim]`` (T = S // ratio) of compressor ``p``."""
        dtype = x.dtype
        xin = x.float() if self.r.compressor_dtype == "fp32" else x
        kv, gate = self.ex.linear(p + ".wkv", xin), self.ex.linear(p + ".wgate", xin)
        s = x.shape[1]
        n = s // ratio
        if n == 0:
            return x.new_zeros((1, 0, dim))
        kv = kv[:, :n * ratio].view(1, n, ratio, -1)
        gate = gate[:, :n * ratio].view(1, n, ratio, -1) + self.t[p + ".ape"].to(gate.dtype)
        if overlap:
            new_kv = kv.new_zeros((1, n, 2 * ratio, dim))
            new_gate = gate.new_full((1, n, 2 * ratio, dim), float("-inf"))
            new_kv[:, :, ratio:], new_gate[:, :, ratio:] = kv[..., dim:], gate[..., dim:]
            if n > 1:
                new_kv[:, 1:, :ratio], new_gate[:, 1:, :ratio] = kv[:, :-1, :, :dim], gate[:, :-1, :, :dim]
            kv, gate = new_kv, new_gate
        if self.r.compressor_dtype == "fp32":
            pooled = (kv * gate.softmax(dim=2)).sum(dim=2).to(dtype)
        else:
            pooled = (kv * gate.softmax(dim=2, dtype=torch.float32).to(kv.dtype)).sum(dim=2)
        rope = Rope(inv_freq(self.cfg, True), torch.arange(n) * ratio, dtype, self.r.rope)     # entry i at i * ratio
        out = rope.apply(self.norm(pooled, p + ".norm"), seq_dim=1)
        return rotate_activation(out) if rotate else out

    def _indexer(self, p: str, x: torch.Tensor, q_res: torch.Tensor, rope_q: Rope) -> torch.Tensor:
        """Top-k compressed entry ids ``[S, k]`` per query (-1: none), ratio 4."""
        c, s = self.cfg, x.shape[1]
        official = self.r.indexer == "official"
        keys = self._compress(p + ".compressor", x, 4, c.index_dim, True, official)             # [1, T, d]
        q = self.ex.linear(p + ".wq_b", q_res).view(1, s, c.index_heads, c.index_dim)
        q = rope_q.apply(q, seq_dim=1)
        w = self.ex.linear(p + ".weights_proj", x)
        if official:
            q = rotate_activation(q)
            w = w * (c.index_dim ** -0.5 * c.index_heads ** -0.5)
            scores = torch.einsum("bshd,btd->bsht", q, keys.to(q.dtype))
            scores = (scores.relu() * w.unsqueeze(-1)).sum(dim=2)[0].float()
        else:
            scores = F.relu(torch.matmul(q.float(), keys.transpose(-1, -2).float().unsqueeze(1))) * c.index_dim ** -0.5
            scores = (scores * (w.float() * c.index_heads ** -0.5).unsqueeze(-1)).sum(dim=2)[0]
        t = keys.shape[1]
        k = min(c.index_topk, t)
        thr = (torch.arange(s) + 1) // 4
        scores = scores.masked_fill(torch.arange(t)[None, :] >= thr[:, None], float("-inf"))
        top = scores.topk(k, dim=-1).indices
        return torch.where(top >= thr[:, None], torch.full_like(top, -1), top)

    def attention(self, p: str, x: torch.Tensor, ratio: int, ropes: dict) -> torch.Tensor:
        c, r = self.cfg, self.r
        s, dtype = x.shape[1], x.dtype
        rope = ropes[ratio != 0]
        q_res = self.norm(self.ex.linear(p + ".wq_a", x), p + ".q_norm")
        q = self.ex.linear(p + ".wq_b", q_res).view(1, s, c.heads, c.head_dim).transpose(1, 2)   # [1, H, S, d]
        q = rope.apply(self._unweighted(q))
        kv = rope.apply(self.norm(self.ex.linear(p + ".wkv", x), p + ".kv_norm").view(1, 1, s, c.head_dim))
        pos = torch.arange(s)
        d = pos[:, None] - pos[None, :]
        allowed = (d >= 0) & (d < c.window)                                                   # [S, S]
        mask = torch.zeros(s, s, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        variant, entries = "sliding", 0
        if ratio:
            comp = self._compress(p + ".compressor", x, ratio, c.head_dim, ratio == 4, False)   # [1, T, d]
            t = comp.shape[1]
            entries = t
            thr = (pos + 1) // ratio
            if ratio == 4:
                variant = "sliding + indexed compressed (ratio 4)"
                top = self._indexer(p + ".indexer", x, q_res, rope)
                bias = torch.full((s, t + 1), float("-inf"), dtype=dtype)
                bias.scatter_(-1, torch.where(top >= 0, top, torch.full_like(top, t)), 0.0)
                bias = bias[:, :t]
            else:
                variant = "sliding + every compressed entry (ratio 128)"
                bias = torch.zeros(s, t, dtype=dtype).masked_fill(torch.arange(t)[None, :] >= thr[:, None],
                                                                  float("-inf"))
            kv = torch.cat([kv, comp.unsqueeze(1)], dim=2)
            mask = torch.cat([mask, bias], dim=-1)
        self.observe("attention", p, variant=variant, ratio=ratio, entries=entries)
        sink = self.t[p + ".attn_sink"]
        k = kv[:, :, None].expand(1, 1, c.heads, *kv.shape[2:]).reshape(1, c.heads, *kv.shape[2:])
        if r.attention_dtype == "fp32":
            logits = torch.matmul(q.float(), k.float().transpose(2, 3)) * c.head_dim ** -0.5 + mask.float()
        else:
            logits = torch.matmul(q, k.transpose(2, 3)) * c.head_dim ** -0.5 + mask
        sinks = sink.to(logits.dtype).reshape(1, -1, 1, 1).expand(1, -1, s, 1)
        comb = torch.cat([logits, sinks], dim=-1)
        comb = comb - comb.max(dim=-1, keepdim=True).values
        probs = F.softmax(comb, dim=-1, dtype=comb.dtype)[..., :-1]
        o = torch.matmul(probs, k.float()).to(dtype) if r.attention_dtype == "fp32" else \
            torch.matmul(probs.to(k.dtype), k)
        o = rope.apply(o, inverse=True).transpose(1, 2)                                        # [1, S, H, d]
        g = o.reshape(1, s, c.o_groups, -1)
        wa = self._wo_a(p, g)
        return self.ex.linear(p + ".wo_b", wa.flatten(2))

    def _wo_a(self, p: str, g: torch.Tensor) -> torch.Tensor:
        """The grouped ``wo_a``: group ``i`` of ``g [1, S, G, Din]`` times rows ``[i*o_lora, (i+1)*o_lora)``."""
        c = self.cfg
        grouped = getattr(self.ex, "grouped_linear", None)
        if grouped is not None:
            return grouped(p + ".wo_a", g, c.o_groups)
        w = self.t[p + ".wo_a.weight"].to(g.dtype).view(c.o_groups, -1, g.shape[-1]).transpose(1, 2)
        y = torch.bmm(g.reshape(-1, c.o_groups, g.shape[-1]).transpose(0, 1), w).transpose(0, 1)
        return y.reshape(1, g.shape[1], c.o_groups, -1)

    # -- MoE ----------------------------------------------------------------------------------------
    def route(self, p: str, x: torch.Tensor, ids: torch.Tensor, layer: int):
        """``(topk ids [T, k], weights fp32 [T, k], hashed)`` of MoE ``p`` on ``x [T, D]``."""
        c, r = self.cfg, self.r
        w = self.t[p + ".gate.weight"]
        logits = F.linear(x.float(), w.float()) if r.router_logits == "fp32" else F.linear(x, w.to(x.dtype))
        scores = F.softplus(logits.float()).sqrt() if r.router_logits == "fp32" else F.softplus(logits).sqrt()
        hashed = layer < c.hash_layers
        if hashed:
            top = self.t[p + ".gate.tid2eid"][ids].long()
        else:
            bias = self.t[p + ".gate.bias"].to(scores.dtype)
            top = torch.topk(scores + bias, c.top_k, dim=-1, sorted=r.router_topk == "official").indices
        weights = scores.gather(1, top)
        weights = weights / weights.sum(dim=-1, keepdim=True) if r.router_topk == "official" else \
            weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        if r.route_scale_at == "weights":
            weights = weights * c.routed_scaling_factor
        return top, weights, hashed

    def expert(self, p: str, x: torch.Tensor, weight: torch.Tensor | None, limit: float | None) -> torch.Tensor:
        lin = self.ex.linear
        if self.r.expert_math == "hf" or getattr(self.ex, "fuses_gate_up", False):   # one GEMM, then chunk
            gate, up = self.ex.linear_pair(p + ".w1", p + ".w3", x)
        else:
            gate, up = lin(p + ".w1", x), lin(p + ".w3", x)
        act = self.ex.act(p, gate, up, limit)
        if act is None:
            if self.r.expert_math == "official":
                gate, up = gate.float(), up.float()
            if limit is not None:
                up = up.clamp(min=-limit, max=limit)
                gate = gate.clamp(max=limit)
            act = F.silu(gate) * up
        if self.r.expert_math == "official":
            if weight is not None:
                act = weight * act
            return lin(p + ".w2", act.to(x.dtype))
        y = lin(p + ".w2", act.to(x.dtype))
        return y if weight is None else y * weight

    def moe(self, p: str, x: torch.Tensor, ids: torch.Tensor, layer: int) -> torch.Tensor:
        c, r = self.cfg, self.r
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        top, weights, hashed = self.route(p, h, ids, layer)
        self.observe("router", p, ids=top, weights=weights, hashed=hashed, x=h)
        routed = self.ex.moe(p, h, ids, layer)       # a serving path: its own router, scaled output
        if routed is None:
            official = r.expert_math == "official"
            y = torch.zeros_like(h, dtype=torch.float32 if official else h.dtype)
            slot_major = F.one_hot(top, num_classes=c.n_experts).permute(2, 1, 0)     # hf: [E, k, T]
            for e in range(c.n_experts):
                if official:
                    tok, slot = torch.where(top == e)
                else:
                    slot, tok = torch.where(slot_major[e])
                if tok.numel():
                    y.index_add_(0, tok, self.expert(f"{p}.experts.{e}", h[tok], weights[tok, slot, None],
                                                     c.swiglu_limit).to(y.dtype))
            routed = y
            if r.route_scale_at == "output":
                routed = routed * c.routed_scaling_factor
        shared = self.expert(p + ".shared_experts", h, None, c.swiglu_limit if r.shared_expert_clamp else None)
        if r.expert_math == "official":
            return (routed.float() + shared.float()).to(h.dtype).view(shape)
        return (routed.to(h.dtype) + shared).view(shape)

    # -- the model ----------------------------------------------------------------------------------
    def block(self, p: str, h: torch.Tensor, ids: torch.Tensor, layer: int, ratio: int, ropes) -> torch.Tensor:
        x, post, comb = self.hc_pre(h, p, "attn")
        h = self.hc_post(self.attention(p + ".attn", self.norm(x, p + ".attn_norm"), ratio, ropes), h, post, comb)
        x, post, comb = self.hc_pre(h, p, "ffn")
        h = self.hc_post(self.moe(p + ".ffn", self.norm(x, p + ".ffn_norm"), ids, layer), h, post, comb)
        self.observe("streams", p, h=h)
        return h

    def ropes(self, s: int, dtype) -> dict:
        pos = torch.arange(s)
        return {c: Rope(inv_freq(self.cfg, c), pos, dtype, self.r.rope) for c in (False, True)}

    def hidden(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The residual streams ``[1, S, hc, D]`` after the last layer."""
        c = self.cfg
        ids = input_ids.view(-1)
        emb = F.embedding(ids.view(1, -1), self.t["embed.weight"])
        h = emb.unsqueeze(2).expand(-1, -1, c.hc_mult, -1).contiguous()
        ropes = self.ropes(ids.numel(), emb.dtype)
        for layer in range(c.layers):
            h = self.block(f"layers.{layer}", h, ids, layer, c.ratio(layer), ropes)
        return h

    def logits(self, h: torch.Tensor, p: str = "") -> torch.Tensor:
        x = self.norm(self.hc_head(h, p), p + "norm")
        return self.ex.linear("head", x.to(self.t["head.weight"].dtype) if self.t["head.weight"].dtype == torch.float32
                              else x)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[1, S, V]`` for token ids ``[S]`` (one sequence, no padding, no cache)."""
        return self.logits(self.hidden(input_ids))

    def forward_mtp(self, input_ids: torch.Tensor, k: int = 0):
        """``(main logits, MTP logits)`` ``[1, S, V]`` each, MTP block ``mtp.k`` (module docstring)."""
        c = self.cfg
        ids = input_ids.view(-1)
        h = self.hidden(ids)
        main = self.logits(h)
        p = f"mtp.{k}"
        shifted = torch.cat([ids[1:], main[0, -1:].argmax(-1)])
        e = self.ex.linear(p + ".e_proj", self.norm(F.embedding(shifted.view(1, -1), self.t["embed.weight"]),
                                                    p + ".enorm"))
        g = self.ex.linear(p + ".h_proj", self.norm(self.hc_head(h), p + ".hnorm"))
        hm = (e + g).unsqueeze(2).expand(-1, -1, c.hc_mult, -1).contiguous()
        hm = self.block(p, hm, shifted, c.layers + k, c.ratio(c.layers + k), self.ropes(ids.numel(), hm.dtype))
        return main, self.logits(hm, p + ".")
