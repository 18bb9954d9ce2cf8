"""The engine judging kernels written for other libraries' numerics (the engine half).

* capabilities: a backend's declined calls are not drawn (counted as outside), and a declined call that is
  run anyway is ``unsupported`` with the reason — never a failure;
* true causes: planted foreign-style kernels are attributed to the right stage and the right cause (the open
  Numerics fields, an ignored ``scale_mode`` argument, a fused kernel's own activation quant), never "FP19"
  for an op without FP19;
* detectors: each named library bug (docs/backends.md) is caught on a kernel that has it — a
  planted NumPy kernel here, the real torchao 0.18 where installed — and fires on nothing else;
* grouped reports: one group per (backend, op, stage, cause), distances in human units.
"""

from __future__ import annotations

import numpy as np
import pytest

import backends
from backends.numpy_backend import NumpyBackend
from conformance import detectors, registry
from conformance.attribution import applicable_fields
from conformance.drawing import can_decline, declined
from conformance.evaluate import run_case
from conformance.reports import grouping
from conformance.results import distance_text, summarize
from conformance.runner import draw_cases, plan
from w8a8.ulp import NAN_DISTANCE

PLANTED = "conformance.planted:"


def _records(backend_spec, op, params_list):
    b = backends.get(PLANTED + backend_spec if backend_spec[0].isupper() else backend_spec)
    spec = registry.get(op)
    return [run_case(spec, p, b) for p in params_list]


def _dq_case(dist="gaussian", seed=1, dtype="bfloat16", h=64):
    return {"lead": [32], "h": h, "dtype": dtype, "dst_type": "int8", "smooth": "none", "group_index": None,
            "dist": dist, "seed": seed}


# ------------------------------------------------------------------------------------------------
# capabilities


def test_the_planner_draws_only_what_the_backend_takes_and_counts_the_rest():
    name = PLANTED + "HalfRangeBf16ScaleBackend"
    stats: dict = {}
    tasks, _ = plan([name], ["dynamic_quant"], profile="dev", draw_stats=stats)
    b, spec = backends.get(name), registry.get("dynamic_quant")
    drawn = [t for t in tasks if t.kind == "drawn"]
    assert drawn
    # every planned drawn case is one the backend takes (the planted kernel declines smooth_scales / int4)
    assert all(declined(b, spec, lambda t=t: spec.build(t.params)) is None for t in drawn)
    st = stats[name]["dynamic_quant"]
    assert st["outside"] > 0 and st["accepted"] == len(drawn)
    assert any("plain int8 dynamic_quant only" in r for r in st["reasons"])
    # the golden declines nothing: its plan is the runner's plain draw
    assert not can_decline(backends.get("numpy"))


def test_a_declined_call_run_anyway_is_unsupported_with_its_reason_not_a_failure():
    case = {**_dq_case(), "smooth": "vector"}
    (r,) = _records("HalfRangeBf16ScaleBackend", "dynamic_quant", [case])
    assert r["status"] == "unsupported"
    assert "plain int8 dynamic_quant only" in r["note"]
    assert summarize([r])["ok"]


# ------------------------------------------------------------------------------------------------
# true causes of planted foreign-style kernels


def test_fp19_is_never_a_candidate_for_an_op_without_fp19():
    for op in ("dynamic_quant", "mx_quantize", "nvfp4_quantize", "quantize"):
        assert not {f for f in applicable_fields(registry.get(op)) if f.startswith("fp19")}, op
    assert "fp19_scale" in applicable_fields(registry.get("quant_matmul"))


def test_a_bf16_half_range_scale_is_attributed_to_the_scale_through_the_open_numerics_fields():
    # torchao / compressed-tensors style: s = bf16(amax / 127.5), codes rint(x * fp32(1/s)) in [-128, 127].
    cases = [_dq_case(seed=s) for s in range(1, 7)] + [_dq_case("outlier_channels", seed=3)]
    fails = [r for r in _records("HalfRangeBf16ScaleBackend", "dynamic_quant", cases) if r["status"] == "fail"]
    assert len(fails) >= 5
    reproduced = [r["attribution"] for r in fails if r["attribution"]["reproduced"]]
    assert len(reproduced) >= 4, [r["attribution"]["cause"] for r in fails]
    for at in reproduced:
        change = at["numerics_change"]
        assert {"scale_divisor": "half_range", "scale_dtype": "input"}.items() <= change.items(), change
        assert at["first_stage"] == "scale"
    for r in fails:
        at = r["attribution"]
        assert "FP19" not in at["cause"]
        # the scale's own evidence is read: every scale bf16-valued (65536 fp32 ULP = one bf16 step)
        assert any("bf16-valued" in e for e in at["scale_evidence"]), at["scale_evidence"]


