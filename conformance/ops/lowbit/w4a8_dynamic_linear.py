"""``w4a8_dynamic_linear``: the W4A8_DYNAMIC Linear of msModelSlim checkpoints — dynamic int8 activations
times int4 weight codes [N, K] (one int8 per code), per-channel or per-group-of-256 fp32 scales, through
quant_matmul's A8W4 route."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, declare, outputs
from ...values import float_tensor, rng_for
from .. import _dsv4
from ._common import BF16, F32, bench_ms, bench_tags, fx, normal32

OP = "w4a8_dynamic_linear"


@st.composite
def _params(draw):
    return {"lead": draw(S.lead_shape(16)), "k": draw(st.sampled_from((256, 512))) if draw(st.booleans())
            else draw(S.multiple_of(8, 24)), "n": draw(S.multiple_of(8, 8)), "dtype": draw(S.half_dtype()),
            "per_group": draw(st.booleans()), "bias": draw(st.booleans()),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    k, n = p["k"], p["n"]
    x = float_tensor(rng, tuple(p["lead"]) + (k,), p["dtype"], p["dist"])
    w = rng.integers(-8, 8, size=(n, k)).astype(np.int8)
    groups = k // 256 if p["per_group"] and k % 256 == 0 else 0
    ws = rng.uniform(1e-3, 1e-2, size=(n, groups) if groups else (n, 1)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if p["bias"] else None
    return (x, w, ws), {"bias": bias}


def _paths(lead, k, n, per_group, xdt, bf16_scale_fp16_bias):
    def build():
        rng = np.random.default_rng(14)
        w = rng.integers(-8, 8, (n, k)).astype(np.int8)
        ws = rng.uniform(1e-3, 1e-2, (n, k // 256) if per_group else (n, 1)).astype(np.float32)
        x = rng.standard_normal(lead + (k,)).astype(np.float32).astype(xdt)
        if bf16_scale_fp16_bias:
            return (x, w, ws.astype(BF16)), {"bias": rng.standard_normal(n).astype(np.float16)}
        return (x, w, ws), {}
    return build


CASES = [
    Case(f"lead_{'x'.join(map(str, lead))}_k{k}_n{n}_{'group' if pg else 'channel'}_{np.dtype(xdt).name}"
         f"{'_bf16_scale_fp16_bias' if variant else ''}", _paths(lead, k, n, pg, xdt, variant),
         why=f"x {lead + (k,)} ({'K = 0: zeros' if k == 0 else 'per group of 256' if pg else 'per channel'}), "
             f"{'a bf16 weight scale and an fp16 bias' if variant else 'fp32 scales, no bias'}.")
    for lead, k, n, pg in (((3,), 512, 16, True), ((2, 5), 24, 8, False), ((1,), 7, 8, False), ((0,), 16, 8, False))
    for xdt in (BF16, np.float16) for variant in (False, True)]

BAD_CALLS = [
    BadCall(
        "weight_scale_shape",
        lambda: ((fx().xw, fx().ww, np.full((16, 3), 0.01, np.float32)), {}),
        ValueError,
        r"w4a8_dynamic_linear: argument 'weight_scale' must be per channel \[16\] / \[16, 1\], or per group of 256 \[16, K/256\]",
    ),
    BadCall("pack_int4_codes_shape", lambda: ((fx().xw, fx().ww[:12], np.full(12, 0.01, np.float32)), {}),
            ValueError, r"pack_int4: argument 'codes' must be an array whose last dimension is a multiple of 8"),
    BadCall("bias_shape", lambda: ((fx().xw, fx().ww, np.full(16, 0.01, np.float32)), {"bias": np.ones(3, np.float32)}),
            ValueError, r"w4a8_dynamic_linear: argument 'bias' must be of shape \[16\]"),
    BadCall("weight_range", lambda: ((fx().xw, fx().ww + 9, np.full(16, 0.01, np.float32)), {}),
            ValueError, r"w4a8_dynamic_linear: argument 'weight' must be int4 codes in \[-8, 7\]"),
    BadCall("x_shape", lambda: ((fx().xw[:, :7], fx().ww, np.full(16, 0.01, np.float32)), {}),
            ValueError, r"w4a8_dynamic_linear: argument 'x' must be of last dimension K = 512"),
    BadCall("quant_matmul_x1_shape", lambda: ((np.ones((3, 30208), BF16), np.ones((16, 30208), np.int8),
                                 np.full((16, 118), 0.01, np.float32)), {}),
            ValueError, r"quant_matmul: argument 'x1' must be K a multiple of 256 below 29576 for a per-group scale"),
    BadCall("other", lambda: ((np.ones((3, 0), BF16), np.ones((8, 0), np.int8), np.ones(8, np.float32)), {}),
            ValueError, r"cannot reshape array of size 0 into shape"),
    BadCall(
        "weight_range_2",
        lambda: ((np.full((2, 256), 1.0, BF16), np.full((8, 256), 9, np.int8), np.full((8,), 1.0, F32)), {}),
        ValueError,
        r"w4a8_dynamic_linear: argument 'weight' must be int4 codes in \[-8, 7\]",
    ),
    BadCall(
        "weight_scale_shape_2",
        lambda: ((np.full((2, 256), 1.0, BF16), np.full((8, 256), 1, np.int8), np.full((8, 3), 1.0, F32)), {}),
        ValueError,
        r"w4a8_dynamic_linear: argument 'weight_scale' must be per channel \[8\] / \[8, 1\], or per group of 256 \[8, K/256\]",
    ),
    BadCall(
        "x_shape_2",
        lambda: ((np.full((2, 128), 1.0, BF16), np.full((8, 256), 1, np.int8), np.full((8,), 1.0, F32)), {}),
        ValueError,
        r"w4a8_dynamic_linear: argument 'x' must be of last dimension K = 256",
    ),
    BadCall("offset_overflows_fp32", lambda: ((np.ones((2, 16), BF16), np.full((8, 16), 7, np.int8),
                                               np.full(8, 3e37, np.float32)), {}),
            ValueError, r"quant_matmul: argument 'offset' must be finite .* Inf at index \(0,\)",
            "The A8W4 yOffset 8 * sum_k w * s = 8 * 112 * 3e37 overflows fp32: quant_matmul refuses the Inf offset."),
    BadCall("x_nan", lambda: ((np.where(np.arange(32).reshape(2, 16) == 19, np.nan, 1.0).astype(BF16),
                               np.full((8, 16), 7, np.int8), np.full(8, 0.01, np.float32)), {}),
            ValueError, r"w4a8_dynamic_linear: argument 'x' must be finite .* NaN at index \(1, 3\)"),
]


def _bench_inputs(p, rng):
    """bf16 x quantized per token, int4 codes [N, K], one scale per 256 of K."""
    m, k, n = p["m"], p["k"], p["n"]
    x = normal32(rng, (m, k)).astype(BF16)
    w = rng.integers(-8, 8, size=(n, k)).astype(np.int8)
    ws = rng.uniform(1e-3, 1e-2, size=(n, k // 256)).astype(np.float32)
    return (x, w, ws), {}


def bench_case(m: int, k: int = _dsv4.H, n: int = 2 * _dsv4.I, tags=()) -> BenchCase:
    return BenchCase(OP, f"M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n}, _bench_inputs, work=2.0 * m * k * n, tags=tags)


declare(OpDecl(
    name=OP, family="lowbit", params=_params, build=_build, outputs=outputs(("y", "float")),
    numerics_fields=("round_mode", "quant_codes", "scale_out", "fp19_scale"), cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(m, tags=bench_tags(m)) for m in bench_ms(full)],
    description="W4A8_DYNAMIC Linear: dynamic int8 activations x int4 weights"))
