"""torch-cpu against the golden, bit for bit, on every grouped-MoE op (backends/torch_cpu/moe_*.py).

The reference is the golden run with the numerics torch-cpu declares (:data:`w8a8.ASCEND`): every
output must have the same dtype, shape and bytes — including the rows the device leaves unspecified
(torch-cpu writes the golden's fill there: zeros, -1), so nothing is masked here — and every call the
golden rejects must be rejected with the same exception type and message. Hypothesis draws the
conformance strategies of each op (``conformance.registry``: empty experts, one expert for all tokens,
top-k = E, partial group lists, capacity drops, ...); named cases pin the values by hand: a whole W8A8
MoE layer of 2 tokens / 3 experts / top-2 with expert 1 empty, every token to one expert, top-k = E,
the three group-list forms, drop/pad routing, every finalize mode, the GMM activations and the
packed-scale requant, and the errors raised between the stages of the layer, in the golden's order.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

import backends
import w8a8
from backends.numpy_backend import NumpyBackend
from backends.testing import BitwiseChecker, outcome  # noqa: F401 (outcome: used by some tests)
from backends.testing import assert_bits as _assert_bits
from conformance import corpus, registry
from conformance.evaluate import run_case

torch = pytest.importorskip("torch")

from backends.torch_cpu.moe_experts import path_override  # noqa: E402 (imports torch)

pytestmark = pytest.mark.torch

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32
TC = backends.get("torch-cpu")
GOLDEN = NumpyBackend(numerics=TC.numerics)
MOE_OPS = backends.ops.MOE_OPS


# -- comparison helpers (backends.testing) ---------------------------------------------------------

CHECK = BitwiseChecker(TC)
check_same = CHECK.same
check_raises = CHECK.raises


def assert_bits(got, want, what="result"):
    _assert_bits(got, want, what, "torch-cpu")

def bf16(values):
    return np.asarray(values, F32).astype(BF16)


def i8(rng, *shape):
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def moe_layer(rng, e, h, i, scale=0.05):
    """Random checkpoint-layout experts (int8 per-channel), as the conformance strategies build them."""
    w13, s13, _ = w8a8.quantize_weight_per_channel(rng.standard_normal((e, 2 * i, h)).astype(F32) * F32(scale))
    w2, s2, _ = w8a8.quantize_weight_per_channel(rng.standard_normal((e, h, i)).astype(F32) * F32(scale))
    return w13, s13, w2, s2


def shared_expert(rng, h, i, scale=0.05):
    out = {}
    for name, (n, k) in {"gate": (i, h), "up": (i, h), "down": (h, i)}.items():
        w, s, _ = w8a8.quantize_weight_per_channel(rng.standard_normal((n, k)).astype(F32) * F32(scale))
        out[f"{name}_weight"], out[f"{name}_scale"] = w, s
    return out


def topk(rng, t, e, k):
    """Distinct expert ids per token (int32 [t, k]) and fp32 weights."""
    ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32) if t else np.zeros((0, k), np.int32)
    return ids, rng.uniform(0.05, 1.0, size=(t, k)).astype(F32)


# -- the backend ------------------------------------------------------------------------------------------

def test_every_moe_op_is_implemented_under_the_ascend_record():
    assert set(MOE_OPS) <= set(TC.ops())
    assert TC.numerics == w8a8.ASCEND
    with pytest.raises(backends.Unsupported, match="transcendental"):
        TC.call("swiglu", np.ones((2, 4), F32), numerics=w8a8.ASCEND.replace(transcendental="float32"))


def test_the_validators_are_public_and_importable():
    # The golden's MoE argument checks, shared with torch-cpu and the torch-npu lowering.
    for op in w8a8.registry.ops("moe"):
        assert callable(op.check) and op.check.__name__ == f"{op.name}_args", op.name


# -- Hypothesis over the conformance strategies, every op --------------------------------------------

GEMM_OPS = ("grouped_matmul", "w8a8_moe", "w8a8_moe_prequantized")
OP_PATHS = [(op, "auto") for op in MOE_OPS] + [(op, "int_mm") for op in GEMM_OPS]


@pytest.mark.parametrize("op, path", OP_PATHS, ids=[f"{op}-{path}" for op, path in OP_PATHS])
@given(data=st.data())
def test_matches_the_golden_on_the_conformance_strategies(op, path, data):
    # "auto" is fbgemm's prepacked GEMM on AVX512-VNNI CPUs, int_mm elsewhere; int_mm is also forced.
    spec = registry.get(op)
    params = data.draw(spec.params(), label="params")
    args, kwargs = spec.build(params)
    with path_override(path):
        check_same(op, *args, **kwargs)   # unmasked: torch-cpu writes the golden's fill in unspecified rows


@pytest.mark.parametrize("key", [c.key for op in MOE_OPS for c in corpus.cases(op)])
def test_named_corpus_cases_pass_the_conformance_runner(key):
    # The hand-derived routing cases (2 tokens, 3 experts, top-2, expert 1 empty; v1 and v2): the runner
    # checks the golden and torch-cpu against the documented values, then against each other.
    named = corpus.get(key)
    result = run_case(registry.get(named.op), {"corpus": key}, TC)
    assert result["status"] == "pass", result
    assert "expected_mismatch" not in result


# -- the whole layer, by hand: 2 tokens, 3 experts, top-2, expert 1 empty -------------------------------

# hidden rows [127, 0] and [0, 127]: dispatch scale 127/127 = 1.0, codes [127, 0] / [0, 127].
HAND_HIDDEN = bf16([[127, 0], [0, 127]])
HAND_IDS = np.array([[2, 0], [0, 2]], np.int32)            # expert 1 gets no token
HAND_WEIGHTS = np.array([[0.5, 0.25], [0.75, 0.25]], F32)  # exact in bf16
# W13 [E, 2I, H] with I = 1: row 0 gate, row 1 up. Expert 0: gate [1, 1], up [1, 1]; expert 2: gate [1, 1],
# up [1, -1]. Gate scale 1.0, up scale 2^-7 (bf16-exact).
HAND_W13 = np.array([[[1, 1], [1, 1]], [[7, 7], [7, 7]], [[1, 1], [1, -1]]], np.int8)
HAND_S13 = np.array([[[1.0], [2.0 ** -7]]] * 3, F32)
HAND_W2 = np.array([[[1], [2]], [[5], [5]], [[-1], [1]]], np.int8)   # [E, H, I]
HAND_S2 = np.full((3, 2, 1), 2.0 ** -7, F32)


def test_hand_derived_layer_two_tokens_three_experts_top2_one_empty():
    # Every (token, expert) pair: gate = 127 * 1.0 = 127, up = +-127 * 2^-7 = +-0.9921875 (bf16-exact).
    # silu(127) = 127 / (1 + exp(-127)) = 127 (exp(-127) is 0 in fp32), so o = +-126.0078125 (exact).
    # Requant: s2 = 126.0078125 * fp32(1/127) = 0.9921875 (127 * fp32(1/127) is 1.0 in fp32 and the
    # product's error is below half an ulp), code = rint(o / s2) = +-127.
    # GMM2: 127 * w2 * 2^-7 * 0.9921875 = 16129 * w2 / 16384, rounded to bf16: w2 = 1 -> 0.98443604
    # -> 0.984375 (252/256); w2 = 2 -> 1.96887207 -> 1.96875. So expert 0 gives [0.984375, 1.96875]
    # for both tokens; expert 2 gives [-0.984375, 0.984375] for token 0 (code +127, w2 = [-1, 1]) and
    # [0.984375, -0.984375] for token 1 (up = -127 * 2^-7, code -127).
    # Finalize, slot by slot in fp32: token 0 = 0.5 * e2 + 0.25 * e0 = [-0.4921875 + 0.24609375,
    # 0.4921875 + 0.4921875] = [-0.24609375, 0.984375]; token 1 = 0.75 * e0 + 0.25 * e2 =
    # [0.73828125 + 0.24609375, 1.4765625 - 0.24609375] = [0.984375, 1.23046875], and 1.23046875 =
    # 157.5 / 128 is a bf16 tie: to even -> 158 / 128 = 1.234375.
    want = bf16([[-0.24609375, 0.984375], [0.984375, 1.234375]])
    kw = dict(topk_ids=HAND_IDS, topk_weights=HAND_WEIGHTS)
    y = check_same("w8a8_moe", HAND_HIDDEN, HAND_W13, HAND_S13, HAND_W2, HAND_S2, **kw)
    assert_bits(y, want)
    # The same tokens arriving as an INT8 dispatch (codes and scale 1.0 written out).
    x_q, x_s = np.array([[127, 0], [0, 127]], np.int8), np.ones(2, F32)
    assert_bits(check_same("w8a8_moe_prequantized", x_q, x_s, HAND_W13, HAND_S13, HAND_W2, HAND_S2, **kw), want)


def test_hand_derived_grouped_matmul_in_all_three_group_list_forms():
    # Groups 0: rows 0-2, 1: empty, 2: rows 3-4; row 5 is past the total (the golden writes 0 there).
    x = np.array([[1, 0], [0, 1], [1, 1], [2, 0], [0, 3], [9, 9]], np.int8)
    w = np.array([[[1, 2], [3, 4]], [[7, 7], [7, 7]], [[-1, 0], [0, -1]]], np.int8)   # [E, K, N]
    want = np.array([[1, 2], [3, 4], [4, 6], [-2, 0], [0, -3], [0, 0]], np.int32)   # x @ w[group]
    for gl, t in ((np.array([3, 3, 5]), 0), (np.array([3, 0, 2]), 1), (np.array([[0, 3], [2, 2]]), 2)):
        y = check_same("grouped_matmul", x, w, group_list=gl.astype(np.int64), group_list_type=t,
                       output_dtype="int32")
        assert_bits(y, want)
    # type 2 takes the pairs in their order: rows 0-1 -> expert 2 (-x), rows 2-4 -> expert 0
    # ([1, 1] -> [4, 6], [2, 0] -> [2, 4], [0, 3] -> [9, 12])
    y = check_same("grouped_matmul", x, w, group_list=np.array([[2, 2], [0, 3]], np.int64), group_list_type=2,
                   output_dtype="int32")
    assert_bits(y, np.array([[-1, 0], [0, -1], [4, 6], [2, 4], [9, 12], [0, 0]], np.int32))


def test_hand_derived_drop_pad_routing():
    # Experts of tokens 0, 1, 2: 0, 0, 1; capacity 1: token 1 is expert 0's second token -> dropped (-1).
    # Slots e*C + rank: token 0 -> 0, token 2 -> 1. Counts are before the drop: [2, 1].
    x = bf16([[1, 2], [3, 4], [5, 6]])
    ids = np.array([[0], [0], [1]], np.int32)
    kw = dict(expert_num=2, expert_capacity=1, drop_pad_mode=1, expert_tokens_num_type=1,
              expert_tokens_num_flag=True, active_expert_range=[0, 2], quant_mode=-1)
    ex, row, counts, scale = check_same("moe_init_routing_v2", x, ids, **kw)
    assert_bits(ex, bf16([[[1, 2]], [[5, 6]]]))
    assert row.tolist() == [0, -1, 1] and counts.tolist() == [2, 1] and scale.shape == (2,)
    # capacity 2: [e0: token 0, token 1 | e1: token 2, empty slot (zeros)]
    ex, row, _, _ = check_same("moe_init_routing_v2", x, ids, **(kw | {"expert_capacity": 2}))
    assert_bits(ex, bf16([[[1, 2], [3, 4]], [[5, 6], [0, 0]]]))
    assert row.tolist() == [0, 1, 2]


@pytest.mark.parametrize("mode, want", [
    # rows 1, 2, 3, 4; idx [2, 0, 3, 1]; scales [[0.5, 0.25], [1, 2]].
    # modes 0/1 read idx column-major (slot j of token i at j*N + i): token 0 -> rows 2, 3 (values 3, 4):
    # 0.5*3 + 0.25*4 = 2.5; token 1 -> rows 0, 1: 1*1 + 2*2 = 5.
    (0, [2.5, 5.0]), (1, [2.5, 5.0]),
    # modes 2/3 read it row-major (i*K + j): token 0 -> rows 2, 0: 0.5*3 + 0.25*1 = 1.75; token 1 ->
    # rows 3, 1: 1*4 + 2*2 = 8.
    (2, [1.75, 8.0]), (3, [1.75, 8.0]),
])
def test_hand_derived_finalize_modes(mode, want):
    rows = np.array([[1], [2], [3], [4]], F32)
    idx = np.array([2, 0, 3, 1], np.int32)
    scales = np.array([[0.5, 0.25], [1, 2]], F32)
    y = check_same("moe_finalize_routing", rows, None, None, None, scales, idx, None, drop_pad_mode=mode)
    assert y[:, 0].tolist() == want


def test_hand_derived_finalize_dropped_slot_skips_and_bias():
    # Mode 3, idx [2, -1, 3, 1]: token 0's slot 1 is dropped. H = 1, K = 2 runs the all-bias template,
    # which skips a dropped slot entirely, bias included (ops-transformer
    # moe_finalize_routing_v2_fp_db_all_bias.h:477-494 @ c29bc106): out0 = 0.5 * (3 + b[e0]) + 0;
    # token 1 = 1 * (4 + b[e1]) + 2 * (2 + b[e0]). b = [10, 100] (experts [[0, 1], [1, 0]]),
    # skip1 = [1, 2], skip2 = [0.5, 0.5]: out0 = 1.5 + 0.5*13 = 8.0; out1 = 2.5 + 104 + 2*12 = 130.5.
    rows = np.array([[1], [2], [3], [4]], F32)
    idx = np.array([2, -1, 3, 1], np.int32)
    y = check_same("moe_finalize_routing", rows, np.array([[1], [2]], F32), np.array([[0.5], [0.5]], F32),
                   np.array([[10], [100]], F32), np.array([[0.5, 0.25], [1, 2]], F32), idx,
                   np.array([[0, 1], [1, 0]], np.int32), drop_pad_mode=3)
    assert y[:, 0].tolist() == [8.0, 130.5]
    # Without scales, K comes from k; every weight is 1: token 0 = 3 + 0, token 1 = 4 + 2 (mode 3)
    y = check_same("moe_finalize_routing", rows, None, None, None, None, idx, None, drop_pad_mode=3, k=2)
    assert y[:, 0].tolist() == [3.0, 6.0]


# -- routing patterns on the whole layer -----------------------------------------------------------------

@pytest.mark.parametrize("pattern", ["one_expert", "topk_is_e", "random_with_empty"])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("limit", [None, 10.0, 0.5])
def test_layer_routing_patterns(pattern, shared, limit):
    rng = np.random.default_rng(7)
    t, e, h, i = 17, 5, 32, 16
    w = moe_layer(rng, e, h, i)
    hidden = (rng.standard_normal((t, h)) * 2).astype(F32).astype(BF16)
    if pattern == "one_expert":   # every token to expert 3: one group of T rows, the others empty
        ids, wts = np.full((t, 1), 3, np.int32), np.ones((t, 1), F32)
    elif pattern == "topk_is_e":   # every expert for every token
        ids, wts = topk(rng, t, e, e)
    else:
        ids, wts = topk(rng, t, e - 2, 2)   # experts 3 and 4 empty
    kw = dict(topk_ids=ids, topk_weights=wts, swiglu_limit=limit)
    if shared:
        kw["shared_expert"] = shared_expert(rng, h, 24)
    y = check_same("w8a8_moe", hidden, *w, **kw)
    x_q, x_s = w8a8.dispatch_quant(hidden)
    pre = check_same("w8a8_moe_prequantized", x_q, x_s, *w, shared_input=hidden if shared else None, **kw)
    assert_bits(pre, y)   # the pre-quantized entry point on the INT8 dispatch of hidden: identical


@pytest.mark.parametrize("threads", [1, 2])
def test_layer_many_tokens_across_workers_and_finalize_blocks(threads):
    # 75 tokens: three finalize blocks of 32 (the last partial), experts dealt to two worker threads
    # (or run one after the other with one torch thread); the result must not depend on either.
    from backends.torch_cpu import moe_layer as ml

    rng = np.random.default_rng(21)
    w = moe_layer(rng, 9, 32, 16)
    hidden = rng.standard_normal((75, 32)).astype(F32).astype(BF16)
    ids, wts = topk(rng, 75, 9, 3)
    previous = torch.get_num_threads()
    claimed = ml.claim_threads()["torch_threads"]
    try:
        torch.set_num_threads(threads)
        ml.claim_threads()["torch_threads"] = threads
        check_same("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts, shared_expert=shared_expert(rng, 32, 8))
    finally:
        ml.claim_threads()["torch_threads"] = claimed
        torch.set_num_threads(previous)


def test_swiglu_limit_clamps_for_real():
    # Large activations so that gate values exceed L = 0.5: the clamp must change the result (and match).
    rng = np.random.default_rng(3)
    w = moe_layer(rng, 4, 32, 16, scale=1.0)
    hidden = (rng.standard_normal((9, 32)) * 4).astype(F32).astype(BF16)
    ids, wts = topk(rng, 9, 4, 2)
    free = check_same("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts)
    clamped = check_same("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts, swiglu_limit=0.5)
    assert not np.array_equal(free.view(np.uint16), clamped.view(np.uint16))


@pytest.mark.parametrize("scoring, kw", [
    ("softmax", {}), ("softmax", {"renormalize": True}), ("sigmoid", {"routed_scaling_factor": 2.5}),
    ("sqrtsoftplus", {"routed_scaling_factor": 1.5, "k_group": 2, "group_count": 4, "group_select_mode": 1}),
])
def test_layer_with_the_router(scoring, kw):
    rng = np.random.default_rng(11)
    t, e, h, i = 13, 8, 32, 16
    w = moe_layer(rng, e, h, i)
    hidden = rng.standard_normal((t, h)).astype(F32).astype(BF16)
    logits = rng.standard_normal((t, e)).astype(F32)
    if scoring != "softmax":
        kw = kw | {"correction_bias": (rng.standard_normal(e) * 0.1).astype(F32)}
    se = shared_expert(rng, h, 8)
    route = dict(router_logits=logits, top_k=3, scoring_func=scoring, shared_expert=se) | kw
    y = check_same("w8a8_moe", hidden, *w, **route)
    pre = check_same("w8a8_moe_prequantized", *w8a8.dispatch_quant(hidden), *w, shared_input=hidden, **route)
    assert_bits(pre, y)


@given(seed=st.integers(0, 2 ** 32 - 1), t=st.sampled_from([1, 2, 7, 17]), e=st.integers(1, 9),
       h=st.sampled_from([1, 7, 16, 33]), i=st.sampled_from([1, 4, 9]), shared=st.booleans(),
       limit=st.sampled_from([None, 0.25, 7.0]), scale=st.sampled_from([0.01, 0.3, 3.0]))
def test_layer_property_prequantized_equals_quantizing(seed, t, e, h, i, shared, limit, scale):
    # Odd sizes (H = 1, 7, 33; I = 1, 9), any E (1 expert too), random top-k with empty experts.
    rng = np.random.default_rng(seed)
    w = moe_layer(rng, e, h, i, scale=scale)
    hidden = (rng.standard_normal((t, h)) * scale * 10).astype(F32).astype(BF16)
    ids, wts = topk(rng, t, e, int(rng.integers(1, e + 1)))
    kw = dict(topk_ids=ids, topk_weights=wts, swiglu_limit=limit)
    if shared:
        kw["shared_expert"] = shared_expert(rng, h, i + 3)
    y = check_same("w8a8_moe", hidden, *w, **kw)
    pre = check_same("w8a8_moe_prequantized", *w8a8.dispatch_quant(hidden), *w,
                     shared_input=hidden if shared else None, **kw)
    if y is not None:
        assert_bits(pre, y)


# -- grouped matmul beyond the conformance strategies -----------------------------------------------------

@given(seed=st.integers(0, 2 ** 32 - 1), act=st.sampled_from([1, 2, 4, 5]), m=st.sampled_from([1, 7, 17, 40]),
       k=st.sampled_from([1, 7, 64, 1025]), n=st.sampled_from([1, 7, 33]), e=st.integers(1, 5),
       out=st.sampled_from(["bfloat16", "float16"]), big=st.booleans(), bias=st.booleans())
def test_grouped_matmul_activations(seed, act, m, k, n, e, out, big, bias):
    # act_type 1 relu (-0.0 -> +0.0 as np.maximum), 2 gelu_tanh, 4 fast_gelu, 5 silu, after the per-token
    # dequant; ``big`` scales push fp32 products to +-Inf (silu(-Inf) = NaN: its bits must match too).
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(m, np.ones(e) / e)
    counts[rng.integers(e)] = 0
    x, w = i8(rng, m, k), i8(rng, e, k, n)
    s = (rng.uniform(0.5, 2, (e, n)) * (1e30 if big else 1e-4)).astype(F32)
    s[0, 0] = -s[0, 0]                      # a negative channel scale: exact zeros become -0.0
    kw = dict(scale=s.astype(BF16 if out == "bfloat16" else F32),
              per_token_scale=rng.uniform(0.5, 2, m).astype(F32) * F32(1e10 if big else 1e-2),
              group_list=counts.astype(np.int64), group_list_type=1, act_type=act, output_dtype=out)
    if bias:
        kw["bias"] = rng.integers(-1000, 1000, (e, n)).astype(np.int32)
    check_same("grouped_matmul", x, w, **kw)


@given(seed=st.integers(0, 2 ** 32 - 1), offset=st.booleans(), m=st.sampled_from([1, 9, 30]), e=st.integers(1, 4))
def test_grouped_matmul_packed_scale_int8_output(seed, offset, m, e):
    # int64 trans_quant_param scale -> int8 requant (FP19 scale, 9-bit offset steps), per expert.
    rng = np.random.default_rng(seed)
    k, n = 48, 17
    scale = rng.uniform(1e-4, 1e-2, (e, n)).astype(F32)
    off = rng.uniform(-20, 20, (e, n)).astype(F32) if offset else None
    packed = w8a8.trans_quant_param(scale, off)
    counts = rng.multinomial(m, np.ones(e) / e).astype(np.int64)
    for dtype in (np.int64, np.uint64):
        check_same("grouped_matmul", i8(rng, m, k), i8(rng, e, k, n), scale=packed.view(dtype),
                   bias=rng.integers(-500, 500, (e, n)).astype(np.int32), group_list=counts, group_list_type=1)


def test_grouped_matmul_list_form_and_transposed_weights():
    rng = np.random.default_rng(5)
    x, w = i8(rng, 10, 64), i8(rng, 3, 64, 32)
    gl = np.array([4, 0, 6], np.int64)
    y = check_same("grouped_matmul", [x], [np.ascontiguousarray(w.transpose(0, 2, 1)).transpose(0, 2, 1)],
                   scale=[rng.uniform(1e-3, 1e-2, (3, 32)).astype(F32)], group_list=gl, group_list_type=1,
                   output_dtype="float16")
    assert isinstance(y, list) and len(y) == 1


# -- gating, routing, SwiGLU beyond the strategies -------------------------------------------------------

def test_gating_softmax_3d_and_finished_rows():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 6)).astype(F32).astype(BF16)
    fin = np.array([[True, False, False], [False, False, True]])
    _, idx, row = check_same("moe_gating_top_k_softmax", x, fin, k=2)
    assert idx[0, 0].tolist() == [6, 6] and row[1, 2].tolist() == [5, 11]   # row_idx = j * N + t, N = 6


def test_gating_ties_keep_the_lower_expert():
    # Equal logits -> equal scores: the stable sort keeps ascending expert order (0, 1), as the golden.
    x = np.zeros((3, 4), F32)
    x[1, 2] = 1.0
    _, idx, _ = check_same("moe_gating_top_k_softmax", x, None, 2)
    assert idx.tolist() == [[0, 1], [2, 0], [0, 1]]
    _, idx, _ = check_same("moe_gating_top_k", x, 2, norm_type=1)
    assert idx.tolist() == [[0, 1], [2, 0], [0, 1]]


@pytest.mark.parametrize("kw", [dict(renorm=1), dict(norm_type=2, eps=0.0), dict(norm_type=1, routed_scaling_factor=0.1),
                                dict(k_group=1, group_count=4, group_select_mode=1, norm_type=2)])
def test_gating_top_k_options(kw):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((9, 16)) * 5).astype(F32).astype(np.float16)
    check_same("moe_gating_top_k", x, 3, bias=(rng.standard_normal(16) * 0.1).astype(np.float16), **kw)
    x[0] = -0.0   # sqrt-softplus of -0.0: max(-0.0, 0) + log1p(exp(-0)) = log(2)
    check_same("moe_gating_top_k", x, 3, **kw)


def test_gating_top_k_hash_mode():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 12)).astype(F32)
    table = rng.integers(0, 12, (20, 3)).astype(np.int64)
    for norm in (0, 1, 2):
        _, idx, _ = check_same("moe_gating_top_k", x, 3, input_ids=np.array([0, 19, 4, 4, 7], np.int32),
                               tid2eid=table, k_group=1, group_count=1, norm_type=norm)
        assert idx.tolist() == table[[0, 19, 4, 4, 7]].tolist()


@given(seed=st.integers(0, 2 ** 32 - 1), t=st.sampled_from([1, 3, 17]), h=st.sampled_from([1, 8, 33]),
       scale=st.floats(1e-3, 1e3), offset=st.floats(-200, 200))
def test_routing_v2_static_quant_fp16_math(seed, t, h, scale, offset):
    # quant_mode=0: fp16(x) * fp16(s) rounded to fp16, + fp16(o) rounded to fp16 (once: NumPy's float64 ->
    # float16 cast; torch's rounds twice through float32 and needs round-to-odd, see moe_math.f64_to_f16).
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((t, h)) * 50).astype(F32).astype(BF16)
    ids = rng.integers(0, 4, (t, 2)).astype(np.int32)
    check_same("moe_init_routing_v2", x, ids, scale=np.array([scale], F32), offset=np.array([offset], F32),
               expert_num=4, quant_mode=0, expert_tokens_num_type=2, expert_tokens_num_flag=True)


def test_f64_to_f16_rounds_once():
    # 1 + 2^-11 + 2^-40 is just above the fp16 midpoint between 1 and 1 + 2^-10: one rounding gives
    # 1 + 2^-10 (1.0009765625); through fp32 it first becomes 1 + 2^-11 exactly (a tie) -> 1.0 (even).
    from backends.torch_cpu.moe_math import f64_to_f16

    v = torch.tensor([1 + 2 ** -11 + 2 ** -40, -(1 + 2 ** -11 + 2 ** -40), 1 + 2 ** -11, 65520.0, 1e-8, 3.0],
                     dtype=torch.float64)
    got = f64_to_f16(v).numpy()
    with np.errstate(over="ignore"):
        assert_bits(got, v.numpy().astype(np.float16))
    assert got[0] == np.float16(1.0009765625) and got[2] == np.float16(1.0) and np.isinf(got[3])


def test_sqrt_is_the_correctly_rounded_one():
    # torch's float32 sqrt is a vector approximation (differs from IEEE for ~16% of arguments here).
    from backends.torch_cpu.moe_math import sqrt32

    x = np.random.default_rng(0).uniform(0, 10, 100_000).astype(F32)
    assert_bits(sqrt32(torch.from_numpy(x)).numpy(), np.sqrt(x))


@pytest.mark.parametrize("case", ["scalar_zero", "scalar", "bias", "float", "smooth", "groups_empty"])
def test_dequant_swiglu_quant_modes(case):
    rng = np.random.default_rng(9)
    t, h = 9, 64
    x = rng.integers(-40000, 40000, (t, 2 * h)).astype(np.int32)
    kw = dict(weight_scale=rng.uniform(1e-4, 1e-3, (1, 2 * h)).astype(F32),
              activation_scale=rng.uniform(1e-3, 1e-2, (t, 1)).astype(F32), swiglu_limit=3.0)
    if case == "scalar_zero":   # a zero [1] static scale is replaced by 1: codes = rint(o * 1 + offset)
        kw.update(quant_mode=0, quant_scale=np.zeros(1, F32), quant_offset=np.array([2.5], F32))
    elif case == "scalar":
        kw.update(quant_mode=0, quant_scale=np.array([0.01], F32), activate_left=True)
    elif case == "bias":
        kw.update(quant_mode=1, bias=rng.integers(-100, 100, 2 * h).astype(np.int32))
    elif case == "float":
        x, kw = x.astype(F32).astype(np.float16) / np.float16(4096), dict(quant_mode=1, activate_left=True)
    elif case == "smooth":
        kw.update(quant_mode=1, quant_scale=rng.uniform(0.5, 2, (1, h)).astype(BF16))
    else:   # groups 1 and 3 empty, rows past the total (7) zeros with scale 0
        kw.update(quant_mode=1, weight_scale=rng.uniform(1e-4, 1e-3, (4, 2 * h)).astype(F32),
                  group_index=np.array([3, 0, 4, 0], np.int64), quant_scale=rng.uniform(0.5, 2, (4, h)).astype(F32))
    y, s = check_same("dequant_swiglu_quant", x, **kw)
    if case == "groups_empty":
        assert not y[7:].any() and not s[7:].any()


def test_swiglu_other_dims_and_extremes():
    x = np.array([[-3e38, 3e38, -0.0, 5.0], [100.0, -100.0, 1e-40, 2.0]], F32)
    check_same("swiglu", x)
    check_same("swiglu", np.ascontiguousarray(x.T), dim=0)
    check_same("swiglu", x.astype(BF16).reshape(2, 2, 2), dim=1)


# -- bad input: the golden's exception and message --------------------------------------------------------

_R = np.random.default_rng(1)
_W = moe_layer(_R, 4, 16, 8)
_H = _R.standard_normal((3, 16)).astype(F32).astype(BF16)
_IDS = np.array([[0, 1], [2, 3], [1, 2]], np.int32)
_WTS = np.full((3, 2), 0.5, F32)
_MOE = dict(topk_ids=_IDS, topk_weights=_WTS)
_SH = shared_expert(_R, 16, 8)
_GMM_X, _GMM_W = i8(_R, 6, 16), i8(_R, 3, 16, 8)


def _with(tensors, **changes):
    out = list(tensors)
    for index, value in changes.items():
        out[int(index[1:])] = value
    return tuple(out)


BAD = [
    ("moe_gating_top_k_softmax", (np.ones((2, 4), F32),), {"k": 0}),
    ("moe_gating_top_k_softmax", (np.ones((2, 4), np.int32),), {"k": 1}),
    ("moe_gating_top_k_softmax", (np.ones((2, 4), F32), np.ones(3, bool)), {"k": 1}),
    ("moe_gating_top_k_softmax", (np.array([[0, np.nan, 1]], F32),), {"k": 1}),
    ("moe_gating_top_k", (np.ones((2, 6), F32), 1), {"group_count": 4}),
    ("moe_gating_top_k", (np.ones((2, 6), F32), 4), {"group_count": 2}),
    ("moe_gating_top_k", (np.ones((2, 6), F32), 1), {"bias": np.ones(6, BF16)}),
    ("moe_gating_top_k", (np.ones((2, 6), F32), 1), {"input_ids": np.zeros(2, np.int32)}),
    ("moe_gating_top_k", (np.ones((2, 6), F32), 1), {"input_ids": np.zeros(2, np.int32),
                                                     "tid2eid": np.full((3, 1), 6, np.int32)}),
    ("moe_gating_top_k", (np.ones((2, 6), F32), 1), {"renorm": 2}),
    ("moe_gating_top_k", (np.ones((2, 6), F32), 1), {"bias": np.array([0, 0, np.inf, 0, 0, 0], F32)}),
    ("moe_init_routing", (np.ones((2, 4), BF16), np.array([[0, 1], [1, 3]], np.int32), np.zeros((2, 2), np.int32), 2), {}),
    ("moe_init_routing", (np.ones((2, 4), BF16), np.array([[0, 1], [2, 3]], np.int32), np.zeros((2, 2), np.int32), -1), {}),
    ("moe_init_routing_v2", (np.ones((2, 4), BF16), _IDS[:2]), {"expert_num": 4, "quant_mode": 0}),
    ("moe_init_routing_v2", (np.ones((2, 4), BF16), _IDS[:2]), {"expert_num": 4, "quant_mode": 1,
                                                                "offset": np.ones(1, F32)}),
    ("moe_init_routing_v2", (np.ones((2, 4), BF16), _IDS[:2]), {"expert_num": 4, "drop_pad_mode": 1}),
    ("moe_init_routing_v2", (np.ones((2, 4), BF16), _IDS[:2]), {"expert_num": 4, "quant_mode": 1,
                                                                "scale": np.ones((3, 4), F32)}),
    ("moe_init_routing_v2", (np.ones((2, 4), BF16), _IDS[:2]), {"expert_num": 0}),
    ("moe_init_routing_v2", (np.ones((2, 4), BF16), _IDS[:2]), {"expert_num": 4, "active_expert_range": [0, 5]}),
    ("moe_init_routing_v2", (np.ones((2, 4), BF16), _IDS[:3]), {"expert_num": 4}),
    # data: x * smooth overflows fp32 (the golden's message, raised in the op)
    ("moe_init_routing_v2", (np.full((2, 4), 3e38, BF16), _IDS[:2]), {"expert_num": 4, "quant_mode": 1,
                                                                      "scale": np.full((1, 4), 10, F32)}),
    ("grouped_matmul", (_GMM_X, _GMM_W), {"scale": np.ones((3, 8), F32), "group_list": np.array([2, 2, 2]),
                                          "group_list_type": 1, "output_dtype": "bfloat16"}),
    ("grouped_matmul", (_GMM_X, _GMM_W), {"scale": np.ones((3, 8), F32), "group_list": np.array([2, 2, 2], np.int64),
                                          "group_list_type": 1, "output_dtype": "bfloat16"}),
    ("grouped_matmul", (_GMM_X, _GMM_W), {"group_list": np.array([2, 2, 2], np.int64), "act_type": 3,
                                          "output_dtype": "int32"}),
    ("grouped_matmul", (_GMM_X, _GMM_W), {"group_list": np.array([2, 2, 2], np.int64), "output_dtype": "int32",
                                          "per_token_scale": np.ones(6, F32)}),
    ("grouped_matmul", (_GMM_X, _GMM_W), {"group_list": np.array([4, 2, 2], np.int64), "group_list_type": 1,
                                          "output_dtype": "int32"}),
    ("grouped_matmul", (_GMM_X, _GMM_W), {"group_list": np.array([4, 2, 6], np.int64), "output_dtype": "int32"}),
    ("grouped_matmul", (_GMM_X, _GMM_W), {"group_list": np.array([[0, 2], [3, 1]], np.int64), "group_list_type": 2,
                                          "output_dtype": "int32"}),
    ("grouped_matmul", (_GMM_X, _GMM_W[:, :8]), {"group_list": np.array([2, 2, 2], np.int64), "output_dtype": "int32"}),
    ("grouped_matmul", ([_GMM_X, _GMM_X], _GMM_W), {"group_list": np.array([2, 2, 2], np.int64),
                                                    "output_dtype": "int32"}),
    ("grouped_matmul", (_GMM_X, _GMM_W), {"group_list": np.array([2, 2, 2], np.int64), "output_dtype": "int32",
                                          "offset": np.zeros((3, 8), F32)}),
    ("grouped_matmul", (_GMM_X, _GMM_W), {"scale": np.array([[np.nan] * 8] * 3, BF16),
                                          "group_list": np.array([2, 2, 2], np.int64), "output_dtype": "bfloat16"}),
    # data: the int32 bias overflows the accumulator (the golden's OverflowError, index within the group)
    ("grouped_matmul", (np.full((6, 16), 127, np.int8), np.full((3, 16, 8), 127, np.int8)),
     {"bias": np.full((3, 8), 2 ** 31 - 1000, np.int32), "group_list": np.array([1, 3, 2], np.int64),
      "group_list_type": 1, "output_dtype": "int32"}),
    ("swiglu", (np.ones((2, 5), F32),), {}),
    ("swiglu", (np.ones((2, 4), F32),), {"dim": 2}),
    ("swiglu", (np.array([[1, np.inf]], F32),), {}),
    ("dequant_swiglu_quant", (np.ones((4, 100), np.int32),), {"weight_scale": np.ones((2, 100), F32),
                                                              "group_index": np.array([2, 2], np.int64)}),
    ("dequant_swiglu_quant", (np.ones((4, 128), np.int32),), {"quant_mode": 1}),
    ("dequant_swiglu_quant", (np.ones((4, 128), np.int32),), {"weight_scale": np.ones((2, 128), F32), "quant_mode": 1,
                                                              "group_index": np.array([2, 2], np.int64),
                                                              "bias": np.ones(128, np.int32)}),
    ("dequant_swiglu_quant", (np.ones((4, 128), np.int32),), {"weight_scale": np.ones(128, F32), "quant_mode": 1,
                                                              "quant_offset": np.ones(64, F32)}),
    ("dequant_swiglu_quant", (np.ones((4, 128), np.int32),), {"weight_scale": np.ones(128, F32), "quant_mode": 1,
                                                              "swiglu_limit": 0.0}),
    ("dequant_swiglu_quant", (np.full((4, 128), 2 ** 31 - 5, np.int32),), {"weight_scale": np.ones(128, F32),
                                                                          "quant_mode": 1,
                                                                          "bias": np.full(128, 9, np.int32)}),
    ("moe_finalize_routing", (np.ones((4, 2), F32), None, None, None, np.ones((2, 2), F32),
                              np.array([0, -1, 2, 3], np.int32), None), {}),
    ("moe_finalize_routing", (np.ones((4, 2), F32), None, np.ones((2, 2), F32), None, np.ones((2, 2), F32),
                              np.arange(4, dtype=np.int32), None), {}),
    ("moe_finalize_routing", (np.ones((4, 2), F32), None, None, np.ones((3, 2), F32), np.ones((2, 2), F32),
                              np.arange(4, dtype=np.int32), None), {}),
    ("moe_finalize_routing", (np.ones((4, 2), F32), None, None, np.ones((3, 2), F32), np.ones((2, 2), F32),
                              np.arange(4, dtype=np.int32), np.full((2, 2), 3, np.int32)), {}),
    ("moe_finalize_routing", (np.ones((2, 2, 2), F32), None, None, None, np.ones((2, 2), F32),
                              np.arange(4, dtype=np.int32), None), {"drop_pad_mode": 2}),
    ("moe_finalize_routing", (np.ones((4, 2), F32), None, None, None, None, np.arange(4, dtype=np.int32), None),
     {"k": 3}),
    ("w8a8_moe", (_H.astype(F32),) + _W, _MOE),
    ("w8a8_moe", (_H,) + _W, {"topk_ids": np.full((3, 2), 4, np.int32), "topk_weights": _WTS}),
    ("w8a8_moe", (_H,) + _with(_W, w2=_W[2][:, :, :4]), _MOE),
    ("w8a8_moe", (_H,) + _W, _MOE | {"router_logits": np.ones((3, 4), F32)}),
    ("w8a8_moe", (_H,) + _W, {"router_logits": np.ones((3, 4), F32), "top_k": 2, "scoring_func": "relu"}),
    ("w8a8_moe", (_H,) + _W, {"router_logits": np.ones((3, 4), F32), "top_k": 2, "scoring_func": "sigmoid",
                              "renormalize": True}),
    ("w8a8_moe", (_H,) + _W, _MOE | {"shared_expert": {"gate_weight": _SH["gate_weight"]}}),
    ("w8a8_moe_prequantized", (np.ones((3, 16), np.int8), np.ones(2, F32)) + _W, _MOE),
    ("w8a8_moe_prequantized", (np.ones((3, 16), np.int8), np.ones(3, F32)) + _W, _MOE | {"shared_expert": _SH}),
    ("w8a8_moe_prequantized", (np.ones((3, 16), np.int8), np.array([1, np.nan, 1], F32)) + _W, _MOE),
]


@pytest.mark.parametrize("op, args, kwargs", BAD, ids=[f"{i}-{case[0]}" for i, case in enumerate(BAD)])
def test_bad_input_is_rejected_like_the_golden(op, args, kwargs):
    want = outcome(GOLDEN, op, args, kwargs)
    assert want[0] == "raise", f"the case must be one the golden refuses: {op} {kwargs}"
    check_same(op, *args, **kwargs)


# -- errors between the stages of the layer, in the golden's order -----------------------------------------

def _scale(value, e=4, rows=16, at=(1, 3, 0)):
    s = np.full((e, rows, 1), 0.01, F32)
    s[at] = value
    return s


def _stage_cases():
    w13, s13, w2, s2 = _W
    big = np.full((3, 16), 3e38, F32).astype(BF16)   # GMM1's fp32 epilogue overflows -> Inf in its bf16 output
    big_w = (np.full_like(w13, 127), np.ones((4, 16, 1), F32), w2, s2)
    sh = _SH
    return {
        # argument errors the golden meets only in the ops it runs (after routing):
        "gmm1_scale_nan": ((_H, w13, _scale(np.nan), w2, s2), _MOE),
        "dsq_limit": ((_H,) + _W, _MOE | {"swiglu_limit": -1.0}),
        "gmm2_scale_inf_in_bf16": ((_H, w13, s13, w2, _scale(3.4e38, rows=16)), _MOE),
        "finalize_k0": ((_H,) + _W, {"topk_ids": np.zeros((3, 0), np.int32), "topk_weights": np.zeros((3, 0), F32)}),
        "shared_gate_k": ((_H,) + _W, _MOE | {"shared_expert": sh | {"gate_weight": sh["gate_weight"][:, :8]}}),
        "shared_up_scale": ((_H,) + _W, _MOE | {"shared_expert": sh | {"up_scale": sh["up_scale"][:4]}}),
        "shared_gate_up_mismatch": ((_H,) + _W, _MOE | {"shared_expert": sh | {
            "up_weight": sh["up_weight"][:4], "up_scale": sh["up_scale"][:4]}}),
        "shared_down_k": ((_H,) + _W, _MOE | {"shared_expert": sh | {"down_weight": sh["down_weight"][:, :4]}}),
        "shared_down_scale_inf": ((_H,) + _W, _MOE | {"shared_expert": sh | {
            "down_scale": np.full_like(sh["down_scale"], 3.4e38)}}),
        "shared_down_n": ((_H,) + _W, _MOE | {"shared_expert": sh | {
            "down_weight": sh["down_weight"][:8], "down_scale": sh["down_scale"][:8]}}),
        # data errors on intermediates: GMM1's output, the requant scale (GMM2's per-token scale: silu(g) * up
        # overflows fp32), GMM2's output (the finalize's rows), the bf16 routing weights (its scales)
        "gmm1_inf": ((big,) + big_w, _MOE),
        "requant_scale_inf": ((np.full((3, 16), 1e30, F32).astype(BF16),) + _W, _MOE),
        "gmm2_out_inf": ((_H, w13, s13, w2, np.full((4, 16, 1), 3e38, F32)), _MOE),
        # only expert 2 / 3 overflows: the first bad element is inside its group (the index has an offset)
        "gmm2_out_inf_in_expert_2": ((_H, w13, s13, w2, _scale(3e38, at=(2, slice(None), 0))), _MOE),
        "gmm1_inf_in_expert_3": ((_H, w13, _scale(3e38, at=(3, slice(None), 0)), w2, s2), _MOE),
        "routing_weight_inf_in_bf16": ((_H,) + _W, {"topk_ids": _IDS, "topk_weights": np.full((3, 2), 3.4e38, F32)}),
        # ... and which comes first when two are present:
        "dsq_limit_before_gmm2_scale": ((_H, w13, s13, w2, _scale(np.nan)), _MOE | {"swiglu_limit": 0.0}),
        "gmm1_inf_before_gmm2_scale": ((big, big_w[0], big_w[1], w2, _scale(np.nan)), _MOE),
        "gmm1_inf_before_shared": ((big,) + big_w, _MOE | {"shared_expert": sh | {"gate_weight": sh["gate_weight"][:4]}}),
        "gmm2_scale_before_shared": ((_H, w13, s13, w2, _scale(np.inf)), _MOE | {"shared_expert": sh | {
            "gate_weight": sh["gate_weight"][:, :8]}}),
    }


STAGE_CASES = _stage_cases()


@pytest.mark.parametrize("name", list(STAGE_CASES))
def test_layer_errors_between_stages_come_in_the_goldens_order(name):
    args, kwargs = STAGE_CASES[name]
    want = outcome(GOLDEN, "w8a8_moe", args, kwargs)
    assert want[0] == "raise", f"{name}: the golden must refuse it"
    check_same("w8a8_moe", *args, **kwargs)
    x_q, x_s = w8a8.dispatch_quant(args[0])
    pre_kw = kwargs | ({"shared_input": args[0]} if "shared_expert" in kwargs else {})
    check_same("w8a8_moe_prequantized", x_q, x_s, *args[1:], **pre_kw)


def _shared_data_cases():
    # The routed experts get tiny scales so that huge hidden states stay finite through them; the
    # shared expert sees the huge values: g, u finite but silu(g) * u overflows fp32 -> an Inf in the bf16
    # activation a, which the down Linear's dynamic_quant refuses *before* quant_matmul checks the down
    # scale (Inf once rounded to bf16); with a finite a, that scale error; with g itself Inf, swiglu's.
    rng = np.random.default_rng(12)
    h, i = 16, 8
    sh = shared_expert(rng, h, i)
    tiny = (_W[0], np.full((4, 16, 1), 1e-20, F32), _W[2], np.full((4, 16, 1), 1e-10, F32))
    huge = np.full((3, h), 1e30, F32).astype(BF16)
    big = sh | {"gate_weight": np.full((i, h), 127, np.int8), "up_weight": np.full((i, h), 127, np.int8),
                "gate_scale": np.full((i, 1), 1e-3, F32), "up_scale": np.full((i, 1), 1e-3, F32)}
    bad_down = {"down_scale": np.full((h, 1), 3.4e38, F32)}
    return {"activation_inf": (huge, tiny, big), "activation_inf_before_down_scale": (huge, tiny, big | bad_down),
            "down_scale": (_H, _W, sh | bad_down), "gate_inf": (huge, tiny, big | {"gate_scale": np.full((i, 1), 3e37, F32)})}


SHARED_DATA_CASES = _shared_data_cases()


@pytest.mark.parametrize("name, match", [("activation_inf", "dynamic_quant.*'x'"),
                                         ("activation_inf_before_down_scale", "dynamic_quant.*'x'"),
                                         ("down_scale", "quant_matmul.*'scale'"), ("gate_inf", "swiglu.*'x'")])
def test_shared_expert_data_errors_in_order(name, match):
    hidden, w, se = SHARED_DATA_CASES[name]
    check_raises(ValueError, match, "w8a8_moe", hidden, *w, **_MOE, shared_expert=se)
    check_same("w8a8_moe_prequantized", *w8a8.dispatch_quant(hidden), *w, **_MOE, shared_expert=se,
               shared_input=hidden)


def test_grouped_matmul_more_than_1024_groups_in_the_layer():
    # E = 1025 experts: routing accepts it (<= 10240), the grouped matmul's group list does not (<= 1024).
    rng = np.random.default_rng(0)
    w = moe_layer(rng, 1025, 2, 1)
    check_raises(ValueError, "at most 1024", "w8a8_moe", bf16([[1, 2]]), *w, topk_ids=np.array([[5]], np.int32),
                 topk_weights=np.ones((1, 1), F32))


# -- the device boundary --------------------------------------------------------------------------------

def test_prepare_loads_once_and_reruns():
    rng = np.random.default_rng(8)
    w = moe_layer(rng, 6, 32, 16)
    hidden = rng.standard_normal((9, 32)).astype(F32).astype(BF16)
    ids, wts = topk(rng, 9, 6, 2)
    prepared = TC.prepare("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts)
    out1 = prepared.run()
    assert isinstance(out1, torch.Tensor) and out1.dtype == torch.bfloat16
    want = w8a8.w8a8_moe(hidden, *w, topk_ids=ids, topk_weights=wts)
    assert_bits(prepared.finish(out1), want)
    assert_bits(prepared(), want)   # re-runnable on the loaded weights


def _loaded_layer(w, hidden, ids, wts):
    from backends.torch_cpu import moe_layer as ml

    return ml.load(w8a8.registry.get("w8a8_moe").check(hidden, *w, topk_ids=ids, topk_weights=wts), TC.transfer,
                   TC.gemm_path)[1]


@pytest.mark.parametrize("path", ["int_mm", "fbgemm", "vnni"])
def test_loaded_layer_and_both_gemm_paths(path, monkeypatch):
    from backends.torch_cpu import moe_experts, packed

    if path == "fbgemm" and not moe_experts.fbgemm_usable()[0]:
        pytest.skip(moe_experts.fbgemm_usable()[1])
    if path == "vnni" and not packed.available()[0]:
        pytest.skip(packed.available()[1])
    monkeypatch.setenv("W8A8_TORCH_CPU_MOE_GEMM", path)
    rng = np.random.default_rng(8)
    w = moe_layer(rng, 3, 32, 16)
    hidden = bf16(rng.standard_normal((5, 32)))
    ids, wts = topk(rng, 5, 3, 2)
    layer = _loaded_layer(w, hidden, ids, wts)
    assert layer.w13.path == path and layer.w2.path == path and layer.deferred is None
    assert layer.s13.dtype == torch.bfloat16 and layer.s13f.dtype == torch.float32
    if path == "int_mm":   # [E, H, 2I]: each expert's [K, N] row-major, the layout _int_mm streams best
        assert layer.w13.kn.shape == (3, 32, 32) and layer.w13.kn[1].is_contiguous()
        assert torch.equal(layer.w13.kn[1], torch.from_numpy(w[0][1].T.copy()))
    elif path == "fbgemm":
        assert len(layer.w13.packed) == 3 and layer.w13.kn is None
    else:
        assert layer.w13.vnni.e == 3 and layer.w13.kn is None
    check_same("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts)
    check_same("grouped_matmul", i8(rng, 9, 33), i8(rng, 3, 33, 7), scale=rng.uniform(0, 1, (3, 7)).astype(BF16),
               group_list=np.array([4, 0, 5], np.int64), group_list_type=1, output_dtype="bfloat16")


def test_moe_gemm_path_selection(monkeypatch):
    from backends.torch_cpu import moe_experts

    monkeypatch.setenv("W8A8_TORCH_CPU_MOE_GEMM", "fast")
    with pytest.raises(ValueError, match="W8A8_TORCH_CPU_MOE_GEMM"):
        moe_experts.resolve_path()
    monkeypatch.setenv("W8A8_TORCH_CPU_MOE_GEMM", "auto")
    from backends.torch_cpu import packed

    fallback = "fbgemm" if moe_experts.fbgemm_usable()[0] else "int_mm"
    assert moe_experts.resolve_path() == ("vnni" if packed.available()[0] else fallback)
    assert moe_experts.resolve_path("int_mm") == "int_mm"


def test_fbgemm_falls_back_to_int_mm_when_the_probe_fails(monkeypatch):
    # A kernel that is not proven exact at load is not used: the experts go to _int_mm, with the reason.
    from backends.torch_cpu import moe_experts

    if not moe_experts.fbgemm_usable()[0]:
        pytest.skip(moe_experts.fbgemm_usable()[1])
    monkeypatch.setattr(moe_experts, "_probe", lambda w, packed: False)
    experts = moe_experts.ExpertGemm.load(torch.from_numpy(i8(np.random.default_rng(0), 2, 16, 8)), layout="ekn",
                                          path="fbgemm")
    assert experts.path == "int_mm" and "probe" in experts.note and experts.kn.shape == (2, 16, 8)


@pytest.mark.parametrize("k", [1, 2, 7, 64, 1025, 4096])
@pytest.mark.parametrize("n", [1, 3, 17, 257])
def test_fbgemm_expert_gemm_is_exact(k, n):
    # fp32(acc) from fbgemm equals the exact int64 product rounded to fp32 on random and on saturating
    # operands (u8 255 x s8 127: an int16 pair sum would saturate; only the VNNI kernel is exact).
    from backends.torch_cpu import moe_experts

    if not moe_experts.fbgemm_usable()[0]:
        pytest.skip(moe_experts.fbgemm_usable()[1])
    rng = np.random.default_rng(k * 1000 + n)
    w = np.stack([i8(rng, k, n), np.full((k, n), 127, np.int8), np.full((k, n), -128, np.int8)])   # [E, K, N]
    experts = moe_experts.ExpertGemm.load(torch.from_numpy(w), layout="ekn", path="fbgemm")
    assert experts.path == "fbgemm", experts.note
    for m in (1, 5, 17, 64):
        for x in (i8(rng, m, k), np.full((m, k), 127, np.int8), np.full((m, k), -128, np.int8)):
            for g in range(3):
                want = (x.astype(np.int64) @ w[g].astype(np.int64)).astype(F32)
                assert_bits(experts.f32(g, torch.from_numpy(x)).numpy(), want, f"k={k} n={n} m={m} expert {g}")


def test_inputs_are_not_modified():
    rng = np.random.default_rng(10)
    w = moe_layer(rng, 4, 16, 8)
    hidden = rng.standard_normal((5, 16)).astype(F32).astype(BF16)
    ids, wts = topk(rng, 5, 4, 2)
    before = [a.copy() for a in (hidden,) + w + (ids, wts)]
    check_same("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts, swiglu_limit=1.0)
    for a, b in zip((hidden,) + w + (ids, wts), before):
        assert_bits(a, b)
