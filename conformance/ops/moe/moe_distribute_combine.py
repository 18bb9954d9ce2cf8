"""``moe_distribute_combine`` (npu_moe_distribute_combine, MC2 v1, A3) on simulated ranks: the expert rows
are located through the sender-side ``expand_idx`` and the expert rank's ``ep_send_counts``, then summed in
fp32 with the fp32 weights, from +0 in ascending k, and rounded once."""

from __future__ import annotations

from functools import partial

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs, varied
from ._common import BF16, F32
from ._ep import combine_base, combine_call, group_bad_calls, mc2_params

OP = "moe_distribute_combine"
_BASE = combine_base(False)


def _weights(w, **kw):
    args, _ = _BASE()
    return args[:4] + ([np.full((1, 1), w, F32)] * 8,) + args[5:], kw


def _poisoned_tail(**kw):
    """The ring's rows, each followed by a row of 1000s past its block (rows the device leaves unwritten)."""
    args, _ = _weights(2.0)
    rows = [np.concatenate([a, np.full((1, 7168), 1000, F32).astype(BF16)]) for a in args[0]]
    return (rows,) + args[1:], kw


_RING_2X = np.repeat((2.0 * np.arange(1, 9, dtype=F32))[:, None], 7168, 1).astype(BF16)

CASES = [
    Case("ring_of_eight_weight_two", lambda: _weights(2.0), {"y": _RING_2X},
         "The v1 ring (rank r's token, the constant r + 1, went to rank (r + 1) % 8 as row 0 of block (l = 0, "
         "src = r): ep_send_counts[r - 1] + expand_idx 0). Sent back unchanged with weight 2: acc = 0 + 2 (r + 1), "
         "exact: y = 2, 4, ..., 16 in token order of ranks 0 .. 7."),
    Case("rows_past_the_counts_are_not_read", _poisoned_tail, {"y": _RING_2X},
         "As ring_of_eight_weight_two with one extra row of 1000s on every rank, past ep_send_counts[-1] = 1: "
         "the combine reads only rows inside their blocks, so y is unchanged."),
]


def _bc(name, raises, match, args=None, **kw):
    return BadCall(name, partial(varied, _BASE, args, **kw), raises, rf"{OP}: argument {match}")


BAD_CALLS = group_bad_calls(OP, _BASE, {"ids": 1, "group_ep": 5, "ep_world_size": 6, "ep_rank_id": 7,
                                        "moe_expert_num": 8}, False, False) + [
    _bc("expand_idx_shape", ValueError, r"'expand_idx\[0\]' must be of shape \[BS \* K\] = \[1\]",
        {2: [np.zeros(2, np.int32)] * 8}),
    _bc("expand_idx_negative", ValueError, r"'expand_idx\[0\]' must be positions >= 0",
        {2: [np.full(1, -1, np.int32)] + [np.zeros(1, np.int32)] * 7}),
    _bc("h_not_7168", ValueError, r"'expand_x' must be of hidden size H = 7168",
        {0: [np.zeros((1, 4096), BF16)] * 8}),
    _bc("group_list_reserved", ValueError, r"'group_list' must be None / 0 \(reserved in v1\)",
        group_list=np.ones(1, np.int64)),
    _bc("out_dtype_reserved", ValueError, r"'out_dtype' must be None / 0 \(reserved in v1\)", out_dtype=1),
    _bc("shared_expert_x_v2_only", ValueError, r"'shared_expert_x' must be None \(the golden models shared_expert_x "
        r"in v2 only\)", shared_expert_x=[np.zeros((1, 7168), BF16)] * 8),
    _bc("comm_quant_mode_3", ValueError, r"'comm_quant_mode' must be 0 or 2", comm_quant_mode=3),
]

declare(OpDecl(
    name=OP, family="moe", params=partial(mc2_params, v2=False), build=combine_call, outputs=outputs(("y", "float")),
    numerics_fields=("ep_combine_weights",), cases=CASES, bad_calls=BAD_CALLS, ranked=True,
    description="MC2 v1 combine on simulated ranks (H = 7168): rows back by expand_idx and ep_send_counts, fp32 "
                "weighted sum from +0 in k order, one rounding"))
