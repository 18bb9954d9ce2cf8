"""INT4 group-wise weight quantization (w8a8.lowbit.int4_group)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from w8a8.lowbit import int4_group_dequantize, int4_group_quantize

F32 = np.float32


def test_gptq_sym_codes():
    w = np.array([[-7.5, -1, 0, 0.5, 1.25, 3.75, 7.5, 2.0]], F32)
    q, s, z = int4_group_quantize(w, 8)
    # amax 7.5 -> s = 7.5 / 7.5 = 1 (exact in fp16). rint(w / 1): -7.5 ties to the even -8 (the
    # bottom of the range), 0.5 -> 0, 1.25 -> 1, 3.75 -> 4, 7.5 -> 8 clamps to 7.
    assert z is None and s.dtype == np.float16 and s[0, 0] == 1
    np.testing.assert_array_equal(q, [[-8, -1, 0, 0, 1, 4, 7, 2]])
    np.testing.assert_array_equal(int4_group_dequantize(q, s), [[-8, -1, 0, 0, 1, 4, 7, 2]])


def test_absmax_sym_codes():
    w = np.array([[-7.5, -1, 0, 0.5, 1.25, 3.75, 7.5, 2.0]], F32)
    q, s, _ = int4_group_quantize(w, 8, scheme="absmax_sym")
    # s = 7.5 / 7 = 1.0714285 -> fp16 1097/1024 = 1.0712890625 (the nearer of 1097 and 1098 / 1024).
    # w / s: -7.0009 -> -7, -0.93 -> -1, 0, 0.467 -> 0, 1.167 -> 1, 3.5004 -> 4, 7.0009 -> 7, 1.867 -> 2
    assert s[0, 0] == np.float16(1097 / 1024)
    np.testing.assert_array_equal(q, [[-7, -1, 0, 0, 1, 4, 7, 2]])


def test_scale_is_rounded_before_the_codes_are_computed():
    # s32 = 16377/16384 = 1 - 2^-11 + 2^-14 rounds to the fp16 s16 = 16376/16384 = 1 - 2^-11.
    # amax = 7.5 * s32 and x = 2.5 * s32 are exact fp32 values. With the fp32 scale x / s32 = 2.5
    # would tie to 2; with the stored scale x / s16 = 81885/32752 = 2.50015 rounds to 3 — the
    # nearest point of the stored grid (2 * s16 is 0.4998 away, 3 * s16 only 0.4995).
    s32 = 16377 / 16384
    w = np.array([[7.5 * s32, 2.5 * s32]], F32)
    q, s, _ = int4_group_quantize(w, 2)
    assert s[0, 0] == np.float16(16376 / 16384)
    np.testing.assert_array_equal(q, [[7, 3]])  # amax / s16 = 7.5004 -> 8 -> clamps to 7


def test_asym_codes_and_zero_point():
    w = np.array([[-1, 0, 2, 14]], F32)
    u, s, z = int4_group_quantize(w, 4, scheme="asym")
    # range [-1, 14] (contains 0): s = 15 / 15 = 1, z = rint(1 / 1) = 1, u = rint(w) + 1
    assert (s[0, 0], z[0, 0]) == (1, 1) and u.dtype == np.uint8
    np.testing.assert_array_equal(u, [[0, 1, 3, 15]])
    np.testing.assert_array_equal(int4_group_dequantize(u, s, z), w)


def test_asym_range_is_widened_to_include_zero():
    w = np.array([[2, 4, 6, 8]], F32)
    u, s, z = int4_group_quantize(w, 4, scheme="asym")
    # lo = min(2, 0) = 0, hi = 8: s = 8/15 = 0.5333 -> fp16 546/1024 = 0.533203125, z = 0;
    # w / s = 3.751, 7.502, 11.253, 15.004 -> 4, 8, 11, 15
    assert s[0, 0] == np.float16(546 / 1024) and z[0, 0] == 0
    np.testing.assert_array_equal(u, [[4, 8, 11, 15]])


def test_all_zero_group_uses_gptq_unit_range():
    w = np.zeros((1, 32), F32)
    q, s, _ = int4_group_quantize(w, 32)
    # amax 0 is replaced by 1: s = fp16(1 / 7.5) = 0.1333, every code 0, dequantizes to 0
    assert s[0, 0] == np.float16(1 / 7.5) and not q.any()
    u, s, z = int4_group_quantize(w, 32, scheme="asym")
    # range [-1, 1]: s = fp16(2/15) = 0.13330078, z = rint(1 / s) = rint(7.5018) = 8 = every code
    assert z[0, 0] == 8 and (u == 8).all()
    assert not int4_group_dequantize(u, s, z).any()


def test_group_boundaries_and_bf16_scale():
    # two groups of 4 with different ranges: each gets its own scale
    w = np.array([[1, 1, 1, 7.5, 100, 0, 0, 0]], F32)
    q, s, _ = int4_group_quantize(w, 4, scale_dtype="bfloat16")
    assert s.dtype == ml_dtypes.bfloat16 and s.shape == (1, 2)
    # group 0: s = 1 -> [1, 1, 1, 7 (7.5 -> 8 clamps)]; group 1: s = bf16(13.333) = 13.3125 -> 100/s = 7.51 -> 7
    assert s[0, 1] == ml_dtypes.bfloat16(100 / 7.5)
    np.testing.assert_array_equal(q, [[1, 1, 1, 7, 7, 0, 0, 0]])


def test_leading_expert_dims_and_per_channel():
    w = np.arange(2 * 3 * 8, dtype=F32).reshape(2, 3, 8) - 20
    q, s, _ = int4_group_quantize(w, -1)  # -1: one group per row
    assert q.shape == w.shape and s.shape == (2, 3, 1)
    q2, s2, _ = int4_group_quantize(w, 8)
    np.testing.assert_array_equal(q, q2)


_UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24}
_values = st.floats(-1e3, 1e3, width=32).filter(lambda v: v == 0 or abs(v) > 1e-2)


@given(st.data())
def test_round_trip_within_the_format_bound(data):
    g = data.draw(st.sampled_from([1, 7, 32, 64, 128]))
    groups = data.draw(st.integers(1, 3))
    w = data.draw(hnp.arrays(F32, (data.draw(st.integers(1, 3)), g * groups), elements=_values))
    scheme = data.draw(st.sampled_from(["gptq_sym", "absmax_sym", "asym"]))
    sdt = data.draw(st.sampled_from(["float16", "bfloat16", "float32"]))
    codes, s, z = int4_group_quantize(w, g, scheme=scheme, scale_dtype=sdt)
    w_hat = int4_group_dequantize(codes, s, z)
    sf = np.repeat(s.astype(np.float64), g, axis=-1)
    u = _UNIT[sdt]
    # symmetric: half a step, plus the clip of amax / s_stored <= 7.5 (1 + u) -> 8 -> 7 (7.5 u);
    # asymmetric: also the zero point's own rounding (half a step) and its 15 u share at the top.
    bound = sf * ((0.5 + 8 * u) if scheme != "asym" else (1 + 16 * u)) + 1e-6 * np.abs(w).max()
    assert (np.abs(w_hat.astype(np.float64) - w) <= bound).all()
    lo, hi = (0, 15) if scheme == "asym" else ((-8, 7) if scheme == "gptq_sym" else (-7, 7))
    assert codes.min() >= lo and codes.max() <= hi


def test_bad_inputs_name_the_argument():
    w = np.ones((2, 64), F32)
    with pytest.raises(ValueError, match="'group_size'.*divisor of K = 64"):
        int4_group_quantize(w, 48)
    with pytest.raises(ValueError, match="'scheme'"):
        int4_group_quantize(w, 32, scheme="sym")
    with pytest.raises(TypeError, match="'scale_dtype'"):
        int4_group_quantize(w, 32, scale_dtype="int8")
    with pytest.raises(TypeError, match="'weight'"):
        int4_group_quantize(w.astype(np.int32), 32)
    with pytest.raises(ValueError, match="'weight'.*NaN"):
        int4_group_quantize(np.full((2, 64), np.nan, F32), 32)
    with pytest.raises(ValueError, match="'weight'.*scale overflow"):
        int4_group_quantize(np.full((1, 32), 1e6, F32), 32)  # 1e6 / 7.5 > 65504
    with pytest.raises(ValueError, match="'weight'.*scale overflow"):
        # hi - lo = 2 * 3e38 overflows fp32 even before the float32 scale
        int4_group_quantize(np.array([[3e38, -3e38]], F32), 2, scheme="asym", scale_dtype="float32")
    q, s, _ = int4_group_quantize(w, 32)
    with pytest.raises(ValueError, match="'zero'.*None"):
        int4_group_dequantize(q, s, np.zeros_like(s, dtype=np.uint8))
    with pytest.raises(ValueError, match="'zero'"):
        int4_group_dequantize(q.astype(np.uint8), s)
    with pytest.raises(ValueError, match="'scale'"):
        int4_group_dequantize(q, s[:, :1].repeat(3, axis=1))
    with pytest.raises(ValueError, match="'codes'.*-8, 7"):
        int4_group_dequantize(np.full((2, 64), 9, np.int8), s)
