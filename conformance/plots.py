"""matplotlib figures for the reports (Agg backend, returned as PNG bytes or base64 for inlining)."""

from __future__ import annotations

import base64
import io
import math

BIN_ORDER = ["0", "1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", "257-1024", "1025-4096",
             "4097-65536", "65537-2^20", ">2^20"]


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def grid(n: int, cols: int, width: float, height: float):
    """A figure with ``n`` subplots in rows of ``cols`` (the unused ones hidden); returns (fig, axes[:n])."""
    plt = _plt()
    rows = max(1, math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
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


def error_histograms(cells_of_backend: dict, backend: str):
    """One figure per backend: per op, the histogram of ULP (float) / code (int) distances to the
    golden over every compared element, log-scaled counts; bin "0" is exact agreement."""
    ops = sorted(cells_of_backend)
    fig, axes = grid(len(ops), 4, 4.2, 2.6)
    for ax, op in zip(axes, ops):
        hist = cells_of_backend[op].get("hist") or {}
        used = [b for b in BIN_ORDER if any(h.get(b) for h in hist.values())] or ["0"]
        width = 0.8 / max(1, len(hist))
        for i, (name, h) in enumerate(sorted(hist.items())):
            xs = [j + i * width for j in range(len(used))]
            ax.bar(xs, [h.get(b, 0) for b in used], width=width, label=name)
        ax.set_yscale("log")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(used))])
        ax.set_xticklabels(used, rotation=45, fontsize=7)
        ax.set_title(op, fontsize=9)
        if hist:
            ax.legend(fontsize=6)
    fig.suptitle(f"{backend}: distance to the golden (ULP for floats, code difference for ints)", fontsize=10)
    fig.tight_layout()
    return fig


def distance_histograms(stats: dict):
    """Per (op, output, dtype): the histogram of element distances (ULP / code) between the two
    backends of a tuning sweep, log-scaled counts."""
    keys = sorted(stats)
    fig, axes = grid(len(keys), 4, 4.2, 2.6)
    for ax, key in zip(axes, keys):
        s = stats[key]
        xs = sorted(s.histogram)
        ax.bar([str(x) for x in xs], [s.histogram[x] for x in xs], color="#4a7ab7")
        ax.set_yscale("log")
        ax.set_title(f"{key[0]}.{key[1]} ({key[2]})", fontsize=8)
        ax.tick_params(axis="x", labelsize=7, rotation=45)
    fig.suptitle("element distance histograms (ULP for floats, code difference for ints)", fontsize=10)
    fig.tight_layout()
    return fig


def error_vs_k(stats: dict):
    """Per op with a reduction length: per-case worst distance against K (log-x), with the median per K."""
    keys = [k for k in sorted(stats) if any(v is not None for v in stats[k].per_case_k)]
    fig, axes = grid(len(keys), 3, 5, 3)
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
    fig.tight_layout()
    return fig
