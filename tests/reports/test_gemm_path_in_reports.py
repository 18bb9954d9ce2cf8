"""Every report names the int8 GEMM path torch-cpu took (its ``info()["gemm"]``: ``vnni``, ``amx``, ``int_mm``...):
the conformance page, the tune page, the bench page (a column) and the run page; a backend that reports no
path gets no GEMM line."""

import pytest

from backends.torch_cpu import TorchCpuBackend
from bench import report as bench_report
from bench.peak import Peaks
from conformance.reports import html
from conformance.reports.terminal import summarize
from modelrun.report import backend_text


@pytest.fixture(scope="module")
def torch_cpu_info():
    info = TorchCpuBackend().info()
    assert info["gemm"]["path"], "torch-cpu reports its GEMM path"
    return info


def test_conformance_page_names_the_path_and_nothing_for_a_backend_without_one(torch_cpu_info):
    path = torch_cpu_info["gemm"]["path"]
    meta = {"backends": {"torch-cpu": torch_cpu_info, "numpy": {"numerics": "ascend"}}}
    page = html.render(summarize([]), meta)
    assert page.count("<dd class='gemm'>") == 1
    assert f"<dd class='gemm'>torch-cpu took {path} (" in page
    assert "<dd class='gemm'>" not in html.render(summarize([]), {"backends": {"numpy": {"numerics": "ascend"}}})


def test_tune_page_names_the_tuned_backends_path(torch_cpu_info):
    page = html.render_tune({}, [], {"backend": "torch-cpu", "against": "numpy", "samples": 1, "target": 1e-6,
                                     "backends": {"torch-cpu": torch_cpu_info}})
    assert f"<p class='gemm'>GEMM: torch-cpu took {torch_cpu_info['gemm']['path']} (" in page
    assert "class='gemm'" not in html.render_tune({}, [], {"backend": "numpy", "against": "numpy"})


def _record(backend, gemm):
    rec = {"backend": backend, "case": "w8a8_dynamic_linear[M16]", "op": "w8a8_dynamic_linear", "label": "M16",
           "work": 2e9, "unit": "OPS", "status": "ok", "verified": True,
           "stats": {"median": 1e-3, "q1": 1e-3, "q3": 1e-3, "min": 1e-3, "max": 1e-3, "rounds": 1}}
    if gemm:
        rec["gemm"] = gemm
    return rec


def test_bench_page_has_a_gemm_column_only_when_a_record_reports_one():
    peaks = Peaks(1e12, 1e11, "x", "y", "test", 2)
    recs = [_record("torch-cpu", "vnni"), _record("numpy", None)]
    bench_report.annotate(recs, peaks)
    page = bench_report.render_html(recs, peaks, [], {"command": "w8a8 bench"})
    assert "<th>GEMM path</th>" in page and "<td class='good'>vnni</td>" in page
    assert "<td class='good'>\u2013</td></tr>" in page          # numpy reports no path: a dash, not a blank
    plain = [_record("numpy", None)]
    bench_report.annotate(plain, peaks)
    assert "GEMM path" not in bench_report.render_html(plain, peaks, [], {"command": "w8a8 bench"})


def test_run_page_sentence_carries_the_path():
    same = {"modules": 3, "bitwise_modules": 3, "elements": 10, "equal": 10, "max_ulp": 0, "errors": [],
            "bitwise": True, "gemm": "vnni"}
    assert backend_text(same) == "bit for bit on every module (GEMM path vnni)"
    assert backend_text({**same, "gemm": None}) == "bit for bit on every module"
    off = {**same, "bitwise": False, "bitwise_modules": 2, "equal": 9, "max_ulp": 1, "errors": ["boom"]}
    assert backend_text(off) == "2/3 modules bitwise, 9/10 elements equal, max 1 ULP (GEMM path vnni); boom"
