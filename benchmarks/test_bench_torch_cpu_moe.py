"""torch-cpu's W8A8 MoE layer next to its own dense int8 GEMM of equal useful FLOPs (pytest-benchmark; no
assertions on time).

DeepSeek-V4-Flash proportions: H = 4096, I = 2048 (moe_intermediate), top-6, random routing (router
logits, softmax top-k). The routed experts' useful work is that of one dense int8 GEMM
``[T*6, H] x [H, 3I]`` (W13 is H -> 2I, W2 is I -> H), so the anchor is torch-cpu's own dense int8 GEMM of
that shape (:func:`backends.torch_cpu.gemm.int_matmul`: ``torch._int_mm`` on the weight as its
``quant_matmul`` loads it). Target: MoE >= 0.7x the useful-FLOP rate of that GEMM, i.e.
``dense time / MoE time >= 0.7``.

* ``test_torch_cpu_w8a8_moe``: the whole layer (router, dispatch quantization, the fused per-expert
  GEMM1 -> SwiGLU + requant -> GEMM2 chains, finalize), timed through ``backend.prepare(...).run`` (the
  weights prepared once at load: prepacked / transposed, scales rounded to bf16). Bit-identical to the
  golden (checked once per configuration, outside the timing).
* ``test_torch_cpu_w8a8_moe_int_mm`` / ``_fbgemm``: the same with the per-expert GEMMs forced to
  ``torch._int_mm`` / fbgemm's prepacked kernel (``W8A8_TORCH_CPU_MOE_GEMM``) and the chain in torch: what
  the default (``vnni``: the whole per-expert chain in torch-cpu's own kernel, on AVX512-VNNI CPUs,
  :mod:`backends.torch_cpu.moe_layer`) buys.
* the roofline: the layer must stream every touched expert's weights once (``bench.roofline``); the
  summary gives each time as a % of the time that takes at the measured out-of-cache read bandwidth
  (target: >= 70 % at 6 rows per expert). The bandwidth of a VM's memory changes from minute
  to minute with its neighbours, so ``test_interleaved_ratio`` probes it (``bench.peak.dram_bandwidth``)
  in every round, between the layer and the dense GEMM, and reports the median of the per-round ratios.
* ``test_dense_int8_gemm_equal_flops``: ``[T*6, 4096] x [4096, 6144]`` through torch-cpu's dense GEMM.
* ``test_interleaved_ratio``: the layer and the dense GEMM round-robin; the ratio of the medians (the
  number to trust on a shared, noisy machine) goes into ``extra_info`` and the summary.
* the golden ``w8a8.w8a8_moe``, timed once (one BLAS thread, as in ``test_bench_moe_golden.py``): the
  torch-cpu / golden ratio.

Each configuration records one profiled run of the layer (:data:`backends.torch_cpu.moe_layer.PROFILE`):
the wall time of route / dispatch / experts / finalize, and inside the experts the thread-seconds of
gemm1, act (GEMM1 epilogue + SwiGLU + requant), gemm2 and out (GEMM2 epilogue + scatter), summed over
the expert worker threads. The module prints the ratios and the breakdown at the end (terminal section
"torch-cpu MoE").

The default configurations keep DeepSeek-V4's rows per expert with fewer experts (E = 16: T = 16 and 128
give 6 and 48 rows per expert, like T = 256 and 2048 at E = 256; 0.4 GB of weights, about a minute)::

    python -m pytest benchmarks/test_bench_torch_cpu_moe.py --benchmark-only

The real layer (E = 256: 6.4 GB of int8 weights, ~13 GB resident with the loaded copy; the golden runs
take minutes; run it rarely on a shared machine)::

    W8A8_BENCH_MOE_FULL=1 python -m pytest benchmarks/test_bench_torch_cpu_moe.py --benchmark-only
"""

from __future__ import annotations

import gc
import os
import time

import numpy as np
import pytest

import backends
from bench.timing import round_robin
import w8a8
from w8a8 import bfloat16