def test_an_ignored_scale_mode_argument_is_named_not_blamed_on_ties():
    spec = registry.get("mx_quantize")
    cases = [p for p in draw_cases(spec, 40, 0) if p["mode"] != "floor"][:10]
    recs = _records("MxFloorOnlyBackend", "mx_quantize", cases)
    fails = [r for r in recs if r["status"] == "fail"]
    assert len(fails) >= 5
    for r in fails:
        at = r["attribution"]
        assert at["kind"] == "argument" and at["numerics_change"] == {"args": {"scale_mode": "floor"}}, at["cause"]
        assert "tie" not in at["cause"] and not at.get("detectors")
    floor = [p for p in draw_cases(spec, 40, 0) if p["mode"] == "floor"][:4]
    assert all(r["status"] in ("pass", "mistrusted") for r in _records("MxFloorOnlyBackend", "mx_quantize", floor))


def test_a_fused_kernels_own_activation_quant_is_the_first_stage_not_its_correct_sibling_op():
    # The planted dynamic_quant is right; the fused w8a8_dynamic_linear quantizes x as x / (amax / 127).
    spec = registry.get("w8a8_dynamic_linear")
    recs = _records("FusedActQuantBackend", "w8a8_dynamic_linear", draw_cases(spec, 16, 0))
    fails = [r for r in recs if r["status"] == "fail"]
    assert fails
    for r in fails:
        at = r["attribution"]
        assert at["first_stage"] in ("x_scale", "x_q"), at
        # the activation-quant stages are internal to the fused kernel: derived from the golden, not observed
        # through the backend's (correct) dynamic_quant
        assert {"x_scale", "x_q"} & set(at["unobserved_stages"]), at["stages"]
        assert "FP19" not in at["cause"]
    dq = _records("FusedActQuantBackend", "dynamic_quant", [_dq_case(seed=s) for s in range(3)])
    assert all(r["status"] == "pass" for r in dq)


# ------------------------------------------------------------------------------------------------
# detectors


def _mx_named(name):
    return {"named": f"mx_quantize/{name}"}


def test_the_byte0_detector_names_a_planted_kernel_with_the_bug_and_nothing_else():
    # Blocks of subnormal / tiny values clamp the exponent to -127 (byte 0): the planted kernel divides them
    # by 2^-126 (torchao 0.18), so their codes are the golden's halved.
    cases = [_mx_named("fp32_subnormals_floor_e4m3"), _mx_named("fp32_subnormals_floor_e5m2"),
             _mx_named("fp32_subnormals_floor_e2m1")]
    fails = [r for r in _records("MxByte0HalfBackend", "mx_quantize", cases) if r["status"] == "fail"]
    assert len(fails) == 3
    for r in fails:
        at = r["attribution"]
        assert at["kind"] == "library bug" and at["detectors"] == ["mx-byte0-half"], at["cause"]
    # the same FLOOR kernel without the bug passes these cases: the detector had something to explain
    assert all(r["status"] == "pass" for r in _records("MxFloorOnlyBackend", "mx_quantize", cases))
    # an ignored scale_mode is not a byte-0 bug (no detector fires on another kernel's mistake)
    other = [r for r in _records("MxFloorOnlyBackend", "mx_quantize", [_mx_named("fp32_subnormals_rceil_e4m3")])]
    assert all(not (r.get("attribution") or {}).get("detectors") for r in other)


@pytest.mark.parametrize("detector", [d.name for d in detectors.DETECTORS])
def test_no_detector_fires_on_the_golden(detector):
    # Every detector is asked about the golden's own outputs on the cases of its op: nothing to explain.
    d = next(x for x in detectors.DETECTORS if x.name == detector)
    g = NumpyBackend()
    for op in d.ops:
        spec = registry.get(op)
        for p in [{"named": c.key} for c in spec.cases][:6] + draw_cases(spec, 4, 0):
            args, kwargs = (registry.named_case(p["named"]).build() if "named" in p else spec.build(p))
            try:
                out = spec.as_outputs(g.call(op, *args, **kwargs))
            except (ValueError, TypeError):
                continue
            assert detectors.explain(spec, args, kwargs, g.numerics, out, out, {}, {}) is None


# the real library (torchao 0.18): each of its bugs is failed and named (skipped where torchao is absent)

def _torchao():
    b = backends.get("torchao")
    ok, why = b.available()
    if not ok:
        pytest.skip(f"torchao unavailable: {why}")
    return "torchao"


