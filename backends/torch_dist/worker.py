"""One rank process of :class:`backends.torch_dist.pool.RankPool` (``python -m backends.torch_dist.worker``).

Arguments: the parent's socket address, this rank, the world size, the process-group backend
(``gloo`` / ``hccl``), the collective timeout in seconds, torch's intra-op thread count. The
authentication key comes in ``W8A8_TORCH_DIST_AUTHKEY`` (hex).

Sequence: connect to the parent and say which rank this is; import torch and say so; when every rank
has (the parent's ``open``), rank 0 opens the rendezvous ``TCPStore`` on a free port of 127.0.0.1 and
reports the port, the others receive it (a rank slow to import torch never eats into the timeout); ``init_process_group`` on
that store with the timeout; report ``ready``; then serve ``("call", task, ranks, payload)`` messages
until ``("exit", None)`` or the parent's socket closes, then leaves at once (``os._exit``). A call
runs ``tasks.<task>(ctx, payload)`` on ranks ``[0, ranks)`` with the process group of those ranks
(:class:`Context`), and answers
``("result", value)``, ``("raise", exception)`` for a ``ValueError`` / ``TypeError`` / ``OverflowError``
(re-raised by the parent as is), or ``("error", traceback)``. A watchdog thread ends the process when the
parent is gone (its pid changes), removing the rank's log, the socket and the pool's folder.
"""

from __future__ import annotations

import os
import sys
import traceback
from datetime import timedelta
from multiprocessing.connection import Client

from .. import lifetime

_RERAISED = (ValueError, TypeError, OverflowError)
_STORE_TIMEOUT_S = 60.0   # the rendezvous store's own timeout (at least): the ranks reach it within seconds


def _orphaned(address: str, rank: int) -> None:
    """The parent is gone: remove what it would have removed (this rank's log, the socket and, for the last
    rank to leave, the pool's folder: :class:`.pool.RankPool`)."""
    folder = os.path.dirname(address)
    for path in (os.path.join(folder, f"rank{rank}.log"), address):
        try:
            os.remove(path)
        except OSError:
            pass
    try:
        os.rmdir(folder)
    except OSError:
        pass


class Context:
    """What a task function gets besides its payload: this rank, the ranks taking part, their process
    group (``group``; the default group when every rank takes part), the device, and ``cache``, a dict
    that lives as long as the process (loaded weights)."""

    def __init__(self, rank: int, world: int, backend: str):
        self.rank, self.world, self.backend = rank, world, backend
        self.ranks = world
        self.group = None
        self.device = "npu" if backend == "hccl" else "cpu"
        self.cache: dict = {}
        self._groups: dict[int, object] = {}

    def use(self, ranks: int) -> None:
        """Take part in a call of ``ranks`` ranks: its group, made once by every process (new_group is
        collective over the default group, so every worker calls it, in the same order)."""
        import torch.distributed as dist

        if ranks not in self._groups:
            self._groups[ranks] = None if ranks == self.world else dist.new_group(list(range(ranks)))
        self.ranks, self.group = ranks, self._groups[ranks]


def main(argv: list[str]) -> int:
    address, rank, world, backend, timeout, threads = argv
    rank, world, timeout, threads = int(rank), int(world), float(timeout), int(threads)
    # no kernel parent-death signal here: an orphaned rank must first remove its log, socket and folder
    lifetime.watch_parent(os.getppid(), on_orphan=lambda: _orphaned(address, rank), exit_code=3)
    conn = Client(address, family="AF_UNIX", authkey=bytes.fromhex(os.environ["W8A8_TORCH_DIST_AUTHKEY"]))
    conn.send(rank)
    import torch
    import torch.distributed as dist

    from . import tasks

    torch.set_num_threads(threads)
    if backend == "hccl":   # Ascend: one NPU per rank (never run here: no device)
        import torch_npu  # noqa: F401

        torch.npu.set_device(rank % torch.npu.device_count())
    conn.send(("imported", None))   # the rendezvous starts once every rank is this far (torch imported)
    store_timeout = timedelta(seconds=max(timeout, _STORE_TIMEOUT_S))
    if rank == 0:
        if conn.recv()[0] != "open":
            return 2
        store = dist.TCPStore("127.0.0.1", 0, world, is_master=True, timeout=store_timeout, wait_for_workers=False)
        conn.send(("store", store.port))
    else:
        tag, port = conn.recv()
        if tag != "store":
            return 2
        store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=store_timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
    ctx = Context(rank, world, backend)
    conn.send(("ready", os.getpid()))
    try:
        while True:
            try:
                tag, *msg = conn.recv()
            except (EOFError, OSError):   # the parent's end closed without "exit": it is gone
                _orphaned(address, rank)
                break
            if tag == "exit":
                break
            task, ranks, payload = msg
            try:
                ctx.use(ranks)
                value = getattr(tasks, task)(ctx, payload) if rank < ranks else None
                conn.send(("result", value))
            except _RERAISED as exc:
                conn.send(("raise", exc))
            except Exception:  # noqa: BLE001 - reported to the parent, which tears the pool down
                conn.send(("error", traceback.format_exc()))
    except (BrokenPipeError, OSError):
        pass
    return 0


if __name__ == "__main__":
    # os._exit: no interpreter teardown (unloading torch takes seconds on a busy machine, and a process
    # group's destructor may wait for peers that are leaving too); nothing here needs flushing but stdio.
    try:
        code = main(sys.argv[1:])
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
