"""``dynamic_quant`` / ``dynamic_quant_asymmetric`` (w8a8/dynamic_quant.py) — ops-nn ``quant/dynamic_quant/``.

Vendor facts first (the device-printed examples of the torch_npu doc), then the kernel order
(``x * (127/amax)``, not ``x / (amax/127)``), edge rows, int4, MoE smooth selection, bad input and
properties.

Independent reference: the kernel formula evaluated in float64 with one rounding to float32 after
every fp32 operation (``rn32``). For +, -, *, / on float32 operands that is exactly the fp32 result:
a product of two fp32 values is exact in float64, and for a quotient or sum the double rounding
float64 -> float32 is innocuous because 53 >= 2 * 24 + 2.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from w8a8 import ASCEND, Numerics, bfloat16, dynamic_quant, dynamic_quant_asymmetric, unpack_int4, variants
from w8a8.dynamic_quant import dynamic_quant_args, dynamic_quant_asymmetric_args, smoothed_rows

FIXED = Numerics(variants="fixed")
"""The Ascend record without shape-dependent kernels: each formula of the record, whatever the shape."""


def selected_scale(x, **kwargs):
    """The scale formula of the kernel the A3 tiling picks (pinned by tests/golden/test_variants.py)."""
    return variants.select("dynamic_quant", x, **kwargs).decides["scale_out"]


def rn32(v):
    return np.asarray(v, np.float64).astype(np.float32)


def ref_rows(xf, qmax, scale_out="reciprocal", codes="mul_inv"):
    """Symmetric per-row quantization of float32 rows, ops-nn dynamic_quant.h, in float64 + rn32 steps."""
    x = np.asarray(xf, np.float32).astype(np.float64)
    m = np.abs(x).max(axis=-1, keepdims=True)
    zero = m == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = rn32(qmax / m).astype(np.float64)
        s = {"reciprocal": lambda: rn32(1.0 / inv),
             "amax_mul_rcp": lambda: rn32(m * np.float64(rn32(1.0 / qmax))),
             "amax_div": lambda: rn32(m / qmax)}[scale_out]().astype(np.float64)
        t = rn32(x * inv) if codes == "mul_inv" else rn32(x / s)
    q = np.where(zero, 0.0, np.rint(np.where(zero, 0.0, t)))
    return q.astype(np.int8), np.where(zero, 0.0, s)[..., 0].astype(np.float32)


# ---------------------------------------------------------------- vendor facts: the doc examples

# op-plugin docs/context/torch_npu-npu_dynamic_quant.md, printed on the device (fp16 inputs).
EX1_X = [[0.7261, 0.3726, 0.9126], [0.9023, 0.9990, 0.1279], [0.8628, 0.6240, 0.9028]]
EX1_Y = [[101, 52, 127], [115, 127, 16], [121, 88, 127]]
EX1_SCALE = [0.0072, 0.0079, 0.0071]
EX2_X = [[0.6680, 0.9492, 0.0845], [0.1924, 0.5278, 0.1484], [0.6631, 0.9497, 0.0957]]
EX2_SMOOTH = [0.8042, 0.0884, 0.8901]
EX2_Y = [[127, 20, 18], [127, 38, 108], [127, 20, 20]]
EX2_SCALE = [0.0042, 0.0012, 0.0042]

_ALL_FP16 = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16)


def fp16_candidates(printed):
    """Every finite fp16 that torch prints as ``printed`` with 4 decimals."""
    return _ALL_FP16[np.round(_ALL_FP16.astype(np.float64), 4) == printed]


def _variants(values):
    """All fp16 arrays consistent with a printed array (most entries have exactly one candidate)."""
    flat = np.asarray(values, np.float64).ravel()
    cands = [fp16_candidates(v) for v in flat]
    assert all(len(c) >= 1 for c in cands)
    grids = np.meshgrid(*cands, indexing="ij")
    combos = np.stack([g.ravel() for g in grids], axis=-1).astype(np.float16)
    return [c.reshape(np.shape(values)) for c in combos]


def test_printed_inputs_pin_the_fp16_values():
    # The printed 4-decimal inputs are unique fp16 values except 0.0845 (0.0845 / 0.08453) and
    # 0.0884 (0.0884 / 0.08844) in example 2: fp16 spacing at 0.08 is 2^-14 = 6.1e-5 < 1e-4.
    counts = {v: len(fp16_candidates(v)) for v in np.ravel(EX1_X + EX2_X + [EX2_SMOOTH])}
    assert {v for v, c in counts.items() if c != 1} == {0.0845, 0.0884}
    assert all(c in (1, 2) for c in counts.values())


# A [3, 3] fp16 input runs the double-buffer kernel (tiling key 3: H = 3 < 128 is outside the
# multi-row range, and 13 * align16(3) = 208 B < the UB budget): its scale is amax * fp32(1/127)
# (ops-nn quant/dynamic_quant/op_kernel/dynamic_quant_db.h:319 @ e5c3fa93), not 1 / inv. The device
# print (4 decimals) agrees with both.
@pytest.mark.parametrize("x", _variants(EX1_X))
def test_doc_example_1(x):
    y, scale = dynamic_quant(x)
    assert y.dtype == np.int8 and y.tolist() == EX1_Y
    assert scale.dtype == np.float32 and scale.shape == (3,)
    assert np.round(scale.astype(np.float64), 4).tolist() == EX1_SCALE  # as torch prints it
    assert variants.select("dynamic_quant", x).key == 3
    ry, rs = ref_rows(x.astype(np.float32), 127, "amax_mul_rcp")
    assert np.array_equal(y, ry) and np.array_equal(scale, rs)


def test_doc_example_2_with_smooth_scales():
    # both fp16 readings of 0.0845 and 0.0884 reproduce the device print
    for x in _variants(EX2_X):
        for smooth in _variants(EX2_SMOOTH):
            y, scale = dynamic_quant(x, smooth_scales=smooth)
            assert y.tolist() == EX2_Y
            assert np.round(scale.astype(np.float64), 4).tolist() == EX2_SCALE
            # smoothing is an fp32 multiply before the row max: x.float() * smooth.float(); the
            # double-buffer kernel (key 3) writes amax * fp32(1/127)
            ry, rs = ref_rows(rn32(x.astype(np.float64) * smooth.astype(np.float64)), 127, "amax_mul_rcp")
            assert np.array_equal(y, ry) and np.array_equal(scale, rs)


# ---------------------------------------------------------------- the kernel order

# amax = 0.9990234375 (fp16 0x3BFE) and x = amax / 2 = 0.49951171875 (0x37FE), exact halves.
# mul_inv (Ascend): inv = RN32(127 / amax) = 127.1241455078125; x * inv = 63.5 + 7 * 2^-24
# exactly, whose fp32 rounding (spacing 2^-18 at 63) is 63.5 -> RINT -> 64 (even).
# div_scale + amax_div (the op-plugin golden): s = RN32(amax / 127) = 0.007866326719522476;
# x / s = 63.4999964... -> 63. The returned scales differ in the last bit too:
# 1 / inv = 0.007866325788199902 (reciprocal) vs 0.007866326719522476 (amax / 127). This [1, 2] row
# runs the double-buffer kernel (key 3), whose scale amax * fp32(1/127) = 0.9990234375 *
# 0.007874015718698502 rounds to the same 0.007866325788199902 here (0x3C00DE83 for both).
ORDER_ROW = np.array([[0.9990234375, 0.49951171875]], np.float16)


def test_kernel_order_mul_inv_differs_from_div_scale():
    y, s = dynamic_quant(ORDER_ROW)
    assert y.tolist() == [[127, 64]]
    assert s.tolist() == [np.float32(0.007866325788199902)]
    alt = Numerics(quant_codes="div_scale", scale_out="amax_div")
    y2, s2 = dynamic_quant(ORDER_ROW, numerics=alt)
    assert y2.tolist() == [[127, 63]]
    assert s2.tolist() == [np.float32(0.007866326719522476)]
    assert s2.view(np.uint32)[0] - s.view(np.uint32)[0] == 1          # one fp32 step apart
    # the same answers from the float64 reference of each formula
    xf = ORDER_ROW.astype(np.float32)
    assert np.array_equal(ref_rows(xf, 127)[0], y)
    assert np.array_equal(ref_rows(xf, 127, "amax_div", "div_scale")[0], y2)


@pytest.mark.parametrize("scale_out", ["reciprocal", "amax_mul_rcp", "amax_div"])
@pytest.mark.parametrize("codes", ["mul_inv", "div_scale"])
def test_every_scale_and_code_formula(scale_out, codes):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((9, 33)) * 3).astype(np.float16)
    n = Numerics(quant_codes=codes, scale_out=scale_out, variants="fixed")
    y, s = dynamic_quant(x, numerics=n)
    ry, rs = ref_rows(x.astype(np.float32), 127, scale_out, codes)
    assert np.array_equal(y, ry) and np.array_equal(s, rs)


def test_half_away_round_mode():
    # amax = 127 makes inv = 127 / 127 = 1 exactly, so every x.5 element is an exact tie:
    # half-even 2.5 -> 2, -2.5 -> -2, 0.5 -> 0; half-away 3, -3, 1; 1.5 -> 2 in both.
    x = np.array([[127.0, 2.5, -2.5, 0.5, 1.5]], np.float16)
    assert dynamic_quant(x)[0].tolist() == [[127, 2, -2, 0, 2]]
    assert dynamic_quant(x, numerics=Numerics(round_mode="half_away"))[0].tolist() == [[127, 3, -3, 1, 2]]


# ---------------------------------------------------------------- edge rows

def test_int8_range_never_reaches_minus_128():
    # |x * (127 / amax)| <= 127 for every element, so -128 cannot appear for finite input:
    # the row minimum -amax maps to exactly -127.
    x = np.array([[-3.0, 1.0, 2.0], [-0.001, 0.0005, 0.0001]], np.float16)
    y, _ = dynamic_quant(x)
    assert y[:, 0].tolist() == [-127, -127]
    assert y.min() == -127


def test_all_zero_row():
    # 127 / 0 = inf, 0 * inf = NaN before the cast: the golden writes 0 (zero_row="zero"), the
    # scale is 1 / inf = 0; the other rows are untouched.
    x = np.array([[0.0, 0.0, -0.0, 0.0], [1.0, -0.5, 0.25, 0.0]], np.float16)
    y, s = dynamic_quant(x)
    assert y.tolist() == [[0, 0, 0, 0], [127, -64, 32, 0]]   # -63.5 -> -64 (even), 31.75 -> 32
    assert s.tolist() == [0.0, np.float32(1 / np.float32(127))]
    y2, s2 = dynamic_quant(x, numerics=Numerics(zero_row="int_min"))
    assert y2.tolist() == [[-128] * 4, [127, -64, 32, 0]]       # -128 although codes clamp to +-127
    assert s2[0] == 0.0
    y4, s4 = dynamic_quant(np.zeros((1, 8), bfloat16), dst_type="int4", numerics=Numerics(zero_row="int_min"))
    assert unpack_int4(y4).tolist() == [[-8] * 8] and y4.view(np.uint32).tolist() == [[0x88888888]]
    assert dynamic_quant(np.zeros((2, 3), np.float16))[1].tolist() == [0.0, 0.0]


def test_subnormal_small_row_saturates_with_scale_zero():
    # bf16 1e-39 is an fp32 subnormal: 127 / 1e-39 overflows to inf, so the row behaves like a
    # zero row for the reciprocal scale (1 / inf = 0) while its nonzero codes are +-inf -> saturate
    # to +-127. This [1, 3] row runs the double-buffer kernel (key 2), whose scale
    # amax * fp32(1/127) is the subnormal m * 0.007874... (IEEE; whether the device flushes it is
    # not confirmed); the basic kernels' 1 / inv gives 0.
    x = np.array([[1e-39, -1e-39, 0.0]], np.float32).astype(bfloat16)
    m = np.float32(x.astype(np.float32)[0, 0])
    y, s = dynamic_quant(x)
    assert y.tolist() == [[127, -127, 0]] and s.tolist() == [float(m * np.float32(1 / np.float32(127)))]
    assert 0 < s[0] < np.finfo(np.float32).tiny
    y2, s2 = dynamic_quant(x, numerics=FIXED)          # 1 / inv
    assert y2.tolist() == [[127, -127, 0]] and s2.tolist() == [0.0]


# ---------------------------------------------------------------- int4

def test_int4_codes_and_packing():
    # amax = 1, inv = 7: x * 7 = 7, -7, 3.5, -3.5, 1.75, -1.75, 0.4998, 0 -> 7, -7, 4, -4, 2, -2, 0, 0
    # (3.5 -> 4 even, 0.4998 -> 0); nibbles 7, 9, 4, C, 2, E, 0, 0 -> word 0x00E2C497.
    x = np.array([[1.0, -1.0, 0.5, -0.5, 0.25, -0.25, 0.0714, 0.0]], np.float16)
    for dst in ("int4", "quint4x2", "torch.quint4x2"):
        y, s = dynamic_quant(x, dst_type=dst)
        assert y.dtype == np.int32 and y.shape == (1, 1)
        assert y.view(np.uint32).tolist() == [[0x00E2C497]]
        assert unpack_int4(y).tolist() == [[7, -7, 4, -4, 2, -2, 0, 0]]
        assert s.tolist() == [rn32(1 / 7.0)]    # 1 / RN32(7 / 1)


def test_int4_matches_reference_on_3d_input():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 24)).astype(bfloat16)
    y, s = dynamic_quant(x, dst_type="int4")
    assert y.shape == (2, 3, 3) and s.shape == (2, 3)
    # H = 24 < 128: the double-buffer kernel (key 2), scale amax * fp32(1/7) (dynamic_quant_base.h:97)
    ry, rs = ref_rows(x.astype(np.float32), 7, "amax_mul_rcp")
    assert np.array_equal(unpack_int4(y), ry) and np.array_equal(s, rs)
    assert unpack_int4(y).min() >= -7


def test_dst_type_int8_spellings():
    x = np.array([[1.0, -0.5]], np.float16)
    for dst in (None, "int8", "qint8", np.int8, "torch.int8"):
        assert dynamic_quant(x, dst_type=dst)[0].tolist() == [[127, -64]]


# ---------------------------------------------------------------- asymmetric

def ref_asym(xf, levels, top):
    x = np.asarray(xf, np.float32).astype(np.float64)
    hi = x.max(axis=-1, keepdims=True)
    lo = x.min(axis=-1, keepdims=True)
    scale = np.maximum(rn32(rn32(hi - lo) / levels), np.float32(1e-12)).astype(np.float64)
    offset = rn32(top - np.float64(rn32(hi / scale))).astype(np.float64)
    t = rn32(np.float64(1) * rn32(x * rn32(1.0 / scale)) + offset)
    return t, scale[..., 0].astype(np.float32), offset[..., 0].astype(np.float32)


def test_asymmetric_named_row():
    # rmax = 3, rmin = -1: scale = RN32(4/255) = 0.015686275; 3/scale = 191.25 -> offset -64.25;
    # codes: -1 -> -63.75 - 64.25 = -128; 0 -> -64.25 -> -64; 0.5 -> 31.875 - 64.25 = -32.375 -> -32;
    # 3 -> 127. The row min/max land on the ends of [-128, 127].
    x = np.array([[-1.0, 0.0, 0.5, 3.0]], np.float16)
    y, s, o = dynamic_quant_asymmetric(x)
    assert y.tolist() == [[-128, -64, -32, 127]]
    t, rs, ro = ref_asym(x.astype(np.float32), 255, 127)
    assert np.array_equal(s, rs) and np.array_equal(o, ro)
    assert np.array_equal(y, np.clip(np.rint(t), -128, 127).astype(np.int8))
    assert s.tolist() == [np.float32(4 / 255)] and abs(o[0] + 64.25) < 1e-4


def test_asymmetric_constant_and_zero_rows():
    # A constant row c: rmax - rmin = 0, scale clamps to fp32(1e-12), offset = 127 - c * 1e12
    # loses the 127 entirely for c = 0.5 (5e11 has an fp32 spacing of 32768): the codes are the
    # result of fp32 cancellation, computed faithfully (and saturating). A zero row: offset 127,
    # every code 127.
    x = np.array([[0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0], [-2.0, -2.0, -2.0, -2.0]], np.float16)
    y, s, o = dynamic_quant_asymmetric(x)
    t, rs, ro = ref_asym(x.astype(np.float32), 255, 127)
    assert np.array_equal(s, rs) and np.array_equal(o, ro)
    assert s.tolist() == [np.float32(1e-12)] * 3
    assert np.array_equal(y, np.clip(np.rint(t), -128, 127).astype(np.int8))
    assert y[1].tolist() == [127] * 4 and o[1] == 127.0


def test_asymmetric_int4_and_random_rows():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((7, 16)) + rng.standard_normal((7, 1))).astype(np.float16)
    y, s, o = dynamic_quant_asymmetric(x, dst_type="int4")
    assert y.shape == (7, 2)
    t, rs, ro = ref_asym(x.astype(np.float32), 15, 7)
    assert np.array_equal(s, rs) and np.array_equal(o, ro)
    codes = unpack_int4(y)
    assert np.array_equal(codes, np.clip(np.rint(t), -8, 7).astype(np.int8))
    assert codes.max(axis=1).tolist() == [7] * 7 and codes.min(axis=1).tolist() == [-8] * 7
    y8, s8, o8 = dynamic_quant_asymmetric(x)
    t8, rs8, ro8 = ref_asym(x.astype(np.float32), 255, 127)
    assert np.array_equal(y8, np.clip(np.rint(t8), -128, 127).astype(np.int8))
    assert y8.max(axis=1).tolist() == [127] * 7 and y8.min(axis=1).tolist() == [-128] * 7


# ---------------------------------------------------------------- MoE smooth selection

def test_group_index_selects_smooth_rows_including_empty_groups():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, 8)).astype(np.float16)
    smooth = (rng.random((3, 8)) + 0.5).astype(np.float16)
    xf = x.astype(np.float64)
    # cumulative ends [2, 2, 5]: rows 0-1 -> group 0, group 1 empty, rows 2-4 -> group 2
    gi = np.array([2, 2, 5], np.int32)
    y, s = dynamic_quant(x, smooth_scales=smooth, group_index=gi)
    sel = smooth[[0, 0, 2, 2, 2]].astype(np.float64)
    ry, rs = ref_rows(rn32(xf * sel), 127)
    assert np.array_equal(y, ry) and np.array_equal(s, rs)
    # first group empty: [0, 3, 5] -> rows 0-2 -> group 1, rows 3-4 -> group 2
    y, s = dynamic_quant(x, smooth_scales=smooth, group_index=np.array([0, 3, 5], np.int32))
    ry, rs = ref_rows(rn32(xf * smooth[[1, 1, 1, 2, 2]].astype(np.float64)), 127)
    assert np.array_equal(y, ry) and np.array_equal(s, rs)
    # the same via the 1-D smooth path on each group's rows
    for rows, g in ((slice(0, 3), 1), (slice(3, 5), 2)):
        y1, s1 = dynamic_quant(x[rows], smooth_scales=smooth[g])
        assert np.array_equal(y1, y[rows]) and np.array_equal(s1, s[rows])


def test_group_index_with_3d_input_and_asymmetric():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 3, 8)).astype(bfloat16)
    smooth = (rng.random((2, 8)) + 0.5).astype(bfloat16)
    gi = np.array([4, 6], np.int32)              # flattened rows 0-3 -> group 0, 4-5 -> group 1
    y, s = dynamic_quant(x, smooth_scales=smooth, group_index=gi)
    sel = smooth[[0, 0, 0, 0, 1, 1]].astype(np.float64)
    ry, rs = ref_rows(rn32(x.astype(np.float64).reshape(6, 8) * sel), 127)
    assert np.array_equal(y.reshape(6, 8), ry) and np.array_equal(s.reshape(6), rs)
    ya, sa, oa = dynamic_quant_asymmetric(x, smooth_scales=smooth, group_index=gi)
    t, rsa, roa = ref_asym(rn32(x.astype(np.float64).reshape(6, 8) * sel), 255, 127)
    assert np.array_equal(sa.reshape(6), rsa) and np.array_equal(oa.reshape(6), roa)


def test_args_select_rows_and_leave_the_overflow_check_to_the_arithmetic():
    # dynamic_quant_args: the checks (no arithmetic); the smooth row of each flattened row; the
    # x * smooth_scales overflow is a check of the data done by smoothed_rows, which the op runs.
    x = np.ones((2, 3, 8), bfloat16)
    smooth = np.full((3, 8), 2.0, np.float32).astype(bfloat16)
    a = dynamic_quant_args(x, smooth_scales=smooth, group_index=np.array([4, 4, 6], np.int32))
    assert a.row_groups.tolist() == [0, 0, 0, 0, 2, 2] and (a.rows, a.h, a.qmax, a.dst_name) == (6, 8, 127, "int8")
    assert smoothed_rows(a).tolist() == [[2.0] * 8] * 6
    big = np.full((1, 8), 3e38, np.float32).astype(bfloat16)       # 3e38 * 2 overflows fp32
    b = dynamic_quant_asymmetric_args(big, smooth_scales=smooth[0], dst_type="int4")
    assert b.qmax == 7 and b.row_groups is None
    with pytest.raises(ValueError, match="dynamic_quant_asymmetric: argument 'smooth_scales'.*finite"):
        smoothed_rows(b, op="dynamic_quant_asymmetric")


# ---------------------------------------------------------------- bad input

X = np.ones((2, 8), np.float16)


@pytest.mark.parametrize("kwargs, exc, arg", [
    (dict(x=X.astype(np.float32)), TypeError, "'x'"),
    (dict(x=X.tolist()), TypeError, "'x'"),
    (dict(x=np.ones(8, np.float16)), ValueError, "'x'"),
    (dict(x=np.ones((1,) * 9, np.float16)), ValueError, "'x'"),
    (dict(x=X, smooth_scales=np.ones(8, bfloat16)), TypeError, "'smooth_scales'"),
    (dict(x=X, smooth_scales=np.ones(7, np.float16)), ValueError, "'smooth_scales'"),
    (dict(x=X, smooth_scales=np.ones((2, 8), np.float16)), ValueError, "'smooth_scales'"),
    (dict(x=X, smooth_scales=np.ones((2, 8), np.float16), group_index=np.array([1, 2], np.int64)), TypeError, "'group_index'"),
    (dict(x=X, smooth_scales=np.ones((2, 8), np.float16), group_index=np.array([2, 1], np.int32)), ValueError, "'group_index'"),
    (dict(x=X, smooth_scales=np.ones((2, 8), np.float16), group_index=np.array([1, 3], np.int32)), ValueError, "'group_index'"),
    (dict(x=X, smooth_scales=np.ones((2, 8), np.float16), group_index=np.array([-1, 2], np.int32)), ValueError, "'group_index'"),
    (dict(x=X, smooth_scales=np.ones((3, 8), np.float16), group_index=np.array([1, 2], np.int32)), ValueError, "'smooth_scales'"),
    (dict(x=X, smooth_scales=np.ones((0, 8), np.float16), group_index=np.array([], np.int32)), ValueError, "'group_index'"),
    (dict(x=np.ones((1025, 8), np.float16), smooth_scales=np.ones((1025, 8), np.float16),
          group_index=np.arange(1, 1026, dtype=np.int32)), ValueError, "'group_index'"),
    (dict(x=X, group_index=np.array([2], np.int32)), ValueError, "'group_index'"),
    (dict(x=X, dst_type="int32"), ValueError, "'dst_type'"),
    (dict(x=X, dst_type="float8"), TypeError, "'dst_type'"),
    (dict(x=np.ones((2, 12), np.float16), dst_type="int4"), ValueError, "'x'"),
    (dict(x=X, numerics="ascend"), TypeError, "'numerics'"),
])
def test_bad_input_names_the_argument(kwargs, exc, arg):
    for op in (dynamic_quant, dynamic_quant_asymmetric):
        with pytest.raises(exc) as e:
            op(**kwargs)
        assert arg in str(e.value)


@pytest.mark.parametrize("value, kind", [(np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")])
def test_nan_inf_raise_by_default(value, kind):
    x = np.ones((3, 4), np.float16)
    x[1, 2] = value
    with pytest.raises(ValueError, match=rf"'x'.*{kind} at index \(1, 2\)"):
        dynamic_quant(x)
    with pytest.raises(ValueError, match="'smooth_scales'"):
        dynamic_quant(np.ones((3, 4), np.float16), smooth_scales=x[1])
    # smoothing that overflows fp32: bf16 3e38 * 2
    big = np.full((1, 4), 3e38, np.float32).astype(bfloat16)
    with pytest.raises(ValueError, match="'smooth_scales'.*finite"):
        dynamic_quant(big, smooth_scales=np.full(4, 2.0, np.float32).astype(bfloat16))


def test_nan_policy_ieee_computes_through():
    # a NaN row: amax = NaN, every code is the NaN code 0 and the scale NaN; other rows unharmed
    x = np.array([[1.0, np.nan, 0.5], [1.0, -1.0, 0.5]], np.float16)
    y, s = dynamic_quant(x, numerics=ASCEND.replace(nan_policy="ieee"))
    assert y.tolist() == [[0, 0, 0], [127, -127, 64]]   # 63.5 -> 64 (even)
    assert np.isnan(s[0]) and s[1] == rn32(1 / 127.0)


def test_non_contiguous_views_equal_the_contiguous_copy():
    rng = np.random.default_rng(9)
    base = rng.standard_normal((16, 12)).astype(np.float16)
    for view in (base.T, base[::2, 1::2], base[:, ::-1]):
        assert not view.flags.c_contiguous
        for args in ({}, {"dst_type": "int4"} if view.shape[-1] % 8 == 0 else {}):
            a = dynamic_quant(view, **args)
            b = dynamic_quant(np.ascontiguousarray(view), **args)
            assert all(np.array_equal(p, q) for p, q in zip(a, b))
        a = dynamic_quant_asymmetric(view)
        b = dynamic_quant_asymmetric(np.ascontiguousarray(view))
        assert all(np.array_equal(p, q) for p, q in zip(a, b))
    smooth = (rng.random(24) + 0.5).astype(np.float16)[::2]   # strided smooth_scales [12]
    a = dynamic_quant(base, smooth_scales=smooth)
    b = dynamic_quant(base, smooth_scales=np.ascontiguousarray(smooth))
    assert all(np.array_equal(p, q) for p, q in zip(a, b))


# ---------------------------------------------------------------- properties

ROWS = st.sampled_from([1, 2, 7, 17])
COLS = st.sampled_from([1, 7, 8, 17, 1025])


@st.composite
def activations(draw, cols=COLS):
    dtype = draw(st.sampled_from([np.float16, bfloat16]))
    shape = (draw(ROWS), draw(cols))
    if draw(st.booleans()):
        shape = (2,) + shape if shape[0] < 17 else shape
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = 10.0 ** draw(st.integers(-4, 4))
    x = rng.standard_normal(shape) * scale
    if draw(st.booleans()):  # outliers and exact ties
        x.flat[rng.integers(0, x.size, max(1, x.size // 10))] *= 100
    if draw(st.booleans()):
        x[..., 0, :] = 0.0    # an all-zero row
    return np.clip(x, -60000, 60000).astype(dtype)


@given(activations())
def test_matches_reference_bit_for_bit(x):
    y, s = dynamic_quant(x)
    ry, rs = ref_rows(x.astype(np.float32).reshape(-1, x.shape[-1]), 127, selected_scale(x))
    assert np.array_equal(y.reshape(ry.shape), ry)
    assert np.array_equal(s.reshape(-1), rs)
    assert y.min() >= -127 and s.shape == x.shape[:-1]


@given(activations())
def test_dequant_within_half_a_scale(x):
    # |y * s - x| <= s * (0.5 + 2^-15): y = rint(fl(x * inv)) is within 0.5 + 127 * 2^-24 of
    # x * inv, and s = fl(1 / inv) is within 2^-24 relative of 1 / inv (|x| <= amax ~ 127 s).
    y, s = dynamic_quant(x)
    xf = x.astype(np.float64)
    err = np.abs(y.astype(np.float64) * s[..., None] - xf)
    assert np.all(err <= s[..., None].astype(np.float64) * (0.5 + 2.0**-15))


@given(activations(cols=st.sampled_from([8, 16, 1032])))
def test_int4_dequant_within_half_a_scale(x):
    y, s = dynamic_quant(x, dst_type="int4")
    codes = unpack_int4(y)
    assert codes.min() >= -7 and codes.max() <= 7
    err = np.abs(codes.astype(np.float64) * s[..., None] - x.astype(np.float64))
    assert np.all(err <= s[..., None].astype(np.float64) * (0.5 + 2.0**-15))


@given(activations(), st.data())
def test_rows_are_independent(x, data):
    # per-token: a row's codes and scale do not depend on the other rows
    flat = x.reshape(-1, x.shape[-1])
    i = data.draw(st.integers(0, flat.shape[0] - 1))
    y, s = dynamic_quant(flat)
    y1, s1 = dynamic_quant(flat[i:i + 1])
    assert np.array_equal(y1[0], y[i]) and s1[0] == s[i]
    perm = np.random.default_rng(i).permutation(flat.shape[0])
    yp, sp = dynamic_quant(flat[perm])
    assert np.array_equal(yp, y[perm]) and np.array_equal(sp, s[perm])