@pytest.mark.parametrize("case, detector", [
    (_mx_named("fp32_subnormals_floor_e4m3"), "mx-byte0-half"),
    (_mx_named("fp32_subnormals_rceil_e4m3"), "mx-rceil-byte0-unscaled"),
    (_mx_named("nonfinite_blocks_e2m1"), "mx-inf-block-finite-byte"),
])
def test_torchao_mx_bugs_fail_with_their_detector(case, detector):
    (r,) = _records(_torchao(), "mx_quantize", [case])
    assert r["status"] == "fail"
    at = r["attribution"]
    assert detector in at["detectors"] and at["kind"] == "library bug", at["cause"]


def test_torchao_fp16_intermediate_overflow_fails_with_its_detector():
    (r,) = _records(_torchao(), "w8a8_dynamic_linear", [{"named": "w8a8_dynamic_linear/long_k_1025_float16"}])
    assert r["status"] == "fail"
    assert "fp16-epilogue-overflow" in r["attribution"]["detectors"], r["attribution"]["cause"]


@pytest.mark.parametrize("scale", ["1e-40", "1e-45"])
def test_torchao_nvfp4_zero_becomes_minus_1_5_under_a_tiny_tensor_scale(scale):
    # S = 1e-40: fp32(1/S) overflows to inf, torchao's x * ((1/S)/s_b) gives 0 * inf = NaN for every zero, and
    # _f32_to_floatx_unpacked writes that NaN (sign set) as E2M1 code 0xB = -1.5: byte 0xBB for two zeros
    key = f"nvfp4_quantize/extreme_tensor_scale_per_tensor_scale_{scale}"
    (r,) = _records(_torchao(), "nvfp4_quantize", [{"named": key}])
    assert r["status"] == "fail" and r["attribution"]["detectors"] == ["nvfp4-nan-as-1.5"], r["attribution"]


def test_torchao_k_equals_1_error_is_named():
    (r,) = _records(_torchao(), "dynamic_quant", [{"named": "dynamic_quant/rows_of_1_bfloat16"}])
    assert r["status"] == "error"
    assert r["attribution"]["detectors"] == ["int8-k1"]


# ------------------------------------------------------------------------------------------------
# grouped reports


def test_failures_group_by_backend_op_stage_and_cause_with_one_repro_each():
    cases = [_mx_named("fp32_subnormals_floor_e4m3"), _mx_named("fp32_subnormals_floor_e5m2"),
             _mx_named("fp32_subnormals_floor_e2m1")]
    recs = _records("MxByte0HalfBackend", "mx_quantize", cases)
    gs = grouping.groups(recs)
    # the three cases differ in their counts of explained elements, yet share one cause: one group
    data_groups = [g for g in gs if "mx-byte0-half" in g.cause]
    assert len(data_groups) == 1 and data_groups[0].count == 3
    d = data_groups[0].as_dict()
    assert d["repro"] and "--backend conformance.planted:MxByte0HalfBackend" in d["repro"]


def test_distances_read_in_human_units():
    assert distance_text(NAN_DISTANCE) == "inf/NaN"
    assert distance_text(1) == "1 ULP" and distance_text(12345) == "12,345 ULP"
    assert distance_text(1, "code") == "1 code" and distance_text(17, "code") == "17 codes"
    assert distance_text(None) == "-"


def test_every_numerics_field_is_searched_for_some_op():
    # A field no op reads (neither FIELD_READERS nor a declaration's numerics_fields) could never be named as
    # a cause: attribution would fall back to a heuristic for a kernel that differs only there.
    from conformance.attribution import FIELD_READERS
    from w8a8.numerics import Numerics

    declared = {f for spec in registry.specs().values() for f in spec.numerics_fields}
    unsearched = [f for f in Numerics.choices() if f not in FIELD_READERS and f not in declared
                  and f not in ("platform", "variants")]
    assert not unsearched
    known_ops = set(registry.specs())
    assert all(set(ops) <= known_ops for ops in FIELD_READERS.values())


def test_torchao_k_equals_1_single_row_values_are_named():
    # torchao reads memory it did not write here: the values change from call to call (they may, rarely, match)
    case = {"bias": False, "dist": "gaussian", "dtype": "float16", "k": 1, "lead": [1, 1], "n": 4, "seed": 0}
    records = _records(_torchao(), "w8a8_dynamic_linear", [case] * 3)
    fails = [r for r in records if r["status"] == "fail"]
    if not fails:
        pytest.skip("torchao happened to return the golden's values three times")
    assert all(r["attribution"]["detectors"] == ["int8-k1-one-row"] for r in fails)
