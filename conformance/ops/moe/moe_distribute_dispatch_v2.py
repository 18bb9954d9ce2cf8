"""``moe_distribute_dispatch_v2`` (npu_moe_distribute_dispatch_v2, MC2 v2, A3) on simulated ranks: the
sender's optional per-token int8 quantization, the all-to-all, the canonical receive order and the
receiver-side (source rank, token, k) triples."""

from __future__ import annotations

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs, varied
from ._common import BF16, F32
from ._ep import (GROUP, TWO_RANK_H, TWO_RANK_ROW_VALUES, TWO_RANK_SRC, TWO_RANK_WHY, dispatch_base, group_bad_calls,
                  mc2_call, mc2_params, two_rank_dispatch_inputs)

OP = "moe_distribute_dispatch_v2"
OUTPUTS = outputs(("expand_x", "float"), ("dynamic_scales", "scale"), ("assist_info_for_combine", "int"),
                  ("expert_token_nums", "int"), ("ep_recv_counts", "int"), ("tp_recv_counts", "int"),
                  ("expand_scales", "scale"))
FIELDS = ("ep_dispatch_quant", "round_mode", "zero_row")


def _tie_and_zero(**kw):
    """R = 2, E = 2, K = 1, BS = 1: rank 0's token [2, 1, 1, ...] goes to expert 1 (rank 1), rank 1's all-zero
    token to expert 0 (rank 0)."""
    x = [np.concatenate([[2.0], np.ones(1023)]).astype(F32).astype(BF16)[None], np.zeros((1, 1024), BF16)]
    return (x, [np.array([[1]], np.int32), np.array([[0]], np.int32)], GROUP, 2, [0, 1], 2), {"quant_mode": 2, **kw}


def _tie_codes(second=64):
    row = np.full(1024, 64, np.int8)
    row[0], row[1] = 127, second
    return np.stack([np.zeros(1024, np.int8), row])


def _smooth_row_e():
    """As _tie_and_zero, with smooth scales [E, H] = [2, 1024] of ones except scales[1][1] = 0.5 (the row of
    expert 1 when the tiling's sharedExpertNum is 0)."""
    sc = np.ones((2, 1024), F32)
    sc[1, 1] = 0.5
    return _tie_and_zero(scales=sc)


def _masked_rank(**kw):
    """R = 2, E = 2, K = 1, BS = 2: tokens t -> expert t on both ranks; rank 1's mask is all False."""
    x = [np.full((2, 1024), 1 + r, F32).astype(BF16) for r in range(2)]
    ids = [np.array([[0], [1]], np.int32)] * 2
    return (x, ids, GROUP, 2, [0, 1], 2), {"x_active_mask": [np.array([True, True]), np.array([False, False])], **kw}


_EMPTY_F = np.zeros(0, F32)
_EMPTY_I = np.zeros(0, np.int32)

CASES = [
    Case("two_ranks_four_experts_top2", two_rank_dispatch_inputs,
         {"expand_x": np.repeat(np.array(TWO_RANK_ROW_VALUES, F32)[:, None], TWO_RANK_H, 1).astype(BF16),
          "dynamic_scales": _EMPTY_F, "assist_info_for_combine": np.array(TWO_RANK_SRC, np.int32).ravel(),
          "expert_token_nums": np.array([3, 3, 3, 3], np.int64), "ep_recv_counts": np.array([2, 3, 4, 6, 1, 3, 5, 6],
                                                                                            np.int32),
          "tp_recv_counts": _EMPTY_I, "expand_scales": _EMPTY_F},
         TWO_RANK_WHY + " quant_mode 0: the bf16 rows travel unchanged; no scales (dynamic_scales, expand_scales "
         "[0])."),
    Case("two_ranks_prefix_sums", lambda: two_rank_dispatch_inputs(expert_token_nums_type=0),
         {"expert_token_nums": np.array([3, 6, 3, 6], np.int64)},
         "expert_token_nums_type 0: the running sum of the per-local-expert counts [3, 3] on each rank."),
    Case("two_ranks_int8_constant_rows", lambda: two_rank_dispatch_inputs(quant_mode=2),
         {"expand_x": np.full((12, TWO_RANK_H), 127, np.int8),
          "dynamic_scales": np.float32(1) / (np.float32(127) / np.array(TWO_RANK_ROW_VALUES, F32))},
         TWO_RANK_WHY + " quant_mode 2: a constant row v has m = v, inv = fp32(127 / v); v * inv rounds to 127 "
         "(within an ulp of 127); the scale sent is fp32(1 / inv)."),
    Case("int8_tie_and_zero_row", _tie_and_zero,
         {"expand_x": _tie_codes(), "dynamic_scales": np.array([0.0, np.float32(1) / np.float32(63.5)], F32),
          "assist_info_for_combine": np.array([1, 0, 0, 0, 0, 0], np.int32)},
         "Rank 0 receives rank 1's zero row: m = 0, inv = inf, 0 * inf = NaN -> code 0 (zero_row 'zero'; the "
         "device's integer is not confirmed), scale 1 / inf = 0. Rank 1 receives [2, 1, ...]: m = 2, inv = 63.5, "
         "2 * 63.5 = 127, 1 * 63.5 = 63.5 -> 64 (half to even), scale 1 / 63.5."),
    Case("smooth_scale_row_e_without_shared_ranks", _smooth_row_e,
         {"expand_x": _tie_codes(32), "dynamic_scales": np.array([0.0, np.float32(1) / np.float32(63.5)], F32)},
         "shared_expert_num = 1 (the default), shared_expert_rank_num = 0: the tiling resets sharedExpertNum to 0 "
         "(moe_distribute_dispatch_v2_tiling.cpp CheckAndSetExpertInfo) and the kernel smooths a copy for expert e "
         "with row e + sharedExpertNum_ = e (moe_distribute_dispatch_v2.h QuantProcess(dstExpertId + "
         "sharedExpertNum_)). Rank 1 receives rank 0's [2, 1, 1, ...] for expert 1, times scales[1] = [1, 0.5, 1, "
         "...]: [2, 0.5, 1, ...]; m = 2, inv = 127 / 2 = 63.5; 2 * 63.5 = 127, 0.5 * 63.5 = 31.75 -> 32, "
         "1 * 63.5 = 63.5 -> 64 (half to even): codes [127, 32, 64, ...], scale 1 / 63.5. (Row e + 1 would need a "
         "third row, which the tiling refuses: dim0 must be E + 0.) Rank 0's zero row stays code 0, scale 0."),
    Case("rank_with_no_active_token", _masked_rank,
         {"expand_x": np.full((2, 1024), 1, F32).astype(BF16), "assist_info_for_combine":
          np.array([0, 0, 0, 0, 1, 0], np.int32), "expert_token_nums": np.array([1, 1], np.int64),
          "ep_recv_counts": np.array([1, 1, 1, 1], np.int32)},
         "Rank 1's mask is all False: it sends nothing. Rank 0 sends t0 -> expert 0 (rank 0), t1 -> expert 1 "
         "(rank 1); each rank receives one row (value 1), from source 0; ep_recv_counts (l = 0; src 0, 1) = [1, 1]."),
]

