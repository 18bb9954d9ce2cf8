"""torch-cpu against the golden, bit for bit, on every low-bit op (backends/torch_cpu/lowbit_*.py).

The reference is the golden run with the numerics torch-cpu declares (:data:`w8a8.ASCEND`): every
output must have the golden's dtype, shape and bytes (NaN bit patterns and signed zeros included),
and every call the golden rejects must be rejected with the same exception type and message.

* Hypothesis draws each op's cases from the conformance registry
  (``conformance.registry.get(op).params()``) and judges them with
  ``conformance.evaluate.run_case`` (the conformance runner's unit of work) and a byte compare.
* Named semantic cases write the expected bits out and derive them by hand in comments: the zero
  block, +-max and saturation, E4M3 subnormals and ties, NaN / Inf, (6, 8) under FLOOR vs RCEIL,
  the E2M1 ties, the INT4 group rules, the FP4 / int4 / swizzle packing layouts.
* Paths the registry does not draw: int4 weights packed along K, the int64 antiquant scale, int8
  requant, A4W4 without a token scale, A8W4 per group, MXFP8 E5M2, chunked FP8 GEMMs, bad input.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

import backends
import w8a8
from backends.numpy_backend import NumpyBackend
from backends.testing import BitwiseChecker, outcome  # noqa: F401 (outcome: used by some tests)
from backends.testing import assert_bits as _assert_bits
from backends.ops import LOWBIT_OPS
from conformance import registry
from conformance.evaluate import run_case

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

TC = backends.get("torch-cpu")
GOLDEN = NumpyBackend(numerics=TC.numerics)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
BF16 = np.dtype(ml_dtypes.bfloat16)


# -- comparison helpers (backends.testing) ---------------------------------------------------------

CHECK = BitwiseChecker(TC)
check_same = CHECK.same
check_raises = CHECK.raises


def assert_bits(got, want, what="result"):
    _assert_bits(got, want, what, "torch-cpu")

def both(op, *args, **kwargs):
    """The golden's result after checking that torch-cpu gives the same bits."""
    out = check_same(op, *args, **kwargs)
    assert out is not None, f"{op} raised"
    return out


def f32(*v):
    return np.array(v, np.float32)


# -- the backend ------------------------------------------------------------------------------------

def test_every_lowbit_op_is_implemented():
    assert set(LOWBIT_OPS) <= set(TC.ops())


@pytest.mark.parametrize("op", LOWBIT_OPS)
@given(data=st.data())
def test_registry_cases_match_golden(op, data):
    spec = registry.get(op)
    params = data.draw(spec.params(), label="params")
    record = run_case(spec, params, TC, attribute_failures=False)
    assert record["status"] in ("pass", "mistrusted", "refused"), (record["status"], record.get("note"), params)
    args, kwargs = spec.build(params)
    check_same(op, *args, **kwargs)


def test_decode_tables_are_built_once_and_equal_torch_casts():
    from backends.torch_cpu import lowbit_codec as codec

    assert codec.tables() is codec.tables()
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        by_table = codec.decode_fp8(codes.view(dtype))
        by_cast = codes.view(dtype).to(torch.float32)
        nan = torch.isnan(by_cast)
        assert torch.equal(torch.isnan(by_table), nan)
        assert torch.equal(by_table[~nan].view(torch.int32), by_cast[~nan].view(torch.int32))


def test_encoders_match_the_golden_on_random_bit_patterns():
    # 200k random fp32 bit patterns (NaNs of both signs, Inf, subnormals, huge values) plus every
    # E2M1 midpoint and its fp32 neighbours.
    from backends.torch_cpu import lowbit_codec as codec
    from w8a8.lowbit.minifloat import float_to_e2m1, float_to_fp8

    rng = np.random.default_rng(7)
    mids = f32(0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
    x = np.concatenate([rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        mids, -mids, np.nextafter(mids, np.float32(9)), np.nextafter(mids, np.float32(-9))])
    t = torch.from_numpy(x)
    with np.errstate(all="ignore"):
        assert np.array_equal(codec.encode_e2m1(t).numpy(), float_to_e2m1(x))
        for name in ("e4m3", "e5m2"):
            assert np.array_equal(codec.encode_fp8(t, name).view(torch.uint8).numpy(),
                                  float_to_fp8(x, name).view(np.uint8)), name


# -- MX: semantic cases ---------------------------------------------------------------------------------

def test_mx_zero_block_gets_the_smallest_scale():
    # An all-zero block: amax 0 -> byte 0 (2^-127), zero codes (torchao, microxcaling).
    data, scale = both("mx_quantize", np.zeros((2, 64), np.float32))
    assert np.array_equal(scale, np.zeros((2, 2), np.uint8)) and not data.any()


def test_mx_floor_clips_6_to_8_and_rceil_does_not():
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = (7.5, 6.5, 3.0, 0.3)
    # FLOOR: b = floor(log2 7.5) - 2 + 127 = 127, X = 1: 7.5 and 6.5 clip to 6 (code 7); 3 -> code 5;
    # 0.3 is above the 0.25 midpoint -> 0.5 (code 1). Low nibble first: 0x77, 0x15.
    data, scale = both("mx_quantize", x, scale_mode="floor")
    assert scale[0, 0] == 127 and data[0, :2].tolist() == [0x77, 0x15] and not data[0, 2:].any()
    # RCEIL: 7.5 * fp32(1/6) = 1.25 -> X = 2^ceil(log2 1.25) = 2, b = 128: 3.75 -> 4 (code 6),
    # 3.25 -> 3 (code 5), 1.5 (code 3), 0.15 is below 0.25 -> 0. Bytes 0x56, 0x03.
    data, scale = both("mx_quantize", x, scale_mode="rceil")
    assert scale[0, 0] == 128 and data[0, :2].tolist() == [0x56, 0x03]


def test_mx_e2m1_ties_go_to_the_even_code():
    # amax 6 -> X = 1. Ties: 0.25 -> 0 (code 0), 0.75 -> 1 (code 2), 1.25 -> 1 (2), 1.75 -> 2 (4),
    # 2.5 -> 2 (4), 3.5 -> 4 (6), 5 -> 4 (6); 6 -> code 7; -0.25 -> -0 (code 8); -5 -> -4 (code 14).
    x = np.zeros((1, 32), np.float32)
    x[0, :10] = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -5.0)
    data, scale = both("mx_quantize", x)
    assert scale[0, 0] == 127
    assert data[0, :5].tolist() == [0x20, 0x42, 0x64, 0x76, 0xE8]


