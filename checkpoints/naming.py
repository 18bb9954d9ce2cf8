"""Tensor and module names: the DeepSeek-V4 remapping, packed modules, layers and experts.

DeepSeek-V4 checkpoints keep DeepSeek's native names (``layers.3.attn.wq_a.weight``,
``layers.3.ffn.experts.7.w1.weight``, ``hc_head_fn``...). The serving code maps them onto the
HF-style module tree before it looks anything up (SGLang's DeepSeek-V4 model file,
``remap_weight_name_to_dpsk_hf_format``):

* SGLang (``ModelSlimConfig.__init__``): when any description key starts with ``hc_head_``, every
  key is *rewritten* through ``DeepseekV4ForCausalLM.remap_weight_name_to_dpsk_hf_format``
  (:func:`sglang_dsv4_remap`, reproduced rule for rule).
* vllm-ascend (``AscendModelSlimConfig._apply_extra_quant_adaptations``): when ``hc_head_fn`` is
  present, *aliases* are added next to the original keys (``model.`` prefix, ``attn -> self_attn``,
  ``ffn -> mlp``, ``w1/w2/w3 -> gate/down/up_proj``, ``head -> lm_head``, ``embed -> embed_tokens``;
  :func:`vllm_ascend_dsv4_aliases`).

This suite resolves schemes on the **SGLang rewrite** (one serving name per checkpoint name, a
bijection we check). For every Linear ``.weight`` key outside ``mtp.*`` the vllm-ascend alias set
contains exactly the SGLang name (tested), so both loaders find the same entry. They differ only in
names no Linear lookup depends on (``.gate.bias`` / ``.gate.tid2eid`` / FP8 ``.scale`` suffixes,
which only SGLang renames) and in MTP layers: the SGLang rewrite as the description sees it
(``is_nextn=False``) keeps ``mtp.{i}.`` and renames inside it; the next-n loader maps the
``mtp.{i}.e_proj/h_proj/emb/enorm/hnorm/norm/head/hc_head*`` tensors to ``model.layers.{N}``
(:func:`sglang_dsv4_remap` with ``is_nextn=True``). How vllm-ascend maps MTP modules is not covered
by the sources read; MTP modules are reported under the SGLang description names.
"""

from __future__ import annotations

import re

# -- tensor roles ---------------------------------------------------------------------------------

TENSOR_SUFFIXES: tuple[str, ...] = (
    ".weight_scale_second", ".weight_offset_second", ".weight_scale", ".weight_offset", ".quant_bias",
    ".input_scale", ".input_offset", ".deq_scale", ".scale_bias", ".weight_scale_inv", ".weight", ".bias",
)
"""Suffixes of the tensors that belong to one Linear (longest first, so ``.weight_scale`` is not read
as ``.weight`` + ``_scale``)."""


def split_tensor_name(name: str) -> tuple[str, str]:
    """``"a.b.weight_scale" -> ("a.b", ".weight_scale")``; ``(name, "")`` for a parameter that is
    not one of :data:`TENSOR_SUFFIXES` (``hc_head_fn``, ``attn_sink``, ``ape``...)."""
    for suffix in TENSOR_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_MTP_RE = re.compile(r"^(?:model\.)?mtp\.(\d+)\.")


def layer_of(name: str) -> str:
    """``"layers.{L}"`` / ``"mtp.{i}"`` for a name inside a decoder or MTP layer, else ``"model"``."""
    m = _MTP_RE.match(name)
    if m:
        return f"mtp.{m.group(1)}"
    m = _LAYER_RE.search(name)
    return f"layers.{m.group(1)}" if m else "model"


def layer_sort_key(layer: str) -> tuple:
    """Order: the model-level group first, then decoder layers by index, then MTP layers."""
    if layer == "model":
        return (0, 0)
    kind, _, idx = layer.partition(".")
    return (1 if kind == "layers" else 2, int(idx))


# -- experts --------------------------------------------------------------------------------------

EXPERT_NAMINGS: tuple[tuple[str, str, str], ...] = (("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2"))
"""``(gate, up, down)`` leaf names SGLang's ``get_moe_scheme`` tries, in order."""

_EXPERT_RE = re.compile(r"^(?P<moe>.+\.experts)\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj|w1|w2|w3)$")


def parse_expert(module: str) -> tuple[str, int, str] | None:
    """``"m.layers.3.mlp.experts.7.up_proj" -> ("m.layers.3.mlp.experts", 7, "up_proj")``; None otherwise.

    ``shared_experts.w1`` is not an expert of a FusedMoE (it is a plain Linear).
    """
    m = _EXPERT_RE.match(module)
    return (m.group("moe"), int(m.group("e")), m.group("proj")) if m else None


# -- packed modules -------------------------------------------------------------------------------

PACKED_MODULES: dict[str, dict[str, tuple[str, ...]]] = {
    # SGLang: ModelSlimConfig's default packed_modules_mapping (``layers/quantization/modelslim/modelslim.py``)
    # plus the DeepSeek-V2/V3 model's fused q_a / kv_a projection.
    "sglang": {
        "qkv_proj": ("q_proj", "k_proj", "v_proj"),
        "gate_up_proj": ("gate_proj", "up_proj"),
        "fused_qkv_a_proj_with_mqa": ("q_a_proj", "kv_a_proj_with_mqa"),
    },
    # vllm-ascend: packed_modules_model_mapping (deepseek_v2/v3/v32: fused_qkv_a_proj; every MoE
    # model: gate_up_proj; qwen-style: qkv_proj). Its "experts" entry is the FusedMoE, resolved
    # from expert 0 like SGLang's get_moe_scheme (see schemes.py).
    "vllm-ascend": {
        "qkv_proj": ("q_proj", "k_proj", "v_proj"),
        "gate_up_proj": ("gate_proj", "up_proj"),
        "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),
    },
}
"""Per loader: fused module leaf -> the checkpoint shards it packs (in the fused N order)."""


