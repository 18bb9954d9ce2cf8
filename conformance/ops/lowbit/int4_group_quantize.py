"""``int4_group_quantize``: INT4 group-wise weight quantization along K (GPTQ-style symmetric, absmax
symmetric, asymmetric with a uint8 zero point), one scale per group of ``group_size``."""

from __future__ import annotations

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import F32, f32, fx, int4_any_shape_params, int4_params, int4_weight

OP = "int4_group_quantize"


def _build(p):
    return (int4_weight(p), p["g"]), {"scheme": p["scheme"], "scale_dtype": p["scale_dtype"]}


def _limits():
    w = np.zeros((3, 64), np.float32)
    w[1, :32] = 1e-9
    w[1, 33] = -1e-9
    return w


def _fp16_overflow():
    w = _limits()
    w[2, 40] = 1e6
    return w


CASES = [
    Case("gptq_sym_ties_and_clipping", lambda: ((f32(3.75, -3.75, 0.25, 0.75, 1.25, 0.0, -0.5, 2.0)[None, :], 8), {}),
         {"codes": np.array([[7, -8, 0, 2, 2, 0, -1, 4]], np.int8), "scale": np.array([[0.5]], np.float16)},
         "GPTQ symmetric: amax 3.75 -> s = 3.75 / 7.5 = 0.5 (exact in fp16). w / s = 7.5, -7.5, 0.5, 1.5, 2.5, 0, -1, 4; "
         "rint (half to even): 8 -> clipped to 7, -8, 0, 2, 2, 0, -1, 4; no zero point."),
    Case("asym_zero_point", lambda: ((f32(-2.5, 5.0, 0.25, 1.0)[None, :], 4), {"scheme": "asym"}),
         {"codes": np.array([[0, 15, 5, 7]], np.uint8), "scale": np.array([[0.5]], np.float16),
          "zero": np.array([[5]], np.uint8)},
         "lo = -2.5, hi = 5 -> s = 7.5 / 15 = 0.5, z = rint(2.5 / 0.5) = 5; u = clamp(rint(w / s) + z): -5 + 5 = 0, "
         "10 + 5 = 15, rint(0.5) = 0 -> 5, 2 + 5 = 7."),
] + [Case(f"zero_and_tiny_groups_{scheme}", (lambda scheme=scheme: ((_limits(), 32), {"scheme": scheme})),
          why="An all-zero group takes GPTQ's [-1, 1] range (codes 0; asym u = z = 8); a group whose scale rounds to "
              "0 in fp16 (amax 1e-9) saturates and dequantizes to 0.")
     for scheme in ("gptq_sym", "absmax_sym", "asym")]

BAD_CALLS = [
    BadCall("group_size_value", lambda: ((fx().x, 7), {}),
            ValueError, r"int4_group_quantize: argument 'group_size' must be a positive divisor of K = 64"),
    BadCall("scheme_choice", lambda: ((fx().x, 32), {"scheme": "x"}),
            ValueError, r"int4_group_quantize: argument 'scheme' must be one of"),
    BadCall("weight_dtype", lambda: ((fx().x.astype(np.float64), 32), {}),
            TypeError, r"int4_group_quantize: argument 'weight' must be of dtype float32, float16 or bfloat16"),
    BadCall("scale_dtype_value", lambda: ((fx().x, 32), {"scale_dtype": "int8"}),
            TypeError, r"int4_group_quantize: argument 'scale_dtype' must be float16, bfloat16 or float32"),
    BadCall("weight_nonfinite", lambda: ((np.full((2, 32), np.inf, np.float32), 32), {}),
            ValueError, r"int4_group_quantize: argument 'weight' must be finite"),
    BadCall("group_size_value_2", lambda: ((np.zeros((2, 0), np.float32), -1), {}),
            ValueError, r"int4_group_quantize: argument 'group_size' must be a positive divisor of K"),
    BadCall("unknown_keyword", lambda: ((fx().x,), {"bogus": 1}),
            TypeError, r"got\ an\ unexpected\ keyword\ argument\ 'bogus'"),
    BadCall("group_size_value_3", lambda: ((np.full((2, 64), 1.0, F32), 48), {}),
            ValueError, r"int4_group_quantize: argument 'group_size' must be a positive divisor of K = 64"),
    BadCall("scheme_choice_2", lambda: ((np.full((2, 64), 1.0, F32), 32), {'scheme': 'sym'}),
            ValueError, r"int4_group_quantize: argument 'scheme' must be one of"),
    BadCall("scale_dtype_value_2", lambda: ((np.full((2, 64), 1.0, F32), 32), {'scale_dtype': 'int8'}),
            TypeError, r"int4_group_quantize: argument 'scale_dtype' must be float16, bfloat16 or float32"),
    BadCall("weight_dtype_2", lambda: ((np.full((2, 64), 1, np.int32), 32), {}),
            TypeError, r"int4_group_quantize: argument 'weight' must be of dtype float32, float16 or bfloat16"),
    BadCall("weight_nonfinite_2", lambda: ((np.full((2, 64), np.nan, F32), 32), {}),
            ValueError, r"int4_group_quantize: argument 'weight' must be finite"),
    BadCall("weight_value", lambda: ((np.full((1, 32), 1e+06, F32), 32), {}),
            ValueError, r"int4_group_quantize: argument 'weight' must be groups whose scale fits float16"),
    BadCall(
        "weight_value_2",
        lambda: ((np.array([[3e38, -3e38]], F32), 2), {'scheme': 'asym', 'scale_dtype': 'float32'}),
        ValueError,
        r"int4_group_quantize: argument 'weight' must be groups whose scale fits float32",
    ),
    BadCall("scale_overflows_fp16", lambda: ((_fp16_overflow(), 32), {}),
            ValueError, r"int4_group_quantize: .*scale overflow at group \(2, 1\)",
            "A group with amax 1e6: its scale 1e6 / 7.5 is beyond fp16's max 65504 (the default scale dtype); the "
            "golden names the group (row 2, group 1)."),
]

declare(OpDecl(
    name=OP, family="lowbit", params=int4_params, build=_build, strategies={"any_shape": int4_any_shape_params},
    outputs=outputs(("codes", "int"), ("scale", "scale"), ("zero", "int")), cases=CASES, bad_calls=BAD_CALLS,
    description="INT4 group-wise weight quantization (GPTQ / absmax symmetric, asymmetric)"))
