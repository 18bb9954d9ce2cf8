"""The runner: streaming results, resume after SIGKILL, crash isolation, timeouts."""

import json
import signal
import subprocess
import sys
import time
from collections import Counter

from conformance.results import ResultsFile
from conformance.runner import RunOptions, Task, draw_cases, load_plan, plan, run
from conformance import registry

PLANTED = "conformance.planted:"


def _cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "w8a8cli.main", "conformance", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def test_draw_is_deterministic_for_a_seed_and_differs_across_seeds():
    spec = registry.get("quant_matmul")
    a, b, c = draw_cases(spec, 12, 1), draw_cases(spec, 12, 1), draw_cases(spec, 12, 2)
    assert a == b and a != c and len(a) == 12


def test_plan_covers_named_error_and_drawn_cases_per_implemented_op():
    # dev profile: 8 drawn cases from each op's main strategy, 8 // 8 = 1 from its "bits" strategy
    tasks, skipped = plan(["numpy"], ["dynamic_quant", "quant_matmul"], profile="dev", seed=0)
    kinds = Counter((t.op, t.kind) for t in tasks)
    dq = registry.get("dynamic_quant")
    assert kinds[("dynamic_quant", "named")] == len(dq.cases) >= 5
    assert kinds[("dynamic_quant", "error")] == len(dq.bad_calls) >= 20
    assert kinds[("dynamic_quant", "drawn")] == 8 + 1 and kinds[("quant_matmul", "drawn")] == 8 + 1
    assert skipped == {"numpy": []}
    named = [t for t in tasks if t.kind == "named"][0]
    assert named.params == {"named": named.name} and named.name.startswith(named.op + "/")


def test_torn_last_line_is_cut_before_appending(tmp_path):
    f = ResultsFile(tmp_path / "r.jsonl")
    f.append({"backend": "b", "case_id": "c1", "status": "pass"})
    with open(f.path, "a") as raw:
        raw.write('{"backend": "b", "case_id": "c2", "sta')  # a write cut by SIGKILL
    assert [r["case_id"] for r in f.records()] == ["c1"]
    assert f.repair() > 0
    f.append({"backend": "b", "case_id": "c3", "status": "pass"})
    lines = f.path.read_text().splitlines()
    assert [json.loads(line)["case_id"] for line in lines] == ["c1", "c3"]


def test_sigkill_midway_then_resume_completes_without_redoing_or_corrupting(tmp_path):
    out = tmp_path / "run"
    args = ["--backend", "numpy", "--op", "w8a8_dynamic_linear", "--op", "quant_matmul", "--profile", "thorough",
            "--workers", "0", "--out", str(out), "--no-attribution"]
    proc = _cli(*args)
    results = out / "results.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:
        if results.exists() and results.read_text().count("\n") >= 40:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = ResultsFile(results).records()
    assert 40 <= len(before) < 600, "the run must be killed midway"
    keys_before = {(r["backend"], r["case_id"]) for r in before}

    resumed = _cli(*args, "--resume")
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output
    records = ResultsFile(results).records()
    for line in results.read_text().splitlines():
        json.loads(line)  # every line is a whole record
    counts = Counter((r["backend"], r["case_id"]) for r in records)
    assert all(counts[k] == 1 for k in keys_before), "a finished case was run again"
    tasks, _ = load_plan(out / "plan.json")  # the plan the killed run saved, which --resume continues
    assert len(tasks) > 500 and {t.op for t in tasks} == {"w8a8_dynamic_linear", "quant_matmul"}
    assert set(counts) == {t.key for t in tasks} and max(counts.values()) == 1
    assert f"({len(keys_before)} already done)" in output or f"{len(before)} already done" in output


def test_a_segfaulting_backend_is_isolated_and_recorded_as_crashed(tmp_path):
    spec = registry.get("dynamic_quant")
    base = {"h": 16, "dtype": "bfloat16", "dst_type": "int8", "smooth": "none", "group_index": None,
            "dist": "gaussian"}
    tasks = [Task("planted-segfault", "dynamic_quant", {**base, "lead": [rows], "seed": rows}) for rows in (2, 3, 4, 5, 6)]
    f = ResultsFile(tmp_path / "r.jsonl")
    stats = run(tasks, f, RunOptions(workers=1, timeout=60, registrations={"planted-segfault": PLANTED + "SegfaultBackend"}))
    status = {r["params"]["lead"][0]: r["status"] for r in f.records()}
    assert status == {2: "pass", 3: "crashed", 4: "pass", 5: "crashed", 6: "pass"}, status
    assert stats["ran"] == 5
    crashed = [r for r in f.records() if r["status"] == "crashed"][0]
    assert "died" in crashed["note"] and crashed["repro"].startswith("w8a8 conformance --backend planted-segfault")
    assert spec.name == "dynamic_quant"


def test_a_hanging_backend_call_times_out_and_the_run_goes_on(tmp_path):
    base = {"lead": [2], "dtype": "bfloat16", "dst_type": "int8", "smooth": "none", "group_index": None,
            "dist": "gaussian", "seed": 1}
    tasks = [Task("planted-hang", "dynamic_quant", {**base, "h": 128}), Task("planted-hang", "dynamic_quant", {**base, "h": 8})]
    f = ResultsFile(tmp_path / "r.jsonl")
    t0 = time.time()
    run(tasks, f, RunOptions(workers=1, timeout=3, registrations={"planted-hang": PLANTED + "HangingBackend"}))
    assert time.time() - t0 < 60
    status = {r["params"]["h"]: r["status"] for r in f.records()}
    assert status == {128: "timeout", 8: "pass"}
