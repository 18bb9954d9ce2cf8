"""The open-numerics fields of ``Numerics``: each value pinned by a named case with the
expected bits derived by hand in the comment, the Ascend default first and unchanged, and the
composition with the kernel-variant policy.

The records these fields make up for onnxruntime and torchao are checked against the real libraries
in ``tests/backends/test_onnxruntime.py`` / ``test_torchao.py``; here the golden's arithmetic of each
value is pinned on its own.
"""

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import w8a8
from w8a8 import ASCEND, Numerics
from w8a8.dynamic_quant import RowQuant, quantize_rows, scale_floor_of
from w8a8.lowbit.nvfp4 import nvfp4_quantize

BF16 = ml_dtypes.bfloat16
F32 = np.float32
FIXED = ASCEND.replace(name="fixed", variants="fixed")
# torchao Int8Tensor: 127.5, the scale in x's dtype, a 2^-23 floor, rint(x * fp32(1/s)), [-128, 127]
TORCHAO = FIXED.replace(name="ta", scale_divisor="half_range", scale_out="amax_div", scale_dtype="input",
                        scale_floor="max_f32_eps", quant_codes="mul_rcp", code_range="full")
# onnxruntime DynamicQuantizeLinear, as int8 (uint8 - 128)
ORT_DQL = FIXED.replace(name="ort-dql", dynamic_granularity="per_tensor", asym_range="through_zero",
                        asym_zero_point="integer", asym_degenerate="one", quant_codes="div_scale",
                        zero_point_position="after_rounding")

NEW_FIELDS = {"scale_divisor": "qmax", "scale_dtype": "float32", "scale_floor": "none", "code_arith": "float32",
              "code_range": "symmetric", "dynamic_granularity": "per_token", "asym_range": "minmax",
              "asym_zero_point": "float_offset", "asym_degenerate": "clamp_1e-12", "act_quant": "symmetric",
              "epilogue_intermediate": "float32", "antiquant_dtype": "input", "nvfp4_codes": "div_total",
              "nan_code": "zero"}


def _bits(a):
    return np.asarray(a).view(np.uint32 if np.asarray(a).dtype == np.float32 else np.uint16)


def test_the_ascend_record_has_every_new_field_at_its_ascend_value():
    for field, value in NEW_FIELDS.items():
        assert getattr(ASCEND, field) == value, field
        assert Numerics.choices()[field][0] == value, field


def test_a_record_saved_before_the_new_fields_loads_as_the_ascend_record():
    old = {k: v for k, v in ASCEND.as_dict().items() if k not in NEW_FIELDS}
    assert Numerics.from_dict(old) == ASCEND


@pytest.mark.parametrize("field", sorted(NEW_FIELDS))
def test_a_bad_value_of_a_new_field_names_the_field(field):
    with pytest.raises(ValueError, match=field):
        Numerics(**{field: "nonsense"})


def test_every_new_field_is_documented_with_its_values():
    doc = w8a8.numerics.__doc__
    for field, allowed in Numerics.choices().items():
        if field in NEW_FIELDS:
            assert f"{field} : " in doc, field
            for value in allowed:
                assert f'"{value}"' in doc, (field, value)


# -- the symmetric quantizer: scale_divisor, scale_dtype, scale_floor, quant_codes, code_arith, code_range ----

def test_half_range_and_full_range_reach_minus_128():
    # amax 127.5 (bf16 0x42FF): torchao's s = bf16(127.5 / 127.5) = 1, r = 1, so the codes are rint(x):
    # -127.5 -> -128 (half to even) is kept by the [-128, 127] clamp; 127.5 -> 128 clamps to 127;
    # 1.5 -> 2, 2.5 -> 2, 0.5 -> 0 (ties to even).
    x = np.array([[127.5, -127.5, 0.5, 1.5, 2.5, -2.5, 100, 3]], BF16)
    y, s = w8a8.dynamic_quant(x, numerics=TORCHAO)
    assert y.tolist() == [[127, -128, 0, 2, 2, -2, 100, 3]]
    assert _bits(s).tolist() == [0x3F800000]
    # Ascend: inv = 127 / 127.5 = 0.99607843, -127.5 * inv = -127 exactly (in fp32), 1.5 * inv = 1.494 -> 1;
    # scale 1 / inv = 1.003937 (0x3F80810[2])
    y, s = w8a8.dynamic_quant(x, numerics=FIXED)
    assert y.tolist() == [[127, -127, 0, 1, 2, -2, 100, 3]]
    assert s[0] == F32(1) / (F32(127) / F32(127.5))


