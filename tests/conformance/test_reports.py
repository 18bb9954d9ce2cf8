"""Reports: all four files land in --out; the HTML page is self-contained and renders."""

import base64
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    proc = subprocess.run([sys.executable, "-m", "w8a8cli.main", "conformance", "--backend",
                           "conformance.planted:BiasAfterDequantBackend", "--backend", "numpy", "--op", "quant_matmul",
                           "--op", "dynamic_quant", "--profile", "dev", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    return out, proc


def test_exit_status_is_1_when_a_backend_disagrees_and_reports_are_written(planted_run):
    out, proc = planted_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for name in ("results.jsonl", "report.md", "report.xml", "summary.json", "report.html"):
        assert (out / name).stat().st_size > 0, name
    assert "int32 bias position" in proc.stdout + proc.stderr


def test_markdown_has_the_matrix_and_the_attributed_failure_with_repro(planted_run):
    md = (planted_run[0] / "report.md").read_text()
    assert "| `quant_matmul` |" in md and "planted-bias-after-dequant" in md and "| numpy |" not in md.split("\n")[0]
    assert "likely cause: int32 bias position" in md
    # the repro line carries the exact --backend spec given (the backend's name would be "unknown backend")
    assert "repro: `w8a8 conformance --backend conformance.planted:BiasAfterDequantBackend --op quant_matmul --case '" in md


def test_junit_xml_parses_with_one_suite_per_backend(planted_run):
    root = ET.parse(planted_run[0] / "report.xml").getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"conformance[numpy]", "conformance[planted-bias-after-dequant]"}
    planted = suites["conformance[planted-bias-after-dequant]"]
    assert int(planted.get("failures")) >= 1 and planted.findall(".//failure")
    assert int(suites["conformance[numpy]"].get("failures")) == 0


def test_html_is_self_contained_with_matrix_and_plots(planted_run):
    page = (planted_run[0] / "report.html").read_text()
    # a cell may carry a title (its column's declared numerics, the draws outside its capabilities)
    assert "id='matrix'" in page and re.search(r"<td class='bad'[ >]", page) and re.search(r"<td class='good'[ >]", page)
    assert "id='groups'" in page  # the failures grouped by (backend, op, stage, cause)
    assert not re.search(r"(src|href)=['\"]https?://", page), "no external resources"
    # the histograms are inline SVG (text as text, bars tagged); numpy is bit for bit: a sentence, no panels
    assert page.count("<svg class='plot'") == 1 and "aria-label='error histograms of planted-bias-after-dequant'" in page
    assert re.search(r"ops?\(s\) bit for bit on every compared element: <code>dynamic_quant</code>", page)
    assert "<?xml" not in page
    for b64 in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page):
        assert base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium on this machine (apt-get install chromium)")
def test_html_renders_in_headless_chromium(planted_run, tmp_path):
    page = planted_run[0] / "report.html"
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'id="matrix"' in dom.stdout and dom.stdout.count("<svg") >= 1, dom.stderr[-2000:]
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1400,1800", page.as_uri()],
                   capture_output=True, text=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000  # a rendered page, not a blank one
