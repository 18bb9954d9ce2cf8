"""The Ray executor: a conformance run spread over a Ray cluster.

* **Batches as Ray tasks.** The cases still to run are cut into batches of ``batch_size`` cases of one
  backend (plan order kept). Each batch is one Ray task (:func:`_run_batch`, one CPU) pinned to a node that
  offers its backend. Inside the task, the batch runs through that Ray worker's own
  :class:`~conformance.runner.WorkerPool` of one process — the local pool's code, not a copy: a case that
  crashes or hangs is recorded ``crashed`` / ``timeout`` with its signal and the rest of the batch goes on;
  a worker that keeps more than its memory budget is recorded ``leak`` and replaced; the worker process dies
  with the Ray worker (:func:`backends.lifetime.die_with_parent`). The pool stays alive between the batches
  a Ray worker runs, so torch and the backends are imported once per Ray worker, not once per batch.
* **Results stream back** batch by batch: the driver hands every record to the runner's ``emit``, which
  writes the same ``results.jsonl`` a local run writes (the reports and ``plan.json`` are the runner's and
  the CLI's, unchanged) — so ``--resume`` works across executors.
* **Lost work is retried, never duplicated.** A batch returns its records only when it is complete; a Ray
  worker killed or a node lost mid-batch returns none, and the batch is sent again (to any node that can run
  it) up to ``max_attempts`` times, after which its cases are recorded ``crashed`` with the Ray error. The
  driver also drops a record whose case was already written (counted as ``duplicates_dropped``) and records
  a case ``crashed`` whose batch came back without it.
* **Per-node backends.** Before the run, and whenever a node joins, the driver asks each node which of the
  run's backends it can run (:func:`_node_backends`, ``Backend.available()`` there). A batch only goes to a
  node that can run its backend; a backend a node lacks is reported for that node (``stats["executor"]``),
  not as a failure. Cases whose backend no live node offers are left unrun (``not_run``): a ``--resume``
  once such a node joins runs them.

Ray is an optional dependency (the ``ray`` extra); this module imports it only when an executor starts.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field

DEFAULT_BATCH_SIZE = 32
"""Cases per Ray task. Measured (``w8a8 bench --executors``): one Ray task costs a few milliseconds of driver
and raylet time against ~5 ms per case here, so at 32 cases the overhead is a few percent, while a lost batch
redoes at most 32 cases and the progress bar moves at least every couple of seconds per CPU."""
MAX_ATTEMPTS = 3
"""Times a batch is sent before its cases are recorded ``crashed``."""
BATCHES_PER_CPU = 2
"""Batches in flight per CPU of a node: the next one is queued when one finishes."""
NODE_REFRESH_S = 5.0
"""How often the driver looks for nodes that joined or left."""


# ------------------------------------------------------------------------------------------------
# what runs on the nodes

_POOLS: dict = {}


def _pool_for(pool_options: dict):
    """This Ray worker's pool of one worker process for these options (started on first use, then kept)."""
    from conformance.runner import RunOptions, WorkerPool

    key = (tuple(sorted(pool_options["registrations"].items())), pool_options["threads_per_worker"],
           pool_options["leak_budget_mb"], pool_options["timeout"])
    pool = _POOLS.get(key)
    if pool is None:
        for old in _POOLS.values():
            old.close()
        _POOLS.clear()
        options = RunOptions(workers=1, **pool_options)
        pool = _POOLS[key] = WorkerPool(options, size=1)
    return pool


def _run_batch(tasks: list[dict], opts: dict, pool_options: dict) -> dict:
    """Run one batch in this Ray worker's pool; the records, and where and how long it ran."""
    from conformance.runner import Task, _run_in_workers

    t0 = time.perf_counter()
    pool = _pool_for(pool_options)
    records: list[dict] = []
    stats: dict = {"ran": 0}

    def collect(*got: dict) -> None:
        records.extend(got)

    _run_in_workers(deque(Task(**t) for t in tasks), opts, pool.options, collect, stats, pool)
    return {"records": records, "host": socket.gethostname(), "pid": os.getpid(),
            "seconds": time.perf_counter() - t0}


def _node_backends(names: list[str], registrations: dict[str, str]) -> dict:
    """What this node offers: per backend ``[available, reason]``, its host name and Python."""
    import platform

    import backends

    for name, target in registrations.items():
        backends.register(name, target)
    offered = {}
    for name in names:
        try:
            ok, reason = backends.get(name).available()
        except Exception as exc:  # noqa: BLE001 - a backend that cannot even load is one this node lacks
            ok, reason = False, f"{type(exc).__name__}: {exc}"
        offered[name] = [bool(ok), str(reason or "")]
    return {"host": socket.gethostname(), "python": platform.python_version(), "backends": offered}