def test_mx_max_and_saturation():
    # E4M3 block with amax 448: floor(log2 448) - 8 = 0 -> X = 1; 448 -> 0x7E, -448 -> 0xFE.
    # E5M2 with amax 57344 = 1.75 * 2^15: X = 1; 57344 -> 0x7B, -57344 -> 0xFB.
    x = np.zeros((1, 32), np.float32)
    x[0, :2] = (448.0, -448.0)
    data, scale = both("mx_quantize", x, elem_dtype="e4m3")
    assert scale[0, 0] == 127 and data.view(np.uint8)[0, :2].tolist() == [0x7E, 0xFE]
    x[0, :2] = (57344.0, -57344.0)
    data, scale = both("mx_quantize", x, elem_dtype="e5m2")
    assert data.dtype == E5M2 and scale[0, 0] == 127 and data.view(np.uint8)[0, :2].tolist() == [0x7B, 0xFB]
    # MXFP4 at the top of the E8M0 range: amax 3e38 -> b = 127 + 127 - 2 = 252, elements saturate at 6.
    x[0, :2] = (3e38, -3e38)
    data, scale = both("mx_quantize", x)
    assert scale[0, 0] == 252 and data[0, 0] == 0xF7


def test_mx_nan_and_inf_blocks():
    # A block holding Inf or NaN gets the E8M0 NaN (255) and zero codes; the other block (all ones)
    # gets b = floor(log2 1) - emax + 127 (emax: E2M1 2, E4M3 8, E5M2 15) and decodes to 1 exactly.
    x = np.ones((2, 64), np.float32)
    x[0, 3], x[1, 40] = np.inf, np.nan
    for elem, emax in (("e2m1", 2), ("e4m3", 8), ("e5m2", 15)):
        data, scale = both("mx_quantize", x, elem_dtype=elem)
        assert scale.tolist() == [[255, 127 - emax], [127 - emax, 255]]
        deq = both("mx_dequantize", data, scale, elem_dtype=elem)
        assert np.isnan(deq[0, :32]).all() and np.isnan(deq[1, 32:]).all() and (deq[0, 32:] == 1).all()
        for out in ("bfloat16", "float16"):
            both("mx_dequantize", data, scale, elem_dtype=elem, output_dtype=out)


def test_mx_subnormal_inputs_and_bf16():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((7, 96)) * 1e-39).astype(np.float32)  # fp32 subnormals
    for mode in ("floor", "ceil", "even", "rceil"):
        for elem in ("e2m1", "e4m3", "e5m2"):
            both("mx_quantize", x, elem_dtype=elem, scale_mode=mode)
            both("mx_quantize", x.astype(BF16), elem_dtype=elem, scale_mode=mode, block_size=16)


@pytest.mark.parametrize("a_elem, b_elem", [("e2m1", "e2m1"), ("e4m3", "e2m1"), ("e5m2", "e5m2"), ("e4m3", "e5m2")])
@pytest.mark.parametrize("out", ["float32", "bfloat16", "float16"])
def test_mx_matmul_mixed_elements(a_elem, b_elem, out):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((17, 96)).astype(np.float32)
    b = rng.standard_normal((7, 96)).astype(np.float32)
    ad, as_ = w8a8.mx_quantize(a, elem_dtype=a_elem)
    bd, bs = w8a8.mx_quantize(b, elem_dtype=b_elem, scale_mode="rceil")
    both("mx_matmul", ad, as_, bd, bs, elem_dtype=a_elem, b_elem_dtype=b_elem, output_dtype=out)
    as_[3, 1] = 255  # a NaN scale: row 3 is NaN
    y = both("mx_matmul", ad, as_, bd, bs, elem_dtype=a_elem, b_elem_dtype=b_elem, output_dtype=out)
    assert np.isnan(y[3].astype(np.float32)).all()