torch = pytest.importorskip("torch")

H, I, TOP_K = 4096, 2048, 6
FULL = os.environ.get("W8A8_BENCH_MOE_FULL", "") not in ("", "0")
CONFIGS = [(256, 256), (256, 2048)] if FULL else [(16, 16), (16, 128)]      # (E, T)
ROUNDS = dict(rounds=3, iterations=1, warmup_rounds=1) if FULL else dict(rounds=5, iterations=1, warmup_rounds=1)
_MEDIANS: dict[tuple, float] = {}
_EXTRA: dict[tuple, object] = {}


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"E{c[0]}-T{c[1]}")
def layer(request):
    from threadpoolctl import threadpool_limits

    e, t = request.param
    rng = np.random.default_rng(0)
    w13 = rng.integers(-127, 128, (e, 2 * I, H), dtype=np.int8)    # checkpoint layout [E, 2I, H]
    w2 = rng.integers(-127, 128, (e, H, I), dtype=np.int8)         # [E, H, I]
    s13 = rng.uniform(1e-4, 1e-3, (e, 2 * I, 1)).astype(np.float32)
    s2 = rng.uniform(1e-4, 1e-3, (e, H, 1)).astype(np.float32)
    hidden = rng.standard_normal((t, H), dtype=np.float32).astype(bfloat16)
    logits = rng.standard_normal((t, e), dtype=np.float32)
    args = (hidden, w13, s13, w2, s2)
    kwargs = dict(top_k=TOP_K, router_logits=logits)
    with threadpool_limits(1, user_api="blas"):   # many tiny GEMMs: BLAS thread hand-offs cost more than the work
        t0 = time.perf_counter()
        want = w8a8.w8a8_moe(*args, **kwargs)   # the golden, once: the reference bits and its wall time
        _EXTRA[(e, t, "golden_s")] = time.perf_counter() - t0
    yield dict(e=e, t=t, args=args, kwargs=kwargs, want=want)
    gc.collect()


def _prepare(layer, path: str):
    """The layer prepared on torch-cpu with the MoE GEMM path ``path``, checked against the golden once;
    ``(prepared, load seconds, resolved path)``."""
    from backends.torch_cpu import moe_experts

    with moe_experts.path_override(path):
        t0 = time.perf_counter()
        prepared = backends.get("torch-cpu").prepare("w8a8_moe", *layer["args"], **layer["kwargs"])
        load_s = time.perf_counter() - t0
        resolved = moe_experts.resolve_path()
    got = prepared.finish(prepared.run())
    assert got.dtype == layer["want"].dtype and got.tobytes() == layer["want"].tobytes()   # bit-identical
    return prepared, load_s, resolved


def _record(key, benchmark):
    stats = getattr(benchmark, "stats", None)
    if stats is not None and getattr(stats, "stats", None) is not None:
        _MEDIANS[key] = float(stats.stats.median)


def _profile(prepared) -> tuple[float, dict]:
    from backends.torch_cpu import moe_layer

    moe_layer.PROFILE = {}
    try:
        t0 = time.perf_counter()
        prepared.run()
        return time.perf_counter() - t0, dict(moe_layer.PROFILE)
    finally:
        moe_layer.PROFILE = None


def _bench_layer(benchmark, layer, prepared, load_s, resolved, name):
    e, t = layer["e"], layer["t"]
    benchmark.group = f"torch-cpu-moe-E{e}-T{t}"
    benchmark.extra_info.update(moe_gemm=resolved, load_s=round(load_s, 2), rows_per_expert=t * TOP_K / e)
    benchmark.pedantic(prepared.run, **ROUNDS)
    _record((e, t, name), benchmark)
    _EXTRA[(e, t, f"path_{name}")] = resolved
    total, phases = _profile(prepared)
    _EXTRA[(e, t, f"profile_{name}")] = (total, phases)
    benchmark.extra_info.update({f"profile_{k}_ms": round(v * 1e3, 2) for k, v in phases.items()})


