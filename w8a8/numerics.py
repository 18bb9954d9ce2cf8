"""The ``Numerics`` record: every arithmetic choice point on which real backends differ.

A backend declares the record it implements; the golden run with that record must reproduce the
backend bit for bit. The defaults are the Ascend A2/A3 kernels as their sources show
(hicann/ops-nn @ e5c3fa93, hicann/ops-transformer @ c29bc106, Ascend/op-plugin @ 517f2e7d; the file
behind each field is cited below). Where the vendor behaviour is
not confirmed, the default is the golden's documented choice and the field exists so that a
backend which differs can say so.

Several Ascend ops run different kernels for different shapes, and the kernels do not compute the
same arithmetic (docs/kernel-variants.md). Under ``variants="select"`` (the default) each op asks
:mod:`w8a8.variants` which kernel the host tiling of ``platform`` picks for the call and applies that
kernel's choices (a *delta* of the fields below) on top of the record; a field the record sets away
from its default is never overridden. ``variants="fixed"`` uses the record as it is.

Fields
------
round_mode : ``"half_even"`` | ``"half_away"``
    How a float becomes an integer code (quantization, requant). Ascend ``CAST_RINT`` is half to
    even (ops-nn ``dynamic_quant.h``, ``ascend_quant_v2.h::CastOut``); round-half-away-from-zero is ``CAST_ROUND``, C ``round()``, and the
    microxcaling default.
quant_codes : ``"mul_inv"`` | ``"div_scale"`` | ``"mul_rcp"``
    Dynamic per-row quantization. ``"mul_inv"``: ``inv = qmax / amax`` (fp32 division), codes are
    ``round(x * inv)`` — the Ascend ``npu_dynamic_quant`` kernels (ops-nn
    ``quant/dynamic_quant/op_kernel/dynamic_quant.h``). ``"div_scale"``: codes are ``round(x / scale)`` with the scale
    of ``scale_out`` (``npu_dequant_swiglu_quant`` with group_index, the op-plugin goldens). ``"mul_rcp"``:
    ``round(x * fp32(1 / scale))`` (the legacy ``npu_dequant_swiglu_quant`` kernels, :mod:`w8a8.variants.swiglu`;
    torchao ``Int8Tensor``), ``scale`` being the value after ``scale_dtype`` / ``scale_floor`` (below). ``qmax`` is
    ``D`` of ``scale_divisor`` throughout.
scale_out : ``"reciprocal"`` | ``"amax_mul_rcp"`` | ``"amax_div"``
    The per-row scale that dynamic quantization returns: ``1 / inv`` (the basic, large-shape and MoE
    kernels), ``amax * fp32(1/qmax)`` (the single-row, multi-row and double-buffer kernels), or
    ``amax / qmax``. Which kernel runs depends on the shape: see ``variants`` and :mod:`w8a8.variants`.
zero_row : ``"zero"`` | ``"int_min"``
    Codes written for an all-zero row, where ``0 * (qmax / 0)`` is NaN before the float->int cast.
    The device's integer for NaN is not confirmed (docs/golden.md); the golden writes 0. The scale of
    such a row is 0 either way, so downstream matmuls produce 0.
nan_policy : ``"raise"`` | ``"ieee"``
    NaN/Inf in any float input of an op that takes ``numerics`` — data, scales, offsets, zero points —
    and a zero in a scale the op divides by (``quantize(div_mode=True)``, ``dequant_swiglu_quant``'s
    per-channel static scale). ``"raise"``: the golden refuses them (ValueError naming the argument
    and the first bad index), since the device behaviour is unspecified. ``"ieee"``: compute through
    them with IEEE fp32 semantics; a NaN code becomes 0 (as ``zero_row``; ``quantize``: ``nan_code``),
    +-Inf codes saturate.
saturate : bool
    float->int conversions saturate to the integer range (True) or wrap modulo 2^bits (False).
fp19_scale : ``"adapter"`` | ``"never"`` | ``"always"``
    Whether ``quant_matmul`` reduces an fp32 per-channel scale to FP19 (``trans_quant_param``).
    ``"adapter"``: exactly where the torch_npu adapter packs it — fp32 scale, no per-token scale,
    output fp16 or int8 (op-plugin ``QuantMatmulKernelNpuOpApi.cpp``). ``"always"``/``"never"``: everywhere/nowhere.
fp19_round_mode : 0 | 1
    FP19 packing: 0 truncates the mantissa (the default of ``npu_trans_quant_param``), 1 rounds to
    nearest even (ops-nn ``trans_quant_param_v2.h::CalQuantPreScaleValue``).
int32_bias : ``"accumulator"`` | ``"after_dequant"``
    Where an int32 bias enters: added to the int32 accumulator before any scaling (the Ascend
    cube, ``mm.SetBias`` in ops-nn ``quant_batch_matmul_v3_pertoken.h``) or, wrongly, converted to float and added
    after the dequant multiply.
epilogue_order : ``"scale_then_token"`` | ``"token_then_scale"`` | ``"combined"``
    fp32 order of the per-channel and per-token multiplies: ``(acc * scale[n]) * token[m]``
    (Ascend, ops-nn ``quant_batch_matmul_v3_pertoken.h``), ``(acc * token[m]) * scale[n]``, or
    ``acc * (scale[n] * token[m])``.
requant_clamp9 : bool
    int8 requant output: round-and-clamp to 9 bits after the dequant multiply and after adding the
    offset, then clamp to int8 — the CANN golden's ``s9`` steps (ops-nn
    ``matmul/quant_batch_matmul_v3/tests/assets/qbmmv3_kernel_golden.py``). False rounds once.
transcendental : ``"float64"`` | ``"float32"``
    ``exp`` in SiLU / softmax / sigmoid: evaluated in float64 and rounded to float32 (golden
    default: a correctly rounded fp32 result in all but ~2^-29 of cases, so that two backends that
    both do this agree), or NumPy's float32 ``exp``. Device exp units are approximations; their
    difference is a tolerance matter, not a bitwise one.
routing_quant_round : ``"half_even"`` | ``"trunc_fp16_half_away"``
    ``moe_init_routing_v2`` dynamic quant rounding: RINT (the full-load perf kernel: fp32 -> fp16
    round-to-odd, then RINT, which is one RNE), or the gather kernel's fp32 -> fp16 truncation
    followed by fp16 -> int8 half-away (every other shape; :mod:`w8a8.variants.moe`).
zero_point_position : ``"before_rounding"`` | ``"after_rounding"``
    ``quantize(div_mode=True)``: ``rint(zp + x * fp32(1/s))`` (torch ``quantize_per_channel`` on x86,
    torch 2.13, measured: ``tests/golden/test_quantize.py``; the golden's choice) or
    ``rint(x * fp32(1/s)) + zp``. The A2/A3 kernel is not public (:mod:`w8a8.variants.moe`); the two differ
    at ties even for integer zero points (``rint(0.5) + 1 = 1``, ``rint(1.5) = 2``).
quantize_div : ``"mul_rcp"`` | ``"div"``
    ``quantize(div_mode=True)``: multiply by the fp32 reciprocal ``x * fp32(1/s)`` (torch, the vendor
    reference; golden choice) or divide ``x / s`` (the arch35 regbase kernel, not an A2/A3 one).
swiglu_order : ``"a_div"`` | ``"rcp_mul"``
    fp32 SiLU-GLU: ``a / (1 + e) * b`` (``swi_glu_bf16.hpp``: the fp16 / bf16 kernels) or
    ``((1 / (1 + e)) * a) * b`` (``swi_glu_impl.hpp``: the fp32 kernel), ``e = exp(-a)``.
antiquant_precision : ``"fp32"`` | ``"x_dtype"``
    ``weight_quant_batchmatmul`` antiquant ``(w + offset) * scale``: in fp32 with one rounding to x's
    dtype (bf16 Custom kernel), or in x's dtype with a rounding after the add and after the multiply
    (fp16 Custom kernel: ``AntiQuantCalType<half>``).
finalize_precision : ``"fp32"`` | ``"io_dtype"``
    ``moe_finalize_routing`` arithmetic: fp32 with one final rounding (the bf16 templates), or in the
    rows' dtype with a rounding after every add and multiply (the fp16 / fp32 ``T`` templates).
finalize_out_round : ``"half_even"`` | ``"half_away"``
    ``moe_finalize_routing`` bf16 final cast: ``CAST_RINT`` (V2 kernels) or ``CAST_ROUND`` (V1, used
    only where aclnnMoeFinalizeRoutingV2/V4 are missing).
dropped_slot_bias : ``"apply"`` | ``"skip"``
    ``moe_finalize_routing`` dropped slot (index -1): its row reads zero and its bias is still added,
    contributing ``scale * bias[e]`` (generic fp cut-H template), or it is skipped and contributes 0
    (every other template).
gating_precision : ``"fp32"`` | ``"fp16"``
    ``moe_gating_top_k_softmax`` on fp16 logits: probabilities ranked in fp32 (perf kernel), or
    rounded to fp16 first and ranked on the fp16 values (``SoftMax<half>`` / ``TopK<half>`` of the
    full-load kernels), ties to the lower expert index.
static_zero_scale : ``"as_one"`` | ``"ieee"``
    ``dequant_swiglu_quant`` static quantization by a scalar ``quant_scale = 0``: treated as 1 (the
    group kernel's ``(s == 0) ? 1 : 1/s``) or IEEE ``1/0 = inf`` (the legacy kernels, no guard).
ep_dispatch_quant : ``"mc2"`` | ``"deepep_normal"`` | ``"init_routing"``
    Expert-parallel INT8 dispatch, the sender's per-row quantization (ops-transformer
    ``mc2/moe_distribute_dispatch_v2/`` ``QuantProcess``, sgl-kernel-npu ``csrc/deepep/``; read by
    ``moe_distribute_dispatch[_v2]`` with ``quant_mode=2`` and by ``w8a8_moe_ep``): ``"mc2"``: the
    ``npu_dynamic_quant`` main formula of the MC2 kernels, ``inv = 127 / m``, ``q = rint(x * inv)``, ``s = 1 / inv``;
    ``"deepep_normal"``: the Ascend DeepEP normal-mode kernel, the same with ``inv = 127 / (m + 1e-12)`` (equal to
    ``"mc2"`` for ``m >= 2^-15``); ``"init_routing"``: the sgl-kernel-npu ``alltoall`` strategy, which quantizes with
    ``npu_moe_init_routing_v2(quant_mode=1)`` (``s = m / 127``, ``q = x / s``, ``routing_quant_round``:
    :func:`w8a8.dispatch_quant`).
ep_combine_weights : ``"float32"`` | ``"bfloat16"``
    Expert-parallel combine (``moe_distribute_combine[_v2]``, ``w8a8_moe_ep``): the routing weights enter
    the fp32 weighted sum as given (every EP combine kernel: ``expert_scales`` fp32) or
    rounded to bf16 first (as SGLang's single-process ascend_tp path and ``w8a8_moe`` do).

Open numerics: the choices of kernels nobody here wrote
-------------------------------------------------------
The fields below describe what onnxruntime, torchao and compressed-tensors compute (measured bit for
bit against those libraries: ``tests/backends/test_onnxruntime.py``, ``test_torchao.py``). The first
value of each is the Ascend kernel, so :data:`ASCEND` and every result under it are unchanged.
``dt`` below is x's dtype (bfloat16 / float16); ``D`` the scale divisor; ``qmin`` / ``qmax`` the
code range (int8 -128 / 127, int4 -8 / 7); every operation is fp32 unless ``dt(.)`` rounds (RNE).
The symmetric fields (``scale_divisor`` ... ``code_range``, ``dynamic_granularity``) are read by
``dynamic_quant``, by ``w8a8_dynamic_linear``'s activation quantizer and by ``w4a8_dynamic_linear``
(which runs ``dynamic_quant``); the MoE quantizers (``dequant_swiglu_quant``, ``moe_init_routing*``)
keep their own kernels' formulas and do not read them.

scale_divisor : ``"qmax"`` | ``"half_range"``
    ``D`` in every scale formula of ``scale_out`` / ``quant_codes``: ``qmax`` (127 / 7: Ascend,
    ``inv = 127 / amax``) or ``(qmax - qmin) / 2`` (127.5 / 7.5: torchao ``choose_qparams_affine``,
    compressed-tensors). With ``"half_range"`` ``-amax`` maps to ``-127.5``, which rounds to -128:
    use it with ``code_range="full"``.
scale_dtype : ``"float32"`` | ``"input"``
    ``"input"``: the per-row scale ``s`` of ``scale_out`` is rounded to ``dt`` at once,
    ``s = fp32(dt(s))`` (torch computes ``amax / 127.5`` on a bf16 tensor); every later use (codes,
    floor, the returned scale, the matmul epilogue) reads the rounded value. The returned array
    stays float32 (it holds a ``dt`` value exactly).
scale_floor : ``"none"`` | ``"max_f32_eps"`` | ``"max_dtype_tiny"`` | ``"zero_to_dtype_eps"``
    Applied to ``s`` after ``scale_dtype``: ``"none"`` (an all-zero row keeps ``s = 0``;
    ``zero_row`` decides its codes); ``"max_f32_eps"``: ``s = max(s, dt(2^-23))`` (torchao
    ``Int8Tensor``: ``eps = torch.finfo(float32).eps``); ``"max_dtype_tiny"``:
    ``s = max(s, finfo(dt).smallest_normal)`` (``choose_qparams_affine``'s default eps);
    ``"zero_to_dtype_eps"``: ``s = finfo(dt).eps where s == 0`` (bf16 2^-7, fp16 2^-10;
    compressed-tensors: a replacement, not a clamp; in the asymmetric integer scheme it is applied
    after the zero point is computed).
code_arith : ``"float32"`` | ``"input"``
    ``"input"``: the code arithmetic runs in ``dt``: ``inv`` (``"mul_inv"``) or ``r = 1 / s``
    (``"mul_rcp"``) is rounded to ``dt``, and so is ``t`` (``x * inv``, ``x / s`` or ``x * r``, and
    ``t + z`` in the asymmetric ``"before_rounding"`` scheme) before ``rint``: torchao
    ``quantize_affine`` with a bf16 scale (``r = bf16(1 / s)``, ``t = bf16(x * r)``),
    compressed-tensors (``t = bf16(x / s)``).
code_range : ``"symmetric"`` | ``"full"``
    Symmetric codes clamp to ``[-qmax, qmax]`` (Ascend: -128 never appears) or to ``[qmin, qmax]``
    (``"full"``, torchao / compressed-tensors ``quant_min = -128``).
dynamic_granularity : ``"per_token"`` | ``"per_tensor"``
    ``"per_tensor"``: one amax (symmetric) or one ``lo`` / ``hi`` (asymmetric) over **every** row of
    x (onnxruntime ``DynamicQuantizeLinear`` / ``DynamicQuantizeMatMul``, also for 3-D input); the
    returned scale (and offset) is that one value broadcast to ``x.shape[:-1]``. Read by
    ``dynamic_quant``, ``dynamic_quant_asymmetric``, ``w8a8_dynamic_linear``.
asym_range : ``"minmax"`` | ``"through_zero"``
    ``dynamic_quant_asymmetric``'s range: the row's ``[min, max]`` (Ascend) or
    ``[min(rowmin, 0), max(rowmax, 0)]`` (onnxruntime, torchao, compressed-tensors: 0 is always
    exactly representable).
asym_zero_point : ``"float_offset"`` | ``"integer"``
    ``dynamic_quant_asymmetric``: the Ascend float offset (``s = (hi - lo) / 255``,
    ``offset = 127 - hi / s``, ``y = rint(x * (1 / s) + offset)``: docstring of the op) or an integer
    zero point ``z``: ``s = (hi - lo) / L`` (a division, ``L`` = 255 / 15; then ``asym_degenerate``,
    ``scale_dtype``, ``scale_floor``), ``z = qmin + clamp(rint(-(lo / s)), 0, L)`` (``-(lo / s)`` in
    ``dt`` under ``code_arith="input"``), ``t = x / s`` (``quant_codes="div_scale"``) or
    ``x * fp32(1 / s)`` (``"mul_inv"`` / ``"mul_rcp"``), then ``y = sat(rint(t) + z)`` under
    ``zero_point_position="after_rounding"`` (onnxruntime, torchao) or ``sat(rint(t + z))`` under
    ``"before_rounding"`` (compressed-tensors). The returned offset is ``z`` as fp32, so
    ``(y - offset) * s`` dequantizes either scheme. (onnxruntime's uint8 codes and zero point are
    these minus 128 — exact, the shift commutes with ``rint`` and the clamp.)
asym_degenerate : ``"clamp_1e-12"`` | ``"one"``
    ``dynamic_quant_asymmetric``'s scale of a constant range (``hi == lo``): ``max(s, 1e-12)``
    applied to every scale (Ascend) or ``s = 1`` where ``hi == lo`` (onnxruntime's all-zero tensor).
act_quant : ``"symmetric"`` | ``"asymmetric"``
    ``w8a8_dynamic_linear``'s activation quantizer: ``dynamic_quant`` (Ascend) or
    ``dynamic_quant_asymmetric`` with its fields (onnxruntime ``DynamicQuantizeMatMul``), whose
    integer zero point enters the exact int32 accumulator ``acc = (x_q - z) @ W``; the epilogue is
    unchanged (the per-token scale is the asymmetric scale). Requires
    ``asym_zero_point="integer"`` (a float offset cannot enter an integer accumulator: ValueError).
epilogue_intermediate : ``"float32"`` | ``"output"``
    ``quant_matmul`` / ``grouped_matmul`` / ``w8a8_dynamic_linear`` epilogue with a per-token scale
    and a bf16 / fp16 output: ``"output"`` rounds the **first** product of ``epilogue_order`` (for
    ``"combined"`` the single product) to the output dtype; the second product is fp32 of that
    value, then ``+ fp32(bias)`` and the final cast. torchao's int8 linear is
    ``token_then_scale`` + ``"output"``: ``y = out(fp32(out(fp32(acc) * s_x[m])) * s_w[n] + b[n])``.
    The rounding is modelled, an **overflow is not**: where the first product is finite but beyond the
    output dtype's range (fp16: 65504) the golden keeps its fp32 value, so a kernel that writes Inf
    there (torchao 0.18 with fp16 models) fails with that cause instead of being declared away.
    Without a per-token scale it does not apply.
antiquant_dtype : ``"input"`` | ``"float32"``
    ``weight_quant_batchmatmul``: the dequantized weight ``w_hat`` is rounded to x's dtype before the
    matmul (the Ascend cube) or kept in fp32 (onnxruntime ``MatMulNBits``: ``w_hat =
    fp32((w + offset) * scale)``). The golden's exact sum then rounds once to fp32; a library that
    sums in fp32 differs by summation error only.
nvfp4_codes : ``"div_total"`` | ``"mul_rcp_chain"``
    ``nvfp4_quantize`` with ``per_tensor_scale=S``: ``q = e2m1(clamp(x / (S * fp32(s_b))))`` (the
    golden's default: NVFP4 has no Ascend kernel, so the default is the golden's documented choice)
    or torchao 0.18's ``r = fp32(fp32(1 / S) / fp32(s_b))``, ``q = e2m1(clamp(x * r))``. The
    ``global_scale`` convention (vLLM) does not read it.
nan_code : ``"zero"`` | ``"qmin"``
    ``quantize`` under ``nan_policy="ieee"``: a NaN input becomes code 0 or the output's minimum
    (onnxruntime ``QuantizeLinear``: int8 -128, uint8 0, int4 -8, int32 -2^31).

Policy fields (not arithmetic)
------------------------------
platform : a registered :mod:`w8a8.platforms` name, ``"ascend910_93"`` (A3, the default) or
    ``"ascend910b"`` (A2): the chip whose host tiling :mod:`w8a8.variants` mirrors.
variants : ``"select"`` | ``"fixed"``
    ``"select"`` (default): every op asks :mod:`w8a8.variants` which kernel the platform's host tiling
    picks for *this* call and applies that kernel's choices to every arithmetic field the variant
    decides **and the record leaves at its default value** (a field you changed is yours).
    ``"fixed"``: exactly the record, no shape dependence — what a backend with one kernel per op
    declares, and what attribution re-runs the golden with.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from . import platforms as _platforms

__all__ = ["ASCEND", "ASCEND_A2", "Numerics"]

_CHOICES: dict[str, tuple] = {
    "round_mode": ("half_even", "half_away"),
    "quant_codes": ("mul_inv", "div_scale", "mul_rcp"),
    "scale_out": ("reciprocal", "amax_mul_rcp", "amax_div"),
    "zero_row": ("zero", "int_min"),
    "nan_policy": ("raise", "ieee"),
    "saturate": (True, False),
    "fp19_scale": ("adapter", "never", "always"),
    "fp19_round_mode": (0, 1),
    "int32_bias": ("accumulator", "after_dequant"),
    "epilogue_order": ("scale_then_token", "token_then_scale", "combined"),
    "requant_clamp9": (True, False),
    "transcendental": ("float64", "float32"),
    "routing_quant_round": ("half_even", "trunc_fp16_half_away"),
    "zero_point_position": ("before_rounding", "after_rounding"),
    "quantize_div": ("mul_rcp", "div"),
    "swiglu_order": ("a_div", "rcp_mul"),
    "antiquant_precision": ("fp32", "x_dtype"),
    "finalize_precision": ("fp32", "io_dtype"),
    "finalize_out_round": ("half_even", "half_away"),
    "dropped_slot_bias": ("apply", "skip"),
    "gating_precision": ("fp32", "fp16"),
    "static_zero_scale": ("as_one", "ieee"),
    "ep_dispatch_quant": ("mc2", "deepep_normal", "init_routing"),
    "ep_combine_weights": ("float32", "bfloat16"),
    "scale_divisor": ("qmax", "half_range"),
    "scale_dtype": ("float32", "input"),
    "scale_floor": ("none", "max_f32_eps", "max_dtype_tiny", "zero_to_dtype_eps"),
    "code_arith": ("float32", "input"),
    "code_range": ("symmetric", "full"),
    "dynamic_granularity": ("per_token", "per_tensor"),
    "asym_range": ("minmax", "through_zero"),
    "asym_zero_point": ("float_offset", "integer"),
    "asym_degenerate": ("clamp_1e-12", "one"),
    "act_quant": ("symmetric", "asymmetric"),
    "epilogue_intermediate": ("float32", "output"),
    "antiquant_dtype": ("input", "float32"),
    "nvfp4_codes": ("div_total", "mul_rcp_chain"),
    "nan_code": ("zero", "qmin"),
}
_POLICY = ("platform", "variants")
_VARIANT_POLICIES = ("select", "fixed")


@dataclass(frozen=True)
class Numerics:
    """Arithmetic choices of a backend. Defaults: the Ascend A2/A3 kernels (module docstring)."""

    name: str = "ascend-a2a3"
    round_mode: Literal["half_even", "half_away"] = "half_even"
    quant_codes: Literal["mul_inv", "div_scale", "mul_rcp"] = "mul_inv"
    scale_out: Literal["reciprocal", "amax_mul_rcp", "amax_div"] = "reciprocal"
    zero_row: Literal["zero", "int_min"] = "zero"
    nan_policy: Literal["raise", "ieee"] = "raise"
    saturate: bool = True
    fp19_scale: Literal["adapter", "never", "always"] = "adapter"
    fp19_round_mode: Literal[0, 1] = 0
    int32_bias: Literal["accumulator", "after_dequant"] = "accumulator"
    epilogue_order: Literal["scale_then_token", "token_then_scale", "combined"] = "scale_then_token"
    requant_clamp9: bool = True
    transcendental: Literal["float64", "float32"] = "float64"
    routing_quant_round: Literal["half_even", "trunc_fp16_half_away"] = "half_even"
    zero_point_position: Literal["before_rounding", "after_rounding"] = "before_rounding"
    quantize_div: Literal["mul_rcp", "div"] = "mul_rcp"
    swiglu_order: Literal["a_div", "rcp_mul"] = "a_div"
    antiquant_precision: Literal["fp32", "x_dtype"] = "fp32"
    finalize_precision: Literal["fp32", "io_dtype"] = "fp32"
    finalize_out_round: Literal["half_even", "half_away"] = "half_even"
    dropped_slot_bias: Literal["apply", "skip"] = "apply"
    gating_precision: Literal["fp32", "fp16"] = "fp32"
    static_zero_scale: Literal["as_one", "ieee"] = "as_one"
    ep_dispatch_quant: Literal["mc2", "deepep_normal", "init_routing"] = "mc2"
    ep_combine_weights: Literal["float32", "bfloat16"] = "float32"
    scale_divisor: Literal["qmax", "half_range"] = "qmax"
    scale_dtype: Literal["float32", "input"] = "float32"
    scale_floor: Literal["none", "max_f32_eps", "max_dtype_tiny", "zero_to_dtype_eps"] = "none"
    code_arith: Literal["float32", "input"] = "float32"
    code_range: Literal["symmetric", "full"] = "symmetric"
    dynamic_granularity: Literal["per_token", "per_tensor"] = "per_token"
    asym_range: Literal["minmax", "through_zero"] = "minmax"
    asym_zero_point: Literal["float_offset", "integer"] = "float_offset"
    asym_degenerate: Literal["clamp_1e-12", "one"] = "clamp_1e-12"
    act_quant: Literal["symmetric", "asymmetric"] = "symmetric"
    epilogue_intermediate: Literal["float32", "output"] = "float32"
    antiquant_dtype: Literal["input", "float32"] = "input"
    nvfp4_codes: Literal["div_total", "mul_rcp_chain"] = "div_total"
    nan_code: Literal["zero", "qmin"] = "zero"
    platform: str = _platforms.A3.name
    variants: Literal["select", "fixed"] = "select"

    def __post_init__(self):
        for field, allowed in _CHOICES.items():
            value = getattr(self, field)
            if value not in allowed or type(value) is not type(allowed[0]):
                raise ValueError(f"Numerics: field '{field}' must be one of {allowed}; got {value!r}")
        if self.platform not in _platforms.names():
            raise ValueError(f"Numerics: field 'platform' must be one of {_platforms.names()}; got {self.platform!r}")
        if self.variants not in _VARIANT_POLICIES:
            raise ValueError(f"Numerics: field 'variants' must be one of {_VARIANT_POLICIES}; got {self.variants!r}")

    @property
    def platform_record(self) -> _platforms.Platform:
        """The :class:`w8a8.platforms.Platform` named by :attr:`platform`."""
        return _platforms.get(self.platform)

    def replace(self, **changes) -> "Numerics":
        """A copy with some fields changed (``name`` defaults to a description of the change)."""
        if "name" not in changes:
            changes["name"] = self.name + "+" + ",".join(f"{k}={v}" for k, v in changes.items())
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Numerics":
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Numerics.from_dict: unknown fields {sorted(unknown)}")
        return cls(**data)

    def differences(self, other: "Numerics") -> dict[str, tuple]:
        """``{field: (self_value, other_value)}`` for every arithmetic or policy field that differs."""
        return {f: (getattr(self, f), getattr(other, f)) for f in (*_CHOICES, *_POLICY)
                if getattr(self, f) != getattr(other, f)}

    @staticmethod
    def choices() -> dict[str, tuple]:
        """Every arithmetic field with its allowed values (the first is the Ascend default).

        The policy fields ``platform`` and ``variants`` are not arithmetic choices and are not listed."""
        return dict(_CHOICES)

    @staticmethod
    def defaults() -> dict:
        """The default value of every arithmetic field (what ``variants="select"`` may override)."""
        return {f: v[0] for f, v in _CHOICES.items()}


ASCEND = Numerics()
"""The Ascend kernels on A3 (910C, ``ascend910_93``): the golden's default. Each op applies the kernel
variant the A3 host tiling selects for the call (``variants="select"``)."""

ASCEND_A2 = Numerics(name="ascend-a2", platform=_platforms.A2.name)
"""The Ascend kernels on A2 (910B, ``ascend910b``), variants selected for that chip."""
