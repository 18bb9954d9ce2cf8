"""Run benchmark cases per backend, each backend in its own process, then verify every result.

One backend at a time, in a fresh process that dies with its parent, every case under a timeout (a
hanging call is recorded ``timeout``, a dying one ``crashed`` with its op and signal, and the rest
goes on in a fresh process): thread pools of different libraries (OpenBLAS for the
golden, OpenMP for torch) never spin against each other, and the process's memory baseline is its
own. Every case's output is saved; afterwards the parent compares each backend's output with the
golden's on the *same* inputs (the numpy backend's saved output, or the golden computed in the
parent) under the tolerance table. A time is reported only for verified cases: a fast wrong kernel
is "unverified", not fast.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import traceback
from pathlib import Path

import numpy as np

from conformance.processes import signal_text


def case_seed(name: str) -> int:
    return int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)


def _save(path: Path, outputs: dict) -> None:
    arrays = {}
    for k, v in outputs.items():
        v = np.asarray(v)
        arrays[k] = v.view(f"u{v.dtype.itemsize}") if v.dtype.kind == "V" else v
        arrays[k + "__dtype"] = np.array(str(v.dtype))
    np.savez(path, **arrays)


def load_outputs(path: Path) -> dict:
    from w8a8 import dtypes as _dt

    out = {}
    with np.load(path) as z:
        for k in z.files:
            if k.endswith("__dtype"):
                continue
            dt = np.dtype(_dt.resolve(str(z[k + "__dtype"])))
            out[k] = z[k].view(dt) if dt.kind == "V" else z[k]
    return out


def _worker(conn, backend: str, registrations: dict, cases: list, tmp: str, timing: dict, parent_pid: int):
    from conformance.processes import die_with_parent

    die_with_parent(parent_pid)
    import backends
    from backends.base import Unsupported

    from conformance.registry import get
    from .timing import time_call

    for name, target in registrations.items():
        backends.register(name, target)
    b = backends.get(backend)
    for case in cases:  # BenchCase objects: plain data and a module-level builder, pickled whole
        cname = case.name
        conn.send(started(case))
        rec = {"backend": backend, "case": cname, "op": case.op, "label": case.label, "params": case.params,
               "work": case.work, "unit": case.unit, "tags": list(case.tags),
               "compute": case.compute}
        try:
            if case.op not in b.ops():
                rec.update(status="unsupported", note=f"{backend} does not implement {case.op}")
                conn.send(rec)
                continue
            args, kwargs = case.build(np.random.default_rng(case_seed(cname)))
            prepared = b.prepare(case.op, *args, **kwargs)
            t = time_call(prepared, **timing)
            path = Path(tmp) / f"{cname.replace('/', '_')}__{backend}.npz"
            _save(path, get(case.op).as_outputs(t.pop("result")))
            rec.update(status="ok", output=str(path), **t)
            if prepared.notes.get("gemm"):
                rec["gemm"] = prepared.notes["gemm"]   # the GEMM path the call took (roofline: its unit)
        except Unsupported as exc:
            rec.update(status="unsupported", note=str(exc))
        except Exception as exc:  # noqa: BLE001 - a backend failure is a result
            rec.update(status="error", note=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-3000:])
        conn.send(rec)
    conn.send(None)


DEFAULT_TIMEOUT_S = 600.0
"""Seconds one bench case (its warm-up and timed rounds) may take before its process is killed."""
STARTUP_TIMEOUT_S = 300.0
"""Seconds a bench process may take to start its next case (imports: torch takes seconds on a busy machine)."""


def started(case) -> tuple[str, dict]:
    """The message a bench worker sends before it runs ``case``: what a crash or timeout is recorded as."""
    return ("start", {"case": case.name, "op": case.op, "label": case.label})


def start(ctx, target, *args):
    """A spawned worker running ``target(conn, *args, parent_pid)`` (it dies with this process); returns
    ``(process, conn)``."""
    parent, child = ctx.Pipe()
    p = ctx.Process(target=target, args=(child, *args, os.getpid()), daemon=True)
    p.start()
    child.close()
    return p, parent


def run(backend_names: list[str], cases: list, *, full: bool = False, registrations: dict | None = None,
        timing: dict | None = None, on_record=None, workdir: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S) -> list[dict]:
    """Time ``cases`` on each backend (one process per backend) and verify them; return records.

    Each case runs under ``timeout`` seconds: a case that overruns is recorded ``timeout`` and one whose
    process dies ``crashed`` (with its op and the signal), and the backend's remaining cases go on in a
    fresh process. ``full`` is accepted for callers that still pass it: the cases travel whole, so the
    worker no longer rebuilds them from the declarations."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    tmp = workdir or tempfile.mkdtemp(prefix="w8a8-bench-")
    records: list[dict] = []
    p = None
    try:
        for backend in backend_names:
            todo = list(cases)
            while todo:
                p, conn = start(ctx, _worker, backend, registrations or {}, todo, tmp, timing or {})
                got, stopped = collect(conn, p, {"backend": backend, "case": "?", "op": "?"}, on_record,
                                       timeout=timeout)
                records += got
                if stopped is None:
                    break
                names = [c.name for c in todo]
                todo = todo[names.index(stopped["case"]) + 1:]
        verify(records, cases)
    finally:  # Ctrl-C or an error included: no worker left writing, no output folder left behind
        if p is not None and p.is_alive():
            p.kill()
            p.join(timeout=10)
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            for r in records:
                if r.get("output"):
                    Path(r["output"]).unlink(missing_ok=True)
    return records


