"""MXFP4 / MXFP8 (OCP MX v1.0) semantic cases with expected bytes (w8a8.lowbit.mx)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from w8a8.lowbit import (mx_dequantize, mx_from_gptoss, mx_matmul, mx_quantize, mx_shared_exponent, mx_to_gptoss,
                         unpack_fp4)

F32 = np.float32


def block(*values):
    """One block of 32: the given leading values, zeros after."""
    b = np.zeros(32, F32)
    b[:len(values)] = values
    return b.reshape(1, 32)


def codes(data):
    return unpack_fp4(data)[0]


def test_floor_clips_6_to_8_and_ties_to_even():
    x = block(6.0, 7.0, 7.9, -1.5, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
    data, scale = mx_quantize(x)
    # amax 7.9: floor(log2 7.9) = 2, minus emax 2 -> exponent 0 -> byte 127 (X = 1)
    assert scale[0, 0] == 127
    # 6 -> 7; 7.0 and 7.9 clip to 6 -> 7; -1.5 -> 8|3 = 0xB; ties 0.25 -> 0, 0.75 -> 1.0 (2),
    # 1.25 -> 1.0 (2), 1.75 -> 2.0 (4), 2.5 -> 2 (4), 3.5 -> 4 (6), 5 -> 4 (6)
    np.testing.assert_array_equal(codes(data)[:11], [7, 7, 7, 0xB, 0, 2, 2, 4, 4, 6, 6])
    assert not codes(data)[11:].any()
    # packed bytes, element 2j low: (7, 7) -> 0x77, (7, B) -> 0xB7, (0, 2) -> 0x20, (2, 4) -> 0x42,
    # (4, 6) -> 0x64, (6, 0) -> 0x06
    np.testing.assert_array_equal(data[0, :6], [0x77, 0xB7, 0x20, 0x42, 0x64, 0x06])


def test_rceil_never_clips():
    x = block(6.0, 7.0, 7.9, -1.5, 0.25, 0.75)
    data, scale = mx_quantize(x, scale_mode="rceil")
    # 7.9 * fp32(1/6) = 1.3167 -> rounded up to 2 = 2^1 -> byte 128 (X = 2)
    assert scale[0, 0] == 128
    # x / 2 = 3 (5), 3.5 (tie 3|4 -> 4: 6), 3.95 (-> 4: 6), -0.75 (tie -> -1: 0xA), 0.125 (0), 0.375 (0.5: 1)
    np.testing.assert_array_equal(codes(data)[:6], [5, 6, 6, 0xA, 0, 1])


def test_zero_block_gets_byte_zero():
    data, scale = mx_quantize(np.zeros((1, 32), F32))
    # amax 0 has fp32 exponent field 0: -127 - 2 clamps to -127 -> byte 0 (2^-127), every code 0
    assert scale[0, 0] == 0 and not data.any()
    for mode in ("ceil", "even", "rceil"):
        assert mx_quantize(np.zeros((1, 32), F32), scale_mode=mode)[1][0, 0] == 0


def test_fp32_subnormals():
    # amax = 2^-126 (the smallest normal): log2 = -126, -126 - 2 = -128 clamps to -127 -> byte 0.
    # With X = 2^-127: 2^-126 -> 2 (code 4), 2^-128 (subnormal) -> 0.5 (code 1),
    # 3 * 2^-129 -> 0.75, a tie -> 1.0 (code 2), 2^-130 -> 0.125 -> 0
    x = block(2.0 ** -126, 2.0 ** -128, 3 * 2.0 ** -129, 2.0 ** -130)
    data, scale = mx_quantize(x)
    assert scale[0, 0] == 0
    np.testing.assert_array_equal(codes(data)[:4], [4, 1, 2, 0])
    back = mx_dequantize(data, scale)
    np.testing.assert_array_equal(back[0, :4], [2.0 ** -126, 2.0 ** -128, 2.0 ** -127, 0])


def test_plus_minus_max():
    big = np.finfo(F32).max  # (2 - 2^-23) * 2^127
    data, scale = mx_quantize(block(big, -big))
    # floor(log2) = 127, minus 2 -> 125 -> byte 252; big / 2^125 = 7.99999 clips to 6: codes 7, F
    assert scale[0, 0] == 252
    np.testing.assert_array_equal(codes(data)[:2], [7, 0xF])
    # RCEIL: big * fp32(1/6) = 5.67e37, log2 = 125.4 -> 126 -> byte 253; big / 2^126 = 4.0 -> code 6
    data, scale = mx_quantize(block(big, -big), scale_mode="rceil")
    assert scale[0, 0] == 253
    np.testing.assert_array_equal(codes(data)[:2], [6, 0xE])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_give_the_nan_scale(bad):
    x = np.concatenate([block(bad, 1.0), block(3.0)], axis=1)  # two blocks: only the first is poisoned
    # the clean block's amax 3 = 1.5 * 2: FLOOR 1 - 2 = -1 (126); CEIL rounds log2 up, 2 - 2 = 0
    # (127); EVEN keeps 1.5 (below 1.75) -> 126; RCEIL 3 * fp32(1/6) = 0.5 = 2^-1 exactly -> 126
    for mode, clean in (("floor", 126), ("ceil", 127), ("even", 126), ("rceil", 126)):
        data, scale = mx_quantize(x, scale_mode=mode)
        assert scale[0, 0] == 0xFF and not data[0, :16].any()  # NaN scale, zero codes (golden's choice)
        assert scale[0, 1] == clean
        back = mx_dequantize(data, scale)
        assert np.isnan(back[0, :32]).all() and not np.isnan(back[0, 32:]).any()


def test_ceil_and_even_modes():
    # amax 4.0 is a power of two: CEIL = FLOOR = 2 - 2 = 0 (byte 127); 4.5 is not: CEIL adds one (128)
    assert mx_shared_exponent(np.array([4.0, 4.5], F32), scale_mode="ceil").tolist() == [127, 128]
    assert mx_shared_exponent(np.array([4.0, 4.5], F32), scale_mode="floor").tolist() == [127, 127]
    # EVEN rounds amax's significand to 1 bit first: 7.0 = 1.75 * 4 rounds up to 8 (byte 128),
    # 6.9 = 1.725 * 4 stays in [4, 8) (byte 127)
    assert mx_shared_exponent(np.array([7.0, 6.9], F32), scale_mode="even").tolist() == [128, 127]
    # the fp32 maximum (significand 1.99999988 >= 1.75) carries into 2^128: 128 - 2 = 126 -> 253
    assert mx_shared_exponent(np.array([np.finfo(F32).max], F32), scale_mode="even").tolist() == [253]
    # E8M0 clamp at the bottom: amax 2^-120 -> -122 for E4M3 (emax 8: -128) clamps to byte 0
    assert mx_shared_exponent(np.array([2.0 ** -120], F32), "e4m3").tolist() == [0]


def test_mxfp8_e4m3_saturates_instead_of_nan():
    # amax 500: floor(log2 500) = 8 = emax of E4M3 -> exponent 0, byte 127, X = 1.
    # 500 and 470 exceed 448 (ml_dtypes would give NaN beyond 464): both saturate to 0x7E;
    # -500 -> 0xFE; 2^-10 ties 0 | 2^-9 -> 0; 3 * 2^-10 ties 2^-9 | 2^-8 -> 2^-8 (0x02)
    x = block(500, 470, -500, 2.0 ** -10, 3 * 2.0 ** -10)
    data, scale = mx_quantize(x, elem_dtype="e4m3")
    assert scale[0, 0] == 127 and data.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(data.view(np.uint8)[0, :5], [0x7E, 0x7E, 0xFE, 0x00, 0x02])
    # RCEIL: 500 * fp32(1/448) = 1.116 -> 2 (byte 128); 500 / 2 = 250 -> 256 = 0_1111_000 (0x78)
    data, scale = mx_quantize(x, elem_dtype="e4m3", scale_mode="rceil")
    assert scale[0, 0] == 128 and data.view(np.uint8)[0, 0] == 0x78


def test_mxfp8_e5m2():
    # amax 2^16: floor 16 - emax 15 = 1 -> byte 128, X = 2; 2^16 / 2 = 32768 = 0_11110_00 (0x78)
    data, scale = mx_quantize(block(2.0 ** 16, -1.0), elem_dtype="e5m2")
    assert scale[0, 0] == 128
    np.testing.assert_array_equal(data.view(np.uint8)[0, :2], [0x78, 0xB8])  # -0.5 = 1_01110_00


def test_gptoss_layout_round_trip():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 64)).astype(F32)  # e.g. [experts, rows, K]
    data, scale = mx_quantize(x)
    blocks, scales = mx_to_gptoss(data, scale)
    assert blocks.shape == (2, 3, 2, 16) and scales.shape == (2, 3, 2)
    d2, s2 = mx_from_gptoss(blocks, scales)
    np.testing.assert_array_equal(d2, data)
    # gpt-oss's decode by hand: nibble lookups (low nibble -> even position) times 2^(scale - 127)
    lut = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], F32)
    lo, hi = lut[blocks & 0xF], lut[blocks >> 4]
    manual = np.stack([lo, hi], axis=-1).reshape(2, 3, 2, 32) * np.ldexp(F32(1), scales.astype(int) - 127)[..., None]
    np.testing.assert_array_equal(mx_dequantize(d2, s2), manual.reshape(2, 3, 64))


def test_mx_matmul_is_the_product_of_the_dequantized_operands():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 96)).astype(F32)
    b = rng.standard_normal((7, 96)).astype(F32)
    ad, as_ = mx_quantize(a, elem_dtype="e4m3")
    bd, bs = mx_quantize(b)
    y = mx_matmul(ad, as_, bd, bs, elem_dtype="e4m3", b_elem_dtype="e2m1")
    ref = mx_dequantize(ad, as_, elem_dtype="e4m3").astype(np.float64) @ mx_dequantize(bd, bs).astype(np.float64).T
    np.testing.assert_array_equal(y, ref.astype(F32))  # both exact in float64 before one fp32 rounding
    yb = mx_matmul(ad, as_, bd, bs, elem_dtype="e4m3", b_elem_dtype="e2m1", output_dtype="bfloat16")
    np.testing.assert_array_equal(yb, y.astype(ml_dtypes.bfloat16))


_BOUND = {  # error per element in units of X: half the widest step, or the clip below 2^(emax+1)
    ("e2m1", "floor"): 2.0, ("e2m1", "rceil"): 1.0, ("e4m3", "floor"): 64.0, ("e4m3", "rceil"): 16.0,
    ("e5m2", "floor"): 8192.0, ("e5m2", "rceil"): 8192.0,
}


@given(st.data())
def test_round_trip_within_the_format_bound(data):
    elem, mode = data.draw(st.sampled_from(sorted(_BOUND)))
    x = data.draw(hnp.arrays(F32, (data.draw(st.integers(1, 3)), 32 * data.draw(st.integers(1, 3))),
                             elements=st.floats(-2.0 ** 127, 2.0 ** 127, width=32)))
    # (beyond ~2.98e38 = 3.5 * 2^126 an RCEIL element rounds to 4 * 2^126 = 2^128: fp32 overflow)
    d, s = mx_quantize(x, elem_dtype=elem, scale_mode=mode)
    back = mx_dequantize(d, s, elem_dtype=elem).astype(np.float64)
    step = np.repeat(np.ldexp(1.0, s.astype(int) - 127), 32, axis=-1)
    assert (np.abs(back - x) <= _BOUND[(elem, mode)] * step).all()


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="'x'.*multiple of block_size = 32"):
        mx_quantize(np.zeros((1, 48), F32))
    with pytest.raises(ValueError, match="'elem_dtype'"):
        mx_quantize(np.zeros((1, 32), F32), elem_dtype="e3m2")
    with pytest.raises(ValueError, match="'scale_mode'"):
        mx_quantize(np.zeros((1, 32), F32), scale_mode="round")
    with pytest.raises(TypeError, match="'x'"):
        mx_quantize(np.zeros((1, 32), np.int32))
    d, s = mx_quantize(np.ones((2, 64), F32))
    with pytest.raises(ValueError, match="'scale'.*one per 32"):
        mx_dequantize(d, s[:, :1])
    with pytest.raises(TypeError, match="'data'"):
        mx_dequantize(d, s, elem_dtype="e4m3")
    with pytest.raises(ValueError, match="'b_data'"):
        mx_matmul(d, s, d[:, :16], s[:, :1])
    with pytest.raises(ValueError, match="'blocks'.*16"):
        mx_from_gptoss(np.zeros((2, 8), np.uint8), np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match="'scales'"):
        mx_from_gptoss(np.zeros((2, 16), np.uint8), np.zeros(3, np.uint8))
