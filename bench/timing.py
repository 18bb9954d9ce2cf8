"""Timing a backend call the way device timing must be done.

* Inputs are converted and loaded once (``Backend.prepare``: host->device transfer, weight
  transposes / NZ casts / prepacking) — reported separately, never inside the timed region.
* Warm-up calls first (first-call costs: allocation, kernel selection, caches).
* Each timed round is ``Prepared.run()``, which ends with ``backend.synchronize()``: the device work
  is complete when the clock stops.
* The device->host copy (``Prepared.finish``) is timed once, separately.
* Peak memory: the resident-set high-water mark above the baseline, sampled every millisecond
  during the warm-up call (Linux ``/proc/self/statm``; tracemalloc where that is absent).

Statistics follow pytest-benchmark's field names, so the JSON can be read by ``pytest-benchmark
compare``.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class PeakMemory:
    """Context manager: the peak resident-set growth (bytes) while the block runs."""

    def __init__(self, interval: float = 0.001):
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self):
        self.base = _rss()
        if self.base is None:
            import tracemalloc

            tracemalloc.start()
            return self
        self.peak_rss = self.base
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            r = _rss()
            if r is not None and r > self.peak_rss:
                self.peak_rss = r
            time.sleep(self.interval)

    def __exit__(self, *exc):
        if self.base is None:
            import tracemalloc

            self.peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return False
        self._stop.set()
        self._thread.join()
        r = _rss()
        self.peak = max(self.peak_rss, r or 0) - self.base
        return False


def stats(data: list[float]) -> dict:
    """pytest-benchmark style statistics of round times (seconds)."""
    data = sorted(data)
    n = len(data)
    mean = statistics.fmean(data)
    stddev = statistics.stdev(data) if n > 1 else 0.0
    if n >= 4:
        q = statistics.quantiles(data, n=4, method="inclusive")
        q1, q3 = q[0], q[2]
    else:
        q1, q3 = data[0], data[-1]
    iqr = q3 - q1
    lo, hi = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    ld15 = min((x for x in data if x >= lo), default=data[0])
    hd15 = max((x for x in data if x <= hi), default=data[-1])
    iqr_out = sum(1 for x in data if x < lo or x > hi)
    sd_out = sum(1 for x in data if abs(x - mean) > stddev) if stddev else 0
    return {"min": data[0], "max": data[-1], "mean": mean, "stddev": stddev, "rounds": n,
            "median": statistics.median(data), "iqr": iqr, "q1": q1, "q3": q3, "iqr_outliers": iqr_out,
            "stddev_outliers": sd_out, "outliers": f"{sd_out};{iqr_out}", "ld15iqr": ld15, "hd15iqr": hd15,
            "ops": 1.0 / mean if mean else 0.0, "total": sum(data), "iterations": 1}


def time_call(prepared, *, warmup: int = 1, min_rounds: int = 3, max_rounds: int = 50,
              max_time: float = 2.0) -> dict:
    """Time ``prepared.run()``: warm-up (with peak-memory sampling), then rounds until ``min_rounds``
    are done and ``max_time`` has passed (or ``max_rounds``). Returns stats, memory, transfers and
    the output of the warm-up call."""
    with PeakMemory() as mem:
        out = prepared.run()
    for _ in range(max(0, warmup - 1)):
        out = prepared.run()
    data: list[float] = []
    start = time.perf_counter()
    while len(data) < min_rounds or (time.perf_counter() - start < max_time and len(data) < max_rounds):
        t0 = time.perf_counter()
        out = prepared.run()
        data.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    result = prepared.finish(out)
    transfer_out = time.perf_counter() - t0
    return {"stats": stats(data), "data": data, "peak_memory_bytes": int(mem.peak),
            "transfer_in_s": prepared.transfer_in_s, "load_s": prepared.load_s, "transfer_out_s": transfer_out,
            "result": result}


SETTLE_S = 0.01
"""A pause before each candidate of a round (outside its timing) in which the thread pools of the one
before go idle. OpenMP (torch) and onnxruntime workers spin for a while after a parallel region; the
candidate timed next shares the cores with them. Measured here (2 cores, K = N = 4096, M = 512, seven
candidates in turn): torch-cpu 24-26 ms right after torchao's eager kernels, 20.6 ms after a 10 ms
pause, equal to its own GEMM alone (20.7 ms); onnxruntime 31 -> 25 ms."""


def round_robin(candidates: dict, settle: float = 0.0) -> tuple:
    """``(one_round, times)``: ``one_round()`` calls every candidate once, in order, appending each
    call's seconds to ``times[name]``. Interleaving the candidates round after round keeps a shared
    machine's drift out of their ratios (pass ``one_round`` to ``benchmark.pedantic``). ``settle``:
    seconds to sleep before each candidate, untimed (:data:`SETTLE_S` when candidates bring their own
    thread pools)."""
    times: dict[str, list[float]] = {name: [] for name in candidates}

    def one_round() -> None:
        for name, fn in candidates.items():
            if settle:
                time.sleep(settle)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)

    return one_round, times
