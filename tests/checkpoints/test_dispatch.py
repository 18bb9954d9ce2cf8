"""The EP dispatch-path decision (checkpoints/dispatch.py) and its place in ``w8a8 inspect``.

Every branch of the decision, each expected value read off the rule it pins (the SGLang,
sgl-kernel-npu and vllm-ascend files cited in the module docstring, and vllm-ascend's ``select_moe_comm_method``; the
field bugs from sglang PR #22316 / #23815 / #38831, cited in the module docstring).
"""

from __future__ import annotations

import json

import pytest

from checkpoints import analyze
from checkpoints.dispatch import (DEEPEP_NORMAL_QUANT, DYNAMIC_QUANT, ROUTING_QUANT, LaunchConfig, _flag,
                                  dispatch_paths)
from w8a8cli.main import main

W8A8 = "W8A8_DYNAMIC"


def sg(scheme=W8A8, **kw):
    return dispatch_paths(LaunchConfig(engine="sglang", **kw), scheme)


def vl(scheme=W8A8, **kw):
    return dispatch_paths(LaunchConfig(engine="vllm-ascend", **kw), scheme)


def one(paths):
    assert len(paths) == 1, [p.phase for p in paths]
    return paths[0]


def said(path, text):
    """``text`` occurs in one of the path's reasons or warnings."""
    return any(text in line for line in path.reasons + path.warnings)


# -- SGLang: backends ---------------------------------------------------------------------------------------
def test_no_a2a_backend_quantizes_in_routing():
    # --moe-a2a-backend none (its default): ascend_tp, no EP exchange; init_routing_v2(quant_mode=1) quantizes
    p = one(sg())
    assert (p.wire, p.quantized_at, p.formula) == ("none", "routing", ROUTING_QUANT)
    assert not p.int8_wire and not p.w13_quantizes
    assert one(sg("FLOAT")).quantized_at == "nowhere"


def test_fuseep_and_uncovered_backends():
    p = one(sg(moe_a2a_backend="ascend_fuseep"))              # SGLang fuseep.py: one fused kernel
    assert (p.wire, p.quantized_at) == ("fused", "fused kernel") and said(p, "one fused kernel")
    q = one(sg(moe_a2a_backend="mooncake"))                   # not an Ascend path
    assert (q.wire, q.quantized_at) == ("?", "?")


def test_auto_mode_is_normal_on_prefill_and_low_latency_on_decode():
    # DeepEPMode.resolve: AUTO -> NORMAL when the batch has an extend, else LOW_LATENCY
    paths = sg(moe_a2a_backend="deepep")
    assert [p.phase for p in paths] == ["prefill batches (auto -> normal)", "decode batches (auto -> low_latency)"]
    assert "CamMoeDispatchNormal" in paths[0].transport and "LowLatencyDispatchV2" in paths[1].transport
    assert [p.phase for p in sg(moe_a2a_backend="deepep", deepep_mode="normal")] == ["all batches (normal)"]


# -- SGLang current: get_deepep_output_dtype's priority ---------------------------------------------------------
def test_w8a8_scheme_asks_for_int8_in_both_modes():
    # priority 3: NPUW8A8Int8MoEMethod sets dispatcher_output_dtype='int8'; INT8 -> use_fp8=True -> INT8 on A3
    normal, ll = sg(moe_a2a_backend="deepep")
    for p in (normal, ll):
        assert p.int8_wire and p.quantized_at == "sender" and not p.w13_quantizes and not p.warnings
        assert said(p, "priority 3") and said(p, "is skipped")
    assert normal.formula == DEEPEP_NORMAL_QUANT          # the 1e-12 amax epsilon (DeepEP normal)
    assert ll.formula == DYNAMIC_QUANT                    # no epsilon (low latency)


def test_float_experts_get_bf16_and_nothing_quantizes():
    for p in sg("FLOAT", moe_a2a_backend="deepep"):       # priority 5: NPU default BF16
        assert (p.wire, p.quantized_at) == ("bf16", "nowhere") and said(p, "priority 5")


