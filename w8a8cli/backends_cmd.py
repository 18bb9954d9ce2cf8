"""``w8a8 backends``: every known backend, available or not and why, its numerics and its ops."""

from __future__ import annotations

import json

HELP = "list the backends: available or not (and why), declared numerics, ops"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of {name, spec, available, reason, numerics, numerics_differences, "
                             "device, ops, capabilities, in_default_runs, gemm} (gemm: the ISA and GEMM paths, where a backend "
                             "reports them: torch-cpu)")


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
        from rich.markup import escape
        from rich.table import Table
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
    table = Table(title="w8a8 backends", show_lines=True)
    for col in ("backend", "available", "numerics (differences from Ascend A2/A3)", "ops"):
        table.add_column(col, overflow="fold")
    for r in rows:
        state = "[green]yes[/]" if r["available"] else f"[red]no[/]: {escape(r['reason'])}"
        if r["available"] and not r["in_default_runs"]:
            state += " (runs when named)"
        diffs = r["numerics_differences"]
        num = (r["numerics"] or {}).get("name", "?") + (
            "\n" + "\n".join(f"{k}: {v[1]}" for k, v in diffs.items()) if diffs else "\n(identical)")
        table.add_row(escape(r["name"]), state, escape(num), f"{len(r['ops'])}: " + ", ".join(r["ops"]))
    Console().print(table)
    return 0
