"""Names: SGLang's DeepSeek-V4 remap, vllm-ascend's aliases, tensor suffixes, layers, experts."""

import pytest

from checkpoints.models import model_tensors, tiny_config
from checkpoints.naming import (is_deepseek_v4_native, layer_of, parse_expert, sglang_dsv4_remap,
                                           split_tensor_name, vllm_ascend_dsv4_aliases)


# Each expectation follows the rule list of remap_weight_name_to_dpsk_hf_format (SGLang's DeepSeek-V4 model), applied
# by hand.
@pytest.mark.parametrize("native,serving", [
    ("embed.weight", "model.embed_tokens.weight"),
    ("head.weight", "lm_head.weight"),
    ("norm.weight", "model.norm.weight"),
    ("hc_head_fn", "model.hc_head_fn"),
    ("layers.3.attn.wq_a.weight", "model.layers.3.self_attn.wq_a.weight"),
    ("layers.3.attn.wq_a.weight_scale", "model.layers.3.self_attn.wq_a.weight_scale"),   # not a literal ".scale"
    ("layers.3.attn.wq_a.scale", "model.layers.3.self_attn.wq_a.weight_scale_inv"),      # FP8 block scale
    ("layers.3.attn.indexer.compressor.wkv.weight", "model.layers.3.self_attn.indexer.compressor.wkv.weight"),
    ("layers.3.attn_norm.weight", "model.layers.3.input_layernorm.weight"),
    ("layers.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"),
    ("layers.3.ffn.gate.weight", "model.layers.3.mlp.gate.weight"),
    ("layers.3.ffn.gate.bias", "model.layers.3.mlp.gate.e_score_correction_bias"),
    ("layers.0.ffn.gate.tid2eid", "model.layers.0.mlp.topk.tid2eid"),
    ("layers.3.ffn.experts.7.w1.weight", "model.layers.3.mlp.experts.7.gate_proj.weight"),
    ("layers.3.ffn.experts.7.w3.weight_offset", "model.layers.3.mlp.experts.7.up_proj.weight_offset"),
    ("layers.3.ffn.experts.7.w2.weight_scale", "model.layers.3.mlp.experts.7.down_proj.weight_scale"),
    ("layers.3.ffn.shared_experts.w1.weight", "model.layers.3.mlp.shared_experts.gate_proj.weight"),
    ("layers.3.hc_attn_fn", "model.layers.3.hc_attn_fn"),
    # MTP as the description sees it (is_nextn=False): the prefix stays, the inside is renamed
    ("mtp.0.attn.wq_a.weight", "mtp.0.self_attn.wq_a.weight"),
    ("mtp.0.ffn.experts.7.w1.weight_scale", "mtp.0.mlp.experts.7.gate_proj.weight_scale"),
    ("mtp.0.e_proj.weight", "mtp.0.e_proj.weight"),
])
def test_sglang_remap(native, serving):
    assert sglang_dsv4_remap(native) == serving


@pytest.mark.parametrize("native,serving", [
    ("mtp.0.e_proj.weight", "model.layers.43.e_proj.weight"),
    ("mtp.0.e_proj.scale", "model.layers.43.e_proj.weight_scale_inv"),
    ("mtp.0.norm.weight", "model.layers.43.shared_head.norm.weight"),
    ("mtp.0.head.weight", "model.layers.43.shared_head.head.weight"),
    ("mtp.0.emb.tok_emb.weight", "model.layers.43.embed_tokens.weight"),
    ("mtp.0.hc_head_fn", "model.layers.43.hc_head_fn"),
    ("mtp.0.attn.wq_a.weight", "mtp.0.self_attn.wq_a.weight"),   # not a next-n specific tensor
])
def test_sglang_remap_nextn(native, serving):
    assert sglang_dsv4_remap(native, is_nextn=True, num_hidden_layers=43) == serving


def test_vllm_aliases_agree_with_sglang_for_every_linear_weight():
    # Both loaders must find the same description entry for every Linear of a DSV4 model (outside MTP).
    names = [t.name for t in model_tensors(tiny_config("v4", mtp=1))]
    aliases = vllm_ascend_dsv4_aliases(names)
    linear = [n for n in names if n.endswith(".weight") and not n.startswith("mtp.")
              and not n.endswith("norm.weight")]
    assert len(linear) > 50
    for n in linear:
        s = sglang_dsv4_remap(n)
        assert aliases.get(s) == n, (n, s)
    assert set(names) <= set(aliases)          # aliases are added, the originals stay


def test_vllm_aliases_only_for_dsv4():
    names = ["model.layers.0.mlp.gate_proj.weight"]
    assert vllm_ascend_dsv4_aliases(names) == {names[0]: names[0]}
    assert not is_deepseek_v4_native(names)
    assert is_deepseek_v4_native(names + ["hc_head_fn"])


@pytest.mark.parametrize("name,split", [
    ("a.b.weight", ("a.b", ".weight")),
    ("a.b.weight_scale", ("a.b", ".weight_scale")),      # longest suffix first
    ("a.b.weight_offset", ("a.b", ".weight_offset")),
    ("a.b.deq_scale", ("a.b", ".deq_scale")),
    ("a.b.quant_bias", ("a.b", ".quant_bias")),
    ("a.b.bias", ("a.b", ".bias")),
    ("hc_head_fn", ("hc_head_fn", "")),
    ("layers.0.attn.compressor.ape", ("layers.0.attn.compressor.ape", "")),
    (".weight", (".weight", "")),                          # nothing before the suffix
])
def test_split_tensor_name(name, split):
    assert split_tensor_name(name) == split


@pytest.mark.parametrize("name,layer", [
    ("model.layers.12.self_attn.o_proj", "layers.12"),
    ("layers.0.ffn.experts.3.w1", "layers.0"),
    ("mtp.1.attn.wq_a", "mtp.1"),
    ("lm_head", "model"),
    ("hc_head_fn", "model"),
])
def test_layer_of(name, layer):
    assert layer_of(name) == layer


def test_parse_expert():
    assert parse_expert("model.layers.3.mlp.experts.17.up_proj") == ("model.layers.3.mlp.experts", 17, "up_proj")
    assert parse_expert("layers.3.ffn.experts.0.w2") == ("layers.3.ffn.experts", 0, "w2")
    assert parse_expert("layers.3.ffn.shared_experts.w2") is None
    assert parse_expert("model.layers.3.mlp.experts.x.up_proj") is None


from hypothesis import given, strategies as st  # noqa: E402


@given(layer=st.integers(0, 99), expert=st.integers(0, 511), w=st.sampled_from(["w1", "w2", "w3"]),
       suffix=st.sampled_from([".weight", ".weight_scale", ".weight_offset"]))
def test_expert_names_survive_the_remap(layer, expert, w, suffix):
    # The rewrite keeps layer and expert indices and maps w1/w3/w2 to gate/up/down (W13 = gate + up).
    native = f"layers.{layer}.ffn.experts.{expert}.{w}{suffix}"
    serving = sglang_dsv4_remap(native)
    prefix, got_suffix = split_tensor_name(serving)
    assert got_suffix == suffix
    moe, e, proj = parse_expert(prefix)
    assert (moe, e, proj) == (f"model.layers.{layer}.mlp.experts", expert,
                              {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}[w])
    assert layer_of(serving) == layer_of(native) == f"layers.{layer}"
