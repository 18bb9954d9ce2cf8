"""The runner: backends x ops x cases, in worker processes, streamed to a JSON Lines file.

* **Cases** per op (its declaration, :mod:`conformance.declare`): the named cases, the error cases
  (its bad calls), then cases drawn by Hypothesis from the op's main strategy (``profile`` sets how
  many; ``seed`` makes the draw reproducible) and an eighth as many from each of its other
  strategies.
* **Isolation**: every backend call runs in a worker process. A worker that dies (segfault,
  device error, ``os._exit``) has its case recorded as ``crashed`` and is replaced; a call that
  overruns ``timeout`` seconds has its worker killed and its case recorded as ``timeout``. Workers die
  with the run (:func:`conformance.processes.die_with_parent`): a ``kill -9`` of the parent leaves no
  worker behind, even one stuck in a backend call.
* **Memory watch**: a case after which its worker keeps more than ``leak_budget_mb`` of new resident
  memory is recorded as ``leak`` (the judgement it had is kept in ``judged``) and the worker is replaced.
* **Streaming**: each result is appended to the results file as it arrives (flushed + fsynced);
  with ``resume`` the cases already in the file are skipped, so a killed run continues where it
  stopped without redoing or corrupting anything.
* **Parallel**: ``workers`` processes (each pinned to one BLAS/OpenMP thread so they don't
  oversubscribe the cores), each with the next case already queued (``IN_FLIGHT``); ``workers=0``
  runs in-process (no isolation; for tests and debugging).
"""

from __future__ import annotations

import hashlib
import os
import time
import traceback
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from .compare import Tolerance
from .evaluate import case_id, repro_command
from .results import ResultsFile

PROFILE_CASES = {"dev": 8, "ci": 100, "thorough": 1000}
DEFAULT_PROFILE = "ci"
EXTRA_STRATEGY_SHARE = 8  # each strategy besides "main" draws n // 8 cases (at least 1)
LEAK_BUDGET_MB = 256.0    # resident memory a worker may keep after one case before it is a leak


@dataclass
class Task:
    backend: str
    op: str
    params: dict
    kind: str = "drawn"
    name: str | None = None

    @property
    def case_id(self) -> str:
        return case_id(self.op, self.params)

    @property
    def key(self) -> tuple[str, str]:
        return self.backend, self.case_id


@dataclass
class RunOptions:
    workers: int = 2
    timeout: float = 120.0
    tolerance: Tolerance = field(default_factory=Tolerance)
    tolerances: str | None = None  # a TOML tolerance table (overrides ``tolerance`` where it has an entry)
    attribute: bool = True
    registrations: dict[str, str] = field(default_factory=dict)
    threads_per_worker: int = 1
    leak_budget_mb: float = LEAK_BUDGET_MB  # RSS growth over one case that makes it a ``leak`` (0: no watch)


def save_plan(path, tasks: list[Task], meta: dict) -> None:
    """Write the planned tasks (so that ``--resume`` continues exactly this plan)."""
    import json

    from .stateio import write_atomic

    write_atomic(path, json.dumps({"meta": meta, "tasks": [asdict(t) for t in tasks]}, default=str))


def load_plan(path, backends: list[str] | None = None) -> tuple[list[Task], dict]:
    """The tasks and metadata of a saved plan, validated: a regular file of bounded size and depth, an
    object whose ``tasks`` are objects with a string ``backend`` and ``op``, an object ``params``, an op
    that is registered and (``backends`` given) a backend of this run. Anything else is one
    :class:`~conformance.stateio.StateError` line naming the plan and the first bad task."""
    from .registry import specs
    from .stateio import PLAN_BYTES, StateError, read_json

    data = read_json(path, limit=PLAN_BYTES, what="saved plan")
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise StateError(path, "the saved plan is not an object with a 'tasks' list")
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise StateError(path, "the saved plan's 'meta' is not an object")
    known = specs()
    tasks = []
    for i, t in enumerate(data["tasks"]):
        problem = _task_problem(t, known, backends)
        if problem:
            raise StateError(path, f"task {i} of the saved plan {problem}; start a new run without --resume")
        tasks.append(Task(backend=t["backend"], op=t["op"], params=t["params"], kind=t.get("kind", "drawn"),
                          name=t.get("name")))
    return tasks, meta


def _task_problem(t, known: dict, backends: list[str] | None) -> str | None:
    if not isinstance(t, dict):
        return f"is not an object ({type(t).__name__})"
    for key in ("backend", "op"):
        if not isinstance(t.get(key), str):
            return f"has no string {key!r}"
    if not isinstance(t.get("params"), dict):
        return "has no object 'params'"
    if not isinstance(t.get("kind", "drawn"), str) or not isinstance(t.get("name"), (str, type(None))):
        return "has a 'kind' or 'name' that is not a string"
    if set(t) - {"backend", "op", "params", "kind", "name"}:
        return f"has unknown keys {sorted(set(t) - {'backend', 'op', 'params', 'kind', 'name'})}"
    if t["op"] not in known:
        return f"names the op {t['op']!r}, which does not exist"
    if backends is not None and t["backend"] not in backends:
        return f"names the backend {t['backend']!r}, which is not one of this run's ({', '.join(backends)})"
    return None


