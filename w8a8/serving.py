"""How a serving engine composes the W8A8 ops of a Linear and of a MoE layer: one record per engine.

:class:`~w8a8.numerics.Numerics` says how one op computes; a :class:`Serving` record says in which order
an engine calls the ops and what it does between them (where ``routed_scaling_factor`` is applied, which
clamps run, which dtype the router logits have, ...). Every field is a :class:`Reading`: the engine's
value and the ``file@commit`` it was read from (``@unpinned``: SGLang's ``models/deepseek_v2.py`` was read from
a newer, DeepSeek-V4-aware copy whose repository and commit were not named). Two records: :data:`SGLANG` (the default) and
:data:`VLLM_ASCEND`. The ops that compose (``w8a8_dynamic_linear``, ``w8a8_static_linear``, ``w8a8_moe``,
``w8a8_moe_prequantized``, ``w8a8_moe_ep`` and their ``*_stages``) take one as ``serving=``; a name
(``"sglang"``, ``"vllm-ascend"``) is accepted wherever a record is (:func:`get`).

The fields, with the row id the documentation uses (docs/serving-compositions.md):

====  =====================  =====================================================================
row   field                  values
====  =====================  =====================================================================
M1    routed_clamp           ``"none"`` (routed experts unclamped) / ``"swiglu_limit"`` (clamped in
                             the fused SwiGLU-quant, as ``dequant_swiglu_quant(swiglu_limit=L)``)
M2    routed_scaling         ``"output_mul_bf16"`` (weights normalised without it; the routed output
                             times it in bf16, then + shared) / ``"output_muls_add"`` (``x * s + y``)
M3    dsv4_routing           ``"torch_ops"`` / ``"moe_gating_top_k_hash"``
M4    router_logits          ``"bfloat16"`` / ``"float32"`` (the gate matmul's dtype)
M5    shared_clamp           ``"bf16_clamp"``: gate ``clamp(max=L)``, up ``clamp(-L, L)`` in bf16, then
                             SiluAndMul (``npu_swiglu``)
M6    shared_gate_up         ``"merged"``: one ``gate_up_proj`` (one quantization, one matmul)
M7    shared_add             ``"bf16_add"``
M8    prequantized_moe       ``"deepep_expert_grouped"`` / ``"mc2_dispatch"``
M9    expert_load            ``"transpose_nz_bf16_scale"``
M10   moe_scheme             ``"sglang"`` (FLOAT / W8A8 W2 with W8A8_DYNAMIC W13 an error; gate **or** up
                             plus down) / ``"vllm-ascend"``
D2    dense_prequantized     ``"tuple_or_int8"`` / ``"float_only"``
D4    static_reciprocal      ``"bf16_tensor_division"``: ``1 / bf16(input_scale)`` on the device
====  =====================  =====================================================================

Which readings change the golden's arithmetic, and how: M1, M2, M3, M5 in the MoE layer (:func:`routed_limit`,
:func:`gating_scaling`, :func:`output_scaling`, :func:`shared_limit`; M3: DeepSeek-V4's router,
:mod:`w8a8.moe.dsv4_routing`), M4 in the model run's router. M6, M7, M9 are numerically what the golden
computes (pinned by tests); M8 and D2 are the entries :func:`w8a8.w8a8_moe_deepep` (SGLang's DeepEP path) and
:func:`w8a8.w8a8_dynamic_linear_prequantized` (its ``(x_q, scale)`` tuple input); M10 names a call path; D4 equals the
golden's one-rounding reciprocal if the device's bf16 division rounds once (only a device can say).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Reading", "Serving", "SGLANG", "VLLM_ASCEND"]   # exported by w8a8; the helpers stay here

SGL = "sgl-project/sglang"
VA = "vllm-project/vllm-ascend"
VA_COMMIT = "182b75ea84ff13ece27b57391331ef8935410aea"
_SRT = "python/sglang/srt"
_NPU = f"{_SRT}/hardware_backend/npu"


@dataclass(frozen=True)
class Reading:
    """One composition fact: the engine's ``value`` and where it was read (``repo:path@commit[::function]``)."""

    value: str          # the engine's choice (the values of each field: module docstring)
    source: str         # repository:path@commit[::function or :lines] it was read from
    note: str = ""      # what the reading leaves open, or why it matters


@dataclass(frozen=True)
class Serving:
    """How one engine composes the ops (module docstring: the fields and their values)."""

    name: str                      # "sglang" or "vllm-ascend"
    description: str               # the engine and path, in words
    routed_clamp: Reading          # M1
    routed_scaling: Reading        # M2
    dsv4_routing: Reading          # M3
    router_logits: Reading         # M4
    shared_clamp: Reading          # M5
    shared_gate_up: Reading        # M6
    shared_add: Reading            # M7
    prequantized_moe: Reading      # M8
    expert_load: Reading           # M9
    moe_scheme: Reading            # M10
    dense_prequantized: Reading    # D2
    static_reciprocal: Reading     # D4

    def rows(self) -> dict[str, Reading]:
        """``{row id: reading}`` in the table's order (M1 ... M10, D2, D4)."""
        return {row: getattr(self, f) for row, f in ROWS.items()}

    def __str__(self) -> str:
        return self.name


