"""``dequant_swiglu_quant`` (npu_dequant_swiglu_quant): int32 (or float) GEMM output dequantized by the
weight and activation scales, SwiGLU (with DeepSeek-V4's optional clamp), then static or dynamic int8
requant — per token, or per group of rows with ``group_index``."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, Stage, declare, outputs, varied
from ...values import float_tensor, positive_scales, rng_for
from .. import _dsv4
from ._common import BF16, F32, counts

OP = "dequant_swiglu_quant"


@st.composite
def _params(draw):
    mode = draw(st.sampled_from(("int32_grouped", "int32", "bf16")))
    return {"mode": mode, "t": draw(S.size(32, big=())), "h": draw(st.sampled_from((64, 128, 192))) if
            mode == "int32_grouped" else draw(S.size(64, big=())), "groups": draw(st.integers(1, 4)),
            "partial": draw(st.booleans()), "activate_left": draw(st.booleans()),
            "quant_mode": draw(st.sampled_from((1, 1, 0))) if mode == "int32" else 1,
            "limit": draw(st.sampled_from((None, None, 1.0, 10.0))), "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    t, h = p["t"], p["h"]
    kw = {"activate_left": p["activate_left"], "quant_mode": p["quant_mode"], "swiglu_limit": p["limit"]}
    if p["mode"] == "bf16":
        x = float_tensor(rng, (t, 2 * h), "bfloat16", "gaussian")
        return (x,), kw
    x = rng.integers(-40000, 40000, size=(t, 2 * h)).astype(np.int32)
    kw["activation_scale"] = positive_scales(rng, (t,), np.float32, low=1e-3, high=1e-2)
    if p["mode"] == "int32_grouped":
        kw["weight_scale"] = positive_scales(rng, (p["groups"], 2 * h), np.float32, low=1e-4, high=1e-3)
        kw["group_index"] = counts(rng, t, p["groups"], p["partial"], False)
    else:
        kw["weight_scale"] = positive_scales(rng, (1, 2 * h), np.float32, low=1e-4, high=1e-3)
        if p["quant_mode"] == 0:
            kw["quant_scale"] = positive_scales(rng, (1, h), np.float32, low=1e-2, high=1e-1)
            kw["quant_offset"] = rng.uniform(-5, 5, size=(1, h)).astype(np.float32)
    return (x,), kw


def _mask(args, kwargs):
    gi = kwargs.get("group_index")
    if gi is None:
        return {}
    rows = w8a8.valid_rows(gi, args[0].shape[0], group_list_type=1)
    return {"y": rows[:, None], "scale": rows}


def _mode(case):
    def build():
        rng = np.random.default_rng(9)
        t, h = 9, 64
        x = rng.integers(-40000, 40000, (t, 2 * h)).astype(np.int32)
        kw = dict(weight_scale=rng.uniform(1e-4, 1e-3, (1, 2 * h)).astype(F32),
                  activation_scale=rng.uniform(1e-3, 1e-2, (t, 1)).astype(F32), swiglu_limit=3.0)
        if case == "static_zero_scale":
            kw.update(quant_mode=0, quant_scale=np.zeros(1, F32), quant_offset=np.array([2.5], F32))
        elif case == "static_scalar":
            kw.update(quant_mode=0, quant_scale=np.array([0.01], F32), activate_left=True)
        elif case == "int32_bias":
            kw.update(quant_mode=1, bias=rng.integers(-100, 100, 2 * h).astype(np.int32))
        elif case == "float_input":
            x, kw = x.astype(F32).astype(np.float16) / np.float16(4096), dict(quant_mode=1, activate_left=True)
        elif case == "smooth":
            kw.update(quant_mode=1, quant_scale=rng.uniform(0.5, 2, (1, h)).astype(BF16))
        else:   # groups 1 and 3 empty, rows past the total (7)
            kw.update(quant_mode=1, weight_scale=rng.uniform(1e-4, 1e-3, (4, 2 * h)).astype(F32),
                      group_index=np.array([3, 0, 4, 0], np.int64), quant_scale=rng.uniform(0.5, 2, (4, h)).astype(F32))
        return (x,), kw
    return build


MODES = {
    "static_zero_scale": "quant_mode 0 with a zero [1] static scale, which the kernel replaces by 1: codes = "
                         "rint(o * 1 + 2.5)",
    "static_scalar": "quant_mode 0 with one static scale 0.01, activate_left",
    "int32_bias": "quant_mode 1 (dynamic) with an int32 bias added before the dequant",
    "float_input": "an fp16 x (no dequant), dynamic requant",
    "smooth": "dynamic requant with a bf16 smooth scale [1, H]",
    "groups_with_empty": "group_index [3, 0, 4, 0]: groups 1 and 3 empty, rows 7-8 past the total (zeros, scale 0)",
}

CASES = [Case(name, _mode(name), why=f"9 tokens, H = 64, swiglu_limit 3: {why}.") for name, why in MODES.items()]

def _valid():
    """A valid call the bad calls below change one or two arguments of."""
    return (np.array([[200, 0, 3, 5], [0, 0, 0, 0]], np.int32),), {
        'weight_scale': np.full((4,), 1.0, F32),
        'quant_mode': 1,
        'activate_left': True,
    }


BAD_CALLS = [
    BadCall(
        "x_shape",
        lambda: (
            (np.ones((4, 100), np.int32),),
            {"weight_scale": np.ones((2, 100), F32), "group_index": np.array([2, 2], np.int64)},
        ),
        ValueError,
        r"dequant_swiglu_quant: argument 'x' must be of half width H a multiple of 64 and <= 10496 with group_index",
    ),
    BadCall("weight_scale_value", lambda: ((np.ones((4, 128), np.int32),), {"quant_mode": 1}),
            ValueError, r"dequant_swiglu_quant: argument 'weight_scale' must be a float32 dequant scale for int32 x"),
    BadCall(
        "bias_shape",
        lambda: (
            (np.ones((4, 128), np.int32),),
            {
                "weight_scale": np.ones((2, 128), F32),
                "quant_mode": 1,
                "group_index": np.array([2, 2], np.int64),
                "bias": np.ones(128, np.int32),
            },
        ),
        ValueError,
        r"dequant_swiglu_quant: argument 'bias' must be of shape \[G, 2H\] = \[2, 128\] \(with group_index\)",
    ),
    BadCall(
        "quant_offset_shape",
        lambda: (
            (np.ones((4, 128), np.int32),),
            {"weight_scale": np.ones(128, F32), "quant_mode": 1, "quant_offset": np.ones(64, F32)},
        ),
        ValueError,
        r"dequant_swiglu_quant: argument 'quant_offset' must be None with quant_mode=1",
    ),
    BadCall(
        "swiglu_limit_value",
        lambda: (
            (np.ones((4, 128), np.int32),),
            {"weight_scale": np.ones(128, F32), "quant_mode": 1, "swiglu_limit": 0.0},
        ),
        ValueError,
        r"dequant_swiglu_quant: argument 'swiglu_limit' must be > 0",
    ),
    BadCall("overflow", lambda: ((np.full((4, 128), 2 ** 31 - 5, np.int32),), {"weight_scale": np.ones(128, F32),
                                                                          "quant_mode": 1,
                                                                          "bias": np.full(128, 9, np.int32)}),
            OverflowError, r"dequant_swiglu_quant: the int32 accumulator overflows at output index"),
    BadCall(
        "x_dtype",
        lambda: varied(_valid, {0: np.array([[200, 0, 3, 5], [0, 0, 0, 0]], np.int64)}),
        TypeError,
        r"dequant_swiglu_quant: argument 'x' must be of dtype int32, float16 or bfloat16",
    ),
    BadCall(
        "x_shape_2",
        lambda: varied(_valid, {0: np.array([[200, 0, 3], [0, 0, 0]], np.int32)}),
        ValueError,
        r"dequant_swiglu_quant: argument 'x' must be of even last dimension \[T, 2H\]",
    ),
    BadCall(
        "weight_scale_value_2",
        lambda: varied(_valid, weight_scale=None),
        ValueError,
        r"dequant_swiglu_quant: argument 'weight_scale' must be a float32 dequant scale for int32 x",
    ),
    BadCall(
        "weight_scale_shape",
        lambda: varied(_valid, weight_scale=np.full((3,), 1.0, F32)),
        ValueError,
        r"dequant_swiglu_quant: argument 'weight_scale' must be of shape \[4\] or \[1, 4\]",
    ),
    BadCall(
        "weight_scale_dtype",
        lambda: varied(_valid, weight_scale=np.full((4,), 1.0, np.float16)),
        TypeError,
        r"dequant_swiglu_quant: argument 'weight_scale' must be of dtype float32",
    ),
    BadCall(
        "weight_scale_shape_2",
        lambda: varied(_valid, {0: np.array([[200.0, 0.0, 3.0, 5.0], [0.0, 0.0, 0.0, 0.0]], np.float16)}),
        ValueError,
        r"dequant_swiglu_quant: argument 'weight_scale' must be None for float x",
    ),
    BadCall(
        "activation_scale_shape",
        lambda: varied(_valid, activation_scale=np.full((3,), 1.0, F32)),
        ValueError,
        r"dequant_swiglu_quant: argument 'activation_scale' must be of shape \[T\] or \[T, 1\] with T = 2",
    ),
    BadCall(
        "bias_shape_2",
        lambda: varied(_valid, bias=np.full((3,), 1, np.int32)),
        ValueError,
        r"dequant_swiglu_quant: argument 'bias' must be of shape \[2H\] = \[4\] or \[1, 4\]",
    ),
    BadCall(
        "bias_dtype",
        lambda: varied(_valid, bias=np.full((4,), 1.0, F32)),
        TypeError,
        r"dequant_swiglu_quant: argument 'bias' must be of dtype int32",
    ),
    BadCall(
        "quant_mode_choice",
        lambda: varied(_valid, quant_mode=2),
        ValueError,
        r"dequant_swiglu_quant: argument 'quant_mode' must be one of",
    ),
    BadCall(
        "quant_scale_value",
        lambda: varied(_valid, quant_mode=0),
        ValueError,
        r"dequant_swiglu_quant: argument 'quant_scale' must be a float32 static scale with quant_mode=0",
    ),
    BadCall(
        "quant_scale_dtype",
        lambda: varied(_valid, quant_mode=0, quant_scale=np.full((2,), 1.0, np.float16)),
        TypeError,
        r"dequant_swiglu_quant: argument 'quant_scale' must be of dtype float32",
    ),
    BadCall(
        "quant_offset_shape_2",
        lambda: varied(_valid, quant_mode=0, quant_scale=np.full((2,), 1.0, F32), quant_offset=np.full((3,), 1.0, F32)),
        ValueError,
        r"dequant_swiglu_quant: argument 'quant_offset' must be of quant_scale's shape",
    ),
    BadCall(
        "quant_offset_shape_3",
        lambda: varied(_valid, quant_offset=np.full((2,), 1.0, F32)),
        ValueError,
        r"dequant_swiglu_quant: argument 'quant_offset' must be None with quant_mode=1",
    ),
    BadCall(
        "quant_scale_shape",
        lambda: varied(_valid, quant_scale=np.full((3,), 1.0, F32)),
        ValueError,
        r"dequant_swiglu_quant: argument 'quant_scale' must be of shape \[2\] or \[1, 2\]",
    ),
    BadCall(
        "x_shape_3",
        lambda: varied(_valid, group_index=np.full((1,), 2, np.int64)),
        ValueError,
        r"dequant_swiglu_quant: argument 'x' must be of half width H a multiple of 64 and <= 10496 with group_index",
    ),
    BadCall(
        "activate_left_type",
        lambda: varied(_valid, activate_left=1),
        TypeError,
        r"dequant_swiglu_quant: argument 'activate_left' must be a bool",
    ),
    BadCall(
        "swiglu_limit_value_2",
        lambda: varied(_valid, swiglu_limit=0.0),
        ValueError,
        r"dequant_swiglu_quant: argument 'swiglu_limit' must be > 0",
    ),
    BadCall(
        "swiglu_limit_value_3",
        lambda: varied(_valid, swiglu_limit='10'),
        TypeError,
        r"dequant_swiglu_quant: argument 'swiglu_limit' must be a real number",
    ),
    BadCall(
        "group_index_dtype",
        lambda: (
            (np.full((2, 128), 0, np.int32),),
            {
                'weight_scale': np.full((1, 128), 1.0, F32),
                'activate_left': True,
                'quant_mode': 1,
                'group_index': np.full((1,), 2, np.int32),
            },
        ),
        TypeError,
        r"dequant_swiglu_quant: argument 'group_index' must be of dtype int64",
    ),
    BadCall(
        "group_index_limit",
        lambda: (
            (np.full((2, 128), 0, np.int32),),
            {
                'weight_scale': np.full((1, 128), 1.0, F32),
                'activate_left': True,
                'quant_mode': 1,
                'group_index': np.full((1,), 3, np.int64),
            },
        ),
        ValueError,
        r"dequant_swiglu_quant: argument 'group_index' must be a row total <= the row count 2",
    ),
    BadCall(
        "weight_scale_shape_3",
        lambda: (
            (np.full((2, 128), 0, np.int32),),
            {
                'weight_scale': np.full((128,), 1.0, F32),
                'activate_left': True,
                'quant_mode': 1,
                'group_index': np.full((1,), 2, np.int64),
            },
        ),
        ValueError,
        r"dequant_swiglu_quant: argument 'weight_scale' must be of shape \[G, 128\] = \[1, 128\]",
    ),
    BadCall(
        "bias_shape_3",
        lambda: (
            (np.full((2, 128), 0, np.int32),),
            {
                'weight_scale': np.full((1, 128), 1.0, F32),
                'activate_left': True,
                'quant_mode': 1,
                'group_index': np.full((1,), 2, np.int64),
                'bias': np.full((128,), 0, np.int32),
            },
        ),
        ValueError,
        r"dequant_swiglu_quant: argument 'bias' must be of shape \[G, 2H\] = \[1, 128\] \(with group_index\)",
    ),
    BadCall(
        "weight_scale_nonfinite",
        lambda: varied(_valid, weight_scale=np.array([1.0, np.inf, 1.0, 1.0], F32)),
        ValueError,
        r"dequant_swiglu_quant: argument 'weight_scale' must be finite",
    ),
    # a per-channel static quant_scale divides (o / s): a zero would saturate the codes; refused under
    # nan_policy="raise" (the [1] scalar's zero is static_zero_scale's, a documented kernel behaviour).
    BadCall("quant_scale_zero_divides", lambda: varied(_valid, quant_mode=0, quant_scale=np.array([1.0, 0.0], F32)),
            ValueError, r"dequant_swiglu_quant: argument 'quant_scale' must be non-zero \(the op divides by it.*; "
            r"got 0 at index \(1,\)"),
]


def _bench_inputs(p, rng):
    g = rng.standard_normal((p["t"] * p["topk"], 2 * p.get("i", _dsv4.I))).astype(np.float32).astype(BF16)
    return (g,), {"quant_mode": 1, "activate_left": True}


def bench_case(t: int, k: int = _dsv4.TOP_K, i: int = _dsv4.I, tags=()) -> BenchCase:
    return BenchCase(OP, f"M{t * k}xI{i}", {"t": t, "m": t, "topk": k}, _bench_inputs, work=t * k * 2 * i,
                     unit="elem", tags=tags)


declare(OpDecl(
    name=OP, family="moe", params=_params, build=_build,
    outputs=outputs(("y", "int"), ("scale", "scale")), numerics_fields=("transcendental", "round_mode", "scale_out"),
    mask=_mask, cases=CASES, bad_calls=BAD_CALLS,
    # the scale moves first when an input of the dequant (bias, weight/activation scale) differs; the codes follow
    stages=(Stage("scale", "scale", lambda b, a, k, up: b.dequant_swiglu_quant(*a, **k)[1]),
            Stage("y", "int", lambda b, a, k, up: b.dequant_swiglu_quant(*a, **k)[0])),
    bench=lambda full: [bench_case(t, tags=_dsv4.tags(t)) for t in _dsv4.token_counts(full)],
    description="dequant + SwiGLU (+ DeepSeek-V4 clamp) + requant (npu_dequant_swiglu_quant)"))
