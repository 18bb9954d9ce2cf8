"""``nvfp4_quantize``: NVFP4 — E2M1 codes (two per byte, low nibble first), one E4M3 block scale per 16
elements and an fp32 tensor scale, in torchao's convention (``per_tensor_scale`` S = amax / 2688, block
scales clamped up to 2^-6) or vLLM's (``global_scale`` = 1 / S, no clamp)."""

from __future__ import annotations

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import E4M3, F32, fx, nvfp4_params, nvfp4_scale_kw, nvfp4_x

OP = "nvfp4_quantize"
_SIX = np.array([[6.0, 3.0, -1.5, 0.5] + [0.0] * 12], np.float32)


def _scale_bytes(*rows):
    return np.array(rows, np.uint8).view(E4M3)


def _zero_blocks():
    x = np.zeros((2, 32), np.float32)
    x[1, 16:] = 1.0
    return x


def _extremes():
    x = np.zeros((3, 32), np.float32)
    x[0, :3] = (1.0, -1.0, 0.0)
    x[2] = 1e-3
    return x


CASES = [
    Case("block_of_six", lambda: ((_SIX,), {"per_tensor_scale": np.float32(1.0)}),
         {"data": np.array([[0x57, 0x1B] + [0] * 6], np.uint8), "block_scale": _scale_bytes([0x38])},
         "S = 1, amax 6: s_b = e4m3(6/6/1) = 1 (0x38). Codes: 6 -> 7, 3 -> 5, -1.5 -> 8|3 = 0xB, 0.5 -> 1; packed low "
         "nibble first: 0x57, 0x1B."),
    Case("block_of_six_vllm", lambda: ((_SIX,), {"global_scale": np.float32(1.0)}),
         {"data": np.array([[0x57, 0x1B] + [0] * 6], np.uint8), "block_scale": _scale_bytes([0x38])},
         "The same block in vLLM's convention with global_scale 1 (S = 1): the same codes and block scale."),
    Case("zero_block_scale_floor_torchao", lambda: ((_zero_blocks(),), {"per_tensor_scale": np.float32(1 / 2688)}),
         {"block_scale": _scale_bytes([0x08, 0x08], [0x08, 0x7E])},
         "torchao: an all-zero block's scale is clamped up to 2^-6 (e4m3 0x08); the block of ones with S = 1/2688 "
         "gets s_b = e4m3(1 / 6 / S) = e4m3(448) = 0x7E."),
    Case("zero_block_scale_vllm", lambda: ((_zero_blocks(),), {"global_scale": np.float32(2688)}),
         {"block_scale": _scale_bytes([0, 0], [0, 0x7E]),
          "data": np.array([[0] * 16, [0] * 8 + [0x77] * 8], np.uint8)},
         "vLLM: no lower clamp, so an all-zero block has s_b = 0 and codes 0; the block of ones gets s_b = e4m3(1 / 6 * "
         "2688) = 448 (0x7E) and every 1 is 1 / (448 / 2688) = 6: code 7, two per byte: 0x77."),
] + [Case(f"extreme_tensor_scale_{conv}_{t:g}", (lambda conv=conv, t=t: ((_extremes(),), {conv: np.float32(t)})),
          why="A tiny S makes S * s_b underflow to 0 for small blocks: x / 0 -> Inf (saturates to 6) or NaN (0/0: "
              "E2M1 of a NaN, code 0 or 8 by its sign bit, as ml_dtypes); a huge one rounds every code to 0.")
     for t in (1e-45, 1e-40, 3e38) for conv in ("per_tensor_scale", "global_scale")]

BAD_CALLS = [
    BadCall(
        "per_tensor_scale_choice",
        lambda: ((fx().x,), {}),
        ValueError,
        r"nvfp4_quantize: argument 'per_tensor_scale' must be given, or global_scale given — exactly one of the two",
    ),    BadCall(
        "per_tensor_scale_choice_2",
        lambda: ((fx().x,), {"per_tensor_scale": fx().one, "global_scale": fx().one}),
        ValueError,
        r"nvfp4_quantize: argument 'per_tensor_scale' must be given, or global_scale given — exactly one of the two",
    ),    BadCall("per_tensor_scale_nonfinite", lambda: ((fx().x,), {"per_tensor_scale": np.float32(-1)}),
            ValueError, r"nvfp4_quantize: argument 'per_tensor_scale' must be positive and finite"),
    BadCall("x_shape", lambda: ((fx().x[:, :20],), {"per_tensor_scale": fx().one}),
            ValueError, r"nvfp4_quantize: argument 'x' must be of last dimension a multiple of 16"),
    BadCall("per_tensor_scale_shape", lambda: ((fx().x,), {"per_tensor_scale": 1}),
            ValueError, r"nvfp4_quantize: argument 'per_tensor_scale' must be a float32 scalar"),
    BadCall("x_nonfinite", lambda: ((np.full((1, 16), np.nan, np.float32),), {"per_tensor_scale": fx().one}),
            ValueError, r"nvfp4_quantize: argument 'x' must be finite"),
    BadCall(
        "per_tensor_scale_choice_3",
        lambda: ((np.full((1, 16), 1.0, F32),), {}),
        ValueError,
        r"nvfp4_quantize: argument 'per_tensor_scale' must be given, or global_scale given — exactly one of the two",
    ),    BadCall(
        "per_tensor_scale_choice_4",
        lambda: ((np.full((1, 16), 1.0, F32),), {'per_tensor_scale': F32(1.0), 'global_scale': F32(1.0)}),
        ValueError,
        r"nvfp4_quantize: argument 'per_tensor_scale' must be given, or global_scale given — exactly one of the two",
    ),    BadCall("global_scale_nonfinite", lambda: ((np.full((1, 16), 1.0, F32),), {'global_scale': F32(0.0)}),
            ValueError, r"nvfp4_quantize: argument 'global_scale' must be positive and finite"),
    BadCall("x_shape_2", lambda: ((np.full((1, 24), 1.0, F32),), {'per_tensor_scale': F32(1.0)}),
            ValueError, r"nvfp4_quantize: argument 'x' must be of last dimension a multiple of 16"),
    BadCall("x_nonfinite_2", lambda: ((np.full((1, 16), np.inf, F32),), {'per_tensor_scale': F32(1.0)}),
            ValueError, r"nvfp4_quantize: argument 'x' must be finite"),
]

declare(OpDecl(
    name=OP, family="lowbit", params=nvfp4_params,
    build=lambda p: ((nvfp4_x(p),), nvfp4_scale_kw(p, nvfp4_x(p))),
    outputs=outputs(("data", "int"), ("block_scale", "scale")), cases=CASES, bad_calls=BAD_CALLS,
    description="NVFP4 (E2M1 + E4M3 per 16 + fp32 tensor scale), both conventions"))
