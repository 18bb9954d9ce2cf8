"""Fault injection for ``w8a8 conformance``: each test runs one fault (docs/hardening.md) and
asserts the good outcome. No timing assertion: the deadlines below only bound a broken run (and the
"5 s later" of the orphan check is the required bound, polled)."""

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from conformance.evaluate import build_inputs
from conformance.registry import get, specs
from conformance.results import ResultsFile, summarize
from conformance.runner import RunOptions, Task, plan, run

FAULTS = "conformance.planted_faults:"
DQ = {"dtype": "bfloat16", "dst_type": "int8", "smooth": "none", "group_index": None, "dist": "gaussian"}


def _cli(*args, env=None, log=None):
    """``w8a8 conformance`` started; its output in pipes, or in the file ``log`` (a run whose workers could
    outlive it must not hold the test's pipes: reading them would wait for the orphans)."""
    out = open(log, "w") if log else subprocess.PIPE
    try:
        return subprocess.Popen([sys.executable, "-m", "w8a8cli.main", "conformance", *args], stdout=out,
                                stderr=subprocess.STDOUT if log else subprocess.PIPE, text=True, env=env)
    finally:
        if log:
            out.close()


def _hanging_run(tmp_path, procs, *extra):
    """``w8a8 conformance`` with a backend whose every call hangs, started; returns (process, marks folder)
    once a worker is inside the hanging call."""
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    env = {**os.environ, "W8A8_PLANTED_MARK": str(marks)}
    proc = _cli("--backend", FAULTS + "HangAlwaysBackend", "--op", "dynamic_quant", "--profile", "dev",
                "--timeout", "600", "--out", str(tmp_path / "run"), *extra, env=env, log=tmp_path / "hanging.log")
    procs.wait_for(lambda: list(marks.glob("hang-*")) or proc.poll() is not None, 180,
                   "a worker inside the hanging call")
    assert proc.poll() is None, (tmp_path / "hanging.log").read_text()[-3000:]
    return proc, marks


def test_kill_9_of_the_main_process_during_a_hanging_call_leaves_no_process_alive(tmp_path, procs):
    proc, marks = _hanging_run(tmp_path, procs, "--workers", "2")
    run_pids = procs.descendants(proc.pid)
    hanging = {int(p.read_text()) for p in marks.glob("hang-*")}
    assert hanging and hanging <= run_pids, (hanging, run_pids)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # before: the workers were orphaned, spinning forever. Now every process of the run is gone within 5 s
    assert not procs.left_after(run_pids, 5)


def test_a_worker_whose_parent_is_already_gone_exits_at_once():
    # the fallback path of die_with_parent (the parent died before the worker could arm prctl, or an OS
    # without it): a parent pid that is not the real parent's makes the worker exit with 70
    code = "from conformance.processes import die_with_parent; import os; die_with_parent(os.getppid() + 1); print('x')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 70 and out.stdout == ""


def test_a_second_run_on_the_same_out_is_refused_naming_the_holder(tmp_path, procs):
    first, _ = _hanging_run(tmp_path, procs, "--workers", "1")
    try:
        second = _cli("--backend", "numpy", "--op", "dynamic_quant", "--profile", "dev", "--workers", "0",
                      "--out", str(tmp_path / "run"))
        _, err = second.communicate(timeout=300)
        # before: both appended to one results.jsonl (1819 duplicates). Now: exit 2, the holder's pid named
        assert second.returncode == 2, err
        assert f"pid {first.pid}" in err and "in use by another run" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    finally:
        first.kill()
        first.wait()
    # the lock dies with its holder: a later run takes the folder
    later = _cli("--backend", "numpy", "--op", "swiglu", "--profile", "dev", "--workers", "0", "--out",
                 str(tmp_path / "run"), "--no-attribution")
    _, err = later.communicate(timeout=600)
    assert later.returncode == 0, err[-3000:]


def _small_run(out, *extra):
    proc = _cli("--backend", "numpy", "--op", "swiglu", "--profile", "dev", "--workers", "0", "--out", str(out),
                "--no-attribution", *extra)
    stdout, err = proc.communicate(timeout=600)
    return proc.returncode, stdout, err


@pytest.mark.parametrize("flag, value, plan_value", [("--profile", "thorough", "dev"), ("--seed", "5", "3"),
                                                     ("--op", "dynamic_quant", "swiglu"),
                                                     ("--backend", FAULTS + "LeakingBackend", "numpy"),
                                                     ("--exact", None, "tolerances.toml")])
