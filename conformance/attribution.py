"""Mismatch attribution: *where* a backend diverged from the golden, and *why*.

1. **Stages.** The op's stages (registry) are recomputed on the backend, each fed the golden's
   upstream values, and compared in pipeline order: the first stage that differs is the one that
   is wrong — e.g. for ``w8a8_dynamic_linear``: ``x_scale`` -> ``x_q`` -> ``acc`` -> ``y``.
2. **Cause.** The golden is re-run under alternative :class:`w8a8.Numerics` records — every single
   field the op depends on changed to each of its other values, then pairs of fields — until one
   reproduces the backend's outputs *bit for bit*. That record's difference from the declared one
   is the cause, named in words (tie rounding, reciprocal vs divide, FP19 scale truncation, ...).
3. When no record reproduces the backend, the report says so and falls back to what the stages
   and the error pattern suggest (an int32 accumulator that differs points at accumulation
   order/precision or overflow; relative errors of 2^-10 or 2^-9 at FP19 / bf16 scale rounding).
"""

from __future__ import annotations

import itertools

import numpy as np

from backends.base import Unsupported
from backends.numpy_backend import NumpyBackend
from w8a8.numerics import Numerics

from .compare import FAIL, PASS, compare

CAUSES: dict[str, str] = {
    "round_mode": "tie rounding",
    "quant_codes": "reciprocal vs divide (codes computed as x/scale instead of x*(qmax/amax))",
    "scale_out": "scale formula (reciprocal vs divide)",
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
    "scale_precision": "bf16 scale (an fp32 scale rounded to bf16)",
}
MAX_CANDIDATES = 80


def describe(changes: dict) -> str:
    """Words for a set of Numerics changes, e.g. ``{"round_mode": "half_away"}``."""
    if set(changes) == {"quant_codes", "scale_out"} and changes.get("quant_codes") == "div_scale":
        return f"reciprocal vs divide: scale = amax/qmax ({changes['scale_out']}) and codes = x/scale"
    parts = []
    for field, value in changes.items():
        parts.append(f"{CAUSES.get(field, field)} [{field}={value!r}]")
    return "; ".join(parts)


def candidates(declared: Numerics, fields: tuple[str, ...]) -> list[dict]:
    """Numerics changes to try, single fields first, then pairs (at most MAX_CANDIDATES)."""
    choices = Numerics.choices()
    singles = []
    for f in fields:
        if f not in choices:
            continue
        for v in choices[f]:
            if v != getattr(declared, f):
                singles.append({f: v})
    pairs = []
    for a, b in itertools.combinations(singles, 2):
        if set(a) & set(b):
            continue
        pairs.append({**a, **b})
    return (singles + pairs)[:MAX_CANDIDATES]


def _outputs_equal(spec, golden_result, backend_outputs: dict, masks: dict) -> bool:
    try:
        g = spec.as_outputs(golden_result)
    except ValueError:
        return False
    for name, value in backend_outputs.items():
        ref = g.get(name)
        if ref is None or value is None:
            if (ref is None) != (value is None):
                return False
            continue
        if ref.shape != value.shape or ref.dtype != value.dtype:
            return False
        cmp = compare(name, "int" if ref.dtype.kind in "iu" else "float", ref, value, mask=masks.get(name))
        if cmp.mismatches:
            return False
    return True


def stage_report(spec, args, kwargs, backend, golden: NumpyBackend) -> tuple[str | None, list[dict]]:
    """Compare the op's stages in order; return (first diverging stage, per-stage rows)."""
    rows, upstream, first = [], {}, None
    for stage in spec.stages:
        try:
            ref = np.asarray(stage.fn(golden, args, kwargs, upstream))
        except Exception as exc:  # noqa: BLE001 - a stage the golden cannot compute is skipped
            rows.append({"stage": stage.name, "verdict": "skipped", "note": f"golden: {type(exc).__name__}: {exc}"})
            continue
        upstream[stage.name] = ref
        try:
            got = np.asarray(stage.fn(backend, args, kwargs, upstream))
        except Unsupported as exc:
            rows.append({"stage": stage.name, "verdict": "unavailable", "note": str(exc)})
            continue
        except Exception as exc:  # noqa: BLE001
            rows.append({"stage": stage.name, "verdict": "error", "note": f"{type(exc).__name__}: {exc}"})
            first = first or stage.name
            continue
        cmp = compare(stage.name, stage.kind, ref, got)
        differs = cmp.mismatches > 0 or cmp.verdict == FAIL
        rows.append({"stage": stage.name, "verdict": FAIL if differs else PASS, "mismatches": cmp.mismatches,
                     "n": cmp.n, "max_ulp": cmp.max_ulp, "max_code_diff": cmp.max_code_diff, "note": cmp.note})
        if differs and first is None:
            first = stage.name
    return first, rows


def _heuristic(first_stage: str | None, comparisons: dict) -> str:
    if first_stage == "acc":
        return ("the int32 accumulator differs with equal int8 inputs: accumulation precision/order "
                "(a float accumulator loses exactness beyond 2^24) or int32 overflow handling")
    for c in comparisons.values():
        if c.get("kind") == "int" and c.get("max_code_diff") == 1:
            return "codes off by one: rounding at or near .5 ties, or a reciprocal-vs-divide difference"
        rel = c.get("max_rel")
        if isinstance(rel, float) and rel > 0:
            if 2**-11 <= rel <= 2**-9.5:
                return "relative error about 2^-10: an FP19-truncated scale"
            if 2**-10 <= rel <= 2**-8:
                return "relative error about 2^-9: a scale rounded to bf16"
    return "no Numerics variant reproduces the backend; compare the stages above"


def reproduce(spec, args, kwargs, outputs: dict, declared: Numerics, *, masks: dict | None = None
              ) -> tuple[list[dict], int]:
    """Numerics changes (from ``declared``) under which the golden reproduces ``outputs`` bit for
    bit, most specific first; and how many candidates were tried."""
    golden = NumpyBackend(declared)
    tried, found = 0, []
    for change in candidates(declared, spec.numerics_fields):
        tried += 1
        try:
            variant = declared.replace(**change)
        except ValueError:
            continue
        try:
            result = golden.call(spec.name, *args, numerics=variant, **kwargs)
        except Exception:  # noqa: BLE001 - a variant that raises does not reproduce
            continue
        if _outputs_equal(spec, result, outputs, masks or {}) and \
                not any(set(f.items()) <= set(change.items()) for f in found):
            found.append(change)
    return found, tried


def attribute(spec, args, kwargs, backend, backend_outputs: dict, comparisons: dict, *,
              masks: dict | None = None) -> dict:
    """Attribute a failing case (see module docstring). ``backend_outputs`` are the backend's
    named outputs, ``comparisons`` the per-output comparison dicts."""
    declared = backend.numerics
    first, rows = stage_report(spec, args, kwargs, backend, NumpyBackend(declared))
    found, tried = reproduce(spec, args, kwargs, backend_outputs, declared, masks=masks)
    if found:
        return {"first_stage": first, "stages": rows, "reproduced": True, "numerics_change": found[0],
                "cause": describe(found[0]), "also_consistent": [describe(c) for c in found[1:6]],
                "candidates_tried": tried}
    return {"first_stage": first, "stages": rows, "reproduced": False, "numerics_change": None,
            "cause": _heuristic(first, comparisons), "candidates_tried": tried}
