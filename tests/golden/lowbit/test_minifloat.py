"""E2M1 / E4M3 / E5M2 / E8M0 encode and decode, FP4 packing (w8a8.lowbit.minifloat)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from w8a8.lowbit import (e2m1_to_float, e8m0_to_float, float_to_e2m1, float_to_fp8, fp4_to_float, fp8_to_float,
                         pack_fp4, unpack_fp4)

F32 = np.float32


# E2M1 codes: 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6 (sign in bit 3). Each tie sits halfway between two
# neighbours and RNE picks the one whose code is even (its mantissa bit is 0).
@pytest.mark.parametrize("value, code", [
    (0.25, 0x0),   # between 0 (code 0) and 0.5 (code 1): even code 0 -> 0
    (0.75, 0x2),   # between 0.5 (1) and 1.0 (2): even -> 1.0
    (1.25, 0x2),   # between 1.0 (2) and 1.5 (3): even -> 1.0
    (1.75, 0x4),   # between 1.5 (3) and 2.0 (4): even -> 2.0
    (2.5, 0x4),    # between 2 (4) and 3 (5): even -> 2
    (3.5, 0x6),    # between 3 (5) and 4 (6): even -> 4
    (5.0, 0x6),    # between 4 (6) and 6 (7): even -> 4
    (-2.5, 0xC),   # sign bit 8 | code 4
    (0.2500001, 0x1),  # just above the first tie: 0.5
    (6.0, 0x7), (6.5, 0x7), (1e30, 0x7), (np.inf, 0x7),  # saturate at +6
    (-np.inf, 0xF),  # -6
    (-0.0, 0x8), (-0.1, 0x8),  # negative values that round to zero keep the sign: -0
    (np.nan, 0x8),  # no NaN in E2M1: the ml_dtypes cast writes -0
])
def test_e2m1_rne_ties_and_saturation(value, code):
    assert float_to_e2m1(np.array([value], F32))[0] == code


def test_e2m1_decode_table():
    # the 16 codes by hand: magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6, then the same negated
    mags = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    expected = np.array(mags + [-m for m in mags], F32)
    got = e2m1_to_float(np.arange(16, dtype=np.uint8))
    np.testing.assert_array_equal(got, expected)
    assert np.signbit(got[8])  # code 8 is -0


@given(hnp.arrays(np.float32, st.integers(0, 64), elements=st.floats(width=32, allow_nan=False)))
def test_e2m1_encoder_is_the_nearest_value_ties_to_even(x):
    # brute force: the nearest of the 8 magnitudes in float64, ties to the even code, clipped at 6
    mags = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    m = np.minimum(np.abs(x.astype(np.float64)), 6)[:, None]
    dist = np.abs(m - mags[None, :])
    best = dist.min(axis=1, keepdims=True)
    candidates = np.where(dist == best, np.arange(8)[None, :], 99)
    even = np.where(candidates % 2 == 0, candidates, 99).min(axis=1)
    code = np.where(even < 99, even, candidates.min(axis=1))  # a tie always has an even candidate
    expected = code.astype(np.uint8) | np.where(np.signbit(x), 8, 0).astype(np.uint8)
    np.testing.assert_array_equal(float_to_e2m1(x), expected)


def test_e4m3_overflow_saturates_unless_asked_not_to():
    x = np.array([448, 464, 470, 1e6, np.inf, -500, np.nan], F32)
    sat = float_to_fp8(x, "e4m3").view(np.uint8)
    # 0x7E = 0_1111_110 = 1.75 * 2^8 = 448; 0xFE its negative; NaN stays NaN (0x7F)
    np.testing.assert_array_equal(sat[:6], [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE])
    assert sat[6] & 0x7F == 0x7F
    raw = float_to_fp8(x, "e4m3", saturate=False).astype(F32)
    assert raw[1] == 448  # 464 is the tie between 448 and the (absent) 480: ml_dtypes rounds it down
    assert np.isnan(raw[2]) and np.isnan(raw[3]) and np.isnan(raw[4])  # beyond 464: NaN in ml_dtypes


def test_e4m3_subnormals_and_ties():
    # e4m3 subnormals are m * 2^-9, m = 1..7. 2^-10 is the tie 0 | 2^-9 -> even 0; 3*2^-10 the tie
    # 2^-9 | 2*2^-9 -> even mantissa 2 (0x02). 1.0625 ties 1 (0x38) | 1.125 (0x39) -> 0x38;
    # 17 ties 16 (0x58 = 0_1011_000, exponent 11 - 7 = 4) | 18 (0x59) -> 0x58.
    x = np.array([2 ** -9, 2 ** -10, 3 * 2 ** -10, 1.0625, 17], F32)
    np.testing.assert_array_equal(float_to_fp8(x, "e4m3").view(np.uint8), [0x01, 0x00, 0x02, 0x38, 0x58])


def test_e5m2_saturation():
    # 0x7B = 0_11110_11 = 1.75 * 2^15 = 57344, the largest finite E5M2; Inf would be 0x7C
    x = np.array([57344, 1e9, np.inf, -np.inf], F32)
    np.testing.assert_array_equal(float_to_fp8(x, "e5m2").view(np.uint8), [0x7B, 0x7B, 0x7B, 0xFB])
    assert np.isposinf(float_to_fp8(np.array([1e9], F32), "e5m2", saturate=False).astype(F32)[0])


@pytest.mark.parametrize("fmt, dtype", [("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)])
def test_fp8_table_decode_matches_every_byte(fmt, dtype):
    b = np.arange(256, dtype=np.uint8).view(dtype)
    np.testing.assert_array_equal(fp8_to_float(b), b.astype(F32))  # NaN == NaN under assert_array_equal


def test_e8m0_edge_bytes():
    got = e8m0_to_float(np.array([0, 1, 126, 127, 128, 254, 255], np.uint8))
    # 2^(b - 127): byte 0 is 2^-127 (an fp32 subnormal, bits 0x00400000), 254 is 2^127, 255 NaN
    np.testing.assert_array_equal(got[:6], [2.0 ** -127, 2.0 ** -126, 0.5, 1, 2, 2.0 ** 127])
    assert got[0].view(np.uint32) == 0x00400000
    assert np.isnan(got[6])
    same = e8m0_to_float(np.array([127], np.uint8).view(ml_dtypes.float8_e8m0fnu))
    assert same[0] == 1


def test_pack_fp4_low_nibble_first():
    # codes [1, 2, F, 7] -> byte 0 = 0x21 (element 0 low), byte 1 = 0x7F
    np.testing.assert_array_equal(pack_fp4(np.array([[0x1, 0x2, 0xF, 0x7]], np.uint8)), [[0x21, 0x7F]])
    np.testing.assert_array_equal(unpack_fp4(np.array([0x21, 0x7F], np.uint8)), [0x1, 0x2, 0xF, 0x7])
    # old torchao (high nibble first) reads the same bytes swapped
    np.testing.assert_array_equal(unpack_fp4(np.array([0x21], np.uint8), low_first=False), [0x2, 0x1])


def test_fp4_pair_table_decodes_every_byte():
    # byte 0xB7: low nibble 7 -> 6.0 first, high nibble B -> -1.5 second
    np.testing.assert_array_equal(fp4_to_float(np.array([0xB7], np.uint8)), [6.0, -1.5])
    b = np.arange(256, dtype=np.uint8).reshape(16, 16)
    np.testing.assert_array_equal(fp4_to_float(b), e2m1_to_float(unpack_fp4(b)))


@given(hnp.arrays(np.uint8, st.tuples(st.integers(0, 3), st.integers(0, 9).map(lambda n: 2 * n)),
                  elements=st.integers(0, 15)))
def test_fp4_pack_round_trip(codes):
    np.testing.assert_array_equal(unpack_fp4(pack_fp4(codes)), codes)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="'codes'.*even"):
        pack_fp4(np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="'codes'.*0, 15"):
        pack_fp4(np.array([16, 0], np.uint8))
    with pytest.raises(TypeError, match="'codes'"):
        pack_fp4(np.zeros(2, np.int8))
    with pytest.raises(ValueError, match="'fmt'"):
        float_to_fp8(np.zeros(2, F32), "e3m4")
    with pytest.raises(TypeError, match="'x'"):
        fp8_to_float(np.zeros(2, F32))
    with pytest.raises(TypeError, match="'scale'"):
        e8m0_to_float(np.zeros(2, np.int32))