def test_server_arg_beats_the_env_and_the_scheme():
    # priority 0 (server arg) before 1 (deprecated env) before 3 (scheme)
    for p in sg(moe_a2a_backend="deepep", dispatcher_output_dtype="bf16"):
        assert p.wire == "bf16" and p.w13_quantizes and p.formula == DYNAMIC_QUANT and said(p, "priority 0")
    for p in sg(moe_a2a_backend="deepep", dispatcher_output_dtype="int8",
                env={"SGLANG_DEEPEP_BF16_DISPATCH": "1"}):
        assert p.int8_wire


def test_bf16_env_falls_back_in_both_modes_at_the_current_revision():
    # priority 1; PR #23815 made low-latency honour it: W13 quantizes on arrival, once
    for p in sg(moe_a2a_backend="deepep", env={"SGLANG_DEEPEP_BF16_DISPATCH": "true"}):
        assert p.wire == "bf16" and p.w13_quantizes and said(p, "priority 1") and not p.warnings


def test_int8_into_float_experts_is_flagged():
    # sglang PR #23815: npu_grouped_matmul refuses INT8 input with BF16 weights
    for p in sg("FLOAT", moe_a2a_backend="deepep", dispatcher_output_dtype="int8"):
        assert p.int8_wire and said(p, "refuses INT8 input with BF16 weights")


def test_use_fp8_means_int8_on_a3_and_fp8_on_a5():
    # sglang PR #38831: use_fp8=True selects INT8 on A2/A3 and per-token FP8 on A5
    for p in sg(moe_a2a_backend="deepep", dispatcher_output_dtype="fp8", soc="a3"):
        assert p.int8_wire and said(p, "carries INT8, not FP8")
    for p in sg(moe_a2a_backend="deepep", soc="a5"):
        assert p.wire == "fp8" and not p.int8_wire and said(p, "per-token FP8 on A5")
    assert all(p.int8_wire for p in sg(moe_a2a_backend="deepep", soc="a2"))


def test_nvfp4_is_not_an_ascend_path():
    assert {p.wire for p in sg(moe_a2a_backend="deepep", dispatcher_output_dtype="nvfp4")} == {"?"}


def test_normal_mode_env_does_not_decide_at_the_current_revision():
    # sgl-kernel-npu deep_ep.cpp: Ascend DeepEP reads DEEP_NORMAL_MODE_USE_INT8_QUANT only without a quant argument
    normal = sg(moe_a2a_backend="deepep", deepep_mode="normal", env={"DEEP_NORMAL_MODE_USE_INT8_QUANT": "0"})[0]
    assert normal.int8_wire and said(normal, "does not decide here")
    agree = sg(moe_a2a_backend="deepep", deepep_mode="normal", env={"DEEP_NORMAL_MODE_USE_INT8_QUANT": "1"})[0]
    assert agree.int8_wire and not agree.warnings


# -- SGLang: DEEP_USE_MODE strategies ---------------------------------------------------------------------------
def test_alltoall_normal_strategy_sends_bf16_whatever_was_asked():
    # sgl-kernel-npu normal_strategy.py: quant_mode is set to 'bf16' before the env test, SGLang passes none
    normal, ll = sg(moe_a2a_backend="deepep", env={"DEEP_USE_MODE": "alltoall"})
    assert normal.wire == "bf16" and normal.w13_quantizes and said(normal, "never takes effect")
    # sgl-kernel-npu: the low-latency alltoall strategy exchanges BF16 and quantizes after the exchange itself
    assert (ll.wire, ll.quantized_at, ll.formula) == ("bf16", "arrival (dispatcher)", DYNAMIC_QUANT)
    assert not ll.int8_wire and not ll.w13_quantizes
    bf = sg(moe_a2a_backend="deepep", deepep_mode="low_latency", dispatcher_output_dtype="bf16",
            env={"DEEP_USE_MODE": "alltoall"})[0]
    assert bf.w13_quantizes


def test_ops_strategy_is_the_mc2_op_and_other_strategies_are_not_modelled():
    ll = sg(moe_a2a_backend="deepep", deepep_mode="low_latency", env={"DEEP_USE_MODE": "ops"})[0]
    assert ll.int8_wire and "npu_moe_distribute_dispatch_v2" in ll.transport
    assert {p.wire for p in sg(moe_a2a_backend="deepep", env={"DEEP_USE_MODE": "allgather"})} == {"?"}


