"""ULP distance by ordered integer keys (w8a8/ulp.py).

For the 8- and 16-bit formats the tests walk *every* bit pattern: sorted by value (as float64,
which holds all of them exactly), the non-NaN patterns must get keys that step by exactly one,
with +0 and -0 sharing key 0.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

from w8a8 import bfloat16, ulp_distance
from w8a8.ulp import NAN_DISTANCE, ordered_key, ulp_of

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)


def _all_values(dtype):
    bits = np.arange(2 ** (8 * dtype.itemsize), dtype=np.uint16 if dtype.itemsize == 2 else np.uint8)
    v = bits.view(dtype)
    with np.errstate(invalid="ignore"):  # ml_dtypes warns when it widens a NaN pattern
        return v[~np.isnan(v.astype(np.float64))]


@pytest.mark.parametrize("dtype", [bfloat16, np.dtype(np.float16), E4M3, E5M2], ids=str)
def test_keys_step_by_one_over_every_value(dtype):
    v = _all_values(dtype)
    as64 = v.astype(np.float64)
    order = np.argsort(as64, kind="stable")
    keys = ordered_key(v[order])
    vals = as64[order]
    # distinct values: keys strictly increase by 1; the only equal pair is -0 / +0 (both key 0)
    steps = np.diff(keys)
    same = np.diff(vals) == 0
    assert set(steps[same].tolist()) == {0} and same.sum() == 1
    assert set(steps[~same].tolist()) == {1}
    assert ordered_key(np.array([0.0, -0.0], np.float64).astype(dtype)).tolist() == [0, 0]


def test_fp32_fp64_keys_are_monotone_on_samples():
    for dtype in (np.float32, np.float64):
        rng = np.random.default_rng(0)
        x = np.sort(np.concatenate([rng.standard_normal(500) * 10.0 ** rng.integers(-30, 30, 500),
                                    [np.inf, -np.inf, 0.0]])).astype(dtype)
        k = ordered_key(x)
        assert np.all(np.diff(k) >= 0)
        assert np.all((np.diff(k) == 0) == (np.diff(x) == 0))


@pytest.mark.parametrize("dtype, one_to_two", [
    (np.float64, 2**52), (np.float32, 2**23), (np.float16, 2**10), (bfloat16, 2**7), (E5M2, 2**2), (E4M3, 2**3),
])
def test_distance_counts_representable_values(dtype, one_to_two):
    # between 1.0 and 2.0 lie 2^mantissa_bits steps: 52, 23, 10, 7, 2, 3 bits
    a = np.array([1.0, -2.0]).astype(dtype)
    b = np.array([2.0, -1.0]).astype(dtype)
    assert ulp_distance(a, b).tolist() == [one_to_two, one_to_two]
    # +0 vs -0: distance 0; the smallest subnormals of opposite sign: 2 (through the shared zero)
    tiny = ml_dtypes.finfo(dtype).smallest_subnormal if dtype in (bfloat16, E4M3, E5M2) else np.finfo(dtype).smallest_subnormal
    z = np.array([0.0, float(tiny)]).astype(dtype)
    zn = np.array([-0.0, -float(tiny)]).astype(dtype)
    assert ulp_distance(z, zn).tolist() == [0, 2]


def test_adjacent_values_are_one_apart():
    for dtype in (np.float16, np.float32, np.float64):
        x = np.array([1.0, -3.5, 1e-3, 6e4 if dtype == np.float16 else 1e30], dtype)
        up = np.nextafter(x, np.array(np.inf, dtype))
        down = np.nextafter(x, np.array(-np.inf, dtype))
        assert ulp_distance(x, up).tolist() == [1] * 4
        assert ulp_distance(down, x).tolist() == [1] * 4
    # bf16: 1.0 = 0x3F80 and 0x3F81 = 1.0078125
    assert ulp_distance(np.array([1.0], bfloat16), np.array([1.0078125], bfloat16)).tolist() == [1]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, bfloat16, E5M2], ids=str)
def test_max_vs_inf_is_one(dtype):
    info = ml_dtypes.finfo(dtype) if dtype in (bfloat16, E5M2) else np.finfo(dtype)
    a = np.array([float(info.max), -float(info.max)]).astype(dtype)
    b = np.array([np.inf, -np.inf]).astype(dtype)
    assert ulp_distance(a, b).tolist() == [1, 1]


def test_nan_rules():
    a = np.array([np.nan, np.nan, 1.0, -np.nan], np.float32)
    b = np.array([np.nan, 1.0, np.nan, np.nan], np.float32)
    assert ulp_distance(a, b).tolist() == [0, NAN_DISTANCE, NAN_DISTANCE, 0]
    # e4m3fn has no Inf: its max 448 against NaN (0x7F) is the NaN distance
    m = np.array([448.0], E4M3)
    n = np.array([0x7F], np.uint8).view(E4M3)
    assert ulp_distance(m, n).tolist() == [NAN_DISTANCE]
    assert ulp_distance(np.array([np.nan], bfloat16), np.array([np.nan], bfloat16)).tolist() == [0]


def test_fp64_distances_across_zero_saturate_below_the_nan_distance():
    # -inf vs +inf in fp64 is 2 * 0x7FF0000000000000 ~ 1.8e19 steps, beyond int64: the distance
    # saturates at NAN_DISTANCE - 1 (it used to wrap around to 2^53).
    a = np.array([-np.inf, -1e300, -1.0], np.float64)
    b = np.array([np.inf, 1e300, 1.0], np.float64)
    d = ulp_distance(a, b)
    assert d.dtype == np.int64
    assert d.tolist() == [NAN_DISTANCE - 1, NAN_DISTANCE - 1, 2 * 0x3FF0000000000000]
    # fp32 across zero is exact: -1 vs 1 = 2 * 0x3F800000
    assert ulp_distance(np.float32([-1.0]), np.float32([1.0])).tolist() == [2 * 0x3F800000]


def test_errors():
    with pytest.raises(TypeError, match="'a' and 'b'"):
        ulp_distance(np.zeros(2, np.float32), np.zeros(2, np.float16))
    with pytest.raises(ValueError, match="'a' and 'b'"):
        ulp_distance(np.zeros(2, np.float32), np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        ulp_distance(np.zeros(2, np.int32), np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="dtype"):
        ordered_key(np.zeros(2, ml_dtypes.float8_e8m0fnu))


def test_ulp_of():
    x = np.array([1.0, 1.5, 2.0, 0.0, -4.0], np.float32)
    assert ulp_of(x).tolist() == [2.0**-23, 2.0**-23, 2.0**-22, 2.0**-149, 2.0**-21]
    assert ulp_of(np.array([1.0], bfloat16)).tolist() == [2.0**-7]
    assert ulp_of(np.array([1.0, 65504.0], np.float16)).tolist() == [2.0**-10, 32.0]
    assert ulp_of(np.array([1.0], E4M3)).tolist() == [0.125]


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=3, max_size=3))
def test_distance_is_additive_along_the_line(v):
    a, b, c = sorted(np.float32(x) for x in v)
    a, b, c = np.float32([a]), np.float32([b]), np.float32([c])
    dab, dbc, dac = ulp_distance(a, b)[0], ulp_distance(b, c)[0], ulp_distance(a, c)[0]
    assert dab + dbc == dac
    assert ulp_distance(b, a)[0] == dab
    assert ulp_distance(a, np.nextafter(a, np.float32(np.inf)))[0] == 1
