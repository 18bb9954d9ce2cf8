"""The DeepEP-style pre-quantized MoE entry (serving row M8): SGLang's Ascend runner behind a DeepEP dispatch.

Sources: sgl-project/sglang python/sglang/srt/layers/moe/moe_runner/ascend.py@0dd459f6 (no init_routing; the
dispatched int8 rows and their scales go to GMM1; NPUSwigluDeepEPKernel; GMM2; DeepEP combine) and
sgl-project/sgl-kernel-npu python/sgl_kernel_npu/sgl_kernel_npu/activation/swiglu_quant.py@11f29176 (the Triton
``swiglu_quant``).
"""

from __future__ import annotations

import numpy as np
import pytest

import w8a8
from w8a8.dtypes import bfloat16
from w8a8.moe.deepep import swiglu_quant

T, E, H, I, K = 9, 4, 32, 16, 2


@pytest.fixture(scope="module")
def layer():
    rng = np.random.default_rng(8)
    hidden = (rng.standard_normal((T, H)) * 2).astype(bfloat16)
    ids = np.stack([rng.permutation(E)[:K] for _ in range(T)]).astype(np.int32)
    return dict(hidden=hidden, ids=ids, weights=rng.uniform(0.1, 0.9, (T, K)).astype(np.float32),
                w=(rng.integers(-127, 128, (E, 2 * I, H)).astype(np.int8), (rng.random((E, 2 * I, 1)) * 0.01 + 1e-3)
                   .astype(np.float32), rng.integers(-127, 128, (E, H, I)).astype(np.int8),
                   (rng.random((E, H, 1)) * 0.01 + 1e-3).astype(np.float32)))


def test_swiglu_quant_hand_bits_differ_from_dequant_swiglu_quant():
    # gate 20: sigmoid(20) = 1 - 2e-9 -> bf16 1.0, silu = 20; up 6.34375, 5.03125: out = 126.875 -> bf16 (step 0.5
    # in [64, 128)) 127, and 100.625 -> bf16 100.5. scale = 127 / 127 = 1.0. Codes: rint(bf16(127 / 1)) = 127,
    # rint(bf16(100.5)) = 100 (ties to even). npu_dequant_swiglu_quant keeps fp32: scale 126.875 / 127 =
    # 0.99901575, 100.625 / 0.99901575 = 100.72 -> 101.
    x = np.array([[20, 20, 6.34375, 5.03125]], bfloat16)
    q, s = swiglu_quant(x, np.array([1]))
    assert q.tolist() == [[127, 100]] and s.tolist() == [1.0]
    q2, s2 = w8a8.dequant_swiglu_quant(x, quant_mode=1, activate_left=True)
    assert q2.tolist() == [[127, 101]] and s2.view(np.uint32).tolist() == [np.float32(126.875 / 127).view(np.uint32)]


def test_swiglu_quant_zero_row_and_group_list_forms():
    x = np.zeros((3, 4), bfloat16)
    x[1] = np.array([20, 20, 1, -2], bfloat16)   # out 20, -40 -> scale 40 / 127; codes 63.5 -> bf16 63.5 -> 64, -127
    q, s = swiglu_quant(x, np.array([1, 2], np.int64))
    assert q.tolist() == [[0, 0], [64, -127], [0, 0]] and s.tolist()[0] == 0.0
    q0, s0 = swiglu_quant(x, np.array([1, 3], np.int32), 0)          # cumulative form
    np.testing.assert_array_equal(q0, q)
    with pytest.raises(ValueError, match=r"^swiglu_quant: argument 'group_list' must be non-negative counts "
                                         r"totalling M = 3"):
        swiglu_quant(x, np.array([1, 1]))
    with pytest.raises(ValueError, match=r"^swiglu_quant: argument 'x' must be of shape \[M, 2I\]"):
        swiglu_quant(np.zeros((3, 5), bfloat16), np.array([3]))


