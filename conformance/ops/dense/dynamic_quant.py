"""``dynamic_quant`` (npu_dynamic_quant): per-token symmetric int8 / int4 quantization, optional smooth
scales (one row, or one per group of rows)."""

from __future__ import annotations

import numpy as np

from ...declare import BenchCase, Case, OpDecl, Stage, declare, outputs
from ...values import float_tensor, literal as a, rng_for
from .. import _dsv4
from ._common import (BF16, F16, QUANT_FIELDS, bf16_normal, dynamic_quant_bits_params, dynamic_quant_build,
                      dynamic_quant_params, quantizer_bad_calls, smoothed, unwritten_when_hidden_is_empty)

OP = "dynamic_quant"


def _pre_round(args, kwargs, numerics):
    xf = smoothed(args, kwargs)
    qmax = 7.0 if kwargs.get("dst_type") == "int4" else 127.0
    with np.errstate(divide="ignore", invalid="ignore"):
        pre = xf * qmax / np.abs(xf).max(axis=-1, keepdims=True)
    return {"y": pre.reshape(args[0].shape)}


def _rows(h, dtype):
    return lambda: ((float_tensor(rng_for(h), (3, h), dtype, "outlier_channels"),), {})


_AMAX = 3.40625                                   # 109/32: exact in bf16 and fp16
_SCALE_RCP = np.array([0x3CDBB76F], np.uint32).view(np.float32)[0]    # 3.40625 * fp32(1/127) = 0.026820866
_SCALE_DIV = np.array([0x3CDBB76E], np.uint32).view(np.float32)[0]    # 1 / fp32(127/3.40625) = 0.026820865


def _variant_input(rows, h, dtype, smooth_groups=None):
    """Every row is [3.40625, -1, 0, ...]; ``smooth_groups`` ``[]``: smooth scales of 1 ``[H]``; a list of
    row counts: smooth scales of 1 per group and the group_index of those counts, cumulative (MoE kernels)."""
    def build():
        x = np.zeros((rows, h), dtype)
        x[:, 0], x[:, 1] = _AMAX, -1.0
        if smooth_groups is None:
            return (x,), {}
        if not smooth_groups:
            return (x,), {"smooth_scales": np.ones(h, dtype)}
        g = len(smooth_groups)
        return (x,), {"smooth_scales": np.ones((g, h), dtype),
                      "group_index": np.cumsum(smooth_groups).astype(np.int32)}
    return build


def _variant_expected(rows, h, scale):
    y = np.zeros((rows, h), np.int8)
    y[:, 0], y[:, 1] = 127, -37
    return {"y": y, "scale": np.full(rows, scale, np.float32)}


_VARIANT_WHY = (
    "Every row has amax = 3.40625, inv = fp32(127 / 3.40625) = 37.284405 (0x4215233B); codes rint(3.40625 * inv) "
    "= 127 and rint(-inv) = -37 in every kernel. The scale written is the kernel's: keys 100 (single-row), "
    "10 (multi-row), 2/3 (double buffer) write m * fp32(1/127) = 3.40625 * 0x3C010204 = 0x3CDBB76F "
    "(0.026820866); keys 0/1 (basic), 6 (large shape), 7/8 (MoE) write 1 / inv = 0x3CDBB76E (0.026820865), one "
    "ULP lower (ops-nn dynamic_quant kernels, w8a8.variants.dynamic_quant). ")

