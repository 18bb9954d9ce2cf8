"""Model tensor lists (checkpoints/models.py), checked against published parameter counts.

DeepSeek-V3: 671B total, 37B activated (DeepSeek-V3 technical report; the MTP module adds 14B).
DeepSeek-V4-Flash: 284B total, 13B activated (DeepSeek's V4 release notes). These are independent
of the code: they test the shape formulas of every module class at once.
"""

import pytest

from checkpoints.models import (PRESETS, architecture, deepseek_v4_tensors, linear_modules,
                                           model_tensors, tiny_config)


def counts(config, include_mtp=False):
    specs = [t for t in model_tensors(config) if not t.integer and (include_mtp or not t.mtp)]
    k, e = config["num_experts_per_tok"], config["n_routed_experts"]
    frac = {"expert": k / e, "embedding": 0.0}
    return sum(t.numel for t in specs), sum(t.numel * frac.get(t.role, 1.0) for t in specs)


def test_deepseek_v3_published_counts():
    total, active = counts(PRESETS["deepseek-v3"])
    assert 668e9 < total < 674e9            # 671B
    assert 36e9 < active < 38e9             # 37B
    with_mtp, _ = counts(PRESETS["deepseek-v3"], include_mtp=True)
    assert 12.5e9 < with_mtp - total < 15e9  # the 14B MTP module (embed + head + one MoE layer)


def test_deepseek_v4_flash_published_counts():
    total, active = counts(PRESETS["deepseek-v4-flash"])
    assert 283e9 < total < 285.5e9          # 284B
    assert 12.5e9 < active < 13.5e9         # 13B


def test_v4_layer_structure_follows_compress_ratios():
    cfg = tiny_config("v4", layers=3, mtp=1)        # ratios 4, 128, 0 and the MTP layer 4
    names = {t.name for t in deepseek_v4_tensors(cfg)}
    assert "layers.0.attn.indexer.weights_proj.weight" in names           # ratio 4: compressor + indexer
    assert "layers.0.attn.compressor.ape" in names
    assert "layers.1.attn.compressor.wkv.weight" in names                 # ratio 128: compressor only
    assert "layers.1.attn.indexer.wq_b.weight" not in names
    assert not any(n.startswith("layers.2.attn.compressor") for n in names)   # ratio 0
    assert "layers.0.ffn.gate.tid2eid" in names and "layers.0.ffn.gate.bias" not in names   # hash layer
    assert "layers.1.ffn.gate.bias" in names
    assert {"mtp.0.e_proj.weight", "mtp.0.h_proj.weight", "mtp.0.hc_head_fn", "mtp.0.attn.indexer.wq_b.weight",
            "hc_head_fn", "embed.weight", "head.weight"} <= names


def test_v4_shapes():
    cfg = PRESETS["deepseek-v4-flash"]
    shapes = {t.name: t.shape for t in deepseek_v4_tensors(cfg) if t.name.startswith("layers.2.")}
    assert shapes["layers.2.attn.wq_a.weight"] == (1024, 4096)
    assert shapes["layers.2.attn.wq_b.weight"] == (64 * 512, 1024)
    assert shapes["layers.2.attn.wkv.weight"] == (512, 4096)
    assert shapes["layers.2.attn.compressor.wkv.weight"] == (2 * 512, 4096)        # ratio 4: overlap, coff 2
    assert shapes["layers.2.attn.indexer.compressor.wkv.weight"] == (2 * 128, 4096)
    assert shapes["layers.2.ffn.experts.255.w1.weight"] == (2048, 4096)
    assert shapes["layers.2.ffn.experts.255.w2.weight"] == (4096, 2048)


def test_linear_modules():
    mods = linear_modules(model_tensors(tiny_config("v3")))
    assert "model.layers.1.mlp.experts.3.down_proj" in mods and "model.layers.1.mlp.gate" in mods
    assert "lm_head" in mods
    assert not any(m.endswith("norm") for m in mods) and "model.embed_tokens" not in mods


@pytest.mark.parametrize("config,needle", [
    ({"model_type": "llama"}, "cannot tell the architecture"),
    ([], "must be a dict"),
])
def test_architecture_errors(config, needle):
    with pytest.raises(ValueError, match=needle):
        architecture(config)


def test_missing_and_bad_fields():
    cfg = dict(PRESETS["deepseek-v3"])
    del cfg["kv_lora_rank"]
    cfg["model_type"] = "deepseek_v3"
    with pytest.raises(ValueError, match="'kv_lora_rank' is required"):
        model_tensors(cfg)
    cfg = dict(PRESETS["deepseek-v4-flash"], hidden_size=-1)
    with pytest.raises(ValueError, match="'hidden_size' must be a non-negative integer"):
        model_tensors(cfg)
    cfg = dict(PRESETS["deepseek-v4-flash"], compress_ratios=[4, "x"])
    with pytest.raises(ValueError, match="compress_ratios"):
        model_tensors(cfg)
    with pytest.raises(ValueError, match="'naming'"):
        tiny_config("v5")