def test_payload_carried_not_requantized(layer):
    # scales a requant of x_q would never give (x3 and random): the rows and scales reach GMM1 as dispatched
    x_q, x_s = w8a8.dispatch_quant(layer["hidden"])
    odd = (x_s * np.random.default_rng(1).uniform(1, 3, T)).astype(np.float32)
    st = w8a8.w8a8_moe_deepep_stages(x_q, odd, *layer["w"], topk_ids=layer["ids"], topk_weights=layer["weights"])
    order = np.argsort(layer["ids"].reshape(-1), kind="stable")
    np.testing.assert_array_equal(st["recv_x"], x_q[order // K])
    np.testing.assert_array_equal(st["recv_scale"].view(np.uint32), odd[order // K].view(np.uint32))
    assert st["expert_tokens"].tolist() == np.bincount(layer["ids"].reshape(-1), minlength=E).tolist()
    # the same expert-grouped GMM1 as the init_routing entry fed the same payload (its stable layout)
    pre = w8a8.w8a8_moe_prequantized_stages(x_q, odd, *layer["w"], topk_ids=layer["ids"],
                                            topk_weights=layer["weights"])
    np.testing.assert_array_equal(st["gmm1"].view(np.uint16), pre["gmm1"].view(np.uint16))
    # then the Triton activation, not npu_dequant_swiglu_quant
    q, s = swiglu_quant(st["gmm1"], st["expert_tokens"])
    np.testing.assert_array_equal(st["act_q"], q)


def test_combine_uses_fp32_weights_in_k_order(layer):
    x_q, x_s = w8a8.dispatch_quant(layer["hidden"])
    st = w8a8.w8a8_moe_deepep_stages(x_q, x_s, *layer["w"], topk_ids=layer["ids"], topk_weights=layer["weights"])
    slot = np.empty(T * K, np.int64)
    slot[np.argsort(layer["ids"].reshape(-1), kind="stable")] = np.arange(T * K)
    o = st["gmm2"].astype(np.float32)[slot.reshape(T, K)]
    acc = np.float32(layer["weights"][:, 0:1]) * o[:, 0]
    acc = (acc + layer["weights"][:, 1:2] * o[:, 1]).astype(np.float32)
    np.testing.assert_array_equal(st["routed"].view(np.uint16), acc.astype(bfloat16).view(np.uint16))


def test_rsf_and_shared_expert_follow_the_record(layer):
    rng = np.random.default_rng(3)
    se = {"gate_weight": rng.integers(-127, 128, (8, H)).astype(np.int8),
          "gate_scale": np.full((8, 1), 0.01, np.float32), "up_weight": rng.integers(-127, 128, (8, H)).astype(np.int8),
          "up_scale": np.full((8, 1), 0.01, np.float32), "down_weight": rng.integers(-127, 128, (H, 8)).astype(np.int8),
          "down_scale": np.full((H, 1), 0.01, np.float32)}
    x_q, x_s = w8a8.dispatch_quant(layer["hidden"])
    base = dict(topk_ids=layer["ids"], topk_weights=layer["weights"])
    plain = w8a8.w8a8_moe_deepep_stages(x_q, x_s, *layer["w"], **base)
    st = w8a8.w8a8_moe_deepep_stages(x_q, x_s, *layer["w"], **base, routed_scaling_factor=1.5, shared_expert=se,
                                     shared_input=layer["hidden"], swiglu_limit=0.5)
    want = (plain["routed"].astype(np.float32) * np.float32(1.5)).astype(bfloat16)        # row M2
    np.testing.assert_array_equal(st["routed"].view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(st["act_q"], plain["act_q"])        # routed experts unclamped (M1)
    y = (st["routed"].astype(np.float32) + st["shared"].astype(np.float32)).astype(bfloat16)
    np.testing.assert_array_equal(st["y"].view(np.uint16), y.view(np.uint16))


@pytest.mark.parametrize("kw, exc, match", [
    (dict(serving="vllm-ascend"), ValueError, r"argument 'serving' must be an engine whose pre-quantized MoE is the "
                                              r"DeepEP"),
    (dict(x_q=np.zeros((T, H), np.float32)), TypeError, r"argument 'x_q' must be of dtype int8"),
    (dict(x_scale=np.ones(T - 1, np.float32)), ValueError, r"argument 'x_scale' must be of shape \[T\] = \[9\]"),
    (dict(topk_ids=None), ValueError, r"argument 'topk_ids' must be given"),
    (dict(topk_ids=np.full((T, K), E, np.int32)), ValueError, r"argument 'topk_ids' must be expert ids in \[0, E = 4\)"),
    (dict(x_scale=np.full(T, np.inf, np.float32)), ValueError, r"argument 'x_scale'"),
    (dict(shared_expert={"gate_weight": 0}), TypeError, r"argument 'shared_expert' must be a mapping"),
])
def test_bad_input_names_the_argument(layer, kw, exc, match):
    x_q, x_s = w8a8.dispatch_quant(layer["hidden"])
    a = dict(x_q=x_q, x_scale=x_s, topk_ids=layer["ids"], topk_weights=layer["weights"],
             shared_input=layer["hidden"] if "shared_expert" in kw else None)
    a.update(kw)
    with pytest.raises(exc, match=r"^w8a8_moe_deepep: " + match):
        w8a8.w8a8_moe_deepep(a.pop("x_q"), a.pop("x_scale"), *layer["w"], **a)
