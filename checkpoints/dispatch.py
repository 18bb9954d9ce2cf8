"""Which dtype crosses the expert-parallel wire, and who quantizes for W13: a pure decision on a launch config.

One thing to record for a deployment is the dispatcher dtype: with an INT8
dispatch the sender quantizes once and the per-token scale travels with the payload, so W13 takes
both as they are (``if pertoken_scale is None: quantize`` is skipped); with a BF16 dispatch W13
quantizes on arrival. Which one happens depends on the serving engine, its launch options and
environment, the SoC and the MoE layer's scheme. :func:`dispatch_paths` answers it for one MoE scheme
under a :class:`LaunchConfig`, as one :class:`DispatchPath` per phase (SGLang ``--deepep-mode auto``
runs normal mode on batches with prefill and low-latency mode on decode batches; vllm-ascend picks
MC2 or all-to-all-v by the token count), each with the rule that decided it and its source.

Sources (SGLang under ``python/sglang/srt/``; sgl-kernel-npu @ f425bdf1, the Ascend DeepEP):

* SGLang: ``hardware_backend/npu/quantization/moe_methods.py`` @ 527befca and
  ``layers/moe/token_dispatcher/deepep.py`` @ 003a81bf (where the dtype comes from: the scheme's
  ``dispatcher_output_dtype``, ``get_deepep_output_dtype``'s priority, ``use_fp8`` meaning INT8 on A2/A3, the older
  revision ``454e84da``), ``layers/moe/moe_runner/ascend.py`` @ 95c3dd7b (the runner: ``if pertoken_scale is None``
  quantize), sgl-kernel-npu ``python/deep_ep/deep_ep/strategies/normal_strategy.py`` and
  ``csrc/deepep/deep_ep.cpp`` (normal mode: ``m + 1e-12``; ``DEEP_NORMAL_MODE_USE_INT8_QUANT`` read only
  without a ``quant_mode`` argument; low-latency strategies ``default`` / ``ops`` / ``alltoall``, the last
  quantizing after the exchange; the ``DEEP_USE_MODE=alltoall`` normal strategy: BF16 whatever the env
  says), ``layers/moe/token_dispatcher/fuseep.py`` @ 0cbf0687 (FuseEP);
  ``DeepEPMode.resolve`` (``layers/moe/utils.py``: auto = normal when the batch has an extend, else
  low-latency). Field bugs: sglang PR #22316 (2026-04-14) made low-latency dispatch ignore
  ``SGLANG_DEEPEP_BF16_DISPATCH`` (INT8 into BF16-weight GMMs, which ``npu_grouped_matmul`` refuses),
  fixed by PR #23815 (2026-04-27); PR #38831: ``use_fp8=True`` is "the cross-architecture request:
  DeepEP selects INT8 on A2/A3 and per-token FP8 on A5".
* vllm-ascend @ 182b75ea: ``vllm_ascend/ops/fused_moe/token_dispatcher.py`` (``TokenDispatcherWithMC2``:
  ``quant_mode`` 2 when ``dispatch_with_quant``, i.e. W8A8/W4A8 experts; ``TokenDispatcherWithAll2AllV``:
  ``npu_dynamic_quant`` per copy before the exchange), ``moe_mlp.py`` (the runner);
  the choice of method is ``select_moe_comm_method`` (``vllm_ascend/ascend_forward_context.py``,
  read at ``017a3074``: no EP -> ALLGATHER; A3: FUSED_MC2 when ``enable_fused_mc2`` and EP <= 32, else
  MC2 while the tokens fit the MC2 capacity (at most 512 per TP rank), else ALLTOALL; A2: MC2 when
  E / EP <= 24, EP >= 16 and the tokens fit, else ALLGATHER); ALLGATHER quantizes in
  ``npu_moe_init_routing_v2(quant_mode=1)`` (``token_dispatcher.py`` ``TokenDispatcherWithAllGather``).

Pure: no I/O, no environment read — the caller passes the environment it means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

ENGINES = ("sglang", "vllm-ascend")
SOCS = ("a2", "a3", "a5")
A2A_BACKENDS = ("none", "deepep", "ascend_fuseep", "mooncake", "nixl", "mori", "flashinfer", "megamoe")
"""SGLang ``--moe-a2a-backend`` choices (default ``none``)."""
DEEPEP_MODES = ("auto", "normal", "low_latency")
"""SGLang ``--deepep-mode`` choices (default ``auto``)."""
DISPATCHER_DTYPES = ("auto", "bf16", "fp8", "int8", "nvfp4")
"""SGLang ``--deepep-dispatcher-output-dtype`` choices (default ``auto``)."""
SGLANG_REVISIONS = ("current", "pr22316", "454e84da")
"""Which SGLang DeepEP dtype rules apply: ``current`` (the scheme's dtype, ``get_deepep_output_dtype``,
``use_fp8``, with PR #23815's fix); ``454e84da`` (``deepep.py`` at that commit: env-only); ``pr22316`` (454e84da's rules with PR #22316's
low-latency change: ``use_fp8=True`` always, the BF16 flag ignored, until PR #23815)."""
VLLM_COMMS = ("auto", "mc2", "alltoall", "allgather", "fused_mc2")
"""vllm-ascend ``MoECommType`` (``auto``: decided as ``select_moe_comm_method`` does)."""
ENV_NAMES = ("SGLANG_DEEPEP_BF16_DISPATCH", "DEEP_NORMAL_MODE_USE_INT8_QUANT", "DEEP_USE_MODE")
"""The environment variables the decision reads (SGLang ``deepep.py``, sgl-kernel-npu DeepEP)."""
INT8_SCHEMES = ("W8A8_DYNAMIC", "W4A8_DYNAMIC")
"""MoE schemes whose method asks the dispatcher for int8 (SGLang ``moe_methods.py``; vllm-ascend
``dispatch_with_quant``)."""

_MC2_CAPACITY = "tokens <= the MC2 capacity (min(ceil(max tokens / TP), 512) per TP rank)"


def _choice(arg: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"LaunchConfig: argument '{arg}' must be one of {allowed}; got {value!r}")


@dataclass(frozen=True)
class LaunchConfig:
    """A serving launch as far as the EP dispatch dtype is concerned (defaults: the engines' own).

    engine : ``"sglang"`` or ``"vllm-ascend"``. soc : ``"a3"`` (910C, default), ``"a2"``, ``"a5"``.
    SGLang: ``moe_a2a_backend``, ``deepep_mode``, ``dispatcher_output_dtype`` (the server options),
    ``sglang_revision`` (:data:`SGLANG_REVISIONS`), ``env`` (a mapping of :data:`ENV_NAMES` to values).
    vllm-ascend: ``enable_expert_parallel``, ``ep_size`` (None: unknown), ``moe_comm``
    (:data:`VLLM_COMMS`), ``enable_fused_mc2`` (``additional_config``).

    Errors: ``ValueError`` naming the argument for a value outside its choices or an unknown env name.
    """

    engine: str = "sglang"
    soc: str = "a3"
    moe_a2a_backend: str = "none"
    deepep_mode: str = "auto"
    dispatcher_output_dtype: str = "auto"
    sglang_revision: str = "current"
    env: Mapping[str, str] = field(default_factory=dict)
    enable_expert_parallel: bool = False
    ep_size: int | None = None
    moe_comm: str = "auto"
    enable_fused_mc2: bool = False

    def __post_init__(self):
        for arg, allowed in (("engine", ENGINES), ("soc", SOCS), ("moe_a2a_backend", A2A_BACKENDS),
                             ("deepep_mode", DEEPEP_MODES), ("dispatcher_output_dtype", DISPATCHER_DTYPES),
                             ("sglang_revision", SGLANG_REVISIONS), ("moe_comm", VLLM_COMMS)):
            _choice(arg, getattr(self, arg), allowed)
        unknown = sorted(set(self.env) - set(ENV_NAMES))
        if unknown:
            raise ValueError(f"LaunchConfig: argument 'env' takes {ENV_NAMES}; got unknown name(s) {unknown}")
        if self.ep_size is not None and (not isinstance(self.ep_size, int) or self.ep_size < 1):
            raise ValueError(f"LaunchConfig: argument 'ep_size' must be an integer >= 1 or None; got {self.ep_size!r}")
        object.__setattr__(self, "env", dict(self.env))

    def as_dict(self) -> dict:
        keys = (("soc", "moe_a2a_backend", "deepep_mode", "dispatcher_output_dtype", "sglang_revision", "env")
                if self.engine == "sglang" else ("soc", "enable_expert_parallel", "ep_size", "moe_comm",
                                                 "enable_fused_mc2"))
        return {"engine": self.engine, **{k: getattr(self, k) for k in keys}}


@dataclass(frozen=True)
class DispatchPath:
    """What one phase of the launch does with the MoE layer's hidden states.

    wire : ``"int8+fp32"`` (INT8 payload with its per-token fp32 scale), ``"bf16"``, ``"fp8"`` (A5),
        ``"none"`` (no EP exchange: every rank routes its own tokens), ``"fused"`` (inside one kernel),
        ``"?"`` (not modelled). quantized_at : ``"sender"``, ``"arrival (W13)"`` (the runner's
        ``npu_dynamic_quant``, ``HiddenStatesDynamicQuant``), ``"arrival (dispatcher)"``, ``"routing"``
        (``npu_moe_init_routing_v2(quant_mode=1)``), ``"fused kernel"``, ``"nowhere"`` (float experts),
        ``"?"``. formula : the quantizer's formula. reasons / warnings : the rules that decided it and
        what the launch gets wrong, each with its source.
    """

    phase: str
    transport: str
    wire: str
    quantized_at: str
    formula: str
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    @property
    def int8_wire(self) -> bool:
        """The INT8 wire path: the payload crosses as int8 with its scale, W13 does not quantize again."""
        return self.wire == "int8+fp32"

    @property
    def w13_quantizes(self) -> bool:
        """W13 quantizes on arrival (the BF16 fallback)."""
        return self.quantized_at == "arrival (W13)"

    @property
    def golden(self) -> str:
        """The golden call that models this path (``w8a8.w8a8_moe_ep`` and its ``Numerics.ep_dispatch_quant``)."""
        if self.int8_wire:
            quant = "deepep_normal" if self.formula == DEEPEP_NORMAL_QUANT else "mc2"
            return f'w8a8_moe_ep(dispatch="int8") with Numerics ep_dispatch_quant="{quant}"'
        if self.wire == "bf16" and self.quantized_at in ("arrival (W13)", "arrival (dispatcher)"):
            return 'w8a8_moe_ep(dispatch="bf16")'
        if self.quantized_at == "routing":
            return "w8a8_moe (no EP exchange)"
        return "-"

    def summary(self) -> str:
        """One line: phase, wire dtype, who quantizes."""
        if self.int8_wire:
            what = "INT8 wire + fp32 scale, W13 uses them (no second quantization)"
        elif self.w13_quantizes:
            what = f"{self.wire.upper()} wire, W13 quantizes on arrival"
        else:
            what = {"none": "no EP exchange, quantized in routing", "fused": "fused kernel",
                    "?": "not modelled"}.get(self.wire, f"{self.wire} wire, quantized at {self.quantized_at}")
        return f"{self.phase}: {what}"

    def as_dict(self) -> dict:
        return {"phase": self.phase, "transport": self.transport, "wire": self.wire, "int8_wire": self.int8_wire,
                "quantized_at": self.quantized_at, "w13_quantizes": self.w13_quantizes, "formula": self.formula,
                "golden": self.golden,
                "reasons": list(self.reasons), "warnings": list(self.warnings), "summary": self.summary()}


DYNAMIC_QUANT = "npu_dynamic_quant: s = 1/(127/max|x|), q = rint(x * (127/max|x|))"
DEEPEP_NORMAL_QUANT = "npu_dynamic_quant's formula with 127/(max|x| + 1e-12) (Ascend DeepEP normal)"
ROUTING_QUANT = "npu_moe_init_routing_v2(quant_mode=1): s = max|x|/127, q = x/s"


def _arrive(phase: str, transport: str, wire: str, experts_int8: bool, formula: str, reasons: list[str],
            warnings: list[str], *, quantized_on_arrival_by_dispatcher: bool = False) -> DispatchPath:
    """The path once the wire dtype is known: who quantizes for W13 (SGLang ``moe_runner/ascend.py``,
    vllm-ascend ``moe_mlp.py``)."""
    if wire == "int8+fp32" or quantized_on_arrival_by_dispatcher:
        if not experts_int8:
            warnings.append("INT8 rows arrive at float (BF16-weight) experts: npu_grouped_matmul refuses INT8 input "
                            "with BF16 weights (sglang PR #23815)")
        else:
            reasons.append("the runner gets the received per-token scale, so `if pertoken_scale is None: "
                           "npu_dynamic_quant` is skipped: one quantization in all")
        where = "arrival (dispatcher)" if quantized_on_arrival_by_dispatcher else "sender"
        return DispatchPath(phase, transport, wire, where, formula, tuple(reasons), tuple(warnings))
    if wire == "bf16":
        if experts_int8:
            reasons.append("no scale arrives: W13's `if pertoken_scale is None` runs npu_dynamic_quant on the "
                           "received BF16 rows, once")
            return DispatchPath(phase, transport, wire, "arrival (W13)", DYNAMIC_QUANT, tuple(reasons),
                                tuple(warnings))
        reasons.append("float experts: nothing is quantized")
        return DispatchPath(phase, transport, wire, "nowhere", "-", tuple(reasons), tuple(warnings))
    return DispatchPath(phase, transport, wire, "?", formula, tuple(reasons), tuple(warnings))


# -- SGLang --------------------------------------------------------------------------------------------
def _flag(env: Mapping[str, str], name: str) -> bool:
    """A boolean env as SGLang reads its flags (``1``/``true``/``yes``/``y``/``on``, case-insensitive; anything else
    false: the exact accepted spellings are not confirmed against its EnvBool)."""
    return str(env.get(name, "")).strip().lower() in ("1", "true", "yes", "y", "on")


def _requested_dtype(cfg: LaunchConfig, mode: str, scheme: str | None, reasons: list, warnings: list) -> str:
    """The dtype SGLang asks Ascend DeepEP for in ``mode`` (``"bf16"`` / ``"int8"`` / ``"fp8"`` / ``"nvfp4"``)."""
    env = cfg.env
    if cfg.sglang_revision != "current":
        rev = cfg.sglang_revision
        if cfg.dispatcher_output_dtype != "auto":
            warnings.append(f"--deepep-dispatcher-output-dtype does not exist at this revision ({rev}): ignored")
        if mode == "low_latency":
            if rev == "pr22316":
                reasons.append("low-latency: use_fp8=True unconditionally (sglang PR #22316, until PR #23815)")
                if _flag(env, "SGLANG_DEEPEP_BF16_DISPATCH"):
                    warnings.append("SGLANG_DEEPEP_BF16_DISPATCH=1 is IGNORED in low-latency mode at this revision "
                                    "(sglang PR #22316; fixed by PR #23815): INT8 is sent anyway")
                return "int8"
            bf16 = _flag(env, "SGLANG_DEEPEP_BF16_DISPATCH")
            reasons.append(f"low-latency: use_fp8 = not SGLANG_DEEPEP_BF16_DISPATCH (= {bf16}) ("
                           "deepep.py @ 454e84da)")
            return "bf16" if bf16 else "int8"
        on = env.get("DEEP_NORMAL_MODE_USE_INT8_QUANT") == "1"
        reasons.append(f"normal: INT8 only if DEEP_NORMAL_MODE_USE_INT8_QUANT=1 (it is "
                       f"{env.get('DEEP_NORMAL_MODE_USE_INT8_QUANT', 'unset')!s}); the scheme is not consulted "
                       f"(sgl-kernel-npu DeepEP)")
        return "int8" if on else "bf16"
    # get_deepep_output_dtype, in its priority order (SGLang ``deepep.py``)
    if cfg.dispatcher_output_dtype != "auto":
        reasons.append(f"--deepep-dispatcher-output-dtype {cfg.dispatcher_output_dtype} (priority 0 of "
                       "get_deepep_output_dtype)")
        return cfg.dispatcher_output_dtype
    if _flag(env, "SGLANG_DEEPEP_BF16_DISPATCH"):
        reasons.append("SGLANG_DEEPEP_BF16_DISPATCH set (deprecated env, priority 1): BF16")
        return "bf16"
    if scheme in INT8_SCHEMES:
        reasons.append(f"the {scheme} MoE method sets dispatcher_output_dtype='int8' after loading W13 (priority 3; "
                       "moe_methods.py)")
        return "int8"
    reasons.append(f"the {scheme or 'unknown'} MoE method requests no int8 dispatch: NPU default BF16 (priority 5)"
                   )
    return "bf16"


def _sglang_deepep(cfg: LaunchConfig, mode: str, phase: str, scheme: str | None, experts_int8: bool) -> DispatchPath:
    reasons: list[str] = []
    warnings: list[str] = []
    strategy = cfg.env.get("DEEP_USE_MODE", "default") or "default"
    kernel = {"normal": "Ascend DeepEP normal (aclnnCamMoeDispatchNormal)",
              "low_latency": "Ascend DeepEP low-latency (aclnnMoeLowLatencyDispatchV2)"}[mode]
    if strategy not in ("default", "ops", "alltoall"):
        return DispatchPath(phase, f"Ascend DeepEP, DEEP_USE_MODE={strategy}", "?", "?", "?",
                            (f"DEEP_USE_MODE={strategy} is not covered by this model of the dispatch paths",))
    dtype = _requested_dtype(cfg, mode, scheme, reasons, warnings)
    if dtype == "nvfp4":
        return DispatchPath(phase, kernel, "?", "?", "?", tuple(reasons + ["NVFP4 dispatch: not an Ascend path"]),
                            tuple(warnings))
    if dtype in ("int8", "fp8"):
        if cfg.soc == "a5":
            warnings.append("use_fp8=True means per-token FP8 on A5 (INT8 only on A2/A3; sglang PR #38831): the "
                            "INT8 experts receive FP8 rows — not the INT8 wire path, not modelled")
            return DispatchPath(phase, kernel, "fp8", "sender", "per-token FP8 (A5; not modelled)", tuple(reasons),
                                tuple(warnings))
        reasons.append(f"{dtype.upper()} -> use_fp8=True, which Ascend DeepEP runs as INT8 on {cfg.soc.upper()} "
                       "(quant_mode 2; sglang PR #38831)")
        if dtype == "fp8":
            warnings.append(f"fp8 was asked for: on {cfg.soc.upper()} the wire carries INT8, not FP8 "
                            "(use_fp8 means INT8 on A2/A3, per-token FP8 on A5)")
    if mode == "normal" and cfg.sglang_revision == "current" and "DEEP_NORMAL_MODE_USE_INT8_QUANT" in cfg.env:
        env_int8 = cfg.env["DEEP_NORMAL_MODE_USE_INT8_QUANT"] == "1"
        if env_int8 != (dtype != "bf16"):
            warnings.append(f"DEEP_NORMAL_MODE_USE_INT8_QUANT={cfg.env['DEEP_NORMAL_MODE_USE_INT8_QUANT']} does not "
                            "decide here: Ascend DeepEP reads it only when SGLang passes no quant argument, and this "
                            "revision derives the choice from the dispatcher dtype (not "
                            "confirmed for every revision)")
    int8 = dtype != "bf16"
    if strategy == "alltoall" and mode == "normal":
        if int8:
            warnings.append("DEEP_USE_MODE=alltoall normal strategy: the int8 request never takes effect (quant_mode "
                            "is set to 'bf16' before the env test; SGLang passes none): BF16 is sent")
        reasons.append("DEEP_USE_MODE=alltoall normal strategy sends BF16")
        return _arrive(phase, "Ascend DeepEP normal, alltoall strategy (all_to_all_single)", "bf16", experts_int8,
                       "-", reasons, warnings)
    if strategy == "alltoall":
        if int8:
            reasons.append("DEEP_USE_MODE=alltoall low-latency strategy exchanges BF16 (padded to capacity) and runs "
                           "npu_dynamic_quant after the exchange")
            return _arrive(phase, "Ascend DeepEP low-latency, alltoall strategy (dist.all_to_all)", "bf16",
                           experts_int8, DYNAMIC_QUANT, reasons, warnings, quantized_on_arrival_by_dispatcher=True)
        return _arrive(phase, "Ascend DeepEP low-latency, alltoall strategy (dist.all_to_all)", "bf16", experts_int8,
                       "-", reasons, warnings)
    if strategy == "ops":
        kernel = "Ascend DeepEP low-latency, ops strategy (torch_npu.npu_moe_distribute_dispatch_v2)" \
            if mode == "low_latency" else kernel
    formula = DEEPEP_NORMAL_QUANT if mode == "normal" else DYNAMIC_QUANT
    return _arrive(phase, kernel, "int8+fp32" if int8 else "bf16", experts_int8, formula, reasons, warnings)


def _sglang(cfg: LaunchConfig, scheme: str | None, experts_int8: bool) -> list[DispatchPath]:
    backend = cfg.moe_a2a_backend
    if backend == "none":
        why = ["--moe-a2a-backend none: no EP exchange; each rank routes its own tokens (ascend_tp path, "
               "SGLang's NPU MoE path)"]
        if experts_int8:
            why.append("quantized once in npu_moe_init_routing_v2(quant_mode=1), handed to W13 with its scale")
            return [DispatchPath("all batches", "none (npu_moe_init_routing_v2)", "none", "routing", ROUTING_QUANT,
                                 tuple(why))]
        return [DispatchPath("all batches", "none", "none", "nowhere", "-", tuple(why + ["float experts"]))]
    if backend == "ascend_fuseep":
        return [DispatchPath("all batches", "FuseEP aclnnFusedDeepMoe (dispatch, GMM1, swiglu-quant, GMM2, combine)",
                             "fused", "fused kernel", "int8 quant_mode=1 inside the kernel (not covered)",
                             ("--moe-a2a-backend ascend_fuseep: one fused kernel, combine a no-op; its "
                              "internals are not covered: compare end to end with a tolerance",))]
    if backend != "deepep":
        return [DispatchPath("all batches", f"--moe-a2a-backend {backend}", "?", "?", "?",
                             (f"--moe-a2a-backend {backend} is not an Ascend path covered by this model of the dispatch paths",))]
    if cfg.deepep_mode == "auto":
        # DeepEPMode.resolve: NORMAL when any rank's batch has an extend (prefill), else LOW_LATENCY
        return [_sglang_deepep(cfg, "normal", "prefill batches (auto -> normal)", scheme, experts_int8),
                _sglang_deepep(cfg, "low_latency", "decode batches (auto -> low_latency)", scheme, experts_int8)]
    return [_sglang_deepep(cfg, cfg.deepep_mode, f"all batches ({cfg.deepep_mode})", scheme, experts_int8)]


# -- vllm-ascend ---------------------------------------------------------------------------------------------
def _vllm_comm(comm: str, phase: str, experts_int8: bool, why: list[str]) -> DispatchPath:
    reasons = list(why)
    if comm == "allgather":
        reasons.append("ALLGATHER: no EP exchange of routed rows; "
                       + ("npu_moe_init_routing_v2(quant_mode=1) quantizes (TokenDispatcherWithAllGather)"
                          if experts_int8 else "float experts"))
        return DispatchPath(phase, "ALLGATHER (npu_moe_init_routing_v2)", "none",
                            "routing" if experts_int8 else "nowhere", ROUTING_QUANT if experts_int8 else "-",
                            tuple(reasons))
    if comm == "fused_mc2":
        reasons.append("FUSED_MC2 (dispatch_ffn_combine / MegaMoe): one fused op, not covered by this model of the dispatch paths")
        return DispatchPath(phase, "FUSED_MC2", "fused", "fused kernel", "not covered", tuple(reasons))
    if comm == "mc2":
        reasons.append(f"MC2: quant_mode = {2 if experts_int8 else 0} (2 when dispatch_with_quant: W8A8/W4A8 experts)")
        return _arrive(phase, "MC2 torch_npu.npu_moe_distribute_dispatch_v2", "int8+fp32" if experts_int8 else "bf16",
                       experts_int8, DYNAMIC_QUANT, reasons, [])
    reasons.append("All2AllV: " + ("npu_dynamic_quant per copy before two all_to_all_single (scales, then int8 rows)"
                                   if experts_int8 else "BF16 rows through all_to_all_single") + "")
    return _arrive(phase, "ALLTOALL (all_to_all_single, TokenDispatcherWithAll2AllV)",
                   "int8+fp32" if experts_int8 else "bf16", experts_int8, DYNAMIC_QUANT, reasons, [])


def _vllm(cfg: LaunchConfig, experts_int8: bool) -> list[DispatchPath]:
    if not cfg.enable_expert_parallel or cfg.ep_size == 1:
        return [_vllm_comm("allgather", "all batches", experts_int8,
                           ["no expert parallelism (or EP size 1): ALLGATHER (select_moe_comm_method)"])]
    if cfg.moe_comm != "auto":
        return [_vllm_comm(cfg.moe_comm, "all batches", experts_int8, [f"MoE comm method {cfg.moe_comm} as given"])]
    if cfg.soc == "a5":
        return [DispatchPath("all batches", "vllm-ascend A5", "?", "?", "?",
                             ("the A5 comm-method choice and its MXFP dispatch are not covered",))]
    if cfg.soc == "a3":
        if cfg.enable_fused_mc2 and (cfg.ep_size is None or cfg.ep_size <= 32):
            why = ["A3, enable_fused_mc2 and EP <= 32 -> FUSED_MC2 (select_moe_comm_method)"]
            if cfg.ep_size is None:
                why.append("EP size not given: assumed <= 32 (above it MC2 / ALLTOALL apply)")
            return [_vllm_comm("fused_mc2", "all batches", experts_int8, why)]
        return [_vllm_comm("mc2", _MC2_CAPACITY, experts_int8, ["A3: MC2 while the batch fits the MC2 capacity "
                                                                "(select_moe_comm_method)"]),
                _vllm_comm("alltoall", "larger batches", experts_int8, ["A3: ALLTOALL above the MC2 capacity "
                                                                        "(select_moe_comm_method)"])]
    return [_vllm_comm("mc2", "E/EP <= 24, EP >= 16 and " + _MC2_CAPACITY, experts_int8,
                       ["A2: MC2 under these conditions (select_moe_comm_method)"]),
            _vllm_comm("allgather", "otherwise", experts_int8, ["A2: ALLGATHER otherwise (select_moe_comm_method)"])]


def dispatch_paths(cfg: LaunchConfig, scheme: str | None) -> list[DispatchPath]:
    """The dispatch path of a MoE layer of ``scheme`` (its experts' msModelSlim type, e.g. ``W8A8_DYNAMIC``;
    ``FLOAT`` or None for float experts) under ``cfg``: one :class:`DispatchPath` per phase (module docstring)."""
    experts_int8 = scheme in INT8_SCHEMES
    return _sglang(cfg, scheme, experts_int8) if cfg.engine == "sglang" else _vllm(cfg, experts_int8)
