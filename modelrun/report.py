"""``w8a8 run``'s outputs: the terminal tables (rich), ``run.json``, ``run.html`` with plots.

Files are written atomically (:func:`conformance.results.write_atomic`); the HTML page is
self-contained (plots inlined as base64 PNG through :mod:`conformance.plots`, the conformance
report's CSS).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from conformance import plots
from conformance.reports.html import CSS
from conformance.results import write_atomic


def _num(v, fmt="{:.1f}"):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return fmt.format(v)


def _match(b: dict) -> str:
    if b["bitwise"]:
        return "bitwise"
    return b["error"] or f"{b['equal']}/{b['elements']} equal, max {b['max_ulp']} ULP"


def module_rows(out: dict) -> list[tuple]:
    rows = []
    for m in out["modules"]:
        be = "; ".join(f"{n}: {_match(b)}" for n, b in m["backends"].items()) or "-"
        bound = "-" if m["bound_max"] is None else f"{m['bound_max']:.3g}"
        exceed = "-" if m["worst_ratio"] is None else (f"{m['exceed']} (x{float(m['worst_ratio']):.2f})" if m["exceed"]
                                                       else f"0 (x{float(m['worst_ratio']):.2f})")
        o = m["outliers"]
        outl = ", ".join(f"{c} (x{r:g})" for c, r in zip(o.get("channels", []), o.get("ratios", []))) or "-"
        if m["saturated"]:
            outl += f"; {m['saturated']} saturated"
        rows.append((m["name"], m["scheme"], str(m["tokens"]), _num(m["sqnr_db"]), f"{m['max_error']:.3g}", bound,
                     exceed, outl, be))
    return rows


def print_report(out: dict, console=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    if not console.is_terminal:
        console = Console(width=220)
    lg = out["logits"]
    console.print(escape(f"{out['checkpoint']} ({out['family']}, {out['model_dtype']}) against {out['reference']}: "
                         f"{out['sequences']} sequence(s), {out['tokens']} tokens; quantized modules on "
                         f"{out['backend']}" + (f" (layers {out['layers']})" if out["layers"] != "*" else "")))
    console.print(f"[bold]logits[/]: rel-L2 {lg['rel_l2']:.4g}, top-1 agreement {lg['top1']:.1%}, top-{lg['k']} "
                  f"agreement {lg['topk']:.1%} over {lg['positions']} positions")
    t = Table(title="quantized modules on their real activations (against the float module, same input)",
              title_justify="left")
    for col in ("module", "scheme", "rows", "SQNR dB", "max err", "bound", "beyond bound", "outlier channels",
                "backend vs golden"):
        t.add_column(col, overflow="fold")
    for row in module_rows(out):
        t.add_row(*(escape(c) for c in row))
    console.print(t)
    first = out.get("first_exceeding")
    console.print("[bold]first module beyond its bound[/]: " + ("none" if first is None else escape(
        f"{first['module']}: {first['elements']} elements, worst x{first['worst_ratio']:.2f} — {first['why']}")))
    if out["per_layer"]:
        lt = Table(title="one layer quantized at a time (the rest float)", title_justify="left")
        for col in ("layer", "logits rel-L2", "top-1", f"top-{lg['k']}"):
            lt.add_column(col)
        for r in out["per_layer"]:
            lt.add_row("none (checkpoint float tensors)" if r["layer"] is None else str(r["layer"]),
                       f"{r['rel_l2']:.4g}", f"{r['top1']:.1%}", f"{r['topk']:.1%}")
        console.print(lt)
    for r in out["routing"]:
        console.print(escape(f"routing {r['module']}: {r['changed']} of {r['tokens']} tokens changed expert set "
                             f"(agreement {r['agreement']:.1%}); causes: {causes_text(r)}"
                             + (f"; {r['note']}" if r["note"] else "")))
    for name, b in out["backend_summary"].items():
        console.print(escape(f"backend {name} vs golden on the real activations: {backend_text(b)}"))
    for name, why in out["unavailable_backends"].items():
        console.print(escape(f"backend {name}: not available here ({why})"))
    for f in out["findings"]:
        console.print(escape(f"[{f['severity']}] {f['where']}: {f['message']}"))
    if "dsv4" in out:
        from .deepseek_v4.run import print_dsv4
        print_dsv4(out, console)


def causes_text(routing: dict) -> str:
    """A routing row's causes in words: ``"tie 2, score 1"`` (the causes counted non-zero), or "-"."""
    return ", ".join(f"{k} {v}" for k, v in routing["causes"].items() if v) or "-"


def backend_text(b: dict) -> str:
    """A backend's agreement with the golden over every module, in words."""
    if b["bitwise"]:
        return "bit for bit on every module"
    return (f"{b['bitwise_modules']}/{b['modules']} modules bitwise, {b['equal']}/{b['elements']} elements equal, "
            f"max {b['max_ulp']} ULP" + (f"; {b['errors'][0]}" if b["errors"] else ""))


