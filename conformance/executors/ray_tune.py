"""``w8a8 tune --executor ray``: the tuning sweep's rounds as Ray tasks.

One task per (op, seed): :func:`conformance.tuning.sweep` of ``samples`` draws of that op on both backends, on a
node that offers both; its sample sets come back as JSON (:meth:`~conformance.tuning.OutputStats.as_json`) and
the driver merges them (:func:`~conformance.tuning.merge_stats`). A lost task is sent again (Ray's own task
retry, ``MAX_RETRIES``); the seeds of the merged set show which draws it holds.
"""

from __future__ import annotations

MAX_RETRIES = 2


def _sweep_task(a_name: str, b_name: str, b_numerics: str | None, op: str, samples: int, seed: int,
                registrations: dict | None = None) -> list[dict]:
    import backends
    from conformance.tuning import sweep

    for name, target in (registrations or {}).items():  # 'module:Class' backends, by the driver's names
        backends.register(name, target)
    a, b = backends.get(a_name), backends.get(b_name)
    if b_numerics is not None:  # the golden under A's declared record (what conformance judges A against)
        from backends.numpy_backend import NumpyBackend

        b = NumpyBackend(a.numerics)
    return [s.as_json() for s in sweep(a, b, [op], samples, seed).values()]


def sweep_rounds(executor, a, b, ops: list[str], samples: int, seeds: list[int]) -> dict:
    """Every (op, seed) sweep on the cluster of ``executor`` (a started RayExecutor), merged."""
    import ray

    from conformance.tuning import OutputStats, merge_stats

    placed = [n for n in executor.nodes.values() if n.runs(a.name) and n.runs(b.name)]
    if not placed:
        raise RuntimeError(f"no node of the Ray cluster offers both {a.name} and {b.name}")
    remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_sweep_task)
    b_numerics = b.numerics.name if b.name == "numpy" else None
    refs = [remote.remote(a.name, b.name, b_numerics, op, samples, seed, executor.registrations)
            for seed in seeds for op in ops]
    stats: dict = {}
    for got in ray.get(refs):
        part = {}
        for d in got:
            s = OutputStats.from_json(d)
            part[(s.op, s.output, s.dtype)] = s
        merge_stats(stats, part)
    return stats