def op_seed(op: str, seed: int, strategy: str = "main") -> int:
    """The Hypothesis seed of one op's draw from one strategy: a SHA-256 of ``(op, strategy, seed)``, the
    same in every process, install and Python (never ``hash()``, which is salted per process)."""
    digest = hashlib.sha256(f"{op}\0{strategy}\0{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


@contextmanager
def _no_local_constants():
    """Hypothesis mixes constants read from the source of the "local" modules in ``sys.modules`` (those
    outside site-packages) into its draws: the draw would depend on what is imported and on the install
    mode (editable or not). Inside this block that set is empty, so it depends on the seed only. (A
    private Hypothesis hook: where it is missing, nothing is changed, and the reproducibility test says so.)"""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover
        yield
        return
    get, cache = getattr(providers, "_get_local_constants", None), getattr(providers, "CONSTANTS_CACHE", None)
    if get is None or cache is None or not hasattr(providers, "Constants"):
        yield
        return
    empty = providers.Constants()
    cache.cache.clear()
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = get
        cache.cache.clear()


def draw_cases(spec, n: int, seed: int, strategy: str = "main") -> list[dict]:
    """``n`` parameter dicts drawn from the op's strategy (``"main"``, or another one it declares) for
    ``seed`` (deduplicated).

    A case's parameters depend only on (op, strategy, seed, its index): the Hypothesis seed is
    :func:`op_seed`, and the constants Hypothesis would read from the imported modules are left out
    (:func:`_no_local_constants`), so neither the ``--op`` subset, the import order nor the install mode
    changes a draw. A run still saves its plan (:func:`save_plan`) and ``--resume`` reads it back: a
    Hypothesis upgrade may change draws.
    """
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    drawn: list[dict] = []

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @hseed(op_seed(spec.name, seed, strategy))
    @given(spec.all_strategies()[strategy]())
    def collect(params):
        drawn.append(params)

    with _no_local_constants():
        collect()
    unique, seen = [], set()
    for p in drawn:
        cid = case_id(spec.name, p)
        if cid not in seen:
            seen.add(cid)
            unique.append(p)
    return unique[:n]


def op_cases(spec, n: int, seed: int, *, declared: bool = True) -> list[tuple[dict, str, str | None]]:
    """``(params, kind, name)`` of every case of one op: its named cases and bad calls (``declared``),
    then ``n`` cases drawn from its main strategy and ``n // 8`` from each of its others."""
    items = []
    if declared:
        items += [({"named": c.key}, "named", c.key) for c in spec.cases]
        items += [({"error": b.key}, "error", b.key) for b in spec.bad_calls]
    for strategy in spec.all_strategies():
        count = n if strategy == "main" else max(1, n // EXTRA_STRATEGY_SHARE)
        items += [(p, "drawn", None) for p in draw_cases(spec, count, seed, strategy)]
    return items


def plan(backend_names: list[str], ops: list[str] | None = None, *, profile: str = DEFAULT_PROFILE, seed: int = 0,
         case: dict | None = None, include_declared: bool = True, draw_stats: dict | None = None
         ) -> tuple[list[Task], dict[str, list[str]]]:
    """The tasks of a run, and per backend the ops it does not implement (reported, not run).

    A backend that can decline calls gets its own draw, inside what it takes (:mod:`.drawing`); what
    that found is put in ``draw_stats[backend][op]`` when a dict is given."""
    import backends

    from .drawing import DrawStats, can_decline, op_cases_for

    from .registry import specs

    all_specs = specs()
    wanted = list(all_specs) if not ops else ops
    unknown = [o for o in wanted if o not in all_specs]
    if unknown:
        raise KeyError(f"no conformance spec for op(s) {', '.join(unknown)}; known: {', '.join(sorted(all_specs))}")
    n = PROFILE_CASES[profile]
    tasks: list[Task] = []
    skipped: dict[str, list[str]] = {}
    case_lists: dict[str, list[tuple[dict, str, str | None]]] = {}
    for op in wanted:
        if case is not None:
            kind = next((k for k in ("named", "error") if k in case), "drawn")
            case_lists[op] = [(case, kind, case.get(kind))]
            continue
        case_lists[op] = op_cases(all_specs[op], n, seed, declared=include_declared)
    for name in backend_names:
        backend = backends.get(name)
        implemented = set(backend.ops())
        skipped[name] = [op for op in wanted if op not in implemented]
        for op in wanted:
            if op not in implemented:
                continue
            items = case_lists[op]
            if case is None and can_decline(backend):
                stats = DrawStats()
                items = op_cases_for(all_specs[op], backend, n, seed, declared=include_declared, stats=stats)
                if draw_stats is not None:
                    draw_stats.setdefault(name, {})[op] = stats.as_dict()
            tasks.extend(Task(name, op, p, kind, label) for p, kind, label in items)
    return tasks, skipped


# ------------------------------------------------------------------------------------------------
# worker side

_TABLES: dict = {}

def _execute(task: dict, options: dict) -> dict:
    import backends

    from .evaluate import run_case
    from .registry import get

    tol = Tolerance(**options["tolerance"])
    if options.get("tolerances"):
        from .tolerances import ToleranceTable

        tol = _TABLES.get(options["tolerances"]) or _TABLES.setdefault(options["tolerances"],
                                                                       ToleranceTable.load(options["tolerances"]))
    backend = backends.get(task["backend"])
    try:
        return run_case(get(task["op"]), task["params"], backend, tolerance=tol,
                        attribute_failures=options["attribute"], kind=task["kind"], name=task["name"])
    except Exception as exc:  # noqa: BLE001 - a case that cannot even be built is an error result
        return _failed_record(Task(**task), "error", f"{type(exc).__name__}: {exc}",
                              traceback=traceback.format_exc()[-4000:])


def _watched(task: dict, options: dict) -> dict:
    """:func:`_execute` under the memory watch: a case after which the worker keeps more than
    ``leak_budget_mb`` of new resident memory (after a garbage collection and a heap trim) is recorded as
    ``leak``, its
    judgement kept in ``judged``; the parent then replaces this worker."""
    from .processes import release_free_memory, rss_bytes

    budget = float(options.get("leak_budget_mb") or 0) * 2**20
    before = rss_bytes() if budget > 0 else 0
    result = _execute(task, options)
    if budget <= 0 or rss_bytes() - before <= budget:
        return result
    release_free_memory()
    grown = rss_bytes() - before
    if grown <= budget:
        return result
    note = (f"the worker kept {grown / 2**20:,.0f} MiB more resident memory after this case than before it "
            f"(budget {budget / 2**20:,.0f} MiB); worker recycled")
    return {**result, "status": "leak", "judged": result.get("status"), "note": note,
            "judged_note": result.get("note"), "rss_growth_mb": round(grown / 2**20, 1), "worker_pid": os.getpid()}


def _worker_main(conn, registrations: dict[str, str], threads: int, parent_pid: int | None = None) -> None:
    from .processes import die_with_parent

    if parent_pid is not None:
        die_with_parent(parent_pid)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    import backends

    for name, target in registrations.items():
        backends.register(name, target)
    try:
        import torch  # noqa: F401 - only to pin its pool; absent torch is fine

        torch.set_num_threads(threads)
    except Exception:  # noqa: BLE001
        pass
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        task, options = msg
        conn.send(("result", _watched(task, options)))


IN_FLIGHT = 2
"""Cases queued per worker: the next one is already in its pipe when one finishes, so a worker never
waits for the parent (which may be slow to be scheduled on a busy machine) between two cases."""


class _Worker:
    """A worker process and the cases sent to it, oldest first (the first is the one running)."""

    def __init__(self, ctx, registrations, threads):
        parent, child = ctx.Pipe()
        self.conn = parent
        self.process = ctx.Process(target=_worker_main, args=(child, registrations, threads, os.getpid()), daemon=True)
        self.process.start()
        child.close()
        self.inflight: deque[Task] = deque()
        self.started = 0.0  # when the running case began
        self.ready = False

    def send(self, task: Task, options: dict) -> bool:
        """Queue ``task``; False if the worker is gone (its death is then read from its pipe)."""
        try:
            self.conn.send((asdict(task), options))
        except (BrokenPipeError, OSError):
            return False
        if not self.inflight:
            self.started = time.monotonic()
        self.inflight.append(task)
        return True

    def finished(self) -> None:
        """The running case reported its result; the next one (if any) starts now."""
        self.inflight.popleft()
        self.started = time.monotonic()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


def _failed_record(task: Task, status: str, note: str, **extra) -> dict:
    """The record of a case that produced no judgement: it could not be built (``error``), its worker
    died (``crashed``) or overran (``timeout``)."""
    return {"op": task.op, "backend": task.backend, "case_id": task.case_id, "params": task.params, "kind": task.kind,
            "name": task.name, "status": status, "note": note, **extra,
            "repro": repro_command(task.backend, task.op, task.params)}


class WorkerPool:
    """The worker processes of a run, started ahead of it: each imports torch and the backends (seconds),
    which overlaps the planning when a pool is started before :func:`plan` and handed to :func:`run`.
    Close it (or use it as a context manager) when the run is over."""

    def __init__(self, options: RunOptions, size: int | None = None):
        import multiprocessing as mp

        self.options = options
        self.ctx = mp.get_context("spawn")
        self.workers = [self.new() for _ in range(max(1, size or options.workers))]

    def new(self) -> _Worker:
        return _Worker(self.ctx, self.options.registrations, self.options.threads_per_worker)

    def close(self) -> None:
        for w in self.workers:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in self.workers:
            w.process.join(timeout=2)
            if w.process.is_alive():
                w.kill()
        self.workers = []

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run(tasks: list[Task], results: ResultsFile, options: RunOptions, *, resume: bool = False,
        on_result: Callable[[dict], None] | None = None, pool: WorkerPool | None = None,
        executor=None) -> dict:
    """Run ``tasks``, appending every result to ``results``. Returns counts of what happened.

    ``pool``: worker processes already started (:class:`WorkerPool`; left open); by default the run
    starts its own and closes them at the end. ``executor``: where the cases run instead of this
    machine's pool (:mod:`conformance.executors`: ``executor.run(todo, opts, options, emit, stats)``
    hands every record to ``emit`` exactly once); the results file, resume and counts stay here."""
    results.repair()
    done = results.done_keys() if resume else set()
    todo = deque(t for t in tasks if t.key not in done)
    stats = {"skipped_done": len(tasks) - len(todo), "ran": 0}
    opts = {"tolerance": asdict(options.tolerance), "attribute": options.attribute, "tolerances": options.tolerances,
            "leak_budget_mb": options.leak_budget_mb}
    if options.tolerances:  # a table naming an undeclared op or output is a usage error, before any case runs
        from .tolerances import ToleranceTable

        ToleranceTable.load(options.tolerances)

    def emit(*records: dict) -> None:
        results.append_many(list(records))
        stats["ran"] += len(records)
        for record in records if on_result else ():
            on_result(record)

    if executor is not None:
        if todo:
            executor.run(todo, opts, options, emit, stats)
        return stats
    if options.workers <= 0:
        import backends

        for name, target in options.registrations.items():
            backends.register(name, target)
        while todo:
            emit(_execute(asdict(todo.popleft()), opts))
        return stats
    if not todo:
        return stats
    if pool is not None:
        _run_in_workers(todo, opts, options, emit, stats, pool)
        return stats
    with WorkerPool(options, size=min(options.workers, len(todo))) as own:
        _run_in_workers(todo, opts, options, emit, stats, own)
    return stats


def _run_in_workers(todo: deque, opts: dict, options: RunOptions, emit, stats: dict, pool: WorkerPool) -> None:
    """Keep every worker's pipe filled, record crashes and timeouts of the running case, requeue the
    cases queued behind it (a dead or killed worker is replaced in the pool)."""
    from multiprocessing.connection import wait

    from .processes import signal_text

    workers = pool.workers

    def replace(i: int, w: _Worker, status: str | None, note: str) -> None:
        if w.inflight and status:
            emit(_failed_record(w.inflight.popleft(), status, note))
        todo.extendleft(reversed(w.inflight))  # the cases queued behind it run elsewhere
        w.inflight.clear()
        w.kill()
        workers[i] = pool.new()

    while todo or any(w.inflight for w in workers):
        for w in workers:
            while w.ready and todo and len(w.inflight) < IN_FLIGHT:
                if not w.send(todo[0], opts):
                    break
                todo.popleft()
        ready = wait([w.conn for w in workers], timeout=0.25)
        arrived = []  # the results of this round, written (and fsynced) together
        for i, w in enumerate(workers):
            if w.conn not in ready:
                continue
            try:
                kind, payload = w.conn.recv()
            except (EOFError, OSError):
                if not w.ready:
                    stats["startup_failures"] = stats.get("startup_failures", 0) + 1
                    if stats["startup_failures"] > 3:
                        raise RuntimeError("conformance workers die before they start (exit code "
                                           f"{w.process.exitcode}); run with --workers 0 to see why")
                w.process.join(timeout=1)
                replace(i, w, "crashed", f"worker process died ({signal_text(w.process.exitcode)}) while running "
                                         "this case")
                continue
            if kind == "ready":
                w.ready = True
            elif kind == "result":
                w.finished()
                arrived.append(payload)
                if payload.get("status") == "leak":  # its memory is not given back: a fresh worker
                    replace(i, w, None, "")
        emit(*arrived)
        now = time.monotonic()
        for i, w in enumerate(workers):
            if w.inflight and now - w.started > options.timeout:
                replace(i, w, "timeout", f"no result within {options.timeout:g} s; worker killed")
