"""``npu_dynamic_quant`` / ``npu_dynamic_quant_asymmetric``: which kernel ``DynamicQuantTiling`` runs.

torch_npu calls ``aclnnDynamicQuantV2`` for per-token quantization without ``dst_type_max``
(op-plugin ``DynamicQuantKernelNpuOpApi.cpp:87-107``), which launches ``DynamicQuant`` (symmetric) or
``DynamicQuantV2`` (asymmetric) on A2/A3 (ops-nn ``aclnn_dynamic_quant.cpp:409-428``); both are tiled by
``DynamicQuantTiling::RunFusionKernelTiling`` (``dynamic_quant_tiling.cpp:677-725``), in this order:

1. **single-row, key 100** (``SetSpecialTilingForDs``, lines 518-575): no group_index, int8, symmetric,
   ``H in {4096, 5120, 10240}`` and ``4 <= rows <= 384``;
2. **multi-row, key 10** (``CheckMultiRowPreconditions``, 577-606): no group_index, symmetric,
   ``128 <= H <= L`` and ``H % 8 == 0`` with ``L = min(floor((UB - 1024 - 3392) / (15 if smooth else 11)
   / 64) * 64, 255 * 64)``;
3. otherwise (``CalculateMaxUbSizePerRow`` 474-502, ``SetTilingData`` 430-468, ``SetTilingKey`` 155-183),
   with ``Ha = align16(H)``, ``U = UB - 1024``, ``G`` = group count (only read with smooth scales):
   ``new = align8(G) * 4 + 17 Ha`` (G > 0) or ``(17 if smooth else 11) Ha``; ``per_row = (19 if smooth else
   13) Ha``; ``U // new == 0`` -> key 8 (G > 0) / 6 (large shape); G > 0 -> 7 (MoE); ``per_row < U`` -> 2
   (bf16) / 3 (fp16) (double buffer); else 0 (bf16) / 1 (fp16) (basic).

The codes are the same in every kernel (``rint(xf * (qmax / amax))``); the **scale written** differs:
``amax * fp32(1/qmax)`` in keys 100, 10, 2, 3 and ``1 / (qmax / amax)`` in keys 0, 1, 6, 7, 8. The
asymmetric op never reaches keys 100 / 10 and computes ``GetScaleAndOffset`` in every kernel.
"""

from __future__ import annotations

from ._core import Variant, align, src

_T = "quant/dynamic_quant/op_host/dynamic_quant_tiling.cpp"
_K = "quant/dynamic_quant/op_kernel/"
_SPECIAL_H = (4096, 5120, 10240)
_SPECIAL_ROWS = (4, 384)
_RESERVED = 1024
_MULTI_ROW_FIXED = 256 + 64 + 12 * 64 * 4       # NUM_TWO_FIVE_SIX + ONE_REPEAT_ELE + 12 * ONE_REPEAT_ELE * 4
_MULTI_ROW_MAX = 255 * 64                        # COMPARE_INT * ONE_REPEAT_ELE: one instruction's repeat limit

_KERNELS = {
    0: ("basic", "DynamicQuant (dynamic_quant.h)"), 1: ("basic", "DynamicQuant (dynamic_quant.h)"),
    2: ("double-buffer", "DynamicQuantDbOpt (dynamic_quant_db.h)"),
    3: ("double-buffer", "DynamicQuantDbOpt (dynamic_quant_db.h)"),
    6: ("large-shape", "DynamicQuantLargeShapeOpt (dynamic_quant_large_shape_opt.h)"),
    7: ("moe", "DynamicQuantMoe (dynamic_quant_moe.h)"),
    8: ("moe-large-shape", "DynamicQuantMoeLargeShape (dynamic_quant_moe_large_shape.h)"),
    10: ("multi-row", "DynamicQuantMultiRow (dynamic_quant_multi_row.h)"),
    100: ("single-row", "DynamicQuantSingleRow (dynamic_quant_single_row.h)"),
}

