"""torch-cpu's bound call (``backend.bind``) against the prepared call and the direct method, at
M = 16 (decode), K = N = 4096 (pytest-benchmark; no assertions on time).

Run: ``python -m pytest benchmarks/test_bench_torch_cpu_bind.py --benchmark-only`` (~10 s).

* ``prepared run``: ``backend.prepare("w8a8_dynamic_linear", x, w, s)`` once, ``prepared.run()`` timed
  — the device work only (torch tensors out, no checks, no conversion).
* ``bind + call``: ``lin = backend.bind("w8a8_dynamic_linear", w, s)`` once, ``lin(x)`` timed — NumPy in
  and out, the activation checks (dtype, K, finite) included: what a serving loop pays per call.
* ``direct call``: ``backend.w8a8_dynamic_linear(x, w, s)`` timed — every call checks, packs and probes
  the weight again (what ``bind`` removes).

``test_interleaved`` runs the first two round-robin and records the ratio of medians
(``bind_over_run``) and of minima (``bind_over_run_min``: on a shared machine the noise only adds time,
so the minima are the steadier figure) in its ``extra_info``.
"""

from __future__ import annotations

import numpy as np
import pytest

import backends
from bench.timing import round_robin
from w8a8 import bfloat16, w8a8_dynamic_linear

pytest.importorskip("torch")

M, K, N = 16, 4096, 4096
GROUP = "bind-m16"
_RATIO: dict[str, float] = {}


@pytest.fixture(scope="module")
def calls():
    backend = backends.get("torch-cpu")
    ok, reason = backend.available()
    if not ok:
        pytest.skip(reason)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32).astype(bfloat16)
    w = rng.integers(-127, 128, (N, K), dtype=np.int8)
    s = (rng.random(N, dtype=np.float32) * 1e-3 + 1e-4).astype(np.float32)
    prepared = backend.prepare("w8a8_dynamic_linear", x, w, s)
    lin = backend.bind("w8a8_dynamic_linear", w, s)
    want = w8a8_dynamic_linear(x, w, s)
    for got in (lin(x), prepared.finish(prepared.run())):   # correctness once, outside any timing
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    return {"prepared run": prepared.run, "bind + call": lambda: lin(x),
            "direct call": lambda: backend.w8a8_dynamic_linear(x, w, s)}


@pytest.mark.benchmark(group=GROUP)
def test_prepared_run(benchmark, calls):
    benchmark.pedantic(calls["prepared run"], rounds=30, iterations=1, warmup_rounds=3)


@pytest.mark.benchmark(group=GROUP)
def test_bind_call(benchmark, calls):
    benchmark.pedantic(calls["bind + call"], rounds=30, iterations=1, warmup_rounds=3)


@pytest.mark.benchmark(group=GROUP)
def test_direct_call(benchmark, calls):
    benchmark.pedantic(calls["direct call"], rounds=3, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group=GROUP)
def test_interleaved(benchmark, calls, bench_report):
    """The bound call and the prepared run round-robin (200 rounds): the ratio of medians."""
    one_round, times = round_robin({k: calls[k] for k in ("prepared run", "bind + call")})

    def rounds():
        for _ in range(200):
            one_round()

    benchmark.pedantic(rounds, rounds=1, iterations=1, warmup_rounds=0)
    med = {k: float(np.median(v)) for k, v in times.items()}
    low = {k: float(np.min(v)) for k, v in times.items()}
    _RATIO["bind_over_run"] = med["bind + call"] / med["prepared run"]
    _RATIO["bind_over_run_min"] = low["bind + call"] / low["prepared run"]
    benchmark.extra_info.update({f"median_{k.replace(' ', '_').replace('+', 'plus')}_s": v for k, v in med.items()})
    benchmark.extra_info.update({f"min_{k.replace(' ', '_').replace('+', 'plus')}_s": v for k, v in low.items()})
    benchmark.extra_info["bind_over_run"] = _RATIO["bind_over_run"]
    benchmark.extra_info["bind_over_run_min"] = _RATIO["bind_over_run_min"]

    def write(rep):
        rep.write_line(f"bind + call / prepared run at M={M} K={K} N={N}, round-robin: medians "
                       f"{_RATIO['bind_over_run']:.3f}, minima {_RATIO['bind_over_run_min']:.3f}")

    bench_report(write)