def test_resume_with_a_conflicting_flag_is_refused_naming_the_flag_and_both_values(tmp_path, flag, value,
                                                                                   plan_value):
    rc, _, err = _small_run(tmp_path / "run", "--seed", "3")
    assert rc == 0, err[-3000:]
    given = [flag] + ([value] if value else [])
    args = ["--resume", "--out", str(tmp_path / "run"), "--workers", "0"]
    if flag != "--seed":
        args += ["--seed", "3"]
    proc = _cli(*args, *given)
    _, err = proc.communicate(timeout=300)
    # before: the flags were silently ignored and the report claimed them. Now: exit 2, one line
    assert proc.returncode == 2, err
    line = err.strip()
    assert len(line.splitlines()) == 1 and flag in line and plan_value in line and "Traceback" not in line
    if value:
        assert value.split(":")[-1] in line or "planted-leak" in line


def test_resume_without_flags_continues_the_plan_and_reports_its_flags(tmp_path):
    out = tmp_path / "run"
    rc, _, err = _small_run(out, "--seed", "3")
    assert rc == 0, err[-3000:]
    results = out / "results.jsonl"
    before = results.read_text().splitlines()
    # a resumed run whose last records were lost: the plan's seed and profile, not the defaults, decide
    results.write_text("\n".join(before[:-5]) + "\n")
    proc = _cli("--resume", "--out", str(out), "--workers", "0", "--no-attribution")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "continuing with the plan's dev" in err and "continuing with the plan's 3" in err
    assert "ran 5 case(s)" in err
    meta = json.loads((out / "summary.json").read_text())["meta"]
    assert meta["profile"] == "dev" and meta["seed"] == 3
    records = ResultsFile(results).records()
    assert len(records) == len(before) and len({r["case_id"] for r in records}) == len(records)


def _inputs_digest(tasks) -> dict[str, str]:
    import hashlib

    out = {}
    for t in tasks:
        args, kwargs = build_inputs(get(t.op), t.params)
        h = hashlib.sha256()
        for value in list(args) + [kwargs[k] for k in sorted(kwargs)]:
            if isinstance(value, np.ndarray):
                h.update(str(value.dtype).encode() + str(value.shape).encode() + np.ascontiguousarray(value).tobytes())
            else:
                h.update(repr(value).encode())
        out[t.case_id] = h.hexdigest()
    return out


_SUBSET = ["moe_init_routing_v2", "quant_matmul", "dynamic_quant"]
_OTHER_PROCESS = """
import json, sys
import backends, backends.torch_cpu, checkpoints, replay, bench.cases, conformance.planted  # other imports first
sys.path.insert(0, sys.argv[1])
from test_runner_faults import _inputs_digest, _SUBSET
from conformance.runner import plan
tasks, _ = plan(["numpy"], list(reversed(_SUBSET)), profile="dev", seed=11)
print(json.dumps({"ids": [t.case_id for t in tasks], "inputs": _inputs_digest(tasks)}))
"""


def test_the_same_plan_run_two_ways_has_the_same_case_ids_and_inputs():
    every, _ = plan(["numpy"], None, profile="dev", seed=11)
    by_op = defaultdict(list)
    for t in every:
        by_op[t.op].append(t.case_id)
    assert set(by_op) == set(specs())
    # 1. every op vs a subset, in this process
    subset, _ = plan(["numpy"], _SUBSET, profile="dev", seed=11)
    for op in _SUBSET:
        assert [t.case_id for t in subset if t.op == op] == by_op[op]
    want = _inputs_digest([t for t in every if t.op in _SUBSET])
    assert _inputs_digest(subset) == want
    # 2. another process: other modules imported first, another hash seed, the subset in another order
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(Path(__file__).parent)], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    other = json.loads(out.stdout)
    assert sorted(other["ids"]) == sorted(want) and other["inputs"] == want


def test_a_leaking_backend_is_recorded_leak_and_its_worker_recycled(tmp_path):
    tasks = [Task("planted-leak", "dynamic_quant", {**DQ, "lead": [rows], "h": 16, "seed": rows}) for rows in (2, 3, 4)]
    f = ResultsFile(tmp_path / "r.jsonl")
    run(tasks, f, RunOptions(workers=1, timeout=120, leak_budget_mb=100,
                             registrations={"planted-leak": FAULTS + "LeakingBackend"}))
    records = f.records()
    # before: 3.3 GB after 14 cases, every one "pass". Now: each case is a leak finding (its verdict kept)
    assert [r["status"] for r in records] == ["leak"] * 3
    assert all(r["judged"] == "pass" and r["rss_growth_mb"] >= 250 and "worker recycled" in r["note"] for r in records)
    assert len({r["worker_pid"] for r in records}) == 3  # a fresh worker for every case
    assert not summarize(records)["ok"]


def test_a_backend_that_keeps_no_memory_is_not_a_leak(tmp_path):
    tasks = [Task("numpy", "dynamic_quant", {**DQ, "lead": [rows], "h": 1025, "seed": rows}) for rows in (1, 7, 17)]
    f = ResultsFile(tmp_path / "r.jsonl")
    run(tasks, f, RunOptions(workers=1, timeout=120))  # the default budget, from a fresh worker
    assert [r["status"] for r in f.records()] == ["pass"] * 3


