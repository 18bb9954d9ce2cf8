"""The Ray executor on a real local Ray cluster (``ray start --head`` on 127.0.0.1 with 2 CPUs, started once for
the module and stopped at its end): the same records as the local pool, none lost or duplicated when a Ray worker
is SIGKILLed mid-batch, the local pool's per-case isolation inside a batch, resume across executors, per-node
backends — one the driver lacks but the nodes have is planned and run; one no node has is refused.

Kept small for CI: every run passes the same registrations (:data:`REGISTRATIONS`), so a Ray worker's case pool
(torch imported once) is reused from test to test instead of being rebuilt."""

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
from conformance.executors.planted import MARKER_ENV, ON_NODES_ENV, ONLY_HERE_ENV  # noqa: E402
from conformance.executors.ray_executor import RayExecutor  # noqa: E402
from conformance.results import ResultsFile  # noqa: E402
from conformance.runner import RunOptions, Task, plan, run  # noqa: E402

pytestmark = pytest.mark.slow

KILLER = "conformance.executors.planted:KillsRayWorkerBackend"
ONLY_HERE = "conformance.executors.planted:OnlyWhereMarkedBackend"
SEGFAULT = "conformance.planted:SegfaultBackend"
ON_NODES = "conformance.executors.planted:OnlyOnMarkedNodesBackend"
REGISTRATIONS = {"planted-kills-ray-worker": KILLER, "planted-only-where-marked": ONLY_HERE,
                 "planted-segfault": SEGFAULT, "planted-only-on-marked-nodes": ON_NODES}
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
    # the cluster's node has what the driver lacks (ON_NODES_ENV), and lacks what only the driver may have
    env = {**os.environ, MARKER_ENV: os.path.join(temp, "killed-once"), ON_NODES_ENV: "1"}
    env.pop(ONLY_HERE_ENV, None)
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


def _executor(cluster, names, **kw) -> RayExecutor:
    return RayExecutor(address=cluster["address"], **kw).start(names, REGISTRATIONS)


def _options(**kw) -> RunOptions:
    return RunOptions(registrations=REGISTRATIONS, **kw)


def _comparable(path) -> dict:
    """Records by (backend, case id), without the one field that is a timing."""
    out = {}
    for r in ResultsFile(path).records():
        key = (r["backend"], r["case_id"])
        assert key not in out, f"{key} written twice"
        out[key] = {k: v for k, v in r.items() if k != "duration_s"}
    return out


def test_ray_and_local_runs_of_one_plan_give_identical_records_and_input_bytes(cluster, tmp_path):
    """The whole plan run locally; the same plan begun locally (its first 20 records) and resumed on Ray."""
    tasks, _ = plan(["torch-cpu"], ["dynamic_quant"], profile="dev", seed=3)
    assert len(tasks) > 50 and {t.kind for t in tasks} == {"named", "error", "drawn"}
    run(tasks, ResultsFile(tmp_path / "local.jsonl"), _options(workers=1))
    begun = (tmp_path / "local.jsonl").read_text().splitlines(keepends=True)[:20]
    (tmp_path / "ray.jsonl").write_text("".join(begun))
    executor = _executor(cluster, ["torch-cpu"], batch_size=16)
    stats = run(tasks, ResultsFile(tmp_path / "ray.jsonl"), _options(workers=2), resume=True, executor=executor)
    assert (stats["skipped_done"], stats["ran"]) == (20, len(tasks) - 20)
    local, remote = _comparable(tmp_path / "local.jsonl"), _comparable(tmp_path / "ray.jsonl")
    assert set(local) == set(remote) == {t.key for t in tasks}
    differing = [k for k in local if local[k] != remote[k]]
    assert not differing, differing[:3]
    assert Counter(r["status"] for r in remote.values())["pass"] > 40
    assert stats["executor"]["batches"] >= (len(tasks) - 20) // 16 and stats["executor"]["lost_batches"] == 0
    # the input bytes, built on a cluster worker and here
    cases = [(t.op, t.params) for t in tasks if t.kind == "drawn"]
    there = ray.get(ray.remote(input_digests).remote(cases))
    assert there == input_digests(cases) and len(set(there)) > len(cases) // 2  # (a few draws build equal bytes)


def _killer_tasks(rows):
    return [Task("planted-kills-ray-worker", "dynamic_quant", {**BASE, "lead": [r], "seed": r}) for r in rows]


def test_sigkilled_ray_workers_lose_no_case_and_duplicate_none(cluster, tmp_path):
    """Two batches of 4: the Ray worker running the 4-row case is killed once (the batch is sent again and
    passes whole); the one running the 3-row case is killed on every attempt (after 2 its cases are crashed)."""
    assert not os.path.exists(cluster["marker"])
    tasks = _killer_tasks([1, 2, 4, 5, 3, 6, 7, 8])
    executor = _executor(cluster, ["planted-kills-ray-worker"], batch_size=4, max_attempts=2)
    stats = run(tasks, ResultsFile(tmp_path / "r.jsonl"), _options(workers=2), executor=executor)
    assert os.path.exists(cluster["marker"]), "the planted kill did not happen"
    records = _comparable(tmp_path / "r.jsonl")  # asserts no case written twice
    assert set(records) == {t.key for t in tasks}  # counted against the plan: none lost
    status = {r["params"]["lead"][0]: r["status"] for r in records.values()}
    assert status == {1: "pass", 2: "pass", 4: "pass", 5: "pass",
                      3: "crashed", 6: "crashed", 7: "crashed", 8: "crashed"}, status
    note = records[tasks[4].key]["note"]
    assert "lost 2 times" in note and "WorkerCrashedError" in note
    info = stats["executor"]
    assert (info["lost_batches"], info["retried_batches"], info["duplicates_dropped"]) == (3, 2, 0)


