"""Terminal report (rich): a summary per backend, the ops that did not pass everywhere, the failures
grouped by cause (each with one repro line, printed unwrapped); the full matrix under ``verbose``.
Every table fits 80 columns; the reports (``report.md`` / ``report.html``) hold the details."""

from __future__ import annotations

from ..results import summarize
from .console import esc, print_command

WORST_NOTE = ("worst: the largest distance to the golden among the judged cases (ULP of the output dtype, "
              "integer codes, or inf/NaN); 0 = bit for bit")


def _status_counts(cell: dict) -> tuple[int, int, int, int]:
    from ..evaluate import BAD_STATUSES

    good = cell.get("pass", 0)               # tolerated is never counted as passed
    bad = sum(cell.get(s, 0) for s in BAD_STATUSES)
    other = sum(v for k, v in cell.items() if isinstance(v, int) and k not in ("pass", "tolerated", "worst")
                and k not in BAD_STATUSES)
    return good, cell.get("tolerated", 0), bad, other


def _backend_table(cells: dict):
    from rich.table import Table

    t = Table(title="w8a8 conformance: per backend", title_justify="left")
    for name, kw in (("backend", {"no_wrap": True, "overflow": "fold"}), ("ops", {"justify": "right"}),
                     ("passed", {"justify": "right"}), ("tolerated", {"justify": "right"}),
                     ("bad", {"justify": "right"}), ("other", {"justify": "right"})):
        t.add_column(name, **kw)
    for b in sorted(cells):
        tot = [0, 0, 0, 0]
        for cell in cells[b].values():
            for i, v in enumerate(_status_counts(cell)):
                tot[i] += v
        style = "bold red" if tot[2] else "green"
        t.add_row(esc(b), str(len(cells[b])), f"[{style}]{tot[0]}[/]", str(tot[1]), str(tot[2]), str(tot[3]))
    return t


BACKEND_NOTE = ("passed: within the comparison exactly (tolerated cases are not passes); bad: fail, error, crash, "
                "timeout; other: mistrusted, refused by both, unsupported, unspecified")


def _matrix_table(cells: dict, ops: list[str]):
    from rich.table import Table

    from . import cell_state

    style = {"good": "green", "tolerated": "yellow", "bad": "bold red", "empty": "dim"}
    t = Table(title="passed / judged per op (worst distance)", title_justify="left")
    t.add_column("op", no_wrap=True)
    backend_names = sorted(cells)
    for b in backend_names:
        t.add_column(esc(b), overflow="fold")
    for op in ops:
        row = [op]
        for b in backend_names:
            cell = cells[b].get(op)
            if cell is None:
                row.append("n/a")
                continue
            good, tolerated, bad, _ = _status_counts(cell)
            judged = good + tolerated + bad + cell.get("mistrusted", 0)
            tol = f" +{tolerated} tol." if tolerated else ""
            row.append(f"[{style[cell_state(cell)]}]{good}/{judged}{tol}[/] "
                       f"({esc(cell.get('worst_text', cell.get('worst', 0)))})")
        t.add_row(*row)
    return t


def gemm_lines(meta: dict) -> list[str]:
    """``GEMM: torch-cpu took vnni (AVX-512 VNNI, ...)``: one line per backend of the run that reports its int8
    GEMM path (the run's metadata, ``backends.<name>.gemm``)."""
    lines = []
    for name, info in (meta.get("backends") or {}).items():
        gemm = info.get("gemm") if isinstance(info, dict) else None
        if isinstance(gemm, dict) and gemm.get("path"):
            lines.append(f"GEMM: {name} took {gemm['path']} ({gemm.get('isa') or 'ISA not reported'})")
    return lines


def print_summary(records: list[dict], meta: dict, console=None, verbose: bool = False) -> dict:
    from . import cell_state
    from .grouping import groups

    from .console import make_console

    console = console or make_console()
    summary = summarize(records)
    cells = summary["cells"]
    console.print(_backend_table(cells))
    console.print(f"[dim]{BACKEND_NOTE}[/]")
    for gemm in gemm_lines(meta):
        console.print(gemm, markup=False, highlight=False, soft_wrap=True)
    from . import TOLERANCE_NOTE, tolerance_warnings
    from ..tolerance_strength import line

    weak = tolerance_warnings(summary, meta)
    if weak:
        console.print(f"[bold yellow]{len(weak)} {TOLERANCE_NOTE}[/]:")
        for row in weak[:10]:
            console.print(f"  [yellow]{esc(line(row))}[/]", soft_wrap=True)
        if len(weak) > 10:
            console.print(f"  ... and {len(weak) - 10} more in report.md / report.html / summary.json")
    ops = sorted({op for b in cells.values() for op in b})
    shown = ops if verbose else [op for op in ops if any(
        cells[b].get(op) is not None and cell_state(cells[b][op]) in ("bad", "tolerated") for b in cells)]
    if shown:
        console.print(_matrix_table(cells, shown))
        console.print(f"[dim]{WORST_NOTE}[/]")
    if not verbose and len(shown) < len(ops):
        console.print(f"{len(ops) - len(shown)} op(s) bit for bit or within bounds everywhere: the full matrix with "
                      f"-v, in report.md and report.html", highlight=False)
    found = groups(summary["failures"])
    if found:
        n = len(summary["failures"])
        console.print(f"[bold]failures by cause[/]: {len(found)} group(s), {n} case(s)")
    for i, g in enumerate(found[:20], 1):
        d = g.as_dict()
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(d["statuses"].items()))
        sep = "; ".join(f"fails only with {s}" for s in d["separating"])
        line = f"{i}. [red]{esc(statuses)}[/] {esc(d['backend'])} {esc(d['op'])} — stage {esc(d['stage'])}: {esc(d['cause'])}"
        line += f" (worst {esc(d['worst'])})" + (f"; {esc(sep)}" if sep else "")
        console.print(line, highlight=False, soft_wrap=True)   # one line per group: grep-able, copyable
        if d.get("repro"):
            print_command(console, d["repro"])
    if len(found) > 20:
        console.print(f"... and {len(found) - 20} more group(s) (see report.md)")
    from . import verdict as _verdict

    status, words = _verdict(summary, meta)
    summary["exit_status"], summary["verdict"] = status, words
    colour = "green" if status == 0 else "bold red"
    console.print(f"result: [{colour}]{esc(words)}[/]; " +
                  (", ".join(f"{esc(k)} {v}" for k, v in sorted(summary["totals"].items())) or "0 cases"))
    return summary