ROWS = {"M1": "routed_clamp", "M2": "routed_scaling", "M3": "dsv4_routing", "M4": "router_logits",
        "M5": "shared_clamp", "M6": "shared_gate_up", "M7": "shared_add", "M8": "prequantized_moe",
        "M9": "expert_load", "M10": "moe_scheme", "D2": "dense_prequantized", "D4": "static_reciprocal"}
"""The table's row ids and the :class:`Serving` field of each."""

SGLANG = Serving(
    name="sglang",
    description="SGLang on Ascend NPU (ModelSlim W8A8, ascend_tp MoE path)",
    routed_clamp=Reading(
        "none", f"{SGL}:{_SRT}/layers/moe/moe_runner/ascend.py@0dd459f6::AscendRunnerCore (NPUSwigluQuant() built "
        f"without a limit); {_NPU}/moe/activation.py@98984213::NPUSwigluQuant",
        "DeepSeek-V4's swiglu_limit is not applied to the routed experts on the ascend_tp path (its DeepEP path "
        "passes gemm1_clamp_limit): likely an SGLang bug; a fork pre-clamps the bf16 GMM1 output in place"),
    routed_scaling=Reading(
        "output_mul_bf16", f"{SGL}:{_NPU}/moe/topk.py@01650cbd::fused_topk_npu (routed_scaling_factor = 1 when "
        f"renormalize); {_SRT}/layers/moe/deepseek_v4_topk.py@114c5ba4 (HashTopK / biased_topk_impl: no x rsf); "
        f"{_SRT}/models/deepseek_v2.py@unpinned::DeepseekV2MoE (final_hidden_states *= routed_scaling_factor before + shared)"),
    dsv4_routing=Reading(
        "torch_ops", f"{SGL}:{_SRT}/layers/moe/deepseek_v4_topk.py@114c5ba4::HashTopK, biased_topk_impl",
        "sqrt(softplus(logits)) (+ bias for selection), hash layers ids = tid2eid[input_ids], gather, renormalise"),
    router_logits=Reading("bfloat16", f"{SGL}:{_SRT}/models/deepseek_v2.py@unpinned::MoEGate (F.linear in the model dtype on "
                                      "NPU)"),
    shared_clamp=Reading("bf16_clamp", f"{SGL}:{_SRT}/models/deepseek_v2.py@unpinned::DeepseekV2MLP (NPU: cat([g.clamp("
                                       "max=L), u.clamp(-L, L)]) then SiluAndMul)"),
    shared_gate_up=Reading("merged", f"{SGL}:{_SRT}/models/deepseek_v2.py@unpinned::DeepseekV2MLP (MergedColumnParallelLinear "
                                     "gate_up_proj)"),
    shared_add=Reading("bf16_add", f"{SGL}:{_SRT}/models/deepseek_v2.py@unpinned::DeepseekV2MoE (bf16 routed + shared)"),
    prequantized_moe=Reading(
        "deepep_expert_grouped", f"{SGL}:{_SRT}/layers/moe/moe_runner/ascend.py@0dd459f6 (DeepEP: expert-grouped "
        "rows, Triton swiglu_quant, DeepEP combine; no init_routing)"),
    expert_load=Reading(
        "transpose_nz_bf16_scale", f"{SGL}:{_NPU}/quantization/moe_methods.py@019f0132::NPUW8A8Int8MoEMethod."
        "process_weights_after_loading"),
    moe_scheme=Reading("sglang", f"{SGL}:{_SRT}/layers/quantization/modelslim/modelslim.py@07ee8929::get_moe_scheme"),
    dense_prequantized=Reading(
        "tuple_or_int8", f"{SGL}:{_NPU}/quantization/linear_method_npu.py@03108f8a::NPUW8A8Int8DynamicLinearMethod."
        "apply ((x_q, scale) tuples skip npu_dynamic_quant, output bf16); NPUW8A8Int8LinearMethod."
        "apply (int8 x skips npu_quantize, then output_dtype=x.dtype: int8)"),
    static_reciprocal=Reading(
        "bf16_tensor_division", f"{SGL}:{_NPU}/quantization/linear_method_npu.py@03108f8a::NPUW8A8Int8LinearMethod."
        "process_weights_after_loading (1 / Parameter(input_scale.repeat(K)))",
        "equal to the golden's one-rounding reciprocal only if the NPU's bf16 division rounds once: a device check"),
)

