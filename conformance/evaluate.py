"""Run one case on one backend against the golden and judge it: the unit of work of the runner.

A case is its parameters: a dict drawn from the op's strategies, ``{"named": "<op>/<name>"}`` (a
named case of the declaration, with its documented values) or ``{"error": "<op>/<name>"}`` (a
declared bad call). The golden runs with the backend's *declared* numerics, so a backend is held to
what it says it implements; deviations of that declaration from the Ascend defaults are reported by
``w8a8 backends``, not counted as failures here.

Statuses of a result:

* ``pass`` — every output bitwise identical (and, for a named case, equal to the documented
  values); for an error case: the golden and the backend both raise the declared exception with a
  message matching the declared pattern;
* ``refused`` — both sides refused a drawn input with the same error type (NaN/Inf inputs, the
  error contract): agreement, but counted apart from ``pass`` so that nothing passes vacuously;
* ``device-unspecified`` — the backend accepted an input (drawn, named or a declared bad call) that the
  golden refuses only by its NaN policy (it computes it under ``nan_policy="ieee"``: NaN/Inf, ...), where
  the device behaviour is not specified: counted apart, not a failure (under ``strict``: a failure);
* ``tolerated`` — within the tolerance, not identical;
* ``mistrusted`` — identical, but the golden output is degenerate (see :mod:`.compare`);
* ``fail`` — an output differs beyond tolerance; the backend accepted an input the golden refuses
  (or refused it differently); an error case the backend does not reproduce; or a declaration the
  golden contradicts (a named case's documented value, a bad call the golden accepts);
* ``error`` — the backend raised where the golden returned;
* ``unsupported`` — the backend declined the call (:class:`backends.Unsupported`): a skip;
* ``crashed`` / ``timeout`` — set by the runner when the worker process died or overran;
* ``leak`` — set by the runner when the worker kept more memory after the case than its budget (the
  judgement is kept in the record's ``judged``).

``strict=True`` (a backend's own test suite, e.g. torch-cpu's) asks more: every output bitwise
including its bytes (NaN payloads, signed zeros) and the rows a mask leaves unspecified, a refusal
with the golden's exact message, and no ``unsupported``.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from backends.base import Unsupported
from backends.numpy_backend import NumpyBackend
from w8a8.int4 import unpack_int4
from w8a8 import variants
from w8a8.numerics import ASCEND

from .attribution import attribute, attribute_error
from .compare import FAIL, MISTRUSTED, PASS, TOLERATED, Comparison, Tolerance, compare, worst

UNSPECIFIED = "device-unspecified"
FINAL_STATUSES = ("pass", "tolerated", "refused", "mistrusted", UNSPECIFIED, "fail", "error", "unsupported", "crashed",
                  "timeout", "leak")
BAD_STATUSES = ("fail", "error", "crashed", "timeout", "leak")
REFUSALS = (ValueError, TypeError, OverflowError)
_RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def case_id(op: str, params: dict) -> str:
    """A stable id of a case: op + a hash of its canonical JSON parameters."""
    blob = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return f"{op}-{hashlib.sha1(blob.encode()).hexdigest()[:12]}"


def repro_command(backend: str, op: str, params: dict) -> str:
    blob = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return f"w8a8 conformance --backend {backend} --op {op} --case '{blob}'"


# ------------------------------------------------------------------------------------------------
# what a case is

@dataclass(frozen=True)
class CaseSpec:
    """A case resolved from its parameters: its kind, its label, how to build its inputs, and what the
    declaration says must come out (documented values, or the declared error)."""

    kind: str                                  # "drawn" | "named" | "error"
    name: str | None
    build: Callable[[], tuple[tuple, dict]]
    expected: dict = field(default_factory=dict)
    bad: object = None                         # the declared BadCall of an error case
    numerics: object = None                    # the record the expected values hold under (None: any)


def resolve_case(spec, params: dict, *, kind: str = "drawn", name: str | None = None,
                 expected: dict | None = None) -> CaseSpec:
    """The case behind ``params`` (see the module docstring)."""
    from . import registry

    if "named" in params:
        named = registry.named_case(params["named"])
        return CaseSpec("named", named.key, named.build, dict(named.expected), numerics=named.numerics or ASCEND)
    if "error" in params:
        bad = registry.bad_call(params["error"])
        return CaseSpec("error", bad.key, bad.build, bad=bad)
    return CaseSpec(kind, name, lambda: spec.build(params), dict(expected or {}))


def build_inputs(spec, params: dict) -> tuple[tuple, dict]:
    """The concrete inputs of a case: a named case's or bad call's own builder, or the op's ``build``."""
    return resolve_case(spec, params).build()


