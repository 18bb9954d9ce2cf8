"""torch-cpu's ``w8a8_dynamic_linear`` against its CPU peers and its own GEMM, and against the roofline
(pytest-benchmark; no assertions on time). Issue 18's comparison, in one process, round-robin.

Run (about two minutes on two cores; onnxruntime / torchao from the ``bench`` extra, skipped where missing)::

    python -m pytest benchmarks/test_bench_torch_cpu_peers.py --benchmark-only

Shapes: decode ``M = 16`` and prefill ``M = 512`` at ``K = N = 4096`` (DeepSeek-V4-Flash's shared-expert
W13), and ``2048^3``. For each, every candidate of :mod:`bench.peers` (torch-cpu, its own GEMM alone,
``torch._int_mm`` alone, torch bf16 matmul, onnxruntime's ``DynamicQuantizeMatMul`` and per-token graph,
torchao's int8 dynamic path) is called in turn, round after round (``benchmark.pedantic`` of one round);
``extra_info`` holds each candidate's median, torch-cpu's speedup over it, and torch-cpu's roofline.

``test_decode_weights_from_memory``: eight distinct ``M = 16`` Linears (134 MB of weights, 4x this CPU's
last-level cache) called in turn, as a model's layers are, so that every call reads its weights from
memory once: the time per Linear as a % of ``16.8 MB / measured out-of-cache bandwidth`` (target: >= 50 %),
the bandwidth probed before every round (a VM's memory bandwidth changes with its neighbours).

The module prints the ratios at the end (terminal section "torch-cpu vs peers"), with the ceilings
measured at its start (``bench.peak.measure``).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import backends
from bench import peers, roofline
from bench.runner import case_seed
from bench.timing import SETTLE_S, round_robin, stats

torch = pytest.importorskip("torch")

SHAPES = [(16, 4096, 4096), (512, 4096, 4096), (2048, 2048, 2048)]
ROUNDS = {16: 25, 512: 9, 2048: 7}
_RESULTS: dict = {}


@pytest.fixture(scope="module")
def ceilings():
    from bench.peak import measure

    return measure()


def _candidates(m, k, n):
    from conformance.ops.dense.w8a8_dynamic_linear import bench_case as dynamic_linear_case

    case = dynamic_linear_case(m, k, n)
    args, kwargs = case.build(np.random.default_rng(case_seed(case.name)))
    x, w, ws = args
    flat = (x, w, np.asarray(ws, np.float32).reshape(-1))
    out, skipped = {}, {}
    for build in peers.BUILDERS:
        cand, why = build(args, kwargs) if build is peers._torch_cpu else build(flat, kwargs)
        if cand is None:
            skipped[build.__name__.strip("_")] = why
        else:
            out[cand.name] = cand
    import w8a8

    got = out["torch-cpu"].result()
    want = w8a8.w8a8_dynamic_linear(*args, **kwargs)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()   # bit-identical, outside the timing
    return case, out, skipped


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "M{}xK{}xN{}".format(*s))
def test_round_robin(benchmark, shape, ceilings):
    case, cands, skipped = _candidates(*shape)
    one_round, times = round_robin({name: c.run for name, c in cands.items()}, settle=SETTLE_S)
    one_round()   # warm-up
    for v in times.values():
        v.clear()
    benchmark.group = f"peers-{case.label}"
    benchmark.pedantic(one_round, rounds=ROUNDS[shape[0]], iterations=1, warmup_rounds=1)
    med = {name: stats(v[1:] if len(v) > 2 else v)["median"] for name, v in times.items()}
    tc = med["torch-cpu"]
    rec = {"op": case.op, "params": case.params, "work": case.work, "stats": {"median": tc}}
    roof = roofline.roofline(rec, ceilings, ceilings.int8, "int8")
    _RESULTS[case.label] = {"median": med, "q": {n: stats(v)["q1"] for n, v in times.items()},
                            "q3": {n: stats(v)["q3"] for n, v in times.items()}, "record": rec,
                            "skipped": skipped, "gemm": backends.get("torch-cpu").gemm_path}
    benchmark.extra_info.update({f"median_{n}_ms": round(v * 1e3, 3) for n, v in med.items()})
    benchmark.extra_info.update({f"speedup_vs_{n}": round(v / tc, 3) for n, v in med.items() if n != "torch-cpu"})
    if roof is not None:
        benchmark.extra_info["roofline"] = roof.as_dict()
    benchmark.extra_info["skipped"] = skipped


def test_decode_weights_from_memory(benchmark, ceilings):
    from w8a8 import bfloat16

    tc = backends.get("torch-cpu")
    rng = np.random.default_rng(0)
    m, k, n = 16, 4096, 4096
    x = rng.standard_normal((m, k)).astype(np.float32).astype(bfloat16)
    layers = [tc.prepare("w8a8_dynamic_linear", x, rng.integers(-127, 128, (n, k), dtype=np.int8),
                         (rng.random(n) * 1e-3 + 1e-4).astype(np.float32)) for _ in range(8)]

    from bench.peak import dram_bandwidth

    bandwidth, per_linear = [], []

    def all_layers():   # the memory bandwidth probed before each round: the roofline of that round
        bandwidth.append(dram_bandwidth())
        t0 = time.perf_counter()
        for p in layers:
            p.run()
        per_linear.append((time.perf_counter() - t0) / len(layers))

    benchmark.group = "peers-decode-from-memory"
    benchmark.pedantic(all_layers, rounds=15, iterations=1, warmup_rounds=2)
    weight_bytes = k * n + 2 * m * k * 2
    pct = [weight_bytes / bw / t for bw, t in zip(bandwidth[2:], per_linear[2:]) if bw]
    per = float(np.median(per_linear[2:]))
    _RESULTS["decode-from-memory"] = {"per_linear": per, "pct": pct, "bw": float(np.median(bandwidth[2:]))}
    benchmark.extra_info.update(per_linear_ms=round(per * 1e3, 3),
                                pct_of_dram_roofline_per_round=[round(100 * p, 1) for p in pct])


@pytest.fixture(scope="module", autouse=True)
def _report(bench_report, ceilings):
    _RESULTS["_ceilings"] = ceilings
    bench_report(_write_summary)


def _write_summary(rep):
    from bench.peak import measure

    start = _RESULTS.pop("_ceilings", None)
    if not _RESULTS or start is None:
        return
    ceilings = start.best(measure())   # again at the end: a ceiling is the best rate seen on a shared machine
    rep.section("torch-cpu vs peers (round-robin medians, this run)")
    rep.write_line(f"ceilings (best of the start and the end of the run): int8 {ceilings.int8 / 1e12:.2f} TOPS, read "
                   f"bandwidth {ceilings.bw_llc / 1e9:.0f} GB/s in cache, {ceilings.bw_dram / 1e9:.1f} GB/s from memory")
    for label, r in _RESULTS.items():
        if label == "decode-from-memory":
            pct = r["pct"]
            rep.write_line(f"decode M=16 K=N=4096, 8 distinct Linears in turn (weights from memory): "
                           f"{r['per_linear'] * 1e3:.3f} ms per Linear; bandwidth roofline per round (probed before each, "
                           f"median {r['bw'] / 1e9:.1f} GB/s): median {100 * float(np.median(pct)):.0f}% "
                           f"(range {100 * min(pct):.0f}-{100 * max(pct):.0f}%; target >= 50%)")
            continue
        med = r["median"]
        tc = med["torch-cpu"]
        roof = roofline.roofline(r["record"], ceilings, ceilings.int8, "int8")
        rep.write_line(f"w8a8_dynamic_linear {label} (torch-cpu gemm path {r['gemm']}): torch-cpu {tc * 1e3:.3f} ms "
                       f"(q1-q3 {r['q']['torch-cpu'] * 1e3:.3f}-{r['q3']['torch-cpu'] * 1e3:.3f})"
                       + (f"; {roof.label()}, DRAM bw {100 * roof.dram_pct:.0f}%" if roof else ""))
        for name, v in med.items():
            if name == "torch-cpu":
                continue
            what = "Linear / this GEMM" if "GEMM only" in name else "torch-cpu speedup"
            value = tc / v if "GEMM only" in name else v / tc
            rep.write_line(f"    {name}: {v * 1e3:.3f} ms -> {what} {value:.2f}x")
        for name, why in r["skipped"].items():
            rep.write_line(f"    {name}: skipped ({why})")
