"""``moe_distribute_dispatch`` (npu_moe_distribute_dispatch, MC2 v1, A3) on simulated ranks: as v2, with the
sender-side ``expand_idx`` (a copy's position in its (rank -> expert) block) instead of the triples, and
v1's A3 limits (H = 7168, R in {8, 16, ...})."""

from __future__ import annotations

from functools import partial

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs, varied
from ._common import BF16, F32
from ._ep import dispatch_base, group_bad_calls, mc2_call, mc2_params, ring_dispatch_inputs

OP = "moe_distribute_dispatch"
OUTPUTS = outputs(("expand_x", "float"), ("dynamic_scales", "scale"), ("expand_idx", "int"),
                  ("expert_token_nums", "int"), ("ep_recv_counts", "int"), ("tp_recv_counts", "int"),
                  ("expand_scales", "scale"))

# rank q receives the token of rank (q - 1) % 8, whose value is ((q - 1) % 8) + 1
_RING_VALUES = np.array([(q - 1) % 8 + 1 for q in range(8)], np.float32)
_RING_COUNTS = np.concatenate([(np.arange(8) >= (q - 1) % 8).astype(np.int32) for q in range(8)])


def _two_copies(**kw):
    """R = 8, E = 8, K = 2, BS = 2 on rank 0 (both tokens to experts 1 and 2), BS = 1 elsewhere (expert 0)."""
    x = [np.zeros((2, 7168), BF16)] + [np.zeros((1, 7168), BF16)] * 7
    ids = [np.array([[1, 2], [2, 1]], np.int32)] + [np.array([[0, 3]], np.int32)] * 7
    return (x, ids, "ep", 8, list(range(8)), 8), {"global_bs": 16, **kw}


CASES = [
    Case("ring_of_eight", ring_dispatch_inputs,
         {"expand_x": np.repeat(_RING_VALUES[:, None], 7168, 1).astype(BF16), "expand_idx": np.zeros(8, np.int32),
          "expert_token_nums": np.ones(8, np.int64), "ep_recv_counts": _RING_COUNTS,
          "dynamic_scales": np.zeros(0, F32)},
         "E_loc = 1, K = 1: rank r's token (the constant row r + 1) goes to expert (r + 1) % 8, owned by rank "
         "(r + 1) % 8. So rank q receives one row, value (q - 1) % 8 + 1, from source (q - 1) % 8; expand_idx 0 (the "
         "first copy of its block); ep_recv_counts[src] (l = 0) is cumulative: 0 before that source, 1 from it on."),
    Case("expand_idx_counts_earlier_copies", _two_copies,
         {"expand_idx": np.concatenate([[0, 0, 1, 1], np.zeros(14, np.int32)]).astype(np.int32)},
         "Rank 0's copies in flat order f = 2t + k: f0 -> expert 1 (first to 1: 0), f1 -> 2 (first to 2: 0), f2 -> 2 "
         "(second to 2: 1), f3 -> 1 (second to 1: 1). Every other rank sends f0 -> 0 and f1 -> 3, each the first "
         "copy to its expert: 0, 0."),
]

_BASE = dispatch_base(False)
_X = _BASE()[0][0]


def _bc(name, raises, match, args=None, **kw):
    return BadCall(name, partial(varied, _BASE, args, **kw), raises, rf"{OP}: argument {match}")


BAD_CALLS = group_bad_calls(OP, _BASE, {"ids": 1, "group_ep": 2, "ep_world_size": 3, "ep_rank_id": 4,
                                        "moe_expert_num": 5}, False, True) + [
    _bc("h_not_7168", ValueError, r"'x' must be of hidden size H = 7168", {0: [a[:, :4096] for a in _X]}),
    _bc("x_float32", TypeError, r"'x\[0\]' must be of dtype", {0: [a.astype(F32) for a in _X]}),
    _bc("k_over_8", ValueError, r"'expert_ids' must be of K in \(0, 8\]",
        {1: [np.arange(9, dtype=np.int32)[None]] * 8, 5: 16}),
    _bc("x_active_mask_reserved", ValueError, r"'x_active_mask' must be None \(reserved in v1\)",
        x_active_mask=[np.ones(1, bool)] * 8),
    _bc("expert_scales_unsupported", ValueError, r"'expert_scales' must be None \(unsupported by v1 on A3\)",
        expert_scales=[np.ones((1, 1), F32)] * 8),
    _bc("smooth_scales_shape", ValueError, r"'scales' must be of shape \[E \+ 0, H\] = \[8, 7168\]",
        scales=np.ones((9, 7168), F32), quant_mode=2),
]

declare(OpDecl(
    name=OP, family="moe", params=partial(mc2_params, v2=False), build=mc2_call, outputs=OUTPUTS,
    numerics_fields=("ep_dispatch_quant", "round_mode", "zero_row"), cases=CASES, bad_calls=BAD_CALLS,
    mistrust_degenerate=False, ranked=True,
    description="MC2 v1 dispatch on simulated ranks (H = 7168): sender-side int8 quantization, canonical receive "
                "order, sender-side expand_idx"))
