"""Export-time helpers with msModelSlim's formulas (w8a8/offline.py) — msModelSlim ``save/ascendv1.py``,
``ir/api/impl/int_quantization.py``.

msModelSlim computes in float32 torch with ``round`` = half to even. The reference here: float64
with one rounding to float32 per fp32 operation (exactly fp32 arithmetic, see test_dynamic_quant.py)
and ``np.rint``.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from w8a8 import bfloat16, calibrate_activation_per_tensor, quantize_weight_per_channel, static_params

EPS = float(np.finfo(np.float32).eps)   # 2^-23


def rn32(v):
    return np.asarray(v, np.float64).astype(np.float32).astype(np.float64)


def f64(a):
    return np.asarray(a).astype(np.float32).astype(np.float64)


def ref_weight(w):
    wf = f64(w)
    lo = np.minimum(wf.min(axis=-1, keepdims=True), 0)      # range clamped to include 0
    hi = np.maximum(wf.max(axis=-1, keepdims=True), 0)
    scale = np.maximum(rn32(np.maximum(-lo, hi) / 127), EPS)
    q = np.clip(np.rint(rn32(wf / scale)), -128, 127)
    return q.astype(np.int8), scale.astype(np.float32)


def ref_activation(x):
    xf = f64(x)
    lo, hi = min(xf.min(), 0.0), max(xf.max(), 0.0)
    scale = max(rn32(rn32(hi / 255) - rn32(lo / 255)), EPS)
    offset = np.rint(rn32(-lo / scale)) - 128
    return np.float32(scale), np.float32(offset)


# ---------------------------------------------------------------- weights

def test_weight_named_rows():
    w = np.array([[0.5, -1.27, 0.0, 0.635],     # amax 1.27 -> scale RN32(1.27 / 127) ~ 0.01; -1.27 -> -127
                  [1.0, 2.0, 0.5, 0.25],         # all positive: lo clamps to 0, scale = 2/127
                  [0.0, 0.0, 0.0, 0.0],          # zero row: the scale floors at fp32 eps = 2^-23
                  [-3.0, -1.5, -0.75, -6.0]], np.float32)   # all negative: hi clamps to 0
    q, s, o = quantize_weight_per_channel(w)
    rq, rs = ref_weight(w)
    assert np.array_equal(q, rq) and np.array_equal(s, rs)
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (4, 1)
    assert o.shape == (4, 1) and o.dtype == np.float32 and not o.any()            # symmetric: zeros
    assert s[2, 0] == np.float32(2.0**-23) and q[2].tolist() == [0, 0, 0, 0]
    assert q[0, 1] == -127 and q[1].tolist() == [64, 127, 32, 16]                  # 63.5 -> 64 (even)
    assert q[3].tolist() == [-64, -32, -16, -127]                                   # -63.5 -> -64 (even)


def test_weight_3d_and_dtypes():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 5, 17)).astype(np.float32)
    q, s, _ = quantize_weight_per_channel(w)
    assert q.shape == (3, 5, 17) and s.shape == (3, 5, 1)
    rq, rs = ref_weight(w)
    assert np.array_equal(q, rq) and np.array_equal(s, rs)
    for dtype in (bfloat16, np.float16):
        q, s, _ = quantize_weight_per_channel(w[0].astype(dtype))
        rq, rs = ref_weight(w[0].astype(dtype))
        assert np.array_equal(q, rq) and np.array_equal(s, rs)


def test_weight_errors():
    with pytest.raises(TypeError, match="'w'"):
        quantize_weight_per_channel(np.ones((2, 3), np.int8))
    with pytest.raises(ValueError, match="'w'"):
        quantize_weight_per_channel(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="'w'"):
        quantize_weight_per_channel(np.ones((1, 2, 3, 4), np.float32))


@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 7, 17, 1025]))
def test_weight_property(seed, k):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((3, k)) * 10.0 ** rng.integers(-3, 2)).astype(np.float32)
    q, s, _ = quantize_weight_per_channel(w)
    rq, rs = ref_weight(w)
    assert np.array_equal(q, rq) and np.array_equal(s, rs)
    # symmetric: the row's absmax maps to +-127 (unless the scale sits on its eps floor: a row
    # whose absmax is below 127 * 2^-23 keeps smaller codes), dequant within half a step
    top = np.abs(q.astype(np.int32)).max(axis=1)
    assert np.all((top == 127) | (s[:, 0] == np.float32(EPS)))
    assert np.all(np.abs(q * f64(s) - f64(w)) <= f64(s) * (0.5 + 2.0**-15))


# ---------------------------------------------------------------- activations

@pytest.mark.parametrize("values, offset", [
    ([-1.0, 3.0, 0.5], -64.0),    # scale = 3/255 - (-1)/255 = 4/255; 1 / scale = 63.75 -> 64; 64 - 128
    ([0.5, 2.0, 1.0], -128.0),    # all positive: lo = 0 -> offset = 0 - 128
    ([-2.0, -0.5], 127.0),        # all negative: hi = 0 -> -lo / scale = 255 -> 127
    ([0.0, 0.0], -128.0),         # zero: scale floors at eps, offset -128
])
def test_activation_named(values, offset):
    x = np.array(values, np.float32)
    s, o = calibrate_activation_per_tensor(x)
    assert s.shape == (1,) and o.shape == (1,) and s.dtype == np.float32 and o.dtype == np.float32
    rs, ro = ref_activation(x)
    assert s[0] == rs and o[0] == ro == offset


def test_activation_any_shape_and_errors():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 3, 7)) + 0.2).astype(bfloat16)
    s, o = calibrate_activation_per_tensor(x)
    rs, ro = ref_activation(x)
    assert s[0] == rs and o[0] == ro and -128 <= o[0] <= 127 and o[0] == np.rint(o[0])
    with pytest.raises(ValueError, match="'x'"):
        calibrate_activation_per_tensor(np.zeros((0, 3), np.float32))
    with pytest.raises(TypeError, match="'x'"):
        calibrate_activation_per_tensor(np.zeros(3, np.int32))


# ---------------------------------------------------------------- static_params

def ref_static(weight, ws, s_in, o_in, bias):
    n = weight.shape[0]
    deq = rn32(f64(s_in).reshape(()) * f64(ws).reshape(n))
    b = np.zeros(n) if bias is None else f64(bias)
    rowsum = weight.astype(np.int64).sum(axis=1).astype(np.float64)     # exact (< 2^24)
    qb = np.rint(rn32(rn32(b / deq) - rn32(rowsum * f64(o_in).reshape(()))))
    return deq.astype(np.float32), qb.astype(np.int32)


def test_static_params_formulas():
    rng = np.random.default_rng(2)
    weight = rng.integers(-128, 128, (9, 33)).astype(np.int8)
    ws = (rng.random((9, 1)) * 0.01).astype(np.float32)
    s_in = np.array([0.02], np.float32)
    o_in = np.array([-7.0], np.float32)
    bias = (rng.standard_normal(9)).astype(np.float32)
    for b in (None, bias):
        rdeq, rqb = ref_static(weight, ws, s_in, o_in, b)
        deq, qb = static_params(weight, ws, s_in, o_in, b)
        assert deq.dtype == np.float32 and deq.shape == (9,) and np.array_equal(deq, rdeq)
        assert qb.dtype == np.int32 and np.array_equal(qb, rqb)
        # non-bf16 model: deq_scale as int64 raw fp32 bits (deqscale2int64), same quant_bias
        deq64, qb64 = static_params(weight, ws.reshape(9), s_in, o_in, b, model_dtype="float16")
        assert deq64.dtype == np.int64 and np.array_equal(deq64, rdeq.view(np.int32).astype(np.int64))
        assert np.array_equal(qb64, rqb)
    # without bias, quant_bias is exactly -input_offset * rowsum(w) (integers times an integer)
    _, qb = static_params(weight, ws, s_in, o_in)
    assert np.array_equal(qb, 7 * weight.astype(np.int64).sum(axis=1))


def test_static_params_named():
    # deq = 0.5 * 0.25 = 0.125; bias 1.0 / 0.125 = 8; rowsum(w) = 3 + (-1) = 2; offset 3 -> 8 - 6 = 2
    w = np.array([[3, -1]], np.int8)
    deq, qb = static_params(w, np.array([[0.25]], np.float32), np.array([0.5], np.float32),
                            np.array([3.0], np.float32), np.array([1.0], np.float32))
    assert deq.tolist() == [0.125] and qb.tolist() == [2]
    deq, _ = static_params(w, np.array([0.25], np.float32), np.array([0.5], np.float32), np.array([3.0], np.float32),
                           model_dtype="float16")
    assert deq.tolist() == [0x3E000000]          # 0.125 = 0x3E000000 as raw bits


def test_static_params_int32_bound():
    w = np.zeros((1, 4), np.int8)
    one = np.ones(1, np.float32)
    # b / deq = 2^31 - 128 (the largest float32 below 2^31) fits int32
    _, qb = static_params(w, one, one, 0 * one, np.array([2147483520.0], np.float32))
    assert qb.tolist() == [2147483520]
    # 2^31 does not: an error, not a silent wrap to -2^31
    with pytest.raises(ValueError, match="'weight_scale'.*int32"):
        static_params(w, one, one, 0 * one, np.array([2.0**31], np.float32))
    # -2^31 is an int32
    assert static_params(w, one, one, 0 * one, np.array([-2.0**31], np.float32))[1].tolist() == [-2**31]
    # a zero deq_scale makes b / deq infinite
    with pytest.raises(ValueError, match="'weight_scale'"):
        static_params(w, 0 * one, one, 0 * one, one)


@pytest.mark.parametrize("kwargs, exc, arg", [
    (dict(weight=np.ones((3, 4), np.int32)), TypeError, "'weight'"),
    (dict(weight=np.ones(4, np.int8)), ValueError, "'weight'"),
    (dict(weight_scale=np.ones(4, np.float32)), ValueError, "'weight_scale'"),
    (dict(weight_scale=np.ones(3, np.float16)), TypeError, "'weight_scale'"),
    (dict(input_scale=np.ones(1, np.float16)), TypeError, "'input_scale'"),
    (dict(input_offset=np.ones(1, np.int8)), TypeError, "'input_offset'"),
    (dict(bias=np.ones(4, np.float32)), ValueError, "'bias'"),
    (dict(bias=np.ones(3, np.int32)), TypeError, "'bias'"),
    (dict(model_dtype="nonsense"), TypeError, "'model_dtype'"),
])
def test_static_params_errors(kwargs, exc, arg):
    base = dict(weight=np.ones((3, 4), np.int8), weight_scale=np.ones(3, np.float32),
                input_scale=np.ones(1, np.float32), input_offset=np.zeros(1, np.float32))
    with pytest.raises(exc) as e:
        static_params(**{**base, **kwargs})
    assert arg in str(e.value)


def test_nan_inf_inputs_raise():
    w = np.ones((3, 4), np.float32)
    w[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"'w'.*NaN at index \(1, 2\)"):
        quantize_weight_per_channel(w)         # used to write garbage codes (NaN cast to int8)
    with pytest.raises(ValueError, match="'x'.*NaN"):
        calibrate_activation_per_tensor(w)
    one = np.ones(1, np.float32)
    base = dict(weight=np.ones((1, 4), np.int8), weight_scale=one, input_scale=one, input_offset=0 * one)
    for arg in ("weight_scale", "input_scale", "input_offset"):
        with pytest.raises(ValueError, match=f"'{arg}'.*Inf"):
            static_params(**{**base, arg: np.array([np.inf], np.float32)})
    with pytest.raises(ValueError, match="'bias'.*NaN"):
        static_params(**base, bias=np.array([np.nan], np.float32))


def test_non_contiguous_inputs():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((40, 30)).astype(np.float32)
    for view in (w.T, w[::3, ::2]):
        assert all(np.array_equal(a, b) for a, b in zip(quantize_weight_per_channel(view),
                                                        quantize_weight_per_channel(np.ascontiguousarray(view))))
        assert calibrate_activation_per_tensor(view) == calibrate_activation_per_tensor(view.copy())
    q, s, _ = quantize_weight_per_channel(w)
    s_in, o_in = calibrate_activation_per_tensor(w)
    a = static_params(q[::2], s[::2], s_in, o_in)
    b = static_params(q[::2].copy(), s[::2].copy(), s_in, o_in)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