# int_mm / fbgemm first: their loaded copies are freed before the module fixture of the default path loads
# (FULL: 6 GB each)
def test_torch_cpu_w8a8_moe_int_mm(benchmark, layer):
    prepared, load_s, resolved = _prepare(layer, "int_mm")
    _bench_layer(benchmark, layer, prepared, load_s, resolved, "int_mm")
    del prepared
    gc.collect()


def test_torch_cpu_w8a8_moe_fbgemm(benchmark, layer):
    from backends.torch_cpu import moe_experts

    if not moe_experts.fbgemm_usable()[0]:
        pytest.skip(moe_experts.fbgemm_usable()[1])
    prepared, load_s, resolved = _prepare(layer, "fbgemm")
    _bench_layer(benchmark, layer, prepared, load_s, resolved, "fbgemm")
    del prepared
    gc.collect()


@pytest.fixture(scope="module")
def dram_bandwidth():
    from bench.peak import measure, measure_bandwidth

    _EXTRA["int8_peak"] = measure(bandwidth=False).int8   # the compute side of the roofline
    return measure_bandwidth(seconds=0.5)["bw_dram"]


def _weight_bytes(e: int, t: int) -> float:
    from bench.roofline import touched_experts

    return touched_experts(t, e, TOP_K) * 3 * H * I


@pytest.fixture(scope="module")
def moe_default(layer):
    prepared, load_s, resolved = _prepare(layer, "auto")
    yield prepared, load_s, resolved
    del prepared
    gc.collect()


def test_torch_cpu_w8a8_moe(benchmark, layer, moe_default, dram_bandwidth):
    _bench_layer(benchmark, layer, *moe_default, "auto")
    _EXTRA["bw_dram"] = dram_bandwidth


@pytest.fixture(scope="module")
def dense_gemm(layer):
    from backends.torch_cpu import runtime
    from backends.torch_cpu.gemm import Int8Weight, int_matmul

    gen = torch.Generator().manual_seed(1)
    a = torch.randint(-127, 128, (layer["t"] * TOP_K, H), dtype=torch.int8, generator=gen)
    w = Int8Weight.load(torch.randint(-127, 128, (H, 3 * I), dtype=torch.int8, generator=gen), "int_mm")
    runtime.claim_threads()
    return lambda: int_matmul(a, w.kn, b_absmax=w.absmax)


def test_dense_int8_gemm_equal_flops(benchmark, layer, dense_gemm):
    benchmark.group = f"torch-cpu-moe-E{layer['e']}-T{layer['t']}"
    benchmark.pedantic(dense_gemm, **ROUNDS)
    _record((layer["e"], layer["t"], "dense"), benchmark)


def test_interleaved_ratio(benchmark, layer, moe_default, dense_gemm):
    """Round-robin medians (more robust to a shared machine's drift than the sequential runs), with the
    memory bandwidth probed in every round (the roofline of that round)."""
    from bench.peak import dram_bandwidth

    bandwidth: list[float] = []
    candidates = {"moe": moe_default[0].run, "bandwidth": lambda: bandwidth.append(dram_bandwidth()),
                  "dense": dense_gemm}
    one_round, times = round_robin(candidates)

    benchmark.group = f"torch-cpu-moe-E{layer['e']}-T{layer['t']}-interleaved"
    benchmark.pedantic(one_round, **ROUNDS)
    times.pop("bandwidth")
    med = {name: float(np.median(v[1:] if len(v) > 1 else v)) for name, v in times.items()}  # drop the warm-up
    ratio = med["dense"] / med["moe"]
    roof = [_weight_bytes(layer["e"], layer["t"]) / bw / t for bw, t in zip(bandwidth, times["moe"]) if bw]
    _EXTRA[(layer["e"], layer["t"], "interleaved")] = (med, ratio, roof)
    benchmark.extra_info.update({f"median_{k}_ms": round(v * 1e3, 2) for k, v in med.items()})
    benchmark.extra_info["moe_rate_vs_dense"] = round(ratio, 3)
    if roof:
        benchmark.extra_info["pct_of_bandwidth_roofline_per_round"] = [round(100 * r, 1) for r in roof]


