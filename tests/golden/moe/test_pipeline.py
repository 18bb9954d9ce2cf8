"""w8a8_moe / w8a8_moe_prequantized: accuracy against a float64 MoE, wiring, bit identity, bad input.

Sizes keep DeepSeek-V4-Flash's proportions (H:I = 2:1, top-6 of many experts) scaled down to run in
seconds: H = 512, I = 256, E = 64, T = 64.
"""

import numpy as np
import pytest

import w8a8
from w8a8 import bfloat16
from w8a8.offline import quantize_weight_per_channel
from w8a8.rounding import to_float

F32 = np.float32
T, H, I, E, K = 64, 512, 256, 64, 6


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # Many tiny GEMMs (a few rows per expert): OpenBLAS's thread hand-off costs more than the work,
    # and on a shared, loaded machine up to 10x more. One thread keeps this file in seconds.
    from threadpoolctl import threadpool_limits
    with threadpool_limits(1, user_api="blas"):
        yield


def sqnr_db(ref: np.ndarray, y: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref ** 2) / np.sum((y.astype(np.float64) - ref) ** 2)))


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(2024)
    w13f = rng.standard_normal((E, 2 * I, H), dtype=F32) * F32(1 / np.sqrt(H))
    w2f = rng.standard_normal((E, H, I), dtype=F32) * F32(1 / np.sqrt(I))
    shared_f = {"gate": rng.standard_normal((I, H), dtype=F32) * F32(1 / np.sqrt(H)),
                "up": rng.standard_normal((I, H), dtype=F32) * F32(1 / np.sqrt(H)),
                "down": rng.standard_normal((H, I), dtype=F32) * F32(1 / np.sqrt(I))}
    w13, s13, _ = quantize_weight_per_channel(w13f)
    w2, s2, _ = quantize_weight_per_channel(w2f)
    shared = {}
    for name, wf in shared_f.items():
        q, s, _ = quantize_weight_per_channel(wf)
        shared[f"{name}_weight"], shared[f"{name}_scale"] = q, s
    hidden = rng.standard_normal((T, H)).astype(F32).astype(bfloat16)
    logits = rng.standard_normal((T, E)).astype(F32)
    bias = (rng.standard_normal(E) * 0.1).astype(F32)
    return dict(w13f=w13f, w2f=w2f, shared_f=shared_f, w13=w13, s13=s13, w2=w2, s2=s2, shared=shared,
                hidden=hidden, logits=logits, bias=bias)


def silu(a):
    return a / (1 + np.exp(-a))


def reference(m, ids, weights, limit=None, shared=False, shared_limit=None):
    """float64 MoE with the float (pre-quantization) weights: out[t] = sum_j w[t, j] * expert_{ids[t, j]}(x[t])."""
    x = m["hidden"].astype(np.float64)
    out = np.zeros((T, H))
    for e in np.unique(ids):
        t, j = np.nonzero(ids == e)
        gu = x[t] @ m["w13f"][e].astype(np.float64).T
        g, u = gu[:, :I], gu[:, I:]                      # gate rows [0, I), up rows [I, 2I)
        if limit is not None:
            g, u = np.minimum(g, limit), np.clip(u, -limit, limit)
        np.add.at(out, t, weights[t, j][:, None] * ((silu(g) * u) @ m["w2f"][e].astype(np.float64).T))
    if shared:
        sf = {k: v.astype(np.float64) for k, v in m["shared_f"].items()}
        g, u = x @ sf["gate"].T, x @ sf["up"].T
        if shared_limit is not None:
            g, u = np.minimum(g, shared_limit), np.clip(u, -shared_limit, shared_limit)
        out += (silu(g) * u) @ sf["down"].T
    return out


