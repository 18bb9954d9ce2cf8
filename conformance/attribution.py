"""Mismatch attribution: *where* a backend diverged from the golden, and *why* — true causes only.

1. **Causes that apply.** A cause is searched for (and named) only where it can act: the
   :class:`w8a8.Numerics` fields an op reads (its declaration's ``numerics_fields`` and the
   field -> ops table :data:`FIELD_READERS`, transcribed from the Numerics docstring), the op's
   arithmetic arguments (:data:`ARGUMENT_CHOICES`: ``mx_quantize``'s ``scale_mode``, ...), and the
   kernel variants of the call (:mod:`w8a8.variants`). An op that has no FP19 never gets "FP19".
2. **Reproduction.** The golden is re-run under each candidate — every applicable field changed to
   each of its other values; each other value of an arithmetic argument; each other variant's record
   (``Variant.numerics`` with ``variants="fixed"``) and the record with ``variants="fixed"`` (or
   ``"select"``) — then pairs of fields, then a greedy walk (the change that removes the most
   mismatches, again and again) for the multi-field records of foreign libraries. A candidate that
   reproduces the backend's outputs *bit for bit* (don't-care elements masked) is a cause; the
   smallest ones are **equals**: all are listed, none is preferred because it was found first.
3. **Stages.** The stages of the op come from the *golden*: its ``*_stages`` function (the fused ops:
   ``w8a8_dynamic_linear``'s ``x_scale`` -> ``x_q`` -> ``acc`` -> ``y``) or the declaration's stage
   functions run on the golden. A stage is *observed* on the backend only when its function calls the
   op itself (a fused kernel's sibling ``dynamic_quant`` says nothing about the activation quant inside
   the fused kernel). With a reproducing cause, the first diverging stage is the first stage where the
   golden under the cause differs from the golden under the declared record; without one, the first
   observed stage that differs (the unobserved ones are listed as such).
4. **Evidence before blame.** A scale output is read first (:func:`scale_evidence`): bf16-valued
   scales (every value a multiple of 65536 fp32 ULP, one bf16 step), a ratio of 127/127.5 (the
   divisor), FP19-valued scales (only for ops that have FP19), a few fp32 ULP (the order of the
   scale formula). Known library bugs are named by their detectors (:mod:`.detectors`).
5. When nothing reproduces the backend, the report says so, gives the evidence and the closest
   candidate, and only then the error pattern (off by one at ties or away from them, NaN vs number).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from backends.base import Unsupported
from backends.numpy_backend import NumpyBackend
from w8a8 import dtypes as _dt
from w8a8.numerics import Numerics

from .compare import FAIL, PASS, compare

CAUSES: dict[str, str] = {
    "round_mode": "tie rounding",
    "quant_codes": "code arithmetic (reciprocal vs divide: x*(qmax/amax), x/scale or x*fp32(1/scale))",
    "scale_out": "scale formula, reciprocal vs divide (1/(qmax/amax), amax*fp32(1/qmax) or amax/qmax)",
    "zero_row": "the code written for all-zero rows (NaN cast)",
    "nan_policy": "NaN/Inf handling",
    "saturate": "saturation (wrap-around instead of clamping)",
    "fp19_scale": "FP19 scale truncation",
    "fp19_round_mode": "FP19 rounding mode (truncate vs nearest-even)",
    "int32_bias": "int32 bias position (added after dequant instead of in the int32 accumulator)",
    "epilogue_order": "accumulation/epilogue order (per-channel vs per-token multiply order)",
    "requant_clamp9": "int8 requant steps (9-bit intermediate clamps)",
    "transcendental": "exp precision (fp32 vs correctly rounded)",
    "routing_quant_round": "routing quantization rounding path",
    "zero_point_position": "zero point added before vs after rounding",
    "quantize_div": "quantize by multiplying with the reciprocal vs dividing",
    "swiglu_order": "SwiGLU order of operations",
    "antiquant_precision": "antiquant arithmetic precision",
    "finalize_precision": "finalize arithmetic precision",
    "finalize_out_round": "finalize output rounding",
    "dropped_slot_bias": "bias of a dropped routing slot",
    "gating_precision": "gating softmax precision",
    "static_zero_scale": "a zero static quant scale",
    "scale_precision": "bf16 scale (an fp32 scale rounded to bf16)",
    # open numerics (the Numerics fields of kernels nobody here wrote)
    "scale_divisor": "scale divisor (127.5 = half the int8 range, instead of 127)",
    "scale_dtype": "scale computed in the input dtype (bf16/fp16-rounded)",
    "scale_floor": "scale floor (a minimum scale / replacement of zero scales)",
    "code_arith": "code arithmetic in the input dtype (the product rounded to bf16/fp16 before rint)",
    "code_range": "code range (-128 reachable)",
    "dynamic_granularity": "per-tensor instead of per-token activation quantization",
    "asym_range": "asymmetric range forced through 0",
    "asym_zero_point": "integer zero point instead of a float offset",
    "asym_degenerate": "scale of a constant range",
    "act_quant": "asymmetric activation quantization",
    "epilogue_intermediate": "epilogue intermediate rounded to the output dtype",
    "antiquant_dtype": "dequantized weight kept in fp32",
    "nvfp4_codes": "NVFP4 code order (x*((1/S)/s_b) vs x/(S*s_b))",
    "nan_code": "the code written for NaN",
    "variants": "kernel-variant policy",
}

FIELD_READERS: dict[str, tuple[str, ...]] = {
    # The ops that read each Numerics field (w8a8/numerics.py docstring), besides what a declaration lists in
    # its numerics_fields. A field missing here and from every declaration is never searched
    # (tests/conformance/test_foreign_engine.py checks that every field is covered).
    "round_mode": ("quantize", "dynamic_quant", "dynamic_quant_asymmetric", "quant_matmul", "w8a8_static_linear",
                   "w8a8_dynamic_linear", "dequant_swiglu_quant", "moe_init_routing_v2", "w8a8_moe",
                   "w8a8_moe_prequantized", "w4a8_dynamic_linear"),
    "quant_codes": ("dynamic_quant", "w8a8_dynamic_linear", "w4a8_dynamic_linear", "dequant_swiglu_quant",
                    "w8a8_moe", "w8a8_moe_prequantized", "dynamic_quant_asymmetric"),
    "scale_out": ("dynamic_quant", "w8a8_dynamic_linear", "w4a8_dynamic_linear", "dequant_swiglu_quant", "w8a8_moe",
                  "w8a8_moe_prequantized"),
    "zero_row": ("dynamic_quant", "dynamic_quant_asymmetric", "w8a8_dynamic_linear", "w4a8_dynamic_linear"),
    "nan_policy": ("quantize", "dynamic_quant", "dynamic_quant_asymmetric"),
    "saturate": ("quantize", "dynamic_quant", "dynamic_quant_asymmetric", "quant_matmul", "w8a8_static_linear",
                 "w8a8_dynamic_linear"),
    "fp19_scale": ("quant_matmul", "w8a8_static_linear", "w8a8_dynamic_linear", "grouped_matmul", "w8a8_moe",
                   "w8a8_moe_prequantized", "w4a8_dynamic_linear", "quant_matmul_int4"),
    "fp19_round_mode": ("quant_matmul", "w8a8_static_linear", "w8a8_dynamic_linear", "quant_matmul_int4"),
    "int32_bias": ("quant_matmul", "grouped_matmul", "w8a8_static_linear", "w8a8_dynamic_linear", "quant_matmul_int4"),
    "epilogue_order": ("quant_matmul", "grouped_matmul", "w8a8_dynamic_linear", "w8a8_moe", "w8a8_moe_prequantized",
                       "quant_matmul_int4", "w4a8_dynamic_linear"),
    "requant_clamp9": ("quant_matmul", "w8a8_static_linear"),
    "transcendental": ("swiglu", "dequant_swiglu_quant", "moe_gating_top_k", "moe_gating_top_k_softmax", "w8a8_moe",
                       "w8a8_moe_prequantized"),
    "routing_quant_round": ("moe_init_routing_v2", "w8a8_moe"),
    "zero_point_position": ("quantize", "dynamic_quant_asymmetric"),
    "quantize_div": ("quantize",),
    "swiglu_order": ("swiglu", "dequant_swiglu_quant", "w8a8_moe", "w8a8_moe_prequantized"),
    "antiquant_precision": ("weight_quant_batchmatmul",),
    "finalize_precision": ("moe_finalize_routing",),
    "finalize_out_round": ("moe_finalize_routing",),
    "dropped_slot_bias": ("moe_finalize_routing",),
    "gating_precision": ("moe_gating_top_k_softmax",),
    "static_zero_scale": ("dequant_swiglu_quant",),
    "scale_divisor": ("dynamic_quant", "w8a8_dynamic_linear", "w4a8_dynamic_linear"),
    "scale_dtype": ("dynamic_quant", "w8a8_dynamic_linear", "w4a8_dynamic_linear"),
    "scale_floor": ("dynamic_quant", "dynamic_quant_asymmetric", "w8a8_dynamic_linear", "w4a8_dynamic_linear"),
    "code_arith": ("dynamic_quant", "dynamic_quant_asymmetric", "w8a8_dynamic_linear", "w4a8_dynamic_linear"),
    "code_range": ("dynamic_quant", "w8a8_dynamic_linear", "w4a8_dynamic_linear"),
    "dynamic_granularity": ("dynamic_quant", "dynamic_quant_asymmetric", "w8a8_dynamic_linear"),
    "asym_range": ("dynamic_quant_asymmetric", "w8a8_dynamic_linear"),
    "asym_zero_point": ("dynamic_quant_asymmetric", "w8a8_dynamic_linear"),
    "asym_degenerate": ("dynamic_quant_asymmetric", "w8a8_dynamic_linear"),
    "act_quant": ("w8a8_dynamic_linear",),
    "epilogue_intermediate": ("quant_matmul", "grouped_matmul", "w8a8_dynamic_linear"),
    "antiquant_dtype": ("weight_quant_batchmatmul",),
    "nvfp4_codes": ("nvfp4_quantize",),
    "nan_code": ("quantize",),
}

ARGUMENT_CHOICES: dict[str, dict[str, tuple]] = {
    # Arithmetic arguments of an op: a kernel that ignores one (or maps it wrongly) computes another value's result.
    "mx_quantize": {"scale_mode": ("floor", "ceil", "even", "rceil")},
    "trans_quant_param": {"round_mode": (0, 1)},
}

MAX_CANDIDATES = 160   # golden re-runs per failing case (singles and pairs), before the greedy walk
SEARCH_SECONDS = 30.0  # wall-clock budget of one case's search (the runner's timeout covers the whole case)
GREEDY_DEPTH = 7       # fields the greedy walk may change (torchao's int8 record changes 6 of the dynamic quantizer's)


# ------------------------------------------------------------------------------------------------
# what applies to an op

def applicable_fields(spec) -> tuple[str, ...]:
    """The Numerics fields ``spec``'s op reads: its declaration's ``numerics_fields`` and :data:`FIELD_READERS`,
    in the order of :meth:`w8a8.Numerics.choices` (fields this Numerics does not have are left out)."""
    declared = set(spec.numerics_fields)
    return tuple(f for f in Numerics.choices() if f in declared or spec.name in FIELD_READERS.get(f, ()))


def describe(changes: dict) -> str:
    """Words for a set of changes, e.g. ``{"round_mode": "half_away"}`` or ``{"args": {"scale_mode": "floor"}}``."""
    changes = dict(changes)
    parts = []
    args = changes.pop("args", None)
    if args:
        parts += [f"argument {k}: the backend computes {k}={v!r} (the argument is ignored or mapped wrongly)"
                  for k, v in args.items()]
    if set(changes) >= {"quant_codes", "scale_out"} and changes.get("quant_codes") == "div_scale" and \
            changes.get("scale_out") == "amax_div":
        parts.append("reciprocal vs divide: scale = amax/qmax (scale_out='amax_div') and codes = x/scale")
        changes.pop("quant_codes"), changes.pop("scale_out")
    for f, value in changes.items():
        parts.append(f"{CAUSES.get(f, f)} [{f}={value!r}]")
    return "; ".join(parts)


@dataclass
class Candidate:
    """One alternative the golden is re-run under: a record change, argument overrides, words."""

    change: dict                     # Numerics fields changed (may hold "variants"), plus "args" for arguments
    kind: str = "numerics"           # "numerics" | "argument" | "optional input" | "variant"
    words: str = ""
    mismatches: int | None = None    # elements that still differ from the backend under it
    numerics: Numerics | None = None

    @property
    def size(self) -> int:
        return len([k for k in self.change if k != "args"]) + len(self.change.get("args", {}))

    @property
    def text(self) -> str:
        return self.words or describe(self.change)


def _record(declared: Numerics, change: dict) -> Numerics | None:
    fields = {k: v for k, v in change.items() if k != "args"}
    if not fields:
        return declared
    try:
        return declared.replace(**fields)
    except (ValueError, TypeError):
        return None


def _single_changes(declared: Numerics, fields: tuple[str, ...]) -> list[dict]:
    choices = Numerics.choices()
    return [{f: v} for f in fields for v in choices[f] if v != getattr(declared, f)]


def candidates(declared: Numerics, fields: tuple[str, ...]) -> list[dict]:
    """Numerics changes to try, single fields first, then pairs (at most MAX_CANDIDATES)."""
    singles = _single_changes(declared, fields)
    pairs = [{**a, **b} for a, b in itertools.combinations(singles, 2) if not set(a) & set(b)]
    return (singles + pairs)[:MAX_CANDIDATES]


def _argument_candidates(spec, kwargs: dict) -> list[Candidate]:
    out = []
    for arg, values in ARGUMENT_CHOICES.get(spec.name, {}).items():
        asked = kwargs.get(arg, _default_of(spec.name, arg))
        for v in values:
            if v != asked:
                out.append(Candidate({"args": {arg: v}}, "argument",
                                     f"argument {arg}: the backend computes {arg}={v!r} where the call asks "
                                     f"{asked!r} (the argument is ignored or mapped wrongly)"))
    return out


def _is_tensor_input(v) -> bool:
    if isinstance(v, np.ndarray):
        return True
    return isinstance(v, (list, tuple)) and bool(v) and all(isinstance(x, np.ndarray) for x in v)


def optional_inputs(spec, kwargs: dict) -> tuple[str, ...]:
    """The optional tensor inputs of the call: parameters of the golden op that default to None (bias, smooth
    scales, offsets, group_index, ...) and that the call gives as arrays."""
    from w8a8 import registry

    try:
        params = registry.get(spec.name).signature.parameters
    except (KeyError, ValueError):
        return ()
    return tuple(n for n, p in params.items()
                 if p.default is None and n in kwargs and _is_tensor_input(kwargs[n]))


def _optional_input_candidates(spec, kwargs: dict) -> list[Candidate]:
    """The call re-run without each of its optional inputs: a kernel that ignores one (drops a bias, reads no
    smooth scales, no offset, no group_index) computes exactly that."""
    return [Candidate({"args": {name: None}}, "optional input",
                      f"optional input ignored: the backend computes as if '{name}' were not given (the call "
                      f"gives it)")
            for name in optional_inputs(spec, kwargs)]


def _default_of(op: str, arg: str):
    from w8a8 import registry

    p = registry.get(op).signature.parameters.get(arg)
    return None if p is None or p.default is inspect.Parameter.empty else p.default


def _variant_candidates(spec, args, kwargs, declared: Numerics) -> list[Candidate]:
    """The other kernel variants of this call, and the record with the other variant policy."""
    from w8a8 import variants as _variants

    out = []
    if declared.variants == "fixed":
        out.append(Candidate({"variants": "select"}, "variant",
                             f"kernel variants: the backend computes the kernel {declared.platform}'s host tiling "
                             f"selects for this call, where it declares one fixed kernel (variants='fixed')"))
        return out
    selected = None
    if spec.name in _variants.explainable_ops():
        try:
            selected = _variants.select(spec.name, *args, numerics=declared, **kwargs)
        except Exception:  # noqa: BLE001 - a call the selector cannot read has no variant alternatives
            selected = None
    out.append(Candidate({"variants": "fixed"}, "variant",
                         "kernel variants: the backend computes the record's main-path formulas (variants='fixed')"
                         + (f" where {declared.platform} selects {selected.label}" if selected else "")))
    if selected is None:
        return out
    defaults, choices = Numerics.defaults(), Numerics.choices()
    for f, chosen in selected.decides.items():
        if getattr(declared, f) != defaults[f]:
            continue  # the record set it: the variant does not decide it
        for v in choices[f]:
            if v == chosen:
                continue
            change = {f: v} if v != defaults[f] else {f: v, "variants": "fixed"}
            out.append(Candidate(change, "variant",
                                 f"kernel variant: the backend computes {f}={v!r} (another kernel's formula) where "
                                 f"{declared.platform} selects {selected.label} ({f}={chosen!r}) for this call"))
    return out


# ------------------------------------------------------------------------------------------------
# comparing outputs

def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(a.dtype.itemsize, np.uint8))


def mismatch_mask(ref: np.ndarray, got: np.ndarray, mask=None) -> np.ndarray | None:
    """Elementwise True where ``got`` differs from ``ref`` (NaN == NaN, +0 == -0 as numbers; don't-care
    elements of ``mask`` False); None when shapes or dtypes differ."""
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return None
    if ref.dtype.kind in "iub" or _dt.name(ref.dtype) not in ("bfloat16", "float16", "float32", "float64",
                                                                 "float8_e4m3fn", "float8_e5m2"):
        differs = _bits(ref) != _bits(got) if ref.dtype.kind not in "iub" else ref != got
    else:
        r, g = ref.astype(np.float64), got.astype(np.float64)
        differs = ~((r == g) | (np.isnan(r) & np.isnan(g)))
    if mask is not None:
        differs = differs & np.broadcast_to(np.asarray(mask, dtype=bool), differs.shape)
    return differs


def _count_mismatches(spec, result, outputs: dict, masks: dict) -> int | None:
    """Elements of ``outputs`` that differ from the golden ``result`` (None: a shape/dtype/arity mismatch)."""
    try:
        ref = spec.as_outputs(result)
    except ValueError:
        return None
    total = 0
    for name, value in outputs.items():
        r = ref.get(name)
        if r is None or value is None:
            if (r is None) != (value is None):
                return None
            continue
        m = mismatch_mask(r, np.asarray(value), masks.get(name))
        if m is None:
            return None
        total += int(m.sum())
    return total


def _outputs_equal(spec, golden_result, backend_outputs: dict, masks: dict) -> bool:
    return _count_mismatches(spec, golden_result, backend_outputs, masks) == 0


# ------------------------------------------------------------------------------------------------
# the search

class _Search:
    """Golden re-runs of one failing case, memoized by the resolved record and argument overrides."""

    def __init__(self, spec, args, kwargs, outputs: dict, declared: Numerics, masks: dict):
        self.spec, self.args, self.kwargs, self.outputs = spec, args, kwargs, outputs
        self.declared, self.masks = declared, masks
        self.golden = NumpyBackend(declared)
        self.tried = 0
        self._memo: dict = {}
        self.deadline = time.monotonic() + SEARCH_SECONDS
        self.cut_short = False
        self.baseline: int | None = None     # elements that differ under the declared record

    def run(self, numerics: Numerics, overrides: dict | None = None):
        key = (numerics, tuple(sorted((overrides or {}).items())))
        if key not in self._memo:
            if time.monotonic() > self.deadline:
                self.cut_short = True
                return None
            self.tried += 1
            try:
                with np.errstate(all="ignore"):
                    self._memo[key] = self.golden.call(self.spec.name, *self.args, numerics=numerics,
                                                       **{**self.kwargs, **(overrides or {})})
            except Exception:  # noqa: BLE001 - a record that raises does not reproduce
                self._memo[key] = None
        return self._memo[key]

    def evaluate(self, cand: Candidate) -> Candidate:
        rec = _record(self.declared, cand.change)
        cand.numerics = rec
        if rec is None:
            return cand
        result = self.run(rec, cand.change.get("args"))
        cand.mismatches = None if result is None else _count_mismatches(self.spec, result, self.outputs, self.masks)
        return cand


def _minimal(found: list[Candidate]) -> list[Candidate]:
    """The smallest reproducing candidates (the equals), without any that contains another's change."""
    if not found:
        return []
    size = min(c.size for c in found)
    out: dict[str, Candidate] = {}
    for c in found:
        if c.size != size:
            continue
        key = repr(sorted((k, repr(v)) for k, v in c.change.items()))
        twin = out.get(key)
        if twin is None:
            out[key] = c
        elif c.kind == "variant" and c.words and c.words not in twin.text:
            # the same record reached as a field change and as a kernel variant: one cause, both words
            twin.words = f"{twin.text} — {c.words}"
    return list(out.values())