def test_half_range_alone_keeps_the_symmetric_clamp():
    # the same row with only scale_divisor changed: -127.5 -> -128 is clamped back to -127
    x = np.array([[127.5, -127.5]], BF16)
    y, _ = w8a8.dynamic_quant(x, numerics=TORCHAO.replace(code_range="symmetric"))
    assert y.tolist() == [[127, -127]]


def test_scale_dtype_input_rounds_the_scale_to_bf16_at_once():
    # amax 1: fp32(1 / 127.5) = 0.007843138 = 0x3C008081; its low half 0x8081 is above the bf16 midpoint
    # 0x8000, so bf16 rounds up to 0x3C01 -> the returned fp32 scale is 0x3C010000 (= 0.0078735...)
    x = np.array([[1.0, 0.5]], BF16)
    _, s = w8a8.dynamic_quant(x, numerics=TORCHAO)
    assert _bits(s).tolist() == [0x3C010000]
    _, s = w8a8.dynamic_quant(x, numerics=TORCHAO.replace(scale_dtype="float32"))
    assert _bits(s).tolist() == [0x3C008081]


@pytest.mark.parametrize("floor, dtype, want", [
    ("none", BF16, 0.0),                      # Ascend: an all-zero row keeps s = 0
    ("max_f32_eps", BF16, 2.0 ** -23),        # torchao Int8Tensor: max(s, bf16(2^-23)), exact in bf16
    ("max_f32_eps", np.float16, 2.0 ** -23),  # 2^-23 is the fp16 subnormal 2 * 2^-24: exact too
    ("max_dtype_tiny", BF16, 2.0 ** -126),    # finfo(bf16).smallest_normal
    ("max_dtype_tiny", np.float16, 2.0 ** -14),
    ("zero_to_dtype_eps", BF16, 2.0 ** -7),   # compressed-tensors: finfo(bf16).eps where s == 0
    ("zero_to_dtype_eps", np.float16, 2.0 ** -10),
])
def test_scale_floor_of_an_all_zero_row(floor, dtype, want):
    x = np.zeros((1, 8), dtype)
    y, s = w8a8.dynamic_quant(x, numerics=TORCHAO.replace(scale_floor=floor))
    assert s.tolist() == [want]
    assert y.tolist() == [[0] * 8]   # 0 * fp32(1 / s) = 0, or (s = 0) 0 * inf = NaN -> zero_row's code 0


def test_scale_floor_is_a_clamp_or_a_replacement():
    s = np.array([[0.0], [2.0 ** -30], [0.5]], F32)
    assert scale_floor_of(s, "max_f32_eps", BF16).ravel().tolist() == [2.0 ** -23, 2.0 ** -23, 0.5]
    # zero_to_dtype_eps replaces only an exact 0: 2^-30 stays
    assert scale_floor_of(s, "zero_to_dtype_eps", BF16).ravel().tolist() == [2.0 ** -7, 2.0 ** -30, 0.5]


def test_code_arith_input_rounds_the_reciprocal_and_the_product_to_bf16():
    # torchao quantize_affine with default arguments (bf16 scale): amax 7.15625 ->
    # s = bf16(7.15625 / 127.5 = 0.05612745) = 0.056152344 (0x3D66); r = fp32(1 / s) = 17.808695 ->
    # bf16 17.75; t = 3.515625 * 17.75 = 62.40234375 -> bf16 62.5 -> rint (half even) 62.
    # In fp32 (code_arith="float32"): 3.515625 * 17.808695 = 62.6087 -> 63.
    x = np.array([[7.15625, 3.515625]], BF16)
    n = TORCHAO.replace(scale_floor="max_dtype_tiny", code_arith="input")
    assert w8a8.dynamic_quant(x, numerics=n)[0].tolist() == [[127, 62]]
    assert w8a8.dynamic_quant(x, numerics=n.replace(code_arith="float32"))[0].tolist() == [[127, 63]]


