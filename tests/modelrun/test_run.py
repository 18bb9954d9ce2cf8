"""``w8a8 run`` on the checkpoints msModelSlim 26.1.0 wrote (``data/``): what it prints and writes,
golden and torch-cpu identical on the real activations, the bounds, routing causes, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from checkpoints.safetensors_io import write_file
from modelrun import analysis
from w8a8cli.main import main

PAIRS = {"qwen2-w8a8-dynamic": "qwen2-bf16", "qwen2-w8a8-bf16": "qwen2-bf16", "qwen2-w8a8-fp16": "qwen2-fp16",
         "dsv3-mix": "dsv3-bf16"}
PROMPTS = "The quick brown fox jumps over the lazy dog.\nA mixture of experts sends each token to a few experts.\n"


@pytest.fixture
def prompts(tmp_path):
    p = tmp_path / "prompts.txt"
    p.write_text(PROMPTS)
    return p


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_run_prints_logits_and_module_table_and_backends_agree(data, name, prompts, tmp_path, capsys):
    out_dir = tmp_path / "out"
    rc = main(["run", str(data.quant / name), "--reference", str(data.float / PAIRS[name]), "--prompts", str(prompts),
               "--backend", "numpy", "--backend", "torch-cpu", "--out", str(out_dir)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "logits: rel-L2" in text and "top-1 agreement" in text
    assert "quantized modules on their real activations" in text
    assert "backend torch-cpu vs golden on the real activations: bit for bit on every module" in text
    report = json.loads((out_dir / "run.json").read_text())
    html = (out_dir / "run.html").read_text()
    assert "data:image/png;base64," in html and "id='modules'" in html
    quantized = [k for k, v in json.loads((data.quant / name / "quant_model_description.json").read_text()).items()
                 if k.endswith(".weight") and v in ("W8A8", "W8A8_DYNAMIC") and ".experts." not in k]
    dense = [m for m in report["modules"] if m["kind"] == "linear"]
    assert len(dense) == len(quantized)            # every quantized Linear ran on the serving path
    assert all(m["backends"]["torch-cpu"]["bitwise"] for m in report["modules"])
    # the analytic bound holds on every module of the real checkpoints, and is not vacuous
    assert report["first_exceeding"] is None
    assert all(0.05 < float(m["worst_ratio"]) <= 1.0 for m in dense)
    lg = report["logits"]
    assert 0 < lg["rel_l2"] < 0.5 and 0.4 <= lg["top1"] <= 1.0
    assert report["per_layer"][0]["layer"] is None and len(report["per_layer"]) == 3


def test_static_sqnr_on_real_activations_is_lower_than_on_synthetic(data, prompts, capsys):
    """The issue's point: synthetic inputs uniform over the calibrated range flatter a static Linear."""
    args = ["inspect", str(data.quant / "qwen2-w8a8-bf16"), "--verify", "--reference", str(data.float / "qwen2-bf16"),
            "--json", "--layers", "model.layers.0.mlp.down_proj"]
    assert main(args) == 0
    synthetic = json.loads(capsys.readouterr().out)["verify"]
    assert main(args + ["--prompts", str(prompts)]) == 0
    real = json.loads(capsys.readouterr().out)["verify"]
    assert synthetic["inputs"].startswith("synthetic") and real["inputs"].startswith("real activations")
    (s,), (r,) = synthetic["results"], real["results"]
    assert s["inputs"].startswith("synthetic") and r["inputs"].startswith("real")
    assert r["status"] == s["status"] == "pass"
    assert float(s["sqnr_db"]) > float(r["sqnr_db"]) + 6


def test_deepseek_routing_agreement_and_its_causes(data):
    seqs = analysis.encode_prompts(data.quant / "dsv3-mix", PROMPTS.splitlines())
    out = analysis.run(data.quant / "dsv3-mix", data.float / "dsv3-bf16", seqs, per_layer=True)
    (route,) = out["routing"]
    assert route["tokens"] == sum(len(s) for s in seqs)
    assert route["changed"] > 0 and sum(route["causes"].values()) == route["changed"]
    # msModelSlim's saver dropped the router's correction bias: most changed tokens come from it
    assert route["causes"]["correction bias"] >= route["changed"] // 2
    assert "e_score_correction_bias" in route["note"]
    # with no module quantized the checkpoint already moves the logits (its router has no bias)
    baseline = out["per_layer"][0]
    assert baseline["layer"] is None and baseline["rel_l2"] > 0.05


def test_restoring_the_router_bias_removes_that_cause(data, crafted):
    ck = crafted("dsv3-mix")
    from checkpoints.safetensors_io import MappedFile

    f = MappedFile(data.float / "dsv3-bf16" / "model.safetensors")
    name = "model.layers.1.mlp.gate.e_score_correction_bias"
    ck.tensors[name] = np.array(f.tensor(name))
    ck.types[name] = "FLOAT"
    path = ck.save()
    seqs = analysis.encode_prompts(path, PROMPTS.splitlines())
    fixed = analysis.run(path, data.float / "dsv3-bf16", seqs)
    broken = analysis.run(data.quant / "dsv3-mix", data.float / "dsv3-bf16", seqs)
    assert fixed["routing"][0]["causes"]["correction bias"] == 0 and fixed["routing"][0]["note"] is None
    assert fixed["per_layer"][0]["rel_l2"] == 0.0            # none quantized: the float model exactly
    assert fixed["logits"]["rel_l2"] < broken["logits"]["rel_l2"]


