"""``npu_swiglu`` and ``npu_dequant_swiglu_quant``: which kernel the host tiling runs.

* ``npu_swiglu``: the tiling key is the dtype (``context->SetTilingKey(dataType)``, ops-nn
  ``activation/swi_glu/op_host/swi_glu_tiling.cpp:548``): 0 fp32 (``SwigluVector``), 1 fp16 and 27
  bf16 (``SwigluVectorBF16``); the shape only toggles double buffering (``swi_glu.cpp``).
* ``npu_dequant_swiglu_quant``: two tiling templates (``dequant_swiglu_quant_tiling.cpp:736``,
  ``_tiling_base.cpp:716``): priority 0 ``DequantSwigluQuantDskTiling`` is capable when a group_index
  is given (``IsCapable`` 545-560), priority 1 ``DequantSwigluQuantTiling`` (the legacy kernels) when
  it is not (``_tiling_base.cpp:92-102``). They quantize differently (module docstrings below).
"""

from __future__ import annotations

from ._core import Variant, src

_SW = "activation/swi_glu/"
_DSQ = "quant/dequant_swiglu_quant/"


def swiglu(x_dtype: str, *, platform) -> Variant:
    """The variant of ``npu_swiglu`` for x of ``x_dtype`` (``"float32"``, ``"float16"``, ``"bfloat16"``)."""
    tiling = (src("nn", _SW + "op_host/swi_glu_tiling.cpp", "548"), src("nn", _SW + "op_kernel/swi_glu.cpp", "29-64"),
              src("nn", _SW + "op_kernel/swi_glu_single.hpp", "48"))
    if x_dtype == "float32":
        return Variant(op="swiglu", name="fp32", key=0, kernel="SwigluVector (swi_glu_impl.hpp)", platform=platform.name,
                       rule="x is float32: tiling key = dataType = 0", delta=(("swiglu_order", "rcp_mul"),),
                       steps=("c = a * beta (beta = -1: exact negation)", "c = exp(c)   (fp32)", "c = c + 1   (fp32)",
                              "c = 1 / c   (Div of a tensor of ones)", "c = c * a", "c = c * b", "out = c (fp32)"),
                       sources=tiling + (src("nn", _SW + "op_kernel/swi_glu_impl.hpp", "48-82"),))
    key = 1 if x_dtype == "float16" else 27
    return Variant(op="swiglu", name=x_dtype, key=key, kernel="SwigluVectorBF16 (swi_glu_bf16.hpp)",
                   platform=platform.name, rule=f"x is {x_dtype}: tiling key = dataType = {key}",
                   delta=(("swiglu_order", "a_div"),),
                   steps=("a = fp32(a), b = fp32(b)   (CAST_NONE, exact)", "c = exp(-a)   (fp32)", "c = c + 1",
                          "c = a / c   (Div)", "c = c * b", "out = CAST_RINT(c) to x's dtype (DAV_2201)"),
                   sources=tiling + (src("nn", _SW + "op_kernel/swi_glu_bf16.hpp", "57-92"),))


# The legacy tiling keys (dequant_swiglu_quant/op_host/swi_glu_tiling.h:32-56), by
# (x int32?, quant_mode, bias kind, scale size one?). Without a bias the legacy tiling's bias type is
# DT_FLOAT (_tiling_base.cpp:173).
_STATIC_FLOAT = {("float16", True): 10000, ("bfloat16", True): 10001, ("float16", False): 10002,
                 ("bfloat16", False): 10003}
_DYNAMIC_FLOAT = {("float16", True): 30009, ("bfloat16", True): 30011, ("float16", False): 30010,
                  ("bfloat16", False): 30012}
_INT_KEYS = {(0, "int32", True): 10004, (0, "int32", False): 10005, (0, "float32", True): 10008,
             (0, "float32", False): 10009, (1, "int32", True): 30001, (1, "int32", False): 30005,
             (1, "float32", True): 30002, (1, "float32", False): 30006}