def collect(conn, process, base: dict, on_record=None, *, timeout: float | None = None
            ) -> tuple[list[dict], dict | None]:
    """The records a worker ``process`` sends on ``conn`` until its ``None``, and the case it stopped in.

    Before each case the worker sends :func:`started`; a case with no record within ``timeout`` seconds
    (a process that starts no case within :data:`STARTUP_TIMEOUT_S`) has its process killed and a
    ``timeout`` record, a process that dies a ``crashed`` record naming the
    op, the case and the signal. Returns ``(records, stopped)``: ``stopped`` is the started case that
    did not finish (None when the worker finished, or died before any case)."""
    records: list[dict] = []
    current: dict | None = None

    def add(rec: dict) -> None:
        records.append(rec)
        if on_record:
            on_record(rec)

    while True:
        # a running case has ``timeout``; between cases (the process starting, importing) a generous bound
        limit = timeout if current is not None or timeout is None else max(timeout, STARTUP_TIMEOUT_S)
        if not conn.poll(limit):
            process.kill()
            process.join(timeout=10)
            what = "no result" if current is not None else "no case started"
            add(dict(base, **(current or {}), status="timeout",
                     note=f"{what} within {limit:g} s; the benchmark process was killed"))
            return records, current
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            process.join(timeout=10)
            where = f"in {current['op']} ({current['case']})" if current else "before its first case"
            add(dict(base, **(current or {}), status="crashed",
                     note=f"the benchmark process died {where}: {signal_text(process.exitcode)}"))
            return records, current
        if msg is None:
            break
        if isinstance(msg, tuple) and msg[0] == "start":
            current = msg[1]
            continue
        current = None
        add(msg)
    process.join(timeout=10)
    return records, None


def verify(records: list[dict], cases: list, table=None) -> None:
    """Mark each timed record ``verified`` (its output agrees with the golden's on the same inputs)."""
    from backends.numpy_backend import NumpyBackend

    from conformance.compare import FAIL, compare
    from conformance.registry import get
    from conformance.tolerances import ToleranceTable

    table = table or ToleranceTable.packaged()
    by_case = {c.name: c for c in cases}
    reference: dict[str, dict] = {}
    for r in records:
        if r.get("backend") == "numpy" and r.get("status") == "ok":
            reference[r["case"]] = load_outputs(Path(r["output"]))
    for r in records:
        if r.get("status") != "ok":
            r["verified"] = False
            continue
        case = by_case[r["case"]]
        if r["case"] not in reference:
            args, kwargs = case.build(np.random.default_rng(case_seed(case.name)))
            reference[r["case"]] = get(case.op).as_outputs(NumpyBackend().call(case.op, *args, **kwargs))
        ref = reference[r["case"]]
        got = load_outputs(Path(r["output"]))
        spec = get(case.op)
        notes, ok = [], True
        for out in spec.outputs:
            tol = table.lookup(r["backend"], case.op, out.name, str(ref[out.name].dtype))
            c = compare(out.name, out.kind, ref[out.name], got[out.name], tolerance=tol)
            if c.verdict == FAIL:
                ok = False
                notes.append(f"{out.name}: {c.note}")
        r["verified"] = ok
        if notes:
            r["verify_note"] = "; ".join(notes)
        try:
            os.unlink(r["output"])
        except OSError:
            pass
