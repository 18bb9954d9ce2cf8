"""``nvfp4_dequantize``: NVFP4 dequantization ``q * s_b * S`` in fp32, rounded to ``output_dtype``."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import F32, fx, nvfp4_params, nvfp4_scale_kw, nvfp4_x

OP = "nvfp4_dequantize"
_SIX = np.array([[6.0, 3.0, -1.5, 0.5] + [0.0] * 12], np.float32)


def _build(p):
    x = nvfp4_x(p)
    kw = nvfp4_scale_kw(p, x)
    d, s = w8a8.nvfp4_quantize(x, **kw)
    return (d, s), {**kw, "output_dtype": p["dtype"]}


def _six(conv):
    def build():
        kw = {conv: np.float32(1)}
        return w8a8.nvfp4_quantize(_SIX, **kw), kw
    return build


def _extreme(conv, t, out):
    def build():
        x = np.zeros((3, 32), np.float32)
        x[0, :3] = (1.0, -1.0, 0.0)
        x[2] = 1e-3
        d, s = w8a8.nvfp4_quantize(x, per_tensor_scale=np.float32(1))
        return (d, s), {conv: np.float32(t), "output_dtype": out}
    return build


CASES = [
    Case(f"block_of_six_{conv}", _six(conv), {"x": _SIX},
         "The block [6, 3, -1.5, 0.5, 0, ...] with S = 1 and s_b = 1 is exact in E2M1: it decodes to itself.")
    for conv in ("per_tensor_scale", "global_scale")] + [
    Case(f"extreme_tensor_scale_{conv}_{out}", _extreme(conv, t, out),
         why=f"{conv} {t:g} on codes quantized with S = 1: the product q * s_b * S overflows to Inf (3e38) or "
             f"vanishes (1 / 1e-30 as a global scale).")
    for conv, t in (("per_tensor_scale", 3e38), ("global_scale", 1e-30)) for out in ("float32", "bfloat16", "float16")]

BAD_CALLS = [
    BadCall("block_scale_shape", lambda: ((fx().nd, fx().ns[:, :1]), {"per_tensor_scale": fx().one}),
            ValueError, r"nvfp4_dequantize: argument 'block_scale' must be float8_e4m3fn of shape"),
    BadCall(
        "per_tensor_scale_choice",
        lambda: ((fx().nd, fx().ns), {}),
        ValueError,
        r"nvfp4_dequantize: argument 'per_tensor_scale' must be given, or global_scale given — exactly one of the two",
    ),    BadCall(
        "block_scale_dtype",
        lambda: ((np.full((1, 8), 119, np.uint8), np.full((1, 1), 35, np.uint8)), {'per_tensor_scale': F32(1.0)}),
        TypeError,
        r"nvfp4_dequantize: argument 'block_scale' must be of dtype float8_e4m3fn",
    ),
    # an e4m3 NaN block scale: nvfp4_quantize never writes one (it refuses non-finite x); refused
    BadCall("block_scale_nan_code", lambda: ((fx().nd, np.where(np.arange(fx().ns.size).reshape(fx().ns.shape) == 2,
                                                                np.uint8(0x7F), fx().ns.view(np.uint8)).view(fx().ns.dtype)),
                                             {"per_tensor_scale": np.float32(0.01)}),
            ValueError, r"nvfp4_dequantize: argument 'block_scale' must be finite .*; got NaN at index \(0, 2\)"),
]

declare(OpDecl(
    name=OP, family="lowbit", params=nvfp4_params, build=_build, outputs=outputs(("x", "float")),
    cases=CASES, bad_calls=BAD_CALLS, description="NVFP4 dequantization q * s_b * S"))
