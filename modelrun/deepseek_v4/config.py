"""A DeepSeek-V4 ``config.json`` (HF ``DeepseekV4Config`` keys, as the release ships them) read and checked.

Read: ``hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads (= 1), head_dim,
qk_rope_head_dim, q_lora_rank, o_groups, o_lora_rank, sliding_window, compress_ratios`` (one per layer,
plus the MTP layers' entries, each in {0, 4, 128}), ``compress_rope_theta, rope_theta, rope_scaling``
(YaRN: ``factor, original_max_position_embeddings, beta_fast, beta_slow``; applied on the compressed
layers only), ``index_n_heads, index_head_dim, index_topk, n_routed_experts, n_shared_experts (= 1),
num_experts_per_tok, moe_intermediate_size, scoring_func (= sqrtsoftplus), norm_topk_prob (= true),
routed_scaling_factor, num_hash_layers, swiglu_limit, hc_mult, hc_sinkhorn_iters, hc_eps, rms_norm_eps,
vocab_size, num_nextn_predict_layers, torch_dtype``. A missing key, a value of the wrong type or
outside its range is a ValueError naming the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config_values import MAX_INT, show

RATIOS = (0, 4, 128)


@dataclass(frozen=True)
class DSV4Config:
    vocab: int
    hidden: int
    layers: int
    heads: int
    head_dim: int
    rope_dim: int
    q_lora: int
    o_groups: int
    o_lora: int
    window: int
    ratios: tuple[int, ...]           # one per layer, then the MTP layers'
    rope_theta: float
    compress_rope_theta: float
    yarn: dict | None                 # factor, original_max_position_embeddings, beta_fast, beta_slow
    index_heads: int
    index_dim: int
    index_topk: int
    n_experts: int
    top_k: int
    moe_inter: int
    routed_scaling_factor: float
    hash_layers: int
    swiglu_limit: float
    hc_mult: int
    hc_iters: int
    hc_eps: float
    eps: float
    mtp: int
    dtype: str

    family = "deepseek_v4"

    def ratio(self, layer: int) -> int:
        return self.ratios[layer]


def _get(cfg: dict, key: str, typ, lo=None):
    if key not in cfg:
        raise ValueError(f"config.json: {key!r} is missing (a DeepSeek-V4 forward needs it)")
    v = cfg[key]
    ok = isinstance(v, typ) and not isinstance(v, bool) if typ is not bool else isinstance(v, bool)
    if typ is float and isinstance(v, int) and not isinstance(v, bool):
        try:
            v, ok = float(v), True
        except OverflowError:
            ok = False
    if not ok or (typ is float and not math.isfinite(v)) or (typ is int and v > MAX_INT):
        what = "a finite float" if typ is float else f"int (at most {MAX_INT})" if typ is int else typ.__name__
        raise ValueError(f"config.json: {key!r} must be {what}, got {show(cfg[key])}")
    if lo is not None and v < lo:
        raise ValueError(f"config.json: {key!r} must be >= {lo}, got {v!r}")
    return v


def _positive(cfg: dict, key: str) -> float:
    v = _get(cfg, key, float)
    if v <= 0:
        raise ValueError(f"config.json: {key!r} must be > 0, got {v!r}")
    return v


def parse(cfg: dict) -> DSV4Config:
    if not isinstance(cfg, dict):
        raise ValueError(f"config.json: must be a JSON object; got {type(cfg).__name__}")
    g = lambda k, t=int, lo=1: _get(cfg, k, t, lo)  # noqa: E731
    layers = g("num_hidden_layers")
    mtp = _get(cfg, "num_nextn_predict_layers", int, 0) if "num_nextn_predict_layers" in cfg else 0
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < layers + mtp or any(r not in RATIOS for r in ratios):
        raise ValueError(f"config.json: 'compress_ratios' must list one of {RATIOS} for each of the {layers} layers "
                         f"and {mtp} MTP layers; got {show(ratios)}")
    if g("num_key_value_heads") != 1:
        raise ValueError("config.json: 'num_key_value_heads' must be 1 (one K = V head shared by all query heads)")
    if g("n_shared_experts") != 1:
        raise ValueError("config.json: 'n_shared_experts' must be 1")
    if cfg.get("scoring_func") != "sqrtsoftplus" or cfg.get("norm_topk_prob") is not True:
        raise ValueError(f"config.json: 'scoring_func' sqrtsoftplus with 'norm_topk_prob' true expected, got "
                         f"{show(cfg.get('scoring_func'))} / {show(cfg.get('norm_topk_prob'))}")
    head_dim, rope_dim, heads, o_groups = g("head_dim"), g("qk_rope_head_dim"), g("num_attention_heads"), g("o_groups")
    if rope_dim % 2 or rope_dim > head_dim:
        raise ValueError(f"config.json: 'qk_rope_head_dim' must be even and <= head_dim {head_dim}, got {rope_dim}")
    if heads % o_groups:
        raise ValueError(f"config.json: 'o_groups' {o_groups} must divide num_attention_heads {heads}")
    rs = cfg.get("rope_scaling") or None
    yarn = None
    if rs is not None:
        if not isinstance(rs, dict) or rs.get("type", rs.get("rope_type")) != "yarn":
            raise ValueError(f"config.json: 'rope_scaling' must be yarn (or absent), got {show(rs)}")
        named = {f"rope_scaling.{k}": v for k, v in rs.items()}
        yarn = {k: _get(named, f"rope_scaling.{k}", float, 0)
                for k in ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow")}
    n_experts, top_k = g("n_routed_experts"), g("num_experts_per_tok")
    if top_k > n_experts:
        raise ValueError(f"config.json: 'num_experts_per_tok' {top_k} exceeds n_routed_experts {n_experts}")
    dtype = cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))
    if not isinstance(dtype, str) or dtype not in ("bfloat16", "float32", "float16"):
        raise ValueError(f"config.json: 'torch_dtype' must be bfloat16 / float16 / float32, got {show(dtype)}")
    return DSV4Config(
        vocab=g("vocab_size"), hidden=g("hidden_size"), layers=layers, heads=heads, head_dim=head_dim,
        rope_dim=rope_dim, q_lora=g("q_lora_rank"), o_groups=o_groups, o_lora=g("o_lora_rank"),
        window=g("sliding_window"), ratios=tuple(ratios), rope_theta=_positive(cfg, "rope_theta"),
        compress_rope_theta=_positive(cfg, "compress_rope_theta"), yarn=yarn, index_heads=g("index_n_heads"),
        index_dim=g("index_head_dim"), index_topk=g("index_topk"), n_experts=n_experts, top_k=top_k,
        moe_inter=g("moe_intermediate_size"), routed_scaling_factor=g("routed_scaling_factor", float, 0),
        hash_layers=_get(cfg, "num_hash_layers", int, 0), swiglu_limit=g("swiglu_limit", float, 0),
        hc_mult=g("hc_mult", int, 2), hc_iters=g("hc_sinkhorn_iters"), hc_eps=_positive(cfg, "hc_eps"),
        eps=_positive(cfg, "rms_norm_eps"), mtp=mtp, dtype=dtype)


def is_deepseek_v4(cfg: dict) -> bool:
    return cfg.get("model_type") == "deepseek_v4" or "DeepseekV4ForCausalLM" in (cfg.get("architectures") or [])
