"""``w8a8_moe_prequantized``: the W8A8 MoE layer fed an INT8 dispatch (int8 tokens + their per-token
scale, as an expert-parallel all-to-all delivers them): no second quantization of the routed rows; the
shared expert, if any, runs on the bf16 ``shared_input``."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import (F32, HAND_IDS, HAND_S13, HAND_S2, HAND_W13, HAND_W2, HAND_WEIGHTS, HAND_WHY, HAND_Y, HID,
                      MOE_FIELDS, MOE_KW, ROUTERS, SH, W4, layer_bad_calls, moe_build, moe_odd_params, moe_params,
                      prequantized, router_inputs, routing_pattern_inputs)

OP = "w8a8_moe_prequantized"


def _build(p):
    return prequantized(*moe_build(p))


CASES = [
    Case("hand_derived_two_tokens_three_experts_top2",
         lambda: ((np.array([[127, 0], [0, 127]], np.int8), np.ones(2, F32), HAND_W13, HAND_S13, HAND_W2, HAND_S2),
                  {"topk_ids": HAND_IDS, "topk_weights": HAND_WEIGHTS}),
         {"y": HAND_Y}, "The hand-derived layer of w8a8_moe fed its INT8 dispatch, written out: codes [127, 0] / "
                        "[0, 127] with scale 1.0 (127 / 127). " + HAND_WHY),
] + [Case(f"routing_{pattern}_{'shared' if shared else 'routed'}_limit_{limit}",
          (lambda pattern=pattern, shared=shared, limit=limit: prequantized(*routing_pattern_inputs(pattern, shared,
                                                                                                    limit))),
          why=f"w8a8_moe's routing pattern {pattern} on the INT8 dispatch of the same hidden states.")
     for pattern in ("one_expert", "topk_is_e", "random_with_empty") for shared in (False, True)
     for limit in (None, 10.0, 0.5)] + [
    Case(f"router_{name}", (lambda name=name: prequantized(*router_inputs(name))),
         why=f"w8a8_moe's router case {name} on the INT8 dispatch (the shared expert on the bf16 shared_input).")
    for name in ROUTERS]

BAD_CALLS = [
    BadCall("x_scale_shape", lambda: ((np.ones((3, 16), np.int8), np.ones(2, F32)) + W4, MOE_KW),
            ValueError, r"w8a8_moe_prequantized: argument 'x_scale' must be of shape \[T\] = \[3\]"),
    BadCall(
        "shared_input_value",
        lambda: ((np.ones((3, 16), np.int8), np.ones(3, F32)) + W4, MOE_KW | {"shared_expert": SH}),
        ValueError,
        r"w8a8_moe_prequantized: argument 'shared_input' must be the bf16 hidden states \[T, H\] the shared expert runs on",
    ),
    BadCall(
        "moe_init_routing_v2_scale_nonfinite",
        lambda: ((np.ones((3, 16), np.int8), np.array([1, np.nan, 1], F32)) + W4, MOE_KW),
        ValueError,
        r"moe_init_routing_v2: argument 'scale' must be finite",
    ),
    BadCall(
        "x_q_dtype",
        lambda: ((w8a8.dispatch_quant(HID)[0].astype(np.int32), w8a8.dispatch_quant(HID)[1]) + W4, MOE_KW),
        TypeError,
        r"w8a8_moe_prequantized: argument 'x_q' must be of dtype int8",
    ),
    BadCall(
        "x_scale_of_2_tokens",
        lambda: ((w8a8.dispatch_quant(HID)[0], w8a8.dispatch_quant(HID)[1][:2]) + W4, MOE_KW),
        ValueError,
        r"w8a8_moe_prequantized: argument 'x_scale' must be of shape \[T\] = \[3\]",
    ),
] + layer_bad_calls(OP)

declare(OpDecl(
    name=OP, family="moe", params=moe_params, build=_build, strategies={"odd_sizes": moe_odd_params},
    outputs=outputs(("y", "float")), numerics_fields=MOE_FIELDS, cases=CASES, bad_calls=BAD_CALLS,
    description="the MoE layer fed an INT8 dispatch (int8 tokens + per-token scale): no second quantization"))
