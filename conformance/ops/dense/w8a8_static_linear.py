"""``w8a8_static_linear``: the static W8A8 Linear of msModelSlim checkpoints — quantize(div_mode=False)
with the per-tensor input scale's reciprocal and offset, then quant_matmul with deq_scale and the int32
quant_bias (or a float bias)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, Stage, declare, outputs, varied
from ...values import float_tensor, int_tensor, rng_for
from .. import _dsv4
from ._common import (BF16, F16, LW, MATMUL_FIELDS, NAN_X, S5, X, XH, bench_weights, bf16_normal,
                      checkpoint_weights, linear_params, stage_acc)

OP = "w8a8_static_linear"
W = np.ones((3, 8), np.int8)       # the golden tests' fixtures (tests/golden/test_linear.py)
XB = np.ones((2, 8), BF16)
S1 = np.ones(1, np.float32)
DEQ = np.ones(3, np.float32)
DTYPES = {"float32": np.float32, "bfloat16": BF16, "float16": F16, "int8": np.int8}


@st.composite
def _bits_params(draw):
    """Bit-level activations, full-range int8 weights, input scales of each float dtype, input offsets of
    each dtype (int8 too), a deq_scale given as fp32 or as its int64 bits, and a quant_bias, a float bias
    or none."""
    return {"lead": list(draw(st.sampled_from(((1,), (7,), (2, 3))))), "k": draw(st.sampled_from((1, 8, 17, 64))),
            "n": draw(st.sampled_from((1, 2, 7, 8, 16, 17, 33))), "dtype": draw(S.half_dtype()),
            "scale_dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))),
            "offset_dtype": draw(st.sampled_from(("float32", "bfloat16", "float16", "int8"))),
            "deq": draw(st.sampled_from(("float32", "int64"))),
            "bias_kind": draw(st.sampled_from(("quant", "float", None))),
            "dist": draw(S.bit_dist()), "seed": draw(S.seed())}


def _bits_build(p):
    rng = rng_for(p["seed"])
    n = p["n"]
    x = float_tensor(rng, tuple(p["lead"]) + (p["k"],), p["dtype"], p["dist"])
    w = int_tensor(rng, (n, p["k"]), np.int8)
    s_in = np.array([rng.uniform(0.001, 0.1)]).astype(DTYPES[p["scale_dtype"]])
    o_in = np.array([rng.integers(-20, 20)]).astype(DTYPES[p["offset_dtype"]])
    deq = (rng.random(n) * 1e-4).astype(np.float32)
    kw = {"input_scale": s_in, "input_offset": o_in,
          "deq_scale": w8a8.fp32_bits_to_int64(deq) if p["deq"] == "int64" else deq,
          "quant_bias": rng.integers(-(2**16), 2**16, n).astype(np.int32) if p["bias_kind"] == "quant" else None,
          "bias": float_tensor(rng, (n,), np.float32, "gaussian") if p["bias_kind"] == "float" else None}
    return (x, w), kw


def _build(p):
    if "deq" in p:
        return _bits_build(p)
    rng = rng_for(p["seed"])
    x = float_tensor(rng, tuple(p["lead"]) + (p["k"],), p["dtype"], p["dist"])
    w, ws, _ = checkpoint_weights(rng, p["n"], p["k"])
    s_in, o_in = w8a8.calibrate_activation_per_tensor(x)
    bias = None
    if p["bias"]:  # a float bias of a few thousand dequant steps, so that quant_bias fits int32 at any scale
        deq = (s_in.astype(np.float32) * ws.reshape(-1)).astype(np.float32)
        bias = (rng.uniform(-3000, 3000, p["n"]).astype(np.float32) * deq).astype(np.float32)
    deq, qb = w8a8.static_params(w, ws, s_in, o_in, bias, model_dtype=p["dtype"])
    return (x, w), {"input_scale": s_in, "input_offset": o_in, "deq_scale": deq, "quant_bias": qb}


def _stage_xq(b, a, k, up):
    from w8a8.linear import static_activation_params

    x = a[0]
    recip, offset = static_activation_params(x.dtype, k["input_scale"], k["input_offset"], x.shape[-1])
    return b.quantize(x.reshape(-1, x.shape[-1]), recip, offset, dtype="int8", axis=-1, div_mode=False)


def _nan_at(array, index, value=np.nan):
    array = array.copy()
    array[index] = value
    return array


def _tiny_input_scale(dtype):
    return lambda: ((np.ones((2, 8), dtype), np.ones((3, 8), np.int8)),
                    {"input_scale": np.float32([1e-39]), "input_offset": np.float32([0]),
                     "deq_scale": np.float32([1e-3] * 3), "quant_bias": None})


def _overflow_at_150_5():
    qb = np.zeros(19, np.int32)
    qb[5] = 2**31 - 1
    xs = np.zeros((201, 24), BF16)
    xs[150] = 1.0
    return (xs, np.ones((19, 24), np.int8)), {"input_scale": np.float32([0.02]), "input_offset": np.float32([0]),
                                              "deq_scale": np.full(19, 0.01, np.float32), "quant_bias": qb}


CASES = [
    Case("float_bias_beyond_bf16_max",
         lambda: ((np.ones((2, 8), BF16), np.ones((3, 8), np.int8)),
                  {"input_scale": np.float32([0.1]), "input_offset": np.float32([0]),
                   "deq_scale": np.float32([1e-3] * 3),
                   "quant_bias": None, "bias": np.float32([3e38, 1, 1])}),
         why="A float bias of 3e38 stays finite in fp32; channel 0 of the bf16 output rounds it past the bf16 max."),
]

def _valid():
    """The golden tests' valid static Linear call (tests/golden/test_linear.py), as keywords."""
    return (), dict(
        x=XB, weight=W, input_scale=S1, input_offset=S1 * 0, deq_scale=DEQ, quant_bias=np.zeros(3, np.int32)
    )


