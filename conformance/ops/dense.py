"""Registry entries of the dense W8A8 ops (quantizers, quant_matmul, layout, the two Linear paths)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8
from w8a8 import dtypes as _dt

from .. import strategies as S
from ..registry import OpSpec, Output, Stage, register
from ..values import float_tensor, int8_tensor, positive_scales, rng_for

QUANT_FIELDS = ("round_mode", "quant_codes", "scale_out", "zero_row", "saturate")
MATMUL_FIELDS = ("fp19_scale", "fp19_round_mode", "int32_bias", "epilogue_order", "requant_clamp9", "round_mode",
                 "saturate")


def _out(*pairs) -> tuple[Output, ...]:
    return tuple(Output(n, k) for n, k in pairs)


def _f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# dynamic_quant / dynamic_quant_asymmetric

@st.composite
def _dynamic_quant_params(draw):
    dst = draw(st.sampled_from(("int8", "int8", "int4")))
    h = draw(S.multiple_of(8, 16, big=(1024,))) if dst == "int4" else draw(S.size(128, big=(1025,)))
    lead = draw(S.lead_shape())
    smooth = draw(st.sampled_from(("none", "none", "vector", "group")))
    groups = None
    if smooth == "group":
        rows = int(np.prod(lead))
        e = draw(st.integers(1, 6))
        cuts = sorted(draw(st.lists(st.integers(0, rows), min_size=e - 1, max_size=e - 1)))
        groups = cuts + [rows]
    return {"lead": lead, "h": h, "dtype": draw(S.half_dtype()), "dst_type": dst, "smooth": smooth,
            "group_index": groups, "dist": draw(S.float_dist()), "seed": draw(S.seed())}


def _dynamic_quant_build(p):
    rng = rng_for(p["seed"])
    x = float_tensor(rng, tuple(p["lead"]) + (p["h"],), p["dtype"], p["dist"])
    kw = {"dst_type": p["dst_type"]}
    if p["dist"] == "extremes":  # smoothing would overflow fp32 on top of near-max values
        p = {**p, "smooth": "none"}
    if p["smooth"] == "vector":
        kw["smooth_scales"] = positive_scales(rng, (p["h"],), p["dtype"], low=0.25, high=4.0)
    elif p["smooth"] == "group":
        gi = np.asarray(p["group_index"], np.int32)
        kw["smooth_scales"] = positive_scales(rng, (gi.size, p["h"]), p["dtype"], low=0.25, high=4.0)
        kw["group_index"] = gi
    return (x,), kw


def _smoothed(args, kwargs) -> np.ndarray:
    x = args[0]
    xf = _f64(x).reshape(-1, x.shape[-1])
    smooth = kwargs.get("smooth_scales")
    if smooth is not None:
        if kwargs.get("group_index") is None:
            sf = _f64(smooth)[None, :]
        else:
            gi = kwargs["group_index"].astype(np.int64)
            sf = _f64(smooth)[np.searchsorted(gi, np.arange(xf.shape[0]), side="right")]
        xf = (xf.astype(np.float32) * sf.astype(np.float32)).astype(np.float64)
    return xf


def _dynamic_quant_pre_round(args, kwargs, numerics):
    xf = _smoothed(args, kwargs)
    qmax = 7.0 if kwargs.get("dst_type") == "int4" else 127.0
    with np.errstate(divide="ignore", invalid="ignore"):
        pre = xf * qmax / np.abs(xf).max(axis=-1, keepdims=True)
    return {"y": pre.reshape(args[0].shape)}


register(OpSpec(
    name="dynamic_quant", family="dense", params=_dynamic_quant_params, build=_dynamic_quant_build,
    outputs=_out(("y", "int"), ("scale", "scale")), numerics_fields=QUANT_FIELDS,
    stages=(Stage("scale", "scale", lambda b, a, k, up: b.dynamic_quant(*a, **k)[1]),
            Stage("codes", "int", lambda b, a, k, up: b.dynamic_quant(*a, **k)[0])),
    pre_round=_dynamic_quant_pre_round,
    description="per-token symmetric int8/int4 quantization (npu_dynamic_quant)"))


def _asym_pre_round(args, kwargs, numerics):
    xf = _smoothed(args, kwargs)
    int4 = kwargs.get("dst_type") == "int4"
    levels, top = (15.0, 7.0) if int4 else (255.0, 127.0)
    hi = xf.max(axis=-1, keepdims=True)
    lo = xf.min(axis=-1, keepdims=True)
    scale = np.maximum((hi - lo) / levels, 1e-12)
    return {"y": (xf / scale + (top - hi / scale)).reshape(args[0].shape)}


register(OpSpec(
    name="dynamic_quant_asymmetric", family="dense", params=_dynamic_quant_params, build=_dynamic_quant_build,
    outputs=_out(("y", "int"), ("scale", "scale"), ("offset", "scale")), numerics_fields=("round_mode", "zero_row",
                                                                                          "saturate"),
    pre_round=_asym_pre_round,
    description="per-token asymmetric int8/int4 quantization (npu_dynamic_quant_asymmetric)"))


# ---------------------------------------------------------------------------------------------
# quantize / dequantize / anti_quant

@st.composite
def _quantize_params(draw):
    div_mode = draw(st.booleans())
    ndim = draw(st.integers(1, 3)) if div_mode else draw(st.integers(2, 3))
    shape = [draw(S.size(24, big=())) for _ in range(ndim - 1)] + [draw(S.size(64, big=(1025,)))]
    if div_mode:
        dtype_out = draw(st.sampled_from(("int8", "uint8", "int32")))
        axis = draw(st.integers(-ndim, ndim - 1))
        x_dtype = draw(st.sampled_from(("float32", "float16", "bfloat16")))
        scale_dtype = draw(st.sampled_from(("float32", "bfloat16")))
        zp = draw(st.sampled_from((None, "int8", "uint8", "int32", "bfloat16", "float32")))
    else:
        dtype_out = draw(st.sampled_from(("int8", "int8", "int4")))
        if dtype_out == "int4":
            shape[-1] = draw(S.multiple_of(8, 16))
        axis = draw(st.sampled_from((-1, -2, 0, 1, 2)))
        x_dtype = draw(st.sampled_from(("float32", "float16", "bfloat16")))
        scale_dtype = x_dtype
        zp = draw(st.sampled_from((None, x_dtype)))
    return {"shape": shape, "div_mode": div_mode, "dtype": dtype_out, "axis": axis, "x_dtype": x_dtype,
            "scale_dtype": scale_dtype, "zero_points": zp, "per_tensor": draw(st.booleans()),
            "dist": draw(S.float_dist(edges=False)), "seed": draw(S.seed())}


def _channel_axis(p) -> int:
    nd = len(p["shape"])
    if p["div_mode"]:
        return p["axis"] % nd
    return nd - 2 if p["axis"] == -2 else nd - 1


def _quantize_build(p):
    rng = rng_for(p["seed"])
    x = float_tensor(rng, tuple(p["shape"]), p["x_dtype"], p["dist"])
    amax = float(np.max(np.abs(_f64(x)))) if x.size else 1.0
    amax = amax if np.isfinite(amax) and amax > 0 else 1.0
    ax = _channel_axis(p)
    n = 1 if p["per_tensor"] else p["shape"][ax]
    # scale so that |x| maps to about +-160 codes: the saturation edge is exercised
    target = 160.0 if p["dtype"] != "int4" else 10.0
    base = target / amax if not p["div_mode"] else amax / target
    scales = (positive_scales(rng, (n,), np.float32, low=0.5, high=1.5) * np.float32(base)).astype(p["scale_dtype"])
    kw = {"dtype": p["dtype"], "axis": p["axis"], "div_mode": p["div_mode"]}
    zp = None
    if p["zero_points"] is not None:
        zdt = np.dtype(_dt.resolve(p["zero_points"]))
        if zdt.kind in "iu":
            lo, hi = (0, 64) if zdt == np.uint8 else (-32, 32)
            zp = rng.integers(lo, hi, size=(n,)).astype(zdt)
        else:
            zp = (rng.uniform(-20, 20, size=(n,)).astype(np.float32)).astype(zdt)
    return (x, scales, zp), kw


def _quantize_pre_round(args, kwargs, numerics):
    x, scales, zp = args
    nd = x.ndim
    ax = (kwargs["axis"] % nd) if kwargs["div_mode"] else (nd - 2 if kwargs["axis"] == -2 else nd - 1)
    shape = [1] * nd
    shape[ax] = scales.shape[0]
    s = _f64(scales).reshape(shape)
    z = 0.0 if zp is None else _f64(zp).reshape(shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        pre = _f64(x) / s + z if kwargs["div_mode"] else _f64(x) * s + z
    return {"y": pre}


register(OpSpec(
    name="quantize", family="dense", params=_quantize_params, build=_quantize_build,
    outputs=_out(("y", "int")), numerics_fields=("round_mode", "saturate", "zero_point_position"),
    pre_round=_quantize_pre_round, description="static per-channel quantization (npu_quantize, both div_mode)"))


@st.composite
def _dequantize_params(draw):
    rows, n = draw(S.size(32, big=())), draw(S.size(64, big=(1025,)))
    return {"rows": rows, "n": n, "y_dtype": draw(st.sampled_from(("int8", "uint8", "int32"))),
            "mode": draw(st.sampled_from(("channel", "row"))), "zero_point": draw(st.booleans()),
            "output_dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))), "seed": draw(S.seed())}


def _dequantize_build(p):
    rng = rng_for(p["seed"])
    dt = np.dtype(p["y_dtype"])
    lo, hi = (0, 256) if dt == np.uint8 else ((-128, 128) if dt == np.int8 else (-(1 << 20), 1 << 20))
    y = rng.integers(lo, hi, size=(p["rows"], p["n"])).astype(dt)
    if p["mode"] == "row":
        scale = positive_scales(rng, (p["rows"],))
        zp = rng.integers(-8, 8, size=(p["rows"],)).astype(np.float32) if p["zero_point"] else None
        return (y, scale, zp), {"axis": None, "output_dtype": p["output_dtype"]}
    scale = positive_scales(rng, (p["n"],))
    zp = rng.integers(-8, 8, size=(p["n"],)).astype(np.float32) if p["zero_point"] else None
    return (y, scale, zp), {"axis": -1, "output_dtype": p["output_dtype"]}


register(OpSpec(
    name="dequantize", family="dense", params=_dequantize_params, build=_dequantize_build,
    outputs=_out(("x", "float")), description="(y - zero_point) * scale"))


@st.composite
def _anti_quant_params(draw):
    int4 = draw(st.booleans())
    n = draw(S.multiple_of(8, 16)) if int4 else draw(S.size(64, big=(1025,)))
    return {"rows": draw(S.size(32, big=())), "n": n, "int4": int4, "per_tensor": draw(st.booleans()),
            "scale_dtype": draw(st.sampled_from(("float32", "bfloat16"))), "offset": draw(st.booleans()),
            "dst_dtype": draw(st.sampled_from(("float16", "bfloat16"))), "seed": draw(S.seed())}


def _anti_quant_build(p):
    rng = rng_for(p["seed"])
    k = 1 if p["per_tensor"] else p["n"]
    scale = positive_scales(rng, (k,), p["scale_dtype"], low=1e-3, high=1.0)
    offset = rng.integers(-8, 8, size=(k,)).astype(np.float32).astype(p["scale_dtype"]) if p["offset"] else None
    if p["int4"]:
        x = w8a8.pack_int4(rng.integers(-8, 8, size=(p["rows"], p["n"])).astype(np.int8))
        return (x, scale), {"offset": offset, "dst_dtype": p["dst_dtype"], "src_dtype": "int4"}
    x = int8_tensor(rng, (p["rows"], p["n"]))
    return (x, scale), {"offset": offset, "dst_dtype": p["dst_dtype"]}


register(OpSpec(
    name="anti_quant", family="dense", params=_anti_quant_params, build=_anti_quant_build,
    outputs=_out(("y", "float")), description="weight dequantization (x + offset) * scale (npu_anti_quant)"))


# ---------------------------------------------------------------------------------------------
# trans_quant_param

@st.composite
def _tqp_params(draw):
    return {"n": draw(S.size(64, big=())), "offset": draw(st.sampled_from(("none", "vector", "scalar"))),
            "round_mode": draw(st.sampled_from((0, 1))), "two_d": draw(st.booleans()), "seed": draw(S.seed())}


def _tqp_build(p):
    rng = rng_for(p["seed"])
    raw = rng.integers(0, 1 << 32, size=(p["n"],), dtype=np.uint64).astype(np.uint32)
    # random mantissas, exponents in a scale-like range, plus edge values (carry, zero, subnormal)
    exp = rng.integers(100, 135, size=p["n"]).astype(np.uint32)
    bits = (raw & np.uint32(0x807FFFFF)) | (exp << np.uint32(23))
    scale = bits.view(np.float32).copy()
    edges = np.array([1.0, 0.0123456, np.float32(1.9999999), 1e-40, 0.0, 3.0e38], np.float32)
    scale[: min(p["n"], edges.size)] = edges[: min(p["n"], edges.size)]
    if p["two_d"]:
        scale = scale.reshape(1, -1)
    kw = {"round_mode": p["round_mode"]}
    if p["offset"] == "vector":
        off = rng.uniform(-300, 300, size=scale.shape).astype(np.float32)
        off.flat[0] = 2.5
        return (scale, off), kw
    if p["offset"] == "scalar" and not p["two_d"]:
        return (scale, np.array([rng.uniform(-20, 20)], np.float32)), kw
    return (scale,), kw


register(OpSpec(
    name="trans_quant_param", family="dense", params=_tqp_params, build=_tqp_build,
    outputs=_out(("packed", "int")), numerics_fields=(),
    description="FP19 + bit-46 + 9-bit offset packing (npu_trans_quant_param)"))


# ---------------------------------------------------------------------------------------------
# int_matmul / quant_matmul

@st.composite
def _int_matmul_params(draw):
    return {"m": draw(S.size(48, big=())), "k": draw(S.size(96, big=(1025, 4097, 5000))),
            "n": draw(S.size(48, big=(1025,))), "batch": draw(st.sampled_from(([], [2], [2, 1]))),
            "dist_a": draw(S.int8_dist()), "dist_b": draw(S.int8_dist()), "seed": draw(S.seed())}


def _int_matmul_build(p):
    rng = rng_for(p["seed"])
    a = int8_tensor(rng, tuple(p["batch"]) + (p["m"], p["k"]), p["dist_a"])
    b = int8_tensor(rng, (p["k"], p["n"]), p["dist_b"])
    return (a, b), {}


register(OpSpec(
    name="int_matmul", family="dense", params=_int_matmul_params, build=_int_matmul_build,
    outputs=_out(("acc", "int")), description="exact int8 x int8 -> int32 GEMM"))

# (output, scale dtype, bias dtype, offset?, pertoken?) rows of spec/ascend-ops.md §3.3
QMM_COMBOS = (
    ("float16", "int64", None, False, False), ("float16", "int64", "int32", False, False),
    ("float16", "float32", "int32", False, False), ("float16", "float32", None, False, False),
    ("int8", "int64", None, False, False), ("int8", "float32", "int32", True, False),
    ("int8", "int64", "int32", True, False), ("int8", "float32", None, False, False),
    ("bfloat16", "float32", None, False, False), ("bfloat16", "bfloat16", "int32", False, False),
    ("bfloat16", "float32", "float32", False, True), ("bfloat16", "bfloat16", "bfloat16", False, True),
    ("bfloat16", "float32", "int32", False, True), ("bfloat16", "bfloat16", None, False, True),
    ("float16", "float32", None, False, True), ("float16", "float32", "float16", False, True),
    ("float16", "float32", "int32", False, True), ("float16", "float32", "float32", False, True),
    ("int32", "float32", None, False, False), ("int32", "bfloat16", "int32", False, False),
)


@st.composite
def _quant_matmul_params(draw):
    combo = draw(st.sampled_from(QMM_COMBOS))
    return {"combo": list(combo), "m": draw(S.size(48, big=())), "k": draw(S.size(96, big=(1025, 4097))),
            "n": draw(S.size(48, big=(1025,))), "batch": draw(st.sampled_from(([], [], [2], [2, 1]))),
            "per_tensor": draw(st.booleans()), "dist_a": draw(S.int8_dist()), "dist_b": draw(S.int8_dist()),
            "seed": draw(S.seed())}


def _quant_matmul_build(p):
    out, scale_dt, bias_dt, offset, pertoken = p["combo"]
    rng = rng_for(p["seed"])
    m, k, n = p["m"], p["k"], p["n"]
    x1 = int8_tensor(rng, tuple(p["batch"]) + (m, k), p["dist_a"])
    x2 = int8_tensor(rng, (k, n), p["dist_b"])
    ns = 1 if p["per_tensor"] else n
    # keep |acc * scale| in a sensible range for the output dtype
    acc_mag = max(1.0, float(np.sqrt(k)) * 128 * 40)
    scale32 = positive_scales(rng, (ns,), np.float32, low=0.2 / acc_mag, high=5.0 / acc_mag)
    kw = {"output_dtype": out}
    if out == "int8":
        scale32 = positive_scales(rng, (ns,), np.float32, low=20 / acc_mag, high=400 / acc_mag)
    if pertoken:
        kw["pertoken_scale"] = positive_scales(rng, (m,), np.float32, low=1e-3, high=1e-1)
        scale32 = (scale32 * np.float32(100)).astype(np.float32)
    off = rng.uniform(-40, 40, size=(ns,)).astype(np.float32) if offset else None
    if scale_dt == "int64":
        scale = w8a8.trans_quant_param(scale32, off) if off is not None else w8a8.trans_quant_param(scale32)
        off = None if p["seed"] % 2 else off  # the offset comes either packed or as its own argument
    else:
        scale = scale32.astype(scale_dt)
    if off is not None:
        kw["offset"] = off
    if bias_dt == "int32":
        kw["bias"] = rng.integers(-5000, 5000, size=(n,)).astype(np.int32)
    elif bias_dt is not None:
        kw["bias"] = rng.standard_normal(n).astype(np.float32).astype(bias_dt)
    return (x1, x2, scale), kw


def _acc_stage(b, a, k, up):
    return b.quant_matmul(a[0], a[1], np.ones(1, np.float32), output_dtype="int32")


register(OpSpec(
    name="quant_matmul", family="dense", params=_quant_matmul_params, build=_quant_matmul_build,
    outputs=_out(("y", "float")), numerics_fields=MATMUL_FIELDS,
    stages=(Stage("acc", "int", _acc_stage), Stage("y", "float", lambda b, a, k, up: b.quant_matmul(*a, **k))),
    description="int8 GEMM + dequant epilogue, every dtype combination (npu_quant_matmul)",
    dtypes_of=lambda p: {"output_dtype": p["combo"][0], "scale": p["combo"][1], "bias": p["combo"][2]}))


# ---------------------------------------------------------------------------------------------
# layout

@st.composite
def _nz_params(draw):
    return {"shape": [draw(st.sampled_from(([], [], [3])))][0] + [draw(S.size(48, big=())), draw(S.size(80, big=()))],
            "dtype": draw(st.sampled_from(("int8", "bfloat16", "float16", "float32", "int32"))), "seed": draw(S.seed())}


def _nz_tensor(p):
    rng = rng_for(p["seed"])
    dt = np.dtype(_dt.resolve(p["dtype"]))
    if dt.kind in "iu":
        return rng.integers(-100, 100, size=tuple(p["shape"])).astype(dt)
    return float_tensor(rng, tuple(p["shape"]), dt, "gaussian")


register(OpSpec(
    name="format_cast_nz", family="dense", params=_nz_params, build=lambda p: ((_nz_tensor(p),), {}),
    outputs=_out(("w_nz", "scale")), description="ND -> FRACTAL_NZ storage (npu_format_cast 29)",
    mistrust_degenerate=False))

register(OpSpec(
    name="nz_to_nd", family="dense", params=_nz_params,
    build=lambda p: ((w8a8.format_cast_nz(_nz_tensor(p)), tuple(p["shape"])), {}),
    outputs=_out(("w", "scale")), description="FRACTAL_NZ storage -> ND"))


# ---------------------------------------------------------------------------------------------
# the Linear paths

@st.composite
def _linear_params(draw):
    return {"lead": draw(S.lead_shape(32)), "k": draw(S.size(96, big=(1025, 4097))), "n": draw(S.size(64, big=(1025,))),
            "dtype": draw(S.half_dtype()), "bias": draw(st.booleans()), "dist": draw(S.float_dist(edges=False)),
            "seed": draw(S.seed())}


def _weights(rng, n, k):
    wf = rng.standard_normal((n, k)).astype(np.float32) * np.float32(0.02)
    return w8a8.quantize_weight_per_channel(wf)


def _dynamic_linear_build(p):
    rng = rng_for(p["seed"])
    x = float_tensor(rng, tuple(p["lead"]) + (p["k"],), p["dtype"], p["dist"])
    w, ws, _ = _weights(rng, p["n"], p["k"])
    bias = rng.standard_normal(p["n"]).astype(np.float32) * np.float32(0.1) if p["bias"] else None
    return (x, w, ws), {"bias": bias}


def _dyn_stage_quant(b, a, k, up):
    return b.dynamic_quant(a[0].reshape(-1, a[0].shape[-1]))


def _dyn_stage_acc(b, a, k, up):
    return b.quant_matmul(up["x_q"], a[1].T, np.ones(1, np.float32), output_dtype="int32")


register(OpSpec(
    name="w8a8_dynamic_linear", family="dense", params=_linear_params, build=_dynamic_linear_build,
    outputs=_out(("y", "float")), numerics_fields=QUANT_FIELDS + MATMUL_FIELDS,
    stages=(Stage("x_scale", "scale", lambda b, a, k, up: _dyn_stage_quant(b, a, k, up)[1]),
            Stage("x_q", "int", lambda b, a, k, up: _dyn_stage_quant(b, a, k, up)[0]),
            Stage("acc", "int", _dyn_stage_acc),
            Stage("y", "float", lambda b, a, k, up: b.w8a8_dynamic_linear(*a, **k))),
    description="W8A8_DYNAMIC Linear: dynamic_quant -> quant_matmul (bf16 scale, per-token)"))


def _static_linear_build(p):
    rng = rng_for(p["seed"])
    x = float_tensor(rng, tuple(p["lead"]) + (p["k"],), p["dtype"], p["dist"])
    w, ws, _ = _weights(rng, p["n"], p["k"])
    s_in, o_in = w8a8.calibrate_activation_per_tensor(x)
    bias = None
    if p["bias"]:  # a float bias of a few thousand dequant steps, so that quant_bias fits int32 at any scale
        deq = (s_in.astype(np.float32) * ws.reshape(-1)).astype(np.float32)
        bias = (rng.uniform(-3000, 3000, p["n"]).astype(np.float32) * deq).astype(np.float32)
    deq, qb = w8a8.static_params(w, ws, s_in, o_in, bias, model_dtype=p["dtype"])
    return (x, w), {"input_scale": s_in, "input_offset": o_in, "deq_scale": deq, "quant_bias": qb}


def _static_stage_xq(b, a, k, up):
    from w8a8.linear import static_activation_params

    x = a[0]
    recip, offset = static_activation_params(x.dtype, k["input_scale"], k["input_offset"], x.shape[-1])
    return b.quantize(x.reshape(-1, x.shape[-1]), recip, offset, dtype="int8", axis=-1, div_mode=False)


register(OpSpec(
    name="w8a8_static_linear", family="dense", params=_linear_params, build=_static_linear_build,
    outputs=_out(("y", "float")), numerics_fields=("round_mode", "saturate") + MATMUL_FIELDS,
    stages=(Stage("x_q", "int", _static_stage_xq),
            Stage("acc", "int", _dyn_stage_acc),
            Stage("y", "float", lambda b, a, k, up: b.w8a8_static_linear(*a, **k))),
    description="static W8A8 Linear: quantize(div_mode=False) -> quant_matmul (deq_scale, quant_bias)"))
