"""Execution of an expert-parallel :class:`~backends.torch_npu.plan.EpPlan`: one process per rank, one HCCL group.

Each rank runs its own :class:`~backends.torch_npu.plan.Plan` exactly as a single-device plan runs
(:func:`run_rank`: transfer, load steps, barrier, the timed calls, barrier, copy back), with a
:class:`~backends.torch_npu.execution.Runtime` whose ``groups["ep"]`` is the HCCL communicator name the MC2
ops take as ``group_ep`` (op-plugin docs example; vllm-ascend ``TokenDispatcherWithMC2.__init__``)::

    torch.npu.set_device(device)
    dist.init_process_group("hccl", init_method="tcp://127.0.0.1:<port>", rank=q, world_size=R)
    name = dist.distributed_c10d._get_default_group()._get_backend(torch.device("npu")).get_hccl_comm_name(q)

A launcher runs the R rank plans and returns their results in rank order:

* :class:`HcclLauncher` — R processes (``torch.multiprocessing``, spawn), rank q on NPU ``devices[q]``;
  needs R visible NPUs of one A3 super-node (the MC2 ops' EP domain) and imports torch / torch_npu only
  in the rank processes. Written against torch_npu's documented API; **not run on a 910C from this
  repository** (README, "What is verified where").
* :class:`ThreadLauncher` — the R ranks as threads of this process, each with the runtime a factory
  gives (the tests: a recording stand-in whose MC2 ops meet at a barrier and compute with the golden).

Nothing here imports torch or torch_npu at module import.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from .. import torch_common
from ..base import Unsupported
from . import execution
from .execution import Runtime
from .plan import Plan


def run_rank(rt: Runtime, plan: Plan):
    """One rank: inputs to the device, load steps (once, then a barrier), the timed calls, a barrier, the
    copy back and the plan's host steps. Returns the rank's results in the golden's per-rank form."""
    env = {name: torch_common.to_torch(inp.array, device=rt.device) for name, inp in plan.inputs.items()}
    env = execution.load(rt, plan, env)
    outputs = execution.run(rt, plan, env)
    rt.sync()
    return execution.read_back(rt, plan, outputs)


class ThreadLauncher:
    """The ranks as threads of this process; ``runtime_of(rank, world_size)`` gives each its runtime. After
    every thread has finished, the lowest rank's exception is raised (one other than a broken barrier, the
    consequence of another rank's failure, when there is one)."""

    def __init__(self, runtime_of: Callable[[int, int], Runtime]):
        self.runtime_of = runtime_of

    def run(self, plans: list[Plan]) -> list:
        results: list = [None] * len(plans)
        errors: list = []

        def one(q: int):
            try:
                results[q] = run_rank(self.runtime_of(q, len(plans)), plans[q])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                errors.append((q, exc))

        threads = [threading.Thread(target=one, args=(q,), name=f"ep-rank-{q}") for q in range(len(plans))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            # a rank that failed breaks the others' barriers: its own error is the one to see
            first = [e for e in errors if not isinstance(e[1], threading.BrokenBarrierError)] or errors
            raise min(first, key=lambda e: e[0])[1]
        return results


def free_port() -> int:
    """A free TCP port on the loopback interface (the rendezvous of the rank processes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hccl_rank(rank: int, plans: list[Plan], devices: list[int], port: int, queue) -> None:
    """The body of rank process ``rank`` (module docstring): join the HCCL group, run the rank's plan, put
    ``(rank, results, None)`` or ``(rank, None, error text)`` on ``queue``."""
    try:
        import torch
        import torch.distributed as dist
        import torch_npu

        device = int(devices[rank])
        torch.npu.set_device(device)
        dist.init_process_group("hccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=len(plans))
        try:
            pg = dist.distributed_c10d._get_default_group()
            name = pg._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
            rt = Runtime(torch, torch_npu, f"npu:{device}", torch.npu.synchronize, {"ep": name})
            results = run_rank(rt, plans[rank])
            dist.barrier()
        finally:
            dist.destroy_process_group()
        queue.put((rank, results, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put((rank, None, f"{type(exc).__name__}: {exc}"))


class HcclLauncher:
    """R rank processes over HCCL (module docstring). ``devices``: the NPU of each rank (default
    ``0 .. R-1``); ``device_count``: the NPUs visible (checked before anything starts)."""

    def __init__(self, device_count: int, devices: list[int] | None = None):
        self.device_count = int(device_count)
        self.devices = devices

    def run(self, plans: list[Plan]) -> list:
        r = len(plans)
        devices = list(self.devices) if self.devices is not None else list(range(r))
        if len(devices) != r or r > self.device_count:
            raise Unsupported(f"torch-npu: an EP group of {r} ranks needs {r} NPUs (one process each); "
                              f"{self.device_count} visible, devices {devices}")
        import torch.multiprocessing as mp

        queue = mp.get_context("spawn").SimpleQueue()
        procs = mp.start_processes(hccl_rank, args=(plans, devices, free_port(), queue), nprocs=r, join=False,
                                   start_method="spawn")
        got: dict = {}
        done = False
        while len(got) < r:
            # read while the ranks run: a result larger than the pipe's buffer blocks its sender until read
            while not queue.empty() and len(got) < r:
                rank, value, error = queue.get()
                got[rank] = (value, error)
            if done:
                break
            done = procs.join(timeout=0.5)          # raises if a rank process died without reporting
        while not done:
            done = procs.join(timeout=0.5)
        missing = sorted(set(range(r)) - set(got))
        errors = [f"rank {q}: {got[q][1]}" for q in sorted(got) if got[q][1] is not None]
        errors += [f"rank {q}: exited without a result" for q in missing]
        if errors:
            raise RuntimeError("torch-npu EP execution failed: " + "; ".join(errors))
        return [got[q][0] for q in range(r)]
