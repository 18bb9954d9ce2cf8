"""``mx_dequantize``: MX dequantization ``P * 2^(b - 127)`` per block, NaN for the E8M0 NaN byte 255."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import w8a8

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import fx, mx_params, mx_x

OP = "mx_dequantize"


def _build(p):
    x = mx_x(p)
    if p["dist"] == "nan_inf":
        x = np.nan_to_num(x.astype(np.float32), nan=0.0, posinf=1.0, neginf=-1.0).astype(x.dtype)
    d, s = w8a8.mx_quantize(x, elem_dtype=p["elem"], scale_mode=p["mode"])
    return (d, s), {"elem_dtype": p["elem"], "output_dtype": p["dtype"]}


def _nonfinite_blocks(elem, out):
    def build():
        x = np.ones((2, 64), np.float32)
        x[0, 3], x[1, 40] = np.inf, np.nan
        d, s = w8a8.mx_quantize(x, elem_dtype=elem)
        return (d, s), {"elem_dtype": elem} | ({"output_dtype": out} if out else {})
    return build


def _e8m0_dtype_scale():
    x = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)
    d, s = w8a8.mx_quantize(x)
    return (d, s.view(ml_dtypes.float8_e8m0fnu)), {"output_dtype": "bfloat16"}


CASES = [
    Case(f"nonfinite_blocks_{elem}_{out or 'float32'}", _nonfinite_blocks(elem, out),
         why="Blocks with scale byte 255 (the E8M0 NaN) decode to NaN whatever their codes; the blocks of ones "
             "decode to 1 exactly.")
    for elem in ("e2m1", "e4m3", "e5m2") for out in (None, "bfloat16", "float16")] + [
    Case("e8m0_dtype_scale", _e8m0_dtype_scale,
         why="The scale given as ml_dtypes float8_e8m0fnu (the same bytes) instead of uint8."),
]

BAD_CALLS = [
    BadCall("scale_shape", lambda: ((fx().d, fx().s2[:, :1]), {}),
            ValueError, r"mx_dequantize: argument 'scale' must be of shape"),
    BadCall("data_dtype", lambda: ((fx().d.astype(np.int8), fx().s2), {}),
            TypeError, r"mx_dequantize: argument 'data' must be of dtype uint8"),
    BadCall("output_dtype_value", lambda: ((fx().d, fx().s2), {"output_dtype": "int8"}),
            TypeError, r"mx_dequantize: argument 'output_dtype' must be float32, bfloat16 or float16"),
    BadCall("data_dtype_2", lambda: ((fx().d, fx().s2), {"elem_dtype": "e4m3"}),
            TypeError, r"mx_dequantize: argument 'data' must be of dtype float8_e4m3fn"),
    BadCall("scale_shape_2", lambda: ((np.full((2, 32), 102, np.uint8), np.full((2, 1), 125, np.uint8)), {}),
            ValueError, r"mx_dequantize: argument 'scale' must be of shape"),
    BadCall(
        "data_dtype_3",
        lambda: ((np.full((2, 32), 102, np.uint8), np.full((2, 2), 125, np.uint8)), {'elem_dtype': 'e4m3'}),
        TypeError,
        r"mx_dequantize: argument 'data' must be of dtype float8_e4m3fn",
    ),
]

declare(OpDecl(
    name=OP, family="lowbit", params=mx_params, build=_build, outputs=outputs(("x", "float")),
    cases=CASES, bad_calls=BAD_CALLS, description="MX dequantization P * 2^(b - 127)"))
