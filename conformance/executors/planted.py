"""A backend that kills the Ray worker running it: proof that the Ray executor loses no case and writes none
twice when a worker (or its node) dies mid-batch.

``KillsRayWorkerBackend`` computes ``dynamic_quant`` correctly, except on inputs of exactly 3 or 4 rows:
there its case worker process sends ``SIGKILL`` to its parent — the Ray worker running the batch — so that the
whole batch is lost mid-way. On 3 rows, every time. On 4 rows, once: with the environment variable
``W8A8_PLANTED_KILL_MARKER`` set to a path, only while that file does not exist (it creates the file first,
so the retried batch passes); without the variable, every time. It kills only a parent whose command line is a Ray worker's (never a local runner).
Use it as ``--backend conformance.executors.planted:KillsRayWorkerBackend`` under ``--executor ray``.
"""

from __future__ import annotations

import os
import signal

import numpy as np

from conformance.planted import _PlantedBase

MARKER_ENV = "W8A8_PLANTED_KILL_MARKER"


def _parent_is_ray_worker() -> bool:
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return b"ray" in f.read()
    except OSError:
        return False


class KillsRayWorkerBackend(_PlantedBase):
    name = "planted-kills-ray-worker"
    bug = "SIGKILLs the Ray worker running it on 3- and 4-row dynamic_quant inputs"

    def _dynamic_quant(self, a):
        rows = int(np.prod(a.x.shape[:-1]))
        if rows in (3, 4) and _parent_is_ray_worker():
            marker = os.environ.get(MARKER_ENV) if rows == 4 else None
            if not marker or not os.path.exists(marker):
                if marker:
                    open(marker, "w").close()
                os.kill(os.getppid(), signal.SIGKILL)
                import time

                time.sleep(30)  # the Ray worker is gone; this process follows it (parent death)
        return super()._dynamic_quant(a)


ONLY_HERE_ENV = "W8A8_PLANTED_ONLY_HERE"
ON_NODES_ENV = "W8A8_PLANTED_ON_NODES"


class OnlyWhereMarkedBackend(_PlantedBase):
    """A correct ``dynamic_quant`` that is available only on a machine whose environment sets
    ``W8A8_PLANTED_ONLY_HERE`` (a stand-in for a backend a node lacks: no onnxruntime there, no NPU)."""

    name = "planted-only-where-marked"
    bug = "none; available only where W8A8_PLANTED_ONLY_HERE is set"
    env = ONLY_HERE_ENV

    def available(self):
        if os.environ.get(self.env):
            return True, ""
        return False, f"{self.env} is not set on this machine"


class OnlyOnMarkedNodesBackend(OnlyWhereMarkedBackend):
    """The same, marked by ``W8A8_PLANTED_ON_NODES``: a stand-in for a backend only the cluster's nodes have (an
    NPU node's ``torch-npu``), absent on the driver that plans the run."""

    name = "planted-only-on-marked-nodes"
    bug = "none; available only where W8A8_PLANTED_ON_NODES is set"
    env = ON_NODES_ENV
