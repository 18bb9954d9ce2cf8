"""Where a run's cases execute.

The runner (:func:`conformance.runner.run`) owns the plan, the results file, ``--resume`` and the counts;
an *executor* only runs cases and hands back their records. The seam is one method::

    executor.run(todo, opts, options, emit, stats)

``todo``: the :class:`~conformance.runner.Task` objects still to run (a deque, in plan order); ``opts``: the
per-case options the workers read (tolerance, table path, attribution, leak budget); ``options``: the
:class:`~conformance.runner.RunOptions`; ``emit(*records)``: appends records to the results file (call it
once per record, never twice for one case); ``stats``: the run's counts, which an executor may add to.

* ``local`` (no executor object: ``executor=None``) — this machine's worker pool
  (:class:`~conformance.runner.WorkerPool`).
* ``ray`` — :class:`conformance.executors.ray_executor.RayExecutor`: batches of cases as Ray tasks over a
  cluster, each batch run by that node's own worker pool (the same per-case isolation).
"""

from __future__ import annotations

EXECUTORS = ("local", "ray")


def make(name: str, **kwargs):
    """The executor called ``name`` (None for ``local``: the runner's own pool). ``kwargs`` go to its
    constructor (ray: ``address``, ``batch_size``, ``num_cpus``)."""
    if name == "local":
        return None
    if name == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(**kwargs)
    raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {name!r}")
