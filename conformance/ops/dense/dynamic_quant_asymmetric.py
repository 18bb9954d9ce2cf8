"""``dynamic_quant_asymmetric`` (npu_dynamic_quant_asymmetric): per-token asymmetric int8 / int4
quantization with a scale and an offset per row; the same argument checks as ``dynamic_quant``."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ...declare import Case, OpDecl, declare, outputs
from ...values import float_tensor, rng_for
from ._common import (BF16, F16, dynamic_quant_bits_params, dynamic_quant_build, dynamic_quant_params,
                      quantizer_bad_calls, smoothed, unwritten_when_hidden_is_empty)

OP = "dynamic_quant_asymmetric"


def _pre_round(args, kwargs, numerics):
    xf = smoothed(args, kwargs)
    int4 = kwargs.get("dst_type") == "int4"
    levels, top = (15.0, 7.0) if int4 else (255.0, 127.0)
    hi = xf.max(axis=-1, keepdims=True)
    lo = xf.min(axis=-1, keepdims=True)
    scale = np.maximum((hi - lo) / levels, 1e-12)
    return {"y": (xf / scale + (top - hi / scale)).reshape(args[0].shape)}


def _constant_and_extreme_rows():
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    return np.array([[3.0] * 8, [big, -big] * 4, [0.0] * 8, [1e-39, -1e-39] * 4], BF16)


def _rows(h, dtype):
    return lambda: ((float_tensor(rng_for(h), (3, h), dtype, "outlier_channels"),), {})


CASES = [
    Case("constant_and_extreme_rows", lambda: ((_constant_and_extreme_rows(),), {}),
         why="A constant row clamps the scale to fp32(1e-12); bf16 +-max rows overflow rowmax - rowmin to inf; "
             "an all-zero row; a row of +-1e-39 (bf16 subnormal-range values)."),
    Case("constant_and_extreme_rows_int4", lambda: ((_constant_and_extreme_rows(),), {"dst_type": "int4"}),
         why="The same rows with 15 levels (int4 codes packed 8 per int32)."),
    Case("empty_hidden", lambda: ((np.zeros((3, 0), F16),), {}),
         why="H = 0: y is [3, 0]; scale and offset [3] are never written by the device (aclnnDynamicQuantV2 returns "
             "before any kernel for an empty x, aclnn_dynamic_quant.cpp:368): masked as unspecified."),
] + [Case(f"rows_of_{h}_{np.dtype(dt).name}", _rows(h, dt),
          why=f"H = {h}: vector tails (1, 7, 17), and rows beyond one 1024-element tile (1025, 4097, 5000).")
     for h in (1, 7, 17, 1025, 4097, 5000) for dt in (BF16, F16)]

declare(OpDecl(
    name=OP, family="dense", params=dynamic_quant_params, build=dynamic_quant_build,
    strategies={"bits": dynamic_quant_bits_params},
    outputs=outputs(("y", "int"), ("scale", "scale"), ("offset", "scale")),
    numerics_fields=("round_mode", "zero_row", "saturate"), pre_round=_pre_round,
    mask=unwritten_when_hidden_is_empty("scale", "offset"), cases=CASES, bad_calls=quantizer_bad_calls(OP),
    description="per-token asymmetric int8/int4 quantization (npu_dynamic_quant_asymmetric)"))
