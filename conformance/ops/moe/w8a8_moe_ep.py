"""``w8a8_moe_ep``: the W8A8 MoE layer run expert-parallel on simulated ranks (docs/expert-parallelism.md):
int8 dispatch (the sender quantizes once, the scale travels with the payload) or bf16 dispatch (the expert
rank quantizes on arrival), per-rank grouped W8A8 experts, the fp32 combine, the shared expert on the
source rank."""

from __future__ import annotations

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs, varied
from ._common import (BF16, HAND_HIDDEN, HAND_IDS, HAND_S13, HAND_S2, HAND_W13, HAND_W2, HAND_WEIGHTS, HAND_WHY,
                      HAND_Y, MOE_FIELDS, W4)
from ._ep import layer_call, layer_params

OP = "w8a8_moe_ep"


def _split(bounds, **kw):
    """The hand-derived layer's two tokens split over ranks: ``bounds`` = each rank's token range."""
    pick = [slice(a, b) for a, b in bounds]
    return ([HAND_HIDDEN[s] for s in pick], HAND_W13, HAND_S13, HAND_W2, HAND_S2), {
        "topk_ids": [HAND_IDS[s] for s in pick], "topk_weights": [HAND_WEIGHTS[s] for s in pick], **kw}


_WHY = ("The hand-derived layer of w8a8_moe (its HAND case), run expert-parallel: E = 3 over R = 3 ranks (E_loc = 1: "
        "rank q owns expert q), token 0 on rank 0, no token on rank 1, token 1 on rank 2. The int8 dispatch of "
        "[127, 0] / [0, 127] is codes [127, 0] / [0, 127] with scale 1 / (127 / 127) = 1.0 (the same codes and scale "
        "as the init_routing formula), each copy's row is computed as in the single-process layer, and the combine "
        "sums the same two terms in the same k order from +0 (the terms are nonzero, so the zero start changes "
        "nothing): y is w8a8_moe's. ")

CASES = [
    Case("hand_derived_three_ranks_one_empty", lambda: _split([(0, 1), (1, 1), (1, 2)]), {"y": HAND_Y},
         _WHY + HAND_WHY),
    Case("hand_derived_bf16_dispatch", lambda: _split([(0, 1), (1, 1), (1, 2)], dispatch="bf16"), {"y": HAND_Y},
         _WHY + "bf16 dispatch: the rows arrive bit-identical and the expert rank's dynamic_quant gives the same "
         "codes and scale 1.0. " + HAND_WHY),
    Case("hand_derived_one_rank", lambda: _split([(0, 2)]), {"y": HAND_Y},
         "R = 1: every expert on one rank, the single-process layer with the EP combine. " + HAND_WHY),
]

_BASE = lambda: _split([(0, 1), (1, 1), (1, 2)])  # noqa: E731


def _bc(name, raises, match, args=None, **kw):
    return BadCall(name, lambda: varied(_BASE, args, **kw), raises, rf"{OP}: argument {match}")


BAD_CALLS = [
    _bc("hidden_not_a_list", TypeError, r"'hidden' must be a list with one array per rank", {0: HAND_HIDDEN}),
    _bc("hidden_float16", TypeError, r"'hidden\[0\]' must be of dtype", {0: [HAND_HIDDEN.astype(np.float16)] * 3}),
    _bc("hidden_h_differs", ValueError, r"'hidden\[1\]' must be of shape \[T, H\] with H = 2",
        {0: [HAND_HIDDEN[:1], np.zeros((0, 3), BF16), HAND_HIDDEN[1:]]}),
    _bc("experts_not_a_multiple_of_ranks", ValueError, r"'w13' must be of E experts a multiple of the ranks R = "
        r"len\(hidden\) = 2", {0: [HAND_HIDDEN[:1], HAND_HIDDEN[1:]]},
        topk_ids=[HAND_IDS[:1], HAND_IDS[1:]], topk_weights=[HAND_WEIGHTS[:1], HAND_WEIGHTS[1:]]),
    _bc("topk_ids_ranks", ValueError, r"'topk_ids' must be a list of 3 ranks", topk_ids=[HAND_IDS]),
    _bc("topk_ids_repeated", ValueError, r"'topk_ids\[0\]' must be K distinct expert ids",
        topk_ids=[np.array([[2, 2]], np.int32), HAND_IDS[:0], HAND_IDS[1:]]),
    _bc("topk_ids_out_of_range", ValueError, r"'topk_ids\[2\]' must be expert ids in \[0, moe_expert_num = 3\)",
        topk_ids=[HAND_IDS[:1], HAND_IDS[:0], np.array([[3, 0]], np.int32)]),
    _bc("topk_ids_tokens", ValueError, r"'topk_ids\[0\]' must be of shape \[T, K\] = \[1, K\]",
        topk_ids=[HAND_IDS, HAND_IDS[:0], HAND_IDS[1:]]),
    _bc("topk_weights_shape", ValueError, r"'topk_weights\[0\]' must be", topk_weights=[
        HAND_WEIGHTS[:1, :1], HAND_WEIGHTS[:0], HAND_WEIGHTS[1:]]),
    _bc("dispatch_fp8", ValueError, r"'dispatch' must be one of", dispatch="fp8"),
    _bc("w13_dtype", TypeError, r"'w13' must be of dtype int8", {1: HAND_W13.astype(np.int32)}),
    _bc("shared_expert_keys", TypeError, r"'shared_expert' must be a mapping with exactly the keys",
        shared_expert={"gate_weight": W4[0]}),
]

declare(OpDecl(
    name=OP, family="moe", params=layer_params, build=layer_call, outputs=outputs(("y", "float")),
    numerics_fields=MOE_FIELDS + ("ep_dispatch_quant", "ep_combine_weights"), cases=CASES, bad_calls=BAD_CALLS,
    ranked=True,
    description="the W8A8 MoE layer expert-parallel on simulated ranks: int8 | bf16 dispatch, per-rank grouped "
                "experts, fp32 combine, shared expert on the source rank"))
