"""``dequantize``: ``(fp32(y) - zero_point) * scale`` in fp32, rounded to ``output_dtype``; per channel
along ``axis`` or per row (``axis=None``)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from w8a8 import dtypes as _dt

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs
from ...values import float_tensor, int_tensor, positive_scales, rng_for
from ._common import BF16, I8, XF

OP = "dequantize"
Y23 = np.zeros((2, 3), np.int8)
Y316 = np.arange(48, dtype=np.int8).reshape(3, 16)
S3 = np.array([0.5, 1.0, 2.0], np.float32)


@st.composite
def _params(draw):
    rows, n = draw(S.size(32, big=())), draw(S.size(64, big=(1025,)))
    return {"rows": rows, "n": n, "y_dtype": draw(st.sampled_from(("int8", "uint8", "int32"))),
            "mode": draw(st.sampled_from(("channel", "row"))), "zero_point": draw(st.booleans()),
            "output_dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))), "seed": draw(S.seed())}


@st.composite
def _bits_params(draw):
    """Full-range codes of every y dtype, 1-D to 3-D y, signed scales of every float dtype drawn at the
    bit level (random bit patterns, fp32 subnormals), zero points of seven dtypes, per row or along any
    axis, per channel or per tensor."""
    shape = list(draw(st.sampled_from(((7,), (3, 17), (2, 1, 9)))))
    nd = len(shape)
    per_row = nd >= 2 and draw(st.booleans())
    return {"shape": shape, "y_dtype": draw(st.sampled_from(("int8", "uint8", "int32"))),
            "axis": None if per_row else draw(st.integers(-nd, nd - 1)), "per_tensor": draw(st.booleans()),
            "scale_dtype": draw(st.sampled_from(("float32", "float16", "bfloat16"))),
            "scale_dist": draw(st.sampled_from(("gaussian", "fp32_subnormal", "bit_patterns"))),
            "zero_point": draw(st.sampled_from((None, "int8", "int32", "int64", "float32", "float64", "bfloat16"))),
            "output_dtype": draw(st.sampled_from(("float32", "float16", "bfloat16"))), "seed": draw(S.seed())}


def _bits_build(p):
    rng = rng_for(p["seed"])
    shape, axis = tuple(p["shape"]), p["axis"]
    y = int_tensor(rng, shape, np.dtype(p["y_dtype"]))
    vshape = shape[:-1] if axis is None else ((1,) if p["per_tensor"] else (shape[axis % len(shape)],))
    scale = float_tensor(rng, vshape, _dt.resolve(p["scale_dtype"]), p["scale_dist"])
    zp = None
    if p["zero_point"] is not None:
        zdt = np.dtype(_dt.resolve(p["zero_point"]))
        zp = int_tensor(rng, vshape, zdt, full=False) if zdt.kind == "i" else \
            float_tensor(rng, vshape, np.float32, "gaussian").astype(zdt)
    return (y, scale, zp), {"axis": axis, "output_dtype": p["output_dtype"]}


def _build(p):
    if "shape" in p:
        return _bits_build(p)
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


_Y = np.array([[1, 0, -3]], np.int8)


def _nonfinite(scale, out):
    return lambda: ((_Y, np.float32([scale]), None), {"axis": -1, "output_dtype": out})


CASES = [
    Case("per_row_zero_point",
         lambda: ((Y316, S3, np.array([1, 4, -2], np.int32)), {"axis": None}),
         {"x": ((np.arange(48).reshape(3, 16) - np.array([[1], [4], [-2]])) * S3[:, None]).astype(np.float32)},
         "axis=None: row r is (y[r] - z[r]) * s[r] with y = arange(48) as [3, 16], z = [1, 4, -2], "
         "s = [0.5, 1, 2]: small integers times powers of two, exact in fp32 (y[0, 0] -> -0.5, y[1, 0] = 16 -> 12, "
         "y[2, 15] = 47 -> 98)."),
] + [Case(f"subnormal_outputs_{e}_{out}", (lambda e=e, out=out: ((np.array([[3, -1, 127]], np.int8),
                                                                  np.float32([2.0 ** e]), None),
                                                                 {"axis": -1, "output_dtype": out})),
          why=f"scale 2^{e}: 3 * 2^-140 is an fp32 subnormal that fp16 flushes to 0 and bf16 rounds to one of "
              f"its subnormals; 2^-20 keeps fp16 in its subnormal range.")
     for e in (-140, -20) for out in ("float32", "float16", "bfloat16")]

BAD_CALLS = [
    BadCall("y_dtype", lambda: ((XF, np.float32([1.0])), {}),
            TypeError, r"dequantize: argument 'y' must be of dtype int8, uint8 or int32"),
    BadCall("output_dtype_value", lambda: ((I8, np.float32([1.0])), {"output_dtype": "int8"}),
            ValueError, r"dequantize: argument 'output_dtype' must be bfloat16, float16 or float32"),
    BadCall("scale_dtype", lambda: ((I8, np.int32([1])), {}),
            TypeError, r"dequantize: argument 'scale' must be of dtype float32, float16 or bfloat16"),
    BadCall("scale_shape", lambda: ((I8, np.ones(16, np.float32)), {"axis": None}),
            ValueError, r"dequantize: argument 'scale' must be of shape y\.shape\[:-1\] ="),
    BadCall("axis_range", lambda: ((I8, np.ones(16, np.float32)), {"axis": 5}),
            ValueError, r"dequantize: argument 'axis' must be in \[-2, 1\]"),
    BadCall("axis_type", lambda: ((I8, np.ones(16, np.float32)), {"axis": "a"}),
            TypeError, r"dequantize: argument 'axis' must be an integer"),
    BadCall("scale_shape_2", lambda: ((I8, np.ones(7, np.float32)), {}),
            ValueError, r"dequantize: argument 'scale' must be of size 16"),
    BadCall("zero_point_shape", lambda: ((I8, np.ones(16, np.float32), np.ones(7, np.float32)), {}),
            ValueError, r"dequantize: argument 'zero_point' must be of size 16"),
    BadCall("zero_point_shape_2", lambda: ((I8, np.ones(3, np.float32), np.ones(4, np.float32)), {"axis": None}),
            ValueError, r"dequantize: argument 'zero_point' must be of shape y\.shape\[:-1\] ="),
    BadCall("y_dtype_2", lambda: ((Y23.astype(np.float32), np.ones(3, np.float32)), {}),
            TypeError, r"dequantize: argument 'y' must be of dtype int8, uint8 or int32"),
    BadCall("output_dtype_value_2", lambda: ((Y23, np.ones(3, np.float32)), dict(output_dtype='int8')),
            ValueError, r"dequantize: argument 'output_dtype' must be bfloat16, float16 or float32"),
    BadCall("scale_shape_per_row", lambda: ((Y23, np.ones(3, np.float32)), dict(axis=None)),
            ValueError, r"dequantize: argument 'scale' must be of shape y\.shape\[:-1\] ="),
    BadCall("axis_wraps_no_more", lambda: ((Y23, np.ones(3, np.float32)), dict(axis=2)),
            ValueError, r"dequantize: argument 'axis' must be in \[-2, 1\]"),
    BadCall("scale_shape_3", lambda: ((Y23, np.ones(4, np.float32)), {}),
            ValueError, r"dequantize: argument 'scale' must be of size 3"),
    BadCall(
        "zero_point_broadcast_4x3",
        lambda: ((Y316, S3, np.arange(12, dtype=np.int32).reshape(4, 3)), dict(axis=None)),
        ValueError,
        r"dequantize: argument 'zero_point' must be of shape y\.shape\[:-1\] =",
    ),
    BadCall("zero_point_size_1_per_row", lambda: ((Y316, S3, np.ones(1, np.float32)), dict(axis=None)),
            ValueError, r"dequantize: argument 'zero_point' must be of shape y\.shape\[:-1\] ="),
    # nan_policy="raise" (the default record): a non-finite scale or float zero point is refused, the argument
    # and the first bad index named (these used to give silent NaN / Inf).
    BadCall("scale_nan", lambda: ((Y23, np.float32([1.0, np.nan, 2.0])), {}),
            ValueError, r"dequantize: argument 'scale' must be finite .*; got NaN at index \(1,\)"),
    BadCall("scale_inf_per_row", lambda: ((Y23, np.float32([np.inf, 1.0])), dict(axis=None)),
            ValueError, r"dequantize: argument 'scale' must be finite .*; got Inf at index \(0,\)"),
    BadCall("zero_point_nan", lambda: ((Y23, S3, np.float32([0.0, 0.0, np.nan])), {}),
            ValueError, r"dequantize: argument 'zero_point' must be finite .*; got NaN at index \(2,\)"),
] + [BadCall(f"nonfinite_scale_{name}_{out}", _nonfinite(v, out), ValueError,
             rf"dequantize: argument 'scale' must be finite .*; got {kind} at index \(0,\)",
             "A NaN / Inf scale (once computed through, with the NaN bits of each output dtype pinned) is refused "
             "under nan_policy='raise', on every output dtype; the IEEE bits are pinned by the golden's tests "
             "under nan_policy='ieee' (tests/golden/test_quantize.py).")
     for name, v, kind in (("nan", np.nan, "NaN"), ("inf", np.inf, "Inf"), ("minus_nan", -np.nan, "NaN"))
     for out in ("bfloat16", "float16", "float32")
]

declare(OpDecl(
    name=OP, family="dense", params=_params, build=_build, strategies={"bits": _bits_params},
    outputs=outputs(("x", "float")), cases=CASES, bad_calls=BAD_CALLS, description="(y - zero_point) * scale"))
