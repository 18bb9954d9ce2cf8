"""``grouped_matmul`` (npu_grouped_matmul, group_type 0): one int8 x [M, K] against E weights [E, K, N]
split along M by a group list (cumulative ends, counts, or [id, count] pairs), with the dequant epilogue
(bf16 / fp32 / packed int64 scale, per-token scale, int32 bias, activation)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, Stage, declare, outputs, varied
from ...values import int8_tensor, positive_scales, rng_for
from .. import _dsv4
from ._common import (BF16, F32, GMM_W, GMM_X, bench_experts_count, bench_routing, counts, group_list, i8)

OP = "grouped_matmul"

# (output, scale dtype, per-token scale?)
GMM_COMBOS = (("bfloat16", "bfloat16", True), ("bfloat16", "bfloat16", False), ("float16", "float32", True),
              ("float16", "float32", False), ("int32", None, False))


@st.composite
def _params(draw):
    e = draw(st.integers(1, 6))
    return {"combo": list(draw(st.sampled_from(GMM_COMBOS))), "e": e, "m": draw(S.size(40, big=())),
            "k": draw(S.size(96, big=(1025,))), "n": draw(S.size(48, big=())),
            "list_type": draw(st.sampled_from((0, 1, 2))), "partial": draw(st.booleans()),
            "bias": draw(st.booleans()), "empty": draw(st.booleans()), "seed": draw(S.seed())}


@st.composite
def _activation_params(draw):
    """act_type 1 relu (-0.0 -> +0.0 as np.maximum), 2 gelu_tanh, 4 fast_gelu, 5 silu after the per-token
    dequant; a negative channel scale (exact zeros become -0.0); ``big`` scales push the fp32 products to
    +-Inf (silu(-Inf) = NaN: its bits must match too); one group forced empty."""
    return {"act": draw(st.sampled_from((1, 2, 4, 5))), "m": draw(st.sampled_from((1, 7, 17, 40))),
            "k": draw(st.sampled_from((1, 7, 64, 1025))), "n": draw(st.sampled_from((1, 7, 33))),
            "e": draw(st.integers(1, 5)), "out": draw(st.sampled_from(("bfloat16", "float16"))),
            "big": draw(st.booleans()), "bias": draw(st.booleans()), "seed": draw(S.seed())}


@st.composite
def _packed_scale_params(draw):
    """An int64 (or uint64) trans_quant_param scale per expert and channel -> int8 requant (FP19 scale,
    9-bit offset steps), with and without packed offsets."""
    return {"packed": draw(st.sampled_from(("int64", "uint64"))), "offset": draw(st.booleans()),
            "m": draw(st.sampled_from((1, 9, 30))), "e": draw(st.integers(1, 4)), "seed": draw(S.seed())}


def _activation_build(p):
    rng = rng_for(p["seed"])
    m, k, n, e, out = p["m"], p["k"], p["n"], p["e"], p["out"]
    c = rng.multinomial(m, np.ones(e) / e)
    c[rng.integers(e)] = 0
    x, w = i8(rng, m, k), i8(rng, e, k, n)
    s = (rng.uniform(0.5, 2, (e, n)) * (1e30 if p["big"] else 1e-4)).astype(F32)
    s[0, 0] = -s[0, 0]
    kw = dict(scale=s.astype(BF16 if out == "bfloat16" else F32),
              per_token_scale=rng.uniform(0.5, 2, m).astype(F32) * F32(1e10 if p["big"] else 1e-2),
              group_list=c.astype(np.int64), group_list_type=1, act_type=p["act"], output_dtype=out)
    if p["bias"]:
        kw["bias"] = rng.integers(-1000, 1000, (e, n)).astype(np.int32)
    return (x, w), kw


def _packed_build(p):
    rng = rng_for(p["seed"])
    m, e, k, n = p["m"], p["e"], 48, 17
    scale = rng.uniform(1e-4, 1e-2, (e, n)).astype(F32)
    off = rng.uniform(-20, 20, (e, n)).astype(F32) if p["offset"] else None
    packed = w8a8.trans_quant_param(scale, off).view(np.dtype(p["packed"]))
    c = rng.multinomial(m, np.ones(e) / e).astype(np.int64)
    bias = rng.integers(-500, 500, (e, n)).astype(np.int32)
    return (i8(rng, m, k), i8(rng, e, k, n)), {"scale": packed, "bias": bias, "group_list": c, "group_list_type": 1}


def _build(p):
    if "act" in p:
        return _activation_build(p)
    if "packed" in p:
        return _packed_build(p)
    out, scale_dt, pertoken = p["combo"]
    rng = rng_for(p["seed"])
    m, k, n, e = p["m"], p["k"], p["n"], p["e"]
    c = counts(rng, m, e, p["partial"], p["empty"])
    x = int8_tensor(rng, (m, k))
    w = int8_tensor(rng, (e, k, n))
    kw = {"group_list": group_list(c, p["list_type"]), "group_list_type": p["list_type"], "output_dtype": out}
    acc_mag = max(1.0, float(np.sqrt(k)) * 128 * 40)  # the typical |accumulator| (see quant_matmul's declaration)
    if scale_dt is not None:
        s = positive_scales(rng, (e, n), np.float32, low=0.2 / acc_mag, high=5.0 / acc_mag)
        if pertoken:
            s = (s * np.float32(100)).astype(np.float32)
            kw["per_token_scale"] = positive_scales(rng, (m,), np.float32, low=1e-3, high=1e-1)
        kw["scale"] = s.astype(scale_dt)
    if p["bias"]:
        kw["bias"] = rng.integers(-3000, 3000, size=(e, n)).astype(np.int32)
    return (x, w), kw


def _mask(args, kwargs):
    x = args[0][0] if isinstance(args[0], list) else args[0]  # the list form: one x in a list
    return {"y": w8a8.valid_rows(kwargs["group_list"], x.shape[0],
                                 group_list_type=kwargs["group_list_type"])[:, None]}


# groups 0: rows 0-2, 1: empty, 2: rows 3-4; row 5 is past the total (the golden writes 0 there)
_HX = np.array([[1, 0], [0, 1], [1, 1], [2, 0], [0, 3], [9, 9]], np.int8)
_HW = np.array([[[1, 2], [3, 4]], [[7, 7], [7, 7]], [[-1, 0], [0, -1]]], np.int8)   # [E, K, N]
_HY = np.array([[1, 2], [3, 4], [4, 6], [-2, 0], [0, -3], [0, 0]], np.int32)      # x @ w[group]


def _forms(gl, t):
    return lambda: ((_HX, _HW), {"group_list": np.asarray(gl, np.int64), "group_list_type": t, "output_dtype": "int32"})


def _list_form_transposed():
    rng = np.random.default_rng(5)
    x, w = i8(rng, 10, 64), i8(rng, 3, 64, 32)
    return ([x], [np.ascontiguousarray(w.transpose(0, 2, 1)).transpose(0, 2, 1)]), \
        {"scale": [rng.uniform(1e-3, 1e-2, (3, 32)).astype(F32)], "group_list": np.array([4, 0, 6], np.int64),
         "group_list_type": 1, "output_dtype": "float16"}


CASES = [
    Case(f"three_groups_one_empty_type_{t}", _forms(gl, t), {"y": _HY},
         "Groups 0: rows 0-2, 1: empty, 2: rows 3-4 (row 5 is past the total: the golden writes 0) as group list "
         f"type {t} = {gl}: y = x @ w[group] in int32 (rows 0-2 with expert 0, rows 3-4 with expert 2 = -identity).")
    for gl, t in (([3, 3, 5], 0), ([3, 0, 2], 1), ([[0, 3], [2, 2]], 2))] + [
    Case("type_2_pairs_in_their_order", _forms([[2, 2], [0, 3]], 2),
         {"y": np.array([[-1, 0], [0, -1], [4, 6], [2, 4], [9, 12], [0, 0]], np.int32)},
         "Group list type 2 takes the [expert, count] pairs in their order: rows 0-1 -> expert 2 (-x), rows 2-4 -> "
         "expert 0 ([1, 1] -> [4, 6], [2, 0] -> [2, 4], [0, 3] -> [9, 12]); row 5 is past the total."),
    Case("list_form_and_transposed_weights", _list_form_transposed,
         why="x, weight and scale as one-element lists (the torch_npu list form), the weight in transposed storage "
             "(its [E, N, K] layout viewed as [E, K, N]); the result is a one-element list."),
]

def _valid():
    """A valid call the bad calls below change one or two arguments of."""
    return (
        np.array([[1, 2], [3, -30], [2, 2], [5, 5]], np.int8),
        np.array([[[1, 0], [0, 1]], [[7, 7], [7, 7]], [[1, 1], [1, -1]]], np.int8),
    ), {
        'scale': np.array([[0.5, 0.25], [1.0, 1.0], [2.0, 4.0]], BF16),
        'group_list': np.array([2, 0, 1], np.int64),
        'group_list_type': 1,
        'output_dtype': 'bfloat16',
        'per_token_scale': np.array([1.0, 2.0, 0.5, 9.0], F32),
        'bias': np.array([[10, 20], [0, 0], [1, 1]], np.int32),
    }


BAD_CALLS = [
    BadCall(
        "output_dtype_value",
        lambda: (
            (GMM_X, GMM_W),
            {
                "scale": np.ones((3, 8), F32),
                "group_list": np.array([2, 2, 2]),
                "group_list_type": 1,
                "output_dtype": "bfloat16",
            },
        ),
        TypeError,
        r"grouped_matmul: argument 'output_dtype' must be float16 for a float32 scale",
    ),
    BadCall(
        "output_dtype_value_2",
        lambda: (
            (GMM_X, GMM_W),
            {
                "scale": np.ones((3, 8), F32),
                "group_list": np.array([2, 2, 2], np.int64),
                "group_list_type": 1,
                "output_dtype": "bfloat16",
            },
        ),
        TypeError,
        r"grouped_matmul: argument 'output_dtype' must be float16 for a float32 scale",
    ),
    BadCall("act_type_value", lambda: ((GMM_X, GMM_W), {"group_list": np.array([2, 2, 2], np.int64), "act_type": 3,
                                          "output_dtype": "int32"}),
            ValueError, r"grouped_matmul: argument 'act_type' must be 0"),
    BadCall(
        "per_token_scale_shape",
        lambda: (
            (GMM_X, GMM_W),
            {"group_list": np.array([2, 2, 2], np.int64), "output_dtype": "int32", "per_token_scale": np.ones(6, F32)},
        ),
        ValueError,
        r"grouped_matmul: argument 'per_token_scale' must be None unless scale is bf16 or fp32",
    ),
    BadCall(
        "group_list_limit",
        lambda: (
            (GMM_X, GMM_W),
            {"group_list": np.array([4, 2, 2], np.int64), "group_list_type": 1, "output_dtype": "int32"},
        ),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be a row total <= the row count 6",
    ),
    BadCall(
        "group_list_rank",
        lambda: ((GMM_X, GMM_W), {"group_list": np.array([4, 2, 6], np.int64), "output_dtype": "int32"}),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be non-decreasing cumulative row ends",
    ),
    BadCall(
        "group_list_range",
        lambda: (
            (GMM_X, GMM_W),
            {"group_list": np.array([[0, 2], [3, 1]], np.int64), "group_list_type": 2, "output_dtype": "int32"},
        ),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be group ids",
    ),
    BadCall(
        "weight_shape",
        lambda: ((GMM_X, GMM_W[:, :8]), {"group_list": np.array([2, 2, 2], np.int64), "output_dtype": "int32"}),
        ValueError,
        r"grouped_matmul: argument 'weight' must be of shape \[E, K, N\] with K = 16",
    ),
    BadCall("x_value", lambda: (([GMM_X, GMM_X], GMM_W), {"group_list": np.array([2, 2, 2], np.int64),
                                                    "output_dtype": "int32"}),
            ValueError, r"grouped_matmul: argument 'x' must be a single tensor or a one-element list"),
    BadCall(
        "offset_shape",
        lambda: (
            (GMM_X, GMM_W),
            {"group_list": np.array([2, 2, 2], np.int64), "output_dtype": "int32", "offset": np.zeros((3, 8), F32)},
        ),
        ValueError,
        r"grouped_matmul: argument 'offset' must be None",
    ),
    BadCall("scale_nonfinite", lambda: ((GMM_X, GMM_W), {"scale": np.array([[np.nan] * 8] * 3, BF16),
                                          "group_list": np.array([2, 2, 2], np.int64), "output_dtype": "bfloat16"}),
            ValueError, r"grouped_matmul: argument 'scale' must be finite"),
    BadCall(
        "overflow",
        lambda: (
            (np.full((6, 16), 127, np.int8), np.full((3, 16, 8), 127, np.int8)),
            {
                "bias": np.full((3, 8), 2**31 - 1000, np.int32),
                "group_list": np.array([1, 3, 2], np.int64),
                "group_list_type": 1,
                "output_dtype": "int32",
            },
        ),
        OverflowError,
        r"grouped_matmul: the int32 accumulator overflows at output index",
    ),
    BadCall(
        "x_dtype",
        lambda: varied(_valid, {0: np.array([[1, 2], [3, -30], [2, 2], [5, 5]], np.int16)}),
        TypeError,
        r"grouped_matmul: argument 'x' must be of dtype int8",
    ),
    BadCall(
        "x_value_2",
        lambda: varied(_valid, {0: [
                    np.array([[1, 2], [3, -30], [2, 2], [5, 5]], np.int8),
                    np.array([[1, 2], [3, -30], [2, 2], [5, 5]], np.int8),
                ]}),
        ValueError,
        r"grouped_matmul: argument 'x' must be a single tensor or a one-element list",
    ),
    BadCall(
        "weight_shape_2",
        lambda: varied(_valid, {1: np.array([[1, 0], [0, 1]], np.int8)}),
        ValueError,
        r"grouped_matmul: argument 'weight' must be 3-D",
    ),
    BadCall(
        "weight_shape_3",
        lambda: varied(_valid, {1: np.array([[[1, 0]], [[7, 7]], [[1, 1]]], np.int8)}),
        ValueError,
        r"grouped_matmul: argument 'weight' must be of shape \[E, K, N\] with K = 2",
    ),
    BadCall(
        "output_dtype_value_3",
        lambda: varied(_valid, scale=np.array([[0.5, 0.25], [1.0, 1.0], [2.0, 4.0]], F32)),
        TypeError,
        r"grouped_matmul: argument 'output_dtype' must be float16 for a float32 scale",
    ),
    BadCall(
        "output_dtype_value_4",
        lambda: varied(_valid, output_dtype='float16'),
        TypeError,
        r"grouped_matmul: argument 'output_dtype' must be bfloat16 for a bfloat16 scale",
    ),
    BadCall(
        "output_dtype_value_5",
        lambda: varied(_valid, scale=None, per_token_scale=None),
        TypeError,
        r"grouped_matmul: argument 'output_dtype' must be int32 for a None scale",
    ),
    BadCall(
        "output_dtype_value_6",
        lambda: varied(_valid, output_dtype='float32'),
        TypeError,
        r"grouped_matmul: argument 'output_dtype' must be None, int8, bfloat16, float16 or int32",
    ),
    BadCall(
        "scale_dtype",
        lambda: varied(_valid, scale=np.array([[0.5, 0.25], [1.0, 1.0], [2.0, 4.0]], np.float16)),
        TypeError,
        r"grouped_matmul: argument 'scale' must be of dtype bfloat16, float32, int64 or uint64",
    ),
    BadCall(
        "scale_shape",
        lambda: varied(_valid, scale=np.array([[0.5, 0.25], [1.0, 1.0]], BF16)),
        ValueError,
        r"grouped_matmul: argument 'scale' must be of shape \[E, N\] = \[3, 2\]",
    ),
    BadCall(
        "act_type_value_2",
        lambda: varied(_valid, scale=None, per_token_scale=None, output_dtype='int32', act_type=1),
        ValueError,
        r"grouped_matmul: argument 'act_type' must be 0 without per_token_scale",
    ),
    BadCall(
        "per_token_scale_shape_2",
        lambda: varied(_valid, scale=np.array(
                    [
                        [70369801142272, 70369792753664],
                        [70369809530880, 70369809530880],
                        [70369817919488, 70369826308096],
                    ],
                    np.int64,
                ), output_dtype=None),
        ValueError,
        r"grouped_matmul: argument 'per_token_scale' must be None unless scale is bf16 or fp32",
    ),
    BadCall(
        "per_token_scale_shape_3",
        lambda: varied(_valid, per_token_scale=np.array([1.0, 2.0, 0.5], F32)),
        ValueError,
        r"grouped_matmul: argument 'per_token_scale' must be of shape \[M\] = \[4\]",
    ),
    BadCall(
        "per_token_scale_dtype",
        lambda: varied(_valid, per_token_scale=np.array([1.0, 2.0, 0.5, 9.0], np.float16)),
        TypeError,
        r"grouped_matmul: argument 'per_token_scale' must be of dtype float32",
    ),
    BadCall(
        "bias_dtype",
        lambda: varied(_valid, bias=np.array([[10.0, 20.0], [0.0, 0.0], [1.0, 1.0]], F32)),
        TypeError,
        r"grouped_matmul: argument 'bias' must be of dtype int32",
    ),
    BadCall(
        "bias_shape",
        lambda: varied(_valid, bias=np.array([[10, 20], [0, 0]], np.int32)),
        ValueError,
        r"grouped_matmul: argument 'bias' must be of shape \[E, N\] = \[3, 2\]",
    ),
    BadCall(
        "offset_shape_2",
        lambda: varied(_valid, offset=np.full((3, 2), 0.0, F32)),
        ValueError,
        r"grouped_matmul: argument 'offset' must be None",
    ),
    BadCall(
        "act_type_value_3",
        lambda: varied(_valid, act_type=3),
        ValueError,
        r"grouped_matmul: argument 'act_type' must be 0",
    ),
    BadCall(
        "group_list_type_choice",
        lambda: varied(_valid, group_list_type=3),
        ValueError,
        r"grouped_matmul: argument 'group_list_type' must be one of",
    ),
    BadCall(
        "group_list_dtype",
        lambda: varied(_valid, group_list=np.array([2, 0, 1], np.int32)),
        TypeError,
        r"grouped_matmul: argument 'group_list' must be of dtype int64",
    ),
    BadCall(
        "group_list_shape",
        lambda: varied(_valid, group_list=np.array([2, 1], np.int64)),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be 1-D of length 3",
    ),
    BadCall(
        "group_list_value",
        lambda: varied(_valid, group_list=np.array([2, -1, 1], np.int64)),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be non-negative",
    ),
    BadCall(
        "group_list_limit_2",
        lambda: varied(_valid, group_list=np.array([3, 1, 1], np.int64)),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be a row total <= the row count 4",
    ),
    BadCall(
        "group_list_rank_2",
        lambda: varied(_valid, group_list=np.array([2, 1, 3], np.int64), group_list_type=0),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be non-decreasing cumulative row ends",
    ),
    BadCall(
        "group_list_range_2",
        lambda: varied(_valid, group_list=np.array([[3, 1]], np.int64), group_list_type=2),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be group ids",
    ),
    BadCall(
        "group_list_shape_2",
        lambda: varied(_valid, group_list_type=2),
        ValueError,
        r"grouped_matmul: argument 'group_list' must be of shape \[P, 2\] =",
    ),
    BadCall(
        "split_item_choice",
        lambda: varied(_valid, split_item=0),
        ValueError,
        r"grouped_matmul: argument 'split_item' must be one of",
    ),
    BadCall(
        "group_type_choice",
        lambda: varied(_valid, group_type=2),
        ValueError,
        r"grouped_matmul: argument 'group_type' must be one of",
    ),
    BadCall(
        "per_token_scale_nonfinite",
        lambda: varied(_valid, per_token_scale=np.array([1.0, np.nan, 1.0, 1.0], F32)),
        ValueError,
        r"grouped_matmul: argument 'per_token_scale' must be finite",
    ),
    BadCall(
        "weight_shape_4",
        lambda: (
            (np.array([[1, 2], [3, -30], [2, 2], [5, 5]], np.int8), np.full((1, 2, 70000), 0, np.int8)),
            {
                'bias': None,
                'scale': None,
                'per_token_scale': None,
                'group_list': np.full((1,), 4, np.int64),
                'group_list_type': 1,
                'output_dtype': 'int32',
            },
        ),
        ValueError,
        r"grouped_matmul: argument 'weight' must be K and N < 65536",
    ),
]


def _bench_inputs(p, rng):
    t, e, k, n = p["t"], p["e"], p["topk"], p["n"]
    h = p.get("h", _dsv4.H)
    ids, _ = bench_routing(rng, t, e, k)
    c = np.bincount(ids.ravel(), minlength=e).astype(np.int64)
    m = t * k
    x = rng.integers(-128, 128, size=(m, h), dtype=np.int8)
    w = rng.integers(-128, 128, size=(e, h, n), dtype=np.int8)
    scale = rng.uniform(1e-3, 2e-3, size=(e, n)).astype(np.float32).astype(BF16)
    pt = rng.uniform(1e-3, 2e-3, size=(m,)).astype(np.float32)
    return (x, w), {"scale": scale, "per_token_scale": pt, "group_list": c, "group_list_type": 1,
                    "output_dtype": "bfloat16"}


def bench_case(t: int, e: int = _dsv4.E, k: int = _dsv4.TOP_K, h: int = _dsv4.H, n: int = 2 * _dsv4.I,
               tags=()) -> BenchCase:
    return BenchCase(OP, f"T{t}xE{e}xk{k}xN{n}", {"t": t, "m": t, "e": e, "topk": k, "n": n}, _bench_inputs,
                     work=2.0 * t * k * h * n, tags=tags)


declare(OpDecl(
    name=OP, family="moe", params=_params, build=_build,
    strategies={"activations": _activation_params, "packed_scale": _packed_scale_params},
    outputs=outputs(("y", "float")), numerics_fields=("epilogue_order", "fp19_scale", "int32_bias"), mask=_mask,
    stages=(Stage("acc", "int", lambda b, a, k, up: b.grouped_matmul(
        *a, group_list=k["group_list"], group_list_type=k["group_list_type"], output_dtype="int32")),
            Stage("y", "float", lambda b, a, k, up: b.grouped_matmul(*a, **k))),
    cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(t, bench_experts_count(full), tags=_dsv4.tags(t)) for t in _dsv4.token_counts(full)],
    description="single-tensor int8 grouped matmul along M (npu_grouped_matmul, group_type 0)"))