_QS_DTYPE = {"float32": 0, "float16": 1, "bfloat16": 2}
_BIAS_DTYPE = {None: 0, "bfloat16": 0, "float16": 1, "float32": 2, "int32": 3}


def dequant_swiglu_quant(*, x_dtype: str, tokens: int, groups: int | None, quant_mode: int,
                         quant_scale_dtype: str | None, quant_scale_size: int, bias_dtype: str | None,
                         scalar: bool, platform) -> Variant:
    """The variant of one ``npu_dequant_swiglu_quant`` call (group kernel or legacy kernel).

    ``groups`` = len(group_index) (None without), ``tokens`` = T, ``quant_scale_size`` = its element
    count (0 without), ``scalar`` = a ``[1]`` static quant_scale without group_index."""
    if groups is not None:
        key = 100000000 + 100 * _QS_DTYPE.get(quant_scale_dtype or "float32", 0) + 1000 * _BIAS_DTYPE[bias_dtype]
        cut = (groups >= 32 and tokens // max(groups, 1) <= 16 and bias_dtype is None
               and (quant_scale_dtype or "float32") == "float32" and x_dtype == "int32")
        rule = "a group_index is given: DequantSwigluQuantDskTiling (priority 0, IsCapable = group_index present)"
        name = "group"
        kernel = "DequantSwigluQuantBase (dequant_swiglu_quant.h)"
        if cut:
            key += 10000000
            name = "cut-group"
            kernel = "DequantSwigluQuantGroup (dequant_swiglu_quant_cut_group.h; overrides Process() only)"
            rule += f"; 1-D group_index, G = {groups} >= 32, floor(T/G) <= 16, no bias, fp32 quant_scale, int32 x"
        dq = ("v = x + bias[g]   (int32 Add, int32 x with an int32 bias)", "v = fp32(v)",
              "v = v * weight_scale[g]", "v = v * activation_scale[t]")
        act = ("gate, up halves; e = exp(-gate); gate = gate / (1 + e); o = up * gate   (fp32)",)
        if quant_mode == 1:
            steps = dq + act + ("[o = o * fp32(smooth[g])]", "m = max|o|",
                                "scale = m * fp32(1/127)   (Muls by DYNAMIC_QUANT_FACTOR)",
                                "code = CAST_RINT(o / scale)   (vector Div) -> int32 -> half (CAST_ROUND) -> int8 (CAST_TRUNC)")
            delta = (("quant_codes", "div_scale"), ("scale_out", "amax_mul_rcp"))
        else:
            steps = dq + act + ("code = CAST_RINT(o / quant_scale[g] + quant_offset[g])   (Div, Add)",
                                "[1]-sized scale: o * q + offset with q = (s == 0) ? 1 : 1/s")
            delta = (("static_zero_scale", "as_one"),)
        return Variant(op="dequant_swiglu_quant", name=name, key=key, kernel=kernel, platform=platform.name,
                       rule=rule, delta=delta, steps=steps,
                       sources=(src("nn", _DSQ + "op_host/dequant_swiglu_quant_tiling.cpp", "545-581"),
                                src("nn", _DSQ + "op_host/dequant_swiglu_quant_tiling.cpp", "141-176"),
                                src("nn", _DSQ + "op_host/dequant_swiglu_quant_tiling.cpp", "386-420"),
                                src("nn", _DSQ + "op_kernel/dequant_swiglu_quant.h", "244-310"),
                                src("nn", _DSQ + "op_kernel/dequant_swiglu_quant.h", "341-397"),
                                src("nn", _DSQ + "op_kernel/dequant_swiglu_quant.h", "399-465"),
                                src("nn", _DSQ + "op_kernel/dequant_swiglu_quant.h", "662-784")),
                       notes=("the per-group bias [G, 2H] is applied (CopyInBias(groupIdx)); the tiling refuses a "
                              "bias with a 2-D group_index",))
    one = quant_scale_size == 1
    if x_dtype == "int32":
        bias = "int32" if bias_dtype == "int32" else "float32"
        key = _INT_KEYS[(quant_mode, bias, one)]
        perf = quant_mode == 1 and bias == "float32" and not one
    else:
        key = (_STATIC_FLOAT if quant_mode == 0 else _DYNAMIC_FLOAT)[(x_dtype, one)]
        perf = False
    rule = ("no group_index: DequantSwigluQuantTiling (the legacy kernels, priority 1); key by x dtype, "
            "bias dtype and quant_scale size (getTilingKey" + ("Dynamic" if quant_mode else "Static") + ")")
    dq = ("v = fp32(x + bias)   (int32 x: int32 bias added first)", "v = v * weight_scale", "[v = v * activation_scale[t]]")
    act = ("a = gate half; c = exp(-a); c = c + 1; a = a / c   (fp32)", "o = a * up", "[o = o * quant_scale]   (Mul)")
    sources = (src("nn", _DSQ + "op_host/dequant_swiglu_quant_tiling_base.cpp", "92-102"),
               src("nn", _DSQ + "op_host/dequant_swiglu_quant_tiling_base.cpp", "589-691"),
               src("nn", _DSQ + "op_host/swi_glu_tiling.h", "32-56"))
    if quant_mode == 1:
        steps = dq + act + ("m = max|o|", "scale = m / 127   (scalar fp32 division: the scale written)",
                            "r = 1 / scale   (scalar)", "code = CAST_RINT(o * r) -> int16 -> half -> int8 (CAST_NONE, exact)")
        note = ("key 30013 (DequantSwigluQuantDynamicPerformance) replaces 30006 for 32-B-aligned rows of at most "
                "1536 columns, one row per tile, no bias and an activation scale (isPerformanceBranch, "
                "_tiling_base.cpp:674-682): the same arithmetic (dynamic_performance.hpp:374-376)",) if perf else ()
        return Variant(op="dequant_swiglu_quant", name="legacy-dynamic", key=key,
                       kernel="DequantSwigluQuantDynamic* (dequant_swiglu_quant_dynamic_*.hpp)", platform=platform.name,
                       rule=rule, delta=(("quant_codes", "mul_rcp"), ("scale_out", "amax_div")), steps=steps,
                       sources=sources + (src("nn", _DSQ + "op_kernel/dequant_swiglu_quant_dynamic_base.hpp", "169-216"),
                                          src("nn", _DSQ + "op_kernel/dequant_swiglu_quant_dynamic_base.hpp", "237-288"),
                                          src("nn", _DSQ + "op_kernel/dequant_swiglu_quant_dynamic_base.hpp", "351-375"),
                                          src("nn", _DSQ + "op_kernel/dequant_swiglu_quant_dynamic_performance.hpp",
                                              "374-376")),
                       notes=note)
    steps = dq + act[:2] + (("code = CAST_RINT(o * (1 / s) + offset)   (1/s taken once, no zero guard: s = 0 gives "
                             "+-inf / NaN)",) if scalar else
                            ("code = CAST_RINT(o / quant_scale + quant_offset)   (Div, Add)",)) + (
        "-> int16 -> half -> int8 (CAST_NONE)",)
    return Variant(op="dequant_swiglu_quant", name="legacy-static", key=key,
                   kernel="DequantSwigluQuantStatic* (dequant_swiglu_quant_static_*.hpp)", platform=platform.name,
                   rule=rule, delta=(("static_zero_scale", "ieee"),), steps=steps,
                   sources=sources + (src("nn", _DSQ + "op_kernel/dequant_swiglu_quant_static_base.hpp", "68-78"),
                                      src("nn", _DSQ + "op_kernel/dequant_swiglu_quant_static_base.hpp", "273-311")),
                   notes=("the device's integer for CAST_RINT(+-inf / NaN) is not confirmed; the golden saturates "
                          "+-inf and writes 0 for NaN",) if scalar else ())
