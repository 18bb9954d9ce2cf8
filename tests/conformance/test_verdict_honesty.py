"""Verdicts that say only what the run shows: an op no backend of the run implements is NOT VERIFIED (exit 1),
never "all backends agree"; a degenerate output equal to a hand-derived documented value is trusted."""

from __future__ import annotations

import json

import numpy as np

import w8a8cli.main as cli
from backends.numpy_backend import NumpyBackend
from conformance import registry
from conformance.compare import MISTRUSTED, PASS
from conformance.evaluate import CaseSpec, run_both


def test_an_op_no_backend_of_the_run_implements_is_not_a_green(tmp_path, capsys):
    out = tmp_path / "r"
    rc = cli.main(["conformance", "--backend", "onnxruntime", "--op", "swiglu", "--out", str(out)])
    err = capsys.readouterr()
    text = (err.out + err.err).replace("\n", " ")
    assert rc == 1
    assert "agree with the golden" not in text and "onnxruntime does not implement swiglu" in text
    md = (out / "report.md").read_text()
    assert "NOT VERIFIED" in md and "onnxruntime does not implement swiglu" in md
    assert "onnxruntime does not implement swiglu" in (out / "report.html").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_status"] == 1 and not summary["ok"]


def _quantize_zeros(expected):
    spec = registry.get("quantize")
    x = np.zeros((4, 8), np.float32)
    build = lambda: ((x, np.full(8, 0.5, np.float32)), {"dtype": "int8", "axis": 1})  # noqa: E731
    case = CaseSpec("named", "quantize/zeros", build, expected)
    args, kwargs = build()
    verdict, _ = run_both(spec, case, args, kwargs, NumpyBackend())
    return verdict


def test_degenerate_output_equal_to_a_documented_value_is_trusted():
    # 0 / 0.5 = 0 -> code 0 everywhere: hand-derived, so a match is a check against an independent source
    verdict = _quantize_zeros({"y": np.zeros((4, 8), np.int8)})
    assert verdict.status == PASS
    assert "documented value: trusted" in verdict.comparisons["y"].note


def test_degenerate_output_without_a_documented_value_stays_mistrusted():
    assert _quantize_zeros({}).status == MISTRUSTED