def _search(s: _Search, fields: tuple[str, ...], seed: dict | None = None
            ) -> tuple[list[Candidate], Candidate | None]:
    """(the equally consistent reproducing candidates, the closest non-reproducing one).

    ``seed`` is the change the scale's own evidence points at (:func:`evidence_seed`): when singles and
    pairs do not reproduce, the greedy walk also starts from it — a multi-field foreign record is reached
    through its scale first instead of through whatever single change happens to fix the most codes."""
    declared = s.declared
    cands = _argument_candidates(s.spec, s.kwargs) + _variant_candidates(s.spec, s.args, s.kwargs, declared) + \
        [Candidate(c) for c in _single_changes(declared, fields)] + _optional_input_candidates(s.spec, s.kwargs)
    evaluated = [s.evaluate(c) for c in cands]
    found = [c for c in evaluated if c.mismatches == 0]
    if found:
        return _minimal(found), None
    baseline = s.evaluate(Candidate({})).mismatches
    s.baseline = baseline
    singles = [c for c in evaluated if c.kind == "numerics" and c.mismatches is not None]
    improving = sorted((c for c in singles if baseline is None or c.mismatches < baseline), key=lambda c: c.mismatches)
    pool = improving if improving else singles
    budget = MAX_CANDIDATES - s.tried
    pairs = []
    for a, b in itertools.combinations(pool, 2):
        if budget <= 0:
            break
        if set(a.change) & set(b.change):
            continue
        pairs.append(s.evaluate(Candidate({**a.change, **b.change})))
        budget -= 1
    found = [c for c in pairs if c.mismatches == 0]
    if found:
        return _minimal(found), None
    dropped = [c for c in evaluated if c.kind == "optional input" and c.mismatches is not None]
    best = min((c for c in singles + pairs + dropped if c.mismatches is not None), key=lambda c: c.mismatches,
               default=None)
    chains = [_greedy(s, fields, best, baseline)]
    if seed:
        start = s.evaluate(Candidate(dict(seed)))
        if start.mismatches is not None:
            chains.append(_greedy(s, fields, start, None))
    for chain in chains:
        if chain is not None and chain.mismatches == 0:
            return [_prune(s, chain)], None
    closest = min((c for c in (best, *chains) if c is not None and c.mismatches is not None),
                  key=lambda c: c.mismatches, default=None)
    return [], closest if closest is not None and baseline is not None and closest.mismatches < baseline else None


