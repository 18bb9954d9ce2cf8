"""The serving-composition records (w8a8.serving): one test per row pinning the engine's composition, and
the M2 case where the two orders of routed_scaling_factor give different bits, derived by hand."""

from __future__ import annotations

import numpy as np
import pytest

import w8a8
from w8a8 import bfloat16, serving
from w8a8.moe.pipeline import scale_routed
from w8a8.rounding import to_float

F32 = np.float32
SG, VA = serving.SGLANG, serving.VLLM_ASCEND


def test_records_name_every_row_with_a_source():
    assert serving.get(None) is SG and serving.get("vllm-ascend") is VA and serving.get(VA) is VA
    for rec in (SG, VA):
        rows = rec.rows()
        assert list(rows) == ["M1", "M2", "M3", "M4", "M5", "M6", "M7", "M8", "M9", "M10", "D2", "D4"]
        for row, reading in rows.items():
            assert reading.value and "@" in reading.source, (rec.name, row)
            repo = "sgl-project/sglang:" if rec is SG else "vllm-project/vllm-ascend:"
            assert reading.source.startswith(repo), (rec.name, row)
    with pytest.raises(ValueError, match=r"w8a8_moe: argument 'serving' must be one of \('sglang', 'vllm-ascend'\)"):
        serving.get("tgi", "w8a8_moe")


def _finalize(o, w):
    """moe_finalize_routing(drop_pad_mode=2) of one token with K = 2 rows o[j] (bf16) and weights w (bf16)."""
    rows = np.asarray(o, F32).astype(bfloat16)[:, None] * np.ones((1, 1), F32).astype(bfloat16)
    return w8a8.moe_finalize_routing(rows, None, None, None, np.asarray(w, F32).astype(bfloat16)[None],
                                     np.array([0, 1], np.int32), np.array([[0, 1]], np.int32), drop_pad_mode=2)


def test_m2_the_two_orders_of_routed_scaling_factor_differ_by_hand():
    # one token, K = 2, normalised weights [0.6, 0.4], expert rows [1.0, -1.0], routed_scaling_factor 2.5.
    # In the gating weights (the old order): fp32 0.6 * 2.5 = 1.50000006 -> bf16 1.5; 0.4 * 2.5 = 1.0000000149
    #   -> fp32 1.0 -> bf16 1.0; finalize 1.5 * 1 + 1.0 * (-1) = 0.5 -> bf16 0x3F00.
    old = _finalize([1.0, -1.0], to_float(np.array([0.6, 0.4], F32) * F32(2.5), bfloat16).astype(F32))
    assert old.view(np.uint16).tolist() == [[0x3F00]]
    # SGLang / vllm-ascend: bf16(0.6) = 154 / 256 = 0.6015625, bf16(0.4) = 205 / 512 = 0.400390625; finalize
    #   0.6015625 - 0.400390625 = 0.201171875 (exact, 206 / 1024, a bf16); * 2.5 = 0.5029296875 = 128.75 / 256
    #   -> bf16 129 / 256 = 0.50390625 = 0x3F01.
    routed = _finalize([1.0, -1.0], [0.6, 0.4])
    assert routed.view(np.uint16).tolist() == [[0x3E4E]] and float(routed[0, 0]) == 0.201171875
    new = scale_routed(routed, serving.output_scaling(SG, 2.5))
    assert new.view(np.uint16).tolist() == [[0x3F01]]
    assert serving.output_scaling(VA, 2.5) == 2.5 and serving.gating_scaling(SG, 2.5) == 1.0


def _layer(seed=0, t=64, h=64, i=32, e=8):
    from conformance.ops.moe._common import moe_layer, shared_expert
    rng = np.random.default_rng(seed)
    w = moe_layer(rng, e, h, i)
    x = rng.standard_normal((t, h)).astype(F32).astype(bfloat16)
    logits = rng.standard_normal((t, e)).astype(F32)
    return rng, w, x, logits, shared_expert(rng, h, i)


def test_m2_layer_multiplies_the_routed_output_after_the_finalize():
    # the layer under either engine: routed = bf16(finalize(bf16 w normalised without rsf) * rsf); the old order
    # (rsf in the gating op) differs from it on many elements of real-sized data
    _, w, x, logits, _ = _layer()
    route = dict(router_logits=logits, top_k=2, scoring_func="sigmoid", correction_bias=np.zeros(8, F32),
                 group_select_mode=1)
    st = w8a8.w8a8_moe_stages(x, *w, routed_scaling_factor=2.5, **route)
    plain = w8a8.w8a8_moe_stages(x, *w, routed_scaling_factor=1.0, **route)
    np.testing.assert_array_equal(st["topk_weights"], plain["topk_weights"])          # gating got 1
    want = to_float(plain["y"].astype(F32) * F32(2.5), bfloat16)
    np.testing.assert_array_equal(st["y"].view(np.uint16), want.view(np.uint16))
    y_va = w8a8.w8a8_moe(x, *w, routed_scaling_factor=2.5, serving="vllm-ascend", **route)
    ids, wts = plain["topk_ids"], plain["topk_weights"]
    old = w8a8.w8a8_moe(x, *w, topk_ids=ids, topk_weights=(wts * F32(2.5)).astype(F32))
    differ = np.mean(old.view(np.uint16) != st["y"].view(np.uint16))
    assert differ > 0.1, differ
    # vllm-ascend's muls_add: the same bf16 x * scale, then the add (M4 differs only in the model run)
    np.testing.assert_array_equal(y_va.view(np.uint16), st["y"].view(np.uint16))


