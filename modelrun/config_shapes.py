"""A parsed config checked against the shapes of the weights it will run, before any forward.

:func:`check` takes a :class:`~modelrun.config.ModelConfig` and ``{tensor name: shape}`` (HF names, as
the float model and the checkpoint's serving names hold them) and raises one ValueError naming the
config key, what the weights say and what the config says, e.g. ``config.json: 'hidden_size' expected 64
(model.embed_tokens.weight is [256, 64]); got 1000000000``. It reads only the shapes (nothing is
allocated), and looks at as many layers as the weights hold, so ``num_hidden_layers`` 10^9 costs
nothing. A tensor the weights lack is left to the forward's own missing-tensor error; a quantized
Linear's int8 ``weight`` is ``[N, K]`` like the float one, so one table serves both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .config import ModelConfig

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def _dims(cfg: ModelConfig, layer: int) -> list[tuple[str, tuple]]:
    """``(tensor suffix, ((config label, value), ...) per dim)`` of one layer."""
    H = ("'hidden_size'", cfg.hidden)
    rows = [("input_layernorm.weight", (H,)), ("post_attention_layernorm.weight", (H,))]
    a = "self_attn."
    if cfg.family == "deepseek_v3":
        q_out = ("'num_attention_heads' x (qk_nope_head_dim + qk_rope_head_dim)", cfg.heads * cfg.qk_head_dim)
        if cfg.q_lora_rank:
            rows += [(a + "q_a_proj.weight", (("'q_lora_rank'", cfg.q_lora_rank), H)),
                     (a + "q_b_proj.weight", (q_out, ("'q_lora_rank'", cfg.q_lora_rank)))]
        else:
            rows.append((a + "q_proj.weight", (q_out, H)))
        rows += [(a + "kv_a_proj_with_mqa.weight", (("'kv_lora_rank' + qk_rope_head_dim", cfg.kv_lora_rank + cfg.qk_rope),
                                                    H)),
                 (a + "kv_a_layernorm.weight", (("'kv_lora_rank'", cfg.kv_lora_rank),)),
                 (a + "kv_b_proj.weight", (("'num_attention_heads' x (qk_nope_head_dim + v_head_dim)",
                                            cfg.heads * (cfg.qk_nope + cfg.v_head_dim)),
                                           ("'kv_lora_rank'", cfg.kv_lora_rank))),
                 (a + "o_proj.weight", (H, ("'num_attention_heads' x v_head_dim", cfg.heads * cfg.v_head_dim)))]
    else:
        q = ("'num_attention_heads' x head_dim", cfg.heads * cfg.head_dim)
        kv = ("'num_key_value_heads' x head_dim", cfg.kv_heads * cfg.head_dim)
        rows += [(a + "q_proj.weight", (q, H)), (a + "k_proj.weight", (kv, H)), (a + "v_proj.weight", (kv, H)),
                 (a + "o_proj.weight", (H, q))]
        if cfg.family == "qwen3":
            rows += [(a + "q_norm.weight", (("'head_dim'", cfg.head_dim),)),
                     (a + "k_norm.weight", (("'head_dim'", cfg.head_dim),))]
    if cfg.is_moe_layer(layer):
        mi = ("'moe_intermediate_size'", cfg.moe_intermediate)
        rows.append(("mlp.gate.weight", (("'n_routed_experts'", cfg.n_experts), H)))
        for e in range(cfg.n_experts):
            rows += [(f"mlp.experts.{e}.gate_proj.weight", (mi, H)), (f"mlp.experts.{e}.down_proj.weight", (H, mi))]
        if cfg.n_shared:
            si = ("'n_shared_experts' x moe_intermediate_size", cfg.n_shared * cfg.moe_intermediate)
            rows += [("mlp.shared_experts.gate_proj.weight", (si, H)), ("mlp.shared_experts.down_proj.weight", (H, si))]
    else:
        it = ("'intermediate_size'", cfg.intermediate)
        rows += [("mlp.gate_proj.weight", (it, H)), ("mlp.up_proj.weight", (it, H)), ("mlp.down_proj.weight", (H, it))]
    return rows


def _compare(name: str, shape, want: tuple) -> None:
    shape = tuple(int(d) for d in shape)
    if len(shape) != len(want):
        labels = " x ".join(label for label, _ in want)
        raise ValueError(f"config.json: {name} has {len(shape)} dims {list(shape)}; expected {len(want)} ({labels})")
    for dim, (label, value) in zip(shape, want):
        if dim != value:
            raise ValueError(f"config.json: {label} expected {dim} ({name} is {list(shape)}); got {value}")


def check(cfg: ModelConfig, shapes: Mapping[str, tuple], source: str = "the weights", complete: bool = False) -> None:
    """ValueError naming the config key whose value disagrees with ``shapes`` (module docstring); with
    ``complete`` (a float model, every tensor under its HF name) also one naming the first tensor the
    config needs and ``shapes`` lack."""
    held = sorted({int(m.group(1)) for n in shapes if (m := _LAYER.match(n))})
    if held and (cfg.layers != len(held) or held[-1] != len(held) - 1):
        got = f"layers {held[0]}..{held[-1]}" if held == list(range(len(held))) else f"layers {held[:8]}"
        raise ValueError(f"config.json: 'num_hidden_layers' expected {len(held)} ({source} hold {got}); got {cfg.layers}")
    if cfg.family == "deepseek_v3" and cfg.first_dense > cfg.layers:
        raise ValueError(f"config.json: 'first_k_dense_replace' must be at most num_hidden_layers ({cfg.layers}); "
                         f"got {cfg.first_dense}")
    top = [("model.embed_tokens.weight", (("'vocab_size'", cfg.vocab), ("'hidden_size'", cfg.hidden))),
           ("model.norm.weight", (("'hidden_size'", cfg.hidden),)),
           ("lm_head.weight", (("'vocab_size'", cfg.vocab), ("'hidden_size'", cfg.hidden)))]
    needed = [(n, w) for n, w in top if not (n == "lm_head.weight" and cfg.tie_embeddings)]
    needed += [(f"model.layers.{layer}.{suffix}", want) for layer in held for suffix, want in _dims(cfg, layer)]
    for name, want in needed:
        if name in shapes:
            _compare(name, shapes[name], want)
        elif complete:
            raise ValueError(f"{source}: no tensor {name}, which config.json's {cfg.family} model needs")
    if complete and not held and cfg.layers:
        raise ValueError(f"{source}: no model.layers.* tensors, config.json's 'num_hidden_layers' is {cfg.layers}")


_DSV4_LAYER = re.compile(r"^layers\.(\d+)\.")


def check_dsv4(cfg, shapes: Mapping[str, tuple], source: str = "the weights") -> None:
    """The DeepSeek-V4 counterpart of :func:`check` (native names ``embed.weight``, ``layers.N.*``): the
    layer count, the embedding / head ``[vocab_size, hidden_size]``, every norm ``[hidden_size]``, the
    router ``[n_routed_experts, hidden_size]``, the experts ``[moe_intermediate_size, hidden_size]``."""
    held = sorted({int(m.group(1)) for n in shapes if (m := _DSV4_LAYER.match(n))})
    if held and (cfg.layers != len(held) or held[-1] != len(held) - 1):
        raise ValueError(f"config.json: 'num_hidden_layers' expected {len(held)} ({source} hold layers "
                         f"{held[0]}..{held[-1]}); got {cfg.layers}")
    H = ("'hidden_size'", cfg.hidden)
    want = {"embed.weight": (("'vocab_size'", cfg.vocab), H), "head.weight": (("'vocab_size'", cfg.vocab), H),
            "norm.weight": (H,)}
    mi = ("'moe_intermediate_size'", cfg.moe_inter)
    for layer in held:
        p = f"layers.{layer}."
        want.update({p + "attn_norm.weight": (H,), p + "ffn_norm.weight": (H,),
                     p + "ffn.gate.weight": (("'n_routed_experts'", cfg.n_experts), H)})
        want.update({f"{p}ffn.experts.{e}.w1.weight": (mi, H) for e in range(cfg.n_experts)})
    for name, dims in want.items():
        if name in shapes:
            _compare(name, shapes[name], dims)