def test_softmax_routing_sqnr_against_float64(model):
    stages = w8a8.w8a8_moe_stages(model["hidden"], model["w13"], model["s13"], model["w2"], model["s2"], top_k=K,
                                  router_logits=model["logits"])
    y = stages["y"]
    assert y.dtype == bfloat16 and y.shape == (T, H)
    lg = model["logits"].astype(np.float64)
    p = np.exp(lg - lg.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ids = np.argsort(-p, 1, kind="stable")[:, :K]
    np.testing.assert_array_equal(stages["topk_ids"], ids)          # same experts as the float router
    assert sqnr_db(reference(model, ids, np.take_along_axis(p, ids, 1)), y) >= 30


@pytest.mark.parametrize("serving, routed_clamped", [("vllm-ascend", True), ("sglang", False)])
def test_deepseek_v4_style_routing_clamp_and_shared_expert_sqnr(model, serving, routed_clamped):
    # sqrt-softplus scores, selection bias, renormalised, x 1.5 on the output; the shared expert clamped (both
    # engines, row M5); the routed experts clamped under vllm-ascend only (row M1: SGLang's ascend_tp runs them
    # unclamped). The float reference follows the same engine.
    limit = 1.5   # small enough that the clamp acts on this data (DeepSeek-V4 uses 10 on real activations)
    kw = dict(top_k=K, router_logits=model["logits"], scoring_func="sqrtsoftplus", correction_bias=model["bias"],
              routed_scaling_factor=1.5, swiglu_limit=limit, shared_expert=model["shared"], serving=serving)
    st = w8a8.w8a8_moe_stages(model["hidden"], model["w13"], model["s13"], model["w2"], model["s2"], **kw)
    lg = model["logits"].astype(np.float64)
    s = np.sqrt(np.logaddexp(0, lg))
    ids = np.argsort(-(s + model["bias"]), 1, kind="stable")[:, :K]
    np.testing.assert_array_equal(st["topk_ids"], ids)
    w = np.take_along_axis(s, ids, 1)
    w = w / w.sum(1, keepdims=True) * 1.5
    ref = reference(model, ids, w, limit=limit if routed_clamped else None, shared=True, shared_limit=limit)
    assert sqnr_db(ref, st["y"]) >= 30
    other = reference(model, ids, w, limit=None if routed_clamped else limit, shared=True, shared_limit=limit)
    assert sqnr_db(other, st["y"]) < 20          # the clamp acts here: the other engine's M1 is far off
    # the clamp really acted, and leaving it out is visible
    free = w8a8.w8a8_moe(model["hidden"], model["w13"], model["s13"], model["w2"], model["s2"],
                         **{**kw, "swiglu_limit": None})
    assert sqnr_db(ref, free) < sqnr_db(ref, st["y"]) - 3


def test_prequantized_entry_is_bit_identical(model):
    kw = dict(top_k=K, router_logits=model["logits"], swiglu_limit=2.0, shared_expert=model["shared"])
    y = w8a8.w8a8_moe(model["hidden"], model["w13"], model["s13"], model["w2"], model["s2"], **kw)
    x_q, x_s = w8a8.dispatch_quant(model["hidden"])
    y2 = w8a8.w8a8_moe_prequantized(x_q, x_s, model["w13"], model["s13"], model["w2"], model["s2"],
                                    shared_input=model["hidden"], **kw)
    np.testing.assert_array_equal(y2.view(np.uint16), y.view(np.uint16))


def test_prequantized_does_not_quantize_again(model):
    # Hand the prequantized path scales that differ from what a requant would produce (x2): the
    # per-token scale must be used as given, so the output doubles (up to bf16 rounding: exact here,
    # since every fp32 product just gains a factor 2).
    x_q, x_s = w8a8.dispatch_quant(model["hidden"])
    kw = dict(top_k=K, router_logits=model["logits"])
    a = w8a8.w8a8_moe_prequantized_stages(x_q, x_s, model["w13"], model["s13"], model["w2"], model["s2"], **kw)
    b = w8a8.w8a8_moe_prequantized_stages(x_q, x_s * 2, model["w13"], model["s13"], model["w2"], model["s2"], **kw)
    np.testing.assert_array_equal(b["expanded_x"], a["expanded_x"])
    np.testing.assert_array_equal(b["expanded_scale"], a["expanded_scale"] * 2)
    np.testing.assert_array_equal(b["gmm1"].astype(F32), a["gmm1"].astype(F32) * 2)


@pytest.mark.parametrize("serving", ["sglang", "vllm-ascend"])
def test_stages_follow_the_documented_wiring(model, serving):
    # each engine's composition (w8a8.serving): M1 the routed clamp (vllm-ascend only), M2 the bf16 multiply of
    # the routed output by routed_scaling_factor after the finalize, M5 the shared expert's bf16 clamp (both)
    h, ids_logits = model["hidden"], model["logits"]
    st = w8a8.w8a8_moe_stages(h, model["w13"], model["s13"], model["w2"], model["s2"], top_k=K,
                              router_logits=ids_logits, swiglu_limit=3.0, shared_expert=model["shared"],
                              routed_scaling_factor=2.5, serving=serving)
    y, ids, _ = w8a8.moe_gating_top_k_softmax(ids_logits, k=K)
    x_e, row_idx, counts, s_e = w8a8.moe_init_routing_v2(h, ids, active_num=T * K, expert_num=E,
                                                         expert_tokens_num_type=1, expert_tokens_num_flag=True,
                                                         active_expert_range=[0, E], quant_mode=1)
    s13 = to_float(model["s13"][..., 0], bfloat16)         # checkpoint fp32 [E, 2I, 1] -> bf16 [E, 2I]
    s2w = to_float(model["s2"][..., 0], bfloat16)
    g = w8a8.grouped_matmul(x_e, model["w13"].transpose(0, 2, 1), scale=s13, per_token_scale=s_e, group_list=counts,
                            group_list_type=1, output_dtype="bfloat16")
    a_q, a_s = w8a8.dequant_swiglu_quant(g, quant_mode=1, activate_left=True,
                                         swiglu_limit=3.0 if serving == "vllm-ascend" else None)
    o = w8a8.grouped_matmul(a_q, model["w2"].transpose(0, 2, 1), scale=s2w, per_token_scale=a_s, group_list=counts,
                            group_list_type=1, output_dtype="bfloat16")
    routed = w8a8.moe_finalize_routing(o, None, None, None, y.astype(bfloat16), row_idx, ids, drop_pad_mode=2)
    routed = to_float(routed.astype(F32) * F32(2.5), bfloat16)
    sh = model["shared"]
    gate = w8a8.w8a8_dynamic_linear(h, sh["gate_weight"], sh["gate_scale"])
    up = w8a8.w8a8_dynamic_linear(h, sh["up_weight"], sh["up_scale"])
    gate = np.minimum(gate.astype(F32), 3.0).astype(bfloat16)
    up = np.clip(up.astype(F32), -3.0, 3.0).astype(bfloat16)
    shared = w8a8.w8a8_dynamic_linear(w8a8.swiglu(np.concatenate([gate, up], -1)), sh["down_weight"], sh["down_scale"])
    total = to_float(routed.astype(F32) + shared.astype(F32), bfloat16)
    for name, ref in (("topk_ids", ids), ("expanded_x", x_e), ("expanded_scale", s_e), ("expert_tokens", counts),
                      ("gmm1", g), ("act_q", a_q), ("act_scale", a_s), ("gmm2", o), ("routed", routed),
                      ("shared", shared), ("y", total)):
        np.testing.assert_array_equal(np.asarray(st[name]).view(np.uint8), np.asarray(ref).view(np.uint8), err_msg=name)


def test_given_topk_equals_router_path(model):
    ids = w8a8.w8a8_moe_stages(model["hidden"], model["w13"], model["s13"], model["w2"], model["s2"], top_k=K,
                               router_logits=model["logits"])
    y = w8a8.w8a8_moe(model["hidden"], model["w13"], model["s13"], model["w2"], model["s2"],
                      topk_ids=ids["topk_ids"].astype(np.int64), topk_weights=ids["topk_weights"])
    np.testing.assert_array_equal(y.view(np.uint16), ids["y"].view(np.uint16))


def test_tiny_expert_counts_with_empty_experts():
    # 3 tokens, 5 experts, top-2; experts 1 and 4 get no token. Still exact wiring, no crash.
    rng = np.random.default_rng(5)
    h, i, e = 32, 16, 5
    w13 = rng.integers(-127, 128, (e, 2 * i, h)).astype(np.int8)
    w2 = rng.integers(-127, 128, (e, h, i)).astype(np.int8)
    s13 = np.full((e, 2 * i, 1), 1e-3, F32)
    s2 = np.full((e, h, 1), 1e-3, F32)
    ids = np.array([[0, 2], [3, 0], [2, 3]], np.int32)
    wts = np.array([[0.75, 0.25], [0.5, 0.5], [1.0, 0.0]], F32)
    st = w8a8.w8a8_moe_stages(rng.standard_normal((3, h)).astype(F32).astype(bfloat16), w13, s13, w2, s2,
                              topk_ids=ids, topk_weights=wts)
    np.testing.assert_array_equal(st["expert_tokens"], [2, 0, 2, 2, 0])
    assert st["y"].shape == (3, h) and np.isfinite(st["y"].astype(F32)).all()


def _moe(m, **kw):
    args = dict(top_k=K, router_logits=m["logits"])
    args.update(kw)
    hidden = args.pop("hidden", m["hidden"])
    w13, s13 = args.pop("w13", m["w13"]), args.pop("w13_scale", m["s13"])
    w2, s2 = args.pop("w2", m["w2"]), args.pop("w2_scale", m["s2"])
    return lambda: w8a8.w8a8_moe(hidden, w13, s13, w2, s2, **args)


@pytest.mark.parametrize("kw, exc, arg", [
    (dict(hidden="float16"), TypeError, "hidden"),
    (dict(w13="3d"), ValueError, "w13"),
    (dict(w2="3d"), ValueError, "w2"),
    (dict(w13_scale="shape"), ValueError, "w13_scale"),
    (dict(w2_scale="dtype"), TypeError, "w2_scale"),
    (dict(top_k=None), ValueError, "top_k"),
    (dict(router_logits=None), ValueError, "router_logits"),
    (dict(scoring_func="tanh"), ValueError, "scoring_func"),
    (dict(renormalize=True, scoring_func="sigmoid"), ValueError, "renormalize"),
    (dict(correction_bias="bias"), ValueError, "scoring_func"),
    (dict(router_logits=None, topk_ids="ids"), ValueError, "topk_weights"),
    (dict(topk_ids="ids", topk_weights="w"), ValueError, "router_logits"),
    (dict(router_logits=None, topk_ids="bad_ids", topk_weights="w"), ValueError, "topk_ids"),
    (dict(swiglu_limit=-1.0), ValueError, "swiglu_limit"),
    (dict(shared_expert={"gate_weight": 1}), TypeError, "shared_expert"),
    (dict(numerics=None), TypeError, "numerics"),
])
def test_bad_input(model, kw, exc, arg):
    subs = {"float16": model["hidden"].astype(np.float16), "3d": np.zeros((E, 2 * I), np.int8),
            "shape": np.zeros((E, 2 * I, 2), F32), "dtype": model["s2"].astype(np.float16),
            "bias": model["bias"], "ids": np.zeros((T, K), np.int32), "bad_ids": np.full((T, K), E, np.int32),
            "w": np.ones((T, K), F32)}
    kw = {k: subs.get(v, v) if isinstance(v, str) and k not in ("scoring_func",) else v for k, v in kw.items()}
    with pytest.raises(exc, match=f"'{arg}'"):
        _moe(model, **kw)()


def test_bad_input_prequantized(model):
    x_q, x_s = w8a8.dispatch_quant(model["hidden"])
    args = (model["w13"], model["s13"], model["w2"], model["s2"])
    kw = dict(top_k=K, router_logits=model["logits"])
    with pytest.raises(ValueError, match="'x_scale'"):
        w8a8.w8a8_moe_prequantized(x_q, x_s[:3], *args, **kw)
    with pytest.raises(TypeError, match="'x_q'"):
        w8a8.w8a8_moe_prequantized(x_q.astype(np.int32), x_s, *args, **kw)
    with pytest.raises(ValueError, match="'shared_input'"):
        w8a8.w8a8_moe_prequantized(x_q, x_s, *args, shared_expert=model["shared"], **kw)
