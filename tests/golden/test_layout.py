"""FRACTAL_NZ layout and SGLang's alignment rule (w8a8/layout.py) — torch_npu
``FormatHelper.cpp::InferShapeNDToNZ``, SGLang ``hardware_backend/npu/utils.py::_is_nz_aligned``.

Storage of ND ``[..., R, C]``: ``[..., ceil(C/C0), ceil(R/16), 16, C0]`` with C0 = 32 bytes /
min(itemsize, 2), and element (r, c) at ``[..., c // C0, r // 16, r % 16, c % C0]``. The tests
check that address formula element by element (fancy indexing, no loops), the zero padding, and
the inverse.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

from w8a8 import bfloat16, format_cast_nz, is_nz_aligned, nz_storage_shape, nz_to_nd
from w8a8.layout import format_cast_nz_args, nz_c0, nz_fallback_reason, nz_supported_by_matmul, nz_to_nd_args


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.integers(1, 100, shape)          # nonzero: padding zeros cannot hide a misplaced element
    return v.astype(dtype)


def _check_addresses(w, nz, c0):
    r, c = w.shape[-2:]
    rr, cc = np.meshgrid(np.arange(r), np.arange(c), indexing="ij")
    picked = nz[..., cc // c0, rr // 16, rr % 16, cc % c0]
    assert np.array_equal(picked, w)
    # everything else is zero padding
    mask = np.zeros(nz.shape[-4:], bool)
    mask[cc // c0, rr // 16, rr % 16, cc % c0] = True
    assert not np.any(nz[..., ~mask].astype(np.float64))
    assert mask.sum() == r * c


@pytest.mark.parametrize("shape, dtype, storage", [
    ((17, 33), np.int8, (2, 2, 16, 32)),            # int8: C0 = 32; ceil(33/32) = 2, ceil(17/16) = 2
    ((32, 64), np.int8, (2, 2, 16, 32)),            # aligned: no padding
    ((7, 5), bfloat16, (1, 1, 16, 16)),             # bf16: C0 = 16
    ((40, 70), np.float16, (5, 3, 16, 16)),
    ((3, 20), np.float32, (2, 1, 16, 16)),          # fp32 / int32: C0 = 16 ("float32 will cast to float16")
    ((16, 17), np.int32, (2, 1, 16, 16)),
    ((33, 65), np.uint8, (3, 3, 16, 32)),
    ((3, 40, 70), np.int8, (3, 3, 3, 16, 32)),      # [E, K, N]: a leading E
    ((2, 2, 5, 9), bfloat16, (2, 2, 1, 1, 16, 16)),
    ((1, 1), np.int8, (1, 1, 16, 32)),
])
def test_storage_shape_addresses_padding_and_round_trip(shape, dtype, storage):
    w = _data(shape, dtype)
    nz = format_cast_nz(w)
    assert nz.shape == storage == nz_storage_shape(shape, dtype)
    assert nz.dtype == w.dtype and nz.flags.c_contiguous
    _check_addresses(w, nz, nz_c0(dtype))
    back = nz_to_nd(nz, shape)
    assert back.dtype == w.dtype and np.array_equal(back, w) and back.flags.c_contiguous


def test_aligned_int8_fractals_are_row_major_16x32_blocks():
    # An aligned int8 [K=32, N=64]: fractal (j, i) is the 16 x 32 block w[16i:16i+16, 32j:32j+32],
    # 512 bytes, N-block-major; its bytes are the block's rows one after another.
    w = np.arange(32 * 64, dtype=np.int64).reshape(32, 64).astype(np.int8)
    nz = format_cast_nz(w)
    for j in range(2):
        for i in range(2):
            assert np.array_equal(nz[j, i], w[16 * i:16 * i + 16, 32 * j:32 * j + 32])
    flat = nz.reshape(-1)
    assert np.array_equal(flat[:32], w[0, :32])          # first 32 bytes: row 0, columns 0..31
    assert np.array_equal(flat[32:64], w[1, :32])        # then row 1
    assert np.array_equal(flat[512:544], w[16, :32])     # second fractal: rows 16.., same N block
    assert np.array_equal(flat[1024:1056], w[0, 32:64])  # third: the next N block


def test_c0():
    assert [nz_c0(d) for d in (np.int8, np.uint8, np.float16, bfloat16, np.float32, np.int32, np.int64)] == \
        [32, 32, 16, 16, 16, 16, 16]


def test_non_contiguous_input():
    w = _data((40, 70), np.int8)
    for view in (w.T, w[::2, ::3], w[:, ::-1]):
        assert np.array_equal(format_cast_nz(view), format_cast_nz(np.ascontiguousarray(view)))
        assert np.array_equal(nz_to_nd(format_cast_nz(view), view.shape), view)
    nz = format_cast_nz(w)
    nz_view = np.ascontiguousarray(nz[:, ::-1])[:, ::-1]      # a non-contiguous copy of the same storage
    assert np.array_equal(nz_to_nd(nz_view, w.shape), w)


def test_errors():
    with pytest.raises(ValueError, match="'w'"):
        format_cast_nz(np.zeros(5, np.int8))
    with pytest.raises(TypeError, match="'w'"):
        format_cast_nz([[1, 2]])
    nz = format_cast_nz(np.ones((17, 33), np.int8))
    with pytest.raises(ValueError, match=r"'w_nz'.*\(2, 2, 16, 32\)"):
        nz_to_nd(nz, (17, 65))                     # would need 3 column blocks
    with pytest.raises(ValueError, match="'w_nz'"):
        nz_to_nd(nz, (33, 33))
    with pytest.raises(ValueError, match="'w_nz'"):
        nz_to_nd(nz.astype(np.float16), (17, 33))  # fp16 has C0 = 16: storage (3, 2, 16, 16)
    with pytest.raises(ValueError, match="'w_nz'"):
        nz_to_nd(nz[0], (17, 33))                  # 3-D
    with pytest.raises(ValueError, match="'w_nz'"):
        nz_to_nd(nz, (2, 17, 33))                  # a batch dim it does not have
    with pytest.raises(ValueError, match="'shape'"):
        nz_storage_shape((5,), np.int8)


def test_args():
    # int8 [17, 33]: C0 = 32 -> storage [ceil(33/32), ceil(17/16), 16, 32] = [2, 2, 16, 32]
    a = format_cast_nz_args(np.ones((3, 17, 33), np.int8))
    assert (a.c0, a.storage_shape) == (32, (3, 2, 2, 16, 32))
    b = nz_to_nd_args(format_cast_nz(a.w), np.array([3, 17, 33]))
    assert b.shape == (3, 17, 33) and all(type(d) is int for d in b.shape)
    with pytest.raises(ValueError, match="'w_nz'"):
        nz_to_nd_args(b.w_nz, (3, 17, 65))


@pytest.mark.parametrize("shape, dtype, aligned", [
    ((16, 16), bfloat16, True), ((16, 8), bfloat16, False), ((8, 16), np.float16, False),
    ((32, 48), np.float16, True),
    ((16, 32), np.int8, True), ((16, 16), np.int8, False), ((8, 32), np.int8, False), ((4096, 2048), np.int8, True),
    ((32, 48), np.int8, False),
    ((16, 64), np.uint8, True), ((16, 32), np.uint8, False),
    ((16, 64), np.int32, True), ((16, 32), np.int32, False), ((48, 128), np.int32, True),
    ((3, 5), np.float32, True),          # any other dtype passes
    ((3, 5), np.int64, True),
    ((16,), bfloat16, False),            # fewer than 2 dims: not aligned
    ((), np.int8, False),
    ((8, 16, 32), np.int8, True),        # [E, K, N]: only the last two dims count
    ((8, 16, 48), np.int8, False),
])
def test_is_nz_aligned_truth_table(shape, dtype, aligned):
    assert is_nz_aligned(shape, dtype) is aligned
    assert is_nz_aligned(list(shape), np.dtype(dtype).name if dtype is not bfloat16 else "bfloat16") is aligned


def test_is_nz_aligned_bad_dtype():
    with pytest.raises(TypeError, match="'dtype'"):
        is_nz_aligned((16, 32), "nonsense")


def test_fallback_reasons():
    assert nz_fallback_reason((16, 32), np.int8) is None
    assert "k % 16 and n % 32" in nz_fallback_reason((16, 48), np.int8)
    assert "k % 16 and n % 64" in nz_fallback_reason((16, 32), np.int32)
    assert "fewer than 2 dims" in nz_fallback_reason((16,), np.int8)
    # aligned but a last dim of 1 cannot feed the quantized matmuls in NZ (float32 passes the rule)
    assert not nz_supported_by_matmul((16, 1)) and nz_supported_by_matmul((16, 2))
    assert "last dim of 1" in nz_fallback_reason((16, 1), np.float32)


@given(st.sampled_from([np.int8, np.uint8, np.float16, bfloat16, np.float32, np.int32]),
       st.sampled_from([(), (1,), (3,), (2, 2)]), st.integers(1, 70), st.integers(1, 70), st.integers(0, 2**31))
def test_round_trip_property(dtype, batch, r, c, seed):
    shape = batch + (r, c)
    w = _data(shape, dtype, seed)
    nz = format_cast_nz(w)
    assert nz.shape == nz_storage_shape(shape, dtype)
    _check_addresses(w, nz, nz_c0(dtype))
    assert np.array_equal(nz_to_nd(nz, shape), w)
    # alignment in the SGLang sense means exactly "no padding" for int8 / fp16 / bf16
    if np.dtype(dtype) in (np.dtype(np.int8), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        assert is_nz_aligned(shape, dtype) == (nz.size == w.size)
