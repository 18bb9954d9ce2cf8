"""Worker processes that cannot outlive their parent, and what they measure of themselves.

* :func:`die_with_parent` (:mod:`backends.lifetime`, the mechanism every worker of the project shares) —
  called first thing in every worker (conformance, bench, peers): on Linux the kernel sends the worker
  ``SIGKILL`` when its parent dies (``prctl(PR_SET_PDEATHSIG)``), even while the worker is stuck in a
  call that never returns; everywhere, a daemon thread polls the parent's pid and exits the worker when
  it changes (the fallback where ``prctl`` does not exist).
  A ``kill -9`` of ``w8a8 conformance`` or ``w8a8 bench`` therefore leaves no process behind
  (:func:`pdeathsig` alone is the ``preexec_fn`` of the bench's probe binaries).
* :func:`rss_bytes` and :func:`release_free_memory` — the worker's resident memory and what it really
  holds, for the per-case memory watch of the runner.
"""

from __future__ import annotations

import os
import signal
import sys

from backends.lifetime import die_with_parent, pdeathsig  # noqa: F401 - re-exported for the workers


def rss_bytes() -> int:
    """The resident set size of this process in bytes (Linux ``/proc/self/statm``; elsewhere the peak
    RSS from ``getrusage``, which only grows — a coarser but still one-sided watch)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def release_free_memory() -> None:
    """Collect garbage and hand the allocator's free heap back to the system (glibc ``malloc_trim``), so
    that resident memory counts what is still held, not what a large case left free in the heap."""
    import gc

    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):
            pass


def signal_text(exitcode: int | None) -> str:
    """``"killed by SIGSEGV"``, ``"exit code 3"``, or ``"still running"`` for a process's exit code."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"
