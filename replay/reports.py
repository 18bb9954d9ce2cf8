"""Replay reports from ``results.jsonl``: a summary (JSON), Markdown, JUnit XML and one self-contained HTML page.

The page has the step's quant calls as a timeline (one box per call in execution order, coloured by
verdict, the first divergence outlined), a distance plot per call, the verdict table next to what
msprobe's criteria would have said, and every divergence with its stage, cause, first differing
index, feeding calls and repro line. Files are written atomically.
"""

from __future__ import annotations

import html as _html
import json
from collections import Counter, defaultdict
from pathlib import Path

from . import engine
from .runner import BAD

FILES = {"markdown": "report.md", "json": "summary.json", "html": "report.html", "junit": "report.xml"}
GOOD = ("agree-bitwise", "agree-tolerance", "crc-match", "stats-consistent", "mistrusted")
COLORS = {"agree-bitwise": "#3a9d5d", "crc-match": "#3a9d5d", "agree-tolerance": "#9ccc65",
          "stats-consistent": "#b5d99c", "mistrusted": "#bdbdbd", "missing-data": "#f0ad4e",
          "not-replayable": "#e0e0e0", "disagree": "#d9534f", "crc-mismatch": "#d9534f",
          "stats-inconsistent": "#d9534f"}


BY_DESIGN = ("not saved (statistics dump", "empty tensor (nothing saved)", "NZ (statistics null)",
             "has no NumPy equivalent")
"""Reasons a tensor is absent that are the dump's configuration or msprobe's documented behaviour, not a damaged
or lost file (:meth:`replay.dump.TensorLoader.reason_absent`)."""


def not_saved_by_design(r: dict) -> bool:
    """A missing-data call whose absent tensors were never saved (a statistics/md5 dump, an NZ weight): it is not
    judged, and that is no disagreement. A refused, unreadable, absent or inconsistent file is a problem."""
    missing = r.get("missing") or []
    return r.get("kind") == "replay" and bool(missing) and all(any(b in m for b in BY_DESIGN) for m in missing)


def summarize(records: list[dict]) -> dict:
    """Counts, the quant calls per dump in order, the first divergence per dump, and the exit status
    (0: no call disagrees and every saved file loaded — calls whose tensors the dump never saved are listed in
    ``not_saved``, not failed; 1: a call disagrees, or a saved file was refused, unreadable or missing, or the
    dump is cut short)."""
    calls = [r for r in records if r.get("kind") == "replay"]
    quant = [r for r in calls if r.get("verdict") != "not-replayable" or r.get("quant_op")]
    by_dump: dict[str, list[dict]] = defaultdict(list)
    for r in quant:
        by_dump[r["params"]["dump"]].append(r)
    first = {}
    for dump, rs in by_dump.items():
        rs.sort(key=lambda r: r["params"]["index"])
        f = next((r for r in rs if r["verdict"] in BAD), None)
        if f is not None:
            first[dump] = f
    counts = Counter(r["verdict"] for r in records)
    per_op: dict = defaultdict(Counter)
    for r in quant:
        per_op[r["op"]][r["verdict"]] += 1
    problems = [r for r in records if r.get("kind") == "replay-dump"]
    unsaved = [r for r in records if r.get("verdict") == "missing-data" and not_saved_by_design(r)]
    bad = [r for r in records if r.get("verdict") in BAD or (r.get("verdict") == "missing-data" and
                                                             not not_saved_by_design(r))]
    return {"counts": dict(counts), "per_op": {k: dict(v) for k, v in sorted(per_op.items())},
            "judged": sum(1 for r in quant if r["verdict"] != "not-replayable"), "quant_calls": len(quant),
            "not_replayable": [(r["name"], r.get("reason")) for r in calls if r["verdict"] == "not-replayable"],
            "first_divergence": first, "dump_problems": problems, "timeline": dict(by_dump),
            "ok": not bad, "exit_status": 0 if not bad else 1,
            "not_saved": [r["name"] for r in unsaved],
            "stricter": [r for r in quant if r.get("stricter")]}


