"""swiglu and dequant_swiglu_quant: hand-checked cases, both activate_left ways, static/dynamic, groups, clamp.

Exact silu values: silu(0) = 0; silu(200) = 200 / (1 + exp(-200)) = 200 (exp(-200) is 0 in fp32);
silu(-200) = -200 / (1 + Inf) = -0.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import w8a8
from w8a8 import bfloat16

F32 = np.float32


def silu64(a):
    with np.errstate(over="ignore"):
        return a / (1 + np.exp(-a))


# ----------------------------------------------------------------------------- swiglu

def test_swiglu_hand():
    # A = [0, 200], B = [3, 0.5] -> [0 * 3, 200 * 0.5] = [0, 100]
    x = np.array([[0, 200, 3, 0.5]], F32).astype(bfloat16)
    y = w8a8.swiglu(x)
    assert y.dtype == bfloat16 and y.shape == (1, 2)
    np.testing.assert_array_equal(y.astype(F32), [[0, 100]])


def test_swiglu_dim_and_first_half_is_activated():
    x = np.array([[200, -200], [7, 9]], F32)          # split along dim 0: A = row 0, B = row 1
    np.testing.assert_array_equal(w8a8.swiglu(x, dim=0), [[200 * 7, -0.0 * 9]])


@pytest.mark.parametrize("dtype", [np.float16, bfloat16, np.float32])
def test_swiglu_formula_rounded_once(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((5, 2, 6)) * 3).astype(F32).astype(dtype)
    y = w8a8.swiglu(x)
    a, b = x.astype(F32)[..., :3], x.astype(F32)[..., 3:]
    e = np.exp(-a.astype(np.float64)).astype(F32)
    if dtype == np.float32:
        # the fp32 kernel SwigluVector (tiling key 0; ops-nn activation/swi_glu/op_kernel/swi_glu_impl.hpp:59-76
        # @ e5c3fa93): c = exp(-a); c = c + 1; c = 1 / c (Div of ones); c = c * a; c = c * b
        expected = ((F32(1) / (F32(1) + e)) * a) * b
    else:
        # SwigluVectorBF16 (keys 1 / 27, swi_glu_bf16.hpp:68-89): a / (1 + exp(-a)) * b, one RINT cast
        expected = a / (F32(1) + e) * b
    np.testing.assert_array_equal(y.astype(F32), expected.astype(dtype).astype(F32))


# ----------------------------------------------------------------------------- dequant_swiglu_quant

XI = np.array([[200, 0, 3, 5], [0, 0, 0, 0]], np.int32)
ONES = np.ones(4, F32)

# Without group_index the legacy kernels quantize (ops-nn quant/dequant_swiglu_quant/op_kernel/
# dequant_swiglu_quant_dynamic_base.hpp:184-191 @ e5c3fa93): scale = m / 127 (a scalar division: the
# scale written), r = 1 / scale, codes RINT(o * r). With group_index the group kernel
# (dequant_swiglu_quant.h:698-714) writes m * fp32(1/127) and divides o / scale. For the m of the hand
# cases below (600, 300, 6000, ...) the two scales happen to be the same fp32;
# test_legacy_and_group_kernels_quantize_differently separates them.


def test_dynamic_hand_activate_left():
    # row 0: gate = [200, 0], up = [3, 5] -> o = [600, 0]; scale = 600 / 127;
    #        codes = RINT(o * (1 / scale)) = [127, 0]
    # row 1: all zero -> scale 0, codes 0
    y, s = w8a8.dequant_swiglu_quant(XI, weight_scale=ONES, activation_scale=np.ones(2, F32), activate_left=True,
                                     quant_mode=1)
    np.testing.assert_array_equal(y, [[127, 0], [0, 0]])
    np.testing.assert_array_equal(s, [F32(600) / F32(127), 0])
    assert y.dtype == np.int8 and s.dtype == np.float32


def test_dynamic_activate_right_default():
    # activate_left=False: gate = second half [3, 5], up = first half [200, 0]:
    # o = [silu(3) * 200, silu(5) * 0] = [190.51..., 0] -> codes [127, 0], scale = o0 / 127
    y, s = w8a8.dequant_swiglu_quant(XI[:1], weight_scale=ONES, quant_mode=1)
    o0 = F32(3) / (F32(1) + F32(np.exp(-3.0))) * F32(200)
    np.testing.assert_array_equal(y, [[127, 0]])
    np.testing.assert_array_equal(s, [o0 / F32(127)])


def test_dequant_scales_multiply_in_order():
    # v = fp32(x) * weight_scale * activation_scale: [200, 0, 3, 5] * [0.5, 1, 2, 1] * 0.25
    #   = [25, 0, 1.5, 1.25]; gate [25, 0], up [1.5, 1.25]; silu(25) = 25 / (1 + exp(-25))
    y, s = w8a8.dequant_swiglu_quant(XI[:1], weight_scale=np.array([0.5, 1, 2, 1], F32),
                                     activation_scale=np.array([[0.25]], F32), activate_left=True, quant_mode=1)
    o0 = F32(25) / (F32(1) + F32(np.exp(-25.0))) * F32(1.5)
    np.testing.assert_array_equal(y, [[127, 0]])
    np.testing.assert_array_equal(s, [o0 / F32(127)])


def test_int32_bias_added_before_conversion():
    # bias [-200, 0, 0, 0] cancels the gate: o = [silu(0) * 3, 0] = 0 -> zero row
    y, s = w8a8.dequant_swiglu_quant(XI[:1], weight_scale=ONES, bias=np.array([-200, 0, 0, 0], np.int32),
                                     activate_left=True, quant_mode=1)
    np.testing.assert_array_equal(y, [[0, 0]])
    np.testing.assert_array_equal(s, [0])


def test_static_hand():
    # o = [600, 0]; quant_scale [10, 1] (divided), offset [0.4, -0.6]:
    # 600 / 10 + 0.4 = 60.4 -> 60; 0 / 1 - 0.6 = -0.6 -> -1. Scale output: 0 (unspecified).
    y, s = w8a8.dequant_swiglu_quant(XI, weight_scale=ONES, activate_left=True, quant_mode=0,
                                     quant_scale=np.array([10, 1], F32), quant_offset=np.array([0.4, -0.6], F32))
    np.testing.assert_array_equal(y, [[60, -1], [0, -1]])
    np.testing.assert_array_equal(s, [0, 0])


def test_static_scalar_scale_multiplies_reciprocal_without_a_zero_guard():
    # scalar [8]: 600 * (1/8) = 75. A scalar [1] quant_scale exists only without group_index: the legacy
    # static kernel takes quant_scale = 1 / s at init with no guard (dequant_swiglu_quant_static_base.hpp:74
    # @ e5c3fa93), so s = 0 gives o * inf + offset. Rows below (gate 100: silu(100) = 100 exactly):
    # o = [10000, 600] -> +inf -> [127, 127] (saturated); o = [-100, 0] -> [-inf, NaN] -> [-128, 0].
    # The old golden's guard (the group kernel's (s == 0) ? 1 : 1/s, dequant_swiglu_quant.h:253) reads
    # s = 0 as 1: [127, 127] (saturated) and [-100, 0].
    y, _ = w8a8.dequant_swiglu_quant(XI[:1], weight_scale=ONES, activate_left=True, quant_mode=0,
                                     quant_scale=np.array([8], F32))
    np.testing.assert_array_equal(y, [[75, 0]])
    x = np.array([[100, 100, 100, 6], [100, 100, -1, 0]], np.int32)   # gate 100 (silu = 100), up [100, 6] / [-1, 0]
    y0, _ = w8a8.dequant_swiglu_quant(x, weight_scale=ONES, activate_left=True, quant_mode=0,
                                      quant_scale=np.array([0], F32))
    np.testing.assert_array_equal(y0, [[127, 127], [-128, 0]])
    guarded = w8a8.ASCEND.replace(static_zero_scale="as_one")   # the old golden's rule: s = 0 read as 1
    assert w8a8.variants.select("dequant_swiglu_quant", x, weight_scale=ONES, activate_left=True, quant_mode=0,
                                quant_scale=np.array([0], F32)).decides == {"static_zero_scale": "ieee"}
    y1, _ = w8a8.dequant_swiglu_quant(x, weight_scale=ONES, activate_left=True, quant_mode=0,
                                      quant_scale=np.array([0], F32), numerics=guarded.replace(variants="fixed"))
    np.testing.assert_array_equal(y1, [[127, 127], [-100, 0]])


def test_smooth_scale_in_dynamic_mode():
    # o = [600, 0] * smooth [1, 1] -> same; smooth [0.5, 1] -> [300, 0]: codes [127, 0], scale 300/127
    y, s = w8a8.dequant_swiglu_quant(XI[:1], weight_scale=ONES, activate_left=True, quant_mode=1,
                                     quant_scale=np.array([0.5, 1], F32))
    np.testing.assert_array_equal(y, [[127, 0]])
    np.testing.assert_array_equal(s, [F32(300) / F32(127)])


def test_swiglu_limit_clamps_gate_and_up():
    # L = 10: gate [200, 200] -> [10, 10]; up [30, -30] -> [10, -10]; o = silu(10) * [10, -10]
    x = np.array([[200, 200, 30, -30]], np.int32)
    y, s = w8a8.dequant_swiglu_quant(x, weight_scale=ONES, activate_left=True, quant_mode=1, swiglu_limit=10.0)
    o = F32(10) / (F32(1) + F32(np.exp(-10.0))) * F32(10)
    np.testing.assert_array_equal(y, [[127, -127]])
    np.testing.assert_array_equal(s, [o / F32(127)])
    # without the clamp: gate 200 -> silu 200; up +-30 -> o = [6000, -6000]
    _, s_free = w8a8.dequant_swiglu_quant(x, weight_scale=ONES, activate_left=True, quant_mode=1)
    np.testing.assert_array_equal(s_free, [F32(6000) / F32(127)])
    # the clamp keeps negative gates: min(gate, L) only bounds from above
    xn = np.array([[-3, 0, 50, 0]], np.int32)
    _, s_neg = w8a8.dequant_swiglu_quant(xn, weight_scale=ONES, activate_left=True, quant_mode=1, swiglu_limit=10.0)
    o_neg = np.abs(F32(-3) / (F32(1) + F32(np.exp(3.0))) * F32(10))
    np.testing.assert_array_equal(s_neg, [o_neg / F32(127)])


def test_group_index_selects_scales_and_leaves_rows_unwritten():
    # H = 64 (the device's alignment with group_index). group_index counts [1, 0, 1] (G = 3):
    # row 0 -> group 0 (weight_scale 1), row 1 -> group 2 (weight_scale 0.5), row 2 past the total.
    # row 0: gate 200, up 3 -> o = 600 everywhere; row 1: gate 400 * .5 = 200, up 6 * .5 = 3 -> 600 too.
    h = 64
    x = np.zeros((3, 2 * h), np.int32)
    x[0, :h], x[0, h:] = 200, 3
    x[1, :h], x[1, h:] = 400, 6
    x[2] = 1000
    ws = np.ones((3, 2 * h), F32)
    ws[2] = 0.5
    gi = np.array([1, 0, 1], np.int64)
    y, s = w8a8.dequant_swiglu_quant(x, weight_scale=ws, activation_scale=np.ones(3, F32), group_index=gi,
                                     activate_left=True, quant_mode=1)
    np.testing.assert_array_equal(y[:2], 127)
    np.testing.assert_array_equal(s[:2], F32(600) * (F32(1) / F32(127)))      # the group kernel's formula
    np.testing.assert_array_equal(y[2], 0)       # unspecified on the device; golden zeros
    np.testing.assert_array_equal(s[2], 0)
    np.testing.assert_array_equal(w8a8.valid_rows(gi, 3, group_list_type=1), [True, True, False])


def test_bf16_input_without_dequant_matches_swiglu_then_quant():
    rng = np.random.default_rng(4)
    g = (rng.standard_normal((9, 2 * 24)) * 4).astype(F32).astype(bfloat16)
    y, s = w8a8.dequant_swiglu_quant(g, activate_left=True, quant_mode=1)
    gf = g.astype(F32)
    a, b = gf[:, :24], gf[:, 24:]
    o = (a / (F32(1) + np.exp(-a.astype(np.float64)).astype(F32)) * b).astype(F32)
    scale = np.abs(o).max(1) / F32(127)                            # the legacy kernels (no group_index)
    np.testing.assert_array_equal(s, scale)
    np.testing.assert_array_equal(y, np.rint(o * (F32(1) / scale[:, None])).astype(np.int8))


# m = 1.1171875 (bf16 1 + 15/128), o = [m, m/2], from gate 64 (silu(64) = 64 / (1 + exp(-64)) = 64
# exactly in fp32) and up = [m/64, m/128] (bf16-exact):
#   legacy (no group_index): scale = m / 127 = 0x3C102041 (0.0087967524); r = 1 / scale = 113.678314;
#       (m/2) * r = 63.499996 -> 63
#   group kernel: scale = m * fp32(1/127) = 0x3C102040 (0.0087967515); (m/2) / scale = 63.500004 -> 64
def test_legacy_and_group_kernels_quantize_differently():
    h = 64
    x = np.zeros((1, 2 * h), F32)
    x[0, :h] = 64
    x[0, h], x[0, h + 1] = 1.1171875 / 64, 1.1171875 / 128
    x = x.astype(bfloat16)
    y, s = w8a8.dequant_swiglu_quant(x, activate_left=True, quant_mode=1)
    assert w8a8.variants.select("dequant_swiglu_quant", x, activate_left=True, quant_mode=1).name == "legacy-dynamic"
    assert y[0, :3].tolist() == [127, 63, 0] and s.view(np.uint32).tolist() == [0x3C102041]
    gi = np.array([1], np.int64)
    y, s = w8a8.dequant_swiglu_quant(x, group_index=gi, activate_left=True, quant_mode=1)
    assert w8a8.variants.select("dequant_swiglu_quant", x, group_index=gi, activate_left=True,
                                quant_mode=1).name == "group"
    assert y[0, :3].tolist() == [127, 64, 0] and s.view(np.uint32).tolist() == [0x3C102040]


def test_group_index_applies_the_per_group_bias():
    # The group kernel adds row bias[g] of a [G, 2H] int32 bias to the int32 x before the cast
    # (CopyInBias(groupIdx), dequant_swiglu_quant.h:294-310, 351-360): x = 0, bias gate half 64, up half
    # [g + 1, 0, ...] -> o row 0 = 64 * 1, row 1 = 64 * 2: scales 64 and 128 times fp32(1/127), codes 127.
    h = 64
    bias = np.zeros((2, 2 * h), np.int32)
    bias[:, :h] = 64
    bias[0, h], bias[1, h] = 1, 2
    y, s = w8a8.dequant_swiglu_quant(np.zeros((2, 2 * h), np.int32), weight_scale=np.ones((2, 2 * h), F32),
                                     bias=bias, group_index=np.array([1, 1], np.int64), activate_left=True,
                                     quant_mode=1)
    np.testing.assert_array_equal(s, [F32(64) * (F32(1) / F32(127)), F32(128) * (F32(1) / F32(127))])
    assert y[:, 0].tolist() == [127, 127] and not y[:, 1:].any()


@given(hnp.arrays(np.int32, st.tuples(st.integers(1, 6), st.sampled_from([2, 14, 66])),
                  elements=st.integers(-2 ** 20, 2 ** 20)),
       st.floats(2 ** -20, 2 ** -7, width=32), st.booleans())
def test_dynamic_reconstruction_within_half_a_step(x, wscale, left):
    y, s = w8a8.dequant_swiglu_quant(x, weight_scale=np.full(x.shape[1], wscale, F32), activate_left=left,
                                     quant_mode=1)
    h = x.shape[1] // 2
    v = x.astype(np.float64) * np.float64(F32(wscale))
    gate, up = (v[:, :h], v[:, h:]) if left else (v[:, h:], v[:, :h])
    o = silu64(gate) * up
    assert (np.abs(y) <= 127).all()
    err = np.abs(y * s[:, None].astype(np.float64) - o)
    assert (err <= 0.5 * s[:, None] * (1 + 1e-4) + 1e-30).all()


# ----------------------------------------------------------------------------- bad input

def _dsq(**kw):
    args = dict(weight_scale=ONES, activate_left=True, quant_mode=1)
    args.update(kw)
    x = args.pop("x", XI)
    return lambda: w8a8.dequant_swiglu_quant(x, **args)


@pytest.mark.parametrize("call, exc, arg", [
    (lambda: w8a8.swiglu(np.zeros((2, 3), F32)), ValueError, "x"),
    (lambda: w8a8.swiglu(np.zeros((2, 4), np.int32)), TypeError, "x"),
    (lambda: w8a8.swiglu(np.zeros((2, 4), F32), dim=2), ValueError, "dim"),
    (lambda: w8a8.swiglu(np.full((2, 4), np.nan, F32)), ValueError, "x"),
    (_dsq(x=XI.astype(np.int64)), TypeError, "x"),
    (_dsq(x=XI[:, :3]), ValueError, "x"),
    (_dsq(weight_scale=None), ValueError, "weight_scale"),
    (_dsq(weight_scale=np.ones(3, F32)), ValueError, "weight_scale"),
    (_dsq(weight_scale=np.ones(4, np.float16)), TypeError, "weight_scale"),
    (_dsq(x=XI.astype(np.float16)), ValueError, "weight_scale"),        # float x takes no dequant scale
    (_dsq(activation_scale=np.ones(3, F32)), ValueError, "activation_scale"),
    (_dsq(bias=np.ones(3, np.int32)), ValueError, "bias"),
    (_dsq(bias=np.ones(4, F32)), TypeError, "bias"),
    (_dsq(quant_mode=2), ValueError, "quant_mode"),
    (_dsq(quant_mode=0), ValueError, "quant_scale"),
    (_dsq(quant_mode=0, quant_scale=np.ones(2, np.float16)), TypeError, "quant_scale"),
    (_dsq(quant_mode=0, quant_scale=np.ones(2, F32), quant_offset=np.ones(3, F32)), ValueError, "quant_offset"),
    (_dsq(quant_offset=np.ones(2, F32)), ValueError, "quant_offset"),
    (_dsq(quant_scale=np.ones(3, F32)), ValueError, "quant_scale"),
    (_dsq(group_index=np.array([2], np.int64)), ValueError, "x"),        # H = 2 is not 64-aligned
    (_dsq(activate_left=1), TypeError, "activate_left"),
    (_dsq(swiglu_limit=0.0), ValueError, "swiglu_limit"),
    (_dsq(swiglu_limit="10"), TypeError, "swiglu_limit"),
    (_dsq(x=np.zeros((2, 128), np.int32), weight_scale=np.ones((1, 128), F32), group_index=np.array([2], np.int32)),
     TypeError, "group_index"),
    (_dsq(x=np.zeros((2, 128), np.int32), weight_scale=np.ones((1, 128), F32), group_index=np.array([3], np.int64)),
     ValueError, "group_index"),
    (_dsq(x=np.zeros((2, 128), np.int32), weight_scale=np.ones(128, F32), group_index=np.array([2], np.int64)),
     ValueError, "weight_scale"),
    (_dsq(x=np.zeros((2, 128), np.int32), weight_scale=np.ones((1, 128), F32), group_index=np.array([2], np.int64),
          bias=np.zeros(128, np.int32)), ValueError, "bias"),           # [G, 2H] with group_index
    (_dsq(weight_scale=np.array([1, np.inf, 1, 1], F32)), ValueError, "weight_scale"),
])
def test_bad_input(call, exc, arg):
    with pytest.raises(exc, match=f"'{arg}'"):
        call()