# The scale each symmetric kernel writes, with the kernel lines (ops-nn @ e5c3fa93).
_SCALE_SOURCES = {
    100: (src("nn", _K + "dynamic_quant_single_row.h", "147"), src("nn", _K + "dynamic_quant_single_row.h", "244"),
          src("nn", _K + "dynamic_quant_single_row.h", "313")),
    10: (src("nn", _K + "dynamic_quant_multi_row.h", "129-134"), src("nn", _K + "dynamic_quant_multi_row.h", "236")),
    2: (src("nn", _K + "dynamic_quant_base.h", "95-101"), src("nn", _K + "dynamic_quant_db.h", "319")),
    0: (src("nn", _K + "dynamic_quant.h", "165-171"),),
    6: (src("nn", _K + "dynamic_quant_base.h", "180-187"), src("nn", _K + "dynamic_quant_large_shape_opt.h", "78-79")),
    7: (src("nn", _K + "dynamic_quant_moe.h", "198-204"),),
    8: (src("nn", _K + "dynamic_quant_base.h", "180-187"), src("nn", _K + "dynamic_quant_moe_large_shape.h", "76")),
}
_SCALE_SOURCES[3] = _SCALE_SOURCES[2]
_SCALE_SOURCES[1] = _SCALE_SOURCES[0]
_CODE_SOURCES = {
    100: src("nn", _K + "dynamic_quant_single_row.h", "150-180"),
    10: src("nn", _K + "dynamic_quant_multi_row.h", "215-238"),
    2: src("nn", _K + "dynamic_quant_db.h", "305-320"),
    0: src("nn", _K + "dynamic_quant.h", "165-179"),
    6: src("nn", _K + "dynamic_quant_large_shape_opt.h", "306-316"),
    7: src("nn", _K + "dynamic_quant_moe.h", "198-212"),
    8: src("nn", _K + "dynamic_quant_moe_large_shape.h", "343-353"),
}
_CODE_SOURCES[3] = _CODE_SOURCES[2]
_CODE_SOURCES[1] = _CODE_SOURCES[0]


def multi_row_limit(smooth: bool, ub_bytes: int) -> int:
    """The largest H the multi-row kernel takes (``CheckMultiRowPreconditions``): 16320 without smooth
    scales and 12800 with them at UB = 196608."""
    lim = ub_bytes - _RESERVED - _MULTI_ROW_FIXED
    lim = lim // (15 if smooth else 11) // 64 * 64
    return min(lim, _MULTI_ROW_MAX)


def tiling_key(rows: int, h: int, *, x_dtype: str, dst: str = "int8", smooth: bool = False,
               groups: int | None = None, asymmetric: bool = False, ub_bytes: int) -> tuple[int, str]:
    """``(tiling key, the rule that selected it)``, mirroring ``RunFusionKernelTiling`` (module docstring).

    ``groups``: the length of group_index when one is given (None without); it counts only with smooth
    scales (``CheckSmoothShape`` reads it there)."""
    has_gi = groups is not None
    g = groups if (has_gi and smooth) else 0
    if not has_gi and dst == "int8" and not asymmetric and h in _SPECIAL_H and _SPECIAL_ROWS[0] <= rows <= _SPECIAL_ROWS[1]:
        return 100, (f"no group_index, int8, symmetric, H = {h} in {{4096, 5120, 10240}} and 4 <= rows = {rows} <= 384 "
                     "(SetSpecialTilingForDs)")
    if not has_gi and not asymmetric:
        lim = multi_row_limit(smooth, ub_bytes)
        if 128 <= h <= lim and h % 8 == 0:
            return 10, (f"no group_index, symmetric, 128 <= H = {h} <= {lim} (UB budget "
                        f"{'with' if smooth else 'without'} smooth scales) and H % 8 == 0 (CheckMultiRowPreconditions)")
        why = f"H = {h} outside the multi-row range [128, {lim}] or not a multiple of 8"
    elif asymmetric:
        why = "the asymmetric op (3 outputs) never takes the single-row / multi-row kernels"
    else:
        why = "a group_index is given (the single-row / multi-row kernels refuse it)"
    ha = align(h, 16)
    u = ub_bytes - _RESERVED
    new = (align(g, 8) * 4 + 17 * ha) if g else (17 if smooth else 11) * ha
    per_row = (19 if smooth else 13) * ha
    bf16 = x_dtype == "bfloat16"
    if new and u // new == 0:
        if g:
            return 8, f"{why}; one row of align8(G) * 4 + 17 * Ha = {new} B exceeds the UB budget {u} B (MoE large shape)"
        return 6, f"{why}; one row of {new // ha} * Ha = {new} B exceeds the UB budget {u} B (large shape)"
    if g:
        return 7, f"{why}; G = {g} groups with smooth scales (MoE)"
    if per_row < u:
        return (2 if bf16 else 3), f"{why}; {per_row // max(ha, 1)} * Ha = {per_row} B < {u} B (double buffer)"
    return (0 if bf16 else 1), f"{why}; {per_row // max(ha, 1)} * Ha = {per_row} B >= {u} B (basic)"


