"""The per-module execution path (checkpoints/inspect.py) and ``w8a8 inspect``.

Expected layouts are derived from SGLang's alignment rule written out here (int8 ``[K, N]`` is NZ
when ``K % 16 == 0 and N % 32 == 0``), scale-rounding counts from ml_dtypes directly, FP19
truncation counts from the fp32 bits (a value changes when any of its low 13 mantissa bits is set).
"""

import json
import subprocess
import sys
import time

import ml_dtypes
import numpy as np

from checkpoints import Checkpoint, analyze, synthetic_checkpoint
from checkpoints.models import tiny_config
from w8a8cli.main import main


def report_of(path, **kw):
    rep = analyze(path, **kw)
    return rep, {r.module.name: r for r in rep.modules}


def aligned(k, n):
    return k % 16 == 0 and n % 32 == 0


def test_v3_layouts_and_op_families(kit):
    rep, mods = report_of(kit.make("v3"))
    # fused q_a (q_lora 64) + kv_a_with_mqa (kv_lora 32 + rope 16): N = 112, K = hidden 64 -> 112 % 32 != 0
    fused = mods["model.layers.1.self_attn.fused_qkv_a_proj_with_mqa"]
    assert not aligned(64, 112)
    assert (fused.layout, fused.checkpoint_shape, fused.loaded) == ("ND", "[112, 64] int8", "[64, 112] int8 ND")
    assert "[k=64, n=112]" in fused.nd_reason
    assert fused.op_family == "quantize + quant_matmul · V5 (ND)"
    assert any("aclnnQuantMatmulV5" in step for step in fused.chain)
    o_proj = mods["model.layers.1.self_attn.o_proj"]          # [64, 4 * 16] -> [64, 64]
    assert aligned(64, 64) and o_proj.layout == "NZ"
    assert any("aclnnQuantMatmulWeightNz -> CANN QuantBatchMatmulV3" in step for step in o_proj.chain)
    moe = mods["model.layers.1.mlp.experts"]                   # W13 [4, 64, 64], W2 [4, 32, 64]
    assert moe.loaded == "W13 [4, 64, 64] NZ, W2 [4, 32, 64] NZ" and moe.layout == "NZ"
    assert moe.checkpoint_shape == "4 x (W13 [64, 64] + W2 [64, 32])"
    assert rep.totals["linears_nd_fallback"] == 2 and rep.totals["linears_nd_fallback_names"] == [
        "model.layers.0.self_attn.fused_qkv_a_proj_with_mqa", "model.layers.1.self_attn.fused_qkv_a_proj_with_mqa"]


def test_vllm_ascend_has_no_alignment_fallback(kit):
    _, mods = report_of(kit.make("v3"), loader="vllm-ascend")
    assert mods["model.layers.1.self_attn.fused_qkv_a_proj"].layout == "NZ"


def test_v4_unaligned_hidden(tmp_path):
    # hidden 48: shared-expert w2 [48, 32] -> [32, 48]: 48 % 32 != 0 -> ND; experts' W2 [E, 32, 48] -> ND too
    cfg = tiny_config("v4", layers=1, experts=2, hidden=48, moe_inter=32, vocab=64)
    rep, mods = report_of(synthetic_checkpoint(tmp_path / "c", cfg))
    assert not aligned(32, 48)
    assert mods["layers.0.ffn.shared_experts.w2"].layout == "ND"
    moe = mods["layers.0.ffn.experts"]
    assert moe.layout == "ND" and moe.nd_reason.startswith("W2: ") and "W13" not in moe.nd_reason
    assert rep.totals["moe_nd_fallback"] == 1


def test_scale_rounding_is_counted(kit, naming):
    name = kit.NAMES[naming]["dyn"]
    path = kit.make(naming)
    s = np.asarray(Checkpoint.open(path).tensor(name + ".weight_scale")).reshape(-1)
    changed = int(np.count_nonzero(s.astype(ml_dtypes.bfloat16).astype(np.float32) != s))
    _, mods = report_of(path)
    assert mods[name].scales.startswith(f"weight_scale fp32 [N, 1] -> bf16 [N] ({changed}/{s.size} rounded")
    _, mods = report_of(path, read_data=False)
    assert "not read" in mods[name].scales


