"""Benchmark reports: the comparison table, pytest-benchmark-compatible JSON, throughput-vs-M plots,
the scaling study (log-log fits), and an HTML page."""

from __future__ import annotations

import datetime
import platform
from collections import defaultdict

import numpy as np

from conformance import plots


def throughput(r: dict) -> float | None:
    st = r.get("stats")
    if not st or not st.get("median"):
        return None
    return r["work"] / st["median"]


def gemm_path(r: dict) -> str | None:
    """The GEMM path a record's calls took, where the backend said (torch-cpu: ``"amx"``, ``"vnni"``,
    ``"qlinear"``, ``"int_mm"``; from ``Prepared.notes``)."""
    return r.get("gemm") or (r.get("notes") or {}).get("gemm")


def int8_unit(r: dict, peaks) -> tuple[float, str]:
    """The int8 ceiling and unit name of a record's GEMM path (:meth:`bench.peak.Peaks.int8_for`)."""
    int8_for = getattr(peaks, "int8_for", None)
    return int8_for(gemm_path(r)) if int8_for else (peaks.int8, "")


def peak_for(backend: str, peaks, compute: str | None = None) -> tuple[float | None, str]:
    """The ceiling a backend's GEMM work is measured against, and its label.

    ``compute`` is the case's own (``BenchCase.compute``: ``"fp64"`` for the formats every backend
    computes exactly in float64); otherwise the backend's declared ``Backend.compute``: ``"int8"``
    kernels against the measured int8 ceiling (VNNI / AMX); the golden's exact GEMM runs on fp32
    BLAS, measured against twice the fp64 FMA ceiling (the same FMA units with twice the lanes)."""
    import backends

    if compute is None:
        try:
            compute = getattr(backends.get(backend), "compute", "int8")
        except Exception:  # noqa: BLE001 - an unknown backend: int8 by default
            compute = "int8"
    if compute == "fp64":
        return (peaks.fp64 or None), "fp64 FMA"
    if compute == "fp32":
        return (2 * peaks.fp64 if peaks.fp64 else None), "fp32 (2 x fp64 FMA)"
    return (peaks.int8 or None), "int8"


def annotate(records: list[dict], peaks) -> None:
    """Add throughput, ratio to the fastest backend (per case), ratio to this machine's compute peak and
    the roofline (:mod:`bench.roofline`: the limiting resource and the % of its time)."""
    from .roofline import roofline

    best: dict[str, float] = {}
    for r in records:
        tp = throughput(r) if r.get("verified") else None
        r["throughput"] = throughput(r)
        if tp:
            best[r["case"]] = max(best.get(r["case"], 0.0), tp)
    for r in records:
        tp = r.get("throughput")
        if tp and r.get("verified"):
            r["ratio_to_fastest"] = tp / best[r["case"]]
            ceiling, label = peak_for(r["backend"], peaks, r.get("compute"))
            unit = ""
            if label == "int8":   # the ceiling of the unit this call's GEMM path ran on
                ceiling, unit = int8_unit(r, peaks)
                ceiling = ceiling or None
            if r.get("unit") == "OPS":
                # a ceiling is the best rate seen: a call faster than the measured peak raises it (100 %)
                r["ratio_to_peak"] = min(1.0, tp / ceiling) if ceiling else None
                r["peak_kind"] = f"{label} ({unit})" if unit else label
            roof = None if r.get("no_roofline") else roofline(r, peaks, ceiling, label, unit)
            if roof is not None:
                r["roofline"] = roof.as_dict()


