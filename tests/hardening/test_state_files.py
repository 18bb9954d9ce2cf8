"""The project's own state in ``--out`` (``plan.json``, ``results.jsonl``, reports) on a full disk and when
damaged: each case a clean outcome — one line naming the path, exit status != 0, the records written so
far valid, no temporary file left; a damaged line said once and its case run again; a FIFO refused at once.

Full disks are simulated two ways: a fault-injecting ``os.write`` (runs everywhere) and, where this process
may mount one (root), a real 64 KiB tmpfs."""

import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conformance import stateio
from conformance.results import ResultsFile
from w8a8cli.main import main

RUN = ["conformance", "--backend", "numpy", "--op", "dynamic_quant", "--profile", "dev", "--workers", "0"]


def _w8a8(capsys, *args) -> tuple[int, str]:
    code = main(list(args))
    err = capsys.readouterr().err
    return code, err


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]  # the run stops at the failure: its one line is the last
    assert last.startswith("w8a8 ") and err.count(last) == 1, err
    return last


class FullAfter:
    """``os.write`` that fails with ``err`` once ``budget`` bytes were written to files named ``name``."""

    def __init__(self, name: str, budget: int, err: int = errno.ENOSPC):
        self.name, self.budget, self.err, self.real = name, budget, err, os.write

    def __call__(self, fd, data):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if Path(target).name.startswith(self.name) or Path(target).name.startswith(f".{self.name}"):
            if len(data) > self.budget:
                if self.budget > 0:  # a partial write, as a filling disk does, then the error
                    n = self.real(fd, bytes(data[:self.budget]))
                    self.budget -= n
                    return n
                raise OSError(self.err, os.strerror(self.err))
            self.budget -= len(data)
        return self.real(fd, data)


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="names a descriptor's file from /proc")


@needs_proc
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_results_streaming_onto_a_full_disk_is_one_line_and_keeps_the_records_written(tmp_path, capsys,
                                                                                      monkeypatch, err):
    out = tmp_path / "run"
    monkeypatch.setattr(os, "write", FullAfter("results.jsonl", 20_000, err))
    code, stderr = _w8a8(capsys, *RUN, "--out", str(out))
    # before: three chained OSError tracebacks. Now: one line naming the file, exit 1
    line = _one_line_error(stderr)
    assert code == 1 and str(out / "results.jsonl") in line and os.strerror(err) in line
    monkeypatch.undo()
    data = (out / "results.jsonl").read_bytes()
    assert data and data.endswith(b"\n")  # the append that failed was cut back: no torn line
    records = [json.loads(x) for x in data.splitlines()]
    assert len(records) >= 5 and all("status" in r for r in records)


@needs_proc
def test_plan_on_a_full_disk_is_one_line_and_leaves_no_temporary_file(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(os, "write", FullAfter("plan.json", 100))
    code, stderr = _w8a8(capsys, *RUN, "--out", str(out))
    line = _one_line_error(stderr)
    # before: a traceback and a .plan.json.tmp-<pid> left behind
    assert code == 1 and str(out / "plan.json") in line and "No space left on device" in line
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


@needs_proc
@pytest.mark.parametrize("report", ["report.md", "summary.json", "report.html", "report.xml"])
def test_a_report_on_a_full_disk_is_one_line_and_leaves_no_temporary_file(tmp_path, capsys, monkeypatch, report):
    out = tmp_path / "run"
    monkeypatch.setattr(os, "write", FullAfter(report, 0))
    code, stderr = _w8a8(capsys, *RUN, "--out", str(out))
    line = _one_line_error(stderr)
    assert code == 1 and str(out / report) in line
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]
    assert len(ResultsFile(out / "results.jsonl").records()) == 86  # every result was kept