def _greedy(s: _Search, fields, start: Candidate | None, baseline) -> Candidate | None:
    """From ``start``, add the single field change that removes the most mismatches, while one does."""
    if start is None or start.mismatches is None or (baseline is not None and start.mismatches >= baseline):
        return start
    current = start
    choices = Numerics.choices()
    for _ in range(GREEDY_DEPTH):
        if current.mismatches == 0:
            return current
        best = None
        for f in fields:
            if f in current.change:
                continue
            for v in choices[f]:
                if v == getattr(s.declared, f):
                    continue
                c = s.evaluate(Candidate({**current.change, f: v}))
                if c.mismatches is not None and (best is None or c.mismatches < best.mismatches):
                    best = c
        if best is None or best.mismatches >= current.mismatches:
            return current
        current = best
    return current


def _prune(s: _Search, cand: Candidate) -> Candidate:
    """Drop every field of a reproducing change that is not needed to reproduce."""
    change = dict(cand.change)
    for f in list(change):
        trial = {k: v for k, v in change.items() if k != f}
        if trial and s.evaluate(Candidate(trial)).mismatches == 0:
            change = trial
    return s.evaluate(Candidate(change))


def reproduce(spec, args, kwargs, outputs: dict, declared: Numerics, *, masks: dict | None = None
              ) -> tuple[list[dict], int]:
    """Changes (from ``declared``) under which the golden reproduces ``outputs`` bit for bit — the equally
    consistent smallest ones — and how many golden re-runs were made."""
    s = _Search(spec, args, kwargs, outputs, declared, masks or {})
    found, _ = _search(s, applicable_fields(spec))
    return [c.change for c in found], s.tried


