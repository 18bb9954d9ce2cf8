"""Attribution names an optional input the backend ignored, at the stage where it enters, for small and large
values of that input — and never claims a cause the evidence rules out.

The backend of these tests is the golden itself, called without one optional input (a kernel that drops its
bias / reads no smooth scales): what such a kernel computes, bit for bit. Before the "optional input ignored"
candidate, a dequant_swiglu_quant without its per-group bias (std 3..100: every row's scale off by hundreds of
fp32 ULP, a few codes off by one) was put down to "rounding at or near .5 ties, or a reciprocal-vs-divide
difference" — which move a scale by at most a few ULP — and a large bias got "no Numerics record reproduces".
"""

from __future__ import annotations

import numpy as np
import pytest

from replay import engine, golden
from w8a8 import dtypes as _dt
from w8a8.ulp import ulp_distance

NUM = golden.declared_numerics("ascend910_93", None)


def _attribute(op, args, kw, dropped):
    ref = engine.name_outputs(op, golden.run(op, args, kw, platform="ascend910_93", numerics=None))
    dev = engine.name_outputs(op, golden.run(op, args, {**kw, dropped: None}, platform="ascend910_93",
                                             numerics=None))
    comps = {n: engine.compare_output(op, n, k, ref[n], dev[n], mask=engine.masks(op, args, kw).get(n))
             for n, k in engine.outputs_of(op)}
    assert any(c["verdict"] == "fail" for c in comps.values())
    return ref, dev, engine.attribute(op, args, kw, dev, comps, NUM, engine.masks(op, args, kw))


def _swiglu_call(bias_std, seed=3):
    rng = np.random.default_rng(seed)
    t, h, g = 17, 64, 3
    x = rng.integers(-40000, 40000, (t, 2 * h)).astype(np.int32)
    kw = {"weight_scale": rng.uniform(1e-4, 1e-3, (g, 2 * h)).astype(np.float32),
          "activation_scale": rng.uniform(1e-3, 1e-2, (t,)).astype(np.float32),
          "group_index": np.array([7, 6, 4], np.int64), "quant_mode": 1, "activate_left": True,
          "bias": np.rint(rng.standard_normal((g, 2 * h)) * bias_std).astype(np.int32)}
    return (x,), kw


@pytest.mark.parametrize("std", [3.0, 100.0, 3000.0, 40000.0])
def test_dequant_swiglu_quant_bias_ignored(std):
    args, kw = _swiglu_call(std)
    ref, dev, at = _attribute("dequant_swiglu_quant", args, kw, "bias")
    if std <= 100:   # the small bias: scales off by far more than a reciprocal-vs-divide order
        assert int(ulp_distance(ref["scale"], dev["scale"]).max()) > 4
    assert at["reproduced"] and at["kind"] == "optional input"
    assert at["numerics_change"] == {"args": {"bias": None}}
    assert "optional input ignored" in at["cause"] and "'bias'" in at["cause"]
    assert "tie" not in at["cause"] and "reciprocal" not in at["cause"]


@pytest.mark.parametrize("lo, hi", [(0.995, 1.005), (0.1, 10.0)])
def test_dynamic_quant_smooth_scales_ignored_at_the_scale_stage(lo, hi):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((7, 64)) * 2).astype(np.float32).astype(_dt.bfloat16)
    kw = {"smooth_scales": rng.uniform(lo, hi, (64,)).astype(np.float32).astype(_dt.bfloat16)}
    _, _, at = _attribute("dynamic_quant", (x,), kw, "smooth_scales")
    assert at["reproduced"] and at["kind"] == "optional input"
    assert "'smooth_scales'" in at["cause"]
    assert at["first_stage"] == "scale"       # smooth scales multiply x before its amax: the scale moves first


@pytest.mark.parametrize("std", [0.001, 100.0])
def test_quant_matmul_bias_ignored_at_the_epilogue(std):
    rng = np.random.default_rng(7)
    x1 = rng.integers(-127, 128, (7, 64)).astype(np.int8)
    x2 = rng.integers(-127, 128, (64, 24)).astype(np.int8)
    kw = {"pertoken_scale": rng.uniform(1e-2, 2e-2, (7,)).astype(np.float32), "output_dtype": "bfloat16",
          "bias": (rng.standard_normal(24) * std).astype(np.float32).astype(_dt.bfloat16)}
    _, _, at = _attribute("quant_matmul", (x1, x2, rng.uniform(1e-4, 1e-3, (24,)).astype(np.float32)), kw, "bias")
    assert at["reproduced"] and at["kind"] == "optional input" and "'bias'" in at["cause"]
    assert at["first_stage"] == "y"           # a bf16 bias is added in the epilogue: the int32 acc is untouched


def test_no_cause_found_says_what_was_ruled_out_and_the_closest():
    """A backend that drops the bias AND rounds half away: no single candidate reproduces it. The cause then
    says what was tried, and the closest candidate with the mismatches it leaves."""
    args, kw = _swiglu_call(40000.0, seed=11)
    op = "dequant_swiglu_quant"
    ref = engine.name_outputs(op, golden.run(op, args, kw, platform="ascend910_93", numerics=None))
    dev = engine.name_outputs(op, golden.run(op, args, {**kw, "bias": None}, platform="ascend910_93",
                                             numerics=NUM.replace(round_mode="half_away")))
    dev["y"] = dev["y"].copy()
    dev["y"][0, :5] = -dev["y"][0, :5]         # and a few codes nothing reproduces
    masks = engine.masks(op, args, kw)
    comps = {n: engine.compare_output(op, n, k, ref[n], dev[n], mask=masks.get(n)) for n, k in engine.outputs_of(op)}
    at = engine.attribute(op, args, kw, dev, comps, NUM, masks)
    assert not at["reproduced"]
    assert "Ruled out in" in at["cause"] and "ignoring the optional inputs weight_scale, activation_scale, bias" in at["cause"]
    assert at["closest"]["mismatches_left"] < at["closest"]["mismatches"]
    assert f"leaves {at['closest']['mismatches_left']} of the {at['closest']['mismatches']}" in at["cause"]


def test_off_by_one_codes_with_far_scales_are_not_put_down_to_ties():
    """Codes off by one with scales hundreds of ULP away, no candidate reproducing: the heuristic says the scale's
    inputs or formula differ, never 'tie rounding or reciprocal-vs-divide'."""
    from conformance import registry
    from conformance.attribution import _heuristic

    spec = registry.get("dequant_swiglu_quant")
    comps = {"y": {"kind": "int", "max_code_diff": 1}, "scale": {"kind": "scale", "max_ulp": 500}}
    text = _heuristic(spec, None, comps, (), None, scale_ulps=500)
    assert "tie" not in text.split(":")[0] and "500 fp32 ULP" in text
    assert "reciprocal-vs-divide" in _heuristic(spec, None, comps, (), None, scale_ulps=2)