def test_a_device_in_place_of_the_results_file_is_refused_before_writing(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    (tmp_path / "results.jsonl").symlink_to("/dev/full")
    with pytest.raises(stateio.StateError, match="not a regular file .a character device."):
        ResultsFile(tmp_path / "results.jsonl").append({"backend": "numpy", "case_id": "a"})


@pytest.fixture
def tiny_fs(tmp_path):
    """A real 64 KiB tmpfs (root only; skipped elsewhere)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_run_on_a_real_full_filesystem_is_one_line(tiny_fs):
    out = tiny_fs / "run"
    proc = subprocess.run([sys.executable, "-m", "w8a8cli.main", *RUN, "--profile", "ci", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    line = _one_line_error(proc.stderr)
    assert proc.returncode == 1 and "No space left on device" in line and str(out) in line
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]
    data = (out / "results.jsonl").read_bytes() if (out / "results.jsonl").exists() else b""
    assert all(json.loads(x) for x in data.splitlines()) is not None and (not data or data.endswith(b"\n"))


# --- damaged state ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("done") / "run"
    proc = subprocess.run([sys.executable, "-m", "w8a8cli.main", *RUN, "--out", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _copy(run: Path, dest: Path) -> Path:
    dest.mkdir()
    for name in ("plan.json", "results.jsonl"):
        (dest / name).write_bytes((run / name).read_bytes())
    return dest


DAMAGE = {"not an object": b"5", "a list": b"[1, 2]", "no backend": b'{"case_id": "x", "status": "pass"}',
          "no case_id": b'{"backend": "numpy", "status": "pass"}', "not UTF-8": b'{"backend": "\xff\xfe"}',
          "backend a number": b'{"backend": 3, "case_id": "y", "status": "pass"}',
          "deep": b"[" * 100_000 + b"]" * 100_000}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_resume_over_a_damaged_line_says_it_once_and_runs_its_case_again(finished_run, tmp_path, capsys, damage):
    out = _copy(finished_run, tmp_path / "run")
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    lost = json.loads(lines[3])
    lines[3] = DAMAGE[damage] + b"\n"  # the record of one case replaced by a damaged line
    (out / "results.jsonl").write_bytes(b"".join(lines))
    code, err = _w8a8(capsys, "conformance", "--resume", "--workers", "0", "--out", str(out))
    # before: TypeError / KeyError / UnicodeDecodeError tracebacks. Now: one warning, the case run again
    assert code == 0 and "Traceback" not in err, err
    warnings = [x for x in err.splitlines() if "line 4" in x]
    assert len(warnings) == 1 and "skipped" in warnings[0], err
    assert "ran 1 case(s) (85 already done)" in err
    ids = [r["case_id"] for r in ResultsFile(out / "results.jsonl").records()]
    assert ids.count(lost["case_id"]) == 1 and len(ids) == 86


@pytest.mark.parametrize("damage", ["not an object", "no backend", "not UTF-8"])
def test_compare_over_a_damaged_line_says_it_once(finished_run, tmp_path, capsys, damage):
    out = _copy(finished_run, tmp_path / "run")
    with open(out / "results.jsonl", "ab") as f:
        f.write(DAMAGE[damage] + b"\n")
    code, err = _w8a8(capsys, "compare", str(finished_run), str(out))
    assert code == 0 and "Traceback" not in err and len([x for x in err.splitlines() if "line 87" in x]) == 1, err


def test_a_plan_naming_a_backend_that_does_not_exist_is_refused_before_any_case(finished_run, tmp_path, capsys):
    out = _copy(finished_run, tmp_path / "run")
    plan = json.loads((out / "plan.json").read_text())
    plan["tasks"][5]["backend"] = "no-such-backend"
    (out / "plan.json").write_text(json.dumps(plan))
    before = (out / "results.jsonl").read_bytes()
    code, err = _w8a8(capsys, "conformance", "--resume", "--workers", "0", "--out", str(out))
    # before: a worker traceback on the terminal and a "crashed" row. Now: one line, nothing run
    line = _one_line_error(err)
    assert code == 2 and "task 5" in line and "'no-such-backend'" in line
    assert (out / "results.jsonl").read_bytes() == before


@pytest.mark.parametrize("edit", ["tasks not a list", "task a number", "params a string", "op unknown", "meta a list"])
def test_a_plan_of_the_wrong_shape_is_one_line(finished_run, tmp_path, capsys, edit):
    out = _copy(finished_run, tmp_path / "run")
    plan = json.loads((out / "plan.json").read_text())
    if edit == "tasks not a list":
        plan["tasks"] = {"a": 1}
    elif edit == "task a number":
        plan["tasks"][0] = 7
    elif edit == "params a string":
        plan["tasks"][0]["params"] = "x"
    elif edit == "op unknown":
        plan["tasks"][0]["op"] = "no_such_op"
    else:
        plan["meta"] = [1]
    (out / "plan.json").write_text(json.dumps(plan))
    code, err = _w8a8(capsys, "conformance", "--resume", "--workers", "0", "--out", str(out))
    assert code == 2 and "plan.json" in _one_line_error(err)


def _fifo_run(tmp_path, capsys, name, *command):
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / name)
    result = {}
    worker = threading.Thread(target=lambda: result.update(zip(("code", "err"), _w8a8(capsys, *command, str(out)))),
                              daemon=True)
    worker.start()
    worker.join(120)
    if worker.is_alive():  # unblock the reader so the test process can end, then fail
        fd = os.open(out / name, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail(f"blocked on the FIFO {name}")
    return result["code"], result["err"]


@pytest.mark.parametrize("name", ["plan.json", "results.jsonl"])
def test_a_fifo_in_place_of_a_state_file_is_refused_at_once(tmp_path, capsys, name):
    # before: plan.json a FIFO -> --resume blocks forever; results.jsonl a FIFO -> io.UnsupportedOperation
    code, err = _fifo_run(tmp_path, capsys, name, "conformance", "--resume", "--workers", "0", "--backend", "numpy",
                          "--op", "dynamic_quant", "--profile", "dev", "--out")
    line = _one_line_error(err)
    assert code in (1, 2) and name in line and "not a regular file (a FIFO)" in line


def test_compare_of_a_fifo_is_refused_at_once(tmp_path, capsys):
    os.mkfifo(tmp_path / "results.jsonl")
    code, err = _w8a8(capsys, "compare", str(tmp_path), str(tmp_path))
    assert code != 0 and "not a regular file (a FIFO)" in _one_line_error(err)


def test_damage_is_said_once_per_line_however_often_the_file_is_read(tmp_path, capsys):
    f = ResultsFile(tmp_path / "r.jsonl")
    f.append({"backend": "numpy", "case_id": "a", "status": "pass"})
    with open(f.path, "ab") as raw:
        raw.write(b"5\n")
    f.append({"backend": "numpy", "case_id": "b", "status": "pass"})
    for _ in range(3):
        assert [r["case_id"] for r in f.records()] == ["a", "b"]
    err = capsys.readouterr().err
    assert err.count("line 2") == 1 and "JSON but not an object" in err
