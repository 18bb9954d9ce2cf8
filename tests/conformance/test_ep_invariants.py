"""The expert-parallel invariants (conformance.ep_invariants, docs/expert-parallelism.md): each holds on the
golden layer over drawn rank counts, token counts (0 included) and routings, and each fails on the planted
bug it exists for (conformance.ep_planted)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import w8a8
from conformance import ep_invariants as I
from conformance import ep_planted as P
from conformance.ops.moe._ep import layer_call, layer_params
from w8a8.moe.ep_layer import w8a8_moe_ep_args
from w8a8.rounding import to_float

FIXED = w8a8.ASCEND.replace(variants="fixed")


def checked(p, numerics=FIXED, bf16_weights=False):
    args, kw = layer_call(p)
    if bf16_weights:
        kw["topk_weights"] = [to_float(w, w8a8.bfloat16).astype(np.float32) for w in kw["topk_weights"]]
    return w8a8_moe_ep_args(*args, **kw, numerics=numerics)


def params(**over):
    base = {"r": 4, "e_loc": 2, "k": 3, "tokens": [5, 0, 7, 3], "h": 64, "i": 16, "dispatch": "int8",
            "limit": 10.0, "shared": True, "pattern": "random", "dist": "gaussian", "seed": 3}
    return {**base, **over}


@settings(max_examples=30, deadline=None)
@given(p=layer_params())
def test_every_invariant_holds_on_the_golden(p):
    a = checked(p)
    st_ = w8a8.w8a8_moe_ep_stages(*_inputs(a), **_routing(a), numerics=FIXED)
    assert I.violations(st_, a, FIXED) == {name: [] for name in I.INVARIANTS}
    assert I.combine_restores_token_order(a) == []


def _inputs(a):
    return (a.hidden, a.experts.w13, a.experts.w13_scale, a.experts.w2, a.experts.w2_scale)


def _routing(a):
    return {"topk_ids": a.topk_ids, "topk_weights": a.topk_weights, "dispatch": a.dispatch,
            "swiglu_limit": a.swiglu_limit, "shared_expert": a.shared_expert}


@settings(max_examples=10, deadline=None)
@given(p=layer_params(), r=st.sampled_from((1, 2, 4, 8)))
def test_claims_hold_on_drawn_layers(p, r):
    # the conditions of the claims: mc2 formula (the default), bf16-grid weights, no smooth scales, variants fixed
    a = checked(p, bf16_weights=True)
    assert I.claim_a(a, FIXED) == [] and I.claim_b(a, FIXED) == []
    assert I.rank_count_invariance(a, FIXED, ranks=(r, p["r"])) == []


# each plant, the invariant that must name it, and words of the violation
CAUGHT = [
    ("quantizes_twice", "no_second_quantization", "ran the quantizer 1 times on the int8 path"),
    ("drops_scale_requantizes_with_routing_formula", "no_second_quantization", "without their scale"),
    ("combine_bf16_weights", "combine_formula", "not the fp32-weight sum"),
    ("arrival_order", "canonical_order", "out of the canonical (l, source, f) order"),
    ("arrival_order", "every_copy_arrives_once", "in the wrong local-expert block"),
]


@pytest.mark.parametrize("plant, invariant, words", CAUGHT, ids=[f"{p}-{i}" for p, i, _ in CAUGHT])
def test_each_planted_bug_fails_its_invariant(plant, invariant, words):
    a = checked(params())
    found = I.violations(P.run(plant, a, FIXED), a, FIXED)[invariant]
    assert found and any(words in v for v in found), found
    assert I.violations(w8a8.w8a8_moe_ep_stages(*_inputs(a), **_routing(a), numerics=FIXED), a, FIXED)[invariant] == []


def test_quantizes_twice_is_invisible_in_the_outputs_here():
    # re-quantizing a dequantized int8 row gives back the same codes and scale on this data, so Claims A and B
    # hold for the plant: only the instrumented quantizer count (no_second_quantization) catches it
    a = checked(params(), bf16_weights=True)
    assert I.claim_a(a, FIXED, layer=P.layer("quantizes_twice")) == []
    assert I.violations(P.run("quantizes_twice", a, FIXED), a, FIXED)["no_second_quantization"]


def test_routing_formula_plant_fails_claim_a_on_larger_data():
    # the init_routing_v2 formula's scales (m / 127) are one ulp away from 1 / (127 / m) on many rows: over
    # 96 tokens at H = 512 the outputs differ (pinned on this data)
    a = checked(params(tokens=[40, 0, 56, 0], h=512, i=64, seed=7, shared=False), bf16_weights=True)
    assert I.claim_a(a, FIXED) == []
    assert I.claim_a(a, FIXED, layer=P.layer("drops_scale_requantizes_with_routing_formula")) != []


def test_bf16_weight_combine_fails_claim_a_only_off_the_bf16_grid():
    # fp32 weights off the bf16 grid: the golden EP combine differs from the (bf16-weight) single-process layer
    # and the plant agrees with it; on the grid, the plant is invisible to Claim A and combine_formula decides
    off = checked(params(shared=False))
    assert I.claim_a(off, FIXED) != []
    assert I.claim_a(off, FIXED, layer=P.layer("combine_bf16_weights")) == []
    on = checked(params(shared=False), bf16_weights=True)
    assert I.claim_a(on, FIXED, layer=P.layer("combine_bf16_weights")) == []


def test_combine_restores_token_order_fails_on_a_wrong_gather():
    a = checked(params())

    def rotating_combine(y, recv, b, numerics):      # token t gets token t + 1's rows
        from w8a8.moe.ep_layer import ep_combine
        return [np.roll(v, 1, axis=0) for v in ep_combine(y, recv, b, numerics)]

    assert I.combine_restores_token_order(a, combiner=rotating_combine)
    assert I.combine_restores_token_order(a) == []