def test_mx_e8m0_dtype_scale_accepted():
    x = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)
    d, s = w8a8.mx_quantize(x)
    both("mx_dequantize", d, s.view(ml_dtypes.float8_e8m0fnu), output_dtype="bfloat16")


# -- NVFP4 ---------------------------------------------------------------------------------------------

def test_nvfp4_block_of_six_both_conventions():
    # S = 1 (gs = 1), amax 6: s_b = e4m3(6 / 6) = 1. Codes: 6 -> 7, 3 -> 5, -1.5 -> 0xB, 0.5 -> 1;
    # low nibble first: 0x57, 0x1B.
    x = np.zeros((1, 16), np.float32)
    x[0, :4] = (6.0, 3.0, -1.5, 0.5)
    for kw in ({"per_tensor_scale": np.float32(1)}, {"global_scale": np.float32(1)}):
        data, s = both("nvfp4_quantize", x, **kw)
        assert data[0, :2].tolist() == [0x57, 0x1B] and s.view(np.uint8)[0, 0] == 0x38  # e4m3 1.0
        assert np.array_equal(both("nvfp4_dequantize", data, s, **kw), x)


def test_nvfp4_zero_block_scale_floor_and_vllm_zero_scale():
    # torchao convention: an all-zero block's scale is clamped up to 2^-6 (e4m3 0x08);
    # vLLM convention: no lower clamp, s_b = 0 and r = 0 (codes 0).
    x = np.zeros((2, 32), np.float32)
    x[1, 16:] = 1.0
    data, s = both("nvfp4_quantize", x, per_tensor_scale=np.float32(1 / 2688))
    assert s.view(np.uint8)[0].tolist() == [0x08, 0x08]
    data, s = both("nvfp4_quantize", x, global_scale=np.float32(2688))
    assert s.view(np.uint8)[0].tolist() == [0, 0] and not data[0].any()


def test_nvfp4_extreme_tensor_scales():
    # A tiny S makes S * s_b underflow to 0 for small blocks: x / 0 -> Inf (saturates to 6) or NaN
    # (0/0: E2M1 of a NaN, code 0 or 8 by its sign bit, as ml_dtypes); both sides must agree.
    x = np.zeros((3, 32), np.float32)
    x[0, :3] = (1.0, -1.0, 0.0)
    x[2] = 1e-3
    for t in (np.float32(1e-45), np.float32(1e-40), np.float32(3e38)):
        both("nvfp4_quantize", x, per_tensor_scale=t)
        both("nvfp4_quantize", x, global_scale=t)
    d, s = w8a8.nvfp4_quantize(x, per_tensor_scale=np.float32(1))
    for out in ("float32", "bfloat16", "float16"):
        both("nvfp4_dequantize", d, s, per_tensor_scale=np.float32(3e38), output_dtype=out)  # overflow -> Inf
        both("nvfp4_dequantize", d, s, global_scale=np.float32(1e-30), output_dtype=out)


def test_nvfp4_matmul_vllm_alpha_and_outputs():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((9, 64)).astype(np.float32)
    b = rng.standard_normal((5, 64)).astype(np.float32)
    ga, gb = w8a8.nvfp4_global_scale(np.abs(a).max()), w8a8.nvfp4_global_scale(np.abs(b).max())
    ad, as_ = w8a8.nvfp4_quantize(a, global_scale=ga)
    bd, bs = w8a8.nvfp4_quantize(b, global_scale=gb)
    for out in ("bfloat16", "float16", "float32"):
        both("nvfp4_matmul", ad, as_, bd, bs, np.float32(1) / (ga * gb), output_dtype=out)


def test_swizzle_positions_follow_the_formula():
    # Scale (r, c) of an [M, S] matrix lands at flat offset
    # ((r//128 * Sp/4 + c//4) * 32 + r%32) * 16 + (r%128)//32 * 4 + c%4 (Mp, Sp padded to 128, 4).
    m, s = 130, 5
    scale = (np.arange(m * s, dtype=np.float32) + 1).reshape(m, s).astype(E4M3)
    out = both("swizzle_block_scales", scale)
    mp, sp = 256, 8
    assert out.shape == (mp, sp) and out.dtype == E4M3
    flat = out.view(np.uint8).reshape(-1)
    r, c = np.meshgrid(np.arange(m), np.arange(s), indexing="ij")
    pos = ((r // 128 * (sp // 4) + c // 4) * 32 + r % 32) * 16 + (r % 128) // 32 * 4 + c % 4
    assert np.array_equal(flat[pos], scale.view(np.uint8))
    assert np.count_nonzero(flat) == np.count_nonzero(scale.view(np.uint8))  # the padding is zero


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.int64, BF16])
def test_swizzle_any_element_width_and_batch(dtype):
    x = np.arange(2 * 3 * 129 * 6).reshape(2, 3, 129, 6).astype(dtype)
    both("swizzle_block_scales", x)


