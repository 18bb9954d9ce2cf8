"""A pool of rank processes joined by one torch.distributed process group, kept alive across calls.

:class:`RankPool` starts ``world`` worker processes (:mod:`.worker`), one per rank, each a plain
``python -m backends.torch_dist.worker`` child (``subprocess``, not ``torch.multiprocessing``:
conformance runs backends inside daemonic worker processes, and ``multiprocessing`` refuses daemonic
processes children; a ``subprocess`` child is exempt). Parent and workers talk over a Unix socket
(:mod:`multiprocessing.connection`, an authentication key per pool); the workers talk to each other
only through the process group (gloo over TCP on 127.0.0.1 here; the rendezvous is a ``TCPStore`` that
rank 0 opens on a free port it picks itself, so no port is guessed).

A call (:meth:`RankPool.call`) sends every worker the name of a task function (a module-level function
``fn(ctx, payload)`` of :mod:`.tasks`), the number of ranks ``r`` that take part (``r <= world``: ranks
``[0, r)`` run it on a process group of their own, made once per ``r`` by all workers together) and
each rank's payload; it returns the ranks' results in rank order.

**Nothing is orphaned, nothing hangs.**

* a worker exits when its parent does: a watchdog thread compares ``os.getppid()`` with the pid it
  started under, every 0.5 s, and the parent's socket closing ends its receive loop;
* every collective has the process group's timeout (``W8A8_TORCH_DIST_TIMEOUT`` seconds, default 300);
  the parent waits for results at most that long plus a margin, and checks the processes while it waits;
* any failure (a task raising on one rank, a worker dying, a timeout) tears the whole pool down (the
  other ranks may be blocked in a collective the failed one never joins) and raises in the parent: a
  task's own ``ValueError`` / ``TypeError`` / ``OverflowError`` as it was raised (the golden's message),
  anything else as :class:`PoolError` with the worker's traceback and the tail of its stderr;
* :meth:`close` asks the workers to leave, waits briefly, then kills what is left; pools still open at
  interpreter exit are closed by an ``atexit`` hook.

This module imports no torch (the workers do).
"""

from __future__ import annotations

import atexit
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from multiprocessing.connection import Connection, Listener, wait

DEFAULT_TIMEOUT_S = 300.0
_MARGIN_S = 30.0          # parent's wait beyond the collective timeout (the task's own compute)
_START_TIMEOUT_S = 180.0  # importing torch in R processes on a loaded 2-core machine takes a while


class PoolError(RuntimeError):
    """The pool failed (a worker died, timed out, or raised something that is not a data error)."""


MAX_TIMEOUT_S = 7 * 24 * 3600.0   # a week: longer than any collective should wait


