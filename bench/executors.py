"""Throughput of the conformance executors, side by side in one run: the local worker pool and the Ray executor
on the same plan, as cases per second per core, and Ray's per-task overhead (what sets the batch size).

    python -m bench.executors --backend torchao --op mx_matmul --profile thorough --out bench-executors.json

Each executor runs the plan twice into a scratch results file; the second (warm: workers started, torch
imported) is the figure. ``cores`` = the workers / Ray CPUs given to the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _timed(tasks, options, executor=None) -> float:
    from conformance.results import ResultsFile
    from conformance.runner import run

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run(tasks, ResultsFile(Path(tmp) / "r.jsonl"), options, executor=executor)
        return time.perf_counter() - t0


def main(argv=None) -> int:
    from conformance.executors.ray_executor import RayExecutor
    from conformance.runner import RunOptions, WorkerPool, plan
    from conformance.tolerances import packaged_path

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="torchao")
    p.add_argument("--op", action="append")
    p.add_argument("--profile", default="ci")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--out", default="bench-executors.json")
    a = p.parse_args(argv)
    tasks, _ = plan([a.backend], a.op, profile=a.profile)
    options = RunOptions(workers=a.cores, tolerances=str(packaged_path()))
    from collections import deque

    from conformance.runner import run

    with WorkerPool(options) as pool:
        def local():
            from conformance.results import ResultsFile

            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                run(tasks, ResultsFile(Path(tmp) / "r.jsonl"), options, pool=pool)
                return time.perf_counter() - t0
        local()
        local_s = local()
    with RayExecutor(batch_size=a.batch_size, num_cpus=a.cores).start([a.backend]) as ray_ex:
        _timed(tasks, options, ray_ex)
        ray_s = _timed(tasks, options, ray_ex)
        overhead = ray_ex.task_overhead(200)
    n = len(tasks)
    result = {"cpu": _cpu_name(), "cores": a.cores, "os_cpus": os.cpu_count(), "cases": n, "backend": a.backend,
              "ops": a.op, "profile": a.profile, "batch_size": a.batch_size,
              "local": {"seconds": round(local_s, 3), "cases_per_s_per_core": round(n / local_s / a.cores, 2)},
              "ray": {"seconds": round(ray_s, 3), "cases_per_s_per_core": round(n / ray_s / a.cores, 2)},
              "ray_task_overhead_ms": round(overhead * 1e3, 3),
              "ray_overhead_share_at_batch": round(overhead / (overhead + a.batch_size * local_s * a.cores / n), 4)}
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
