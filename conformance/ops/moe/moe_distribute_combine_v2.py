"""``moe_distribute_combine_v2`` (npu_moe_distribute_combine_v2, MC2 v2, A3) on simulated ranks: the expert
rows go back through the receiver-side (source rank, token, k) triples and each token's K rows are summed
in fp32 with the fp32 weights, from +0 in ascending k, then rounded once (+ an unweighted shared_expert_x;
comm_quant_mode 2: an int8 return trip in groups of 8)."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, Case, OpDecl, declare, outputs, varied
from ._common import BF16, F32
from ._ep import GROUP, combine_base, combine_call, group_bad_calls, mc2_params, two_rank_dispatch_inputs

OP = "moe_distribute_combine_v2"


def _two_rank(weights=(0.5, 0.25), **kw):
    """The hand-derived two-rank dispatch (_ep.TWO_RANK_WHY), its rows sent back unchanged (identity experts)."""
    args, _ = two_rank_dispatch_inputs()
    x, ids, group, r, rank_ids, e = args
    out = w8a8.moe_distribute_dispatch_v2(*args)
    w = [np.tile(np.array(weights, F32), (3, 1)) for _ in ids]
    return (out[0], ids, out[2], out[4], w, group, r, rank_ids, e), kw


def _values(scale, add=0.0):
    return np.repeat((np.array([1, 2, 3, 4, 5, 6], F32) * np.float32(scale) + np.float32(add))[:, None], 1024,
                     1).astype(BF16)


def _self_roundtrip(**kw):
    """R = 2, E = 2, K = 1, BS = 1, each token to its own rank's expert; the row's first group of 8 is
    [1, 1, 1, 1, 1, 1, 1, 0.5], every other element 1."""
    row = np.ones(1024, F32)
    row[7] = 0.5
    x = [row[None].astype(BF16)] * 2
    ids = [np.array([[0]], np.int32), np.array([[1]], np.int32)]
    out = w8a8.moe_distribute_dispatch_v2(x, ids, GROUP, 2, [0, 1], 2)
    return (out[0], ids, out[2], out[4], [np.ones((1, 1), F32)] * 2, GROUP, 2, [0, 1], 2), kw


def _mask(args, kwargs):
    """Rows of ``y`` the kernel writes: with ``x_active_mask`` only the tokens with an active copy
    (``moe_distribute_combine_v2.h`` LocalWindowCopy loops over the ``activeMaskBsCnt_`` active tokens of an
    output it never initialises); the other tokens' rows are unspecified."""
    masks = kwargs.get("x_active_mask")
    if masks is None:
        return {}
    return {"y": np.concatenate([np.asarray(m).reshape(m.shape[0], -1).any(axis=1) for m in masks])[:, None]}


def _inactive_expected():
    y = _values(0.75)
    y[[2, 5]] = 0                       # the inactive tokens: unspecified (masked), the golden's +0 shown
    return y


_LOSSY = np.ones((2, 1024), F32)
_LOSSY[:, 7] = 0.50390625

CASES = [
    Case("two_ranks_identity_experts", _two_rank, {"y": _values(0.75)},
         "Identity experts: token (r, t)'s two rows are both the constant 1 + 3r + t (values 1 .. 6 in token "
         "order). acc = (0 + v * 0.5) + v * 0.25 = 0.75 v, exact in fp32 and bf16: 0.75, 1.5, 2.25, 3, 3.75, 4.5."),
    Case("shared_expert_x_added_unweighted",
         lambda: _two_rank(shared_expert_x=[np.ones((3, 1024), BF16)] * 2), {"y": _values(0.75, 1.0)},
         "As two_ranks_identity_experts, plus shared_expert_x = 1 added unweighted before the one rounding: "
         "0.75 v + 1 = 1.75, 2.5, 3.25, 4, 4.75, 5.5 (exact)."),
    Case("masked_copies_skipped",
         lambda: _two_rank(x_active_mask=[np.array([[True, False]] * 3)] * 2), {"y": _values(0.5)},
         "A [BS, K] mask that drops every k = 1 copy: only the k = 0 term 0.5 v remains (the dispatch sent all "
         "copies here, the combine's mask decides which are summed)."),
    Case("inactive_tokens_unwritten",
         lambda: _two_rank(x_active_mask=[np.array([True, True, False])] * 2), {"y": _inactive_expected()},
         "A 1-D mask [True, True, False] on both ranks: tokens 0 and 1 are combined as in "
         "two_ranks_identity_experts (0.75 v: 0.75, 1.5 on rank 0, 3, 3.75 on rank 1); token 2 of each rank is "
         "never written by the kernel (it copies activeMaskBsCnt_ = 2 tokens into an uninitialised output), so "
         "its row is unspecified: masked out of the comparison, whatever a backend leaves there."),
    Case("comm_quant_mode_2_int8_return_trip", lambda: _self_roundtrip(comm_quant_mode=2), {"y": _LOSSY.astype(BF16)},
         "Groups of 8: s_g = max|y_g| * fp32(1/127) = fp32(1/127) (max 1). 1 / s_g = 127.0000004 -> fp16 127 -> "
         "code 127; 0.5 / s_g = 63.5000002 -> fp16 63.5 -> rint 64 (half to even). The scale travels as bf16: "
         "bf16(0.0078740157) = 0.00787353515625 (2^-7 * 1.0078125). Back: 127 * 0.00787353515625 = 0.99993896 -> "
         "bf16 1.0; 64 * 0.00787353515625 = 0.50390625 (exact in bf16). Weight 1: y = those values."),
]

