"""Reports computed from the results file: terminal table (rich), Markdown, JSON, JUnit XML, HTML.

Every file is written atomically (temporary file + rename): an interrupted run leaves the previous
report or the new one, never half of one. :func:`write_all` writes the four file formats into a
folder next to the results file.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..results import summarize, write_atomic
from . import grouping, html, junit, markdown

FILES = {"markdown": "report.md", "junit": "report.xml", "json": "summary.json", "html": "report.html"}


def status_order() -> list[str]:
    from ..evaluate import UNSPECIFIED

    return ["pass", "tolerated", "refused", "mistrusted", UNSPECIFIED, "unsupported", "fail", "error", "crashed", "timeout",
            "leak"]


def write_all(out_dir: str | Path, records: list[dict], meta: dict) -> dict[str, Path]:
    """Write report.md, report.xml, summary.json and report.html into ``out_dir``; return their paths."""
    out = Path(out_dir)
    summary = build_summary(records)
    paths = {k: out / v for k, v in FILES.items()}
    write_atomic(paths["markdown"], markdown.render(summary, meta))
    write_atomic(paths["junit"], junit.render(records, meta))
    write_atomic(paths["json"], json.dumps(json_summary(summary, meta), indent=2, default=str))
    write_atomic(paths["html"], html.render(summary, meta))
    return paths


def not_run(meta: dict) -> dict[str, list[str]]:
    """``{backend: [ops]}``: the ops of the run a backend does not implement (planned, never run on it)."""
    return {b: list(ops) for b, ops in (meta.get("not_implemented") or {}).items() if ops}


def verdict(summary: dict, meta: dict) -> tuple[int, str]:
    """The run's exit status and its verdict in words.

    1 — a case failed (fail, error, crash, timeout, leak); 1 — nothing was judged, or an op named with ``--op``
    is implemented by none of the backends named with ``--backend`` (what was asked was not verified: never a
    green); else 0. With the default backends, an op none of them implements exits 0 when its golden was judged
    on its hand-derived named cases, and the verdict says plainly that no backend verified it. Ops that some
    backends do not implement are said by name either way (they were not run on those backends)."""
    gaps = not_run(meta)
    judged = sum(summary["totals"].values())
    asked = list(meta.get("ops_asked") or [])
    backends_run = [b for b in (meta.get("backends") or {})] or sorted(gaps)
    unverified = [op for op in asked if backends_run and all(op in gaps.get(b, ()) for b in backends_run)]
    words = []
    for b, ops in sorted(gaps.items()):
        shown = ", ".join(ops[:6]) + (f" and {len(ops) - 6} more" if len(ops) > 6 else "")
        words.append(f"{b} does not implement {shown} (not run there)")
    if not summary["ok"]:
        return 1, "disagreements found" + (f"; {'; '.join(words)}" if words else "")
    explicit = bool(meta.get("backends_asked"))
    if unverified and not explicit and judged:
        words.insert(0, f"{', '.join(unverified)}: implemented by none of the backends run "
                        f"({', '.join(backends_run)}) — only the golden's own named cases judged it, no backend verified it")
        unverified = []
    if judged == 0 or unverified:
        what = (f"{', '.join(unverified)}: implemented by none of the backends run ({', '.join(backends_run)})"
                if unverified else "no case was judged")
        return 1, f"NOT VERIFIED — {what}" + (f"; {'; '.join(words)}" if words else "")
    return 0, "every judged case agrees with the golden" + (f"; {'; '.join(words)}" if words else "")


def build_summary(records: list[dict]) -> dict:
    """:func:`conformance.results.summarize` plus the failure groups (:func:`.grouping.groups`, as dicts)."""
    summary = summarize(records)
    summary["groups"] = [g.as_dict() for g in grouping.groups(records)]
    return summary


def json_summary(summary: dict, meta: dict) -> dict:
    status, words = verdict(summary, meta)
    return {"meta": meta, "ok": summary["ok"] and status == 0, "exit_status": status, "verdict": words,
            "totals": summary["totals"], "tolerance_warnings": tolerance_warnings(summary, meta),
            "matrix": {b: {op: {k: v for k, v in cell.items() if k != "hist"} for op, cell in ops.items()}
                       for b, ops in summary["cells"].items()},
            "groups": summary.get("groups", []),
            "variants": summary.get("variants", {}),
            "outside": meta.get("outside", {}),
            "failures": [{k: f.get(k) for k in ("backend", "op", "case_id", "status", "note", "repro", "attribution",
                                                 "outputs")} for f in summary["failures"]]}


def variant_rows(summary: dict) -> list[tuple[str, str, int]]:
    """``(op, kernel variant, cases)`` rows: which kernels of the platform the run exercised."""
    return [(op, v, n) for op, vs in (summary.get("variants") or {}).items() for v, n in vs.items()]


def outside_of(meta: dict, backend: str, op: str) -> dict:
    """What drawing inside ``backend``'s capabilities found for ``op`` (:class:`conformance.drawing.DrawStats`)."""
    return (meta.get("outside") or {}).get(backend, {}).get(op) or {}