# ------------------------------------------------------------------------------------------------
# running both sides

@dataclass
class Outcome:
    """What one side did with the inputs: its named outputs, or the exception it raised."""

    outputs: dict | None = None
    error: BaseException | None = None

    @property
    def refused(self) -> bool:
        return self.error is not None


def _copy(value):
    """A fresh copy of every array (same memory layout: a transposed view stays transposed)."""
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True, order="K")
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _run(spec, backend, args, kwargs, *, catch, **extra) -> Outcome:
    try:
        with np.errstate(all="ignore"):  # values are judged, not the warnings on the way to them
            return Outcome(outputs=spec.as_outputs(backend.call(spec.name, *_copy(args), **_copy(kwargs), **extra)))
    except Unsupported:
        raise
    except catch as exc:
        return Outcome(error=exc)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------------------------
# judging

@dataclass
class Verdict:
    """The judgement of a case, before it becomes a record (:func:`record`)."""

    status: str
    note: str = ""
    comparisons: dict[str, Comparison] = field(default_factory=dict)
    expected_mismatch: list[str] = field(default_factory=list)
    traceback: str | None = None
    attribution: dict | None = None


def _unpacked(value: np.ndarray, like: np.ndarray | None) -> np.ndarray:
    """int4 codes packed 8 per int32 are compared as codes when the pre-rounding values are per code."""
    if like is not None and value.dtype == np.int32 and like.shape[-1:] == (value.shape[-1] * 8,):
        return unpack_int4(value)
    return value


def tolerance_for(tolerance, backend: str, op: str, output: str, dtype) -> Tolerance:
    """A :class:`Tolerance` from a single tolerance or a :class:`~conformance.tolerances.ToleranceTable`."""
    if tolerance is None:
        return Tolerance()
    if isinstance(tolerance, Tolerance):
        return tolerance
    from w8a8 import dtypes as _dt

    return tolerance.lookup(backend, op, output, _dt.name(dtype))


def bits_differ(want: np.ndarray, got: np.ndarray, mask: np.ndarray | None = None) -> str | None:
    """None when ``got`` has ``want``'s dtype, shape and bytes (where ``mask`` is True), else why not."""
    want, got = np.asarray(want), np.asarray(got)
    if want.dtype != got.dtype or want.shape != got.shape:
        return f"{got.dtype}{tuple(got.shape)} instead of {want.dtype}{tuple(want.shape)}"
    raw = _RAW.get(want.dtype.itemsize, np.dtype(f"V{want.dtype.itemsize}"))
    w, g = np.array(want, order="C").view(raw), np.array(got, order="C").view(raw)
    differs = w != g
    if mask is not None:
        differs &= np.broadcast_to(np.asarray(mask, dtype=bool), differs.shape)
    if not differs.any():
        return None
    first = tuple(int(i) for i in np.argwhere(differs)[0])
    return (f"{int(differs.sum())} of {differs.size} elements differ in their bits; first at {first}: "
            f"{got[first]!r} instead of {want[first]!r}")


