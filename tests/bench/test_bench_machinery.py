"""The bench machinery: statistics, memory sampling, peaks, verification, pytest-benchmark JSON.
(No timing assertions: speed is measured by `w8a8 bench`, never asserted.)"""

import json
import subprocess
import sys

import numpy as np
import pytest

from bench import report
from bench.cases import all_cases
from conformance.ops.dense.quant_matmul import bench_case as quant_matmul_case
from conformance.ops.dense.w8a8_dynamic_linear import bench_case as dynamic_linear_case
from bench.peak import measure
from bench.runner import run
from bench.timing import PeakMemory, stats, time_call


def test_stats_follow_pytest_benchmark_definitions():
    s = stats([4.0, 1.0, 3.0, 2.0, 100.0])
    assert s["min"] == 1.0 and s["max"] == 100.0 and s["median"] == 3.0 and s["rounds"] == 5
    assert s["q1"] == 2.0 and s["q3"] == 4.0 and s["iqr"] == 2.0
    assert s["iqr_outliers"] == 1  # 100 is beyond q3 + 1.5 iqr
    assert s["hd15iqr"] == 4.0 and s["ld15iqr"] == 1.0
    assert s["mean"] == pytest.approx(22.0) and s["ops"] == pytest.approx(1 / 22.0)


def test_peak_memory_sees_a_large_allocation():
    with PeakMemory() as mem:
        block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
        block[::4096] = 2.0
    assert mem.peak >= 48 * 2**20, mem.peak
    del block


def test_time_call_runs_warmup_then_rounds_and_reports_transfers():
    import backends

    b = backends.get("numpy")
    case = quant_matmul_case(8, 64, 32)
    args, kwargs = case.build(np.random.default_rng(0))
    t = time_call(b.prepare(case.op, *args, **kwargs), min_rounds=4, max_time=0.0)
    assert t["stats"]["rounds"] == 4 and len(t["data"]) == 4
    assert t["transfer_in_s"] >= 0 and t["transfer_out_s"] >= 0
    assert t["result"].shape == (8, 32) and str(t["result"].dtype) == "bfloat16"


def test_peaks_are_measured_on_this_cpu_and_physically_possible():
    p = measure(threads=1, iters=2_000_000)
    assert p.int8 > 0 and p.fp64 > 0 and p.threads == 1
    assert p.int8 > p.fp64  # any int8 unit does more ops per cycle than fp64 FMA
    if p.fp64_unit == "fp64_fma_avx512":
        # one core does at most 2 x 8-lane FMAs (32 flop) per cycle; at 6 GHz that is 192 GFLOP/s. A
        # compiler that merges the 16 identical-looking chains into one (CSE) reports more than that.
        assert p.fp64 < 32 * 6e9, p.fp64
    if p.int8_unit == "int8_vnni_avx512":
        assert p.int8 < 256 * 6e9, p.int8  # 2 x 64 int8 MACs per cycle at most


def test_cases_come_from_the_declarations_and_pickle_whole():
    # every declared bench case is an op of the registry and travels to a worker process by pickle
    import pickle

    from conformance.registry import specs

    declared = specs()
    for c in all_cases(False):
        assert c.op in declared and c.name == f"{c.op}[{c.label}]"
        back = pickle.loads(pickle.dumps(c))
        assert back.name == c.name and back.params == c.params and back.work == c.work and back.tags == c.tags
        assert getattr(back.inputs, "func", back.inputs) is getattr(c.inputs, "func", c.inputs)  # the same builder


def test_dsv4_cases_cover_decode_and_prefill():
    full = all_cases(True)
    ms = {c.params["m"] for c in full if c.op == "w8a8_dynamic_linear" and "dsv4" in c.tags}
    assert ms == {1, 16, 64, 512, 4096}
    assert all("quick" in c.tags for c in all_cases(False) if c.op == "w8a8_dynamic_linear" and "dsv4" in c.tags
               and c.params["m"] in (16, 512))
    assert dynamic_linear_case(16, 4096, 4096).work == 2 * 16 * 4096 * 4096


def test_a_wrong_backend_is_unverified_and_a_right_one_verified(tmp_path):
    # an fp32 per-channel scale on the per-token path: the planted backend truncates it to FP19 there
    small = [dynamic_linear_case(8, 64, 32, ("quick",)), quant_matmul_case(16, 64, 64, ("quick",), "float32")]
    records = run(["numpy", "planted-fp19-everywhere"], small, full=False,
                  registrations={"planted-fp19-everywhere": "conformance.planted:Fp19EverywhereBackend"},
                  timing={"max_time": 0.0, "min_rounds": 2}, workdir=str(tmp_path))
    got = {(r["backend"], r["op"]): r for r in records}
    assert got[("numpy", "w8a8_dynamic_linear")]["verified"] and got[("numpy", "quant_matmul")]["verified"]
    # a bf16 scale survives FP19 truncation unchanged (7 < 10 mantissa bits): that case is verified
    assert got[("planted-fp19-everywhere", "w8a8_dynamic_linear")]["verified"]
    bad = got[("planted-fp19-everywhere", "quant_matmul")]
    assert bad["status"] == "ok" and not bad["verified"] and "y:" in bad["verify_note"]


