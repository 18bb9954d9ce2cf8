"""What the serving code does with every module of a checkpoint: the execution path, module by module.

For each module this follows the chain (quant description -> scheme -> method -> op
family -> ACLNN entry), with the load-time facts that decide it (SGLang and vllm-ascend loaders; docs/checkpoints.md):

* **scheme -> method**: ``W8A8_DYNAMIC`` -> ``ModelSlimW8A8Int8`` -> ``NPUW8A8Int8DynamicLinearMethod``;
  ``W8A8`` -> ``NPUW8A8Int8LinearMethod``; ``FLOAT`` -> ``UnquantizedLinearMethod``; experts
  ``W8A8_DYNAMIC`` -> ``ModelSlimW8A8Int8MoE`` -> ``NPUW8A8Int8MoEMethod``.
* **op family**: dense ``npu_quant_matmul``, which op-plugin sends to ``aclnnQuantMatmulWeightNz``
  (-> CANN ``QuantBatchMatmulV3``) for an NZ weight and to ``aclnnQuantMatmulV5`` for an ND one;
  MoE ``npu_grouped_matmul`` twice with ``npu_dequant_swiglu_quant`` between.
* **weight layout after load**: the int8 weight is transposed (``[N, K] -> [K, N]``; experts
  ``[E, N, K] -> [E, K, N]``) and cast to FRACTAL_NZ — or kept ND when SGLang's alignment rule
  refuses it, with the reason (:func:`w8a8.layout.nz_fallback_reason`). vllm-ascend's
  ``maybe_trans_nz`` has no alignment check.
* **scale dtypes after load**: the fp32 checkpoint scales become ``params_dtype`` (bf16 for a bf16
  model), i.e. they are *rounded*; how many values change is counted. A static ``deq_scale`` stays
  fp32 (bf16 model) or int64 (fp16 model, read as FP19 by the fix-pipe: the truncation is counted).
* **static parameters**: present and consistent (see :mod:`.validate`).
* **EP dispatch** (MoE): under the serving launch given (:class:`~.dispatch.LaunchConfig`), per phase,
  whether the INT8 wire path is taken (int8 payload + per-token scale, W13 does not quantize again) or W13
  quantizes on arrival, and why (:mod:`.dispatch`); its warnings become ``dispatch`` findings.

Shapes are unpartitioned (tensor parallel degree 1): under TP the alignment rule applies to each
partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.layout import nz_fallback_reason, nz_supported_by_matmul
from w8a8.quant_matmul import DIM_LIMIT
from w8a8.trans_quant_param import decode_quant_param

from .dispatch import DispatchPath, LaunchConfig, dispatch_paths
from .issues import Findings
from .naming import layer_sort_key
from .reader import Checkpoint
from .schemes import Module, Resolution, resolve
from .validate import validate



@dataclass
class ModuleReport:
    """The execution path of one module (see the module docstring)."""

    module: Module
    op_family: str
    chain: list[str]
    checkpoint_shape: str
    loaded: str
    layout: str                          # "NZ", "ND", "-" (float / not applicable)
    nd_reason: str | None
    scales: str
    static: str
    bytes: int
    warnings: list[str] = field(default_factory=list)
    dispatch: list[DispatchPath] = field(default_factory=list)   # MoE: the EP dispatch path per phase

    def as_dict(self) -> dict:
        m = self.module
        return {"module": m.name, "serving_name": m.serving_name, "layer": m.layer, "kind": m.kind,
                "scheme": m.scheme, "scheme_class": m.scheme_class, "method": m.method,
                "op_family": self.op_family, "checkpoint_shape": self.checkpoint_shape, "loaded": self.loaded,
                "layout": self.layout, "nd_reason": self.nd_reason, "scales_after_load": self.scales,
                "static_params": self.static, "bytes": self.bytes, "notes": list(m.notes),
                "warnings": self.warnings, "chain": self.chain,
                "experts": len(m.moe.experts) if m.moe else None,
                **({"dispatch": [p.as_dict() for p in self.dispatch]} if self.dispatch else {})}


@dataclass
class Report:
    """Everything ``w8a8 inspect`` prints."""

    resolution: Resolution
    modules: list[ModuleReport]
    findings: Findings
    totals: dict
    summary: dict

    @property
    def ok(self) -> bool:
        return not self.findings.errors

    def modules_with_errors(self) -> set[str]:
        """Names of the modules that an error finding concerns (the module or one of its tensors)."""
        errors = self.findings.errors
        out = set()
        for r in self.modules:
            m = r.module
            prefixes = [m.name] if m.kind == "moe" else [self.resolution.native_prefix(p) for p in m.shards]
            if m.findings.errors or any(e.where == p or e.where.startswith(p + ".") for e in errors for p in prefixes):
                out.add(m.name)
        return out

    def as_dict(self) -> dict:
        return {"summary": self.summary, "modules": [m.as_dict() for m in self.modules], "totals": self.totals,
                "findings": [f.as_dict() for f in self.findings]}


def _fmt(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _rounding(values: np.ndarray, dtype) -> str:
    """How many fp32 values change when rounded to ``dtype`` and by how much (relative)."""
    v = np.asarray(values, dtype=np.float32).reshape(-1)
    r = v.astype(dtype).astype(np.float32)
    changed = r != v
    if not changed.any():
        return "exact"
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(r[changed].astype(np.float64) / v[changed] - 1)
    return f"{int(changed.sum())}/{v.size} rounded, max rel {float(np.nanmax(rel)):.2g}"


def _layout(res: Resolution, kn_shape: tuple[int, ...]) -> tuple[str, str | None]:
    """("NZ" | "ND", reason) for an int8 weight of loaded shape ``[..., K, N]``."""
    if res.loader.nz_alignment_check:
        reason = nz_fallback_reason(kn_shape, "int8")
    else:
        reason = None if nz_supported_by_matmul(kn_shape) else \
            "a last dim of 1 (NZ weights are not supported by the quantized matmuls)"
    return ("ND", reason) if reason else ("NZ", None)


def _aclnn(layout: str) -> str:
    if layout == "NZ":
        return "op-plugin QuantMatmulKernelNpuOpApi: x2 is FRACTAL_NZ -> aclnnQuantMatmulWeightNz -> CANN QuantBatchMatmulV3"
    return "op-plugin QuantMatmulKernelNpuOpApi: x2 is ND -> aclnnQuantMatmulV5 (implementation depends on the CANN version)"


def _bytes(res: Resolution, prefixes) -> int:
    total = 0
    for p in prefixes:
        for name in res.linears.get(p, {}).values():
            entry = res.entry(name)
            total += entry.nbytes if entry else 0
    return total


def _read(res: Resolution, prefix: str, suffix: str, read_data: bool):
    name = res.linears.get(prefix, {}).get(suffix)
    if not read_data or name is None or res.entry(name) is None:
        return None
    return np.asarray(res.tensor(name))


def _model_dtype(res: Resolution):
    return res.checkpoint.model_dtype or _dt.bfloat16


def _dense(res: Resolution, m: Module, read_data: bool) -> ModuleReport:
    shapes = [res.shape(p + ".weight") for p in m.shards]
    ok = all(s is not None and len(s) == 2 for s in shapes)
    n = sum(s[0] for s in shapes) if ok else None
    k = shapes[0][1] if ok else None
    if ok and len({s[1] for s in shapes}) > 1:
        m.findings.error(m.name, f"packed shards have different K ({[s[1] for s in shapes]}): they cannot be fused",
                         "packed-k")
    t = m.scheme
    desc_line = f"description: {res.native_prefix(m.shards[0])}.weight = {t}" + \
        (f" (and {len(m.shards) - 1} more shard(s), all {t})" if len(m.shards) > 1 and t != "MIXED" else "")
    ckpt = "?"
    if ok:
        entry = res.entry(m.shards[0] + ".weight")
        ckpt = f"{_fmt((n, k))} {_dt.name(entry.dtype) if entry is not None else '?'}"
    report = ModuleReport(m, op_family="?", chain=[desc_line], checkpoint_shape=ckpt, loaded="?", layout="-",
                          nd_reason=None, scales="-", static="-", bytes=_bytes(res, m.shards))
    mdt = _model_dtype(res)
    if m.kind in ("embedding", "router", "lm_head") or t == "FLOAT":
        stored = res.entry(m.shards[0] + ".weight") if m.shards else None
        sdt = stored.dtype if stored is not None else mdt        # a FLOAT weight's matmul: its stored dtype
        family = {"embedding": "embedding lookup", "router": "router matmul (float) -> top-k gating",
                  }.get(m.kind, f"matmul ({_dt.name(sdt)})")
        if _dt.name(sdt) != _dt.name(mdt) and m.kind != "embedding":
            m.notes.append(f"stored {_dt.name(sdt)} in a {_dt.name(mdt)} model (the loader's parameter dtype decides "
                           "whether it runs as stored)")
        report.op_family = family
        report.loaded = f"{_fmt((n, k))} as stored" if ok else "?"
        report.chain += [f"{m.method or 'unresolved'}: {family}; weight [N, K] kept as stored (no W8A8 load step)"]
        return report
    if t not in ("W8A8", "W8A8_DYNAMIC", "W8A8_MIX") or not ok:
        report.op_family = "(not modelled)" if ok else "?"
        report.chain.append(f"{m.scheme_class or '?'} -> {m.method or '?'}")
        return report
    layout, reason = _layout(res, (k, n))
    report.layout, report.nd_reason = layout, reason
    report.loaded = f"{_fmt((k, n))} int8 {layout}"
    cast = "npu_format_cast -> FRACTAL_NZ" if layout == "NZ" else f"kept ND: {reason}"
    report.chain.append(f"{m.scheme_class} -> {m.method}")
    report.chain.append(f"load: weight int8 [N, K] = {_fmt((n, k))} -> transpose -> {_fmt((k, n))} -> {cast}")
    if n > DIM_LIMIT:
        report.warnings.append(f"N = {n} > {DIM_LIMIT}: npu_quant_matmul's last-dim limit (vllm-ascend splits wq_b "
                               "under DSA-CP)")
    if k > DIM_LIMIT and t != "W8A8_DYNAMIC":
        report.warnings.append(f"K = {k} > {DIM_LIMIT}: allowed only with a float scale and pertoken_scale")
    if t == "W8A8_DYNAMIC" or t == "W8A8_MIX":
        scales = [_read(res, p, ".weight_scale", read_data) for p in m.shards]
        if mdt == _dt.bfloat16:
            stat = _rounding(np.concatenate([s.reshape(-1) for s in scales]), _dt.bfloat16) \
                if all(s is not None for s in scales) else "not read"
            report.scales = f"weight_scale fp32 [N, 1] -> bf16 [N] ({stat})"
        else:
            report.scales = "weight_scale fp32 [N, 1] -> fp32 [N] (fp16 model: the fp32 copy, weight_scale_fp32)"
        report.op_family = f"dynamic_quant + quant_matmul · {'WeightNz' if layout == 'NZ' else 'V5 (ND)'}"
        report.chain += [f"load: {report.scales}",
                         "forward: npu_dynamic_quant(x [M, K]) -> int8 [M, K] + fp32 per-token scale [M]",
                         f"forward: npu_quant_matmul(x_q, W, weight_scale, pertoken_scale=scale, bias, "
                         f"output_dtype={_dt.name(mdt)})",
                         _aclnn(layout), f"-> {_dt.name(mdt)} [M, {n}]"]
    if t in ("W8A8", "W8A8_MIX"):
        deq, report.static = _static(res, m, read_data, report)
        if t == "W8A8":
            report.scales = deq
        report.op_family = f"quantize + quant_matmul · {'WeightNz' if layout == 'NZ' else 'V5 (ND)'}" \
            if t == "W8A8" else report.op_family + " | static: quantize + quant_matmul"
        report.chain += [f"load: input_scale [1] -> repeated to [{k}] in {_dt.name(mdt)}, its reciprocal computed in "
                         f"{_dt.name(mdt)}; input_offset -> [{k}]",
                         "forward: npu_quantize(x, 1/input_scale, input_offset, qint8, axis=-1, div_mode=False) "
                         "-> int8 [M, K]",
                         "forward: npu_quant_matmul(x_q, W, deq_scale, bias=quant_bias int32 (tensor-parallel rank 0 "
                         f"only), output_dtype={_dt.name(mdt)})",
                         _aclnn(layout), f"-> {_dt.name(mdt)} [M, {n}]"]
    return report


def _static(res: Resolution, m: Module, read_data: bool, report: ModuleReport) -> tuple[str, str]:
    """(what happens to deq_scale at load, the static parameters in brief)."""
    deqs = [res.entry(res.linears[p][".deq_scale"]) if ".deq_scale" in res.linears.get(p, {}) else None
            for p in m.shards]
    if any(d is None for d in deqs):
        return "deq_scale missing", "deq_scale missing"
    dtype = deqs[0].dtype
    deq = (f"deq_scale {_dt.name(dtype)} [N] used as is" if dtype == np.float32 else
           "deq_scale int64 [N] (fp32 bits) -> read as FP19 by the fix-pipe")
    parts = []
    if read_data and dtype == np.int64:
        raw = np.concatenate([_read(res, p, ".deq_scale", True).reshape(-1) for p in m.shards]).astype(np.int64)
        exact = (raw & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
        fp19, _ = decode_quant_param(raw)
        changed = fp19 != exact
        if changed.any():
            rel = float(np.max(np.abs(fp19[changed].astype(np.float64) / exact[changed] - 1)))
            deq += f" ({int(changed.sum())}/{raw.size} truncated, max rel {rel:.2g})"
    if read_data:
        pairs = [(_read(res, p, ".input_scale", True), _read(res, p, ".input_offset", True)) for p in m.shards]
        if all(s is not None and o is not None for s, o in pairs):
            vals = {(float(np.asarray(s).reshape(-1)[0]), float(np.asarray(o).reshape(-1)[0])) for s, o in pairs}
            s0, o0 = next(iter(vals))
            parts.append(f"input_scale {s0:.4g}, input_offset {o0:g}")
            mdt = _model_dtype(res)
            s_param = float(np.float32(s0).astype(mdt).astype(np.float32))
            if s_param != float(np.float32(s0)):
                # SGLang registers input_scale in params_dtype: the fp32 export is rounded at load, and
                # 1 / input_scale is then computed from the rounded value (w8a8.linear.static_linear_stages)
                parts.append(f"input_scale -> {_dt.name(mdt)} {s_param:.6g} at load (rel {s_param / s0 - 1:+.2g})")
            if len(vals) > 1:
                pairs_txt = ", ".join(f"({a:.6g}, {b:g})" for a, b in sorted(vals))
                report.warnings.append(f"packed shards have different input_scale/input_offset {pairs_txt}: the "
                                       "fused module holds one per-tensor pair (which shard's wins is "
                                       "loader-dependent, not confirmed)")
        has_ws = all(".weight_scale" in res.linears.get(p, {}) for p in m.shards)
        parts.append("deq_scale == input_scale * weight_scale checked" if has_ws
                     else "no weight_scale (modelslim_v1): deq_scale taken as exported")
    return deq, "; ".join(parts) or "-"


def _moe(res: Resolution, m: Module, read_data: bool, launch: LaunchConfig) -> ModuleReport:
    info = m.moe
    gate, up, down = info.naming
    e = len(info.experts)
    prefixes = [info.expert_prefix(i, p) for i in info.experts for p in info.naming]
    g_shape = res.shape(info.expert_prefix(0, gate) + ".weight")
    d_shape = res.shape(info.expert_prefix(0, down) + ".weight")
    report = ModuleReport(m, op_family="?", chain=[f"description: {res.native_prefix(info.expert_prefix(0, gate))}"
                                                   f".weight = {info.w13_scheme}  (expert 0 decides for all "
                                                   f"{e} experts)"],
                          checkpoint_shape="?", loaded="?", layout="-", nd_reason=None, scales="-", static="-",
                          bytes=_bytes(res, prefixes), dispatch=dispatch_paths(launch, m.scheme))
    if g_shape is None or d_shape is None or len(g_shape) != 2 or len(d_shape) != 2:
        return report
    inter, h = g_shape
    report.checkpoint_shape = f"{e} x (W13 [{2 * inter}, {h}] + W2 [{d_shape[0]}, {d_shape[1]}])"
    mdt = _model_dtype(res)
    if m.scheme != "W8A8_DYNAMIC":
        report.op_family = "grouped_matmul (float)" if m.scheme == "FLOAT" else "(not modelled)"
        report.chain.append(f"{m.scheme_class or '-'} -> {m.method or 'unresolved'}")
        report.loaded = "as stored" if m.scheme == "FLOAT" else "?"
        return report
    l13, r13 = _layout(res, (e, h, 2 * inter))
    l2, r2 = _layout(res, (e, d_shape[1], d_shape[0]))
    report.layout = "NZ" if l13 == l2 == "NZ" else "ND"
    report.nd_reason = "; ".join(f"{w}: {r}" for w, r in (("W13", r13), ("W2", r2)) if r) or None
    report.loaded = f"W13 {_fmt((e, h, 2 * inter))} {l13}, W2 {_fmt((e, d_shape[1], d_shape[0]))} {l2}"
    stat = "not read"
    if read_data and mdt == _dt.bfloat16:
        scales = [_read(res, p, ".weight_scale", True) for p in prefixes]
        if all(s is not None for s in scales):
            stat = _rounding(np.concatenate([s.reshape(-1) for s in scales]), _dt.bfloat16)
    target = "bf16" if mdt == _dt.bfloat16 else _dt.name(mdt)
    report.scales = f"w13/w2 weight_scale fp32 [E, N, 1] -> {target} [E, N] ({stat})"
    report.op_family = "grouped_matmul W13 + dequant_swiglu_quant + grouped_matmul W2"
    nz13 = "NZ" if l13 == "NZ" else f"ND ({r13})"
    nz2 = "NZ" if l2 == "NZ" else f"ND ({r2})"
    report.chain += [
        f"{m.scheme_class} -> {m.method} (W13 = {gate} + {up}, W2 = {down})",
        f"load: w13 int8 [E, 2I, H] = {_fmt((e, 2 * inter, h))} -> transpose(1, 2) -> {_fmt((e, h, 2 * inter))} "
        f"-> {nz13}; w2 {_fmt((e, d_shape[0], d_shape[1]))} -> {_fmt((e, d_shape[1], d_shape[0]))} -> {nz2}",
        f"load: {report.scales} (SGLang legacy path keeps w13 fp32; vllm-ascend also keeps fp32 copies)",
        *[f"dispatch ({p.phase}): {p.transport}; wire {p.wire}; quantized at {p.quantized_at}: {p.formula}"
          for p in report.dispatch],
        f"W13: npu_grouped_matmul(x int8, w13 {l13}, scale=[E, 2I], per_token_scale, group_list_type=1, "
        f"output_dtype={_dt.name(mdt)}) -> [M, {2 * inter}]",
        f"npu_dequant_swiglu_quant(quant_mode=1, activate_left=True) -> int8 [M, {inter}] + fp32 [M]",
        f"W2: npu_grouped_matmul(a int8, w2 {l2}, scale=[E, H], per_token_scale) -> {_dt.name(mdt)} [M, {h}]",
        "npu_moe_finalize_routing(drop_pad_mode=2, or 3 under EP) -> [T, H]",
    ]
    if res.loader.name == "vllm-ascend":
        report.chain.append("vllm-ascend: W13 may run fused as grouped_matmul_swiglu_quant_weight_nz (needs NZ)")
    return report


def serving_findings(res, launch: LaunchConfig, findings: Findings) -> None:
    """Where the serving engine's composition is likely wrong for this checkpoint and launch (w8a8.serving):
    SGLang's ascend_tp MoE path (no ``--moe-a2a-backend``) runs a DeepSeek-V4 model's routed experts without its
    ``swiglu_limit`` clamp (row M1)."""
    from w8a8 import serving as _sv

    cfg = res.checkpoint.config or {}
    limit = cfg.get("swiglu_limit")
    if limit is None or launch.engine != "sglang" or getattr(launch, "moe_a2a_backend", "none") != "none":
        return
    if _sv.routed_limit(_sv.SGLANG, limit) is not None:
        return
    for m in res.modules:
        if m.kind == "moe" and m.scheme == "W8A8_DYNAMIC":
            findings.warning(m.name, f"SGLang's ascend_tp path runs these routed experts unclamped: the model's "
                                     f"swiglu_limit {limit} is not applied (NPUSwigluQuant() takes no limit: "
                                     f"{_sv.SGLANG.routed_clamp.source}); likely an SGLang bug: the float model "
                                     "clamps, vllm-ascend clamps", "sglang-routed-unclamped")


def analyze(checkpoint: Checkpoint | str, *, loader: str = "sglang", read_data: bool = True,
            launch: LaunchConfig | None = None) -> Report:
    """Resolve, validate and trace every module of ``checkpoint`` (a :class:`Checkpoint` or a path).

    ``launch``: the serving launch whose EP dispatch path each MoE layer reports
    (:mod:`.dispatch`); default: ``loader``'s engine with its default options.
    """
    if launch is None:
        launch = LaunchConfig(engine=loader)
    elif launch.engine != loader:
        raise ValueError(f"analyze: argument 'launch' is a {launch.engine} launch, but loader is {loader!r}")
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint.open(checkpoint)
    res = resolve(ckpt, loader)
    findings = Findings()
    findings.extend(ckpt.findings)
    findings.extend(res.findings)
    findings.extend(validate(res, read_data=read_data))
    reports = []
    for m in res.modules:
        before = len(m.findings)
        r = _moe(res, m, read_data, launch) if m.kind == "moe" else _dense(res, m, read_data)
        findings.extend(m.findings[before:])
        for w in r.warnings:
            findings.warning(m.name, w, "path")
        r.warnings = [str(f) for f in m.findings] + r.warnings
        reports.append(r)
    _router_bias(res, findings)
    _dispatch_warnings(reports, findings)
    serving_findings(res, launch, findings)
    n_layers = (ckpt.config or {}).get("num_hidden_layers")
    if isinstance(n_layers, int) and not res.dsv4:
        for r in reports:
            kind, _, idx = r.module.layer.partition(".")
            if kind == "layers" and int(idx) >= n_layers:
                r.module.layer += " (mtp)"
    totals = _totals(res, reports)
    summary = {
        "checkpoint": str(ckpt.path), "loader": res.loader.name,
        "naming": "DeepSeek-V4 native (SGLang remap to HF names)" if res.dsv4 else "HF",
        "model_quant_type": ckpt.description.model_quant_type, "version": ckpt.description.globals.get("version"),
        "model_dtype": _dt.name(ckpt.model_dtype) if ckpt.model_dtype is not None else None,
        "architectures": (ckpt.config or {}).get("architectures"),
        "files": len(ckpt.files), "tensors": len(ckpt.entries),
        "launch": launch.as_dict(),
        "errors": len(findings.errors), "warnings": sum(f.severity == "warning" for f in findings),
    }
    reports.sort(key=lambda r: (layer_sort_key(r.module.layer.split(" ")[0]), r.module.name))
    return Report(res, reports, findings, totals, summary)


def _dispatch_warnings(reports: list[ModuleReport], findings: Findings) -> None:
    """One warning finding per distinct dispatch-path warning, naming the MoE layers it concerns."""
    where: dict[str, list[str]] = {}
    for r in reports:
        for p in r.dispatch:
            for w in p.warnings:
                where.setdefault(f"dispatch, {p.phase}: {w}", []).append(r.module.name)
    for text, names in where.items():
        more = f" (and {len(names) - 1} more MoE layers)" if len(names) > 1 else ""
        findings.warning(names[0], text + more, "dispatch")


DEEPSEEK_ROUTED = ("deepseek_v3", "deepseek_v32", "kimi_k2", "deepseek_v4")


def _router_bias(res: Resolution, findings: Findings) -> None:
    """DeepSeek's ``noaux_tc`` router selects with ``e_score_correction_bias`` (DeepSeek-V4: ``gate.bias``;
    its hash-routed layers use ``tid2eid`` instead): report routers that lack it."""
    cfg = res.checkpoint.config or {}
    deepseek = res.dsv4 or str(cfg.get("model_type", "")) in DEEPSEEK_ROUTED or "n_group" in cfg \
        or any("Deepseek" in a for a in cfg.get("architectures") or [])
    if not deepseek:
        return
    missing = []
    for m in res.modules:
        if m.kind != "router":
            continue
        p = m.serving_name
        parent = p.rsplit(".", 1)[0]
        if p + ".e_score_correction_bias" in res.native_of or parent + ".topk.tid2eid" in res.native_of:
            continue
        missing.append(m.name)
    if missing:
        findings.warning(missing[0] if len(missing) == 1 else "",
                         f"{len(missing)} MoE router(s) have no e_score_correction_bias ({', '.join(missing[:4])}"
                         f"{'...' if len(missing) > 4 else ''}): DeepSeek's noaux_tc routing selects experts with "
                         "score + bias, and the serving model registers the bias as a parameter that keeps its "
                         "initial value when the checkpoint lacks it (zeros or uninitialised: loader-dependent, not "
                         "confirmed). msModelSlim's saver drops it for transformers' native DeepSeek-V3, where it is a "
                         "buffer: copy it from the float model. `w8a8 run CKPT --reference FLOAT_DIR` measures what it "
                         "changes (the routing causes, and the logits with no module quantized)", "router-bias-missing")


def _totals(res: Resolution, reports: list[ModuleReport]) -> dict:
    by_tag: dict[str, int] = {}
    for name, entry in res.checkpoint.entries.items():
        tag = res.checkpoint.description.types.get(name, "(undescribed)")
        by_tag[tag] = by_tag.get(tag, 0) + entry.nbytes
    by_scheme: dict[str, int] = {}
    for r in reports:
        key = f"{r.module.kind}:{r.module.scheme}"
        by_scheme[key] = by_scheme.get(key, 0) + 1
    nd = [r.module.name for r in reports if r.layout == "ND" and r.module.kind != "moe"]
    nd_moe = [r.module.name for r in reports if r.layout == "ND" and r.module.kind == "moe"]
    return {"bytes_by_type": dict(sorted(by_tag.items())), "bytes": sum(by_tag.values()),
            "modules_by_kind_and_scheme": dict(sorted(by_scheme.items())),
            "linears_nd_fallback": len(nd), "linears_nd_fallback_names": nd,
            "moe_nd_fallback": len(nd_moe), "moe_nd_fallback_names": nd_moe,
            "quantized_linears": sum(1 for r in reports if r.module.kind in ("linear", "packed")
                                     and r.module.scheme in ("W8A8", "W8A8_DYNAMIC", "W8A8_MIX"))}


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n}"
