"""Fault injection for the CLI's arguments: every bad argument is refused before any work starts,
with exit status 2 and one line ``w8a8 <cmd>: error: <flag>: expected ..., got ...`` (never a traceback),
and nothing is written where the run would have written."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from w8a8cli import validate
from w8a8cli.main import main

DQ_CASE = '{"lead":[%s],"h":%s,"dtype":"bfloat16","dst_type":"int8","smooth":"none","group_index":null,' \
          '"dist":"gaussian","seed":0}'


def _refused(capsys, argv, cmd: str, flag: str) -> str:
    """Run ``w8a8 argv`` in this process; assert exit 2 and one line naming ``flag``; return the line."""
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own parse errors (numbers are checked while parsing)
        rc = exc.code
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1, err
    assert lines[0].startswith(f"w8a8 {cmd}: error: {flag}:"), err
    assert "Traceback" not in err + out
    return lines[0]


def _unwritable(tmp_path) -> str:
    """A folder no one may create: under /proc for root (permissions do not stop root), else read-only."""
    if os.geteuid() == 0:
        return "/proc/w8a8-no-such-dir/out"
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    return str(ro / "out")


# -- --tolerances ------------------------------------------------------------------------------

def _table(tmp_path, body: str):
    path = tmp_path / "t.toml"
    path.write_text('[[entry]]\nbackend = "*"\nop = "quant_matmul"\noutput = "y"\n' + body)
    return path


@pytest.mark.parametrize("body, needle", [
    ("ulp = -5\n", "ulp: expected an integer >= 0, got -5"),
    ("mismatch_rate = 2\n", "mismatch_rate: expected a number in [0, 1], got 2"),
    ("atol = nan\n", "atol: expected a finite number >= 0, got nan"),
    ("ulpp = 1\n", "key 'ulpp': expected one of"),
    ("tie_off_by_one = 1\n", "tie_off_by_one: expected true or false, got 1"),
])
def test_tolerance_values_out_of_range_are_refused_naming_entry_and_field(tmp_path, capsys, body, needle):
    path = _table(tmp_path, body)
    out = tmp_path / "run"
    line = _refused(capsys, ["conformance", "--tolerances", str(path), "--out", str(out)], "conformance",
                    "--tolerances")
    assert "entry 0 (*/quant_matmul/y/*)" in line and needle in line
    assert not out.exists()  # refused before planning: nothing written


def test_the_library_loader_refuses_the_same_tables(tmp_path):
    from conformance.tolerances import ToleranceTable

    with pytest.raises(ValueError, match=r"entry 0 .*ulp: expected an integer >= 0, got -5"):
        ToleranceTable.load(_table(tmp_path, "ulp = -5\n"))
    with pytest.raises(ValueError, match=r"mismatch_rate: expected a number in \[0, 1\], got 2"):
        ToleranceTable.from_dict({"entry": [{"backend": "*", "op": "quant_matmul", "output": "y", "mismatch_rate": 2}]})
    with pytest.raises(ValueError, match="top-level key 'entries'"):
        ToleranceTable.from_dict({"entries": []})


def test_malformed_and_missing_tolerance_tables_are_refused(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[entry\nop =")
    out = tmp_path / "run"
    line = _refused(capsys, ["conformance", "--tolerances", str(bad), "--out", str(out)], "conformance", "--tolerances")
    assert "not valid TOML" in line
    line = _refused(capsys, ["conformance", "--tolerances", str(tmp_path / "missing.toml"), "--out", str(out)],
                    "conformance", "--tolerances")
    assert "expected an existing TOML tolerance table" in line and "No such file" in line
    assert not out.exists()


def test_a_fifo_is_not_read_as_a_tolerance_table(tmp_path, capsys):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    line = _refused(capsys, ["conformance", "--tolerances", str(fifo)], "conformance", "--tolerances")
    assert "not a regular file" in line  # reading it would block forever


# -- numbers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_timeout_must_be_finite_and_positive(capsys, value):
    line = _refused(capsys, ["conformance", "--timeout", value], "conformance", "--timeout")
    assert line.endswith(f"expected a finite number > 0, got '{value}'")


def test_workers_between_zero_and_the_cores(capsys):
    cores = os.cpu_count() or 1
    assert _refused(capsys, ["conformance", "--workers", "-3"], "conformance", "--workers").endswith(
        "expected an integer >= 0, got '-3'")
    line = _refused(capsys, ["conformance", "--workers", str(cores + 1)], "conformance", "--workers")
    assert line.endswith(f"expected an integer in 0..{cores}, got {cores + 1}")
    assert validate.workers(cores + 1, force=True) == cores + 1  # --force-workers lifts the bound


@pytest.mark.parametrize("argv, cmd, flag", [
    (["tune", "--backend", "numpy", "--samples", "0"], "tune", "--samples"),
    (["tune", "--backend", "numpy", "--target", "nan"], "tune", "--target/--target-false-rate"),
    (["bench", "--max-time", "-2"], "bench", "--max-time"),
    (["bench", "--min-rounds", "0"], "bench", "--min-rounds"),
    (["replay", "x", "--max-bytes", "inf"], "replay", "--max-bytes"),
    (["compare", "a", "b", "--limit", "-1"], "compare", "--limit"),
    (["run", "ckpt", "--reference", "ref", "--tokens", "1,2", "--max-tokens", "100000000"], "run", "--max-tokens"),
])
def test_numbers_of_every_command_are_checked(capsys, argv, cmd, flag):
    """(`w8a8 estimate`'s numbers are checked by deployment.estimate itself: tests/deployment/test_estimate.py.)"""
    _refused(capsys, argv, cmd, flag)


def test_estimate_config_must_be_a_preset_or_a_regular_file(tmp_path, capsys):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert "not a regular file" in _refused(capsys, ["estimate", "--config", str(fifo)], "estimate", "--config")


@pytest.mark.parametrize("value, bounds, ok", [
    (1e-300, dict(low=0, open_low=True), True),     # just above an open bound
    (0.0, dict(low=0, open_low=True), False),       # on it
    (0, dict(kind="int", low=0), True),             # on a closed bound
    (-1, dict(kind="int", low=0), False),           # one below
    (7, dict(kind="int", low=1, high=7), True),     # on the upper bound
    (8, dict(kind="int", low=1, high=7), False),    # one above
    (True, dict(kind="int", low=0), False),         # a boolean is not a count
    (2.5, dict(kind="int", low=0), False),          # nor a fraction
    (float("inf"), dict(), False),                  # finite only
])
def test_number_bounds_at_their_edges(value, bounds, ok):
    if ok:
        assert validate.check_number(value, "--x", **bounds) == value
    else:
        with pytest.raises(validate.UsageError, match=r"^--x: expected .*, got "):
            validate.check_number(value, "--x", **bounds)


# -- output paths ------------------------------------------------------------------------------

def test_out_that_is_a_file_is_refused_and_left_alone(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("mine")
    line = _refused(capsys, ["conformance", "--op", "trans_quant_param", "--out", str(f)], "conformance", "--out")
    assert "not a directory" in line
    assert f.read_text() == "mine"


def test_unwritable_out_is_refused(tmp_path, capsys):
    line = _refused(capsys, ["conformance", "--op", "trans_quant_param", "--out", _unwritable(tmp_path)],
                    "conformance", "--out")
    assert "expected a writable location" in line


def test_tune_write_is_checked_before_any_measuring(tmp_path, capsys, monkeypatch):
    import conformance.tuning

    def measured(*a, **k):
        raise AssertionError("tune measured before checking --write")

    monkeypatch.setattr(conformance.tuning, "sweep", measured)
    _refused(capsys, ["tune", "--backend", "numpy", "--op", "quantize", "--write",
                      _unwritable(tmp_path) + "/t.toml"], "tune", "--write")
    assert "is a directory" in _refused(capsys, ["tune", "--backend", "numpy", "--write", str(tmp_path)], "tune",
                                        "--write")
    bad = _table(tmp_path, "ulp = -1\n")
    assert "ulp: expected" in _refused(capsys, ["tune", "--backend", "numpy", "--write", str(bad)], "tune", "--write")


# -- --case ------------------------------------------------------------------------------------

@pytest.mark.parametrize("case, needle", [
    ("{}", "expected the parameters of a dynamic_quant case (keys dist, dst_type, dtype"),
    ("[1, 2]", "expected a JSON object of dynamic_quant parameters, got list [1, 2]"),
    ('"h"', "expected a JSON object of dynamic_quant parameters, got str"),
    ("{bad json", "invalid JSON"),
    ("[" * 100_000, "invalid JSON"),  # nested beyond the stack: no RecursionError traceback
    (DQ_CASE % ("7", "-3"), "expected 'h' a non-negative integer, got -3"),
    (DQ_CASE % ("-7", "3"), "expected 'lead' a list of non-negative integers, got [-7]"),
    ('{"h": 8, "nope": 1}', "unknown key 'nope'"),
    ('{"named": "dynamic_quant/no_such_case"}', 'expected {"named": KEY} with KEY one of'),
    (DQ_CASE.replace(',"seed":0', "") % ("7", "8"), "parameters without 'seed'"),
])
def test_bad_case_parameters_are_refused(capsys, case, needle):
    line = _refused(capsys, ["conformance", "--op", "dynamic_quant", "--case", case], "conformance", "--case")
    assert needle in line


def test_a_case_beyond_the_size_budget_is_refused_not_built(capsys):
    # h = 100000 with lead = [30000]: x alone is 3e9 bf16 elements (6 GB); the budget is 1 GiB of inputs.
    line = _refused(capsys, ["conformance", "--op", "dynamic_quant", "--case", DQ_CASE % ("30000", "100000")],
                    "conformance", "--case")
    assert "expected inputs of at most 1 GiB" in line


def test_a_case_within_the_budget_is_measured():
    from conformance.case_check import measure_build
    import numpy as np

    # 7 x 64 float16 elements of 2 bytes = 896 bytes
    assert measure_build(lambda: ((np.zeros((7, 64), np.float16),), {})) in (896, None)


def test_a_replay_case_file_beyond_the_budget_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    import numpy as np

    from conformance import case_check

    case = tmp_path / "c.npz"
    np.savez(case, x=np.zeros(1000, np.float32))  # 4000 bytes unpacked (+ the .npy header)
    monkeypatch.setattr(case_check, "CASE_BYTES", 4000)
    line = _refused(capsys, ["replay", str(case)], "replay", "CASE")
    assert "expected a case of at most" in line
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    assert "File is not a zip file" in _refused(capsys, ["replay", str(junk)], "replay", "CASE")


def test_a_build_that_never_finishes_is_killed_and_refused(monkeypatch):
    import time

    from conformance import case_check

    if case_check.measure_build(lambda: ((), {})) is None:
        pytest.skip("the build is measured on Linux only")
    monkeypatch.setattr(case_check, "BUILD_SECONDS", 1)
    with pytest.raises(case_check.CaseError, match="build within 1 s"):
        case_check.measure_build(lambda: time.sleep(60))


# -- checkpoints: --verify --tokens, --layers --------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from checkpoints.models import tiny_config
    from checkpoints.writer import synthetic_writer

    config = tiny_config("v3", layers=2, experts=4, hidden=64, moe_inter=32, vocab=64)
    return str(synthetic_writer(config).save(tmp_path_factory.mktemp("ckpt") / "v3", config=config))


def test_verify_tokens_beyond_the_budget_are_refused(capsys, checkpoint):
    line = _refused(capsys, ["inspect", checkpoint, "--verify", "--tokens", "100000000"], "inspect", "--tokens")
    assert line.endswith("expected an integer in 1..4096, got 100000000")


def test_layers_matching_nothing_is_refused_with_names(capsys, checkpoint):
    line = _refused(capsys, ["inspect", checkpoint, "--verify", "--layers", "no.such.*"], "inspect", "--layers")
    assert "'no.such.*', which matches nothing" in line and "model.layers.0." in line


def test_run_layers_matching_nothing_is_refused(tmp_path, capsys, checkpoint):
    line = _refused(capsys, ["run", checkpoint, "--reference", str(tmp_path), "--tokens", "1,2", "--layers", "zzz"],
                    "run", "--layers")
    assert "'zzz', which matches nothing" in line


# -- the pytest plugin outside the repository ---------------------------------------------------

def test_the_pytest_suite_runs_outside_the_repository_without_a_deadline(tmp_path):
    """`pytest --pyargs conformance.suite` from a folder with no conftest: the suite's own default profile
    (ci, no deadline) applies; before, Hypothesis's 200 ms deadline failed torch-cpu's first calls."""
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    out = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", "--w8a8-backend", "torch-cpu",
                          "--w8a8-op", "quant_matmul", "-k", "agrees", "-q", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "DeadlineExceeded" not in out.stdout
    assert " passed" in out.stdout


def test_the_reproduce_command_replays_a_failure_from_anywhere(tmp_path):
    """A planted bug fails; the report prints a command with Hypothesis's blob; that command, run from the
    user's folder, fails again on the same example."""
    base = [sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", "--w8a8-backend",
            "conformance.planted:TiesAwayBackend", "--w8a8-op", "dynamic_quant", "-k", "agrees and not bits", "-q",
            "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "--hypothesis-seed", "0"]  # seed 0 draws a tie
    first = subprocess.run(base, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert first.returncode == 1
    assert "w8a8 conformance --backend conformance.planted:TiesAwayBackend --op dynamic_quant --case" in first.stdout
    line = next(li for li in first.stdout.splitlines() if li.startswith("pytest --pyargs conformance.suite"))
    assert "--w8a8-reproduce " in line
    again = subprocess.run([sys.executable, "-m", *shlex.split(line), "-p", "no:cacheprovider", "--rootdir",
                            str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 1 and "1 failed" in again.stdout, again.stdout[-3000:]
    assert "DidNotReproduce" not in again.stdout
    repro = next(li for li in first.stdout.splitlines() if "repro: w8a8 conformance" in li).split("repro: ")[1]
    argv = shlex.split(repro)[1:]  # after "w8a8": the same command line, run from the user's folder
    case = subprocess.run([sys.executable, "-m", "w8a8cli.main", *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert case.returncode == 1 and '"status": "fail"' in case.stdout, case.stderr[-2000:]


def test_the_plugin_refuses_unknown_backends_and_ops_up_front(tmp_path):
    for opt, value in (("--w8a8-backend", "planted-ties-away"), ("--w8a8-op", "no_such_op")):
        out = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", opt, value, "-q",
                              "-p", "no:cacheprovider", "--rootdir", str(tmp_path)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 4, out.stdout[-2000:] + out.stderr[-2000:]  # pytest's usage-error status
        assert f"{opt}: expected" in out.stderr and repr(value) in out.stderr
        assert "Traceback" not in out.stderr