VLLM_ASCEND = Serving(
    name="vllm-ascend",
    description="vllm-ascend (ModelSlim W8A8_DYNAMIC, fused MoE)",
    routed_clamp=Reading(
        "swiglu_limit", f"{VA}:vllm_ascend/ops/fused_moe/moe_comm_method.py@{VA_COMMIT[:8]}:270,372,443 (the fused "
        "GMM + swiglu-quant takes swiglu_limit)"),
    routed_scaling=Reading(
        "output_muls_add", f"{VA}:vllm_ascend/models/deepseek_v4/model.py@{VA_COMMIT[:8]}:343-346,395-404 (scaling kept "
        f"out of the router; muls_add_triton(routed, shared, rsf)); vllm_ascend/ops/triton/muls_add.py@"
        f"{VA_COMMIT[:8]}:25 (x * scale + y); vllm_ascend/compilation/passes/muls_add_pass.py@{VA_COMMIT[:8]}",
        "Triton's weakly typed Python scalar keeps x * scale in bf16, so this is the same two bf16 roundings as "
        "SGLang's multiply then add (not confirmed on a device)"),
    dsv4_routing=Reading(
        "moe_gating_top_k_hash", f"{VA}:vllm_ascend/ops/fused_moe/router/fused_topk_router.py@{VA_COMMIT[:8]}:103-141"),
    router_logits=Reading("float32", f"{VA}:vllm_ascend/models/deepseek_v4/model.py@{VA_COMMIT[:8]}:383 "
                                     "(F.linear(hidden_states.float(), gate.weight))"),
    shared_clamp=Reading("bf16_clamp", f"{VA}:vllm_ascend/models/deepseek_v4/model.py@{VA_COMMIT[:8]}:239-240 "
                                       "(SiluAndMulWithClamp(swiglu_limit))"),
    shared_gate_up=Reading("merged", f"{VA}:vllm_ascend/models/deepseek_v4/model.py@{VA_COMMIT[:8]}:220-226 "
                                     "(MergedColumnParallelLinear gate_up_proj)"),
    shared_add=Reading("bf16_add", f"{VA}:vllm_ascend/ops/triton/muls_add.py@{VA_COMMIT[:8]}:25"),
    prequantized_moe=Reading("mc2_dispatch", f"{VA}:vllm_ascend/ops/fused_moe/moe_comm_method.py@{VA_COMMIT[:8]}"),
    expert_load=Reading("transpose_nz_bf16_scale", f"{VA}:vllm_ascend/quantization/methods/w8a8_dynamic.py@"
                                                   f"{VA_COMMIT[:8]}"),
    moe_scheme=Reading("vllm-ascend", f"{VA}:vllm_ascend/quantization/methods/w8a8_dynamic.py@{VA_COMMIT[:8]}",
                       "no FLOAT / W8A8 down-projection error was read there"),
    dense_prequantized=Reading("float_only", f"{VA}:vllm_ascend/quantization/methods/w8a8_dynamic.py@{VA_COMMIT[:8]} "
                                             "(quantizes its own input)"),
    static_reciprocal=Reading(
        "bf16_tensor_division", f"{VA}:vllm_ascend/quantization/methods/w8a8_static.py@{VA_COMMIT[:8]}:127 "
        "(1 / Parameter(input_scale.repeat(...)))", "as SGLang's: a device check"),
)

SERVINGS = {s.name: s for s in (SGLANG, VLLM_ASCEND)}
"""The records by name."""

DEFAULT = SGLANG
"""The engine the ops compose for when ``serving`` is not given."""

assert [f.name for f in fields(Serving)][2:] == list(ROWS.values())


def names() -> tuple[str, ...]:
    return tuple(SERVINGS)


def get(serving, op: str = "serving") -> Serving:
    """The record for ``serving`` (a :class:`Serving`, a name, or None for :data:`DEFAULT`); a ValueError
    naming ``op`` and the argument otherwise."""
    if serving is None:
        return DEFAULT
    if isinstance(serving, Serving):
        return serving
    if isinstance(serving, str) and serving in SERVINGS:
        return SERVINGS[serving]
    raise ValueError(f"{op}: argument 'serving' must be one of {names()} or a w8a8.serving.Serving record; "
                     f"got {serving!r}"[:300])


# -- what the records change in the golden's arithmetic ---------------------------------------------------------
def routed_limit(serving: Serving, swiglu_limit):
    """M1: the clamp the routed experts' SwiGLU applies (None: unclamped) for the model's ``swiglu_limit``."""
    return swiglu_limit if serving.routed_clamp.value == "swiglu_limit" else None


def shared_limit(serving: Serving, swiglu_limit):
    """M5: the bf16 clamp before the shared expert's SwiGLU (None: none)."""
    return swiglu_limit if serving.shared_clamp.value == "bf16_clamp" else None


def gating_scaling(serving: Serving, routed_scaling_factor: float) -> float:
    """M2: the ``routed_scaling_factor`` the gating op gets (both engines: 1, the weights normalised without it)."""
    return 1.0 if serving.routed_scaling.value in ("output_mul_bf16", "output_muls_add") else routed_scaling_factor


def output_scaling(serving: Serving, routed_scaling_factor: float) -> float | None:
    """M2: the factor the bf16 routed output is multiplied by after the finalize (None: no multiply)."""
    if serving.routed_scaling.value in ("output_mul_bf16", "output_muls_add") and routed_scaling_factor != 1.0:
        return float(routed_scaling_factor)
    return None