# (name, rows, H, dtype, smooth groups, the scale the selected kernel writes, why the tiling selects it)
_VARIANT_GRID = [
    ("rows3_h4096_multi_row", 3, 4096, BF16, None, _SCALE_RCP, "3 rows < 4: not single-row; 128 <= 4096 <= 16320, "
     "H % 8 == 0: multi-row, key 10"),
    ("rows4_h4096_single_row", 4, 4096, BF16, None, _SCALE_RCP, "4 <= 4 rows <= 384, H = 4096: single-row, key 100"),
    ("rows16_h4096_single_row", 16, 4096, BF16, None, _SCALE_RCP, "DeepSeek-V4 decode: single-row, key 100"),
    ("rows16_h4096_fp16_single_row", 16, 4096, F16, None, _SCALE_RCP, "fp16 input: single-row, key 100"),
    ("rows384_h4096_single_row", 384, 4096, BF16, None, _SCALE_RCP, "384 rows: the single-row kernel's last count"),
    ("rows385_h4096_multi_row", 385, 4096, BF16, None, _SCALE_RCP, "385 rows > 384: multi-row, key 10"),
    ("rows16_h5120_single_row", 16, 5120, BF16, None, _SCALE_RCP, "H = 5120 is a single-row width: key 100"),
    ("rows16_h10240_single_row", 16, 10240, BF16, None, _SCALE_RCP, "H = 10240 is a single-row width: key 100"),
    ("rows16_h10248_multi_row", 16, 10248, BF16, None, _SCALE_RCP, "H = 10248 is not: multi-row, key 10"),
    ("rows16_h4095_double_buffer", 16, 4095, BF16, None, _SCALE_RCP, "H % 8 != 0: not multi-row; 13 * align16(H) "
     "= 53248 B < UB - 1024 = 195584 B: double buffer, key 2"),
    ("rows16_h16320_multi_row", 16, 16320, BF16, None, _SCALE_RCP, "H = 16320 = the multi-row limit without smooth "
     "scales (min(floor((196608 - 1024 - 3392) / 11 / 64) * 64, 255 * 64)): key 10"),
    ("rows16_h16328_basic", 16, 16328, BF16, None, _SCALE_DIV, "H = 16328 > 16320: not multi-row; 13 * 16336 = "
     "212368 B >= 195584 B: no double buffer; 11 * 16336 = 179696 B fits once: basic, key 0"),
    ("rows16_h16328_fp16_basic", 16, 16328, F16, None, _SCALE_DIV, "the same shape in fp16: basic, key 1"),
    ("rows64_h20000_large_shape", 64, 20000, BF16, None, _SCALE_DIV, "11 * align16(20000) = 220000 B > 195584 B: "
     "one row does not fit the UB: large shape, key 6"),
    ("rows16_h12800_smooth_multi_row", 16, 12800, BF16, [], _SCALE_RCP, "smooth scales [H]: the multi-row limit is "
     "min(floor((196608 - 1024 - 3392) / 15 / 64) * 64, 16320) = 12800: key 10"),
    ("rows16_h12808_smooth_large_shape", 16, 12808, BF16, [], _SCALE_DIV, "smooth scales, H = 12808 > 12800: not "
     "multi-row; 17 * align16(12808) = 217872 B > 195584 B: large shape, key 6"),
    ("rows16_h12808_moe_large_shape", 16, 12808, BF16, [16], _SCALE_DIV, "a group_index of one group: align8(1) * 4 "
     "+ 17 * 12816 = 217904 B > 195584 B: MoE large shape, key 8"),
    ("rows16_h4096_moe", 16, 4096, BF16, [8, 8], _SCALE_DIV, "a group_index (smooth scales per group): no "
     "single-row / multi-row; G = 2 groups: MoE, key 7"),
]
_VARIANT_CASES = [Case(f"variant_{name}", _variant_input(rows, h, dt, groups), _variant_expected(rows, h, scale),
                       _VARIANT_WHY + f"Shape {rows} x {h} {np.dtype(dt).name}: {rule}.")
                  for name, rows, h, dt, groups, scale, rule in _VARIANT_GRID]


