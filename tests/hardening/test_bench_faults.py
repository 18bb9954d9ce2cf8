"""Fault injection for ``w8a8 bench``: every backend call under a timeout, in a process of its
own; a hanging backend is recorded ``timeout``, a segfaulting one ``crashed`` with its op and signal, and
the other cases still run. (No timing assertion: the deadlines below only bound a broken run.)"""

import subprocess
import sys

from bench.cases import all_cases
from bench.runner import run

FAULTS = "conformance.planted_faults:"


def _quick_dynamic_quant():
    cases = [c for c in all_cases(False) if "quick" in c.tags and c.op == "dynamic_quant"]
    assert len(cases) == 2  # decode M=16 and prefill M=512 at H=4096
    return cases


def test_a_hanging_backend_is_recorded_timeout_case_by_case_and_the_run_ends():
    cases = _quick_dynamic_quant()
    records = run(["planted-hang-always"], cases, timeout=3, timing={"max_time": 0.05, "min_rounds": 1},
                  registrations={"planted-hang-always": FAULTS + "HangAlwaysBackend"})
    # before: the parent waited forever on the first call. Now each case gets its own timeout record,
    # named by its op, and the second case runs in a fresh process after the first was killed
    assert [(r["case"], r["op"], r["status"]) for r in records] == [(c.name, "dynamic_quant", "timeout") for c in cases]
    assert all("no result within 3 s" in r["note"] and r["verified"] is False for r in records)


def test_a_segfaulting_backend_is_recorded_with_its_op_and_signal():
    cases = _quick_dynamic_quant()
    records = run(["planted-segfault-always"], cases, timing={"max_time": 0.05, "min_rounds": 1},
                  registrations={"planted-segfault-always": FAULTS + "SegfaultAlwaysBackend"})
    # before: one record, op "?", "exit code None". Now: one record per case, op and SIGSEGV named
    assert [(r["case"], r["op"], r["status"]) for r in records] == [(c.name, "dynamic_quant", "crashed") for c in cases]
    assert all("in dynamic_quant" in r["note"] and "SIGSEGV" in r["note"] for r in records), records


def test_the_bench_command_exits_1_with_the_hanging_backend():
    out = subprocess.run([sys.executable, "-m", "w8a8cli.main", "bench", "--quick", "--op", "dynamic_quant",
                          "--no-peak", "--max-time", "0.05", "--min-rounds", "1", "--timeout", "3",
                          "--backend", FAULTS + "HangAlwaysBackend"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "timeout" in out.stderr and "Traceback" not in out.stderr


def test_a_bench_timeout_that_is_not_a_positive_finite_number_is_refused():
    for bad in ("0", "-1", "nan", "inf"):
        out = subprocess.run([sys.executable, "-m", "w8a8cli.main", "bench", "--quick", "--no-peak", "--backend",
                              "numpy", "--timeout", bad], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and "--timeout" in out.stderr and "Traceback" not in out.stderr, (bad, out.stderr)


def test_kill_9_of_the_bench_during_a_hanging_call_leaves_no_process_alive(tmp_path, procs):
    import os
    import signal

    marks = tmp_path / "marks"
    marks.mkdir()
    with open(tmp_path / "bench.log", "w") as log:  # not a pipe: orphans would hold it open
        proc = subprocess.Popen([sys.executable, "-m", "w8a8cli.main", "bench", "--quick", "--op", "dynamic_quant",
                                 "--no-peak", "--timeout", "600", "--backend", FAULTS + "HangAlwaysBackend"],
                                stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "W8A8_PLANTED_MARK": str(marks)})
    procs.wait_for(lambda: list(marks.glob("hang-*")) or proc.poll() is not None, 180, "the hanging bench call")
    assert proc.poll() is None, (tmp_path / "bench.log").read_text()[-3000:]
    run_pids = procs.descendants(proc.pid)
    assert {int(p.read_text()) for p in marks.glob("hang-*")} <= run_pids
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # before: the bench waited forever, and its backend process outlived a kill. Now nothing is left
    assert not procs.left_after(run_pids, 5)


def test_sigterm_during_the_bench_leaves_no_half_written_result(tmp_path, procs):
    """Before: SIGTERM killed the bench at once: no ``finally`` ran, its backend process, its
    ``/tmp/w8a8-bench-*`` folder and the --out lock stayed. Now it unwinds like Ctrl-C: exit 143, one line,
    nothing written under --out or --json, no temporary folder, no process left."""
    import os
    import signal

    marks, out, tmp = tmp_path / "marks", tmp_path / "out", tmp_path / "tmp"
    marks.mkdir()
    tmp.mkdir()
    with open(tmp_path / "bench.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "w8a8cli.main", "bench", "--quick", "--op", "dynamic_quant",
                                 "--no-peak", "--timeout", "600", "--out", str(out), "--json", str(tmp_path / "b.json"),
                                 "--backend", FAULTS + "HangAlwaysBackend"], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "W8A8_PLANTED_MARK": str(marks), "TMPDIR": str(tmp)})
    procs.wait_for(lambda: list(marks.glob("hang-*")) or proc.poll() is not None, 180, "the hanging bench call")
    assert proc.poll() is None, (tmp_path / "bench.log").read_text()[-3000:]
    run_pids = procs.descendants(proc.pid)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    text = (tmp_path / "bench.log").read_text()
    assert "stopped by SIGTERM; no result written" in text and "Traceback" not in text, text[-3000:]
    assert not procs.left_after(run_pids, 5)
    assert not (tmp_path / "b.json").exists()
    left = sorted(p.name for p in out.rglob("*")) if out.exists() else []
    assert not [n for n in left if n.endswith((".json", ".html", ".png")) or ".tmp-" in n], left
    assert not list(tmp.glob("w8a8-bench-*")), list(tmp.iterdir())
