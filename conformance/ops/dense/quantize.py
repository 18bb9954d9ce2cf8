"""``quantize`` (npu_quantize): static per-channel / per-tensor quantization, both ``div_mode``
(``x / scale + zero_point``, int8 / uint8 / int32) and ``div_mode=False`` (``x * scale + offset``,
int8 / int4)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from w8a8 import dtypes as _dt

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ...values import float_tensor, int_tensor, literal as a, positive_scales, rng_for
from ... import strategies as S
from ._common import I8, XF, X, f64

OP = "quantize"
X28 = np.ones((2, 8), np.float32)
S8 = np.ones(8, np.float32)


@st.composite
def _params(draw):
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


@st.composite
def _bits_params(draw):
    """Bit-level x, full-rank scale shapes ([1, .., C, .., 1]), scales of fp32-subnormal / half-integer
    magnitudes, int32 outputs pushed to the int32 bounds, and every axis spelling of ``div_mode=False``
    (anything but -2 is the last axis)."""
    shape = list(draw(st.sampled_from(((7,), (1, 16), (3, 17), (2, 3, 8), (17, 1), (2, 1, 5, 8)))))
    nd = len(shape)
    div_mode = draw(st.booleans())
    x_dtype = draw(st.sampled_from(("float32", "float16", "bfloat16")))
    if div_mode:
        dtype_out = draw(st.sampled_from(("int8", "uint8", "int32")))
        axis = draw(st.integers(-nd, nd - 1))
        scale_dtype = draw(st.sampled_from(("float32", "bfloat16")))
        zp = draw(st.sampled_from((None, "int8", "uint8", "int32", "bfloat16", "float32")))
    else:
        dtype_out = draw(st.sampled_from(("int8", "int4") if shape[-1] % 8 == 0 else ("int8",)))
        axis = draw(st.sampled_from((-2, -1, 0, 1, 5) if nd >= 2 else (-1, 0, 3)))
        scale_dtype = x_dtype
        zp = draw(st.sampled_from((None, x_dtype)))
    return {"shape": shape, "div_mode": div_mode, "dtype": dtype_out, "axis": axis, "x_dtype": x_dtype,
            "scale_dtype": scale_dtype, "zero_points": zp, "per_tensor": draw(st.booleans()),
            "full_rank": draw(st.booleans()), "dist": draw(S.bit_dist()),
            "scale_dist": draw(st.sampled_from(("gaussian", "half_integers", "fp32_subnormal"))),
            "zp_dist": draw(st.sampled_from(("half_integers", "gaussian"))), "seed": draw(S.seed())}


def _channel_axis(p) -> int:
    nd = len(p["shape"])
    if p["div_mode"]:
        return p["axis"] % nd
    return nd - 2 if p["axis"] == -2 else nd - 1


def _bits_build(p, rng, x, ax, n):
    """Scales and zero points of the ``bits`` strategy (see :func:`_bits_params`)."""
    nd = len(p["shape"])
    vshape = tuple(n if i == ax else 1 for i in range(nd)) if p["full_rank"] else (n,)
    scale = np.abs(float_tensor(rng, vshape, _dt.resolve(p["scale_dtype"]), p["scale_dist"]))
    if p["dtype"] == "int32":  # reach the int32 bounds
        scale = (scale.astype(np.float32) * np.float32(1e-6)).astype(scale.dtype)
    zp = None
    if p["zero_points"] is not None:
        zdt = np.dtype(_dt.resolve(p["zero_points"]))
        zp = int_tensor(rng, vshape, zdt, full=False) if zdt.kind in "iu" else \
            float_tensor(rng, vshape, zdt, p["zp_dist"])
    return scale, zp


def _build(p):
    rng = rng_for(p["seed"])
    x = float_tensor(rng, tuple(p["shape"]), p["x_dtype"], p["dist"])
    ax = _channel_axis(p)
    n = 1 if p["per_tensor"] else p["shape"][ax]
    kw = {"dtype": p["dtype"], "axis": p["axis"], "div_mode": p["div_mode"]}
    if "full_rank" in p:
        scales, zp = _bits_build(p, rng, x, ax, n)
        return (x, scales, zp), kw
    amax = float(np.max(np.abs(f64(x)))) if x.size else 1.0
    amax = amax if np.isfinite(amax) and amax > 0 else 1.0
    # scale so that |x| maps to about +-160 codes: the saturation edge is exercised
    target = 160.0 if p["dtype"] != "int4" else 10.0
    base = target / amax if not p["div_mode"] else amax / target
    # a tiny amax makes the fp16 / bf16 scale overflow to Inf on purpose (the op's overflow path): quietly
    with np.errstate(over="ignore"):
        scales = (positive_scales(rng, (n,), np.float32, low=0.5, high=1.5) * np.float32(base)).astype(p["scale_dtype"])
    zp = None
    if p["zero_points"] is not None:
        zdt = np.dtype(_dt.resolve(p["zero_points"]))
        if zdt.kind in "iu":
            lo, hi = (0, 64) if zdt == np.uint8 else (-32, 32)
            zp = rng.integers(lo, hi, size=(n,)).astype(zdt)
        else:
            zp = (rng.uniform(-20, 20, size=(n,)).astype(np.float32)).astype(zdt)
    return (x, scales, zp), kw


def _pre_round(args, kwargs, numerics):
    x, scales, zp = args
    nd = x.ndim
    ax = (kwargs["axis"] % nd) if kwargs["div_mode"] else (nd - 2 if kwargs["axis"] == -2 else nd - 1)
    shape = [1] * nd
    shape[ax] = scales.shape[0] if scales.ndim == 1 else scales.shape[ax]
    s = f64(scales).reshape(shape)
    z = 0.0 if zp is None else f64(zp).reshape(shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        pre = f64(x) / s + z if kwargs["div_mode"] else f64(x) * s + z
    return {"y": pre}


_SAT = [[300.0, -300.0, 2.5, -0.5, 1.5, 126.5, -127.5, 0.0]]

CASES = [
    Case("saturation_and_ties_mul", lambda: ((a(_SAT, np.float32), a([1.0], np.float32), None),
                                              {"dtype": "int8", "axis": -1, "div_mode": False}),
         {"y": np.array([[127, -128, 2, 0, 2, 126, -128, 0]], np.int8)},
         "div_mode=False: rint(x * 1 + 0): 300 -> 127 and -300 -> -128 (saturation), 2.5 -> 2, -0.5 -> -0 -> 0, "
         "1.5 -> 2, 126.5 -> 126, -127.5 -> -128 (ties to even)."),
    Case("saturation_and_ties_int4", lambda: ((a(_SAT, np.float32), a([1.0], np.float32), None),
                                               {"dtype": "int4", "axis": -1, "div_mode": False}),
         {"y": np.array([[0x08720287]], np.int32)},
         "int4: the same codes clamp to [-8, 7]: 7, -8, 2, 0, 2, 7, -8, 0 -> nibbles 7 8 2 0 2 7 8 0 from bit 0 up "
         "-> 0x08720287."),
    Case("saturation_uint8_zero_point", lambda: ((a(_SAT, np.float32), a([1.0], np.float32), np.array([1], np.uint8)),
                                                  {"dtype": "uint8", "axis": 1}),
         {"y": np.array([[255, 0, 4, 0, 2, 128, 0, 1]], np.uint8)},
         "div_mode=True, uint8, zero point 1 added before rounding (torch quantize_per_channel: rint(zp + x * "
         "fp32(1/s))): 301 -> 255 and -299 -> 0 (saturated), rint(3.5) = 4, rint(0.5) = 0, rint(2.5) = 2, "
         "rint(127.5) = 128, rint(-126.5) -> 0 (saturated), 0 + 1 = 1."),
    Case("int32_bounds", lambda: ((a([[3e9, -3e9, 2.5, 2147483520.0]], np.float32), a([1.0], np.float32), None),
                                   {"dtype": "int32", "axis": 1}),
         {"y": np.array([[2147483647, -2147483648, 2, 2147483520]], np.int32)},
         "2^31 - 1 is not a float32: the clamp must run in float64 (3e9 -> 2147483647, not -2^31); -3e9 -> -2^31; "
         "2.5 -> 2 (even); 2147483520 is a float32 below 2^31 and passes through."),
    Case("int32_bounds_zero_point", lambda: ((a([[3e9, -3e9, 2.5, 2147483520.0]], np.float32), a([1.0], np.float32),
                                              np.array([7], np.int32)), {"dtype": "int32", "axis": 1}),
         why="The same row with an int32 zero point 7: the sum saturates at the int32 bounds."),
    Case("zero_scale_multiplies", lambda: ((a([[3.0, -2.0, 0.0]], np.float32), a([0.0], np.float32),
                                             a([1.0], np.float32)), {"dtype": "int8", "axis": -1, "div_mode": False}),
         {"y": np.array([[1, 1, 1]], np.int8)},
         "div_mode=False multiplies (AscendQuantV3): rint(x * 0 + 1) = 1 for every finite x. A zero scale is refused "
         "only where the op divides by it (div_mode=True)."),
]



def _nan_at(array, index, value=np.nan):
    array = array.copy()
    array[index] = value
    return array


BAD_CALLS = [
    BadCall("x_dtype", lambda: ((I8, np.float32([1.0])), {}),
            TypeError, r"quantize: argument 'x' must be of dtype float32, float16 or bfloat16"),
    BadCall("x_shape", lambda: ((np.array(1.0, np.float32), np.float32([1.0])), {}),
            ValueError, r"quantize: argument 'x' must be at least 1-D"),
    BadCall("dtype_value", lambda: ((XF, np.float32([1.0])), {"dtype": "float32", "div_mode": False}),
            ValueError, r"quantize: argument 'dtype' must be 'int8'"),
    BadCall("dtype_value_2", lambda: ((XF, np.float32([1.0])), {"dtype": "uint8", "div_mode": False}),
            ValueError, r"quantize: argument 'dtype' must be 'int8'"),
    BadCall("dtype_value_3", lambda: ((XF, np.float32([1.0])), {"dtype": "int4"}),
            ValueError, r"quantize: argument 'dtype' must be 'int8'"),
    BadCall("div_mode_type", lambda: ((XF, np.float32([1.0])), {"div_mode": 1}),
            TypeError, r"quantize: argument 'div_mode' must be a bool"),
    BadCall("axis_type", lambda: ((XF, np.float32([1.0])), {"axis": 1.5}),
            TypeError, r"quantize: argument 'axis' must be an integer"),
    BadCall("axis_value", lambda: ((XF, np.float32([1.0])), {"axis": -3, "div_mode": False}),
            ValueError, r"quantize: argument 'axis' must be >= -2"),
    BadCall("x_shape_2", lambda: ((np.ones(8, np.float32), np.float32([1.0])), {"axis": -2, "div_mode": False}),
            ValueError, r"quantize: argument 'x' must be at least 2-D for axis=-2"),
    BadCall("axis_rank", lambda: ((XF, np.float32([1.0])), {"axis": 2}),
            ValueError, r"quantize: argument 'axis' must be in \[-2, 1\] for a 2-D x"),
    BadCall("scales_dtype", lambda: ((X, np.float32([1.0])), {"div_mode": False, "axis": -1}),
            TypeError, r"quantize: argument 'scales' must be of dtype bfloat16"),
    BadCall("scales_dtype_2", lambda: ((XF, np.float16([1.0])), {}),
            TypeError, r"quantize: argument 'scales' must be of dtype float32 or bfloat16"),
    BadCall("scales_shape", lambda: ((XF, np.ones(5, np.float32)), {"axis": 1}),
            ValueError, r"quantize: argument 'scales' must be of size 16"),
    BadCall("scales_shape_2", lambda: ((XF, np.ones((3, 16), np.float32)), {"axis": 1}),
            ValueError, r"quantize: argument 'scales' must be 1-D of size 16 or 1, or 2-D with 1s outside axis 1"),
    BadCall("zero_points_dtype", lambda: ((XF, np.ones(16, np.float32), np.ones(16, np.int64)), {"axis": 1}),
            TypeError, r"quantize: argument 'zero_points' must be of dtype int8, uint8, int32, bfloat16 or float32"),
    BadCall("zero_points_shape", lambda: ((XF, np.ones(16, np.float32), np.ones(5, np.int8)), {"axis": 1}),
            ValueError, r"quantize: argument 'zero_points' must be of size 16"),
    BadCall(
        "zero_points_dtype_2",
        lambda: ((XF, np.ones(16, np.float32), np.ones(16, np.float16)), {"axis": -1, "div_mode": False}),
        TypeError,
        r"quantize: argument 'zero_points' must be of dtype float32",
    ),
    BadCall("x_nonfinite", lambda: ((XF * np.nan, np.float32([1.0])), {}),
            ValueError, r"quantize: argument 'x' must be finite"),
    BadCall("scales_nonfinite", lambda: ((XF, np.float32([np.inf])), {}),
            ValueError, r"quantize: argument 'scales' must be finite"),
    BadCall("zero_points_nonfinite", lambda: ((XF, np.float32([1.0]), np.float32([np.nan])), {}),
            ValueError, r"quantize: argument 'zero_points' must be finite"),
    BadCall(
        "zero_points_nonfinite_2",
        lambda: ((XF, np.float32([1.0]), np.float32([np.nan])), {"div_mode": False, "axis": -1}),
        ValueError,
        r"quantize: argument 'zero_points' must be finite",
    ),
    BadCall(
        "x_shape_3",
        lambda: ((np.ones((2, 7), np.float32), np.float32([1.0])), {"dtype": "int4", "div_mode": False, "axis": -1}),
        ValueError,
        r"quantize: argument 'x' must be of last dimension a multiple of 8 for int4 output",
    ),
    BadCall("x_dtype_2", lambda: ((X28.astype(np.int8), S8), {}),
            TypeError, r"quantize: argument 'x' must be of dtype float32, float16 or bfloat16"),
    BadCall("x_list", lambda: ((X28.tolist(), S8), {}),
            TypeError, r"quantize: argument 'x' must be a numpy\.ndarray"),
    BadCall("x_shape_4", lambda: ((np.ones((), np.float32), S8), {}),
            ValueError, r"quantize: argument 'x' must be at least 1-D"),
    BadCall("scales_dtype_3", lambda: ((X28, S8.astype(np.float16)), {}),
            TypeError, r"quantize: argument 'scales' must be of dtype float32 or bfloat16"),
    BadCall("scales_dtype_4", lambda: ((X28, S8.astype(np.float16)), dict(div_mode=False, axis=-1)),
            TypeError, r"quantize: argument 'scales' must be of dtype float32"),
    BadCall("scales_shape_3", lambda: ((X28, np.ones(3, np.float32)), dict(axis=-1)),
            ValueError, r"quantize: argument 'scales' must be of size 8"),
    BadCall("scales_shape_4", lambda: ((X28, np.ones((2, 8), np.float32)), dict(axis=-1)),
            ValueError, r"quantize: argument 'scales' must be 1-D of size 8 or 1, or 2-D with 1s outside axis 1"),
    BadCall("zero_points_dtype_3", lambda: ((X28, S8, np.ones(8, np.int64)), dict(axis=-1)),
            TypeError, r"quantize: argument 'zero_points' must be of dtype int8, uint8, int32, bfloat16 or float32"),
    BadCall("zero_points_dtype_4", lambda: ((X28, S8, np.ones(8, np.float16)), dict(axis=-1, div_mode=False)),
            TypeError, r"quantize: argument 'zero_points' must be of dtype float32"),
    BadCall("zero_points_shape_2", lambda: ((X28, S8, np.ones(3, np.int8)), dict(axis=-1)),
            ValueError, r"quantize: argument 'zero_points' must be of size 8"),
    BadCall("dtype_value_4", lambda: ((X28, S8), dict(axis=-1, dtype='int4')),
            ValueError, r"quantize: argument 'dtype' must be 'int8'"),
    BadCall("dtype_value_5", lambda: ((X28, S8), dict(axis=-1, dtype='uint8', div_mode=False)),
            ValueError, r"quantize: argument 'dtype' must be 'int8'"),
    BadCall("dtype_dtype", lambda: ((X28, S8), dict(axis=-1, dtype='nonsense')),
            TypeError, r"quantize: argument 'dtype' must be a dtype or one of"),
    BadCall("axis_type_2", lambda: ((X28, S8), dict(axis=1.0)),
            TypeError, r"quantize: argument 'axis' must be an integer"),
    BadCall("div_mode_type_2", lambda: ((X28, S8), dict(axis=-1, div_mode=1)),
            TypeError, r"quantize: argument 'div_mode' must be a bool"),
    BadCall("x_nan_div", lambda: ((_nan_at(X28, (1, 3)), S8), dict(axis=-1)),
            ValueError, r"quantize: argument 'x' must be finite"),
    BadCall("x_nan_mul", lambda: ((_nan_at(X28, (1, 3)), S8), dict(axis=-1, div_mode=False)),
            ValueError, r"quantize: argument 'x' must be finite"),
    BadCall("scales_inf_div", lambda: ((X28, _nan_at(S8, 2, np.inf)), dict(axis=-1)),
            ValueError, r"quantize: argument 'scales' must be finite"),
    BadCall("scales_inf_mul", lambda: ((X28, _nan_at(S8, 2, np.inf)), dict(axis=-1, div_mode=False)),
            ValueError, r"quantize: argument 'scales' must be finite"),
    BadCall("zero_points_nan_div", lambda: ((X28, S8, _nan_at(np.zeros(8, np.float32), 0)), dict(axis=-1)),
            ValueError, r"quantize: argument 'zero_points' must be finite"),
    BadCall(
        "zero_points_nan_mul",
        lambda: ((X28, S8, _nan_at(np.zeros(8, np.float32), 0)), dict(axis=-1, div_mode=False)),
        ValueError,
        r"quantize: argument 'zero_points' must be finite",
    ),
    BadCall(
        "scales_size_mul_last",
        lambda: ((np.ones((3, 4), np.float32), np.ones(2, np.float32)), dict(axis=-1, div_mode=False)),
        ValueError,
        r"quantize: argument 'scales' must be of size 4",
    ),
    BadCall(
        "axis_below_minus",
        lambda: ((np.ones((3, 4), np.float32), np.ones(3, np.float32)), dict(axis=-3, div_mode=False)),
        ValueError,
        r"quantize: argument 'axis' must be >= -2",
    ),
    BadCall(
        "axis_minus_2_of_1d",
        lambda: ((np.ones(4, np.float32), np.ones(1, np.float32)), dict(axis=-2, div_mode=False)),
        ValueError,
        r"quantize: argument 'x' must be at least 2-D for axis=-2",
    ),
    BadCall(
        "int4_last_dim",
        lambda: ((np.ones((2, 12), np.float16), np.ones(1, np.float16)), dict(axis=-1, div_mode=False, dtype='int4')),
        ValueError,
        r"quantize: argument 'x' must be of last dimension a multiple of 8 for int4 output",
    ),
    BadCall("axis_out_of_range", lambda: ((np.ones((2, 3), np.float32), np.ones(3, np.float32)), dict(axis=2)),
            ValueError, r"quantize: argument 'axis' must be in \[-2, 1\] for a 2-D x"),
    BadCall("scales_size_axis", lambda: ((np.ones((2, 3), np.float32), np.ones(3, np.float32)), dict(axis=0)),
            ValueError, r"quantize: argument 'scales' must be of size 2"),
    # div_mode=True divides by the scale: a zero would make x / 0 saturate to +-127 (0 / 0 the NaN code);
    # under nan_policy="raise" it is refused, naming the first zero. -0.0 is a zero too.
    BadCall("scales_zero_div_mode", lambda: ((X28, np.float32([1, 1, 1, 0, 1, 1, 1, 1])), {}),
            ValueError, r"quantize: argument 'scales' must be non-zero \(the op divides by it.*; got 0 at index \(3,\)"),
    BadCall("scales_negative_zero_bf16", lambda: ((X28, np.float32([-0.0]).astype(_dt.bfloat16)), dict(axis=-1)),
            ValueError, r"quantize: argument 'scales' must be non-zero .*; got 0 at index \(0,\)"),
]

declare(OpDecl(
    name=OP, family="dense", params=_params, build=_build, strategies={"bits": _bits_params},
    outputs=outputs(("y", "int")), numerics_fields=("round_mode", "saturate", "zero_point_position"),
    pre_round=_pre_round, cases=CASES, bad_calls=BAD_CALLS,
    description="static per-channel quantization (npu_quantize, both div_mode)"))