def collective_timeout() -> float:
    """Seconds a collective may wait (``W8A8_TORCH_DIST_TIMEOUT``, default 300)."""
    raw = os.environ.get("W8A8_TORCH_DIST_TIMEOUT", "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"torch-dist: W8A8_TORCH_DIST_TIMEOUT must be a number of seconds; got {raw!r}") from None
    if not 0 < value <= MAX_TIMEOUT_S:   # NaN, Inf and 0 fail here (an infinite timeout overflows gloo's)
        raise ValueError(f"torch-dist: W8A8_TORCH_DIST_TIMEOUT must be a number of seconds in (0, {MAX_TIMEOUT_S:g}]; "
                         f"got {raw!r}")
    return value


def _project_root() -> str:
    """The directory holding the ``backends`` package (put first on the workers' import path)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_OPEN: "weakref.WeakSet[RankPool]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pool in list(_OPEN):
        pool.close()


class RankPool:
    """``world`` rank processes on ``backend`` (``"gloo"``; ``"hccl"`` on Ascend), started at construction.

    ``threads``: torch's intra-op threads per worker. Use as a context manager or call :meth:`close`."""

    def __init__(self, world: int, *, backend: str = "gloo", threads: int = 1, timeout: float | None = None):
        if not isinstance(world, int) or world < 1:
            raise ValueError(f"RankPool: argument 'world' must be an int >= 1; got {world!r}")
        self.world, self.backend, self.threads = world, backend, threads
        self.timeout = collective_timeout() if timeout is None else float(timeout)
        self._lock = threading.Lock()
        self._dir = tempfile.mkdtemp(prefix="w8a8-torch-dist-")
        self._key = secrets.token_bytes(32)
        self._listener = Listener(os.path.join(self._dir, "sock"), family="AF_UNIX", authkey=self._key)
        self._procs: list[subprocess.Popen] = []
        self._conns: list[Connection | None] = [None] * world
        self._logs: list[str] = []
        self.closed = False
        _OPEN.add(self)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # -- start -----------------------------------------------------------------------------------
    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_project_root(), env.get("PYTHONPATH", "")) if p)
        env["W8A8_TORCH_DIST_AUTHKEY"] = self._key.hex()
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")   # loopback: the ranks are all on this host
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(self.threads)
        for rank in range(self.world):
            log = os.path.join(self._dir, f"rank{rank}.log")
            self._logs.append(log)
            with open(log, "wb") as err:
                self._procs.append(subprocess.Popen(
                    [sys.executable, "-m", "backends.torch_dist.worker", self._listener.address, str(rank),
                     str(self.world), self.backend, str(self.timeout), str(self.threads)],
                    stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT, env=env, close_fds=True))
        accepted = threading.Thread(target=self._accept, daemon=True)
        accepted.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while accepted.is_alive():
            accepted.join(0.2)
            self._check_alive("while starting")
            if time.monotonic() > deadline:
                raise PoolError(f"torch-dist: the {self.world} rank processes did not connect within "
                                f"{_START_TIMEOUT_S:.0f} s{self._tails()}")
        if any(c is None for c in self._conns):
            raise PoolError(f"torch-dist: a rank process did not connect{self._tails()}")
        for rank in range(self.world):   # every rank has imported torch: the rendezvous can start
            self._receive(rank, "imported", _START_TIMEOUT_S)
        self._conns[0].send(("open", None))
        port = self._receive(0, "store", _START_TIMEOUT_S)   # rank 0 opened the rendezvous store
        for rank in range(1, self.world):
            self._conns[rank].send(("store", port))
        for rank in range(self.world):
            self._receive(rank, "ready", _START_TIMEOUT_S + self.timeout)

    def _accept(self) -> None:
        for _ in range(self.world):
            try:
                conn = self._listener.accept()
            except OSError:   # closed while starting
                return
            rank = conn.recv()
            self._conns[rank] = conn

    # -- calls -----------------------------------------------------------------------------------
    def call(self, task: str, payloads: list, *, ranks: int | None = None) -> list:
        """Run ``tasks.<task>(ctx, payload)`` on ranks ``[0, ranks)`` (default: all), ``payloads[r]`` on
        rank ``r``; returns their results in rank order (see the module docstring for failures)."""
        ranks = self.world if ranks is None else ranks
        if not 1 <= ranks <= self.world:
            raise ValueError(f"RankPool.call: argument 'ranks' must be in [1, {self.world}]; got {ranks!r}")
        if len(payloads) != ranks:
            raise ValueError(f"RankPool.call: {ranks} payloads expected (one per rank); got {len(payloads)}")
        with self._lock:
            if self.closed:
                raise PoolError("torch-dist: the rank pool is closed")
            try:
                for rank in range(self.world):
                    self._conns[rank].send(("call", task, ranks, payloads[rank] if rank < ranks else None))
                return self._gather(self.timeout + _MARGIN_S)[:ranks]
            except BaseException:
                self.close(kill=True)   # ranks may be blocked in a collective the failed one never joins
                raise

    def _gather(self, timeout: float) -> list:
        """Every rank's ``("result", value)``, waiting on all of them at once: the first failure reported
        (the lowest rank's among those that arrive together) is raised at once, without waiting for the
        ranks it leaves blocked in a collective."""
        rank_of = {id(c): r for r, c in enumerate(self._conns)}
        results: list = [None] * self.world
        pending = set(range(self.world))
        deadline = time.monotonic() + timeout
        while pending:
            ready = sorted(wait([self._conns[r] for r in pending], timeout=0.5), key=lambda c: rank_of[id(c)])
            failures = []
            for conn in ready:
                rank = rank_of[id(conn)]
                try:
                    tag, value = conn.recv()
                except (EOFError, OSError):
                    self._check_alive(f"waiting for rank {rank}")
                    raise PoolError(f"torch-dist: rank {rank} closed its connection{self._tails()}") from None
                if tag == "result":
                    results[rank] = value
                    pending.discard(rank)
                elif tag == "raise":
                    failures.append(value)
                else:
                    failures.append(PoolError(f"torch-dist: rank {rank} failed:\n{value}{self._tails()}"
                                              if tag == "error" else f"torch-dist: rank {rank} sent {tag!r}"))
            if failures:
                raise failures[0]
            self._check_alive("waiting for results")
            if time.monotonic() > deadline:
                raise PoolError(f"torch-dist: ranks {sorted(pending)} gave no result within {timeout:.0f} s"
                                f"{self._tails()}")
        return results

    def _receive(self, rank: int, kind: str, timeout: float):
        """The next message of ``rank``, which must be ``(kind, value)``; its value. Raises what a worker
        reports (module docstring), PoolError on death or timeout."""
        conn = self._conns[rank]
        deadline = time.monotonic() + timeout
        while True:
            if wait([conn], timeout=0.5):
                try:
                    tag, value = conn.recv()
                except (EOFError, OSError):
                    self._check_alive(f"waiting for rank {rank}")
                    raise PoolError(f"torch-dist: rank {rank} closed its connection{self._tails()}") from None
                if tag == kind:
                    return value
                if tag == "raise":
                    raise value
                if tag == "error":
                    raise PoolError(f"torch-dist: rank {rank} failed:\n{value}{self._tails()}")
                raise PoolError(f"torch-dist: rank {rank} sent {tag!r}, expected {kind!r}")
            self._check_alive(f"waiting for rank {rank}")
            if time.monotonic() > deadline:
                raise PoolError(f"torch-dist: rank {rank} gave no {kind!r} within {timeout:.0f} s{self._tails()}")

    def _check_alive(self, when: str) -> None:
        dead = [(r, p.returncode) for r, p in enumerate(self._procs) if p.poll() is not None]
        if dead:
            raise PoolError(f"torch-dist: rank process(es) exited {when}: "
                            + ", ".join(f"rank {r} (exit code {code})" for r, code in dead) + self._tails())

    def _tails(self, limit: int = 1500) -> str:
        parts = []
        for rank, log in enumerate(self._logs):
            try:
                with open(log, "rb") as f:
                    text = f.read().decode(errors="replace").strip()
            except OSError:
                continue
            if text:
                parts.append(f"\n--- rank {rank} output (tail) ---\n{text[-limit:]}")
        return "".join(parts)

    # -- shutdown --------------------------------------------------------------------------------
    def alive(self) -> bool:
        return not self.closed and all(p.poll() is None for p in self._procs)

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def close(self, kill: bool = False) -> None:
        """Ask the workers to leave, wait up to 5 s, kill what is left (each by its pid), remove the socket.
        ``kill``: kill them at once (after a failure: they may be blocked in a collective)."""
        if self.closed:
            return
        self.closed = True
        _OPEN.discard(self)
        for conn, proc in zip(self._conns, self._procs):
            if kill:
                proc.kill()
            elif conn is not None:
                try:
                    conn.send(("exit", None))
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + 5.0
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for conn in self._conns:
            if conn is not None:
                conn.close()
        try:
            self._listener.close()
        except OSError:
            pass
        for name in os.listdir(self._dir) if os.path.isdir(self._dir) else ():
            try:
                os.remove(os.path.join(self._dir, name))
            except OSError:
                pass
        try:
            os.rmdir(self._dir)
        except OSError:
            pass

    def __enter__(self) -> "RankPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<RankPool world={self.world} backend={self.backend} {state}>"


__all__ = ["RankPool", "PoolError", "collective_timeout", "DEFAULT_TIMEOUT_S"]