@pytest.fixture(scope="module", autouse=True)
def _report(bench_report):
    bench_report(_write_summary)


def _write_summary(rep):
    if not _MEDIANS:
        return
    rep.section("torch-cpu MoE (medians, this run)")
    for e, t in CONFIGS:
        dense = _MEDIANS.get((e, t, "dense"))
        gop = 2 * t * TOP_K * H * 3 * I / 1e9
        golden = _EXTRA.get((e, t, "golden_s"))
        rep.write_line(f"E={e} T={t} ({t * TOP_K / e:.0f} rows/expert); dense int8 GEMM [{t * TOP_K}x{H}]x[{H}x{3 * I}]"
                       + (f" {dense * 1e3:.1f} ms ({gop / dense:.0f} GOP/s)" if dense else "")
                       + (f"; golden w8a8_moe {golden:.1f} s (once)" if golden else ""))
        bw, peak = _EXTRA.get("bw_dram"), _EXTRA.get("int8_peak")
        need, limit = 0.0, ""
        if bw and peak:   # the limiting resource: streaming the weights once, or the int8 work
            t_bw, t_ops = _weight_bytes(e, t) / bw, gop * 1e9 / peak
            need, limit = max(t_bw, t_ops), ("bandwidth" if t_bw >= t_ops else "int8")
            rep.write_line(f"    roofline: {_weight_bytes(e, t) / 1e9:.2f} GB of expert weights streamed once at the "
                           f"measured {bw / 1e9:.1f} GB/s out of cache = {t_bw * 1e3:.1f} ms; {gop:.1f} GOP at "
                           f"{peak / 1e12:.2f} TOPS int8 = {t_ops * 1e3:.1f} ms: {limit}-bound")
        for name in ("auto", "fbgemm", "int_mm"):
            moe = _MEDIANS.get((e, t, name))
            if moe is None:
                continue
            line = f"    w8a8_moe, GEMMs {_EXTRA.get((e, t, f'path_{name}'))}: {moe * 1e3:.1f} ms ({gop / moe:.0f} useful GOP/s)"
            if need:
                line += f", {limit}-bound at {100 * need / moe:.0f}% of the roofline"
            if dense:
                line += f" -> {dense / moe:.2f}x the dense rate (target >= 0.7)"
            if golden:
                line += f"; {golden / moe:.0f}x the golden"
            rep.write_line(line)
            profile = _EXTRA.get((e, t, f"profile_{name}"))
            if profile:
                total, phases = profile
                wall = {k: phases[k] for k in ("route", "dispatch", "experts", "finalize", "shared") if k in phases}
                inner = {k: phases[k] for k in ("gemm1", "act", "gemm2", "out") if k in phases}
                busy = sum(inner.values()) or 1.0
                rep.write_line(f"        profiled run {total * 1e3:.1f} ms: " + ", ".join(
                    f"{k} {v * 1e3:.1f} ms ({100 * v / total:.0f}%)" for k, v in wall.items()))
                rep.write_line("        experts, thread-seconds: " + ", ".join(
                    f"{k} {v * 1e3:.1f} ms ({100 * v / busy:.0f}%)" for k, v in inner.items()))
        inter = _EXTRA.get((e, t, "interleaved"))
        if inter:
            med, ratio, roof = inter
            rep.write_line(f"    interleaved medians: w8a8_moe {med['moe'] * 1e3:.1f} ms, dense {med['dense'] * 1e3:.1f} ms"
                           f" -> {ratio:.2f}x the dense rate (target >= 0.7)")
            if roof and limit != "int8":
                rep.write_line(f"    bandwidth roofline, per round (bandwidth probed in each): median "
                               f"{100 * float(np.median(roof)):.0f}% (range {100 * min(roof):.0f}-{100 * max(roof):.0f}%; "
                               f"target >= 70%)")
