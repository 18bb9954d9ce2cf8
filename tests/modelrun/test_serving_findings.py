"""``w8a8 inspect --serving``: the findings where an engine's MoE composition is likely wrong or refused
(rows M10 and M1), on the checkpoints msModelSlim wrote (DeepSeek-V3 mix, DeepSeek-V4 Flash recipe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from w8a8cli.main import main

DSV4 = Path(__file__).resolve().parent / "dsv4" / "data" / "msmodelslim" / "dsv4-w8a8"


def _inspect(path, serving, capsys):
    rc = main(["inspect", str(path), "--headers-only", "--json", "--serving", serving])
    out = json.loads(capsys.readouterr().out)
    assert out["serving"]["name"] == serving
    return rc, out["serving"]["findings"]


@pytest.mark.parametrize("w2", ["FLOAT", "W8A8"])
def test_m10_sglang_refuses_a_w2_other_than_w13(data, crafted, capsys, w2):
    ck = crafted("dsv3-mix")
    downs = [k for k in ck.types if ".experts." in k and k.endswith("down_proj.weight")]
    assert downs and all(ck.types[k] == "W8A8_DYNAMIC" for k in downs)
    for k in downs:
        ck.types[k] = w2
    path = ck.save()
    rc, found = _inspect(path, "sglang", capsys)
    (f,) = [f for f in found if f["code"] == "serving-moe-w2-scheme"]
    assert rc == 1 and f["severity"] == "error" and f["where"] == "model.layers.1.mlp.experts"
    assert f"W2 {w2}" in f["message"] and "modelslim.py@07ee8929" in f["message"]
    _, found = _inspect(path, "vllm-ascend", capsys)
    assert not [f for f in found if f["code"] == "serving-moe-w2-scheme"]


def test_m10_matching_w2_loads(data, capsys):
    rc, found = _inspect(data.quant / "dsv3-mix", "sglang", capsys)
    assert found == [] and rc == 0


def test_m1_sglang_runs_dsv4_routed_experts_unclamped(capsys):
    """DeepSeek-V4's config sets swiglu_limit 10: SGLang's ascend_tp runner drops it for the routed experts."""
    cfg = json.loads((DSV4 / "config.json").read_text())
    assert cfg["swiglu_limit"] == 10.0
    _, found = _inspect(DSV4, "sglang", capsys)
    unclamped = [f for f in found if f["code"] == "serving-routed-unclamped"]
    assert unclamped and all(f["severity"] == "warning" for f in unclamped)
    assert all("swiglu_limit=10.0" in f["message"] and "ascend.py@0dd459f6" in f["message"] for f in unclamped)
    assert all(".ffn.experts" in f["where"] or ".mlp.experts" in f["where"] for f in unclamped)
    _, found = _inspect(DSV4, "vllm-ascend", capsys)
    assert not [f for f in found if f["code"] == "serving-routed-unclamped"]
