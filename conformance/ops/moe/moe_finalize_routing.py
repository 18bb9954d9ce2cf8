"""``moe_finalize_routing`` (npu_moe_finalize_routing): the weighted un-permute of the expert rows back to
tokens, with skip connections and an expert bias; row indices read column-major (modes 0 / 1) or
row-major (modes 2 / 3), -1 marking a dropped slot in the drop/pad modes 1 and 3."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from w8a8 import dtypes as _dt

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, declare, outputs, varied
from ...values import float_tensor, rng_for
from .. import _dsv4
from ._common import BF16, F32, bench_experts_count, bench_routing, expert_ids, routing_shape

OP = "moe_finalize_routing"


@st.composite
def _params(draw):
    r = draw(routing_shape())
    return {**r, "h": draw(S.size(48, big=())), "mode": draw(st.sampled_from((0, 1, 2, 3))),
            "skips": draw(st.sampled_from((0, 1, 2))), "bias": draw(st.booleans()),
            "dtype": draw(st.sampled_from(("bfloat16", "float16", "float32"))), "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    t, e, h = p["t"], p["e"], p["h"]
    ids = expert_ids(rng, t, e, p["k"], p["pattern"])
    k = ids.shape[1]
    dt = np.dtype(_dt.resolve(p["dtype"]))
    rows = float_tensor(rng, (t * k, h), dt, "gaussian")
    # a random bijection route -> row; the op reads it column-major (j*T + t) in modes 0/1 and row-major
    # (t*k + j) in modes 2/3 — the same array, interpreted by the layout under test
    idx = rng.permutation(t * k).astype(np.int32)
    if p["mode"] in (1, 3) and t * k:
        idx[rng.random(t * k) < 0.2] = -1  # dropped routes
    skip1 = float_tensor(rng, (t, h), dt, "gaussian") if p["skips"] >= 1 else None
    skip2 = float_tensor(rng, (t, h), dt, "gaussian") if p["skips"] == 2 else None
    bias = float_tensor(rng, (e, h), dt, "gaussian") if p["bias"] else None
    scales = rng.uniform(0.0, 1.0, size=(t, k)).astype(np.float32).astype(dt)
    return (rows, skip1, skip2, bias, scales, idx, ids), {"drop_pad_mode": p["mode"]}


_ROWS = np.array([[1], [2], [3], [4]], F32)
_SCALES = np.array([[0.5, 0.25], [1, 2]], F32)


def _mode(mode):
    return lambda: ((_ROWS, None, None, None, _SCALES, np.array([2, 0, 3, 1], np.int32), None), {"drop_pad_mode": mode})


CASES = [
    Case(f"mode_{mode}", _mode(mode), {"y": np.array(want, F32)[:, None]},
         "rows 1, 2, 3, 4; idx [2, 0, 3, 1]; scales [[0.5, 0.25], [1, 2]]. " + (
             "Modes 0 / 1 read idx column-major (slot j of token i at j*N + i): token 0 -> rows 2, 3 (values 3, 4): "
             "0.5*3 + 0.25*4 = 2.5; token 1 -> rows 0, 1: 1*1 + 2*2 = 5." if mode < 2 else
             "Modes 2 / 3 read it row-major (i*K + j): token 0 -> rows 2, 0: 0.5*3 + 0.25*1 = 1.75; token 1 -> rows 3, "
             "1: 1*4 + 2*2 = 8."))
    for mode, want in ((0, [2.5, 5.0]), (1, [2.5, 5.0]), (2, [1.75, 8.0]), (3, [1.75, 8.0]))] + [
    Case("dropped_slot_skips_and_bias",
         lambda: ((_ROWS, np.array([[1], [2]], F32), np.array([[0.5], [0.5]], F32), np.array([[10], [100]], F32),
                   _SCALES, np.array([2, -1, 3, 1], np.int32), np.array([[0, 1], [1, 0]], np.int32)),
                  {"drop_pad_mode": 3}),
         {"y": np.array([[8.0], [130.5]], F32)},
         "Mode 3, idx [2, -1, 3, 1]: token 0's slot 1 is dropped. H = 1, K = 2 runs the all-bias template, which "
         "skips a dropped slot entirely, bias included (ops-transformer moe_finalize_routing_v2_fp_db_all_bias.h:"
         "477-494 @ c29bc106): out0 = 0.5 * (3 + b[e0]) + 0; out1 = 1 * (4 + b[e1]) + 2 * (2 + b[e0]). With b = "
         "[10, 100] (experts [[0, 1], [1, 0]]), skip1 = [1, 2], skip2 = [0.5, 0.5]: out0 = 1.5 + 0.5*13 = 8.0; "
         "out1 = 2.5 + 104 + 2*12 = 130.5."),
    Case("no_scales_k_from_argument",
         lambda: ((_ROWS, None, None, None, None, np.array([2, -1, 3, 1], np.int32), None),
                  {"drop_pad_mode": 3, "k": 2}),
         {"y": np.array([[3.0], [6.0]], F32)},
         "Without scales K comes from k and every weight is 1: token 0 = row 2 + a dropped slot = 3 + 0; token 1 = "
         "rows 3 and 1 = 4 + 2 (mode 3)."),
]

def _valid():
    """A valid call the bad calls below change one or two arguments of."""
    return (
        np.array([[1.0], [2.0], [3.0], [4.0]], F32),
        None,
        None,
        None,
        np.array([[0.5, 0.25], [2.0, 1.0]], F32),
        np.array([2, 0, 1, 3], np.int32),
        np.array([[2, 0], [0, 2]], np.int32),
    ), {'drop_pad_mode': 2}


def _with_bias(expert_ids):
    """4 rows of [N = 2, K = 2] with a bias for 3 experts; the expert ids ``expert_ids`` (None: missing)."""
    return (np.ones((4, 2), F32), None, None, np.ones((3, 2), F32), np.ones((2, 2), F32),
            np.arange(4, dtype=np.int32), expert_ids), {}


BAD_CALLS = [
    BadCall("expanded_src_to_dst_row_range", lambda: ((np.ones((4, 2), F32), None, None, None, np.ones((2, 2), F32),
                              np.array([0, -1, 2, 3], np.int32), None), {}),
            ValueError, r"moe_finalize_routing: argument 'expanded_src_to_dst_row' must be row indices in \[0, 4\)"),
    BadCall("skip1_value", lambda: ((np.ones((4, 2), F32), None, np.ones((2, 2), F32), None, np.ones((2, 2), F32),
                              np.arange(4, dtype=np.int32), None), {}),
            ValueError, r"moe_finalize_routing: argument 'skip1' must be given when skip2 is"),
    BadCall(
        "export_for_source_row_value",
        lambda: _with_bias(None),
        ValueError,
        r"moe_finalize_routing: argument 'export_for_source_row' must be the \[N, K\] expert ids when bias is given",
    ),
    BadCall(
        "export_for_source_row_range",
        lambda: _with_bias(np.full((2, 2), 3, np.int32)),
        ValueError,
        r"moe_finalize_routing: argument 'export_for_source_row' must be expert ids in \[0, E = 3\)",
    ),
    BadCall(
        "expanded_permuted_rows_shape",
        lambda: (
            (np.ones((2, 2, 2), F32), None, None, None, np.ones((2, 2), F32), np.arange(4, dtype=np.int32), None),
            {"drop_pad_mode": 2},
        ),
        ValueError,
        r"moe_finalize_routing: argument 'expanded_permuted_rows' must be 2-D \[N\*K, H\] with drop_pad_mode=2",
    ),
    BadCall(
        "k_value",
        lambda: ((np.ones((4, 2), F32), None, None, None, None, np.arange(4, dtype=np.int32), None), {"k": 3}),
        ValueError,
        r"moe_finalize_routing: argument 'k' must be a divisor of the index length 4",
    ),
    BadCall(
        "expanded_permuted_rows_dtype",
        lambda: varied(_valid, {0: np.array([[1], [2], [3], [4]], np.int32)}),
        TypeError,
        r"moe_finalize_routing: argument 'expanded_permuted_rows' must be of dtype float16, bfloat16 or float32",
    ),
    BadCall(
        "expanded_permuted_rows_shape_2",
        lambda: varied(_valid, {0: np.array([[[1.0]], [[0.0]], [[3.0]]], F32)}),
        ValueError,
        r"moe_finalize_routing: argument 'expanded_permuted_rows' must be 2-D \[N\*K, H\] with drop_pad_mode=2",
    ),
    BadCall(
        "drop_pad_mode_choice",
        lambda: varied(_valid, drop_pad_mode=4),
        ValueError,
        r"moe_finalize_routing: argument 'drop_pad_mode' must be one of",
    ),
    BadCall(
        "expanded_src_to_dst_row_dtype",
        lambda: varied(_valid, {5: np.array([2, 0, 1, 3], np.int64)}),
        TypeError,
        r"moe_finalize_routing: argument 'expanded_src_to_dst_row' must be of dtype int32",
    ),
    BadCall(
        "expanded_src_to_dst_row_range_2",
        lambda: varied(_valid, {5: np.array([2, 0, -1, -1], np.int32)}),
        ValueError,
        r"moe_finalize_routing: argument 'expanded_src_to_dst_row' must be row indices in \[0, 4\)",
    ),
    BadCall(
        "expanded_src_to_dst_row_range_3",
        lambda: varied(_valid, {5: np.array([0, 1, 2, 4], np.int32)}),
        ValueError,
        r"moe_finalize_routing: argument 'expanded_src_to_dst_row' must be row indices in \[0, 4\)",
    ),
    BadCall(
        "expanded_src_to_dst_row_shape",
        lambda: varied(_valid, {5: np.array([2, 0, 1], np.int32)}),
        ValueError,
        r"moe_finalize_routing: argument 'expanded_src_to_dst_row' must be of shape \[N\*K\] = \[4\]",
    ),
    BadCall(
        "scales_dtype",
        lambda: varied(_valid, {4: np.array([[0.5, 0.25], [2.0, 1.0]], np.float16)}),
        TypeError,
        r"moe_finalize_routing: argument 'scales' must be of dtype float32",
    ),
    BadCall(
        "skip1_value_2",
        lambda: varied(_valid, {2: np.full((2, 1), 1.0, F32)}),
        ValueError,
        r"moe_finalize_routing: argument 'skip1' must be given when skip2 is",
    ),
    BadCall(
        "skip1_shape",
        lambda: varied(_valid, {1: np.full((1, 1), 10.0, F32)}),
        ValueError,
        r"moe_finalize_routing: argument 'skip1' must be of shape \[N, H\] = \[2, 1\]",
    ),
    BadCall(
        "skip1_dtype",
        lambda: varied(_valid, {1: np.array([[10.0], [20.0]], np.float16)}),
        TypeError,
        r"moe_finalize_routing: argument 'skip1' must be of dtype float32",
    ),
    BadCall(
        "export_for_source_row_value_2",
        lambda: varied(_valid, {3: np.array([[100.0], [0.0], [1000.0]], F32), 6: None}),
        ValueError,
        r"moe_finalize_routing: argument 'export_for_source_row' must be the \[N, K\] expert ids when bias is given",
    ),
    BadCall(
        "export_for_source_row_range_2",
        lambda: varied(_valid, {3: np.array([[100.0], [0.0]], F32)}),
        ValueError,
        r"moe_finalize_routing: argument 'export_for_source_row' must be expert ids in \[0, E = 2\)",
    ),
    BadCall(
        "bias_shape",
        lambda: varied(_valid, {3: np.full((3, 2), 0.0, F32)}),
        ValueError,
        r"moe_finalize_routing: argument 'bias' must be of shape \[E, H\] with H = 1",
    ),
    BadCall(
        "k_value_2",
        lambda: varied(_valid, {4: None, 6: None}, k=3),
        ValueError,
        r"moe_finalize_routing: argument 'k' must be a divisor of the index length 4",
    ),
    BadCall(
        "scales_nonfinite",
        lambda: varied(_valid, {4: np.array([[np.nan, 1.0], [1.0, 1.0]], F32)}),
        ValueError,
        r"moe_finalize_routing: argument 'scales' must be finite",
    ),
]


def _bench_inputs(p, rng):
    t, k, h = p["t"], p["topk"], p.get("h", _dsv4.H)
    ids, wts = bench_routing(rng, t, p["e"], k)
    rows = rng.standard_normal((t * k, h)).astype(np.float32).astype(BF16)
    idx = rng.permutation(t * k).astype(np.int32)
    return (rows, None, None, None, wts.astype(BF16), idx, ids), {"drop_pad_mode": 2}


def bench_case(t: int, e: int = _dsv4.E, k: int = _dsv4.TOP_K, h: int = _dsv4.H, tags=()) -> BenchCase:
    return BenchCase(OP, f"T{t}xk{k}xH{h}", {"t": t, "m": t, "topk": k, "e": e}, _bench_inputs, work=t * k * h,
                     unit="elem", tags=tags)


declare(OpDecl(
    name=OP, family="moe", params=_params, build=_build, outputs=outputs(("y", "float")),
    cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(t, bench_experts_count(full), tags=_dsv4.tags(t)) for t in _dsv4.token_counts(full)],
    description="weighted un-permute of expert rows (npu_moe_finalize_routing)"))
