"""The comparison vocabulary: how one output of a backend is judged against the golden.

Kinds of output (declared per op in the registry):

* ``"int"`` — codes, indices, int32 accumulators: compared **bitwise**. A tolerance may accept a
  **tie-aware off-by-one**: a code that differs by exactly 1 where the float64 pre-rounding value
  of the golden lies within ``tie_eps`` of a .5 tie (and nowhere else).
* ``"float"`` — compared in **ULP of the output dtype** through ordered integer keys
  (:mod:`w8a8.ulp`: bf16, fp16, fp32, fp64, fp8); NaN must match NaN. Element types without an
  ULP scale (complex, fp4, ...: what a layout op moves) are compared bitwise.
* ``"scale"`` — float scales: bitwise by default (equal numerics give equal bits), or within a
  stated ULP budget.

Metrics: mismatch count and rate, max ULP (or max code difference), max abs / rel error, SQNR of
the backend against the golden in dB.

Verdicts:

* ``"pass"`` — bitwise identical;
* ``"tolerated"`` — not identical, but within the stated tolerance;
* ``"fail"`` — outside it (or shapes / dtypes differ);
* ``"mistrusted"`` — the golden output is degenerate (all zeros, constant, or almost all zeros):
  agreement there proves little, so it is not counted as a pass.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.ulp import NAN_DISTANCE, ulp_distance

PASS, TOLERATED, FAIL, MISTRUSTED = "pass", "tolerated", "fail", "mistrusted"
_ORDER = {PASS: 0, MISTRUSTED: 1, TOLERATED: 2, FAIL: 3}


@dataclass(frozen=True)
class Tolerance:
    """What a comparison accepts beyond bitwise equality.

    ulp : max ULP distance accepted for float outputs (0 = bitwise).
    tie_off_by_one : accept int codes off by exactly 1 at (near-)ties of the pre-rounding value.
    tie_eps : how close to a .5 tie the float64 pre-rounding value must be (absolute).
    mismatch_rate : fraction of elements allowed to exceed ``ulp`` / ``atol+rtol`` anyway.
    atol, rtol : an absolute/relative bound, used with ``ulp`` (an element passes if either holds).
    """

    ulp: int = 0
    tie_off_by_one: bool = False
    tie_eps: float = 1e-3
    mismatch_rate: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0

    @classmethod
    def exact(cls) -> "Tolerance":
        return cls()

    def is_exact(self) -> bool:
        return self == Tolerance()


@dataclass
class Comparison:
    """The judgement of one output."""

    name: str
    kind: str
    verdict: str
    n: int = 0
    mismatches: int = 0
    max_ulp: int | None = None
    max_code_diff: int | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    sqnr_db: float | None = None
    tie_accepted: int = 0
    first_mismatch: list | None = None
    note: str = ""
    histogram: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self)
        return {k: _jsonable(v) for k, v in d.items()}


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return _jsonable(float(v))
    return v


def worst(verdicts) -> str:
    """The worst of several verdicts (fail > tolerated > mistrusted > pass)."""
    verdicts = list(verdicts)
    return max(verdicts, key=lambda v: _ORDER[v]) if verdicts else PASS


def sqnr_db(reference: np.ndarray, actual: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio of ``actual`` against ``reference`` in dB (float64).

    +inf when identical; -inf when the reference is all zero and the actual is not; NaN-safe
    (non-finite elements are left out).
    """
    r = np.asarray(reference, dtype=np.float64) if np.asarray(reference).dtype.kind != "V" else \
        np.asarray(reference).astype(np.float32).astype(np.float64)
    a = np.asarray(actual).astype(np.float32).astype(np.float64) if np.asarray(actual).dtype.kind == "V" else \
        np.asarray(actual, dtype=np.float64)
    ok = np.isfinite(r) & np.isfinite(a)
    signal = float(np.sum(r[ok] ** 2))
    noise = float(np.sum((r[ok] - a[ok]) ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _as_f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(np.float64) if x.dtype.kind == "V" else x.astype(np.float64)


def degenerate(reference: np.ndarray) -> str | None:
    """Why a golden output is too degenerate to trust a pass (None if it is informative).

    Degenerate means: no finite value, all zeros, or (with at least 20 elements) 95 % or more
    zeros. A constant non-zero output (e.g. an all -128 GEMM) is *not* degenerate: it pins the
    extreme value exactly.
    """
    ref = np.asarray(reference)
    if ref.size == 0:
        return None
    flat = _as_f64(ref).ravel()
    finite = flat[np.isfinite(flat)]
    if finite.size == 0:
        return "no finite values"
    zeros = np.count_nonzero(finite == 0)
    if zeros == finite.size:
        return "all zeros"
    if finite.size >= 20 and zeros / finite.size >= 0.95:
        return f"{zeros / finite.size:.0%} zeros"
    return None


def _histogram(values: np.ndarray) -> dict:
    """A compact histogram of non-negative integer distances: bins 0, 1, 2, 3-4, 5-8, ..., >2^20."""
    v = np.asarray(values, dtype=np.int64).ravel()
    if v.size == 0:
        return {}
    edges = [0, 1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 1025, 4097, 65537, 1 << 20, NAN_DISTANCE]
    labels = ["0", "1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", "257-1024",
              "1025-4096", "4097-65536", "65537-2^20", ">2^20"]
    counts, _ = np.histogram(np.clip(v, 0, NAN_DISTANCE - 1), bins=edges)
    return {label: int(c) for label, c in zip(labels, counts) if c}


def compare(name: str, kind: str, reference: np.ndarray, actual: np.ndarray, *,
            tolerance: Tolerance = Tolerance(), pre_round: np.ndarray | None = None,
            mask: np.ndarray | None = None, mistrust_degenerate: bool = True) -> Comparison:
    """Compare one output of a backend (``actual``) against the golden (``reference``).

    Parameters
    ----------
    name, kind : the output's name and kind (``"int"``, ``"float"``, ``"scale"``).
    tolerance : what is accepted beyond bitwise equality.
    pre_round : for ``"int"`` outputs, the golden's float64 value before rounding (same shape);
        needed for the tie-aware off-by-one rule.
    mask : boolean, True where the element is specified and compared (e.g. grouped-matmul rows
        beyond the group_list total are unspecified); default all.
    mistrust_degenerate : judge an identical but degenerate golden output "mistrusted" (default).
        Pure data-movement ops (layout casts, scale swizzles) turn it off: their zeros are the
        specified padding, and matching every position is a full check.
    """
    reference = np.asarray(reference)
    actual = np.asarray(actual)
    if reference.shape != actual.shape or reference.dtype != actual.dtype:
        return Comparison(name, kind, FAIL, n=int(reference.size),
                          note=f"expected {_dt.name(reference.dtype)}{tuple(reference.shape)}, "
                               f"got {_dt.name(actual.dtype)}{tuple(actual.shape)}")
    where = None
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), reference.shape)
        where = np.argwhere(mask) if reference.ndim else None   # masked position k -> its index in the output
        reference, actual = reference[mask], actual[mask]
        pre_round = None if pre_round is None else np.asarray(pre_round)[mask]
    n = int(reference.size)
    if n == 0:
        return Comparison(name, kind, PASS, n=0, note="empty output")
    if kind == "int" or reference.dtype.kind in "iub":
        comp = _compare_int(name, reference, actual, tolerance, pre_round)
    elif _dt.name(reference.dtype) not in ULP_DTYPES:  # complex, fp4, ...: no ULP scale; compared as bytes
        comp = _compare_int(name, _raw(reference), _raw(actual), Tolerance(), None)
        comp.kind = kind
    else:
        comp = _compare_float(name, kind, reference, actual, tolerance)
    if where is not None and comp.first_mismatch is not None:
        comp.first_mismatch = [int(i) for i in where[comp.first_mismatch[0]]]
    if comp.verdict == MISTRUSTED and not mistrust_degenerate:
        comp.verdict, comp.note = PASS, comp.note + " (padding by specification: trusted)"
    return comp


