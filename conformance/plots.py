"""matplotlib figures for the reports (Agg backend), returned as PNG bytes, base64 for inlining, or inline SVG
(:func:`svg_inline`: text stays text and every histogram bar is tagged, so a browser test can count them).

A histogram panel is drawn only when its elements fall in at least two distance bins: a single bar
(everything bit for bit, or everything at one distance) is a sentence, not a panel (:func:`split_by_bins`).
"""

from __future__ import annotations

import base64
import io
import itertools
import math

BIN_ORDER = ["0", "1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", "257-1024", "1025-4096",
             "4097-65536", "65537-2^20", ">2^20"]


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


_BAR_IDS = itertools.count()


def grid(n: int, cols: int, width: float, height: float, layout: str | None = None):
    """A figure with ``n`` subplots in rows of ``cols`` (the unused ones hidden); returns (fig, axes[:n]).
    ``layout="constrained"`` keeps a suptitle clear of the panel titles (``tight_layout`` does not)."""
    plt = _plt()
    cols = max(1, min(cols, n))     # one panel: a figure one panel wide, its title over it
    rows = max(1, math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout=layout)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    return fig, list(axes.ravel()[:n])


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def png_base64(fig) -> str:
    return base64.b64encode(png_bytes(fig)).decode("ascii")


def svg_inline(fig, label: str) -> str:
    """The figure as an ``<svg>`` element to put in an HTML page (text as text, no XML prolog, scaled down to
    the page's width by its viewBox), labelled ``label`` for screen readers."""
    import html

    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "w8a8"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    _plt().close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    return text.replace("<svg ", f"<svg class='plot' role='img' aria-label='{html.escape(label)}' ", 1)


def tagged_bars(ax, xs, heights, bin_ids, **kw):
    """``ax.bar`` of the non-zero bars only, each tagged ``bar-b<bin>-<n>`` (the id its SVG group gets)."""
    keep = [(x, h, b) for x, h, b in zip(xs, heights, bin_ids) if h]
    bars = ax.bar([x for x, _, _ in keep], [h for _, h, _ in keep], **kw)
    for patch, (_, _, b) in zip(bars.patches, keep):
        patch.set_gid(f"bar-b{b}-{next(_BAR_IDS)}")
    return bars


def split_by_bins(hists: dict) -> tuple[list, dict]:
    """``hists``: key -> {output name -> {bin -> count}}. Returns (the keys worth a panel: elements in at
    least two bins, {key: the one bin every element falls in} for the rest)."""
    drawn, single = [], {}
    for key in sorted(hists):
        used = {b for h in hists[key].values() for b, c in h.items() if c}
        if len(used) >= 2:
            drawn.append(key)
        else:
            single[key] = next(iter(used), None)
    return drawn, single


def error_histograms(cells_of_backend: dict, backend: str, ops: list | None = None):
    """One figure per backend: per op (``ops``, default every op), the histogram of ULP (float) / code (int)
    distances to the golden over every compared element, log-scaled counts; bin "0" is exact agreement.
    None when there is no op to draw."""
    ops = sorted(cells_of_backend) if ops is None else list(ops)
    if not ops:
        return None
    fig, axes = grid(len(ops), 4, 4.2, 2.6, layout="constrained")
    for ax, op in zip(axes, ops):
        hist = cells_of_backend[op].get("hist") or {}
        used = [b for b in BIN_ORDER if any(h.get(b) for h in hist.values())] or ["0"]
        width = 0.8 / max(1, len(hist))
        for i, (name, h) in enumerate(sorted(hist.items())):
            xs = [j + i * width for j in range(len(used))]
            tagged_bars(ax, xs, [h.get(b, 0) for b in used], [BIN_ORDER.index(b) for b in used], width=width,
                        label=name)
        ax.set_yscale("log")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(used))])
        ax.set_xticklabels(used, rotation=45, fontsize=7)
        ax.set_title(op, fontsize=9)
        if hist:
            ax.legend(fontsize=6)
    fig.suptitle(f"{backend}: distance to the golden (ULP for floats, code difference for ints)", fontsize=10)
    return fig


def distance_histograms(stats: dict, keys: list | None = None):
    """Per (op, output, dtype) in ``keys`` (default all): the histogram of element distances (ULP / code)
    between the two backends of a tuning sweep, log-scaled counts. None when there is no key to draw."""
    keys = sorted(stats) if keys is None else list(keys)
    if not keys:
        return None
    fig, axes = grid(len(keys), 4, 4.2, 2.6, layout="constrained")
    for ax, key in zip(axes, keys):
        s = stats[key]
        xs = sorted(s.histogram)
        tagged_bars(ax, [str(x) for x in xs], [s.histogram[x] for x in xs], xs, color="#4a7ab7")
        ax.set_yscale("log")
        ax.set_title(f"{key[0]}.{key[1]} ({key[2]})", fontsize=8)
        ax.tick_params(axis="x", labelsize=7, rotation=45)
    fig.suptitle("element distance histograms (ULP for floats, code difference for ints)", fontsize=10)
    return fig


def k_panels(stats: dict) -> tuple[list, dict]:
    """The keys worth an error-vs-K panel (a reduction length, and a per-case worst distance that varies)
    and, for the keys with a reduction length whose every case has the same worst distance, that distance."""
    drawn, flat = [], {}
    for key in sorted(stats):
        s = stats[key]
        ds = {d for k, d in zip(s.per_case_k, s.per_case_max) if k is not None}
        if len(ds) >= 2:
            drawn.append(key)
        elif ds:
            flat[key] = next(iter(ds))
    return drawn, flat


def error_vs_k(stats: dict):
    """Per op with a reduction length and a varying distance (:func:`k_panels`): per-case worst distance
    against K (log-x), with the median per K. None when no key qualifies (no empty figure)."""
    keys, _ = k_panels(stats)
    if not keys:
        return None
    fig, axes = grid(len(keys), 3, 5, 3, layout="constrained")
    for ax, key in zip(axes, keys):
        s = stats[key]
        pts = [(k, d) for k, d in zip(s.per_case_k, s.per_case_max) if k is not None]
        ks = sorted({k for k, _ in pts})
        ax.scatter([k for k, _ in pts], [d for _, d in pts], s=8, alpha=0.5)
        med = [float(sorted(d for kk, d in pts if kk == k)[len([1 for kk, _ in pts if kk == k]) // 2]) for k in ks]
        ax.plot(ks, med, color="black", linewidth=1, label="median")
        ax.set_xscale("log")
        ax.set_xlabel("K (reduction length)", fontsize=8)
        ax.set_ylabel("worst distance per case", fontsize=8)
        ax.set_title(f"{key[0]}.{key[1]} ({key[2]})", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle("error vs K", fontsize=10)
    return fig
