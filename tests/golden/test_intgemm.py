"""Exact integer GEMM through float BLAS (w8a8/intgemm.py), against an int64 reference.

The reference is ``np.matmul`` on int64 arrays: slow (no BLAS) but exact, so shapes stay small.
Every case that needs chunking (K * max|a| * max|b| > 2^24) is here:
constant extremes, K = 1025 / 1100 / 5000, mixed dtypes, batch broadcasting and the wide
(int16 / int32) operands whose single products are not float32 numbers.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from w8a8 import int_matmul
from w8a8.intgemm import add_int32, int_matmul_args


def ref(a, b):
    return np.matmul(a.astype(np.int64), b.astype(np.int64))


def check(a, b):
    got = int_matmul(a, b)
    want = ref(a, b)
    assert got.dtype == np.int32
    assert got.shape == want.shape
    assert np.array_equal(got, want)
    return got


@pytest.mark.parametrize("k", [1, 7, 17, 1024, 1025, 1041, 1100, 5000])
@pytest.mark.parametrize("va, vb", [(127, 127), (-128, -128), (-128, 127)])
def test_constant_extremes(k, va, vb):
    # All-equal rows: every output is exactly k * va * vb. For 127 * 127 the float32 partial sums
    # pass 2^24 at k = 1041 (1041 * 16129 = 16790289 > 16777216) and, being odd multiples, cannot
    # all be held: a plain float32 GEMM is off by 1 there and by 60 at k = 1100. The
    # golden splits K into chunks of 2^24 // (max|a| * max|b|): 1040 for 127 * 127, 1032 for
    # -128 * 127, 1024 for -128 * -128.
    a = np.full((3, k), va, np.int8)
    b = np.full((k, 2), vb, np.int8)
    got = check(a, b)
    assert np.all(got == k * va * vb)


def test_int32_overflow_raises_at_the_boundary():
    # (-128)^2 * 131071 = 2147467264 fits int32; one more term gives 2^31, which does not.
    k = 131072
    a = np.full((1, k), -128, np.int8)
    b = np.full((k, 1), -128, np.int8)
    assert int_matmul(a[:, 1:], b[1:]).tolist() == [[2147467264]]
    with pytest.raises(OverflowError, match=r"output index \(0, 0\).*2147483648"):
        int_matmul(a, b)
    # negative side: -128 * 127 = -16256; 132104 terms = -2147482624 >= -2^31 fits, 132105 terms
    # = -2147498880 does not
    k = 132105
    a = np.full((1, k), -128, np.int8)
    b = np.full((k, 1), 127, np.int8)
    assert int_matmul(a[:, 1:], b[1:]).tolist() == [[-2147482624]]
    with pytest.raises(OverflowError, match="-2147498880"):
        int_matmul(a, b)


def test_mixed_and_wide_dtypes():
    rng = np.random.default_rng(1)
    # uint8 x int8 (255 * 128: chunk 514), int8 x int16 (chunk 4), int16 x int16 with single
    # products up to 2^27 (not float32 numbers: float64 chunks), int32 data beyond 2^24
    # (float64 chunks), and int32 products beyond 2^53 (Python integers).
    cases = [
        (rng.integers(0, 256, (5, 2000)).astype(np.uint8), rng.integers(-128, 128, (2000, 3)).astype(np.int8)),
        (rng.integers(-128, 128, (4, 300)).astype(np.int8), rng.integers(-2**15, 2**15, (300, 3)).astype(np.int16)),
        (rng.integers(-2**15, 2**15, (4, 20)).astype(np.int16), rng.integers(-2**12, 2**12, (20, 3)).astype(np.int16)),
        (rng.integers(-2**26, 2**26, (2, 9)).astype(np.int32), rng.integers(-8, 8, (9, 2)).astype(np.int32)),
        (np.array([[2**30, -2**30, 7]], np.int32), np.array([[2**30], [2**30], [3]], np.int32)),
    ]
    for a, b in cases:
        check(a, b)
    # the case that used to be wrong: 32767^2 = 1073676289 is not a float32 (spacing 64 at 2^30)
    a = np.array([[32767]], np.int16)
    assert int_matmul(a, a).tolist() == [[1073676289]]
    assert int_matmul(np.array([[20000001]], np.int32), np.array([[3]], np.int32)).tolist() == [[60000003]]


def test_batch_broadcasting():
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (2, 1, 3, 1100)).astype(np.int8)
    b = rng.integers(-128, 128, (4, 1100, 5)).astype(np.int8)
    assert check(a, b).shape == (2, 4, 3, 5)
    check(a[0, 0], b)          # 2-D x 3-D
    check(a, b[0])             # 4-D x 2-D


def test_empty_and_zero():
    assert int_matmul(np.zeros((3, 0), np.int8), np.zeros((0, 4), np.int8)).tolist() == [[0] * 4] * 3
    assert int_matmul(np.zeros((0, 5), np.int8), np.ones((5, 4), np.int8)).shape == (0, 4)
    assert int_matmul(np.zeros((2, 5), np.int8), np.full((5, 4), 127, np.int8)).tolist() == [[0] * 4] * 2


def test_non_contiguous_views_equal_the_contiguous_copy():
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (6, 2100)).astype(np.int8)    # checkpoint [N, K]
    x = rng.integers(-128, 128, (10, 4200)).astype(np.int8)
    xs = x[::2, ::2]                                          # strided slice [5, 2100]
    got = int_matmul(xs, w.T)                                 # transposed view [K, N]
    assert np.array_equal(got, int_matmul(np.ascontiguousarray(xs), np.ascontiguousarray(w.T)))
    assert np.array_equal(got, ref(xs, w.T))


def test_errors_name_the_argument():
    a = np.zeros((2, 3), np.int8)
    with pytest.raises(TypeError, match="'a'.*int8"):
        int_matmul(a.astype(np.float32), a.T)
    with pytest.raises(TypeError, match="'b'"):
        int_matmul(a, a.T.astype(np.int64))
    with pytest.raises(TypeError, match="'a'.*numpy.ndarray"):
        int_matmul([[1, 2, 3]], a.T)
    with pytest.raises(ValueError, match="'a'.*at least 2-D"):
        int_matmul(np.zeros(3, np.int8), a.T)
    with pytest.raises(ValueError, match=r"'b'.*K=3"):
        int_matmul(a, np.zeros((4, 2), np.int8))
    with pytest.raises(ValueError, match="^myop: "):
        int_matmul(a, np.zeros((4, 2), np.int8), op="myop")


def test_args_give_the_result_shape():
    # int_matmul_args: the checks and the broadcast result shape; unbroadcastable batches raise NumPy's
    # ValueError of np.broadcast_shapes (as int_matmul does)
    a = int_matmul_args(np.zeros((2, 1, 5, 3), np.int8), np.zeros((4, 3, 7), np.int16))
    assert (a.k, a.out_shape) == (3, (2, 4, 5, 7))
    with pytest.raises(ValueError, match="broadcast"):
        int_matmul_args(np.zeros((2, 5, 3), np.int8), np.zeros((4, 3, 7), np.int8))
    with pytest.raises(ValueError, match=r"^grouped: argument 'b'"):
        int_matmul_args(np.zeros((5, 3), np.int8), np.zeros((4, 7), np.int8), op="grouped")


def test_add_int32():
    acc = np.array([[2**31 - 2, -5]], np.int32)
    assert add_int32("t", acc, np.array([1, 5], np.int32)).tolist() == [[2**31 - 1, 0]]
    with pytest.raises(OverflowError, match="^t: "):
        add_int32("t", acc, np.array([2, 0], np.int32))


K_VALUES = st.sampled_from([1, 7, 17, 64, 1025, 1100, 5000])


@st.composite
def operands(draw):
    k = draw(K_VALUES)
    m = draw(st.sampled_from([1, 2, 7]))
    n = draw(st.sampled_from([1, 3, 17]))
    batch_a = draw(st.sampled_from([(), (2,), (1,), (2, 1)]))
    batch_b = draw(st.sampled_from([(), (2,), (1, 2) if len(batch_a) == 2 else (1,)]))
    # values: constant extremes (worst case for chunking), the full int8 range, or a mix
    fill = draw(st.sampled_from(["random", "constant"]))
    if fill == "constant":
        va, vb = draw(st.sampled_from([-128, 127])), draw(st.sampled_from([-128, 127]))
        return (np.full(batch_a + (m, k), va, np.int8), np.full(batch_b + (k, n), vb, np.int8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, batch_a + (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, batch_b + (k, n)).astype(np.int8)
    if draw(st.booleans()):  # push many entries to the extremes
        a = np.where(rng.random(a.shape) < 0.5, np.int8(-128), a)
        b = np.where(rng.random(b.shape) < 0.5, np.int8(127), b)
    return a, b


@given(operands())
def test_equals_int64_reference(ab):
    check(*ab)


@given(hnp.arrays(np.int8, st.tuples(st.integers(1, 5), st.integers(1, 40))),
       hnp.arrays(np.int8, st.tuples(st.integers(1, 40), st.integers(1, 4))))
def test_small_arbitrary_arrays(a, b):
    k = min(a.shape[1], b.shape[0])
    check(a[:, :k], b[:k])