def test_swizzle_wide_elements_unsupported():
    with pytest.raises(backends.Unsupported):
        TC.call("swizzle_block_scales", np.zeros((4, 4), np.complex128))


# -- FP8 block ---------------------------------------------------------------------------------------

def test_fp8_subnormals_ties_and_max():
    # amax 448 -> s = 448 / 448 = 1, codes are the E4M3 RNE of the values themselves:
    # 448 -> 0x7E, -448 -> 0xFE, 2^-9 (smallest subnormal) -> 0x01, 2^-10 (tie 0 / 2^-9) -> 0x00,
    # 3 * 2^-10 (tie 2^-9 / 2^-8) -> 0x02, 0 -> 0x00, -0 -> 0x80, 1.0625 (tie 1 / 1.125) -> 0x38,
    # 1.1875 (tie 1.125 / 1.25) -> 0x3A, 17 (tie 16 / 18) -> 0x58, 19 (tie 18 / 20) -> 0x5A.
    row = f32(448, -448, 2**-9, 2**-10, 3 * 2**-10, 0.0, -0.0, 1.0625, 1.1875, 17, 19)
    want = [0x7E, 0xFE, 0x01, 0x00, 0x02, 0x00, 0x80, 0x38, 0x3A, 0x58, 0x5A]
    for op in ("per_token_group_quant_fp8", "fp8_block_quantize"):
        q, s = both(op, row[None, :])
        assert s.reshape(-1).tolist() == [1.0] and q.view(np.uint8)[0].tolist() == want


def test_fp8_ue8m0_scale_and_zero_blocks():
    # ue8m0: s = 2^ceil(log2(max(amax, 1e-4) / 448)); amax 500 -> 500/448 = 1.116 -> s = 2.
    # An all-zero block: None -> s = 1e-10 / 448, ue8m0 -> max(0, 1e-4) / 448 -> 2^-22; codes 0.
    x = np.zeros((2, 256), np.float32)
    x[0, 0] = 500.0
    q, s = both("per_token_group_quant_fp8", x, scale_fmt="ue8m0")
    assert s[0].tolist() == [2.0, 2.0**-22] and s[1].tolist() == [2.0**-22] * 2
    q, s = both("per_token_group_quant_fp8", x)
    assert s[1, 0] == np.float32(np.float32(1e-10) / np.float32(448))


@pytest.mark.parametrize("shape, block", [((1, 1), (128, 128)), ((129, 257), (128, 128)), ((3, 17, 33), (16, 8)),
                                          ((300, 5), (7, 1))])
def test_fp8_block_odd_shapes(shape, block):
    rng = np.random.default_rng(8)
    w = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(np.float32)
    for fmt in (None, "ue8m0"):
        q, s = both("fp8_block_quantize", w, block_shape=block, scale_fmt=fmt)
        for out in ("bfloat16", "float16", "float32"):
            both("fp8_block_dequantize", q, s, block_shape=block, output_dtype=out)
    both("per_token_group_quant_fp8", w.astype(BF16), 48)


def test_fp8_block_matmul_chunks_and_partial_blocks(monkeypatch):
    from backends.torch_cpu import lowbit_fp

    rng = np.random.default_rng(9)
    a = rng.standard_normal((5, 1000)).astype(np.float32)
    w = rng.standard_normal((131, 1000)).astype(np.float32)
    aq, as_ = w8a8.per_token_group_quant_fp8(a)
    wq, ws = w8a8.fp8_block_quantize(w)
    want = both("fp8_block_matmul", aq, as_, wq, ws)
    monkeypatch.setattr(lowbit_fp, "_GEMM_CHUNK", 5 * 131 * 3)  # 3 K-blocks per batched GEMM
    assert_bits(TC.call("fp8_block_matmul", aq, as_, wq, ws), want)
    for out in ("float32", "float16"):
        both("fp8_block_matmul", aq, as_, wq, ws, output_dtype=out)
    both("fp8_block_matmul", aq[:, :0], as_[:, :0], wq[:, :0], ws[:, :0])  # K = 0: zeros


# -- INT4 group-wise ---------------------------------------------------------------------------------

def test_int4_gptq_sym_ties_and_clipping():
    # amax 3.75 -> s = 3.75 / 7.5 = 0.5 (exact in fp16). w / s = 7.5, -7.5, 0.5, 1.5, 2.5, 0, -1, 4;
    # rint (half even): 8 -> clipped to 7, -8, 0, 2, 2, 0, -1, 4.
    w = f32(3.75, -3.75, 0.25, 0.75, 1.25, 0.0, -0.5, 2.0)[None, :]
    q, s, z = both("int4_group_quantize", w, 8)
    assert q.tolist() == [[7, -8, 0, 2, 2, 0, -1, 4]] and s.tolist() == [[0.5]] and z is None
    assert both("int4_group_dequantize", q, s).tolist() == [[3.5, -4, 0, 1, 1, 0, -0.5, 2]]