_BASE = combine_base(True)


def _bc(name, raises, match, args=None, **kw):
    return BadCall(name, lambda: varied(_BASE, args, **kw), raises, rf"{OP}: argument {match}")


BAD_CALLS = group_bad_calls(OP, _BASE, {"ids": 1, "group_ep": 5, "ep_world_size": 6, "ep_rank_id": 7,
                                        "moe_expert_num": 8}, True, False) + [
    _bc("expand_x_not_a_list", TypeError, r"'expand_x' must be a list with one array per rank",
        {0: np.zeros((6, 1024), BF16)}),
    _bc("expand_x_too_few_rows", ValueError, r"'expand_x\[0\]' must be at least ep_send_counts\[-1\] = 6 rows",
        {0: [np.zeros((5, 1024), BF16), np.zeros((6, 1024), BF16)]}),
    _bc("ep_send_counts_shape", ValueError, r"'ep_send_counts\[0\]' must be of shape \[E_loc \* R\] = \[4\]",
        {3: [np.array([6], np.int32)] * 2}),
    _bc("ep_send_counts_decreasing", ValueError, r"'ep_send_counts\[1\]' must be non-decreasing",
        {3: [np.array([2, 3, 4, 6], np.int32), np.array([3, 1, 5, 6], np.int32)]}),
    _bc("assist_info_short", ValueError, r"'assist_info_for_combine\[0\]' must be at least 3 \* A = 18 entries",
        {2: [np.zeros(17, np.int32), np.zeros(18, np.int32)]}),
    _bc("assist_info_out_of_range", ValueError, r"'assist_info_for_combine\[1\]' must be \(source rank, token, k\) "
        r"triples", {2: [np.zeros(18, np.int32), np.full(18, 3, np.int32)]}),
    _bc("expert_scales_shape", ValueError, r"'expert_scales\[0\]' must be of shape \[BS, K\] = \[3, 2\]",
        {4: [np.ones((3, 1), F32)] * 2}),
    _bc("expert_scales_float16", TypeError, r"'expert_scales\[0\]' must be of dtype", {4: [np.ones((3, 2),
                                                                                                    np.float16)] * 2}),
    _bc("shared_expert_x_shape", ValueError, r"'shared_expert_x\[0\]' must be \[BS, H\] = \[3, 1024\]",
        shared_expert_x=[np.ones((2, 1024), BF16)] * 2),
    _bc("comm_quant_mode_1", ValueError, r"'comm_quant_mode' must be 0 or 2", comm_quant_mode=1),
    _bc("ori_x_not_modelled", ValueError, r"'ori_x' must be None / 0", ori_x=np.zeros((3, 1024), BF16)),
]

declare(OpDecl(
    name=OP, family="moe", params=mc2_params, build=combine_call, outputs=outputs(("y", "float")),
    numerics_fields=("ep_combine_weights",), mask=_mask, cases=CASES, bad_calls=BAD_CALLS, ranked=True,
    description="MC2 v2 combine on simulated ranks: rows back by the triples, fp32 weighted sum from +0 in k "
                "order, one rounding"))