def test_json_is_readable_by_pytest_benchmark_compare(tmp_path):
    from bench.peak import Peaks

    rec = {"backend": "numpy", "case": "quant_matmul[M1]", "op": "quant_matmul", "label": "M1", "params": {"m": 1},
           "work": 2e6, "unit": "OPS", "tags": ["dsv4"], "status": "ok", "verified": True,
           "stats": stats([1e-3, 2e-3, 1.5e-3]), "data": [1e-3, 2e-3, 1.5e-3], "peak_memory_bytes": 0,
           "transfer_in_s": 0.0, "load_s": 0.0, "transfer_out_s": 0.0}
    report.annotate([rec], Peaks(1e12, 1e11, "x", "y", "test", 2))
    path = tmp_path / "b.json"
    path.write_text(json.dumps(report.pytest_benchmark_json([rec], {"peaks": {}}), default=str))
    out = subprocess.run([sys.executable, "-c", "import sys; from pytest_benchmark.cli import main; sys.exit(main())",
                          "compare", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "test_quant_matmul[numpy-M1]" in out.stdout
    # the golden's exact GEMM runs on fp32 BLAS: measured against 2 x the fp64 FMA ceiling
    assert rec["ratio_to_fastest"] == 1.0 and rec["ratio_to_peak"] == pytest.approx(2e6 / 1.5e-3 / 2e11)
    assert rec["peak_kind"].startswith("fp32")


def test_lowbit_cases_are_registered_and_float64_formats_measured_against_the_fp64_ceiling():
    from bench.peak import Peaks

    quick = {c.op for c in all_cases(False) if "lowbit" in c.tags}
    assert quick == {"weight_quant_batchmatmul", "w4a8_dynamic_linear", "mx_matmul", "nvfp4_matmul",
                     "fp8_block_matmul"}
    by_op = {c.op: c for c in all_cases(False) if "lowbit" in c.tags}
    assert by_op["mx_matmul"].compute == "fp64" and by_op["w4a8_dynamic_linear"].compute is None
    peaks = Peaks(1e12, 1e11, "x", "y", "test", 2)
    recs = [{"backend": b, "case": "mx_matmul[M16]", "work": 2e9, "unit": "OPS", "compute": compute,
             "status": "ok", "verified": True, "stats": stats([1e-1])}
            for b, compute in (("numpy", "fp64"), ("torch-cpu", "fp64"), ("torch-cpu", None))]
    report.annotate(recs, peaks)
    # a case's own compute wins over the backend's declaration (numpy: fp32, torch-cpu: int8)
    assert [r["peak_kind"] for r in recs] == ["fp64 FMA", "fp64 FMA", "int8"]
    assert recs[0]["ratio_to_peak"] == pytest.approx(2e10 / 1e11) and recs[2]["ratio_to_peak"] == pytest.approx(0.02)


def test_percent_of_peak_never_exceeds_100_and_elementwise_ops_and_memory_are_shown_plainly(tmp_path):
    """A call faster than the measured fp64 ceiling shows 100 % (a ceiling is the best rate seen), an
    element-wise op (no OPS) '–', a peak memory under 1 MiB '< 1 MiB', an unmeasured one '-'; never '0 MiB'."""
    import io

    from rich.console import Console

    from bench.peak import Peaks

    peaks = Peaks(1e12, 1e11, "x", "y", "test", 2)
    fast = {"backend": "numpy", "case": "mx_matmul[M16]", "op": "mx_matmul", "label": "M16", "work": 2e9,
            "unit": "OPS", "compute": "fp64", "status": "ok", "verified": True, "stats": stats([1e-3]),
            "peak_memory_bytes": 4096}
    elementwise = {"backend": "numpy", "case": "dynamic_quant[M16]", "op": "dynamic_quant", "label": "M16",
                   "work": 65536, "unit": "elem", "status": "ok", "verified": True, "stats": stats([1e-4]),
                   "peak_memory_bytes": 0}
    report.annotate([fast, elementwise], peaks)
    assert fast["ratio_to_peak"] == 1.0 and elementwise.get("ratio_to_peak") is None
    buf = io.StringIO()
    report.print_table([fast, elementwise], peaks, console=Console(file=buf, width=250), verbose=True)
    text = buf.getvalue()
    assert "100.0% fp64" in text and "\u2013" in text and "< 1 MiB" in text
    assert "0 MiB" not in text.replace("< 1 MiB", "") and "200.0%" not in text
    html = report.render_html([fast, elementwise], peaks, [], {"command": "w8a8 bench"})
    assert "100.0% fp64" in html and "\u2013" in html and " 0 MiB" not in html
