"""NVFP4 semantic cases, both tensor-scale conventions, the 128x4 swizzle (w8a8.lowbit.nvfp4)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from w8a8.lowbit import (nvfp4_dequantize, nvfp4_global_scale, nvfp4_matmul, nvfp4_per_tensor_scale, nvfp4_quantize,
                         swizzle_block_scales, unpack_fp4, unswizzle_block_scales)

F32 = np.float32
ONE = F32(1)


def block(*values):
    b = np.zeros(16, F32)
    b[:len(values)] = values
    return b.reshape(1, 16)


def test_block_scale_and_codes_with_unit_tensor_scale():
    x = block(12, -3, 1.5, 0.5, 5, 10)
    data, s = nvfp4_quantize(x, per_tensor_scale=ONE)
    # amax 12: s_b = 12 / 6 / 1 = 2.0 = e4m3 0_1000_000 (0x40). x / 2 = 6, -1.5, 0.75 (tie -> 1.0),
    # 0.25 (tie -> 0), 2.5 (tie -> 2), 5 (tie -> 4): codes 7, B, 2, 0, 4, 6
    assert s.dtype == ml_dtypes.float8_e4m3fn and s.view(np.uint8)[0, 0] == 0x40
    np.testing.assert_array_equal(unpack_fp4(data)[0, :6], [7, 0xB, 2, 0, 4, 6])
    np.testing.assert_array_equal(data[0, :3], [0xB7, 0x02, 0x64])  # low nibble = even element
    np.testing.assert_array_equal(nvfp4_dequantize(data, s, per_tensor_scale=ONE)[0, :6], [12, -3, 2, 0, 4, 8])


def test_block_scale_clamps_and_rounding():
    x = np.concatenate([block(0), block(5376), block(6.375)], axis=1)
    data, s = nvfp4_quantize(x, per_tensor_scale=ONE)
    # zero block: 0 clamps up to the e4m3 tiny 2^-6 = 0_0001_000 (0x08); codes 0
    # 5376 / 6 = 896 clamps to 448 (0x7E); 5376 / 448 = 12 clips to 6 (code 7)
    # 6.375 / 6 = 1.0625 ties 1.0 (0x38) | 1.125 (0x39): even 0x38; 6.375 / 1 clips to 6 (code 7)
    np.testing.assert_array_equal(s.view(np.uint8), [[0x08, 0x7E, 0x38]])
    c = unpack_fp4(data)[0]
    assert not c[:16].any() and c[16] == 7 and c[32] == 7


def test_two_conventions_same_block_and_their_difference_on_zero_blocks():
    x = np.concatenate([block(12, -3, 1.5, 0.5, 5, 10), block(0)], axis=1)
    d1, s1 = nvfp4_quantize(x, per_tensor_scale=ONE)
    d2, s2 = nvfp4_quantize(x, global_scale=ONE)
    # vLLM order: s_b = 1 * (12 * fp32(1/6)) = 2.00000006 -> fp32 2.0 -> 0x40, r = 1 / (2 * 1) = 0.5:
    # the same codes. A zero block differs: vLLM has no lower clamp, its s_b is 0 (0x00), not 2^-6.
    np.testing.assert_array_equal(d1, d2)
    np.testing.assert_array_equal(s1.view(np.uint8), [[0x40, 0x08]])
    np.testing.assert_array_equal(s2.view(np.uint8), [[0x40, 0x00]])


def test_plus_minus_max_and_a_subnormal_block_scale():
    x = np.concatenate([block(2688, -2688, 1344), block(6 * 2.0 ** -8)], axis=1)
    s_t = nvfp4_per_tensor_scale(F32(2688))  # S = 2688 / 2688 = 1
    d, s = nvfp4_quantize(x, per_tensor_scale=s_t)
    # block 0: 2688 / 6 / 1 = 448 (0x7E); codes 2688 / 448 = 6 (7), -6 (F), 3 (5);
    # block 1: 6 * 2^-8 / 6 = 2^-8 is below the e4m3 normal range: torchao clamps it to 2^-6 (0x08)
    # and 2^-8 * 6 / 2^-6 = 1.5 (code 3)
    np.testing.assert_array_equal(s.view(np.uint8), [[0x7E, 0x08]])
    np.testing.assert_array_equal(unpack_fp4(d)[0, [0, 1, 2, 16]], [7, 0xF, 5, 3])
    # vLLM's order has no lower clamp: s_b = 2^-8 = 2 * 2^-9, the e4m3 subnormal 0x02, and the
    # element is 6 * 2^-8 / 2^-8 = 6 (code 7)
    d, s = nvfp4_quantize(x, global_scale=ONE)
    np.testing.assert_array_equal(s.view(np.uint8), [[0x7E, 0x02]])
    assert unpack_fp4(d)[0, 16] == 7


def test_tensor_scale_helpers():
    amax = np.array([2688.0, 0.0, 1.0], F32)
    # S = amax / (448 * 6) = amax / 2688; gs = 2688 / amax; amax 0 -> 1 (golden's guard)
    np.testing.assert_array_equal(nvfp4_per_tensor_scale(amax), [1, 1, F32(1) / F32(2688)])
    np.testing.assert_array_equal(nvfp4_global_scale(amax), [1, 1, 2688])
    # amax 1e-45 (the smallest fp32 subnormal): S = 1e-45 / 2688 underflows to 0 and
    # gs = 2688 / 1e-45 overflows: both fall back to 1, like amax 0
    assert nvfp4_per_tensor_scale(F32(1e-45)) == 1 and nvfp4_global_scale(F32(1e-45)) == 1
    assert nvfp4_per_tensor_scale(F32(1e-38)) == F32(1e-38) / F32(2688)  # a subnormal S is kept


def test_global_scale_convention_uses_the_full_e4m3_range():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(F32) * 1000
    amax = np.abs(x).max()
    _, s = nvfp4_quantize(x, per_tensor_scale=nvfp4_per_tensor_scale(amax))
    # the block holding the tensor's amax gets (amax / 6) / (amax / 2688) = 448: the top e4m3 code
    assert s.view(np.uint8).max() == 0x7E
    _, s2 = nvfp4_quantize(x, global_scale=nvfp4_global_scale(amax))
    assert s2.view(np.uint8).max() == 0x7E


# fp32 subnormal tensor scales (|x| below ~1e-38) lose precision in S * s_b: outside the bound
_values = st.floats(-1e6, 1e6, width=32).filter(lambda v: v == 0 or abs(v) >= 1e-25)


@given(st.data())
def test_round_trip_within_the_format_bound(data):
    x = data.draw(hnp.arrays(F32, (data.draw(st.integers(1, 3)), 16 * data.draw(st.integers(1, 4))),
                             elements=_values))
    amax = np.abs(x).max()
    use_gs = data.draw(st.booleans())
    kw = {"global_scale": nvfp4_global_scale(amax)} if use_gs else {"per_tensor_scale": nvfp4_per_tensor_scale(amax)}
    d, s = nvfp4_quantize(x, **kw)
    back = nvfp4_dequantize(d, s, **kw).astype(np.float64)
    tensor = 1 / float(kw["global_scale"]) if use_gs else float(kw["per_tensor_scale"])
    sb = np.repeat(s.astype(np.float64), 16, axis=-1)
    # half of the widest E2M1 step (2, between 4 and 6) is 1 unit of S * s_b; the e4m3 rounding of
    # s_b (<= 2^-4 relative) can push a block's top value to 6.4 units, clipped to 6 (0.4 < 1)
    live = sb > 0
    assert (np.abs(back - x)[live] <= (sb * tensor)[live] * (1 + 1e-6)).all()
    # vLLM's s_b has no lower clamp: a block whose s_b = gs * amax_b / 6 is below half the smallest
    # e4m3 subnormal (2^-10) gets s_b = 0 and decodes to 0 — only blocks with amax_b < 6 * 2^-10 * S
    assert not back[~live].any() and (np.abs(x[~live]) < 6 * 2.0 ** -10 * tensor * (1 + 1e-6)).all()
    assert use_gs or live.all()


def test_matmul_alpha_and_dequantized_product():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 32)).astype(F32)
    b = rng.standard_normal((5, 32)).astype(F32)
    sa, sb = nvfp4_per_tensor_scale(np.abs(a).max()), nvfp4_per_tensor_scale(np.abs(b).max())
    ad, ab = nvfp4_quantize(a, per_tensor_scale=sa)
    bd, bb = nvfp4_quantize(b, per_tensor_scale=sb)
    y = nvfp4_matmul(ad, ab, bd, bb, sa * sb, output_dtype="float32")
    # block-dequantized operands without the tensor scale, exact float64 product, one fp32 rounding,
    # then alpha in fp32
    qa = nvfp4_dequantize(ad, ab, per_tensor_scale=ONE).astype(np.float64)
    qb = nvfp4_dequantize(bd, bb, per_tensor_scale=ONE).astype(np.float64)
    np.testing.assert_array_equal(y, (qa @ qb.T).astype(F32) * (sa * sb))
    assert nvfp4_matmul(ad, ab, bd, bb, sa * sb).dtype == ml_dtypes.bfloat16


def test_swizzle_places_each_scale_at_the_cublas_offset():
    m, s = 130, 6  # pads to 256 x 8: two 128-row tiles, two 4-column tiles
    ids = (np.arange(m)[:, None] * 1000 + np.arange(s)[None, :] + 1).astype(np.int32)
    sw = swizzle_block_scales(ids)
    assert sw.shape == (256, 8)
    flat = sw.reshape(-1)
    sp = 8
    for r in range(m):
        for c in range(s):
            # tiles in row-major order over (r // 128, c // 4), 512 entries each; inside a tile
            # (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4 (cuBLAS block-scaling layout)
            off = ((r // 128) * (sp // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
            assert flat[off] == ids[r, c]
    assert (flat != 0).sum() == m * s  # the padding is zero
    np.testing.assert_array_equal(unswizzle_block_scales(sw, m, s), ids)


def test_swizzle_keeps_e4m3_and_leading_dims():
    x = np.arange(2 * 3 * 4).reshape(2, 3, 4).astype(F32).astype(ml_dtypes.float8_e4m3fn)
    sw = swizzle_block_scales(x)
    assert sw.shape == (2, 128, 4) and sw.dtype == x.dtype
    np.testing.assert_array_equal(unswizzle_block_scales(sw, 3, 4).view(np.uint8), x.view(np.uint8))


def test_bad_inputs_name_the_argument():
    x = np.ones((1, 16), F32)
    with pytest.raises(ValueError, match="'per_tensor_scale'.*exactly one.*neither"):
        nvfp4_quantize(x)
    with pytest.raises(ValueError, match="'per_tensor_scale'.*both"):
        nvfp4_quantize(x, per_tensor_scale=ONE, global_scale=ONE)
    with pytest.raises(ValueError, match="'global_scale'.*positive"):
        nvfp4_quantize(x, global_scale=F32(0))
    with pytest.raises(ValueError, match="'x'.*multiple of 16"):
        nvfp4_quantize(np.ones((1, 24), F32), per_tensor_scale=ONE)
    with pytest.raises(ValueError, match="'x'.*Inf"):
        nvfp4_quantize(np.full((1, 16), np.inf, F32), per_tensor_scale=ONE)
    with pytest.raises(ValueError, match="'amax'"):
        nvfp4_per_tensor_scale(-1.0)
    d, s = nvfp4_quantize(x, per_tensor_scale=ONE)
    with pytest.raises(TypeError, match="'block_scale'"):
        nvfp4_dequantize(d, s.view(np.uint8), per_tensor_scale=ONE)
    with pytest.raises(ValueError, match="'alpha'"):
        nvfp4_matmul(d, s, d, s, np.array([1, 2], F32))
    with pytest.raises(ValueError, match="'swizzled'"):
        unswizzle_block_scales(np.zeros((128, 4), np.uint8), 129, 4)