def headline(summary: dict) -> str:
    """The result in words, no more than the records show: a divergence, missing or damaged data, and the calls
    that were not judged because the dump never saved their tensors."""
    counts = summary["counts"]
    bad = sum(counts.get(v, 0) for v in BAD)
    unsaved = len(summary.get("not_saved") or [])
    parts = []
    if bad:
        parts.append(f"DIVERGENCE ({bad} call(s) disagree)")
    if not summary["ok"] and counts.get("missing-data", 0) > unsaved:
        parts.append("MISSING OR DAMAGED DATA")
    if not parts:
        parts.append("no judged call disagrees with the golden" if summary["judged"] else "no call was judged")
    if unsaved:
        parts.append(f"{unsaved} call(s) not judged: the dump saved no tensors for them (a statistics dump; "
                     "--inputs gives them from another dump)")
    return "; ".join(parts)


def _first_line(r: dict, md: bool = True) -> str:
    at = r.get("attribution") or {}
    fm = r.get("first_mismatch") or {}
    c, b = ("`", "**") if md else ("", "")
    parts = [f"{c}{r['name']}{c} ({r['op']})", f"verdict {b}{r['verdict']}{b}"]
    if r.get("module"):
        parts.append(f"module {c}{r['module']}{c}")
    if fm:
        parts.append(f"output {c}{fm.get('output')}{c} first differs at {fm.get('index')}")
    if at.get("first_stage"):
        parts.append(f"stage {c}{at['first_stage']}{c}")
    if at.get("cause"):
        parts.append(f"cause: {at['cause']}" + (" (reproduced bit for bit)" if at.get("reproduced") else ""))
    return "; ".join(parts)


def _fed_by(r: dict) -> list[str]:
    return [f"{e['input']} <- {e['from']}.{e['output']}" for e in r.get("dataflow") or [] if e.get("from")]


def _divergence_details(r: dict) -> list[tuple[str, str]]:
    """(label, text) lines of a first divergence: its stack, the calls that fed it, its repro."""
    out = [("stack", s.strip()[:200]) for s in r.get("stack") or []]
    out += [("fed by", f) for f in _fed_by(r)]
    return out + ([("repro", r["repro"])] if r.get("repro") else [])


def _annotations(r: dict) -> list[str]:
    """Lines under a call: inferred arguments, inputs taken from the checkpoint or another dump, notes."""
    out = [f"kernel: {r['variant']}"] if r.get("variant") else []
    out += list(r.get("inferred") or [])
    out += [f"{where}: {src}" for where, src in (r.get("inputs") or {}).items() if src != "dump file"]
    return out + list(r.get("notes") or [])


def _worst_distance(r: dict):
    vals = []
    for o in (r.get("outputs") or {}).values():
        for k in ("max_ulp", "max_code_diff"):
            if isinstance(o.get(k), int):
                vals.append(o[k])
    return max(vals) if vals else None


