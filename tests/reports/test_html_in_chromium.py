"""Every HTML report kind the project writes, rendered in real headless Chromium (one browser for the module,
driven over its DevTools pipe by tools/chromium.py) at a desktop and a phone width, and checked for what a
person would notice: nothing wider than the window, no text over other text, no empty figure, no histogram
panel of a single bar, and two planted bugs shown as two failure groups. A planted copy with each of those
faults shows the checks fail."""

from __future__ import annotations

import base64
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


# tools/ is not a package: its module's namespace, run from its file
chromium = SimpleNamespace(**runpy.run_path(str(ROOT / "tools" / "chromium.py")))
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(chromium.find_binary() is None,
                                 reason="no headless Chromium on this machine (apt-get install chromium)")]

DESKTOP, PHONE = 1280, 400
MODEL = ROOT / "tests" / "modelrun" / "data"
# kind -> (w8a8 arguments writing the report into OUT, the report's file name)
REPORTS = {
    "conformance-all-pass": (["conformance", "--backend", "numpy", "--op", "dynamic_quant", "--profile", "dev", "--workers", "0"],
                             "report.html"),
    "conformance-planted": (["conformance", "--backend", f"{HERE / 'two_bugs.py'}:TwoBugsBackend", "--op",
                             "dynamic_quant", "--op", "mx_quantize", "--profile", "dev", "--workers", "0"], "report.html"),
    "foreign": (["conformance", "--backend", "onnxruntime", "--backend", "torchao", "--op", "mx_quantize",
                 "--op", "int_matmul", "--profile", "dev", "--workers", "0"], "report.html"),
    "tune": (["tune", "--backend", "torchao", "--op", "mx_matmul", "--samples", "8"],
             "tune-report.html"),
    "bench": (["bench", "--quick", "--op", "dynamic_quant", "--backend", "numpy", "--backend", "torch-cpu",
               "--no-peak", "--max-time", "0.02", "--min-rounds", "1"], "bench-report.html"),
    "run": (["run", str(MODEL / "msmodelslim" / "qwen2-w8a8-dynamic"), "--reference", str(MODEL / "float" / "qwen2-bf16"),
             "--tokens", "1,2,3,4", "--backend", "torch-cpu"], "run.html"),
    "replay": (["replay", str(ROOT / "tests" / "replay" / "samples" / "made" / "planted-tensor-mix")], "report.html"),
}


def write_report(kind: str, out: Path) -> Path:
    """Run the command that writes report ``kind`` into ``out`` (in this process); the page's path."""
    from w8a8cli.main import main

    args, name = REPORTS[kind]
    main(args + ["--out", str(out)])   # exit status 1 is expected for the planted and foreign runs
    page = out / name
    assert page.is_file(), f"{kind}: {name} not written"
    return page


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    return {kind: write_report(kind, root / kind) for kind in REPORTS}


@pytest.fixture(scope="module")
def browser():
    with chromium.Chromium() as b:
        yield b


@pytest.fixture(scope="module")
def facts(pages, browser):
    """{(kind, width): the layout facts of that report at that width}."""
    out = {}
    for width in (DESKTOP, PHONE):
        page = browser.page(width)
        for kind, path in pages.items():
            page.load(path)
            out[kind, width] = chromium.layout_facts(page)
        page.close()
    return out


def problems(f: dict, width: int) -> list[str]:
    """What a person would notice in one rendering (empty when the page is fine)."""
    found = []
    if f["page_width"] > f["viewport"]:
        found.append(f"the page scrolls sideways: {f['page_width']} px in a {f['viewport']} px window")
    for w in f["wide"]:
        # on a phone a wide table may scroll inside its own box; on a desktop nothing needs scrolling
        if width == DESKTOP or not w["in_scroll_box"]:
            found.append(f"{w['el']} reaches x={w['right']} past the {f['viewport']} px window: {w['text']!r}")
    for o in f["overlaps"]:
        found.append(f"text {o['a']!r} overlaps {o['b']!r} ({o['w']}x{o['h']} px)")
    for fig in f["figures"]:
        if fig["width"] < 50 or fig["height"] < 20:
            found.append(f"figure {fig['label']!r} rendered {fig['width']}x{fig['height']} px")
        if fig["kind"] == "img":
            if not fig["complete"] or fig["natural"][0] < 120 or fig["natural"][1] < 80:
                found.append(f"image {fig['label']!r} is empty or a sliver: {fig['natural']}")
            if fig["colors"] < 2:
                found.append(f"image {fig['label']!r} is blank (colours {fig['colors']})")
        elif fig["kind"] == "svg":
            if fig["shapes"] == 0 or not fig["panels"]:
                found.append(f"figure {fig['label']!r} draws nothing")
            for p in fig["panels"]:
                if p["bars"] and p["bins"] < 2:
                    found.append(f"figure {fig['label']!r}: panel {p['title']!r} is a single-bar histogram")
    return found


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
@pytest.mark.parametrize("kind", sorted(REPORTS))
def test_report_reads_well_in_chromium(facts, kind, width):
    f = facts[kind, width]
    assert f["text_boxes"] > 20, f"{kind}: the page shows almost no text"
    assert problems(f, width) == [], kind


def test_every_report_draws_its_figures(facts):
    figs = {kind: facts[kind, DESKTOP]["figures"] for kind in REPORTS}
    # the planted run's histograms (its bugs differ from the golden in more than one distance bin)
    assert any(p["bars"] for fig in figs["conformance-planted"] for p in fig.get("panels", [])), figs
    for kind in ("bench", "run", "replay"):
        assert figs[kind], f"{kind}: no figure"


def test_two_planted_bugs_show_as_two_failure_groups(facts, pages):
    assert facts["conformance-planted", DESKTOP]["groups"] == 2
    page = pages["conformance-planted"].read_text()
    groups = page[page.index("id='groups'"):page.index("</table>", page.index("id='groups'"))]
    assert "tie rounding" in groups and "scale_mode" in groups


PNG_1PX = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def test_the_checks_catch_planted_faults(pages, browser, tmp_path):
    """A copy of the planted report with a too-wide block, text over the title, a 1-pixel image and a
    single-bar histogram: each is reported."""
    from conformance import plots

    cells = {"quant_matmul": {"hist": {"y": {"0": 4096}}}}
    single = plots.svg_inline(plots.error_histograms(cells, "planted", ["quant_matmul"]), "planted single bar")
    page = pages["conformance-planted"].read_text().replace("</body>", (
        "<div id='too-wide' style='width:1900px'>a block wider than the window</div>"
        "<span style='position:absolute;top:26px;left:30px;font-size:22px'>text over the title</span>"
        f"<img alt='planted 1px' src='data:image/png;base64,{PNG_1PX}'>{single}</body>"))
    bad = tmp_path / "bad.html"
    bad.write_text(page)
    tab = browser.page(DESKTOP)
    tab.load(bad)
    found = problems(chromium.layout_facts(tab), DESKTOP)
    tab.close()
    text = "\n".join(found)
    assert "the page scrolls sideways" in text and "div#too-wide reaches" in text, text
    assert "overlaps" in text and "text over the title" in text, text
    assert "image 'planted 1px' is empty or a sliver" in text, text
    assert "'planted single bar': panel" in text and "single-bar histogram" in text, text
    assert base64.b64decode(PNG_1PX)[:8] == b"\x89PNG\r\n\x1a\n"
