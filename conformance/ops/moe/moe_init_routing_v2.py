"""``moe_init_routing_v2`` (npu_moe_init_routing_v2): stable sort by expert, token-major row ids, an
active expert range, expert token counts (three forms), dynamic / static / no quantization of the
dispatched rows, and the drop/pad layout with an expert capacity."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, declare, outputs, varied
from ...values import float_tensor, positive_scales, rng_for
from .. import _dsv4
from ._common import BF16, F32, IDS, bench_experts_count, bench_routing, bf16, expert_ids, routing_shape

OP = "moe_init_routing_v2"
_OUTPUTS = ("expanded_x", "expanded_row_idx", "expert_tokens", "expanded_scale")


@st.composite
def _params(draw):
    r = draw(routing_shape())
    quant = draw(st.sampled_from((-1, -1, 1, "gather")))
    drop_pad = draw(st.sampled_from((0, 0, 0, 1)))
    return {**r, "h": draw(S.size(64, big=())), "quant_mode": quant, "drop_pad_mode": drop_pad,
            "capacity": draw(st.integers(1, 6)), "tokens_type": draw(st.sampled_from((0, 1, 2))),
            "flag": draw(st.booleans()), "range": draw(st.sampled_from(("all", "all", "sub"))),
            "row_idx_type": 0 if drop_pad else draw(st.sampled_from((0, 1))),
            "active_num": draw(st.sampled_from((-1, -1, "half"))), "smooth": draw(st.booleans()),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


@st.composite
def _static_quant_params(draw):
    """quant_mode=0 (static): fp16(x) * fp16(scale) rounded to fp16, + fp16(offset) rounded to fp16 —
    once each (NumPy's float64 -> float16 cast; a float32 detour rounds twice), with a scale of 10^-3 ..
    10^3 and an offset in [-200, 200]."""
    return {"t": draw(st.sampled_from((1, 3, 17))), "h": draw(st.sampled_from((1, 8, 33))),
            "scale": draw(st.floats(1e-3, 1e3)), "offset": draw(st.floats(-200, 200)), "seed": draw(S.seed())}


def _static_build(p):
    rng = rng_for(p["seed"])
    x = (rng.standard_normal((p["t"], p["h"])) * 50).astype(F32).astype(BF16)
    ids = rng.integers(0, 4, (p["t"], 2)).astype(np.int32)
    return (x, ids), {"scale": np.array([p["scale"]], F32), "offset": np.array([p["offset"]], F32), "expert_num": 4,
                      "quant_mode": 0, "expert_tokens_num_type": 2, "expert_tokens_num_flag": True}


def _build(p):
    if "offset" in p:
        return _static_build(p)
    rng = rng_for(p["seed"])
    t, e = p["t"], p["e"]
    ids = expert_ids(rng, t, e, p["k"], p["pattern"])
    k = ids.shape[1]
    kw = {"expert_num": e, "expert_tokens_num_type": p["tokens_type"], "expert_tokens_num_flag": p["flag"],
          "row_idx_type": p["row_idx_type"], "drop_pad_mode": p["drop_pad_mode"],
          "active_num": t * k // 2 if p["active_num"] == "half" and not p["drop_pad_mode"] else -1,
          "active_expert_range": [0, e] if p["range"] == "all" else [1, max(2, e - 1)]}
    if p["drop_pad_mode"]:
        kw["expert_capacity"] = p["capacity"]
        kw["active_expert_range"] = [0, e]
    if p["quant_mode"] == "gather":
        x, s = w8a8.dispatch_quant(float_tensor(rng, (t, p["h"]), "bfloat16", p["dist"]))
        kw.update(quant_mode=-1, scale=s)
    else:
        x = float_tensor(rng, (t, p["h"]), "bfloat16", p["dist"])
        kw["quant_mode"] = p["quant_mode"]
        if p["quant_mode"] == 1 and p["smooth"]:
            lo, hi = kw["active_expert_range"]
            kw["scale"] = positive_scales(rng, (hi - lo, p["h"]), np.float32, low=0.5, high=2.0)
    return (x, ids), kw


def _mask(args, kwargs):
    return dict(zip(_OUTPUTS, w8a8.moe_init_routing_v2_valid(*args, **kwargs)))


_IDS = np.array([[2, 0], [0, 2]], np.int32)  # token 0 -> experts 2, 0; token 1 -> experts 0, 2; expert 1 empty
_X2 = bf16([[1.0, 2.0], [3.0, 4.0]])
_X3 = bf16([[1, 2], [3, 4], [5, 6]])
_DROP = dict(expert_num=2, drop_pad_mode=1, expert_tokens_num_type=1, expert_tokens_num_flag=True,
             active_expert_range=[0, 2], quant_mode=-1)

CASES = [
    Case("two_tokens_three_experts_top2",
         lambda: ((_X2, _IDS), {"expert_num": 3, "expert_tokens_num_type": 1, "expert_tokens_num_flag": True,
                                "active_expert_range": [0, 3], "quant_mode": -1}),
         {"expanded_x": bf16([[1, 2], [3, 4], [1, 2], [3, 4]]),
          "expanded_row_idx": np.array([2, 0, 1, 3], np.int32),
          "expert_tokens": np.array([2, 0, 2], np.int64)},
         "Flat ids t*k+j: 0->e2, 1->e0, 2->e0, 3->e2. A stable sort by expert gives positions: id1 (e0), id2 (e0), "
         "id0 (e2), id3 (e2), so expanded_x rows are tokens 0,1,0,1 and the gather map expanded_row_idx[id] = "
         "position is [2, 0, 1, 3]; counts per expert [2, 0, 2]."),
    Case("drop_pad_capacity_1",
         lambda: ((_X3, np.array([[0], [0], [1]], np.int32)), _DROP | {"expert_capacity": 1}),
         {"expanded_x": bf16([[[1, 2]], [[5, 6]]]), "expanded_row_idx": np.array([0, -1, 1], np.int32),
          "expert_tokens": np.array([2, 1], np.int64)},
         "Experts of tokens 0, 1, 2: 0, 0, 1; capacity 1: token 1 is expert 0's second token -> dropped (-1). Slots "
         "e*C + rank: token 0 -> 0, token 2 -> 1. The counts are taken before the drop: [2, 1]."),
    Case("drop_pad_capacity_2",
         lambda: ((_X3, np.array([[0], [0], [1]], np.int32)), _DROP | {"expert_capacity": 2}),
         {"expanded_x": bf16([[[1, 2], [3, 4]], [[5, 6], [0, 0]]]), "expanded_row_idx": np.array([0, 1, 2], np.int32)},
         "Capacity 2: [e0: token 0, token 1 | e1: token 2, an empty slot of zeros]; slots 0, 1, 2."),
]

def _valid():
    """A valid call (2 tokens, top-2 of 3 experts) the golden tests' bad inputs change one or two arguments of."""
    return (np.array([[1.0, 1.0], [2.0, 2.0]], F32), np.array([[2, 0], [0, 2]], np.int32)), {'expert_num': 3}

def _valid_fixtures():
    """A valid call on the shared fixtures (bf16 x [2, 4], top-2 of 4 experts)."""
    return (np.ones((2, 4), BF16), IDS[:2]), {'expert_num': 4}


BAD_CALLS = [
    BadCall(
        "scale_value",
        lambda: varied(_valid_fixtures, quant_mode=0),
        ValueError,
        r"moe_init_routing_v2: argument 'scale' must be a float32 \[1\] static scale with quant_mode=0",
    ),
    BadCall("offset_shape", lambda: varied(_valid_fixtures, quant_mode=1, offset=np.ones(1, F32)),
            ValueError, r"moe_init_routing_v2: argument 'offset' must be None unless quant_mode=0"),
    BadCall("expert_capacity_value", lambda: varied(_valid_fixtures, drop_pad_mode=1),
            ValueError, r"moe_init_routing_v2: argument 'expert_capacity' must be > 0 with drop_pad_mode=1"),
    BadCall(
        "scale_shape",
        lambda: varied(_valid_fixtures, quant_mode=1, scale=np.ones((3, 4), F32)),
        ValueError,
        r"moe_init_routing_v2: argument 'scale' must be of shape \[end - start, H\] = \[4, 4\] or \[1, 4\]",
    ),
    BadCall("expert_num_value", lambda: varied(_valid_fixtures, expert_num=0),
            ValueError, r"moe_init_routing_v2: argument 'expert_num' must be > 0"),
    BadCall(
        "active_expert_range_range",
        lambda: varied(_valid_fixtures, active_expert_range=[0, 5]),
        ValueError,
        r"moe_init_routing_v2: argument 'active_expert_range' must be within \[0, expert_num = 4\]",
    ),
    BadCall("expert_idx_shape", lambda: varied(_valid_fixtures, {1: IDS[:3]}),
            ValueError, r"moe_init_routing_v2: argument 'expert_idx' must be of shape \[N, K\] with N = 2"),
    BadCall("scale_nonfinite", lambda: varied(_valid_fixtures, {0: np.full((2, 4), 3e38, BF16)}, quant_mode=1, scale=np.full((1, 4), 10, F32)),
            ValueError, r"moe_init_routing_v2: argument 'scale' must be such that x \* scale stays finite in fp32"),
    BadCall(
        "expert_idx_dtype",
        lambda: varied(_valid, {1: np.array([[2, 0], [0, 2]], np.int64)}),
        TypeError,
        r"moe_init_routing_v2: argument 'expert_idx' must be of dtype int32",
    ),
    BadCall(
        "expert_idx_shape_2",
        lambda: varied(_valid, {1: np.array([[2, 0]], np.int32)}),
        ValueError,
        r"moe_init_routing_v2: argument 'expert_idx' must be of shape \[N, K\] with N = 2",
    ),
    BadCall(
        "expert_num_missing",
        lambda: varied(_valid, expert_num=-1),
        ValueError,
        r"moe_init_routing_v2: argument 'expert_num' must be > 0 when active_expert_range is not given",
    ),
    BadCall(
        "active_expert_range_limit",
        lambda: varied(_valid, active_expert_range=[2, 1]),
        ValueError,
        r"moe_init_routing_v2: argument 'active_expert_range' must be \[start, end\) with 0 <= start < end <= 10240",
    ),
    BadCall(
        "active_expert_range_range_2",
        lambda: varied(_valid, active_expert_range=[0, 4]),
        ValueError,
        r"moe_init_routing_v2: argument 'active_expert_range' must be within \[0, expert_num = 3\]",
    ),
    BadCall(
        "active_expert_range_value",
        lambda: varied(_valid, active_expert_range=[0]),
        ValueError,
        r"moe_init_routing_v2: argument 'active_expert_range' must be two ints \[start, end\)",
    ),
    BadCall(
        "drop_pad_mode_choice",
        lambda: varied(_valid, drop_pad_mode=2),
        ValueError,
        r"moe_init_routing_v2: argument 'drop_pad_mode' must be one of",
    ),
    BadCall(
        "expert_capacity_value_2",
        lambda: varied(_valid, drop_pad_mode=1),
        ValueError,
        r"moe_init_routing_v2: argument 'expert_capacity' must be > 0 with drop_pad_mode=1",
    ),
    BadCall(
        "row_idx_type_value",
        lambda: varied(_valid, drop_pad_mode=1, expert_capacity=2, row_idx_type=1),
        ValueError,
        r"moe_init_routing_v2: argument 'row_idx_type' must be 0",
    ),
    BadCall(
        "expert_tokens_num_type_choice",
        lambda: varied(_valid, expert_tokens_num_type=3),
        ValueError,
        r"moe_init_routing_v2: argument 'expert_tokens_num_type' must be one of",
    ),
    BadCall(
        "expert_tokens_num_flag_type",
        lambda: varied(_valid, expert_tokens_num_flag=1),
        TypeError,
        r"moe_init_routing_v2: argument 'expert_tokens_num_flag' must be a bool",
    ),
    BadCall(
        "expert_num_value_2",
        lambda: varied(
            _valid, expert_num=-1, active_expert_range=[0, 3], expert_tokens_num_type=2, expert_tokens_num_flag=True
        ),
        ValueError,
        r"moe_init_routing_v2: argument 'expert_num' must be > 0 with expert_tokens_num_type=2",
    ),
    BadCall(
        "quant_mode_choice",
        lambda: varied(_valid, quant_mode=2),
        ValueError,
        r"moe_init_routing_v2: argument 'quant_mode' must be one of",
    ),
    BadCall(
        "x_shape",
        lambda: varied(_valid, {0: np.array([[1, 1], [2, 2]], np.int8)}, quant_mode=1),
        TypeError,
        r"moe_init_routing_v2: argument 'x' must be float16, bfloat16 or float32 when quantizing",
    ),
    BadCall(
        "scale_value_2",
        lambda: varied(_valid, quant_mode=0),
        ValueError,
        r"moe_init_routing_v2: argument 'scale' must be a float32 \[1\] static scale with quant_mode=0",
    ),
    BadCall(
        "scale_shape_2",
        lambda: varied(_valid, quant_mode=0, scale=np.full((2,), 1.0, F32)),
        ValueError,
        r"moe_init_routing_v2: argument 'scale' must be of shape \[1\] with quant_mode=0",
    ),
    BadCall(
        "offset_shape_2",
        lambda: varied(_valid, quant_mode=0, scale=np.full((1,), 1.0, F32), offset=np.full((2,), 1.0, F32)),
        ValueError,
        r"moe_init_routing_v2: argument 'offset' must be of shape \[1\] with quant_mode=0",
    ),
    BadCall(
        "offset_shape_3",
        lambda: varied(_valid, offset=np.full((1,), 1.0, F32)),
        ValueError,
        r"moe_init_routing_v2: argument 'offset' must be None unless quant_mode=0",
    ),
    BadCall(
        "scale_shape_3",
        lambda: varied(_valid, scale=np.full((3,), 1.0, F32)),
        ValueError,
        r"moe_init_routing_v2: argument 'scale' must be of shape \[N\] = \[2\]",
    ),
    BadCall(
        "scale_dtype",
        lambda: varied(_valid, scale=np.full((2,), 1.0, np.float16)),
        TypeError,
        r"moe_init_routing_v2: argument 'scale' must be of dtype float32",
    ),
    BadCall(
        "scale_shape_4",
        lambda: varied(_valid, quant_mode=1, scale=np.full((2, 2), 1.0, F32)),
        ValueError,
        r"moe_init_routing_v2: argument 'scale' must be of shape \[end - start, H\] = \[3, 2\] or \[1, 2\]",
    ),
    BadCall(
        "x_nonfinite",
        lambda: varied(_valid, {0: np.array([[np.inf, 0.0], [0.0, 0.0]], F32)}),
        ValueError,
        r"moe_init_routing_v2: argument 'x' must be finite",
    ),
    BadCall(
        "active_num_range",
        lambda: varied(_valid, active_num=-2),
        ValueError,
        r"moe_init_routing_v2: argument 'active_num' must be in \[-1, inf\]",
    ),
    BadCall(
        "expert_capacity_range",
        lambda: varied(_valid, expert_capacity=-2),
        ValueError,
        r"moe_init_routing_v2: argument 'expert_capacity' must be in \[-1, inf\]",
    ),
    BadCall(
        "expert_num_value_3",
        lambda: varied(_valid, expert_num=0),
        ValueError,
        r"moe_init_routing_v2: argument 'expert_num' must be > 0",
    ),
    # expert_capacity sizes expanded_x [expert_num * C, H]; 10**9 for 2 tokens asked NumPy for
    # 4 * 10**9 rows * (4 * 2 B + 5 B) = 52 GB. Refused before any allocation, naming the bytes and the budget.
    BadCall("expert_capacity_budget", lambda: varied(_valid_fixtures, drop_pad_mode=1, expert_capacity=10**9),
            ValueError, r"moe_init_routing_v2: argument 'expert_capacity' must be small enough that .* allocation budget of 4294967296 bytes .*; got \(4000000000,\) x 13 B = 52000000000 bytes"),
]


def _bench_inputs(p, rng):
    t, e, k = p["t"], p["e"], p["topk"]
    ids, _ = bench_routing(rng, t, e, k)
    x = rng.standard_normal((t, p.get("h", _dsv4.H))).astype(np.float32).astype(BF16)
    return (x, ids), {"active_num": t * k, "expert_num": e, "expert_tokens_num_type": 1,
                      "expert_tokens_num_flag": True, "active_expert_range": [0, e], "quant_mode": 1}


def bench_case(t: int, e: int = _dsv4.E, k: int = _dsv4.TOP_K, h: int = _dsv4.H, tags=()) -> BenchCase:
    return BenchCase(OP, f"T{t}xE{e}xk{k}", {"t": t, "m": t, "e": e, "topk": k}, _bench_inputs, work=t * k * h,
                     unit="elem", tags=tags)


declare(OpDecl(
    name=OP, family="moe", params=_params, build=_build, strategies={"static_quant": _static_quant_params},
    outputs=outputs(("expanded_x", "float"), ("expanded_row_idx", "int"), ("expert_tokens", "int"),
                    ("expanded_scale", "scale")),
    numerics_fields=("routing_quant_round", "round_mode"), mask=_mask, cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(t, bench_experts_count(full), tags=_dsv4.tags(t)) for t in _dsv4.token_counts(full)],
    description="v2 routing: stable sort, token-major ids, active range, counts, dynamic quant, drop/pad"))
