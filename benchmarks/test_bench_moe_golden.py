"""Speed of the golden W8A8 MoE (``w8a8.w8a8_moe``) next to its own dense GEMM of equal useful FLOPs.

pytest-benchmark, no assertions on time. DeepSeek-V4-Flash proportions: H = 4096, I = 2048, top-6.
The routed-expert FLOPs are those of one dense int8 GEMM ``[T*k, H] x [H, 3I]`` (W13 is H -> 2I,
W2 is I -> H), so the reference is :func:`w8a8.int_matmul` at ``M = T*k, K = H, N = 3I`` (casts
included, as in the MoE). Target: MoE time <= 1.5x that GEMM.

What differs, and why the small-T ratio cannot reach the target: the MoE streams every expert's
weights (E * 3 * H * I int8: 6.4 GB at E = 256), converting them to float for BLAS, while the dense
GEMM of equal FLOPs touches one 25 MB weight. The ratio is governed by tokens per expert
(``T * k / E``), so the default configurations keep DeepSeek-V4's tokens-per-expert with fewer
experts (E = 16: T = 16 and 128 give 6 and 48 rows per expert, like T = 256 and 2048 at E = 256).

Run the defaults (about a minute, 0.4 GB of weights)::

    python -m pytest benchmarks/test_bench_moe_golden.py --benchmark-only

The real DeepSeek-V4-Flash layer (E = 256; 6.4 GB of int8 weights, several minutes; run it rarely on
a shared machine)::

    W8A8_BENCH_MOE_FULL=1 python -m pytest benchmarks/test_bench_moe_golden.py --benchmark-only

BLAS runs single-threaded here (both sides of the ratio; ``W8A8_BENCH_THREADS=N`` to change): with a
few rows per expert OpenBLAS's thread hand-off costs more than the work, and on a shared, loaded
two-core machine it made timings swing tenfold.

Besides the whole layer, each stage is timed on its own (routing + quantization, W13 grouped
matmul, SwiGLU + requant, W2 grouped matmul, finalize) for the breakdown; the ratios are printed at
the end of the module (terminal section "w8a8 MoE golden").
"""

import os

import numpy as np
import pytest

import w8a8
from w8a8 import bfloat16, int_matmul

H, I, TOP_K = 4096, 2048, 6
FULL = os.environ.get("W8A8_BENCH_MOE_FULL", "") not in ("", "0")
CONFIGS = [(256, 256), (256, 2048)] if FULL else [(16, 16), (16, 128)]      # (E, T)
ROUNDS = dict(rounds=1, iterations=1, warmup_rounds=0) if FULL else dict(rounds=3, iterations=1, warmup_rounds=1)
THREADS = int(os.environ.get("W8A8_BENCH_THREADS", "1"))
_MEDIANS: dict[tuple, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _report(bench_report):
    from threadpoolctl import threadpool_limits

    bench_report(_write_summary)
    with threadpool_limits(THREADS, user_api="blas"):
        yield


def _write_summary(rep):
    if not _MEDIANS:
        return
    rep.section(f"w8a8 MoE golden (medians, this run, {THREADS} BLAS thread(s))")
    for e, t in CONFIGS:
        moe, dense = _MEDIANS.get((e, t, "moe")), _MEDIANS.get((e, t, "dense"))
        if moe is None or dense is None:
            continue
        rep.write_line(f"E={e} T={t} ({t * TOP_K / e:.0f} rows/expert): w8a8_moe {moe:.3f}s, dense int_matmul "
                       f"[{t * TOP_K}x{H}]x[{H}x{3 * I}] {dense:.3f}s -> ratio {moe / dense:.2f} (target <= 1.5)")
        parts = [(name, _MEDIANS.get((e, t, name))) for name in ("routing", "gmm1", "swiglu_quant", "gmm2",
                                                                  "finalize")]
        if all(v is not None for _, v in parts):
            total = sum(v for _, v in parts)
            rep.write_line("    breakdown: " + ", ".join(f"{n} {v:.3f}s ({100 * v / total:.0f}%)" for n, v in parts))


def _record(key, benchmark):
    stats = getattr(benchmark, "stats", None)
    if stats is not None and getattr(stats, "stats", None) is not None:
        _MEDIANS[key] = float(stats.stats.median)


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"E{c[0]}-T{c[1]}")
def layer(request):
    e, t = request.param
    rng = np.random.default_rng(0)
    w13 = rng.integers(-127, 128, (e, 2 * I, H), dtype=np.int8)
    w2 = rng.integers(-127, 128, (e, H, I), dtype=np.int8)
    s13 = rng.uniform(1e-4, 1e-3, (e, 2 * I, 1)).astype(np.float32)
    s2 = rng.uniform(1e-4, 1e-3, (e, H, 1)).astype(np.float32)
    hidden = rng.standard_normal((t, H), dtype=np.float32).astype(bfloat16)
    logits = rng.standard_normal((t, e), dtype=np.float32)
    stages = w8a8.w8a8_moe_stages(hidden, w13, s13, w2, s2, top_k=TOP_K, router_logits=logits)
    yield dict(e=e, t=t, w13=w13, s13=s13, w2=w2, s2=s2, hidden=hidden, logits=logits, stages=stages)