BAD_CALLS = [
    BadCall(
        "k_zero",
        lambda: (
            (np.ones((3, 0), BF16), np.ones((5, 0), np.int8)),
            {"input_scale": S1, "input_offset": S1 * 0, "deq_scale": S5, "quant_bias": None},
        ),
        ValueError,
        r"w8a8_static_linear: argument 'weight' must be \[N, K\] with K >= 1",
        "K = 0: the device never writes the output of an empty matmul; the golden refuses.",
    ),
    BadCall(
        "input_scale_shape",
        lambda: (
            (X, LW),
            {
                "input_scale": np.ones(2, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": S5,
                "quant_bias": None,
            },
        ),
        ValueError,
        r"w8a8_static_linear: argument 'input_scale' must be per-tensor, of shape \[1\]",
    ),
    BadCall(
        "input_offset_dtype",
        lambda: (
            (X, LW),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.int32),
                "deq_scale": S5,
                "quant_bias": None,
            },
        ),
        TypeError,
        r"w8a8_static_linear: argument 'input_offset' must be of dtype float32, bfloat16, float16 or int8",
    ),
    BadCall(
        "deq_scale_dtype",
        lambda: (
            (X, LW),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": S5.astype(np.float16),
                "quant_bias": None,
            },
        ),
        TypeError,
        r"w8a8_static_linear: argument 'deq_scale' must be of dtype float32 or int64",
    ),
    BadCall(
        "deq_scale_shape",
        lambda: (
            (X, LW),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": np.ones(4, np.float32),
                "quant_bias": None,
            },
        ),
        ValueError,
        r"w8a8_static_linear: argument 'deq_scale' must be of shape \[5\] or \[5, 1\]",
    ),
    BadCall(
        "quant_bias_dtype",
        lambda: (
            (X, LW),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": S5,
                "quant_bias": np.ones(5, np.float32),
            },
        ),
        TypeError,
        r"w8a8_static_linear: argument 'quant_bias' must be of dtype int32",
    ),
    BadCall(
        "bias_shape",
        lambda: (
            (X, LW),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": S5,
                "quant_bias": np.ones(5, np.int32),
                "bias": S5,
            },
        ),
        ValueError,
        r"w8a8_static_linear: argument 'bias' must be None when quant_bias is given",
    ),
    BadCall(
        "quant_matmul_scale_dtype",
        lambda: (
            (X, LW),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": w8a8.fp32_bits_to_int64(S5),
                "quant_bias": None,
            },
        ),
        TypeError,
        r"quant_matmul: argument 'scale' must be of dtype float32 or bfloat16 for bfloat16 output",
    ),
    BadCall(
        "quant_matmul_bias_dtype",
        lambda: (
            (XH, LW),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": S5,
                "quant_bias": None,
                "bias": S5,
            },
        ),
        TypeError,
        r"quant_matmul: argument 'bias' must be of dtype int32",
    ),
    BadCall(
        "quantize_x_nonfinite",
        lambda: (
            (NAN_X, LW),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": S5,
                "quant_bias": None,
            },
        ),
        ValueError,
        r"w8a8_static_linear: argument 'x' must be finite",
    ),
    BadCall(
        "quant_matmul_scale_nonfinite",
        lambda: (
            (X, LW),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": S5 * np.inf,
                "quant_bias": None,
            },
        ),
        ValueError,
        r"w8a8_static_linear: argument 'deq_scale' must be finite",
    ),
    BadCall(
        "quant_matmul_x1_shape",
        lambda: (
            (np.ones((1, 65536), BF16), np.ones((2, 65536), np.int8)),
            {
                "input_scale": np.ones(1, np.float32),
                "input_offset": np.zeros(1, np.float32),
                "deq_scale": np.ones(2, np.float32),
                "quant_bias": None,
            },
        ),
        ValueError,
        r"quant_matmul: argument 'x1' must be K <= 65535",
    ),
    BadCall(
        "missing_argument",
        lambda: ((X, LW), {"input_scale": np.ones(1, np.float32)}),
        TypeError,
        r"missing\ 3\ required\ keyword\-only\ arguments:\ 'input_offset',\ 'deq_scale',\ and\ 'quant_bias'",
    ),
    BadCall(
        "x_inf",
        lambda: (
            (_nan_at(np.ones((2, 8), np.float32), (0, 1), np.inf).astype(np.float16), W),
            dict(input_scale=S1, input_offset=S1, deq_scale=DEQ, quant_bias=None),
        ),
        ValueError,
        r"w8a8_static_linear: argument 'x' must be finite",
    ),
    BadCall(
        "input_scale_nan",
        lambda: ((XB, W), dict(input_scale=np.float32([np.nan]), input_offset=S1 * 0, deq_scale=DEQ, quant_bias=None)),
        ValueError,
        r"w8a8_static_linear: argument 'input_scale' must be finite and > 0",
    ),
    BadCall(
        "input_scale_zero",
        lambda: ((XB, W), dict(input_scale=np.float32([0.0]), input_offset=S1 * 0, deq_scale=DEQ, quant_bias=None)),
        ValueError,
        r"w8a8_static_linear: argument 'input_scale' must be finite and > 0",
    ),
    BadCall(
        "input_scale_minus_zero",
        lambda: ((XB, W), dict(input_scale=np.float32([-0.0]), input_offset=S1 * 0, deq_scale=DEQ, quant_bias=None)),
        ValueError,
        r"w8a8_static_linear: argument 'input_scale' must be finite and > 0",
    ),
    BadCall(
        "input_scale_negative",
        lambda: ((XB, W), dict(input_scale=np.float32([-0.02]), input_offset=S1 * 0, deq_scale=DEQ, quant_bias=None)),
        ValueError,
        r"w8a8_static_linear: argument 'input_scale' must be finite and > 0",
    ),
    BadCall(
        "input_scale_inf",
        lambda: ((XB, W), dict(input_scale=np.float32([np.inf]), input_offset=S1 * 0, deq_scale=DEQ, quant_bias=None)),
        ValueError,
        r"w8a8_static_linear: argument 'input_scale' must be finite and > 0",
    ),
    BadCall(
        "offset_inf_in_fp16",
        lambda: (
            (np.ones((2, 8), np.float16), W),
            dict(input_scale=S1, input_offset=np.float32([1e5]), deq_scale=DEQ, quant_bias=None),
        ),
        ValueError,
        r"quantize: argument 'zero_points' must be finite",
    ),
    BadCall(
        "bias_with_quant_bias",
        lambda: (
            (XB, W),
            dict(
                input_scale=S1,
                input_offset=S1 * 0,
                deq_scale=DEQ,
                quant_bias=np.zeros(3, np.int32),
                bias=np.ones(3, np.float32),
            ),
        ),
        ValueError,
        r"w8a8_static_linear: argument 'bias' must be None when quant_bias is given",
    ),
    BadCall(
        "x_dtype",
        lambda: varied(_valid, x=XB.astype(np.float32)),
        TypeError,
        r"w8a8_static_linear: argument 'x' must be of dtype bfloat16 or float16",
    ),
    BadCall(
        "input_scale_shape_2",
        lambda: varied(_valid, input_scale=np.ones(2, np.float32)),
        ValueError,
        r"w8a8_static_linear: argument 'input_scale' must be per-tensor, of shape \[1\]",
    ),
    BadCall(
        "input_offset_shape",
        lambda: varied(_valid, input_offset=np.ones(2, np.float32)),
        ValueError,
        r"w8a8_static_linear: argument 'input_offset' must be per-tensor, of shape \[1\]",
    ),
    BadCall(
        "input_scale_dtype",
        lambda: varied(_valid, input_scale=np.ones(1, np.int32)),
        TypeError,
        r"w8a8_static_linear: argument 'input_scale' must be of dtype float32, bfloat16 or float16",
    ),
    BadCall(
        "deq_scale_dtype_2",
        lambda: varied(_valid, deq_scale=np.ones(3, BF16)),
        TypeError,
        r"w8a8_static_linear: argument 'deq_scale' must be of dtype float32 or int64",
    ),
    BadCall(
        "deq_scale_shape_2",
        lambda: varied(_valid, deq_scale=np.ones(4, np.float32)),
        ValueError,
        r"w8a8_static_linear: argument 'deq_scale' must be of shape \[3\] or \[3, 1\]",
    ),
    BadCall(
        "quant_bias_dtype_2",
        lambda: varied(_valid, quant_bias=np.ones(3, np.int64)),
        TypeError,
        r"w8a8_static_linear: argument 'quant_bias' must be of dtype int32",
    ),
    BadCall(
        "quant_bias_shape",
        lambda: varied(_valid, quant_bias=np.ones(4, np.int32)),
        ValueError,
        r"w8a8_static_linear: argument 'quant_bias' must be of shape \[3\] or \[3, 1\]",
    ),
    BadCall(
        "bias_shape_2",
        lambda: varied(_valid, quant_bias=None, bias=np.ones(4, np.float32)),
        ValueError,
        r"w8a8_static_linear: argument 'bias' must be of shape \[3\] or \[3, 1\]",
    ),
    BadCall(
        "x_shape",
        lambda: varied(_valid, x=np.ones((2, 7), BF16)),
        ValueError,
        r"w8a8_static_linear: argument 'x' must be of last dimension K = 8",
    ),
    *[BadCall(f"input_scale_reciprocal_inf_{name}", _tiny_input_scale(dtype), ValueError,
              r"quantize: argument 'scales' must be finite .* Inf at index \(0,\)", why)
      for name, dtype, why in (("fp16", F16, "1 / 1e-39 overflows to Inf in fp16: the quantize step refuses the Inf "
                                            "reciprocal."),
                               ("bf16", BF16, "bf16 keeps fp32's range, but 1 / 1e-39 = 1e39 is beyond it: Inf."))],
    BadCall("input_scale_reciprocal_beyond_fp16", lambda: ((np.ones((2, 8), F16), np.ones((3, 8), np.int8)),
                                                           {"input_scale": np.float32([1e-6]),
                                                            "input_offset": np.float32([1e5]),
                                                            "deq_scale": np.float32([1e-3] * 3), "quant_bias": None}),
            ValueError, r"quantize: argument 'scales' must be finite .* Inf at index \(0,\)",
            "1 / 1e-6 = 1e6 is beyond fp16's max 65504: the reciprocal loads as Inf (before the 1e5 offset would)."),
    BadCall("quant_bias_overflow_at_row_150", _overflow_at_150_5,
            OverflowError, r"quant_matmul: the int32 accumulator overflows at output index \(150, 5\)",
            "Offset 0: row 150 -> x_q = rint(1 / 0.02) = 50, the other rows 0; acc + quant_bias overflows int32 at "
            "(150, 5) only (quant_bias[5] = 2^31 - 1)."),
]


