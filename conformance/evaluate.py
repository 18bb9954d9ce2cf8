"""Run one case on one backend against the golden and judge it: the unit of work of the runner.

The golden runs with the backend's *declared* numerics, so a backend is held to what it says it
implements; deviations of that declaration from the Ascend defaults are reported by
``w8a8 backends``, not counted as failures here.

Statuses of a result:

* ``pass`` — every output bitwise identical;
* ``refused`` — both sides refused the input with the same error type (NaN/Inf inputs, the
  error contract): agreement, but counted apart from ``pass`` so that nothing passes vacuously;
* ``tolerated`` — within the tolerance, not identical;
* ``mistrusted`` — identical, but the golden output is degenerate (see :mod:`.compare`);
* ``fail`` — an output differs beyond tolerance, or the backend accepted an input the golden
  refuses (or refused one the golden accepts with the same error type);
* ``error`` — the backend raised where the golden returned;
* ``unsupported`` — the backend declined the call (:class:`backends.Unsupported`): a skip;
* ``crashed`` / ``timeout`` — set by the runner when the worker process died or overran.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback

import numpy as np

from backends.base import Unsupported
from backends.numpy_backend import NumpyBackend
from w8a8.int4 import unpack_int4

from . import corpus
from .attribution import attribute
from .compare import FAIL, MISTRUSTED, PASS, TOLERATED, Tolerance, compare, worst

FINAL_STATUSES = ("pass", "tolerated", "refused", "mistrusted", "fail", "error", "unsupported", "crashed", "timeout")
BAD_STATUSES = ("fail", "error", "crashed", "timeout")


def case_id(op: str, params: dict) -> str:
    """A stable id of a case: op + a hash of its canonical JSON parameters."""
    blob = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return f"{op}-{hashlib.sha1(blob.encode()).hexdigest()[:12]}"


def repro_command(backend: str, op: str, params: dict) -> str:
    blob = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return f"w8a8 conformance --backend {backend} --op {op} --case '{blob}'"


def build_inputs(spec, params: dict) -> tuple[tuple, dict]:
    """The concrete inputs of a case: a corpus case's own builder, or the op's ``build``."""
    if "corpus" in params:
        return corpus.get(params["corpus"]).build()
    return spec.build(params)


def _copy(args, kwargs):
    def c(v):
        if isinstance(v, np.ndarray):
            return v.copy()
        if isinstance(v, tuple):
            return tuple(c(x) for x in v)
        if isinstance(v, list):
            return [c(x) for x in v]
        return v
    return c(args), {k: c(v) for k, v in kwargs.items()}


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


def run_case(spec, params: dict, backend, *, tolerance=None, attribute_failures: bool = True,
             kind: str = "drawn", name: str | None = None, expected: dict | None = None) -> dict:
    """Build the case's inputs, run golden and backend, compare every output; return a result dict.

    ``tolerance``: a :class:`Tolerance` for every output, a ``ToleranceTable`` (looked up per
    backend, op, output and dtype), or None (bitwise). ``expected`` (named corpus cases) maps output
    names to the documented values; the golden and the backend are both checked against them.
    """
    t0 = time.perf_counter()
    if "corpus" in params:
        named = corpus.get(params["corpus"])
        kind, name, expected = "corpus", named.key, named.expected
    record = {"op": spec.name, "backend": backend.name, "case_id": case_id(spec.name, params), "params": params,
              "kind": kind, "name": name, "numerics": backend.numerics.name,
              "repro": repro_command(getattr(backend, "spec", backend.name), spec.name, params)}
    args, kwargs = build_inputs(spec, params)
    golden = NumpyBackend(backend.numerics)
    gargs, gkw = _copy(args, kwargs)
    ref_exc = None
    try:
        ref = spec.as_outputs(golden.call(spec.name, *gargs, numerics=backend.numerics, **gkw))
    except (ValueError, TypeError, OverflowError) as exc:
        ref_exc = exc
    bargs, bkw = _copy(args, kwargs)
    try:
        got = spec.as_outputs(backend.call(spec.name, *bargs, **bkw))
        act_exc = None
    except Unsupported as exc:
        record.update(status="unsupported", note=str(exc), duration_s=time.perf_counter() - t0)
        return record
    except Exception as exc:  # noqa: BLE001 - every backend failure is a result, not a crash of the runner
        act_exc = exc
        got = None

    if ref_exc is not None:
        if act_exc is not None and isinstance(act_exc, type(ref_exc)):
            record.update(status="refused", note=f"both refuse the input: {type(ref_exc).__name__}: {ref_exc}")
        elif act_exc is not None:
            record.update(status="fail", note=f"golden raises {type(ref_exc).__name__}: {ref_exc}; backend raises "
                                             f"{type(act_exc).__name__}: {act_exc}")
        else:
            record.update(status="fail", note=f"backend accepted an input the golden refuses "
                                             f"({type(ref_exc).__name__}: {ref_exc})")
        record["duration_s"] = time.perf_counter() - t0
        return record
    if act_exc is not None:
        record.update(status="error", note=f"{type(act_exc).__name__}: {act_exc}",
                      traceback="".join(traceback.format_exception(act_exc))[-4000:],
                      duration_s=time.perf_counter() - t0)
        return record

    tols = {o.name: tolerance_for(tolerance, backend.name, spec.name, o.name, ref[o.name].dtype)
            for o in spec.outputs if ref[o.name] is not None}
    wants_ties = any(t.tie_off_by_one for t in tols.values())
    pre = spec.pre_round(args, kwargs, backend.numerics) if spec.pre_round and wants_ties else {}
    masks = spec.mask(args, kwargs) if spec.mask else {}
    comparisons = {}
    for out in spec.outputs:
        if ref[out.name] is None or got[out.name] is None:  # an optional output (e.g. no zero point)
            same = ref[out.name] is None and got[out.name] is None
            comparisons[out.name] = {"name": out.name, "kind": out.kind, "verdict": PASS if same else FAIL, "n": 0,
                                     "note": "absent on both sides" if same else "present on one side only"}
            continue
        p = pre.get(out.name)
        comp = compare(out.name, out.kind, _unpacked(ref[out.name], p), _unpacked(got[out.name], p),
                       tolerance=tols[out.name], pre_round=p, mask=masks.get(out.name),
                       mistrust_degenerate=spec.mistrust_degenerate)
        comparisons[out.name] = comp.as_dict()
    verdicts = [c["verdict"] for c in comparisons.values()]
    if expected:
        for out_name, value in expected.items():
            for who, outputs in (("golden", ref), ("backend", got)):
                c = compare(out_name, "int" if np.asarray(value).dtype.kind in "iu" else "float",
                            np.asarray(value), _unpacked(outputs[out_name], None))
                if c.mismatches or c.verdict == FAIL:
                    verdicts.append(FAIL)
                    record.setdefault("expected_mismatch", []).append(f"{who} differs from the documented "
                                                                       f"{out_name}: {c.note}")
    status = worst(verdicts)
    # identical everywhere but some output degenerate: mistrusted only if *every* output is degenerate
    if status == MISTRUSTED and any(v == PASS for v in verdicts):
        status = PASS
    record.update(status=status, outputs=comparisons)
    if status == FAIL and attribute_failures:
        try:
            record["attribution"] = attribute(spec, args, kwargs, backend, got, comparisons, masks=masks)
        except Exception as exc:  # noqa: BLE001 - attribution is best effort; the failure stands
            record["attribution"] = {"error": f"{type(exc).__name__}: {exc}"}
    record["duration_s"] = time.perf_counter() - t0
    return record


__all__ = ["run_case", "case_id", "repro_command", "FINAL_STATUSES", "BAD_STATUSES", "PASS", "FAIL", "TOLERATED",
           "MISTRUSTED"]
