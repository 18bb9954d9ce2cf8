"""``w8a8_dynamic_linear``: the W8A8_DYNAMIC Linear of msModelSlim checkpoints — dynamic_quant of x, then
quant_matmul against the int8 weight [N, K] with a per-channel scale (bf16 for a bf16 model) and the
per-token scale."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, Stage, declare, outputs
from ...values import float_tensor, int_tensor, rng_for
from .. import _dsv4
from ._common import (BF16, F16, LW, MATMUL_FIELDS, NAN_X, QUANT_FIELDS, S5, X, XF, bench_weights, bf16_normal,
                      checkpoint_weights, linear_params, random_int8, stage_acc)

OP = "w8a8_dynamic_linear"
W = np.ones((3, 8), np.int8)       # the golden tests' fixtures (tests/golden/test_linear.py)
WS = np.ones((3, 1), np.float32)
XB = np.ones((2, 8), BF16)


@st.composite
def _bits_params(draw):
    """Bit-level activations, full-range int8 weights (not a quantized checkpoint's), fp32 or bf16 weight
    scales of shape [N] or [N, 1], and a float bias of each dtype."""
    return {"lead": list(draw(st.sampled_from(((1,), (7,), (2, 3), ())))), "k": draw(st.sampled_from((1, 8, 17, 64))),
            "n": draw(st.sampled_from((1, 2, 7, 8, 16, 17, 33))), "dtype": draw(S.half_dtype()),
            "ws_dtype": draw(st.sampled_from(("float32", "bfloat16"))), "ws_column": draw(st.booleans()),
            "bias_dtype": draw(st.sampled_from((None, "float32", "bfloat16", "float16"))), "dist": draw(S.bit_dist()),
            "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    x = float_tensor(rng, tuple(p["lead"]) + (p["k"],), p["dtype"], p["dist"])
    if "ws_dtype" in p:
        n = p["n"]
        w = int_tensor(rng, (n, p["k"]), np.int8)
        ws = (rng.random((n, 1) if p["ws_column"] else (n,)) * 0.01).astype(np.float32).astype(
            BF16 if p["ws_dtype"] == "bfloat16" else np.float32)
        bias = None if p["bias_dtype"] is None else float_tensor(rng, (n,), np.dtype(
            {"float32": np.float32, "bfloat16": BF16, "float16": F16}[p["bias_dtype"]]), "gaussian")
        return (x, w, ws), {"bias": bias}
    w, ws, _ = checkpoint_weights(rng, p["n"], p["k"])
    bias = rng.standard_normal(p["n"]).astype(np.float32) * np.float32(0.1) if p["bias"] else None
    return (x, w, ws), {"bias": bias}


def _stage_quant(b, a, k, up):
    return b.dynamic_quant(a[0].reshape(-1, a[0].shape[-1]))


def _long_k(k, dtype):
    def build():
        rng = rng_for(k, 3)
        return (float_tensor(rng, (3, k), dtype, "gaussian"), random_int8(rng, 5, k),
                (rng.random(5) * 1e-3).astype(np.float32)), {"bias": float_tensor(rng, (5,), np.float32, "gaussian")}
    return build


def _odd(m, k, n):
    def build():
        rng = rng_for(m + k + n)
        x2 = random_int8(rng, k, n)
        return (float_tensor(rng, (m, k), BF16, "outlier_channels"), x2.T.copy(),
                (rng.random(n) * 1e-3).astype(np.float32)), {}
    return build


_X1 = np.ones((2, 8), F16)
_W1 = np.ones((3, 8), np.int8)

CASES = [Case(f"long_k_{k}_{np.dtype(dt).name}", _long_k(k, dt), why=f"K = {k}: beyond the 1024 / 4096 K tiles.")
         for k in (1025, 4097, 5000) for dt in (BF16, F16)] + [
    Case(f"odd_dims_{m}x{k}x{n}", _odd(m, k, n), why=f"M x K x N = {m} x {k} x {n}: one odd dimension beyond 1024.")
    for m, k, n in ((1025, 17, 7), (7, 33, 1025), (1, 1025, 1), (17, 5000, 1))] + [
    Case("fp16_bias_beyond_fp16_max", lambda: ((_X1, _W1, np.float32([1e-3] * 3)), {"bias": np.float32([1e5, 0, 0])}),
         why="An fp32 bias of 1e5 in an fp16 model is loaded as fp16 +Inf (the torch cast): channel 0 of y is +Inf."),
]



def _nan_at(array, index, value=np.nan):
    array = array.copy()
    array[index] = value
    return array


BAD_CALLS = [
    BadCall("x_dtype", lambda: ((XF, LW, S5), {}),
            TypeError, r"w8a8_dynamic_linear: argument 'x' must be of dtype bfloat16 or float16"),
    BadCall("weight_dtype", lambda: ((X, LW.astype(np.int32), S5), {}),
            TypeError, r"w8a8_dynamic_linear: argument 'weight' must be of dtype int8"),
    BadCall("weight_shape", lambda: ((X, np.ones(16, np.int8), S5), {}),
            ValueError, r"w8a8_dynamic_linear: argument 'weight' must be 2-D"),
    BadCall("x_shape", lambda: ((X, np.ones((5, 15), np.int8), S5), {}),
            ValueError, r"w8a8_dynamic_linear: argument 'x' must be of last dimension K = 15"),
    BadCall("weight_scale_shape", lambda: ((X, LW, np.ones(4, np.float32)), {}),
            ValueError, r"w8a8_dynamic_linear: argument 'weight_scale' must be of shape \[5\] or \[5, 1\]"),
    BadCall("weight_scale_shape_2", lambda: ((X, LW, np.ones((5, 2), np.float32)), {}),
            ValueError, r"w8a8_dynamic_linear: argument 'weight_scale' must be of shape \[5\] or \[5, 1\]"),
    BadCall("weight_scale_dtype", lambda: ((X, LW, S5.astype(np.float16)), {}),
            TypeError, r"w8a8_dynamic_linear: argument 'weight_scale' must be of dtype float32 or bfloat16"),
    BadCall("bias_shape", lambda: ((X, LW, S5), {"bias": np.ones(4, np.float32)}),
            ValueError, r"w8a8_dynamic_linear: argument 'bias' must be of shape \[5\] or \[5, 1\]"),
    BadCall("bias_dtype", lambda: ((X, LW, S5), {"bias": np.ones(5, np.int32)}),
            TypeError, r"w8a8_dynamic_linear: argument 'bias' must be of dtype float32, bfloat16 or float16"),
    BadCall("dynamic_quant_x_nonfinite", lambda: ((NAN_X, LW, S5), {}),
            ValueError, r"w8a8_dynamic_linear: argument 'x' must be finite",
            "The Linear refuses a non-finite x under its own name, before its quantizer (dynamic_quant, or "
            "dynamic_quant_asymmetric under a record with asymmetric activations, onnxruntime-dqmm) runs."),
    BadCall("quant_matmul_scale_nonfinite", lambda: ((X, LW, S5 * np.nan), {}),
            ValueError, r"w8a8_dynamic_linear: argument 'weight_scale' must be finite"),
    BadCall("k_zero", lambda: ((np.ones((3, 0), BF16), np.ones((5, 0), np.int8), S5), {}),
            ValueError, r"w8a8_dynamic_linear: argument 'weight' must be \[N, K\] with K >= 1",
            "K = 0: aclnn returns before any kernel for empty tensors, so the device's output is never "
            "written; the golden refuses (it used to reach NumPy's reshape error, which named no argument)."),
    BadCall("x_dtype_2", lambda: ((), dict(x=XB.astype(np.float32), weight=W, weight_scale=WS)),
            TypeError, r"w8a8_dynamic_linear: argument 'x' must be of dtype bfloat16 or float16"),
    BadCall("weight_dtype_2", lambda: ((), dict(x=XB, weight=W.astype(np.int32), weight_scale=WS)),
            TypeError, r"w8a8_dynamic_linear: argument 'weight' must be of dtype int8"),
    BadCall("weight_shape_2", lambda: ((), dict(x=XB, weight=W[None], weight_scale=WS)),
            ValueError, r"w8a8_dynamic_linear: argument 'weight' must be 2-D"),
    BadCall("x_shape_2", lambda: ((), dict(x=np.ones((2, 9), BF16), weight=W, weight_scale=WS)),
            ValueError, r"w8a8_dynamic_linear: argument 'x' must be of last dimension K = 8"),
    BadCall("weight_scale_shape_3", lambda: ((), dict(x=XB, weight=W, weight_scale=np.ones((4, 1), np.float32))),
            ValueError, r"w8a8_dynamic_linear: argument 'weight_scale' must be of shape \[3\] or \[3, 1\]"),
    BadCall("weight_scale_shape_4", lambda: ((), dict(x=XB, weight=W, weight_scale=np.ones((1, 3), np.float32))),
            ValueError, r"w8a8_dynamic_linear: argument 'weight_scale' must be of shape \[3\] or \[3, 1\]"),
    BadCall("weight_scale_dtype_2", lambda: ((), dict(x=XB, weight=W, weight_scale=WS.astype(np.float16))),
            TypeError, r"w8a8_dynamic_linear: argument 'weight_scale' must be of dtype float32 or bfloat16"),
    BadCall("bias_shape_2", lambda: ((), dict(x=XB, weight=W, weight_scale=WS, bias=np.ones(4, np.float32))),
            ValueError, r"w8a8_dynamic_linear: argument 'bias' must be of shape \[3\] or \[3, 1\]"),
    BadCall("bias_dtype_2", lambda: ((), dict(x=XB, weight=W, weight_scale=WS, bias=np.ones(3, np.int32))),
            TypeError, r"w8a8_dynamic_linear: argument 'bias' must be of dtype float32, bfloat16 or float16"),
    BadCall("x_nan_at_1_5", lambda: ((_nan_at(np.ones((2, 8), np.float32), (1, 5)).astype(BF16), W, WS), {}),
            ValueError, r"w8a8_dynamic_linear: argument 'x' must be finite"),
    BadCall("weight_scale_inf_in_bf16", lambda: ((XB, W, np.float32([1, 3.4e38, 1])), {}),
            ValueError, r"quant_matmul: argument 'scale' must be finite"),
    BadCall("n_65536", lambda: ((np.ones((2, 1), BF16), np.ones((65536, 1), np.int8), np.ones(65536, np.float32)), {}),
            ValueError, r"quant_matmul: argument 'x2' must be N <= 65535"),
    BadCall("weight_scale_inf_in_bf16_model", lambda: ((_X1.astype(BF16), _W1, np.float32([3.4e38] * 3)), {}),
            ValueError, r"quant_matmul: argument 'scale' must be finite .* Inf at index \(0,\)",
            "3.4e38 rounds past the bf16 maximum when the scale is loaded as bf16: +Inf, refused by quant_matmul."),
]


def _bench_inputs(p, rng):
    w, ws = bench_weights(rng, p["n"], p["k"])
    return (bf16_normal(rng, (p["m"], p["k"])), w, ws), {}


def bench_case(m: int, k: int, n: int, tags=()) -> BenchCase:
    return BenchCase(OP, f"M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n}, _bench_inputs, work=2.0 * m * k * n, tags=tags)


def _bench(full: bool) -> list[BenchCase]:
    H, I = _dsv4.H, _dsv4.I
    cases = []
    for m in _dsv4.token_counts(full):
        cases.append(bench_case(m, H, 2 * I, _dsv4.tags(m, "scaling:M")))   # shared expert W13
        cases.append(bench_case(m, I, H, _dsv4.tags(m)))                    # shared expert W2
    if full:  # the DSV4 attention projections, decode and a 512-token prefill
        cases += [bench_case(m, k, n, ("dsv4", f"attn:{name}")) for name, (k, n) in _dsv4.ATTN_PROJ.items()
                  for m in _dsv4.token_counts(full) if m <= 512]
    cases.append(bench_case(2048, 2048, 2048, ("quick", "peers")))          # 2048^3: the prefill target
    if full:  # the trend grid: K and N at fixed M
        cases += [bench_case(512, k, 2048, ("grid", "scaling:K")) for k in (1024, 2048, 4096, 8192)]
        cases += [bench_case(512, 2048, n, ("grid", "scaling:N")) for n in (1024, 2048, 4096, 8192)]
    return cases


declare(OpDecl(
    name=OP, family="dense", params=linear_params, build=_build, strategies={"bits": _bits_params},
    outputs=outputs(("y", "float")), numerics_fields=QUANT_FIELDS + MATMUL_FIELDS,
    stages=(Stage("x_scale", "scale", lambda b, a, k, up: _stage_quant(b, a, k, up)[1]),
            Stage("x_q", "int", lambda b, a, k, up: _stage_quant(b, a, k, up)[0]),
            Stage("acc", "int", stage_acc),
            Stage("y", "float", lambda b, a, k, up: b.w8a8_dynamic_linear(*a, **k))),
    cases=CASES, bad_calls=BAD_CALLS, bench=_bench,
    description="W8A8_DYNAMIC Linear: dynamic_quant -> quant_matmul (bf16 scale, per-token)"))
