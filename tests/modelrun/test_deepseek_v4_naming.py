"""A DeepSeek-V4-named variant of the MoE + attention checkpoint, resolved and run as far as the
model family allows.

msModelSlim's DeepSeek-V4 adapter needs an NPU, so the variant is assembled here: the MoE layer's
routed and shared experts and the dense FFN are msModelSlim's own tensors from ``dsv3-mix`` renamed
to DeepSeek-V4's native names (``layers.1.ffn.experts.{e}.w1/w3/w2``, ``ffn.shared_experts.*``,
``ffn.gate`` + ``gate.bias``); the attention modules take DeepSeek-V4's layout (``wq_a``, ``wq_b``,
``wkv``, ``wo_a``, ``wo_b``, a compressor and an indexer in layer 0, a compressor in layer 1) with
random float weights, quantized where the DeepSeek-V4-Flash recipe says W8A8_DYNAMIC by the offline
helpers in model-dtype mode (which reproduce msModelSlim bit for bit, test_offline_msmodelslim.py)
and left FLOAT where it excludes them (``wo_a``, ``wo_b``, compressor / indexer projections).

How far it goes: ``w8a8 inspect`` resolves every module through SGLang's DeepSeek-V4 remap with no
error and the recipe diff is empty; ``--verify`` runs every quantized module (dense Linears and the
MoE with DeepSeek-V4's ``swiglu_limit``) on numpy and torch-cpu, bit for bit, on synthetic inputs;
``w8a8 run`` refuses it: it has DeepSeek-V4's names but not its config (``modelrun.deepseek_v4`` runs
the real thing: tests/modelrun/dsv4/).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from checkpoints import analyze
from checkpoints.recipes import checkpoint_linear_types, diff, load_recipe
from checkpoints.safetensors_io import MappedFile, write_file
from checkpoints.verify import verify
from w8a8 import dtypes as _dt
from w8a8.offline import quantize_weight_per_channel
from w8a8cli.main import main

HIDDEN, HEADS, HEAD_DIM, Q_LORA, O_LORA, O_GROUPS, IDX_HEADS, IDX_DIM = 64, 4, 32, 32, 16, 2, 2, 16

RENAME = [(r"^model\.embed_tokens\.", "embed."), (r"^lm_head\.", "head."), (r"^model\.norm\.", "norm."),
          (r"^model\.layers\.", "layers."), (r"\.mlp\.", ".ffn."), (r"\.input_layernorm\.", ".attn_norm."),
          (r"\.post_attention_layernorm\.", ".ffn_norm."), (r"\.gate_proj\.", ".w1."), (r"\.down_proj\.", ".w2."),
          (r"\.up_proj\.", ".w3."), (r"\.gate\.e_score_correction_bias$", ".gate.bias")]


def _native(name: str) -> str:
    for pat, rep in RENAME:
        name = re.sub(pat, rep, name)
    return name


def build_dsv4(src, float_dir, out) -> None:
    mf = MappedFile(src / "quant_model_weights-00001-of-00001.safetensors")
    desc = json.loads((src / "quant_model_description.json").read_text())
    tensors, types = {}, {}
    for name in mf.entries:
        if ".self_attn." in name:
            continue                     # DeepSeek-V4's attention is laid out below
        tensors[_native(name)] = np.array(mf.tensor(name))
        types[_native(name)] = desc[name]
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"     # dropped by msModelSlim's saver: from the float model
    tensors[_native(bias)] = np.array(MappedFile(float_dir / "model.safetensors").tensor(bias))
    types[_native(bias)] = "FLOAT"
    rng = np.random.default_rng(4)

    def float_w(n, k):
        return (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32).astype(_dt.bfloat16)

    def put(name, array, tag="FLOAT"):
        tensors[name], types[name] = array, tag

    def linear(prefix, n, k, quantized):
        w = float_w(n, k)
        if not quantized:
            put(prefix + ".weight", w)
            return
        q, s, o = quantize_weight_per_channel(w, model_dtype="bfloat16")
        for suffix, a in ((".weight", q), (".weight_scale", s), (".weight_offset", o)):
            put(prefix + suffix, a, "W8A8_DYNAMIC")

    for layer, ratio in ((0, 4), (1, 128)):
        a = f"layers.{layer}.attn"
        linear(a + ".wq_a", Q_LORA, HIDDEN, True)
        linear(a + ".wq_b", HEADS * HEAD_DIM, Q_LORA, True)
        linear(a + ".wkv", HEAD_DIM, HIDDEN, True)
        linear(a + ".wo_a", O_GROUPS * O_LORA, HEADS * HEAD_DIM // O_GROUPS, False)
        linear(a + ".wo_b", HIDDEN, O_GROUPS * O_LORA, False)
        for n in ("q_norm", "kv_norm"):
            put(f"{a}.{n}.weight", np.ones(Q_LORA if n == "q_norm" else HEAD_DIM, _dt.bfloat16))
        put(a + ".attn_sink", np.zeros(HEADS, np.float32))
        c = 2 if ratio == 4 else 1
        linear(a + ".compressor.wkv", c * HEAD_DIM, HIDDEN, False)
        linear(a + ".compressor.wgate", c * HEAD_DIM, HIDDEN, False)
        put(a + ".compressor.ape", np.zeros((ratio, c * HEAD_DIM), np.float32))
        put(a + ".compressor.norm.weight", np.ones(HEAD_DIM, _dt.bfloat16))
        if ratio == 4:
            linear(a + ".indexer.wq_b", IDX_HEADS * IDX_DIM, Q_LORA, True)
            linear(a + ".indexer.weights_proj", IDX_HEADS, HIDDEN, False)
            linear(a + ".indexer.compressor.wkv", 2 * IDX_DIM, HIDDEN, False)
            linear(a + ".indexer.compressor.wgate", 2 * IDX_DIM, HIDDEN, False)
        for part in ("attn", "ffn"):
            put(f"layers.{layer}.hc_{part}_fn", np.zeros((8, 2 * HIDDEN), np.float32))
            put(f"layers.{layer}.hc_{part}_base", np.zeros(8, np.float32))
            put(f"layers.{layer}.hc_{part}_scale", np.ones(3, np.float32))
    put("hc_head_fn", np.zeros((2, 2 * HIDDEN), np.float32))
    put("hc_head_base", np.zeros(2, np.float32))
    put("hc_head_scale", np.ones(1, np.float32))
    out.mkdir(parents=True)
    write_file(out / "quant_model_weights.safetensors", tensors)
    (out / "quant_model_description.json").write_text(json.dumps(
        {"version": "1.0.0", "model_quant_type": "W8A8_DYNAMIC", "group_size": 0, "metadata": {}, "optional": {},
         **dict(sorted(types.items()))}, indent=1))
    cfg = json.loads((src / "config.json").read_text())
    cfg.update({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "head_dim": HEAD_DIM,
                "o_lora_rank": O_LORA, "o_groups": O_GROUPS, "compress_ratios": [4, 128], "index_n_heads": IDX_HEADS,
                "index_head_dim": IDX_DIM, "hc_mult": 2, "swiglu_limit": 10.0, "num_hash_layers": 0})
    (out / "config.json").write_text(json.dumps(cfg, indent=1))


@pytest.fixture
def dsv4(data, tmp_path):
    out = tmp_path / "dsv4-variant"
    build_dsv4(data.quant / "dsv3-mix", data.float / "dsv3-bf16", out)
    return out


def test_resolves_through_the_sglang_remap(dsv4):
    report = analyze(dsv4)
    assert report.ok, [str(f) for f in report.findings.errors]
    assert report.summary["naming"].startswith("DeepSeek-V4 native")
    by_name = {r.module.name: r.module for r in report.modules}
    moe = by_name["layers.1.ffn.experts"]
    assert moe.kind == "moe" and moe.scheme == "W8A8_DYNAMIC" and len(moe.moe.experts) == 8
    assert moe.serving_name == "model.layers.1.mlp.experts"       # SGLang: w1/w3/w2 -> gate/up/down_proj
    res = report.resolution
    assert [res.native_prefix(moe.moe.expert_prefix(0, p)) for p in moe.moe.naming] == [
        "layers.1.ffn.experts.0.w1", "layers.1.ffn.experts.0.w3", "layers.1.ffn.experts.0.w2"]
    for leaf in ("wo_a", "wo_b", "compressor.wkv", "compressor.wgate"):
        assert by_name[f"layers.0.attn.{leaf}"].scheme == "FLOAT"
    assert by_name["layers.0.attn.indexer.wq_b"].scheme == "W8A8_DYNAMIC"
    assert by_name["layers.0.attn.wq_a"].method == "NPUW8A8Int8DynamicLinearMethod"
    assert by_name["layers.1.ffn.gate"].kind == "router"
    assert "router-bias-missing" not in [f.code for f in report.findings]   # gate.bias -> e_score_correction_bias


def test_recipe_prediction_matches(dsv4):
    report = analyze(dsv4)
    actual = checkpoint_linear_types(report.resolution.checkpoint)
    assert diff(load_recipe("deepseek_v4_flash_w8a8"), actual) == []
    assert {actual[m] for m in actual if m.endswith(("wo_a", "wo_b"))} == {"FLOAT"}


@pytest.mark.parametrize("backend", ["numpy", "torch-cpu"])
def test_every_quantized_module_verifies_bit_for_bit(dsv4, backend):
    report = analyze(dsv4)
    results = verify(report.resolution, backend=backend)
    assert results and all(r.status == "pass" for r in results), [r.as_dict() for r in results if r.status != "pass"]
    assert {r.kind for r in results} == {"linear", "moe"}
    assert all(r.inputs.startswith("synthetic") for r in results)
    (moe,) = [r for r in results if r.kind == "moe"]
    assert "swiglu_limit 10" in moe.message


def test_whole_model_run_needs_the_full_config(dsv4, data, capsys):
    """This assembled variant has DeepSeek-V4's names but not its config (no hyper-connections, no compress
    ratios): ``w8a8 run`` (modelrun.deepseek_v4) refuses it naming the first key that does not fit."""
    assert main(["run", str(dsv4), "--reference", str(data.float / "dsv3-bf16"), "--tokens", "1,2,3"]) == 2
    err = capsys.readouterr().err
    assert re.match(r"w8a8 run: config\.json: '\w+' (is missing|must be)", err), err
