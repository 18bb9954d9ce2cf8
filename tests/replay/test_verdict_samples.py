"""Verdicts, causes and hints on dumps written by msprobe 26.2.0's own writer (``make_verdict_fixtures.py``):
a three-layer dense model whose planted kernels ignore an optional input, for small and large values of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import w8a8cli.main as cli

V = Path(__file__).resolve().parent / "samples" / "verdicts"
PLANTED = json.loads((V / "GENERATED.json").read_text())["optional_input_ignored"]
STAGE = {"dynamic_quant": "scale", "quant_matmul": "y", "dequant_swiglu_quant": "scale"}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    from replay.engine import ResultsFile
    from replay.runner import Options, replay_dump

    out = tmp_path_factory.mktemp("planted")
    results = ResultsFile(out / "results.jsonl")
    replay_dump(V / "planted-tensor", Options(case_dir=out / "cases"), results)
    return {r["name"]: r for r in results.records() if r.get("kind") == "replay"}


@pytest.mark.parametrize("call", sorted(PLANTED))
def test_optional_input_ignored_is_named_at_its_stage(planted, call):
    op, n = call.rsplit(".", 1)
    rec = planted[f"NPU.npu_{op}.{n}.forward"]
    at = rec["attribution"]
    assert rec["verdict"] == "disagree"
    assert at["reproduced"] and at["kind"] == "optional input"
    assert at["numerics_change"] == {"args": {PLANTED[call]: None}}
    assert f"optional input ignored: the backend computes as if '{PLANTED[call]}' were not given" in at["cause"]
    assert at["first_stage"] == STAGE[op]


def test_the_small_bias_moves_the_scale_beyond_any_rounding_cause(planted):
    """The evidence the cause must respect: the small-bias call's scales differ by far more than 4 fp32 ULP."""
    rec = planted["NPU.npu_dequant_swiglu_quant.0.forward"]
    assert rec["outputs"]["scale"]["max_ulp"] > 4
    assert "tie" not in rec["attribution"]["cause"] and "reciprocal" not in rec["attribution"]["cause"]


def test_the_clean_layer_agrees(planted):
    for op in ("dynamic_quant", "quant_matmul", "dequant_swiglu_quant"):
        assert planted[f"NPU.npu_{op}.2.forward"]["verdict"] == "agree-bitwise"


def test_clean_statistics_md5_dump_without_inputs_exits_0(tmp_path):
    out = tmp_path / "r"
    rc = cli.main(["replay", str(V / "clean-md5"), "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    counts = summary["counts"]
    assert "disagree" not in counts and "stats-inconsistent" not in counts and "crc-mismatch" not in counts
    assert counts.get("missing-data", 0) > 0 and summary["not_saved"]      # not judged: tensors never saved
    assert rc == 0
    head = (out / "report.md").read_text().splitlines()[2]
    assert f"{len(summary['not_saved'])} call(s) not judged" in head and "MISSING" not in head


def test_planted_md5_dump_still_exits_1_with_its_inputs(tmp_path):
    rc = cli.main(["replay", str(V / "planted-md5"), "--inputs", str(V / "planted-tensor"), "--out",
                   str(tmp_path / "r")])
    assert rc == 1


def test_the_crc_hint_config_dumps_that_call_in_msprobe(tmp_path):
    """The list the crc-mismatch hint gives, fed to msprobe's own writer (``list-one-call``), dumped that call."""
    from replay.engine import ResultsFile
    from replay.runner import Options, replay_dump

    results = ResultsFile(tmp_path / "r.jsonl")
    replay_dump(V / "planted-md5", Options(inputs=[str(V / "planted-tensor")], case_dir=tmp_path / "c"), results)
    rec = next(r for r in results.records() if r.get("name") == "NPU.npu_dynamic_quant.1.forward")
    assert rec["verdict"] == "crc-mismatch"
    note = next(o["note"] for o in rec["outputs"].values() if o["verdict"] == "crc-mismatch")
    assert '"list": ["NPU.npu_dynamic_quant.1.forward"]' in note
    dumped = json.loads((V / "list-one-call" / "step0" / "rank0" / "dump.json").read_text())["data"]
    assert list(dumped) == ["NPU.npu_dynamic_quant.1.forward"]


def test_stats_inconsistent_evidence_reaches_terminal_and_reports(tmp_path, capsys):
    out = tmp_path / "r"
    rc = cli.main(["replay", str(V / "stats-planted"), "--out", str(out)])
    assert rc == 1
    recs = {json.loads(line)["name"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}
    rec = recs["NPU.npu_dynamic_quant.2.forward"]
    assert rec["verdict"] == "stats-inconsistent"
    failing = next(c for c in rec["invariants"] if not c["ok"])
    assert failing["check"].startswith("scale Max")
    evidence = failing["detail"].split(" (amax")[0]            # "device 0.0..., golden 0.0..."
    assert "inputs not available" not in rec["note"] and evidence in rec["note"]
    terminal = capsys.readouterr()
    assert "scale Max" in terminal.err.replace("\n", " ") or "scale Max" in terminal.out
    assert evidence in (out / "report.md").read_text()
    import html

    assert html.escape(evidence) in (out / "report.html").read_text() or evidence in (out / "report.html").read_text()
