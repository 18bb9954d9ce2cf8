"""``fp8_block_dequantize``: FP8 block dequantization, each E4M3 weight times its block's fp32 scale,
rounded to ``output_dtype``."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import E4M3, F32, FP8_ODD_SHAPES, _random, fp8_odd_weight, fp8_params, fp8_w, fx

OP = "fp8_block_dequantize"


def _build(p):
    q, s = w8a8.fp8_block_quantize(fp8_w(p), scale_fmt=p["fmt"])
    return (q, s), {"output_dtype": "bfloat16"}


def _odd(shape, block, fmt, out):
    def build():
        q, s = w8a8.fp8_block_quantize(fp8_odd_weight(shape), block_shape=block, scale_fmt=fmt)
        return (q, s), {"block_shape": block, "output_dtype": out}
    return build


CASES = [
    Case(f"odd_shape_{'x'.join(map(str, shape))}_blocks_{'x'.join(map(str, block))}_{fmt or 'fp32'}_{out}",
         _odd(shape, block, fmt, out),
         why=f"fp8_block_quantize's {shape} weight in {block} blocks ({fmt or 'amax / 448'} scales) back to {out}.")
    for shape, block in FP8_ODD_SHAPES for fmt in (None, "ue8m0") for out in ("bfloat16", "float16", "float32")]

BAD_CALLS = [
    BadCall("weight_scale_inv_shape", lambda: ((fx().wq, fx().ws[:0]), {}),
            ValueError, r"fp8_block_dequantize: argument 'weight_scale_inv' must be float32 of shape"),
    BadCall("weight_scale_inv_dtype", lambda: ((fx().wq, fx().ws.astype(np.float16)), {}),
            TypeError, r"fp8_block_dequantize: argument 'weight_scale_inv' must be of dtype float32"),
    BadCall("weight_scale_inv_nonfinite", lambda: ((fx().wq, np.full_like(fx().ws, np.nan)), {}),
            ValueError, r"fp8_block_dequantize: argument 'weight_scale_inv' must be finite"),
    BadCall("output_dtype_value", lambda: ((fx().wq, fx().ws), {"output_dtype": "int8"}),
            TypeError, r"fp8_block_dequantize: argument 'output_dtype' must be float32, bfloat16 or float16"),
    BadCall(
        "weight_scale_inv_shape_2",
        lambda: ((_random((3, 3), E4M3), np.array([[1.0, 0.002232143], [2.2321428e-13, 2.2321428e-13]], F32)), {}),
        ValueError,
        r"fp8_block_dequantize: argument 'weight_scale_inv' must be float32 of shape",
    ),
    BadCall("block_shape_budget", lambda: ((fx().wq, np.ones((1, 1), np.float32)), {"block_shape": (10**6, 10**6)}),
            ValueError, r"fp8_block_dequantize: argument 'block_shape' must be small enough that .* allocation budget of 4294967296 bytes .*; got \(1000000, 1000000\) x 4 B"),
    # an e4m3 NaN code (0x7F) in the codes: never written by fp8_block_quantize, refused
    BadCall("weight_q_nan_code", lambda: ((np.where(np.arange(fx().wq.size).reshape(fx().wq.shape) == 3,
                                                    np.uint8(0x7F), fx().wq.view(np.uint8)).view(fx().wq.dtype),
                                           fx().ws), {}),
            ValueError, r"fp8_block_dequantize: argument 'weight_q' must be finite .*; got NaN at index \(0, 3\)"),
]

declare(OpDecl(
    name=OP, family="lowbit", params=fp8_params, build=_build, outputs=outputs(("w", "float")),
    cases=CASES, bad_calls=BAD_CALLS, description="FP8 block dequantization"))