# ------------------------------------------------------------------------------------------------
# stages

class _Recorder:
    """A backend stand-in that notes which op methods a stage function calls."""

    def __init__(self, backend):
        self._backend, self.called = backend, []

    def __getattr__(self, name):
        value = getattr(self._backend, name)
        if callable(value) and not name.startswith("_"):
            self.called.append(name)
        return value


_STAGE_CALLS: dict[tuple[str, str], frozenset] = {}


@functools.lru_cache(maxsize=None)
def golden_stages_fn(op: str):
    """The golden's ``*_stages`` function of ``op`` (same parameters as the op), or None."""
    from w8a8 import registry

    g = registry.get(op)
    module = importlib.import_module(g.module)
    want = [(p.name, p.kind) for p in g.signature.parameters.values()]
    found = []
    for name in sorted(dir(module)):
        fn = getattr(module, name)
        if not (name.endswith("_stages") and callable(fn)):
            continue
        try:
            params = [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]
        except (TypeError, ValueError):
            continue
        if params == want:
            found.append((name != f"{op}_stages", name, fn))
    return min(found)[2] if found else None


def golden_stage_values(spec, args, kwargs, numerics: Numerics) -> dict[str, np.ndarray | None]:
    """The golden's value of each declared stage under ``numerics``: from its ``*_stages`` function where
    that names the stage, else from the declaration's stage function run on the golden."""
    values: dict[str, np.ndarray | None] = {}
    fn = golden_stages_fn(spec.name)
    full = {}
    if fn is not None and spec.stages:
        try:
            with np.errstate(all="ignore"):
                full = fn(*args, **kwargs, numerics=numerics) if "numerics" in inspect.signature(fn).parameters \
                    else fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - fall back to the stage functions
            full = {}
    golden = NumpyBackend(numerics)
    for stage in spec.stages:
        given = full.get(stage.name)
        known = (spec.name, stage.name) in _STAGE_CALLS
        if isinstance(given, np.ndarray) and known:
            values[stage.name] = given
            continue
        rec = _Recorder(golden)
        try:
            with np.errstate(all="ignore"):
                value = np.asarray(stage.fn(rec, args, kwargs, values))
        except Exception:  # noqa: BLE001 - a stage the golden cannot compute
            value = None
        _STAGE_CALLS.setdefault((spec.name, stage.name), frozenset(rec.called))
        values[stage.name] = given if isinstance(given, np.ndarray) else value
    return values


