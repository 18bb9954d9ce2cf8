"""Markdown report: failures grouped by cause (each with one repro and the parameter that separates
pass from fail), the agreement matrix (op x backend, distances in human units), what each backend's
capabilities kept out of the draw, and the representative failure of each group in detail."""

from __future__ import annotations


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def groups_section(summary: dict) -> list[str]:
    """The failure table: one row per (backend, op, stage, cause)."""
    groups = summary.get("groups") or []
    lines = [f"## Failures by cause ({len(groups)} group(s), {len(summary['failures'])} case(s))", ""]
    if not groups:
        return lines + ["None.", ""]
    lines += ["| backend | op | stage | cause | cases | worst | separates pass from fail | repro |",
              "|---|---|---|---|---|---|---|---|"]
    for g in groups:
        sep = "; ".join(f"fails only with {s}" for s in g["separating"]) or "-"
        lines.append(f"| {_cell(g['backend'])} | `{g['op']}` | {_cell(g['stage'])} | {_cell(g['cause'])} | "
                     f"{g['count']} | {_cell(g['worst'])} | {_cell(sep)} | `{_cell(g['repro'])}` |")
    return lines + [""]


def tolerance_section(summary: dict, meta: dict) -> list[str]:
    """The tolerance entries weaker than their basis (:mod:`conformance.tolerance_strength`), when any."""
    from . import TOLERANCE_NOTE, tolerance_warnings

    weak = tolerance_warnings(summary, meta)
    if not weak:
        return []
    lines = ["## Weak tolerances", "", f"**{len(weak)} {TOLERANCE_NOTE}.**", "",
             "| backend | op | output | dtype | allows | basis | why flagged |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {_cell(r['backend'])} | `{r['op']}` | {_cell(r['output'])} | {_cell(r['dtype'])} | {_cell(r['allows'])} "
              f"| {_cell(r['basis'])} | {_cell(r['why'])} |" for r in weak]
    return lines + [""]


def matrix_section(summary: dict, meta: dict) -> list[str]:
    from . import cell_text, outside_of

    cells = summary["cells"]
    backend_names = sorted(cells)
    ops = sorted({op for b in cells.values() for op in b})
    lines = ["## Agreement matrix", "",
             "Cells: passed / judged cases, tolerated ones counted beside and never as passed (worst distance to the golden: ULP of the output dtype, codes, or inf/NaN).",
             "", "| op | " + " | ".join(backend_names) + " |", "|---|" + "---|" * len(backend_names)]
    for op in ops:
        row = []
        for b in backend_names:
            cell = cells[b].get(op)
            row.append("n/a" if cell is None else
                       f"{cell_text(cell, outside_of(meta, b, op))} (worst {cell.get('worst_text', '0')})")
        lines.append(f"| `{op}` | " + " | ".join(_cell(c) for c in row) + " |")
    return lines


def outside_section(meta: dict) -> list[str]:
    from . import outside_text

    rows = [(b, op, st) for b, ops in (meta.get("outside") or {}).items() for op, st in sorted(ops.items())
            if st.get("outside") or st.get("named_outside")]
    if not rows:
        return []
    lines = ["", "## Outside the backends' capabilities (not drawn)", "",
             "| backend | op | draws | why (most common) |", "|---|---|---|---|"]
    for b, op, st in rows:
        why = next(iter(st.get("reasons") or {}), "")
        lines.append(f"| {_cell(b)} | `{op}` | {_cell(outside_text(st))} | {_cell(why)} |")
    return lines


def details_section(summary: dict) -> list[str]:
    """The representative case of each group, with its comparisons and attribution."""
    from ..results import distance_text

    by_id = {(f["backend"], f["case_id"]): f for f in summary["failures"]}
    lines = ["", "## Representative failures", ""]
    groups = summary.get("groups") or []
    if not groups:
        return lines + ["None.", ""]
    for g in groups:
        f = by_id.get((g["backend"], g["case_id"]))
        if f is None:
            continue
        lines += [f"### `{f['backend']}` / `{f['op']}` / {g['stage']} — {g['count']} case(s)", ""]
        if f.get("note"):
            lines.append(f"- note: {f['note']}")
        for name, comp in (f.get("outputs") or {}).items():
            if comp.get("verdict") == "fail":
                lines.append(f"- output `{name}`: {comp.get('note')} (worst "
                             f"{distance_text(comp.get('max_ulp')) if comp.get('max_ulp') is not None else distance_text(comp.get('max_code_diff'), 'code')}, "
                             f"first at {comp.get('first_mismatch')})")
        for line in f.get("expected_mismatch") or []:
            lines.append(f"- {line}")
        at = f.get("attribution") or {}
        if at:
            if at.get("first_stage"):
                lines.append(f"- first diverging stage: `{at['first_stage']}`" +
                             (f" ({at['stage_source']})" if at.get("stage_source") else ""))
            if at.get("detectors"):
                lines.append("- known library bug, named by its detector(s): " +
                             ", ".join(f"`{d}`" for d in at["detectors"]))
            lines.append(f"- likely cause: {at.get('cause')}" +
                         (" (reproduced bit for bit by the golden under that change)" if at.get("reproduced") else ""))
            for ev in at.get("scale_evidence") or []:
                lines.append(f"  - scale evidence: {ev}")
            if at.get("closest"):
                lines.append(f"  - closest: {at['closest']['cause']} ({at['closest']['mismatches_left']} element(s) "
                             "still differ)")
        if g["separating"]:
            lines.append("- fails only with " + "; ".join(g["separating"]))
        lines += [f"- repro: `{f.get('repro')}`", ""]
    return lines


def render(summary: dict, meta: dict) -> str:
    from . import meta_rows

    lines = ["# w8a8 conformance report", ""]
    from . import verdict as _verdict

    status, words = _verdict(summary, meta)
    lines += [f"**Result: {words}** (exit status {status}).", ""]
    rows, backends = meta_rows(meta)
    lines += [f"- {key}: `{value}`" for key, value in rows]
    lines += [f"- backend `{name}`: numerics `{num}` ({diffs})" for name, num, diffs in backends]
    from .terminal import gemm_lines

    lines += [f"- {line}" for line in gemm_lines(meta)]
    lines += ["", "Totals: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["totals"].items())), ""]
    lines += tolerance_section(summary, meta)
    lines += groups_section(summary)
    lines += matrix_section(summary, meta)
    skipped = meta.get("not_implemented", {})
    if any(skipped.values()):
        lines += ["", "Ops a backend does not implement (not run): " +
                  "; ".join(f"`{b}`: {', '.join(ops)}" for b, ops in skipped.items() if ops)]
    lines += outside_section(meta)
    lines += variants_section(summary)
    lines += details_section(summary)
    return "\n".join(lines) + "\n"


def variants_section(summary: dict) -> list[str]:
    """Per op, the kernel variants (tiling keys) the golden modelled and how many cases each."""
    from . import variant_rows

    rows = variant_rows(summary)
    if not rows:
        return []
    return ["", "## Kernel variants exercised", "", "| op | kernel variant | cases |", "|---|---|---:|"] + \
        [f"| `{op}` | `{v}` | {n} |" for op, v, n in rows]
