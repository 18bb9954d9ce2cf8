"""``moe_gating_top_k`` (npu_moe_gating_top_k): grouped top-k routing — softmax / sigmoid / sqrt-softplus
scores, a bias for selection only, group selection, renormalisation and a routed scaling factor; or the
hash mode (``tid2eid[input_ids]``)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs, varied
from ...values import rng_for
from ._common import BF16, F32, logits

OP = "moe_gating_top_k"


@st.composite
def _params(draw):
    group_count = draw(st.sampled_from((1, 1, 2, 4)))
    per_group = draw(st.integers(3, 8))
    e = group_count * per_group
    k_group = draw(st.integers(1, group_count))
    k = draw(st.integers(1, min(per_group * k_group, 8)))
    return {"t": draw(S.size(24, big=())), "e": e, "k": k, "k_group": k_group, "group_count": group_count,
            "group_select_mode": draw(st.sampled_from((0, 1))), "norm_type": draw(st.sampled_from((0, 1, 2))),
            "bias": draw(st.booleans()), "scaling": draw(st.sampled_from((1.0, 1.5, 2.5))),
            "dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def _build(p):
    kw = {"k_group": p["k_group"], "group_count": p["group_count"], "group_select_mode": p["group_select_mode"],
          "norm_type": p["norm_type"], "routed_scaling_factor": p["scaling"]}
    x = logits(p)
    if p["bias"]:  # the bias has x's dtype
        kw["bias"] = (rng_for(p["seed"], 2).standard_normal(p["e"]) * 0.1).astype(np.float32).astype(x.dtype)
    return (x, p["k"]), kw


_TIES = np.zeros((3, 4), F32)
_TIES[1, 2] = 1.0
OPTIONS = {"renorm": dict(renorm=1), "sqrtsoftplus_eps_0": dict(norm_type=2, eps=0.0),
           "sigmoid_scaled": dict(norm_type=1, routed_scaling_factor=0.1),
           "groups_mode_1": dict(k_group=1, group_count=4, group_select_mode=1, norm_type=2)}


def _options(kw, minus_zero_row):
    def build():
        rng = np.random.default_rng(4)
        x = (rng.standard_normal((9, 16)) * 5).astype(F32).astype(np.float16)
        bias = (rng.standard_normal(16) * 0.1).astype(np.float16)
        if minus_zero_row:  # sqrt-softplus of -0.0: max(-0.0, 0) + log1p(exp(-0)) = log(2)
            x[0] = -0.0
            return (x, 3), kw
        return (x, 3), kw | {"bias": bias}
    return build


_HASH_TABLE = np.random.default_rng(6).integers(0, 12, (20, 3)).astype(np.int64)


def _hash(norm):
    x = np.random.default_rng(7).standard_normal((5, 12)).astype(F32)
    ids = np.array([0, 19, 4, 4, 7], np.int32)
    return lambda: ((x, 3), {"input_ids": ids, "tid2eid": _HASH_TABLE, "k_group": 1, "group_count": 1,
                             "norm_type": norm})

CASES = [
    Case("ties_keep_the_lower_expert", lambda: ((_TIES, 2), {"norm_type": 1}),
         {"expert_idx": np.array([[0, 1], [2, 0], [0, 1]], np.int32)},
         "Equal logits give equal sigmoid scores: the stable sort keeps ascending expert order; row 1's expert 2 "
         "wins, then the lowest id."),
] + [Case(f"options_{name}{suffix}", _options(kw, minus_zero), why=f"Options {kw} on fp16 logits" + (
          " with a row of -0.0" if minus_zero else " with an fp16 bias"))
     for name, kw in OPTIONS.items() for minus_zero, suffix in ((False, ""), (True, "_minus_zero_row"))] + [
    Case(f"hash_mode_norm_{norm}", _hash(norm), {"expert_idx": _HASH_TABLE[[0, 19, 4, 4, 7]].astype(np.int32)},
         "Hash mode: the experts of token t are tid2eid[input_ids[t]], whatever the scores (rows 0, 19, 4, 4, 7 "
         "of the table); the weights are the normalised scores of those experts.")
    for norm in (0, 1, 2)]

def _valid():
    """A valid call the bad calls below change one or two arguments of."""
    return (np.full((2, 6), 0.0, F32), 1), {}


BAD_CALLS = [
    BadCall("group_count_value", lambda: ((np.ones((2, 6), F32), 1), {"group_count": 4}),
            ValueError, r"moe_gating_top_k: argument 'group_count' must be a divisor of the expert count 6"),
    BadCall("k_range", lambda: ((np.ones((2, 6), F32), 4), {"group_count": 2}),
            ValueError, r"moe_gating_top_k: argument 'k' must be in \[1, 3\]"),
    BadCall("bias_dtype", lambda: ((np.ones((2, 6), F32), 1), {"bias": np.ones(6, BF16)}),
            TypeError, r"moe_gating_top_k: argument 'bias' must be of dtype float32"),
    BadCall(
        "tid2eid_value",
        lambda: ((np.ones((2, 6), F32), 1), {"input_ids": np.zeros(2, np.int32)}),
        ValueError,
        r"moe_gating_top_k: argument 'tid2eid' must be given together with the other hash-mode argument",
    ),
    BadCall("tid2eid_range", lambda: ((np.ones((2, 6), F32), 1), {"input_ids": np.zeros(2, np.int32),
                                                     "tid2eid": np.full((3, 1), 6, np.int32)}),
            ValueError, r"moe_gating_top_k: argument 'tid2eid' must be expert ids in \[0, 6\)"),
    BadCall("renorm_choice", lambda: ((np.ones((2, 6), F32), 1), {"renorm": 2}),
            ValueError, r"moe_gating_top_k: argument 'renorm' must be one of"),
    BadCall("bias_nonfinite", lambda: ((np.ones((2, 6), F32), 1), {"bias": np.array([0, 0, np.inf, 0, 0, 0], F32)}),
            ValueError, r"moe_gating_top_k: argument 'bias' must be finite"),
    BadCall("k_range_2", lambda: ((np.full((2, 6), 0.0, F32), 0), {}),
            ValueError, r"moe_gating_top_k: argument 'k' must be in \[1, 6\]"),
    BadCall("k_range_3", lambda: ((np.full((2, 6), 0.0, F32), 4), {'group_count': 3, 'k_group': 1}),
            ValueError, r"moe_gating_top_k: argument 'k' must be in \[1, 2\]"),
    BadCall("group_count_value_2", lambda: varied(_valid, group_count=4),
            ValueError, r"moe_gating_top_k: argument 'group_count' must be a divisor of the expert count 6"),
    BadCall("k_group_range", lambda: varied(_valid, group_count=2, k_group=3),
            ValueError, r"moe_gating_top_k: argument 'k_group' must be in \[1, 2\]"),
    BadCall(
        "group_count_value_3",
        lambda: varied(_valid, group_count=6, group_select_mode=1),
        ValueError,
        r"moe_gating_top_k: argument 'group_count' must be at most E / 2 groups with group_select_mode=1",
    ),
    BadCall("group_select_mode_choice", lambda: varied(_valid, group_select_mode=2),
            ValueError, r"moe_gating_top_k: argument 'group_select_mode' must be one of"),
    BadCall("norm_type_choice", lambda: varied(_valid, norm_type=3),
            ValueError, r"moe_gating_top_k: argument 'norm_type' must be one of"),
    BadCall("renorm_choice_2", lambda: varied(_valid, renorm=2),
            ValueError, r"moe_gating_top_k: argument 'renorm' must be one of"),
    BadCall("bias_shape", lambda: varied(_valid, bias=np.full((5,), 0.0, F32)),
            ValueError, r"moe_gating_top_k: argument 'bias' must be of shape \[E\] = \[6\]"),
    BadCall("bias_dtype_2", lambda: varied(_valid, bias=np.full((6,), 0.0, np.float16)),
            TypeError, r"moe_gating_top_k: argument 'bias' must be of dtype float32"),
    BadCall("out_flag_type", lambda: varied(_valid, out_flag=1),
            TypeError, r"moe_gating_top_k: argument 'out_flag' must be a bool"),
    BadCall("routed_scaling_factor_value", lambda: varied(_valid, routed_scaling_factor='x'),
            TypeError, r"moe_gating_top_k: argument 'routed_scaling_factor' must be a real number"),
    BadCall("eps_nonfinite", lambda: varied(_valid, eps=np.inf),
            ValueError, r"moe_gating_top_k: argument 'eps' must be finite"),
    BadCall("x_shape", lambda: ((np.full((2, 4096), 0.0, F32), 1), {}),
            ValueError, r"moe_gating_top_k: argument 'x' must be of last dimension"),
    BadCall(
        "tid2eid_value_2",
        lambda: varied(_valid, input_ids=np.full((2,), 0, np.int32)),
        ValueError,
        r"moe_gating_top_k: argument 'tid2eid' must be given together with the other hash-mode argument",
    ),
    BadCall(
        "tid2eid_shape",
        lambda: (
            (np.full((2, 6), 0.0, F32), 2),
            {'input_ids': np.full((2,), 0, np.int32), 'tid2eid': np.full((3, 1), 0, np.int32)},
        ),
        ValueError,
        r"moe_gating_top_k: argument 'tid2eid' must be of shape \[num_keys, k\] = \[\*, 2\]",
    ),
    BadCall(
        "input_ids_range",
        lambda: varied(_valid, input_ids=np.array([0, 3], np.int32), tid2eid=np.full((3, 1), 0, np.int32)),
        ValueError,
        r"moe_gating_top_k: argument 'input_ids' must be in \[0, 3\)",
    ),
    BadCall(
        "tid2eid_range_2",
        lambda: varied(_valid, input_ids=np.full((2,), 0, np.int32), tid2eid=np.full((3, 1), 6, np.int32)),
        ValueError,
        r"moe_gating_top_k: argument 'tid2eid' must be expert ids in \[0, 6\)",
    ),
]

declare(OpDecl(
    name=OP, family="moe", params=_params, build=_build,
    outputs=outputs(("y", "float"), ("expert_idx", "int"), ("norm_out", "float")), numerics_fields=("transcendental",),
    cases=CASES, bad_calls=BAD_CALLS,
    description="grouped top-k routing: softmax / sigmoid / sqrt-softplus, bias for selection (npu_moe_gating_top_k)"))