def stage_observed(spec, stage) -> bool:
    """Whether a stage is the backend's own result: its function calls the op itself and nothing else."""
    called = _STAGE_CALLS.get((spec.name, stage.name))
    return called is not None and called <= {spec.name}


def _differs(a, b, mask=None) -> int | None:
    if a is None or b is None:
        return None if (a is None) != (b is None) else 0
    m = mismatch_mask(np.asarray(a), np.asarray(b), mask)
    return None if m is None else int(m.sum())


def stage_report(spec, args, kwargs, backend, golden: NumpyBackend | None = None, *, reference=None
                 ) -> tuple[str | None, list[dict]]:
    """Compare the op's observed stages in order; return (first diverging observed stage, per-stage rows).

    The golden's values are ``reference`` (from :func:`golden_stage_values`) or computed under
    ``golden.numerics``. A stage whose function calls other ops of the backend (a fused kernel's sibling
    ops) is not observed: its row says so and it is never the first diverging stage."""
    numerics = golden.numerics if golden is not None else backend.numerics
    ref = reference if reference is not None else golden_stage_values(spec, args, kwargs, numerics)
    rows, first = [], None
    for stage in spec.stages:
        want = ref.get(stage.name)
        if want is None:
            rows.append({"stage": stage.name, "verdict": "skipped", "note": "the golden cannot compute this stage"})
            continue
        if not stage_observed(spec, stage):
            rows.append({"stage": stage.name, "verdict": "not observed",
                         "note": "internal to the backend's kernel (derived from the golden's stages only)"})
            continue
        try:
            with np.errstate(all="ignore"):
                got = np.asarray(stage.fn(backend, args, kwargs, ref))
        except Unsupported as exc:
            rows.append({"stage": stage.name, "verdict": "unavailable", "note": str(exc)})
            continue
        except Exception as exc:  # noqa: BLE001
            rows.append({"stage": stage.name, "verdict": "error", "note": f"{type(exc).__name__}: {exc}"})
            first = first or stage.name
            continue
        cmp = compare(stage.name, stage.kind, want, got, mask=_stage_mask(spec, args, kwargs, stage.name, want))
        differs = cmp.mismatches > 0 or cmp.verdict == FAIL
        rows.append({"stage": stage.name, "verdict": FAIL if differs else PASS, "mismatches": cmp.mismatches,
                     "n": cmp.n, "max_ulp": cmp.max_ulp, "max_code_diff": cmp.max_code_diff, "note": cmp.note})
        if differs and first is None:
            first = stage.name
    return first, rows


