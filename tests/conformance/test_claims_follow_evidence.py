"""Audit: every cause says no more than its evidence. One test per class of unsupported statement found.

1. evidence read from a scale was followed by "the codes follow from that scale" — never checked;
2. a scale a few ULP off was "the same formula in another order of operations" — a possibility, not a finding;
3. a detector that explains some mismatches said "part of the mismatches" — now how many of how many.
"""

from __future__ import annotations

import numpy as np

from conformance.attribution import scale_evidence
from replay import engine, golden
from w8a8 import dtypes as _dt

NUM = golden.declared_numerics("ascend910_93", None)


def test_scale_evidence_does_not_claim_the_codes_follow():
    """A backend whose scale is bf16-rounded AND whose codes are off in a way no record reproduces."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((9, 64)) * 3).astype(np.float32).astype(_dt.bfloat16)
    op = "dynamic_quant"
    ref = engine.name_outputs(op, golden.run(op, (x,), {}, platform="ascend910_93", numerics=None))
    dev = {"y": ref["y"].copy(), "scale": ref["scale"].astype(_dt.bfloat16).astype(np.float32)}
    dev["y"][0, :3] = -dev["y"][0, :3]
    comps = {n: engine.compare_output(op, n, k, ref[n], dev[n]) for n, k in engine.outputs_of(op)}
    at = engine.attribute(op, (x,), {}, dev, comps, NUM, {})
    assert not at["reproduced"]
    assert "bf16" in at["cause"]
    assert "the codes follow" not in at["cause"] and "not checked against that scale" in at["cause"]


def test_a_few_ulp_scale_difference_is_a_consistency_not_a_cause():
    ref = np.array([0.1, 0.2, 0.3], np.float32)
    got = (ref.view(np.uint32) + np.array([1, 0, 2], np.uint32)).view(np.float32)
    (words,) = scale_evidence(ref, got)
    assert words.startswith("the scales differ by at most 2 fp32 ULP: consistent with")


def test_partial_detector_explanation_counts_what_it_explains(monkeypatch):
    """A detector matching some of the differing elements: the cause says how many of how many."""
    from conformance import detectors

    def partial(spec, args, kwargs, numerics, ref, got, masks, stages):
        return {"causes": ["a known bug [x]"], "names": ["x"], "complete": False, "stage": None,
                "explained": {"x": 2}}

    monkeypatch.setattr(detectors, "explain", partial)
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((5, 64)) * 3).astype(np.float32).astype(_dt.bfloat16)
    op = "dynamic_quant"
    ref = engine.name_outputs(op, golden.run(op, (x,), {}, platform="ascend910_93", numerics=None))
    dev = {"y": ref["y"].copy(), "scale": ref["scale"]}
    dev["y"][0, :5] = -dev["y"][0, :5]
    comps = {n: engine.compare_output(op, n, k, ref[n], dev[n]) for n, k in engine.outputs_of(op)}
    at = engine.attribute(op, (x,), {}, dev, comps, NUM, {})
    differing = int(np.count_nonzero(dev["y"] != ref["y"]))
    assert f"a known bug [x] (explains 2 of the {differing} differing elements)" in at["cause"]


def test_a_relative_error_magnitude_is_a_consistency_not_a_cause():
    from conformance import registry
    from conformance.attribution import _heuristic

    spec = registry.get("quant_matmul")
    text = _heuristic(spec, "y", {"y": {"kind": "float", "max_rel": 2.0 ** -8.5}}, ("fp19_scale",), None)
    assert "consistent with" in text and "no record reproduces" in text
    text = _heuristic(spec, "y", {"y": {"kind": "float", "max_rel": 2.0 ** -10.2}}, ("fp19_scale",), None)
    assert text.startswith("relative error about 2^-10: consistent with an FP19-truncated scale")