def markdown(summary: dict, meta: dict) -> str:
    lines = ["# w8a8 replay report", ""]
    lines.append(f"**Result: {headline(summary)}**"
                 f" (exit status {summary['exit_status']}).")
    lines += ["", *[f"- {k}: `{v}`" for k, v in meta.items() if k in ("dump", "platform", "numerics", "mode", "date",
                                                                       "command", "tolerances", "checkpoint")]]
    lines += ["", "Verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["counts"].items())), ""]
    if meta.get("variants"):
        lines += [f"Kernel variants: {meta['variants']}.", ""]
    for p in summary["dump_problems"]:
        lines.append(f"- **{p.get('rank_label', '')} {p['name']}**: {p['note']}")
    if summary["first_divergence"]:
        lines += ["", "## First divergence", ""]
        for dump, r in summary["first_divergence"].items():
            lines.append(f"- `{dump}`: {_first_line(r)}")
            lines += [f"  - {label}: `{text}`" for label, text in _divergence_details(r)]
            if r.get("repro_python"):
                lines += ["", "```python", r["repro_python"], "```"]
    lines += ["", "## Calls", "", "| # | call | module | verdict | worst ULP/code | msprobe's criteria | note |",
              "|---|---|---|---|---|---|---|"]
    for dump, rs in summary["timeline"].items():
        for r in rs:
            ms = (r.get("msprobe") or {}).get("verdict", "-")
            stricter = " (golden stricter)" if r.get("stricter") else ""
            note = (r.get("note") or r.get("reason") or "").replace("|", "\\|")[:160]
            chain = f"; chain: {r['chain'].get('verdict')}" if isinstance(r.get("chain"), dict) and r["chain"].get("verdict") else ""
            lines.append(f"| {r['params']['index']} | `{r['name']}` | `{r.get('module') or ''}` | {r['verdict']}{chain} | "
                         f"{_worst_distance(r) if _worst_distance(r) is not None else '-'} | {ms}{stricter} | {note} |")
            for inf in _annotations(r):
                lines.append(f"| | | | | | | {inf} |")
    skipped = Counter(reason for _, reason in summary["not_replayable"])
    if skipped:
        lines += ["", "## Not replayable", ""] + [f"- {n} × {reason}" for reason, n in skipped.most_common()]
    lines += ["", "msprobe's criteria: its acc_check standards with the golden as the bench (int8 codes of "
              "npu_dynamic_quant pass at +-1, floats at max abs err < 0.001 or cosine/relative-error shares); "
              "msprobe itself has no bench for the quant ops and would not have judged them.", ""]
    return "\n".join(lines) + "\n"


def _e(v) -> str:
    return _html.escape(str(v))


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d1d1f;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{font-size:16px;padding:8px 12px;display:inline-block;border-radius:6px}.ok{background:#dff5e1}.notok{background:#fbd9d7}
.timeline{display:flex;flex-wrap:wrap;gap:3px;margin:8px 0}
.call{width:26px;height:34px;border-radius:3px;font-size:9px;color:#fff;display:flex;align-items:flex-end;justify-content:center}
.call.first{outline:3px solid #000;outline-offset:1px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
tr.first td{background:#fbd9d7;font-weight:600}
code,pre{background:#f4f4f6;border-radius:4px;padding:1px 4px;font-size:12px}pre{padding:8px;white-space:pre-wrap;overflow-wrap:anywhere}
li code,p code{overflow-wrap:anywhere}table{display:block;max-width:100%;overflow-x:auto}
.div{border-left:4px solid #d33;padding:4px 12px;margin:12px 0;background:#fffafa}
.legend span{display:inline-block;padding:2px 6px;margin-right:4px;border-radius:3px;color:#fff;font-size:12px}
"""


def _plot(summary: dict) -> str | None:
    rows = [r for rs in summary["timeline"].values() for r in rs]
    if not rows:
        return None
    try:
        from conformance.plots import grid

        fig, (ax,) = grid(1, 1, min(16.0, 2 + 0.35 * len(rows)), 2.8)
        xs = list(range(len(rows)))
        ys = [(_worst_distance(r) or 0) + 1 for r in rows]
        chained = [isinstance(r.get("chain"), dict) and "outputs" in r["chain"] for r in rows]
        width = 0.4 if any(chained) else 0.8
        ax.bar([x - (width / 2 if any(chained) else 0) for x in xs], ys, width=width,
               color=[COLORS.get(r["verdict"], "#999") for r in rows], label="isolated")
        if any(chained):
            cy = [(_worst_distance(r["chain"]) or 0) + 1 if c else 1 for r, c in zip(rows, chained)]
            ax.bar([x + width / 2 for x in xs], cy, width=width, hatch="//", edgecolor="#444",
                   color=[COLORS.get(r["chain"].get("verdict"), "#eee") if c else "#eee" for r, c in zip(rows, chained)],
                   label="chained")
            ax.legend(fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("1 + worst ULP / code distance", fontsize=8)
        ax.set_xticks(xs)
        ax.set_xticklabels([r["name"].replace("NPU.npu_", "").replace(".forward", "") for r in rows], rotation=60,
                           fontsize=7, ha="right")
        ax.set_title("quant calls in execution order: distance of the device output to the golden", fontsize=9)
        return engine.png_base64(fig)
    except Exception:  # noqa: BLE001 - a report without the plot is still a report
        return None


def html(summary: dict, meta: dict) -> str:
    ok = summary["ok"]
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>w8a8 replay</title>",
           f"<style>{CSS}</style></head><body><h1>w8a8 replay report</h1>",
           f"<div class='verdict {'ok' if ok else 'notok'}' id='verdict'>"
           f"{_e(headline(summary))}"
           f" (exit status {summary['exit_status']})</div>",
           "<p>" + " · ".join(f"{_e(k)}: <code>{_e(v)}</code>" for k, v in meta.items()
                              if k in ("dump", "platform", "numerics", "mode", "date", "tolerances", "checkpoint")) + "</p>"]
    if meta.get("variants"):
        out.append(f"<p>Kernel variants: {_e(meta['variants'])}.</p>")
    out.append("<p class='legend'>" + "".join(f"<span style='background:{c}'>{_e(v)}</span>" for v, c in COLORS.items())
               + "</p>")
    for p in summary["dump_problems"]:
        out.append(f"<p class='div'><b>{_e(p.get('rank_label', ''))} {_e(p['name'])}</b>: {_e(p['note'])}</p>")
    for dump, rs in summary["timeline"].items():
        first = summary["first_divergence"].get(dump)
        out.append(f"<h2>Timeline {_e(dump)}</h2><div class='timeline' id='timeline'>")
        for r in rs:
            cls = "call first" if first is not None and r is first else "call"
            out.append(f"<div class='{cls}' style='background:{COLORS.get(r['verdict'], '#999')}' "
                       f"title='{_e(r['name'])}: {_e(r['verdict'])}'>{r['params']['index']}</div>")
        out.append("</div>")
    img = _plot(summary)
    if img:
        out.append(f"<img alt='distance per call' src='data:image/png;base64,{img}' style='max-width:100%'>")
    if summary["first_divergence"]:
        out.append("<h2>First divergence</h2>")
        for dump, r in summary["first_divergence"].items():
            out.append(f"<div class='div' id='first-divergence'><p><b>{_e(dump)}</b>: {_e(_first_line(r, md=False))}</p><ul>")
            out += [f"<li>{_e(label)}: <code>{_e(text)}</code></li>" for label, text in _divergence_details(r)]
            out.append("</ul>")
            if r.get("repro_python"):
                out.append(f"<pre>{_e(r['repro_python'])}</pre>")
            out.append("</div>")
    out.append("<h2>Calls</h2><table id='calls'><thead><tr><th>#</th><th>call</th><th>module</th><th>verdict</th>"
               "<th>chained</th><th>worst ULP/code</th><th>msprobe's criteria</th><th>note</th></tr></thead><tbody>")
    for dump, rs in summary["timeline"].items():
        first = summary["first_divergence"].get(dump)
        for r in rs:
            ms = r.get("msprobe") or {}
            chain = r.get("chain") if isinstance(r.get("chain"), dict) else {}
            extra = "".join(f"<br><i>{_e(i)}</i>" for i in _annotations(r))
            out.append(f"<tr class='{'first' if r is first else ''}'><td>{r['params']['index']}</td>"
                       f"<td><code>{_e(r['name'])}</code></td><td><code>{_e(r.get('module') or '')}</code></td>"
                       f"<td style='color:{COLORS.get(r['verdict'], '#000')}'>{_e(r['verdict'])}</td>"
                       f"<td>{_e(chain.get('verdict') or '')}</td><td>{_e(_worst_distance(r) if _worst_distance(r) is not None else '-')}</td>"
                       f"<td>{_e(ms.get('verdict', '-'))}{' (golden stricter)' if r.get('stricter') else ''}</td>"
                       f"<td>{_e((r.get('note') or r.get('reason') or '')[:300])}{extra}</td></tr>")
    out.append("</tbody></table>")
    skipped = Counter(reason for _, reason in summary["not_replayable"])
    if skipped:
        out.append("<h2>Not replayable</h2><ul>" + "".join(f"<li>{n} × {_e(reason)}</li>"
                                                            for reason, n in skipped.most_common()) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out)


def json_summary(summary: dict, meta: dict) -> dict:
    keep = ("name", "op", "verdict", "module", "first_mismatch", "attribution", "repro", "repro_python", "case", "note")
    return {"meta": meta, "ok": summary["ok"], "exit_status": summary["exit_status"], "counts": summary["counts"],
            "per_op": summary["per_op"], "judged": summary["judged"],
            "first_divergence": {d: {k: r.get(k) for k in keep} for d, r in summary["first_divergence"].items()},
            "dump_problems": summary["dump_problems"], "not_saved": summary["not_saved"],
            "stricter_than_msprobe": [r["name"] for r in summary["stricter"]]}


def write_all(out_dir, records: list[dict], meta: dict) -> tuple[dict, dict[str, Path]]:
    out = Path(out_dir)
    summary = summarize(records)
    paths = {k: out / v for k, v in FILES.items()}
    engine.write_atomic(paths["markdown"], markdown(summary, meta))
    engine.write_atomic(paths["json"], json.dumps(json_summary(summary, meta), indent=2, default=str))
    engine.write_atomic(paths["html"], html(summary, meta))
    engine.write_atomic(paths["junit"], engine.junit(records, meta))
    return summary, paths
