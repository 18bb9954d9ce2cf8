"""``int4_group_dequantize``: INT4 group dequantization — ``q * s`` (signed codes) or ``(u - z) * s``
(unsigned codes with a zero point) in fp32, rounded to ``output_dtype``."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import BF16, f32, fx, int4_any_shape_params, int4_params, int4_weight

OP = "int4_group_dequantize"


def _build(p):
    q, s, z = w8a8.int4_group_quantize(int4_weight(p), p["g"], scheme=p["scheme"], scale_dtype=p["scale_dtype"])
    return (q, s, z), {"output_dtype": p["dtype"]}


def _nonfinite(sdt):
    s = np.array([[np.inf, np.nan, 1.0]], sdt)
    if sdt == np.float16:
        s.view(np.uint16)[0, 2] = 0x7C01  # a signalling NaN
    return s


CASES = [
    Case("gptq_sym_codes",
         lambda: ((np.array([[7, -8, 0, 2, 2, 0, -1, 4]], np.int8), np.array([[0.5]], np.float16)), {}),
         {"w": f32(3.5, -4, 0, 1, 1, 0, -0.5, 2)[None, :]},
         "Signed codes times the group scale 0.5 in fp32: 7 -> 3.5, -8 -> -4, 2 -> 1, -1 -> -0.5, 4 -> 2."),
    Case("asym_codes_bf16", lambda: ((np.array([[0, 15, 5, 7]], np.uint8), np.array([[0.5]], np.float16),
                                      np.array([[5]], np.uint8)), {"output_dtype": "bfloat16"}),
         {"w": f32(-2.5, 5.0, 0.0, 1.0).astype(BF16)[None, :]},
         "(u - z) * s with z = 5, s = 0.5: (0 - 5) * 0.5 = -2.5, (15 - 5) * 0.5 = 5, 0, (7 - 5) * 0.5 = 1."),
] + [Case(f"nonfinite_scale_{np.dtype(sdt).name}_{out}",
          (lambda sdt=sdt, out=out: ((np.array([[1, -2, 0, 3, 0, 1]], np.int8), _nonfinite(sdt)),
                                     {"output_dtype": out})),
          why="The scale is not checked for NaN / Inf: Inf * 0 = NaN, NaN * q = NaN, with NumPy's NaN bits (an fp16 "
              "NaN 0x7E00 widens to 0x7FC00000; a signalling 0x7C01 to 0x7F802000).")
     for sdt in (np.float16, BF16) for out in ("float32", "bfloat16", "float16")]

BAD_CALLS = [
    BadCall("zero_value", lambda: ((fx().q, fx().s), {}),
            ValueError, r"int4_group_dequantize: argument 'zero' must be a uint8 zero point array for unsigned"),
    BadCall("zero_shape", lambda: ((fx().q, fx().s, fx().z[:, :1]), {}),
            ValueError, r"int4_group_dequantize: argument 'zero' must be of scale's shape"),
    BadCall("codes_range", lambda: ((fx().q + 20, fx().s, fx().z), {}),
            ValueError, r"int4_group_dequantize: argument 'codes' must be values in \[0, 15\]"),
    BadCall("zero_shape_2", lambda: ((fx().q.astype(np.int8), fx().s, fx().z), {}),
            ValueError, r"int4_group_dequantize: argument 'zero' must be None for signed"),
    BadCall("output_dtype_value", lambda: ((fx().q, fx().s, fx().z), {"output_dtype": "int8"}),
            TypeError, r"int4_group_dequantize: argument 'output_dtype' must be float32, bfloat16 or float16"),
    BadCall(
        "zero_shape_3",
        lambda: (
            (np.full((2, 64), 7, np.int8), np.full((2, 2), 0.13330078, np.float16), np.full((2, 2), 0, np.uint8)),
            {},
        ),
        ValueError,
        r"int4_group_dequantize: argument 'zero' must be None for signed",
    ),
    BadCall(
        "zero_value_2",
        lambda: ((np.full((2, 64), 7, np.uint8), np.full((2, 2), 0.13330078, np.float16)), {}),
        ValueError,
        r"int4_group_dequantize: argument 'zero' must be a uint8 zero point array for unsigned",
    ),
    BadCall("scale_shape", lambda: ((np.full((2, 64), 7, np.int8), np.full((2, 3), 0.13330078, np.float16)), {}),
            ValueError, r"int4_group_dequantize: argument 'scale' must be of shape \[\.\.\., N, K/G\] ="),
    BadCall("codes_range_2", lambda: ((np.full((2, 64), 9, np.int8), np.full((2, 2), 0.13330078, np.float16)), {}),
            ValueError, r"int4_group_dequantize: argument 'codes' must be values in \[-8, 7\]"),
    # a NaN / Inf group scale gave silent NaN rows; refused (the op takes no numerics: always).
    BadCall("scale_nan", lambda: ((fx().q, np.where(np.arange(fx().s.size).reshape(fx().s.shape) == 1, np.nan,
                                                    fx().s).astype(fx().s.dtype), fx().z), {}),
            ValueError, r"int4_group_dequantize: argument 'scale' must be finite \(.*refuses them\); got NaN at index \(0, 1\)"),
]

declare(OpDecl(
    name=OP, family="lowbit", params=int4_params, build=_build, strategies={"any_shape": int4_any_shape_params},
    outputs=outputs(("w", "float")), cases=CASES, bad_calls=BAD_CALLS,
    description="INT4 group dequantization q*s / (u-z)*s"))
