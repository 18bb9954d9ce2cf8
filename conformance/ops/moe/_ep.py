"""What the expert-parallel declarations share: the rank / routing strategies (R in {1, 2, 4, 8}, tokens
per rank including 0, experts with 0 rows, every copy to one rank, E_loc = 1 and > 1, K = 1), the
builders of the dispatch / combine / layer inputs, and the hand-derived two-rank example."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...values import float_tensor, rng_for
from ._common import BF16, F32, expert_ids, moe_layer, shared_expert

GROUP = "ep"
PATTERNS = ("random", "skewed", "one_rank")


def route(rng, tokens: list, e_loc: int, r: int, k: int, pattern: str) -> list:
    """Per rank int32 ``[T_r, K]`` distinct expert ids: ``random``, ``skewed`` (empty experts) or
    ``one_rank`` (every copy of every rank to one rank's experts; needs K <= E_loc, else random)."""
    e = e_loc * r
    if pattern == "one_rank" and k <= e_loc:
        base = int(rng.integers(r)) * e_loc
        return [(expert_ids(rng, t, e_loc, k, "random") + base).astype(np.int32) for t in tokens]
    return [expert_ids(rng, t, e, k, "skewed" if pattern == "skewed" else "random") for t in tokens]


def _k(draw, e: int) -> int:
    return draw(st.sampled_from((1, 1, 2, 3, 6))) if e >= 6 else draw(st.integers(1, min(e, 3)))


# ---------------------------------------------------------------------------------------------
# the MC2 ops (dispatch / combine, v1 and v2)

@st.composite
def mc2_params(draw, v2: bool = True):
    """A3-valid MC2 calls: v2 R in {2, 4, 8}, H in {1024, 2048}; v1 R = 8, H = 7168. BS_r in [1, 5]
    (equal on every rank when a mask is drawn); a mask may leave a rank with 0 active tokens."""
    r = draw(st.sampled_from((2, 4, 8))) if v2 else 8
    e_loc = draw(st.sampled_from((1, 2, 3)))
    k = min(_k(draw, e_loc * r), 8)
    mask = draw(st.sampled_from(("none", "none", "rows", "copies", "rank_empty"))) if v2 else "none"
    if mask == "none" and draw(st.booleans()):
        bs = [draw(st.integers(1, 5)) for _ in range(r)]
    else:
        bs = [draw(st.integers(1, 5))] * r
    return {"v2": v2, "r": r, "e_loc": e_loc, "k": k, "bs": bs, "h": draw(st.sampled_from((1024, 2048))) if v2
            else 7168, "dtype": draw(st.sampled_from(("bfloat16", "bfloat16", "float16"))),
            "quant": draw(st.sampled_from((0, 2, 2))), "smooth": draw(st.booleans()), "mask": mask,
            "ent": draw(st.sampled_from((0, 1))), "gbs": draw(st.booleans()), "perm": draw(st.booleans()),
            "pattern": draw(st.sampled_from(PATTERNS)), "dist": draw(S.float_dist(allow_nan=False, edges=False)),
            "seed": draw(S.seed())}


def _masks(rng, p) -> list | None:
    mode, bs, k = p["mask"], p["bs"], p["k"]
    if mode == "none":
        return None
    if mode == "rows":
        return [np.arange(t) < rng.integers(0, t + 1) for t in bs]
    if mode == "copies":
        return [rng.random((t, k)) < 0.7 for t in bs]
    empty = int(rng.integers(p["r"]))
    return [np.full(t, q != empty) for q, t in enumerate(bs)]


def mc2_call(p) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of the dispatch op (v1 / v2) for the parameters of :func:`mc2_params`."""
    rng = rng_for(p["seed"])
    r, e = p["r"], p["e_loc"] * p["r"]
    x = [float_tensor(rng, (t, p["h"]), p["dtype"], p["dist"]) for t in p["bs"]]
    ids = route(rng, p["bs"], p["e_loc"], r, p["k"], p["pattern"])
    rank_ids = [int(v) for v in (rng.permutation(r) if p["perm"] else range(r))]
    kw = {"quant_mode": p["quant"], "expert_token_nums_type": p["ent"],
          "global_bs": max(p["bs"]) * r if (p["gbs"] or len(set(p["bs"])) > 1) else 0}
    if p["quant"] == 2 and p["smooth"]:
        kw["scales"] = rng.uniform(0.5, 2.0, size=(e, p["h"])).astype(F32)   # S = 0: [E, H] (v2's tiling: 1 -> 0)
    masks = _masks(rng, p)
    if masks is not None:
        kw["x_active_mask"] = masks
    return (x, ids, GROUP, r, rank_ids, e), kw


def dispatch_op(p) -> str:
    return "moe_distribute_dispatch_v2" if p["v2"] else "moe_distribute_dispatch"


def combine_call(p) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of the combine op matching :func:`mc2_call`: the golden dispatch (in x's dtype)
    of the same parameters gives the index outputs; the expert rows are random values of x's dtype."""
    (x, ids, group, r, rank_ids, e), kw = mc2_call({**p, "quant": 0})
    dispatch = w8a8.moe_distribute_dispatch_v2 if p["v2"] else w8a8.moe_distribute_dispatch
    out = dispatch(x, ids, group, r, rank_ids, e, **kw)
    rng = rng_for(p["seed"] + 1)
    rows = [float_tensor(rng, a.shape, p["dtype"], p["dist"]) for a in out[0]]
    weights = [rng.uniform(0.0, 1.0, size=i.shape).astype(F32) for i in ids]
    ckw = {"global_bs": kw["global_bs"]}
    if "x_active_mask" in kw:
        ckw["x_active_mask"] = kw["x_active_mask"]
    if p["v2"] and p["smooth"]:                     # reuse the flag: a shared-expert output to add
        ckw["shared_expert_x"] = [float_tensor(rng, a.shape, p["dtype"], p["dist"]) for a in x]
    if p["quant"] == 2:                             # reuse the flag: the int8 return trip
        ckw["comm_quant_mode"] = 2
    return (rows, ids, out[2], out[4], weights, group, r, rank_ids, e), ckw


# ---------------------------------------------------------------------------------------------
# the layer (w8a8_moe_ep)

@st.composite
def layer_params(draw):
    r = draw(st.sampled_from((1, 2, 4, 8)))
    e_loc = draw(st.sampled_from((1, 2, 3)))
    return {"r": r, "e_loc": e_loc, "k": _k(draw, e_loc * r),
            "tokens": [draw(st.sampled_from((0, 0, 1, 2, 5, 7))) for _ in range(r)],
            "h": draw(st.sampled_from((16, 32, 64))), "i": draw(st.sampled_from((8, 16))),
            "dispatch": draw(st.sampled_from(("int8", "bf16"))), "limit": draw(st.sampled_from((None, 10.0))),
            "shared": draw(st.booleans()), "pattern": draw(st.sampled_from(PATTERNS)),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def layer_call(p) -> tuple[tuple, dict]:
    rng = rng_for(p["seed"])
    r, e = p["r"], p["e_loc"] * p["r"]
    hidden = [float_tensor(rng, (t, p["h"]), BF16, p["dist"]) for t in p["tokens"]]
    w13, s13, w2, s2 = moe_layer(rng, e, p["h"], p["i"])
    ids = route(rng, p["tokens"], p["e_loc"], r, p["k"], p["pattern"])
    weights = [rng.uniform(0.05, 1.0, size=i.shape).astype(F32) for i in ids]
    kw = {"topk_ids": ids, "topk_weights": weights, "dispatch": p["dispatch"], "swiglu_limit": p["limit"]}
    if p["shared"]:
        kw["shared_expert"] = shared_expert(rng, p["h"], 8)
    return (hidden, w13, s13, w2, s2), kw


# ---------------------------------------------------------------------------------------------
# the hand-derived two-rank example (R = 2, E = 4, E_loc = 2, K = 2, BS = 3 on each rank)

TWO_RANK_IDS = [np.array([[0, 3], [1, 2], [3, 0]], np.int32), np.array([[2, 1], [0, 1], [3, 2]], np.int32)]
TWO_RANK_H = 1024


TWO_RANK_WHY = (
    "Rank 0 owns experts 0, 1 (local 0, 1), rank 1 experts 2, 3. Copies (r, t, k) -> expert: rank 0: (0,0,0)->0, "
    "(0,0,1)->3, (0,1,0)->1, (0,1,1)->2, (0,2,0)->3, (0,2,1)->0; rank 1: (1,0,0)->2, (1,0,1)->1, (1,1,0)->0, "
    "(1,1,1)->1, (1,2,0)->3, (1,2,1)->2. Receive order (l, source, f = 2t + k): rank 0, l = 0 (expert 0): from "
    "rank 0 f = 0, 5 -> (0,0,0), (0,2,1); from rank 1 f = 2 -> (1,1,0); l = 1 (expert 1): rank 0 f = 2 -> (0,1,0); "
    "rank 1 f = 1, 3 -> (1,0,1), (1,1,1). Rank 1, l = 0 (expert 2): rank 0 f = 3 -> (0,1,1); rank 1 f = 0, 5 -> "
    "(1,0,0), (1,2,1); l = 1 (expert 3): rank 0 f = 1, 4 -> (0,0,1), (0,2,0); rank 1 f = 4 -> (1,2,0). "
    "ep_recv_counts (cumulative over (l, source)): rank 0 [2, 3, 4, 6], rank 1 [1, 3, 5, 6]; expert_token_nums "
    "[3, 3] on both. Token (r, t) is the constant row 1 + 3r + t, so each received row is that value.")
TWO_RANK_SRC = [[0, 0, 0], [0, 2, 1], [1, 1, 0], [0, 1, 0], [1, 0, 1], [1, 1, 1],
                [0, 1, 1], [1, 0, 0], [1, 2, 1], [0, 0, 1], [0, 2, 0], [1, 2, 0]]
TWO_RANK_ROW_VALUES = [1 + 3 * r + t for r, t, _ in TWO_RANK_SRC]


def two_rank_dispatch_inputs(**kw) -> tuple[tuple, dict]:
    x = [np.stack([np.full(TWO_RANK_H, 1 + 3 * r + t, F32) for t in range(3)]).astype(BF16) for r in range(2)]
    return (x, [i.copy() for i in TWO_RANK_IDS], GROUP, 2, [0, 1], 4), kw



# ---------------------------------------------------------------------------------------------
# valid base calls and the bad calls every MC2 op shares (the group checks)

def ring_dispatch_inputs(**kw) -> tuple[tuple, dict]:
    """v1 base: R = 8, E = 8 (E_loc = 1), K = 1, H = 7168, BS = 1: rank r's token is the constant row r + 1
    and goes to expert (r + 1) % 8, i.e. to rank (r + 1) % 8."""
    x = [np.full((1, 7168), r + 1, F32).astype(BF16) for r in range(8)]
    ids = [np.array([[(r + 1) % 8]], np.int32) for r in range(8)]
    return (x, ids, GROUP, 8, list(range(8)), 8), kw


def dispatch_base(v2: bool):
    return (lambda: two_rank_dispatch_inputs()) if v2 else (lambda: ring_dispatch_inputs())


def combine_base(v2: bool):
    """A valid combine call: the golden dispatch of the base call, its rows sent back unchanged, weights 0.5."""
    def build():
        args, kw = dispatch_base(v2)()
        x, ids, group, r, rank_ids, e = args
        out = (w8a8.moe_distribute_dispatch_v2 if v2 else w8a8.moe_distribute_dispatch)(*args, **kw)
        return (out[0], ids, out[2], out[4], [np.full(i.shape, 0.5, F32) for i in ids], group, r, rank_ids, e), {}
    return build


def group_bad_calls(op: str, base, pos: dict, v2: bool, dispatch: bool) -> list:
    """The bad calls of the group arguments, for an op whose positional arguments are at ``pos``
    (``ids``, ``group_ep``, ``ep_world_size``, ``ep_rank_id``, ``moe_expert_num``)."""
    from ...declare import BadCall, varied

    def bc(name, raises, match, args=None, **kw):
        return BadCall(name, lambda: varied(base, args, **kw), raises, rf"{op}: argument {match}")

    r = 2 if v2 else 8
    ids = base()[0][pos["ids"]]
    dup = [i.copy() for i in ids]
    dup[0][0, :] = dup[0][0, 0]
    out = [i.copy() for i in ids]
    out[-1][0, 0] = 4 * r
    calls = [
        bc("ep_world_size_not_len", ValueError, r"'ep_world_size' must be (in \[2, 768\]|one of)",
           {pos["ep_world_size"]: 1 if v2 else 4}),
        bc("ep_rank_id_repeated", ValueError, r"'ep_rank_id' must be the rank id of each entry",
           {pos["ep_rank_id"]: [0] * r}),
        bc("group_ep_empty", ValueError, r"'group_ep' must be an HCCL group name", {pos["group_ep"]: ""}),
        bc("moe_expert_num_not_multiple", ValueError, r"'moe_expert_num' must be a multiple of the routed-expert ranks",
           {pos["moe_expert_num"]: r + 1}),
        bc("tp_world_size_2", ValueError, r"'tp_world_size' must be 0 or 1", tp_world_size=2),
        bc("expert_shard_type_1", ValueError, r"'expert_shard_type' must be in \[0, 0\]", expert_shard_type=1),
        bc("shared_expert_rank_num_out_of_range", ValueError, r"'shared_expert_rank_num' must be in \[0, "
           rf"{r - 1}\]", shared_expert_rank_num=r),
        bc("global_bs_wrong", ValueError, r"'global_bs' must be max BS \* ep_world_size", global_bs=7),
        bc("expert_ids_repeated_in_a_row", ValueError, r"'expert_ids\[0\]' must be K distinct expert ids",
           {pos["ids"]: dup}) if ids[0].shape[1] > 1 else None,
        bc("expert_ids_out_of_range", ValueError, r"'expert_ids\[\d\]' must be expert ids in \[0, moe_expert_num",
           {pos["ids"]: out}),
        bc("expert_ids_not_a_list", TypeError, r"'expert_ids' must be a list with one array per rank",
           {pos["ids"]: ids[0]}),
    ]
    if v2:
        calls += [
            bc("comm_alg_unknown", ValueError, r"'comm_alg' must be one of", comm_alg="ring"),
            bc("hierarchy_needs_16_ranks", ValueError, r"'ep_world_size' must be in \[16, 256\] and a multiple "
               r"of 16 with comm_alg 'hierarchy'", comm_alg="hierarchy"),
            bc("shared_expert_num_5", ValueError, r"'shared_expert_num' must be in \[0, 4\]", shared_expert_num=5),
            bc("shared_expert_num_2_without_shared_ranks", ValueError, r"'shared_expert_num' must be 0 or 1 \(the "
               r"default\) with shared_expert_rank_num = 0", shared_expert_num=2),
            bc("zero_expert_num_not_modelled", ValueError, r"'zero_expert_num' must be None / 0 \(not modelled",
               zero_expert_num=1),
        ]
    else:
        calls += [
            bc("shared_expert_num_2", ValueError, r"'shared_expert_num' must be in \[1, 1\]", shared_expert_num=2),
            bc("shared_expert_rank_num_not_divisor", ValueError, r"'shared_expert_rank_num' must be a divisor of "
               "ep_world_size", shared_expert_rank_num=3),
        ]
    if dispatch:
        calls.append(bc("shared_expert_ranks_not_modelled", ValueError, r"'shared_expert_rank_num' must be 0: the "
                        "golden does not model shared-expert ranks", shared_expert_rank_num=1 if v2 else 4))
    return [c for c in calls if c is not None]
