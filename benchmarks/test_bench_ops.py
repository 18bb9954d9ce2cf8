"""pytest-benchmark suite: every benchmarked op and the two whole paths (dynamic linear, MoE layer),
parametrised by backend, at DeepSeek-V4-Flash shapes (bench.cases; ``w8a8 bench`` runs
the same cases with verification and peak ratios).

    python -m pytest benchmarks/test_bench_ops.py --benchmark-only            # the quick set
    W8A8_BENCH_FULL=1 python -m pytest benchmarks/test_bench_ops.py --benchmark-only   # every shape
    python -m pytest benchmarks/test_bench_ops.py --benchmark-only --backend torch-cpu

Only the device work is timed (``Backend.prepare(...).run``): conversions, weight loading and
transfers happen before. Each case first checks the backend's output against the golden on the
same inputs (bitwise, or the packaged tolerance table) — a wrong kernel is not timed.
"""

import os

import numpy as np
import pytest

import backends
from bench.cases import all_cases
from bench.runner import case_seed
from conformance.compare import FAIL, compare
from conformance.registry import get
from conformance.tolerances import ToleranceTable

FULL = os.environ.get("W8A8_BENCH_FULL") == "1"
CASES = [c for c in all_cases(FULL) if FULL or "quick" in c.tags]
TABLE = ToleranceTable.packaged()


def _backends(config):
    requested = config.getoption("--backend") or []
    return requested or [b.name for b in backends.available()]


def pytest_generate_tests(metafunc):
    if "bench_backend" in metafunc.fixturenames:
        metafunc.parametrize("bench_backend", _backends(metafunc.config))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op(benchmark, bench_backend, case):
    b = backends.get(bench_backend)
    if case.op not in b.ops():
        pytest.skip(f"{b.name} does not implement {case.op}")
    args, kwargs = case.build(np.random.default_rng(case_seed(case.name)))
    prepared = b.prepare(case.op, *args, **kwargs)
    spec = get(case.op)
    got = spec.as_outputs(prepared())
    if b.name != "numpy":
        ref = spec.as_outputs(backends.get("numpy").call(case.op, *args, **kwargs))
        for out in spec.outputs:
            tol = TABLE.lookup(b.name, case.op, out.name, str(ref[out.name].dtype))
            c = compare(out.name, out.kind, ref[out.name], got[out.name], tolerance=tol)
            assert c.verdict != FAIL, f"{b.name} disagrees with the golden on {case.name}: {c.note}"
    benchmark.extra_info.update(work=case.work, unit=case.unit, shape=case.label)
    benchmark.pedantic(prepared.run, rounds=3, warmup_rounds=1)
