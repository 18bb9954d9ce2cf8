"""``w8a8 inspect`` on the msModelSlim checkpoints and on crafted copies of them (copied to tmp and
altered): each finding the issue named, found where it should be and absent where it should not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from checkpoints import analyze
from checkpoints.safetensors_io import MappedFile, write_file
from w8a8.offline import quantize_weight_per_channel
from w8a8cli.main import main

ALL = ("qwen2-w8a8-dynamic", "qwen2-w8a8-bf16", "qwen2-w8a8-fp16", "dsv3-mix")


def _codes(path, severity=None):
    return [f.code for f in analyze(path).findings if severity is None or f.severity == severity]


@pytest.mark.parametrize("name", ALL)
def test_real_checkpoints_have_no_errors(data, name):
    report = analyze(data.quant / name)
    assert report.ok, [str(f) for f in report.findings.errors]
    expected_warnings = ["router-bias-missing"] if name == "dsv3-mix" else []
    assert [f.code for f in report.findings if f.severity == "warning"] == expected_warnings


@pytest.mark.parametrize("name, recipe", [("qwen2-w8a8-dynamic", "qwen2-w8a8-dynamic"), ("qwen2-w8a8-bf16", "qwen2-w8a8"),
                                          ("qwen2-w8a8-fp16", "qwen2-w8a8"), ("dsv3-mix", "dsv3-mix")])
def test_recipe_diff_visits_decoder_layers_only(data, name, recipe, capsys):
    """include ["*"] quantizes every Linear of the layers; msModelSlim never visits lm_head."""
    assert main(["inspect", str(data.quant / name), "--recipe", str(data.recipes / f"{recipe}.yaml"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recipe"]["mismatches"] == []


def test_recipe_diff_still_finds_a_real_mismatch(data, crafted, capsys):
    ck = crafted("qwen2-w8a8-dynamic")
    for k in [k for k in ck.types if k.startswith("model.layers.1.mlp.down_proj.")]:
        ck.types[k] = "W8A8"          # the recipe says W8A8_DYNAMIC
    path = ck.save()
    main(["inspect", str(path), "--recipe", str(data.recipes / "qwen2-w8a8-dynamic.yaml"), "--json"])
    mm = json.loads(capsys.readouterr().out)["recipe"]["mismatches"]
    assert [(m["module"], m["predicted"], m["actual"]) for m in mm] == [
        ("model.layers.1.mlp.down_proj", "W8A8_DYNAMIC", "W8A8")]


@pytest.mark.parametrize("name, float_name", [("qwen2-w8a8-bf16", "qwen2-bf16"), ("qwen2-w8a8-fp16", "qwen2-fp16")])
def test_deq_scale_checked_in_the_model_dtype(data, crafted, name, float_name):
    """With a legacy weight_scale next to deq_scale, msModelSlim's deq_scale = dt(input_scale * s_w) is
    consistent (the old check demanded fp32(input_scale * s_w)); one ULP off is not."""
    ck = crafted(name)
    ref = MappedFile(data.float / float_name / "model.safetensors")
    dtype = ck.config["torch_dtype"]
    fp32_differs = 0
    for prefix in [k[: -len(".weight")] for k, t in ck.types.items() if k.endswith(".weight") and t == "W8A8"]:
        _, s_w, off = quantize_weight_per_channel(np.array(ref.tensor(prefix + ".weight")), model_dtype=dtype)
        ck.tensors[prefix + ".weight_scale"], ck.tensors[prefix + ".weight_offset"] = s_w, off
        ck.types[prefix + ".weight_scale"] = ck.types[prefix + ".weight_offset"] = "W8A8"
        deq = ck.tensors[prefix + ".deq_scale"]
        deq32 = deq if deq.dtype == np.float32 else (deq & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
        fp32_differs += int(np.count_nonzero((ck.tensors[prefix + ".input_scale"] * s_w.reshape(-1)) != deq32))
    path = ck.save()
    assert fp32_differs > 0              # the fp32 product is not what msModelSlim wrote
    assert "deq-mismatch" not in _codes(path)
    target = "model.layers.0.mlp.up_proj.deq_scale"
    deq = ck.tensors[target].copy()
    if deq.dtype == np.float32:
        deq[3] = np.nextafter(deq[3], np.float32(1))
    else:
        deq[3] += 1                      # one ULP of the fp32 bits
    ck.tensors[target] = deq
    found = [f for f in analyze(ck.save()).findings if f.code == "deq-mismatch"]
    assert len(found) == 1 and found[0].where == target and found[0].message.startswith("1 of")


def test_bias_contradicting_quant_bias_is_reported(crafted):
    ck = crafted("qwen2-w8a8-bf16")
    name = "model.layers.1.self_attn.k_proj.bias"
    ck.tensors[name] = (ck.tensors[name] + np.float32(0.5)).astype(np.float32)
    found = [f for f in analyze(ck.save()).findings if f.code == "bias-contradicts-quant-bias"]
    assert len(found) == 1 and found[0].where == name and found[0].severity == "warning"
    assert "ignores .bias" in found[0].message


def test_consistent_bias_is_information(data):
    info = [f for f in analyze(data.quant / "qwen2-w8a8-bf16").findings if f.code == "folded-bias"]
    assert len(info) == 6 and {f.severity for f in info} == {"info"}      # q/k/v of two layers


def test_missing_router_bias_is_reported_and_restoring_it_clears(data, crafted):
    assert "router-bias-missing" in _codes(data.quant / "dsv3-mix", "warning")
    ck = crafted("dsv3-mix")
    name = "model.layers.1.mlp.gate.e_score_correction_bias"
    ck.tensors[name] = np.array(MappedFile(data.float / "dsv3-bf16" / "model.safetensors").tensor(name))
    ck.types[name] = "FLOAT"
    assert "router-bias-missing" not in _codes(ck.save())


def test_wrong_reference_is_not_a_silent_fallback(data, float_copy, capsys):
    ck = str(data.quant / "qwen2-w8a8-dynamic")
    assert main(["inspect", ck, "--verify", "--reference", str(data.float / "qwen2-bf16")]) == 0
    capsys.readouterr()
    # another model: names / shapes / config
    assert main(["inspect", ck, "--verify", "--reference", str(data.float / "dsv3-bf16")]) == 2
    err = capsys.readouterr().err
    assert "not this checkpoint's float model" in err and "reference-missing" not in err
    assert "model_type" in err and "has no float .weight in the reference" in err
    # the same shapes, other weights (another seed's model): the distance
    path, tensors = float_copy("qwen2-bf16")
    rng = np.random.default_rng(0)
    for k in [k for k in tensors if k.endswith("proj.weight")]:
        tensors[k] = tensors[k][rng.permutation(tensors[k].shape[0])].copy()
    write_file(path / "model.safetensors", tensors)
    assert main(["inspect", ck, "--verify", "--reference", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not a quantization of the reference" in err and "14 of 14" in err
    # a missing tensor
    path, tensors = float_copy("qwen2-bf16", "float-missing")
    del tensors["model.layers.0.self_attn.o_proj.weight"]
    write_file(path / "model.safetensors", tensors)
    assert main(["inspect", ck, "--verify", "--reference", str(path)]) == 2
    assert "model.layers.0.self_attn.o_proj: W8A8_DYNAMIC Linear has no float .weight" in capsys.readouterr().err


def test_text_table_shows_static_parameters_and_information(data, capsys):
    assert main(["inspect", str(data.quant / "qwen2-w8a8-fp16")]) == 0
    text = capsys.readouterr().out
    assert "static: input_scale" in text and "scales after load / static parameters" in text
    assert "[info]" in text and "folds the stored .bias" in text


def test_verify_says_plainly_when_inputs_are_synthetic(data, capsys):
    ck = str(data.quant / "dsv3-mix")
    assert main(["inspect", ck, "--verify", "--backend", "torch-cpu"]) == 0
    text = capsys.readouterr().out
    assert "inputs: synthetic (no --reference with --prompts / --token-ids)" in text
    assert main(["inspect", ck, "--verify", "--backend", "torch-cpu", "--reference", str(data.float / "dsv3-bf16"),
                 "--token-ids", "1,2,3,4,5,6", "--json"]) == 0
    v = json.loads(capsys.readouterr().out)["verify"]
    assert v["inputs"].startswith("real activations") and v["results"]
    assert all(r["status"] == "pass" and r["inputs"].startswith("real") for r in v["results"])
    moe = [r for r in v["results"] if r["kind"] == "moe"]
    assert len(moe) == 1 and "the float router's choice" in moe[0]["inputs"]
    assert main(["inspect", ck, "--verify", "--token-ids", "1,2"]) == 2
    assert "need --reference" in capsys.readouterr().err
