"""``fp8_block_quantize``: E4M3 weights with one fp32 scale per 128x128 block (``block_shape``), the scale
amax / 448 or, with ``scale_fmt="ue8m0"``, rounded up to a power of two (DeepSeek-V3's format)."""

from __future__ import annotations

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import (F32, FP8_ODD_SHAPES, FP8_ROW, FP8_ROW_CODES, FP8_ROW_WHY, _random, fp8_odd_weight, fp8_params,
                      fp8_w, fx)

OP = "fp8_block_quantize"

CASES = [
    Case("subnormals_ties_and_max", lambda: ((FP8_ROW,), {}),
         {"weight_q": FP8_ROW_CODES, "scale": np.array([[1.0]], np.float32)}, FP8_ROW_WHY),
] + [Case(f"odd_shape_{'x'.join(map(str, shape))}_blocks_{'x'.join(map(str, block))}_{fmt or 'fp32'}",
          (lambda shape=shape, block=block, fmt=fmt: ((fp8_odd_weight(shape),),
                                                      {"block_shape": block, "scale_fmt": fmt})),
          why=f"A {shape} weight in {block} blocks (partial blocks at the edges), {fmt or 'amax / 448'} scales.")
     for shape, block in FP8_ODD_SHAPES for fmt in (None, "ue8m0")]

BAD_CALLS = [
    BadCall("block_shape_value", lambda: ((fx().x,), {"block_shape": (1,)}),
            ValueError, r"fp8_block_quantize: argument 'block_shape' must be a pair of positive ints"),
    BadCall("scale_fmt_choice", lambda: ((fx().x,), {"scale_fmt": "x"}),
            ValueError, r"fp8_block_quantize: argument 'scale_fmt' must be one of"),
    BadCall("eps_nonfinite", lambda: ((fx().x,), {"eps": -1.0}),
            ValueError, r"fp8_block_quantize: argument 'eps' must be a positive finite float"),
    BadCall("block_shape_range", lambda: ((fx().x,), {"block_shape": (0, 4)}),
            ValueError, r"fp8_block_quantize: argument 'block_shape' must be in \[1, inf\]"),
    BadCall("weight_nonfinite", lambda: ((np.full((2, 2), np.inf, np.float32),), {}),
            ValueError, r"fp8_block_quantize: argument 'weight' must be finite"),
    BadCall("weight_shape", lambda: ((fx().x[0],), {}),
            ValueError, r"fp8_block_quantize: argument 'weight' must be at least 2-D"),
    BadCall("scale_fmt_choice_2", lambda: ((_random((3, 3), F32),), {'scale_fmt': 'e8m0'}),
            ValueError, r"fp8_block_quantize: argument 'scale_fmt' must be one of"),
    BadCall("weight_nonfinite_2", lambda: ((np.full((2, 2), np.nan, F32),), {}),
            ValueError, r"fp8_block_quantize: argument 'weight' must be finite"),
    BadCall("block_shape_value_2", lambda: ((_random((3, 3), F32),), {'block_shape': (128,)}),
            ValueError, r"fp8_block_quantize: argument 'block_shape' must be a pair of positive ints"),
    BadCall("eps_nonfinite_2", lambda: ((_random((3, 3), F32),), {'eps': 0.0}),
            ValueError, r"fp8_block_quantize: argument 'eps' must be a positive finite float"),
    # a block far beyond the tensor pads it to whole blocks: (10**6)^2 fp32 for a [4, 64] weight
    BadCall("block_shape_budget", lambda: ((fx().x,), {"block_shape": (10**6, 10**6)}),
            ValueError, r"fp8_block_quantize: argument 'block_shape' must be small enough that .* allocation budget of 4294967296 bytes .*; got \(1000000, 1000000\) x 4 B"),
]

declare(OpDecl(
    name=OP, family="lowbit", params=fp8_params, build=lambda p: ((fp8_w(p),), {"scale_fmt": p["fmt"]}),
    outputs=outputs(("weight_q", "float"), ("scale", "scale")), cases=CASES, bad_calls=BAD_CALLS,
    description="E4M3 weights with 128x128 block scales (amax/448 or ue8m0)"))