def test_fp16_model_static_deq_scale_fp19(kit, naming):
    static = kit.NAMES[naming]["static"]
    path = kit.make(naming, overrides=kit.NAMES[naming]["static_overrides"], dtype="float16")
    deq = np.asarray(Checkpoint.open(path).tensor(static + ".deq_scale"))
    truncated = int(np.count_nonzero((deq & 0x1FFF) != 0))        # low 13 mantissa bits of the fp32 pattern
    _, mods = report_of(path)
    text = mods[static].scales
    assert text.startswith("deq_scale int64 [N] (fp32 bits) -> read as FP19 by the fix-pipe")
    assert f"({truncated}/{deq.size} truncated" in text


def test_totals_and_summary(kit, naming):
    path = kit.make(naming)
    rep, _ = report_of(path)
    ck = Checkpoint.open(path)
    assert rep.totals["bytes"] == sum(e.nbytes for e in ck.entries.values())
    assert set(rep.totals["bytes_by_type"]) == set(ck.description.types.values())
    assert rep.summary["naming"].startswith("DeepSeek-V4" if naming == "v4" else "HF")
    assert rep.ok and rep.summary["errors"] == 0


def test_modules_with_errors(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        del w.tensors[n["dyn"] + ".weight_offset"]

    rep, _ = report_of(kit.make(naming, mutate))
    assert rep.modules_with_errors() == {n["dyn"]}


# -- the command line -----------------------------------------------------------------------------------

def test_cli_prints_the_table_fast(tmp_path, record_property):
    # The default tiny config: a 2-layer MoE checkpoint of a few MB (hidden 256, 8 experts).
    path = synthetic_checkpoint(tmp_path / "c", tiny_config("v4"))
    size = sum(f.stat().st_size for f in path.iterdir())
    assert 1e6 < size < 10e6
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "w8a8cli.main", "inspect", str(path)],
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    record_property("inspect_wall_s", wall)          # information only: speed is never asserted
    print(f"\nw8a8 inspect on a {size / 1e6:.1f} MB 2-layer MoE checkpoint: {wall:.2f} s wall (subprocess)")
    assert proc.returncode == 0, proc.stderr
    for text in ("layers.1.ffn.experts (moe)", "NPUW8A8Int8MoEMethod", "NPUW8A8Int8DynamicLinearMethod",
                 "UnquantizedLinearMethod", "totals", "Linears on the ND fallback: 0"):
        assert text in proc.stdout


def test_cli_json_trace_recipe(kit, capsys):
    path = kit.make("v4")
    assert main(["inspect", str(path), "--json", "--recipe", "deepseek_v4_flash_w8a8"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recipe"]["mismatches"] == []
    mods = {m["module"]: m for m in out["modules"]}
    assert mods["layers.1.attn.wq_a"]["method"] == "NPUW8A8Int8DynamicLinearMethod"
    assert mods["layers.1.ffn.experts"]["experts"] == 4
    assert main(["inspect", str(path), "--trace", "*wq_a"]) == 0
    text = capsys.readouterr().out
    assert "npu_dynamic_quant" in text and "aclnnQuantMatmulWeightNz" in text


def test_cli_bad_checkpoints(kit, tmp_path, capsys):
    n = kit.NAMES["v3"]

    def mutate(w):
        kit.retag(w, n["dyn"], "W9A9")

    assert main(["inspect", str(kit.make("v3", mutate))]) == 1
    assert "unknown quant type 'W9A9'" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["inspect", str(kit.make("v3")), "--recipe", "nope"]) == 2
    assert main(["inspect", str(kit.make("v3")), "--verify", "--tokens", "0"]) == 2