def test_code_arith_input_rounds_a_quotient_too():
    # compressed-tensors: rint(bf16(x / s)). amax 7: s = bf16(7 / 127.5 = 0.05490196) = 0.054931640625
    # (0x3D61); x = 3: 3 / s = 54.61333 (fp32) -> rint 55; bf16(54.61333) = 54.5 -> rint (half even) 54.
    x = np.array([[7.0, 3.0]], BF16)
    n = TORCHAO.replace(quant_codes="div_scale", code_arith="input", scale_floor="zero_to_dtype_eps")
    assert w8a8.dynamic_quant(x, numerics=n)[0].tolist() == [[127, 54]]
    assert w8a8.dynamic_quant(x, numerics=n.replace(code_arith="float32"))[0].tolist() == [[127, 55]]


def test_dynamic_granularity_per_tensor_takes_one_amax_over_every_row():
    # rows [1, 2] and [4, 8]: one amax 8, inv = 127 / 8 = 15.875 (exact), s = 1 / 15.875 for both rows;
    # codes 15.875 -> 16, 31.75 -> 32, 63.5 -> 64 (half even), 127
    x = np.array([[1, 2], [4, 8]], BF16)
    y, s = w8a8.dynamic_quant(x, numerics=FIXED.replace(dynamic_granularity="per_tensor"))
    assert y.tolist() == [[16, 32], [64, 127]]
    assert s.tolist() == [F32(1) / F32(15.875)] * 2
    y, _ = w8a8.dynamic_quant(x, numerics=FIXED)          # per token: row 0 has amax 2 -> 63.5 -> 64, 127
    assert y.tolist() == [[64, 127], [64, 127]]


def test_quantize_rows_defaults_are_the_ascend_formula():
    # the shared core with no option given computes exactly what it computed before the new options
    rng = np.random.default_rng(5)
    xf = rng.standard_normal((7, 33)).astype(F32)
    y, s = quantize_rows(xf, RowQuant(127))
    inv = F32(127) / np.abs(xf).max(axis=-1, keepdims=True)
    assert np.array_equal(y, np.clip(np.rint(xf * inv), -127, 127).astype(np.int8))
    assert np.array_equal(s, (F32(1) / inv)[:, 0])


# -- the asymmetric quantizer: asym_range, asym_zero_point, asym_degenerate, zero_point_position ------------

def test_integer_zero_point_through_zero_after_rounding():
    # x = [-2^-6, 1.5 * 2^-6, 254 * 2^-6]: lo = -2^-6, hi = 254 * 2^-6 -> s = 255 * 2^-6 / 255 = 2^-6 exactly;
    # z = -128 + rint(-(lo / s)) = -128 + 1 = -127; t = x / s = [-1, 1.5, 254];
    # after rounding: rint(t) + z = [-1 - 127, 2 - 127, 254 - 127] = [-128, -125, 127]
    x = np.array([[-2.0 ** -6, 1.5 * 2.0 ** -6, 254 * 2.0 ** -6]], BF16)
    y, s, o = w8a8.dynamic_quant_asymmetric(x, numerics=ORT_DQL)
    assert y.tolist() == [[-128, -125, 127]]
    assert s.tolist() == [2.0 ** -6] and o.tolist() == [-127.0]
    # before rounding (compressed-tensors): rint(1.5 - 127) = rint(-125.5) = -126 (even)
    y, _, _ = w8a8.dynamic_quant_asymmetric(x, numerics=ORT_DQL.replace(zero_point_position="before_rounding"))
    assert y.tolist() == [[-128, -126, 127]]
    # Ascend's float offset: offset = 127 - hi / s = 127 - 254 = -127, rint(1.5 - 127) = -126 too
    y, s, o = w8a8.dynamic_quant_asymmetric(x, numerics=FIXED)
    assert y.tolist() == [[-128, -126, 127]] and o.tolist() == [-127.0]


def test_the_range_through_zero_moves_the_scale():
    # a positive row [1, 3]: minmax s = 2 / 255, through zero s = 3 / 255 (lo = 0), z = -128 (the zero code)
    x = np.array([[1.0, 3.0]], BF16)
    _, s, o = w8a8.dynamic_quant_asymmetric(x, numerics=ORT_DQL.replace(dynamic_granularity="per_token"))
    assert s.tolist() == [F32(3) / F32(255)] and o.tolist() == [-128.0]
    _, s, _ = w8a8.dynamic_quant_asymmetric(x, numerics=FIXED)
    assert s.tolist() == [F32(2) / F32(255)]


