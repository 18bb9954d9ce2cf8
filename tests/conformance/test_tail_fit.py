"""The generalized-Pareto tail fit against distributions whose quantiles are known in closed form, and the
packaged torchao mx_matmul entry on a fresh draw (seeds the tuning never used)."""

import math

import numpy as np
import pytest

from conformance.tail_fit import fit


def test_an_exponential_tail_is_extrapolated_to_its_known_quantile():
    d = np.random.default_rng(1).exponential(1.0, 20000)  # P(D > u) = e^-u: u(1e-6) = ln(1e6) = 13.8
    f = fit(d, 1e-6)
    assert f.supported and abs(f.xi) < 0.1 and 11 < f.u_target < 16 and f.u_upper >= math.log(1e6) * 0.95


def test_a_heavy_tail_from_too_few_draws_is_refused_with_the_draws_it_needs():
    d = np.random.default_rng(2).pareto(3.0, 200)  # Lomax, xi = 1/3: u(1e-6) = 1e6^(1/3) - 1 = 99
    f = fit(d, 1e-6)
    assert not f.supported and f.need > 200 and "200 draws are not enough: need ~" in f.describe()


def test_no_difference_ever_needs_three_over_p_draws_to_certify():
    assert not fit([0] * 1000, 1e-3).supported and fit([0] * 3000, 1e-3).supported


@pytest.mark.slow
def test_the_packaged_mx_matmul_entry_holds_on_a_fresh_draw():
    pytest.importorskip("torchao")
    import backends
    from conformance.evaluate import run_case
    from conformance.registry import get
    from conformance.runner import draw_cases
    from conformance.tolerances import ToleranceTable, packaged_path

    backend = backends.get("torchao")
    if not backend.available()[0]:
        pytest.skip(backend.available()[1])
    table, spec = ToleranceTable.load(packaged_path()), get("mx_matmul")
    statuses = [run_case(spec, p, backend, tolerance=table, attribute_failures=False)["status"]
                for p in draw_cases(spec, 120, seed=7)]
    assert "fail" not in statuses and statuses.count("pass") + statuses.count("tolerated") > 60, statuses