def _figures(out: dict) -> list[tuple[str, str]]:
    figs = []
    mods = out["modules"]
    if mods:
        fig, axes = plots.grid(2, 2, 7.5, 3.2)
        names = [m["name"].replace("model.layers.", "L") for m in mods]
        sq = [float(m["sqnr_db"]) if not isinstance(m["sqnr_db"], str) else 99.0 for m in mods]
        axes[0].bar(range(len(mods)), sq, color="#4a7ab7")
        axes[0].set_xticks(range(len(mods)))
        axes[0].set_xticklabels(names, rotation=90, fontsize=6)
        axes[0].set_ylabel("SQNR dB (real activations)", fontsize=8)
        ratios = [float(m["worst_ratio"]) if m["worst_ratio"] is not None else 0.0 for m in mods]
        axes[1].bar(range(len(mods)), ratios, color=["#d33" if r > 1 else "#5a5" for r in ratios])
        axes[1].axhline(1.0, color="black", linewidth=1)
        axes[1].set_xticks(range(len(mods)))
        axes[1].set_xticklabels(names, rotation=90, fontsize=6)
        axes[1].set_ylabel("max |err| / bound", fontsize=8)
        fig.tight_layout()
        figs.append(("per-module SQNR and error against the analytic bound", plots.png_base64(fig)))
    if out["per_layer"]:
        fig, axes = plots.grid(1, 1, 6, 3)
        labels = ["none" if r["layer"] is None else str(r["layer"]) for r in out["per_layer"]]
        axes[0].bar(labels, [r["rel_l2"] for r in out["per_layer"]], color="#b77a4a")
        axes[0].set_xlabel("layer quantized alone", fontsize=8)
        axes[0].set_ylabel("logits rel-L2", fontsize=8)
        fig.tight_layout()
        figs.append(("logits distance with one layer quantized at a time", plots.png_base64(fig)))
    return figs


def render_html(out: dict) -> str:
    e = html.escape
    lg = out["logits"]
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>w8a8 run</title>",
             f"<style>{CSS}</style></head><body><h1>w8a8 run</h1>",
             f"<p><code>{e(out['checkpoint'])}</code> ({e(out['family'])}, {e(out['model_dtype'])}) against "
             f"<code>{e(out['reference'])}</code>; {out['sequences']} sequence(s), {out['tokens']} tokens; quantized "
             f"modules on <code>{e(out['backend'])}</code>.</p>",
             f"<p id='logits'><b>Logits</b>: rel-L2 {lg['rel_l2']:.4g}, top-1 agreement {lg['top1']:.1%}, "
             f"top-{lg['k']} agreement {lg['topk']:.1%}.</p>",
             "<h2>Quantized modules on their real activations</h2><table class='matrix' id='modules'><thead><tr>"]
    cols = ("module", "scheme", "rows", "SQNR dB", "max err", "bound", "beyond bound", "outlier channels",
            "backend vs golden")
    parts.append("".join(f"<th>{c}</th>" for c in cols) + "</tr></thead><tbody>")
    for row in module_rows(out):
        bad = row[6] not in ("-",) and not row[6].startswith("0 ")
        parts.append("<tr>" + "".join(f"<td class='{'bad' if bad and i == 6 else ''}'>{e(c)}</td>"
                                      for i, c in enumerate(row)) + "</tr>")
    parts.append("</tbody></table>")
    first = out.get("first_exceeding")
    parts.append("<p><b>First module beyond its bound</b>: " + ("none" if first is None else
                 e(f"{first['module']} ({first['elements']} elements, worst x{first['worst_ratio']:.2f}): {first['why']}"))
                 + "</p>")
    if out["routing"]:
        parts.append("<h2>MoE routing</h2><ul>")
        for r in out["routing"]:
            parts.append(f"<li>{e(r['module'])}: {r['changed']} of {r['tokens']} tokens changed expert set "
                         f"(agreement {r['agreement']:.1%}); causes: {e(causes_text(r))}"
                         f"{(' — ' + e(r['note'])) if r['note'] else ''}</li>")
        parts.append("</ul>")
    parts.append("<h2>Backends against the golden (real activations)</h2><ul>")
    for name, b in out["backend_summary"].items():
        parts.append(f"<li>{e(name)}: {e(backend_text(b))}</li>")
    for name, why in out.get("unavailable_backends", {}).items():
        parts.append(f"<li>{e(name)}: not available here ({e(why)})</li>")
    if not out["backend_summary"] and not out.get("unavailable_backends"):
        parts.append("<li>only the golden ran (add <code>--backend torch-cpu</code> to compare a backend)</li>")
    parts.append("</ul><h2>Plots</h2>")
    for title, b64 in _figures(out):
        parts.append(f"<figure><img class='plot' alt='{e(title)}' src='data:image/png;base64,{b64}'>"
                     f"<figcaption>{e(title)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(out: dict, folder) -> dict[str, Path]:
    """``run.json`` and ``run.html`` into ``folder`` (created), atomically; their paths."""
    folder = Path(folder)
    paths = {"json": folder / "run.json", "html": folder / "run.html"}
    write_atomic(paths["json"], json.dumps(out, indent=2, default=str))
    write_atomic(paths["html"], render_html(out))
    return paths
