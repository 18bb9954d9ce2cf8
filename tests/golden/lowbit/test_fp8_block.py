"""DeepSeek-V3 FP8 block quantization and the block-scaled GEMM (w8a8.lowbit.fp8_block)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from w8a8.lowbit import fp8_block_dequantize, fp8_block_matmul, fp8_block_quantize, per_token_group_quant_fp8

F32 = np.float32
E4M3 = ml_dtypes.float8_e4m3fn

W = np.array([[448, -224, 1],
              [2, 0.5, 0],
              [0, 0, 0]], F32)  # with 2x2 blocks: tiles {448,-224,2,.5}, {1,0}, {0,0}, {0}


def test_amax_over_448_scales_and_partial_edge_tiles():
    q, s = fp8_block_quantize(W, block_shape=(2, 2))
    # tile (0,0): amax 448 -> s = 1: 448 -> 0x7E, -224 = -1.75 * 2^7 -> 1_1110_110 (0xF6),
    #   2 -> 0_1000_000 (0x40), 0.5 -> 0_0110_000 (0x30)
    # tile (0,1) (2x1, partial): amax 1 -> s = fp32(1/448); 1 / s = 448.00003 -> 448 (0x7E)
    # tiles (1,*) (1 row, partial): all zero -> amax floored at eps 1e-10, codes 0
    np.testing.assert_array_equal(q.view(np.uint8), [[0x7E, 0xF6, 0x7E], [0x40, 0x30, 0x00], [0, 0, 0]])
    np.testing.assert_array_equal(s, np.array([[1, F32(1) / F32(448)], [F32(1e-10) / F32(448)] * 2], F32))
    # dequantize: q * s per tile
    np.testing.assert_array_equal(fp8_block_dequantize(q, s, block_shape=(2, 2), output_dtype="float32"),
                                  np.array([[448, -224, F32(448) * (F32(1) / F32(448))], [2, 0.5, 0], [0, 0, 0]], F32))


def test_ue8m0_scales_are_powers_of_two_rounded_up():
    q, s = fp8_block_quantize(W, block_shape=(2, 2), scale_fmt="ue8m0")
    # 448 * fp32(1/448) is exactly 1.0 -> s = 2^0; amax 1: 1/448 -> log2 = -8.8 -> 2^-8, 1 / 2^-8 =
    # 256 = 0_1111_000 (0x78); zero tiles: amax floored at 1e-4: 1e-4 / 448 -> log2 = -22.1 -> 2^-22
    np.testing.assert_array_equal(s, [[1, 2.0 ** -8], [2.0 ** -22, 2.0 ** -22]])
    assert q.view(np.uint8)[0, 2] == 0x78 and q.view(np.uint8)[0, 0] == 0x7E


def test_activation_groups_of_128_with_a_partial_tail():
    x = np.zeros((2, 200), F32)
    x[0, 0], x[0, 130] = 896, -3  # group 0 amax 896 -> s = 2; group 1 (72 wide) amax 3 -> s = 3/448
    x[1, 5] = 1e-12  # below eps 1e-10: s = 1e-10/448 and the code saturates at 448 (1e-12 / s = 4.48)
    q, s = per_token_group_quant_fp8(x)
    assert q.dtype == E4M3 and s.shape == (2, 2)
    np.testing.assert_array_equal(s[0], [2, F32(3) / F32(448)])
    np.testing.assert_array_equal(q.view(np.uint8)[0, [0, 130]], [0x7E, 0xFE])  # 448, -448
    # 1e-12 / (1e-10/448) = 4.48 -> e4m3 4.5 (0_1001_001, 0x49): step 0.5 in [4, 8)
    assert q.view(np.uint8)[1, 5] == 0x49


def test_matmul_promotes_each_128_block_in_fp32():
    rng = np.random.default_rng(0)
    m, n, k = 3, 130, 300  # partial K block (300 = 2 * 128 + 44) and partial N tile (130)
    a = rng.standard_normal((m, k)).astype(F32)
    w = rng.standard_normal((n, k)).astype(F32)
    aq, as_ = per_token_group_quant_fp8(a)
    wq, ws = fp8_block_quantize(w)
    y = fp8_block_matmul(aq, as_, wq, ws, output_dtype="float32")
    # the documented order, written as scalar loops: P exact (float64) then fp32;
    # acc = acc + (P * s_a) * s_w, every step in fp32
    af, wf = aq.astype(np.float64), wq.astype(np.float64)
    expected = np.zeros((m, n), F32)
    for i in range(m):
        for j in range(n):
            acc = F32(0)
            for kb in range(3):
                sl = slice(kb * 128, min(k, kb * 128 + 128))
                p = F32(np.dot(af[i, sl], wf[j, sl]))
                acc = F32(acc + F32(F32(p * as_[i, kb]) * ws[j // 128, kb]))
            expected[i, j] = acc
    np.testing.assert_array_equal(y, expected)
    assert fp8_block_matmul(aq, as_, wq, ws).dtype == ml_dtypes.bfloat16


@given(st.data())
def test_round_trip_within_the_format_bound(data):
    n = data.draw(st.sampled_from([1, 7, 130]))
    k = data.draw(st.sampled_from([1, 17, 128, 200]))
    fmt = data.draw(st.sampled_from([None, "ue8m0"]))
    w = data.draw(hnp.arrays(F32, (n, k), elements=st.floats(-1e4, 1e4, width=32)))
    q, s = fp8_block_quantize(w, scale_fmt=fmt)
    back = fp8_block_dequantize(q, s, output_dtype="float32").astype(np.float64)
    full = np.repeat(np.repeat(s.astype(np.float64), 128, 0), 128, 1)[:n, :k]
    # |x / s| <= 448: RNE to 3 mantissa bits is within 2^-4 relative, and below 2^-6 (the e4m3
    # normal range) within half the subnormal step 2^-10, both in units of s
    assert (np.abs(back - w) <= np.maximum(np.abs(w) * 2.0 ** -4, full * 2.0 ** -10) * (1 + 1e-6)).all()


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="'scale_fmt'"):
        fp8_block_quantize(W, scale_fmt="e8m0")
    with pytest.raises(ValueError, match="'weight'.*NaN"):
        fp8_block_quantize(np.full((2, 2), np.nan, F32))
    with pytest.raises(ValueError, match="'block_shape'"):
        fp8_block_quantize(W, block_shape=(128,))
    with pytest.raises(ValueError, match="'eps'"):
        fp8_block_quantize(W, eps=0.0)
    q, s = fp8_block_quantize(W, block_shape=(2, 2))
    with pytest.raises(ValueError, match="'weight_scale_inv'.*\\(1, 1\\)"):
        fp8_block_dequantize(q, s)  # 128x128 blocks need one scale for a 3x3 weight
    aq, as_ = per_token_group_quant_fp8(np.ones((2, 3), F32))
    wq, ws = fp8_block_quantize(np.ones((4, 3), F32))
    with pytest.raises(ValueError, match="'weight_q'.*K=3"):
        fp8_block_matmul(aq, as_, fp8_block_quantize(np.ones((4, 5), F32))[0], ws)
    with pytest.raises(ValueError, match="'a_scale'"):
        fp8_block_matmul(aq, as_[:1], wq, ws)
    with pytest.raises(TypeError, match="'a_q'"):
        fp8_block_matmul(aq.view(np.uint8), as_, wq, ws)
    with pytest.raises(TypeError, match="'output_dtype'"):
        fp8_block_matmul(aq, as_, wq, ws, output_dtype="int8")