def _bench_inputs(p, rng):
    x = bf16_normal(rng, (p["m"], p["k"]))
    w, ws = bench_weights(rng, p["n"], p["k"])
    s_in, o_in = w8a8.calibrate_activation_per_tensor(x)
    deq, qb = w8a8.static_params(w, ws, s_in, o_in)
    return (x, w), {"input_scale": s_in, "input_offset": o_in, "deq_scale": deq, "quant_bias": qb}


def bench_case(m: int, k: int, n: int, tags=()) -> BenchCase:
    return BenchCase(OP, f"M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n}, _bench_inputs, work=2.0 * m * k * n, tags=tags)


declare(OpDecl(
    name=OP, family="dense", params=linear_params, build=_build, strategies={"bits": _bits_params},
    outputs=outputs(("y", "float")), numerics_fields=("round_mode", "saturate") + MATMUL_FIELDS,
    stages=(Stage("x_q", "int", _stage_xq), Stage("acc", "int", stage_acc),
            Stage("y", "float", lambda b, a, k, up: b.w8a8_static_linear(*a, **k))),
    cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(m, _dsv4.H, 2 * _dsv4.I, _dsv4.tags(m)) for m in _dsv4.token_counts(full)],
    description="static W8A8 Linear: quantize(div_mode=False) -> quant_matmul (deq_scale, quant_bias)"))
