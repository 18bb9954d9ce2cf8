"""The Ray executor on a real local Ray cluster (``ray start --head`` on 127.0.0.1 with 2 CPUs, started and
stopped here): the same records as the local pool, none lost or duplicated when a Ray worker is SIGKILLed
mid-batch, the local pool's per-case isolation inside a batch, resume across executors, per-node backends."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from conformance.executors.digests import input_digests  # noqa: E402
from conformance.executors.planted import MARKER_ENV  # noqa: E402
from conformance.executors.ray_executor import RayExecutor  # noqa: E402
from conformance.results import ResultsFile  # noqa: E402
from conformance.runner import RunOptions, Task, plan, run  # noqa: E402

pytestmark = pytest.mark.slow

KILLER = "conformance.executors.planted:KillsRayWorkerBackend"
ONLY_HERE = "conformance.executors.planted:OnlyWhereMarkedBackend"
SEGFAULT = "conformance.planted:SegfaultBackend"
BASE = {"h": 16, "dtype": "bfloat16", "dst_type": "int8", "smooth": "none", "group_index": None, "dist": "gaussian"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    """A head node of 2 CPUs on 127.0.0.1 in its own session and temp dir (short: Ray's socket paths are
    limited), this process connected as its driver; stopped (the whole process group) at the end."""
    temp = tempfile.mkdtemp(prefix="w8r", dir="/tmp")
    port = _free_port()
    # a loopback-only cluster of this test: Ray's token authentication is off for it (head and driver)
    saved_auth = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    env = {**os.environ, MARKER_ENV: os.path.join(temp, "killed-once")}
    env.pop("W8A8_PLANTED_ONLY_HERE", None)
    ray_bin = Path(sys.executable).with_name("ray")
    head = subprocess.Popen([str(ray_bin), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                             "--num-cpus", "2", "--include-dashboard", "false", "--disable-usage-stats",
                             "--temp-dir", temp, "--block"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                ray.init(address=address, log_to_driver=False, logging_level="WARNING")
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.time() > deadline or head.poll() is not None:
                    raise
                time.sleep(1)
        yield {"address": address, "marker": env[MARKER_ENV]}
    finally:
        ray.shutdown()
        if saved_auth is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved_auth
        try:
            os.killpg(head.pid, signal.SIGTERM)  # its workers end with its raylet
            head.wait(timeout=3)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(head.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp, ignore_errors=True)


def _executor(cluster, names, registrations=None, **kw) -> RayExecutor:
    return RayExecutor(address=cluster["address"], **kw).start(names, registrations or {})


def _comparable(path) -> dict:
    """Records by (backend, case id), without the one field that is a timing."""
    out = {}
    for r in ResultsFile(path).records():
        key = (r["backend"], r["case_id"])
        assert key not in out, f"{key} written twice"
        out[key] = {k: v for k, v in r.items() if k != "duration_s"}
    return out


def test_ray_and_local_runs_of_one_plan_give_identical_records_and_input_bytes(cluster, tmp_path):
    tasks, _ = plan(["torch-cpu"], ["dynamic_quant"], profile="dev", seed=3)
    assert len(tasks) > 50 and {t.kind for t in tasks} == {"named", "error", "drawn"}
    run(tasks, ResultsFile(tmp_path / "local.jsonl"), RunOptions(workers=2))
    executor = _executor(cluster, ["torch-cpu"], batch_size=16)
    stats = run(tasks, ResultsFile(tmp_path / "ray.jsonl"), RunOptions(workers=2), executor=executor)
    local, remote = _comparable(tmp_path / "local.jsonl"), _comparable(tmp_path / "ray.jsonl")
    assert set(local) == set(remote) == {t.key for t in tasks}
    differing = [k for k in local if local[k] != remote[k]]
    assert not differing, differing[:3]
    assert Counter(r["status"] for r in remote.values())["pass"] > 40
    assert stats["executor"]["batches"] >= len(tasks) // 16 and stats["executor"]["lost_batches"] == 0
    # the input bytes, built on a cluster worker and here
    cases = [(t.op, t.params) for t in tasks if t.kind == "drawn"]
    there = ray.get(ray.remote(input_digests).remote(cases))
    assert there == input_digests(cases) and len(set(there)) > len(cases) // 2  # (a few draws build equal bytes)


def _killer_tasks(rows):
    return [Task("planted-kills-ray-worker", "dynamic_quant", {**BASE, "lead": [r], "seed": r}) for r in rows]


def test_a_ray_worker_sigkilled_mid_batch_loses_no_case_and_duplicates_none(cluster, tmp_path):
    assert not os.path.exists(cluster["marker"])
    tasks = _killer_tasks([1, 2, 4, 5, 6, 7, 8, 9, 10])  # the Ray worker running the 4-row case is killed, once
    executor = _executor(cluster, ["planted-kills-ray-worker"], {"planted-kills-ray-worker": KILLER}, batch_size=4)
    stats = run(tasks, ResultsFile(tmp_path / "r.jsonl"), RunOptions(workers=2, registrations={
        "planted-kills-ray-worker": KILLER}), executor=executor)
    assert os.path.exists(cluster["marker"]), "the planted kill did not happen"
    records = _comparable(tmp_path / "r.jsonl")  # asserts no case written twice
    assert set(records) == {t.key for t in tasks}  # counted against the plan: none lost
    assert {r["status"] for r in records.values()} == {"pass"}  # the lost batch ran again, whole
    info = stats["executor"]
    assert (info["lost_batches"], info["retried_batches"], info["duplicates_dropped"]) == (1, 1, 0)


def test_a_batch_lost_on_every_attempt_has_its_cases_crashed_and_the_others_pass(cluster, tmp_path):
    tasks = _killer_tasks([1, 2, 3, 5, 6, 7, 8, 9])  # the 3-row case kills its Ray worker every time
    executor = _executor(cluster, ["planted-kills-ray-worker"], {"planted-kills-ray-worker": KILLER}, batch_size=4,
                         max_attempts=2)
    stats = run(tasks, ResultsFile(tmp_path / "r.jsonl"), RunOptions(workers=2, registrations={
        "planted-kills-ray-worker": KILLER}), executor=executor)
    records = _comparable(tmp_path / "r.jsonl")
    assert set(records) == {t.key for t in tasks}
    status = {r["params"]["lead"][0]: r["status"] for r in records.values()}
    assert status == {1: "crashed", 2: "crashed", 3: "crashed", 5: "crashed",
                      6: "pass", 7: "pass", 8: "pass", 9: "pass"}, status
    assert "lost 2 times" in records[tasks[0].key]["note"] and "WorkerCrashedError" in records[tasks[0].key]["note"]
    assert (stats["executor"]["lost_batches"], stats["executor"]["retried_batches"]) == (2, 1)


def test_a_crashing_case_inside_a_batch_is_isolated_and_a_local_run_resumes_on_ray(cluster, tmp_path):
    """The local pool's isolation runs inside each Ray batch: odd row counts segfault their case worker and are
    recorded crashed; the rest of the batch passes. The first cases ran locally; Ray finishes the plan."""
    tasks = [Task("planted-segfault", "dynamic_quant", {**BASE, "lead": [r], "seed": r}) for r in range(2, 7)]
    options = RunOptions(workers=1, timeout=60, registrations={"planted-segfault": SEGFAULT})
    results = ResultsFile(tmp_path / "r.jsonl")
    run(tasks[:1], results, options)  # locally
    executor = _executor(cluster, ["planted-segfault"], options.registrations, batch_size=4)
    stats = run(tasks, results, options, resume=True, executor=executor)
    assert (stats["skipped_done"], stats["ran"]) == (1, 4)
    records = _comparable(results.path)
    assert set(records) == {t.key for t in tasks}
    status = {r["params"]["lead"][0]: r["status"] for r in records.values()}
    assert status == {r: ("crashed" if r % 2 else "pass") for r in range(2, 7)}, status
    crashed = records[tasks[1].key]
    assert "SIGSEGV" in crashed["note"]


def test_a_backend_no_node_offers_is_reported_per_node_and_left_unrun(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("W8A8_PLANTED_ONLY_HERE", "1")  # the driver has it, the cluster's node does not
    name = "planted-only-where-marked"
    executor = _executor(cluster, [name], {name: ONLY_HERE})
    assert executor.offered() == {name: []}
    (node,) = executor.report()["nodes"]
    assert node["backends"][name].startswith("not available: W8A8_PLANTED_ONLY_HERE is not set")
    tasks = [Task(name, "dynamic_quant", {**BASE, "lead": [r], "seed": r}) for r in range(1, 4)]
    stats = run(tasks, ResultsFile(tmp_path / "r.jsonl"), RunOptions(registrations={name: ONLY_HERE}),
                executor=executor)
    assert stats["not_run"] == 3 and stats["not_run_backends"] == [name] and stats["ran"] == 0
    assert ResultsFile(tmp_path / "r.jsonl").records() == []


def test_tune_rounds_on_ray_merge_to_the_local_sweeps_sample_sets(cluster):
    import backends
    from conformance.executors.ray_tune import sweep_rounds
    from conformance.tuning import merge_stats, sweep

    a, b = backends.get("torch-cpu"), backends.get("numpy")
    executor = _executor(cluster, ["torch-cpu", "numpy"])
    there = sweep_rounds(executor, a, b, ["dynamic_quant"], 6, [1, 2])
    here = merge_stats(sweep(a, b, ["dynamic_quant"], 6, 1), sweep(a, b, ["dynamic_quant"], 6, 2))
    assert set(there) == set(here) and there
    for key in here:
        assert there[key].as_json() == here[key].as_json(), key
