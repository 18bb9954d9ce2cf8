"""npu_weight_quant_batchmatmul golden (W8A16 / W4A16; w8a8.lowbit.weight_quant_batchmatmul)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from w8a8 import pack_int4, trans_quant_param
from w8a8.lowbit import convert_weight_to_int4pack, weight_quant_batchmatmul

F16, BF16, F32 = np.float16, ml_dtypes.bfloat16, np.float32


def test_w8a16_per_channel_offset_and_bias():
    x = np.array([[1, 2]], F16)
    w = np.array([[1, -2], [3, 4]], np.int8)  # [K, N]
    s = np.array([0.5, 0.25], F16)
    o = np.array([1, -1], F16)
    # w_hat = (w + o) * s: column 0 (1+1)*.5 = 1, (3+1)*.5 = 2; column 1 (-2-1)*.25 = -.75, (4-1)*.25 = .75
    # y = x @ w_hat = [1*1 + 2*2, -.75 + 2*.75] = [5, .75]; + bias [1, -1] -> [6, -.25]
    y = weight_quant_batchmatmul(x, w, s, o, bias=np.array([1, -1], F16))
    assert y.dtype == F16
    np.testing.assert_array_equal(y, [[6, -0.25]])
    # per-tensor: one scale 0.5, no offset: w_hat = w / 2 -> y = [1*.5 + 2*1.5, -1 + 2*2] = [3.5, 3]
    np.testing.assert_array_equal(weight_quant_batchmatmul(x, w, np.array([0.5], F16)), [[3.5, 3]])


def test_int8_output_requant_rounds_half_to_even():
    x = np.array([[1, 2]], F16)
    w = np.array([[1, -2], [3, 4]], np.int8)
    s, o = np.array([0.5, 0.25], F16), np.array([1, -1], F16)
    # the matmul gives [5, .75] (above); * [2, 4] + [.5, 0] = [10.5, 3]: 10.5 ties to the even 10
    y = weight_quant_batchmatmul(x, w, s, o, quant_scale=np.array([2, 4], F32), quant_offset=np.array([.5, 0], F32))
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, [[10, 3]])
    # an int64 quant_scale carries its offset: FP19(2), FP19(4) are exact; [5*2 + 1, .75*4 - 3] = [11, 0]
    packed = trans_quant_param(np.array([2, 4], F32), np.array([1, -3], F32))
    np.testing.assert_array_equal(weight_quant_batchmatmul(x, w, s, o, quant_scale=packed), [[11, 0]])
    # saturation: 5 * 100 = 500 -> 127
    big = weight_quant_batchmatmul(x, w, s, o, quant_scale=np.array([100, 1], F32))
    assert big[0, 0] == 127


def test_fp16_antiquant_rounds_twice_in_half():
    # The Custom kernel antiquantizes in AntiQuantCalType<half> for fp16 x (ops-nn matmul/
    # weight_quant_batch_matmul_v2/op_kernel/weight_quant_batch_matmul_v2_common.h:83-100 @ e5c3fa93):
    # Adds(offset) then Muls(scale) in half (anti_quant.h:265-280). w = 1, offset = 2^-11, scale = 1.5:
    #   half: 1 + 2^-11 is a tie at fp16 spacing 2^-10 -> even 1.0; 1.0 * 1.5 = 1.5.
    #   fp32 (the old golden, and the bf16 kernel): 1.00048828125 * 1.5 = 1.500732421875 -> fp16
    #   1.5 + 0.75 ulp -> 1.5009765625.
    # K = 1 (not a multiple of 32) keeps the MSD kernels out: the Custom kernel runs.
    x, w = np.array([[1]], F16), np.array([[1]], np.int8)
    s, o = np.array([1.5], F16), np.array([2.0 ** -11], F16)
    from w8a8 import ASCEND, variants

    v = variants.select("weight_quant_batchmatmul", x, w, s, o)
    assert v.name == "custom" and v.decides == {"antiquant_precision": "x_dtype"}
    assert weight_quant_batchmatmul(x, w, s, o).tolist() == [[1.5]]
    fixed = ASCEND.replace(variants="fixed")
    assert weight_quant_batchmatmul(x, w, s, o, numerics=fixed).tolist() == [[1.5009765625]]
    # bf16 x: fp32 antiquant then one RINT to bf16 (1.500732... -> 1.5 at spacing 2^-7)
    vb = variants.select("weight_quant_batchmatmul", x.astype(BF16), w, s.astype(BF16), o.astype(BF16))
    assert vb.decides == {"antiquant_precision": "fp32"}


def test_msd_kernel_is_reported_not_modelled():
    # per-channel, M <= 64, K and N multiples of 32: the Msd template (weight_quant_batch_matmul_v2_tiling_msd.cpp:
    # 104-158) - a different algorithm the golden does not model (it computes the Custom formula)
    from w8a8 import variants

    v = variants.select("weight_quant_batchmatmul", np.zeros((64, 64), F16), np.zeros((64, 32), np.int8),
                        np.ones(32, F16))
    assert v.name == "msd" and not v.modelled
    assert variants.select("weight_quant_batchmatmul", np.zeros((65, 64), F16), np.zeros((64, 32), np.int8),
                           np.ones(32, F16)).name == "custom"


def _reference(x, codes_kn, scale_rows, offset_rows=None):
    """(w + o) * s in float64 -> fp32 -> x dtype; then an exact float64 matmul -> fp32 -> x dtype."""
    v = codes_kn.astype(np.float64)
    if offset_rows is not None:
        v = v + offset_rows.astype(np.float64)
    w_hat = (v * scale_rows.astype(np.float64)).astype(F32).astype(x.dtype)
    return (x.astype(np.float64) @ w_hat.astype(np.float64)).astype(F32).astype(x.dtype)


@given(st.data())
def test_w4a16_per_group_all_packings_agree_with_the_formula(data):
    m = data.draw(st.sampled_from([1, 3, 17]))
    g = data.draw(st.sampled_from([32, 64]))
    k = data.draw(st.sampled_from([g + 1, 2 * g, 3 * g - 5])) // 8 * 8  # K % 8 == 0 for packing along K
    n = data.draw(st.sampled_from([8, 16, 24]))
    dtype = data.draw(st.sampled_from([F16, BF16]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    codes = rng.integers(-8, 8, (k, n)).astype(np.int8)
    groups = -(-k // g)
    s = (rng.random((groups, n)) * 0.1 + 0.01).astype(dtype)
    o = rng.integers(-2, 3, (groups, n)).astype(dtype)
    x = rng.standard_normal((m, k)).astype(dtype)
    rows = lambda p: np.repeat(p, g, axis=0)[:k]  # noqa: E731 - group row r covers K rows r*G .. r*G+G-1
    expected = _reference(x, codes, rows(s), rows(o))
    along_n = convert_weight_to_int4pack(codes.astype(np.int32))  # [K, N/8]
    along_k = pack_int4(np.ascontiguousarray(codes.T)).T  # [K/8, N], a transposed [N, K/8]
    for weight in (codes, along_n, along_k):
        y = weight_quant_batchmatmul(x, weight, s, o, antiquant_group_size=g)
        np.testing.assert_array_equal(y, expected)


def test_bf16_x_with_fp32_bias():
    x = np.array([[1, 1]], BF16)
    w = np.array([[1], [1]], np.int8)
    y = weight_quant_batchmatmul(x, w, np.array([1], BF16), bias=np.array([0.5], F32))
    assert y.dtype == BF16 and y[0, 0] == 2.5


def test_int64_antiquant_scale_matches_the_fp16_scale_it_encodes():
    # fp16 scales have 10 mantissa bits, which FP19 keeps exactly: the int64 path must agree with
    # the float path bit for bit (the int32 offset is then an fp16 offset with the same integers).
    rng = np.random.default_rng(1)
    m, k, n = 5, 64, 64
    x = rng.standard_normal((m, k)).astype(F16)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    s16 = (rng.random(n) * 0.01 + 1e-3).astype(F16)
    off = rng.integers(-4, 5, n).astype(np.int32)
    packed = trans_quant_param(s16.astype(F32))
    y64 = weight_quant_batchmatmul(x, w, packed, off)
    y16 = weight_quant_batchmatmul(x, w, s16, off.astype(F16))
    np.testing.assert_array_equal(y64, y16)


def test_bad_inputs_name_the_argument():
    x = np.ones((2, 64), F16)
    w = np.ones((64, 8), np.int8)
    s = np.ones((2, 8), F16)
    with pytest.raises(ValueError, match="'antiquant_group_size'.*group size"):
        weight_quant_batchmatmul(x, w, s)  # per-group scale without a group size
    with pytest.raises(ValueError, match="'antiquant_group_size'.*multiple of 32"):
        weight_quant_batchmatmul(x, w, s, antiquant_group_size=48)
    with pytest.raises(ValueError, match="'antiquant_group_size'.*K - 1"):
        weight_quant_batchmatmul(x, w, np.ones((1, 8), F16).repeat(2, 0)[:2], antiquant_group_size=64)
    with pytest.raises(ValueError, match="'antiquant_scale'.*ceil"):
        weight_quant_batchmatmul(x, w, np.ones((3, 8), F16), antiquant_group_size=32)
    with pytest.raises(TypeError, match="'antiquant_scale'"):
        weight_quant_batchmatmul(x, w, np.ones(8, F32))
    with pytest.raises(TypeError, match="'antiquant_offset'"):
        weight_quant_batchmatmul(x, w, np.ones(8, F16), np.ones(8, F32))
    with pytest.raises(ValueError, match="'antiquant_offset'"):
        weight_quant_batchmatmul(x, w, np.ones(8, F16), np.ones(4, F16))
    with pytest.raises(TypeError, match="'bias'.*float16 for float16 x"):
        weight_quant_batchmatmul(x, w, np.ones(8, F16), bias=np.ones(8, F32))
    with pytest.raises(TypeError, match="'bias'.*float32 for bfloat16 x"):
        weight_quant_batchmatmul(x.astype(BF16), w, np.ones(8, BF16), bias=np.ones(8, BF16))
    with pytest.raises(ValueError, match="'quant_offset'.*without quant_scale"):
        weight_quant_batchmatmul(x, w, np.ones(8, F16), quant_offset=np.ones(8, F32))
    with pytest.raises(ValueError, match="'weight'.*K=64"):
        weight_quant_batchmatmul(x, np.ones((32, 8), np.int8), np.ones(8, F16))
    with pytest.raises(ValueError, match="'weight'.*\\[K, N/8\\]"):
        weight_quant_batchmatmul(x, np.ones((16, 8), np.int32), np.ones(8, F16))
    with pytest.raises(TypeError, match="'x'"):
        weight_quant_batchmatmul(x.astype(F32), w, np.ones(8, F32))
    with pytest.raises(ValueError, match="'x'.*K in \\[1, 65535\\]"):
        weight_quant_batchmatmul(np.ones((1, 65536), F16), np.ones((65536, 1), np.int8), np.ones(1, F16))
    packed = trans_quant_param(np.ones(64, F32))
    w64 = np.ones((64, 64), np.int8)
    with pytest.raises(TypeError, match="'antiquant_scale'.*float16 x"):
        weight_quant_batchmatmul(x.astype(BF16), w64, packed)
    with pytest.raises(ValueError, match="'x'.*M in \\[1, 96\\]"):
        weight_quant_batchmatmul(np.ones((97, 64), F16), w64, packed)
    with pytest.raises(TypeError, match="'weight'.*int8 with an int64"):
        weight_quant_batchmatmul(x, np.zeros((64, 8), np.int32), packed)
    with pytest.raises(ValueError, match="'quant_scale'.*int64 antiquant_scale"):
        weight_quant_batchmatmul(x, w64, packed, quant_scale=np.ones(64, F32))
    with pytest.raises(ValueError, match="'inner_precise'"):
        weight_quant_batchmatmul(x, w, np.ones(8, F16), inner_precise=2)
