"""Tolerance tuning: measure how far backend A is from B over the conformance strategies, and
recommend per op, output and output dtype the tightest tolerance that will not flake.

For every drawn case both backends run the op (B with its own declared numerics — against
``numpy`` that is the Ascend default golden), and every output is reduced to per-case statistics:
the largest ULP (floats) or code (ints) distance, the mismatch fraction, max abs / rel error, the
reduction length K where the op has one, and a histogram of element distances.

**Recommendation** for a target false-failure probability ``p`` per test (default 1e-6):

* ``u_obs`` = the worst per-case distance seen in ``n`` cases. With zero exceedances in ``n``
  cases, the per-case exceedance probability is below ``3/n`` at 95 % confidence ("rule of
  three"); that certifies ``p`` only when ``n >= 3/p``, so the sample alone rarely suffices.
* The per-case distance distribution's tail is fitted geometrically (``P(d >= u) ~ a r^u`` through
  the empirical survival function) and extrapolated to ``p``: ``u_fit``.
* Where an analytic bound exists (:mod:`conformance.bounds`) and the observations respect it, the
  bound caps the recommendation (it holds with probability 1). Observations *beyond* a bound are
  a finding, not a tolerance: reported loudly (the bound or the backend is wrong), the entry keeps the
  bound and ``w8a8 tune`` exits 1. Without a bound, a float distance beyond ``2^(mantissa bits + 1)``
  ULP (Inf/NaN, or a relative error of 100 % and more) is refused the same way (the entry stays bitwise).
* Cases a known library bug explains (:mod:`conformance.detectors`) are not samples: they are counted
  in the entry's notes as findings, so no tolerance is widened to cover a bug.
* Recommended ULP = ``max(u_obs, u_fit)``, capped by the bound. Int outputs whose differences are
  all +-1 at ties get ``tie_off_by_one`` instead of a looser code distance.

Each recommendation carries its sample size, ``u_obs``, the confidence statement and the bound.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.ulp import NAN_DISTANCE, ulp_distance

from .evaluate import build_inputs
from .runner import draw_cases

DEFAULT_TARGET = 1e-6


@dataclass
class OutputStats:
    op: str
    output: str
    dtype: str
    kind: str
    cases: int = 0
    elements: int = 0
    per_case_max: list = field(default_factory=list)
    per_case_rate: list = field(default_factory=list)
    per_case_k: list = field(default_factory=list)
    max_abs: float = 0.0
    max_rel: float = 0.0
    histogram: dict = field(default_factory=lambda: defaultdict(int))
    tie_only: bool = True
    known_bugs: dict = field(default_factory=lambda: defaultdict(int))  # detector name -> cases excluded
    seeds: list = field(default_factory=list)  # the draw seeds whose cases these are (merged sample sets)

    def merge(self, other: "OutputStats") -> None:
        """Add another sample set of the same (op, output, dtype) — drawn with other seeds — to this one."""
        if (self.op, self.output, self.dtype) != (other.op, other.output, other.dtype):
            raise ValueError(f"cannot merge samples of {other.op}/{other.output}/{other.dtype} into "
                             f"{self.op}/{self.output}/{self.dtype}")
        shared = set(self.seeds) & set(other.seeds)
        if shared:
            raise ValueError(f"sample sets of {self.op}/{self.output} drawn with the same seed(s) {sorted(shared)}: "
                             "the same cases twice are no new samples")
        self.cases += other.cases
        self.elements += other.elements
        self.per_case_max += list(other.per_case_max)
        self.per_case_rate += list(other.per_case_rate)
        self.per_case_k += list(other.per_case_k)
        self.max_abs, self.max_rel = max(self.max_abs, other.max_abs), max(self.max_rel, other.max_rel)
        for k, v in other.histogram.items():
            self.histogram[int(k)] += int(v)
        self.tie_only = self.tie_only and other.tie_only
        for k, v in other.known_bugs.items():
            self.known_bugs[k] += int(v)
        self.seeds += list(other.seeds)

    def as_json(self) -> dict:
        return {"op": self.op, "output": self.output, "dtype": self.dtype, "kind": self.kind, "cases": self.cases,
                "elements": self.elements, "per_case_max": [int(v) for v in self.per_case_max],
                "per_case_rate": self.per_case_rate, "per_case_k": self.per_case_k, "max_abs": self.max_abs,
                "max_rel": self.max_rel, "histogram": {str(k): v for k, v in self.histogram.items()},
                "tie_only": self.tie_only, "known_bugs": dict(self.known_bugs), "seeds": self.seeds}

    @classmethod
    def from_json(cls, d: dict) -> "OutputStats":
        s = cls(d["op"], d["output"], d["dtype"], d["kind"], int(d["cases"]), int(d["elements"]),
                [int(v) for v in d["per_case_max"]], list(d["per_case_rate"]), list(d["per_case_k"]),
                float(d["max_abs"]), float(d["max_rel"]), tie_only=bool(d["tie_only"]), seeds=list(d.get("seeds", [])))
        for k, v in d["histogram"].items():
            s.histogram[int(k)] += int(v)
        for k, v in d.get("known_bugs", {}).items():
            s.known_bugs[k] += int(v)
        return s

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.per_case_max, q)) if self.per_case_max else 0.0


def _distance(ref: np.ndarray, act: np.ndarray) -> np.ndarray:
    if ref.dtype.kind in "iub":
        return np.abs(act.astype(np.int64) - ref.astype(np.int64))
    return ulp_distance(ref, act)


def _k_of(params: dict) -> int | None:
    for key in ("k", "h"):
        if isinstance(params.get(key), int):
            return params[key]
    return None


def merge_stats(into: dict, more: dict) -> dict:
    """Merge the sample sets ``more`` (``{(op, output, dtype): OutputStats}``) into ``into``; returns ``into``."""
    for key, s in more.items():
        if key in into:
            into[key].merge(s)
        else:
            into[key] = s
    return into


def save_samples(path, stats: dict, meta: dict) -> None:
    """Write sample sets as JSON (atomically), to be merged by a later ``w8a8 tune --samples-in``."""
    import json

    from .results import write_atomic

    write_atomic(path, json.dumps({"meta": meta, "stats": [s.as_json() for s in stats.values()]}))


def load_samples(path) -> tuple[dict, dict]:
    """``(stats, meta)`` of a file :func:`save_samples` wrote."""
    import json
    from pathlib import Path

    data = json.loads(Path(path).read_text())
    stats = {}
    for d in data["stats"]:
        s = OutputStats.from_json(d)
        stats[(s.op, s.output, s.dtype)] = s
    return stats, data.get("meta", {})


def sweep(backend_a, backend_b, ops: list[str], samples: int, seed: int = 0, on_case=None) -> dict:
    """Run ``samples`` drawn cases per op on both backends; return ``{(op, output, dtype): OutputStats}``."""
    from backends.base import Unsupported

    from .registry import get

    stats: dict[tuple[str, str, str], OutputStats] = {}
    for op in ops:
        spec = get(op)
        for params in draw_cases(spec, samples, seed):
            args, kwargs = build_inputs(spec, params)
            try:
                a = spec.as_outputs(backend_a.call(op, *args, **kwargs))
                b = spec.as_outputs(backend_b.call(op, *args, **kwargs))
            except (Unsupported, ValueError, TypeError, OverflowError):
                continue  # both refusing an input (NaN cases) or an unsupported combination: not a sample
            masks = spec.mask(args, kwargs) if spec.mask else {}
            bug = _known_bug(spec, args, kwargs, backend_a, a, b, masks)
            if bug:
                for out in spec.outputs:
                    ref = b[out.name]
                    if ref is None:
                        continue
                    key = (op, out.name, _dt.name(ref.dtype))
                    s = stats.setdefault(key, OutputStats(op, out.name, key[2], "int" if ref.dtype.kind in "iub"
                                                          else "float"))
                    for name in bug:
                        s.known_bugs[name] += 1
                if on_case:
                    on_case(op)
                continue  # a known library bug is a finding: never a sample a tolerance could widen to cover
            for out in spec.outputs:
                ref, act = b[out.name], a[out.name]
                if ref is None or act is None or ref.shape != act.shape or ref.dtype != act.dtype:
                    continue  # an optional output absent on a side, or mismatched: conformance's business
                mask = masks.get(out.name)
                if mask is not None:
                    m = np.broadcast_to(mask, ref.shape)
                    ref, act = ref[m], act[m]
                key = (op, out.name, _dt.name(ref.dtype))
                s = stats.setdefault(key, OutputStats(op, out.name, key[2], "int" if ref.dtype.kind in "iub"
                                                      else "float"))
                if seed not in s.seeds:
                    s.seeds.append(seed)
                d = _distance(ref, act)
                s.cases += 1
                s.elements += int(d.size)
                worst = int(d.max()) if d.size else 0
                s.per_case_max.append(worst)
                s.per_case_rate.append(float(np.count_nonzero(d)) / max(1, d.size))
                s.per_case_k.append(_k_of(params))
                if s.kind == "int" and worst > 1:
                    s.tie_only = False
                if s.kind == "float" and d.size:
                    rf = ref.astype(np.float32).astype(np.float64)
                    af = act.astype(np.float32).astype(np.float64)
                    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                        ad = np.abs(af - rf)
                        ok = np.isfinite(ad)
                        if ok.any():
                            s.max_abs = max(s.max_abs, float(ad[ok].max()))
                            rel = ad[ok] / np.abs(rf[ok])
                            rel = rel[np.isfinite(rel)]
                            if rel.size:
                                s.max_rel = max(s.max_rel, float(rel.max()))
                vals, counts = np.unique(np.minimum(d, 1 << 20), return_counts=True)
                for v, c in zip(vals.tolist(), counts.tolist()):
                    s.histogram[int(v)] += int(c)
            if on_case:
                on_case(op)
    return stats


def _known_bug(spec, args, kwargs, backend_a, a: dict, b: dict, masks: dict) -> list[str]:
    """The detectors (:mod:`conformance.detectors`) that explain how ``a`` differs from ``b`` on this case."""
    from .detectors import explain

    try:
        with np.errstate(all="ignore"):
            found = explain(spec, args, kwargs, backend_a.numerics, b, a, masks, {})
    except Exception:  # noqa: BLE001 - a case a detector cannot read is an ordinary sample
        return []
    return list(found["names"]) if found else []


def fit_tail(per_case_max: list[int], target: float) -> int:
    """Smallest u whose geometrically extrapolated per-case exceedance probability is <= target."""
    d = np.asarray(per_case_max, dtype=np.float64)
    d = d[d < NAN_DISTANCE]
    n = d.size
    if n == 0 or d.max() == 0:
        return 0
    values = np.unique(d)
    surv = np.array([(d >= v).mean() for v in values])
    pos = values > 0
    if pos.sum() < 2:  # one non-zero level: P(d >= v) = surv, decay unknown -> assume halving per ULP
        v0, s0 = float(values[pos][0]), float(surv[pos][0])
        return int(math.ceil(v0 + max(0.0, math.log(s0 / target, 2))))
    x, y = values[pos], np.log(surv[pos])
    slope, intercept = np.polyfit(x, y, 1)
    if slope >= 0:
        return int(d.max() * 2)
    u = (math.log(target) - intercept) / slope
    return int(max(d.max(), math.ceil(u)))


def _analytic_cap(op: str, output: str, dtype: str, numerics_equal: bool,
                  library_order: bool = False) -> tuple[int | None, str]:
    from .bounds import bounds_for

    if numerics_equal and library_order:
        return None, ("the same record, float sums in the library's own order (reassociation, which no Numerics "
                      "field models): no closed-form bound, measured")
    if numerics_equal:
        return 0, "bitwise: both sides run the same numerics"
    candidates = [b for b in bounds_for(op) if b.output == output and b.kind in ("ulp", "relative")]
    if not candidates:
        return None, "no closed-form ULP bound for this path (see docs/tolerances.md)"
    b = max(candidates, key=lambda b: b.ulp)
    extra = 0
    if b.relative:
        eps = 2.0 ** -_nmant(dtype)
        extra = int(math.ceil(b.relative / eps))
    return b.ulp + extra, f"{b.formula} ({b.dominant} dominates)"


def nonsense_ulp(dtype: str) -> int:
    """The most ULP a rounding difference can be: 2^(mantissa bits + 1) ULP is a relative error of 100 % and
    more (Inf/NaN against a number counts as :data:`w8a8.ulp.NAN_DISTANCE`)."""
    return 1 << (_nmant(dtype) + 1)


def _nmant(dtype: str) -> int:
    import ml_dtypes

    dt = np.dtype(_dt.resolve(dtype))
    return (ml_dtypes.finfo(dt) if dt.kind == "V" else np.finfo(dt)).nmant


def recommend(stats: dict, *, target: float = DEFAULT_TARGET, backend: str, against: str, numerics_equal: bool,
              numerics: str = "", versions: str = "", library_order: bool = False) -> list:
    """A tolerance :class:`~conformance.tolerances.Entry` per (op, output, dtype) of ``stats``.

    ``library_order``: backend A sums floats in its library's own order (``Backend.float_sum_order``), so
    under the same record its float outputs are measured, not bitwise by construction."""
    from .tolerances import Entry

    entries = []
    date = time.strftime("%Y-%m-%d")
    for (op, output, dtype), s in sorted(stats.items()):
        u_obs = max(s.per_case_max) if s.per_case_max else 0
        conf = 3.0 / s.cases if s.cases else 1.0
        cap, bound_text = (0, "bitwise by construction") if s.kind == "int" and numerics_equal else \
            _analytic_cap(op, output, dtype, numerics_equal, library_order)
        notes = []
        fit_record: dict = {}
        if u_obs == 0:
            ulp = 0
            notes.append(f"no difference in {s.cases} cases / {s.elements} elements; per-case exceedance < {conf:.2g} "
                         f"at 95% confidence" + ("" if conf <= target else
                                                 f" (certifying {target:g} empirically needs {math.ceil(3 / target)} "
                                                 "cases: the analytic bound carries it)" if cap == 0 else ""))
        else:
            from .tail_fit import fit as gpd_fit

            tail = gpd_fit(s.per_case_max, target)
            fit_record.update({f"fit_{k}": v for k, v in tail.as_dict().items() if k not in ("target", "reason")})
            if tail.supported:
                u_fit = tail.tolerance
                notes.append(f"worst {u_obs} in {s.cases} cases; {tail.describe()}: tolerance {u_fit}")
            else:
                u_fit = fit_tail(s.per_case_max, target)
                notes.append(f"worst {u_obs} in {s.cases} cases; geometric tail fit gives {u_fit} at p={target:g}; "
                             f"{tail.describe()}")
            ulp = max(u_obs, u_fit)
            if cap is not None and u_obs > cap:
                # a finding, not a tolerance: the entry keeps the bound, the run exits 1
                notes.append(f"OBSERVED {u_obs} EXCEEDS THE ANALYTIC BOUND {cap}: the bound or the backend is wrong; "
                             f"REFUSED to widen the tolerance beyond the bound")
                ulp = cap
            elif cap is not None:
                ulp = min(ulp, cap) if cap >= u_obs else ulp
            elif s.kind == "float" and u_obs > nonsense_ulp(dtype):
                notes.append(f"REFUSED: an observed {u_obs} ULP (Inf/NaN, or a relative error beyond 100 %) is no "
                             "rounding difference: a finding (the backend or its declared numerics is wrong), not a "
                             "tolerance; the entry stays bitwise")
                ulp = 0
        if s.known_bugs:
            notes.append("excluded as findings, not tolerances: " + ", ".join(
                f"{n} case(s) of the known library bug {name}" for name, n in sorted(s.known_bugs.items())))
        tie = s.kind == "int" and u_obs == 1 and s.tie_only and not numerics_equal
        if tie:
            ulp = 0
            notes.append("int differences are +-1: accepted only at .5 ties (tie_off_by_one)")
        entries.append(Entry(backend=backend, against=against, op=op, output=output, dtype=dtype, ulp=int(ulp),
                             mismatch_rate=0.0, tie_off_by_one=tie, basis="measured", samples=s.cases,
                             max_observed=int(u_obs), bound=bound_text, numerics=numerics, versions=versions,
                             date=date, notes="; ".join(notes),
                             extra={"p50": s.percentile(50), "p99": s.percentile(99), "max_abs": s.max_abs,
                                    "max_rel": s.max_rel, "elements": s.elements, "target": target,
                                    "draws": s.cases, **({"seeds": list(s.seeds)} if s.seeds else {}),
                                    **fit_record}))
    return entries