def _noop() -> float:
    return time.perf_counter()


# ------------------------------------------------------------------------------------------------
# the driver

@dataclass
class NodeState:
    node_id: str
    cpus: int
    host: str = "?"
    backends: dict = field(default_factory=dict)  # name -> [available, reason]
    alive: bool = True
    inflight: int = 0
    batches: int = 0
    cases: int = 0
    lost_batches: int = 0

    def runs(self, backend: str) -> bool:
        return self.alive and bool(self.backends.get(backend, [False])[0])

    def report(self) -> dict:
        return {"node_id": self.node_id, "host": self.host, "cpus": self.cpus, "alive": self.alive,
                "batches": self.batches, "cases": self.cases, "lost_batches": self.lost_batches,
                "backends": {n: ("available" if ok else f"not available: {why}") for n, (ok, why) in
                             sorted(self.backends.items())}}


@dataclass
class Batch:
    number: int
    backend: str
    tasks: list
    attempts: int = 0
    errors: list = field(default_factory=list)


class RayExecutor:
    """Cases in batches as Ray tasks (see the module docstring).

    ``address``: None starts a local Ray for the run (``num_cpus`` CPUs, default the run's ``--workers``) and
    stops it at the end; ``"auto"`` joins the cluster this machine belongs to; ``"HOST:PORT"`` joins that
    one. ``start(backends, registrations)`` connects and asks every node what it offers; ``run`` is the
    runner's seam (:mod:`conformance.executors`); ``close()`` disconnects."""

    name = "ray"

    def __init__(self, address: str | None = None, batch_size: int = DEFAULT_BATCH_SIZE, num_cpus: int | None = None,
                 max_attempts: int = MAX_ATTEMPTS, on_batch=None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.address, self.batch_size, self.num_cpus = address, batch_size, num_cpus
        self.max_attempts, self.on_batch = max_attempts, on_batch
        self.nodes: dict[str, NodeState] = {}
        self.backend_names: list[str] = []
        self.registrations: dict[str, str] = {}
        self._started_ray = False
        self._remote: dict = {}

    # -- connection

    def start(self, backend_names: list[str], registrations: dict[str, str] | None = None) -> "RayExecutor":
        import ray

        self.backend_names, self.registrations = list(backend_names), dict(registrations or {})
        if not ray.is_initialized():
            kwargs = {"include_dashboard": False, "log_to_driver": False, "logging_level": "WARNING",
                      "configure_logging": True}
            if self.address is None:
                # a local Ray for this run: its CPUs are the run's workers; a small object store (records are small)
                ray.init(num_cpus=self.num_cpus or max(1, os.cpu_count() or 1), object_store_memory=200 * 2**20,
                         **kwargs)
                self._started_ray = True
            else:
                ray.init(address=self.address, **kwargs)
        self._remote = {"batch": ray.remote(num_cpus=1, max_retries=0)(_run_batch),
                        "probe": ray.remote(num_cpus=0, max_retries=0)(_node_backends),
                        "noop": ray.remote(num_cpus=1, max_retries=0)(_noop)}
        self.refresh_nodes()
        return self

    def close(self) -> None:
        import ray

        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self._started_ray = False

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _on(self, node_id: str, soft: bool = False):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)

    def refresh_nodes(self) -> None:
        """Mark nodes that left, and ask every node that joined what it offers (a node that cannot answer
        within 60 s is left out until the next refresh)."""
        import ray

        alive = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        for node_id, state in self.nodes.items():
            state.alive = node_id in alive
        new = [nid for nid, n in alive.items() if nid not in self.nodes and int(n.get("Resources", {}).get("CPU", 0)) > 0]
        probes = {nid: self._remote["probe"].options(scheduling_strategy=self._on(nid)).remote(
            self.backend_names, self.registrations) for nid in new}
        for nid, ref in probes.items():
            try:
                info = ray.get(ref, timeout=60)
            except Exception:  # noqa: BLE001 - asked again at the next refresh
                continue
            self.nodes[nid] = NodeState(nid, int(alive[nid]["Resources"]["CPU"]), info["host"], info["backends"])

    def offered(self) -> dict[str, list[str]]:
        """Per backend of the run, the live nodes (host names) that can run it."""
        return {b: [n.host for n in self.nodes.values() if n.runs(b)] for b in self.backend_names}

    def report(self) -> dict:
        return {"name": self.name, "address": self.address or "local (started for this run)",
                "batch_size": self.batch_size, "nodes": [n.report() for n in self.nodes.values()]}

    # -- the runner's seam

    def run(self, todo: deque, opts: dict, options, emit, stats: dict) -> None:
        import ray

        from conformance.runner import _failed_record

        if not self._remote:
            self.start(sorted({t.backend for t in todo}), options.registrations)
        pool_options = {"timeout": options.timeout, "registrations": dict(options.registrations),
                        "threads_per_worker": options.threads_per_worker, "leak_budget_mb": options.leak_budget_mb}
        pending = deque(self._batches(todo))
        todo.clear()
        counts = Counter()
        written: set = set()
        inflight: dict = {}  # ObjectRef -> (Batch, node id)
        last_refresh = time.monotonic()

        def give(node: NodeState) -> bool:
            for i, batch in enumerate(pending):
                if node.runs(batch.backend):
                    del pending[i]
                    batch.attempts += 1
                    ref = self._remote["batch"].options(scheduling_strategy=self._on(node.node_id)).remote(
                        [asdict(t) for t in batch.tasks], opts, pool_options)
                    inflight[ref] = (batch, node.node_id)
                    node.inflight += 1
                    return True
            return False

        def lost(batch: Batch, node: NodeState, exc: BaseException) -> None:
            node.lost_batches += 1
            counts["lost_batches"] += 1
            batch.errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            if batch.attempts < self.max_attempts:
                counts["retried_batches"] += 1
                pending.appendleft(batch)
                return
            note = (f"its Ray batch was lost {batch.attempts} times (last: {batch.errors[-1]}); not sent again")
            fresh = [_failed_record(t, "crashed", note) for t in batch.tasks if t.key not in written]
            written.update(t.key for t in batch.tasks)
            emit(*fresh)

        while pending or inflight:
            if time.monotonic() - last_refresh > NODE_REFRESH_S:
                self.refresh_nodes()
                last_refresh = time.monotonic()
            for node in self.nodes.values():
                while node.alive and node.inflight < BATCHES_PER_CPU * node.cpus and give(node):
                    pass
            if not inflight:  # nothing can be placed: no live node offers these backends
                self.refresh_nodes()
                if not any(n.runs(b.backend) for b in pending for n in self.nodes.values()):
                    stats["not_run"] = stats.get("not_run", 0) + sum(len(b.tasks) for b in pending)
                    stats.setdefault("not_run_backends", sorted({b.backend for b in pending}))
                    break
                continue
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            for ref in ready:
                batch, node_id = inflight.pop(ref)
                node = self.nodes[node_id]
                node.inflight -= 1
                try:
                    out = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a Ray worker or node lost: the batch goes again
                    self.refresh_nodes()
                    lost(batch, node, exc)
                    continue
                by_key = {(r["backend"], r["case_id"]): r for r in out["records"]}
                fresh = []
                for t in batch.tasks:
                    if t.key in written:
                        counts["duplicates_dropped"] += 1
                        continue
                    record = by_key.get(t.key) or _failed_record(t, "crashed", "its Ray batch came back without it")
                    fresh.append(record)
                    written.add(t.key)
                counts["duplicates_dropped"] += max(0, len(out["records"]) - len(by_key))
                node.batches += 1
                node.cases += len(fresh)
                counts["batches"] += 1
                emit(*fresh)
                if self.on_batch is not None:
                    self.on_batch(batch, node, out)
        stats["executor"] = {**self.report(), **{k: counts.get(k, 0) for k in
                                                  ("batches", "lost_batches", "retried_batches", "duplicates_dropped")}}

    def _batches(self, todo) -> list[Batch]:
        """Consecutive tasks of one backend, ``batch_size`` at a time (plan order kept)."""
        out: list[Batch] = []
        for task in todo:
            last = out[-1] if out else None
            if last is None or last.backend != task.backend or len(last.tasks) >= self.batch_size:
                out.append(Batch(len(out), task.backend, []))
            out[-1].tasks.append(task)
        return out

    # -- measuring

    def task_overhead(self, n: int = 200) -> float:
        """Seconds one empty Ray task costs, submitted and collected in a stream of ``n`` (the driver, the
        raylet and a worker's round trip): what a batch pays beyond its cases."""
        import ray

        ray.get([self._remote["noop"].remote() for _ in range(4)])  # workers up
        t0 = time.perf_counter()
        ray.get([self._remote["noop"].remote() for _ in range(n)])
        return (time.perf_counter() - t0) / n
