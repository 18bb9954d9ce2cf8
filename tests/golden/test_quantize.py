"""``quantize`` (npu_quantize), ``dequantize`` and ``anti_quant`` (w8a8/quantize.py).

Two kernels behind one name (op-plugin ``QuantizeKernelNpuOpApi.cpp``): ``div_mode=False`` is AscendQuantV3,
``rint(x * scale + offset)`` with its axis quirk; ``div_mode=True`` is aclnnQuantize,
``rint(x / scale) + zero_point``. The reference below evaluates the kernel formulas in float64 with
one rounding to float32 per fp32 operation (exact fp32 semantics for +, -, *, /; see
test_dynamic_quant.py) and NumPy's ``rint`` (half to even).
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from w8a8 import ASCEND, anti_quant, bfloat16, dequantize, pack_int4, quantize, unpack_int4
from w8a8.quantize import anti_quant_args, dequantize_args, quantize_args


def rn32(v):
    return np.asarray(v, np.float64).astype(np.float32).astype(np.float64)


def f64(a):
    return np.asarray(a).astype(np.float32).astype(np.float64)


def ref_mul(x, s, o=None, lo=-128, hi=127):
    t = rn32(f64(x) * f64(s))
    if o is not None:
        t = rn32(t + f64(o))
    return np.clip(np.rint(t), lo, hi)


def ref_div(x, s, zp=None, lo=-128, hi=127, before=True, divide=False):
    """torch quantize_per_channel (x86, torch 2.13): t = x * fp32(1/s), rint(zp + t) (the defaults);
    ``divide`` takes x / s, ``before=False`` adds the rounded zero point after rounding."""
    t = rn32(f64(x) / f64(s)) if divide else rn32(f64(x) * f64(rn32(1.0 / f64(s))))
    if zp is None:
        return np.clip(np.rint(t), lo, hi)
    if before:
        return np.clip(np.rint(rn32(t + f64(zp))), lo, hi)
    return np.clip(np.rint(t) + np.rint(f64(zp)), lo, hi)


# ---------------------------------------------------------------- div_mode=False: multiply

def test_multiply_semantic_rint_and_saturation():
    x = np.array([[0.5, 1.5, 2.5, -2.5, 0.75, 200.0, -200.0, 100.0]], np.float16)
    # x * 2 + 0.5: 1.5 -> 2, 3.5 -> 4, 5.5 -> 6, -4.5 -> -4 (ties to even), 2.0 -> 2,
    # 400.5 -> 127, -399.5 -> -128 (saturated: -128 *is* reachable here), 200.5 -> 127
    y = quantize(x, np.array([2.0], np.float16), np.array([0.5], np.float16), axis=-1, div_mode=False)
    assert y.dtype == np.int8 and y.tolist() == [[2, 4, 6, -4, 2, 127, -128, 127]]
    # scale 1, no offset: the ties alone, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2
    y = quantize(x[:, :4], np.array([1.0], np.float16), axis=-1, div_mode=False)
    assert y.tolist() == [[0, 2, 2, -2]]
    # the same scale in div_mode=True divides: 0.5 / 2 = 0.25 -> 0, 1.5 / 2 = 0.75 -> 1, 2.5 / 2 -> 1
    y = quantize(x[:, :4].astype(np.float32), np.array([2.0], np.float32), axis=-1)
    assert y.tolist() == [[0, 1, 1, -1]]


def test_multiply_is_fp32_and_matches_reference():
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float16, bfloat16):
        x = (rng.standard_normal((7, 17)) * 40).astype(dtype)
        s = (rng.random(17) + 0.5).astype(dtype)
        o = rng.integers(-5, 5, 17).astype(dtype)
        y = quantize(x, s, o, axis=-1, div_mode=False)
        assert np.array_equal(y, ref_mul(x, s, o))
        y = quantize(x, s, axis=1, div_mode=False)
        assert np.array_equal(y, ref_mul(x, s))


@pytest.mark.parametrize("axis", [0, 1, 2, -1, 5])
def test_ascend_quant_v3_axis_quirk_every_axis_but_minus_2_is_the_last(axis):
    # x [2, 3, 4]: with div_mode=False any axis > -2 means the LAST axis (size 4), so per-channel
    # scales of size 4 apply along it, whatever the rank and even for axis=0 or out-of-range 5.
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 4
    s = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    y = quantize(x, s, axis=axis, div_mode=False)
    assert np.array_equal(y, np.clip(np.rint(x * s), -128, 127))
    with pytest.raises(ValueError, match="'scales'.*size 4"):
        quantize(x, np.ones(2, np.float32), axis=axis, div_mode=False)  # dim 0's size is not it


def test_axis_minus_2_and_below():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 4
    s = np.array([1.0, 2.0, 3.0], np.float32)
    y = quantize(x, s, axis=-2, div_mode=False)             # -2: the second-to-last axis (size 3)
    assert np.array_equal(y, np.clip(np.rint(x * s[:, None]), -128, 127))
    with pytest.raises(ValueError, match="'axis'.*>= -2"):
        quantize(x, s, axis=-3, div_mode=False)
    with pytest.raises(ValueError, match="'x'.*2-D"):
        quantize(np.ones(4, np.float32), np.ones(1, np.float32), axis=-2, div_mode=False)
    # full-rank scales with 1s elsewhere
    y = quantize(x, np.array([1.0, 2.0, 3.0, 4.0], np.float32).reshape(1, 1, 4), axis=-1, div_mode=False)
    assert np.array_equal(y, np.clip(np.rint(x * np.array([1, 2, 3, 4])), -128, 127))


def test_int4_output():
    # codes x * 1: 7.5 -> 8 -> clamps to 7, -8.5 -> -8 (even), -9 -> -8, 2.5 -> 2, ...
    x = np.array([[7.5, -8.5, -9.0, 2.5, 0.4, -0.6, 3.0, 1.0]], np.float16)
    for dtype in ("int4", "quint4x2"):
        w = quantize(x, np.array([1.0], np.float16), axis=-1, div_mode=False, dtype=dtype)
        assert w.dtype == np.int32 and w.shape == (1, 1)
        assert unpack_int4(w).tolist() == [[7, -8, -8, 2, 0, -1, 3, 1]]
        # nibbles 7, 8, 8, 2, 0, F, 3, 1 from bit 0 up
        assert w.view(np.uint32).tolist() == [[0x13F02887]]
    with pytest.raises(ValueError, match="'x'.*multiple of 8"):
        quantize(np.ones((2, 12), np.float16), np.ones(1, np.float16), axis=-1, div_mode=False, dtype="int4")


# ---------------------------------------------------------------- div_mode=True: the vendor reference

# The A2/A3 Quantize kernel is not public (ops-nn ships only the arch35 regbase one); its vendor reference is
# torch.quantize_per_channel, which on x86 (torch 2.13) computes rint(zp + x * fp32(1/s)): the zero
# point is added *before* rounding and x is *multiplied* by the fp32 reciprocal. (The old golden
# rounded x / s first and called that "torch semantics": both halves were wrong.)

def test_divide_and_zero_point_position():
    x = np.array([[1.0, 3.0]], np.float32)
    s = np.array([2.0], np.float32)
    # x * fp32(1/2) = 0.5, 1.5 exactly -> 0, 2 (half-even)
    assert quantize(x, s, axis=-1).tolist() == [[0, 2]]
    zp = np.array([1], np.int8)
    # before rounding (golden default = torch): rint(0.5 + 1) = 2, rint(1.5 + 1) = 2
    assert quantize(x, s, zp, axis=-1).tolist() == [[2, 2]]
    # after rounding: rint(0.5) + 1 = 1, rint(1.5) + 1 = 3
    after = ASCEND.replace(zero_point_position="after_rounding")
    assert quantize(x, s, zp, axis=-1, numerics=after).tolist() == [[1, 3]]
    # a non-integer (bf16) zero point 0.5: before -> rint(1.0) = 1, rint(2.0) = 2;
    # after -> rint(t) + rint(0.5) = rint(t) + 0 = [0, 2]
    zb = np.array([0.5], np.float32).astype(bfloat16)
    assert quantize(x, s, zb, axis=-1).tolist() == [[1, 2]]
    assert quantize(x, s, zb, axis=-1, numerics=after).tolist() == [[0, 2]]


# x = 45.5, s = 7: x / s = 6.5 exactly -> rint 6 (even). fp32(1/7) = 0.1428571492433548 (above 1/7),
# 45.5 * fp32(1/7) = 6.50000029057... rounds in fp32 (spacing 2^-21 = 4.8e-7 at 6.5) up to
# 6.500000476837158 -> rint 7.
RCP_X = np.array([[45.5]], np.float32)
RCP_S = np.array([7.0], np.float32)


def test_divide_mode_multiplies_by_the_fp32_reciprocal():
    assert quantize(RCP_X, RCP_S, axis=-1).tolist() == [[7]]
    assert quantize(RCP_X, RCP_S, axis=-1, numerics=ASCEND.replace(quantize_div="div")).tolist() == [[6]]


def test_divide_mode_is_torch_quantize_per_channel():
    # Against the vendor reference itself (torch's own kernel, not our code): the reciprocal case and
    # the zero-point ties above, and random data with integer zero points.
    torch = pytest.importorskip("torch")
    import warnings

    def ref(x, s, zp):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch deprecates the quantized tensor creators
            q = torch.quantize_per_channel(torch.from_numpy(x), torch.from_numpy(s.astype(np.float64)),
                                           torch.from_numpy(zp.astype(np.int64)), 1, torch.qint8)
        return q.int_repr().numpy()

    assert ref(RCP_X, RCP_S, np.zeros(1)).tolist() == quantize(RCP_X, RCP_S, axis=-1).tolist() == [[7]]
    x, s, zp = np.array([[1.0, 3.0]], np.float32), np.array([2.0, 2.0], np.float32), np.array([1, 1], np.int8)
    assert ref(x, s, zp).tolist() == quantize(x, s, zp, axis=1).tolist() == [[2, 2]]
    rng = np.random.default_rng(5)
    s = (rng.random(9) * 0.2 + 0.01).astype(np.float32)
    x = ((rng.integers(-100, 100, (64, 9)) + 0.5) * s).astype(np.float32)   # near the .5 ties
    zp = rng.integers(-20, 20, 9).astype(np.int8)
    np.testing.assert_array_equal(quantize(x, s, zp, axis=1), ref(x, s, zp))


def test_divide_output_dtypes_and_saturation():
    x = np.array([[-300.0, -1.0, 0.0, 127.5, 300.0]], np.float32)
    s = np.array([1.0], np.float32)
    assert quantize(x, s, axis=-1).tolist() == [[-128, -1, 0, 127, 127]]    # 127.5 -> 128 -> 127
    u = quantize(x, s, np.array([128], np.uint8), axis=-1, dtype="quint8")
    assert u.dtype == np.uint8 and u.tolist() == [[0, 127, 128, 255, 255]]  # 128 + 128 -> 255
    # qint32: the saturation bounds are exact (2^31 - 1 is not a float32)
    big = np.array([[3e9, -3e9, 2.5]], np.float32)
    assert quantize(big, s, axis=-1, dtype="qint32").tolist() == [[2**31 - 1, -2**31, 2]]
    # the zero point before rounding: rint(7 + 2.5) = rint(9.5) = 10 (even)
    assert quantize(big, s, np.array([7], np.int32), axis=-1, dtype="int32").tolist() == [[2**31 - 1, -2**31, 10]]


def test_divide_uses_an_ordinary_axis():
    x = np.arange(6, dtype=np.float32).reshape(2, 3) * 10
    assert quantize(x, np.array([1.0, 10.0], np.float32), axis=0).tolist() == [[0, 10, 20], [3, 4, 5]]
    assert quantize(x, np.array([1.0, 2.0, 4.0], np.float32), axis=-1).tolist() == [[0, 5, 5], [30, 20, 12]]
    assert quantize(x, np.array([1.0, 2.0, 4.0], np.float32), axis=1).tolist() == [[0, 5, 5], [30, 20, 12]]
    with pytest.raises(ValueError, match="'axis'"):
        quantize(x, np.ones(3, np.float32), axis=2)
    with pytest.raises(ValueError, match="'scales'.*size 2"):
        quantize(x, np.ones(3, np.float32), axis=0)


def test_divide_matches_reference():
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float16, bfloat16):
        x = (rng.standard_normal((17, 7)) * 50).astype(dtype)
        s = (rng.random(7) + 0.25).astype(np.float32)
        zp = rng.integers(-20, 20, 7).astype(np.int32)
        assert np.array_equal(quantize(x, s, axis=1), ref_div(x, s))
        assert np.array_equal(quantize(x, s, zp, axis=1), ref_div(x, s, zp))
        other = ASCEND.replace(zero_point_position="after_rounding", quantize_div="div")
        assert np.array_equal(quantize(x, s, zp, axis=1, numerics=other), ref_div(x, s, zp, before=False, divide=True))
        sb = s.astype(bfloat16)
        assert np.array_equal(quantize(x, sb, axis=-1), ref_div(x, sb))


# ---------------------------------------------------------------- bad input

X = np.ones((2, 8), np.float32)
S = np.ones(8, np.float32)


@pytest.mark.parametrize("args, kwargs, exc, arg", [
    ((X.astype(np.int8), S), {}, TypeError, "'x'"),
    ((X.tolist(), S), {}, TypeError, "'x'"),
    ((np.ones((), np.float32), S), {}, ValueError, "'x'"),
    ((X, S.astype(np.float16)), {}, TypeError, "'scales'"),                     # div_mode=True: fp32/bf16
    ((X, S.astype(np.float16)), dict(div_mode=False, axis=-1), TypeError, "'scales'"),  # must be x's dtype
    ((X, np.ones(3, np.float32)), dict(axis=-1), ValueError, "'scales'"),
    ((X, np.ones((2, 8), np.float32)), dict(axis=-1), ValueError, "'scales'"),
    ((X, S, np.ones(8, np.int64)), dict(axis=-1), TypeError, "'zero_points'"),
    ((X, S, np.ones(8, np.float16)), dict(axis=-1, div_mode=False), TypeError, "'zero_points'"),
    ((X, S, np.ones(3, np.int8)), dict(axis=-1), ValueError, "'zero_points'"),
    ((X, S), dict(axis=-1, dtype="int4"), ValueError, "'dtype'"),                # int4 only div_mode=False
    ((X, S), dict(axis=-1, dtype="uint8", div_mode=False), ValueError, "'dtype'"),
    ((X, S), dict(axis=-1, dtype="nonsense"), TypeError, "'dtype'"),
    ((X, S), dict(axis=1.0), TypeError, "'axis'"),
    ((X, S), dict(axis=-1, div_mode=1), TypeError, "'div_mode'"),
])
def test_bad_input_names_the_argument(args, kwargs, exc, arg):
    with pytest.raises(exc) as e:
        quantize(*args, **kwargs)
    assert arg in str(e.value) and str(e.value).startswith("quantize: ")


@pytest.mark.parametrize("div_mode", [True, False])
def test_nan_inf_raise_by_default(div_mode):
    x = X.copy()
    x[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"'x'.*NaN at index \(1, 3\)"):
        quantize(x, S, axis=-1, div_mode=div_mode)
    s = S.copy()
    s[2] = np.inf
    with pytest.raises(ValueError, match=r"'scales'.*Inf at index \(2,\)"):
        quantize(X, s, axis=-1, div_mode=div_mode)
    z = np.zeros(8, np.float32)
    z[0] = np.nan
    with pytest.raises(ValueError, match="'zero_points'.*NaN"):
        quantize(X, S, z, axis=-1, div_mode=div_mode)
    # nan_policy="ieee" computes through: NaN code 0, Inf saturates
    ieee = ASCEND.replace(nan_policy="ieee")
    x[0, 0] = np.inf
    y = quantize(x, S, axis=-1, div_mode=div_mode, numerics=ieee)
    assert y[1, 3] == 0 and y[0, 0] == 127


def test_non_contiguous_views_equal_the_contiguous_copy():
    rng = np.random.default_rng(2)
    base = (rng.standard_normal((16, 24)) * 30).astype(np.float16)
    for view in (base.T, base[::2, ::3], base[:, ::-1]):
        n = view.shape[-1]
        s = (rng.random(2 * n) + 0.5).astype(np.float16)[::2]
        c = np.ascontiguousarray(view)
        assert np.array_equal(quantize(view, s, s, axis=-1, div_mode=False),
                              quantize(c, np.ascontiguousarray(s), np.ascontiguousarray(s), axis=-1, div_mode=False))
        s32 = s.astype(np.float32)
        assert np.array_equal(quantize(view, s32[::-1], axis=-1), quantize(c, s32[::-1].copy(), axis=-1))


# ---------------------------------------------------------------- dequantize / anti_quant

def test_dequantize_formula_and_dtypes():
    y = np.array([[-128, 0, 127], [5, -5, 1]], np.int8)
    s = np.array([0.1, 0.2, 0.3], np.float32)
    zp = np.array([1.0, -2.0, 0.0], np.float32)
    want = rn32((f64(y) - f64(zp)) * f64(s))          # y - zp is exact in fp32
    out = dequantize(y, s, zp)
    assert out.dtype == np.float32 and np.array_equal(out, want)
    assert np.array_equal(dequantize(y, s, zp, output_dtype="bfloat16"), want.astype(np.float32).astype(bfloat16))
    assert np.array_equal(dequantize(y, s, zp, output_dtype="float16"), want.astype(np.float32).astype(np.float16))
    # per-row scales of a dynamic quantizer: shape y.shape[:-1] with axis=None
    r = np.array([0.5, 2.0], np.float32)
    assert dequantize(y, r, axis=None).tolist() == [[-64.0, 0.0, 63.5], [10.0, -10.0, 2.0]]
    # per-channel along axis 0
    assert dequantize(y, r, axis=0).tolist() == [[-64.0, 0.0, 63.5], [10.0, -10.0, 2.0]]


def test_dequantize_errors():
    y = np.zeros((2, 3), np.int8)
    with pytest.raises(TypeError, match="'y'"):
        dequantize(y.astype(np.float32), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="'output_dtype'"):
        dequantize(y, np.ones(3, np.float32), output_dtype="int8")
    with pytest.raises(ValueError, match="'scale'"):
        dequantize(y, np.ones(3, np.float32), axis=None)
    with pytest.raises(ValueError, match="'axis'"):
        dequantize(y, np.ones(3, np.float32), axis=2)      # used to wrap around to axis 0 silently
    with pytest.raises(ValueError, match="'scale'"):
        dequantize(y, np.ones(4, np.float32))


def test_args_shape_the_channel_vectors():
    # quantize_args: scales / zero points as given and reshaped to broadcast along the channel axis.
    # div_mode=False: every axis but -2 is the last (AscendQuantV3); div_mode=True: an ordinary axis.
    x = np.ones((2, 3, 8), np.float16)
    a = quantize_args(x, np.ones(8, np.float16), np.zeros(1, np.float16), axis=0, div_mode=False)
    assert (a.axis, a.channel_axis, a.scales_b.shape, a.zero_points_b.shape, a.out_name) == (0, 2, (1, 1, 8), (1, 1, 1), "int8")
    b = quantize_args(x.astype(np.float32), np.ones(3, np.float32), dtype="uint8", axis=-2)
    assert (b.channel_axis, b.scales_b.shape, b.zero_points_b) == (1, (1, 3, 1), None)
    # dequantize_args: per row (axis=None) -> [..., 1]; anti_quant_args: int4 words stay packed, n unpacked
    d = dequantize_args(np.zeros((2, 3, 8), np.int8), np.ones((2, 3), np.float32), np.zeros((2, 3), np.int32), axis=None)
    assert (d.axis, d.scale_b.shape, d.zero_point_b.shape) == (None, (2, 3, 1), (2, 3, 1))
    q = anti_quant_args(np.zeros((4, 2), np.int32), np.ones(16, np.float32), src_dtype="int4")
    assert (q.x.shape, q.n, q.dst) == ((4, 2), 16, np.float16)


def test_dequantize_per_row_zero_point_must_have_the_scales_shape():
    # axis=None: scale and zero_point are per row, of shape y.shape[:-1]. A [4, 3] zero point against
    # y [3, 16] used to broadcast silently to a [4, 3, 16] result.
    y = np.arange(48, dtype=np.int8).reshape(3, 16)
    s = np.array([0.5, 1.0, 2.0], np.float32)
    with pytest.raises(ValueError, match=r"'zero_point' must be of shape y\.shape\[:-1\] = \(3,\)"):
        dequantize(y, s, np.arange(12, dtype=np.int32).reshape(4, 3), axis=None)
    with pytest.raises(ValueError, match="'zero_point'"):
        dequantize(y, s, np.ones(1, np.float32), axis=None)       # no broadcasting of a size-1 zero point either
    # the right shape: (y[r] - z[r]) * s[r]; y[1, 0] = 16 -> (16 - 4) * 1 = 12, y[2, 15] = 47 -> (47 + 2) * 2 = 98
    out = dequantize(y, s, np.array([1, 4, -2], np.int32), axis=None)
    assert out.shape == (3, 16) and (out[0, 0], out[1, 0], out[2, 15]) == (-0.5, 12.0, 98.0)


def test_dequantize_overflow_and_nan_are_ieee_without_warnings():
    # (y - z) * s in fp32: an overflow of finite inputs is IEEE, no RuntimeWarning (the suite makes those
    # errors). 127 * 3e38 overflows fp32 to +Inf; -128 * 3e38 to -Inf; 0 * 3e38 = 0. A zero point of 3e38
    # makes y - z = -3e38 (exact after rounding), times 2 -> -Inf. An Inf scale is refused under the
    # default nan_policy="raise"; under "ieee" it times y = 0 is NaN.
    y = np.array([[127, -128, 0]], np.int8)
    out = dequantize(y, np.full(3, 3e38, np.float32))
    assert out.tolist() == [[np.inf, -np.inf, 0.0]]
    assert dequantize(y, np.full(3, 2.0, np.float32), np.full(3, 3e38, np.float32)).tolist() == [[-np.inf] * 3]
    with pytest.raises(ValueError, match=r"dequantize: argument 'scale' must be finite.*got Inf at index \(0,\)"):
        dequantize(y, np.full(3, np.inf, np.float32), output_dtype="bfloat16")
    nan = dequantize(y, np.full(3, np.inf, np.float32), output_dtype="bfloat16",
                     numerics=ASCEND.replace(nan_policy="ieee"))
    # bf16 bits: +Inf 0x7F80, -Inf 0xFF80, and 0 * Inf = the x86 default NaN (sign set) -> 0xFFC0
    assert nan.view(np.uint16).tolist() == [[0x7F80, 0xFF80, 0xFFC0]]


@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 7, 17, 1025]), st.sampled_from([True, False]))
def test_quantize_dequantize_within_half_a_scale(seed, n, div_mode):
    # No saturation (|x / s| <= 127): |code * s - x| <= s * (0.5 + 2^-15). The extra covers the fp32
    # roundings of x / s (at most 127 * 2^-24 codes), or of 1 / s and x * (1 / s) (2 * 127 * 2^-24).
    rng = np.random.default_rng(seed)
    s = (rng.random(n) * 0.1 + 1e-3).astype(np.float32)
    x = ((rng.random((3, n)) * 2 - 1) * 127 * s).astype(np.float32)
    if div_mode:
        y = quantize(x, s, axis=-1)
    else:
        y = quantize(x, (np.float32(1) / s).astype(np.float32), axis=-1, div_mode=False)
    err = np.abs(y.astype(np.float64) * s - x)
    assert np.all(err <= s * (0.5 + 2.0**-15))
    back = dequantize(y, s)
    assert np.array_equal(back, rn32(f64(y) * f64(s)).astype(np.float32))


def test_anti_quant():
    x = np.array([[-128, 0, 127, 5]], np.int8)
    s = np.array([0.5, 0.25, 2.0, 0.1], np.float32)
    o = np.array([1.0, -1.0, 0.0, 0.5], np.float32)
    # (x + offset) * scale: the offset is ADDED (the negated zero point); fp32 then one RNE cast
    want = rn32((f64(x) + f64(o)) * f64(s)).astype(np.float32)
    assert np.array_equal(anti_quant(x, s, offset=o), want.astype(np.float16))
    assert anti_quant(x, s, offset=o).dtype == np.float16
    assert np.array_equal(anti_quant(x, s, offset=o, dst_dtype="bfloat16"), want.astype(bfloat16))
    # packed int4 source: 8 codes per int32, scale over the unpacked last dim
    codes = np.array([[1, -1, 2, -2, 3, -3, 4, -4]], np.int8)
    s8 = np.full(8, 0.5, np.float32)
    out = anti_quant(pack_int4(codes), s8, src_dtype="quint4x2")
    assert out.tolist() == [[0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, -2.0]]
    with pytest.raises(ValueError, match="'src_dtype'"):
        anti_quant(x, s, src_dtype="uint8")
    with pytest.raises(ValueError, match="'dst_dtype'"):
        anti_quant(x, s, dst_dtype="float32")
    with pytest.raises(ValueError, match="'scale'"):
        anti_quant(x, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="'offset'"):
        anti_quant(x, s, offset=o.astype(bfloat16))
    with pytest.raises(ValueError, match="'offset'"):
        anti_quant(x, s, offset=np.ones(1, np.float32))
    with pytest.raises(TypeError, match="'x'"):
        anti_quant(x.astype(np.int32), s)
