"""Processes that cannot outlive their parent: the one mechanism every worker of the project uses.

* :func:`pdeathsig` — ask Linux to ``SIGKILL`` this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``),
  even while it is stuck in a call that never returns; also usable as a ``subprocess`` ``preexec_fn``.
* :func:`watch_parent` — a daemon thread that polls the parent's pid and ends the process when it changes
  (the process was re-parented: its parent is gone), after an optional clean-up; the fallback where
  ``prctl`` does not exist, and the only guard of a worker that must clean up on its way out.
* :func:`die_with_parent` — both, called first thing in a worker with the pid its parent passed in.

Used by the conformance, bench and peers workers (:mod:`conformance.processes`) and by the rank
processes of the torch.distributed backend (:mod:`backends.torch_dist.worker`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5
ORPHAN_EXIT_CODE = 70


def pdeathsig() -> bool:
    """Ask Linux to SIGKILL this process when its parent thread exits; False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(parent_pid: int, on_orphan=None, exit_code: int = ORPHAN_EXIT_CODE) -> None:
    """Start a daemon thread that ends this process (``os._exit(exit_code)``, after ``on_orphan()``)
    as soon as its parent pid is no longer ``parent_pid``."""
    def watch():
        while True:
            if os.getppid() != parent_pid:
                if on_orphan is not None:
                    on_orphan()
                os._exit(exit_code)
            time.sleep(WATCH_INTERVAL_S)

    threading.Thread(target=watch, name="w8a8-parent-watch", daemon=True).start()


def die_with_parent(parent_pid: int) -> None:
    """Make this process end when the process ``parent_pid`` (its parent) ends.

    Call it at the very start of a worker with the pid the parent passed in (``os.getpid()`` in the
    parent): if the parent already died before this ran, the worker exits at once.
    """
    pdeathsig()
    if os.getppid() != parent_pid:  # died before prctl took effect
        os._exit(ORPHAN_EXIT_CODE)
    watch_parent(parent_pid)
