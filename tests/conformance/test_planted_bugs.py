"""Planted bugs are caught *and attributed*: the right first stage and the right cause."""

import pytest

import backends
from conformance import registry
from conformance.evaluate import run_case
from conformance.runner import draw_cases

PLANTED = "conformance.planted:"


def _documented(op):
    """The op's named cases with hand-derived values (the pinned inputs without any would also meet the
    planted backends' own simplifications: no uint64 scales, no bias checks)."""
    return [{"named": c.key} for c in registry.named_cases(op) if c.expected]


def _failures(backend_spec, op, extra=(), n=30, seed=0):
    b = backends.get(PLANTED + backend_spec)
    spec = registry.get(op)
    cases = _documented(op) + list(extra) + draw_cases(spec, n, seed)
    records = [run_case(spec, p, b) for p in cases]
    assert not [r for r in records if r["status"] == "error"], [r["note"] for r in records if r["status"] == "error"]
    return [r for r in records if r["status"] == "fail"]


def _ties_case(op, **extra):
    return {"lead": [4], "h": 16, "dtype": "bfloat16", "dst_type": "int8", "smooth": "none", "group_index": None,
            "dist": "ties", "seed": 7, **extra}


def test_ties_away_from_zero_is_caught_at_the_codes_stage_as_tie_rounding():
    fails = _failures("TiesAwayBackend", "dynamic_quant", extra=[_ties_case("dynamic_quant")])
    assert len(fails) >= 2
    for r in fails:
        at = r["attribution"]
        assert at["first_stage"] == "codes" and at["reproduced"], at
        assert at["numerics_change"] == {"round_mode": "half_away"}
        assert "tie rounding" in at["cause"]
    assert any(r["name"] == "dynamic_quant/ties_half_even" for r in fails)


def test_ties_away_propagates_to_the_linear_path_and_is_attributed_to_x_q():
    tie = {"lead": [8], "k": 64, "n": 16, "dtype": "bfloat16", "bias": False, "dist": "ties", "seed": 3}
    fails = _failures("TiesAwayBackend", "w8a8_dynamic_linear", extra=[tie], n=5)
    assert fails
    for r in fails:
        assert r["attribution"]["first_stage"] == "x_q"
        assert "tie rounding" in r["attribution"]["cause"]


def test_divide_by_amax_over_127_is_caught_as_reciprocal_vs_divide():
    fails = _failures("DivideScaleBackend", "dynamic_quant", n=40)
    assert len(fails) >= 3
    stages = {r["attribution"]["first_stage"] for r in fails}
    assert stages <= {"scale", "codes"} and stages
    for r in fails:
        at = r["attribution"]
        assert at["reproduced"]
        assert "divide" in at["cause"], at["cause"]
    doc = [r for r in fails if r["name"] == "dynamic_quant/reciprocal_vs_divide"]
    assert doc and doc[0]["attribution"]["first_stage"] == "codes"
    assert doc[0]["attribution"]["numerics_change"]["quant_codes"] == "div_scale"


def test_fp19_on_the_per_token_path_is_caught_at_the_epilogue_as_fp19_truncation():
    case = {"combo": ["bfloat16", "float32", None, False, True], "m": 16, "k": 64, "n": 32, "batch": [],
            "per_tensor": False, "dist_a": "uniform", "dist_b": "uniform", "seed": 11}
    fails = _failures("Fp19EverywhereBackend", "quant_matmul", extra=[case])
    assert fails
    for r in fails:
        at = r["attribution"]
        assert at["first_stage"] == "y"  # the int32 accumulator stage agrees
        assert at["numerics_change"] == {"fp19_scale": "always"}
        assert "FP19 scale truncation" in at["cause"]


def test_int32_bias_after_dequant_is_caught_at_the_epilogue():
    case = {"combo": ["bfloat16", "bfloat16", "int32", False, False], "m": 8, "k": 32, "n": 16, "batch": [],
            "per_tensor": False, "dist_a": "uniform", "dist_b": "uniform", "seed": 5}
    fails = _failures("BiasAfterDequantBackend", "quant_matmul", extra=[case])
    assert any(r["name"] == "quant_matmul/int32_bias_before_dequant" for r in fails)
    for r in fails:
        at = r["attribution"]
        assert at["first_stage"] == "y"
        assert at["numerics_change"] == {"int32_bias": "after_dequant"}
        assert "int32 bias" in at["cause"]


@pytest.mark.parametrize("op", ["dynamic_quant", "quant_matmul", "w8a8_dynamic_linear"])
def test_the_same_cases_pass_on_the_golden_itself(op):
    # so the failures above are the planted bugs', not the cases'
    spec = registry.get(op)
    for p in _documented(op) + draw_cases(spec, 30, 0):
        assert run_case(spec, p, backends.get("numpy"))["status"] in ("pass", "mistrusted", "refused")