def test_degenerate_range_scale_one_or_clamped():
    x = np.zeros((2, 4), BF16)
    # onnxruntime: hi == lo == 0 -> s = 1, z = -128 + rint(0) = -128: every code is the zero code -128
    y, s, o = w8a8.dynamic_quant_asymmetric(x, numerics=ORT_DQL)
    assert s.tolist() == [1.0, 1.0] and o.tolist() == [-128.0, -128.0] and (y == -128).all()
    # Ascend: s = max(0, 1e-12) = 1e-12, offset = 127 - 0 / s = 127: every code 127
    y, s, o = w8a8.dynamic_quant_asymmetric(x, numerics=FIXED)
    assert s.tolist() == [F32(1e-12)] * 2 and o.tolist() == [127.0, 127.0] and (y == 127).all()


def test_per_tensor_asymmetric_range_spans_every_row():
    # rows [-1, 0] and [0, 254]: one lo = -1, hi = 254 -> s = 1, z = -128 + 1 = -127
    x = np.array([[-1.0, 0.0], [0.0, 254.0]], BF16)
    y, s, o = w8a8.dynamic_quant_asymmetric(x, numerics=ORT_DQL)
    assert s.tolist() == [1.0, 1.0] and o.tolist() == [-127.0, -127.0]
    assert y.tolist() == [[-128, -127], [-127, 127]]


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 5), h=st.sampled_from((1, 7, 17)), seed=st.integers(0, 2 ** 32 - 1),
       position=st.sampled_from(("after_rounding", "before_rounding")), codes=st.sampled_from(("div_scale", "mul_rcp")),
       granularity=st.sampled_from(("per_token", "per_tensor")))
def test_integer_zero_point_dequantizes_within_half_a_step(rows, h, seed, position, codes, granularity):
    # (y - z) * s reconstructs x within s / 2 (+ fp32 slack): the range through 0 keeps every x inside
    # [qmin - z, qmax - z] * s, so nothing clips
    x = (np.random.default_rng(seed).standard_normal((rows, h)) * 3).astype(BF16)
    n = ORT_DQL.replace(zero_point_position=position, quant_codes=codes, dynamic_granularity=granularity)
    y, s, o = w8a8.dynamic_quant_asymmetric(x, numerics=n)
    err = np.abs((y.astype(np.float64) - o[:, None]) * s[:, None] - x.astype(np.float64))
    assert (err <= s[:, None] * (0.5 + 1e-5)).all()
    assert ((o >= -128) & (o <= 127) & (o == np.rint(o))).all()


# -- the linear path: act_quant, epilogue_intermediate -------------------------------------------------

def test_asymmetric_activation_enters_the_accumulator_as_x_q_minus_z():
    # x as in test_integer_zero_point_through_zero_after_rounding: x_q = [-128, -125, 127], z = -127, s = 2^-6;
    # W = [[1, 1, 1]] (N = 1): acc = (-1) + 2 + 254 = 255; y = 255 * 1 (bf16 weight scale) * 2^-6 = 3.984375
    # (bf16 0x407F, exact)
    x = np.array([[-2.0 ** -6, 1.5 * 2.0 ** -6, 254 * 2.0 ** -6]], BF16)
    w = np.ones((1, 3), np.int8)
    n = ORT_DQL.replace(act_quant="asymmetric", dynamic_granularity="per_token")
    st_ = w8a8.dynamic_linear_stages(x, w, np.ones(1, F32), numerics=n)
    assert st_["acc"].tolist() == [[255]] and st_["x_offset"].tolist() == [-127.0]
    assert st_["y"].view(np.uint16).tolist() == [[0x407F]]


def test_asymmetric_activation_needs_an_integer_zero_point():
    x = np.ones((1, 4), BF16)
    with pytest.raises(ValueError, match="numerics"):
        w8a8.w8a8_dynamic_linear(x, np.ones((2, 4), np.int8), np.ones(2, F32),
                                 numerics=FIXED.replace(act_quant="asymmetric"))


