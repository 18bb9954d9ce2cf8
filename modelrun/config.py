"""The model families ``modelrun`` runs, read from a HF ``config.json``.

* ``qwen2`` (``Qwen2ForCausalLM``): GQA attention with q/k/v biases, SwiGLU MLP, RMSNorm, RoPE.
* ``qwen3`` (``Qwen3ForCausalLM``): as Qwen2 with per-head ``q_norm`` / ``k_norm``, optional
  ``attention_bias`` on every projection, an explicit ``head_dim``.
* ``deepseek_v3`` (``DeepseekV3ForCausalLM``, transformers' native implementation): MLA attention
  (``q_a_proj`` / ``q_b_proj`` or ``q_proj``, ``kv_a_proj_with_mqa`` + ``kv_a_layernorm`` +
  ``kv_b_proj``, interleaved or half-split RoPE on ``qk_rope_head_dim``), dense MLP for the first
  ``first_k_dense_replace`` layers, then MoE: routed experts with the grouped top-k sigmoid router
  (``e_score_correction_bias`` for selection only, ``n_group`` / ``topk_group``, ``norm_topk_prob``,
  ``routed_scaling_factor``) plus shared experts.

Anything these do not cover is refused with the reason (ValueError naming the config key): RoPE
scaling, sliding windows. DeepSeek-V4 has its own forward and run (:mod:`modelrun.deepseek_v4`, which
``w8a8 run`` dispatches to); this family table refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import config_values as _v

FAMILIES = {
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "DeepseekV3ForCausalLM": "deepseek_v3",
}
_MODEL_TYPES = {"qwen2": "qwen2", "qwen3": "qwen3", "deepseek_v3": "deepseek_v3"}
DTYPES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class ModelConfig:
    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    eps: float
    rope_theta: float
    dtype: str
    tie_embeddings: bool
    attention_bias: bool = False
    # DeepSeek-V3 (MLA + MoE)
    q_lora_rank: int | None = None      # None: a plain q_proj
    kv_lora_rank: int = 0
    qk_nope: int = 0                    # qk_nope_head_dim
    qk_rope: int = 0                    # qk_rope_head_dim (= head_dim, the RoPE width)
    v_head_dim: int = 0
    rope_interleave: bool = True        # transformers' apply_rotary_pos_emb_interleave
    moe_intermediate: int = 0
    n_experts: int = 0                  # routed experts
    n_shared: int = 0                   # shared experts (one MLP of n_shared * moe_intermediate)
    top_k: int = 0                      # num_experts_per_tok
    n_group: int = 1                    # expert groups of the router ...
    topk_group: int = 1                 # ... of which this many are kept
    norm_topk_prob: bool = True         # renormalise the chosen weights
    routed_scaling_factor: float = 1.0
    first_dense: int = 0                # first_k_dense_replace: dense MLP layers before the MoE ones
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    def is_moe_layer(self, layer: int) -> bool:
        return self.family == "deepseek_v3" and layer >= self.first_dense

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope + self.qk_rope


def _get(cfg: dict, key: str, kind=int, default=None, lo: int = 0):
    if kind is float:
        return _v.number(cfg, key, positive=True, default=default)
    return _v.integer(cfg, key, default=default, lo=lo)


def family_of(cfg: dict) -> str:
    """``"qwen2"`` / ``"qwen3"`` / ``"deepseek_v3"``; ValueError naming what came otherwise."""
    if not isinstance(cfg, dict):
        raise ValueError(f"config.json: must be a JSON object; got {type(cfg).__name__}")
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ValueError(f"config.json: 'architectures' must be a list of strings; got {_v.show(archs)}")
    for a in archs:
        if a in FAMILIES:
            return FAMILIES[a]
    mt = str(cfg.get("model_type", ""))
    if mt in _MODEL_TYPES:
        return _MODEL_TYPES[mt]
    if mt.startswith("deepseek_v4") or "compress_ratios" in cfg or any("DeepseekV4" in a for a in archs):
        raise ValueError("config.json: DeepSeek-V4 (model_type deepseek_v4) runs through modelrun.deepseek_v4 "
                         "(w8a8 run), not this family table (its activations for w8a8 inspect --verify are not "
                         "captured)")
    raise ValueError(f"config.json: architectures {archs} / model_type {mt!r} is not a family modelrun runs "
                     f"(supported: {', '.join(sorted(FAMILIES))})")


def model_dtype(cfg: dict) -> str:
    dt = cfg.get("torch_dtype", cfg.get("dtype", "float32"))
    if not isinstance(dt, str) or dt not in DTYPES:
        raise ValueError(f"config.json: 'torch_dtype' must be one of {DTYPES}; got {_v.show(dt)}")
    return dt


def parse(cfg: dict) -> ModelConfig:
    """The :class:`ModelConfig` of a loaded ``config.json`` (ValueError for what is not supported)."""
    family = family_of(cfg)
    if cfg.get("rope_scaling"):
        raise ValueError(f"config.json: 'rope_scaling' {_v.show(cfg['rope_scaling'])} is not supported by modelrun "
                         "(only the default RoPE)")
    if _v.flag(cfg, "use_sliding_window", False):
        raise ValueError("config.json: 'use_sliding_window' true is not supported by modelrun")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"config.json: 'hidden_act' must be 'silu'; got {_v.show(cfg.get('hidden_act'))}")
    hidden = _get(cfg, "hidden_size")
    heads = _get(cfg, "num_attention_heads")
    if heads == 0 or hidden == 0:
        raise ValueError("config.json: 'hidden_size' and 'num_attention_heads' must be positive")
    common = dict(family=family, hidden=hidden, layers=_get(cfg, "num_hidden_layers"), heads=heads,
                  kv_heads=_get(cfg, "num_key_value_heads", default=heads),
                  intermediate=_get(cfg, "intermediate_size"), vocab=_get(cfg, "vocab_size"),
                  eps=_get(cfg, "rms_norm_eps", float, 1e-6), rope_theta=_get(cfg, "rope_theta", float, 10000.0),
                  dtype=model_dtype(cfg), tie_embeddings=_v.flag(cfg, "tie_word_embeddings", False), raw=dict(cfg))
    if common["kv_heads"] == 0 or heads % common["kv_heads"]:
        raise ValueError(f"config.json: 'num_key_value_heads' must divide num_attention_heads ({heads}); "
                         f"got {common['kv_heads']}")
    if family == "qwen2":
        if hidden % heads or hidden < heads:
            raise ValueError(f"config.json: hidden_size {hidden} must divide into {heads} heads")
        return ModelConfig(head_dim=hidden // heads, attention_bias=True, **common)
    if family == "qwen3":
        head_dim = _get(cfg, "head_dim", default=hidden // heads, lo=1)
        return ModelConfig(head_dim=head_dim, attention_bias=_v.flag(cfg, "attention_bias", False), **common)
    n_group = _get(cfg, "n_group", default=1)
    n_experts = _get(cfg, "n_routed_experts", lo=1)
    if n_group == 0 or n_experts % n_group:
        raise ValueError(f"config.json: 'n_group' must divide n_routed_experts ({n_experts}); got {n_group}")
    if n_experts // n_group < 2:
        raise ValueError(f"config.json: 'n_group' must leave at least 2 of the {n_experts} n_routed_experts per group "
                         f"(the router sums each group's top 2); got {n_group}")
    topk_group, top_k = _get(cfg, "topk_group", default=1, lo=1), _get(cfg, "num_experts_per_tok", lo=1)
    if topk_group > n_group:
        raise ValueError(f"config.json: 'topk_group' must be at most n_group ({n_group}); got {topk_group}")
    if top_k > n_experts // n_group * topk_group:
        raise ValueError(f"config.json: 'num_experts_per_tok' must be at most the experts of the kept groups "
                         f"({n_experts // n_group * topk_group}); got {top_k}")
    if _get(cfg, "qk_rope_head_dim", lo=2) % 2:
        raise ValueError(f"config.json: 'qk_rope_head_dim' must be even (RoPE pairs); got {cfg['qk_rope_head_dim']}")
    return ModelConfig(
        head_dim=_get(cfg, "qk_rope_head_dim", lo=2), attention_bias=_v.flag(cfg, "attention_bias", False),
        q_lora_rank=None if cfg.get("q_lora_rank") is None else _get(cfg, "q_lora_rank"), kv_lora_rank=_get(cfg, "kv_lora_rank"),
        qk_nope=_get(cfg, "qk_nope_head_dim"), qk_rope=_get(cfg, "qk_rope_head_dim"),
        v_head_dim=_get(cfg, "v_head_dim"), rope_interleave=_v.flag(cfg, "rope_interleave", True),
        moe_intermediate=_get(cfg, "moe_intermediate_size"), n_experts=n_experts,
        n_shared=_get(cfg, "n_shared_experts", default=0), top_k=top_k,
        n_group=n_group, topk_group=topk_group,
        norm_topk_prob=_v.flag(cfg, "norm_topk_prob", True),
        routed_scaling_factor=_get(cfg, "routed_scaling_factor", float, 1.0),
        first_dense=_get(cfg, "first_k_dense_replace", default=0), **common)
