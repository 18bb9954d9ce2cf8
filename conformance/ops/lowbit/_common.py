"""What the low-bit declarations share: their parameter strategies (INT4 group, MX, NVFP4, FP8 block),
the fixtures of their bad calls, and the bench helpers."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...declare import BenchCase
from ...values import float_tensor, rng_for

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
F32 = np.float32


def f32(*v) -> np.ndarray:
    return np.array(v, np.float32)


def x_of(p, shape, dtype="float32", dist=None):
    """The case's float input of ``shape`` (its own generator stream, salt 1)."""
    return float_tensor(rng_for(p["seed"], 1), shape, dtype, dist or p.get("dist", "gaussian"))


def _random(shape, dtype):
    """An array of ``shape`` and ``dtype`` whose values do not matter to the error it provokes (integers in
    [-100, 100), booleans, or N(0, 1) floats; seeded)."""
    rng = np.random.default_rng(0)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
    if dtype == bool:
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


# ---------------------------------------------------------------------------------------------
# INT4 group-wise (W4A16)

@st.composite
def int4_params(draw):
    g = draw(st.sampled_from((32, 64, 128)))
    return {"n": draw(S.size(24, big=())), "groups": draw(st.integers(1, 4)), "g": g,
            "scheme": draw(st.sampled_from(("gptq_sym", "absmax_sym", "asym"))),
            "scale_dtype": draw(st.sampled_from(("float16", "bfloat16"))),
            "dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))),
            "dist": draw(st.sampled_from(("gaussian", "outlier_channels", "zero_rows", "ties"))),
            "seed": draw(S.seed())}


@st.composite
def int4_any_shape_params(draw):
    """Any group size (1, 8, 32), zero groups (K = 0), a leading batch dim, fp32 scales too, weights of
    magnitude 10^-3 .. 10^2."""
    return {"n": draw(st.sampled_from((1, 7, 17))), "groups": draw(st.integers(0, 3)),
            "g": draw(st.sampled_from((1, 8, 32))), "lead": list(draw(st.sampled_from(((), (2,))))),
            "dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))),
            "scheme": draw(st.sampled_from(("gptq_sym", "absmax_sym", "asym"))),
            "scale_dtype": draw(st.sampled_from(("float16", "bfloat16", "float32"))), "seed": draw(S.seed())}


def int4_weight(p):
    if "lead" in p:
        rng = rng_for(p["seed"])
        w = (rng.standard_normal(tuple(p["lead"]) + (p["n"], p["g"] * p["groups"])) * 10.0 ** rng.uniform(-3, 2))
        return w.astype(np.float32).astype(w8a8.dtypes.resolve(p["dtype"]))
    return x_of(p, (p["n"], p["g"] * p["groups"]), p["dtype"])


# ---------------------------------------------------------------------------------------------
# MX

@st.composite
def mx_params(draw):
    elem = draw(st.sampled_from(("e2m1", "e2m1", "e4m3", "e5m2")))
    return {"rows": draw(S.size(16, big=())), "blocks": draw(st.integers(1, 6)), "elem": elem,
            "mode": draw(st.sampled_from(("floor", "rceil", "even", "ceil"))),
            "dtype": draw(st.sampled_from(("float32", "bfloat16"))), "dist": draw(S.float_dist()),
            "seed": draw(S.seed())}


def mx_x(p):
    return x_of(p, (p["rows"], 32 * p["blocks"]), p["dtype"], p["dist"])


# ---------------------------------------------------------------------------------------------
# NVFP4

