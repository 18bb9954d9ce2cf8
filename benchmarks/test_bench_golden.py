"""Speed of the golden's hot paths at M = K = N = 2048 (pytest-benchmark; no assertions on time).

Run: ``python -m pytest benchmarks/test_bench_golden.py --benchmark-only`` (well under a minute on
two idle cores). After the last benchmark the module prints the two ratios the golden is held to,
from the medians of this run:

* exact int8 GEMM (:func:`w8a8.int_matmul`, its casts included) >= 1.5x faster than a float64
  ``np.matmul`` of the same shape on pre-cast operands — the BLAS route of
  :mod:`w8a8.intgemm` (float32 chunks of K <= 2^24 / (max|a| * max|b|), exact);
* the whole ``w8a8_dynamic_linear`` (bf16 x, int8 [N, K] checkpoint weight: dynamic_quant + GEMM +
  per-token epilogue + bf16 cast) <= 1.3x the time of its GEMM.

float32 ``np.matmul`` is the ceiling: the int GEMM is float32 GEMMs over K chunks plus casts.
The machine is shared: compare ratios within one run, never absolute times across runs.
"""

import numpy as np
import pytest

from w8a8 import bfloat16, int_matmul, w8a8_dynamic_linear

M = K = N = 2048
ROUNDS = dict(rounds=5, iterations=1, warmup_rounds=1)
_MEDIANS: dict[str, float] = {}


def _record(name, benchmark):
    stats = getattr(benchmark, "stats", None)           # None under --benchmark-disable
    if stats is not None and getattr(stats, "stats", None) is not None:
        _MEDIANS[name] = float(stats.stats.median)


@pytest.fixture(scope="module", autouse=True)
def ratio_summary(request):
    """Print the target ratios once the module's benchmarks have run (straight to the terminal)."""
    yield
    m = _MEDIANS
    lines = []
    if {"int_matmul", "float64_matmul"} <= m.keys():
        lines.append(f"exact int8 GEMM speed-up over float64 matmul: {m['float64_matmul'] / m['int_matmul']:.2f}x"
                     " (target >= 1.5x)")
    if {"int_matmul", "float32_matmul"} <= m.keys():
        lines.append(f"exact int8 GEMM time / float32 matmul time: {m['int_matmul'] / m['float32_matmul']:.2f}")
    if {"int_matmul", "w8a8_dynamic_linear"} <= m.keys():
        lines.append(f"w8a8_dynamic_linear time / its GEMM time: {m['w8a8_dynamic_linear'] / m['int_matmul']:.2f}"
                     " (target <= 1.3)")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if lines and reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():   # teardown output is captured otherwise
            reporter.write_line("")
            for line in ["w8a8 golden targets (medians of this run):"] + lines:
                reporter.write_line(line)


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    return a, b


def test_int_matmul_int8(benchmark, operands):
    a, b = operands
    benchmark.group = "gemm-2048"
    out = benchmark.pedantic(int_matmul, args=(a, b), **ROUNDS)
    _record("int_matmul", benchmark)
    assert out.dtype == np.int32 and out.shape == (M, N)


def test_numpy_float64_matmul(benchmark, operands):
    a, b = (v.astype(np.float64) for v in operands)      # cast outside the timed region
    benchmark.group = "gemm-2048"
    benchmark.pedantic(np.matmul, args=(a, b), **ROUNDS)
    _record("float64_matmul", benchmark)


def test_numpy_float32_matmul(benchmark, operands):
    a, b = (v.astype(np.float32) for v in operands)
    benchmark.group = "gemm-2048"
    benchmark.pedantic(np.matmul, args=(a, b), **ROUNDS)
    _record("float32_matmul", benchmark)


def test_w8a8_dynamic_linear_bf16(benchmark, operands):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((M, K), dtype=np.float32).astype(bfloat16)
    weight = np.ascontiguousarray(operands[1].T)          # checkpoint layout [N, K]
    weight_scale = (rng.random((N, 1), dtype=np.float32) * 1e-3).astype(np.float32)
    benchmark.group = "gemm-2048"
    y = benchmark.pedantic(w8a8_dynamic_linear, args=(x, weight, weight_scale), **ROUNDS)
    _record("w8a8_dynamic_linear", benchmark)
    assert y.dtype == bfloat16 and y.shape == (M, N)
