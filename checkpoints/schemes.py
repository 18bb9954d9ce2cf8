"""Scheme resolution: which quantization method the serving code builds for every module.

The rules are SGLang's ``ModelSlimConfig`` (``get_quant_method`` / ``get_linear_scheme`` /
``get_moe_scheme``) and vllm-ascend's ``AscendModelSlimConfig`` (``vllm_ascend/quantization/modelslim_config.py``):

* A Linear's scheme is the description entry of ``<prefix>.weight``; nothing else is consulted.
* ``"FLOAT"`` means skipped: ``UnquantizedLinearMethod``.
* A packed module (``qkv_proj``, ``gate_up_proj``, DeepSeek's fused q_a / kv_a projection) takes the
  entries of its shards' ``.weight``; shards that disagree are an error in both loaders.
* A FusedMoE is resolved from **expert 0 only**: ``{prefix}.0.{gate}.weight`` / ``.{up}`` /
  ``.{down}``, trying the leaf names ``(gate_proj, up_proj, down_proj)`` then ``(w1, w3, w2)``.
  Gate and up (W13) must agree. ``W8A8_DYNAMIC`` -> ``ModelSlimW8A8Int8MoE`` /
  ``NPUW8A8Int8MoEMethod``. There is no static-W8A8 MoE scheme anywhere: a ``"W8A8"`` expert is
  an error ("Unsupported ModelSlim MoE schemes").
* An unknown type string is reported, never guessed.

Beyond what the loaders check, this module also reports experts other than expert 0 that disagree
with it (the loader would build expert 0's parameter layout for all of them, so such a checkpoint
cannot load as described), gaps in the expert indices and differing expert shapes.

DeepSeek-V4 native names are first rewritten with SGLang's remap (:mod:`.naming`); modules carry
both the checkpoint name and the serving name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .issues import Findings
from .naming import (EXPERT_NAMINGS, PACKED_MODULES, is_deepseek_v4_native, layer_of, layer_sort_key,
                     parse_expert, sglang_dsv4_remap, split_tensor_name)
from .reader import MODEL_QUANT_TYPE_PRIORITY, Checkpoint

MODELLED_TYPES = ("FLOAT", "W8A8", "W8A8_DYNAMIC")
"""The types whose serving path this suite models (goldens exist; ``--verify`` runs them)."""

KNOWN_TYPES = frozenset(MODEL_QUANT_TYPE_PRIORITY) | {"W4A8_DYNAMIC", "W4A16", "C8", "FAQuant"}
"""Every type string msModelSlim writes (its ``docs/zh/user_guide/quantization_formats/ascendv1.md``). Anything else
is unknown."""


@dataclass(frozen=True)
class Loader:
    """What differs between the serving stacks, as far as this suite models it."""

    name: str
    linear: dict[str, tuple[str | None, str | None]]    # type -> (scheme class, method class)
    moe: dict[str, tuple[str | None, str | None]]
    packed: dict[str, tuple[str, ...]]
    nz_alignment_check: bool    # SGLang's npu_format_cast falls back to ND; vllm-ascend's maybe_trans_nz does not


LOADERS: dict[str, Loader] = {
    "sglang": Loader(
        name="sglang",
        linear={
            "FLOAT": (None, "UnquantizedLinearMethod"),
            "W8A8": ("ModelSlimW8A8Int8", "NPUW8A8Int8LinearMethod"),
            "W8A8_DYNAMIC": ("ModelSlimW8A8Int8", "NPUW8A8Int8DynamicLinearMethod"),
            "W4A4_DYNAMIC": ("ModelSlimW4A4Int4", None),
            "W8A8_MXFP8": ("ModelSlimMXFP8Scheme", "NPUMXFP8LinearMethod"),
            "W4A8_MXFP": ("ModelSlimMXFP4W4A8Scheme", None),
            "W4A4_MXFP4": ("ModelSlimMXFP4Scheme", None),
        },
        moe={
            "FLOAT": (None, "UnquantizedFusedMoEMethod"),
            "W8A8_DYNAMIC": ("ModelSlimW8A8Int8MoE", "NPUW8A8Int8MoEMethod"),
            "W4A4_DYNAMIC": (None, None), "W4A8_DYNAMIC": (None, None), "W8A8_MXFP8": (None, None),
        },
        packed=PACKED_MODULES["sglang"], nz_alignment_check=True),
    "vllm-ascend": Loader(
        name="vllm-ascend",
        linear={
            "FLOAT": (None, "UnquantizedLinearMethod"),
            "W8A8": ("W8A8 (register_scheme)", "AscendW8A8LinearMethod"),
            "W8A8_DYNAMIC": ("W8A8_DYNAMIC (register_scheme)", "AscendW8A8DynamicLinearMethod"),
        },
        moe={
            "FLOAT": (None, "UnquantizedFusedMoEMethod"),
            "W8A8_DYNAMIC": ("W8A8_DYNAMIC (register_scheme)", "AscendW8A8DynamicFusedMoEMethod"),
        },
        packed=PACKED_MODULES["vllm-ascend"], nz_alignment_check=False),
}


def get_loader(name: str) -> Loader:
    if name not in LOADERS:
        raise ValueError(f"loader must be one of {sorted(LOADERS)}; got {name!r}")
    return LOADERS[name]


@dataclass
class MoeInfo:
    prefix: str                          # serving prefix of the FusedMoE ("...mlp.experts")
    naming: tuple[str, str, str]         # (gate, up, down) leaf names found for expert 0
    experts: tuple[int, ...]             # expert indices present
    w13_scheme: str | None
    w2_scheme: str | None

    def expert_prefix(self, e: int, proj: str) -> str:
        return f"{self.prefix}.{e}.{proj}"


@dataclass
class Module:
    """One serving module and the scheme the loader builds for it."""

    name: str                            # checkpoint name (packed: native parent + fused leaf)
    serving_name: str
    kind: str                            # linear | packed | moe | router | embedding | lm_head
    layer: str
    scheme: str | None
    scheme_class: str | None = None
    method: str | None = None
    shards: tuple[str, ...] = ()         # serving prefixes of the checkpoint Linears it is built from
    moe: MoeInfo | None = None
    notes: list[str] = field(default_factory=list)
    findings: Findings = field(default_factory=Findings)


@dataclass
class Resolution:
    """Every module of a checkpoint with its scheme, plus the name maps and the findings."""

    checkpoint: Checkpoint
    loader: Loader
    native_of: dict[str, str]            # serving tensor name -> checkpoint tensor name
    types: dict[str, str]                # serving tensor name -> description type
    linears: dict[str, dict[str, str]]   # serving Linear prefix -> {suffix: serving tensor name}
    modules: list[Module]
    findings: Findings
    dsv4: bool

    def native(self, serving_tensor: str) -> str:
        return self.native_of.get(serving_tensor, serving_tensor)

    def native_prefix(self, serving_prefix: str) -> str:
        weight = self.native_of.get(serving_prefix + ".weight")
        return weight[: -len(".weight")] if weight else serving_prefix

    def shape(self, serving_tensor: str) -> tuple[int, ...] | None:
        entry = self.checkpoint.entries.get(self.native(serving_tensor))
        return entry.shape if entry is not None else None

    def entry(self, serving_tensor: str):
        return self.checkpoint.entries.get(self.native(serving_tensor))

    def tensor(self, serving_tensor: str):
        return self.checkpoint.tensor(self.native(serving_tensor))


def _leaf(prefix: str) -> str:
    return prefix.rsplit(".", 1)[-1]


def _parent(prefix: str) -> str:
    return prefix.rsplit(".", 1)[0] if "." in prefix else ""


def classify(prefix: str, ndim: int | None) -> str | None:
    """Kind of the module owning ``prefix.weight`` (None for norms and other 1-D weights)."""
    leaf = _leaf(prefix)
    if (ndim is not None and ndim < 2) or leaf.endswith("norm"):
        return None
    if leaf in ("embed_tokens", "embed", "tok_emb"):
        return "embedding"
    if leaf in ("lm_head", "head"):
        return "lm_head"
    if leaf == "gate" and _leaf(_parent(prefix)) in ("mlp", "ffn", "block_sparse_moe", "moe"):
        return "router"
    return "linear"


def type_problem(t: str | None) -> str | None:
    """Why a description type cannot be used (None when it is a known type string)."""
    if t is None:
        return "no description entry"
    if t not in KNOWN_TYPES:
        return f"unknown quant type {t!r} (known: {', '.join(sorted(KNOWN_TYPES))})"
    return None


def resolve(checkpoint: Checkpoint, loader: str = "sglang") -> Resolution:
    """Resolve every module of ``checkpoint`` the way ``loader`` ("sglang" / "vllm-ascend") does."""
    prof = get_loader(loader)
    findings = Findings()
    native_names = set(checkpoint.entries) | set(checkpoint.description.types)
    dsv4 = is_deepseek_v4_native(native_names)
    native_of: dict[str, str] = {}
    for name in sorted(native_names):
        serving = sglang_dsv4_remap(name) if dsv4 else name
        if serving in native_of:
            findings.error(name, f"maps to the serving name {serving!r}, as does {native_of[serving]!r}",
                           "name-collision")
            continue
        native_of[serving] = name
    types = {s: checkpoint.description.types[n] for s, n in native_of.items() if n in checkpoint.description.types}

    linears: dict[str, dict[str, str]] = {}
    for serving in native_of:
        prefix, suffix = split_tensor_name(serving)
        if suffix:
            linears.setdefault(prefix, {})[suffix] = serving
    res = Resolution(checkpoint, prof, native_of, types, {}, [], findings, dsv4)

    plain: dict[str, str] = {}           # serving prefix -> kind
    experts: dict[str, dict[int, dict[str, str]]] = {}
    for prefix, tensors in linears.items():
        if ".weight" not in tensors:
            continue
        shape = res.shape(tensors[".weight"])
        parsed = parse_expert(prefix)
        if parsed is not None:
            moe, e, proj = parsed
            experts.setdefault(moe, {}).setdefault(e, {})[proj] = prefix
            continue
        kind = classify(prefix, None if shape is None else len(shape))
        if kind is not None:
            plain[prefix] = kind
    res.linears = {p: t for p, t in linears.items() if ".weight" in t}

    modules = _packed_and_plain(res, plain) + [_resolve_moe(res, moe, found) for moe, found in experts.items()]
    modules.sort(key=lambda m: (layer_sort_key(m.layer), m.serving_name))
    res.modules = modules
    for m in modules:
        findings.extend(m.findings)
    return res


def _linear_scheme(res: Resolution, module: Module, t: str | None) -> None:
    prof = res.loader
    problem = type_problem(t)
    if problem:
        module.findings.error(module.name, problem + (" for its .weight: the loader cannot pick a method"
                                                      if t is None else ""),
                              "no-description" if t is None else "unknown-type")
        return
    if module.kind in ("embedding", "lm_head", "router") and t != "FLOAT":
        why = {"router": "the MoE router (MoEGate) holds a plain float parameter, not a LinearBase: no quant "
                         "method applies and an int8 weight cannot load",
               "embedding": "the embedding is not a Linear: the ModelSlim Linear schemes do not apply",
               "lm_head": "quantized lm_head is outside the W8A8 paths this suite models"}[module.kind]
        module.findings.warning(module.name, f"tagged {t}: {why}", "quantized-" + module.kind)
        return
    if module.kind in ("embedding", "lm_head", "router"):
        module.method = {"embedding": "VocabParallelEmbedding", "lm_head": "ParallelLMHead",
                         "router": "MoEGate (float)"}[module.kind]
        return
    if t in prof.linear:
        module.scheme_class, module.method = prof.linear[t]
        if t not in MODELLED_TYPES:
            module.notes.append(f"{t} is not modelled by this suite (no golden; not verified)")
        return
    if prof.name == "sglang":
        module.findings.error(module.name, f"{t}: SGLang's get_linear_scheme has no scheme for this type "
                                           "(it warns and returns None, and loading fails)", "no-linear-scheme")
    else:
        module.notes.append(f"{t} is not modelled by this suite; vllm-ascend's scheme registry for it is not "
                            "checked")


def _packed_and_plain(res: Resolution, plain: dict[str, str]) -> list[Module]:
    modules: list[Module] = []
    by_parent: dict[str, set[str]] = {}
    for prefix, kind in plain.items():
        if kind == "linear":
            by_parent.setdefault(_parent(prefix), set()).add(_leaf(prefix))
    taken: set[str] = set()
    for parent, leaves in sorted(by_parent.items()):
        for fused, shards in res.loader.packed.items():
            if not all(s in leaves for s in shards):
                continue
            prefixes = tuple(f"{parent}.{s}" if parent else s for s in shards)
            taken.update(prefixes)
            native_parent = _parent(res.native_prefix(prefixes[0]))
            native_shards = [_leaf(res.native_prefix(p)) for p in prefixes]
            m = Module(name=f"{native_parent}.{fused}" if native_parent else fused,
                       serving_name=f"{parent}.{fused}" if parent else fused, kind="packed",
                       layer=layer_of(res.native_prefix(prefixes[0])), scheme=None, shards=prefixes)
            m.notes.append("packs " + " + ".join(native_shards))
            shard_types = [res.types.get(p + ".weight") for p in prefixes]
            if len(set(shard_types)) > 1:
                detail = ", ".join(f"{n}={t}" for n, t in zip(native_shards, shard_types))
                m.findings.error(m.name, f"packed shards disagree ({detail}): SGLang and vllm-ascend require one "
                                         "type for every shard of a fused module and raise ValueError",
                                 "packed-disagree")
                m.scheme = "MIXED"
            else:
                m.scheme = shard_types[0]
                _linear_scheme(res, m, shard_types[0])
            modules.append(m)
    for prefix, kind in sorted(plain.items()):
        if prefix in taken:
            continue
        native = res.native_prefix(prefix)
        t = res.types.get(prefix + ".weight")
        m = Module(name=native, serving_name=prefix, kind=kind, layer=layer_of(native), scheme=t, shards=(prefix,))
        _linear_scheme(res, m, t)
        modules.append(m)
    return modules


def _resolve_moe(res: Resolution, moe: str, found: dict[int, dict[str, str]]) -> Module:
    any_proj = next(iter(next(iter(found.values())).values()))          # "<moe>.<e>.<proj>"
    native_moe = _parent(_parent(res.native_prefix(any_proj)))
    m = Module(name=native_moe, serving_name=moe, kind="moe", layer=layer_of(native_moe), scheme=None)
    naming = None
    for cand in EXPERT_NAMINGS:
        # SGLang's get_moe_scheme (modelslim.py@07ee8929): expert 0's gate *or* up entry plus its down entry
        if (f"{moe}.0.{cand[0]}.weight" in res.types or f"{moe}.0.{cand[1]}.weight" in res.types) \
                and f"{moe}.0.{cand[2]}.weight" in res.types:
            naming = cand
            break
    ids = tuple(sorted(found))
    if naming is None:
        m.findings.error(m.name, "no description entry for expert 0's gate projection (tried "
                         + ", ".join(f"{res.native(f'{moe}.0.{c[0]}.weight')}" for c in EXPERT_NAMINGS)
                         + "): SGLang/vllm-ascend resolve the MoE scheme from expert 0 only", "moe-no-expert0")
        m.moe = MoeInfo(moe, EXPERT_NAMINGS[0], ids, None, None)
        return m
    gate, up, down = naming
    t_gate, t_up, t_down = (res.types.get(f"{moe}.0.{p}.weight") for p in naming)
    if t_gate is None or t_up is None:      # one of gate / up described: SGLang reads the scheme from it
        t_gate = t_up = t_gate if t_gate is not None else t_up
    info = MoeInfo(moe, naming, ids, t_gate, t_down)
    m.moe = info
    m.shards = tuple(f"{moe}.0.{p}" for p in naming)
    m.notes.append(f"{len(ids)} experts, W13 = {gate} + {up}, W2 = {down}; scheme read from expert 0")
    if t_gate != t_up:
        m.findings.error(m.name, f"expert 0's W13 shards disagree ({gate}={t_gate}, {up}={t_up}): the loader "
                                 "raises ValueError (gate and up share one grouped weight)", "moe-w13-disagree")
        m.scheme = "MIXED"
    else:
        m.scheme = t_gate
    problem = type_problem(t_gate)
    if problem and m.scheme != "MIXED":
        m.findings.error(m.name, problem, "unknown-type" if t_gate is not None else "moe-no-expert0")
    elif m.scheme == "W8A8":
        m.findings.error(m.name, "static W8A8 experts: no serving path supports them (SGLang: \"Unsupported "
                                 "ModelSlim MoE schemes\"; vllm-ascend registers W8A8_DYNAMIC for MoE only)",
                         "static-moe")
    elif m.scheme != "MIXED":
        if m.scheme in res.loader.moe:
            m.scheme_class, m.method = res.loader.moe[m.scheme]
            if m.scheme not in MODELLED_TYPES:
                m.notes.append(f"{m.scheme} experts are not modelled by this suite")
            if m.scheme == "FLOAT":
                m.notes.append("FLOAT experts -> unquantized FusedMoE [not confirmed: the cited scheme table "
                               "lists quantized types only]")
        else:
            m.findings.error(m.name, f"{m.scheme} experts: {res.loader.name} has no MoE scheme for this type "
                                     "(\"Unsupported ModelSlim MoE schemes\")", "no-moe-scheme")
    if res.loader.name == "sglang" and t_gate == "W8A8_DYNAMIC" and t_down in ("FLOAT", "W8A8"):
        m.findings.error(m.name, f"W2 ({down}={t_down}) with W8A8_DYNAMIC W13: SGLang builds the w13 and w2 schemes "
                                 "separately and has no MoE scheme for a FLOAT / W8A8 down projection: ValueError "
                                 "\"Unsupported ModelSlim MoE schemes\" (sgl-project/sglang:python/sglang/srt/layers/"
                                 "quantization/modelslim/modelslim.py@07ee8929::get_moe_scheme)", "moe-w2-unsupported")
    elif t_down != t_gate and m.scheme != "MIXED" and not type_problem(t_down):
        m.findings.warning(m.name, f"W2 ({down}={t_down}) differs from W13 ({t_gate}): only the newest SGLang "
                                   "API builds a separate w2 scheme", "moe-w2-differs")
    _check_experts(res, m, found, naming)
    return m


def _check_experts(res: Resolution, m: Module, found: dict[int, dict[str, str]], naming) -> None:
    moe = m.serving_name
    ids = sorted(found)
    missing_ids = sorted(set(range(ids[-1] + 1)) - set(ids))
    if missing_ids:
        m.findings.error(m.name, f"expert indices have gaps (missing {missing_ids[:8]}"
                         + ("..." if len(missing_ids) > 8 else "") + "): a FusedMoE loads experts 0..E-1",
                         "moe-expert-gap")
    ref_types = {p: res.types.get(f"{moe}.0.{p}.weight") for p in naming}
    ref_shapes = {p: res.shape(f"{moe}.0.{p}.weight") for p in naming}
    bad_type: list[str] = []
    bad_shape: list[str] = []
    missing: list[str] = []
    for e in ids:
        for p in naming:
            prefix = found[e].get(p)
            if prefix is None:
                missing.append(f"{e}.{p}")
                continue
            if res.types.get(prefix + ".weight") != ref_types[p]:
                bad_type.append(f"{res.native_prefix(prefix)}={res.types.get(prefix + '.weight')}")
            if res.shape(prefix + ".weight") != ref_shapes[p]:
                bad_shape.append(f"{res.native_prefix(prefix)} {res.shape(prefix + '.weight')}")
        extra = set(found[e]) - set(naming)
        if extra:
            missing.append(f"{e}: unexpected {sorted(extra)}")
    if missing:
        m.findings.error(m.name, f"experts lack projections ({', '.join(missing[:6])}"
                         + ("..." if len(missing) > 6 else "") + f"); every expert needs {'/'.join(naming)}",
                         "moe-expert-missing")
    if bad_type:
        m.findings.error(m.name, f"{len(bad_type)} expert projection(s) disagree with expert 0 "
                         f"({', '.join(bad_type[:4])}{'...' if len(bad_type) > 4 else ''}): the loader reads expert 0 "
                         f"only and builds {'/'.join(f'{k}={v}' for k, v in ref_types.items())} for all experts",
                         "moe-expert-inconsistent")
    if bad_shape:
        m.findings.error(m.name, f"{len(bad_shape)} expert weight(s) differ in shape from expert 0 "
                         f"({', '.join(bad_shape[:3])}...): a FusedMoE stacks identical expert shapes",
                         "moe-expert-shape")
    cfg = res.checkpoint.config or {}
    n_cfg = cfg.get("n_routed_experts", cfg.get("num_experts"))
    if isinstance(n_cfg, int) and n_cfg != len(ids):
        m.findings.warning(m.name, f"{len(ids)} experts in the checkpoint; config.json says {n_cfg}",
                           "moe-expert-count")
