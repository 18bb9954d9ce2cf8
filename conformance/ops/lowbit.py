"""Registry entries of the low-bit formats (INT4 group, W4A16, W4A8, MX, NVFP4, FP8 block).

Codes, packed words and E8M0 scale bytes compare bitwise; fp8 elements and block scales compare in
ULP of their format (bitwise by default); dequantized values and matmul outputs in ULP of their
output dtype.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from .. import corpus
from .. import strategies as S
from ..registry import OpSpec, Output, register
from ..values import float_tensor, rng_for


def _out(*pairs) -> tuple[Output, ...]:
    return tuple(Output(n, k) for n, k in pairs)


def _x(p, shape, dtype="float32", dist=None):
    return float_tensor(rng_for(p["seed"], 1), shape, dtype, dist or p.get("dist", "gaussian"))


# ---------------------------------------------------------------------------------------------
# INT4 group-wise (W4A16)

@st.composite
def _int4_params(draw):
    g = draw(st.sampled_from((32, 64, 128)))
    return {"n": draw(S.size(24, big=())), "groups": draw(st.integers(1, 4)), "g": g,
            "scheme": draw(st.sampled_from(("gptq_sym", "absmax_sym", "asym"))),
            "scale_dtype": draw(st.sampled_from(("float16", "bfloat16"))),
            "dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))),
            "dist": draw(st.sampled_from(("gaussian", "outlier_channels", "zero_rows", "ties"))),
            "seed": draw(S.seed())}


def _int4_weight(p):
    return _x(p, (p["n"], p["g"] * p["groups"]), p["dtype"])


register(OpSpec(
    name="int4_group_quantize", family="lowbit", params=_int4_params,
    build=lambda p: ((_int4_weight(p), p["g"]), {"scheme": p["scheme"], "scale_dtype": p["scale_dtype"]}),
    outputs=_out(("codes", "int"), ("scale", "scale"), ("zero", "int")),
    description="INT4 group-wise weight quantization (GPTQ / absmax symmetric, asymmetric)"))


def _int4_deq_build(p):
    q, s, z = w8a8.int4_group_quantize(_int4_weight(p), p["g"], scheme=p["scheme"], scale_dtype=p["scale_dtype"])
    return (q, s, z), {"output_dtype": p["dtype"]}


register(OpSpec(
    name="int4_group_dequantize", family="lowbit", params=_int4_params, build=_int4_deq_build,
    outputs=_out(("w", "float")), description="INT4 group dequantization q*s / (u-z)*s"))


@st.composite
def _wqbmm_params(draw):
    int4 = draw(st.booleans())
    k = draw(st.sampled_from((64, 128, 256))) if draw(st.booleans()) else draw(S.multiple_of(8, 12))
    mode = draw(st.sampled_from(("tensor", "channel", "group")))
    if mode == "group" and k < 64:
        mode = "channel"
    return {"m": draw(S.size(16, big=())), "k": k, "n": draw(S.multiple_of(8, 8)), "int4": int4, "mode": mode,
            "group": 32, "offset": draw(st.booleans()), "dtype": draw(S.half_dtype()), "bias": draw(st.booleans()),
            "seed": draw(S.seed())}


def _wqbmm_build(p):
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


register(OpSpec(
    name="weight_quant_batchmatmul", family="lowbit", params=_wqbmm_params, build=_wqbmm_build,
    outputs=_out(("y", "float")), description="W8A16 / W4A16 (npu_weight_quant_batchmatmul)"))


@st.composite
def _int4pack_params(draw):
    return {"rows": draw(S.size(24, big=())), "n": draw(S.multiple_of(8, 16)), "seed": draw(S.seed())}


register(OpSpec(
    name="convert_weight_to_int4pack", family="lowbit", params=_int4pack_params,
    build=lambda p: ((rng_for(p["seed"]).integers(-8, 8, size=(p["rows"], p["n"])).astype(np.int32),), {}),
    outputs=_out(("packed", "int")), description="int4 values -> int32 words, LSB first"))


# ---------------------------------------------------------------------------------------------
# W4A8

@st.composite
def _w4a8_params(draw):
    return {"lead": draw(S.lead_shape(16)), "k": draw(st.sampled_from((256, 512))) if draw(st.booleans())
            else draw(S.multiple_of(8, 24)), "n": draw(S.multiple_of(8, 8)), "dtype": draw(S.half_dtype()),
            "per_group": draw(st.booleans()), "bias": draw(st.booleans()),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def _w4a8_build(p):
    rng = rng_for(p["seed"])
    k, n = p["k"], p["n"]
    x = float_tensor(rng, tuple(p["lead"]) + (k,), p["dtype"], p["dist"])
    w = rng.integers(-8, 8, size=(n, k)).astype(np.int8)
    groups = k // 256 if p["per_group"] and k % 256 == 0 else 0
    ws = rng.uniform(1e-3, 1e-2, size=(n, groups) if groups else (n, 1)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if p["bias"] else None
    return (x, w, ws), {"bias": bias}


register(OpSpec(
    name="w4a8_dynamic_linear", family="lowbit", params=_w4a8_params, build=_w4a8_build,
    outputs=_out(("y", "float")), numerics_fields=("round_mode", "quant_codes", "scale_out", "fp19_scale"),
    description="W4A8_DYNAMIC Linear: dynamic int8 activations x int4 weights"))


@st.composite
def _qmm_int4_params(draw):
    return {"m": draw(S.size(16, big=())), "k": draw(S.multiple_of(8, 24)), "n": draw(S.multiple_of(8, 8)),
            "out": draw(st.sampled_from(("float16", "bfloat16"))), "seed": draw(S.seed())}


def _qmm_int4_build(p):
    rng = rng_for(p["seed"])
    m, k, n = p["m"], p["k"], p["n"]
    x1 = w8a8.pack_int4(rng.integers(-8, 8, size=(m, k)).astype(np.int8))
    x2 = w8a8.convert_weight_to_int4pack(rng.integers(-8, 8, size=(k, n)).astype(np.int32))
    scale = rng.uniform(1e-3, 1e-2, size=(n,)).astype(np.float32)
    return (x1, x2, scale), {"pertoken_scale": rng.uniform(0.5, 2.0, size=(m,)).astype(np.float32),
                             "output_dtype": p["out"]}


register(OpSpec(
    name="quant_matmul_int4", family="lowbit", params=_qmm_int4_params, build=_qmm_int4_build,
    outputs=_out(("y", "float")), numerics_fields=("epilogue_order",),
    description="A4W4 quant_matmul on int32-packed int4 operands"))


# ---------------------------------------------------------------------------------------------
# MX

@st.composite
def _mx_params(draw):
    elem = draw(st.sampled_from(("e2m1", "e2m1", "e4m3", "e5m2")))
    return {"rows": draw(S.size(16, big=())), "blocks": draw(st.integers(1, 6)), "elem": elem,
            "mode": draw(st.sampled_from(("floor", "rceil", "even", "ceil"))),
            "dtype": draw(st.sampled_from(("float32", "bfloat16"))), "dist": draw(S.float_dist()),
            "seed": draw(S.seed())}


def _mx_x(p):
    return _x(p, (p["rows"], 32 * p["blocks"]), p["dtype"], p["dist"])


register(OpSpec(
    name="mx_quantize", family="lowbit", params=_mx_params,
    build=lambda p: ((_mx_x(p),), {"elem_dtype": p["elem"], "scale_mode": p["mode"]}),
    outputs=_out(("data", "scale"), ("scale", "int")),
    description="OCP MX quantization (E2M1/E4M3/E5M2 elements, E8M0 scale per 32)"))


def _mx_deq_build(p):
    x = _mx_x(p)
    if p["dist"] == "nan_inf":
        x = np.nan_to_num(x.astype(np.float32), nan=0.0, posinf=1.0, neginf=-1.0).astype(x.dtype)
    d, s = w8a8.mx_quantize(x, elem_dtype=p["elem"], scale_mode=p["mode"])
    return (d, s), {"elem_dtype": p["elem"], "output_dtype": p["dtype"]}


register(OpSpec(
    name="mx_dequantize", family="lowbit", params=_mx_params, build=_mx_deq_build,
    outputs=_out(("x", "float")), description="MX dequantization P * 2^(b - 127)"))


def _mx_mm_build(p):
    rng = rng_for(p["seed"], 2)
    a = float_tensor(rng, (p["rows"], 32 * p["blocks"]), "float32", "gaussian")
    b = float_tensor(rng, (max(1, p["blocks"] * 3), 32 * p["blocks"]), "float32", "gaussian")
    ad, as_ = w8a8.mx_quantize(a, elem_dtype=p["elem"], scale_mode=p["mode"])
    bd, bs = w8a8.mx_quantize(b, elem_dtype=p["elem"], scale_mode=p["mode"])
    return (ad, as_, bd, bs), {"elem_dtype": p["elem"], "output_dtype": p["dtype"]}


register(OpSpec(
    name="mx_matmul", family="lowbit", params=_mx_params, build=_mx_mm_build,
    outputs=_out(("y", "float")), description="block-scaled MX GEMM A @ B^T"))


# ---------------------------------------------------------------------------------------------
# NVFP4

@st.composite
def _nvfp4_params(draw):
    return {"rows": draw(S.size(16, big=())), "blocks": draw(st.integers(1, 8)),
            "convention": draw(st.sampled_from(("torchao", "vllm"))),
            "dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def _nvfp4_scale_kw(p, x):
    amax = float(np.max(np.abs(x.astype(np.float32)))) or 1.0
    s = np.float32(amax / (448.0 * 6.0))
    return {"per_tensor_scale": s} if p["convention"] == "torchao" else {"global_scale": np.float32(1.0) / s}


def _nvfp4_x(p):
    return _x(p, (p["rows"], 16 * p["blocks"]), p["dtype"])


register(OpSpec(
    name="nvfp4_quantize", family="lowbit", params=_nvfp4_params,
    build=lambda p: ((_nvfp4_x(p),), _nvfp4_scale_kw(p, _nvfp4_x(p))),
    outputs=_out(("data", "int"), ("block_scale", "scale")),
    description="NVFP4 (E2M1 + E4M3 per 16 + fp32 tensor scale), both conventions"))


def _nvfp4_deq_build(p):
    x = _nvfp4_x(p)
    kw = _nvfp4_scale_kw(p, x)
    d, s = w8a8.nvfp4_quantize(x, **kw)
    return (d, s), {**kw, "output_dtype": p["dtype"]}


register(OpSpec(
    name="nvfp4_dequantize", family="lowbit", params=_nvfp4_params, build=_nvfp4_deq_build,
    outputs=_out(("x", "float")), description="NVFP4 dequantization q * s_b * S"))


def _nvfp4_mm_build(p):
    rng = rng_for(p["seed"], 3)
    a = float_tensor(rng, (p["rows"], 16 * p["blocks"]), "float32", "gaussian")
    b = float_tensor(rng, (7, 16 * p["blocks"]), "float32", "gaussian")
    sa, sb = np.float32(np.abs(a).max() / 2688), np.float32(np.abs(b).max() / 2688)
    ad, abs_ = w8a8.nvfp4_quantize(a, per_tensor_scale=sa)
    bd, bbs = w8a8.nvfp4_quantize(b, per_tensor_scale=sb)
    return (ad, abs_, bd, bbs, np.float32(sa * sb)), {"output_dtype": "bfloat16" if p["dtype"] == "float32"
                                                      else p["dtype"]}


register(OpSpec(
    name="nvfp4_matmul", family="lowbit", params=_nvfp4_params, build=_nvfp4_mm_build,
    outputs=_out(("y", "float")), description="NVFP4 GEMM alpha * (A @ B^T)"))


@st.composite
def _swizzle_params(draw):
    return {"rows": draw(st.integers(1, 300)), "cols": draw(st.integers(1, 12)), "seed": draw(S.seed())}


register(OpSpec(
    name="swizzle_block_scales", family="lowbit", params=_swizzle_params,
    build=lambda p: ((rng_for(p["seed"]).uniform(0.01, 400, size=(p["rows"], p["cols"])).astype(np.float32)
                      .astype(w8a8.dtypes.float8_e4m3fn),), {}),
    outputs=_out(("swizzled", "scale")), description="the 128x4 block-scale swizzle", mistrust_degenerate=False))


# ---------------------------------------------------------------------------------------------
# FP8 block

@st.composite
def _fp8_params(draw):
    return {"n": draw(S.size(300, big=())), "k": draw(S.size(300, big=())),
            "fmt": draw(st.sampled_from((None, "ue8m0"))), "dtype": draw(st.sampled_from(("float32", "bfloat16"))),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def _fp8_w(p):
    return _x(p, (p["n"], p["k"]), p["dtype"])


register(OpSpec(
    name="fp8_block_quantize", family="lowbit", params=_fp8_params,
    build=lambda p: ((_fp8_w(p),), {"scale_fmt": p["fmt"]}),
    outputs=_out(("weight_q", "float"), ("scale", "scale")),
    description="E4M3 weights with 128x128 block scales (amax/448 or ue8m0)"))

register(OpSpec(
    name="per_token_group_quant_fp8", family="lowbit", params=_fp8_params,
    build=lambda p: ((_fp8_w(p),), {"scale_fmt": p["fmt"]}),
    outputs=_out(("x_q", "float"), ("scale", "scale")),
    description="1x128 per-token-group E4M3 activation quantization"))


def _fp8_deq_build(p):
    q, s = w8a8.fp8_block_quantize(_fp8_w(p), scale_fmt=p["fmt"])
    return (q, s), {"output_dtype": "bfloat16"}


register(OpSpec(
    name="fp8_block_dequantize", family="lowbit", params=_fp8_params, build=_fp8_deq_build,
    outputs=_out(("w", "float")), description="FP8 block dequantization"))


def _fp8_mm_build(p):
    rng = rng_for(p["seed"], 4)
    a = float_tensor(rng, (min(p["n"], 17), p["k"]), "float32", "gaussian")
    aq, as_ = w8a8.per_token_group_quant_fp8(a, scale_fmt=p["fmt"])
    wq, ws = w8a8.fp8_block_quantize(_fp8_w(p), scale_fmt=p["fmt"])
    return (aq, as_, wq, ws), {"output_dtype": "bfloat16"}


register(OpSpec(
    name="fp8_block_matmul", family="lowbit", params=_fp8_params, build=_fp8_mm_build,
    outputs=_out(("y", "float")), description="block-scaled FP8 GEMM with per-128-K fp32 promotion"))


# ---------------------------------------------------------------------------------------------
# named cases (expected bytes derived by hand from the format definitions)

corpus.case("mx_quantize", "floor_clips_rceil_does_not",
            lambda: ((np.array([[7.0] + [0.0] * 31], np.float32),), {"scale_mode": "floor"}),
            {"data": np.array([[0x07] + [0] * 15], np.uint8), "scale": np.array([[127]], np.uint8)},
            "amax 7: FLOOR gives shared_exp = floor(log2 7) - 2 = 0, b = 127, X = 1; 7/1 = 7 is beyond E2M1's max 6 "
            "and saturates to code 7 (= 6). Codes pack low nibble first: byte 0 = 0x07.")

corpus.case("mx_quantize", "rceil_never_clips",
            lambda: ((np.array([[7.0] + [0.0] * 31], np.float32),), {"scale_mode": "rceil"}),
            {"data": np.array([[0x06] + [0] * 15], np.uint8), "scale": np.array([[128]], np.uint8)},
            "RCEIL: X = 2^ceil(log2(7/6)) = 2, b = 128; 7/2 = 3.5 is an E2M1 tie between 3 and 4 and rounds to "
            "the even code 6 (= 4).")

corpus.case("mx_quantize", "zero_block",
            lambda: ((np.zeros((1, 32), np.float32),), {}),
            {"data": np.zeros((1, 16), np.uint8), "scale": np.array([[0]], np.uint8)},
            "An all-zero block gets the smallest scale byte 0 (2^-127) and zero codes (torchao, microxcaling).")

corpus.case("nvfp4_quantize", "block_of_six",
            lambda: ((np.array([[6.0, 3.0, -1.5, 0.5] + [0.0] * 12], np.float32),),
                     {"per_tensor_scale": np.float32(1.0)}),
            {"data": np.array([[0x57, 0x1B] + [0] * 6], np.uint8),
             "block_scale": np.array([[1.0]], np.float32).astype(w8a8.dtypes.float8_e4m3fn)},
            "S = 1, amax 6: s_b = e4m3(6/6/1) = 1. Codes: 6 -> 7, 3 -> 5, -1.5 -> 8|3 = 0xB, 0.5 -> 1; packed low "
            "nibble first: 0x57, 0x1B.")
