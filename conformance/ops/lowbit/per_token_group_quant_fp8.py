"""``per_token_group_quant_fp8``: 1 x ``group_size`` (128) per-token-group E4M3 activation quantization,
the scale amax / 448 (or ue8m0: a power of two), floored by ``eps``."""

from __future__ import annotations

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import BF16, FP8_ODD_SHAPES, FP8_ROW, FP8_ROW_CODES, FP8_ROW_WHY, fp8_odd_weight, fp8_params, fp8_w, fx

OP = "per_token_group_quant_fp8"


def _ue8m0_rows():
    x = np.zeros((2, 256), np.float32)
    x[0, 0] = 500.0
    return x


_FLOOR = np.float32(np.float32(1e-10) / np.float32(448))

CASES = [
    Case("subnormals_ties_and_max", lambda: ((FP8_ROW,), {}),
         {"x_q": FP8_ROW_CODES, "scale": np.array([[1.0]], np.float32)}, FP8_ROW_WHY),
    Case("ue8m0_scale_and_zero_groups", lambda: ((_ue8m0_rows(),), {"scale_fmt": "ue8m0"}),
         {"scale": np.array([[2.0, 2.0**-22], [2.0**-22, 2.0**-22]], np.float32)},
         "ue8m0: s = 2^ceil(log2(max(amax, 1e-4) / 448)); amax 500 -> 500/448 = 1.116 -> s = 2. An all-zero group: "
         "max(0, 1e-4) / 448 -> 2^ceil(-22.1) = 2^-22."),
    Case("fp32_scale_and_zero_groups", lambda: ((_ue8m0_rows(),), {}),
         {"scale": np.array([[np.float32(500) / np.float32(448), _FLOOR], [_FLOOR, _FLOOR]], np.float32)},
         "Plain scales: fp32(500 / 448) for the group holding 500; an all-zero group is floored at eps = 1e-10: "
         "fp32(1e-10) / 448."),
] + [Case(f"bf16_groups_of_48_{'x'.join(map(str, shape))}",
          (lambda shape=shape: ((fp8_odd_weight(shape).astype(BF16), 48), {})),
          why=f"bf16 activations {shape} in groups of 48 (a partial last group where 48 does not divide K).")
     for shape, _ in FP8_ODD_SHAPES]

BAD_CALLS = [
    BadCall("group_size_range", lambda: ((fx().x, 0), {}),
            ValueError, r"per_token_group_quant_fp8: argument 'group_size' must be in \[1, inf\]"),
    BadCall("scale_fmt_choice", lambda: ((fx().x, 128), {"scale_fmt": "e8"}),
            ValueError, r"per_token_group_quant_fp8: argument 'scale_fmt' must be one of"),
    BadCall("eps_nonfinite", lambda: ((fx().x, 128), {"eps": np.inf}),
            ValueError, r"per_token_group_quant_fp8: argument 'eps' must be a positive finite float"),
    BadCall("group_size_budget", lambda: ((fx().x, 10**10), {}),
            ValueError, r"per_token_group_quant_fp8: argument 'group_size' must be small enough that .* allocation budget of 4294967296 bytes .*; got \(4, 1, 10000000000\) x 4 B"),
]

declare(OpDecl(
    name=OP, family="lowbit", params=fp8_params, build=lambda p: ((fp8_w(p),), {"scale_fmt": p["fmt"]}),
    outputs=outputs(("x_q", "float"), ("scale", "scale")), cases=CASES, bad_calls=BAD_CALLS,
    description="1x128 per-token-group E4M3 activation quantization"))