def _compare_outputs(spec, args, kwargs, ref: dict, got: dict, backend, tolerance, strict: bool
                     ) -> dict[str, Comparison]:
    """One :class:`Comparison` per output of the op."""
    tols = {o.name: (Tolerance() if strict else tolerance_for(tolerance, backend.name, spec.name, o.name,
                                                               ref[o.name].dtype))
            for o in spec.outputs if ref[o.name] is not None}
    wants_ties = any(t.tie_off_by_one for t in tols.values())
    pre = spec.pre_round(args, kwargs, backend.numerics) if spec.pre_round and wants_ties else {}
    masks = spec.mask(args, kwargs) if spec.mask and not strict else {}
    comparisons = {}
    for out in spec.outputs:
        r, g = ref[out.name], got[out.name]
        if r is None or g is None:  # an optional output (e.g. no zero point)
            same = r is None and g is None
            comparisons[out.name] = Comparison(out.name, out.kind, PASS if same else FAIL,
                                               note="absent on both sides" if same else "present on one side only")
            continue
        p = pre.get(out.name)
        with np.errstate(all="ignore"):  # metrics of complex / non-finite outputs: NumPy's cast warnings
            comp = compare(out.name, out.kind, _unpacked(r, p), _unpacked(g, p), tolerance=tols[out.name],
                           pre_round=p, mask=masks.get(out.name), mistrust_degenerate=spec.mistrust_degenerate)
        if strict and comp.verdict != FAIL:
            why = bits_differ(r, g)
            if why:  # equal as numbers, not as bytes: NaN payloads, signed zeros
                comp.verdict, comp.note = FAIL, f"bytes differ: {why}"
        comparisons[out.name] = comp
    return comparisons


def _expected_mismatches(expected: dict, ref: dict, got: dict, masks: dict) -> list[str]:
    """Where the golden or the backend differs from a named case's documented values (the backend only
    where the output is specified)."""
    notes = []
    for name, value in expected.items():
        for who, outputs, mask in (("golden", ref, None), ("backend", got, masks.get(name))):
            why = bits_differ(np.asarray(value), outputs[name], mask) if outputs[name] is not None else "absent"
            if why:
                notes.append(f"{who} differs from the documented {name}: {why}")
    return notes


def _documented_matches(expected: dict, ref: dict, got: dict, masks: dict) -> list[str]:
    """The outputs whose documented values both the golden and the backend match bit for bit."""
    return [name for name, value in expected.items()
            if ref.get(name) is not None and got.get(name) is not None
            and not bits_differ(np.asarray(value), ref[name], None)
            and not bits_differ(np.asarray(value), got[name], masks.get(name))]


def _judge_error(case: CaseSpec, ref: Outcome, got: Outcome, strict: bool,
                 unspecified: Callable[[], bool] = lambda: False) -> Verdict:
    """An error case: the declaration, then the backend, must raise the declared error — unless the
    golden raises it only by its NaN policy and the backend computes (``device-unspecified``)."""
    bad = case.bad
    wrong = bad.judge(ref.error)
    if wrong:
        return Verdict(FAIL, f"the declaration is wrong: the golden {wrong}")
    if got.error is None and not strict and unspecified():
        return Verdict(UNSPECIFIED, f"backend accepted a bad call the golden refuses ({_describe(ref.error)}); the "
                                    "device behaviour on it is not specified, so this is not a failure")
    problem = bad.judge(got.error)
    if problem is None and strict and str(got.error) != str(ref.error):
        problem = f"raised {_describe(got.error)}; the golden's message is {str(ref.error)!r}"
    if problem:
        return Verdict(FAIL, f"backend {problem}")
    return Verdict(PASS, f"both raise {_describe(ref.error)}")