def _fmt_time(s: float) -> str:
    return f"{s * 1e6:.1f} us" if s < 1e-3 else (f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s")


def _fmt_tp(r: dict) -> str:
    tp = r.get("throughput")
    if not tp:
        return "-"
    return f"{tp / 1e12:.3f} TOPS" if r.get("unit") == "OPS" else f"{tp / 1e9:.2f} Gelem/s"


def fmt_mib(n) -> str:
    """A byte count in MiB for a table: ``-`` when not measured, ``< 1 MiB`` rather than ``0 MiB``."""
    if not n:
        return "-"
    return "< 1 MiB" if n < 2**20 else f"{n / 2**20:.0f} MiB"


def print_table(records: list[dict], peaks, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    from conformance.reports.console import esc

    console = console or Console()
    t = Table(title=f"w8a8 bench (median of rounds; {ceilings_line(peaks)})")
    for col in ("op", "shape", "backend", "time", "throughput", "vs fastest", "% of peak", "roofline",
                "peak mem", "transfers in/out"):
        t.add_column(col, overflow="fold")
    for r in sorted((r for r in records if r.get("group") != "peers"),
                    key=lambda r: (r.get("op", ""), r.get("case", ""), r.get("backend", ""))):
        if r.get("status") != "ok":
            t.add_row(esc(r.get("op", "?")), esc(r.get("label", "")), esc(r["backend"]),
                      f"[dim]{esc(r.get('status'))}[/]", esc((r.get("note") or "")[:60]), "", "", "", "", "")
            continue
        if not r.get("verified"):
            t.add_row(esc(r["op"]), esc(r["label"]), esc(r["backend"]), "[yellow]unverified[/]",
                      esc((r.get("verify_note") or "")[:60]), "", "", "", "", "")
            continue
        pct = f"{100 * r['ratio_to_peak']:.1f}% {esc(r['peak_kind'])}" if r.get("ratio_to_peak") else "\u2013"
        t.add_row(esc(r["op"]), esc(r["label"]), esc(r["backend"]), _fmt_time(r["stats"]["median"]), _fmt_tp(r),
                  f"{r.get('ratio_to_fastest', 0):.2f}x", pct, esc(roofline_text(r)),
                  fmt_mib(r.get("peak_memory_bytes")),
                  f"{_fmt_time(r.get('transfer_in_s', 0))} / {_fmt_time(r.get('transfer_out_s', 0))}")
    console.print(t)
    peers = [r for r in records if r.get("group") == "peers"]
    if peers:
        print_peers(peers, console)


def ceilings_line(peaks) -> str:
    """The ceilings in one line (table titles, HTML)."""
    line = (f"peaks: int8 {peaks.int8 / 1e12:.2f} TOPS ({peaks.int8_unit}), fp64 {peaks.fp64 / 1e9:.0f} GFLOP/s "
            f"({peaks.fp64_unit}), {peaks.threads} threads")
    if getattr(peaks, "bw_dram", 0):
        line += (f"; read bandwidth: L2 {peaks.bw_l2 / 1e9:.0f} GB/s, in cache (LLC {peaks.llc_bytes >> 20} MiB) "
                 f"{peaks.bw_llc / 1e9:.0f} GB/s, out of cache {peaks.bw_dram / 1e9:.1f} GB/s")
    return line


def roofline_text(r: dict) -> str:
    """``"int8-bound at 71% (DRAM bw 58%)"``-style cell, or ``"-"``."""
    roof = r.get("roofline")
    if not roof:
        return "-"
    text = roof["label"]
    if roof["level"] != "DRAM":
        text += f" (DRAM bw {100 * roof['dram_pct']:.0f}%)"
    return text


def print_peers(records: list[dict], console) -> None:
    """The peers table: every candidate of a case timed round-robin in one process (bench.peers)."""
    from rich.table import Table

    t = Table(title="w8a8 bench: torch-cpu and its peers, one process, round-robin (median, q1-q3 of rounds)")
    for col in ("op", "shape", "candidate", "time", "q1-q3", "torch-cpu speedup", "numerics", "roofline"):
        t.add_column(col, overflow="fold")
    for r in sorted(records, key=lambda r: (r.get("op", ""), r.get("label", ""), r.get("order", 0))):
        if r.get("status") != "ok":
            t.add_row(r.get("op", "?"), r.get("label", ""), r["backend"], f"[dim]{r.get('status')}[/]",
                      r.get("note", "")[:70], "", "", "")
            continue
        st = r["stats"]
        speed = r.get("torch_cpu_speedup")
        t.add_row(r["op"], r["label"], r["backend"], _fmt_time(st["median"]),
                  f"{_fmt_time(st['q1'])} - {_fmt_time(st['q3'])}", f"{speed:.2f}x" if speed else "-",
                  r.get("numerics", ""), roofline_text(r))
    console.print(t)


def pytest_benchmark_json(records: list[dict], meta: dict) -> dict:
    """The records in pytest-benchmark's JSON schema (``pytest-benchmark compare`` reads it)."""
    import pytest_benchmark

    benches = []
    for r in records:
        if r.get("status") != "ok":
            continue
        st = dict(r["stats"])
        st["data"] = r.get("data", [])
        peers = r.get("group") == "peers"   # the peers run: a name and group of its own (same case, other run)
        name = f"test_{r['op']}{'_peers' if peers else ''}[{r['backend']}-{r['label']}]"
        benches.append({
            "group": r["op"] + (" (peers)" if peers else ""), "name": name, "fullname": f"w8a8-bench::{name}",
            "params": {"backend": r["backend"], "shape": r["label"]}, "param": f"{r['backend']}-{r['label']}",
            "extra_info": {k: r.get(k) for k in ("work", "unit", "verified", "verify_note", "throughput",
                                                  "ratio_to_fastest", "ratio_to_peak", "peak_kind", "roofline",
                                                  "peak_memory_bytes", "transfer_in_s", "load_s", "transfer_out_s",
                                                  "group", "op", "label", "params", "numerics", "sqnr_db",
                                                  "torch_cpu_speedup", "notes", "gemm")},
            "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": meta.get("min_rounds", 3),
                        "max_time": meta.get("max_time", 2.0), "min_time": 0.0, "warmup": True},
            "stats": st})
    return {"machine_info": {"node": platform.node(), "processor": platform.processor(),
                             "machine": platform.machine(), "python_implementation": platform.python_implementation(),
                             "python_version": platform.python_version(), "system": platform.system(),
                             "release": platform.release(), "cpu": {"count": meta.get("cpus")},
                             "w8a8_peaks": meta.get("peaks"), "w8a8_isa": meta.get("isa")},
            "commit_info": meta.get("commit_info", {}), "benchmarks": benches, "w8a8_command": meta.get("command"),
            "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "version": pytest_benchmark.__version__}


def _m_ticks(ax, values: list) -> None:
    """Ticks at the measured sizes only, as plain numbers (log-axis minor labels overprint on a short range)."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(values)
    ax.set_xticklabels([str(v) for v in values], fontsize=7)


def throughput_vs_m(records: list[dict]):
    """Per op: verified throughput against M, one line per backend (log-log)."""
    series: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        tags = r.get("tags", [])
        if r.get("verified") and "m" in r.get("params", {}) and ("dsv4" in tags or "scaling:M" in tags):
            key = (r["op"], tuple((k, v) for k, v in sorted(r["params"].items()) if k not in ("m", "t")))
            series[key][r["backend"]].append((r["params"]["m"], r["throughput"]))
    keys = sorted(series)
    if not keys:
        return None
    fig, axes = plots.grid(len(keys), 3, 5, 3.2, layout="constrained")
    for ax, key in zip(axes, keys):
        for backend, pts in sorted(series[key].items()):
            pts = sorted(pts)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=backend)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _m_ticks(ax, sorted({p[0] for pts in series[key].values() for p in pts}))
        ax.set_xlabel("M (tokens)", fontsize=8)
        ax.set_ylabel("useful ops/s (or elem/s)", fontsize=8)
        ax.set_title(f"{key[0]} {dict(key[1])}", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle("throughput against M", fontsize=10)
    return fig


def scaling_fits(records: list[dict]) -> list[dict]:
    """For each backend and scaling axis: fit log(time) = a + b log(x); b is the exponent."""
    groups: dict = defaultdict(list)
    for r in records:
        if not r.get("verified"):
            continue
        for tag in r.get("tags", []):
            if tag.startswith("scaling:"):
                axis = tag.split(":", 1)[1]
                x = r["params"].get(axis.lower())
                if x:
                    fixed = tuple((k, v) for k, v in sorted(r["params"].items()) if k != axis.lower())
                    groups[(r["backend"], r["op"], axis, fixed)].append((x, r["stats"]["median"]))
    fits = []
    for (backend, op, axis, fixed), pts in sorted(groups.items(), key=lambda kv: kv[0][:3]):
        if len({p[0] for p in pts}) < 2:
            continue
        x = np.log([p[0] for p in pts])
        y = np.log([p[1] for p in pts])
        b, a = np.polyfit(x, y, 1)
        fits.append({"backend": backend, "op": op, "axis": axis, "fixed": dict(fixed), "exponent": float(b),
                     "points": sorted(pts)})
    return fits


def scaling_plot(fits: list[dict]):
    plt = plots._plt()
    axes_names = sorted({f["axis"] for f in fits}) or ["M"]
    fig, axes = plt.subplots(1, len(axes_names), figsize=(5 * len(axes_names), 3.4), squeeze=False)
    for ax, axis in zip(axes.ravel(), axes_names):
        for f in [f for f in fits if f["axis"] == axis]:
            xs = [p[0] for p in f["points"]]
            ax.plot(xs, [p[1] for p in f["points"]], marker="o",
                    label=f"{f['backend']} {f['op']}: t ~ {axis}^{f['exponent']:.2f}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _m_ticks(ax, sorted({p[0] for f in fits if f["axis"] == axis for p in f["points"]}))
        ax.set_xlabel(axis, fontsize=8)
        ax.set_ylabel("time (s)", fontsize=8)
        ax.legend(fontsize=6)
        ax.set_title(f"cost vs {axis}", fontsize=9)
    fig.tight_layout()
    return fig


def render_html(records: list[dict], peaks, fits: list[dict], meta: dict) -> str:
    from conformance.reports.html import CSS, _e

    rows = []
    for r in sorted((r for r in records if r.get("group") != "peers"),
                    key=lambda r: (r.get("op", ""), r.get("case", ""), r.get("backend", ""))):
        if r.get("status") == "ok" and r.get("verified"):
            cells = [_fmt_time(r["stats"]["median"]), _fmt_tp(r), f"{r.get('ratio_to_fastest', 0):.2f}x",
                     (f"{100 * r['ratio_to_peak']:.1f}% {_e(r.get('peak_kind', ''))}" if r.get("ratio_to_peak")
                      else "\u2013"), _e(roofline_text(r)), fmt_mib(r.get("peak_memory_bytes"))]
            cls = "good"
        else:
            cells = [_e(r.get("status") if r.get("status") != "ok" else "unverified"),
                     _e(r.get("verify_note") or r.get("note") or ""), "", "", "", ""]
            cls = "bad" if r.get("status") in ("error", "crashed", "timeout") or r.get("status") == "ok" else "na"
        rows.append(f"<tr><td><code>{_e(r.get('op'))}</code></td><td>{_e(r.get('label'))}</td><td>{_e(r['backend'])}</td>"
                    + "".join(f"<td class='{cls}'>{c}</td>" for c in cells) + "</tr>")
    fit_rows = "".join(f"<tr><td>{_e(f['backend'])}</td><td>{_e(f['op'])}</td><td>{_e(f['axis'])}</td>"
                       f"<td>{f['exponent']:.2f}</td><td>{_e(f['fixed'])}</td></tr>" for f in fits)
    tvm_fig = throughput_vs_m(records)
    tvm = plots.png_base64(tvm_fig) if tvm_fig is not None else None
    sc = plots.png_base64(scaling_plot(fits)) if fits else None
    return "\n".join([
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>w8a8 bench</title>",
        f"<style>{CSS}</style></head><body><h1>w8a8 bench</h1>",
        f"<p>{_e(meta.get('command', ''))} — {_e(meta.get('machine', ''))}; {_e(ceilings_line(peaks))}; "
        f"{_e(peaks.method)}</p>",
        "<table class='matrix' id='bench'><thead><tr><th>op</th><th>shape</th><th>backend</th><th>time</th>"
        "<th>throughput</th><th>vs fastest</th><th>% of peak</th><th>roofline</th><th>peak memory</th></tr></thead>"
        "<tbody>", *rows, "</tbody></table>", _peers_html(records),
        "<h2>Throughput against M</h2>" + (f"<img class='plot' alt='throughput vs M' src='data:image/png;base64,{tvm}'>"
                                           if tvm else "<p>no verified case with several M</p>"),
        "<h2>Scaling study</h2><table class='matrix'><thead><tr><th>backend</th><th>op</th><th>axis</th>"
        f"<th>fitted exponent</th><th>fixed</th></tr></thead><tbody>{fit_rows}</tbody></table>",
        f"<img class='plot' alt='scaling' src='data:image/png;base64,{sc}'>" if sc else "<p>no scaling data (full run)</p>",
        "</body></html>"])


def _peers_html(records: list[dict]) -> str:
    from conformance.reports.html import _e

    peers = sorted((r for r in records if r.get("group") == "peers"),
                   key=lambda r: (r.get("op", ""), r.get("label", ""), r.get("order", 0)))
    if not peers:
        return ""
    rows = []
    for r in peers:
        if r.get("status") != "ok":
            rows.append(f"<tr><td><code>{_e(r.get('op'))}</code></td><td>{_e(r.get('label'))}</td>"
                        f"<td>{_e(r['backend'])}</td><td class='na' colspan='5'>{_e(r.get('note', ''))}</td></tr>")
            continue
        st, speed = r["stats"], r.get("torch_cpu_speedup")
        cells = [_fmt_time(st["median"]), f"{_fmt_time(st['q1'])} - {_fmt_time(st['q3'])}",
                 f"{speed:.2f}x" if speed else "-", _e(r.get("numerics", "")), _e(roofline_text(r))]
        rows.append(f"<tr><td><code>{_e(r['op'])}</code></td><td>{_e(r['label'])}</td><td>{_e(r['backend'])}</td>"
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<h2>torch-cpu and its peers (one process, round-robin)</h2><table class='matrix' id='peers'><thead><tr>"
            "<th>op</th><th>shape</th><th>candidate</th><th>time</th><th>q1-q3</th><th>torch-cpu speedup</th>"
            "<th>numerics</th><th>roofline</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
