"""The MoE ops' kernel variants: ``npu_moe_finalize_routing``, ``npu_moe_gating_top_k_softmax``,
``npu_moe_init_routing_v2`` (ops-transformer @ c29bc106)."""

from __future__ import annotations

from ._core import Variant, align, src

_FIN = "moe/moe_finalize_routing_v2/"
_FIN_T = _FIN + "op_host/moe_finalize_routing_v2_tiling_membase.cpp"
_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2}
_RESERVED = 1024
_BOUND_K = 256

# Tiling keys (moe_finalize_routing_v2_tiling.h:26-75): template -> dtype -> (with bias, without bias)
_FIN_KEYS = {
    "big-k": {"float32": (20000, 20019), "float16": (20001, 20020), "bfloat16": (20002, 20021), "mix": (20038, 20044)},
    "load-h": {"float32": (20004, 20023), "float16": (20005, 20024), "bfloat16": (20003, 20022), "mix": (20039, 20045)},
    "cut-h-k2": {"float32": (20006, 20025), "float16": (20007, 20026), "bfloat16": (20008, 20027), "mix": (20040, 20046)},
    "cut-h-k4": {"float32": (20009, 20028), "float16": (20010, 20029), "bfloat16": (20011, 20030), "mix": (20041, 20047)},
    "cut-h": {"float32": (20012, 20031), "float16": (20013, 20032), "bfloat16": (20014, 20033), "mix": (20042, 20048)},
    "all-bias": {"float32": (20015, 20034), "float16": (20016, 20035), "bfloat16": (20017, 20036), "mix": (20043, 20049)},
    "optimized-cut-h": {"float32": (20018, 20037)},
}
_FIN_FILES = {
    ("all-bias", False): "moe_finalize_routing_v2_fp_db_all_bias.h", ("all-bias", True): "moe_finalize_routing_v2_bf16_all_bias.h",
    ("load-h", False): "moe_finalize_routing_v2_fp_db.h", ("load-h", True): "moe_finalize_routing_v2_bf16.h",
    ("big-k", False): "moe_finalize_routing_v2_fp_cutk.h", ("big-k", True): "moe_finalize_routing_v2_bf16_cutk.h",
    ("cut-h-k2", False): "moe_finalize_routing_v2_fp_cuth_k2.h", ("cut-h-k2", True): "moe_finalize_routing_v2_bf16_cuth_k2.h",
    ("cut-h-k4", False): "moe_finalize_routing_v2_fp_cuth_k4.h", ("cut-h-k4", True): "moe_finalize_routing_v2_bf16_cuth_k4.h",
    ("cut-h", False): "moe_finalize_routing_v2_fp_cuth.h", ("cut-h", True): "moe_finalize_routing_v2_bf16_cuth.h",
    ("optimized-cut-h", False): "moe_finalize_routing_v2_fp_cuth_k2_optimized.h",
}


def _align_param(param: int, type_size: int) -> int:
    """``AlignParamV2``: ``param`` elements of ``type_size`` bytes rounded up to whole 32-byte blocks."""
    return align(param * type_size, 32) // type_size