@pytest.mark.parametrize("rec, clamped", [(SG, False), (VA, True)])
def test_m1_routed_clamp(rec, clamped):
    assert serving.routed_limit(rec, 10.0) == (10.0 if clamped else None)
    rng, w, x, _, _ = _layer(1)
    ids = np.argsort(rng.random((64, 8)), axis=1)[:, :2].astype(np.int32)
    wts = np.full((64, 2), 0.5, F32)
    a = w8a8.w8a8_moe_stages((x.astype(F32) * 8).astype(bfloat16), *w, topk_ids=ids, topk_weights=wts, swiglu_limit=0.25, serving=rec)
    g = a["gmm1"]
    want = w8a8.dequant_swiglu_quant(g, quant_mode=1, activate_left=True, swiglu_limit=0.25 if clamped else None)[0]
    np.testing.assert_array_equal(a["act_q"], want)
    other = w8a8.dequant_swiglu_quant(g, quant_mode=1, activate_left=True, swiglu_limit=None if clamped else 0.25)[0]
    assert not np.array_equal(want, other)          # the clamp acts on this data


def test_m5_shared_clamp_and_m6_merged_gate_up_equal_bits():
    assert SG.shared_clamp.value == VA.shared_clamp.value == "bf16_clamp"
    assert serving.shared_limit(SG, 10.0) == 10.0
    _, w, x, _, sh = _layer(2)
    g = w8a8.w8a8_dynamic_linear(x, sh["gate_weight"], sh["gate_scale"])
    u = w8a8.w8a8_dynamic_linear(x, sh["up_weight"], sh["up_scale"])
    merged = w8a8.w8a8_dynamic_linear(x, np.concatenate([sh["gate_weight"], sh["up_weight"]]),
                                      np.concatenate([sh["gate_scale"], sh["up_scale"]]))
    # M6: one gate_up_proj (one quantization of x, independent columns) gives the two Linears' bits
    np.testing.assert_array_equal(merged.view(np.uint16), np.concatenate([g, u], -1).view(np.uint16))
    assert SG.shared_gate_up.value == VA.shared_gate_up.value == "merged"


def test_m3_m4_m8_m9_m10_d2_d4_readings():
    assert (SG.dsv4_routing.value, VA.dsv4_routing.value) == ("torch_ops", "moe_gating_top_k_hash")
    assert "deepseek_v4_topk.py" in SG.dsv4_routing.source and "fused_topk_router.py" in VA.dsv4_routing.source
    assert (SG.router_logits.value, VA.router_logits.value) == ("bfloat16", "float32")
    assert (SG.prequantized_moe.value, VA.prequantized_moe.value) == ("deepep_expert_grouped", "mc2_dispatch")
    assert SG.expert_load.value == VA.expert_load.value == "transpose_nz_bf16_scale"
    assert SG.moe_scheme.value == "sglang" and "get_moe_scheme" in SG.moe_scheme.source
    assert (SG.dense_prequantized.value, VA.dense_prequantized.value) == ("tuple_or_int8", "float_only")
    assert SG.static_reciprocal.value == VA.static_reciprocal.value == "bf16_tensor_division"
    assert SG.shared_add.value == VA.shared_add.value == "bf16_add"


def test_d4_the_golden_reciprocal_is_the_correctly_rounded_bf16_division():
    # 1 / bf16 tensor on the device (both engines); the golden: bf16(fp32(1) / fp32(s)). Over every positive
    # normal bf16 s, that equals the correctly rounded bf16 quotient (from float64) everywhere but the listed
    # values: the double rounding fp32 -> bf16 (what a device dividing in bf16 at once would not do).
    bits = np.arange(0x0080, 0x7F80, dtype=np.uint16)
    s = bits.view(bfloat16)
    golden = (F32(1) / s.astype(F32)).astype(bfloat16)
    exact = (1.0 / s.astype(np.float64)).astype(bfloat16)
    finite = np.isfinite(exact.astype(F32))
    assert np.array_equal(golden[finite].view(np.uint16), exact[finite].view(np.uint16))


def test_m4_model_run_router_logits_dtype():
    import torch

    from modelrun.serving import ServingExecutor

    class _Res:
        linears, types, modules = {}, {}, []

    rng = np.random.default_rng(3)
    h = torch.from_numpy(rng.standard_normal((5, 16)).astype(F32)).to(torch.bfloat16)
    wg = torch.from_numpy(rng.standard_normal((4, 16)).astype(F32)).to(torch.bfloat16)
    t = {"m.gate.weight": wg}
    sg = ServingExecutor(_Res(), None, t, None, None, serving="sglang").router_logits("m", h)
    va = ServingExecutor(_Res(), None, t, None, None, serving="vllm-ascend").router_logits("m", h)
    np.testing.assert_array_equal(sg, torch.nn.functional.linear(h, wg).float().numpy())
    np.testing.assert_array_equal(va, torch.nn.functional.linear(h.float(), wg.float()).numpy())
    assert not np.array_equal(sg, va)
