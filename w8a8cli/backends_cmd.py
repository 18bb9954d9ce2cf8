"""``w8a8 backends``: every known backend, available or not and why, its numerics and its ops."""

from __future__ import annotations

import json

HELP = "list the backends: available or not (and why), declared numerics, ops"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of {name, spec, available, reason, numerics, numerics_differences, "
                             "device, ops, capabilities, in_default_runs, gemm} (gemm: the ISA and GEMM paths, where a backend "
                             "reports them: torch-cpu)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also each backend's numerics differences, GEMM paths and op list")


def run(args) -> int:
    import backends

    rows = backends.describe_all()
    if args.json:
        print(json.dumps([{"name": r["name"], "spec": r["spec"], "available": r["available"], "reason": r["reason"],
                           "numerics": r["numerics"], "numerics_differences": r["numerics_differences"],
                           "device": r["device"], "ops": r["ops"], "capabilities": r["capabilities"],
                           "in_default_runs": r["in_default_runs"], "gemm": r.get("gemm")} for r in rows], indent=2))
        return 0
    try:
        from rich.console import Console
    except ModuleNotFoundError:  # base install: plain text
        for r in rows:
            state = "available" if r["available"] else f"unavailable: {r['reason']}"
            if r["available"] and not r["in_default_runs"]:
                state += " (runs when named)"
            print(f"{r['name']}: {state}")
            print(f"  numerics: {r['numerics'] and r['numerics']['name']}; differs from Ascend in: "
                  f"{', '.join(r['numerics_differences']) or 'nothing'}")
            print(f"  ops ({len(r['ops'])}): {', '.join(r['ops'])}")
        return 0
    _print_table(Console(), rows, verbose=args.verbose)
    return 0


def gemm_cell(gemm: dict | None) -> str:
    """The GEMM path a backend takes here (torch-cpu: ``amx``, ``vnni``, ``qlinear``, ``int_mm``), ``-``
    where it does not say."""
    return (gemm or {}).get("path") or "-"


def _print_table(console, rows: list[dict], verbose: bool = False) -> None:
    """One row per backend at 80 columns (name, numerics record and how many fields differ from Ascend's,
    op count, GEMM path, available or not; "when named": not in a default run); why a backend is not
    available on a line of its own under the table; ``verbose``: each backend's
    numerics differences, GEMM paths with why the others are not taken, and op list, under the table."""
    from conformance.reports.console import esc, narrow_table

    table = narrow_table(["backend", "numerics", "ops", "GEMM", "available"], wrap="available",
                         title="w8a8 backends")
    table.columns[2].justify = "right"
    for r in rows:
        state = "[green]yes[/]" if r["available"] else "[red]no[/] (why: below)"
        if r["available"] and not r["in_default_runs"]:
            state += ", when named"
        diffs = r["numerics_differences"]
        num = (r["numerics"] or {}).get("name", "?") + (f" ({len(diffs)} diff.)" if diffs else "")
        table.add_row(esc(r["name"]), esc(num), str(len(r["ops"])), esc(gemm_cell(r.get("gemm"))), state)
    console.print(table)
    for r in rows:
        if not r["available"]:
            console.print(f"{esc(r['name'])} is not available: {esc(r['reason'])}", soft_wrap=True, highlight=False)
    if not verbose:
        console.print("[dim]diff.: fields of the numerics record that differ from Ascend A2/A3's; GEMM: the int8 "
                      "GEMM path taken on this CPU; the differences, GEMM paths and op lists: -v or --json[/]")
        return
    for r in rows:
        console.print(f"\n[bold]{esc(r['name'])}[/]", highlight=False)
        for k, v in r["numerics_differences"].items():
            console.print(f"  numerics {esc(k)}: {esc(v[1])}", highlight=False)
        gemm = r.get("gemm")
        if gemm:
            console.print(f"  GEMM: {esc(gemm.get('path'))} on {esc(gemm.get('isa'))}", highlight=False)
            for path, why in (gemm.get("paths") or {}).items():
                console.print(f"    {esc(path)}: {esc(why or 'available')}", highlight=False)
        console.print(f"  ops ({len(r['ops'])}): {esc(', '.join(r['ops']))}", highlight=False)
