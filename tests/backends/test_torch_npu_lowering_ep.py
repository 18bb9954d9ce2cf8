"""Lowering of the expert-parallel ops to per-rank MC2 calls (backends.torch_npu.lowering_ep). Pure, no device.

Each test names the rule it pins: the torch_npu 2.13.0 schema, the capacity
``A = global_bs_real * min(E_loc, K)`` of its meta registrations, the runner (SGLang ``moe_runner/ascend.py``,
vllm-ascend ``moe_mlp.py``: W13 takes the received scale, or quantizes once), the A3 rules of the op-plugin
docs (the golden's errors).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import w8a8
from backends.testing import ArrayFactory
from backends.torch_npu.lowering import lower
from backends.torch_npu.lowering_ep import capacity, device_mask, received_rows
from backends.torch_npu.plan import ConstraintError, DType, EpPlan, Group, T

ARRAYS = ArrayFactory(11)
RNG = ARRAYS.rng
GROUP = Group("ep")


def tokens(bs, h=1024, k=2, e=4, seed=0):
    rng = np.random.default_rng(seed)
    xs = [ARRAYS.bf16(t, h) for t in bs]
    ids = [np.argsort(rng.random((t, e)), axis=1)[:, :k].astype(np.int32) for t in bs]
    return xs, ids


# -- helpers, with hand-derived values ---------------------------------------------------------------------------
def test_received_rows_and_capacity():
    # E_loc 2, R 2: rank 0 owns experts 0, 1; rank 1 owns 2, 3.
    ids = [np.array([[0, 3], [1, 2]], np.int32), np.array([[2, 3]], np.int32)]
    assert received_rows(ids, None, 2, 0, 2) == [2, 4]          # rank 0: (0,0,0) (0,1,0); rank 1: the other 4
    mask = [np.array([[True, False], [True, True]]), np.array([[False, False]])]
    assert received_rows(ids, mask, 2, 0, 2) == [2, 1]          # only (0,1,1) reaches rank 1
    assert capacity([3, 3], 0, 2, 2) == 3 * 2 * 2               # global_bs 0: BS * R * min(E_loc, K)
    assert capacity([3, 1], 6, 4, 2) == 6 * 2                   # min(E_loc 4, K 2) = 2


def test_device_mask_keeps_a_prefix_one_dimensional():
    rows = np.array([[True, True], [True, True], [False, False]])
    np.testing.assert_array_equal(device_mask(rows), [True, True, False])       # [BS]: True rows first
    per_copy = np.array([[True, False], [True, True]])
    assert device_mask(per_copy).shape == (2, 2)                                 # [BS, K] kept
    gap = np.array([[False, False], [True, True]])                               # not a prefix: 2-D
    assert device_mask(gap).shape == (2, 2)


def test_ep_plan_finish_puts_ranks_in_entry_order():
    plan = EpPlan("x", [None, None, None], (2, 0, 1), "lists")
    # rank q's results (a, b): entries are (rank 1, rank 2, rank 0)
    assert plan.finish([("a0", "b0"), ("a1", "b1"), ("a2", "b2")]) == (["a1", "a2", "a0"], ["b1", "b2", "b0"])
    assert EpPlan("x", [None, None], (1, 0), "list").finish(["y0", "y1"]) == ["y1", "y0"]


# -- dispatch --------------------------------------------------------------------------------------------------------
def test_dispatch_v2_makes_each_ranks_call_with_every_option():
    xs, ids = tokens([3, 1])
    plan = lower("moe_distribute_dispatch_v2", xs, ids, "ep_group", 2, [1, 0], 4, quant_mode=2, global_bs=6,
                 expert_token_nums_type=0)
    assert isinstance(plan, EpPlan) and plan.entry_of_rank == (1, 0) and plan.container == "lists"
    for q in range(2):
        p = plan.ranks[q]
        call = p.find("npu_moe_distribute_dispatch_v2")
        assert call.args == (T("x"), T("expert_ids"))
        np.testing.assert_array_equal(p.inputs["x"].array.view(np.int16), xs[1 - q].view(np.int16))  # entry 1 - q
        assert call.kwargs == {"group_ep": GROUP, "ep_world_size": 2, "ep_rank_id": q, "moe_expert_num": 4,
                               "group_tp": "", "tp_world_size": 0, "tp_rank_id": 0, "expert_shard_type": 0,
                               "shared_expert_num": 1, "shared_expert_rank_num": 0, "quant_mode": 2, "global_bs": 6,
                               "expert_token_nums_type": 0, "comm_alg": ""}
        assert p.functions("load") == []


def test_dispatch_keeps_the_golden_valid_rows():
    xs, ids = tokens([4, 4], k=3, e=6, seed=1)
    golden = w8a8.moe_distribute_dispatch_v2(xs, ids, "ep_group", 2, [0, 1], 6, quant_mode=2)
    plan = lower("moe_distribute_dispatch_v2", xs, ids, "ep_group", 2, [0, 1], 6, quant_mode=2)
    for q in range(2):
        a_q = golden[0][q].shape[0]
        assert plan.ranks[q].truncate == {"expand_x": a_q, "dynamic_scales": a_q, "assist_info_for_combine": 3 * a_q,
                                          "ep_recv_counts": 2 * 3, "expand_scales": 0}
    bf = lower("moe_distribute_dispatch_v2", xs, ids, "ep_group", 2, [0, 1], 6)      # quant_mode 0
    assert bf.ranks[0].truncate["dynamic_scales"] == 0                                  # unwritten: golden [0]


def test_dispatch_v1_has_the_sender_side_index_and_no_comm_alg():
    xs, ids = tokens([1] * 8, h=7168, e=8, seed=2)
    call = lower("moe_distribute_dispatch", xs, ids, "g", 8, list(range(8)), 8, quant_mode=2).ranks[5].calls[0]
    assert call.fn == "torch_npu.npu_moe_distribute_dispatch" and "comm_alg" not in call.kwargs
    assert call.out[2] == "expand_idx" and call.kwargs["ep_rank_id"] == 5


def test_dispatch_mask_smooth_scales_and_tp1():
    xs, ids = tokens([3, 3], seed=3)
    mask = [np.array([True, True, False]), np.array([[True, False], [True, True], [False, True]])]
    smooth = ARRAYS.f32(4, 1024, lo=0.5, hi=1.5)                 # [E, H]: no shared-expert ranks, sharedExpertNum 0
    plan = lower("moe_distribute_dispatch_v2", xs, ids, "g", 2, [0, 1], 4, x_active_mask=mask, scales=smooth,
                 quant_mode=2, tp_world_size=1, group_tp="g")
    k0, k1 = (plan.ranks[q].calls[0].kwargs for q in range(2))
    assert plan.ranks[0].inputs["x_active_mask"].array.shape == (3,)      # a prefix of rows: 1-D
    assert plan.ranks[1].inputs["x_active_mask"].array.shape == (3, 2)    # per copy: 2-D
    assert k0["scales"] == T("scales") and k0["group_tp"] == GROUP and k0["tp_world_size"] == 1
    # the device gets the [E, H] tensor the tiling checks (dim0 == sharedExpertNum + moeExpertNum = 0 + 4)
    assert plan.ranks[0].inputs["scales"].array.shape == (4, 1024) and k0["shared_expert_num"] == 1


@pytest.mark.parametrize("kw, arg", [(dict(ep_world_size=4), "ep_world_size"), (dict(quant_mode=1), "quant_mode"),
                                     (dict(h=512), "x"), (dict(global_bs=5), "global_bs")])
def test_a3_rules_are_the_goldens_errors(kw, arg):
    xs, ids = tokens([2, 2], h=kw.pop("h", 1024))
    args = dict(ep_world_size=2, quant_mode=0) | kw
    with pytest.raises(ValueError, match=f"'{arg}'"):
        lower("moe_distribute_dispatch_v2", xs, ids, "g", args.pop("ep_world_size"), [0, 1], 4, **args)


@given(bs=st.lists(st.integers(1, 6), min_size=2, max_size=4), k=st.integers(1, 3), seed=st.integers(0, 99))
def test_rows_kept_are_what_each_rank_receives(bs, k, seed):
    r = len(bs)
    xs, ids = tokens(bs, k=k, e=2 * r, seed=seed)
    gbs = 0 if len(set(bs)) == 1 else max(bs) * r
    plan = lower("moe_distribute_dispatch_v2", xs, ids, "g", r, list(range(r)), 2 * r, quant_mode=2, global_bs=gbs)
    kept = [p.truncate["expand_x"] for p in plan.ranks]
    golden = w8a8.moe_distribute_dispatch_v2(xs, ids, "g", r, list(range(r)), 2 * r, quant_mode=2, global_bs=gbs)
    assert kept == [x.shape[0] for x in golden[0]] and sum(kept) == sum(bs) * k
    assert all(a <= capacity(bs, gbs, 2, k) for a in kept)


# -- combine ----------------------------------------------------------------------------------------------------------
def test_combine_v2_pads_to_the_dispatch_capacity():
    xs, ids = tokens([2, 2], seed=4)
    d = w8a8.moe_distribute_dispatch_v2(xs, ids, "g", 2, [0, 1], 4)
    w = [ARRAYS.f32(2, 2) for _ in range(2)]
    plan = lower("moe_distribute_combine_v2", d[0], ids, d[2], d[4], w, "g", 2, [0, 1], 4)
    a = 2 * 2 * 2                                               # BS * R * min(E_loc 2, K 2)
    for q in range(2):
        p = plan.ranks[q]
        assert p.inputs["expand_x"].array.shape == (a, 1024)
        assert p.inputs["assist_info_for_combine"].array.shape == (max(2 * 2, a * 128),)
        np.testing.assert_array_equal(p.inputs["expand_x"].array[len(d[0][q]):].view(np.int16), 0)
        call = p.calls[0]
        assert call.args == (T("expand_x"), T("expert_ids"), T("assist_info_for_combine"), T("ep_send_counts"),
                             T("expert_scales"))
        assert call.kwargs["comm_quant_mode"] == 0 and call.kwargs["ep_rank_id"] == q
    assert plan.container == "list"


# -- the EP layer -----------------------------------------------------------------------------------------------------
def layer(bs=(3, 5), h=1024, i=32, e=4, k=2, seed=5):
    xs, ids = tokens(list(bs), h=h, k=k, e=e, seed=seed)
    return dict(hidden=xs, w13=ARRAYS.i8(e, 2 * i, h), w13_scale=ARRAYS.f32(e, 2 * i, 1, lo=1e-4, hi=4e-4),
                w2=ARRAYS.i8(e, h, i), w2_scale=ARRAYS.f32(e, h, 1, lo=1e-3, hi=4e-3), topk_ids=ids,
                topk_weights=[ARRAYS.f32(t, k) for t in bs])


def test_w8a8_moe_ep_int8_chain_has_no_quantizer():
    case = layer()
    plan = lower("w8a8_moe_ep", **case)
    for q in range(2):
        p = plan.ranks[q]
        assert p.functions() == ["torch_npu.npu_moe_distribute_dispatch_v2", "torch_npu.npu_grouped_matmul",
                                 "torch_npu.npu_dequant_swiglu_quant", "torch_npu.npu_grouped_matmul",
                                 "torch_npu.npu_moe_distribute_combine_v2"]
        d = p.find("npu_moe_distribute_dispatch_v2")
        assert d.kwargs["quant_mode"] == 2 and d.kwargs["global_bs"] == 5 * 2      # uneven BS: max * R
        assert d.kwargs["expert_token_nums_type"] == 1                              # counts, GMM type 1
        g1 = p.find("npu_grouped_matmul")
        assert g1.args[0] == [T(d.out[0])]                                          # the received int8 rows
        assert g1.kwargs["per_token_scale"] == [T(d.out[1])]                        # their dynamic_scales
        assert g1.kwargs["group_list"] == T(d.out[3]) and g1.kwargs["group_list_type"] == 1
        c = p.find("npu_moe_distribute_combine_v2")
        g2 = p.find("npu_grouped_matmul", index=1)
        assert c.args == (T(g2.out[0]), T("topk_ids"), T(d.out[2]), T(d.out[4]), T("topk_weights"))
        assert p.inputs["topk_weights"].array.dtype == np.float32                  # fp32 expert_scales
        # rank q loads its own experts [2q, 2q + 2), transposed: the load steps read the slices
        np.testing.assert_array_equal(p.inputs["w13"].array, case["w13"][2 * q: 2 * q + 2])
        assert p.inputs["w13_scale"].array.shape == (2, 64)


def test_w8a8_moe_ep_bf16_chain_quantizes_once():
    plan = lower("w8a8_moe_ep", **layer(), dispatch="bf16")
    p = plan.ranks[1]
    assert p.functions()[:2] == ["torch_npu.npu_moe_distribute_dispatch_v2", "torch_npu.npu_dynamic_quant"]
    assert p.functions().count("torch_npu.npu_dynamic_quant") == 1
    d, dq = p.find("npu_moe_distribute_dispatch_v2"), p.find("npu_dynamic_quant")
    assert d.kwargs["quant_mode"] == 0 and dq.args == (T(d.out[0]),) and dq.kwargs == {"dst_type": DType("int8")}
    g1 = p.find("npu_grouped_matmul")
    assert g1.args[0] == [T(dq.out[0])] and g1.kwargs["per_token_scale"] == [T(dq.out[1])]


@pytest.mark.parametrize("kw, match", [(dict(bs=(3, 0)), "BS"), (dict(h=512), "H"), (dict(bs=(3,), e=2),
                                                                                       "ep_world_size")])
def test_w8a8_moe_ep_mc2_limits_are_device_constraints(kw, match):
    with pytest.raises(ConstraintError, match=f"npu_moe_distribute_dispatch_v2.*{match}"):
        lower("w8a8_moe_ep", **layer(**kw))


def test_w8a8_moe_ep_swiglu_limit_as_each_engine_runs_it():
    # serving row M1: no routed clamp under SGLang; vllm-ascend's as a bf16 pre-clamp of GMM1's output
    sgl = lower("w8a8_moe_ep", **layer(), swiglu_limit=7.0)
    assert "torch.clamp" not in sgl.ranks[0].functions("calls")
    va = lower("w8a8_moe_ep", **layer(), swiglu_limit=7.0, serving="vllm-ascend").ranks[0].functions("calls")
    i = va.index("torch_npu.npu_dequant_swiglu_quant")
    assert va[i - 4:i] == ["torch.chunk", "torch.clamp", "torch.clamp", "torch.cat"]


def test_ep_plan_describes_every_rank():
    text = lower("w8a8_moe_ep", **layer()).describe()
    assert "2 ranks" in text and "== rank 1 (entry 1)" in text and "dispatch int8: quant_mode 2" in text


def test_hierarchy_carries_the_expert_scales_both_ways():
    # comm_alg "hierarchy" (R in [16, 256], a multiple of 16): expert_scales required on dispatch, carried with
    # the rows as expand_scales [A_q]; combine takes them back, padded to the capacity like the rows
    r = 16
    xs, ids = tokens([1] * r, k=1, e=r, seed=6)
    es = [ARRAYS.f32(1, 1) for _ in range(r)]
    args = (xs, ids, "g", r, list(range(r)), r)
    kw = dict(expert_scales=es, comm_alg="hierarchy")
    plan = lower("moe_distribute_dispatch_v2", *args, **kw)
    d = w8a8.moe_distribute_dispatch_v2(*args, **kw)
    for q in (0, 7):
        p = plan.ranks[q]
        assert p.calls[0].kwargs["expert_scales"] == T("expert_scales") and p.calls[0].kwargs["comm_alg"] == "hierarchy"
        assert p.truncate["expand_scales"] == d[6][q].shape[0] == d[0][q].shape[0]
    w = [ARRAYS.f32(1, 1) for _ in range(r)]
    comb = lower("moe_distribute_combine_v2", d[0], ids, d[2], d[4], w, "g", r, list(range(r)), r,
                 expand_scales=d[6], comm_alg="hierarchy")
    cap = 1 * r * min(1, 1)                                       # BS * R * min(E_loc 1, K 1)
    assert comb.ranks[3].inputs["expand_scales"].array.shape == (cap,)
    assert comb.ranks[3].calls[0].kwargs["expand_scales"] == T("expand_scales")
    with pytest.raises(ConstraintError, match="'expand_scales'"):
        lower("moe_distribute_combine_v2", d[0], ids, d[2], d[4], w, "g", r, list(range(r)), r,
              expand_scales=np.zeros(3, np.float32), comm_alg="hierarchy")
