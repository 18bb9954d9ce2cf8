"""Matmul kernel variants: ``npu_quant_matmul`` (per-token epilogue), ``npu_grouped_matmul``,
``npu_weight_quant_batchmatmul``, and ``npu_quantize``."""

from __future__ import annotations

from ._core import Variant, src

_QB = "matmul/quant_batch_matmul_v3/"


def quant_matmul(*, m: int, out: str, pertoken: bool, per_tensor: bool, platform) -> Variant:
    """The ``npu_quant_matmul`` (QuantBatchMatmulV3) epilogue variant.

    With a per-token scale and fp16 / bf16 output the decode ("opt") kernel computes
    ``acc * (token[m] * scale[n])`` while the basic and TBE kernels compute ``(acc * scale[n]) * token[m]``
    (``quant_batch_matmul_v3_pertoken_opt.h:507-586`` vs ``quant_batch_matmul_v3_pertoken.h:492-536`` /
    ``_basic_epilogue.h:126-248``). The TBE tiling sets ``isBf16Opt_`` when ``M <= baseM`` with ``baseM``
    from the closed TBE tiling (``quant_batch_matmul_v3_tiling.cpp:669-694``), and the basic tiling may
    pre-empt it through the closed ``CheckSupportConditionQbmm`` (``_basic_tiling.cpp:287-340``): the
    threshold is **not derivable from public source**. The opt kernel is selected only on a platform
    that carries a measured ``qbmm_pertoken_opt_max_m`` (:func:`w8a8.platforms.register`); otherwise
    the basic/TBE epilogue is assumed. ``Numerics.epilogue_order`` selects either for any call.
    """
    sources = (src("nn", _QB + "op_host/op_tiling/quant_batch_matmul_v3_tiling.cpp", "669-694"),
               src("nn", _QB + "op_host/op_tiling/quant_batch_matmul_v3_tiling.cpp", "982"),
               src("nn", _QB + "op_host/op_tiling/quant_batch_matmul_v3_basic_tiling.cpp", "287-340"))
    if not pertoken or out not in ("bfloat16", "float16"):
        what = "int32 accumulator" if out == "int32" else (
            "int8 requant" if out == "int8" else f"{out} per-channel dequant")
        return Variant(op="quant_matmul", name="per-channel" if out != "int32" else "int32", key=None,
                       kernel="QuantBatchMatmulV3 (basic / TBE / pp)", platform=platform.name,
                       rule=f"no per-token scale ({what}): one epilogue", sources=sources[:1],
                       notes=("AscendDequant's internal rounding for a bf16 output is not documented: the golden "
                              "rounds the fp32 product once",) if out == "bfloat16" else ())
    limit = platform.qbmm_pertoken_opt_max_m
    token = "t[m] * s" if per_tensor else "t[m] * s[n]"
    if limit is not None and m <= limit:
        return Variant(op="quant_matmul", name="pertoken-opt", key=None,
                       kernel="BmmDequantPertokenOpt (quant_batch_matmul_v3_pertoken_opt.h)", platform=platform.name,
                       rule=f"per-token scale, {out} output, M = {m} <= {limit} (the platform's measured opt limit)",
                       delta=(("epilogue_order", "combined"),),
                       steps=(f"P[m, n] = {token}   (MulPertokenAndScale, fp32)", "a = fp32(acc)   (CAST_RINT)",
                              "v = P * a", "v = v + bias   (fp32)", f"y = CAST_RINT(v) to {out}"),
                       sources=sources + (src("nn", _QB + "op_kernel/quant_batch_matmul_v3_pertoken_opt.h", "507-586"),))
    why = ("the platform records no opt-kernel M limit (not derivable from public source: closed TBE tiling)"
           if limit is None else f"M = {m} > the platform's opt limit {limit}")
    return Variant(op="quant_matmul", name="pertoken-basic", key=None,
                   kernel="BmmDequantPertoken / BmmDequantPertokenBasic (quant_batch_matmul_v3_pertoken.h, "
                          "_basic_epilogue.h)",
                   platform=platform.name, rule=f"per-token scale, {out} output; {why}",
                   delta=(("epilogue_order", "scale_then_token"),),
                   steps=("v = AscendDequant(acc, scale)   (fp32 acc * s[n])", "v = v * t[m]   (Mul, broadcast)",
                          "v = v + bias   (fp32)", f"y = CAST_RINT(v) to {out}"),
                   sources=sources + (src("nn", _QB + "op_kernel/quant_batch_matmul_v3_pertoken.h", "492-536"),
                                      src("nn", _QB + "op_kernel/quant_batch_matmul_v3_basic_epilogue.h", "126-248")),
                   notes=("the decode opt kernel (epilogue acc * (t[m] * s[n]), Numerics.epilogue_order='combined') "
                          "runs where M <= baseM of the closed TBE tiling; select it with epilogue_order or a platform "
                          "record carrying qbmm_pertoken_opt_max_m",) if limit is None else ())