ULP_DTYPES = ("bfloat16", "float16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")
"""Float dtypes with an ULP distance (:mod:`w8a8.ulp`); any other element type is compared bitwise."""


def _raw(x: np.ndarray) -> np.ndarray:
    """The bytes of each element as an unsigned integer (1, 2, 4 or 8 bytes; wider ones per 8-byte word)."""
    size = x.dtype.itemsize
    if size in (1, 2, 4, 8):
        return np.ascontiguousarray(x).view(f"u{size}")
    return np.ascontiguousarray(x).view(np.uint64).reshape(x.shape + (size // 8,))


def _identical(comp: Comparison, ref: np.ndarray) -> Comparison:
    """A bitwise-identical output passes — unless the golden's is degenerate (then: mistrusted)."""
    why = degenerate(ref)
    if why:
        comp.verdict, comp.note = MISTRUSTED, f"golden output is degenerate ({why})"
    return comp


def _first(mismatch: np.ndarray) -> list:
    return [int(i) for i in np.argwhere(mismatch)[0]] if mismatch.any() else None


def _compare_int(name, ref, act, tol: Tolerance, pre_round) -> Comparison:
    r = ref.astype(np.int64)
    a = act.astype(np.int64)
    diff = np.abs(a - r)
    mismatch = diff != 0
    count = int(np.count_nonzero(mismatch))
    comp = Comparison(name, "int", PASS, n=int(ref.size), mismatches=count,
                      max_code_diff=int(diff.max()), histogram=_histogram(diff),
                      first_mismatch=_first(mismatch.reshape(ref.shape)) if ref.ndim else None)
    if count == 0:
        return _identical(comp, ref)
    bad = mismatch
    if tol.tie_off_by_one and pre_round is not None:
        pr = np.asarray(pre_round, dtype=np.float64)
        near_tie = np.abs(np.abs(pr - np.floor(pr)) - 0.5) <= tol.tie_eps
        tie_ok = mismatch & (diff == 1) & near_tie
        comp.tie_accepted = int(np.count_nonzero(tie_ok))
        bad = mismatch & ~tie_ok
    bad_count = int(np.count_nonzero(bad))
    if bad_count == 0 or bad_count <= tol.mismatch_rate * ref.size:
        comp.verdict = TOLERATED
        comp.note = (f"{comp.tie_accepted} code(s) off by one at ties" if comp.tie_accepted else "") + \
                    (f"; {bad_count} mismatch(es) within the rate budget" if bad_count else "")
    else:
        comp.verdict = FAIL
        comp.note = f"{bad_count} of {ref.size} codes differ (max |diff| {comp.max_code_diff})"
    return comp


def _compare_float(name, kind, ref, act, tol: Tolerance) -> Comparison:
    dist = ulp_distance(ref, act)
    mismatch = dist != 0
    count = int(np.count_nonzero(mismatch))
    rf, af = _as_f64(ref), _as_f64(act)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        absd = np.abs(af - rf)
        finite = np.isfinite(absd)
        max_abs = float(absd[finite].max()) if finite.any() else 0.0
        rel = absd / np.abs(rf)
        relf = rel[np.isfinite(rel)]
    comp = Comparison(name, kind, PASS, n=int(ref.size), mismatches=count,
                      max_ulp=int(dist.max()), max_abs=max_abs,
                      max_rel=float(relf.max()) if relf.size else 0.0,
                      sqnr_db=sqnr_db(ref, act), histogram=_histogram(dist),
                      first_mismatch=_first(mismatch.reshape(ref.shape)) if ref.ndim else None)
    if count == 0:
        return _identical(comp, ref)
    within = dist <= tol.ulp
    if tol.atol or tol.rtol:
        with np.errstate(invalid="ignore"):
            within |= absd <= tol.atol + tol.rtol * np.abs(rf)
    bad = int(np.count_nonzero(~within))
    if bad == 0 or bad <= tol.mismatch_rate * ref.size:
        comp.verdict = TOLERATED
        comp.note = f"{count} element(s) differ, max {comp.max_ulp} ULP (tolerance {tol.ulp} ULP)"
    else:
        comp.verdict = FAIL
        nan_note = " (NaN where a number was expected, or the reverse)" if comp.max_ulp == NAN_DISTANCE else ""
        comp.note = f"{bad} of {ref.size} elements beyond tolerance, max {comp.max_ulp} ULP{nan_note}"
    return comp
