"""Dumps written by msprobe around stand-ins with planted device-like deviations (make_fixtures.py).

Planted (``samples/made/GENERATED.json``), each against what the golden computes under the A3 record
(the kernel variant the host tiling selects for the call's shapes):

* ``NPU.npu_moe_init_routing_v2.0`` quantizes again after the preceding dynamic_quant's scale was
  dropped, with the record's main-path half-even rounding where A3 selects the column-tiled kernel
  (fp16 truncation, half-away): ``variants="fixed"``;
* ``NPU.npu_dynamic_quant.2`` writes the basic kernel's scale ``1 / (127 / amax)`` where A3 selects a
  kernel that writes ``amax * fp32(1/127)``: ``variants="fixed"``;
* ``NPU.npu_dynamic_quant.3`` rounds ties half away from zero.

Every other stand-in is the golden. :func:`_planted_reproduces` checks, with the golden called by hand
on the dumped inputs, that each planted call is reproduced by its planted record and *not* by the
default one — so each expectation below is a real deviation, not the model.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import w8a8
from replay.pt_reader import read_pt

ROUTING = "NPU.npu_moe_init_routing_v2.0.forward"
SCALE = "NPU.npu_dynamic_quant.2.forward"
TIES = "NPU.npu_dynamic_quant.3.forward"
T, E, K = 8, 4, 2


def _t(samples, name):
    return read_pt(samples.planted / "step0/rank0/dump_tensor_data" / f"{name}.pt").array


PLANTED = {ROUTING: {"variants": "fixed"}, SCALE: {"variants": "fixed"}, TIES: {"round_mode": "half_away"}}


def _reproduces(samples, entry, numerics) -> bool:
    """Whether the golden under ``numerics`` gives the dumped outputs of ``entry``, called by hand."""
    t = lambda s: _t(samples, f"{entry}.{s}")  # noqa: E731
    if entry == ROUTING:
        out = w8a8.moe_init_routing_v2(t("input.0"), t("input.1"), active_num=T * K, expert_num=E,
                                       expert_tokens_num_type=1, expert_tokens_num_flag=True,
                                       active_expert_range=[0, E], quant_mode=1, numerics=numerics)
        return all(np.array_equal(o, t(f"output.{i}")) for i, o in enumerate(out))
    y, s = w8a8.dynamic_quant(t("input.0"), numerics=numerics)
    return np.array_equal(y, t("output.0")) and s.tobytes() == t("output.1").tobytes()


@pytest.mark.parametrize("entry", list(PLANTED))
def test_each_plant_is_a_deviation_from_the_selected_kernel(samples, entry):
    assert _reproduces(samples, entry, w8a8.ASCEND.replace(**PLANTED[entry]))
    assert not _reproduces(samples, entry, w8a8.ASCEND)


def test_generated_by_msprobe(samples):
    meta = json.loads((samples.made / "GENERATED.json").read_text())
    assert meta["msprobe"].startswith("26.") and meta["planted"] == {
        "moe_init_routing_v2.0": {"variants": "fixed"}, "dynamic_quant.2": {"variants": "fixed"},
        "dynamic_quant.3": {"round_mode": "half_away"}}


@pytest.mark.parametrize("entry, stage, change", [
    (ROUTING, None, {"variants": "fixed"}),
    (SCALE, "scale", {"variants": "fixed"}),
    (TIES, "codes", {"round_mode": "half_away"}),
])
def test_planted_call_stage_and_cause(samples, run_replay, entry, stage, change):
    by_name, _ = run_replay(samples.planted)
    r = by_name[entry]
    assert r["verdict"] == "disagree" and r["status"] == "fail"
    at = r["attribution"]
    assert at["reproduced"] and at["numerics_change"] == change
    assert at["first_stage"] == stage
    assert r["first_mismatch"]["index"] is not None


def test_first_divergence_and_its_repro(samples, run_replay, tmp_path):
    by_name, records = run_replay(samples.planted)
    quant = [r for r in records if r.get("kind") == "replay" and r["verdict"] != "not-replayable"]
    order = sorted(quant, key=lambda r: r["params"]["index"])
    disagreeing = [r["name"] for r in order if r["verdict"] == "disagree"]
    expected = [ROUTING, SCALE, TIES]
    assert disagreeing == expected                      # nothing else disagrees: the other stand-ins are golden
    first = by_name[expected[0]]
    from replay.reports import summarize

    assert summarize(records)["first_divergence"]["step0/rank0"]["name"] == expected[0]
    assert first["module"] == "model.layers.0.mlp.experts"
    # the single-op case exported for the first divergence reproduces it, on the command line ...
    case = first["case"]
    assert first["repro"] == f"w8a8 replay {case}"
    cli = subprocess.run([sys.executable, "-m", "w8a8cli.main", "replay", case], capture_output=True, text=True)
    assert cli.returncode == 1, cli.stderr
    out = json.loads(cli.stdout)
    assert out["verdict"] == "disagree" and out["first_mismatch"] == first["first_mismatch"]
    assert out["attribution"]["numerics_change"] == first["attribution"]["numerics_change"]
    # ... and as the printed Python snippet (in a fresh interpreter)
    snippet = subprocess.run([sys.executable, "-c", first["repro_python"]], capture_output=True, text=True,
                             check=True).stdout
    assert "DIFFERS" in snippet
    # the case holds no pickle
    with np.load(case, allow_pickle=False) as z:
        assert "meta" in z.files


def test_chain_shows_the_drift_downstream_of_the_divergence(samples, run_replay):
    by_name, _ = run_replay(samples.planted, chain=True)
    gmm = by_name["NPU.npu_grouped_matmul.0.forward"]
    # isolated, the grouped matmul is exact on the device's own (planted) codes; chained, it gets the
    # golden's routing codes and its output differs from the device's
    assert gmm["verdict"] == "agree-bitwise"
    assert gmm["chain"]["verdict"] == "disagree"
    assert gmm["chain"]["inputs"]["input_args.0.0"].startswith(f"chain: golden output expanded_x of {ROUTING}")
    assert any(e["from"] == ROUTING for e in gmm["dataflow"])
    final = by_name["NPU.npu_moe_finalize_routing.0.forward"]
    assert final["verdict"] == "agree-bitwise" and final["chain"]["verdict"] == "disagree"


def test_layer_selects_the_calls_of_one_module(samples, run_replay):
    by_name, _ = run_replay(samples.planted, layer="model.layers.0.mlp")
    assert {n for n in by_name if not n.startswith("Module.")} == {"NPU.npu_moe_gating_top_k_softmax.0.forward", "NPU.npu_dynamic_quant.1.forward", ROUTING,
                            "NPU.npu_grouped_matmul.0.forward", "NPU.npu_dequant_swiglu_quant.0.forward",
                            "NPU.npu_grouped_matmul.1.forward", "NPU.npu_moe_finalize_routing.0.forward"}


def test_nz_weight_missing_then_found_in_the_checkpoint(samples, run_replay):
    from replay.weights import CheckpointWeights

    by_name, _ = run_replay(samples.planted, ops=["quant_matmul"])
    r = by_name["NPU.npu_quant_matmul.0.forward"]
    assert r["verdict"] == "missing-data" and "NZ" in r["missing"][0]
    by_name, _ = run_replay(samples.planted, ops=["quant_matmul"], checkpoint=CheckpointWeights(samples.checkpoint))
    r = by_name["NPU.npu_quant_matmul.0.forward"]
    assert r["verdict"] == "agree-bitwise"
    src = r["inputs"]["input_args.1"]
    assert "model.layers.0.self_attn.o_proj.weight" in src and "transposed" in src
    assert "rests on module path" in src and "shape only" in src


def test_golden_is_stricter_than_msprobe_on_ties(samples, run_replay):
    by_name, _ = run_replay(samples.planted)
    r = by_name[TIES]
    # msprobe's acc_check passes npu_dynamic_quant codes off by one anywhere (quantization_api_list)
    assert r["msprobe"]["verdict"] == "pass" and not r["msprobe"]["natively"]
    assert r["stricter"] and r["outputs"]["y"]["max_code_diff"] == 1


def test_md5_dump_chained_flags_exactly_the_planted_calls(samples, run_replay):
    from replay.weights import CheckpointWeights

    by_name, _ = run_replay(samples.planted_md5, chain=True, inputs=[samples.planted],
                            checkpoint=CheckpointWeights(samples.checkpoint))
    judged = {n: r["verdict"] for n, r in by_name.items() if r["verdict"] != "not-replayable"}
    planted = set(PLANTED)
    assert {n for n, v in judged.items() if v == "crc-mismatch"} == planted
    assert {v for n, v in judged.items() if n not in planted} == {"crc-match"}
    # chained from the golden's routing codes, the MoE downstream differs from the device's CRCs
    assert by_name["NPU.npu_grouped_matmul.0.forward"]["chain"]["verdict"] == "crc-mismatch"


def test_md5_dump_alone_uses_the_statistics(samples, run_replay):
    by_name, _ = run_replay(samples.planted_md5)
    dq = by_name["NPU.npu_dynamic_quant.0.forward"]
    assert dq["verdict"] == "stats-consistent" and dq["invariants"]
    qmm = by_name["NPU.npu_quant_matmul.1.forward"]
    assert qmm["verdict"] == "stats-consistent"
    assert any(c["check"].startswith("|y| <= K") for c in qmm["invariants"])
    # the planted (basic-kernel) scale formula moves the largest row's scale only if that row's amax is
    # one where amax*fp32(1/127) (the selected kernel) != 1/(127/amax); the invariant is computed exactly
    scale = next(c for c in by_name[SCALE]["invariants"] if c["check"].startswith("scale Max"))
    x = _t(samples, f"{SCALE}.input.0").astype(np.float32)
    amax = np.float32(np.abs(x).max())
    device_max = float(_t(samples, f"{SCALE}.output.1").max())
    assert device_max == float(np.float32(1) / (np.float32(127) / amax))          # the planted formula
    selected_max = float(amax * (np.float32(1) / np.float32(127)))
    assert scale["ok"] == (device_max == selected_max)
    assert f"golden {selected_max!r}" in scale["detail"]


def test_chain_memory_bound_breaks_the_chain_and_says_so(samples, run_replay):
    """With no room for golden outputs (max_bytes=0) every consumer gets the device value, named."""
    by_name, _ = run_replay(samples.planted, chain=True, max_bytes=0)
    src = by_name["NPU.npu_grouped_matmul.0.forward"]["chain"]["inputs"]["input_args.0.0"]
    assert src.startswith(f"chain break: {ROUTING}.expanded_x dropped (memory bound)")


def test_tie_aware_tolerance_accepts_only_true_ties(samples, run_replay, tmp_path):
    """A device-dump tolerance entry with tie_off_by_one: the planted half-away codes sit exactly on .5
    ties (amax 127, values k + 0.5), so they become agree-tolerance, each accepted code counted."""
    from replay.engine import load_tolerances

    toml = tmp_path / "tol.toml"
    toml.write_text('[[entry]]\nbackend = "device-dump"\nop = "dynamic_quant"\noutput = "y"\ndtype = "int8"\n'
                    'tie_off_by_one = true\nbasis = "analytic"\n')
    by_name, _ = run_replay(samples.planted, ops=["dynamic_quant"], tolerances=load_tolerances(str(toml), False))
    y = by_name[TIES]["outputs"]["y"]
    assert by_name[TIES]["verdict"] == "agree-tolerance" and y["tie_accepted"] == y["mismatches"] > 0
    assert y["tolerance"] == "+-1 at ties"
    # the scale formula is not a tie matter: still a disagreement
    assert by_name[SCALE]["verdict"] == "disagree"