@st.composite
def nvfp4_params(draw):
    return {"rows": draw(S.size(16, big=())), "blocks": draw(st.integers(1, 8)),
            "convention": draw(st.sampled_from(("torchao", "vllm"))),
            "dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def nvfp4_scale_kw(p, x):
    """The tensor scale of a case in its convention: torchao's S = amax / (448 * 6), or vLLM's 1 / S."""
    amax = float(np.max(np.abs(x.astype(np.float32)))) or 1.0
    s = np.float32(amax / (448.0 * 6.0))
    return {"per_tensor_scale": s} if p["convention"] == "torchao" else {"global_scale": np.float32(1.0) / s}


def nvfp4_x(p):
    return x_of(p, (p["rows"], 16 * p["blocks"]), p["dtype"])


# ---------------------------------------------------------------------------------------------
# FP8 block

@st.composite
def fp8_params(draw):
    return {"n": draw(S.size(300, big=())), "k": draw(S.size(300, big=())),
            "fmt": draw(st.sampled_from((None, "ue8m0"))), "dtype": draw(st.sampled_from(("float32", "bfloat16"))),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def fp8_w(p):
    return x_of(p, (p["n"], p["k"]), p["dtype"])


# the FP8 named cases' inputs
FP8_ROW = np.array([448, -448, 2**-9, 2**-10, 3 * 2**-10, 0.0, -0.0, 1.0625, 1.1875, 17, 19], np.float32)[None, :]
FP8_ROW_CODES = np.array([[0x7E, 0xFE, 0x01, 0x00, 0x02, 0x00, 0x80, 0x38, 0x3A, 0x58, 0x5A]], np.uint8).view(E4M3)
FP8_ROW_WHY = ("amax 448 -> s = 448 / 448 = 1, so the codes are the E4M3 RNE of the values themselves: 448 -> 0x7E, "
               "-448 -> 0xFE, 2^-9 (smallest subnormal) -> 0x01, 2^-10 (tie 0 / 2^-9) -> 0x00, 3 * 2^-10 (tie 2^-9 / "
               "2^-8) -> 0x02, 0 -> 0x00, -0 -> 0x80, 1.0625 (tie 1 / 1.125) -> 0x38, 1.1875 (tie 1.125 / 1.25) -> "
               "0x3A, 17 (tie 16 / 18) -> 0x58, 19 (tie 18 / 20) -> 0x5A.")
FP8_ODD_SHAPES = (((1, 1), (128, 128)), ((129, 257), (128, 128)), ((3, 17, 33), (16, 8)), ((300, 5), (7, 1)))


def fp8_odd_weight(shape):
    """Weights of magnitudes 10^-3 .. 10^3 per element at an odd shape (a fixed seed)."""
    rng = np.random.default_rng(8)
    return (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# fixtures of the bad calls (built once, on first use)

@functools.cache
def fx() -> SimpleNamespace:
    """Operands of every low-bit format, from one generator (the old torch-cpu test's fixtures)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    q, s, z = w8a8.int4_group_quantize(x, 32, scheme="asym")
    xb = rng.standard_normal((3, 64)).astype(np.float16)
    w8 = rng.integers(-8, 8, (64, 16)).astype(np.int8)
    x1 = w8a8.pack_int4(rng.integers(-8, 8, (4, 64)).astype(np.int8))
    x2 = w8a8.convert_weight_to_int4pack(rng.integers(-8, 8, (64, 16)).astype(np.int32))
    xi8 = rng.integers(-128, 127, (4, 512)).astype(np.int8)
    x2b = w8a8.convert_weight_to_int4pack(rng.integers(-8, 8, (512, 16)).astype(np.int32))
    sc = w8a8.trans_quant_param(np.full((2, 16), 0.01, np.float32))
    pt = np.ones((4, 1), np.float32)
    xw = rng.standard_normal((3, 512)).astype(BF16)
    ww = rng.integers(-8, 8, (16, 512)).astype(np.int8)
    d, s2 = w8a8.mx_quantize(x)
    nd, ns = w8a8.nvfp4_quantize(x, per_tensor_scale=np.float32(0.01))
    wq, ws = w8a8.fp8_block_quantize(x)
    aq, as_ = w8a8.per_token_group_quant_fp8(x)
    return SimpleNamespace(x=x, q=q, s=s, z=z, xb=xb, w8=w8, x1=x1, x2=x2, xi8=xi8, x2b=x2b, sc=sc, pt=pt, xw=xw,
                           ww=ww, d=d, s2=s2, nd=nd, ns=ns, wq=wq, ws=ws, aq=aq, as_=as_, one=np.float32(1))


# ---------------------------------------------------------------------------------------------
# bench: every case a GEMM [M, K] x [K, N] at DeepSeek-V4-Flash's shared-expert W13 shape

def bench_ms(full: bool) -> tuple[int, ...]:
    """Decode M = 16 in the quick set; every DSV4 M in a full run (the float64 formats stop at 512: prefill
    M = 4096 would take minutes per round in the golden)."""
    from .. import _dsv4

    return _dsv4.DECODE_M + _dsv4.PREFILL_M if full else (16,)


def bench_tags(m: int) -> tuple[str, ...]:
    return ("dsv4", "lowbit") + (("quick",) if m == 16 else ())


def normal32(rng, shape, scale=1.0):
    return rng.standard_normal(shape).astype(np.float32) * np.float32(scale)


def block_scaled_case(op: str, label: str, m: int, k: int, n: int, quantize, tags) -> BenchCase:
    """A bench case of a GEMM of two block-scaled operands, ``quantize(a [M, K], b [N, K])`` giving them
    (a module-level function, so that the case pickles)."""
    return BenchCase(op, label, {"m": m, "k": k, "n": n}, functools.partial(block_scaled_inputs, quantize=quantize),
                     work=2.0 * m * k * n, tags=tags, compute="fp64")


def block_scaled_inputs(p, rng, quantize):
    """The bench inputs of a GEMM of two block-scaled operands: ``quantize(a [M, K], b [N, K])`` gives the
    operands, bf16 output. The block-scaled float formats are computed exactly in float64 by the golden and
    torch-cpu (``w8a8.lowbit.mx``), so their cases are measured against the fp64 ceiling (``compute="fp64"``)."""
    operands = quantize(normal32(rng, (p["m"], p["k"])), normal32(rng, (p["n"], p["k"]), 0.02))
    return operands, {"output_dtype": "bfloat16"}
