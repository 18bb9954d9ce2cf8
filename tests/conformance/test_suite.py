"""The shipped conformance suite (``pytest --pyargs conformance.suite --w8a8-backend NAME``) as a third party
runs it: through the pytest plugin, in its own pytest process, with drawn, named and error cases per op.
(The suite against torch-cpu, strictly, is tests/backends/test_torch_cpu_conformance.py.)"""

import re
import subprocess
import sys


def _suite(*args):
    return subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", "-p", "no:cacheprovider",
                           "--hypothesis-profile", "dev", *args], capture_output=True, text=True, timeout=600)


def test_the_suite_runs_drawn_named_and_error_cases_through_the_plugin():
    out = _suite("--w8a8-backend", "numpy", "--w8a8-op", "trans_quant_param", "--w8a8-op", "nz_to_nd", "-v",
                 "--hypothesis-show-statistics")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    # the drawn tests' Hypothesis statistics, not an empty section
    stats = out.stdout.split("Hypothesis Statistics", 1)[1]
    assert re.search(r"test_backend_agrees_with_golden\[numpy-trans_quant_param\]:\n\n  - during generate phase "
                     r"\([\d.]+ seconds\):\n    - Typical runtimes: .*\n    - \d+ passing( examples|, \d+ failing)", stats), \
        stats[:2000]   # "10 passing examples" up to Hypothesis 6.16x, "10 passing, 0 failing, and 0 invalid ..." after
    passed = re.findall(r"::(\w+)\[([^\]]+)\] PASSED", out.stdout)
    kinds = {(test, param.split("-", 1)[1].split("/")[0].split(":")[0]) for test, param in passed}
    for op in ("trans_quant_param", "nz_to_nd"):
        assert {("test_backend_agrees_with_golden", op), ("test_named_case", op), ("test_error_case", op)} <= kinds
    assert ("test_backend_agrees_with_golden", "trans_quant_param") in kinds
    assert any(p.endswith("trans_quant_param:bits") for _, p in passed)   # one test per strategy


def test_a_planted_bug_fails_the_suite_with_its_attribution():
    out = _suite("--w8a8-backend", "conformance.planted:TiesAwayBackend", "--w8a8-op", "dynamic_quant",
                 "-k", "named_case and ties_half_even]")
    assert out.returncode == 1, out.stdout[-3000:]
    assert "dynamic_quant/ties_half_even" in out.stdout and "backend differs from the documented y" in out.stdout
    assert "likely cause: tie rounding" in out.stdout


def test_ops_a_backend_does_not_implement_are_deselected_not_skipped():
    """torch-cpu lacks moe_distribute_combine (the EP ops live in torch-dist): its suite tests are not
    collected as skips but deselected, and nz_to_nd's stay."""
    out = _suite("--w8a8-backend", "torch-cpu", "--w8a8-op", "moe_distribute_combine", "--w8a8-op", "nz_to_nd",
                 "--collect-only", "-q")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    collected = [li for li in out.stdout.splitlines() if "::" in li]
    assert collected and all("nz_to_nd" in li for li in collected), collected
    m = re.search(r"(\d+) deselected", out.stdout)
    assert m and int(m.group(1)) > 0, out.stdout[-1000:]
