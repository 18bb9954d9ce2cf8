"""torch-cpu against the golden, bit for bit, on every dense op (backends/torch_cpu).

The reference is the golden run with the numerics torch-cpu declares (``TorchCpuBackend.numerics``,
which is :data:`w8a8.ASCEND`): every output must have the same dtype, shape and bytes (NaN bit
patterns included), and every call the golden rejects must be rejected with the same exception
type and message. Hypothesis draws shapes (odd sizes 1, 7, 17 among them), dtype combinations and
value distributions (normal at random magnitudes, exact .5 ties, random finite bit patterns,
subnormals, zero rows); explicit cases pin K = 1025 / 4097 / 5000, saturation, FP19, int8 requant,
int64 scales, overflow, and the named edge cases with their expected bits written out.
"""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

import backends
import w8a8
from backends.numpy_backend import NumpyBackend
from backends.testing import BitwiseChecker, outcome  # noqa: F401 (outcome: used by some tests)
from backends.testing import assert_bits as _assert_bits
from backends.torch_cpu import TorchCpuBackend

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

BF16 = np.dtype(ml_dtypes.bfloat16)
TC = backends.get("torch-cpu")
GOLDEN = NumpyBackend(numerics=TC.numerics)


# -- comparison helpers (backends.testing) ---------------------------------------------------------

CHECK = BitwiseChecker(TC)
check_same = CHECK.same
check_raises = CHECK.raises


def assert_bits(got, want, what="result"):
    _assert_bits(got, want, what, "torch-cpu")

# -- value generators ----------------------------------------------------------------------------------

SIZES = st.sampled_from([1, 2, 7, 8, 16, 17, 33])
KINDS = ("normal", "ties", "bits", "tiny", "zeros", "mixed")


def floats(rng, shape, dtype, kind="normal"):
    """Float test data of ``dtype`` (fp32 / fp16 / bf16), finite, in one of :data:`KINDS`."""
    dtype = np.dtype(dtype)
    if kind == "mixed":
        kind = rng.choice(KINDS[:-1])
    if kind == "normal":
        v = rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 4)
    elif kind == "ties":  # k + 0.5 and integers, times a power of two (exact in every dtype)
        v = (rng.integers(-254, 255, shape) / 2.0) * 2.0 ** int(rng.integers(-6, 6))
    elif kind == "tiny":  # fp32 subnormals and the smallest normals
        v = rng.standard_normal(shape) * 1e-39
    elif kind == "zeros":
        v = np.zeros(shape)
        if v.size:
            v.reshape(-1)[rng.integers(0, v.size)] = rng.choice([0.0, -0.0, 1.5, -3.0])
    else:  # random finite bit patterns (subnormals, huge values, signed zeros)
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32}[dtype.itemsize]
        raw = rng.integers(0, np.iinfo(width).max, shape, dtype=np.uint64, endpoint=True).astype(width)
        out = raw.view(dtype)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(out.astype(np.float32))
        out[bad] = 0
        return out
    with np.errstate(over="ignore"):
        out = v.astype(np.float32).astype(dtype)
    return np.where(np.isfinite(out.astype(np.float32)), out, 0).astype(dtype)


def ints(rng, shape, dtype, full=True):
    info = np.iinfo(dtype)
    lo, hi = (info.min, info.max) if full else (max(info.min, -20), min(info.max, 20))
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


seeds = st.integers(0, 2**32 - 1)
kinds = st.sampled_from(KINDS)


# -- the backend itself ---------------------------------------------------------------------------------

def test_available_here():
    assert TC.available() == (True, "")
    assert TC.name == "torch-cpu"
    assert set(backends.ops.DENSE_OPS) <= set(TC.ops())  # the MoE and low-bit ops live in their own test files


def test_declares_the_ascend_record():
    # The goal: the default record, reproduced exactly (no differences to declare).
    assert TC.numerics == w8a8.ASCEND
    assert TC.info()["numerics_differences"] == {}


