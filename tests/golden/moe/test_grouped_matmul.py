"""grouped_matmul (single-tensor int8 form): hand-checked epilogues, group-list forms, cross-checks, bad input.

Hand case: M = 4 rows, K = N = 2, E = 3 experts, counts [2, 0, 1]: rows 0-1 -> expert 0, expert 1
empty, row 2 -> expert 2, row 3 past the total (unspecified on the device, golden 0).
  x = [[1, 2], [3, -30], [2, 2], [5, 5]]
  w0 = identity -> acc rows 0, 1 = [1, 2], [3, -30];  w2 = [[1, 1], [1, -1]] -> row 2 = [4, 0]
  bias = [[10, 20], [0, 0], [1, 1]] -> acc + bias = [11, 22], [13, -10], [5, 1]
  scale = [[0.5, 0.25], [1, 1], [2, 4]], per_token = [1, 2, 0.5, 9]
  -> row 0: [11*.5*1, 22*.25*1] = [5.5, 5.5]; row 1: [13*.5*2, -10*.25*2] = [13, -5];
     row 2: [5*2*.5, 1*4*.5] = [5, 2]; row 3: [0, 0]. All exact in bf16 and fp16.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import w8a8
from w8a8 import ASCEND, bfloat16

F32 = np.float32
X = np.array([[1, 2], [3, -30], [2, 2], [5, 5]], np.int8)
W = np.array([[[1, 0], [0, 1]], [[7, 7], [7, 7]], [[1, 1], [1, -1]]], np.int8)
B = np.array([[10, 20], [0, 0], [1, 1]], np.int32)
S = np.array([[0.5, 0.25], [1, 1], [2, 4]], F32)
PT = np.array([1, 2, 0.5, 9], F32)
COUNTS = np.array([2, 0, 1], np.int64)
EXPECTED = [[5.5, 5.5], [13, -5], [5, 2], [0, 0]]


def test_bf16_scale_per_token_hand():
    y = w8a8.grouped_matmul(X, W, bias=B, scale=S.astype(bfloat16), per_token_scale=PT, group_list=COUNTS,
                            group_list_type=1, output_dtype="bfloat16")
    assert y.dtype == bfloat16 and y.shape == (4, 2)
    np.testing.assert_array_equal(y.astype(F32), EXPECTED)


def test_fp32_scale_gives_fp16_hand():
    y = w8a8.grouped_matmul(X, W, bias=B, scale=S, per_token_scale=PT, group_list=COUNTS, group_list_type=1,
                            output_dtype="float16")
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, EXPECTED)


def test_no_scale_gives_raw_int32_accumulator():
    y = w8a8.grouped_matmul(X, W, bias=B, group_list=COUNTS, group_list_type=1, output_dtype="int32")
    np.testing.assert_array_equal(y, [[11, 22], [13, -10], [5, 1], [0, 0]])
    assert y.dtype == np.int32


def test_int64_scale_requant_to_int8():
    # 11*.5 = 5.5 -> 6 (RINT), 22*.25 = 5.5 -> 6; 13*.5 = 6.5 -> 6, -10*.25 = -2.5 -> -2; 5*2 = 10, 1*4 = 4
    y = w8a8.grouped_matmul(X, W, bias=B, scale=w8a8.trans_quant_param(S), group_list=COUNTS, group_list_type=1)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, [[6, 6], [6, -2], [10, 4], [0, 0]])


@pytest.mark.parametrize("group_list, group_list_type", [
    (np.array([2, 2, 3], np.int64), 0),                    # cumulative ends
    (np.array([2, 0, 1], np.int64), 1),                    # counts
    (np.array([[0, 2], [2, 1], [0, 0]], np.int64), 2),     # (expert, count) pairs + terminator
    (np.array([[0, 2], [1, 0], [2, 1]], np.int64), 2),     # an explicit empty pair
])
def test_group_list_forms_agree(group_list, group_list_type):
    y = w8a8.grouped_matmul(X, W, bias=B, scale=S.astype(bfloat16), per_token_scale=PT, group_list=group_list,
                            group_list_type=group_list_type, output_dtype="bfloat16")
    np.testing.assert_array_equal(y.astype(F32), EXPECTED)
    np.testing.assert_array_equal(w8a8.valid_rows(group_list, 4, group_list_type=group_list_type),
                                  [True, True, True, False])


def test_list_form_in_list_out():
    y = w8a8.grouped_matmul([X], [W], bias=[B], scale=[S.astype(bfloat16)], per_token_scale=[PT], group_list=COUNTS,
                            group_list_type=1, output_dtype="bfloat16")
    assert isinstance(y, list) and len(y) == 1
    np.testing.assert_array_equal(y[0].astype(F32), EXPECTED)


@pytest.mark.parametrize("act_type, f", [
    (1, lambda v: np.maximum(v, 0)),                                                    # relu: -5 -> 0
    (5, lambda v: v / (1 + np.exp(-v))),                                                # silu
    (2, lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))),  # gelu_tanh
    (4, lambda v: v / (1 + np.exp(-1.702 * np.abs(v))) * np.exp(0.851 * (v - np.abs(v)))),  # fast_gelu
])
def test_activations_after_dequant(act_type, f):
    y = w8a8.grouped_matmul(X, W, bias=B, scale=S, per_token_scale=PT, group_list=COUNTS, group_list_type=1,
                            output_dtype="float16", act_type=act_type)
    v = np.array(EXPECTED, np.float64)[:3]
    # fp32 evaluation vs the float64 definition: within one fp16 ulp
    np.testing.assert_allclose(y[:3].astype(np.float64), f(v), rtol=2 ** -10, atol=2 ** -24)
    np.testing.assert_array_equal(y[3], 0)


def test_relu_exact():
    y = w8a8.grouped_matmul(X, W, bias=B, scale=S, per_token_scale=PT, group_list=COUNTS, group_list_type=1,
                            output_dtype="float16", act_type=1)
    np.testing.assert_array_equal(y, [[5.5, 5.5], [13, 0], [5, 2], [0, 0]])


def test_empty_groups_and_no_rows():
    x = np.zeros((0, 3), np.int8)
    w = np.ones((2, 3, 5), np.int8)
    y = w8a8.grouped_matmul(x, w, group_list=np.array([0, 0], np.int64), group_list_type=1, output_dtype="int32")
    assert y.shape == (0, 5)


# ----------------------------------------------------------------------------- cross-check with quant_matmul

@st.composite
def gmm_case(draw):
    e = draw(st.integers(1, 5))
    k = draw(st.sampled_from([1, 7, 17, 300, 1025]))
    n = draw(st.sampled_from([1, 3, 16]))
    counts = draw(hnp.arrays(np.int64, e, elements=st.integers(0, 5)))
    extra = draw(st.integers(0, 3))
    m = int(counts.sum()) + extra
    x = draw(hnp.arrays(np.int8, (m, k), elements=st.integers(-128, 127)))
    seed = draw(st.integers(0, 2 ** 16))
    return x, counts, e, n, seed


@given(gmm_case())
def test_matches_quant_matmul_per_group(case):
    x, counts, e, n, seed = case
    m, k = x.shape
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (e, k, n)).astype(np.int8)
    s = rng.uniform(1e-4, 1e-2, (e, n)).astype(F32).astype(bfloat16)
    pt = rng.uniform(0.01, 2, m).astype(F32)
    y = w8a8.grouped_matmul(x, w, scale=s, per_token_scale=pt, group_list=counts, group_list_type=1,
                            output_dtype="bfloat16")
    ends = np.cumsum(counts)
    for g in range(e):
        rows = slice(int(ends[g] - counts[g]), int(ends[g]))
        if counts[g]:
            ref = w8a8.quant_matmul(x[rows], w[g], s[g], pertoken_scale=pt[rows], output_dtype="bfloat16")
            np.testing.assert_array_equal(y[rows].view(np.uint16), ref.view(np.uint16))
    np.testing.assert_array_equal(y[int(ends[-1]):].astype(F32), 0)
    # the other group-list forms give the same bits
    y0 = w8a8.grouped_matmul(x, w, scale=s, per_token_scale=pt, group_list=ends.astype(np.int64),
                             output_dtype="bfloat16")
    y2 = w8a8.grouped_matmul(x, w, scale=s, per_token_scale=pt, group_list_type=2, output_dtype="bfloat16",
                             group_list=np.stack([np.arange(e), counts], 1).astype(np.int64))
    np.testing.assert_array_equal(y0.view(np.uint16), y.view(np.uint16))
    np.testing.assert_array_equal(y2.view(np.uint16), y.view(np.uint16))


def test_transposed_weight_view_and_column_slabs_are_exact():
    # A serving-layout view (transpose of [E, N, K] storage), K = 2048: groups of few rows take the
    # weight in column slabs of 2^19 / K = 256 columns, so N = 300 is two slabs (256 + 44); a group of
    # 300 rows takes the whole-weight path. Both equal the int64 product.
    rng = np.random.default_rng(7)
    w_nk = rng.integers(-128, 128, (2, 300, 2048)).astype(np.int8)
    w = w_nk.transpose(0, 2, 1)
    x = rng.integers(-128, 128, (303, 2048)).astype(np.int8)
    y = w8a8.grouped_matmul(x, w, group_list=np.array([3, 300], np.int64), group_list_type=1, output_dtype="int32")
    ref = np.concatenate([x[:3].astype(np.int64) @ w[0].astype(np.int64), x[3:].astype(np.int64) @ w[1].astype(np.int64)])
    np.testing.assert_array_equal(y, ref)


def test_numerics_epilogue_order_is_honoured():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (6, 40)).astype(np.int8)
    w = rng.integers(-128, 128, (1, 40, 8)).astype(np.int8)
    s = rng.uniform(1e-3, 1e-2, (1, 8)).astype(F32)
    pt = rng.uniform(1e-3, 1e-2, 6).astype(F32)
    kw = dict(scale=s, per_token_scale=pt, group_list=np.array([6], np.int64), group_list_type=1, output_dtype="float16")
    for order in ("scale_then_token", "token_then_scale", "combined"):
        num = ASCEND.replace(epilogue_order=order)
        ref = w8a8.quant_matmul(x, w[0], s[0], pertoken_scale=pt, output_dtype="float16", numerics=num)
        np.testing.assert_array_equal(w8a8.grouped_matmul(x, w, numerics=num, **kw), ref)


# ----------------------------------------------------------------------------- bad input

def _gmm(**kw):
    args = dict(bias=B, scale=S.astype(bfloat16), per_token_scale=PT, group_list=COUNTS, group_list_type=1,
                output_dtype="bfloat16")
    args.update(kw)
    x = args.pop("x", X)
    w = args.pop("weight", W)
    return lambda: w8a8.grouped_matmul(x, w, **args)


@pytest.mark.parametrize("call, exc, arg", [
    (_gmm(x=X.astype(np.int16)), TypeError, "x"),
    (_gmm(x=[X, X]), ValueError, "x"),
    (_gmm(weight=W[0]), ValueError, "weight"),
    (_gmm(weight=W[:, :1]), ValueError, "weight"),
    (_gmm(scale=S), TypeError, "output_dtype"),                    # fp32 scale with bf16 output: rejected
    (_gmm(output_dtype="float16"), TypeError, "output_dtype"),     # bf16 scale with fp16 output
    (_gmm(scale=None, per_token_scale=None), TypeError, "output_dtype"),
    (_gmm(output_dtype="float32"), TypeError, "output_dtype"),
    (_gmm(scale=S.astype(np.float16)), TypeError, "scale"),
    (_gmm(scale=S[:2].astype(bfloat16)), ValueError, "scale"),
    (_gmm(scale=None, per_token_scale=None, output_dtype="int32", act_type=1), ValueError, "act_type"),
    (_gmm(scale=w8a8.trans_quant_param(S), output_dtype=None), ValueError, "per_token_scale"),
    (_gmm(per_token_scale=PT[:3]), ValueError, "per_token_scale"),
    (_gmm(per_token_scale=PT.astype(np.float16)), TypeError, "per_token_scale"),
    (_gmm(bias=B.astype(F32)), TypeError, "bias"),
    (_gmm(bias=B[:2]), ValueError, "bias"),
    (_gmm(offset=np.zeros((3, 2), F32)), ValueError, "offset"),
    (_gmm(act_type=3), ValueError, "act_type"),
    (_gmm(group_list_type=3), ValueError, "group_list_type"),
    (_gmm(group_list=COUNTS.astype(np.int32)), TypeError, "group_list"),
    (_gmm(group_list=np.array([2, 1], np.int64)), ValueError, "group_list"),
    (_gmm(group_list=np.array([2, -1, 1], np.int64)), ValueError, "group_list"),
    (_gmm(group_list=np.array([3, 1, 1], np.int64)), ValueError, "group_list"),          # total 5 > M = 4
    (_gmm(group_list=np.array([2, 1, 3], np.int64), group_list_type=0), ValueError, "group_list"),  # decreasing
    (_gmm(group_list=np.array([[3, 1]], np.int64), group_list_type=2), ValueError, "group_list"),   # expert 3
    (_gmm(group_list=COUNTS, group_list_type=2), ValueError, "group_list"),
    (_gmm(split_item=0), ValueError, "split_item"),
    (_gmm(group_type=2), ValueError, "group_type"),
    (_gmm(per_token_scale=np.array([1, np.nan, 1, 1], F32)), ValueError, "per_token_scale"),
    (_gmm(weight=np.zeros((1, 2, 70000), np.int8), scale=None, per_token_scale=None, bias=None,
          output_dtype="int32", group_list=np.array([4], np.int64)), ValueError, "weight"),
    (lambda: w8a8.valid_rows(COUNTS, 1, group_list_type=1), ValueError, "group_list"),
    # torch_npu's schema takes Tensor[] lists: a None element is refused before the op runs
    # (op-plugin op_plugin_functions.yaml:6346 @ 517f2e7d; field report: per_token_scale=[None])
    (_gmm(per_token_scale=[None]), TypeError, "per_token_scale"),
    (_gmm(bias=[None]), TypeError, "bias"),
    # int8 x with a bf16 weight: no aclnnGroupedMatmul pattern (aclnn_grouped_matmul.cpp:984-1005 @ c29bc106)
    (_gmm(weight=W.astype(F32).astype(bfloat16)), TypeError, "weight"),
])
def test_bad_input(call, exc, arg):
    with pytest.raises(exc, match=f"'{arg}'"):
        call()


def test_fp19_scale_only_when_asked():
    # fp32 scale 1 + 2^-11: FP19 keeps 10 mantissa bits, so fp19_scale="always" truncates it to 1.
    # acc 3: full precision 3 * (1 + 2^-11) = 3.00146484375 -> fp16 (spacing 2^-9 at 3) 3.001953125;
    # truncated: 3.0. The default ("adapter") leaves the GMM scale alone (not confirmed on the device).
    kw = dict(scale=np.array([[1 + 2.0 ** -11]], F32), per_token_scale=np.ones(1, F32),
              group_list=np.array([1], np.int64), group_list_type=1, output_dtype="float16")
    x, w = np.array([[1]], np.int8), np.array([[[3]]], np.int8)
    assert w8a8.grouped_matmul(x, w, **kw)[0, 0] == np.float16(3.001953125)
    assert w8a8.grouped_matmul(x, w, numerics=ASCEND.replace(fp19_scale="never"), **kw)[0, 0] == np.float16(3.001953125)
    assert w8a8.grouped_matmul(x, w, numerics=ASCEND.replace(fp19_scale="always"), **kw)[0, 0] == np.float16(3.0)
