"""Lowering of the dense ops to torch_npu calls (backends.torch_npu.lowering): pure, no device.

Each test names the documented rule it pins (op-plugin adapters and docs, ops-nn, SGLang / vllm-ascend, the torch_npu
2.13.0 docs / meta registrations). Where a lowering transforms arguments, the test also checks, with
the golden, that the transformed call computes the same thing as the original one.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import w8a8
from backends.testing import ArrayFactory
from backends.base import Unsupported
from backends.torch_npu import TorchNpuBackend
from backends.torch_npu._lower_common import Options
from backends.torch_npu.lowering import lower
from backends.torch_npu.plan import ConstraintError, ConstraintTypeError, DType, T

BF16 = np.dtype(ml_dtypes.bfloat16)
ARRAYS = ArrayFactory(20260)
RNG = ARRAYS.rng
i8, f32, bf16 = ARRAYS.i8, ARRAYS.f32, ARRAYS.bf16


# -- quant_matmul: scale packing ---------------------------------------------------------------------
def test_fp32_scale_fp16_output_is_packed_at_load_with_trans_quant_param():
    # op-plugin QuantMatmulKernelNpuOpApi.cpp: fp32 scale, fp16 output, no pertoken -> the adapter calls
    # npu_trans_quant_param itself; the lowering does it once at load and hands the matmul the int64 scale.
    s = f32(32)
    plan = lower("quant_matmul", i8(4, 64), i8(64, 32), s, output_dtype="float16")
    pack = plan.find("npu_trans_quant_param", "load")
    assert pack.args == (T("scale"), None)
    np.testing.assert_array_equal(plan.value(pack.args[0]), s)
    mm = plan.find("npu_quant_matmul")
    assert mm.args[2] == T(pack.out[0])
    assert mm.kwargs == {"output_dtype": DType("float16")}
    assert plan.functions("calls") == ["torch_npu.npu_quant_matmul"]


def test_fp32_scale_int8_output_packs_the_offset_into_the_scale():
    # The requant offset travels in bits 37..45 of the packed scale (ops-nn trans_quant_param_v2.h), so the matmul
    # gets no offset.
    s, off = f32(32), np.array([-3.0], np.float32)
    plan = lower("quant_matmul", i8(4, 64), i8(64, 32), s, offset=off, output_dtype="int8")
    pack = plan.find("npu_trans_quant_param", "load")
    assert pack.args == (T("scale"), T("offset"))
    np.testing.assert_array_equal(plan.value(pack.args[1]), off)
    assert "offset" not in plan.find("npu_quant_matmul").kwargs
    assert plan.find("npu_quant_matmul").kwargs["output_dtype"] == DType("int8")


@pytest.mark.parametrize("out, scale_dtype", [("bfloat16", np.float32), ("bfloat16", BF16)])
def test_bf16_output_keeps_the_float_scale_unpacked(out, scale_dtype):
    # bf16 output: the scale is used at full precision (no FP19), so no trans_quant_param.
    plan = lower("quant_matmul", i8(4, 64), i8(64, 32), f32(32).astype(scale_dtype), output_dtype=out)
    assert plan.functions("load") == ["torch_npu.npu_format_cast"]
    assert plan.find("npu_quant_matmul").args[2] == T("scale")
    assert plan.inputs["scale"].array.dtype == np.dtype(scale_dtype)


def test_pertoken_fp16_output_keeps_fp32_scale():
    # fp16 output with a per-token scale needs an fp32 scale, unpacked (aclnnQuantMatmulV4.md dtype table).
    plan = lower("quant_matmul", i8(4, 64), i8(64, 32), f32(32), pertoken_scale=f32(4), output_dtype="float16")
    assert "torch_npu.npu_trans_quant_param" not in plan.functions("load")
    mm = plan.find("npu_quant_matmul")
    assert mm.kwargs == {"pertoken_scale": T("pertoken_scale"), "output_dtype": DType("float16")}


def test_uint64_scale_is_passed_as_its_int64_view():
    packed = w8a8.trans_quant_param(f32(32)).view(np.uint64)
    plan = lower("quant_matmul", i8(4, 64), i8(64, 32), packed, output_dtype="float16")
    sent = plan.inputs["scale"].array
    assert sent.dtype == np.int64
    np.testing.assert_array_equal(sent.view(np.uint64), packed)   # same 64 bits


def test_row_scale_1xN_is_made_1d():
    # The 2.13 meta: "the scale dim num must be 1".
    plan = lower("quant_matmul", i8(4, 64), i8(64, 32), f32(1, 32), output_dtype="bfloat16")
    assert plan.inputs["scale"].array.shape == (32,)


# -- quant_matmul: per-token flattening -----------------------------------------------------------------
def test_batched_x1_with_pertoken_is_flattened_and_the_scale_repeated():
    # vllm-ascend #3257: a >2-D x with a per-token scale fails on the device. x1 [2, 3, K] -> [6, K];
    # the golden applies the (3,) per-row scale to every batch, so it is repeated to (6,).
    x1, x2, s, pt = i8(2, 3, 64), i8(64, 32), f32(32), f32(3)
    plan = lower("quant_matmul", x1, x2, s, pertoken_scale=pt, output_dtype="bfloat16")
    x1_sent, pt_sent = plan.inputs["x1"].array, plan.inputs["pertoken_scale"].array
    assert x1_sent.shape == (6, 64) and pt_sent.shape == (6,)
    np.testing.assert_array_equal(pt_sent, np.concatenate([pt, pt]))
    assert plan.reshape == {"y": (2, 3, 32)}
    # Independent check: the flattened call computes the original call's result.
    want = w8a8.quant_matmul(x1, x2, s, pertoken_scale=pt, output_dtype="bfloat16")
    got = w8a8.quant_matmul(x1_sent, x2, s, pertoken_scale=pt_sent, output_dtype="bfloat16").reshape(2, 3, 32)
    np.testing.assert_array_equal(got.view(np.int16), want.view(np.int16))


def test_batched_x1_without_pertoken_stays_batched():
    plan = lower("quant_matmul", i8(2, 3, 64), i8(64, 32), f32(32), output_dtype="bfloat16")
    assert plan.inputs["x1"].array.shape == (2, 3, 64) and plan.reshape == {}


def test_pertoken_with_batched_x1_and_batched_x2_is_rejected():
    with pytest.raises(ConstraintError, match="'x2'.*2-D when pertoken_scale"):
        lower("quant_matmul", i8(2, 3, 64), i8(2, 64, 32), f32(32), pertoken_scale=f32(3), output_dtype="bfloat16")


# -- NZ decision (SGLang's alignment rule) --------------------------------------------------------------------
def test_aligned_weight_is_cast_to_nz_at_load():
    # int8 [K, N]: K % 16 == 0 and N % 32 == 0 -> npu_format_cast(w, 29).
    plan = lower("quant_matmul", i8(4, 64), i8(64, 64), f32(64), output_dtype="bfloat16")
    cast = plan.find("npu_format_cast", "load")
    assert cast.args == (T("x2"), 29)
    assert plan.find("npu_quant_matmul").args[1] == T(cast.out[0])
    assert plan.formats == {"x2": "NZ"}
    assert plan.needs_internal_format()


def test_unaligned_weight_stays_nd_with_the_reason():
    # N = 48 is not a multiple of 32 for int8: SGLang "Falling back to 'ND'".
    plan = lower("quant_matmul", i8(4, 64), i8(64, 48), f32(48), output_dtype="bfloat16")
    assert plan.functions("load") == []
    assert plan.formats == {"x2": "ND"}
    assert plan.find("npu_quant_matmul").args[1] == T("x2")
    assert any("x2 stays ND: not NZ-aligned for int8: [k=64, n=48] needs k % 16 and n % 32" in d
               for d in plan.decisions)
    assert not plan.needs_internal_format()


def test_a_last_dim_of_one_is_never_nz():
    # aclnnQuantMatmulWeightNz: NZ weights cannot have a last dim of 1 (vllm-ascend #10014).
    plan = lower("quant_matmul", i8(4, 64), i8(64, 1), f32(1), output_dtype="bfloat16",
                 options=Options(weight_format="auto"))
    assert plan.formats == {"x2": "ND"}
    with pytest.raises(ConstraintError, match="'x2'.*last dim of 1"):
        lower("quant_matmul", i8(4, 64), i8(64, 1), f32(1), output_dtype="bfloat16", options=Options("NZ"))


def test_weight_format_option_forces_nd_or_nz():
    nd = lower("quant_matmul", i8(4, 64), i8(64, 64), f32(64), output_dtype="bfloat16", options=Options("ND"))
    assert nd.formats == {"x2": "ND"} and nd.functions("load") == []
    nz = lower("quant_matmul", i8(4, 64), i8(64, 48), f32(48), output_dtype="bfloat16", options=Options("NZ"))
    assert nz.formats == {"x2": "NZ"} and nz.functions("load") == ["torch_npu.npu_format_cast"]
    with pytest.raises(ValueError, match="weight_format"):
        Options("FRACTAL_NZ")


@given(k=st.sampled_from([1, 7, 16, 17, 32, 48, 64, 1025]), n=st.sampled_from([1, 7, 16, 17, 32, 48, 64, 96]))
def test_nz_decision_matches_sglang_rule(k, n):
    plan = lower("quant_matmul", i8(3, k), i8(k, n), f32(n), output_dtype="bfloat16")
    want_nz = k % 16 == 0 and n % 32 == 0 and k != 1 and n != 1
    assert plan.formats["x2"] == ("NZ" if want_nz else "ND")


# -- quant_matmul: constraints ------------------------------------------------------------------------------------
def test_fp16_scale_is_rejected():
    with pytest.raises(TypeError, match="'scale'.*161002"):
        lower("quant_matmul", i8(4, 64), i8(64, 32), f32(32).astype(np.float16), output_dtype="bfloat16")


def test_bf16_scale_with_fp16_output_is_rejected():
    with pytest.raises(TypeError, match="'scale'.*float32.*float16 output"):
        lower("quant_matmul", i8(4, 64), i8(64, 32), f32(32).astype(BF16), output_dtype="float16")


def test_int32_output_needs_a_float_scale():
    # torch_npu meta: "When output_dtype is int32, scale's dtype must be bfloat16 or float32" — a rule
    # of the golden's dtype table too, so the shared check refuses it with a TypeError.
    packed = w8a8.trans_quant_param(f32(32))
    with pytest.raises(TypeError, match="'scale'.*int32 output"):
        lower("quant_matmul", i8(4, 64), i8(64, 32), packed, output_dtype="int32")


def test_k_above_65535_only_with_float_scale_and_pertoken():
    k = 65536
    x1, x2 = np.zeros((1, k), np.int8), np.zeros((k, 32), np.int8)
    with pytest.raises(ValueError, match="'x1'.*K <= 65535"):
        lower("quant_matmul", x1, x2, f32(32), output_dtype="bfloat16")
    plan = lower("quant_matmul", x1, x2, f32(32), pertoken_scale=f32(1), output_dtype="bfloat16")
    assert plan.find("npu_quant_matmul").kwargs["pertoken_scale"] == T("pertoken_scale")


def test_n_above_65535_is_rejected():
    # Last dim of x2 <= 65535 (torch_npu docs; vllm-ascend splits wq_b with N >= 65536). A rule of the
    # golden's quant_matmul too (aclnnQuantMatmulV4.md), so the shared check refuses it with the golden's ValueError.
    with pytest.raises(ValueError, match="'x2'.*N <= 65535"):
        lower("quant_matmul", i8(1, 16), np.zeros((16, 65536), np.int8), f32(1), pertoken_scale=f32(1),
              output_dtype="bfloat16")


def test_pertoken_must_match_rows_and_not_go_with_int8_output():
    with pytest.raises(ValueError, match="'pertoken_scale'.*\\(M,\\) = \\(4,\\)"):
        lower("quant_matmul", i8(4, 64), i8(64, 32), f32(32), pertoken_scale=f32(5), output_dtype="bfloat16")
    with pytest.raises(ValueError, match="'pertoken_scale'.*None for int8 output"):
        lower("quant_matmul", i8(4, 64), i8(64, 32), f32(32), pertoken_scale=f32(4))


def test_offset_only_with_int8_output():
    with pytest.raises(ValueError, match="'offset'.*int8"):
        lower("quant_matmul", i8(4, 64), i8(64, 32), f32(32), offset=f32(32), output_dtype="float16")


def test_nan_scale_is_refused_like_the_golden():
    s = f32(32)
    s[3] = np.nan
    with pytest.raises(ValueError, match="'scale'.*NaN at index \\(3,\\)"):
        lower("quant_matmul", i8(4, 64), i8(64, 32), s, output_dtype="bfloat16")


# -- int_matmul / dequantize compositions, unsupported ops --------------------------------------------------------
def test_int_matmul_is_int32_output_quant_matmul_with_an_ignored_scale():
    a, b = i8(5, 33), i8(33, 7)
    plan = lower("int_matmul", a, b)
    mm = plan.find("npu_quant_matmul")
    assert mm.args == (T("a"), T("b"), T("scale")) and mm.kwargs == {"output_dtype": DType("int32")}
    np.testing.assert_array_equal(plan.inputs["scale"].array, np.ones(1, np.float32))
    # The golden confirms the composition: int32 output ignores the scale and is the exact accumulator.
    np.testing.assert_array_equal(w8a8.quant_matmul(a, b, np.ones(1, np.float32), output_dtype="int32"),
                                  w8a8.int_matmul(a, b))


def test_int_matmul_takes_int8_only():
    with pytest.raises(ConstraintTypeError, match="'a'.*int8"):
        lower("int_matmul", np.zeros((2, 3), np.int16), np.zeros((3, 2), np.int16))


def test_dequantize_lowers_to_anti_quant_with_negated_zero_point():
    y, s = i8(4, 8), f32(8, lo=0.1, hi=2.0)
    zp = np.array([3.0], np.float32)
    plan = lower("dequantize", y, s, zp, axis=-1, output_dtype="bfloat16")
    call = plan.find("npu_anti_quant")
    assert call.kwargs["dst_dtype"] == DType("bfloat16") and call.kwargs["src_dtype"] == DType("int8")
    off = plan.value(call.kwargs["offset"])
    np.testing.assert_array_equal(off, np.full(8, -3.0, np.float32))   # broadcast to the scale's shape
    want = w8a8.dequantize(y, s, zp, axis=-1, output_dtype="bfloat16")
    got = w8a8.anti_quant(y, plan.value(call.args[1]), offset=off, dst_dtype="bfloat16")
    np.testing.assert_array_equal(got.view(np.int16), want.view(np.int16))


@pytest.mark.parametrize("kwargs, arg", [
    (dict(output_dtype="float32"), "output_dtype"),          # anti_quant writes fp16 / bf16 only
    (dict(axis=0, output_dtype="float16"), "axis"),          # its scale runs along the last dim
    (dict(axis=None, output_dtype="float16"), "axis"),       # per-row scales
])
def test_dequantize_outside_anti_quant_is_unsupported(kwargs, arg):
    # Calls the golden accepts (the scale matches the axis: per row for axis=None, y.shape[0] for axis=0).
    y = i8(4, 8)
    scale = f32(4) if kwargs.get("axis", -1) in (None, 0) else f32(8)
    with pytest.raises(Unsupported, match=f"'{arg}'"):
        lower("dequantize", y, scale, **kwargs)


def test_dequantize_zero_point_that_does_not_fit_a_bf16_scale_is_rejected():
    # -0.1 is not a bf16 value: the anti_quant offset (in the scale's dtype) could not carry it exactly.
    with pytest.raises(ConstraintTypeError, match="'zero_point'.*bfloat16"):
        lower("dequantize", i8(4, 8), f32(8).astype(BF16), np.array([0.1], np.float32), output_dtype="float16")


def test_nz_to_nd_is_declared_unsupported():
    with pytest.raises(Unsupported, match="nz_to_nd: no torch_npu op takes FRACTAL_NZ storage"):
        lower("nz_to_nd", np.zeros((1, 1, 16, 32), np.int8), (16, 32))
    assert "nz_to_nd" not in TorchNpuBackend().ops()


# -- trans_quant_param, format_cast_nz ---------------------------------------------------------------------------
def test_trans_quant_param_2d_scale_is_packed_flat_and_reshaped():
    s = f32(3, 5)
    plan = lower("trans_quant_param", s)
    call = plan.find("npu_trans_quant_param")
    assert plan.value(call.args[0]).shape == (15,) and call.kwargs == {}
    assert plan.reshape == {"packed": (3, 5)}
    # Elementwise packing: the flat call's bits, reshaped, are the 2-D call's bits.
    np.testing.assert_array_equal(w8a8.trans_quant_param(s.reshape(-1)).reshape(3, 5), w8a8.trans_quant_param(s))


def test_trans_quant_param_round_mode_is_passed_only_when_not_default():
    assert lower("trans_quant_param", f32(4), round_mode=1).find("npu_trans_quant_param").kwargs == {"round_mode": 1}
    assert lower("trans_quant_param", f32(1, 4)).find("npu_trans_quant_param").kwargs == {}
    with pytest.raises(ValueError, match="'round_mode'"):
        lower("trans_quant_param", f32(4), round_mode=2)


def test_format_cast_nz_reads_back_the_storage_shape():
    plan = lower("format_cast_nz", bf16(3, 17, 40))
    assert plan.find("npu_format_cast").args == (T("w"), 29)
    assert plan.readback == {"w_nz": (3, 3, 2, 16, 16)}   # [.., ceil(40/16), ceil(17/16), 16, 16]
    with pytest.raises(ConstraintTypeError, match="'w'"):
        lower("format_cast_nz", np.zeros((16, 32), np.int64))


# -- quantization ops -----------------------------------------------------------------------------------------------
def test_dynamic_quant_passes_dst_type_and_leaves_quant_mode_default():
    plan = lower("dynamic_quant", bf16(3, 7, 16), dst_type="int4")
    call = plan.find("npu_dynamic_quant")
    assert call.kwargs == {"dst_type": DType("quint4x2")} and call.out == ("y", "scale")
    assert plan.container == "tuple"


def test_dynamic_quant_group_index_must_strictly_increase():
    x, smooth = bf16(6, 16), bf16(3, 16)
    ok = lower("dynamic_quant", x, smooth_scales=smooth, group_index=np.array([2, 4, 6], np.int32))
    assert set(ok.find("npu_dynamic_quant").kwargs) == {"smooth_scales", "group_index", "dst_type"}
    with pytest.raises(ConstraintError, match="'group_index'.*strictly increasing"):
        lower("dynamic_quant", x, smooth_scales=smooth, group_index=np.array([2, 2, 6], np.int32))


def test_dynamic_quant_bad_input_is_the_goldens_error():
    with pytest.raises(TypeError, match="'x'"):
        lower("dynamic_quant", f32(3, 16))


@pytest.mark.parametrize("dtype, div_mode, torch_name", [
    ("int8", False, "qint8"), ("int4", False, "quint4x2"), ("int8", True, "qint8"), ("uint8", True, "quint8"),
    ("int32", True, "qint32")])
def test_quantize_is_positional_with_the_q_dtype(dtype, div_mode, torch_name):
    x = bf16(2, 16) if not div_mode else f32(2, 16)
    scales = bf16(16) if not div_mode else f32(16)
    plan = lower("quantize", x, scales, None, dtype=dtype, axis=-1, div_mode=div_mode)
    assert plan.find("npu_quantize").args == (T("x"), T("scales"), None, DType(torch_name), -1, div_mode)


def test_anti_quant_names_dtypes():
    call = lower("anti_quant", i8(2, 8), f32(8), dst_dtype="bfloat16").find("npu_anti_quant")
    assert call.kwargs == {"dst_dtype": DType("bfloat16"), "src_dtype": DType("int8")}


# -- the Linear serving paths ---------------------------------------------------------------------------------------
def test_dynamic_linear_plan_mirrors_sglang():
    x, w, ws = bf16(2, 3, 64), i8(96, 64), f32(96, 1)
    plan = lower("w8a8_dynamic_linear", x, w, ws)
    assert plan.functions("load") == ["Tensor.transpose", "Tensor.contiguous", "torch_npu.npu_format_cast"]
    assert plan.load[0].args == (T("weight"), 0, 1)
    assert plan.functions("calls") == ["torch_npu.npu_dynamic_quant", "torch_npu.npu_quant_matmul"]
    dq, mm = plan.calls
    assert dq.args == (T("x"),) and dq.kwargs == {"dst_type": DType("int8")}
    assert mm.args[0] == T("x_q") and mm.kwargs["pertoken_scale"] == T("x_scale")
    assert mm.kwargs["output_dtype"] == DType("bfloat16")
    assert plan.inputs["x"].array.shape == (6, 64)           # x flattened to 2-D
    assert plan.reshape == {"y": (2, 3, 96)}
    # bf16 model: the fp32 checkpoint scale is rounded to bf16 (SGLang params_dtype).
    np.testing.assert_array_equal(plan.inputs["weight_scale"].array, ws.reshape(96).astype(BF16))


def test_dynamic_linear_fp16_keeps_an_fp32_scale():
    plan = lower("w8a8_dynamic_linear", f32(4, 64).astype(np.float16), i8(32, 64), f32(32))
    assert plan.inputs["weight_scale"].array.dtype == np.float32
    assert plan.find("npu_quant_matmul").kwargs["output_dtype"] == DType("float16")


def test_dynamic_linear_unaligned_weight_stays_nd():
    plan = lower("w8a8_dynamic_linear", bf16(4, 64), i8(40, 64), f32(40))   # [K, N] = [64, 40]
    assert plan.formats == {"weight": "ND"}
    assert plan.find("npu_quant_matmul").args[1] == T("weight_kn")


def test_static_linear_plan_mirrors_sglang():
    x, w = bf16(5, 64), i8(32, 64)
    s_in, o_in = np.array([0.05], np.float32), np.array([3.0], np.float32)
    deq, qb = f32(32), RNG.integers(-100, 100, 32).astype(np.int32)
    plan = lower("w8a8_static_linear", x, w, input_scale=s_in, input_offset=o_in, deq_scale=deq, quant_bias=qb)
    quant = plan.find("npu_quantize")
    assert quant.args == (T("x"), T("input_scale_reciprocal"), T("input_offset"), DType("qint8"), -1, False)
    r = plan.inputs["input_scale_reciprocal"].array
    assert r.dtype == BF16 and r.shape == (64,)
    # 1/0.05 in fp32 is 20.0 (0.05 -> bf16 0.050048828125 first: 1/that = 19.98..., bf16 -> 20.0).
    assert float(r[0]) == 20.0
    np.testing.assert_array_equal(plan.inputs["input_offset"].array.astype(np.float32), np.full(64, 3.0, np.float32))
    mm = plan.find("npu_quant_matmul")
    assert mm.args[2] == T("deq_scale")
    assert mm.kwargs == {"bias": T("quant_bias"), "output_dtype": DType("bfloat16")}
    assert "torch_npu.npu_trans_quant_param" not in plan.functions("load")   # bf16: fp32 deq at full precision


def test_static_linear_fp16_fp32_deq_scale_is_packed():
    x = f32(5, 64).astype(np.float16)
    plan = lower("w8a8_static_linear", x, i8(32, 64), input_scale=np.array([0.05], np.float32),
                 input_offset=np.array([0.0], np.float32), deq_scale=f32(32), quant_bias=None)
    assert "torch_npu.npu_trans_quant_param" in plan.functions("load")


def test_static_linear_int64_deq_for_bf16_is_the_goldens_error():
    with pytest.raises(TypeError, match="'scale'.*bfloat16 output"):
        lower("w8a8_static_linear", bf16(2, 64), i8(32, 64), input_scale=np.array([0.05], np.float32),
              input_offset=np.array([0.0], np.float32), deq_scale=np.zeros(32, np.int64), quant_bias=None)


def test_linear_weight_k_must_match():
    with pytest.raises(ValueError, match="'x'.*K = 48"):
        lower("w8a8_dynamic_linear", bf16(2, 64), i8(32, 48), f32(32))


def test_unknown_op_is_unsupported_and_unknown_argument_a_type_error():
    with pytest.raises(Unsupported):
        lower("no_such_op")
    with pytest.raises(TypeError, match="pertoken"):
        lower("quant_matmul", i8(2, 16), i8(16, 32), f32(32), pertoken=f32(2))


def test_plan_describe_is_readable():
    text = lower("w8a8_dynamic_linear", bf16(2, 64), i8(32, 64), f32(32)).describe()
    assert "load (once, untimed):" in text and "run (timed):" in text
    assert "torch_npu.npu_quant_matmul(x_q, weight_nz, weight_scale, pertoken_scale=x_scale" in text


def test_backend_supports_answers_dtype_questions_without_arrays():
    backend = TorchNpuBackend()
    assert backend.supports("quant_matmul", output_dtype="bfloat16")
    assert not backend.supports("dequantize", output_dtype="float32")
    assert not backend.supports("nz_to_nd")
    assert backend.info()["unsupported_ops"]["nz_to_nd"].startswith("no torch_npu op")
