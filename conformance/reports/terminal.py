"""Terminal report (rich): the agreement matrix and the failures, each with its cause and repro."""

from __future__ import annotations

from ..results import summarize


def print_summary(records: list[dict], meta: dict, console=None) -> dict:
    from rich.console import Console
    from rich.table import Table

    from . import cell_state, cell_text

    console = console or Console()
    summary = summarize(records)
    cells = summary["cells"]
    backend_names = sorted(cells)
    ops = sorted({op for b in cells.values() for op in b})
    table = Table(title="w8a8 conformance: passed / judged [worst ULP or code distance]")
    table.add_column("op")
    for b in backend_names:
        table.add_column(b)
    style = {"good": "green", "tolerated": "yellow", "bad": "bold red", "empty": "dim"}
    for op in ops:
        row = [op]
        for b in backend_names:
            cell = cells[b].get(op)
            row.append("n/a" if cell is None else f"[{style[cell_state(cell)]}]{cell_text(cell)} [{cell.get('worst', 0)}]")
        table.add_row(*row)
    console.print(table)
    for f in summary["failures"][:20]:
        at = f.get("attribution") or {}
        cause = f" — stage {at.get('first_stage')}: {at.get('cause')}" if at else ""
        console.print(f"[red]{f['status']}[/] {f['backend']} {f['op']} {f['case_id']}: {f.get('note') or ''}{cause}")
        console.print(f"   repro: {f.get('repro')}", markup=False)
    if len(summary["failures"]) > 20:
        console.print(f"... and {len(summary['failures']) - 20} more (see the reports)")
    from rich.markup import escape

    from . import verdict as _verdict

    status, words = _verdict(summary, meta)
    summary["exit_status"], summary["verdict"] = status, words
    colour = "green" if status == 0 else "bold red"
    console.print(f"result: [{colour}]{escape(words)}[/]; " +
                  (", ".join(f"{k} {v}" for k, v in sorted(summary["totals"].items())) or "0 cases"))
    return summary
