"""``moe_gating_top_k_softmax`` (npu_moe_gating_top_k_softmax): softmax over the experts, top-k, no
renormalisation; rows marked ``finished`` get expert id E; ``row_idx[t, j] = j * N + t``."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs
from ...values import rng_for
from ._common import BF16, F32, logits, routing_shape

OP = "moe_gating_top_k_softmax"


@st.composite
def _params(draw):
    r = draw(routing_shape())
    return {**r, "dtype": draw(st.sampled_from(("float32", "float16", "bfloat16"))),
            "finished": draw(st.booleans()), "dist": draw(S.float_dist(allow_nan=False, edges=False)),
            "seed": draw(S.seed())}


def _build(p):
    kw = {"k": p["k"]}
    if p["finished"]:
        kw["finished"] = rng_for(p["seed"], 1).random(p["t"]) < 0.3
    return (logits(p),), kw


def _three_d():
    x = np.random.default_rng(2).standard_normal((2, 3, 6)).astype(F32).astype(BF16)
    return (x, np.array([[True, False, False], [False, False, True]])), {"k": 2}


_TIES = np.zeros((3, 4), F32)
_TIES[1, 2] = 1.0

CASES = [
    Case("three_d_with_finished_rows", _three_d,
         {"row_idx": (np.arange(2)[None, None, :] * 6 + np.arange(6).reshape(2, 3)[:, :, None]).astype(np.int32)},
         "x [2, 3, 6]: N = 6 tokens, so row_idx[t, j] = j * 6 + t whatever the scores (token (1, 2) is t = 5: "
         "[5, 11]); the finished rows (0, 0) and (1, 2) get expert id E = 6."),
    Case("ties_keep_the_lower_expert", lambda: ((_TIES,), {"k": 2}),
         {"expert_idx": np.array([[0, 1], [2, 0], [0, 1]], np.int32)},
         "Equal logits give equal scores: the stable sort keeps ascending expert order (0, 1); in row 1 expert 2 "
         "wins and the tie among the rest goes to the lowest id, 0."),
]

BAD_CALLS = [
    BadCall("k_range", lambda: ((np.ones((2, 4), F32),), {"k": 0}),
            ValueError, r"moe_gating_top_k_softmax: argument 'k' must be in \[1, 4\]"),
    BadCall("x_dtype", lambda: ((np.ones((2, 4), np.int32),), {"k": 1}),
            TypeError, r"moe_gating_top_k_softmax: argument 'x' must be of dtype float16, bfloat16 or float32"),
    BadCall("finished_shape", lambda: ((np.ones((2, 4), F32), np.ones(3, bool)), {"k": 1}),
            ValueError, r"moe_gating_top_k_softmax: argument 'finished' must be of shape x\.shape\[:-1\] ="),
    BadCall("x_nonfinite", lambda: ((np.array([[0, np.nan, 1]], F32),), {"k": 1}),
            ValueError, r"moe_gating_top_k_softmax: argument 'x' must be finite"),
    BadCall("x_dtype_2", lambda: ((np.full((2, 3), 0, np.int32),), {}),
            TypeError, r"moe_gating_top_k_softmax: argument 'x' must be of dtype float16, bfloat16 or float32"),
    BadCall("x_shape", lambda: ((np.full((3,), 0.0, F32),), {}),
            ValueError, r"moe_gating_top_k_softmax: argument 'x' must be 2-D to 3-D"),
    BadCall("k_range_2", lambda: ((np.full((2, 3), 0.0, F32),), {'k': 4}),
            ValueError, r"moe_gating_top_k_softmax: argument 'k' must be in \[1, 3\]"),
    BadCall("k_range_3", lambda: ((np.full((2, 3), 0.0, F32),), {'k': 0}),
            ValueError, r"moe_gating_top_k_softmax: argument 'k' must be in \[1, 3\]"),
    BadCall("finished_shape_2", lambda: ((np.full((2, 3), 0.0, F32), np.full((3,), False, bool)), {}),
            ValueError, r"moe_gating_top_k_softmax: argument 'finished' must be of shape x\.shape\[:-1\] ="),
    BadCall("finished_dtype", lambda: ((np.full((2, 3), 0.0, F32), np.full((2,), 0, np.int8)), {}),
            TypeError, r"moe_gating_top_k_softmax: argument 'finished' must be of dtype bool"),
    BadCall("x_nonfinite_2", lambda: ((np.array([[0.0, np.nan]], F32),), {}),
            ValueError, r"moe_gating_top_k_softmax: argument 'x' must be finite"),
]

declare(OpDecl(
    name=OP, family="moe", params=_params, build=_build,
    outputs=outputs(("y", "float"), ("expert_idx", "int"), ("row_idx", "int")), numerics_fields=("transcendental",),
    cases=CASES, bad_calls=BAD_CALLS,
    description="softmax top-k routing, no renormalisation (npu_moe_gating_top_k_softmax)"))
