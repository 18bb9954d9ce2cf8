"""msModelSlim recipes (checkpoints/recipes.py) and the DeepSeek-V4-Flash W8A8 recipe.

The expected scheme of every DeepSeek-V4 module class is written out from msModelSlim's
``lab_practice/deepseek_v4/deepseek_v4_flash_w8a8.yaml`` (@ 3de0a3c4):
attention projections W8A8_DYNAMIC except wo_a, wo_b and the compressor / indexer projections
(weights_proj, compressor.wkv, compressor.wgate) which stay FLOAT; the indexer's wq_b is not
excluded, so it is W8A8_DYNAMIC; routed and shared experts W8A8_DYNAMIC; the router gate FLOAT.
Modules matched by neither ``*attn*`` nor ``*ffn*`` (head, MTP e_proj / h_proj) stay FLOAT.
"""

import json
import re

import pytest

from checkpoints import Checkpoint, synthetic_checkpoint
from checkpoints.models import PRESETS, linear_modules, model_tensors, tiny_config
from checkpoints.recipes import (BUILTIN, Recipe, checkpoint_linear_types, diff, load_recipe,
                                            qconfig_scheme)

EXPECTED_V4 = [   # (pattern over the module name, scheme)
    (r"(layers\.\d+|mtp\.\d+)\.attn\.wq_a", "W8A8_DYNAMIC"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.wq_b", "W8A8_DYNAMIC"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.wkv", "W8A8_DYNAMIC"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.wo_a", "FLOAT"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.wo_b", "FLOAT"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.compressor\.wkv", "FLOAT"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.compressor\.wgate", "FLOAT"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.indexer\.wq_b", "W8A8_DYNAMIC"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.indexer\.weights_proj", "FLOAT"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.indexer\.compressor\.wkv", "FLOAT"),
    (r"(layers\.\d+|mtp\.\d+)\.attn\.indexer\.compressor\.wgate", "FLOAT"),
    (r"(layers\.\d+|mtp\.\d+)\.ffn\.gate", "FLOAT"),
    (r"(layers\.\d+|mtp\.\d+)\.ffn\.experts\.\d+\.w[123]", "W8A8_DYNAMIC"),
    (r"(layers\.\d+|mtp\.\d+)\.ffn\.shared_experts\.w[123]", "W8A8_DYNAMIC"),
    (r"mtp\.\d+\.[eh]_proj", "FLOAT"),
    (r"head", "FLOAT"),
]


def expected(module: str) -> str:
    hits = [s for pat, s in EXPECTED_V4 if re.fullmatch(pat, module)]
    assert len(hits) == 1, f"{module}: the test's table must classify every module exactly once ({hits})"
    return hits[0]


def test_dsv4_flash_recipe_on_the_full_module_list():
    modules = linear_modules(model_tensors(PRESETS["deepseek-v4-flash"]))
    predicted = load_recipe("deepseek_v4_flash_w8a8").apply(modules)
    assert len(predicted) == len(modules) > 34_000
    wrong = {m: (s, expected(m)) for m, s in predicted.items() if s != expected(m)}
    assert not wrong, list(wrong.items())[:5]
    # every module class above occurs (the table is not vacuous)
    for pat, _ in EXPECTED_V4:
        assert any(re.fullmatch(pat, m) for m in modules), pat
    assert set(predicted.values()) == {"W8A8_DYNAMIC", "FLOAT"}   # the static anchor is unused


def test_dsv4_recipe_checkpoint_matches_its_prediction(tmp_path):
    cfg = tiny_config("v4", layers=3, experts=4, hidden=64, moe_inter=32, vocab=64, mtp=1)
    ck = Checkpoint.open(synthetic_checkpoint(tmp_path / "c", cfg))
    actual = checkpoint_linear_types(ck)
    recipe = load_recipe("deepseek_v4_flash_w8a8")
    assert diff(recipe, actual, linear_modules(model_tensors(cfg))) == []
    assert "embed" not in actual and "layers.0.attn_norm" not in actual
    assert actual["layers.0.attn.indexer.compressor.wgate"] == "FLOAT"


def test_diff_reports_mismatches_and_missing_modules(tmp_path):
    cfg = tiny_config("v4", layers=1, experts=2, hidden=64, moe_inter=32, vocab=64)
    ck = Checkpoint.open(synthetic_checkpoint(tmp_path / "c", cfg, overrides={"*.wo_b": "W8A8_DYNAMIC"}))
    actual = checkpoint_linear_types(ck)
    del actual["layers.0.attn.wkv"]
    out = diff(load_recipe("deepseek_v4_flash_w8a8"), actual, linear_modules(model_tensors(cfg)))
    assert [(m.module, m.predicted, m.actual) for m in out] == [
        ("layers.0.attn.wo_b", "FLOAT", "W8A8_DYNAMIC"), ("layers.0.attn.wkv", "W8A8_DYNAMIC", None)]


def test_glob_semantics():
    recipe = load_recipe("deepseek_v4_flash_w8a8")
    # fnmatch '*' crosses dots; '*gate' is a suffix match: the router, not the experts' w1
    assert recipe.predict("layers.0.ffn.gate") == "FLOAT"
    assert recipe.predict("layers.0.ffn.experts.0.w1") == "W8A8_DYNAMIC"
    # '*attn*' also matches hc_attn_* names, which are parameters, not Linears (never in a module list)
    assert recipe.predict("layers.0.hc_attn_fn") == "W8A8_DYNAMIC"
    assert "layers.0.hc_attn_fn" not in linear_modules(model_tensors(PRESETS["deepseek-v4-flash"])[:200])
    assert recipe.predict("LAYERS.0.ATTN.WQ_A") == "FLOAT"            # case-sensitive


@pytest.mark.parametrize("act,weight,scheme", [
    ({"scope": "per_token", "dtype": "int8", "symmetric": True}, {"scope": "per_channel", "dtype": "int8"},
     "W8A8_DYNAMIC"),
    ({"scope": "per_tensor", "dtype": "int8", "symmetric": False}, {"scope": "per_channel", "dtype": "int8"}, "W8A8"),
    ({"dtype": "float16"}, {"scope": "per_channel", "dtype": "int8"}, "W8A16"),
    ({"scope": "per_token", "dtype": "int8"}, {"scope": "per_channel", "dtype": "int4", "method": "ssz"},
     "W4A8_DYNAMIC"),
])
def test_qconfig_scheme(act, weight, scheme):
    assert qconfig_scheme({"act": act, "weight": weight}) == scheme


def test_qconfig_scheme_refuses_what_it_cannot_name():
    with pytest.raises(ValueError, match="cannot name"):
        qconfig_scheme({"act": {"dtype": "mxfp4"}, "weight": {"dtype": "mxfp4"}})
    with pytest.raises(ValueError, match="'qconfig'"):
        qconfig_scheme(None)


def _step(scheme_qconfig, include, exclude=()):
    return {"type": "linear_quant", "qconfig": scheme_qconfig, "include": list(include), "exclude": list(exclude)}


DYN = BUILTIN["deepseek_v4_flash_w8a8"]["spec"]["process"][2]["qconfig"]
STA = BUILTIN["deepseek_v3_2_w8a8"]["spec"]["process"][0]["qconfig"]


def test_sequential_steps_first_wins():
    r = Recipe.from_dict({"spec": {"process": [_step(STA, ["*attn*"]), _step(DYN, ["*"])]}})
    assert r.predict("model.layers.0.attn.q") == "W8A8"          # taken by the first step
    assert r.predict("model.layers.0.mlp.up") == "W8A8_DYNAMIC"
    assert r.predict("model.layers.7.anything") == "W8A8_DYNAMIC"


def test_only_decoder_layers_are_visited():
    """msModelSlim's layer-wise runner visits decoder layers only: include ["*"] leaves lm_head FLOAT."""
    r = Recipe.from_dict({"spec": {"process": [_step(DYN, ["*"])]}})
    assert r.predict("lm_head") == "FLOAT"
    assert r.predict("model.embed_tokens") == "FLOAT"
    assert r.predict("head") == "FLOAT"                        # DeepSeek-V4 native
    assert r.predict("layers.2.ffn.experts.0.w1") == "W8A8_DYNAMIC"
    assert r.predict("mtp.0.attn.wq_a") == "W8A8_DYNAMIC"


def test_group_last_wins():
    group = {"type": "group", "configs": [_step(DYN, ["*"], ["*gate"]), _step(STA, ["model.layers.3.mlp.down_proj"])]}
    r = Recipe.from_dict({"spec": {"process": [group]}})
    assert r.predict("model.layers.3.mlp.down_proj") == "W8A8"
    assert r.predict("model.layers.2.mlp.down_proj") == "W8A8_DYNAMIC"
    assert r.predict("model.layers.2.mlp.gate") == "FLOAT"
    name, rule = r.explain("model.layers.3.mlp.down_proj")
    assert rule.step == 0 and rule.include == ("model.layers.3.mlp.down_proj",)


def test_load_recipe_sources(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"metadata": {"config_id": "mine"}, "spec": {"process": [_step(DYN, ["*"])]}}))
    assert load_recipe(str(path)).name == "mine" and load_recipe(str(path)).predict("model.layers.0.x") == "W8A8_DYNAMIC"
    with pytest.raises(ValueError, match="neither a built-in"):
        load_recipe("no_such_recipe")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match=r"bad.json: recipe \(JSON\) is not readable JSON"):
        load_recipe(str(tmp_path / "bad.json"))
    (tmp_path / "r.yaml").write_text("spec: {process: []}\n")
    try:
        import yaml  # noqa: F401
    except ModuleNotFoundError:
        with pytest.raises(ValueError, match="PyYAML is not installed"):
            load_recipe(str(tmp_path / "r.yaml"))
    else:
        assert load_recipe(str(tmp_path / "r.yaml")).stages == []


@pytest.mark.parametrize("data,needle", [
    ([], "must be a mapping"),
    ({"spec": {}}, "process"),
    ({"spec": {"process": ["x"]}}, "step 0"),
    ({"spec": {"process": [{"type": "linear_quant", "qconfig": DYN, "include": "*"}]}}, "'include'"),
    ({"spec": {"process": [{"type": "group"}]}}, "configs"),
])
def test_bad_recipes(data, needle):
    with pytest.raises(ValueError, match=needle):
        Recipe.from_dict(data)