def test_a_crashing_case_inside_a_batch_is_isolated(cluster, tmp_path):
    """The local pool's isolation runs inside each Ray batch: the 3-row case segfaults its case worker and is
    recorded crashed; the rest of the batch passes."""
    tasks = [Task("planted-segfault", "dynamic_quant", {**BASE, "lead": [r], "seed": r}) for r in range(2, 5)]
    results = ResultsFile(tmp_path / "r.jsonl")
    executor = _executor(cluster, ["planted-segfault"], batch_size=4)
    stats = run(tasks, results, _options(), executor=executor)
    assert stats["ran"] == 3 and stats["executor"]["lost_batches"] == 0
    records = _comparable(results.path)
    assert set(records) == {t.key for t in tasks}
    status = {r["params"]["lead"][0]: r["status"] for r in records.values()}
    assert status == {2: "pass", 3: "crashed", 4: "pass"}, status
    assert "SIGSEGV" in records[tasks[1].key]["note"]


def test_a_backend_no_node_offers_is_reported_per_node_and_left_unrun(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv(ONLY_HERE_ENV, "1")  # the driver has it, the cluster's node does not
    name = "planted-only-where-marked"
    executor = _executor(cluster, [name])
    assert executor.offered() == {name: []}
    (node,) = executor.report()["nodes"]
    assert node["backends"][name].startswith(f"not available: {ONLY_HERE_ENV} is not set")
    tasks = [Task(name, "dynamic_quant", {**BASE, "lead": [r], "seed": r}) for r in range(1, 4)]
    stats = run(tasks, ResultsFile(tmp_path / "r.jsonl"), _options(), executor=executor)
    assert stats["not_run"] == 3 and stats["not_run_backends"] == [name] and stats["ran"] == 0
    assert ResultsFile(tmp_path / "r.jsonl").records() == []


def test_the_cli_plans_a_backend_only_the_nodes_have_and_refuses_one_no_node_has(cluster, tmp_path, monkeypatch,
                                                                                 capsys):
    import backends
    from w8a8cli.main import main

    monkeypatch.delenv(ON_NODES_ENV, raising=False)
    monkeypatch.delenv(ONLY_HERE_ENV, raising=False)
    assert not backends.get(ON_NODES).available()[0]  # the driver cannot run it
    common = ["conformance", "--op", "dynamic_quant", "--profile", "dev", "--workers", "2"]
    # without Ray: refused here, as before
    assert main([*common, "--backend", ON_NODES, "--out", str(tmp_path / "local")]) == 2
    assert "is not available here: W8A8_PLANTED_ON_NODES is not set" in capsys.readouterr().err
    # with Ray: planned here from the declaration, run on the node that has it
    ray_flags = ["--executor", "ray", "--ray-address", cluster["address"]]
    out = tmp_path / "ray"
    assert main([*common, *ray_flags, "--backend", ON_NODES, "--out", str(out)]) == 0
    records = _comparable(out / "results.jsonl")
    planned, _ = plan(["planted-only-on-marked-nodes"], ["dynamic_quant"], profile="dev", seed=0)
    assert set(records) == {t.key for t in planned}
    assert Counter(r["status"] for r in records.values())["pass"] > 30
    # no node has it either: one clear line, the node and its reason named, nothing run
    capsys.readouterr()
    assert main([*common, *ray_flags, "--backend", ONLY_HERE, "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'planted-only-where-marked' is available on no node of the Ray cluster" in err[0]
    assert f"{ONLY_HERE_ENV} is not set" in err[0]
    assert not (tmp_path / "none" / "results.jsonl").exists()


def test_tune_rounds_on_ray_equal_the_local_sweeps_also_for_a_backend_only_the_nodes_have(cluster, monkeypatch,
                                                                                          capsys):
    import json

    import backends
    from conformance.executors.ray_tune import sweep_rounds
    from conformance.tuning import merge_stats, sweep
    from w8a8cli.main import main

    monkeypatch.delenv(ON_NODES_ENV, raising=False)
    a = backends.get(ON_NODES)
    b = __import__("backends.numpy_backend", fromlist=["NumpyBackend"]).NumpyBackend(a.numerics)
    executor = _executor(cluster, [a.name, "numpy"])
    there = sweep_rounds(executor, a, b, ["dynamic_quant"], 6, [1, 2])
    # the CLI: the driver lacks the backend, the node runs the rounds
    capsys.readouterr()
    assert main(["tune", "--executor", "ray", "--ray-address", cluster["address"], "--backend", ON_NODES,
                 "--op", "dynamic_quant", "--samples", "6", "--seed", "1", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    # a backend no node has: one line naming what the node lacks
    monkeypatch.delenv(ONLY_HERE_ENV, raising=False)
    assert main(["tune", "--executor", "ray", "--ray-address", cluster["address"], "--backend", ONLY_HERE,
                 "--op", "dynamic_quant", "--samples", "6"]) == 2
    err = capsys.readouterr().err
    assert "--backend: expected a node of the Ray cluster that offers both planted-only-where-marked and numpy" in err
    assert f"planted-only-where-marked {ONLY_HERE_ENV} is not set" in err
    monkeypatch.setenv(ON_NODES_ENV, "1")  # the same sweeps here, for reference
    here = merge_stats(sweep(a, b, ["dynamic_quant"], 6, 1), sweep(a, b, ["dynamic_quant"], 6, 2))
    assert set(there) == set(here) and there
    for key in here:
        assert there[key].as_json() == here[key].as_json(), key
    one = sweep(a, b, ["dynamic_quant"], 6, 1)
    assert {(e["output"], e["dtype"], e["samples"]) for e in entries} == {
        (k[1], k[2], s.cases) for k, s in one.items()}