def test_a_backend_accepting_nan_where_the_device_behaviour_is_unspecified_is_not_a_failure(tmp_path):
    tasks = [Task("planted-nan-accept", "dynamic_quant", {**DQ, "lead": [3], "h": 16, "dist": dist, "seed": 5})
             for dist in ("nan_inf", "gaussian")]
    tasks.append(Task("planted-nan-accept", "dynamic_quant", {"error": "dynamic_quant/x_nan"}, "error",
                      "dynamic_quant/x_nan"))
    f = ResultsFile(tmp_path / "r.jsonl")
    run(tasks, f, RunOptions(workers=0, registrations={"planted-nan-accept": FAULTS + "NanAcceptingBackend"}))
    status = {r["params"].get("dist", "bad call"): r for r in f.records()}
    # before: "backend accepted an input the golden refuses" = fail. Now: its own status, counted apart,
    # for a drawn NaN input and for the declared NaN bad call alike
    assert status["nan_inf"]["status"] == "device-unspecified" and status["gaussian"]["status"] == "pass"
    assert status["bad call"]["status"] == "device-unspecified"
    assert "not specified" in status["nan_inf"]["note"]
    summary = summarize(f.records())
    assert summary["ok"] and summary["totals"] == {"device-unspecified": 2, "pass": 1}
    from conformance.reports import cell_text, junit

    cell = summary["cells"]["planted-nan-accept"]["dynamic_quant"]
    assert "2 accepted where the device behaviour is unspecified" in cell_text(cell)
    assert "<failure" not in junit.render(f.records(), {}) and "<error" not in junit.render(f.records(), {})


def test_only_a_refusal_by_the_nan_policy_makes_an_input_device_unspecified():
    # the status is for the golden's NaN policy only: NaN/Inf inputs are computed under nan_policy="ieee";
    # int4 codes with H = 12 (not a multiple of 8) are refused under every policy, so a backend accepting
    # them still fails
    from conformance.evaluate import policy_only_refusal
    from w8a8 import ASCEND

    spec = get("dynamic_quant")
    nan = build_inputs(spec, {**DQ, "lead": [3], "h": 16, "dist": "nan_inf", "seed": 5})
    int4 = build_inputs(spec, {**DQ, "lead": [3], "h": 12, "dst_type": "int4", "seed": 5})
    assert policy_only_refusal(spec, *nan, ASCEND)
    assert not policy_only_refusal(spec, *int4, ASCEND)
    assert not policy_only_refusal(spec, *nan, ASCEND.replace(nan_policy="ieee"))  # nothing refused to begin with


def test_case_on_a_failing_case_prints_the_values_at_the_first_mismatches():
    params = {"lead": [2], "h": 8, "dtype": "float16", "dst_type": "int8", "smooth": "none", "group_index": None,
              "dist": "ties", "seed": 3}
    out = subprocess.run([sys.executable, "-m", "w8a8cli.main", "conformance", "--backend",
                          "conformance.planted:TiesAwayBackend", "--op", "dynamic_quant", "--exact", "--case",
                          json.dumps(params)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    text = out.stdout
    record = json.loads(text[:text.index("\n}\n") + 2])  # the JSON record is kept, now with its evidence
    assert record["status"] == "fail" and record["evidence"]
    first = record["evidence"][0]
    # a tie rounded away from zero: the golden's code and the backend's differ by one at a .5 pre-rounding value
    assert first["output"] == "y" and abs(first["golden"] - first["backend"]) == 1
    assert abs(first["pre_round"]) % 1 == 0.5
    x = first["inputs"]["x"]  # the input at the element, and its row
    assert x["where"] == first["index"][:-1] and x["length"] == 8 and x["value"] in x["row"]
    shown = text[text.index("\n}\n") + 3:]
    assert "the first mismatches of planted-ties-away" in shown
    assert f"y[{', '.join(map(str, first['index']))}]: golden {first['golden']}, backend {first['backend']}" in shown
    assert "pre-rounding" in shown and "x at the element = " in shown and "; row x[" in shown


@pytest.mark.parametrize("budget", ["-1", "nan", "inf"])
def test_a_leak_budget_that_is_not_a_finite_number_of_mib_is_refused(tmp_path, budget):
    proc = _cli("--backend", "numpy", "--op", "swiglu", "--leak-budget", budget, "--out", str(tmp_path / "run"))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "--leak-budget" in err and "Traceback" not in err, err


def test_resume_from_an_unreadable_plan_is_refused_in_one_line(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "plan.json").write_text('{"meta": {"flags": ')  # torn by hand: write_atomic never leaves this
    proc = _cli("--resume", "--out", str(out), "--workers", "0")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "cannot be read" in err and len(err.strip().splitlines()) == 1, err
