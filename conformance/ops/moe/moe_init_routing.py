"""``moe_init_routing`` (npu_moe_init_routing): v1 token permutation — a stable sort of the flattened
expert ids, column-major row ids ``row_idx[t, j] = j * N + t``, the first ``active_num`` rows."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs, varied
from ...values import float_tensor, rng_for
from ._common import BF16, F32, bf16, expert_ids, routing_shape

OP = "moe_init_routing"


@st.composite
def _params(draw):
    r = draw(routing_shape())
    return {**r, "h": draw(S.size(64, big=())), "active": draw(st.sampled_from(("all", "some"))),
            "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    t, k = p["t"], p["k"]
    ids = expert_ids(rng, t, p["e"], k, p["pattern"])
    k = ids.shape[1]
    x = float_tensor(rng, (t, p["h"]), "bfloat16", "gaussian")
    row_idx = np.arange(t * k, dtype=np.int32).reshape(k, t).T.copy()
    active = t if p["active"] == "all" else max(0, t // 2)
    return (x, row_idx, ids, active), {}


_IDS = np.array([[2, 0], [0, 2]], np.int32)  # token 0 -> experts 2, 0; token 1 -> experts 0, 2; expert 1 empty
_X2 = bf16([[1.0, 2.0], [3.0, 4.0]])

CASES = [
    Case("v1_two_tokens_three_experts_top2",
         lambda: ((_X2, np.array([[0, 2], [1, 3]], np.int32), _IDS, 2), {}),
         {"expanded_x": bf16([[1, 2], [3, 4], [1, 2], [3, 4]]),
          "expanded_row_idx": np.array([2, 1, 0, 3], np.int32),
          "expanded_expert_idx": np.array([0, 0, 2, 2], np.int32)},
         "v1 row ids are column-major: row_idx[t, j] = j*N + t = [[0, 2], [1, 3]]. The flattened experts "
         "[2, 0, 0, 2] sort stably to entries 1, 2, 0, 3 (experts 0, 0, 2, 2), whose row ids are 2, 1, 0, 3; "
         "expanded_row_idx[row id] = position gives [2, 1, 0, 3], and expanded_x takes token row_id % N: "
         "tokens 0, 1, 0, 1."),
]

def _valid():
    """A valid call the bad calls below change one or two arguments of."""
    return (
        np.array([[1.0, 1.0], [2.0, 2.0]], F32),
        np.array([[0, 2], [1, 3]], np.int32),
        np.array([[2, 0], [0, 2]], np.int32),
        2,
    ), {}


BAD_CALLS = [
    BadCall(
        "row_idx_value",
        lambda: ((np.ones((2, 4), BF16), np.array([[0, 1], [1, 3]], np.int32), np.zeros((2, 2), np.int32), 2), {}),
        ValueError,
        r"moe_init_routing: argument 'row_idx' must be a permutation of 0 \.\. N\*K-1 = 0 \.\. 3",
    ),
    BadCall(
        "active_num_range",
        lambda: ((np.ones((2, 4), BF16), np.array([[0, 1], [2, 3]], np.int32), np.zeros((2, 2), np.int32), -1), {}),
        ValueError,
        r"moe_init_routing: argument 'active_num' must be in \[0, inf\]",
    ),
    BadCall(
        "x_dtype",
        lambda: varied(_valid, {0: np.array([[1, 1], [2, 2]], np.int8)}),
        TypeError,
        r"moe_init_routing: argument 'x' must be of dtype float16, bfloat16 or float32",
    ),
    BadCall(
        "row_idx_value_2",
        lambda: varied(_valid, {1: np.array([[0, 2], [1, 1]], np.int32)}),
        ValueError,
        r"moe_init_routing: argument 'row_idx' must be a permutation of 0 \.\. N\*K-1 = 0 \.\. 3",
    ),
    BadCall(
        "row_idx_dtype",
        lambda: varied(_valid, {1: np.array([[0, 2], [1, 3]], np.int64)}),
        TypeError,
        r"moe_init_routing: argument 'row_idx' must be of dtype int32",
    ),
    BadCall(
        "expert_idx_shape",
        lambda: varied(_valid, {2: np.array([[2], [0]], np.int32)}),
        ValueError,
        r"moe_init_routing: argument 'expert_idx' must be of row_idx's shape",
    ),
    BadCall(
        "active_num_range_2",
        lambda: varied(_valid, {3: -1}),
        ValueError,
        r"moe_init_routing: argument 'active_num' must be in \[0, inf\]",
    ),
]

declare(OpDecl(
    name=OP, family="moe", params=_params, build=_build,
    outputs=outputs(("expanded_x", "float"), ("expanded_row_idx", "int"), ("expanded_expert_idx", "int")),
    cases=CASES, bad_calls=BAD_CALLS,
    description="v1 token permutation with column-major row ids (npu_moe_init_routing)"))