def outside_text(stats: dict) -> str:
    """``"12 draws outside its capabilities"``, ``"no acceptable draw (all 32 outside)"`` or ``""``."""
    if not stats:
        return ""
    if stats.get("none_acceptable"):
        return f"no acceptable draw (all {stats.get('drawn', 0)} outside its capabilities)"
    parts = []
    if stats.get("outside"):
        parts.append(f"{stats['outside']} of {stats.get('drawn', 0)} draws outside its capabilities")
    if stats.get("named_outside"):
        parts.append(f"{stats['named_outside']} named case(s) outside")
    return "; ".join(parts)


def cell_text(cell: dict, outside: dict | None = None) -> str:
    """``"28/30"`` style text of a matrix cell (passes over judged cases; tolerated cases are judged, not
    passed, and counted beside: ``"24/28 (4 tolerated)"``), with the bad counts and the draws
    outside the backend's capabilities (``outside``: :func:`outside_of`)."""
    from ..evaluate import BAD_STATUSES, UNSPECIFIED

    good = cell.get("pass", 0)          # "tolerated" is never counted as passed: it is shown beside
    judged = sum(cell.get(s, 0) for s in ("pass", "tolerated", "mistrusted", *BAD_STATUSES))
    bad = {s: cell.get(s, 0) for s in BAD_STATUSES if cell.get(s)}
    text = f"{good}/{judged}"
    if cell.get("tolerated"):
        text += f" ({cell['tolerated']} tolerated)"
    if cell.get("mistrusted"):
        text += f" ({cell['mistrusted']} mistrusted)"
    if cell.get("refused"):
        text += f" (+{cell['refused']} invalid inputs refused by both)"
    if cell.get(UNSPECIFIED):
        text += f" (+{cell[UNSPECIFIED]} accepted where the device behaviour is unspecified)"
    if bad:
        text += " " + ", ".join(f"{n} {s}" for s, n in bad.items())
    if cell.get("unsupported"):
        text += f" [{cell['unsupported']} unsupported]"
    if outside and (outside.get("outside") or outside.get("named_outside")):
        text += f" [{outside.get('outside', 0) + outside.get('named_outside', 0)} outside capabilities]"
    return text


def tolerance_warnings(summary: dict, meta: dict) -> list[dict]:
    """The weak entries (:mod:`conformance.tolerance_strength`) of the run's tolerance table, for the backends
    and ops it judged; empty without a table. A table that cannot be read any more is one row saying so."""
    from ..tolerance_strength import weak_entries
    from ..tolerances import ToleranceTable

    path = meta.get("tolerances")
    if not path or not Path(str(path)).is_file():
        return []
    cells = summary.get("cells") or {}
    try:
        table = ToleranceTable.load(path)
    except (OSError, ValueError) as exc:
        return [{"backend": "*", "op": "*", "output": "*", "dtype": "*", "allows": "?", "basis": "?",
                 "why": f"the table could not be read again: {exc}"}]
    return weak_entries(table, backends=set(cells), ops={op for ops in cells.values() for op in ops})


TOLERANCE_NOTE = ("tolerance entries weaker than their basis (looser than measured, without a basis, or "
                  "accepting anything): their 'tolerated' cases are not passes")


def numerics_text(info: dict) -> str:
    """A backend's declared record and its differences from the Ascend record, in one line."""
    diffs = info.get("numerics_differences") or {}
    return ", ".join(f"{k}={v[1]}" for k, v in diffs.items()) or "identical to the Ascend A2/A3 defaults"


META_KEYS = ("date", "command", "profile", "seed", "machine", "versions", "tolerances")


def meta_rows(meta: dict) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """The run's metadata lines ``(key, value)`` and per backend ``(name, numerics, differences)``."""
    rows = [(key, str(meta[key])) for key in META_KEYS if key in meta]
    backends = []
    for name, info in meta.get("backends", {}).items():
        backends.append((name, str(info.get("numerics")), numerics_text(info)))
    return rows, backends


def cell_state(cell: dict) -> str:
    from ..evaluate import BAD_STATUSES

    if any(cell.get(s) for s in BAD_STATUSES):
        return "bad"
    if cell.get("pass", 0) + cell.get("tolerated", 0) == 0:
        return "empty"
    return "tolerated" if cell.get("tolerated") else "good"
