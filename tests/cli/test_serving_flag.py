"""--serving on w8a8 run / inspect / explain (w8a8.serving): the flag reaches the composition, and a DeepSeek-V3
checkpoint run under both engines reports each engine's name and differs only by the router logits' dtype (M4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from w8a8cli.main import main

DATA = Path(__file__).resolve().parents[1] / "modelrun" / "data"


def test_explain_prints_the_engine_rows_around_the_op(capsys):
    assert main(["explain", "dequant_swiglu_quant", "--shape", "4x64", "--dtype", "bfloat16", "--serving",
                 "vllm-ascend", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["serving"]
    assert rows["M1"]["value"] == "swiglu_limit" and "moe_comm_method.py" in rows["M1"]["source"]


def test_inspect_reports_the_composition_and_refuses_a_mismatched_loader(capsys):
    ck = str(DATA / "msmodelslim" / "dsv3-mix")
    assert main(["inspect", ck, "--headers-only", "--json"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    assert out["serving"]["M2"]["value"] == "output_mul_bf16"
    assert main(["inspect", ck, "--serving", "vllm-ascend"]) == 2
    assert "--serving vllm-ascend needs --loader vllm-ascend" in capsys.readouterr().err


@pytest.mark.slow
def test_run_of_the_deepseek_v3_checkpoint_under_both_engines(capsys):
    outs = {}
    for engine in ("sglang", "vllm-ascend"):
        assert main(["run", str(DATA / "msmodelslim" / "dsv3-mix"), "--reference", str(DATA / "float" / "dsv3-bf16"),
                     "--tokens", "1,5,9,13,17,21,25,29", "--no-per-layer", "--serving", engine, "--json"]) == 0
        outs[engine] = json.loads(capsys.readouterr().out)
    assert [outs[e]["serving"] for e in outs] == ["sglang", "vllm-ascend"]
    # the bf16 vs fp32 gate matmul (M4) moves the logits a little; M2's multiply is the same in both
    assert outs["sglang"]["logits"]["rel_l2"] != outs["vllm-ascend"]["logits"]["rel_l2"]
