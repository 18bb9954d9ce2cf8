"""``torch-dist``: expert parallelism on torch.distributed, R real processes (docs/expert-parallelism.md).

The golden's EP ops run on a *list of simulated ranks*; this backend runs each rank in its own process
(:class:`.pool.RankPool`: ``R`` worker processes joined by one gloo process group over 127.0.0.1; on
Ascend the same code on ``hccl``) and exchanges the copies with ``all_to_all_single``: the counts, then
the (t, k) of each copy, then the fp32 scales (INT8 dispatch), then the int8 payload (or the bf16 rows),
then the receiver's stable sort into the canonical order (:mod:`.exchange`); the experts run on each
rank with torch-cpu's grouped W8A8 ops (:mod:`.experts`), and the combine makes the reverse trip and the
fp32 weighted sum. Rank ``r`` of a call gets element ``r`` of every per-rank list argument and returns
element ``r`` of every per-rank output. The outputs are bit-identical to the golden's (``numerics``:
:data:`w8a8.ASCEND`; the EP fields ``ep_dispatch_quant`` and ``ep_combine_weights`` may be asked for per
call: every value of both is implemented).

The pool is started on first use, kept across calls (a call of ``R`` ranks runs on the first ``R``
processes of a pool of at least ``R``; a larger ``R`` restarts it larger) and closed by :meth:`close`
or at interpreter exit. ``W8A8_TORCH_DIST_TIMEOUT`` bounds every collective (seconds, default 300); any
failure tears the pool down (:mod:`.pool`). Runs only when named (``--backend torch-dist``): starting
processes is not free, and the single-process backends cover the same arithmetic.

This module imports no torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading

from w8a8.numerics import ASCEND, Numerics

from ..base import Backend
from .ops import EpOps

EP_FIELDS = ("ep_dispatch_quant", "ep_combine_weights")
PG_BACKENDS = ("gloo", "hccl")


class TorchDistBackend(EpOps, Backend):
    """Expert parallelism on torch.distributed (see the module docstring).

    ``pg_backend``: the process-group backend, ``"gloo"`` (default; ``$W8A8_TORCH_DIST_BACKEND``) or
    ``"hccl"`` (Ascend: rank r on NPU ``r % device_count``, the exchange on the device through the same
    calls, the experts still torch-cpu's on the host; written, never run: no Ascend device here);
    ``min_world``: processes started at least (``$W8A8_TORCH_DIST_WORLD``, default 4), so that calls of 1,
    2 and 4 ranks share one pool."""

    name = "torch-dist"
    description = ("expert parallelism in R processes: torch.distributed all_to_all_single (gloo on 127.0.0.1; "
                   "hccl on Ascend) of counts, scales and int8/bf16 rows, torch-cpu's grouped W8A8 experts per rank")
    device = "cpu"
    numerics: Numerics = ASCEND
    in_default_runs = False   # R processes per run: `w8a8 conformance --backend torch-dist`

    def __init__(self, pg_backend: str | None = None, min_world: int | None = None):
        pg_backend = pg_backend or os.environ.get("W8A8_TORCH_DIST_BACKEND", "gloo")
        if pg_backend not in PG_BACKENDS:
            raise ValueError(f"TorchDistBackend: argument 'pg_backend' must be one of {PG_BACKENDS}; "
                             f"got {pg_backend!r}")
        raw = os.environ.get("W8A8_TORCH_DIST_WORLD", "4") if min_world is None else min_world
        try:
            min_world = int(raw)
        except (TypeError, ValueError):
            raise ValueError(f"TorchDistBackend: W8A8_TORCH_DIST_WORLD / min_world must be an int >= 1; got {raw!r}") \
                from None
        if min_world < 1:
            raise ValueError(f"TorchDistBackend: W8A8_TORCH_DIST_WORLD / min_world must be an int >= 1; got {raw!r}")
        self.pg_backend, self.min_world = pg_backend, min_world
        self.time_phases = False   # barriers around dispatch / experts / combine in w8a8_moe_ep (benchmarks)
        self.last_phases: list = []   # per rank {"seconds", "wire"} of the latest w8a8_moe_ep run
        self.plant: str | None = None   # tests only: a deliberate bug in w8a8_moe_ep's ranks (tasks.PLANTS)
        self.device = "npu" if pg_backend == "hccl" else "cpu"
        self._pool = None
        self._lock = threading.Lock()

    # -- identity ---------------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        try:
            torch = importlib.import_module("torch")
        except ModuleNotFoundError as exc:
            if exc.name == "torch":
                return False, "torch is not installed (pip install 'w8a8[torch]')"
            return False, f"import torch failed: {type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - e.g. torch_npu autoload without CANN: say exactly why
            return False, f"import torch failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        dist = getattr(torch, "distributed", None)
        if dist is None or not dist.is_available():
            return False, f"torch {torch.__version__} was built without torch.distributed"
        if self.pg_backend == "gloo" and not dist.is_gloo_available():
            return False, f"torch {torch.__version__} has no gloo backend (torch.distributed.is_gloo_available())"
        if self.pg_backend == "hccl" and importlib.util.find_spec("torch_npu") is None:
            return False, "pg_backend 'hccl' needs torch_npu (not installed) and an Ascend device per rank"
        from ..torch_cpu import runtime

        return runtime.availability()

    def accepts_numerics(self, numerics: Numerics) -> bool:
        """Records that differ from the declared one only in the EP fields (every value is implemented)."""
        return set(ASCEND.differences(numerics)) <= set(EP_FIELDS)

    def info(self) -> dict:
        info = super().info()
        info["pg_backend"] = self.pg_backend
        info["pool"] = None if self._pool is None or self._pool.closed else \
            {"world": self._pool.world, "pids": self._pool.pids()}
        return info

    # -- the pool ---------------------------------------------------------------------------------
    def pool(self, ranks: int):
        """The open :class:`.pool.RankPool` with at least ``ranks`` processes (started or grown here)."""
        from .pool import RankPool

        with self._lock:
            if self._pool is not None and (not self._pool.alive() or self._pool.world < ranks):
                self._pool.close()
                self._pool = None
            if self._pool is None:
                world = max(ranks, self.min_world)
                threads = max(1, (os.cpu_count() or 1) // world)
                self._pool = RankPool(world, backend=self.pg_backend, threads=threads)
            return self._pool

    def close(self) -> None:
        """Stop the rank processes (the next call starts them again)."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


__all__ = ["TorchDistBackend"]
