"""How strong a tolerance table is: the entries that accept more than what they say they rest on.

:func:`weak_entries` flags an entry of a :class:`~conformance.tolerances.ToleranceTable` when

* it has **no basis**: ``basis`` neither ``"measured"`` nor ``"analytic"``; ``"measured"`` with
  ``samples`` 0 (no measurement behind it); ``"analytic"`` without a ``bound``;
* it is **looser than its measured basis**: ``ulp`` above ``max(2 * max_observed, max_observed + 2)``
  (more than twice the worst distance its own cases showed; a tail fit may justify it, the report shows
  it either way);
* it **accepts anything**: ``ulp`` at or above :func:`conformance.tuning.nonsense_ulp` of its dtype
  (a relative error of 100 %), or a ``mismatch_rate`` above 0 (that fraction of elements is not
  compared at all), or ``atol`` / ``rtol`` on a measured entry (the measurement was in ULP).

Every conformance report (the terminal summary, report.md, report.html, summary.json) lists the flagged
entries of the ops and backends the run judged, each with what it allows and why it is flagged.
"""

from __future__ import annotations

LOOSER_FACTOR = 2
"""An entry allowing more than this times its worst measured distance (and at least 2 ULP more) is flagged."""


def _any_value_ulp(dtype: str) -> int | None:
    from .tuning import nonsense_ulp

    try:
        return nonsense_ulp(dtype)
    except (TypeError, ValueError, KeyError):
        return None            # "*" or an integer dtype: no ULP scale to compare with


def reasons(entry) -> list[str]:
    """Why ``entry`` (a :class:`~conformance.tolerances.Entry`) is weak; empty when it is not."""
    why = []
    basis = entry.basis
    if basis not in ("measured", "analytic"):
        why.append(f"basis {basis!r} is neither measured nor analytic")
    elif basis == "measured" and not entry.samples:
        why.append("no measurement behind it (samples 0)")
    elif basis == "analytic" and not entry.bound:
        why.append("analytic without a stated bound")
    seen = int(entry.max_observed or 0)
    if basis == "measured" and entry.samples and entry.ulp > max(LOOSER_FACTOR * seen, seen + 2):
        why.append(f"allows {entry.ulp} ULP, {seen} the worst seen in its {entry.samples} measured cases")
    cap = _any_value_ulp(entry.dtype)
    if cap is not None and entry.ulp >= cap:
        why.append(f"{entry.ulp} ULP accepts any {entry.dtype} value (>= {cap}: 100 % relative error)")
    if entry.mismatch_rate > 0:
        why.append(f"mismatch_rate {entry.mismatch_rate:g}: that fraction of elements is not compared")
    if basis == "measured" and (entry.atol or entry.rtol):
        why.append(f"atol {entry.atol:g} / rtol {entry.rtol:g} on an entry measured in ULP")
    return why


def weak_entries(table, backends=None, ops=None) -> list[dict]:
    """The flagged entries of ``table`` (module docstring) whose backend (or ``"*"``) is in ``backends`` and
    op in ``ops`` (None: all), as report rows: ``backend, op, output, dtype, allows, basis, why``."""
    rows = []
    for e in table.entries():
        if backends is not None and e.backend != "*" and e.backend not in backends:
            continue
        if ops is not None and e.op not in ops:
            continue
        why = reasons(e)
        if why:
            rows.append({"backend": e.backend, "op": e.op, "output": e.output, "dtype": e.dtype,
                         "allows": e.describe(), "basis": e.basis, "why": "; ".join(why)})
    return rows


def line(row: dict) -> str:
    """One flagged entry in words, for the reports."""
    return (f"{row['backend']} {row['op']}.{row['output']} ({row['dtype']}): {row['allows']} — {row['why']}")
