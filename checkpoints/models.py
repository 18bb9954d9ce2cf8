"""Tensor lists of DeepSeek-V3-style and DeepSeek-V4-style models, generated from a ``config.json``.

Used to apply quantization recipes to a model's Linear modules (:mod:`.recipes`), to write
synthetic checkpoints (:mod:`.writer`) and to count parameters (:mod:`deployment.estimate`).
Shapes are ``nn.Linear`` ``[out, in]``.

DeepSeek-V3 (HF names, ``model.layers.{L}...``)::

    self_attn.q_a_proj [q_lora, H]        (q_proj [heads*(nope+rope), H] when q_lora_rank is null)
    self_attn.q_a_layernorm [q_lora]      self_attn.q_b_proj [heads*(nope+rope), q_lora]
    self_attn.kv_a_proj_with_mqa [kv_lora+rope, H]   self_attn.kv_a_layernorm [kv_lora]
    self_attn.kv_b_proj [heads*(nope+v), kv_lora]    self_attn.o_proj [H, heads*v]
    input_layernorm, post_attention_layernorm [H]
    L < first_k_dense_replace: mlp.{gate,up}_proj [inter, H], mlp.down_proj [H, inter]
    otherwise: mlp.gate [E, H] + e_score_correction_bias [E]; mlp.experts.{e}.{gate,up}_proj [I, H],
               down_proj [H, I]; mlp.shared_experts.* with I * n_shared
    model.embed_tokens [V, H], model.norm [H], lm_head [V, H]
    MTP layer N+i: a full layer plus enorm, hnorm [H], eh_proj [H, 2H], shared_head.norm [H],
               shared_head.head [V, H], embed_tokens [V, H]

DeepSeek-V4 (native names; the layout of public DSV4 weight-conversion code — the exact ``wo_a`` /
``hc_*`` shapes are not confirmed by the sources read, names are)::

    layers.{L}.attn.wq_a [q_lora, H], wq_b [heads*head_dim, q_lora], wkv [head_dim, H],
        wo_a [o_groups*o_lora, heads*head_dim/o_groups], wo_b [H, o_groups*o_lora],
        q_norm [q_lora], kv_norm [head_dim], attn_sink [heads]
      compress_ratios[L] != 0: attn.compressor.{wkv,wgate} [c*head_dim, H] (c = 2 if ratio == 4
        else 1), compressor.ape [ratio, c*head_dim], compressor.norm [head_dim]
      compress_ratios[L] == 4: attn.indexer.wq_b [idx_heads*idx_dim, q_lora],
        indexer.weights_proj [idx_heads, H], indexer.compressor.{wkv,wgate} [2*idx_dim, H], ...
    layers.{L}.ffn.gate [E, H] (+ tid2eid [V, k] for L < num_hash_layers, else bias [E]),
        ffn.experts.{e}.{w1,w3} [I, H], w2 [H, I]; ffn.shared_experts.* with I * n_shared
    layers.{L}.{attn_norm, ffn_norm} [H]; hc_{attn,ffn}_{fn [m, hc*H], base [m], scale [3]},
        m = (2 + hc) * hc
    embed [V, H], head [V, H], norm [H], hc_head_{fn [hc, hc*H], base [hc], scale [1]}
    mtp.{i}: a full block (compress ratio index num_hidden_layers + i) plus e_proj, h_proj [H, H],
        enorm, hnorm, norm [H], hc_head_*
"""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("linear", "expert", "router", "embedding", "lm_head", "norm", "other")


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a model: name, shape, role; ``mtp`` for multi-token-prediction layers."""

    name: str
    shape: tuple[int, ...]
    role: str
    mtp: bool = False
    layer: int | None = None      # decoder-layer index (MTP: num_hidden_layers + i)
    integer: bool = False         # an index table (tid2eid), not a float parameter

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def module(self) -> str | None:
        """The Linear module this is the ``.weight`` of (None for anything else)."""
        if self.role in ("linear", "expert", "router", "lm_head") and self.name.endswith(".weight"):
            return self.name[: -len(".weight")]
        return None


def _get(config: dict, key: str, *alts, default=None, required=True):
    for k in (key,) + alts:
        if k in config and config[k] is not None:
            return config[k]
    if required and default is None:
        raise ValueError(f"config: {key!r} is required for this architecture; got none "
                         f"(keys present: {', '.join(sorted(config)[:20])}...)")
    return default


def _int(config: dict, key: str, *alts, default=None, required=True) -> int:
    value = _get(config, key, *alts, default=default, required=required)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"config: {key!r} must be a non-negative integer; got {value!r}")
    return value


def architecture(config: dict) -> str:
    """``"deepseek_v4"`` or ``"deepseek_v3"`` (V2/V3/V3.2/Kimi-K2 style MLA + MoE)."""
    if not isinstance(config, dict):
        raise ValueError(f"config: must be a dict (a loaded config.json); got {type(config).__name__}")
    model_type = str(config.get("model_type", ""))
    archs = config.get("architectures") or []
    if model_type.startswith("deepseek_v4") or any("DeepseekV4" in a for a in archs) or "compress_ratios" in config:
        return "deepseek_v4"
    if "kv_lora_rank" in config or model_type in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"):
        return "deepseek_v3"
    raise ValueError(f"config: cannot tell the architecture (model_type {model_type!r}, architectures {archs}); "
                     "supported: DeepSeek-V3-style (kv_lora_rank) and DeepSeek-V4-style (compress_ratios)")


def model_tensors(config: dict) -> list[TensorSpec]:
    """Every tensor of the model described by ``config`` (see the module docstring)."""
    arch = architecture(config)
    return deepseek_v4_tensors(config) if arch == "deepseek_v4" else deepseek_v3_tensors(config)


def linear_modules(tensors: list[TensorSpec]) -> list[str]:
    """Names of the Linear modules (what a recipe's include/exclude globs are matched against)."""
    return [t.module for t in tensors if t.module is not None]


# -- DeepSeek-V3 ------------------------------------------------------------------------------------

def deepseek_v3_tensors(config: dict) -> list[TensorSpec]:
    h = _int(config, "hidden_size")
    n_layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    q_lora = _get(config, "q_lora_rank", required=False)
    kv_lora = _int(config, "kv_lora_rank")
    nope, rope, v = (_int(config, k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    inter = _int(config, "intermediate_size")
    moe_inter = _int(config, "moe_intermediate_size")
    n_exp = _int(config, "n_routed_experts")
    n_shared = _int(config, "n_shared_experts", default=0, required=False)
    first_dense = _int(config, "first_k_dense_replace", default=0, required=False)
    vocab = _int(config, "vocab_size")
    n_mtp = _int(config, "num_nextn_predict_layers", default=0, required=False)
    out: list[TensorSpec] = [TensorSpec("model.embed_tokens.weight", (vocab, h), "embedding")]

    def add(name, shape, role, layer, mtp):
        out.append(TensorSpec(name, shape, role, mtp, layer))

    for layer in range(n_layers + n_mtp):
        mtp = layer >= n_layers
        p = f"model.layers.{layer}"
        a = f"{p}.self_attn"
        if q_lora:
            add(f"{a}.q_a_proj.weight", (q_lora, h), "linear", layer, mtp)
            add(f"{a}.q_a_layernorm.weight", (q_lora,), "norm", layer, mtp)
            add(f"{a}.q_b_proj.weight", (heads * (nope + rope), q_lora), "linear", layer, mtp)
        else:
            add(f"{a}.q_proj.weight", (heads * (nope + rope), h), "linear", layer, mtp)
        add(f"{a}.kv_a_proj_with_mqa.weight", (kv_lora + rope, h), "linear", layer, mtp)
        add(f"{a}.kv_a_layernorm.weight", (kv_lora,), "norm", layer, mtp)
        add(f"{a}.kv_b_proj.weight", (heads * (nope + v), kv_lora), "linear", layer, mtp)
        add(f"{a}.o_proj.weight", (h, heads * v), "linear", layer, mtp)
        add(f"{p}.input_layernorm.weight", (h,), "norm", layer, mtp)
        add(f"{p}.post_attention_layernorm.weight", (h,), "norm", layer, mtp)
        if layer < first_dense:
            _mlp(add, f"{p}.mlp", ("gate_proj", "up_proj", "down_proj"), h, inter, "linear", layer, mtp)
        else:
            add(f"{p}.mlp.gate.weight", (n_exp, h), "router", layer, mtp)
            add(f"{p}.mlp.gate.e_score_correction_bias", (n_exp,), "other", layer, mtp)
            for e in range(n_exp):
                _mlp(add, f"{p}.mlp.experts.{e}", ("gate_proj", "up_proj", "down_proj"), h, moe_inter, "expert",
                     layer, mtp)
            if n_shared:
                _mlp(add, f"{p}.mlp.shared_experts", ("gate_proj", "up_proj", "down_proj"), h, moe_inter * n_shared,
                     "linear", layer, mtp)
        if mtp:
            add(f"{p}.enorm.weight", (h,), "norm", layer, mtp)
            add(f"{p}.hnorm.weight", (h,), "norm", layer, mtp)
            add(f"{p}.eh_proj.weight", (h, 2 * h), "linear", layer, mtp)
            add(f"{p}.shared_head.norm.weight", (h,), "norm", layer, mtp)
            add(f"{p}.shared_head.head.weight", (vocab, h), "lm_head", layer, mtp)
            add(f"{p}.embed_tokens.weight", (vocab, h), "embedding", layer, mtp)
    out.append(TensorSpec("model.norm.weight", (h,), "norm"))
    out.append(TensorSpec("lm_head.weight", (vocab, h), "lm_head"))
    return out


def _mlp(add, prefix, names, h, inter, role, layer, mtp):
    gate, up, down = names
    add(f"{prefix}.{gate}.weight", (inter, h), role, layer, mtp)
    add(f"{prefix}.{up}.weight", (inter, h), role, layer, mtp)
    add(f"{prefix}.{down}.weight", (h, inter), role, layer, mtp)


# -- DeepSeek-V4 ------------------------------------------------------------------------------------

def deepseek_v4_tensors(config: dict) -> list[TensorSpec]:
    h = _int(config, "hidden_size", "dim")
    n_layers = _int(config, "num_hidden_layers", "n_layers")
    heads = _int(config, "num_attention_heads", "n_heads")
    head_dim = _int(config, "head_dim")
    q_lora = _int(config, "q_lora_rank")
    o_lora = _int(config, "o_lora_rank")
    o_groups = _int(config, "o_groups")
    moe_inter = _int(config, "moe_intermediate_size", "moe_inter_dim")
    n_exp = _int(config, "n_routed_experts")
    n_shared = _int(config, "n_shared_experts", default=0, required=False)
    topk = _int(config, "num_experts_per_tok", "n_activated_experts")
    n_hash = _int(config, "num_hash_layers", "n_hash_layers", default=0, required=False)
    vocab = _int(config, "vocab_size")
    n_mtp = _int(config, "num_nextn_predict_layers", "n_mtp_layers", default=0, required=False)
    hc = _int(config, "hc_mult", default=1, required=False)
    ratios = list(_get(config, "compress_ratios", default=[], required=False))
    if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ratios):
        raise ValueError(f"config: 'compress_ratios' must be a list of integers; got {ratios!r}")
    idx_heads = _int(config, "index_n_heads", default=0, required=any(r == 4 for r in ratios))
    idx_dim = _int(config, "index_head_dim", default=0, required=any(r == 4 for r in ratios))
    if heads * head_dim % max(o_groups, 1):
        raise ValueError(f"config: num_attention_heads * head_dim ({heads * head_dim}) must divide into o_groups "
                         f"({o_groups})")
    mix = (2 + hc) * hc
    out: list[TensorSpec] = [TensorSpec("embed.weight", (vocab, h), "embedding"),
                             TensorSpec("head.weight", (vocab, h), "lm_head"),
                             TensorSpec("norm.weight", (h,), "norm"),
                             TensorSpec("hc_head_fn", (hc, hc * h), "other"),
                             TensorSpec("hc_head_base", (hc,), "other"),
                             TensorSpec("hc_head_scale", (1,), "other")]
    for i in range(n_layers + n_mtp):
        mtp = i >= n_layers
        p = f"mtp.{i - n_layers}" if mtp else f"layers.{i}"
        ratio = ratios[i] if i < len(ratios) else 0

        def add(name, shape, role):
            out.append(TensorSpec(f"{p}.{name}", tuple(shape), role, mtp, i, name.endswith("tid2eid")))

        add("attn_norm.weight", (h,), "norm")
        add("ffn_norm.weight", (h,), "norm")
        for part in ("attn", "ffn"):
            add(f"hc_{part}_fn", (mix, hc * h), "other")
            add(f"hc_{part}_base", (mix,), "other")
            add(f"hc_{part}_scale", (3,), "other")
        add("attn.attn_sink", (heads,), "other")
        add("attn.wq_a.weight", (q_lora, h), "linear")
        add("attn.q_norm.weight", (q_lora,), "norm")
        add("attn.wq_b.weight", (heads * head_dim, q_lora), "linear")
        add("attn.wkv.weight", (head_dim, h), "linear")
        add("attn.kv_norm.weight", (head_dim,), "norm")
        add("attn.wo_a.weight", (o_groups * o_lora, heads * head_dim // o_groups), "linear")
        add("attn.wo_b.weight", (h, o_groups * o_lora), "linear")
        if ratio:
            c = 2 if ratio == 4 else 1
            add("attn.compressor.wkv.weight", (c * head_dim, h), "linear")
            add("attn.compressor.wgate.weight", (c * head_dim, h), "linear")
            add("attn.compressor.ape", (ratio, c * head_dim), "other")
            add("attn.compressor.norm.weight", (head_dim,), "norm")
            if ratio == 4:
                add("attn.indexer.wq_b.weight", (idx_heads * idx_dim, q_lora), "linear")
                add("attn.indexer.weights_proj.weight", (idx_heads, h), "linear")
                add("attn.indexer.compressor.wkv.weight", (2 * idx_dim, h), "linear")
                add("attn.indexer.compressor.wgate.weight", (2 * idx_dim, h), "linear")
                add("attn.indexer.compressor.ape", (ratio, 2 * idx_dim), "other")
                add("attn.indexer.compressor.norm.weight", (idx_dim,), "norm")
        add("ffn.gate.weight", (n_exp, h), "router")
        if i < n_hash:
            add("ffn.gate.tid2eid", (vocab, topk), "other")
        else:
            add("ffn.gate.bias", (n_exp,), "other")
        for e in range(n_exp):
            for w, shape in (("w1", (moe_inter, h)), ("w2", (h, moe_inter)), ("w3", (moe_inter, h))):
                add(f"ffn.experts.{e}.{w}.weight", shape, "expert")
        if n_shared:
            si = moe_inter * n_shared
            for w, shape in (("w1", (si, h)), ("w2", (h, si)), ("w3", (si, h))):
                add(f"ffn.shared_experts.{w}.weight", shape, "linear")
        if mtp:
            add("e_proj.weight", (h, h), "linear")
            add("h_proj.weight", (h, h), "linear")
            add("enorm.weight", (h,), "norm")
            add("hnorm.weight", (h,), "norm")
            add("norm.weight", (h,), "norm")
            add("hc_head_fn", (hc, hc * h), "other")
            add("hc_head_base", (hc,), "other")
            add("hc_head_scale", (1,), "other")
    return out


# -- small configs for tests and examples -------------------------------------------------------------

def tiny_config(naming: str = "v4", *, layers: int = 2, experts: int = 8, hidden: int = 256, moe_inter: int = 128,
                mtp: int = 0, vocab: int = 512, dtype: str = "bfloat16") -> dict:
    """A small DeepSeek config (``naming`` "v3": DeepSeek-V3 HF names; "v4": DeepSeek-V4 native).

    V3: the first layer is dense when ``layers`` > 1. V4: compress ratios cycle 4, 128, 0 so that a
    two-layer model has a compressor + indexer layer and a compressor-only layer; the first layer
    routes by hash.
    """
    common = {"hidden_size": hidden, "num_hidden_layers": layers, "moe_intermediate_size": moe_inter,
              "n_routed_experts": experts, "n_shared_experts": 1, "num_experts_per_tok": 2,
              "vocab_size": vocab, "num_nextn_predict_layers": mtp, "torch_dtype": dtype}
    if naming == "v3":
        return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", **common,
                "num_attention_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                "qk_rope_head_dim": 16, "v_head_dim": 16, "intermediate_size": 2 * moe_inter,
                "first_k_dense_replace": 1 if layers > 1 else 0}
    if naming == "v4":
        return {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", **common,
                "num_attention_heads": 4, "head_dim": 64, "q_lora_rank": 128, "o_lora_rank": 64, "o_groups": 2,
                "compress_ratios": [(4, 128, 0)[i % 3] for i in range(layers + mtp)],
                "index_n_heads": 4, "index_head_dim": 32, "num_hash_layers": 1, "hc_mult": 2,
                "swiglu_limit": 10.0}
    raise ValueError(f"tiny_config: argument 'naming' must be 'v3' or 'v4'; got {naming!r}")


# -- presets ------------------------------------------------------------------------------------------

PRESETS: dict[str, dict] = {
    # DeepSeek-V3 (HF config.json of deepseek-ai/DeepSeek-V3). Published: 671B total, 37B activated
    # (685B with the 14B MTP module).
    "deepseek-v3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "torch_dtype": "bfloat16",
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "first_k_dense_replace": 3, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "num_nextn_predict_layers": 1,
    },
    # DeepSeek-V4-Flash. hidden / layers / experts / top-k / moe_intermediate as in msModelSlim's ``ModelArgs`` and HF's
    # ``DeepseekV4Config`` defaults; attention
    # dims (heads 64 x 512, q_lora 1024, indexer 64 x 128, compress ratios 0, 0, then 4 / 128
    # alternating) from public DSV4 configs quoted in serving code; o_lora_rank 1024 and o_groups 8 are
    # not confirmed. Published: 284B total, 13B activated — this preset counts 284.3B / 13.3B.
    "deepseek-v4-flash": {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "torch_dtype": "bfloat16",
        "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64, "head_dim": 512,
        "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8, "moe_intermediate_size": 2048,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6, "num_hash_layers": 3,
        "vocab_size": 129280, "num_nextn_predict_layers": 1, "hc_mult": 4, "index_n_heads": 64,
        "index_head_dim": 128, "swiglu_limit": 10.0,
        "compress_ratios": [0, 0] + [4 if i % 2 == 0 else 128 for i in range(41)] + [0],
    },
}
"""Full-size configs by name (``w8a8 estimate --config deepseek-v4-flash``)."""