def policy_only_refusal(spec, args, kwargs, numerics) -> bool:
    """Whether the golden refuses these inputs only by its NaN policy: under ``numerics`` with
    ``nan_policy="ieee"`` it computes them. Such an input (NaN/Inf, ...) is one whose device behaviour
    is not specified (:data:`UNSPECIFIED`)."""
    if getattr(numerics, "nan_policy", None) != "raise":
        return False
    ieee = numerics.replace(nan_policy="ieee")
    return not _run(spec, NumpyBackend(ieee), args, kwargs, catch=Exception, numerics=ieee).refused


def _judge_refusal(ref: Outcome, got: Outcome, strict: bool, unspecified: Callable[[], bool] = lambda: False
                   ) -> Verdict:
    """The golden refused a drawn or named input: the backend must refuse it the same way — unless the
    refusal is the golden's NaN policy only (``unspecified()``): accepting it is then ``device-unspecified``."""
    if got.error is None:
        if not strict and unspecified():
            return Verdict(UNSPECIFIED, f"backend accepted an input the golden refuses ({_describe(ref.error)}); "
                                        "the device behaviour on it is not specified, so this is not a failure")
        return Verdict(FAIL, f"backend accepted an input the golden refuses ({_describe(ref.error)})")
    same = isinstance(got.error, type(ref.error)) and (not strict or str(got.error) == str(ref.error))
    if same:
        return Verdict("refused", f"both refuse the input: {_describe(ref.error)}")
    return Verdict(FAIL, f"golden raises {_describe(ref.error)}; backend raises {_describe(got.error)}")


def judge(spec, case: CaseSpec, args, kwargs, ref: Outcome, got: Outcome, backend, *, tolerance=None,
          strict: bool = False) -> Verdict:
    """The verdict on one case from what the golden (``ref``) and the backend (``got``) did."""
    unspecified = lambda: policy_only_refusal(spec, args, kwargs, backend.numerics)  # noqa: E731 - asked lazily
    if case.kind == "error":
        return _judge_error(case, ref, got, strict, unspecified)
    if ref.refused:
        return _judge_refusal(ref, got, strict, unspecified)
    if got.refused:
        return Verdict("error", _describe(got.error),
                       traceback="".join(traceback.format_exception(got.error))[-4000:])
    comparisons = _compare_outputs(spec, args, kwargs, ref.outputs, got.outputs, backend, tolerance, strict)
    masks = spec.mask(args, kwargs) if spec.mask and not strict and case.expected else {}
    mismatches = _expected_mismatches(case.expected, ref.outputs, got.outputs, masks)
    note = ""
    other_record = case.numerics is not None and backend.numerics != case.numerics
    if other_record and any(m.startswith("golden ") for m in mismatches):
        # the golden under the backend's record differs from values documented for another record: that
        # record, not the backend, moved them; the backend is compared with the golden under it only
        mismatches, note = [], (f"the documented values hold under {case.numerics.name}, not under "
                                f"{backend.numerics.name} ({backend.name}'s): compared with the golden under it only")
    if not note:
        # a degenerate output (all zeros...) equal to a value the declaration documents (hand-derived, not
        # the golden's) is checked against an independent source: trusted
        for name in _documented_matches(case.expected, ref.outputs, got.outputs, masks):
            comp = comparisons.get(name)
            if comp is not None and comp.verdict == MISTRUSTED:
                comp.verdict = PASS
                comp.note += " — equal to the case's documented value: trusted"
    verdicts = [c.verdict for c in comparisons.values()] + [FAIL] * bool(mismatches)
    status = worst(verdicts)
    # identical everywhere but some output degenerate: mistrusted only if *every* output is degenerate
    if status == MISTRUSTED and any(v == PASS for v in verdicts):
        status = PASS
    return Verdict(status, note, comparisons=comparisons, expected_mismatch=mismatches)


