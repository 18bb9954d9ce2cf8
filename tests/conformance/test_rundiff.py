"""``w8a8 compare``: two runs of "different versions" — the golden's record, then a build that rounds ties away
from zero (the planted TiesAwayBackend) — list the cases that regressed, the new cause and the distance shift."""

import json
import subprocess
import sys

import pytest

import backends
from conformance import registry
from conformance.evaluate import run_case
from conformance.reports import rundiff
from conformance.results import ResultsFile
from conformance.runner import draw_cases


def _ties(seed):
    return {"lead": [4], "h": 16, "dtype": "bfloat16", "dst_type": "int8", "smooth": "none", "group_index": None,
            "dist": "ties", "seed": seed}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    spec = registry.get("dynamic_quant")
    cases = [_ties(s) for s in (1, 2, 3)] + draw_cases(spec, 6, 0)
    root = tmp_path_factory.mktemp("runs")
    for name, backend in (("old", "numpy"), ("new", "conformance.planted:TiesAwayBackend")):
        b = backends.get(backend)
        (root / name).mkdir()
        ResultsFile(root / name / "results.jsonl").append_many([run_case(spec, p, b) for p in cases])
    return root


def test_diff_lists_regressions_new_causes_and_shifts(two_runs):
    d = rundiff.diff(rundiff.load(two_runs / "old"), rundiff.load(two_runs / "new"))
    assert d["backend_a"] == "numpy" and d["backend_b"] == "planted-ties-away" and d["compared"] == 9
    assert d["regressions"] >= 3 and d["fixes"] == 0
    assert all(c["from"] == "pass" and c["to"] == "fail" for c in d["changed"] if c["kind"] == "regression")
    assert any("tie rounding" in c["cause"] for c in d["new_causes"]) and not d["gone_causes"]
    assert any(s["op"] == "dynamic_quant" and s["from"] == "0" and s["to"] != "0" for s in d["shifts"])
    text = rundiff.render(d)
    assert "## Cases that changed verdict" in text and "--backend conformance.planted:TiesAwayBackend" in text
    # the reverse direction: the same cases are fixes, the cause is gone
    back = rundiff.diff(rundiff.load(two_runs / "new"), rundiff.load(two_runs / "old"))
    assert back["fixes"] == d["regressions"] and back["regressions"] == 0 and back["gone_causes"]


def test_compare_command_exit_status_and_bad_usage(two_runs, tmp_path):
    cmd = [sys.executable, "-m", "w8a8cli.main", "compare"]
    out = subprocess.run(cmd + [str(two_runs / "old"), str(two_runs / "new"), "--json"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout)["regressions"] >= 3
    same = subprocess.run(cmd + [str(two_runs / "old"), str(two_runs / "old")], capture_output=True, text=True,
                          timeout=300)
    assert same.returncode == 0 and "No differences." in same.stdout
    missing = subprocess.run(cmd + [str(tmp_path / "nothing"), str(two_runs / "old")], capture_output=True, text=True,
                             timeout=300)
    assert missing.returncode == 2 and "argument RUN must be a results.jsonl" in missing.stderr
    unknown = subprocess.run(cmd + [str(two_runs / "old"), str(two_runs / "new"), "--backend-a", "onnxruntime"],
                             capture_output=True, text=True, timeout=300)
    assert unknown.returncode == 2 and "is not in run A" in unknown.stderr