def _stage_mask(spec, args, kwargs, name: str, value):
    """The op's mask of output ``name`` when a stage is that output (unwritten elements are not compared)."""
    if spec.mask is None:
        return None
    try:
        m = spec.mask(tuple(args), dict(kwargs)).get(name)
        return None if m is None or np.broadcast_shapes(np.shape(m), np.shape(value)) != np.shape(value) else m
    except Exception:  # noqa: BLE001 - no mask: compare everything
        return None


def _first_changed_stage(spec, declared_values: dict, cause_values: dict) -> str | None:
    """The first stage where the golden under a cause differs from the golden under the declared record."""
    for stage in spec.stages:
        n = _differs(declared_values.get(stage.name), cause_values.get(stage.name))
        if n is None or n > 0:
            return stage.name
    return None


# ------------------------------------------------------------------------------------------------
# evidence

_RATIOS = ((127.0 / 127.5, "the scale divisor is 127.5 (half the int8 range: torchao / compressed-tensors) instead of 127"),
           (7.0 / 7.5, "the scale divisor is 7.5 (half the int4 range) instead of 7"))


def _dt_valued(values: np.ndarray, dt) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(dt).astype(np.float32) == values


def scale_evidence(ref: np.ndarray, got: np.ndarray, *, fp19: bool = False) -> list[str]:
    """What a backend's fp32 scale says about its formula, read against the golden's (module docstring)."""
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape or ref.dtype != np.float32 or got.dtype != np.float32:
        return []
    ok = np.isfinite(ref) & np.isfinite(got) & (ref != 0) & (got != 0)
    if not ok.any():
        return []
    r, g = ref[ok], got[ok]
    if np.array_equal(r.view(np.uint32), g.view(np.uint32)):
        return []
    from w8a8.ulp import ulp_distance

    dist = ulp_distance(r, g)
    out = []
    on_bf16 = bool(_dt_valued(g, _dt.bfloat16).all())
    on_f16 = not on_bf16 and bool(_dt_valued(g, np.float16).all())
    rounder = (lambda v: v.astype(_dt.bfloat16).astype(np.float32)) if on_bf16 else \
        (lambda v: v.astype(np.float16).astype(np.float32)) if on_f16 else (lambda v: v)
    ratio_words = []
    with np.errstate(all="ignore"):
        tol = 0.0 if (on_bf16 or on_f16) else 2.0 ** -20
        plain = (np.abs(rounder(r).astype(np.float64) / g - 1) <= tol).mean()
        for ratio, words in _RATIOS:
            scaled = rounder((r.astype(np.float64) * ratio).astype(np.float32))
            near = (np.abs(scaled.astype(np.float64) / g - 1) <= tol).mean()
            if near >= 0.9 and near > plain:
                ratio_words.append(f"the backend's scale is the golden's x {ratio:.6g} on {near:.0%} of the rows: "
                                   f"{words}")
    informative = not _dt_valued(r, _dt.bfloat16 if on_bf16 else np.float16).all() or ratio_words or plain >= 0.9
    if on_bf16 and informative:
        out.append("every backend scale is bf16-valued (its low 16 bits are zero: on the bf16 grid, one step = 65536 "
                   f"fp32 ULP; up to {int(dist.max())} fp32 ULP from the golden's): the scale is computed or stored "
                   "in bf16")
    elif on_f16 and informative:
        out.append("every backend scale is fp16-valued: the scale is computed or stored in fp16")
    elif fp19 and ((g.view(np.uint32) & 0x1FFF) == 0).all() and not ((r.view(np.uint32) & 0x1FFF) == 0).all():
        out.append("every backend scale is FP19-valued (low 13 mantissa bits zero): an FP19-truncated scale")
    out += ratio_words
    if not out and int(dist.max()) <= 4:
        out.append(f"the scales differ by at most {int(dist.max())} fp32 ULP: consistent with the same formula in "
                   "another order "
                   "of operations (1/(qmax/amax), amax*fp32(1/qmax) or amax/qmax)")
    return out


