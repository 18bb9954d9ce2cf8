"""Every output folder is one run's (replay and bench too, the lock conformance already takes), and the
bench leaves nothing behind: no ``/tmp/w8a8-bench-*`` folder, no ``.npz`` outputs after Ctrl-C, and a
read-only HOME is a fallback cache, not a traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.outlock import OutLock

_SAMPLE = Path(__file__).resolve().parents[1] / "replay" / "samples" / "constructed-w8a8-tensor-L1"


def _w8a8(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "w8a8cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_a_second_replay_on_the_same_out_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "out"
    with OutLock(out):  # the first run, holding the folder
        proc = _w8a8("replay", str(_SAMPLE), "--out", str(out))
    # before: two replays appended to one results.jsonl (5,300+ records of 3,000 calls). Now: exit 2, one line
    assert proc.returncode == 2 and f"pid {os.getpid()}" in proc.stderr and "in use by another run" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (out / "results.jsonl").exists()


def test_a_second_bench_on_the_same_out_is_refused(tmp_path):
    out = tmp_path / "out"
    with OutLock(out):
        proc = _w8a8("bench", "--quick", "--no-peak", "--backend", "numpy", "--op", "dynamic_quant", "--out", str(out))
    assert proc.returncode == 2 and "in use by another run" in proc.stderr and "Traceback" not in proc.stderr


def _bench_dirs() -> set[str]:
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).glob("w8a8-bench-*")}


def test_the_bench_runner_removes_its_output_folder(monkeypatch, tmp_path):
    from bench.cases import all_cases
    from bench.runner import run

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    cases = [c for c in all_cases(False) if "quick" in c.tags and c.op == "dynamic_quant"][:1]
    records = run(["numpy"], cases, timing={"max_time": 0.02, "min_rounds": 1})
    assert [r["status"] for r in records] == ["ok"] and records[0]["verified"]
    # before: a /tmp/w8a8-bench-* folder left behind on every run
    assert not list(tmp_path.glob("w8a8-bench-*"))


def test_ctrl_c_during_the_bench_leaves_no_folder_and_no_outputs(tmp_path, monkeypatch):
    from bench import runner
    from bench.cases import all_cases

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    cases = [c for c in all_cases(False) if "quick" in c.tags and c.op == "dynamic_quant"]
    real = runner.collect
    calls = []

    def interrupted(conn, process, base, on_record=None, **kw):
        got = real(conn, process, base, on_record, **kw)
        calls.append(process)
        raise KeyboardInterrupt  # Ctrl-C once the first backend's outputs are written

    monkeypatch.setattr(runner, "collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.run(["numpy", "numpy"], cases, timing={"max_time": 0.02, "min_rounds": 1})
    assert calls
    # before: 15-31 MB of .npz outputs left in /tmp/w8a8-bench-* after Ctrl-C
    assert not list(tmp_path.rglob("*.npz")) and not list(tmp_path.glob("w8a8-bench-*"))


def test_a_read_only_cache_home_falls_back_to_a_temporary_cache(tmp_path, monkeypatch):
    from backends import cache

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    home.chmod(0o500)
    try:
        if os.access(home, os.W_OK):
            pytest.skip("this user can write a read-only folder (root): made read-only by a mount below")
        folder = cache.cache_dir()
    finally:
        home.chmod(0o700)
    assert folder.parent == tmp_path / "tmp" and folder.name.startswith("w8a8-cache-")


@pytest.fixture
def read_only_home(tmp_path):
    """A HOME on a read-only filesystem (a read-only bind mount; root only, skipped elsewhere)."""
    home = tmp_path / "home"
    home.mkdir()
    made = subprocess.run(["mount", "--bind", "-o", "ro", str(home), str(home)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot bind-mount read-only here (needs root)")
    subprocess.run(["mount", "-o", "remount,bind,ro", str(home)], capture_output=True)
    try:
        if os.access(home, os.W_OK) and subprocess.run(["touch", str(home / "x")]).returncode == 0:
            pytest.skip("the read-only mount did not take")
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], capture_output=True)


def test_bench_with_a_read_only_home_runs(read_only_home, tmp_path):
    env = {**os.environ, "HOME": str(read_only_home), "TMPDIR": str(tmp_path)}
    env.pop("XDG_CACHE_HOME", None)
    proc = _w8a8("bench", "--quick", "--backend", "numpy", "--op", "dynamic_quant", "--max-time", "0.02",
                 "--min-rounds", "1", env=env, timeout=600)
    # before: a traceback compiling the peak probe in ~/.cache/w8a8. Now: the run ends, the probe cached in TMPDIR
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not list(tmp_path.glob("w8a8-bench-*"))


def test_a_cached_build_is_run_only_when_it_is_ours(tmp_path, monkeypatch):
    """The cache may be a shared temporary folder: a file someone else could write (group/other-writable),
    a link, or an empty file left by an interrupted copy is rebuilt, never run or loaded."""
    import os

    from backends import cache

    good = tmp_path / "peak-x"
    good.write_bytes(b"\x7fELF...")
    good.chmod(0o755)
    assert cache.trusted(good)
    writable = tmp_path / "peak-w"
    writable.write_bytes(b"\x7fELF...")
    writable.chmod(0o777)
    assert not cache.trusted(writable)
    link = tmp_path / "peak-l"
    link.symlink_to(good)
    assert not cache.trusted(link)
    empty = tmp_path / "peak-e"
    empty.write_bytes(b"")
    assert not cache.trusted(empty)
    assert not cache.trusted(tmp_path / "missing")
    # a fallback folder another user could write is not used
    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "ro"))
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    monkeypatch.setenv("TMPDIR", str(shared))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    planted = shared / f"w8a8-cache-{os.getuid()}"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    assert not cache._ours(planted) and cache._ours(tmp_path)
    try:
        if os.access(tmp_path / "ro", os.W_OK):
            pytest.skip("this user can write a read-only folder (root)")
        with pytest.raises(OSError, match="no writable cache folder"):
            cache.cache_dir()
    finally:
        (tmp_path / "ro").chmod(0o700)