def test_int4_asym_zero_point():
    # lo = -2.5, hi = 5 -> s = 7.5 / 15 = 0.5, z = rint(2.5 / 0.5) = 5;
    # u = clamp(rint(w / s) + z): -5 + 5 = 0, 10 + 5 = 15, rint(0.5) = 0 -> 5, 2 + 5 = 7.
    w = f32(-2.5, 5.0, 0.25, 1.0)[None, :]
    u, s, z = both("int4_group_quantize", w, 4, scheme="asym")
    assert u.tolist() == [[0, 15, 5, 7]] and s.tolist() == [[0.5]] and z.tolist() == [[5]]
    both("int4_group_dequantize", u, s, z, output_dtype="bfloat16")


def test_int4_zero_group_and_scale_limits():
    # An all-zero group takes GPTQ's [-1, 1] range (codes 0; asym u = z = 8). A group whose scale
    # rounds to 0 in fp16 (amax 1e-9) saturates and dequantizes to 0; one whose scale overflows fp16
    # is refused with the golden's message (group index named).
    w = np.zeros((3, 64), np.float32)
    w[1, :32] = 1e-9
    w[1, 33] = -1e-9
    for scheme in ("gptq_sym", "absmax_sym", "asym"):
        both("int4_group_quantize", w, 32, scheme=scheme)
    w[2, 40] = 1e6
    check_same("int4_group_quantize", w, 32, scale_dtype="float16")
    with pytest.raises(ValueError, match=r"scale overflow at group \(2, 1\)"):
        TC.call("int4_group_quantize", w, 32)


@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 7, 17]), groups=st.integers(0, 3),
       g=st.sampled_from([1, 8, 32]), lead=st.sampled_from([(), (2,)]),
       dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
       scheme=st.sampled_from(["gptq_sym", "absmax_sym", "asym"]),
       sdt=st.sampled_from(["float16", "bfloat16", "float32"]))
def test_int4_group_round_trip_any_shape(seed, n, groups, g, lead, dtype, scheme, sdt):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(lead + (n, g * groups)) * 10.0 ** rng.uniform(-3, 2)).astype(np.float32)
    w = w.astype(w8a8.dtypes.resolve(dtype))
    q, s, z = both("int4_group_quantize", w, g, scheme=scheme, scale_dtype=sdt)
    both("int4_group_dequantize", q, s, z, output_dtype=dtype)


def test_int4_dequantize_nonfinite_scale():
    # The scale is not checked for NaN / Inf: Inf * 0 = NaN, NaN * q = NaN, with NumPy's NaN bits
    # (an fp16 NaN 0x7E00 widens to 0x7FC00000; a signalling 0x7C01 to 0x7F802000).
    q = np.array([[1, -2, 0, 3, 0, 1]], np.int8)
    for sdt in (np.float16, BF16):
        s = np.array([[np.inf, np.nan, 1.0]], sdt)
        if sdt == np.float16:
            s.view(np.uint16)[0, 2] = 0x7C01
        for out in ("float32", "bfloat16", "float16"):
            both("int4_group_dequantize", q, s, output_dtype=out)


# -- packing, W4A16, A4W4 / A8W4, W4A8 ------------------------------------------------------------------

def test_convert_weight_to_int4pack_word():
    # codes 1, -1, 2, -2, 3, -3, 4, -4 -> nibbles 1, F, 2, E, 3, D, 4, C from bit 0 up -> 0xC4D3E2F1.
    w = np.array([[1, -1, 2, -2, 3, -3, 4, -4]], np.int32)
    assert both("convert_weight_to_int4pack", w).view(np.uint32).tolist() == [[0xC4D3E2F1]]


