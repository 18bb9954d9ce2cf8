"""One self-contained HTML page: the scoreboard (op x backend run, each column headed by its declared
numerics and their differences from Ascend), the failures grouped by cause, error histograms
(matplotlib, inlined as base64 PNG), and the representative failure of each group with its
attribution and repro command. No external resources: the page renders offline. Several runs'
results can be combined into one page (``w8a8 conformance --report-only --combine RUN ...``)."""

from __future__ import annotations

import html as _html

from .. import plots

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d1d1f;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table.matrix{border-collapse:collapse;font-size:13px}
table.matrix th,table.matrix td{border:1px solid #ccc;padding:4px 8px;text-align:left}
td.good{background:#dff5e1}td.tolerated{background:#fff4d6}td.bad{background:#fbd9d7;font-weight:600}
td.empty{background:#eee;color:#777}td.na{background:#f6f6f6;color:#999}
th.num{font-weight:normal;font-size:11px;max-width:220px}
.verdict{font-size:16px;padding:8px 12px;display:inline-block;border-radius:6px}
.ok{background:#dff5e1}.notok{background:#fbd9d7}
code,pre{background:#f4f4f6;border-radius:4px;padding:1px 4px;font-size:12px}
pre{padding:8px;overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere}
dd code,li code,p code{overflow-wrap:anywhere}td code{white-space:nowrap}
table{display:block;max-width:100%;overflow-x:auto}
svg.plot{max-width:100%;height:auto;display:block}
p.bitwise{font-size:13px}
.failure{border-left:4px solid #d33;padding:4px 12px;margin:12px 0;background:#fffafa}
img{max-width:100%}
dl.meta dt{font-weight:600;float:left;clear:left;width:140px}dl.meta dd{margin-left:150px}
dl.meta::after{content:'';display:table;clear:both}
@media (max-width:600px){dl.meta dt{float:none;width:auto}dl.meta dd{margin-left:12px}}
"""


def _e(text) -> str:
    return _html.escape(str(text))


def tolerance_section(summary: dict, meta: dict) -> list[str]:
    """The tolerance entries weaker than their basis (:mod:`conformance.tolerance_strength`), when any."""
    from . import TOLERANCE_NOTE, tolerance_warnings

    weak = tolerance_warnings(summary, meta)
    if not weak:
        return []
    rows = "".join(f"<tr><td>{_e(r['backend'])}</td><td><code>{_e(r['op'])}</code></td><td>{_e(r['output'])}</td>"
                   f"<td>{_e(r['dtype'])}</td><td>{_e(r['allows'])}</td><td>{_e(r['basis'])}</td><td>{_e(r['why'])}</td>"
                   "</tr>" for r in weak)
    return [f"<h2 id='weak-tolerances'>Weak tolerances</h2><p class='verdict notok'>{len(weak)} {_e(TOLERANCE_NOTE)}.</p>",
            "<table class='matrix'><thead><tr><th>backend</th><th>op</th><th>output</th><th>dtype</th><th>allows</th>"
            f"<th>basis</th><th>why flagged</th></tr></thead><tbody>{rows}</tbody></table>"]


def scoreboard_section(summary: dict, meta: dict) -> list[str]:
    """The scoreboard: one column per backend run (numpy, torch-cpu, onnxruntime, torchao, ...), headed by its
    declared numerics and how they differ from Ascend's; one row per op."""
    from . import cell_state, cell_text, numerics_text, outside_of, outside_text

    cells = summary["cells"]
    backend_names = sorted(cells)
    ops = sorted({op for b in cells.values() for op in b})
    info = meta.get("backends", {})
    out = ["<h2>Scoreboard</h2><p>Passed / judged cases per op and backend run, the worst distance to the golden "
           "under the backend's declared numerics (ULP of the output dtype, codes, or inf/NaN), and the draws "
           "outside the backend's capabilities. The header gives each column's declared record and how it "
           "differs from the Ascend record.</p>",
           "<table class='matrix' id='matrix'><thead><tr><th>op</th>" +
           "".join(f"<th>{_e(b)}</th>" for b in backend_names) + "</tr>",
           "<tr><th>numerics</th>" + "".join(
               f"<th class='num'><code>{_e(info.get(b, {}).get('numerics', '?'))}</code><br>"
               f"<small>{_e(numerics_text(info[b]) if b in info else 'not recorded')}</small></th>"
               for b in backend_names) + "</tr>"]
    clean = {b: sum(1 for c in cells[b].values() if cell_state(c) == "good") for b in backend_names}
    out.append("<tr><th>ops passing (tolerated: not passed)</th>" +
               "".join(f"<th>{clean[b]} / {len(cells[b])}</th>" for b in backend_names)
               + "</tr></thead><tbody>")
    for op in ops:
        row = [f"<tr><td><code>{_e(op)}</code></td>"]
        for b in backend_names:
            cell = cells[b].get(op)
            if cell is None:
                row.append("<td class='na'>n/a</td>")
                continue
            stats = outside_of(meta, b, op)
            title = f" title='{_e(outside_text(stats))}'" if stats else ""
            row.append(f"<td class='{cell_state(cell)}'{title}>{_e(cell_text(cell, stats))} "
                       f"[{_e(cell.get('worst_text', '0'))}]</td>")
        out.append("".join(row) + "</tr>")
    out.append("</tbody></table>")
    return out


def groups_section(summary: dict) -> list[str]:
    """Failures grouped by (backend, op, stage, cause), with one repro each."""
    groups = summary.get("groups") or []
    out = [f"<h2>Failures by cause ({len(groups)} group(s), {len(summary['failures'])} case(s))</h2>"]
    if not groups:
        return out + ["<p>None.</p>"]
    out.append("<table class='matrix' id='groups'><thead><tr><th>backend</th><th>op</th><th>stage</th><th>cause</th>"
               "<th>cases</th><th>worst</th><th>separates pass from fail</th><th>repro</th></tr></thead><tbody>")
    for g in groups:
        sep = "; ".join(f"fails only with {x}" for x in g["separating"]) or "-"
        out.append(f"<tr><td>{_e(g['backend'])}</td><td><code>{_e(g['op'])}</code></td><td>{_e(g['stage'])}</td>"
                   f"<td>{_e(g['cause'])}</td><td>{g['count']}</td><td>{_e(g['worst'])}</td><td>{_e(sep)}</td>"
                   f"<td><pre>{_e(g['repro'])}</pre></td></tr>")
    out.append("</tbody></table>")
    return out


def _single_bin_text(single: dict, what: str) -> str:
    """The panels a histogram figure leaves out, as a sentence: ``{name: bin}`` (bin None: nothing compared)."""
    if not single:
        return ""
    by_bin: dict = {}
    for name, b in single.items():
        by_bin.setdefault(b, []).append(name)
    parts = []
    for b, names in sorted(by_bin.items(), key=lambda kv: str(kv[0])):
        listed = ", ".join(f"<code>{_e(n)}</code>" for n in names)
        if b is None:
            parts.append(f"nothing compared: {listed}")
        elif str(b) == "0":
            parts.append(f"bit for bit on every compared element: {listed}")
        else:
            parts.append(f"every element at distance {_e(b)}: {listed}")
        parts[-1] = f"{len(names)} {what}(s) " + parts[-1]
    return "<p class='bitwise'>" + "; ".join(parts) + " (one bar each: no histogram drawn).</p>"


def histograms_section(summary: dict, meta: dict) -> list[str]:
    """Per backend run, the distance histograms of the ops whose elements fall in two or more distance bins;
    the others in one sentence."""
    cells = summary["cells"]
    out = ["<h2>Error histograms</h2>"]
    for b in sorted(cells):
        drawn, single = plots.split_by_bins({op: c.get("hist") or {} for op, c in cells[b].items()})
        fig = plots.error_histograms(cells[b], b, drawn)
        out.append(f"<figure><figcaption><b>{_e(b)}</b></figcaption>")
        if fig is not None:
            out.append(plots.svg_inline(fig, f"error histograms of {b}"))
        out.append(_single_bin_text(single, "op") + "</figure>")
    for title, b64 in meta.get("extra_plots", []):
        out.append(f"<figure><img class='plot' alt='{_e(title)}' src='data:image/png;base64,{b64}'>"
                   f"<figcaption>{_e(title)}</figcaption></figure>")
    return out


def details_section(summary: dict) -> list[str]:
    """The representative failure of each group, with its attribution."""
    from ..results import distance_text

    by_id = {(f["backend"], f["case_id"]): f for f in summary["failures"]}
    out = ["<h2>Representative failures</h2>"]
    for g in summary.get("groups") or []:
        f = by_id.get((g["backend"], g["case_id"]))
        if f is None:
            continue
        out.append("<div class='failure'>")
        out.append(f"<h3><code>{_e(f['backend'])}</code> / <code>{_e(f['op'])}</code> / "
                   f"<code>{_e(f['case_id'])}</code> — {_e(f['status'])} ({g['count']} case(s) like it)</h3><ul>")
        if f.get("note"):
            out.append(f"<li>{_e(f['note'])}</li>")
        for name, comp in (f.get("outputs") or {}).items():
            if comp.get("verdict") == "fail":
                worst = distance_text(comp.get("max_ulp")) if comp.get("max_ulp") is not None else \
                    distance_text(comp.get("max_code_diff"), "code")
                out.append(f"<li>output <code>{_e(name)}</code>: {_e(comp.get('note'))} (worst {_e(worst)})</li>")
        at = f.get("attribution") or {}
        if at:
            out.append(f"<li>first diverging stage: <code>{_e(at.get('first_stage'))}</code></li>")
            rep = " (reproduced bit for bit by the golden under that change)" if at.get("reproduced") else ""
            out.append(f"<li>likely cause: <b>{_e(at.get('cause'))}</b>{_e(rep)}</li>")
        if g["separating"]:
            out.append(f"<li>fails only with {_e('; '.join(g['separating']))}</li>")
        out.append(f"</ul><pre>{_e(f.get('repro'))}</pre></div>")
    return out


def variants_section(summary: dict) -> list[str]:
    from . import variant_rows

    rows = variant_rows(summary)
    if not rows:
        return []
    return ["<h2>Kernel variants exercised</h2><table id='variants'><thead><tr><th>op</th><th>kernel variant</th>"
            "<th>cases</th></tr></thead><tbody>"] + \
        [f"<tr><td><code>{_e(op)}</code></td><td><code>{_e(v)}</code></td><td>{n}</td></tr>" for op, v, n in rows] + \
        ["</tbody></table>"]


def render(summary: dict, meta: dict) -> str:
    from . import meta_rows
    from .terminal import gemm_lines

    from . import verdict as _verdict

    status, words = _verdict(summary, meta)
    ok = status == 0
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<title>w8a8 conformance report</title>", f"<style>{CSS}</style></head><body>",
           "<h1>w8a8 conformance report</h1>",
           f"<div class='verdict {'ok' if ok else 'notok'}' id='verdict'>"
           f"{_e(words[:1].upper() + words[1:])} (exit status {status})</div>",
           "<dl class='meta'>"]
    rows, backends = meta_rows(meta)
    out += [f"<dt>{_e(key)}</dt><dd><code>{_e(value)}</code></dd>" for key, value in rows]
    out += [f"<dt>{_e(name)}</dt><dd>numerics <code>{_e(num)}</code>: {_e(diffs)}</dd>" for name, num, diffs in backends]
    out += [f"<dt>GEMM</dt><dd class='gemm'>{_e(line.removeprefix('GEMM: '))}</dd>" for line in gemm_lines(meta)]
    out.append("</dl>")
    out.append("<p>Totals: " + ", ".join(f"{_e(k)} {v}" for k, v in sorted(summary["totals"].items())) + "</p>")
    out += tolerance_section(summary, meta)
    out += scoreboard_section(summary, meta)
    out += groups_section(summary)
    out += histograms_section(summary, meta)
    out += variants_section(summary)
    out += details_section(summary)
    out.append("</body></html>")
    return "\n".join(out)


def render_tune(stats: dict, entries: list, meta: dict) -> str:
    """The tuning page: the recommendation table with provenance, the tuned backend's GEMM path when it reports one
    (``meta["backends"]``), distance histograms, error vs K."""
    from .terminal import gemm_lines

    rows = []
    for e in entries:
        rows.append(f"<tr><td><code>{_e(e.op)}</code></td><td>{_e(e.output)}</td><td>{_e(e.dtype)}</td>"
                    f"<td>{e.samples}</td><td>{e.max_observed}</td><td>{_e(e.describe())}</td><td>{_e(e.bound)}</td>"
                    f"<td>{_e(e.notes)}</td></tr>")
    drawn, single = plots.split_by_bins({k: {"": dict(v.histogram)} for k, v in stats.items()})
    names = {k: f"{k[0]}.{k[1]} ({k[2]})" for k in stats}
    hist = plots.distance_histograms(stats, drawn)
    hist_html = (plots.svg_inline(hist, "distance histograms") if hist is not None else "") + \
        _single_bin_text({names[k]: b for k, b in single.items()}, "output")
    k_drawn, flat = plots.k_panels(stats)
    vsk = plots.error_vs_k(stats)
    vsk_html = plots.svg_inline(vsk, "error vs K") if vsk is not None else ""
    if flat:
        vsk_html += "<p class='bitwise'>The same worst distance at every K: " + "; ".join(
            f"<code>{_e(names[k])}</code> {_e(d)}" for k, d in flat.items()) + " (no panel drawn).</p>"
    if not k_drawn and not flat:
        vsk_html = "<p>No tuned output has a reduction length K.</p>"
    return "\n".join([
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>w8a8 tune</title>",
        f"<style>{CSS}</style></head><body><h1>w8a8 tune: {_e(meta.get('backend'))} vs {_e(meta.get('against'))}</h1>",
        f"<p>{meta.get('samples')} cases per op; target false-failure probability {meta.get('target')} per test.</p>",
        *[f"<p class='gemm'>{_e(line)}</p>" for line in gemm_lines(meta)],
        "<table class='matrix' id='tolerances'><thead><tr><th>op</th><th>output</th><th>dtype</th><th>cases</th>"
        "<th>worst</th><th>recommended</th><th>analytic bound</th><th>basis</th></tr></thead><tbody>",
        *rows, "</tbody></table>",
        f"<h2>Distance histograms</h2>{hist_html}",
        f"<h2>Error vs K</h2>{vsk_html}",
        "</body></html>"])