def test_a_saturating_static_quantizer_exceeds_its_bound(data, crafted, prompts, capsys):
    """A calibration range 8x too small: real activations saturate, the error leaves the bound there."""
    ck = crafted("qwen2-w8a8-bf16")
    target = "model.layers.1.mlp.down_proj"
    ck.tensors[target + ".input_scale"] = (ck.tensors[target + ".input_scale"] / 8).astype(np.float32)
    ck.tensors[target + ".deq_scale"] = (ck.tensors[target + ".deq_scale"] / 8).astype(np.float32)
    path = ck.save()
    rc = main(["run", str(path), "--reference", str(data.float / "qwen2-bf16"), "--prompts", str(prompts),
               "--json", "--no-per-layer"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    first = out["first_exceeding"]
    assert first["module"] == target and first["saturated"] > 0 and "saturate" in first["why"]
    before = [m for m in out["modules"] if m["order"] < next(x["order"] for x in out["modules"] if x["name"] == target)]
    assert all(m["exceed"] == 0 for m in before)


def test_tokens_outside_the_calibration_data_saturate_a_real_static_quantizer(data, capsys):
    """Token ids unlike msModelSlim's calibration prompts: layer 1's o_proj sees values beyond its
    calibrated range in the unaltered checkpoint, and its error leaves the bound exactly there."""
    rc = main(["run", str(data.quant / "qwen2-w8a8-bf16"), "--reference", str(data.float / "qwen2-bf16"),
               "--tokens", "3,14,15,92,65,35,89,79", "--json", "--no-per-layer"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    first = out["first_exceeding"]
    assert first["module"] == "model.layers.1.self_attn.o_proj" and first["saturated"] > 0
    assert all(m["exceed"] == 0 for m in out["modules"] if m["saturated"] == 0)


def test_layers_selects_what_runs_quantized(data):
    seqs = [[1, 2, 3, 4, 5]]
    out = analysis.run(data.quant / "qwen2-w8a8-dynamic", data.float / "qwen2-bf16", seqs, layers="layers.1",
                       per_layer=False)
    assert {m["layer"] for m in out["modules"]} == {1}
    one = analysis.run(data.quant / "qwen2-w8a8-dynamic", data.float / "qwen2-bf16", seqs,
                       layers="model.layers.0.self_attn.q_proj", per_layer=False)
    assert [m["name"] for m in one["modules"]] == ["model.layers.0.self_attn.q_proj"]


def test_token_ids_and_bounds_on_input(data, capsys):
    ck, ref = str(data.quant / "qwen2-w8a8-dynamic"), str(data.float / "qwen2-bf16")
    assert main(["run", ck, "--reference", ref, "--tokens", "1,2,3", "--tokens", "4,5", "--no-per-layer"]) == 0
    assert "2 sequence(s), 5 tokens" in capsys.readouterr().out
    assert main(["run", ck, "--reference", ref, "--tokens", "1,2,256"]) == 2
    assert "[0, vocab_size = 256)" in capsys.readouterr().err
    assert main(["run", ck, "--reference", ref, "--tokens", ",".join(["1"] * 20), "--max-tokens", "16"]) == 2
    assert "--tokens: expected at most --max-tokens 16 tokens in all, got 20" in capsys.readouterr().err
    assert main(["run", ck, "--reference", ref, "--tokens", "1,x"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
    assert main(["run", ck, "--reference", ref, "--prompts", "/nonexistent/prompts.txt"]) == 2
    assert "--prompts" in capsys.readouterr().err
    assert main(["run", ck, "--reference", ref, "--tokens", "1", "--backend", "no-such"]) == 2
    assert "unknown backend" in capsys.readouterr().err


def test_wrong_reference_is_refused(data, float_copy, capsys):
    ck = str(data.quant / "qwen2-w8a8-bf16")
    # another architecture: names and shapes
    assert main(["run", ck, "--reference", str(data.float / "dsv3-bf16"), "--tokens", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "does not match the checkpoint" in err and "reference-config" not in err and "model_type" in err
    # same architecture and shapes, another weight: the distance
    path, tensors = float_copy("qwen2-bf16")
    name = "model.layers.1.mlp.up_proj.weight"
    tensors[name] = tensors[name][::-1].copy()
    write_file(path / "model.safetensors", tensors)
    assert main(["run", ck, "--reference", str(path), "--tokens", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "model.layers.1.mlp.up_proj" in err and "not a quantization of the reference" in err


def test_deepseek_v4_family_is_refused_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match="DeepSeek-V4"):
        from modelrun import config

        config.parse({"model_type": "deepseek_v4", "compress_ratios": [4]})
