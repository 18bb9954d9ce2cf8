"""The whole W8A8 Linear serving paths (w8a8/linear.py) — SGLang ``linear_method_npu.py``, vllm-ascend
``w8a8_static.py`` / ``w8a8_dynamic.py``.

Each path is recomputed here step by step from the checkpoint tensors (int8 weight ``[N, K]``,
fp32 ``weight_scale [N, 1]``, ...), the way SGLang loads and runs them, without calling any golden
op: the quantizer and epilogue in float64 with one rounding to float32 per fp32 operation (exact
fp32 arithmetic, see test_quant_matmul.py), the accumulator as an int64 matmul, bf16 rounding by an
explicit round-to-nearest-even on the bits. Then the accuracy of the whole chain against a float64
model on Gaussian data (SQNR).
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from w8a8 import (variants, bfloat16, calibrate_activation_per_tensor, dynamic_linear_stages, dynamic_quant,
                  quantize_weight_per_channel, static_linear_stages, static_params, w8a8_dynamic_linear,
                  w8a8_static_linear)
from w8a8.linear import dynamic_linear_params, static_activation_params


def rn32(v):
    return np.asarray(v, np.float64).astype(np.float32).astype(np.float64)


def f64(a):
    return np.asarray(a).astype(np.float32).astype(np.float64)


def bf16_rne(v64):
    u = np.asarray(v64, np.float64).astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(bfloat16)


def to_dtype(v64, dtype):
    """fp32 value(s) -> bf16 / fp16 by RNE (the value is already an fp32 number)."""
    if np.dtype(dtype) == np.dtype(bfloat16):
        return bf16_rne(v64)
    with np.errstate(over="ignore"):
        return np.asarray(v64, np.float64).astype(np.float32).astype(np.float16)


def fp19_mask(s32):
    return (np.asarray(s32, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def sqnr_db(y, ref):
    y = np.asarray(y).astype(np.float64)
    return 10 * np.log10(np.sum(ref ** 2) / np.sum((y - ref) ** 2))


# ---------------------------------------------------------------- reference recomputations

def ref_dynamic(x, weight, weight_scale, bias=None):
    """SGLang NPUW8A8Int8DynamicLinearMethod on the checkpoint tensors, step by step."""
    n, k = weight.shape
    xf = f64(x).reshape(-1, k)
    # npu_dynamic_quant (ops-nn dynamic_quant.h): inv = 127 / amax, codes rint(x * inv); the scale is
    # amax * fp32(1/127) in the single-row / multi-row / double-buffer kernels and 1 / inv in the
    # others (ops-nn dynamic_quant_tiling.cpp; which one runs is pinned by tests/golden/test_variants.py)
    rcp = variants.select("dynamic_quant", x.reshape(-1, k)).decides["scale_out"] == "amax_mul_rcp"
    amax = np.abs(xf).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = rn32(127.0 / amax)
        codes = np.where(amax == 0, 0.0, np.rint(rn32(xf * inv)))
        s_tok = np.where(amax == 0, 0.0, rn32(amax * f64(rn32(1.0 / 127))) if rcp else rn32(1.0 / inv))
    # load: weight.T (K, N); weight_scale flattened, in params_dtype (bf16 for a bf16 model, rounded),
    # the fp32 copy for an fp16 model
    s_w = f64(to_dtype(f64(weight_scale).reshape(n), bfloat16)) if x.dtype == bfloat16 else f64(weight_scale).reshape(n)
    acc = codes.astype(np.int64) @ weight.astype(np.int64).T
    # npu_quant_matmul per-token epilogue: ((fp32(acc) * s_w[n]) * s_tok[m]) + bias[n] -> x.dtype
    v = rn32(rn32(rn32(acc) * s_w) * s_tok)
    if bias is not None:
        v = rn32(v + f64(to_dtype(f64(bias), x.dtype)))
    return to_dtype(v, x.dtype).reshape(x.shape[:-1] + (n,)), codes.astype(np.int8)


def ref_static(x, weight, input_scale, input_offset, deq_scale, quant_bias, bias=None):
    """SGLang NPUW8A8Int8LinearMethod on the checkpoint tensors, step by step."""
    n, k = weight.shape
    params = x.dtype
    # load: input_scale / input_offset become params_dtype parameters; the reciprocal is computed
    # in params_dtype (torch: fp32 division, one rounding)
    s_param = f64(to_dtype(f64(input_scale).reshape(()), params))
    recip = f64(to_dtype(rn32(1.0 / s_param), params))
    off = f64(to_dtype(f64(input_offset).reshape(()), params))
    # npu_quantize(div_mode=False): sat_int8(rint(x * recip + off)) in fp32
    xq = np.clip(np.rint(rn32(rn32(f64(x).reshape(-1, k) * recip) + off)), -128, 127).astype(np.int64)
    acc = xq @ weight.astype(np.int64).T
    if quant_bias is not None:
        acc = acc + quant_bias.astype(np.int64).reshape(n)          # inside the cube
    if deq_scale.dtype == np.int64:                                    # raw fp32 bits read as FP19
        deq = f64(fp19_mask(deq_scale.astype(np.uint32).view(np.float32)))
    elif params == np.float16:                                         # the adapter packs an fp32 scale
        deq = f64(fp19_mask(deq_scale))
    else:
        deq = f64(deq_scale)
    v = rn32(rn32(acc) * deq.reshape(n))
    if bias is not None:
        v = rn32(v + f64(to_dtype(f64(bias), params)))
    return to_dtype(v, params).reshape(x.shape[:-1] + (n,)), xq.astype(np.int8)


def make_layer(rng, n, k, dtype):
    w = rng.standard_normal((n, k)) * 0.05
    weight, ws, woff = quantize_weight_per_channel(w.astype(np.float32))
    x = rng.standard_normal((5, k)).astype(dtype)
    return w, weight, ws, woff, x


# ---------------------------------------------------------------- dynamic

@pytest.mark.parametrize("dtype", [bfloat16, np.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("lead", [(5,), (2, 3), ()])
def test_dynamic_linear_equals_the_step_by_step_path(dtype, with_bias, lead):
    rng = np.random.default_rng(1)
    n, k = 7, 33
    _, weight, ws, _, _ = make_layer(rng, n, k, dtype)
    x = (rng.standard_normal(lead + (k,)) * 2).astype(dtype)
    bias = (rng.standard_normal(n) * 0.1).astype(np.float32) if with_bias else None
    assert weight.shape == (n, k) and ws.shape == (n, 1) and ws.dtype == np.float32   # checkpoint layout
    y = w8a8_dynamic_linear(x, weight, ws, bias=bias)
    want, codes = ref_dynamic(x, weight, ws, bias)
    assert y.shape == lead + (n,) and same_bits(y, want)
    st_ = dynamic_linear_stages(x, weight, ws, bias=bias)
    assert np.array_equal(st_["x_q"], codes)
    assert st_["weight_kn"].shape == (k, n) and np.array_equal(st_["weight_kn"], weight.T)
    # the weight scale as SGLang holds it: bf16 (rounded) for a bf16 model, fp32 for fp16
    assert st_["weight_scale"].dtype == (np.dtype(bfloat16) if dtype is bfloat16 else np.float32)
    assert np.array_equal(st_["acc"], codes.astype(np.int64) @ weight.astype(np.int64).T)


def test_dynamic_linear_bf16_weight_scale_is_rounded():
    # weight_scale 0x3C001FFF (~0.0078134) is not a bf16: SGLang's bf16 parameter rounds it to
    # 0x3C00 (2^-7). With one weight row of 1s and x = [127, 0, ...]: acc = 127, s_tok = 1, so
    # y = 127 * 2^-7 = 0.9921875 exactly; the fp32 scale would have given 0.99228... (-> bf16 0.9921875
    # too, so the stage value is the evidence).
    w = np.ones((1, 8), np.int8)
    ws = np.array([[0x3C001FFF]], np.uint32).view(np.float32)
    x = np.zeros((1, 8), np.float32)
    x[0, 0] = 127.0
    st_ = dynamic_linear_stages(x.astype(bfloat16), w, ws)
    assert st_["weight_scale"].view(np.uint16).tolist() == [0x3C00]
    assert st_["y"].tolist() == [[0.9921875]]
    st16 = dynamic_linear_stages(x.astype(np.float16), w, ws)
    assert st16["weight_scale"].view(np.uint32).tolist() == [0x3C001FFF]     # fp16 model: the fp32 copy


def test_dynamic_linear_zero_row_and_non_contiguous_x():
    rng = np.random.default_rng(2)
    _, weight, ws, _, _ = make_layer(rng, 9, 40, bfloat16)
    base = rng.standard_normal((6, 80)).astype(bfloat16)
    base[2] = 0
    x = base[:, ::2]                                       # strided [6, 40], one all-zero row
    y = w8a8_dynamic_linear(x, weight, ws)
    assert same_bits(y, w8a8_dynamic_linear(np.ascontiguousarray(x), weight, ws))
    assert same_bits(y, ref_dynamic(x, weight, ws)[0])
    assert not np.any(y[2].astype(np.float32))             # zero row -> zero output (scale 0)
    # a non-contiguous weight (e.g. a slice of a fused qkv weight) and [N] scale
    wide = np.repeat(weight, 2, axis=0)[::2]                 # rows 0, 1, ... of weight, strided
    assert same_bits(w8a8_dynamic_linear(x, wide, ws.reshape(-1)), y)


# ---------------------------------------------------------------- static

def make_static(rng, n, k, dtype, with_bias):
    w = rng.standard_normal((n, k)) * 0.05
    weight, ws, _ = quantize_weight_per_channel(w.astype(np.float32))
    x = (rng.standard_normal((5, k)) + 0.3).astype(dtype)
    s_in, o_in = calibrate_activation_per_tensor(x)
    bias = (rng.standard_normal(n) * 0.1).astype(np.float32) if with_bias else None
    model = "bfloat16" if dtype is bfloat16 else "float16"
    deq, qb = static_params(weight, ws, s_in, o_in, bias, model_dtype=model)
    return w, weight, x, s_in, o_in, deq, qb, bias


@pytest.mark.parametrize("dtype", [bfloat16, np.float16], ids=["bf16-fp32-deq", "fp16-int64-deq"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_static_linear_equals_the_step_by_step_path(dtype, with_bias):
    rng = np.random.default_rng(3)
    n, k = 17, 33
    _, weight, x, s_in, o_in, deq, qb, bias = make_static(rng, n, k, dtype, with_bias)
    # msModelSlim: deq_scale float32 [N] for a bf16 model, int64 [N] (raw fp32 bits) otherwise
    assert deq.dtype == (np.float32 if dtype is bfloat16 else np.int64) and qb.dtype == np.int32
    y = w8a8_static_linear(x, weight, input_scale=s_in, input_offset=o_in, deq_scale=deq, quant_bias=qb)
    want, xq = ref_static(x, weight, s_in, o_in, deq, qb)
    assert y.dtype == x.dtype and same_bits(y, want)
    st_ = static_linear_stages(x, weight, input_scale=s_in, input_offset=o_in, deq_scale=deq, quant_bias=qb)
    assert np.array_equal(st_["x_q"], xq)
    assert st_["input_scale_reciprocal"].shape == (k,) and st_["input_scale_reciprocal"].dtype == x.dtype
    # TP rank > 0 of a RowParallelLinear: no quant_bias (neither the bias nor the offset correction)
    y0 = w8a8_static_linear(x, weight, input_scale=s_in, input_offset=o_in, deq_scale=deq, quant_bias=None)
    assert same_bits(y0, ref_static(x, weight, s_in, o_in, deq, None)[0])


def test_static_linear_fp16_model_with_fp32_deq_scale_uses_fp19():
    # an fp32 deq_scale with fp16 output: the adapter packs it (FP19), so it equals the int64 form
    rng = np.random.default_rng(4)
    _, weight, x, s_in, o_in, deq64, qb, _ = make_static(rng, 9, 24, np.float16, False)
    deq32 = deq64.astype(np.int32).view(np.float32)
    a = w8a8_static_linear(x, weight, input_scale=s_in, input_offset=o_in, deq_scale=deq32, quant_bias=qb)
    b = w8a8_static_linear(x, weight, input_scale=s_in, input_offset=o_in, deq_scale=deq64, quant_bias=qb)
    assert same_bits(a, b) and same_bits(a, ref_static(x, weight, s_in, o_in, deq32, qb)[0])


def test_static_linear_float_bias_instead_of_quant_bias():
    # compressed-tensors style: a float bias after dequant (bf16 output), quant_bias without it
    rng = np.random.default_rng(5)
    _, weight, x, s_in, o_in, deq, _, _ = make_static(rng, 7, 16, bfloat16, False)
    qb0 = static_params(weight, np.ones(7, np.float32), s_in, o_in)[1]    # offset correction only
    bias = (rng.standard_normal(7) * 0.1).astype(np.float32)
    # with quant_bias=None the offset correction is missing: this pins the plain formula only
    y = w8a8_static_linear(x, weight, input_scale=s_in, input_offset=o_in, deq_scale=deq, quant_bias=None, bias=bias)
    assert same_bits(y, ref_static(x, weight, s_in, o_in, deq, None, bias)[0])
    with pytest.raises(ValueError, match="'bias'"):
        w8a8_static_linear(x, weight, input_scale=s_in, input_offset=o_in, deq_scale=deq, quant_bias=qb0, bias=bias)


# ---------------------------------------------------------------- accuracy of the whole chain

@pytest.mark.parametrize("dtype", [bfloat16, np.float16], ids=["bf16", "fp16"])
def test_sqnr_against_float64(dtype):
    rng = np.random.default_rng(6)
    m, k, n = 32, 512, 96
    w = rng.standard_normal((n, k)) * 0.02
    b = rng.standard_normal(n) * 0.1
    x = rng.standard_normal((m, k)).astype(dtype)
    ref = f64(x) @ w.T + b                                        # the float64 model
    weight, ws, _ = quantize_weight_per_channel(w.astype(np.float32))
    y = w8a8_dynamic_linear(x, weight, ws, bias=b.astype(np.float32))
    assert sqnr_db(y, ref) >= 30.0
    s_in, o_in = calibrate_activation_per_tensor(x)
    model = "bfloat16" if dtype is bfloat16 else "float16"
    deq, qb = static_params(weight, ws, s_in, o_in, b.astype(np.float32), model_dtype=model)
    ys = w8a8_static_linear(x, weight, input_scale=s_in, input_offset=o_in, deq_scale=deq, quant_bias=qb)
    assert sqnr_db(ys, ref) >= 30.0


# ---------------------------------------------------------------- bad input

W = np.ones((3, 8), np.int8)
WS = np.ones((3, 1), np.float32)
XB = np.ones((2, 8), bfloat16)


@pytest.mark.parametrize("kwargs, exc, arg", [
    (dict(x=XB.astype(np.float32), weight=W, weight_scale=WS), TypeError, "'x'"),
    (dict(x=XB, weight=W.astype(np.int32), weight_scale=WS), TypeError, "'weight'"),
    (dict(x=XB, weight=W[None], weight_scale=WS), ValueError, "'weight'"),
    (dict(x=np.ones((2, 9), bfloat16), weight=W, weight_scale=WS), ValueError, "'x'"),
    (dict(x=XB, weight=W, weight_scale=np.ones((4, 1), np.float32)), ValueError, "'weight_scale'"),
    (dict(x=XB, weight=W, weight_scale=np.ones((1, 3), np.float32)), ValueError, "'weight_scale'"),
    (dict(x=XB, weight=W, weight_scale=WS.astype(np.float16)), TypeError, "'weight_scale'"),
    (dict(x=XB, weight=W, weight_scale=WS, bias=np.ones(4, np.float32)), ValueError, "'bias'"),
    (dict(x=XB, weight=W, weight_scale=WS, bias=np.ones(3, np.int32)), TypeError, "'bias'"),
])
def test_dynamic_bad_input(kwargs, exc, arg):
    with pytest.raises(exc) as e:
        w8a8_dynamic_linear(**kwargs)
    assert arg in str(e.value)


def test_dynamic_nan_raises():
    x = np.ones((2, 8), np.float32)
    x[1, 5] = np.nan
    with pytest.raises(ValueError, match=r"'x'.*NaN at index \(1, 5\)"):
        w8a8_dynamic_linear(x.astype(bfloat16), W, WS)


S1 = np.ones(1, np.float32)
DEQ = np.ones(3, np.float32)


@pytest.mark.parametrize("kwargs, exc, arg", [
    (dict(x=XB.astype(np.float32)), TypeError, "'x'"),
    (dict(input_scale=np.ones(2, np.float32)), ValueError, "'input_scale'"),
    (dict(input_offset=np.ones(2, np.float32)), ValueError, "'input_offset'"),
    (dict(input_scale=np.ones(1, np.int32)), TypeError, "'input_scale'"),
    (dict(deq_scale=np.ones(3, bfloat16)), TypeError, "'deq_scale'"),
    (dict(deq_scale=np.ones(4, np.float32)), ValueError, "'deq_scale'"),
    (dict(quant_bias=np.ones(3, np.int64)), TypeError, "'quant_bias'"),
    (dict(quant_bias=np.ones(4, np.int32)), ValueError, "'quant_bias'"),
    (dict(quant_bias=None, bias=np.ones(4, np.float32)), ValueError, "'bias'"),
    (dict(x=np.ones((2, 7), bfloat16)), ValueError, "'x'"),
])
def test_static_bad_input(kwargs, exc, arg):
    base = dict(x=XB, weight=W, input_scale=S1, input_offset=S1 * 0, deq_scale=DEQ, quant_bias=np.zeros(3, np.int32))
    with pytest.raises(exc) as e:
        w8a8_static_linear(**{**base, **kwargs})
    assert arg in str(e.value)


def test_static_nan_raises():
    x = np.ones((2, 8), np.float32)
    x[0, 1] = np.inf
    with pytest.raises(ValueError, match=r"'x'.*Inf"):
        w8a8_static_linear(x.astype(np.float16), W, input_scale=S1, input_offset=S1, deq_scale=DEQ, quant_bias=None)


@pytest.mark.parametrize("value", [np.nan, 0.0, -0.0, -0.02, np.inf])
def test_static_input_scale_must_be_finite_and_positive(value):
    # A NaN / zero input_scale used to surface as quantize's 'scales' (its Inf / NaN reciprocal); a
    # negative one quantized with a negative reciprocal. It is a calibration parameter: named up front.
    base = dict(x=XB, weight=W, input_scale=np.float32([value]), input_offset=S1 * 0, deq_scale=DEQ, quant_bias=None)
    with pytest.raises(ValueError, match=r"w8a8_static_linear: argument 'input_scale' must be finite and > 0"):
        w8a8_static_linear(**base)
    with pytest.raises(ValueError, match=r"static_activation_params: argument 'input_scale'"):
        static_activation_params(bfloat16, np.float32([value]), np.float32([0]), 8)


def test_static_load_beyond_fp16_is_inf_as_on_device_without_warnings():
    # fp16 model: the offset 1e5 is beyond fp16's max 65504 -> +Inf at load (the torch cast, silently):
    # the quantize step refuses the Inf offset, naming it (no RuntimeWarning on the way).
    base = dict(weight=W, input_scale=S1, deq_scale=DEQ, quant_bias=None)
    xh = np.ones((2, 8), np.float16)
    with pytest.raises(ValueError, match=r"quantize: argument 'zero_points' must be finite.*Inf at index \(0,\)"):
        w8a8_static_linear(xh, input_offset=np.float32([1e5]), **base)
    # input_scale 1e5 -> fp16 +Inf -> reciprocal 1 / Inf = 0: every code is the offset (rint(x * 0 + 3) = 3)
    st_ = static_linear_stages(xh, **{**base, "input_scale": np.float32([1e5])}, input_offset=np.float32([3]))
    assert st_["input_scale_reciprocal"].tolist() == [0.0] * 8 and st_["x_q"].tolist() == [[3] * 8] * 2


@pytest.mark.parametrize("dtype, scale, recip", [
    # bf16 keeps 8 significant bits. 0.05 = 1.6 * 2^-5 -> 205/128 * 2^-5 = 0.050048828125; 1 / that =
    # 19.980... -> bf16 20.0. 0.003 = 1.536 * 2^-9 -> 197/128 * 2^-9; 1 / that = 65536 / 197 = 332.67
    # = 1.2995 * 2^8 -> 166/128 * 2^8 = 332.0.
    (bfloat16, 0.05, 20.0), (bfloat16, 0.003, 332.0),
    # fp16 keeps 11: 0.003 -> 1573/1024 * 2^-9; 1 / that = 524288 / 1573 = 333.30 -> 1333/1024 * 2^8 = 333.25.
    (np.float16, 0.003, 333.25),
])
def test_static_activation_params_in_the_model_dtype(dtype, scale, recip):
    r, o = static_activation_params(dtype, np.float32([scale]), np.int8([-3]), 7)
    assert r.dtype == o.dtype == np.dtype(dtype) and r.shape == o.shape == (7,)
    assert r.astype(np.float32).tolist() == [recip] * 7 and o.astype(np.float32).tolist() == [-3.0] * 7
    # the golden's static Linear loads exactly these
    x = np.ones((1, 7), dtype)
    st_ = static_linear_stages(x, np.ones((2, 7), np.int8), input_scale=np.float32([scale]),
                               input_offset=np.int8([-3]), deq_scale=np.ones(2, np.float32), quant_bias=None)
    assert same_bits(st_["input_scale_reciprocal"], r) and same_bits(st_["input_offset"], o)


def test_static_activation_params_bad_input():
    with pytest.raises(TypeError, match="'x_dtype'"):
        static_activation_params(np.float32, S1, S1, 8)
    with pytest.raises(ValueError, match="'input_offset'"):
        static_activation_params(bfloat16, S1, np.zeros(2, np.float32), 8)
    with pytest.raises(ValueError, match="'k'"):
        static_activation_params(bfloat16, S1, S1, -1)


def test_dynamic_linear_params_load_like_the_op():
    # The load step alone (a caller that has no activation yet: K and the model dtype). bf16 model: the
    # fp32 scale is rounded to bf16 (1 + 2^-8 is a tie between 0x3F80 and 0x3F81 -> even 0x3F80 = 1.0);
    # fp16 model: the fp32 scale as is; the bias in the model dtype.
    ws = np.float32([[1 + 2.0**-8], [0.5], [2.0]])
    p = dynamic_linear_params(bfloat16, 8, W, ws, bias=np.float32([1, 2, 3]))
    assert p.weight_scale.dtype == bfloat16 and p.weight_scale.astype(np.float32).tolist() == [1.0, 0.5, 2.0]
    assert p.bias.dtype == bfloat16 and (p.n, p.k) == (3, 8)
    q = dynamic_linear_params(np.float16, 8, W, ws)
    assert q.weight_scale.dtype == np.float32 and q.weight_scale.tolist() == ws.reshape(3).tolist() and q.bias is None
    st_ = dynamic_linear_stages(XB, W, ws, bias=np.float32([1, 2, 3]))
    assert same_bits(st_["weight_scale"], p.weight_scale) and same_bits(st_["bias"], p.bias)
    # A K mismatch names the weight (there is no x here); ``op`` / ``names`` name a caller's arguments.
    with pytest.raises(ValueError, match=r"w8a8_dynamic_linear: argument 'weight' must be of shape \[N, K\] with K = 9"):
        dynamic_linear_params(bfloat16, 9, W, ws)
    with pytest.raises(TypeError, match=r"w8a8_moe: argument 'shared_expert.up_scale'"):
        dynamic_linear_params(bfloat16, 8, W, ws.astype(np.float16), op="w8a8_moe",
                              names=("shared_expert.up_weight", "shared_expert.up_scale", "bias"))
    # quant_matmul's rules on the loaded values: a scale that becomes Inf in bf16 (3.4e38 rounds past
    # the bf16 max 0x7F7F), N > 65535
    with pytest.raises(ValueError, match=r"quant_matmul: argument 'scale' must be finite.*Inf at index \(1,\)"):
        dynamic_linear_params(bfloat16, 8, W, np.float32([1, 3.4e38, 1]))
    with pytest.raises(ValueError, match=r"quant_matmul: argument 'x2' must be N <= 65535"):
        dynamic_linear_params(bfloat16, 1, np.ones((65536, 1), np.int8), np.ones(65536, np.float32))


# ---------------------------------------------------------------- property

@given(st.sampled_from([bfloat16, np.float16]), st.sampled_from([1, 7, 17]), st.sampled_from([1, 7, 17, 1025]),
       st.sampled_from([1, 7, 17]), st.booleans(), st.integers(0, 2**32 - 1))
def test_dynamic_property(dtype, m, k, n, with_bias, seed):
    rng = np.random.default_rng(seed)
    weight = rng.integers(-128, 128, (n, k)).astype(np.int8)
    ws = (rng.random((n, 1)) * 1e-3).astype(np.float32)
    x = (rng.standard_normal((m, k)) * 10.0 ** rng.integers(-2, 3)).astype(dtype)
    bias = (rng.standard_normal(n)).astype(np.float32) if with_bias else None
    y = w8a8_dynamic_linear(x, weight, ws, bias=bias)
    assert same_bits(y, ref_dynamic(x, weight, ws, bias)[0])
    # the quantized activation is exactly dynamic_quant's
    assert np.array_equal(dynamic_linear_stages(x, weight, ws)["x_q"], dynamic_quant(x)[0])