def test_epilogue_intermediate_output_rounds_the_first_product():
    # acc = 1; pertoken t = 1 + 2^-8 and scale s = 1 + 2^-8 (both fp32). token_then_scale:
    # float32: 1 * t * s = 1 + 2^-7 + 2^-16 -> bf16 1.0078125 (0x3F81);
    # output: bf16(1 * t) = bf16(1 + 2^-8) = 1.0 (an exact tie, to even 0x3F80), * s = 1 + 2^-8 -> bf16 1.0 (0x3F80)
    one = np.ones((1, 1), np.int8)
    t = np.array([1 + 2.0 ** -8], F32)
    s = np.array([1 + 2.0 ** -8], F32)
    n = FIXED.replace(epilogue_order="token_then_scale")
    kw = dict(pertoken_scale=t, output_dtype="bfloat16")
    assert w8a8.quant_matmul(one, one, s, numerics=n, **kw).view(np.uint16).tolist() == [[0x3F81]]
    got = w8a8.quant_matmul(one, one, s, numerics=n.replace(epilogue_intermediate="output"), **kw)
    assert got.view(np.uint16).tolist() == [[0x3F80]]


def test_epilogue_intermediate_does_not_apply_without_a_pertoken_scale():
    one = np.ones((1, 1), np.int8)
    s = np.array([1 + 2.0 ** -8], F32)
    a = w8a8.quant_matmul(one, one, s, output_dtype="bfloat16", numerics=FIXED)
    b = w8a8.quant_matmul(one, one, s, output_dtype="bfloat16", numerics=FIXED.replace(epilogue_intermediate="output"))
    assert a.view(np.uint16).tolist() == b.view(np.uint16).tolist()


def test_torchao_linear_formula_end_to_end():
    # the whole torchao int8 linear on one element: x = 1 (bf16), w = 127, weight scale 1/127 (fp32 ->
    # bf16 0x3C01 = 0.0078735... at load), bias none.
    # activation: s_x = bf16(1 / 127.5) = 0x3C01 as fp32 = 0.00787353515625, r = fp32(1 / s_x) = 127.007751,
    # q = rint(127.0078) = 127; acc = 127 * 127 = 16129;
    # y1 = bf16(16129 * 0.00787353515625 = 126.99425) = 127.0; y = bf16(127 * 0.00787353515625 = 0.99993896) = 1.0
    x = np.ones((1, 1), BF16)
    w = np.full((1, 1), 127, np.int8)
    ws = np.array([1 / 127], F32)
    n = TORCHAO.replace(epilogue_order="token_then_scale", epilogue_intermediate="output")
    st_ = w8a8.dynamic_linear_stages(x, w, ws, numerics=n)
    assert _bits(st_["x_scale"]).tolist() == [0x3C010000] and st_["x_q"].tolist() == [[127]]
    assert st_["y"].astype(F32).tolist() == [[1.0]]


# -- weight_quant_batchmatmul: antiquant_dtype -----------------------------------------------------------

def test_antiquant_dtype_float32_keeps_the_weight_unrounded():
    # x = 5 (fp16), w = 1, offset 0.25, scale 1 + 2^-10: w_hat = 1.25 * (1 + 2^-10) = 1.25 + 1.25 * 2^-10 (fp32).
    # input (Ascend): fp16(w_hat) = 1.25 + 2^-10 (1.25 ulps -> 1), y = 5 * that = 6.25 + 1.25 * 2^-8 -> fp16
    # 6.25 + 2^-8 = 6.25390625. float32 (MatMulNBits): 5 * w_hat = 6.25 + 1.5625 * 2^-8 -> fp16 6.2578125.
    x = np.array([[5.0]], np.float16)
    w = np.ones((1, 1), np.int8)
    scale = np.array([1 + 2.0 ** -10], np.float16)
    off = np.array([0.25], np.float16)
    y = w8a8.weight_quant_batchmatmul(x, w, scale, off, numerics=FIXED)
    assert y.tolist() == [[6.25390625]]
    y = w8a8.weight_quant_batchmatmul(x, w, scale, off, numerics=FIXED.replace(antiquant_dtype="float32"))
    assert y.tolist() == [[6.2578125]]


# -- nvfp4_quantize: nvfp4_codes -----------------------------------------------------------------------

def test_nvfp4_codes_order_decides_a_tie():
    # S = 3; block [2.8125, 0.5859375, 0 ...]: b = 2.8125 / 6 = 0.46875, b / S = 0.15625 = 1.25 * 2^-3 = e4m3 0x22
    # (exponent field -3 + 7 = 4, mantissa 010) exactly.
    # div_total: 0.5859375 / (3 * 0.15625) = 1.25 exactly, an E2M1 tie between 1.0 (code 2) and 1.5 (code 3)
    # -> even: 2. mul_rcp_chain: r = fp32(fp32(1/3) = 0.33333334 / 0.15625) = 2.1333334, 0.5859375 * r =
    # 1.2500001 -> code 3. The amax element is 6 both ways (code 7): byte 0 = 7 | code << 4.
    x = np.zeros((1, 16), F32)
    x[0, :2] = [2.8125, 0.5859375]
    data, scale = nvfp4_quantize(x, per_tensor_scale=F32(3))
    assert scale.view(np.uint8).tolist() == [[0x22]] and data[0, 0] == 0x27
    data, _ = nvfp4_quantize(x, per_tensor_scale=F32(3), numerics=ASCEND.replace(nvfp4_codes="mul_rcp_chain"))
    assert data[0, 0] == 0x37


