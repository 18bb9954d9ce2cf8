"""``trans_quant_param`` and friends (w8a8/trans_quant_param.py) — ops-nn ``trans_quant_param_v2.h``.

Bit layout of the packed int64::

    bits  0..31  fp32 scale reduced to FP19 (sign, 8 exponent, top 10 mantissa bits)
    bits 37..45  offset, 9-bit two's complement of clip(rint(offset), -256, 255)
    bit  46      1 ("quant scale valid")

The FP19 reference below is exact arithmetic (``fractions.Fraction``): a normal value keeps 11
significant bits (1 implicit + 10), by floor of the magnitude (round_mode 0) or by round half to
even (round_mode 1, Python's ``round`` on a Fraction), never the golden's bit tricks.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from w8a8 import ASCEND, decode_quant_param, fp32_bits_to_int64, quant_matmul, trans_quant_param
from w8a8.trans_quant_param import FLAG, fp19, fp19_round_even, fp19_truncate, trans_quant_param_args

IEEE = ASCEND.replace(nan_policy="ieee")

FLAG_BIT = 1 << 46


def f32_from_bits(*bits):
    return np.array(bits, np.uint32).view(np.float32)


def bits_of(a):
    return np.asarray(a, np.float32).view(np.uint32).tolist()


def u64(a):
    return np.asarray(a).view(np.uint64).tolist()


def fp19_ref(v: float, round_mode: int) -> float:
    if v == 0 or not math.isfinite(v):
        return v
    _, e = math.frexp(abs(v))                      # |v| = m * 2^e, m in [0.5, 1)
    quantum = Fraction(2) ** (e - 11)              # 11 significant bits
    q = Fraction(abs(v)) / quantum
    n = math.floor(q) if round_mode == 0 else round(q)
    return math.copysign(float(n * quantum), v)


# ---------------------------------------------------------------- vendor facts

def test_scale_one():
    # 1.0 = 0x3F800000 (low mantissa bits already zero) | flag (1 << 46) = 0x0000_4000_3F80_0000
    p = trans_quant_param(np.array([1.0], np.float32))
    assert p.dtype == np.int64 and p.tolist() == [0x0000_4000_3F80_0000]
    assert int(FLAG) == FLAG_BIT == 0x0000_4000_0000_0000


def test_scale_one_with_offset_minus_3():
    # -3 & 0x1FF = 0x1FD; << 37 = 0x3FA0_0000_0000; | flag | 0x3F800000 = 0x7FA0_3F80_0000
    p = trans_quant_param(np.array([1.0], np.float32), np.array([-3.0], np.float32))
    assert p.tolist() == [0x7FA0_3F80_0000]


@pytest.mark.parametrize("offset, o9", [
    (2.5, 2), (3.5, 4), (-2.5, -2), (-3.5, -4),          # RINT: half to even
    (0.49, 0), (-0.5, 0), (255.0, 255), (255.5, 255),     # 255.5 -> 256 -> clipped to 255
    (300.0, 255), (-256.0, -256), (-256.5, -256), (-1e9, -256), (np.nan, 0),   # NaN -> 0: golden choice
])
def test_offset_rounding_and_clipping(offset, o9):
    # A NaN offset packs as 0 under nan_policy="ieee"; the default "raise" refuses it (test below).
    p = trans_quant_param(np.array([1.0], np.float32), np.array([offset], np.float32), numerics=IEEE)
    assert u64(p) == [0x3F800000 | FLAG_BIT | ((o9 & 0x1FF) << 37)]
    scale, off = decode_quant_param(p)
    assert scale.tolist() == [1.0] and off.tolist() == [float(o9)]


def test_fp19_example_of_the_spec():
    # 0.0123456 -> FP19 0.01234436 (truncation), relative error 1.0e-4
    s = np.array([0.0123456], np.float32)
    t = fp19_truncate(s)
    assert t[0] == np.float32(0.01234436)
    assert abs(float(s[0]) - float(t[0])) / float(s[0]) == pytest.approx(1.0e-4, rel=0.01)
    assert decode_quant_param(trans_quant_param(s))[0][0] == t[0]


# ---------------------------------------------------------------- round_mode 1 (RNE), bit by bit

@pytest.mark.parametrize("bits, rne, trunc", [
    (0x3F801000, 0x3F800000, 0x3F800000),   # low 13 bits = 0x1000: exact tie, kept mantissa even -> down
    (0x3F803000, 0x3F804000, 0x3F802000),   # tie with odd kept lsb (bit 13 set) -> up to even
    (0x3F801001, 0x3F802000, 0x3F800000),   # above the tie -> up
    (0x3F800FFF, 0x3F800000, 0x3F800000),   # below the tie -> down
    (0x3FFFF000, 0x40000000, 0x3FFFE000),   # tie, odd lsb: the carry runs into the exponent: 2.0
    (0xBFFFFFFF, 0xC0000000, 0xBFFFE000),   # -1.99999988 -> -2.0 (sign kept, magnitude rounds)
    (0x7F7FFFFF, 0x7F800000, 0x7F7FE000),   # FLT_MAX: the carry makes the exponent 255 -> +inf
    (0x00001234, 0x00000000, 0x00000000),   # subnormal (exponent 0) -> +0 under RNE
    (0x80401234, 0x80000000, 0x80400000),   # negative subnormal -> -0 under RNE; truncation keeps bits
    (0x7F800000, 0x7F800000, 0x7F800000),   # +inf kept
    (0xFF800000, 0xFF800000, 0xFF800000),   # -inf kept
    (0x7FC00000, 0x7FC00000, 0x7FC00000),   # quiet NaN kept
    (0x7FC01FFF, 0x7FC00000, 0x7FC00000),   # NaN is kept truncated (no carry into the payload)
])
def test_round_mode_bits(bits, rne, trunc):
    s = f32_from_bits(bits)
    assert bits_of(fp19_round_even(s)) == [rne]
    assert bits_of(fp19(s, 1)) == [rne]
    assert bits_of(fp19_truncate(s)) == [trunc]
    assert bits_of(fp19(s, 0)) == [trunc]
    # the packed words carry exactly these low 32 bits and the flag (Inf / NaN scales: under "ieee" only)
    assert u64(trans_quant_param(s, round_mode=1, numerics=IEEE)) == [rne | FLAG_BIT]
    assert u64(trans_quant_param(s, numerics=IEEE)) == [trunc | FLAG_BIT]
    if np.isfinite(s).all():
        assert u64(trans_quant_param(s)) == [trunc | FLAG_BIT]


@pytest.mark.parametrize("arg, bits, kind", [("scale", 0x7FC00000, "NaN"), ("scale", 0xFF800000, "Inf"),
                                             ("offset", 0x7FC00000, "NaN"), ("offset", 0x7F800000, "Inf")])
def test_non_finite_scale_or_offset_refused_under_raise(arg, bits, kind):
    # nan_policy="raise" (ASCEND): a NaN / Inf scale would pack exponent 255 into the fix-pipe word, whose
    # device behaviour is unspecified; the argument and the first bad index are named.
    bad = f32_from_bits(bits)
    args = (bad,) if arg == "scale" else (np.array([1.0], np.float32), bad)
    with pytest.raises(ValueError, match=rf"trans_quant_param: argument '{arg}' must be finite.*got {kind} at index \(0,\)"):
        trans_quant_param(*args)


def test_decode_reads_the_cann_golden_way():
    # scale = fp32(low32 & 0xFFFFE000), offset = sign-extend((u64 >> 37) & 0x1FF)
    packed = np.array([0x7FA0_3F80_1FFF, 0x4000_3F80_0000, 0x0000_3F80_0000, 0x5FE0_4000_0000], np.uint64)
    scale, off = decode_quant_param(packed)
    assert scale.dtype == np.float32 and off.dtype == np.float32
    assert scale.tolist() == [1.0, 1.0, 1.0, 2.0]
    assert off.tolist() == [-3.0, 0.0, 0.0, 255.0]
    assert np.array_equal(decode_quant_param(packed.view(np.int64))[0], scale)


def test_fp32_bits_to_int64_is_the_raw_pattern():
    # msModelSlim deqscale2int64 / vllm-ascend scale_from_float_to_int64: no FP19, no flag
    s = np.array([1.0, 0.0123456, 2.0], np.float32)
    r = fp32_bits_to_int64(s)
    assert r.dtype == np.int64
    assert r.tolist() == [0x3F800000, int(s[1:2].view(np.int32)[0]), 0x40000000]
    # read back by the fix-pipe (decode): its FP19 truncation, offset 0
    scale, off = decode_quant_param(r)
    assert np.array_equal(scale, fp19_truncate(s)) and off.tolist() == [0.0] * 3


def test_args():
    a = trans_quant_param_args(np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32), round_mode=True)
    assert a.round_mode == 1 and a.offset.shape == (2, 3)     # True == 1 is accepted (and means RNE)
    with pytest.raises(ValueError, match="'offset'"):
        trans_quant_param_args(np.ones(3, np.float32), np.zeros(2, np.float32))


def test_negative_raw_bits_sign_extend_into_the_offset_field():
    # msModelSlim sign-extends the int32 bit pattern: -1.0 = 0xBF800000 -> 0xFFFF_FFFF_BF80_0000. The
    # scale decodes right from the low 32 bits, but bits 37..45 are all ones: 0x1FF = -1 as a 9-bit
    # offset (and bit 46, the flag, reads as set). A non-negative scale has a zero high word: offset 0.
    s = np.array([-1.0, -0.375, 2.0], np.float32)
    r = fp32_bits_to_int64(s)
    assert [int(v) & (2**64 - 1) for v in r] == [0xFFFF_FFFF_BF80_0000, 0xFFFF_FFFF_BEC0_0000, 0x4000_0000]
    assert all(int(v) >> 46 & 1 for v in r[:2])
    scale, off = decode_quant_param(r)
    assert scale.tolist() == [-1.0, -0.375, 2.0]      # exact in FP19 (at most 2 significant bits)
    assert off.tolist() == [-1.0, -1.0, 0.0]          # meaningless for raw bits, as documented
    # Where that offset lands: an int8 (requant) quant_matmul without an explicit offset adds the
    # decoded one. acc = 1 * 10 = 10; -1.0 scale: s9(s9(10 * -1) + s9(-1)) = -11, not -10.
    x1, x2 = np.array([[1]], np.int8), np.array([[10]], np.int8)
    assert quant_matmul(x1, x2, r[:1], output_dtype="int8").tolist() == [[-11]]
    assert quant_matmul(x1, x2, r[2:], output_dtype="int8").tolist() == [[20]]


# ---------------------------------------------------------------- shapes and errors

def test_shapes():
    s = np.array([1.0, 2.0, 4.0], np.float32)
    assert trans_quant_param(s).shape == (3,)
    assert trans_quant_param(s, np.array([1.0], np.float32)).shape == (3,)
    assert trans_quant_param(s[:1], np.array([1.0, 2.0, 3.0, 4.0], np.float32)).shape == (4,)  # the larger
    g = np.ones((2, 3), np.float32)
    assert trans_quant_param(g, np.ones((2, 3), np.float32)).shape == (2, 3)
    assert trans_quant_param(np.ones((2, 1), np.float32)).shape == (2, 1)
    # non-contiguous scale / offset
    base = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(trans_quant_param(base.T, base.T * 0), trans_quant_param(base.T.copy(), base.T.copy() * 0))
    assert np.array_equal(trans_quant_param(base[:, 1]), trans_quant_param(base[:, 1].copy()))


@pytest.mark.parametrize("kwargs, exc, arg", [
    (dict(scale=np.ones(3, np.float16)), TypeError, "'scale'"),
    (dict(scale=np.ones(3, np.float64)), TypeError, "'scale'"),
    (dict(scale=[1.0]), TypeError, "'scale'"),
    (dict(scale=np.ones((1, 1, 3), np.float32)), ValueError, "'scale'"),
    (dict(scale=np.ones((), np.float32)), ValueError, "'scale'"),
    (dict(scale=np.ones(3, np.float32), offset=np.ones(3, np.float16)), TypeError, "'offset'"),
    (dict(scale=np.ones(3, np.float32), offset=np.ones(2, np.float32)), ValueError, "'offset'"),
    (dict(scale=np.ones((2, 3), np.float32), offset=np.ones(3, np.float32)), ValueError, "'offset'"),
    (dict(scale=np.ones(3, np.float32), round_mode=2), ValueError, "'round_mode'"),
])
def test_errors(kwargs, exc, arg):
    with pytest.raises(exc) as e:
        trans_quant_param(**kwargs)
    assert arg in str(e.value)


def test_decode_and_bits_errors():
    with pytest.raises(TypeError, match="'packed'"):
        decode_quant_param(np.ones(2, np.int32))
    with pytest.raises(TypeError, match="'scale'"):
        fp32_bits_to_int64(np.ones(2, np.float64))


# ---------------------------------------------------------------- properties

# normal numbers built from their fields (every exponent and mantissa pattern equally likely,
# including the all-ones mantissas whose rounding carries into the exponent), plus Hypothesis'
# own float32 generator (zeros, subnormals, extremes)
normal_f32 = st.builds(lambda sign, exp, man: f32_from_bits((sign << 31) | (exp << 23) | man)[0],
                       st.integers(0, 1), st.integers(1, 254),
                       st.one_of(st.integers(0, 2**23 - 1), st.integers(2**23 - 2**13, 2**23 - 1)))
finite_f32 = st.one_of(normal_f32, st.floats(width=32, allow_nan=False, allow_infinity=False).map(np.float32))


@given(finite_f32, st.floats(-600, 600, allow_nan=False, width=32), st.sampled_from([0, 1]))
def test_encode_decode_round_trip(s, o, round_mode):
    sa, oa = np.array([s], np.float32), np.array([o], np.float32)
    p = trans_quant_param(sa, oa, round_mode=round_mode)
    word = u64(p)[0]
    assert word & FLAG_BIT
    assert word & 0x0000_001F_0000_0000 == 0 and word >> 47 == 0     # bits 32..36 and 47..63 zero
    scale, off = decode_quant_param(p)
    assert bits_of(scale) == bits_of(fp19(sa, round_mode))
    assert off[0] == min(max(round(float(o)), -256), 255)              # Python round: half to even
    # decode(encode) is idempotent on FP19 values (RNE may carry FLT_MAX to Inf: packed under "ieee")
    assert bits_of(decode_quant_param(trans_quant_param(scale, numerics=IEEE))[0]) == bits_of(scale)


@given(st.one_of(normal_f32, st.floats(width=32, allow_nan=False, allow_infinity=False,
                                       allow_subnormal=False).map(np.float32)), st.sampled_from([0, 1]))
def test_fp19_equals_exact_reference_on_normal_numbers(s, round_mode):
    # (subnormals are pinned bit by bit above)
    with np.errstate(over="ignore"):
        ref = np.float32(fp19_ref(float(s), round_mode))  # may round up past FLT_MAX to inf
    got = fp19(np.array([s], np.float32), round_mode)[0]
    assert got == ref and math.copysign(1, got) == math.copysign(1, ref)
    assert abs(float(got) - float(s)) <= abs(float(s)) * 2.0 ** -(10 if round_mode == 0 else 11) or np.isinf(got)