def test_import_does_not_import_torch():
    code = ("import sys, backends; b = backends.get('torch-cpu'); "
            "assert 'torch' not in sys.modules, 'imported torch'; print(b.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "torch-cpu"


def test_other_numerics_are_unsupported():
    x = np.ones((2, 8), BF16)
    with pytest.raises(backends.Unsupported, match="half_away"):
        TC.call("dynamic_quant", x, numerics=w8a8.ASCEND.replace(round_mode="half_away"))
    assert_bits(TC.call("dynamic_quant", x, numerics=w8a8.ASCEND), w8a8.dynamic_quant(x))


def test_an_op_it_does_not_implement_is_unsupported():
    with pytest.raises(backends.Unsupported, match="does not implement op 'no_such_op'"):
        TC.call("no_such_op", np.ones((2, 4), np.float32))


def test_gemm_path_follows_amx():
    from backends.torch_cpu import runtime

    amx = runtime.has_amx_int8() and runtime.has_qlinear()
    assert TC.gemm_path == ("qlinear" if amx else "vnni" if runtime.vnni_status()[0] else "int_mm")
    with pytest.raises(ValueError, match="'gemm'"):
        TorchCpuBackend(gemm="fast")


def test_prepare_times_device_work_only():
    rng = np.random.default_rng(0)
    x = floats(rng, (5, 64), BF16)
    w = ints(rng, (9, 64), np.int8)
    ws = (rng.random(9) * 0.01).astype(np.float32)
    prepared = TC.prepare("w8a8_dynamic_linear", x, w, ws)
    out = prepared.run()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert_bits(prepared.finish(out), w8a8.w8a8_dynamic_linear(x, w, ws))
    assert_bits(prepared(), w8a8.w8a8_dynamic_linear(x, w, ws))  # re-runnable
    assert prepared.notes["gemm"] == TC.gemm_path


def test_inputs_are_not_modified():
    rng = np.random.default_rng(1)
    x = floats(rng, (4, 16), np.float32)
    before = x.copy()
    check_same("quantize", x, np.float32([0.5]), None, dtype="int8", axis=-1, div_mode=False)
    check_same("dynamic_quant", x.astype(BF16))
    assert np.array_equal(x, before)


def test_read_only_inputs():
    x = np.broadcast_to(np.float16(1.5), (3, 8))  # read-only view
    check_same("dynamic_quant", x)


# -- dynamic_quant --------------------------------------------------------------------------------------

@given(seed=seeds, kind=kinds, rows=SIZES, h=st.sampled_from([1, 7, 8, 17, 64]),
       lead=st.sampled_from([(), (2,), (1, 3)]), dtype=st.sampled_from([BF16, np.float16]),
       dst=st.sampled_from(["int8", "int4"]), smooth=st.sampled_from(["none", "row", "groups"]))
def test_dynamic_quant_matches_golden(seed, kind, rows, h, lead, dtype, dst, smooth):
    rng = np.random.default_rng(seed)
    if dst == "int4":
        h = 8 * max(1, h // 8)
    x = floats(rng, lead + (rows, h), dtype, kind)
    kw = {"dst_type": dst}
    s = int(np.prod(lead + (rows,)))
    if smooth == "row":
        kw["smooth_scales"] = floats(rng, (h,), dtype, "normal")
    elif smooth == "groups":
        e = int(rng.integers(1, 5))
        ends = np.sort(rng.integers(0, s, e - 1, endpoint=True))
        kw["group_index"] = np.append(ends, s).astype(np.int32)  # empty groups allowed
        kw["smooth_scales"] = floats(rng, (e, h), dtype, "normal")
    check_same("dynamic_quant", x, **kw)
    check_same("dynamic_quant_asymmetric", x, **kw)


@pytest.mark.parametrize("h", [1, 7, 17, 1025, 4097, 5000])
@pytest.mark.parametrize("dtype", [BF16, np.float16])
def test_dynamic_quant_odd_and_long_rows(h, dtype):
    rng = np.random.default_rng(h)
    x = floats(rng, (3, h), dtype, "mixed")
    check_same("dynamic_quant", x)
    check_same("dynamic_quant_asymmetric", x)


def test_dynamic_quant_ties_round_half_even():
    # amax 127 -> inv = 127/127 = 1.0 exactly, so the codes are rint(x): 2.5 -> 2, 3.5 -> 4,
    # -2.5 -> -2, 0.5 -> 0 (ties to even), and the scale is 1/1.0 = 1.0.
    x = np.array([[127.0, 2.5, 3.5, -2.5, 0.5, -126.5]], BF16)
    y, scale = check_same("dynamic_quant", x)
    assert y.tolist() == [[127, 2, 4, -2, 0, -126]]
    assert scale.view(np.uint32).tolist() == [0x3F800000]


def test_dynamic_quant_zero_and_tiny_rows():
    # Row 0 is all zero: inv = 127/0 = inf, 0*inf = NaN -> code 0, scale 0.
    # Row 1 has amax 1e-39 (an fp32 subnormal; bf16 rounds it to 0x000B0000 = 720896 * 2^-149): 127/amax
    # overflows to inf, so the nonzero codes saturate to +-127, the zero stays 0 (NaN code). H = 3
    # runs the double-buffer kernel (key 2), whose scale is amax * fp32(1/127) (dynamic_quant_db.h:319):
    # 720896 * 2^-149 * 0.0078740157... = 5676.35 * 2^-149, the fp32 subnormal 5676 * 2^-149 = 0x162C
    # (the basic kernels' 1 / inf would give 0).
    x = np.array([[0.0, -0.0, 0.0], [1e-39, -1e-39, 0.0]], BF16)
    y, scale = check_same("dynamic_quant", x)
    assert y.tolist() == [[0, 0, 0], [127, -127, 0]]
    assert scale.view(np.uint32).tolist() == [0, 0x162C]


def test_dynamic_quant_int4_packing():
    # amax 7 -> inv = 1, codes = x: 1, -1, 2, -2, 3, -3, 4, -7 -> nibbles 1 F 2 E 3 D 4 9 from bit 0
    # up -> word 0x94D3E2F1, as int32 0x94D3E2F1 - 2^32.
    x = np.array([[1, -1, 2, -2, 3, -3, 4, -7]], np.float16)
    y, scale = check_same("dynamic_quant", x, dst_type="int4")
    assert y.dtype == np.int32 and y.tolist() == [[0x94D3E2F1 - (1 << 32)]]
    assert scale.tolist() == [1.0]


def test_dynamic_quant_groups_select_smooth_rows():
    # group_index = [1, 1, 3]: row 0 -> group 0, (group 1 empty), rows 1-2 -> group 2.
    x = np.full((3, 8), 2.0, np.float16)
    smooth = np.array([[1.0] * 8, [100.0] * 8, [0.5] * 8], np.float16)
    smooth[0, 0] = 4.0  # row 0: [8, 2, ..., 2] -> codes [127, 32 (2*127/8 = 31.75), ...]
    y, _ = check_same("dynamic_quant", x, smooth_scales=smooth, group_index=np.array([1, 1, 3], np.int32))
    assert y[0].tolist() == [127] + [32] * 7
    assert y[1:].tolist() == [[127] * 8] * 2


def test_dynamic_quant_smooth_overflow_raises():
    x = np.full((2, 8), 60000.0, np.float16)
    smooth = np.full(8, 1.0, np.float16)
    x2 = np.full((2, 8), 3e38, BF16)
    check_same("dynamic_quant", x, smooth_scales=smooth)  # fine
    check_raises(ValueError, "smooth_scales", "dynamic_quant", x2, smooth_scales=np.full(8, 2.0, BF16))


def test_dynamic_quant_asymmetric_constant_and_extreme_rows():
    # A constant row clamps the scale to fp32(1e-12); bf16 extremes overflow rowmax - rowmin to inf.
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    x = np.array([[3.0] * 8, [big, -big] * 4, [0.0] * 8, [1e-39, -1e-39] * 4], BF16)
    check_same("dynamic_quant_asymmetric", x)
    check_same("dynamic_quant_asymmetric", x, dst_type="int4")


def test_dynamic_quant_empty():
    check_same("dynamic_quant", np.zeros((0, 8), BF16))
    check_same("dynamic_quant", np.zeros((3, 0), BF16))
    check_same("dynamic_quant_asymmetric", np.zeros((3, 0), np.float16))
    check_same("dynamic_quant", np.zeros((2, 0, 8), np.float16), dst_type="int4")


# -- quantize -------------------------------------------------------------------------------------------

@given(seed=seeds, kind=kinds, shape=st.sampled_from([(7,), (1, 16), (3, 17), (2, 3, 8), (17, 1), (2, 1, 5, 8)]),
       xdtype=st.sampled_from([np.float32, np.float16, BF16]), div_mode=st.booleans(), data=st.data())
def test_quantize_matches_golden(seed, kind, shape, xdtype, div_mode, data):
    rng = np.random.default_rng(seed)
    x = floats(rng, shape, xdtype, kind)
    nd = len(shape)
    if div_mode:
        dtype = data.draw(st.sampled_from(["int8", "uint8", "int32"]))
        axis = data.draw(st.integers(-nd, nd - 1))
        ax = axis % nd
        sdtype = data.draw(st.sampled_from([np.float32, BF16]))
        zdtype = data.draw(st.sampled_from([None, np.int8, np.uint8, np.int32, BF16, np.float32]))
    else:
        dtype = data.draw(st.sampled_from(["int8", "int4"] if shape[-1] % 8 == 0 else ["int8"]))
        axis = data.draw(st.sampled_from([-2, -1, 0, 1, 5] if nd >= 2 else [-1, 0, 3]))
        ax = nd - 2 if axis == -2 else nd - 1
        sdtype = xdtype
        zdtype = data.draw(st.sampled_from([None, xdtype]))
    n = shape[ax] if data.draw(st.booleans()) else 1
    full_rank = data.draw(st.booleans())
    vshape = tuple(n if i == ax else 1 for i in range(nd)) if full_rank else (n,)
    scale = np.abs(floats(rng, vshape, sdtype, data.draw(st.sampled_from(["normal", "ties", "tiny"]))))
    if dtype == "int32":
        scale = (scale.astype(np.float32) * np.float32(1e-6)).astype(sdtype)  # reach the int32 bounds
    zp = None
    if zdtype is not None:
        zp = (ints(rng, vshape, zdtype, full=False) if np.dtype(zdtype).kind in "iu"
              else floats(rng, vshape, zdtype, data.draw(st.sampled_from(["ties", "normal"]))))
    check_same("quantize", x, scale, zp, dtype=dtype, axis=axis, div_mode=div_mode)


def test_quantize_saturation_and_ties():
    # div_mode=False: rint(x * 1 + 0): 300 -> 127, -300 -> -128, 2.5 -> 2, -0.5 -> -0 -> 0.
    x = np.array([[300.0, -300.0, 2.5, -0.5, 1.5, 126.5, -127.5, 0.0]], np.float32)
    y = check_same("quantize", x, np.float32([1.0]), None, dtype="int8", axis=-1, div_mode=False)
    assert y.tolist() == [[127, -128, 2, 0, 2, 126, -128, 0]]
    # int4: the same codes clamp to [-8, 7] and pack: 7, -8, 2, 0, 2, 7, -8, 0 -> nibbles 7 8 2 0 2 7 8 0
    y4 = check_same("quantize", x, np.float32([1.0]), None, dtype="int4", axis=-1, div_mode=False)
    assert y4.tolist() == [[0x08720287]]
    # div_mode=True, uint8 with zero point 1, the zero point added before rounding (torch
    # quantize_per_channel: rint(zp + x * fp32(1/s))): 301 -> 255 (saturated), -299 -> 0 (saturated),
    # rint(3.5) = 4, rint(0.5) = 0, rint(2.5) = 2, rint(127.5) = 128, rint(-126.5) -> 0 (saturated), 1
    z = check_same("quantize", x, np.float32([1.0]), np.array([1], np.uint8), dtype="uint8", axis=1)
    assert z.tolist() == [[255, 0, 4, 0, 2, 128, 0, 1]]


def test_quantize_int32_bounds():
    # 2^31 - 1 is not a float32: the clamp must run in float64 (3e9 -> 2147483647, not -2^31).
    x = np.array([[3e9, -3e9, 2.5, 2147483520.0]], np.float32)
    y = check_same("quantize", x, np.float32([1.0]), dtype="int32", axis=1)
    assert y.tolist() == [[2147483647, -2147483648, 2, 2147483520]]
    check_same("quantize", x, np.float32([1.0]), np.array([7], np.int32), dtype="int32", axis=1)


def test_quantize_zero_scale():
    # x / 0: +-inf saturates, 0 / 0 = NaN -> code 0.
    x = np.array([[1.0, -1.0, 0.0]], np.float32)
    y = check_same("quantize", x, np.float32([0.0]), dtype="int8", axis=0)
    assert y.tolist() == [[127, -128, 0]]


# -- dequantize, anti_quant -----------------------------------------------------------------------------

@given(seed=seeds, ydtype=st.sampled_from([np.int8, np.uint8, np.int32]), shape=st.sampled_from([(7,), (3, 17), (2, 1, 9)]),
       sdtype=st.sampled_from([np.float32, np.float16, BF16]), out=st.sampled_from(["float32", "float16", "bfloat16"]),
       kind=st.sampled_from(["normal", "tiny", "bits"]), data=st.data())
def test_dequantize_matches_golden(seed, ydtype, shape, sdtype, out, kind, data):
    rng = np.random.default_rng(seed)
    y = ints(rng, shape, ydtype)
    nd = len(shape)
    zdtype = data.draw(st.sampled_from([None, np.int8, np.int32, np.int64, np.float32, np.float64, BF16]))
    if data.draw(st.booleans()) and nd >= 2:
        axis = None
        vshape = shape[:-1]
    else:
        axis = data.draw(st.integers(-nd, nd - 1))
        vshape = (shape[axis % nd] if data.draw(st.booleans()) else 1,)
    scale = floats(rng, vshape, sdtype, kind)
    zp = None
    if zdtype is not None:
        zp = ints(rng, vshape, zdtype, full=False) if np.dtype(zdtype).kind == "i" else floats(rng, vshape, np.float32).astype(zdtype)
    check_same("dequantize", y, scale, zp, axis=axis, output_dtype=out)


def test_dequantize_nan_bits():
    # A NaN / Inf scale: (y - z) * NaN is NaN, 0 * Inf is NaN (the x86 default NaN, sign set).
    # The golden's bf16 NaN is sign | 0x7FC0 (ml_dtypes); torch's own cast writes 0xFFFF.
    y = np.array([[1, 0, -3]], np.int8)
    for scale in (np.float32([np.nan]), np.float32([np.inf]), np.float32([-np.nan])):
        for out in ("bfloat16", "float16", "float32"):
            check_same("dequantize", y, scale, axis=-1, output_dtype=out)
    got = TC.call("dequantize", y, np.float32([np.inf]), axis=-1, output_dtype="bfloat16")
    assert got.view(np.uint16).tolist() == [[0x7F80, 0xFFC0, 0xFF80]]  # inf, NaN (0 * inf, sign set), -inf


def test_dequantize_per_row_zero_point_must_have_the_scales_shape():
    # axis=None: the zero point is per row, like the scale: of shape y.shape[:-1]. A [4, 3] zero point
    # against y [3, 16] used to broadcast to a [4, 3, 16] result (NumPy broadcasting); the golden refuses
    # it naming 'zero_point', and torch-cpu does the same through the golden's dequantize_args.
    y = np.arange(48, dtype=np.int8).reshape(3, 16)
    s = np.float32([0.5, 1, 2])
    check_raises(ValueError, r"dequantize: argument 'zero_point' must be of shape y\.shape\[:-1\] = \(3,\)",
                 "dequantize", y, s, np.arange(12, dtype=np.int32).reshape(4, 3), axis=None)
    # The right shape: row r is (y[r] - z[r]) * s[r]. y[0, 0] = 0: (0 - 1) * 0.5 = -0.5;
    # y[1, 0] = 16: (16 - 4) * 1 = 12; y[2, 15] = 47: (47 + 2) * 2 = 98.
    got = check_same("dequantize", y, s, np.int32([1, 4, -2]), axis=None)
    assert got.shape == (3, 16) and (got[0, 0], got[1, 0], got[2, 15]) == (-0.5, 12.0, 98.0)


def test_dequantize_subnormal_outputs():
    # 3 * 2^-140 is an fp32 subnormal; fp16 / bf16 round it (to 0 / to a bf16 subnormal).
    y = np.array([[3, -1, 127]], np.int8)
    for out in ("float32", "float16", "bfloat16"):
        check_same("dequantize", y, np.float32([2.0 ** -140]), axis=-1, output_dtype=out)
        check_same("dequantize", y, np.float32([2.0 ** -20]), axis=-1, output_dtype=out)


@given(seed=seeds, int4=st.booleans(), rows=SIZES, n8=st.sampled_from([1, 2, 5]), sdtype=st.sampled_from([np.float32, BF16]),
       dst=st.sampled_from([None, "float16", "bfloat16"]), per_channel=st.booleans(), with_offset=st.booleans())
def test_anti_quant_matches_golden(seed, int4, rows, n8, sdtype, dst, per_channel, with_offset):
    rng = np.random.default_rng(seed)
    n = 8 * n8
    x = ints(rng, (rows, n // 8), np.int32) if int4 else ints(rng, (rows, n), np.int8)
    vs = (n,) if per_channel else (1,)
    scale = floats(rng, vs, sdtype, "normal")
    offset = floats(rng, vs, sdtype, "ties") if with_offset else None
    check_same("anti_quant", x, scale, offset=offset, dst_dtype=dst, src_dtype="int4" if int4 else None)


def test_anti_quant_int4_codes():
    # word 0x94D3E2F1 unpacks (LSB first) to 1, -1, 2, -2, 3, -3, 4, -7; offset +1, scale 0.5:
    # (c + 1) * 0.5 = 1, 0, 1.5, -0.5, 2, -1, 2.5, -3.
    x = np.array([[0x94D3E2F1 - (1 << 32)]], np.int32)
    y = check_same("anti_quant", x, np.float32([0.5]), offset=np.float32([1.0]), src_dtype="int4")
    assert y.dtype == np.float16 and y.tolist() == [[1.0, 0.0, 1.5, -0.5, 2.0, -1.0, 2.5, -3.0]]


# -- trans_quant_param ----------------------------------------------------------------------------------

@given(seed=seeds, shape=st.sampled_from([(1,), (7,), (1, 17), (3, 1), (2, 5)]), round_mode=st.sampled_from([0, 1]),
       offset=st.sampled_from(["none", "same", "one"]))
def test_trans_quant_param_matches_golden(seed, shape, round_mode, offset):
    rng = np.random.default_rng(seed)
    scale = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32).view(np.float32)  # NaN/Inf/subnormal too
    o = None
    if offset == "same":
        o = (rng.integers(-600, 600, shape) / 2.0).astype(np.float32)  # ties, out of [-256, 255]
        o.reshape(-1)[0] = np.nan
    elif offset == "one" and len(shape) == 1:
        o = np.float32([rng.integers(-300, 300) + 0.5])
    check_same("trans_quant_param", scale, o, round_mode=round_mode)


def test_trans_quant_param_bits():
    # 1.0 -> 0x3F800000 | 1 << 46; offset -3 -> (-3 & 0x1FF) << 37 = 0x1FD << 37 = 0x3FA0_0000_0000.
    got = check_same("trans_quant_param", np.float32([1.0, 1.0]), np.float32([0.0, -3.0]))
    assert [hex(v) for v in got.view(np.uint64)] == ["0x40003f800000", "0x7fa03f800000"]
    # round_mode 1 on 1 + 2^-10 + 2^-11 (0x3F803000): mantissa bit 12 set -> rounds up to 0x3F804000;
    # 1 + 2^-11 (0x3F801000): an exact tie with an even kept LSB -> stays 0x3F800000. round_mode 0 truncates.
    s = np.array([0x3F803000, 0x3F801000], np.uint32).view(np.float32)
    assert (check_same("trans_quant_param", s, round_mode=1).view(np.uint64) & 0xFFFFFFFF).tolist() == [0x3F804000, 0x3F800000]
    assert (check_same("trans_quant_param", s, round_mode=0).view(np.uint64) & 0xFFFFFFFF).tolist() == [0x3F802000, 0x3F800000]


# -- int_matmul -----------------------------------------------------------------------------------------

@given(seed=seeds, m=SIZES, k=st.sampled_from([1, 7, 17, 64]), n=SIZES,
       dtypes=st.sampled_from([(np.int8, np.int8), (np.uint8, np.int8), (np.int8, np.uint8), (np.uint8, np.uint8),
                               (np.int16, np.int8), (np.int16, np.int16), (np.int32, np.int8), (np.int32, np.int32)]),
       batch=st.sampled_from([((), ()), ((3,), ()), ((), (2,)), ((2, 1), (3,))]), full=st.booleans())
def test_int_matmul_matches_golden(seed, m, k, n, dtypes, batch, full):
    rng = np.random.default_rng(seed)
    a = ints(rng, batch[0] + (m, k), dtypes[0], full)
    b = ints(rng, batch[1] + (k, n), dtypes[1], full)
    check_same("int_matmul", a, b)  # int32 operands at full range mostly overflow: both must raise


@pytest.mark.parametrize("k", [1025, 4097, 5000])
def test_int_matmul_long_k(k):
    rng = np.random.default_rng(k)
    check_same("int_matmul", ints(rng, (3, k), np.int8), ints(rng, (k, 5), np.int8))
    # Worst case for float32 summation: all -128 -> every product +16384, K * 2^14 > 2^24.
    got = check_same("int_matmul", np.full((2, k), -128, np.int8), np.full((k, 3), -128, np.int8))
    assert (got == k * 16384).all()


def test_int_matmul_overflow():
    # int8 x int8 at K = 131073: all -128 -> 131073 * 16384 = 2147500032 > 2^31 - 1: OverflowError;
    # alternating signs in a cancel exactly (sum 16384): the chunked _int_mm route must be exact.
    k = 131073
    a = np.full((1, k), -128, np.int8)
    b = np.full((k, 2), -128, np.int8)
    check_raises(OverflowError, "exact sum 2147500032", "int_matmul", a, b)
    a[0, 1::2] = 127
    got = check_same("int_matmul", a, b)
    assert got.tolist() == [[65537 * 16384 - 65536 * 127 * 128] * 2]
    # int32 x int32 beyond 2^53 per product: (2^31 - 1)^2 - (2^31 - 1)^2 = 0 exactly, and + 1.
    big = 2**31 - 1
    got = check_same("int_matmul", np.array([[big, -big, 1]], np.int32), np.array([[big], [big], [1]], np.int32))
    assert got.tolist() == [[1]]
    check_raises(OverflowError, "exact sum 4294967294", "int_matmul", np.array([[big, big]], np.int32),
                 np.array([[1], [1]], np.int32))


def test_int_matmul_names_the_calling_op():
    # The golden's keyword ``op`` (the op named in errors) reaches torch-cpu's checks and overflow errors.
    # (NumpyBackend.call cannot take it: Backend.call's own first parameter is called ``op``.)
    a, b = np.ones((3, 16), np.int8), np.ones((15, 5), np.int8)
    with pytest.raises(ValueError) as want:
        w8a8.int_matmul(a, b, op="my_gemm")
    with pytest.raises(ValueError) as got:
        TC.int_matmul(a, b, op="my_gemm")
    assert str(got.value) == str(want.value) and str(got.value).startswith("my_gemm: ")
    big = np.full((1, 2), 2**31 - 1, np.int32)
    with pytest.raises(OverflowError, match="^my_gemm: the int32 accumulator overflows"):
        TC.int_matmul(big, np.ones((2, 1), np.int32), op="my_gemm")


def test_int_matmul_empty():
    for a_shape, b_shape in (((0, 4), (4, 3)), ((2, 0), (0, 3)), ((2, 4), (4, 0)), ((0, 2, 4), (4, 3))):
        check_same("int_matmul", np.ones(a_shape, np.int8), np.ones(b_shape, np.int8))


# -- quant_matmul ---------------------------------------------------------------------------------------

# (output, scale dtypes, bias dtypes, pertoken, offset) per row of spec §3.3 (A2/A3), plus int32.
COMBOS = [
    ("float16", ["int64", "uint64", "float32"], [None, "int32"], False, False),
    ("int8", ["int64", "uint64", "float32"], [None, "int32"], False, True),
    ("bfloat16", ["float32", "bfloat16"], [None, "int32", "bfloat16", "float32"], False, False),
    ("bfloat16", ["float32", "bfloat16"], [None, "int32", "bfloat16", "float32"], True, False),
    ("float16", ["float32"], [None, "int32", "float16", "float32"], True, False),
    ("int32", ["float32", "bfloat16"], [None, "int32"], False, False),
    (None, ["int64", "float32"], [None, "int32"], False, True),
]


def _scale(rng, dtype, shape, out):
    mag = 10.0 ** rng.uniform(-4, -1) if out not in ("int8", None) else 10.0 ** rng.uniform(-5, -2)
    s = (rng.random(shape) * mag + mag / 4).astype(np.float32)
    if dtype in ("int64", "uint64"):
        off = (rng.integers(-300, 300, shape) / 2.0).astype(np.float32) if rng.random() < 0.5 else None
        packed = w8a8.trans_quant_param(s, off)
        return packed.view(np.uint64) if dtype == "uint64" else packed
    return s.astype(BF16) if dtype == "bfloat16" else s


def _bias(rng, dtype, n):
    if dtype == "int32":
        return rng.integers(-(2**20), 2**20, n).astype(np.int32)
    return floats(rng, (n,), {"bfloat16": BF16, "float16": np.float16, "float32": np.float32}[dtype], "normal")


@given(seed=seeds, combo=st.sampled_from(COMBOS), m=SIZES, k=st.sampled_from([1, 7, 17, 64, 129]), n=SIZES,
       batch=st.sampled_from([((), ()), ((2,), ()), ((3,), (3,)), ((2, 1), (1, 2)), ((), (2,))]), data=st.data())
def test_quant_matmul_matches_golden(seed, combo, m, k, n, batch, data):
    out, scale_dtypes, bias_dtypes, pertoken, offset = combo
    rng = np.random.default_rng(seed)
    x1 = ints(rng, batch[0] + (m, k), np.int8, data.draw(st.booleans()))
    x2 = ints(rng, batch[1] + (k, n), np.int8)
    sshape = data.draw(st.sampled_from([(n,), (1,), (1, n)]))
    scale = _scale(rng, data.draw(st.sampled_from(scale_dtypes)), sshape, out)
    kw = {"output_dtype": out}
    bias_dtype = data.draw(st.sampled_from(bias_dtypes))
    if bias_dtype is not None:
        kw["bias"] = _bias(rng, bias_dtype, n)
    if pertoken:
        kw["pertoken_scale"] = (rng.random(m) * 0.05).astype(np.float32)
    if offset and data.draw(st.booleans()):
        kw["offset"] = (rng.integers(-600, 600, data.draw(st.sampled_from([(n,), (1,)]))) / 2.0).astype(np.float32)
    if data.draw(st.booleans()):
        x2 = np.ascontiguousarray(np.swapaxes(x2, -1, -2)).swapaxes(-1, -2)  # the transposed [N, K] storage
    check_same("quant_matmul", x1, x2, scale, **kw)


@pytest.mark.parametrize("k", [1025, 4097, 5000])
@pytest.mark.parametrize("combo", [c for c in COMBOS if c[0] is not None], ids=lambda c: f"{c[0]}-pt{int(c[3])}")
def test_quant_matmul_long_k(k, combo):
    out, scale_dtypes, bias_dtypes, pertoken, offset = combo
    rng = np.random.default_rng(k)
    m, n = 3, 7
    x1 = ints(rng, (m, k), np.int8)
    x2 = ints(rng, (k, n), np.int8)
    for sd in scale_dtypes:
        for bd in bias_dtypes:
            kw = {"output_dtype": out}
            if bd is not None:
                kw["bias"] = _bias(rng, bd, n)
            if pertoken:
                kw["pertoken_scale"] = (rng.random(m) * 0.05).astype(np.float32)
            if offset:
                kw["offset"] = np.float32([-3.5])
            check_same("quant_matmul", x1, x2, _scale(rng, sd, (n,), out), **kw)


@pytest.mark.parametrize("m, k, n", [(1025, 17, 7), (7, 33, 1025), (1, 1025, 1), (17, 5000, 1)])
def test_odd_large_dims(m, k, n):
    rng = np.random.default_rng(m + k + n)
    x1, x2 = ints(rng, (m, k), np.int8), ints(rng, (k, n), np.int8)
    s = (rng.random(n) * 1e-3).astype(np.float32)
    check_same("quant_matmul", x1, x2, s, pertoken_scale=(rng.random(m) * 0.1).astype(np.float32),
               output_dtype="bfloat16")
    check_same("quant_matmul", x1, x2, w8a8.trans_quant_param(s, np.float32([-2.5])), output_dtype="int8")
    check_same("quant_matmul", x1, x2, s, bias=rng.integers(-1000, 1000, n).astype(np.int32), output_dtype="float16")
    check_same("w8a8_dynamic_linear", floats(rng, (m, k), BF16, "mixed"), x2.T.copy(), s)


def test_quant_matmul_fp19_adapter():
    # fp32 scale, fp16 output, no pertoken: the adapter packs the scale to FP19 (truncated). The scale
    # 0x3C4A5FFF (all 13 dropped mantissa bits set, ~0.0123521) becomes 0x3C4A4000 (~0.0123444), a
    # relative change of ~6e-4, more than an fp16 ulp: fp16(10000 * s) is 123.4375 (fp19) and 123.5 (full).
    x1 = np.array([[100]], np.int8)
    x2 = np.array([[100]], np.int8)
    s = np.array([0x3C4A5FFF], np.uint32).view(np.float32)
    y = check_same("quant_matmul", x1, x2, s, output_dtype="float16")
    fp19 = np.array([0x3C4A4000], np.uint32).view(np.float32)
    assert y.tolist() == [[float(np.float16(np.float32(10000) * fp19[0]))]] == [[123.4375]]
    assert float(np.float16(np.float32(10000) * s[0])) == 123.5  # what the full-precision scale would give
    # bf16 output keeps the full fp32 scale:
    yb = check_same("quant_matmul", x1, x2, s, output_dtype="bfloat16")
    assert yb.view(np.uint16).tolist() == [[np.float32(np.float32(10000) * s[0]).astype(BF16).view(np.uint16)]]


def test_quant_matmul_int8_requant_s9():
    # acc = -300 (= -10 * 30), deq 1.0: s9(-300) = -256 (9-bit clamp), + s9(200) = -56 -> -56.
    # A single rounding without the 9-bit step would give -300 + 200 = -100.
    x1 = np.array([[-10]], np.int8)
    x2 = np.array([[30]], np.int8)
    y = check_same("quant_matmul", x1, x2, np.float32([1.0]), offset=np.float32([200.0]), output_dtype="int8")
    assert y.tolist() == [[-56]]
    # int64 scale with packed offset -3 (no offset argument): acc 5 * 1.0 + (-3) = 2; ties: 2.5 * 1 -> 2.
    packed = w8a8.trans_quant_param(np.float32([1.0]), np.float32([-3.0]))
    assert check_same("quant_matmul", np.array([[5]], np.int8), np.array([[1]], np.int8), packed).tolist() == [[2]]
    y = check_same("quant_matmul", np.array([[5, 1]], np.int8), np.array([[1], [0]], np.int8), np.float32([0.5]),
                   output_dtype="int8")
    assert y.tolist() == [[2]]  # rint(2.5) = 2 (half to even)


def test_quant_matmul_int32_bias_overflow():
    # acc = 1, bias 2^31 - 1: the int32 add overflows -> OverflowError (exact sum 2^31), as the golden.
    x1 = np.array([[1]], np.int8)
    x2 = np.array([[1]], np.int8)
    bias = np.array([2**31 - 1], np.int32)
    check_raises(OverflowError, "exact sum 2147483648", "quant_matmul", x1, x2, np.float32([1.0]), bias=bias,
                 output_dtype="int32")
    check_same("quant_matmul", -x1, x2, np.float32([1.0]), bias=bias, output_dtype="int32")  # 2^31 - 2: fine


def test_quant_matmul_large_k_with_pertoken():
    # K > 65535 is legal with a float scale and pertoken_scale only; K = 70000 of int8 cannot overflow.
    rng = np.random.default_rng(3)
    k = 70000
    x1, x2 = ints(rng, (2, k), np.int8), ints(rng, (k, 3), np.int8)
    check_same("quant_matmul", x1, x2, np.float32([1e-4] * 3), pertoken_scale=np.float32([0.5, 2.0]),
               output_dtype="bfloat16")
    check_raises(ValueError, "K <= 65535", "quant_matmul", x1, x2, np.float32([1e-4] * 3), output_dtype="bfloat16")


def test_quant_matmul_int4_weights_unsupported():
    # int32 x2 is the golden's packed-int4 route (A8W4 / A4W4): not a torch-cpu op (a skip, not a failure).
    # A valid A8W4 call (the golden's checks run first: an invalid one gets the golden's error).
    with pytest.raises(backends.Unsupported, match="int4"):
        TC.call("quant_matmul", _I8, np.ones((16, 1), np.int32), w8a8.trans_quant_param(np.ones(8, np.float32)),
                offset=np.zeros(8, np.float32), pertoken_scale=np.ones((3, 1), np.float32), output_dtype="bfloat16")


def test_quant_matmul_overflowing_epilogue_nan():
    # fp32(acc) * 1e38 overflows to +-inf; * pertoken 0 -> NaN (sign of the inf * 0 default NaN).
    x1 = np.array([[100, -100]], np.int8)
    x2 = np.array([[100, 100], [0, 0]], np.int8)
    y = check_same("quant_matmul", x1, x2, np.float32([1e38]), pertoken_scale=np.float32([0.0]), output_dtype="bfloat16")
    assert np.isnan(y.astype(np.float32)).all()
    check_same("quant_matmul", x1, x2, np.float32([1e38]), pertoken_scale=np.float32([0.0]), output_dtype="float16")


# -- layout -----------------------------------------------------------------------------------------------

LAYOUT_DTYPES = [np.int8, np.uint8, BF16, np.float16, np.float32, np.int32, np.int64, np.float64, np.bool_,
                 np.uint16, np.complex64, np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float4_e2m1fn)]


@given(seed=seeds, dtype=st.sampled_from(LAYOUT_DTYPES), r=st.sampled_from([1, 7, 16, 17, 33]),
       c=st.sampled_from([1, 15, 16, 17, 32, 33, 65]), lead=st.sampled_from([(), (2,), (1, 2)]))
def test_nz_layout_matches_golden(seed, dtype, r, c, lead):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    raw = rng.integers(0, 256, lead + (r, c * dtype.itemsize), dtype=np.uint8)
    w = raw.view(dtype)
    nz = check_same("format_cast_nz", w)
    back = check_same("nz_to_nd", nz, lead + (r, c))
    assert_bits(back, w)


def test_nz_layout_unusual_dtype_unsupported():
    with pytest.raises(backends.Unsupported):
        TC.call("format_cast_nz", np.zeros((2, 2), np.complex128))


# -- the Linear paths ---------------------------------------------------------------------------------------

@given(seed=seeds, kind=kinds, lead=st.sampled_from([(1,), (7,), (2, 3), ()]), k=st.sampled_from([1, 8, 17, 64]),
       n=SIZES, xdtype=st.sampled_from([BF16, np.float16]), wsdtype=st.sampled_from([np.float32, BF16]),
       ws_col=st.booleans(), bias=st.sampled_from([None, np.float32, BF16, np.float16]))
def test_dynamic_linear_matches_golden(seed, kind, lead, k, n, xdtype, wsdtype, ws_col, bias):
    rng = np.random.default_rng(seed)
    x = floats(rng, lead + (k,), xdtype, kind)
    w = ints(rng, (n, k), np.int8)
    ws = (rng.random((n, 1) if ws_col else (n,)) * 0.01).astype(wsdtype)
    b = None if bias is None else floats(rng, (n,), bias, "normal")
    check_same("w8a8_dynamic_linear", x, w, ws, bias=b)


@pytest.mark.parametrize("k", [1025, 4097, 5000])
def test_dynamic_linear_long_k(k):
    rng = np.random.default_rng(k)
    for xdtype in (BF16, np.float16):
        x = floats(rng, (3, k), xdtype, "normal")
        check_same("w8a8_dynamic_linear", x, ints(rng, (5, k), np.int8), (rng.random(5) * 1e-3).astype(np.float32),
                   bias=floats(rng, (5,), np.float32))


@given(seed=seeds, kind=kinds, lead=st.sampled_from([(1,), (7,), (2, 3)]), k=st.sampled_from([1, 8, 17, 64]), n=SIZES,
       xdtype=st.sampled_from([BF16, np.float16]), sdtype=st.sampled_from([np.float32, BF16, np.float16]),
       odtype=st.sampled_from([np.float32, BF16, np.float16, np.int8]), deq=st.sampled_from(["float32", "int64"]),
       bias=st.sampled_from(["quant", "float", None]))
def test_static_linear_matches_golden(seed, kind, lead, k, n, xdtype, sdtype, odtype, deq, bias):
    rng = np.random.default_rng(seed)
    x = floats(rng, lead + (k,), xdtype, kind)
    w = ints(rng, (n, k), np.int8)
    s_in = np.array([rng.uniform(0.001, 0.1)]).astype(sdtype)
    o_in = np.array([rng.integers(-20, 20)]).astype(odtype)
    deq_f = (rng.random(n) * 1e-4).astype(np.float32)
    deq_scale = w8a8.fp32_bits_to_int64(deq_f) if deq == "int64" else deq_f
    qb = rng.integers(-(2**16), 2**16, n).astype(np.int32) if bias == "quant" else None
    fb = floats(rng, (n,), np.float32) if bias == "float" else None
    check_same("w8a8_static_linear", x, w, input_scale=s_in, input_offset=o_in, deq_scale=deq_scale, quant_bias=qb,
               bias=fb)


def test_linear_row_blocks(monkeypatch):
    # The Linear paths run in row blocks (bit-identical: every stage is row-wise). Force 64-row blocks.
    from backends.torch_cpu import linear

    monkeypatch.setattr(linear, "_BLOCK_BYTES", 1)
    rng = np.random.default_rng(11)
    x = floats(rng, (3, 67, 24), BF16, "mixed")  # 201 rows -> blocks of 64, 64, 64, 9
    w = ints(rng, (19, 24), np.int8)
    ws = (rng.random(19) * 1e-2).astype(np.float32)
    check_same("w8a8_dynamic_linear", x, w, ws, bias=floats(rng, (19,), BF16))
    kw = dict(input_scale=np.float32([0.02]), input_offset=np.float32([3]), deq_scale=ws)
    check_same("w8a8_static_linear", x, w, quant_bias=rng.integers(-999, 999, 19).astype(np.int32), **kw)
    # A quant_bias that can overflow int32 keeps one block, so the OverflowError names the golden's index.
    qb = np.zeros(19, np.int32)
    qb[5] = 2**31 - 1
    xs = np.zeros((201, 24), BF16)
    xs[150] = 1.0  # offset 0: row 150 -> x_q = rint(1 / 0.02) = 50, the rest 0: acc + qb overflows at (150, 5) only
    w1 = np.ones((19, 24), np.int8)
    kw["input_offset"] = np.float32([0])
    check_raises(OverflowError, r"output index \(150, 5\)", "w8a8_static_linear", xs, w1, quant_bias=qb, **kw)


def test_static_linear_load_time_infinities():
    # 1 / 1e-39 overflows to Inf in fp16 (and bf16 keeps fp32's range: 1e39 -> Inf too): the golden's
    # quantize refuses the Inf reciprocal; a float bias of 1e5 becomes Inf in fp16.
    x = np.ones((2, 8), np.float16)
    w = np.ones((3, 8), np.int8)
    deq = np.float32([1e-3] * 3)
    for dtype in (np.float16, BF16):
        check_same("w8a8_static_linear", x.astype(dtype), w, input_scale=np.float32([1e-39]),
                   input_offset=np.float32([0]), deq_scale=deq, quant_bias=None)
    check_same("w8a8_static_linear", x, w, input_scale=np.float32([1e-6]), input_offset=np.float32([1e5]),
               deq_scale=deq, quant_bias=None)
    check_same("w8a8_static_linear", x.astype(BF16), w, input_scale=np.float32([0.1]), input_offset=np.float32([0]),
               deq_scale=deq, quant_bias=None, bias=np.float32([3e38, 1, 1]))
    check_same("w8a8_dynamic_linear", x, w, np.float32([1e-3] * 3), bias=np.float32([1e5, 0, 0]))
    check_same("w8a8_dynamic_linear", x.astype(BF16), w, np.float32([3.4e38] * 3))


# -- the qlinear path (forced: the reference kernel is slow without AMX, so shapes stay tiny) -------------

@pytest.fixture(scope="module")
def qlinear_backend():
    from backends.torch_cpu import runtime

    if not runtime.has_qlinear():
        pytest.skip("this torch has no onednn.qlinear_pointwise")
    return TorchCpuBackend(gemm="qlinear")


def test_qlinear_path_bit_identical(qlinear_backend):
    rng = np.random.default_rng(5)
    x = floats(rng, (5, 40), BF16)
    w = ints(rng, (9, 40), np.int8)
    ws = (rng.random(9) * 1e-2).astype(np.float32)
    b = floats(rng, (9,), BF16)
    prepared = qlinear_backend.prepare("w8a8_dynamic_linear", x, w, ws, bias=b)
    assert prepared.notes["gemm"] == "qlinear"
    assert_bits(prepared(), w8a8.w8a8_dynamic_linear(x, w, ws, bias=b))
    x1 = ints(rng, (2, 3, 40), np.int8)
    x2 = ints(rng, (40, 9), np.int8)
    for kw in ({"output_dtype": "bfloat16"}, {"output_dtype": "float16"},
               {"output_dtype": "bfloat16", "pertoken_scale": np.float32([0.5, 2, 3])},
               {"output_dtype": "int8", "offset": np.float32([1.5])}):
        got = qlinear_backend.call("quant_matmul", x1 if "pertoken_scale" not in kw else x1[0], x2, ws, **kw)
        want = w8a8.quant_matmul(x1 if "pertoken_scale" not in kw else x1[0], x2, ws, **kw)
        assert_bits(got, want, str(kw))


def test_qlinear_weight_is_prepacked_and_probed(qlinear_backend):
    from backends.torch_cpu.gemm import Int8Weight

    w = torch.randint(-128, 128, (40, 9), dtype=torch.int8)
    loaded = Int8Weight.load(w, "qlinear")
    assert loaded.packed is not None and loaded.note == ""
    assert loaded.absmax == max(-int(w.min()), int(w.max()))  # max |w| (int8 abs would wrap -128)
    assert Int8Weight.load(w, "int_mm").packed is None


# -- bad input: rejected like the golden (type and message) ------------------------------------------------

_X = np.ones((3, 16), BF16)
_H = np.ones((3, 16), np.float16)
_F = np.ones((3, 16), np.float32)
_I8 = np.ones((3, 16), np.int8)
_W = np.ones((16, 5), np.int8)
_S5 = np.full(5, 0.01, np.float32)
_LW = np.ones((5, 16), np.int8)  # a checkpoint weight [N, K]
_NAN_X = _X.copy()
_NAN_X[1, 2] = np.nan
_INF_H = _H.copy()
_INF_H[2, 0] = np.inf

BAD = [
    # dynamic quantizers
    ("dynamic_quant", (_F,), {}),
    ("dynamic_quant", (np.ones(16, BF16),), {}),
    ("dynamic_quant", (np.ones((1,) * 9, BF16),), {}),
    ("dynamic_quant", (_I8,), {}),
    ("dynamic_quant", (_X,), {"dst_type": "int16"}),
    ("dynamic_quant", (_X,), {"dst_type": "bogus"}),
    ("dynamic_quant", (np.ones((3, 7), BF16),), {"dst_type": "int4"}),
    ("dynamic_quant", (_NAN_X,), {}),
    ("dynamic_quant", (_INF_H,), {}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones(16, np.float16)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones(15, BF16)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.full(16, np.nan, BF16)}),
    ("dynamic_quant", (_X,), {"group_index": np.array([3], np.int32)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones((1, 16), BF16), "group_index": np.array([3], np.int64)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones((1, 16), BF16), "group_index": np.array([[3]], np.int32)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones((1025, 16), BF16), "group_index": np.full(1025, 3, np.int32)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones((2, 16), BF16), "group_index": np.array([2, 1], np.int32)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones((2, 16), BF16), "group_index": np.array([1, 2], np.int32)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones((2, 16), BF16), "group_index": np.array([-1, 3], np.int32)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones((2, 16), BF16), "group_index": np.array([3], np.int32)}),
    ("dynamic_quant", (_X,), {"smooth_scales": np.ones((2, 16), BF16), "group_index": np.empty(0, np.int32)}),
    ("dynamic_quant", (), {}),
    ("dynamic_quant", (_X,), {"dst": "int8"}),
    ("dynamic_quant_asymmetric", (_F,), {}),
    ("dynamic_quant_asymmetric", (_NAN_X,), {}),
    ("dynamic_quant_asymmetric", (_X,), {"smooth_scales": np.ones((2, 16), BF16), "group_index": np.array([1, 2], np.int32)}),
    # quantize
    ("quantize", (_I8, np.float32([1.0])), {}),
    ("quantize", (np.array(1.0, np.float32), np.float32([1.0])), {}),
    ("quantize", (_F, np.float32([1.0])), {"dtype": "float32", "div_mode": False}),
    ("quantize", (_F, np.float32([1.0])), {"dtype": "uint8", "div_mode": False}),
    ("quantize", (_F, np.float32([1.0])), {"dtype": "int4"}),
    ("quantize", (_F, np.float32([1.0])), {"div_mode": 1}),
    ("quantize", (_F, np.float32([1.0])), {"axis": 1.5}),
    ("quantize", (_F, np.float32([1.0])), {"axis": -3, "div_mode": False}),
    ("quantize", (np.ones(8, np.float32), np.float32([1.0])), {"axis": -2, "div_mode": False}),
    ("quantize", (_F, np.float32([1.0])), {"axis": 2}),
    ("quantize", (_X, np.float32([1.0])), {"div_mode": False, "axis": -1}),
    ("quantize", (_F, np.float16([1.0])), {}),
    ("quantize", (_F, np.ones(5, np.float32)), {"axis": 1}),
    ("quantize", (_F, np.ones((3, 16), np.float32)), {"axis": 1}),
    ("quantize", (_F, np.ones(16, np.float32), np.ones(16, np.int64)), {"axis": 1}),
    ("quantize", (_F, np.ones(16, np.float32), np.ones(5, np.int8)), {"axis": 1}),
    ("quantize", (_F, np.ones(16, np.float32), np.ones(16, np.float16)), {"axis": -1, "div_mode": False}),
    ("quantize", (_F * np.nan, np.float32([1.0])), {}),
    ("quantize", (_F, np.float32([np.inf])), {}),
    ("quantize", (_F, np.float32([1.0]), np.float32([np.nan])), {}),
    ("quantize", (_F, np.float32([1.0]), np.float32([np.nan])), {"div_mode": False, "axis": -1}),
    ("quantize", (np.ones((2, 7), np.float32), np.float32([1.0])), {"dtype": "int4", "div_mode": False, "axis": -1}),
    # dequantize, anti_quant
    ("dequantize", (_F, np.float32([1.0])), {}),
    ("dequantize", (_I8, np.float32([1.0])), {"output_dtype": "int8"}),
    ("dequantize", (_I8, np.int32([1])), {}),
    ("dequantize", (_I8, np.ones(16, np.float32)), {"axis": None}),
    ("dequantize", (_I8, np.ones(16, np.float32)), {"axis": 5}),
    ("dequantize", (_I8, np.ones(16, np.float32)), {"axis": "a"}),
    ("dequantize", (_I8, np.ones(7, np.float32)), {}),
    ("dequantize", (_I8, np.ones(16, np.float32), np.ones(7, np.float32)), {}),
    ("dequantize", (_I8, np.ones(3, np.float32), np.ones(4, np.float32)), {"axis": None}),
    ("anti_quant", (_I8, np.float32([1.0])), {"src_dtype": "int16"}),
    ("anti_quant", (_I8, np.float32([1.0])), {"src_dtype": "foo"}),
    ("anti_quant", (_I8, np.float32([1.0])), {"src_dtype": "int4"}),
    ("anti_quant", (np.ones((3, 2), np.int32), np.float32([1.0])), {}),
    ("anti_quant", (_I8, np.float32([1.0])), {"dst_dtype": "float32"}),
    ("anti_quant", (_I8, np.ones((1, 16), np.float32)), {}),
    ("anti_quant", (_I8, np.ones(15, np.float32)), {}),
    ("anti_quant", (_I8, np.ones(16, np.float16)), {}),
    ("anti_quant", (_I8, np.ones(16, np.float32)), {"offset": np.ones(16, BF16)}),
    ("anti_quant", (_I8, np.ones(16, np.float32)), {"offset": np.ones(1, np.float32)}),
    ("anti_quant", (np.ones((3, 2), np.int32), np.ones(15, np.float32)), {"src_dtype": "int4"}),
    # trans_quant_param
    ("trans_quant_param", (np.float16([1.0]),), {}),
    ("trans_quant_param", (np.ones((1, 1, 2), np.float32),), {}),
    ("trans_quant_param", (np.float32([1.0]),), {"round_mode": 2}),
    ("trans_quant_param", (np.ones(3, np.float32), np.ones(2, np.float32)), {}),
    ("trans_quant_param", (np.ones((2, 3), np.float32), np.ones((1, 3), np.float32)), {}),
    ("trans_quant_param", (np.ones(3, np.float32), np.ones(3, np.float64)), {}),
    # int_matmul
    ("int_matmul", (_F, _W), {}),
    ("int_matmul", (_I8, _W.astype(np.int64)), {}),
    ("int_matmul", (np.ones(16, np.int8), _W), {}),
    ("int_matmul", (_I8, np.ones((15, 5), np.int8)), {}),
    ("int_matmul", (np.ones((2, 3, 16), np.int8), np.ones((4, 16, 5), np.int8)), {}),
    # quant_matmul
    ("quant_matmul", (_I8, _W, _S5), {"output_dtype": "float32"}),
    ("quant_matmul", (_I8.astype(np.int32), _W, _S5), {}),
    ("quant_matmul", (np.ones(16, np.int8), _W, _S5), {}),
    ("quant_matmul", (np.ones((1,) * 5 + (3, 16), np.int8), _W, _S5), {}),
    ("quant_matmul", (_I8, np.ones((15, 5), np.int8), _S5), {}),
    ("quant_matmul", (np.ones((2, 3, 16), np.int8), np.ones((4, 16, 5), np.int8), _S5), {}),
    ("quant_matmul", (_I8, _W, _S5.astype(np.float16)), {}),
    ("quant_matmul", (_I8, _W, _S5), {"pertoken_scale": np.ones(3, np.float32)}),
    ("quant_matmul", (_I8, _W, _S5), {"pertoken_scale": np.ones(4, np.float32), "output_dtype": "bfloat16"}),
    ("quant_matmul", (_I8, _W, _S5), {"pertoken_scale": np.ones((3, 1), np.float32), "output_dtype": "bfloat16"}),
    ("quant_matmul", (_I8, _W, _S5.astype(BF16)), {"output_dtype": "float16"}),
    ("quant_matmul", (_I8, _W, _S5.astype(BF16)), {"pertoken_scale": np.ones(3, np.float32), "output_dtype": "float16"}),
    ("quant_matmul", (np.ones((1, 65536), np.int8), np.ones((65536, 1), np.int8), np.float32([1.0])), {}),
    ("quant_matmul", (_I8, _W, np.ones((2, 5), np.float32)), {"output_dtype": "bfloat16"}),
    ("quant_matmul", (_I8, _W, np.ones(4, np.float32)), {"output_dtype": "bfloat16"}),
    ("quant_matmul", (_I8, _W, _S5), {"offset": np.ones(5, np.float32), "output_dtype": "bfloat16"}),
    ("quant_matmul", (_I8, _W, _S5), {"offset": np.ones(4, np.float32)}),
    ("quant_matmul", (_I8, _W, _S5), {"offset": np.ones(5, np.float64)}),
    ("quant_matmul", (_I8, _W, _S5), {"bias": np.ones(5, np.float32), "output_dtype": "float16"}),
    ("quant_matmul", (_I8, _W, _S5), {"bias": np.ones(4, np.int32)}),
    ("quant_matmul", (_I8, _W, _S5), {"bias": np.ones((2, 5), np.int32)}),
    ("quant_matmul", (_I8, _W, _S5 * np.nan), {"output_dtype": "bfloat16"}),
    ("quant_matmul", (_I8, _W, _S5), {"pertoken_scale": np.float32([1, np.inf, 1]), "output_dtype": "bfloat16"}),
    ("quant_matmul", (_I8, _W, _S5), {"bias": np.full(5, np.inf, np.float32), "output_dtype": "bfloat16"}),
    ("quant_matmul", (_I8, _W, _S5), {"offset": np.float32([np.nan])}),
    ("quant_matmul", (_I8, _W, _S5), {"output_dtype": "nope"}),
    ("quant_matmul", (_I8, _W, w8a8.trans_quant_param(_S5)), {"output_dtype": "int32"}),
    ("quant_matmul", (np.ones((1, 65536), np.int8), np.ones((65536, 1), np.int8), np.ones((1, 1), np.float32)),
     {"pertoken_scale": np.ones(1, np.float32), "output_dtype": "bfloat16"}),
    ("quant_matmul", (np.ones((1, 2), np.int8), np.ones((2, 65536), np.int8), np.float32([1.0])), {"output_dtype": "int32"}),
    # layout
    ("format_cast_nz", (np.ones(16, np.int8),), {}),
    ("format_cast_nz", ([[1, 2], [3, 4]],), {}),
    ("nz_to_nd", (np.ones((1, 1, 16, 32), np.int8), (16, 33)), {}),
    ("nz_to_nd", (np.ones((1, 1, 16, 32), np.int8), (16,)), {}),
    ("nz_to_nd", (np.ones((1, 16, 32), np.int8), (16, 32)), {}),
    ("nz_to_nd", (np.ones((1, 1, 16, 32), np.int8), None), {}),
    # Linear paths
    ("w8a8_dynamic_linear", (_F, _LW, _S5), {}),
    ("w8a8_dynamic_linear", (_X, _LW.astype(np.int32), _S5), {}),
    ("w8a8_dynamic_linear", (_X, np.ones(16, np.int8), _S5), {}),
    ("w8a8_dynamic_linear", (_X, np.ones((5, 15), np.int8), _S5), {}),
    ("w8a8_dynamic_linear", (_X, _LW, np.ones(4, np.float32)), {}),
    ("w8a8_dynamic_linear", (_X, _LW, np.ones((5, 2), np.float32)), {}),
    ("w8a8_dynamic_linear", (_X, _LW, _S5.astype(np.float16)), {}),
    ("w8a8_dynamic_linear", (_X, _LW, _S5), {"bias": np.ones(4, np.float32)}),
    ("w8a8_dynamic_linear", (_X, _LW, _S5), {"bias": np.ones(5, np.int32)}),
    ("w8a8_dynamic_linear", (_NAN_X, _LW, _S5), {}),
    ("w8a8_dynamic_linear", (_X, _LW, _S5 * np.nan), {}),
    ("w8a8_dynamic_linear", (np.ones((3, 0), BF16), np.ones((5, 0), np.int8), _S5), {}),
    ("w8a8_static_linear", (_X, _LW), {"input_scale": np.ones(2, np.float32), "input_offset": np.zeros(1, np.float32),
                                       "deq_scale": _S5, "quant_bias": None}),
    ("w8a8_static_linear", (_X, _LW), {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.int32),
                                       "deq_scale": _S5, "quant_bias": None}),
    ("w8a8_static_linear", (_X, _LW), {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.float32),
                                       "deq_scale": _S5.astype(np.float16), "quant_bias": None}),
    ("w8a8_static_linear", (_X, _LW), {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.float32),
                                       "deq_scale": np.ones(4, np.float32), "quant_bias": None}),
    ("w8a8_static_linear", (_X, _LW), {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.float32),
                                       "deq_scale": _S5, "quant_bias": np.ones(5, np.float32)}),
    ("w8a8_static_linear", (_X, _LW), {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.float32),
                                       "deq_scale": _S5, "quant_bias": np.ones(5, np.int32), "bias": _S5}),
    ("w8a8_static_linear", (_X, _LW), {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.float32),
                                       "deq_scale": w8a8.fp32_bits_to_int64(_S5), "quant_bias": None}),
    ("w8a8_static_linear", (_H, _LW), {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.float32),
                                       "deq_scale": _S5, "quant_bias": None, "bias": _S5}),
    ("w8a8_static_linear", (_NAN_X, _LW), {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.float32),
                                           "deq_scale": _S5, "quant_bias": None}),
    ("w8a8_static_linear", (_X, _LW), {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.float32),
                                       "deq_scale": _S5 * np.inf, "quant_bias": None}),
    ("w8a8_static_linear", (np.ones((1, 65536), BF16), np.ones((2, 65536), np.int8)),
     {"input_scale": np.ones(1, np.float32), "input_offset": np.zeros(1, np.float32),
      "deq_scale": np.ones(2, np.float32), "quant_bias": None}),
    ("w8a8_static_linear", (_X, _LW), {"input_scale": np.ones(1, np.float32)}),
]


@pytest.mark.parametrize("op, args, kwargs", BAD, ids=[f"{i}-{case[0]}" for i, case in enumerate(BAD)])
def test_bad_input_rejected_like_the_golden(op, args, kwargs):
    want = outcome(GOLDEN, op, args, kwargs)
    assert want[0] == "raise", f"the golden accepted this call of {op} (the case is wrong)"
    got = outcome(TC, op, args, kwargs)
    assert got[0] == "raise", f"{op}: torch-cpu accepted a call the golden rejects ({want[1].__name__}: {want[2]})"
    assert got[1:] == want[1:]