# -- SGLang: older revisions and the low-latency field bug ------------------------------------------------------
def test_454e84da_is_env_only():
    normal, ll = sg(moe_a2a_backend="deepep", sglang_revision="454e84da")
    assert normal.wire == "bf16" and normal.w13_quantizes      # normal: int8 only with the env = 1
    assert ll.int8_wire                                        # low-latency: use_fp8 = not BF16_DISPATCH
    normal, ll = sg(moe_a2a_backend="deepep", sglang_revision="454e84da",
                    env={"DEEP_NORMAL_MODE_USE_INT8_QUANT": "1", "SGLANG_DEEPEP_BF16_DISPATCH": "1"})
    assert normal.int8_wire and ll.w13_quantizes
    arg = sg(moe_a2a_backend="deepep", sglang_revision="454e84da", dispatcher_output_dtype="int8")
    assert all(said(p, "does not exist at this revision") for p in arg) and arg[0].wire == "bf16"


def test_pr22316_low_latency_ignores_the_bf16_flag():
    # The reported bug: BF16 requested, INT8 sent in low-latency mode; into BF16-weight experts it fails
    env = {"SGLANG_DEEPEP_BF16_DISPATCH": "1"}
    normal, ll = sg("FLOAT", moe_a2a_backend="deepep", sglang_revision="pr22316", env=env)
    assert normal.wire == "bf16" and normal.quantized_at == "nowhere"
    assert ll.int8_wire and said(ll, "IGNORED in low-latency mode") and said(ll, "refuses INT8 input")
    quiet = sg(moe_a2a_backend="deepep", deepep_mode="low_latency", sglang_revision="pr22316")[0]
    assert quiet.int8_wire and not quiet.warnings


@pytest.mark.parametrize("value, on", [("1", True), ("TRUE", True), ("yes", True), ("on", True), ("0", False),
                                       ("false", False), ("", False), ("2", False)])
def test_boolean_env(value, on):
    assert _flag({"SGLANG_DEEPEP_BF16_DISPATCH": value}, "SGLANG_DEEPEP_BF16_DISPATCH") is on


# -- vllm-ascend --------------------------------------------------------------------------------------------------
def test_vllm_without_ep_is_allgather():
    for kw in ({}, {"enable_expert_parallel": True, "ep_size": 1}):
        p = one(vl(**kw))
        assert (p.wire, p.quantized_at, p.formula) == ("none", "routing", ROUTING_QUANT)
    assert one(vl("FLOAT")).quantized_at == "nowhere"


def test_vllm_a3_is_mc2_within_capacity_then_alltoall():
    mc2, a2a = vl(enable_expert_parallel=True, ep_size=16)
    assert mc2.int8_wire and "npu_moe_distribute_dispatch_v2" in mc2.transport and said(mc2, "quant_mode = 2")
    assert a2a.int8_wire and "all_to_all_single" in a2a.transport and a2a.formula == DYNAMIC_QUANT
    for p in vl("FLOAT", enable_expert_parallel=True, ep_size=16):      # dispatch_with_quant off: quant_mode 0
        assert p.wire == "bf16" and p.quantized_at == "nowhere"


def test_vllm_fused_mc2_up_to_ep_32():
    assert one(vl(enable_expert_parallel=True, ep_size=32, enable_fused_mc2=True)).wire == "fused"
    assert [p.wire for p in vl(enable_expert_parallel=True, ep_size=33, enable_fused_mc2=True)] == ["int8+fp32"] * 2
    unknown = one(vl(enable_expert_parallel=True, enable_fused_mc2=True))
    assert unknown.wire == "fused" and said(unknown, "assumed <= 32")


def test_vllm_given_comm_a2_and_a5():
    p = one(vl(enable_expert_parallel=True, moe_comm="alltoall"))
    assert p.int8_wire and said(p, "as given")
    mc2, ag = vl(enable_expert_parallel=True, soc="a2")
    assert mc2.int8_wire and "E/EP <= 24" in mc2.phase and ag.wire == "none"
    assert one(vl(enable_expert_parallel=True, soc="a5")).wire == "?"


