"""The bench's roofline (bench/roofline.py), the bandwidth probe (bench/peak.py), the peers
(bench/peers.py) and the README tables generated from the JSON (bench/readme_table.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import peak, readme_table, report, roofline
from conformance.ops.dense.w8a8_dynamic_linear import bench_case as dynamic_linear_case
from conformance.ops.moe.w8a8_moe import bench_case as moe_layer_case
from bench.timing import stats

# a Zen 4 like this project's CI machine: 0.92 TOPS int8, 1 MiB L2 per core, 32 MiB LLC, 2 cores
PEAKS = peak.Peaks(9.2e11, 1.1e11, "int8_vnni_avx512", "fp64_fma_avx512", "test", 2, bw_l2=2.3e11, bw_llc=2.0e11,
                   bw_dram=3.4e10, l2_bytes=1 << 20, llc_bytes=32 << 20)


def _record(case, seconds, backend="torch-cpu"):
    return {"backend": backend, "case": case.name, "op": case.op, "label": case.label, "params": case.params,
            "work": case.work, "unit": case.unit, "tags": list(case.tags), "status": "ok", "verified": True,
            "stats": stats([seconds] * 3)}


def test_decode_linear_traffic_and_its_limit():
    # M = 16, K = N = 4096: 16.8 MB of int8 weights, 128 KiB of bf16 in and out, 0.54 GOP. The working set
    # (17 MB) fits in 3/4 of the 32 MiB LLC here, so the weights come from the cache between rounds and the
    # int8 units limit: 0.537e9 / 0.92e12 = 0.58 ms, while 17.1 MB at 200 GB/s needs only 0.09 ms.
    case = dynamic_linear_case(16, 4096, 4096)
    tr = roofline.traffic(case.op, case.params, case.work)
    assert tr.ops == 2 * 16 * 4096 * 4096
    assert tr.bytes == 4096 * 4096 + 2 * 16 * 4096 * 2 + 8 * 4096 + 4 * 16
    r = roofline.roofline(_record(case, 1.0e-3), PEAKS, PEAKS.int8, "int8")
    assert r.level == "LLC" and r.limit == "int8"
    assert r.pct == pytest.approx(tr.ops / PEAKS.int8 / 1.0e-3)
    assert r.dram_pct == pytest.approx(tr.bytes / PEAKS.bw_dram / 1.0e-3)   # weights read once from memory
    assert r.label() == f"int8-bound at {100 * r.pct:.0f}%"


def test_moe_layer_is_bandwidth_bound_out_of_cache():
    # T = 256 tokens top-6 over E = 256 experts: 256 * (1 - (1 - 6/256)^256) = 255.4 experts touched,
    # 25.2 MB each (W13 4096 x 4096 + W2 2048 x 4096): 6.4 GB, far beyond the LLC -> DRAM.
    case = moe_layer_case(256, 256)
    tr = roofline.traffic(case.op, case.params, case.work)
    touched = roofline.touched_experts(256, 256, 6)
    assert touched == pytest.approx(256 * (1 - (1 - 6 / 256) ** 256)) and 255 < touched < 256
    assert tr.bytes == pytest.approx(touched * (3 * 4096 * 2048 + 2 * (2 * 2048 + 4096)) + 256 * 4096 * 4 + 256 * 48)
    r = roofline.roofline(_record(case, 0.3), PEAKS, PEAKS.int8, "int8")
    assert r.level == "DRAM" and r.limit == "bandwidth (DRAM)"
    assert r.label() == f"bandwidth-bound (DRAM) at {100 * tr.bytes / PEAKS.bw_dram / 0.3:.0f}%"


def test_levels_follow_the_working_set():
    assert roofline.level(PEAKS, 512 << 10)[0] == "L2"        # within half of the two L2s
    assert roofline.level(PEAKS, 8 << 20)[0] == "LLC"
    assert roofline.level(PEAKS, 24 << 20)[0] == "LLC"         # within 3/4 of the LLC
    assert roofline.level(PEAKS, 25 << 20)[0] == "DRAM"
    no_bw = peak.Peaks(1e12, 1e11, "x", "y", "test", 2)
    assert roofline.roofline(_record(dynamic_linear_case(16, 64, 64), 1e-3), no_bw, 1e12, "int8") is None
    assert roofline.traffic("swiglu", {}, 1.0) is None


def test_annotate_adds_the_roofline_and_the_table_names_it():
    from rich.console import Console

    recs = [_record(dynamic_linear_case(16, 4096, 4096), 1e-3), _record(moe_layer_case(16, 16), 0.02)]
    report.annotate(recs, PEAKS)
    assert recs[0]["roofline"]["limit"] == "int8" and recs[1]["roofline"]["limit"] == "bandwidth (DRAM)"
    console = Console(record=True, width=400)
    report.print_table(recs, PEAKS, console, verbose=True)   # the roofline column is under -v
    text = console.export_text()
    assert "int8-bound (AVX-512 VNNI) at 58% (DRAM bw 50%)" in text and "bandwidth-bound (DRAM) at" in text
    assert "out of cache 34.0" in text and "(int8_vnni_avx512)" in text


def test_bandwidth_probe_measures_three_levels():
    out = peak.measure_bandwidth(threads=1, seconds=0.05)
    for key in ("bw_l2", "bw_llc", "bw_dram"):
        assert 1e8 < out[key] < 5e12, (key, out[key])   # between 0.1 GB/s and 5 TB/s per core
    assert out["bw_method"]
    sizes = peak.bandwidth_sizes(2, 1 << 20, 32 << 20)
    assert sizes == {"bw_l2": 512 << 10, "bw_llc": 8 << 20, "bw_dram": 128 << 20}


def test_peaks_best_keeps_the_larger_ceiling():
    a = peak.Peaks(1e12, 1e11, "x", "y", "a", 2, bw_dram=3e10)
    b = peak.Peaks(2e12, 5e10, "x", "y", "b", 2, bw_dram=1e10, bw_llc=2e11)
    m = a.best(b)
    assert (m.int8, m.fp64, m.bw_dram, m.bw_llc, m.method) == (2e12, 1e11, 3e10, 2e11, "a")
    assert peak.Peaks.from_dict(m.as_dict()) == m


# -- peers -------------------------------------------------------------------------------------------------

def test_sqnr():
    ref = np.array([1.0, -2.0, 3.0])
    assert peers_mod().sqnr_db(ref, ref) == float("inf")
    assert peers_mod().sqnr_db(ref, ref + np.array([0.1, 0, 0])) == pytest.approx(10 * np.log10(14 / 0.01))


def peers_mod():
    from bench import peers

    return peers


@pytest.mark.torch
def test_peers_run_case_records():
    pytest.importorskip("torch")
    peers = peers_mod()
    recs = peers.run_case(dynamic_linear_case(5, 64, 48), min_rounds=2, max_rounds=3, max_time=0.0, warmup=1)
    by = {r["backend"]: r for r in recs}
    tc = by["torch-cpu"]
    assert tc["status"] == "ok" and tc["verified"] and tc["numerics"] == "bit-identical to the golden"
    assert tc["group"] == "peers" and tc["case"].endswith("[peers]") and tc["stats"]["rounds"] >= 2
    gemm = by["torch._int_mm GEMM only"]
    assert gemm["numerics"].startswith("GEMM only") and not gemm["verified"] and gemm["torch_cpu_speedup"] > 0
    bf16 = by["torch bf16 matmul"]
    assert bf16["numerics"].startswith("different numerics") and 20 < bf16["sqnr_db"] < 80
    for r in recs:   # every candidate: timed, or a record that says why not
        assert r["status"] == "ok" or r.get("note"), r
        assert peers.expected_unverified(r) == (r["backend"] != "torch-cpu")


def test_per_token_onnx_graph_computes_the_per_token_scheme():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import onnxruntime as ort

    peers = peers_mod()
    rng = np.random.default_rng(0)
    m, k, n = 4, 32, 8
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[2] = 0.0   # an all-zero row: the scale is clamped to 1e-30, codes 0
    w = rng.integers(-127, 128, (n, k), dtype=np.int8)
    ws = (rng.random(n) * 1e-2).astype(np.float32)
    sess = ort.InferenceSession(peers.per_token_graph(k, n, w, ws).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, {"X": x})[0]
    s = np.maximum(np.abs(x).max(1, keepdims=True) / np.float32(127), np.float32(1e-30))
    q = np.clip(np.rint(x / s), -128, 127).astype(np.int64)   # QuantizeLinear: round half to even, saturate
    want = ((q @ w.astype(np.int64).T).astype(np.float32) * s) * ws
    np.testing.assert_array_equal(got, want.astype(np.float32))


# -- the README tables ------------------------------------------------------------------------------------

def _bench_json(tmp_path):
    case = dynamic_linear_case(16, 4096, 4096)
    recs = []
    for name, t, numerics in (("torch-cpu", 1e-3, "bit-identical to the golden"),
                              ("torch bf16 matmul", 2e-3, "different numerics: SQNR 40.0 dB vs the golden")):
        r = _record(case, t, name)
        r.update(group="peers", case=case.name + " [peers]", numerics=numerics, verified=name == "torch-cpu",
                 no_roofline=name != "torch-cpu")
        recs.append(r)
    recs.append(_record(moe_layer_case(16, 16), 0.02))
    report.annotate(recs, PEAKS)
    data = report.pytest_benchmark_json(recs, {"peaks": PEAKS.as_dict(), "command": "w8a8 bench --peers"})
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data, default=str))
    return path


def test_readme_tables_are_generated_from_the_json(tmp_path):
    text = readme_table.render(json.loads(_bench_json(tmp_path).read_text()))
    assert "| torch bf16 matmul | 2.00 ms (2.00 ms–2.00 ms) **2.00×** |" in text
    assert "| torch-cpu | 1.00 ms (1.00 ms–1.00 ms) |" in text
    assert "bandwidth-bound (DRAM) at" in text and "`w8a8 bench --peers`" in text
    assert "| `w8a8_moe` T16xE16xk6 | 20.00 ms | bandwidth-bound (DRAM) at" in text
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{readme_table.BEGIN}\nold table\n{readme_table.END}\nafter\n")
    assert readme_table.main([str(tmp_path / "bench.json"), "--readme", str(readme)]) == 0
    new = readme.read_text()
    assert "old table" not in new and "before" in new and "after" in new and "**2.00×**" in new
    readme.write_text("no markers")
    with pytest.raises(ValueError, match="perf-table"):
        readme_table.main([str(tmp_path / "bench.json"), "--readme", str(readme)])