def finalize_template(*, dtype: str, scale_dtype: str | None, n: int, k: int, h: int, bias: bool, skip1: bool,
                      skip2: bool, drop_pad_mode: int, vector_cores: int, ub_bytes: int) -> tuple[str, str]:
    """``(template, rule)`` of ``MoeFinalizeRoutingV2Membase::CalcTilingData`` / ``CalcTilingKeyWithScales``
    (``_tiling_membase.cpp:599-627, 785-802``), with the UB formulas of lines 381-597."""
    d = _SIZES[dtype]
    sd = _SIZES[scale_dtype or dtype]
    ub = ub_bytes - _RESERVED
    per_core = -(-n // vector_cores) if n else 0
    b, s2 = int(bias), int(skip2)
    align_int_k, align_k = _align_param(k, 4), _align_param(k, sd)
    idx_bytes = _align_param(per_core, 4) * k * 4
    bf16 = dtype == "bfloat16"
    if h == 5120 and dtype == "float32" and skip1 and bias and k % 2 == 0 and drop_pad_mode == 0:
        nh = (h * d // 2 + 511) // 512 * 512 // d
        rows_bytes = (nh * b + nh) * d * 2 + nh * d
        per_row = (nh + nh * s2 + nh) * d
        per_loop = (ub - rows_bytes - idx_bytes) // (per_row * 2 + align_int_k * 4 * 2 + align_k * sd * 2)
        if per_loop > 0:
            return "optimized-cut-h", "fp32, H = 5120, skip1 and bias, K even, drop_pad_mode 0 (OptimizedCutH)"
    ah = _align_param(h, d)
    if k <= _BOUND_K:
        if bf16:
            rows_bytes = (ah * b + ah) * d * 2 * 3
            per_row = (ah * 3 + ah * s2 * 3 + ah) * d
        else:
            rows_bytes = (ah * b + ah) * d * 2 + ah * d
            per_row = (ah + ah * s2 + ah) * d
        per_loop = (ub - rows_bytes - idx_bytes) // (per_row + align_int_k * 4 + align_k * sd)
        if per_loop > 0:
            return "all-bias", (f"K = {k} <= 256 and the whole row set fits: {per_loop} token rows per loop "
                                f"(LoadBiasAndCalcTiling; UB {ub} B, {vector_cores} cores)")
        fit = f"LoadBiasAndCalcTiling does not fit ({ub} B - {rows_bytes} B rows - {idx_bytes} B indices)"
    else:
        return "big-k", f"K = {k} > 256 (the K-sliced template)"
    rows_bytes = (ah * b + ah) * d * 2 * (3 if bf16 else 1)
    per_row = (ah * 3 + ah * s2 * 3 + ah) * d if bf16 else (ah + ah * s2 + ah + ah) * d
    per_loop = (ub - rows_bytes) // (align_int_k * 4 + align_k * sd + per_row)
    if per_loop > 0:
        return "load-h", f"{fit}; H and K load whole with double buffering (LoadHKAndCalcTiling)"
    if k == 2:
        return "cut-h-k2", f"{fit}; H does not fit whole (cut H), K = 2"
    if k == 4:
        return "cut-h-k4", f"{fit}; H does not fit whole (cut H), K = 4"
    return "cut-h", f"{fit}; H does not fit whole (cut H)"


def finalize(*, dtype: str, scale_dtype: str | None, n: int, k: int, h: int, bias: bool, skip1: bool, skip2: bool,
             drop_pad_mode: int, platform) -> Variant:
    """The variant of one ``npu_moe_finalize_routing`` call (the V2 membase tiling on A2/A3)."""
    template, rule = finalize_template(dtype=dtype, scale_dtype=scale_dtype, n=n, k=k, h=h, bias=bias, skip1=skip1,
                                       skip2=skip2, drop_pad_mode=drop_pad_mode, vector_cores=platform.vector_cores,
                                       ub_bytes=platform.ub_bytes)
    bf16 = dtype == "bfloat16"
    mix = bf16 and scale_dtype == "float32"
    keys = _FIN_KEYS[template]
    key = keys["mix" if mix else dtype][0 if bias else 1]
    file = _FIN_FILES[(template, bf16)]
    delta = [("finalize_precision", "fp32" if bf16 else "io_dtype"), ("finalize_out_round", "half_even")]
    modelled = True
    notes = []
    if template == "cut-h" and not bf16:
        delta.append(("dropped_slot_bias", "apply"))
        drop = "a dropped slot (-1) reads a zero row and still adds its bias: it contributes scale * bias[e]"
    elif template == "cut-h-k4":
        delta.append(("dropped_slot_bias", "skip"))
        drop = "dropped slots: the K4 kernel's own pair logic (not modelled; see the notes)"
        # fp: a dropped slot changes its partner's bias and scale; bf16: without skips slot 1 is lost
        if (bf16 and not (skip1 or skip2)) or (not bf16 and drop_pad_mode in (1, 3)):
            modelled = False
        notes.append("the cut-H K=4 kernel processes slots in pairs: with no skip input the first pair's second slot "
                     "is scaled but never added in the bf16 kernel (bf16_cuth_k4.h:523-532), and in the fp kernel a "
                     "dropped slot 0 or 1 changes how its partner is biased and scaled (fp_cuth_k4.h:442-478). The "
                     "golden computes the all-bias rule here (each slot in turn, a dropped slot skipped): a source "
                     "reading only H beyond the load-H limit reaches; confirm on a device")
    else:
        delta.append(("dropped_slot_bias", "skip"))
        drop = "a dropped slot (-1) is skipped: it contributes 0 even with a bias"
    arith = ("fp32 (bf16 rows and bias cast up; mixed-precision fp32 scales used as they are)" if bf16 else
             f"{dtype} arithmetic: every Add and Muls rounds to {dtype}; the scale is a {dtype} scalar")
    steps = (f"arithmetic: {arith}",
             "out = skip1 + skip2   (or skip + 0; nothing without skips)",
             "per slot j: r = row[idx(i, j)] + bias[e]; r = r * scale[i, j]; out = out + r "
             "(the first slot initialises out when there is no skip)",
             drop,
             "y = CAST_RINT(out) to bf16" if bf16 else f"y = out ({dtype})")
    return Variant(op="moe_finalize_routing", name=template, key=key, kernel=f"{file}", platform=platform.name,
                   rule=rule, delta=tuple(delta), steps=steps, modelled=modelled, notes=tuple(notes),
                   sources=(src("tf", _FIN_T, "599-627"), src("tf", _FIN_T, "492-547"), src("tf", _FIN_T, "431-490"),
                            src("tf", _FIN_T, "785-802"), src("tf", _FIN + "op_host/moe_finalize_routing_v2_tiling.h", "26-75"),
                            src("tf", _FIN + "op_kernel/" + file),
                            src("tf", _FIN + "op_kernel/moe_finalize_routing_v2_fp_db_all_bias.h", "323-494"),
                            src("tf", _FIN + "op_kernel/moe_finalize_routing_v2_bf16_all_bias.h", "507-566"),
                            src("tf", _FIN + "op_kernel/moe_finalize_routing_v2_fp_cuth.h", "397-437"),
                            src("opp", "op_plugin/ops/opapi/MoeFinalizeRoutingV2KernelNpuOpApi.cpp", "31-101")))


_GAT = "moe/moe_gating_top_k_softmax/"
_PERF_MAX_E = 1024
_FULL_LOAD_MAX_E = 98304


def gating_softmax(*, e: int, k: int, dtype: str, platform) -> Variant:
    """The variant of one ``npu_moe_gating_top_k_softmax`` call: the first capable template of
    perf (priority 1000) -> E-K full-load (10000) -> K full-load (20000)."""
    base = (src("tf", _GAT + "op_host/moe_gating_top_k_softmax_tiling_perf.cpp", "118-124"),
            src("tf", _GAT + "op_host/moe_gating_top_k_softmax_tiling_perf.cpp", "258"),
            src("tf", _GAT + "op_host/moe_gating_top_k_softmax_tiling_e_k_full_load.cpp", "91-103"),
            src("tf", _GAT + "op_host/moe_gating_top_k_softmax_tiling_e_k_full_load.cpp", "309"),
            src("tf", _GAT + "op_host/moe_gating_top_k_softmax_tiling_k_full_load.cpp", "66-69"))
    if (e <= _PERF_MAX_E and e % 8 == 0 and k <= 8) or e < 8:
        why = f"E = {e} < 8" if e < 8 else f"E = {e} <= 1024, E % 8 == 0 and k = {k} <= 8"
        return Variant(op="moe_gating_top_k_softmax", name="perf", key=None,
                       kernel="MoeGatingTopKSoftmaxPerf (moe_gating_top_k_softmax_perf.h)", platform=platform.name,
                       rule=f"{why} (the perf template's IsCapable)", delta=(("gating_precision", "fp32"),),
                       steps=("xf = fp32(x)", "e = exp(xf - rowmax)   (fp32)", "p = e / rowsum(e)   (vector Div)",
                              "top-k of p: Sort32 + MrgSort on fp32 (ties: lower index assumed, not confirmed)",
                              "y = cast(p[idx]) to x's dtype"),
                       sources=base + (src("tf", _GAT + "op_kernel/moe_gating_top_k_softmax_perf.h"),))
    if e <= _FULL_LOAD_MAX_E:
        fp16 = dtype == "float16"
        return Variant(op="moe_gating_top_k_softmax", name="e-k-full-load", key=None,
                       kernel="MoeGatingTopKSoftmaxEKFullLoad (moe_gating_top_k_softmax_e_k_fullload.h)",
                       platform=platform.name,
                       rule=(f"not perf (E = {e}, k = {k}: needs E <= 1024, E % 8 == 0, k <= 8, or E < 8); "
                             f"E <= {_FULL_LOAD_MAX_E} and a row fits in UB"),
                       delta=(("gating_precision", "fp16" if fp16 else "fp32"),),
                       steps=(("SoftMax<half> on the fp16 logits: p16 = fp16 probabilities" if fp16 else
                               "xf = fp32(x) (bf16 cast up); SoftMax<float>"),
                              ("TopK<half> on p16: ranking on the fp16 values, ties to the lower index (assumed)" if fp16
                               else "TopK<float> on the fp32 probabilities"),
                              "y = p16[idx]" if fp16 else "y = cast(p[idx]) to x's dtype"),
                       sources=base + (src("tf", _GAT + "op_kernel/moe_gating_top_k_softmax_e_k_fullload.h", "308-361"),),
                       notes=("whether a row fits in UB depends on the closed GetSoftMaxMaxTmpSize / GetTopKMaxMinTmpSize "
                              "APIs; assumed for E <= 98304",
                              "SoftMax<half> may keep fp32 intermediates internally; the golden rounds the fp32 softmax "
                              "to fp16 once (an exp/sum difference is a tolerance matter)") if fp16 else ())
    return Variant(op="moe_gating_top_k_softmax", name="k-full-load", key=None,
                   kernel="MoeGatingTopKSoftmaxKFullLoad (moe_gating_top_k_softmax_k_fullload.h)",
                   platform=platform.name, rule=f"E = {e} > {_FULL_LOAD_MAX_E}: the K full-load template (always capable)",
                   delta=(("gating_precision", "fp16" if dtype == "float16" else "fp32"),), modelled=False,
                   steps=("SoftmaxFlashV2 over E chunks, a running top-k of exp values per chunk",
                          "y = top-k values * (1 / rowsum); bf16 output cast with CAST_ROUND"),
                   sources=base + (src("tf", _GAT + "op_kernel/moe_gating_top_k_softmax_k_fullload.h", "162-318"),),
                   notes=("a different algorithm (chunked flash softmax, reciprocal multiply, CAST_ROUND bf16 output); "
                          "the golden computes the full-load formula",))


_RT = "moe/moe_init_routing_v3/"
_RT_T = _RT + "op_host/moe_init_routing_v3_tiling.cpp"
_PERF_X = (1, 7168)
_ASSIST_NUM = 256


def sort_loop_max_element(vector_cores: int, ub_bytes: int) -> int:
    """``sortLoopMaxElement`` (``_tiling.cpp:540-541``): the one-core sort's capacity, 6080 at UB = 196608."""
    return (ub_bytes - vector_cores * 32) // (4 * 2 * 4) // 32 * 32


def init_routing_v2(*, n: int, k: int, h: int, x_dtype: str, quant_mode: int, scale_shape: tuple | None,
                    offset: bool, start: int, end: int, expert_num: int, count_type: int, row_idx_type: int,
                    platform) -> Variant:
    """The variant of one ``npu_moe_init_routing_v2`` call (``MoeInitRoutingV3`` tiling, ``GetTilingKey``
    ``_tiling.cpp:556-576``)."""
    nk = n * k
    base = (src("tf", _RT_T, "474-517"), src("tf", _RT_T, "536-549"), src("tf", _RT_T, "556-576"),
            src("tf", _RT_T, "660-676"))
    perf_full = ((n, h) == _PERF_X and k == 8 and scale_shape == (256, 7168) and not offset and x_dtype == "bfloat16"
                 and start == 0 and end == _ASSIST_NUM and quant_mode == 1 and count_type == 2)
    if perf_full:
        return Variant(op="moe_init_routing_v2", name="full-load-perf", key=2000000,
                       kernel="MoeV3FullLoad (moe_v3_full_load.h)", platform=platform.name,
                       rule="x [1, 7168] bf16, expert_idx [1, 8], smooth scale [256, 7168], no offset, range [0, 256), "
                            "quant_mode 1, key-value counts (IsPerformanceMode_X_1_7168_EXPERT_IDX_1_8_SCALE_256_7168)",
                       delta=(("routing_quant_round", "half_even"),),
                       steps=("xf = fp32(x) * smooth[e]", "s = max|xf| / 127.0f   (scalar)", "t = xf / s   (Div)",
                              "fp32 -> fp16 CAST_ODD, fp16 -> int8 CAST_RINT (= one RNE of t)",
                              "row_idx_type 1: all N*K sorted source indices written"),
                       sources=base + (src("tf", _RT + "op_kernel/moe_v3_full_load.h", "185-205"),))
    gather_sort = (quant_mode == -1 and row_idx_type == 1 and count_type == 1 and expert_num == _ASSIST_NUM
                   and end - start <= 32 and 384 <= n <= 8192 and k == 8)
    if gather_sort and nk < 21845:
        sort_mode, name = 2, "gather-sort-one-core"
    elif gather_sort and nk <= 8192 * 8:
        sort_mode, name = 3, "gather-sort-multi-core"
    else:
        gather_sort = False
        cap = sort_loop_max_element(platform.vector_cores, platform.ub_bytes)
        sort_mode, name = (0, "sort-one-core") if nk <= cap else (1, "sort-multi-core")
    key = 1000000 + 100000 * sort_mode + 10000 * (quant_mode + 1) + 1000 * row_idx_type
    if gather_sort:
        rule = (f"quant_mode -1, row_idx_type 1, count type 1, expert_num 256, range {end - start} <= 32, "
                f"384 <= N = {n} <= 8192, k = 8 (GetPerformanceMode)")
        scatter = ("row_idx_type 1: MoeSortActualExpert gathers the ids in [start, end), sorts them and writes only "
                   "that many indices: entries past the active count are not written (moe_v3_sort_actual_expert.h)")
    else:
        cap = sort_loop_max_element(platform.vector_cores, platform.ub_bytes)
        rule = (f"N*K = {nk} {'<=' if sort_mode == 0 else '>'} sortLoopMaxElement = {cap} "
                f"({'one-core' if sort_mode == 0 else 'multi-core'} sort)")
        scatter = ("sort key -id for id >= start, MIN_FP32 below; descending sort with indices; all N*K sorted "
                   "source indices are written (row_idx_type 1: the whole stable permutation)")
    steps = [scatter]
    delta = ()
    sources = base
    if quant_mode == 1:
        delta = (("routing_quant_round", "trunc_fp16_half_away"),)
        steps += ["xf = fp32(x) [* smooth[e]]", "s = max|xf| / 127.0f   (scalar: the scale written)",
                  "t = xf / s   (vector Div)", "fp32 -> fp16 CAST_TRUNC, then fp16 -> int8 CAST_ROUND (half away)"]
        sources = base + (src("tf", _RT + "op_kernel/moe_v3_gather_dynamic_quant.h", "111-143"),
                          src("tf", _RT + "op_kernel/moe_v3_gather_dynamic_quant.h", "240-265"))
    sources += (src("tf", _RT + "op_kernel/moe_v3_sort_one_core.h", "52-112"),)
    return Variant(op="moe_init_routing_v2", name=name, key=key,
                   kernel="MoeInitRoutingV3 (" + ("moe_v3_sort_actual_expert.h" if gather_sort else
                                                  "moe_v3_sort_one_core.h" if sort_mode == 0 else
                                                  "moe_v3_sort_multi_core.h") + ")",
                   platform=platform.name, rule=rule, delta=delta, steps=tuple(steps), sources=sources,
                   notes=("the tie order among equal expert ids (Sort / MrgSort stability) is not confirmed; the "
                          "golden sorts stably",))


def writes_full_scatter(variant: Variant) -> bool:
    """Whether a ``row_idx_type=1`` call of this variant writes all ``N*K`` scatter indices (every sort
    kernel) or only the active ones (the gather-sort perf kernels)."""
    return not variant.name.startswith("gather-sort")
