"""MoE benchmark cases: the W8A8 MoE layer and its grouped ops at DeepSeek-V4-Flash shapes.

Full runs use the real expert count (E = 256: 6.4 GB of int8 expert weights, built once per
backend process); quick runs use E = 16 with the same H, I and top-k. Routing is random top-k (as
in spec/cpu-performance.md §7), so at T tokens every expert gets about T*k/E rows. Useful work
counts only the rows that exist (2*T*k*(H*2I + I*H)).
"""

from __future__ import annotations

import numpy as np

from .cases import DECODE_M, PREFILL_M, TOP_K, BenchCase, E, H, I, factory, register


def _routing(rng, t, e, k):
    scores = rng.random((t, e))
    return np.argsort(-scores, axis=1)[:, :k].astype(np.int32), rng.uniform(0.05, 1, (t, k)).astype(np.float32)


def _experts(rng, e, h, i):
    w13 = rng.integers(-128, 128, size=(e, 2 * i, h), dtype=np.int8)
    w2 = rng.integers(-128, 128, size=(e, h, i), dtype=np.int8)
    s13 = rng.uniform(1e-3, 2e-3, size=(e, 2 * i, 1)).astype(np.float32)
    s2 = rng.uniform(1e-3, 2e-3, size=(e, h, 1)).astype(np.float32)
    return w13, s13, w2, s2


@factory
def moe_layer_case(t: int, e: int = E, k: int = TOP_K, h: int = H, i: int = I, tags=()) -> BenchCase:
    def build(rng):
        from w8a8 import bfloat16

        w13, s13, w2, s2 = _experts(rng, e, h, i)
        ids, wts = _routing(rng, t, e, k)
        x = (rng.standard_normal((t, h)).astype(np.float32)).astype(bfloat16)
        return (x, w13, s13, w2, s2), {"topk_ids": ids, "topk_weights": wts}

    return BenchCase("w8a8_moe", f"T{t}xE{e}xk{k}", {"t": t, "m": t, "e": e, "topk": k, "h": h, "i": i}, build,
                     work=2.0 * t * k * (h * 2 * i + i * h), tags=tags)


@factory
def grouped_matmul_case(t: int, e: int = E, k: int = TOP_K, h: int = H, n: int = 2 * I, tags=()) -> BenchCase:
    def build(rng):
        from w8a8 import bfloat16

        ids, _ = _routing(rng, t, e, k)
        counts = np.bincount(ids.ravel(), minlength=e).astype(np.int64)
        m = t * k
        x = rng.integers(-128, 128, size=(m, h), dtype=np.int8)
        w = rng.integers(-128, 128, size=(e, h, n), dtype=np.int8)
        scale = rng.uniform(1e-3, 2e-3, size=(e, n)).astype(np.float32).astype(bfloat16)
        pt = rng.uniform(1e-3, 2e-3, size=(m,)).astype(np.float32)
        return (x, w), {"scale": scale, "per_token_scale": pt, "group_list": counts, "group_list_type": 1,
                        "output_dtype": "bfloat16"}

    return BenchCase("grouped_matmul", f"T{t}xE{e}xk{k}xN{n}", {"t": t, "m": t, "e": e, "topk": k, "n": n}, build,
                     work=2.0 * t * k * h * n, tags=tags)


@factory
def init_routing_case(t: int, e: int = E, k: int = TOP_K, h: int = H, tags=()) -> BenchCase:
    def build(rng):
        from w8a8 import bfloat16

        ids, _ = _routing(rng, t, e, k)
        x = rng.standard_normal((t, h)).astype(np.float32).astype(bfloat16)
        return (x, ids), {"active_num": t * k, "expert_num": e, "expert_tokens_num_type": 1,
                          "expert_tokens_num_flag": True, "active_expert_range": [0, e], "quant_mode": 1}

    return BenchCase("moe_init_routing_v2", f"T{t}xE{e}xk{k}", {"t": t, "m": t, "e": e, "topk": k}, build,
                     work=t * k * h, unit="elem", tags=tags)


@factory
def swiglu_quant_case(t: int, k: int = TOP_K, i: int = I, tags=()) -> BenchCase:
    def build(rng):
        from w8a8 import bfloat16

        g = rng.standard_normal((t * k, 2 * i)).astype(np.float32).astype(bfloat16)
        return (g,), {"quant_mode": 1, "activate_left": True}

    return BenchCase("dequant_swiglu_quant", f"M{t * k}xI{i}", {"t": t, "m": t, "topk": k}, build,
                     work=t * k * 2 * i, unit="elem", tags=tags)


@factory
def finalize_case(t: int, e: int = E, k: int = TOP_K, h: int = H, tags=()) -> BenchCase:
    def build(rng):
        from w8a8 import bfloat16

        ids, wts = _routing(rng, t, e, k)
        rows = rng.standard_normal((t * k, h)).astype(np.float32).astype(bfloat16)
        idx = rng.permutation(t * k).astype(np.int32)
        return (rows, None, None, None, wts.astype(bfloat16), idx, ids), {"drop_pad_mode": 2}

    return BenchCase("moe_finalize_routing", f"T{t}xk{k}xH{h}", {"t": t, "m": t, "topk": k}, build,
                     work=t * k * h, unit="elem", tags=tags)


@register
def moe_cases(full: bool) -> list[BenchCase]:
    cases: list[BenchCase] = []
    ts = DECODE_M + PREFILL_M if full else (16, 512)
    e = E if full else 16
    for t in ts:
        quick = ("quick",) if t in (16, 512) else ()
        tags = ("dsv4",) + quick
        cases.append(moe_layer_case(t, e, tags=tags + ("scaling:M",)))
        cases.append(grouped_matmul_case(t, e, tags=tags))
        cases.append(init_routing_case(t, e, tags=tags))
        cases.append(swiglu_quant_case(t, tags=tags))
        cases.append(finalize_case(t, e, tags=tags))
    if full:  # the scaling study: experts and top-k at fixed tokens, reduced width
        for e_ in (8, 16, 32, 64):
            cases.append(moe_layer_case(256, e_, 6, 1024, 512, tags=("grid", "scaling:E")))
        for k_ in (1, 2, 4, 8):
            cases.append(moe_layer_case(256, 32, k_, 1024, 512, tags=("grid", "scaling:topk")))
    return cases