def grouped_matmul(*, out: str, pertoken: bool, platform) -> Variant:
    """``npu_grouped_matmul`` int8: one epilogue in every template (no variant dependence)."""
    return Variant(op="grouped_matmul", name="quant-mixcore", key=None,
                   kernel="GMMQuantMixCoreCompute (grouped_matmul_quant_mixcore.h)", platform=platform.name,
                   rule="int8 x and weight: the static, dynamic and sparse-M templates share ComputeDequantAndActivate",
                   steps=("v = AscendDequant(acc, scale[e])", "[v = v * per_token_scale[m]]", "[activation]",
                          f"y = CAST_RINT(v) to {out}") if out in ("bfloat16", "float16") else (),
                   sources=(src("tf", "gmm/grouped_matmul/op_kernel/grouped_matmul_quant_mixcore.h", "248-300"),))


_WQ = "matmul/weight_quant_batch_matmul_v2/"
_WQ_T = _WQ + "op_host/op_tiling/"


def weight_quant_batchmatmul(*, m: int, k: int, n: int, x_dtype: str, weight: str, trans_b: bool, per: str,
                             group: int | None, offset: bool, int64_scale: bool, quant_out: bool,
                             platform) -> Variant:
    """The ``npu_weight_quant_batchmatmul`` (WeightQuantBatchMatmulV2) template on A2/A3: the first capable
    of SplitK -> MsdGroup -> Msd -> CustomNzSplitK -> Custom -> Fixpipe -> WeightNz
    (``weight_quant_batch_matmul_v2_tiling_registry.cpp:46-52``).

    ``weight`` ``"int8"`` / ``"int4"``; ``per`` ``"tensor"`` / ``"channel"`` / ``"group"``. ND weights only
    (the golden takes no FRACTAL_NZ weight, so CustomNzSplitK / WeightNz never apply). SplitK (a whitelist
    of shapes with a bf16 antiquant offset) and MsdGroup's int8 whitelist are not checked: such a shape is
    reported as the next capable template.
    """
    reg = src("nn", _WQ_T + "weight_quant_batch_matmul_v2_tiling_registry.cpp", "46-52")
    fp16 = x_dtype == "float16"
    msd_group = (per == "group" and weight == "int4" and group in (64, 128) and not int64_scale and not quant_out
                 and m <= (group or 0) // 8 and k <= 13952 and n <= platform.ai_cores * 2048 and k % (group or 1) == 0
                 and n % 64 == 0 and not trans_b)
    msd_pc = (per == "channel" and not int64_scale and not quant_out and m <= 64 and k % 32 == 0 and n % 32 == 0
              and (weight == "int8" or (trans_b and n >= 2 * m)))
    msd_pg = (per == "group" and weight == "int4" and not trans_b and group in (64, 128) and not int64_scale
              and not quant_out and m <= (group or 0) // 8 and k % (group or 1) == 0 and n % 64 == 0)
    msd_note = ("MSD is a different algorithm (x split into int8 'digits' E1 = 127.499, E2 = 2 * 127.499^2, exact int "
                "GEMMs, then ((acc1/E1 + acc2/E2) * max|x| + rowsum(x) * offset) * scale, CAST_ROUND output): not "
                "modelled; the golden computes the Custom kernel's formula (a tolerance-level difference)")
    if msd_group:
        return Variant(op="weight_quant_batchmatmul", name="msd-group", key=None,
                       kernel="WeightQuantBatchMatmulV2MsdGroup (weight_quant_batch_matmul_v2_msd_group.h)",
                       platform=platform.name,
                       rule=(f"int4 per-group G = {group}, M = {m} <= G/8, K = {k} <= 13952, N = {n} <= aic * 2048, "
                             "K % G == 0, N % 64 == 0, no transpose (MsdGroup IsCapable; deterministic mode off, L1 "
                             "check assumed)"),
                       modelled=False, notes=(msd_note,),
                       sources=(reg, src("nn", _WQ_T + "weight_quant_batch_matmul_v2_tiling_msd_group.cpp", "67-115")))
    if msd_pc or msd_pg:
        why = (f"per-channel, M = {m} <= 64, K % 32 == 0, N % 32 == 0" + ("" if weight == "int8" else ", transB, N >= 2M")
               if msd_pc else f"int4 per-group G = {group}, M = {m} <= G/8, K % G == 0, N % 64 == 0, weight not transposed")
        return Variant(op="weight_quant_batchmatmul", name="msd", key=None,
                       kernel="WeightQuantBatchMatmulV2Msd (weight_quant_batch_matmul_v2_msd_multicore.h / _msd_split_k.h)",
                       platform=platform.name, rule=f"{why}; no int8 output, no int64 scale (Msd IsCapable)",
                       modelled=False, notes=(msd_note,),
                       sources=(reg, src("nn", _WQ_T + "weight_quant_batch_matmul_v2_tiling_msd.cpp", "104-158"),
                                src("nn", _WQ + "op_kernel/weight_quant_batch_matmul_v2_msd_multicore.h")))
    if not int64_scale:
        if fp16:
            steps = ("w = half(w)   (int8/int4 -> half, exact)",
                     "w = w + offset   (half Adds: rounds to fp16)" if offset else "(no offset)",
                     "w_hat = w * scale   (half Muls: rounds to fp16)",
                     "y = x @ w_hat   (cube fp16 x fp16, fp32 accumulation; fixpipe output rounding assumed RINT)")
        else:
            steps = ("w = fp32(w)", "w = w + offset   (fp32)" if offset else "(no offset)", "w = w * scale   (fp32)",
                     "w_hat = CAST_RINT(w) to bf16", "y = x @ w_hat   (cube bf16, fp32 accumulation)")
        return Variant(op="weight_quant_batchmatmul", name="custom", key=None,
                       kernel="WeightQuantBatchMatmulV2Custom (weight_quant_batch_matmul_v2_custom.h)",
                       platform=platform.name,
                       rule=("no earlier template is capable (MSD needs per-channel M <= 64 with K, N % 32, or int4 "
                             "per-group M <= G/8); Custom takes everything but an int64 scale"),
                       delta=(("antiquant_precision", "x_dtype" if fp16 else "fp32"),), steps=steps,
                       sources=(reg, src("nn", _WQ_T + "weight_quant_batch_matmul_v2_tiling_custom.cpp", "49-80"),
                                src("nn", _WQ + "op_kernel/weight_quant_batch_matmul_v2_common.h", "83-100"),
                                src("nn", _WQ + "op_kernel/anti_quant.h", "265-280")),
                       notes=("AntiQuantCalType<biasType> is half for fp16 x (bias fp16) and float for bf16 x",))
    return Variant(op="weight_quant_batchmatmul", name="fixpipe", key=None,
                   kernel="WeightQuantBatchMatmulV2Fixpipe (op_kernel/fixpipe/)", platform=platform.name,
                   rule="an int64 (FP19-packed) antiquant scale: the fixpipe template",
                   notes=("the fixpipe dequantizes the accumulator with the packed scale; the golden's formula "
                          "(FP19 scale applied to the weight) is not confirmed against this kernel",),
                   sources=(reg, src("nn", _WQ_T + "weight_quant_batch_matmul_v2_tiling_fixpipe.cpp")))


def quantize(*, div_mode: bool, platform) -> Variant:
    """``npu_quantize``: ``div_mode=False`` -> ``aclnnAscendQuantV3`` (multiply); ``div_mode=True`` ->
    ``aclnnQuantize``, whose A2/A3 kernel is not public (ops-nn has only the arch35 regbase kernel)."""
    if not div_mode:
        return Variant(op="quantize", name="ascend-quant-v3", key=None, kernel="AscendQuantV3",
                       platform=platform.name, rule="div_mode=False: aclnnAscendQuantV3",
                       steps=("t = fp32(x) * fp32(scale) [+ fp32(offset)]", "y = CAST_RINT(t), saturated"),
                       sources=(src("opp", "op_plugin/ops/opapi/QuantizeKernelNpuOpApi.cpp"),))
    return Variant(op="quantize", name="quantize-closed", key=None, kernel="Quantize (A2/A3 kernel not public)",
                   platform=platform.name, rule="div_mode=True: aclnnQuantize (DAV_2201 dtypes, quantize.cpp:37-57)",
                   steps=("t = fp32(x) * fp32(1 / scale)   (Numerics.quantize_div='mul_rcp')",
                          "y = rint(zero_point + t)   (Numerics.zero_point_position='before_rounding'), saturated"),
                   modelled=False,
                   notes=("the vendor reference is torch.quantize_per_channel; torch 2.13 on x86 computes "
                          "rint(zp + x * fp32(1/s)) (measured, tests/golden/test_quantize.py); the golden follows it. "
                          "The device kernel's division vs reciprocal and zero-point position are only settled on a "
                          "device",),
                   sources=(src("nn", "quant/quantize/op_api/aclnn_quantize.cpp"),
                            src("nn", "quant/quantize/op_api/quantize.cpp", "37-57"),
                            src("nn", "quant/quantize/op_kernel/arch35/quantize_per_channel_regbase.h")))