def run_both(spec, case: CaseSpec, args, kwargs, backend, *, tolerance=None, strict: bool = False
             ) -> tuple[Verdict, Outcome | None]:
    """Run the golden (under the backend's numerics) and the backend on the case's inputs and judge."""
    catch = Exception if case.kind == "error" else REFUSALS  # a bad call must raise what it declares, whatever that is
    ref = _run(spec, NumpyBackend(backend.numerics), args, kwargs, catch=catch, numerics=backend.numerics)
    try:
        got = _run(spec, backend, args, kwargs, catch=Exception)
    except Unsupported as exc:
        if strict:
            return Verdict(FAIL, f"unsupported under strict: {exc}"), None
        return Verdict("unsupported", str(exc)), None
    return judge(spec, case, args, kwargs, ref, got, backend, tolerance=tolerance, strict=strict), got


def record(spec, params: dict, backend, case: CaseSpec, verdict: Verdict, duration_s: float,
           variant: str | None = None) -> dict:
    """The result record of a case (what the results file, the reports and the runner read)."""
    rec = {"op": spec.name, "backend": backend.name, "case_id": case_id(spec.name, params), "params": params,
           "kind": case.kind, "name": case.name, "numerics": backend.numerics.name,
           "repro": repro_command(getattr(backend, "spec", backend.name), spec.name, params), "status": verdict.status}
    if variant is not None:
        rec["variant"] = variant
    if verdict.note:
        rec["note"] = verdict.note
    if verdict.comparisons:
        rec["outputs"] = {n: c.as_dict() for n, c in verdict.comparisons.items()}
    if verdict.expected_mismatch:
        rec["expected_mismatch"] = verdict.expected_mismatch
    if verdict.traceback:
        rec["traceback"] = verdict.traceback
    if verdict.attribution is not None:
        rec["attribution"] = verdict.attribution
    rec["duration_s"] = duration_s
    return rec


def _attribute(spec, args, kwargs, backend, got: Outcome, verdict: Verdict) -> dict:
    masks = spec.mask(args, kwargs) if spec.mask else {}
    comparisons = {n: c.as_dict() for n, c in verdict.comparisons.items()}
    try:
        return attribute(spec, args, kwargs, backend, got.outputs, comparisons, masks=masks)
    except Exception as exc:  # noqa: BLE001 - attribution is best effort; the failure stands
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_case(spec, params: dict, backend, *, tolerance=None, attribute_failures: bool = True,
             kind: str = "drawn", name: str | None = None, expected: dict | None = None,
             strict: bool = False) -> dict:
    """Build the case's inputs, run golden and backend, judge every output; return its result record.

    ``tolerance``: a :class:`Tolerance` for every output, a ``ToleranceTable`` (looked up per
    backend, op, output and dtype), or None (bitwise). ``expected`` maps output names to documented
    values (named cases bring their own); the golden and the backend are both checked against them.
    A failing case whose outputs were compared is attributed (``attribute_failures``).
    ``strict``: see the module docstring.
    """
    t0 = time.perf_counter()
    case = resolve_case(spec, params, kind=kind, name=name, expected=expected)
    args, kwargs = case.build()
    variant = variants.label(spec.name, args, kwargs, backend.numerics)
    verdict, got = run_both(spec, case, args, kwargs, backend, tolerance=tolerance, strict=strict)
    if verdict.status == FAIL and attribute_failures and verdict.comparisons:
        verdict.attribution = _attribute(spec, args, kwargs, backend, got, verdict)
    elif verdict.status == "error" and attribute_failures and got is not None and got.error is not None:
        try:
            verdict.attribution = attribute_error(spec, args, kwargs, backend, _describe(got.error))
        except Exception:  # noqa: BLE001 - best effort: the error stands
            verdict.attribution = None
    return record(spec, params, backend, case, verdict, time.perf_counter() - t0, variant)


__all__ = ["run_case", "run_both", "judge", "record", "resolve_case", "case_id", "repro_command",
           "bits_differ", "FINAL_STATUSES", "BAD_STATUSES", "UNSPECIFIED", "policy_only_refusal", "PASS", "FAIL",
           "TOLERATED", "MISTRUSTED"]
