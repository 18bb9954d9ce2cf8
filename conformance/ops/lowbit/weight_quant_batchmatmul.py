"""``weight_quant_batchmatmul`` (npu_weight_quant_batchmatmul): W8A16 / W4A16 — an fp16 / bf16 x times an
int8 or int4-packed weight dequantized per tensor, per channel or per group (``antiquant_scale``,
``antiquant_offset``), an optional bias, and an optional int8 requant (``quant_scale``, ``quant_offset``)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, declare, outputs, varied
from ...values import float_tensor, rng_for
from .. import _dsv4
from ._common import BF16, F32, bench_ms, bench_tags, fx, normal32

OP = "weight_quant_batchmatmul"


@st.composite
def _params(draw):
    int4 = draw(st.booleans())
    k = draw(st.sampled_from((64, 128, 256))) if draw(st.booleans()) else draw(S.multiple_of(8, 12))
    mode = draw(st.sampled_from(("tensor", "channel", "group")))
    if mode == "group" and k < 64:
        mode = "channel"
    return {"m": draw(S.size(16, big=())), "k": k, "n": draw(S.multiple_of(8, 8)), "int4": int4, "mode": mode,
            "group": 32, "offset": draw(st.booleans()), "dtype": draw(S.half_dtype()), "bias": draw(st.booleans()),
            "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    m, k, n = p["m"], p["k"], p["n"]
    dt = np.dtype(w8a8.dtypes.resolve(p["dtype"]))
    x = float_tensor(rng, (m, k), dt, "gaussian")
    if p["int4"]:
        w = w8a8.convert_weight_to_int4pack(rng.integers(-8, 8, size=(k, n)).astype(np.int32))
    else:
        w = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
    shape = {"tensor": (1,), "channel": (n,), "group": (-(-k // p["group"]), n)}[p["mode"]]
    scale = (rng.uniform(1e-3, 2e-2, size=shape).astype(np.float32)).astype(dt)
    kw = {"antiquant_group_size": p["group"] if p["mode"] == "group" else 0}
    if p["offset"]:
        kw["antiquant_offset"] = rng.integers(-4, 4, size=shape).astype(np.float32).astype(dt)
    if p["bias"]:
        kw["bias"] = rng.standard_normal(n).astype(np.float32).astype(np.float32 if dt == w8a8.bfloat16 else dt)
    return (x, w, scale), kw


LAYOUTS = ("int8", "int4_n", "int4_k")
MODES = ("tensor", "channel", "group")
EPILOGUES = ("offset", "bias", "int8_requant")


def _layout(layout, mode, xdt, epilogue):
    def build():
        rng = np.random.default_rng(10)
        m, k, n = 5, 128, 24
        x = rng.standard_normal((m, k)).astype(np.float32).astype(xdt)
        codes = rng.integers(-8, 8, (k, n))
        w = {"int8": lambda: codes.astype(np.int8),
             "int4_n": lambda: w8a8.convert_weight_to_int4pack(codes.astype(np.int32)),
             "int4_k": lambda: w8a8.convert_weight_to_int4pack(np.ascontiguousarray(codes.T).astype(np.int32)).T,
             }[layout]()
        shape = {"tensor": (1, 1), "channel": (1, n), "group": (k // 32, n)}[mode]
        s = rng.uniform(1e-3, 2e-2, shape).astype(np.float32).astype(xdt)
        o = rng.integers(-3, 3, shape).astype(np.float32).astype(xdt)
        kw = {"antiquant_group_size": 32 if mode == "group" else 0}
        if epilogue == "offset":
            return (x, w, s, o), kw
        if epilogue == "bias":
            return (x, w, s), kw | {"bias": rng.standard_normal(n).astype(np.float32 if xdt == BF16 else np.float16)}
        qs, qo = rng.uniform(0.5, 2, n).astype(np.float32), rng.uniform(-3, 3, n).astype(np.float32)
        return (x, w, s), kw | {"quant_scale": qs, "quant_offset": qo}
    return build


def _int64_antiquant():
    rng = np.random.default_rng(11)
    m, k, n = 3, 64, 64
    x = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    s = w8a8.trans_quant_param(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
    return (x, w, s, rng.integers(-4, 4, n).astype(np.int32)), {}


def _int64_quant_scale():
    rng = np.random.default_rng(11)
    m, k, n = 3, 64, 64
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    x8 = rng.standard_normal((m, k)).astype(np.float16)
    qs = w8a8.trans_quant_param(np.full(n, 0.5, np.float32), rng.uniform(-5, 5, n).astype(np.float32))
    return (x8, w, np.full(n, 0.01, np.float16)), {"quant_scale": qs}


def _nan_x(dtype, inf):
    def build():
        x = np.ones((4, 64), dtype)
        raw = x.view(np.uint16)
        raw[1, 5] = 0x7E00 if dtype == np.float16 else 0x7FC0
        raw[2, 7] = 0x7C01 if dtype == np.float16 else 0x7F81
        raw[3, 9] = 0xFE00 if dtype == np.float16 else 0xFFC0
        if inf:
            x[0, 0] = np.inf
        return (x, np.ones((64, 8), np.int8), np.ones(8, dtype)), {}
    return build


CASES = [
    Case(f"layout_{layout}_{mode}_{np.dtype(xdt).name}_{epilogue}", _layout(layout, mode, xdt, epilogue),
         why=f"Weight {layout} (int8 [K, N]; int4 packed along N; int4 packed along K, viewed transposed), "
             f"antiquant per {mode}, {np.dtype(xdt).name} x, with {epilogue.replace('_', ' ')}.")
    for layout in LAYOUTS for mode in MODES for xdt in (np.float16, BF16) for epilogue in EPILOGUES] + [
    Case("int64_antiquant_scale", _int64_antiquant,
         why="An int64 (trans_quant_param) antiquant scale with an int32 offset: M in [1, 96], K and N multiples "
             "of 64."),
    Case("int64_quant_scale", _int64_quant_scale,
         why="The int8 requant with an int64 quant scale carrying its offsets (FP19 scale, 9-bit offsets)."),
] + [Case(f"nan_x_propagates_{np.dtype(dt).name}", _nan_x(dt, False),
          why="NaN (quiet, signalling, negative) in rows 1-3 of x propagates through the fp32 result with NumPy's "
              "bits; row 0 of ones gives 64 * 1 = 64.")
     for dt in (np.float16, BF16)] + [
    Case(f"inf_and_nan_x_{np.dtype(dt).name}", _nan_x(dt, True), why="An Inf in row 0 as well.")
    for dt in (np.float16, BF16)]

def _valid():
    """A valid W8A16 call (fp16 x [2, 64], int8 weight [64, 8], fp16 scale per channel) the golden tests'
    bad inputs change one or two arguments of."""
    return (np.full((2, 64), 1.0, np.float16), np.full((64, 8), 1, np.int8), np.full((8,), 1.0, np.float16)), {}

def _valid_fixtures():
    """A valid W8A16 call on the shared fixtures (fp16 x [3, 64], int8 weight [64, 16], per-channel scale)."""
    return (fx().xb, fx().w8, np.ones(16, np.float16)), {}


BAD_CALLS = [
    BadCall(
        "antiquant_group_size_multiple",
        lambda: varied(_valid_fixtures, {2: np.ones((2, 16), np.float16)}, antiquant_group_size=7),
        ValueError,
        r"weight_quant_batchmatmul: argument 'antiquant_group_size' must be a multiple of 32 in \[32, K - 1 = 63\]",
    ),
    BadCall("antiquant_group_size_shape", lambda: varied(_valid_fixtures, {2: np.ones((2, 16), np.float16)}),
            ValueError, r"weight_quant_batchmatmul: argument 'antiquant_group_size' must be the group size G"),
    BadCall("bias_shape", lambda: varied(_valid_fixtures, bias=np.ones(16, np.float32)),
            TypeError, r"weight_quant_batchmatmul: argument 'bias' must be float16 for float16 x"),
    BadCall(
        "quant_offset_shape",
        lambda: varied(_valid_fixtures, quant_offset=np.ones(16, np.float32)),
        ValueError,
        r"weight_quant_batchmatmul: argument 'quant_offset' must be None without quant_scale",
    ),
    BadCall("weight_shape", lambda: varied(_valid_fixtures, {1: fx().w8[:5]}),
            ValueError, r"weight_quant_batchmatmul: argument 'weight' must be of shape \[K=64, N\]"),
    BadCall("antiquant_scale_nonfinite", lambda: varied(_valid_fixtures, {2: np.full(16, np.nan, np.float16)}),
            ValueError, r"weight_quant_batchmatmul: argument 'antiquant_scale' must be finite"),
    BadCall(
        "x_multiple",
        lambda: varied(_valid_fixtures, {2: np.ones(16, np.int64)}),
        ValueError,
        r"weight_quant_batchmatmul: argument 'x' must be M in \[1, 96\] and K, N multiples of 64 with an int64 antiquant_scale",
    ),
    BadCall("inner_precise_choice", lambda: varied(_valid_fixtures, inner_precise=3),
            ValueError, r"weight_quant_batchmatmul: argument 'inner_precise' must be one of"),
    BadCall(
        "antiquant_group_size_shape_2",
        lambda: varied(_valid, {2: np.full((2, 8), 1.0, np.float16)}),
        ValueError,
        r"weight_quant_batchmatmul: argument 'antiquant_group_size' must be the group size G",
    ),
    BadCall(
        "antiquant_group_size_multiple_2",
        lambda: varied(_valid, {2: np.full((2, 8), 1.0, np.float16)}, antiquant_group_size=48),
        ValueError,
        r"weight_quant_batchmatmul: argument 'antiquant_group_size' must be a multiple of 32 in \[32, K - 1 = 63\]",
    ),
    BadCall(
        "antiquant_group_size_multiple_3",
        lambda: varied(_valid, {2: np.full((2, 8), 1.0, np.float16)}, antiquant_group_size=64),
        ValueError,
        r"weight_quant_batchmatmul: argument 'antiquant_group_size' must be a multiple of 32 in \[32, K - 1 = 63\]",
    ),
    BadCall(
        "antiquant_scale_shape",
        lambda: varied(_valid, {2: np.full((3, 8), 1.0, np.float16)}, antiquant_group_size=32),
        ValueError,
        r"weight_quant_batchmatmul: argument 'antiquant_scale' must be of shape",
    ),
    BadCall(
        "antiquant_scale_dtype",
        lambda: varied(_valid, {2: np.full((8,), 1.0, F32)}),
        TypeError,
        r"weight_quant_batchmatmul: argument 'antiquant_scale' must be of dtype float16 or int64",
    ),
    BadCall(
        "antiquant_offset_dtype",
        lambda: (
            (
                np.full((2, 64), 1.0, np.float16),
                np.full((64, 8), 1, np.int8),
                np.full((8,), 1.0, np.float16),
                np.full((8,), 1.0, F32),
            ),
            {},
        ),
        TypeError,
        r"weight_quant_batchmatmul: argument 'antiquant_offset' must be of dtype float16",
    ),
    BadCall(
        "antiquant_offset_shape",
        lambda: (
            (
                np.full((2, 64), 1.0, np.float16),
                np.full((64, 8), 1, np.int8),
                np.full((8,), 1.0, np.float16),
                np.full((4,), 1.0, np.float16),
            ),
            {},
        ),
        ValueError,
        r"weight_quant_batchmatmul: argument 'antiquant_offset' must be of antiquant_scale's shape",
    ),
    BadCall(
        "bias_shape_2",
        lambda: varied(_valid, bias=np.full((8,), 1.0, F32)),
        TypeError,
        r"weight_quant_batchmatmul: argument 'bias' must be float16 for float16 x",
    ),
    BadCall(
        "bias_shape_3",
        lambda: (
            (np.full((2, 64), 1.0, BF16), np.full((64, 8), 1, np.int8), np.full((8,), 1.0, BF16)),
            {'bias': np.full((8,), 1.0, BF16)},
        ),
        TypeError,
        r"weight_quant_batchmatmul: argument 'bias' must be float32 for bfloat16 x",
    ),
    BadCall(
        "quant_offset_shape_2",
        lambda: varied(_valid, quant_offset=np.full((8,), 1.0, F32)),
        ValueError,
        r"weight_quant_batchmatmul: argument 'quant_offset' must be None without quant_scale",
    ),
    BadCall(
        "weight_shape_2",
        lambda: varied(_valid, {1: np.full((32, 8), 1, np.int8)}),
        ValueError,
        r"weight_quant_batchmatmul: argument 'weight' must be of shape \[K=64, N\]",
    ),
    BadCall(
        "weight_shape_3",
        lambda: varied(_valid, {1: np.full((16, 8), 1, np.int32)}),
        ValueError,
        r"weight_quant_batchmatmul: argument 'weight' must be int32-packed int4 of shape \[K, N/8\] or \[K/8, N\] with K = 64",
    ),
    BadCall(
        "x_dtype",
        lambda: ((np.full((2, 64), 1.0, F32), np.full((64, 8), 1, np.int8), np.full((8,), 1.0, F32)), {}),
        TypeError,
        r"weight_quant_batchmatmul: argument 'x' must be of dtype float16 or bfloat16",
    ),
    BadCall(
        "x_range",
        lambda: (
            (np.full((1, 65536), 1.0, np.float16), np.full((65536, 1), 1, np.int8), np.full((1,), 1.0, np.float16)),
            {},
        ),
        ValueError,
        r"weight_quant_batchmatmul: argument 'x' must be K in \[1, 65535\]",
    ),
    BadCall(
        "antiquant_scale_dtype_2",
        lambda: (
            (
                np.full((2, 64), 1.0, BF16),
                np.full((64, 64), 1, np.int8),
                w8a8.trans_quant_param(np.full((64,), 1.0, F32)),
            ),
            {},
        ),
        TypeError,
        r"weight_quant_batchmatmul: argument 'antiquant_scale' must be float16 or bfloat16",
    ),
    BadCall(
        "x_multiple_2",
        lambda: (
            (
                np.full((97, 64), 1.0, np.float16),
                np.full((64, 64), 1, np.int8),
                w8a8.trans_quant_param(np.full((64,), 1.0, F32)),
            ),
            {},
        ),
        ValueError,
        r"weight_quant_batchmatmul: argument 'x' must be M in \[1, 96\] and K, N multiples of 64 with an int64 antiquant_scale",
    ),
    BadCall(
        "weight_shape_4",
        lambda: (
            (
                np.full((2, 64), 1.0, np.float16),
                np.full((64, 8), 0, np.int32),
                w8a8.trans_quant_param(np.full((64,), 1.0, F32)),
            ),
            {},
        ),
        TypeError,
        r"weight_quant_batchmatmul: argument 'weight' must be int8 with an int64 antiquant_scale",
    ),
    BadCall(
        "quant_scale_shape",
        lambda: (
            (
                np.full((2, 64), 1.0, np.float16),
                np.full((64, 64), 1, np.int8),
                w8a8.trans_quant_param(np.full((64,), 1.0, F32)),
            ),
            {'quant_scale': np.full((64,), 1.0, F32)},
        ),
        ValueError,
        r"weight_quant_batchmatmul: argument 'quant_scale' must be None with an int64 antiquant_scale",
    ),
    BadCall(
        "inner_precise_choice_2",
        lambda: varied(_valid, inner_precise=2),
        ValueError,
        r"weight_quant_batchmatmul: argument 'inner_precise' must be one of",
    ),
    # NaN / Inf in the activation x under nan_policy="raise" (an int8 output has no code for NaN).
    BadCall("x_nan", lambda: varied(_valid_fixtures, {0: np.where(np.arange(fx().xb.size).reshape(fx().xb.shape) == 5,
                                                                   np.float16(np.nan), fx().xb)}),
            ValueError, r"weight_quant_batchmatmul: argument 'x' must be finite .*; got NaN at index \(0, 5\)"),
]


def _bench_inputs(p, rng):
    """bf16 x, int4 weight packed 8 per int32 along N, per-group bf16 scale."""
    m, k, n, group = p["m"], p["k"], p["n"], p.get("group", 128)
    x = normal32(rng, (m, k)).astype(BF16)
    w = w8a8.convert_weight_to_int4pack(rng.integers(-8, 8, size=(k, n)).astype(np.int32))
    scale = rng.uniform(1e-3, 2e-2, size=(k // group, n)).astype(np.float32).astype(BF16)
    return (x, w, scale), {"antiquant_group_size": group}


def bench_case(m: int, k: int = _dsv4.H, n: int = 2 * _dsv4.I, group: int = 128, tags=()) -> BenchCase:
    return BenchCase(OP, f"W4A16-G{group}-M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n}, _bench_inputs,
                     work=2.0 * m * k * n, tags=tags, compute="fp64")


declare(OpDecl(
    name=OP, family="lowbit", params=_params, build=_build, outputs=outputs(("y", "float")),
    cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(m, tags=bench_tags(m)) for m in bench_ms(full) if m <= 512],
    description="W8A16 / W4A16 (npu_weight_quant_batchmatmul)"))