def evidence_seed(ref: np.ndarray, got: np.ndarray, fields: tuple[str, ...]) -> dict:
    """The Numerics change a backend's fp32 scale points at (its evidence, :func:`scale_evidence`): bf16- or
    fp16-valued scales -> ``scale_dtype="input"``; the golden's scale x 127/127.5 -> ``scale_divisor="half_range"``.
    Only fields the op reads; empty when the scale says nothing."""
    words = " ".join(scale_evidence(ref, got))
    seed = {}
    if "scale_dtype" in fields and ("bf16-valued" in words or "fp16-valued" in words):
        seed["scale_dtype"] = "input"
    if "scale_divisor" in fields and ("divisor is 127.5" in words or "divisor is 7.5" in words):
        seed["scale_divisor"] = "half_range"
    return seed


SMALL_SCALE_ULP = 4
"""The most fp32 ULP a scale moves when only its order of operations changes (1/(qmax/amax), amax*fp32(1/qmax),
amax/qmax) — or when codes change only by tie rounding (0): beyond it, neither explains a scale."""


def scale_ulp(spec, ref: dict, outputs: dict) -> int | None:
    """The largest fp32 ULP distance between the golden's and the backend's scale outputs (None: no scale)."""
    from w8a8.ulp import ulp_distance

    worst_ = None
    for o in spec.outputs:
        r, g = ref.get(o.name), outputs.get(o.name)
        if o.kind != "scale" or r is None or g is None:
            continue
        r, g = np.asarray(r), np.asarray(g)
        if r.shape != g.shape or r.dtype != np.float32 or g.dtype != np.float32 or not r.size:
            continue
        ok = np.isfinite(r) & np.isfinite(g)
        if ok.any():
            d = int(ulp_distance(r[ok], g[ok]).max())
            worst_ = d if worst_ is None else max(worst_, d)
    return worst_


def _heuristic(spec, first_stage: str | None, comparisons: dict, fields: tuple[str, ...], ties: bool | None,
               scale_ulps: int | None = None) -> str:
    if first_stage == "acc":
        return ("the int32 accumulator differs with equal int8 inputs: accumulation precision/order "
                "(a float accumulator loses exactness beyond 2^24) or int32 overflow handling")
    from w8a8.ulp import NAN_DISTANCE

    for c in comparisons.values():
        if c.get("max_ulp") == NAN_DISTANCE:
            return "NaN where the golden has a number (or the reverse): Inf/NaN handling or an overflow"
    for c in comparisons.values():
        if c.get("kind") == "int" and c.get("max_code_diff") == 1:
            if scale_ulps is not None and scale_ulps > SMALL_SCALE_ULP:
                return (f"codes off by one with scales up to {scale_ulps} fp32 ULP from the golden's: more than tie "
                        f"rounding (0 ULP) or a reciprocal-vs-divide order (<= {SMALL_SCALE_ULP} ULP) moves a scale, "
                        "so the scale's inputs or its formula differ")
            if ties is True:
                return "codes off by one at .5 ties only: tie rounding (no Numerics record reproduces every output)"
            if ties is False:
                return ("codes off by one away from .5 ties: the scale or the code arithmetic differs (not tie "
                        "rounding)")
            if scale_ulps is None or scale_ulps <= SMALL_SCALE_ULP:
                return "codes off by one: rounding at or near .5 ties, or a reciprocal-vs-divide difference"
            return "codes off by one: the code arithmetic differs"
    for c in comparisons.values():
        rel = c.get("max_rel")
        if isinstance(rel, float) and rel > 0:
            if "fp19_scale" in fields and 2**-11 <= rel <= 2**-9.5:
                return ("relative error about 2^-10: consistent with an FP19-truncated scale (no FP19 record "
                        "reproduces the backend)")
            if 2**-10 <= rel <= 2**-7:
                return ("relative error about one bf16 step (2^-9 .. 2^-8): consistent with a scale or intermediate "
                        "rounded to bf16 (no record reproduces the backend)")
    return ("no Numerics record, argument, optional input or kernel variant reproduces the backend" +
            ("; compare the stages above" if spec.stages else ""))


def _ties_only(spec, args, kwargs, outputs: dict, ref: dict, masks: dict, numerics) -> bool | None:
    """True when every differing int code sits at a .5 tie of the golden's pre-rounding value (False when
    some do not; None when the op gives no pre-rounding values)."""
    if spec.pre_round is None:
        return None
    try:
        pre = spec.pre_round(args, kwargs, numerics)
    except Exception:  # noqa: BLE001
        return None
    seen = False
    for name, got in outputs.items():
        p, r = pre.get(name), ref.get(name)
        if p is None or r is None or got is None or np.asarray(got).dtype.kind not in "iu":
            continue
        m = mismatch_mask(r, np.asarray(got), masks.get(name))
        if m is None or np.asarray(p).shape != m.shape:
            continue
        if m.any():
            seen = True
            pr = np.asarray(p, dtype=np.float64)[m]
            if not (np.abs(np.abs(pr - np.floor(pr)) - 0.5) <= 1e-3).all():
                return False
    return True if seen else None


