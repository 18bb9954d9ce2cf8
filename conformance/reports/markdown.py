"""Markdown report: the agreement matrix (op x backend), totals, and every failure with its
attribution and one-line repro command."""

from __future__ import annotations


def render(summary: dict, meta: dict) -> str:
    from . import cell_text, meta_rows

    cells = summary["cells"]
    backend_names = sorted(cells)
    ops = sorted({op for b in cells.values() for op in b})
    lines = ["# w8a8 conformance report", ""]
    verdict = "all backends agree with the golden" if summary["ok"] else "DISAGREEMENTS FOUND"
    lines += [f"**Result: {verdict}.**", ""]
    rows, backends = meta_rows(meta)
    lines += [f"- {key}: `{value}`" for key, value in rows]
    lines += [f"- backend `{name}`: numerics `{num}` ({diffs})" for name, num, diffs in backends]
    lines += ["", "Totals: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["totals"].items())), ""]
    lines += ["## Agreement matrix", "", "Cells: passed / judged cases (worst ULP or code distance).", ""]
    lines.append("| op | " + " | ".join(backend_names) + " |")
    lines.append("|---|" + "---|" * len(backend_names))
    for op in ops:
        row = []
        for b in backend_names:
            cell = cells[b].get(op)
            row.append("n/a" if cell is None else f"{cell_text(cell)} (max {cell.get('worst', 0)})")
        lines.append(f"| `{op}` | " + " | ".join(row) + " |")
    skipped = meta.get("not_implemented", {})
    if any(skipped.values()):
        lines += ["", "Ops a backend does not implement (not run): " +
                  "; ".join(f"`{b}`: {', '.join(ops)}" for b, ops in skipped.items() if ops)]
    failures = summary["failures"]
    lines += ["", f"## Failures ({len(failures)})", ""]
    if not failures:
        lines.append("None.")
    for f in failures:
        lines += [f"### `{f['backend']}` / `{f['op']}` / `{f['case_id']}` — {f['status']}", ""]
        if f.get("note"):
            lines.append(f"- note: {f['note']}")
        for name, comp in (f.get("outputs") or {}).items():
            if comp.get("verdict") == "fail":
                lines.append(f"- output `{name}`: {comp.get('note')} (max ULP {comp.get('max_ulp')}, "
                             f"max code diff {comp.get('max_code_diff')}, first at {comp.get('first_mismatch')})")
        for line in f.get("expected_mismatch") or []:
            lines.append(f"- {line}")
        at = f.get("attribution") or {}
        if at:
            lines.append(f"- first diverging stage: `{at.get('first_stage')}`")
            lines.append(f"- likely cause: {at.get('cause')}" +
                         (" (reproduced bit for bit by the golden under that change)" if at.get("reproduced") else ""))
            for alt in at.get("also_consistent") or []:
                lines.append(f"  - also consistent: {alt}")
        lines += [f"- repro: `{f.get('repro')}`", ""]
    return "\n".join(lines) + "\n"