def select(rows: int, h: int, *, x_dtype: str, dst: str = "int8", smooth: bool = False, groups: int | None = None,
           asymmetric: bool = False, platform) -> Variant:
    """The :class:`~w8a8.variants.Variant` of one ``dynamic_quant`` (or ``_asymmetric``) call.

    ``rows`` = prod(x.shape[:-1]), ``h`` = x.shape[-1], ``x_dtype`` ``"float16"`` / ``"bfloat16"``,
    ``dst`` ``"int8"`` / ``"int4"``; ``platform`` a :class:`~w8a8.platforms.Platform`."""
    key, rule = tiling_key(rows, h, x_dtype=x_dtype, dst=dst, smooth=smooth, groups=groups, asymmetric=asymmetric,
                           ub_bytes=platform.ub_bytes)
    name, kernel = _KERNELS[key]
    qmax = 7 if dst == "int4" else 127
    tiling = (src("nn", _T, "518-575"), src("nn", _T, "577-606"), src("nn", _T, "430-502"),
              src("nn", _T, "155-183"), src("nn", _K + "dynamic_quant.cpp", "88-109"),
              src("opp", "op_plugin/ops/opapi/DynamicQuantKernelNpuOpApi.cpp", "87-107"))
    smooth_step = ("xf = xf * fp32(smooth[g])   (fp32 Mul, one rounding)",) if smooth else ()
    if asymmetric:
        levels, top = (15, 7) if dst == "int4" else (255, 127)
        steps = ("xf = fp32(x)   (CAST_NONE, exact)", *smooth_step,
                 "rowmax, rowmin of xf   (exact)",
                 f"scale = max((rowmax - rowmin) / {levels}, 1e-12)   (scalar fp32)",
                 f"offset = {top} - rowmax / scale   (scalar fp32)",
                 "t = xf * fp32(1 / scale)   (Muls), then t = t + offset   (Adds)",
                 "code = CAST_RINT(t) -> int32 -> half (CAST_ROUND) -> int8/int4 (CAST_TRUNC)")
        return Variant(op="dynamic_quant_asymmetric", name=name, key=key, kernel=kernel, platform=platform.name,
                       rule=rule, steps=steps,
                       sources=tiling + (src("nn", _K + "dynamic_quant_base.h", "189-198"),
                                         src("nn", _K + "dynamic_quant_db.h", "165-193")),
                       notes=("every asymmetric kernel computes GetScaleAndOffset: no variant dependence",))
    rcp = key in (100, 10, 2, 3)
    scale_step = (f"scale = m * fp32(1/{qmax})   (Muls by the constant {'1.0/127.0' if key == 100 else f'float(1)/{qmax}.0f'}; "
                  "fp32(1/127) = 0x3C010204)" if rcp else "scale = 1 / inv   (scalar fp32 division)")
    steps = ("xf = fp32(x)   (CAST_NONE, exact)", *smooth_step,
             "m = max_j |xf_j|   (Abs + max reductions: exact)",
             f"inv = {qmax} / m   (fp32 division{', scalar' if key in (6, 8) else ', vector Div'})",
             "code = CAST_RINT(xf * inv) -> int" + ("16" if key in (2, 3, 10) else "32")
             + " -> half (CAST_ROUND, exact) -> " + dst + " (CAST_TRUNC, exact)",
             scale_step)
    notes = []
    if key in (6, 8):
        notes.append("inv is a scalar division here; assumed equal to the vector Div (not confirmed)")
    if key == 100 and x_dtype == "float16" and not smooth:
        notes.append("the fp16 path takes the max in fp16 (exact) before casting it to fp32")
    notes.append("an all-zero row: inv = +inf, codes CAST_RINT(0 * inf = NaN) (the integer written is not "
                 "confirmed; the golden writes Numerics.zero_row), scale 0 in both formulas")
    return Variant(op="dynamic_quant", name=name, key=key, kernel=kernel, platform=platform.name, rule=rule,
                   delta=(("scale_out", "amax_mul_rcp" if rcp else "reciprocal"),), steps=steps,
                   sources=tiling + _SCALE_SOURCES[key] + (_CODE_SOURCES[key],), notes=tuple(notes))
