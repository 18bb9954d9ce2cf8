"""``w8a8_moe``: the whole W8A8 MoE layer — routing (given top-k, or a softmax / sigmoid / sqrt-softplus
router) -> moe_init_routing_v2 with dynamic quant -> grouped matmul (W13) -> dequant_swiglu_quant -> grouped
matmul (W2) -> finalize, plus an optional shared expert (two W8A8 dynamic Linears and a SwiGLU)."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, BenchCase, Case, OpDecl, Stage, declare, outputs
from .. import _dsv4
from ._common import (BF16, F32, HAND_HIDDEN, HAND_IDS, HAND_S13, HAND_S2, HAND_W13, HAND_W2, HAND_WEIGHTS,
                      HAND_WHY, HAND_Y, HID, IDS, MOE_FIELDS, MOE_KW, ROUTERS, SH, W4, WTS, bench_experts,
                      bench_experts_count, bench_routing, layer_bad_calls, moe_build, moe_layer, moe_odd_params,
                      moe_params, router_inputs, routing_pattern_inputs, topk, with_)

OP = "w8a8_moe"


def _stage(name):
    def fn(b, a, k, up):
        st_ = w8a8.w8a8_moe_stages(*a, **k)  # the golden's upstream values of each stage
        e = a[1].shape[0]
        if name == "dispatch":
            return b.moe_init_routing_v2(a[0], st_["topk_ids"], active_num=st_["topk_ids"].size, expert_num=e,
                                         expert_tokens_num_type=1, expert_tokens_num_flag=True,
                                         active_expert_range=[0, e], quant_mode=1)[0]
        w13_kn = np.ascontiguousarray(np.swapaxes(a[1], 1, 2))
        w2_kn = np.ascontiguousarray(np.swapaxes(a[3], 1, 2))
        counts = st_["expert_tokens"]
        if name == "gmm1":
            return b.grouped_matmul(st_["expanded_x"], w13_kn, scale=st_["w13_scale"],
                                    per_token_scale=st_["expanded_scale"], group_list=counts, group_list_type=1,
                                    output_dtype="bfloat16")
        if name == "swiglu_quant":
            limit = w8a8.serving.routed_limit(w8a8.serving.get(k.get("serving")), k.get("swiglu_limit"))
            return b.dequant_swiglu_quant(st_["gmm1"], quant_mode=1, activate_left=True, swiglu_limit=limit)[0]
        if name == "gmm2":
            return b.grouped_matmul(st_["act_q"], w2_kn, scale=st_["w2_scale"], per_token_scale=st_["act_scale"],
                                    group_list=counts, group_list_type=1, output_dtype="bfloat16")
        return b.w8a8_moe(*a, **k)
    return fn


STAGES = tuple(Stage(n, kind, _stage(n)) for n, kind in
               (("dispatch", "int"), ("gmm1", "float"), ("swiglu_quant", "int"), ("gmm2", "float"), ("y", "float")))


def _clamp(limit, serving=None):
    def build():
        rng = np.random.default_rng(3)
        w = moe_layer(rng, 4, 32, 16, scale=1.0)
        hidden = (rng.standard_normal((9, 32)) * 4).astype(F32).astype(BF16)
        ids, wts = topk(rng, 9, 4, 2)
        kw = {"topk_ids": ids, "topk_weights": wts, "swiglu_limit": limit}
        return (hidden, *w), kw if serving is None else {**kw, "serving": serving}
    return build


def _dsv4_router(kind: str, serving: str):
    """9 tokens, 8 experts, top-2 from bf16 router logits: hash layer (``tid2eid[input_ids]``) or score layer
    (sqrt-softplus + gate bias), rsf 1.5 on the output, swiglu_limit 10."""
    rng = np.random.default_rng(31)
    w = moe_layer(rng, 8, 32, 16)
    hidden = (rng.standard_normal((9, 32)) * 2).astype(F32).astype(BF16)
    kw = {"top_k": 2, "router_logits": (rng.standard_normal((9, 8)) * 2).astype(F32).astype(BF16),
          "scoring_func": "sqrtsoftplus", "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "serving": serving}
    if kind == "hash":
        kw.update(input_ids=rng.integers(0, 5, 9), tid2eid=np.stack([rng.permutation(8)[:2] for _ in range(5)])
                  .astype(np.int32))
    else:
        kw["correction_bias"] = (rng.standard_normal(8) * 0.1).astype(F32)
    return (hidden, *w), kw


CASES = [
    Case("hand_derived_two_tokens_three_experts_top2",
         lambda: ((HAND_HIDDEN, HAND_W13, HAND_S13, HAND_W2, HAND_S2),
                  {"topk_ids": HAND_IDS, "topk_weights": HAND_WEIGHTS}),
         {"y": HAND_Y}, HAND_WHY),
    Case("swiglu_unclamped_large_activations", _clamp(None),
         why="Weights of scale 1 and hidden states of scale 4: gate values well beyond 0.5 (see the clamped twin)."),
    Case("swiglu_limit_clamps", _clamp(0.5, "vllm-ascend"),
         why="The same layer with swiglu_limit 0.5 composed as vllm-ascend does (the routed experts clamped in the "
             "fused SwiGLU-quant): the clamp changes the result, and both sides must clamp alike."),
    Case("swiglu_limit_unclamped_routed_experts_sglang", _clamp(0.5, "sglang"),
         why="The same layer and swiglu_limit as SGLang's ascend_tp path composes it: no clamp of the routed "
             "experts (its NPUSwigluQuant takes no limit), so the result is the unclamped twin's."),
] + [Case(f"routing_{pattern}_{'shared' if shared else 'routed'}_limit_{limit}",
          (lambda pattern=pattern, shared=shared, limit=limit: routing_pattern_inputs(pattern, shared, limit)),
          why=f"Routing pattern {pattern}: every token to one expert, top-k = E, or random top-2 with two empty "
              f"experts; {'with' if shared else 'without'} a shared expert; swiglu_limit {limit}.")
     for pattern in ("one_expert", "topk_is_e", "random_with_empty") for shared in (False, True)
     for limit in (None, 10.0, 0.5)] + [
    Case(f"router_{name}", (lambda name=name: router_inputs(name)),
         why=f"The layer's own router ({name}): scores, top-3, the weights it hands to finalize, and a shared expert.")
    for name in ROUTERS] + [
    Case(f"dsv4_router_{kind}_layer_{serving.replace('-', '_')}", (lambda kind=kind, serving=serving:
                                                                 _dsv4_router(kind, serving)),
         why=f"DeepSeek-V4's router in the layer (serving row M3), a {kind} layer on bf16 logits, composed as "
             f"{serving} does ({'torch ops in bf16' if serving == 'sglang' else 'moe_gating_top_k_hash'}): "
             "the experts it picks and the weights it hands to finalize.")
    for kind in ("hash", "score") for serving in ("sglang", "vllm-ascend")]

BAD_CALLS = [
    BadCall("hidden_dtype", lambda: ((HID.astype(F32),) + W4, MOE_KW),
            TypeError, r"w8a8_moe: argument 'hidden' must be of dtype bfloat16"),
    BadCall("topk_ids_range", lambda: ((HID,) + W4, {"topk_ids": np.full((3, 2), 4, np.int32), "topk_weights": WTS}),
            ValueError, r"w8a8_moe: argument 'topk_ids' must be expert ids in \[0, E = 4\)"),
    BadCall("w2_shape", lambda: ((HID,) + with_(W4, w2=W4[2][:, :, :4]), MOE_KW),
            ValueError, r"w8a8_moe: argument 'w2' must be of shape \[E, H, I\] = \[4, 16, 8\]"),
    BadCall("router_logits_shape", lambda: ((HID,) + W4, MOE_KW | {"router_logits": np.ones((3, 4), F32)}),
            ValueError, r"w8a8_moe: argument 'router_logits' must be None when topk_ids / topk_weights are given"),
    BadCall(
        "scoring_func_choice",
        lambda: ((HID,) + W4, {"router_logits": np.ones((3, 4), F32), "top_k": 2, "scoring_func": "relu"}),
        ValueError,
        r"w8a8_moe: argument 'scoring_func' must be one of",
    ),
    BadCall(
        "renormalize_value",
        lambda: (
            (HID,) + W4,
            {"router_logits": np.ones((3, 4), F32), "top_k": 2, "scoring_func": "sigmoid", "renormalize": True},
        ),
        ValueError,
        r"w8a8_moe: argument 'renormalize' must be False with scoring_func='sigmoid'",
    ),
    BadCall(
        "shared_expert_value",
        lambda: ((HID,) + W4, MOE_KW | {"shared_expert": {"gate_weight": SH["gate_weight"]}}),
        TypeError,
        r"w8a8_moe: argument 'shared_expert' must be a mapping with exactly the keys",
    ),
    BadCall("w13_rank", lambda: ((HID, np.zeros((4, 16), np.int8)) + W4[1:], MOE_KW),
            ValueError, r"w8a8_moe: argument 'w13' must be 3-D"),
    BadCall("w2_rank", lambda: ((HID, W4[0], W4[1], np.zeros((4, 16), np.int8), W4[3]), MOE_KW),
            ValueError, r"w8a8_moe: argument 'w2' must be 3-D"),
    BadCall("w13_scale_shape", lambda: ((HID, W4[0], np.zeros((4, 16, 2), F32), W4[2], W4[3]), MOE_KW),
            ValueError, r"w8a8_moe: argument 'w13_scale' must be of shape \[E, out, 1\] = \[4, 16, 1\] or \[4, 16\]"),
    BadCall("w2_scale_dtype", lambda: ((HID, W4[0], W4[1], W4[2], W4[3].astype(np.float16)), MOE_KW),
            TypeError, r"w8a8_moe: argument 'w2_scale' must be of dtype float32 or bfloat16"),
    BadCall("top_k_missing", lambda: ((HID,) + W4, dict(router_logits=np.ones((3, 4), F32))),
            ValueError, r"w8a8_moe: argument 'top_k' must be an int"),
    BadCall("router_logits_missing", lambda: ((HID,) + W4, dict(top_k=2)),
            ValueError, r"w8a8_moe: argument 'router_logits' must be the \[T, E\] router logits"),
    BadCall(
        "correction_bias_with_softmax",
        lambda: ((HID,) + W4, dict(router_logits=np.ones((3, 4), F32), top_k=2, correction_bias=np.zeros(4, F32))),
        ValueError,
        r"w8a8_moe: argument 'scoring_func' must be 'sigmoid' or 'sqrtsoftplus' for correction_bias / expert groups / routed_scaling_factor",
    ),
    BadCall("topk_weights_missing", lambda: ((HID,) + W4, dict(topk_ids=IDS)),
            ValueError, r"w8a8_moe: argument 'topk_weights' must be given together with the other"),
    BadCall(
        "swiglu_limit_negative",
        lambda: ((HID,) + W4, dict(swiglu_limit=-1.0, router_logits=np.ones((3, 4), F32), top_k=2)),
        ValueError,
        r"w8a8_moe: argument 'swiglu_limit' must be None or a finite float > 0",
    ),
    BadCall(
        "more_than_1024_groups",
        lambda: (
            (np.array([[1, 2]], np.float32).astype(w8a8.bfloat16),) + moe_layer(np.random.default_rng(0), 1025, 2, 1),
            dict(topk_ids=np.array([[5]], np.int32), topk_weights=np.ones((1, 1), F32)),
        ),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be of at most 1024 groups",
    ),
] + layer_bad_calls(OP)


def _bench_inputs(p, rng):
    t, e, k = p["t"], p["e"], p["topk"]
    w13, s13, w2, s2 = bench_experts(rng, e, p["h"], p["i"])
    ids, wts = bench_routing(rng, t, e, k)
    x = (rng.standard_normal((t, p["h"])).astype(np.float32)).astype(BF16)
    return (x, w13, s13, w2, s2), {"topk_ids": ids, "topk_weights": wts}


def bench_case(t: int, e: int = _dsv4.E, k: int = _dsv4.TOP_K, h: int = _dsv4.H, i: int = _dsv4.I,
               tags=()) -> BenchCase:
    """The layer at T tokens; useful work counts only the rows that exist: 2*T*k*(H*2I + I*H)."""
    return BenchCase(OP, f"T{t}xE{e}xk{k}", {"t": t, "m": t, "e": e, "topk": k, "h": h, "i": i}, _bench_inputs,
                     work=2.0 * t * k * (h * 2 * i + i * h), tags=tags)


def _bench(full: bool) -> list[BenchCase]:
    e = bench_experts_count(full)
    cases = [bench_case(t, e, tags=_dsv4.tags(t, "scaling:M")) for t in _dsv4.token_counts(full)]
    if full:  # the scaling study: experts and top-k at fixed tokens, reduced width
        # DSV4-Flash T = 256 with the real E = 256 (6.4 GB of expert weights, ~6 rows per expert): the
        # regime bound by streaming every expert's weights once (the bandwidth roofline's case)
        cases.append(bench_case(256, _dsv4.E, tags=("dsv4", "roofline")))
        cases += [bench_case(256, e_, 6, 1024, 512, tags=("grid", "scaling:E")) for e_ in (8, 16, 32, 64)]
        cases += [bench_case(256, 32, k_, 1024, 512, tags=("grid", "scaling:topk")) for k_ in (1, 2, 4, 8)]
    return cases


declare(OpDecl(
    name=OP, family="moe", params=moe_params, build=moe_build, strategies={"odd_sizes": moe_odd_params},
    outputs=outputs(("y", "float")), numerics_fields=MOE_FIELDS, stages=STAGES, cases=CASES, bad_calls=BAD_CALLS,
    bench=_bench,
    description="the W8A8 MoE layer: routing -> init_routing_v2 quant -> GMM -> SwiGLU+requant -> GMM -> finalize"))
