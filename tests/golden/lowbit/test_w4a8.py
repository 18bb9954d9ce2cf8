"""npu_quant_matmul with int4 operands (A4W4, A8W4) and the W4A8_DYNAMIC Linear (w8a8.lowbit.w4a8)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from w8a8 import dynamic_quant, pack_int4, quant_matmul, trans_quant_param
from w8a8.lowbit import (a8w4_y_offset, quant_matmul_int4, quant_matmul_int4_stages, w4a8_dynamic_linear,
                         w4a8_dynamic_linear_stages)
from w8a8.trans_quant_param import fp19_truncate

F16, BF16, F32 = np.float16, ml_dtypes.bfloat16, np.float32


def _a8w4_case(rng, m, k, n, per_group=True):
    x1 = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-8, 8, (k, n)).astype(np.int8)
    rows = k // 256 if per_group else 1
    s32 = (rng.random((rows, n)) * 0.02 + 1e-3).astype(F32)
    scale = trans_quant_param(s32 if per_group else s32.reshape(n))
    pt = (rng.random((m, 1)) * 0.05 + 1e-3).astype(F32)
    return x1, w, scale, pt


@given(st.data())
def test_a8w4_integer_gemm_is_exact(data):
    m = data.draw(st.sampled_from([1, 7, 17]))
    k = data.draw(st.sampled_from([256, 512, 1024]))
    n = data.draw(st.sampled_from([8, 16, 40]))
    per_group = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    x1, w, scale, pt = _a8w4_case(rng, m, k, n, per_group)
    off = a8w4_y_offset(w, scale)
    st_ = quant_matmul_int4_stages(x1, pack_int4(w), scale, offset=off, pertoken_scale=pt, output_dtype="bfloat16")
    g = 256 if per_group else k
    # the per-group int32 accumulators against an int64 reference
    ref = np.stack([x1[:, i:i + g].astype(np.int64) @ w[i:i + g].astype(np.int64) for i in range(0, k, g)])
    np.testing.assert_array_equal(st_["acc"], ref)
    # y = cast(fp32(sum_g FP19(s_g) * acc_g) * pertoken): the documented offset adds exactly 0
    s = fp19_truncate(scale.view(np.uint64).astype(np.uint32).view(F32)).reshape(-1 if per_group else 1, n)
    v = (ref.astype(np.float64) * np.broadcast_to(s, (ref.shape[0], n))[:, None, :]).sum(axis=0).astype(F32)
    np.testing.assert_array_equal(st_["y"], (v * pt).astype(BF16))


def test_a8w4_extreme_values_at_the_largest_k():
    # K = 29440 (the largest multiple of 256 below 29576): every product -128 * -8 = 1024, so each
    # group sums to 256 * 1024 = 262144 and with unit scales the row is 115 * 262144 = 30146560
    m, k, n = 2, 29440, 8
    x1 = np.full((m, k), -128, np.int8)
    w = np.full((k, n), -8, np.int8)
    scale = trans_quant_param(np.ones((k // 256, n), F32))
    st_ = quant_matmul_int4_stages(x1, pack_int4(w), scale, offset=a8w4_y_offset(w, scale),
                                   pertoken_scale=np.ones((m, 1), F32), output_dtype="bfloat16")
    assert (st_["acc"] == 262144).all()
    # 30146560 = 115 * 2^18 needs 7 significant bits: exact in bf16 (8)
    assert (st_["y"].astype(F32) == 30146560).all()


def test_a8w4_offset_other_than_documented_shows_as_an_additive_error():
    rng = np.random.default_rng(3)
    x1, w, scale, _ = _a8w4_case(rng, 2, 256, 8)
    pt = np.ones((2, 1), F32)
    good = a8w4_y_offset(w, scale)
    delta = np.zeros(8, F32)
    delta[3] = 1.0
    base = quant_matmul_int4(x1, pack_int4(w), scale, offset=good, pertoken_scale=pt, output_dtype="float16")
    off = quant_matmul_int4(x1, pack_int4(w), scale, offset=good + delta, pertoken_scale=pt, output_dtype="float16")
    # columns other than 3 are unchanged; column 3 moved by ~1 (the fp16 rounding of v + 1)
    np.testing.assert_array_equal(np.delete(off, 3, axis=1), np.delete(base, 3, axis=1))
    np.testing.assert_allclose(off[:, 3].astype(F32) - base[:, 3].astype(F32), 1.0, atol=2 ** -6)


def test_a8w4_y_offset_by_hand():
    w = np.array([[1, -2], [3, 4], [-8, 7], [0, 1]], np.int8)  # K = 4, N = 2
    s = np.array([[0.5, 0.25], [2.0, 1.0]], F32)  # two groups of 2 rows
    # column 0: 8 * (0.5 * (1 + 3) + 2 * (-8 + 0)) = 8 * (2 - 16) = -112
    # column 1: 8 * (0.25 * (-2 + 4) + 1 * (7 + 1)) = 8 * (0.5 + 8) = 68
    np.testing.assert_array_equal(a8w4_y_offset(w, s), [-112, 68])


@pytest.mark.parametrize("transposed", [False, True])
def test_a4w4_equals_int8_quant_matmul_on_the_codes(transposed):
    rng = np.random.default_rng(4)
    m, k, n = 3, 64, 16
    a = rng.integers(-8, 8, (m, k)).astype(np.int8)
    b = rng.integers(-8, 8, (k, n)).astype(np.int8)
    x2 = pack_int4(np.ascontiguousarray(b.T)).T if transposed else pack_int4(b)  # [K/8, N] or [K, N/8]
    scale = (rng.random(n) * 0.1).astype(F32)
    # fp16 output without pertoken: the adapter's FP19 scale, int32 bias in the accumulator
    bias = rng.integers(-50, 50, n).astype(np.int32)
    y = quant_matmul_int4(pack_int4(a), x2, scale, bias=bias, output_dtype="float16")
    np.testing.assert_array_equal(y, quant_matmul(a, b, scale, bias=bias, output_dtype="float16"))
    pt = (rng.random(m) * 0.1).astype(F32)
    y = quant_matmul_int4(pack_int4(a), x2, scale, pertoken_scale=pt, output_dtype="bfloat16")
    np.testing.assert_array_equal(y, quant_matmul(a, b, scale, pertoken_scale=pt, output_dtype="bfloat16"))


def test_w4a8_dynamic_linear_is_the_quantized_product():
    rng = np.random.default_rng(5)
    m, k, n = 4, 512, 24
    x = rng.standard_normal((2, m // 2, k)).astype(BF16)
    w = rng.integers(-8, 8, (n, k)).astype(np.int8)
    ws = (rng.random(n) * 0.01 + 1e-3).astype(F32)
    stages = w4a8_dynamic_linear_stages(x, w, ws)
    y = stages["y"]
    assert y.shape == (2, m // 2, n) and y.dtype == BF16
    # the stages are the documented composition
    x_q, s_tok = dynamic_quant(x.reshape(-1, k))
    np.testing.assert_array_equal(stages["x_q"], x_q)
    np.testing.assert_array_equal(stages["weight_packed"], pack_int4(np.ascontiguousarray(w.T)))
    # error bound against the unquantized product: activation rounding (s_tok / 2 per element),
    # the FP19 scale (2^-10 relative) and the bf16 output (2^-8 relative)
    xf, wf = x.reshape(-1, k).astype(np.float64), w.astype(np.float64) * ws[:, None]
    ref = xf @ wf.T
    bound = 0.5 * s_tok[:, None] * np.abs(wf).sum(1)[None, :] + 2 ** -10 * np.abs(xf) @ np.abs(wf).T \
        + 2 ** -8 * np.abs(ref) + 1e-6
    assert (np.abs(y.reshape(-1, n).astype(np.float64) - ref) <= bound).all()
    # a per-group-of-256 scale that repeats the channel scale gives the same result
    same = w4a8_dynamic_linear(x, w, np.repeat(ws[:, None], k // 256, axis=1))
    np.testing.assert_array_equal(same, y)
    # bias: added after the matmul, in fp32, one bf16 rounding
    b = rng.standard_normal(n).astype(BF16)
    yb = w4a8_dynamic_linear(x, w, ws, bias=b)
    np.testing.assert_array_equal(yb, (y.astype(F32) + b.astype(F32)).astype(BF16))


def test_bad_inputs_name_the_argument():
    rng = np.random.default_rng(6)
    x1, w, scale, pt = _a8w4_case(rng, 2, 256, 8)
    wp = pack_int4(w)
    off = a8w4_y_offset(w, scale)
    ok = dict(offset=off, pertoken_scale=pt, output_dtype="float16")
    with pytest.raises(ValueError, match="'output_dtype'.*default int8"):
        quant_matmul_int4(x1, wp, scale, offset=off, pertoken_scale=pt)
    with pytest.raises(ValueError, match="'offset'.*a8w4_y_offset"):
        quant_matmul_int4(x1, wp, scale, **{**ok, "offset": None})
    with pytest.raises(ValueError, match="'pertoken_scale'.*required"):
        quant_matmul_int4(x1, wp, scale, **{**ok, "pertoken_scale": None})
    with pytest.raises(ValueError, match="'bias'"):
        quant_matmul_int4(x1, wp, scale, bias=np.zeros(8, np.int32), **ok)
    with pytest.raises(TypeError, match="'scale'"):
        quant_matmul_int4(x1, wp, np.ones((1, 8), F32), **ok)
    with pytest.raises(ValueError, match="'scale'.*\\(K/256, N\\)"):
        quant_matmul_int4(x1, wp, trans_quant_param(np.ones((2, 8), F32)), **ok)
    with pytest.raises(ValueError, match="'x1'.*multiple of 256"):
        quant_matmul_int4(x1[:, :128], pack_int4(w[:128]), scale, **ok)
    with pytest.raises(ValueError, match="'x2'.*\\[K=256, N/8\\]"):
        quant_matmul_int4(x1, pack_int4(np.ascontiguousarray(w.T)).T, scale, **ok)
    with pytest.raises(TypeError, match="'output_dtype'"):
        quant_matmul_int4(x1, wp, scale, **{**ok, "output_dtype": "int32"})
    a = pack_int4(rng.integers(-8, 8, (2, 64)).astype(np.int8))
    b = pack_int4(rng.integers(-8, 8, (64, 8)).astype(np.int8))
    with pytest.raises(ValueError, match="'offset'.*int8 x1"):
        quant_matmul_int4(a, b, np.ones(8, F32), offset=np.ones(8, F32), output_dtype="float16")
    with pytest.raises(TypeError, match="'output_dtype'.*without pertoken_scale"):
        quant_matmul_int4(a, b, np.ones(8, F32), output_dtype="bfloat16")
    with pytest.raises(ValueError, match="'x2'"):
        quant_matmul_int4(a, b[:4], np.ones(8, F32), output_dtype="float16")
    x = np.ones((2, 256), BF16)
    with pytest.raises(ValueError, match="'weight'.*-8, 7"):
        w4a8_dynamic_linear(x, np.full((8, 256), 9, np.int8), np.ones(8, F32))
    with pytest.raises(ValueError, match="'weight_scale'"):
        w4a8_dynamic_linear(x, np.ones((8, 256), np.int8), np.ones((8, 3), F32))
    with pytest.raises(ValueError, match="'x'.*K = 256"):
        w4a8_dynamic_linear(np.ones((2, 128), BF16), np.ones((8, 256), np.int8), np.ones(8, F32))
    with pytest.raises(ValueError, match="'scale'"):
        a8w4_y_offset(w, np.ones((3, 8), F32))