_BASE = dispatch_base(True)
_X = _BASE()[0][0]


def _bc(name, raises, match, args=None, **kw):
    return BadCall(name, lambda: varied(_BASE, args, **kw), raises, rf"{OP}: argument {match}")


BAD_CALLS = group_bad_calls(OP, _BASE, {"ids": 1, "group_ep": 2, "ep_world_size": 3, "ep_rank_id": 4,
                                        "moe_expert_num": 5}, True, True) + [
    _bc("x_not_a_list", TypeError, r"'x' must be a list with one array per rank", {0: _X[0]}),
    _bc("x_float32", TypeError, r"'x\[0\]' must be of dtype", {0: [a.astype(F32) for a in _X]}),
    _bc("h_below_1024", ValueError, r"'x' must be of hidden size H in \[1024, 8192\]", {0: [a[:, :512] for a in _X]}),
    _bc("bs_zero", ValueError, r"'x' must be of BS in \(0, 512\]", {0: [_X[0], _X[1][:0]]}),
    _bc("bs_over_256_fullmesh_v2", ValueError, r"'x' must be of BS in \(0, 256\]",
        {0: [np.zeros((257, 1024), BF16)] * 2, 1: [np.zeros((257, 1), np.int32)] * 2}, comm_alg="fullmesh_v2"),
    _bc("k_over_16", ValueError, r"'expert_ids' must be of K in \(0, 16\]",
        {1: [np.tile(np.arange(17, dtype=np.int32), (3, 1))] * 2, 5: 18}),
    _bc("quant_mode_static", ValueError, r"'quant_mode' must be 0 or 2 \(the tiling: 'cannot support static quant",
        quant_mode=1),
    _bc("quant_mode_mx", ValueError, r"'quant_mode' must be 0 \(none\) or 2", quant_mode=4),
    _bc("scales_without_quant", ValueError, r"'scales' must be None with quant_mode 0",
        scales=np.ones((5, 1024), F32)),
    _bc("scales_shape", ValueError, r"'scales' must be of shape \[E \+ 0, H\] = \[4, 1024\]",
        scales=np.ones((3, 1024), F32), quant_mode=2),
    _bc("scales_with_a_shared_row_without_shared_ranks", ValueError,
        r"'scales' must be of shape \[E \+ 0, H\] = \[4, 1024\] \(v2 without shared-expert ranks: the tiling "
        r"resets shared_expert_num to 0\)", scales=np.ones((5, 1024), F32), quant_mode=2),
    _bc("mask_not_a_prefix", ValueError, r"'x_active_mask\[0\]' must be True rows first",
        x_active_mask=[np.array([False, True, True]), np.ones(3, bool)]),
    _bc("mask_shape", ValueError, r"'x_active_mask\[1\]' must be of shape \[BS\] = \[3\] or \[BS, K\]",
        x_active_mask=[np.ones(3, bool), np.ones(4, bool)]),
    _bc("expert_scales_without_hierarchy", ValueError, r"'expert_scales' must be None unless comm_alg is 'hierarchy'",
        expert_scales=[np.ones((3, 2), F32)] * 2),
    _bc("expert_token_nums_type_2", ValueError, r"'expert_token_nums_type' must be in \[0, 1\]",
        expert_token_nums_type=2),
    _bc("elastic_info_not_modelled", ValueError, r"'elastic_info' must be None / 0",
        elastic_info=np.zeros(4, np.int32)),
    _bc("y_dtype_not_modelled", ValueError, r"'y_dtype' must be None / 0", y_dtype=2),
]

declare(OpDecl(
    name=OP, family="moe", params=mc2_params, build=mc2_call, outputs=OUTPUTS, numerics_fields=FIELDS,
    cases=CASES, bad_calls=BAD_CALLS, mistrust_degenerate=False, ranked=True,
    description="MC2 v2 dispatch on simulated ranks: per-token int8 quantization by the sender, canonical receive "
                "order, (source rank, token, k) triples"))
