"""Rounding and casts (w8a8/rounding.py): ties, saturation, wrap, NaN codes, RNE to bf16/fp16.

Independent references used here: Python's ``round`` on a float (exact, ties to even) and
``fractions.Fraction`` arithmetic (exact), never the golden's own helpers.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from w8a8 import bfloat16
from w8a8.rounding import f32, round_half_away, round_half_even, round_to_integral, to_float, to_int

# 0.49999997f = 0x3EFFFFFF, the largest float32 below 0.5. In fp32, 0.49999997 + 0.5 = 0.99999997
# is not representable and rounds (to even) up to 1.0, so floor(x + 0.5) gives 1: the classic trap.
BELOW_HALF = np.array([0x3EFFFFFF], np.uint32).view(np.float32)[0]


def test_below_half_premise():
    assert float(BELOW_HALF) == 0.5 - 2.0 ** -25
    assert np.floor(BELOW_HALF + np.float32(0.5)) == 1.0  # the trap round_half_away must avoid


# x, half-even, half-away. Ties: 0.5 -> 0 | 1, 1.5 -> 2 | 2, 2.5 -> 2 | 3, and mirrored for negatives.
# 8388606.5 = 2^23 - 1.5 (spacing 0.5 just below 2^23): even -> 8388606, away -> 8388607.
# 8388607.5 = 2^23 - 0.5: both modes give 8388608 (the even neighbour is also the one away from 0).
# At and above 2^23 every float32 is an integer: 16777218 = 2^24 + 2 stays.
TIES_F32 = [
    (0.5, 0.0, 1.0), (1.5, 2.0, 2.0), (2.5, 2.0, 3.0), (3.5, 4.0, 4.0),
    (-0.5, -0.0, -1.0), (-1.5, -2.0, -2.0), (-2.5, -2.0, -3.0),
    (0.49999997, 0.0, 0.0), (-0.49999997, -0.0, -0.0), (0.5000001, 1.0, 1.0),
    (1.4999999, 1.0, 1.0), (8388606.5, 8388606.0, 8388607.0), (8388607.5, 8388608.0, 8388608.0),
    (16777218.0, 16777218.0, 16777218.0), (1e30, 1e30, 1e30), (-0.0, -0.0, -0.0), (0.0, 0.0, 0.0),
]


@pytest.mark.parametrize("x, even, away", TIES_F32)
def test_ties_float32(x, even, away):
    a = np.array([x], np.float32)
    assert a[0] == np.float32(x)
    e, w = round_half_even(a), round_half_away(a)
    assert e.dtype == np.float32 and w.dtype == np.float32
    assert e[0] == np.float32(even) and w[0] == np.float32(away)
    # the sign of zero survives (round(-0.4) is -0.0, bit 31 set)
    assert math.copysign(1, e[0]) == math.copysign(1, even)
    assert math.copysign(1, w[0]) == math.copysign(1, away)
    assert round_to_integral(a, "half_even")[0] == e[0]
    assert round_to_integral(a, "half_away")[0] == w[0]


def test_ties_float16_and_float64_keep_dtype():
    h = np.array([0.5, 1.5, 2.5, -2.5, 1022.5], np.float16)  # 1022.5 is an fp16 (spacing 0.5 in [512, 1024))
    assert round_half_even(h).dtype == np.float16 and round_half_away(h).dtype == np.float16
    assert round_half_even(h).tolist() == [0.0, 2.0, 2.0, -2.0, 1022.0]
    assert round_half_away(h).tolist() == [1.0, 2.0, 3.0, -3.0, 1023.0]
    # 2^52 - 0.5 = 4503599627370495.5 is a float64 tie (spacing 0.5 in [2^51, 2^52)) between an odd
    # and an even integer: both modes give 2^52; 2^52 - 1.5 splits them.
    d = np.array([4503599627370495.5, 4503599627370494.5], np.float64)
    assert round_half_even(d).tolist() == [4503599627370496.0, 4503599627370494.0]
    assert round_half_away(d).tolist() == [4503599627370496.0, 4503599627370495.0]
    assert round_half_away(d).dtype == np.float64


def test_inf_and_nan_pass_through_without_warnings():
    # inf - trunc(inf) is NaN: round_half_away must not let that become a RuntimeWarning (the test
    # suite turns warnings from w8a8 into errors) nor a wrong step: Inf stays Inf, NaN stays NaN.
    a = np.array([np.inf, -np.inf, np.nan], np.float32)
    for f in (round_half_even, round_half_away):
        r = f(a)
        assert r[0] == np.inf and r[1] == -np.inf and np.isnan(r[2])


def test_round_to_integral_bad_mode():
    with pytest.raises(ValueError, match="'mode'"):
        round_to_integral(np.zeros(1, np.float32), "half_up")


# ---------------------------------------------------------------- to_int

def test_to_int_saturates_int8():
    x = np.array([127.4, 127.5, 128.0, 1e10, np.inf, -128.5, -129.0, -1e10, -np.inf, 126.5], np.float32)
    # 127.5 -> 128 (even) -> clamps to 127; -128.5 -> -128 (even); 126.5 -> 126 (even)
    assert to_int(x, "int8").tolist() == [127, 127, 127, 127, 127, -128, -128, -128, -128, 126]
    assert to_int(x, "int8").dtype == np.int8
    # half-away: 126.5 -> 127, -128.5 -> -129 -> clamps to -128
    assert to_int(x, "int8", mode="half_away").tolist() == [127, 127, 127, 127, 127, -128, -128, -128, -128, 127]


def test_to_int_int4_uint8_and_custom_bounds():
    x = np.array([7.5, 6.5, -8.5, -9.0, 100.0], np.float32)
    r = to_int(x, "int4")  # int4 codes travel as int8 in [-8, 7]; 7.5 -> 8 -> 7; -8.5 -> -8 (even)
    assert r.dtype == np.int8 and r.tolist() == [7, 6, -8, -8, 7]
    u = to_int(np.array([-1.0, -0.5, 255.5, 254.5, 300.0], np.float32), "uint8")
    assert u.dtype == np.uint8 and u.tolist() == [0, 0, 255, 254, 255]   # 255.5 -> 256 -> 255; 254.5 -> 254
    # a symmetric quantizer clamps to [-127, 127]
    assert to_int(np.array([-200.0, 200.0], np.float32), "int8", lo=-127, hi=127).tolist() == [-127, 127]


def test_to_int_int32_saturates_at_the_exact_bounds():
    # 2^31 - 1 is not a float32 (it rounds to 2^31): a float32 clamp would produce 2^31, whose
    # int32 cast is undefined (x86 writes -2^31). The golden clamps in float64.
    x = np.array([3e9, -3e9, 2147483520.0, -2147483648.0, np.inf, -np.inf], np.float32)
    # 2147483520 = 2^31 - 128 is the largest float32 below 2^31: exact, no clamp.
    assert to_int(x, "int32").tolist() == [2**31 - 1, -2**31, 2147483520, -2**31, 2**31 - 1, -2**31]


def test_to_int_nan_code():
    x = np.array([np.nan, 1.0], np.float32)
    assert to_int(x, "int8").tolist() == [0, 1]
    assert to_int(x, "int8", nan_value=-128).tolist() == [-128, 1]
    # the NaN code is written as given, even outside a narrower clamp range [-127, 127]:
    # that is what zero_row="int_min" of a symmetric quantizer needs
    assert to_int(x, "int8", lo=-127, hi=127, nan_value=-128).tolist() == [-128, 1]
    assert to_int(x, "int8", saturate=False, nan_value=-128).tolist() == [-128, 1]


def test_to_int_wraps_like_twos_complement():
    x = np.array([127.0, 128.0, 255.0, 256.0, -129.0, 300.5, -300.0, np.inf, np.nan], np.float32)
    # 128 -> -128, 255 -> -1, 256 -> 0, -129 -> 127, 300.5 -> 300 (even) -> 300 - 256 = 44,
    # -300 -> -300 + 512 = 212 -> 212 - 256 = -44; Inf has no residue: 0; NaN: nan_value 0
    assert to_int(x, "int8", saturate=False).tolist() == [127, -128, -1, 0, 127, 44, -44, 0, 0]
    # int4: 8 -> -8, 9 -> -7, 16 -> 0, -9 -> 7
    assert to_int(np.array([8.0, 9.0, 16.0, -9.0], np.float32), "int4", saturate=False).tolist() == [-8, -7, 0, 7]


def test_to_int_accepts_bf16_and_fp16():
    b = np.array([2.5, -2.5, 300.0], np.float32).astype(bfloat16)
    assert to_int(b, "int8").tolist() == [2, -2, 127]
    h = np.array([2.5, -3.5], np.float16)
    assert to_int(h, "int8", mode="half_away").tolist() == [3, -4]


@given(hnp.arrays(np.float32, st.integers(1, 64),
                  elements=st.floats(-1e6, 1e6, width=32, allow_nan=False)))
def test_rounding_matches_exact_references(x):
    # Python's round() on a float is exact half-to-even; Fraction gives exact half-away.
    even = [float(round(float(v))) for v in x]
    away = []
    for v in x:
        f = Fraction(float(v))
        whole = math.trunc(f)
        away.append(float(whole + (int(math.copysign(1, f)) if abs(f - whole) >= Fraction(1, 2) else 0)))
    assert round_half_even(x).tolist() == even
    assert round_half_away(x).tolist() == away
    # to_int = rounding then clamp, for both modes
    assert to_int(x, "int8").tolist() == [int(min(max(v, -128), 127)) for v in even]
    assert to_int(x, "int8", mode="half_away").tolist() == [int(min(max(v, -128), 127)) for v in away]


# ---------------------------------------------------------------- to_float

def _bf16_bits(a):
    return np.asarray(a).view(np.uint16).tolist()


def test_to_float_rne_to_bf16():
    # bf16 keeps 7 mantissa bits: between 1.0 (0x3F80) and 1.0078125 (0x3F81) the midpoint is
    # 1 + 2^-8. RNE: 1 + 2^-8 -> 0x3F80 (even), 1 + 3*2^-8 -> 0x3F82 (even), just above the
    # midpoint 1 + 2^-8 + 2^-23 -> 0x3F81.
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-23, -(1 + 2.0**-8)], np.float32)
    assert _bf16_bits(to_float(x, bfloat16)) == [0x3F80, 0x3F82, 0x3F81, 0xBF80]
    # the largest float32 rounds to bf16 inf (0x7F80): 0x7F7FFFFF is above the bf16 max midpoint
    big = np.array([0x7F7FFFFF], np.uint32).view(np.float32)
    assert _bf16_bits(to_float(big, "bfloat16")) == [0x7F80]


def test_to_float_rne_to_fp16_and_overflow():
    # fp16 max is 65504; the midpoint to the next binade value 65536 is 65520: ties to even -> Inf
    # (the fp16 encoding after 0x7BFF is 0x7C00 = inf); 65519 rounds down to 65504. No warning.
    x = np.array([65519.0, 65520.0, -65520.0, 1 + 2.0**-11, 1 + 3 * 2.0**-11], np.float32)
    h = to_float(x, np.float16)
    assert h.view(np.uint16).tolist() == [0x7BFF, 0x7C00, 0xFC00, 0x3C00, 0x3C02]


def test_to_float_nan_bits_without_warnings():
    # NaN -> bf16 / fp16 casts warn "invalid value encountered in cast" in NumPy; to_float silences it on
    # purpose and keeps the documented bits. fp32 inputs: quiet NaN 0x7FC00000, its negative 0xFFC00000,
    # the signaling NaN 0x7F800001 (payload 1) and 0x7FC01234 (payload below fp16's 10 kept bits).
    x = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FC01234], np.uint32).view(np.float32)
    # bf16 (ml_dtypes): sign | 0x7FC0, payload dropped
    assert _bf16_bits(to_float(x, bfloat16)) == [0x7FC0, 0xFFC0, 0x7FC0, 0x7FC0]
    # fp16: sign, 0x7C00, and the top 10 payload bits (0x400000 >> 13 = 0x200); a payload whose top bits
    # are all 0 (0x000001) becomes 1 so that it stays a NaN: 0x7C01
    assert to_float(x, np.float16).view(np.uint16).tolist() == [0x7E00, 0xFE00, 0x7C01, 0x7E00]


def test_to_float_fp32_is_identity_and_rejects_other_inputs():
    x = np.array([1.1, -2.2], np.float32)
    assert to_float(x, "float32") is x
    with pytest.raises(TypeError, match="'x32'"):
        to_float(np.array([1.0]), bfloat16)  # float64: a direct f64 -> bf16 cast would round twice


def test_f32_widens_exactly():
    b = np.array([0x3F81, 0xC2F7], np.uint16).view(bfloat16)
    assert f32(b).tolist() == [1.0078125, -123.5]
    assert f32(np.array([-128, 127], np.int8)).dtype == np.float32
