"""moe_gating_top_k_softmax and moe_gating_top_k: hand-checked cases, ties, properties, bad input.

Exact hand values come from logits whose exp is exact in fp32: exp(0) = 1, and exp(-200) underflows
to 0 (float64 1.4e-87 rounds to fp32 0); exp(200) overflows fp32 to +Inf. So softmax values are
1/(number of maxima) and sigmoid values are 0 (x=-200), 0.5 (x=0) or 1 (x=200) exactly.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import w8a8
from w8a8 import ASCEND, bfloat16

F32 = np.float32


# ----------------------------------------------------------------------------- softmax top-k

def test_softmax_hand_two_tokens_three_experts():
    # token 0: [0, 0, -200] -> e = [1, 1, 0], p = [0.5, 0.5, 0] -> top-2 experts 0, 1 (y 0.5, 0.5)
    # token 1: [0, -200, -200] -> p = [1, 0, 0] -> expert 0 (1.0), then the tie 1 vs 2 at 0.0 goes to
    #          the lower index: expert 1 (0.0). Expert 2 is chosen by nobody (the empty expert).
    x = np.array([[0, 0, -200], [0, -200, -200]], F32)
    y, idx, row_idx = w8a8.moe_gating_top_k_softmax(x, k=2)
    assert y.dtype == np.float32 and idx.dtype == np.int32 and row_idx.dtype == np.int32
    np.testing.assert_array_equal(y, [[0.5, 0.5], [1.0, 0.0]])
    np.testing.assert_array_equal(idx, [[0, 1], [0, 1]])
    # row_idx[t, j] = j * N + t with N = 2: column-major
    np.testing.assert_array_equal(row_idx, [[0, 2], [1, 3]])


def test_softmax_finished_rows_get_expert_E_and_keep_values():
    x = np.array([[0, 0, -200], [0, -200, -200]], F32)
    y, idx, _ = w8a8.moe_gating_top_k_softmax(x, np.array([False, True]), k=2)
    np.testing.assert_array_equal(idx, [[0, 1], [3, 3]])          # E = 3 on the finished row
    np.testing.assert_array_equal(y, [[0.5, 0.5], [1.0, 0.0]])    # values unchanged


def test_softmax_no_renormalisation_and_formula():
    # Not renormalised: the top-2 of a 4-way softmax sum to < 1. Values follow fp32 exp(x - max) / sum,
    # with exp correctly rounded to fp32 and the sum rounded once.
    x = np.array([[1.0, 0.5, -0.25, 2.0]], F32)
    y, idx, _ = w8a8.moe_gating_top_k_softmax(x, k=2)
    np.testing.assert_array_equal(idx, [[3, 0]])
    e = np.exp((x - x.max()).astype(np.float64)).astype(F32)
    p = e / F32(e.astype(np.float64).sum())
    np.testing.assert_array_equal(y, p[:, [3, 0]])
    assert y.sum() < 0.95


@pytest.mark.parametrize("dtype", [np.float16, bfloat16])
def test_softmax_low_precision_input_rounds_output_once(dtype):
    x = np.array([[0.3, -1.1, 0.7, 0.05]], F32).astype(dtype)
    y, idx, _ = w8a8.moe_gating_top_k_softmax(x, k=3)
    xf = x.astype(F32)
    e = np.exp((xf - xf.max()).astype(np.float64)).astype(F32)
    p = e / F32(e.astype(np.float64).sum())
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y.astype(F32), p[:, idx[0]].astype(dtype).astype(F32))


def test_softmax_3d_rows_are_flattened_for_row_idx():
    x = np.zeros((2, 3, 4), F32)
    _, idx, row_idx = w8a8.moe_gating_top_k_softmax(x, k=2)
    np.testing.assert_array_equal(idx, np.broadcast_to([0, 1], (2, 3, 2)))   # all ties: lowest ids
    # N = 6 flattened rows: row_idx[b, s, j] = j * 6 + (b * 3 + s)
    np.testing.assert_array_equal(row_idx[1, 2], [5, 11])


def test_softmax_float32_transcendental_choice_changes_at_most_an_ulp():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 16)).astype(F32)
    a, ia, _ = w8a8.moe_gating_top_k_softmax(x, k=4)
    b, ib, _ = w8a8.moe_gating_top_k_softmax(x, k=4, numerics=ASCEND.replace(transcendental="float32"))
    np.testing.assert_array_equal(ia, ib)
    assert np.max(np.abs(w8a8.ulp_distance(a, b))) <= 2


# ----------------------------------------------------------------------------- grouped top-k

def test_sigmoid_renormalises_and_scales():
    # sigmoid([0, 200, -200]) = [0.5, 1, 0]; top-2 = experts 1, 0; w = [1, 0.5] / (1.5 + 1e-20)
    # = [2/3, 1/3] rounded to fp32 (0.6666667, 0.33333334); x 2.0 scaling factor doubles them.
    x = np.array([[0, 200, -200]], F32)
    y, idx, norm = w8a8.moe_gating_top_k(x, 2, norm_type=1)
    np.testing.assert_array_equal(idx, [[1, 0]])
    np.testing.assert_array_equal(y, [[F32(1) / F32(1.5), F32(0.5) / F32(1.5)]])
    np.testing.assert_array_equal(norm, [[0.5, 1.0, 0.0]])
    y2, _, _ = w8a8.moe_gating_top_k(x, 2, norm_type=1, routed_scaling_factor=2.0)
    np.testing.assert_array_equal(y2, y * F32(2))


def test_bias_selects_but_does_not_weight():
    # bias [0, 0, 2]: sel = [0.5, 1, 2] -> experts 2, 1; weights are the pre-bias scores [0, 1],
    # renormalised: [0, 1].
    x = np.array([[0, 200, -200]], F32)
    y, idx, _ = w8a8.moe_gating_top_k(x, 2, norm_type=1, bias=np.array([0, 0, 2], F32))
    np.testing.assert_array_equal(idx, [[2, 1]])
    np.testing.assert_array_equal(y, [[0.0, 1.0]])


@pytest.mark.parametrize("mode, experts, weights", [
    # s = sigmoid([200, -200, 0, 0]) = [1, 0, .5, .5]; bias [0, 0, .25, 0] -> sel = [1, 0, .75, .5]
    # mode 0 (group max): g0 = 1 > g1 = 0.75 -> keep group 0 -> experts 0, 1 -> w [1, 0]
    (0, [0, 1], [1.0, 0.0]),
    # mode 1 (top-2 sum): g0 = 1 + 0 = 1 < g1 = 0.75 + 0.5 = 1.25 -> group 1 -> experts 2, 3 -> w [.5, .5]
    (1, [2, 3], [0.5, 0.5]),
])
def test_group_select_modes(mode, experts, weights):
    x = np.array([[200, -200, 0, 0]], F32)
    y, idx, _ = w8a8.moe_gating_top_k(x, 2, norm_type=1, bias=np.array([0, 0, 0.25, 0], F32), group_count=2,
                                      k_group=1, group_select_mode=mode)
    np.testing.assert_array_equal(idx, [experts])
    np.testing.assert_array_equal(y, [weights])


def test_group_ties_keep_the_lower_group():
    # Both groups score 1: group 0 kept, so experts 0 and 1 (not 2, 3) although expert 2 ties expert 0.
    x = np.array([[200, -200, 200, -200]], F32)
    _, idx, _ = w8a8.moe_gating_top_k(x, 2, norm_type=1, group_count=2, k_group=1)
    np.testing.assert_array_equal(idx, [[0, 1]])


def test_softmax_scores_not_renormalised_unless_renorm():
    # softmax([0, 0, -200]) = [.5, .5, 0]; k=1 -> 0.5 (no renorm, kernel behaviour; the README's
    # renormalisation is not applied); renorm=1 -> 0.5 / (0.5 + 1e-20) = 1.0.
    x = np.array([[0, 0, -200]], F32)
    y, idx, _ = w8a8.moe_gating_top_k(x, 1, norm_type=0)
    np.testing.assert_array_equal(idx, [[0]])
    np.testing.assert_array_equal(y, [[0.5]])
    y1, _, _ = w8a8.moe_gating_top_k(x, 1, norm_type=0, renorm=1)
    np.testing.assert_array_equal(y1, [[1.0]])


def test_sqrt_softplus_scores():
    # sqrt(softplus(x)) = sqrt(max(x, 0) + log1p(exp(-|x|))): x=200 -> sqrt(200); x=-200 -> 0;
    # x=0 -> sqrt(log1p(1)) = sqrt(ln 2). top-2 = experts 0, 2, renormalised in fp32.
    x = np.array([[200, -200, 0]], F32)
    y, idx, norm = w8a8.moe_gating_top_k(x, 2, norm_type=2)
    s0, s2 = np.sqrt(F32(200)), np.sqrt(F32(np.log(2.0)))
    np.testing.assert_array_equal(norm, [[s0, 0, s2]])
    np.testing.assert_array_equal(idx, [[0, 2]])
    total = F32(s0 + s2) + F32(1e-20)
    np.testing.assert_array_equal(y, [[s0 / total, s2 / total]])


def test_hash_mode_reads_the_table():
    x = np.zeros((2, 3), F32)
    y, idx, _ = w8a8.moe_gating_top_k(x, 2, norm_type=1, input_ids=np.array([1, 0], np.int64),
                                      tid2eid=np.array([[2, 1], [0, 2]], np.int32))
    np.testing.assert_array_equal(idx, [[0, 2], [2, 1]])
    np.testing.assert_array_equal(y, [[0.5, 0.5], [0.5, 0.5]])   # sigmoid(0) renormalised


@pytest.mark.parametrize("dtype", [np.float16, bfloat16])
def test_gating_output_dtype_is_input_dtype(dtype):
    x = np.array([[0.1, 0.9, -0.4, 0.3]], F32).astype(dtype)
    y, _, norm = w8a8.moe_gating_top_k(x, 2, norm_type=1)
    assert y.dtype == np.dtype(dtype) and norm.dtype == np.float32


@given(hnp.arrays(F32, st.tuples(st.integers(1, 7), st.sampled_from([4, 8, 16])),
                  elements=st.floats(-8, 8, width=32)), st.data())
def test_gating_properties(x, data):
    n, e = x.shape
    k = data.draw(st.integers(1, e))
    y, idx, norm = w8a8.moe_gating_top_k(x, k, norm_type=1)
    # ids are distinct, weights are the renormalised top scores, descending by score
    assert all(len(set(r)) == k for r in idx.tolist())
    sel = np.take_along_axis(norm, idx, 1)
    assert (np.diff(sel, axis=1) <= 0).all()
    np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-5)
    # every unselected score is <= the k-th selected one
    kth = sel[:, -1:]
    mask = np.ones_like(norm, bool)
    np.put_along_axis(mask, idx, False, 1)
    assert (np.where(mask, norm, -np.inf) <= kth).all()
    ys, ids, _ = w8a8.moe_gating_top_k_softmax(x, k=k)
    assert (np.diff(ys, axis=1) <= 0).all()


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("call, exc, arg", [
    (lambda: w8a8.moe_gating_top_k_softmax(np.zeros((2, 3), np.int32)), TypeError, "x"),
    (lambda: w8a8.moe_gating_top_k_softmax(np.zeros(3, F32)), ValueError, "x"),
    (lambda: w8a8.moe_gating_top_k_softmax(np.zeros((2, 3), F32), k=4), ValueError, "k"),
    (lambda: w8a8.moe_gating_top_k_softmax(np.zeros((2, 3), F32), k=0), ValueError, "k"),
    (lambda: w8a8.moe_gating_top_k_softmax(np.zeros((2, 3), F32), np.zeros(3, bool)), ValueError, "finished"),
    (lambda: w8a8.moe_gating_top_k_softmax(np.zeros((2, 3), F32), np.zeros(2, np.int8)), TypeError, "finished"),
    (lambda: w8a8.moe_gating_top_k_softmax(np.array([[0, np.nan]], F32)), ValueError, "x"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 0), ValueError, "k"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 4, group_count=3, k_group=1), ValueError, "k"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, group_count=4), ValueError, "group_count"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, group_count=2, k_group=3), ValueError, "k_group"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, group_count=6, group_select_mode=1), ValueError,
     "group_count"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, group_select_mode=2), ValueError, "group_select_mode"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, norm_type=3), ValueError, "norm_type"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, renorm=2), ValueError, "renorm"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, bias=np.zeros(5, F32)), ValueError, "bias"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, bias=np.zeros(6, np.float16)), TypeError, "bias"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, out_flag=1), TypeError, "out_flag"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, routed_scaling_factor="x"), TypeError,
     "routed_scaling_factor"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, eps=float("inf")), ValueError, "eps"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 4096), F32), 1), ValueError, "x"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, input_ids=np.zeros(2, np.int32)), ValueError, "tid2eid"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 2, input_ids=np.zeros(2, np.int32),
                                   tid2eid=np.zeros((3, 1), np.int32)), ValueError, "tid2eid"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, input_ids=np.array([0, 3], np.int32),
                                   tid2eid=np.zeros((3, 1), np.int32)), ValueError, "input_ids"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, input_ids=np.zeros(2, np.int32),
                                   tid2eid=np.full((3, 1), 6, np.int32)), ValueError, "tid2eid"),
    (lambda: w8a8.moe_gating_top_k(np.zeros((2, 6), F32), 1, numerics="ascend"), TypeError, "numerics"),
])
def test_bad_input(call, exc, arg):
    with pytest.raises(exc, match=f"'{arg}'"):
        call()


# ----------------------------------------------------------------------------- kernel variants

# Logits 0 except x[5] = 2^-20 (an fp16 subnormal). In fp32: exp(2^-20) = 1 + 8 * 2^-23, the sum
# 9 + 8 * 2^-23 (exact), p_j = 0.11111110 for the eight others and p_5 = 0.11111121: expert 5 ranks
# first. Rounded to fp16 (spacing 2^-14 at 0.111) all nine are the same 0x2F1C, so an fp16 ranking ties
# and the lower index wins: [0, 1].
#   E = 8 (k = 2): the perf template (E <= 1024, E % 8 == 0, k <= 8; ops-transformer
#       moe_gating_top_k_softmax_tiling_perf.cpp:118-124 @ c29bc106) ranks fp32 -> [5, 0];
#   E = 9: not perf (E % 8 != 0, E >= 8) -> the E-K full-load kernel runs SoftMax<half> / TopK<half> on
#       fp16 logits (moe_gating_top_k_softmax_e_k_fullload.h:338-358) -> [0, 1].
def _tiny_lead(e):
    x = np.zeros((1, e), np.float16)
    x[0, 5] = np.float16(2.0 ** -20)
    return x


def test_fp16_outside_the_perf_kernel_ranks_fp16_probabilities():
    y9, i9, _ = w8a8.moe_gating_top_k_softmax(_tiny_lead(9), k=2)
    assert i9.tolist() == [[0, 1]]
    assert y9.view(np.uint16).tolist() == [[0x2F1C, 0x2F1C]]
    _, i8, _ = w8a8.moe_gating_top_k_softmax(_tiny_lead(8), k=2)
    assert i8.tolist() == [[5, 0]]
    # the same E = 9 call ranked in fp32 (the perf kernel's way, or the record without variants)
    _, i9f, _ = w8a8.moe_gating_top_k_softmax(_tiny_lead(9), k=2, numerics=ASCEND.replace(variants="fixed"))
    assert i9f.tolist() == [[5, 0]]
    # bf16 and fp32 logits are ranked in fp32 by every template
    _, ib, _ = w8a8.moe_gating_top_k_softmax(_tiny_lead(9).astype(np.float32), k=2)
    assert ib.tolist() == [[5, 0]]