def test_w8a8_moe(benchmark, layer):
    L = layer
    benchmark.group = f"moe-E{L['e']}-T{L['t']}"
    y = benchmark.pedantic(w8a8.w8a8_moe, args=(L["hidden"], L["w13"], L["s13"], L["w2"], L["s2"]),
                           kwargs=dict(top_k=TOP_K, router_logits=L["logits"]), **ROUNDS)
    _record((L["e"], L["t"], "moe"), benchmark)
    assert y.shape == (L["t"], H)


def test_dense_int_matmul_equal_flops(benchmark, layer):
    rng = np.random.default_rng(1)
    a = rng.integers(-127, 128, (layer["t"] * TOP_K, H), dtype=np.int8)
    b = rng.integers(-127, 128, (H, 3 * I), dtype=np.int8)
    benchmark.group = f"moe-E{layer['e']}-T{layer['t']}"
    benchmark.pedantic(int_matmul, args=(a, b), **ROUNDS)
    _record((layer["e"], layer["t"], "dense"), benchmark)


def test_stage_routing(benchmark, layer):
    L = layer
    benchmark.group = f"moe-stages-E{L['e']}-T{L['t']}"

    def route():
        y, ids, _ = w8a8.moe_gating_top_k_softmax(L["logits"], k=TOP_K)
        return w8a8.moe_init_routing_v2(L["hidden"], ids, active_num=L["t"] * TOP_K, expert_num=L["e"],
                                        expert_tokens_num_type=1, expert_tokens_num_flag=True,
                                        active_expert_range=[0, L["e"]], quant_mode=1)
    benchmark.pedantic(route, **ROUNDS)
    _record((L["e"], L["t"], "routing"), benchmark)


@pytest.mark.parametrize("which", ["gmm1", "gmm2"])
def test_stage_grouped_matmul(benchmark, layer, which):
    L, st = layer, layer["stages"]
    benchmark.group = f"moe-stages-E{L['e']}-T{L['t']}"
    x, w, scale, token = ((st["expanded_x"], L["w13"], st["w13_scale"], st["expanded_scale"]) if which == "gmm1"
                          else (st["act_q"], L["w2"], st["w2_scale"], st["act_scale"]))
    benchmark.pedantic(w8a8.grouped_matmul, args=(x, w.transpose(0, 2, 1)),
                       kwargs=dict(scale=scale, per_token_scale=token, group_list=st["expert_tokens"],
                                   group_list_type=1, output_dtype="bfloat16"), **ROUNDS)
    _record((L["e"], L["t"], which), benchmark)


def test_stage_swiglu_quant(benchmark, layer):
    L, st = layer, layer["stages"]
    benchmark.group = f"moe-stages-E{L['e']}-T{L['t']}"
    benchmark.pedantic(w8a8.dequant_swiglu_quant, args=(st["gmm1"],), kwargs=dict(quant_mode=1, activate_left=True),
                       **ROUNDS)
    _record((L["e"], L["t"], "swiglu_quant"), benchmark)


def test_stage_finalize(benchmark, layer):
    L, st = layer, layer["stages"]
    benchmark.group = f"moe-stages-E{L['e']}-T{L['t']}"
    weights = st["topk_weights"].astype(bfloat16)
    benchmark.pedantic(w8a8.moe_finalize_routing,
                       args=(st["gmm2"], None, None, None, weights, st["expanded_row_idx"], st["topk_ids"]),
                       kwargs=dict(drop_pad_mode=2), **ROUNDS)
    _record((L["e"], L["t"], "finalize"), benchmark)