# -- DeepSeek-V4 native names ---------------------------------------------------------------------

def is_deepseek_v4_native(names) -> bool:
    """SGLang's trigger for the DSV4 rewrite: some key starts with ``hc_head_``."""
    return any(n.startswith("hc_head_") for n in names)


_NEXTN_SPEC = ("e_proj", "h_proj", "emb", "enorm", "hnorm", "norm", "head", "hc_head")


def sglang_dsv4_remap(name: str, *, is_nextn: bool = False, num_hidden_layers: int | None = None,
                      scale_suffix: str = "weight_scale_inv") -> str:
    """SGLang ``DeepseekV4ForCausalLM.remap_weight_name_to_dpsk_hf_format``, rule for rule.

    ``embed.weight -> model.embed_tokens.weight``, ``head.weight -> lm_head.weight``,
    ``norm.weight -> model.norm.weight``, ``hc_head_* -> model.hc_head_*``; with ``is_nextn`` the
    next-n specific ``mtp.{i}.{e_proj,h_proj,emb,enorm,hnorm,norm,head,hc_head}...`` go to
    ``model.layers.{num_hidden_layers}.``; then ``layers. -> model.layers.``, ``.attn. -> .self_attn.``,
    ``.ffn. -> .mlp.``, ``.attn_norm. -> .input_layernorm.``, ``.ffn_norm. -> .post_attention_layernorm.``,
    a literal ``.scale`` suffix inside self_attn / mlp -> ``.weight_scale_inv`` (FP8 checkpoints; the
    ``.weight_scale`` of a W8A8 checkpoint does not end in ``.scale``), ``.gate.tid2eid -> .topk.tid2eid``,
    ``.gate.bias -> .gate.e_score_correction_bias``, ``.w1./.w2./.w3. -> .gate_proj./.down_proj./.up_proj.``.
    """
    if name == "embed.weight":
        return "model.embed_tokens.weight"
    if name == "head.weight":
        return "lm_head.weight"
    if name == "norm.weight":
        return "model.norm.weight"
    if name.startswith("hc_head_"):
        return "model." + name
    if is_nextn and name.startswith("mtp."):
        parts = name.split(".", 2)
        if len(parts) >= 3 and any(parts[2].startswith(p) for p in _NEXTN_SPEC):
            rest = parts[2]
            if rest.startswith("emb.tok_emb"):
                rest = rest.replace("emb.tok_emb", "embed_tokens")
            elif rest == "norm.weight":
                rest = "shared_head.norm.weight"
            elif rest.startswith("head."):
                rest = "shared_head.head.weight"
            elif rest in ("e_proj.scale", "h_proj.scale"):
                rest = rest.removesuffix(".scale") + "." + scale_suffix
            name = f"model.layers.{num_hidden_layers}." + rest
    if name.startswith("layers."):
        name = "model." + name
    name = name.replace(".attn.", ".self_attn.").replace(".ffn.", ".mlp.")
    name = name.replace(".attn_norm.", ".input_layernorm.").replace(".ffn_norm.", ".post_attention_layernorm.")
    if "self_attn" in name and name.endswith(".scale"):
        name = name.removesuffix(".scale") + "." + scale_suffix
    name = name.replace(".gate.tid2eid", ".topk.tid2eid").replace(".gate.bias", ".gate.e_score_correction_bias")
    name = name.replace(".w1.", ".gate_proj.").replace(".w2.", ".down_proj.").replace(".w3.", ".up_proj.")
    if "mlp" in name and name.endswith(".scale"):
        name = name.removesuffix(".scale") + "." + scale_suffix
    return name


_VLLM_STEPS = (
    lambda k: k if k.startswith("model") else "model." + k,
    lambda k: k.replace(".attn.", ".self_attn."),
    lambda k: k.replace(".ffn.", ".mlp."),
    lambda k: k.replace(".w1.", ".gate_proj.").replace(".w2.", ".down_proj.").replace(".w3.", ".up_proj."),
    lambda k: "lm_head." + k[len("head."):] if k.startswith("head.") else k.replace("model.head.", "model.lm_head."),
    lambda k: "embed_tokens." + k[len("embed."):] if k.startswith("embed.")
    else k.replace("model.embed.", "model.embed_tokens."),
)


def vllm_ascend_dsv4_aliases(names) -> dict[str, str]:
    """vllm-ascend's DSV4 key adaptation: ``{key or alias: original key}``.

    Each step maps every key seen so far and *adds* the result (``dict.update``), so the final
    dict holds the original keys, the fully renamed forms and the partial ones. Only applied when
    ``hc_head_fn`` is among the keys (otherwise the names come back unchanged).
    """
    out = {n: n for n in names}
    if "hc_head_fn" not in out:
        return out
    for step in _VLLM_STEPS:
        for key, orig in list(out.items()):
            out.setdefault(step(key), orig)
    return out