CASES = _VARIANT_CASES + [
    Case("doc_example_1",
         lambda: ((a([[0.7261, 0.3726, 0.9126], [0.9023, 0.9990, 0.1279], [0.8628, 0.6240, 0.9028]], F16),), {}),
         {"y": np.array([[101, 52, 127], [115, 127, 16], [121, 88, 127]], np.int8)},
         "Device output printed in the torch_npu npu_dynamic_quant doc (op-plugin docs/context/"
         "torch_npu-npu_dynamic_quant.md, example 1). Row 0: 127/0.9126 = 139.16..; 0.7261 * that = 101.04 -> 101."),
    Case("doc_example_2_smooth",
         lambda: ((a([[0.6680, 0.9492, 0.0845], [0.1924, 0.5278, 0.1484], [0.6631, 0.9497, 0.0957]], F16),),
                  {"smooth_scales": a([0.8042, 0.0884, 0.8901], F16)}),
         {"y": np.array([[127, 20, 18], [127, 38, 108], [127, 20, 20]], np.int8)},
         "Device output of the doc's smooth_scales example: x is multiplied by smooth in fp32 before the row max "
         "(row 0: 0.668*0.8042 = 0.537 is the max, so it maps to 127)."),
    Case("ties_half_even",
         lambda: ((a([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]], BF16),), {}),
         {"y": np.array([[127, 0, 2, 2, 0, -2, -2, 4]], np.int8), "scale": np.array([1.0], np.float32)},
         "amax = 127, so inv = 127/127 = 1.0 exactly and every x*inv is the exact tie k+0.5: half-to-even "
         "(CAST_RINT) gives 0.5->0, 1.5->2, 2.5->2, 3.5->4 and their negatives; half-away would give 1, 2, 3, 4. "
         "scale = 1/inv = 1.0."),
    Case("ties_half_even_near_amax",
         lambda: ((a([[127.0, 2.5, 3.5, -2.5, 0.5, -126.5]], BF16),), {}),
         {"y": np.array([[127, 2, 4, -2, 0, -126]], np.int8), "scale": np.array([1.0], np.float32)},
         "amax 127 -> inv = 127/127 = 1.0 exactly, so the codes are rint(x): 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, "
         "0.5 -> 0 and -126.5 -> -126 (ties to even); the scale is 1/1.0 = 1.0 (0x3F800000)."),
    Case("reciprocal_vs_divide",
         lambda: ((a([[2.25, 1.125]], BF16),), {}),
         {"y": np.array([[127, 64]], np.int8)},
         "inv = 127/2.25 = 56.444443f; 1.125*inv = 63.5f exactly, a tie that rounds to even 64. The divide form "
         "1.125/(2.25/127) = 63.499996f rounds to 63: this pins the kernel's multiply-by-reciprocal order."),
    Case("all_zero_row",
         lambda: ((a([[0.0] * 8, [1.0, -2.0, 0, 0, 0, 0, 0, 0.5]], F16),), {}),
         {"y": np.array([[0] * 8, [64, -127, 0, 0, 0, 0, 0, 32]], np.int8),
          "scale": np.array([0.0, 2.0 / 127], np.float32)},
         "Row 0: amax = 0, inv = 127/0 = inf, 0*inf = NaN; the golden writes code 0 (the device's NaN->int is not "
         "confirmed) and scale 1/inf = 0. Row 1: inv = 63.5f; 1*63.5 = 63.5 -> 64 (even), 0.5*63.5 = 31.75 -> 32; "
         "scale = 1/63.5f = 0.015748031f (= 2/127 in fp32)."),
    Case("zero_and_subnormal_rows",
         lambda: ((a([[0.0, -0.0, 0.0], [1e-39, -1e-39, 0.0]], BF16),), {}),
         {"y": np.array([[0, 0, 0], [127, -127, 0]], np.int8),
          "scale": np.array([0, 0x162C], np.uint32).view(np.float32)},
         "Row 0 is all zero: inv = 127/0 = inf, 0*inf = NaN -> code 0, scale 0. Row 1 has amax 1e-39 (an fp32 "
         "subnormal; bf16 rounds it to 0x000B0000 = 720896 * 2^-149): 127/amax overflows to inf, so the nonzero codes "
         "saturate to +-127 and the zero stays 0 (NaN code). H = 3 runs the double-buffer kernel (tiling key 2), "
         "whose scale is amax * fp32(1/127) (ops-nn dynamic_quant_db.h:319): 720896 * 2^-149 * 0.0078740157.. = "
         "5676.35 * 2^-149, the fp32 subnormal 5676 * 2^-149 = 0x162C (the basic kernels' 1 / inf would give 0)."),
    Case("int4_packing",
         lambda: ((a([[7, -7, 1, -1, 2, -2, 3, -3]], F16),), {"dst_type": "int4"}),
         {"y": np.array([[np.uint32(0xD3E2F197).view(np.int32)]], np.int32)},
         "int4: qmax = 7 and amax = 7, so inv = 1 and the codes are the values. Packed LSB first into one int32: "
         "nibbles 7, 9(-7), 1, F(-1), 2, E(-2), 3, D(-3) from bit 0 up = 0xD3E2F197."),
    Case("int4_packing_negative_word",
         lambda: ((a([[1, -1, 2, -2, 3, -3, 4, -7]], F16),), {"dst_type": "int4"}),
         {"y": np.array([[0x94D3E2F1 - (1 << 32)]], np.int32), "scale": np.array([1.0], np.float32)},
         "amax 7 -> inv = 1, codes = x: 1, -1, 2, -2, 3, -3, 4, -7 -> nibbles 1 F 2 E 3 D 4 9 from bit 0 up -> "
         "word 0x94D3E2F1, as int32 0x94D3E2F1 - 2^32; scale 1/1 = 1."),
    Case("groups_select_smooth_rows",
         lambda: ((np.full((3, 8), 2.0, F16),),
                  {"smooth_scales": np.array([[4.0] + [1.0] * 7, [100.0] * 8, [0.5] * 8], F16),
                   "group_index": np.array([1, 1, 3], np.int32)}),
         {"y": np.array([[127] + [32] * 7, [127] * 8, [127] * 8], np.int8)},
         "group_index = [1, 1, 3]: row 0 -> group 0, group 1 empty, rows 1-2 -> group 2. Row 0 smooths to "
         "[8, 2, ..., 2]: codes 127 and 2*127/8 = 31.75 -> 32; rows 1-2 are constant 1.0 rows: all 127."),
    Case("smooth_near_fp16_max",
         lambda: ((np.full((2, 8), 60000.0, F16),), {"smooth_scales": np.full(8, 1.0, F16)}),
         why="60000 * 1.0 stays finite in fp32: no refusal; every row is constant, so every code is 127."),
    Case("empty_rows", lambda: ((np.zeros((0, 8), BF16),), {}), why="Zero tokens: empty y [0, 8] and scale [0]."),
    Case("empty_hidden", lambda: ((np.zeros((3, 0), BF16),), {}),
         why="H = 0: y is [3, 0]. The device writes no scale: aclnnDynamicQuant returns before launching a kernel "
             "when x is empty (aclnn_dynamic_quant.cpp:368), leaving torch_npu's uninitialised [3] scale as it was; "
             "masked as unspecified. The golden writes 1/inf = 0 (amax of nothing is its reduction identity)."),
    Case("empty_int4", lambda: ((np.zeros((2, 0, 8), F16),), {"dst_type": "int4"}),
         why="A 3-D x with zero tokens in the middle dim, int4 output: y [2, 0, 1] int32."),
] + [Case(f"rows_of_{h}_{np.dtype(dt).name}", _rows(h, dt),
          why=f"H = {h}: vector tails (1, 7, 17), and rows beyond one 1024-element tile (1025, 4097, 5000).")
     for h in (1, 7, 17, 1025, 4097, 5000) for dt in (BF16, F16)]



def _bench_inputs(p, rng):
    return (bf16_normal(rng, (p["m"], p["h"])),), {}


def bench_case(m: int, h: int = _dsv4.H, tags=()) -> BenchCase:
    return BenchCase(OP, f"M{m}xH{h}", {"m": m, "h": h}, _bench_inputs, work=m * h, unit="elem", tags=tags)


declare(OpDecl(
    name=OP, family="dense", params=dynamic_quant_params, build=dynamic_quant_build,
    strategies={"bits": dynamic_quant_bits_params},
    outputs=outputs(("y", "int"), ("scale", "scale")), numerics_fields=QUANT_FIELDS,
    stages=(Stage("scale", "scale", lambda b, a, k, up: b.dynamic_quant(*a, **k)[1]),
            Stage("codes", "int", lambda b, a, k, up: b.dynamic_quant(*a, **k)[0])),
    pre_round=_pre_round, mask=unwritten_when_hidden_is_empty("scale"), cases=CASES, bad_calls=quantizer_bad_calls(OP),
    bench=lambda full: [bench_case(m, tags=_dsv4.tags(m, "scaling:M")) for m in _dsv4.token_counts(full)],
    description="per-token symmetric int8/int4 quantization (npu_dynamic_quant)"))