def test_nvfp4_codes_does_not_touch_the_global_scale_convention():
    x = np.random.default_rng(3).standard_normal((3, 32)).astype(F32)
    a = nvfp4_quantize(x, global_scale=F32(2.5))
    b = nvfp4_quantize(x, global_scale=F32(2.5), numerics=ASCEND.replace(nvfp4_codes="mul_rcp_chain"))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1].view(np.uint8), b[1].view(np.uint8))


# -- quantize: nan_code ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, div_mode, want", [("int8", True, -128), ("uint8", True, 0), ("int32", True, -2 ** 31),
                                                   ("int8", False, -128)])
def test_nan_code_qmin_writes_the_output_minimum(dtype, div_mode, want):
    x = np.array([np.nan, 1.0], F32)
    ieee = FIXED.replace(nan_policy="ieee")
    s = np.ones(1, F32)
    got = w8a8.quantize(x, s, dtype=dtype, axis=0, div_mode=div_mode, numerics=ieee.replace(nan_code="qmin"))
    assert got.tolist() == [want, 1]
    assert w8a8.quantize(x, s, dtype=dtype, axis=0, div_mode=div_mode, numerics=ieee).tolist() == [0, 1]


# -- composition with the kernel-variant policy ----------------------------------------------------------

def test_select_applies_a_variant_on_top_of_the_new_fields():
    # A3, H = 4096, 4 rows: the single-row kernel (key 100) writes amax * fp32(1 / D); the record's new field
    # (D = 127.5) is kept, the variant decides scale_out (left at its default by the record)
    x = np.random.default_rng(0).standard_normal((4, 4096)).astype(BF16)
    n = ASCEND.replace(scale_divisor="half_range", code_range="full")
    _, s = w8a8.dynamic_quant(x, numerics=n)
    amax = np.abs(x.astype(F32)).max(axis=-1)
    assert np.array_equal(s, amax * (F32(1) / F32(127.5)))
    # a record that sets scale_out itself keeps it under "select"
    _, s = w8a8.dynamic_quant(x, numerics=n.replace(scale_out="amax_div"))
    assert np.array_equal(s, amax / F32(127.5))


def test_fixed_records_ignore_the_shape():
    x = np.random.default_rng(1).standard_normal((4, 4096)).astype(BF16)
    _, s = w8a8.dynamic_quant(x, numerics=TORCHAO)
    amax = np.abs(x.astype(F32)).max(axis=-1)
    assert np.array_equal(s, np.maximum((amax / F32(127.5)).astype(BF16).astype(F32), F32(2.0 ** -23)))


def test_the_variant_deltas_only_name_fields_that_exist():
    # the new fields are arithmetic choices, so a Variant could decide them; none does today
    assert set(NEW_FIELDS) <= set(Numerics.defaults())
    assert all(f in Numerics.choices() for f in dataclasses.asdict(ASCEND) if f not in ("name", "platform", "variants"))


def test_epilogue_intermediate_models_the_rounding_not_an_overflow():
    # fp16: acc = 127 * 127 * 8 = 129032, token 1 -> 129032 > 65504 would be Inf in fp16; the golden keeps the
    # fp32 value, so y = 129032 * 2^-4 = 8064.5 -> fp16 (spacing 4 in [4096, 8192)) 8064. A kernel writing Inf
    # here (torchao fp16) is a failure, not a declared choice.
    x1 = np.full((1, 8), 127, np.int8)
    x2 = np.full((8, 1), 127, np.int8)
    n = FIXED.replace(epilogue_order="token_then_scale", epilogue_intermediate="output")
    y = w8a8.quant_matmul(x1, x2, np.array([2.0 ** -4], F32), pertoken_scale=np.ones(1, F32), output_dtype="float16",
                          numerics=n)
    assert y.tolist() == [[8064.0]]