# -- the record -----------------------------------------------------------------------------------------------------
def test_summary_and_dict():
    normal, _ = sg(moe_a2a_backend="deepep", dispatcher_output_dtype="bf16")
    assert normal.summary() == "prefill batches (auto -> normal): BF16 wire, W13 quantizes on arrival"
    d = normal.as_dict()
    assert (d["wire"], d["int8_wire"], d["w13_quantizes"]) == ("bf16", False, True) and d["reasons"]
    assert one(sg()).summary() == "all batches: no EP exchange, quantized in routing"


def test_the_golden_call_of_each_path():
    # the golden's Numerics choice per path: MC2 / low-latency the npu_dynamic_quant formula ("mc2"), Ascend
    # DeepEP normal its 1e-12 epsilon ("deepep_normal"); a BF16 wire is dispatch="bf16" (quantized on arrival)
    normal, ll = sg(moe_a2a_backend="deepep")
    assert normal.golden == 'w8a8_moe_ep(dispatch="int8") with Numerics ep_dispatch_quant="deepep_normal"'
    assert ll.golden == 'w8a8_moe_ep(dispatch="int8") with Numerics ep_dispatch_quant="mc2"'
    assert all(p.golden == 'w8a8_moe_ep(dispatch="bf16")'
               for p in sg(moe_a2a_backend="deepep", env={"DEEP_USE_MODE": "alltoall"}))
    assert one(sg()).golden == "w8a8_moe (no EP exchange)"
    assert one(sg(moe_a2a_backend="ascend_fuseep")).golden == "-"
    assert {p.golden for p in vl(enable_expert_parallel=True)} == {
        'w8a8_moe_ep(dispatch="int8") with Numerics ep_dispatch_quant="mc2"'}


@pytest.mark.parametrize("kw, arg", [(dict(engine="trt"), "engine"), (dict(soc="a9"), "soc"),
                                     (dict(deepep_mode="fast"), "deepep_mode"), (dict(moe_comm="x"), "moe_comm"),
                                     (dict(env={"HCCL_BUFFSIZE": "1"}), "env"), (dict(ep_size=0), "ep_size")])
def test_launch_config_refuses_bad_values(kw, arg):
    with pytest.raises(ValueError, match=f"'{arg}'"):
        LaunchConfig(**kw)


# -- inspect --------------------------------------------------------------------------------------------------------
def test_analyze_attaches_the_paths_to_moe_layers(kit):
    launch = LaunchConfig(moe_a2a_backend="deepep", sglang_revision="pr22316",
                          env={"SGLANG_DEEPEP_BF16_DISPATCH": "1"})
    rep = analyze(kit.make("v4"), launch=launch)
    moe = [r for r in rep.modules if r.module.kind == "moe"]
    assert moe and all(len(r.dispatch) == 2 for r in moe)
    assert all(not r.dispatch for r in rep.modules if r.module.kind != "moe")
    assert any(step.startswith("dispatch (decode batches") for step in moe[0].chain)
    found = [f for f in rep.findings if f.code == "dispatch"]
    assert len(found) == 1 and "IGNORED" in found[0].message          # one finding for all MoE layers
    assert rep.summary["launch"]["moe_a2a_backend"] == "deepep"
    with pytest.raises(ValueError, match="'launch'"):
        analyze(kit.make("v4"), loader="vllm-ascend", launch=launch)


def test_cli_json_and_text(kit, capsys):
    path = str(kit.make("v4"))
    assert main(["inspect", path, "--json", "--moe-a2a-backend", "deepep", "--deepep-mode", "low_latency"]) == 0
    mods = {m["module"]: m for m in json.loads(capsys.readouterr().out)["modules"]}
    d = mods["layers.1.ffn.experts"]["dispatch"]
    assert [(p["phase"], p["int8_wire"]) for p in d] == [("all batches (low_latency)", True)]
    assert "dispatch" not in mods["layers.1.attn.wq_a"]
    assert main(["inspect", path, "--loader", "vllm-ascend", "--enable-expert-parallel", "--ep-size", "16"]) == 0
    text = capsys.readouterr().out
    assert "EP dispatch (vllm-ascend" in text and "INT8 wire path" in text and "because MC2: quant_mode = 2" in text
    assert main(["inspect", path, "--env", "NOPE=1"]) == 2
    assert "--env takes" in capsys.readouterr().err
    assert main(["inspect", path, "--env", "novalue"]) == 2
