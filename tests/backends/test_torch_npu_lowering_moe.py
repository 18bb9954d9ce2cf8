"""Lowering of the grouped-MoE ops and the W8A8 MoE path to torch_npu calls (backends.torch_npu.lowering_moe).

Pure, no device. Each test names the rule it pins (ops-transformer, op-plugin, SGLang's ascend_tp path;
the torch_npu 2.13.0 docs). Compositions are checked against the golden.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import w8a8
from backends.testing import ArrayFactory
from backends.torch_npu._lower_common import Options
from backends.torch_npu.lowering import lower
from backends.torch_npu.plan import ConstraintError, DType, T

BF16 = np.dtype(ml_dtypes.bfloat16)
ARRAYS = ArrayFactory(7)
RNG = ARRAYS.rng
i8, f32, bf16 = ARRAYS.i8, ARRAYS.f32, ARRAYS.bf16


def gmm_args(m=10, k=64, n=64, e=3, counts=(4, 0, 5)):
    return i8(m, k), i8(e, k, n), np.array(counts, np.int64)


# -- grouped matmul ---------------------------------------------------------------------------------------
def test_grouped_matmul_passes_group_type_and_every_mode_explicitly():
    # "Requires manual passing group_type, current is None" (GroupedMatmulKernelNpuOpApi.cpp:129).
    x, w, gl = gmm_args()
    plan = lower("grouped_matmul", x, w, scale=f32(3, 64).astype(BF16), per_token_scale=f32(10), group_list=gl,
                 group_list_type=1, output_dtype="bfloat16")
    call = plan.find("npu_grouped_matmul")
    assert call.args == ([T("x")], [T("weight_nz")])
    assert call.kwargs == {"scale": [T("scale")], "per_token_scale": [T("per_token_scale")],
                           "group_list": T("group_list"), "split_item": 3, "group_type": 0, "group_list_type": 1,
                           "act_type": 0, "output_dtype": DType("bfloat16")}
    assert call.pick == 0                       # split_item 2/3: one output tensor in a list
    assert plan.inputs["group_list"].array.dtype == np.int64
    assert plan.container == "single"


def test_grouped_matmul_list_form_returns_a_list():
    x, w, gl = gmm_args()
    plan = lower("grouped_matmul", [x], [w], scale=[f32(3, 64)], group_list=gl, group_list_type=1,
                 output_dtype="float16", split_item=2)
    assert plan.container == "list" and plan.find("npu_grouped_matmul").kwargs["split_item"] == 2


def test_bf16_output_needs_a_bf16_scale():
    # Per-token GMM: "only supports scale bf16 with output bf16, or scale fp32 when output fp16" (ops-transformer
    # aclnn_grouped_matmul.cpp).
    x, w, gl = gmm_args()
    plan = lower("grouped_matmul", x, w, scale=f32(3, 64).astype(BF16), group_list=gl, group_list_type=1,
                 output_dtype="bfloat16")
    assert plan.inputs["scale"].array.dtype == BF16
    with pytest.raises(TypeError, match="'output_dtype'.*float16 for a float32 scale"):
        lower("grouped_matmul", x, w, scale=f32(3, 64), per_token_scale=f32(10), group_list=gl, group_list_type=1,
              output_dtype="bfloat16")


def test_int8_output_uses_nd_weights_only():
    x, w, gl = gmm_args()
    packed = w8a8.trans_quant_param(f32(3, 64))
    plan = lower("grouped_matmul", x, w, scale=packed, group_list=gl, group_list_type=1, output_dtype="int8")
    assert plan.formats == {"weight": "ND"} and plan.functions("load") == []
    assert any("ND weights" in d for d in plan.decisions)
    with pytest.raises(ConstraintError, match="'weight'.*ND"):
        lower("grouped_matmul", x, w, scale=packed, group_list=gl, group_list_type=1, output_dtype="int8",
              options=Options("NZ"))


def test_int32_output_without_scale_and_unaligned_weight():
    x, w, gl = gmm_args(k=48, n=40)
    plan = lower("grouped_matmul", x, w, group_list=gl, group_list_type=1, output_dtype="int32")
    call = plan.find("npu_grouped_matmul")
    assert "scale" not in call.kwargs and call.kwargs["output_dtype"] == DType("int32")
    assert plan.formats == {"weight": "ND"}


def test_rows_past_the_group_total_are_zeroed_on_the_host():
    # 9 of 10 rows are grouped: the device leaves row 9 unwritten; the golden writes 0 there.
    x, w, gl = gmm_args()
    plan = lower("grouped_matmul", x, w, group_list=gl, group_list_type=1, output_dtype="int32")
    assert [(f.output, f.rows_from, f.value) for f in plan.fixups] == [("y", 9, 0)]
    done = plan.finish([np.ones((10, 64), np.int32)])
    assert done[:9].min() == 1 and not done[9:].any()


@given(counts=st.lists(st.integers(0, 5), min_size=2, max_size=6), extra=st.integers(0, 3))
def test_fixup_starts_at_the_group_list_total(counts, extra):
    m = sum(counts) + extra
    x, w, gl = gmm_args(m=m, e=len(counts), counts=counts)
    plan = lower("grouped_matmul", x, w, group_list=np.cumsum(gl), group_list_type=0, output_dtype="int32")
    assert [f.rows_from for f in plan.fixups] == ([sum(counts)] if extra else [])


def test_per_token_scale_column_is_the_goldens_error():
    # The error contract: a [M, 1] per-token scale is refused by the golden, so by every backend.
    x, w, gl = gmm_args()
    with pytest.raises(ValueError, match="'per_token_scale' must be 1-D"):
        lower("grouped_matmul", x, w, scale=f32(3, 64), per_token_scale=f32(10, 1), group_list=gl,
              group_list_type=1, output_dtype="float16")


@pytest.mark.parametrize("kwargs, exc, arg", [
    (dict(group_list=np.array([9], np.int64), group_list_type=1), ConstraintError, "group_list"),  # length 1, counts
    (dict(group_list=np.array([4, 0, 5], np.int64), act_type=5), ValueError, "act_type"),          # no per-token
    (dict(group_list=np.array([4, 0, 5], np.int64), act_type=3), ValueError, "act_type"),
    (dict(group_list=np.array([8, 0, 5], np.int64), group_list_type=1), ValueError, "group_list"),  # 13 > 10 rows
    (dict(group_list=np.array([4, 0, 5], np.int64), group_type=2), ValueError, "group_type"),
])
def test_grouped_matmul_illegal_combinations(kwargs, exc, arg):
    x, w, _ = gmm_args(e=len(kwargs["group_list"]))
    with pytest.raises(exc, match=f"'{arg}'"):
        lower("grouped_matmul", x, w, output_dtype="int32", **kwargs)


def test_grouped_matmul_refuses_what_the_schema_refuses():
    # Tensor[] arguments take no None element (op_plugin_functions.yaml:6346 @ 517f2e7d); an int8 x has no
    # bf16-weight pattern (aclnn_grouped_matmul.cpp:984-1005 @ c29bc106): refused before any call is built
    x, w, gl = gmm_args()
    with pytest.raises(TypeError, match="'per_token_scale'"):
        lower("grouped_matmul", x, w, scale=f32(3, 64), per_token_scale=[None], group_list=gl, group_list_type=1,
              output_dtype="float16")
    with pytest.raises(TypeError, match="'weight'"):
        lower("grouped_matmul", x, w.astype(np.float32).astype(BF16), scale=f32(3, 64), group_list=gl,
              group_list_type=1, output_dtype="float16")


def test_grouped_matmul_inner_limit():
    # torch_npu's "last dim < 65536" is the golden's own limit: its error, raised by its check.
    with pytest.raises(ValueError, match="'weight'.*< 65536"):
        lower("grouped_matmul", i8(2, 16), np.zeros((1, 16, 65536), np.int8), group_list=np.array([2], np.int64),
              output_dtype="int32")


# -- routing ---------------------------------------------------------------------------------------------
def test_init_routing_v2_always_gets_range_and_quant_mode():
    # Golden defaults (quant_mode=-1, no range): the call still spells both out (op-plugin
    # MoeInitRoutingV2KernelNpuOpApi.cpp: the default changed 0 -> -1; an empty range caches the first call's
    # expert_num in a static vector).
    x, ids = bf16(5, 16), RNG.integers(0, 4, (5, 2)).astype(np.int32)
    plan = lower("moe_init_routing_v2", x, ids, expert_num=4, expert_tokens_num_type=1, expert_tokens_num_flag=True)
    call = plan.find("npu_moe_init_routing_v2")
    assert call.args == (T("x"), T("expert_idx"))
    assert call.kwargs == {"active_num": -1, "expert_capacity": -1, "expert_num": 4, "drop_pad_mode": 0,
                           "expert_tokens_num_type": 1, "expert_tokens_num_flag": True, "quant_mode": -1,
                           "active_expert_range": [0, 4], "row_idx_type": 0}
    assert call.out == ("expanded_x", "expanded_row_idx", "expert_tokens", "expanded_scale")


def test_init_routing_v2_cumsum_counts_run_as_counts_plus_cumsum():
    # torch_npu 2.13 documents only count (1) and key-value (2); cumsum is computed from counts.
    x, ids = bf16(6, 16), RNG.integers(0, 4, (6, 2)).astype(np.int32)
    plan = lower("moe_init_routing_v2", x, ids, expert_num=4, expert_tokens_num_type=0, expert_tokens_num_flag=True)
    assert plan.find("npu_moe_init_routing_v2").kwargs["expert_tokens_num_type"] == 1
    cum = plan.find("torch.cumsum")
    assert cum.args == (T("expert_tokens"), 0) and plan.outputs[2] == cum.out[0]
    kw = dict(expert_num=4, expert_tokens_num_flag=True)
    counts = w8a8.moe_init_routing_v2(x, ids, expert_tokens_num_type=1, **kw)[2]
    np.testing.assert_array_equal(w8a8.moe_init_routing_v2(x, ids, expert_tokens_num_type=0, **kw)[2],
                                  np.cumsum(counts))


def test_init_routing_v2_flag_false_runs_with_true_and_returns_the_empty_counts():
    x, ids = bf16(3, 16), RNG.integers(0, 4, (3, 2)).astype(np.int32)
    plan = lower("moe_init_routing_v2", x, ids, expert_num=4, expert_tokens_num_type=1)
    assert plan.find("npu_moe_init_routing_v2").kwargs["expert_tokens_num_flag"] is True
    assert plan.find("narrow").args == (T("expert_tokens"), 0, 0, 0)
    assert w8a8.moe_init_routing_v2(x, ids, expert_num=4)[2].shape == (0,)   # what the golden returns


def test_init_routing_v2_fixups_follow_the_goldens_validity():
    # Range [1, 3) of 4 experts: ids 0 and 3 are dropped; 'available' rows are written, the rest
    # undefined (0 in the golden). The one-core sort kernel writes all N*K scatter indices
    # (moe_v3_sort_one_core.h:52-112 @ c29bc106): nothing to fix up there.
    ids = np.array([[0, 1], [2, 3], [1, 1]], np.int32)    # 4 ids in [1, 3)
    plan = lower("moe_init_routing_v2", bf16(3, 16), ids, expert_num=4, expert_tokens_num_type=1,
                 expert_tokens_num_flag=True, quant_mode=1, active_expert_range=[1, 3], row_idx_type=1)
    assert {(f.output, f.rows_from, f.value) for f in plan.fixups} == {("expanded_x", 4, 0), ("expanded_scale", 4, 0)}
    # the gather-sort perf kernel (quant -1, counts, 256 experts, range <= 32, 384 <= N <= 8192, k = 8) writes
    # only the active scatter indices: the rest is undefined, -1 in the golden's fill
    ids = np.zeros((384, 8), np.int32)
    ids[:, 4:] = 100                                       # 384 * 4 active ids in [0, 32)
    plan = lower("moe_init_routing_v2", bf16(384, 16), ids, expert_num=256, expert_tokens_num_type=1,
                 expert_tokens_num_flag=True, active_expert_range=[0, 32], row_idx_type=1)
    assert ("expanded_row_idx", 384 * 4, -1) in {(f.output, f.rows_from, f.value) for f in plan.fixups}


@pytest.mark.parametrize("kwargs, arg", [
    (dict(quant_mode=0, scale=np.ones(1, np.float32)), "quant_mode"),               # static: not supported
    (dict(drop_pad_mode=1, expert_capacity=2), "drop_pad_mode"),                    # 'currently only 0'
    (dict(expert_num=-1, active_expert_range=[0, 4]), "expert_num"),               # must be > 0
])
def test_init_routing_v2_undocumented_modes_are_rejected(kwargs, arg):
    ids = np.array([[0, 1], [2, 3]], np.int32)
    args = dict(expert_num=4, expert_tokens_num_type=1, expert_tokens_num_flag=True) | kwargs
    with pytest.raises(ConstraintError, match=f"'{arg}'"):
        lower("moe_init_routing_v2", bf16(2, 16), ids, **args)


def test_init_routing_v2_ids_beyond_expert_num_are_rejected():
    # SGLang's EP sentinel is exactly expert_num (allowed); larger ids "exceed the expert count".
    ok = lower("moe_init_routing_v2", bf16(2, 16), np.array([[0, 4], [1, 2]], np.int32), expert_num=4,
               expert_tokens_num_type=1, expert_tokens_num_flag=True)
    assert ok.find("npu_moe_init_routing_v2").kwargs["active_expert_range"] == [0, 4]
    with pytest.raises(ConstraintError, match="'expert_idx'"):
        lower("moe_init_routing_v2", bf16(2, 16), np.array([[0, 5], [1, 2]], np.int32), expert_num=4,
              expert_tokens_num_type=1, expert_tokens_num_flag=True)


@given(e=st.integers(1, 8), t=st.integers(1, 5), k=st.integers(1, 3), qm=st.sampled_from([-1, 1]),
       kind=st.sampled_from([1, 2]), ridx=st.sampled_from([0, 1]))
def test_init_routing_v2_options_are_always_explicit(e, t, k, qm, kind, ridx):
    ids = RNG.integers(0, e, (t, k)).astype(np.int32)
    plan = lower("moe_init_routing_v2", bf16(t, 16), ids, expert_num=e, expert_tokens_num_type=kind,
                 expert_tokens_num_flag=True, quant_mode=qm, row_idx_type=ridx)
    kw = plan.find("npu_moe_init_routing_v2").kwargs
    assert kw["quant_mode"] == qm and kw["active_expert_range"] == [0, e] and kw["row_idx_type"] == ridx


def test_init_routing_v1_is_positional():
    n, k = 3, 2
    row_idx = np.arange(n * k, dtype=np.int32).reshape(k, n).T.copy()
    plan = lower("moe_init_routing", bf16(n, 16), row_idx, np.zeros((n, k), np.int32), 2)
    assert plan.find("npu_moe_init_routing").args == (T("x"), T("row_idx"), T("expert_idx"), 2)


# -- gating ------------------------------------------------------------------------------------------------
def test_gating_softmax_k_by_keyword():
    plan = lower("moe_gating_top_k_softmax", bf16(4, 8), k=2)
    call = plan.find("npu_moe_gating_top_k_softmax")
    assert call.args == (T("x"),) and call.kwargs == {"k": 2} and call.out == ("y", "expert_idx", "row_idx")


def test_gating_top_k_spells_out_every_option():
    plan = lower("moe_gating_top_k", f32(4, 16), 2, bias=f32(16), k_group=2, group_count=4, group_select_mode=1,
                 norm_type=1, routed_scaling_factor=2.5)
    assert plan.find("npu_moe_gating_top_k").kwargs == {
        "bias": T("bias"), "k_group": 2, "group_count": 4, "group_select_mode": 1, "renorm": 0, "norm_type": 1,
        "out_flag": False, "routed_scaling_factor": 2.5, "eps": 1e-20}


@pytest.mark.parametrize("kwargs, arg", [
    (dict(renorm=1), "renorm"),                # 2.13: 'currently only 0'
    (dict(norm_type=2), "norm_type"),          # sqrt-softplus: aclnnMoeGatingTopKV2, not in 2.13
    (dict(group_count=8), "group_count"),      # E / group_count = 2, must be > 2
])
def test_gating_top_k_undocumented_options_are_rejected(kwargs, arg):
    with pytest.raises(ConstraintError, match=f"'{arg}'"):
        lower("moe_gating_top_k", f32(4, 16), 1, **kwargs)


def test_gating_top_k_bias_must_have_x_dtype():
    with pytest.raises(TypeError, match="'bias'"):
        lower("moe_gating_top_k", f32(4, 16), 2, bias=bf16(16))


# -- activation, finalize ---------------------------------------------------------------------------------------
def test_swiglu_dim_by_keyword():
    assert lower("swiglu", bf16(3, 8), dim=0 - 1).find("npu_swiglu").kwargs == {"dim": -1}
    with pytest.raises(ValueError, match="'x'.*even"):
        lower("swiglu", bf16(3, 7))


def test_dequant_swiglu_quant_shapes_and_explicit_modes():
    x = RNG.integers(-1000, 1000, (6, 128)).astype(np.int32)
    plan = lower("dequant_swiglu_quant", x, weight_scale=f32(128), activation_scale=f32(6, 1), activate_left=True,
                 quant_mode=1)
    call = plan.find("npu_dequant_swiglu_quant")
    assert call.kwargs == {"weight_scale": T("weight_scale"), "activation_scale": T("activation_scale"),
                           "activate_left": True, "quant_mode": 1}
    assert plan.inputs["weight_scale"].array.shape == (1, 128)      # the device takes [groupNum, 2H]
    assert plan.inputs["activation_scale"].array.shape == (6,)      # and a 1-D [T] token scale


def test_dequant_swiglu_quant_group_rows_past_the_total_are_zeroed():
    x = RNG.integers(-1000, 1000, (6, 128)).astype(np.int32)
    plan = lower("dequant_swiglu_quant", x, weight_scale=f32(2, 128), activation_scale=f32(6),
                 group_index=np.array([2, 3], np.int64), activate_left=True, quant_mode=1)
    assert {(f.output, f.rows_from) for f in plan.fixups} == {("y", 5), ("scale", 5)}


@pytest.mark.parametrize("kwargs, exc, arg", [
    (dict(weight_scale=f32(128), quant_mode=1), ConstraintError, "activation_scale"),   # required for int32 x
    (dict(weight_scale=f32(128), activation_scale=f32(6), swiglu_limit=10.0, quant_mode=1), ConstraintError,
     "swiglu_limit"),
    (dict(weight_scale=f32(1, 128), activation_scale=f32(6), group_index=np.array([6], np.int64),
          quant_scale=f32(1, 64), quant_mode=0), ConstraintError, "quant_mode"),    # group_index: dynamic only
    (dict(activation_scale=f32(6)), ValueError, "weight_scale"),                    # int32 x needs it
])
def test_dequant_swiglu_quant_illegal_combinations(kwargs, exc, arg):
    x = RNG.integers(-1000, 1000, (6, 128)).astype(np.int32)
    with pytest.raises(exc, match=f"'{arg}'"):
        lower("dequant_swiglu_quant", x, **kwargs)


def test_finalize_is_positional_with_explicit_mode():
    n, k, h = 3, 2, 8
    rows, idx = bf16(n * k, h), np.arange(n * k, dtype=np.int32)
    plan = lower("moe_finalize_routing", rows, None, None, None, f32(n, k).astype(BF16), idx,
                 np.zeros((n, k), np.int32), drop_pad_mode=2)
    call = plan.find("npu_moe_finalize_routing")
    assert call.args == (T("expanded_permuted_rows"), None, None, None, T("scales"), T("expanded_src_to_dst_row"),
                         T("export_for_source_row"))
    assert call.kwargs == {"drop_pad_mode": 2}


def test_finalize_without_scales_passes_k():
    plan = lower("moe_finalize_routing", bf16(6, 8), None, None, None, None, np.arange(6, dtype=np.int32), None,
                 drop_pad_mode=0, k=3)
    assert plan.find("npu_moe_finalize_routing").kwargs == {"drop_pad_mode": 0, "k": 3}


def test_finalize_skip1_needs_skip2():
    # torch_npu 2.13 doc: "when skip2 is None, skip1 must be None too".
    with pytest.raises(ConstraintError, match="'skip2'"):
        lower("moe_finalize_routing", bf16(4, 8), bf16(2, 8), None, None, bf16(2, 2), np.arange(4, dtype=np.int32),
              None)


# -- the W8A8 MoE serving path ---------------------------------------------------------------------------------------
def moe_weights(e=4, h=64, i=32):
    return i8(e, 2 * i, h), f32(e, 2 * i, 1), i8(e, h, i), f32(e, h, 1)


def test_w8a8_moe_plan_is_the_sglang_ascend_tp_chain():
    t, k, e, h, i = 5, 2, 4, 64, 32
    w13, s13, w2, s2 = moe_weights(e, h, i)
    ids = RNG.integers(0, e, (t, k)).astype(np.int32)
    plan = lower("w8a8_moe", bf16(t, h), w13, s13, w2, s2, topk_ids=ids, topk_weights=f32(t, k))
    assert plan.functions("load") == ["Tensor.transpose", "Tensor.contiguous", "torch_npu.npu_format_cast",
                                      "Tensor.transpose", "Tensor.contiguous", "torch_npu.npu_format_cast"]
    assert plan.load[0].args == (T("w13"), 1, 2) and plan.load[3].args == (T("w2"), 1, 2)
    assert plan.formats == {"w13": "NZ", "w2": "NZ"}        # [E, 64, 64] and [E, 32, 64]: aligned
    assert plan.functions("calls") == [
        "torch_npu.npu_moe_init_routing_v2", "torch_npu.npu_grouped_matmul", "torch_npu.npu_dequant_swiglu_quant",
        "torch_npu.npu_grouped_matmul", "Tensor.to", "torch_npu.npu_moe_finalize_routing"]
    route = plan.find("npu_moe_init_routing_v2")
    assert route.kwargs == {"active_num": t * k, "expert_capacity": -1, "expert_num": e, "drop_pad_mode": 0,
                            "expert_tokens_num_type": 1, "expert_tokens_num_flag": True, "quant_mode": 1,
                            "active_expert_range": [0, e], "row_idx_type": 0}
    g1 = plan.find("npu_grouped_matmul", index=0)
    assert g1.args == ([T("expanded_x")], [T("w13_nz")])
    assert g1.kwargs == {"scale": [T("w13_scale")], "per_token_scale": [T("expanded_scale")],
                         "group_list": T("expert_tokens"), "split_item": 2, "group_type": 0, "group_list_type": 1,
                         "act_type": 0, "output_dtype": DType("bfloat16")}
    # bf16 output -> bf16 scales (the fp32 checkpoint scales rounded on the host)
    np.testing.assert_array_equal(plan.inputs["w13_scale"].array, s13.reshape(e, 2 * i).astype(BF16))
    assert plan.inputs["w2_scale"].array.dtype == BF16
    act = plan.find("npu_dequant_swiglu_quant")
    assert act.args == (T("y"),) and act.kwargs == {"activate_left": True, "quant_mode": 1}
    g2 = plan.find("npu_grouped_matmul", index=1)
    assert g2.kwargs["per_token_scale"] == [T("scale")] and g2.args == ([T("y_2")], [T("w2_nz")])
    fin = plan.find("npu_moe_finalize_routing")
    assert fin.args == (T("y_3"), None, None, None, T("topk_weights_bf16"), T("expanded_row_idx"), T("topk_ids"))
    assert fin.kwargs == {"drop_pad_mode": 2}      # row-major map of init_routing_v2 (row_idx_type=0)
    assert plan.find("Tensor.to").args == (T("topk_weights"), DType("bfloat16"))


def test_w8a8_moe_unaligned_experts_stay_nd():
    w13, s13, w2, s2 = moe_weights(2, 48, 24)          # w13 [E, 48, 48]: 48 % 32; w2 [E, 24, 48]: 24 % 16
    plan = lower("w8a8_moe", bf16(3, 48), w13, s13, w2, s2, topk_ids=np.zeros((3, 1), np.int32),
                 topk_weights=f32(3, 1))
    assert plan.formats == {"w13": "ND", "w2": "ND"}


def test_w8a8_moe_router_paths():
    w = moe_weights()
    soft = lower("w8a8_moe", bf16(5, 64), *w, top_k=2, router_logits=bf16(5, 4))
    assert soft.functions("calls")[:2] == ["torch_npu.npu_moe_gating_top_k_softmax", "Tensor.to"]
    sig = lower("w8a8_moe", bf16(5, 64), *moe_weights(e=8), top_k=2, router_logits=bf16(5, 8), scoring_func="sigmoid",
                correction_bias=f32(8), routed_scaling_factor=1.5)
    gate = sig.find("npu_moe_gating_top_k")
    # serving row M2 (SGLang, the default): the gating op gets 1, the bf16 routed output is multiplied after
    # the finalize (fused_topk_npu with renormalize; DeepseekV2MoE's *= routed_scaling_factor)
    assert gate.kwargs["norm_type"] == 1 and gate.kwargs["routed_scaling_factor"] == 1.0
    fns = sig.functions("calls")
    assert fns[fns.index("torch_npu.npu_moe_finalize_routing") + 1] == "torch.mul"
    assert sig.find("torch.mul").args[1] == 1.5
    assert sig.inputs["router_logits"].array.dtype == np.float32     # SGLang: logits.float()
    with pytest.raises(ConstraintError, match="'norm_type'"):
        lower("w8a8_moe", bf16(5, 64), *moe_weights(e=8), top_k=2, router_logits=bf16(5, 8),
              scoring_func="sqrtsoftplus")


@pytest.mark.parametrize("serving", ["sglang", "vllm-ascend"])
def test_w8a8_moe_swiglu_limit_as_each_engine_runs_it(serving):
    # serving row M1: SGLang's ascend_tp runs the routed experts unclamped (no clamp call at all); vllm-ascend
    # clamps them: emitted as the bf16 pre-clamp of GMM1's output before npu_dequant_swiglu_quant
    plan = lower("w8a8_moe", bf16(3, 64), *moe_weights(), topk_ids=np.zeros((3, 1), np.int32),
                 topk_weights=f32(3, 1), swiglu_limit=10.0, serving=serving)
    fns = plan.functions("calls")
    if serving == "sglang":
        assert "torch.clamp" not in fns
        return
    i = fns.index("torch_npu.npu_dequant_swiglu_quant")
    assert fns[i - 4:i] == ["torch.chunk", "torch.clamp", "torch.clamp", "torch.cat"]
    gate, up = plan.find("torch.clamp", index=0), plan.find("torch.clamp", index=1)
    assert gate.kwargs == {"max": 10.0} and up.kwargs == {"min": -10.0, "max": 10.0}


def test_w8a8_moe_shared_expert_adds_three_linears():
    w = moe_weights()
    shared = {"gate_weight": i8(32, 64), "gate_scale": f32(32, 1), "up_weight": i8(32, 64), "up_scale": f32(32, 1),
              "down_weight": i8(64, 32), "down_scale": f32(64, 1)}
    plan = lower("w8a8_moe", bf16(3, 64), *w, topk_ids=np.zeros((3, 1), np.int32), topk_weights=f32(3, 1),
                 shared_expert=shared)
    fns = plan.functions("calls")
    assert fns.count("torch_npu.npu_quant_matmul") == 3 and "torch.cat" in fns and "torch_npu.npu_swiglu" in fns
    assert fns[-2:] == ["torch.add", "Tensor.to"]
    assert plan.find("npu_dynamic_quant").args == (T("hidden"),)    # on the same bf16 hidden states


def test_w8a8_moe_prequantized_gathers_the_dispatched_scale():
    t = 4
    plan = lower("w8a8_moe_prequantized", i8(t, 64), f32(t), *moe_weights(), topk_ids=np.zeros((t, 2), np.int32),
                 topk_weights=f32(t, 2))
    route = plan.find("npu_moe_init_routing_v2")
    assert route.args == (T("x_q"), T("topk_ids")) and route.kwargs["scale"] == T("x_scale")
    assert route.kwargs["quant_mode"] == -1
    with pytest.raises(ValueError, match="'shared_input'"):
        lower("w8a8_moe_prequantized", i8(t, 64), f32(t), *moe_weights(), topk_ids=np.zeros((t, 2), np.int32),
              topk_weights=f32(t, 2), shared_expert={k: None for k in ("gate_weight", "gate_scale", "up_weight",
                                                                      "up_scale", "down_weight", "down_scale")})


def test_w8a8_moe_bad_input_is_the_goldens_error():
    with pytest.raises(TypeError, match="'hidden'"):
        lower("w8a8_moe", f32(3, 64), *moe_weights(), topk_ids=np.zeros((3, 1), np.int32), topk_weights=f32(3, 1))
    with pytest.raises(ValueError, match="'topk_ids'.*\\[0, E = 4\\)"):
        lower("w8a8_moe", bf16(3, 64), *moe_weights(), topk_ids=np.full((3, 1), 4, np.int32), topk_weights=f32(3, 1))
    w13, s13, w2, s2 = moe_weights()
    with pytest.raises(ValueError, match="'w2'"):
        lower("w8a8_moe", bf16(3, 64), w13, s13, w2[:, :, :16], s2, topk_ids=np.zeros((3, 1), np.int32),
              topk_weights=f32(3, 1))