@pytest.mark.parametrize("layout", ["int8", "int4_n", "int4_k"])
@pytest.mark.parametrize("mode", ["tensor", "channel", "group"])
def test_weight_quant_batchmatmul_layouts(layout, mode):
    rng = np.random.default_rng(10)
    m, k, n = 5, 128, 24
    for xdt in (np.float16, BF16):
        x = rng.standard_normal((m, k)).astype(np.float32).astype(xdt)
        codes = rng.integers(-8, 8, (k, n))
        w = {"int8": codes.astype(np.int8), "int4_n": w8a8.convert_weight_to_int4pack(codes.astype(np.int32)),
             "int4_k": w8a8.convert_weight_to_int4pack(np.ascontiguousarray(codes.T).astype(np.int32)).T}[layout]
        shape = {"tensor": (1, 1), "channel": (1, n), "group": (k // 32, n)}[mode]
        s = rng.uniform(1e-3, 2e-2, shape).astype(np.float32).astype(xdt)
        o = rng.integers(-3, 3, shape).astype(np.float32).astype(xdt)
        kw = {"antiquant_group_size": 32 if mode == "group" else 0}
        both("weight_quant_batchmatmul", x, w, s, o, **kw)
        bias = rng.standard_normal(n).astype(np.float32 if xdt == BF16 else np.float16)
        both("weight_quant_batchmatmul", x, w, s, bias=bias, **kw)
        qs, qo = rng.uniform(0.5, 2, n).astype(np.float32), rng.uniform(-3, 3, n).astype(np.float32)
        y = both("weight_quant_batchmatmul", x, w, s, quant_scale=qs, quant_offset=qo, **kw)
        assert y.dtype == np.int8


def test_weight_quant_batchmatmul_int64_scales():
    rng = np.random.default_rng(11)
    m, k, n = 3, 64, 64
    x = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    s = w8a8.trans_quant_param(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
    both("weight_quant_batchmatmul", x, w, s, rng.integers(-4, 4, n).astype(np.int32))
    x8 = rng.standard_normal((m, k)).astype(np.float16)
    qs = w8a8.trans_quant_param(np.full(n, 0.5, np.float32), rng.uniform(-5, 5, n).astype(np.float32))
    both("weight_quant_batchmatmul", x8, w, np.full(n, 0.01, np.float16), quant_scale=qs)


@pytest.mark.parametrize("dtype", [BF16, np.float16])
def test_weight_quant_batchmatmul_nan_x_propagates(dtype):
    # NaN (quiet, signalling, negative) and Inf in x propagate through the fp32 result with NumPy's bits.
    x = np.ones((4, 64), dtype)
    raw = x.view(np.uint16)
    raw[1, 5] = 0x7E00 if dtype == np.float16 else 0x7FC0
    raw[2, 7] = 0x7C01 if dtype == np.float16 else 0x7F81
    raw[3, 9] = 0xFE00 if dtype == np.float16 else 0xFFC0
    w = np.ones((64, 8), np.int8)
    y = both("weight_quant_batchmatmul", x, w, np.ones(8, dtype))
    assert np.isnan(y[1:].astype(np.float32)).all() and (y[0].astype(np.float32) == 64).all()
    x[0, 0] = np.inf
    both("weight_quant_batchmatmul", x, w, np.ones(8, dtype))


def test_a4w4_layouts_and_fp16_without_token_scale():
    rng = np.random.default_rng(12)
    m, k, n = 7, 64, 16
    x1 = w8a8.pack_int4(rng.integers(-8, 8, (2, m, k)).astype(np.int8))
    codes = rng.integers(-8, 8, (k, n)).astype(np.int32)
    kn8 = w8a8.convert_weight_to_int4pack(codes)
    k8n = np.ascontiguousarray(w8a8.convert_weight_to_int4pack(np.ascontiguousarray(codes.T)).T)
    for x2 in (kn8, k8n):
        s = rng.uniform(1e-3, 1e-2, n).astype(np.float32)
        both("quant_matmul_int4", x1, x2, s, output_dtype="float16")  # fp32 scale: FP19 on the adapter
        both("quant_matmul_int4", x1, x2, w8a8.trans_quant_param(s), output_dtype="float16",
             bias=rng.integers(-99, 99, n).astype(np.int32))
        both("quant_matmul_int4", x1[0], x2, s, pertoken_scale=rng.uniform(0.5, 2, m).astype(np.float32),
             output_dtype="bfloat16")


@pytest.mark.parametrize("k, per_group", [(512, True), (256, False), (24, False), (0, False)])
def test_a8w4(k, per_group):
    rng = np.random.default_rng(13)
    m, n = 6, 16
    x1 = rng.integers(-128, 128, (m, k)).astype(np.int8)
    codes = rng.integers(-8, 8, (k, n)).astype(np.int32)
    x2 = w8a8.convert_weight_to_int4pack(codes) if k else np.zeros((0, n // 8), np.int32)
    s32 = rng.uniform(1e-3, 1e-2, (k // 256, n) if per_group else (n,)).astype(np.float32)
    scale = w8a8.trans_quant_param(s32)
    off = w8a8.a8w4_y_offset(codes.astype(np.int8), scale) if k else np.zeros(n, np.float32)
    pt = rng.uniform(0.01, 0.1, (m, 1)).astype(np.float32)
    for out in ("float16", "bfloat16"):
        both("quant_matmul_int4", x1, x2, scale, offset=off, pertoken_scale=pt, output_dtype=out)
        both("quant_matmul_int4", x1, x2, scale, offset=off + 1, pertoken_scale=pt[:, 0], output_dtype=out)


@pytest.mark.parametrize("lead, k, n, per_group", [((3,), 512, 16, True), ((2, 5), 24, 8, False), ((1,), 7, 8, False),
                                                   ((0,), 16, 8, False)])
def test_w4a8_dynamic_linear_paths(lead, k, n, per_group):
    rng = np.random.default_rng(14)
    w = rng.integers(-8, 8, (n, k)).astype(np.int8)
    ws = rng.uniform(1e-3, 1e-2, (n, k // 256) if per_group else (n, 1)).astype(np.float32)
    for xdt in (BF16, np.float16):
        x = rng.standard_normal(lead + (k,)).astype(np.float32).astype(xdt)
        both("w4a8_dynamic_linear", x, w, ws)
        both("w4a8_dynamic_linear", x, w, ws.astype(BF16), bias=rng.standard_normal(n).astype(np.float16))


def test_w4a8_offset_overflow_and_nan_x_refused():
    w = np.full((8, 16), 7, np.int8)
    x = np.ones((2, 16), BF16)
    check_same("w4a8_dynamic_linear", x, w, np.full(8, 3e37, np.float32))  # 8 * 112 * 3e37 > fp32 max
    x[1, 3] = np.nan
    check_same("w4a8_dynamic_linear", x, w, np.full(8, 0.01, np.float32))


# -- bad input: the same exception and message as the golden ----------------------------------------------

def _bad_calls():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    q, s, z = w8a8.int4_group_quantize(x, 32, scheme="asym")
    xb = rng.standard_normal((3, 64)).astype(np.float16)
    w8 = rng.integers(-8, 8, (64, 16)).astype(np.int8)
    x1 = w8a8.pack_int4(rng.integers(-8, 8, (4, 64)).astype(np.int8))
    x2 = w8a8.convert_weight_to_int4pack(rng.integers(-8, 8, (64, 16)).astype(np.int32))
    xi8 = rng.integers(-128, 127, (4, 512)).astype(np.int8)
    x2b = w8a8.convert_weight_to_int4pack(rng.integers(-8, 8, (512, 16)).astype(np.int32))
    sc = w8a8.trans_quant_param(np.full((2, 16), 0.01, np.float32))
    pt = np.ones((4, 1), np.float32)
    xw = rng.standard_normal((3, 512)).astype(BF16)
    ww = rng.integers(-8, 8, (16, 512)).astype(np.int8)
    d, s2 = w8a8.mx_quantize(x)
    nd, ns = w8a8.nvfp4_quantize(x, per_tensor_scale=np.float32(0.01))
    wq, ws = w8a8.fp8_block_quantize(x)
    aq, as_ = w8a8.per_token_group_quant_fp8(x)
    one = np.float32(1)
    return [
        ("int4_group_quantize", (x, 7), {}), ("int4_group_quantize", (x, 32), {"scheme": "x"}),
        ("int4_group_quantize", (x.astype(np.float64), 32), {}),
        ("int4_group_quantize", (x, 32), {"scale_dtype": "int8"}),
        ("int4_group_quantize", (np.full((2, 32), np.inf, np.float32), 32), {}),
        ("int4_group_quantize", (np.zeros((2, 0), np.float32), -1), {}), ("int4_group_quantize", (x,), {"bogus": 1}),
        ("int4_group_dequantize", (q, s), {}), ("int4_group_dequantize", (q, s, z[:, :1]), {}),
        ("int4_group_dequantize", (q + 20, s, z), {}), ("int4_group_dequantize", (q.astype(np.int8), s, z), {}),
        ("int4_group_dequantize", (q, s, z), {"output_dtype": "int8"}),
        ("convert_weight_to_int4pack", (np.zeros((3, 7), np.int32),), {}),
        ("convert_weight_to_int4pack", (np.full((3, 8), 9, np.int32),), {}),
        ("convert_weight_to_int4pack", (np.zeros((3, 8), np.int32), -1), {}),
        ("weight_quant_batchmatmul", (xb, w8, np.ones((2, 16), np.float16)), {"antiquant_group_size": 7}),
        ("weight_quant_batchmatmul", (xb, w8, np.ones((2, 16), np.float16)), {}),
        ("weight_quant_batchmatmul", (xb, w8, np.ones(16, np.float16)), {"bias": np.ones(16, np.float32)}),
        ("weight_quant_batchmatmul", (xb, w8, np.ones(16, np.float16)), {"quant_offset": np.ones(16, np.float32)}),
        ("weight_quant_batchmatmul", (xb, w8[:5], np.ones(16, np.float16)), {}),
        ("weight_quant_batchmatmul", (xb, w8, np.full(16, np.nan, np.float16)), {}),
        ("weight_quant_batchmatmul", (xb, w8, np.ones(16, np.int64)), {}),
        ("weight_quant_batchmatmul", (xb, w8, np.ones(16, np.float16)), {"inner_precise": 3}),
        ("quant_matmul_int4", (x1, x2, np.ones(16, np.float32)), {}),
        ("quant_matmul_int4", (x1, x2, np.ones(16, np.float32)), {"output_dtype": "bfloat16"}),
        ("quant_matmul_int4", (x1, x2[:3], np.ones(16, np.float32)), {"output_dtype": "float16"}),
        ("quant_matmul_int4", (x1, x2, np.ones(16, np.float16)), {"output_dtype": "float16"}),
        ("quant_matmul_int4", (x1, x2, np.ones(16, np.float32)), {"output_dtype": "float16",
                                                                  "pertoken_scale": np.ones(3, np.float32)}),
        ("quant_matmul_int4", (x1, x2, np.ones(3, np.float32)), {"output_dtype": "float16"}),
        ("quant_matmul_int4", (xi8, x2b, sc), {"output_dtype": "float16", "pertoken_scale": pt}),
        ("quant_matmul_int4", (xi8, x2b, sc[:1]), {"output_dtype": "float16", "pertoken_scale": pt,
                                                   "offset": np.zeros(16, np.float32)}),
        ("quant_matmul_int4", (xi8, x2b, sc), {"output_dtype": "float16", "pertoken_scale": pt * np.nan,
                                               "offset": np.zeros(16, np.float32)}),
        ("quant_matmul_int4", (xi8[:, :100], x2b[:100], sc), {"output_dtype": "float16", "pertoken_scale": pt,
                                                              "offset": np.zeros(16, np.float32)}),
        ("w4a8_dynamic_linear", (xw, ww, np.full((16, 3), 0.01, np.float32)), {}),
        ("w4a8_dynamic_linear", (xw, ww[:12], np.full(12, 0.01, np.float32)), {}),
        ("w4a8_dynamic_linear", (xw, ww, np.full(16, 0.01, np.float32)), {"bias": np.ones(3, np.float32)}),
        ("w4a8_dynamic_linear", (xw, ww + 9, np.full(16, 0.01, np.float32)), {}),
        ("w4a8_dynamic_linear", (xw[:, :7], ww, np.full(16, 0.01, np.float32)), {}),
        ("w4a8_dynamic_linear", (np.ones((3, 30208), BF16), np.ones((16, 30208), np.int8),
                                 np.full((16, 118), 0.01, np.float32)), {}),
        ("w4a8_dynamic_linear", (np.ones((3, 0), BF16), np.ones((8, 0), np.int8), np.ones(8, np.float32)), {}),
        ("mx_quantize", (x,), {"elem_dtype": "e3m3"}), ("mx_quantize", (x,), {"scale_mode": "up"}),
        ("mx_quantize", (x[:, :33],), {"block_size": 33}), ("mx_quantize", (x,), {"block_size": 0}),
        ("mx_quantize", (x[:, :48],), {}),
        ("mx_dequantize", (d, s2[:, :1]), {}), ("mx_dequantize", (d.astype(np.int8), s2), {}),
        ("mx_dequantize", (d, s2), {"output_dtype": "int8"}), ("mx_dequantize", (d, s2), {"elem_dtype": "e4m3"}),
        ("mx_matmul", (d, s2, d[:, :8], s2[:, :1]), {}), ("mx_matmul", (d, s2, d, s2), {"b_elem_dtype": "zz"}),
        ("mx_matmul", (d[0], s2[0], d, s2), {}),
        ("nvfp4_quantize", (x,), {}), ("nvfp4_quantize", (x,), {"per_tensor_scale": one, "global_scale": one}),
        ("nvfp4_quantize", (x,), {"per_tensor_scale": np.float32(-1)}),
        ("nvfp4_quantize", (x[:, :20],), {"per_tensor_scale": one}), ("nvfp4_quantize", (x,), {"per_tensor_scale": 1}),
        ("nvfp4_quantize", (np.full((1, 16), np.nan, np.float32),), {"per_tensor_scale": one}),
        ("nvfp4_dequantize", (nd, ns[:, :1]), {"per_tensor_scale": one}), ("nvfp4_dequantize", (nd, ns), {}),
        ("nvfp4_matmul", (nd, ns, nd, ns, np.float32(np.inf)), {}),
        ("nvfp4_matmul", (nd, ns, nd[:, :2], ns[:, :1], one), {}),
        ("swizzle_block_scales", (np.zeros(5, np.float32),), {}), ("swizzle_block_scales", ([1, 2],), {}),
        ("fp8_block_quantize", (x,), {"block_shape": (1,)}), ("fp8_block_quantize", (x,), {"scale_fmt": "x"}),
        ("fp8_block_quantize", (x,), {"eps": -1.0}), ("fp8_block_quantize", (x,), {"block_shape": (0, 4)}),
        ("fp8_block_quantize", (np.full((2, 2), np.inf, np.float32),), {}), ("fp8_block_quantize", (x[0],), {}),
        ("per_token_group_quant_fp8", (x, 0), {}), ("per_token_group_quant_fp8", (x, 128), {"scale_fmt": "e8"}),
        ("per_token_group_quant_fp8", (x, 128), {"eps": np.inf}),
        ("fp8_block_dequantize", (wq, ws[:0]), {}), ("fp8_block_dequantize", (wq, ws.astype(np.float16)), {}),
        ("fp8_block_dequantize", (wq, np.full_like(ws, np.nan)), {}),
        ("fp8_block_dequantize", (wq, ws), {"output_dtype": "int8"}),
        ("fp8_block_matmul", (aq, as_, wq, ws), {"block_size": 0}), ("fp8_block_matmul", (aq, as_, wq[:, :3], ws), {}),
        ("fp8_block_matmul", (aq, as_[:, :0], wq, ws), {}),
        ("fp8_block_matmul", (aq, as_, wq, ws), {"output_dtype": "i"}),
    ]


@pytest.mark.parametrize("op, args, kwargs", _bad_calls(), ids=lambda v: v if isinstance(v, str) else "")
def test_bad_input_same_error_as_golden(op, args, kwargs):
    want = outcome(GOLDEN, op, args, kwargs)
    assert want[0] == "raise", f"the golden accepted this {op} call"
    check_same(op, *args, **kwargs)


def test_other_numerics_are_unsupported():
    x = np.ones((2, 32), np.float32)
    with pytest.raises(backends.Unsupported):
        TC.call("w4a8_dynamic_linear", x.astype(BF16), np.ones((8, 32), np.int8), np.ones(8, np.float32),
                numerics=w8a8.ASCEND.replace(round_mode="half_away"))