# ------------------------------------------------------------------------------------------------
# attribute

def attribute(spec, args, kwargs, backend, backend_outputs: dict, comparisons: dict, *,
              masks: dict | None = None) -> dict:
    """Attribute a failing case (see module docstring). ``backend_outputs`` are the backend's
    named outputs, ``comparisons`` the per-output comparison dicts."""
    from . import detectors

    declared = backend.numerics
    masks = masks or {}
    fields = applicable_fields(spec)
    declared_stages = golden_stage_values(spec, args, kwargs, declared)
    observed_first, rows = stage_report(spec, args, kwargs, backend, reference=declared_stages)
    unobserved = [r["stage"] for r in rows if r["verdict"] == "not observed"]
    golden = NumpyBackend(declared)
    try:
        with np.errstate(all="ignore"):
            ref = spec.as_outputs(golden.call(spec.name, *args, numerics=declared, **kwargs))
    except Exception:  # noqa: BLE001
        ref = {}
    evidence, seed = [], {}
    for o in spec.outputs:
        if o.kind == "scale" and ref.get(o.name) is not None and backend_outputs.get(o.name) is not None:
            evidence += scale_evidence(ref[o.name], np.asarray(backend_outputs[o.name]),
                                       fp19="fp19_scale" in fields)
            seed.update(evidence_seed(ref[o.name], np.asarray(backend_outputs[o.name]), fields))
    base = {"stages": rows, "applicable_fields": list(fields), "scale_evidence": evidence,
            "unobserved_stages": unobserved}

    bug = detectors.explain(spec, args, kwargs, declared, ref, backend_outputs, masks, declared_stages)
    if bug is not None and bug["complete"]:
        return {**base, "first_stage": bug.get("stage") or observed_first, "stage_source": "detector",
                "reproduced": False, "kind": "library bug", "numerics_change": None, "causes": bug["causes"],
                "cause": "; ".join(bug["causes"]), "detectors": bug["names"], "candidates_tried": 0}

    s = _Search(spec, args, kwargs, backend_outputs, declared, masks)
    found, closest = _search(s, fields, seed)
    if found:
        cause_kwargs = {**kwargs, **found[0].change.get("args", {})}
        cause_stages = golden_stage_values(spec, args, cause_kwargs, found[0].numerics) if spec.stages else {}
        first = _first_changed_stage(spec, declared_stages, cause_stages) if spec.stages else None
        texts = [c.text for c in found]
        cause = texts[0] if len(texts) == 1 else "one of (equally consistent): " + " | ".join(texts)
        return {**base, "first_stage": first or observed_first,
                "stage_source": "the golden's stages under the reproducing record" if first else "observed",
                "reproduced": True, "kind": found[0].kind, "numerics_change": found[0].change,
                "numerics_changes": [c.change for c in found], "causes": texts, "cause": cause,
                "also_consistent": texts[1:], "candidates_tried": s.tried, "search_cut_short": s.cut_short}
    ties = _ties_only(spec, args, kwargs, backend_outputs, ref, masks, declared)
    if bug is not None:
        explained = sum((bug.get("explained") or {}).values())
        cause = "; ".join(bug["causes"]) + (f" (explains {explained} of the {s.baseline} differing elements)"
                                            if s.baseline else " (explains part of the mismatches)")
    elif evidence:
        cause = "; ".join(evidence) + ("; the codes differ as well (not checked against that scale)" if any(
            o.kind == "int" and comparisons.get(o.name, {}).get("verdict") == FAIL for o in spec.outputs) else "")
    else:
        cause = _heuristic(spec, observed_first, comparisons, fields, ties, scale_ulp(spec, ref, backend_outputs))
    ruled_out = _ruled_out(spec, fields, kwargs, s)
    cause = f"{cause}. {ruled_out}"
    if closest is not None:
        cause += (f"; closest: {closest.text}, which leaves {closest.mismatches} of the {s.baseline} differing "
                  "elements")
    else:
        cause += "; no candidate brings the backend closer than the declared record"
    out = {**base, "first_stage": observed_first, "stage_source": "observed", "reproduced": False,
           "kind": "heuristic", "numerics_change": None, "cause": cause, "causes": [cause],
           "candidates_tried": s.tried, "search_cut_short": s.cut_short, "ruled_out": ruled_out,
           "mismatches": s.baseline}
    if closest is not None:
        out["closest"] = {"change": closest.change, "cause": closest.text, "mismatches_left": closest.mismatches,
                          "mismatches": s.baseline}
    return out


def _ruled_out(spec, fields: tuple[str, ...], kwargs: dict, s: _Search) -> str:
    """Words for what the search tried and found not to reproduce the backend."""
    parts = []
    if fields:
        parts.append(f"the Numerics fields {', '.join(fields)}")
    opt = optional_inputs(spec, kwargs)
    if opt:
        parts.append(f"ignoring the optional input{'s' if len(opt) > 1 else ''} {', '.join(opt)}")
    if ARGUMENT_CHOICES.get(spec.name):
        parts.append(f"the arguments {', '.join(ARGUMENT_CHOICES[spec.name])}")
    parts.append("the other kernel variants")
    cut = " (search cut short by its time budget)" if s.cut_short else ""
    return f"Ruled out in {s.tried} golden re-runs{cut}: {'; '.join(parts)}, each alone, the fields also in pairs"


def attribute_error(spec, args, kwargs, backend, exc_text: str) -> dict | None:
    """The cause of a backend error (it raised where the golden returned) when a detector knows it."""
    from . import detectors

    return detectors.explain_error(spec, args, kwargs, backend, exc_text)
