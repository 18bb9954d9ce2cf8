"""DeepSeek-V4's router inside the MoE layer, as each engine composes it (serving row M3).

SGLang (sgl-project/sglang python/sglang/srt/layers/moe/deepseek_v4_topk.py@114c5ba4: ``HashTopK._forward_torch``,
``biased_topk_impl``): torch ops in the router logits' dtype. vllm-ascend (vllm_ascend/ops/fused_moe/router/
fused_topk_router.py@01956401 ``AscendFusedTopKRouter._compute_routing``): ``moe_gating_top_k_hash`` with
``group_select_mode=1, renorm=0, norm_type=2, eps=1e-20``. Hand-derived bits, the engines' torch sequences
transcribed from their source and run in real torch, the layer against its own given-ids form, and torch-cpu.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import backends
import w8a8
from w8a8.dtypes import bfloat16
from w8a8.moe.dsv4_routing import sqrt_softplus_torch
from w8a8.moe.pipeline import moe_route, w8a8_moe_args

T, E, H, I, K = 7, 8, 32, 16, 2


@pytest.fixture(scope="module")
def layer():
    rng = np.random.default_rng(22)
    return dict(
        hidden=rng.standard_normal((T, H)).astype(bfloat16),
        w13=rng.integers(-127, 128, (E, 2 * I, H)).astype(np.int8),
        s13=(rng.random((E, 2 * I, 1)) * 0.02).astype(np.float32),
        w2=rng.integers(-127, 128, (E, H, I)).astype(np.int8),
        s2=(rng.random((E, H, 1)) * 0.02).astype(np.float32),
        logits=(rng.standard_normal((T, E)) * 2).astype(bfloat16),
        bias=(rng.standard_normal(E) * 0.1).astype(np.float32),
        tid2eid=np.stack([rng.permutation(E)[:K] for _ in range(17)]).astype(np.int32),
        input_ids=rng.integers(0, 17, T).astype(np.int64))


def _bits(x):
    return np.asarray(x).view(np.uint16)


def _route(logits, serving, **kw):
    a = w8a8_moe_args(np.zeros((logits.shape[0], H), bfloat16), np.zeros((E, 2 * I, H), np.int8),
                      np.ones((E, 2 * I), np.float32), np.zeros((E, H, I), np.int8), np.ones((E, H), np.float32),
                      top_k=K, router_logits=logits, scoring_func="sqrtsoftplus", serving=serving, **kw)
    return moe_route(a.routing)


# -- hand-derived bits ------------------------------------------------------------------------------------------
def test_sqrt_softplus_hand_bits():
    # bf16 logits 0, 1, -1, 2: softplus in fp32 then bf16 (8 significant bits), sqrt in fp32 then bf16:
    #   0: ln 2 = 0.693147 -> 177.44 / 256 -> 0.69140625;  sqrt = 0.831508 -> 212.87 / 256 -> 0.83203125 (0x3F55)
    #   1: 1.3132617 -> 168.10 / 128 -> 1.3125;            sqrt = 1.145644 -> 146.64 / 128 -> 1.1484375  (0x3F93)
    #  -1: 0.3132617 -> 160.39 / 512 -> 0.3125;            sqrt = 0.559017 -> 143.11 / 256 -> 0.55859375 (0x3F0F)
    #   2: 2.126928 -> 136.12 / 64 -> 2.125;               sqrt = 1.457738 -> 186.59 / 128 -> 1.4609375  (0x3FBB)
    s = sqrt_softplus_torch(np.array([0, 1, -1, 2], bfloat16))
    assert _bits(s).tolist() == [0x3F55, 0x3F93, 0x3F0F, 0x3FBB]
    # torch's threshold: softplus(x) = x above 20 (x = 24: sqrt(24) = 4.898979 -> 156.77 / 32 -> 4.90625, 0x409D)
    assert _bits(sqrt_softplus_torch(np.array([24], bfloat16))).tolist() == [0x409D]


def test_sglang_hash_layer_hand_bits():
    # token 0 -> tid2eid[0] = [0, 1]: scores 0.83203125, 1.1484375; their sum 1.98046875 = 253.5 / 128 -> bf16
    # ties to even 254 / 128 = 1.984375; 0.83203125 / 1.984375 = 0.419291 -> 214.68 / 512 -> 0.419921875,
    # 1.1484375 / 1.984375 = 0.578740 -> 148.16 / 256 -> 0.578125
    logits = np.array([[0, 1, -1, 2, 0, 0, 0, 0]], bfloat16)
    ids, w = _route(logits, "sglang", input_ids=np.array([0]), tid2eid=np.array([[0, 1]], np.int32))
    assert ids.tolist() == [[0, 1]] and w.dtype == np.float32
    assert w.tolist() == [[0.419921875, 0.578125]]


def test_sglang_score_layer_hand_bits():
    # scores (above) 0.83203125, 1.1484375, 0.55859375, 1.4609375; bias +0.5 on expert 0 (fp32, so the choice is
    # fp32): 1.33203125 > 1.1484375, top-2 = [3, 0] (without the bias [3, 1]); weights the unbiased scores:
    # 1.4609375 + 0.83203125 = 2.29296875 = 146.75 / 64 -> 2.296875; 1.4609375 / 2.296875 = 0.636054 -> 162.83 / 256
    # -> 0.63671875; 0.83203125 / 2.296875 = 0.362245 -> 185.47 / 512 -> 0.361328125
    logits = np.array([[0, 1, -1, 2, -9, -9, -9, -9]], bfloat16)
    bias = np.array([0.5, 0, 0, 0, 0, 0, 0, 0], np.float32)
    ids, w = _route(logits, "sglang", correction_bias=bias)
    assert ids.tolist() == [[3, 0]]
    assert w.tolist() == [[0.63671875, 0.361328125]]
    _, w_va = _route(logits, "vllm-ascend", correction_bias=bias)
    # vllm-ascend: fp32 scores, bias cast to the logits' dtype, one rounding to bf16 at the end:
    # s3 = 1.457738, s0 = 0.832555 -> 0.636498 -> 162.94 / 256 -> 0.63671875; 0.363502 -> 186.11 / 512 -> 0.36328125
    assert w_va.tolist() == [[0.63671875, 0.36328125]]


# -- against the engines' own sequences -------------------------------------------------------------------------
def _sglang_hash_torch(logits, input_ids, tid2eid):
    """HashTopK._forward_torch, num_fused_shared_experts 0, score_func sqrtsoftplus (transcribed)."""
    scores = torch.nn.functional.softplus(logits).sqrt()
    topk_ids = torch.zeros((scores.shape[0], K), dtype=torch.int32)
    topk_weights = torch.zeros((scores.shape[0], K), dtype=scores.dtype)
    topk_ids[:, :] = tid2eid[input_ids]
    topk_weights[:, :] = scores.gather(1, topk_ids[:, :].long())
    topk_weights[:, :] /= topk_weights[:, :].sum(dim=-1, keepdim=True)
    return topk_weights.float(), topk_ids


def _sglang_biased_torch(logits, bias):
    """biased_topk_impl, sqrtsoftplus, renormalize True, no fused shared experts (transcribed)."""
    scores = torch.nn.functional.softplus(logits).sqrt()
    scores_for_choice = scores.view(scores.shape[0], -1) + bias.unsqueeze(0)
    _, topk_ids = torch.topk(scores_for_choice, k=K, dim=-1, sorted=False)
    topk_weights = scores.gather(1, topk_ids)
    topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    return topk_weights.to(torch.float32), topk_ids.to(torch.int32)


def _by_expert(ids, w):
    order = np.argsort(ids, axis=-1, kind="stable")   # sorted=False: compare the (expert, weight) pairs per row
    return np.take_along_axis(ids, order, -1), np.take_along_axis(w, order, -1)


@pytest.mark.parametrize("bias_dtype", [np.float32, bfloat16])
def test_sglang_form_equals_its_torch_ops(layer, bias_dtype):
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((257, E)) * 3).astype(bfloat16)
    tl = torch.from_numpy(logits.view(np.int16).copy()).view(torch.bfloat16)
    ids_in = rng.integers(0, 17, 257)
    w_ref, i_ref = _sglang_hash_torch(tl, torch.from_numpy(ids_in), torch.from_numpy(layer["tid2eid"]))
    i, w = _route(logits, "sglang", input_ids=ids_in, tid2eid=layer["tid2eid"])
    np.testing.assert_array_equal(i, i_ref.numpy())
    np.testing.assert_array_equal(w.view(np.uint32), w_ref.numpy().view(np.uint32))
    bias = layer["bias"].astype(bias_dtype)
    tb = torch.from_numpy(bias.astype(np.float32)).to(torch.bfloat16 if bias_dtype is bfloat16 else torch.float32)
    w_ref, i_ref = _sglang_biased_torch(tl, tb)
    i, w = _route(logits, "sglang", correction_bias=bias)
    gi, gw = _by_expert(i, w)
    ri, rw = _by_expert(i_ref.numpy(), w_ref.numpy())
    np.testing.assert_array_equal(gi, ri)
    np.testing.assert_array_equal(gw.view(np.uint32), rw.view(np.uint32))


def test_sqrt_softplus_equals_torch_on_every_bf16():
    every = np.arange(1 << 16, dtype=np.uint16).view(bfloat16)
    every = every[np.isfinite(every.astype(np.float32))]
    t = torch.nn.functional.softplus(torch.from_numpy(every.view(np.int16).copy()).view(torch.bfloat16)).sqrt()
    np.testing.assert_array_equal(_bits(sqrt_softplus_torch(every)), t.view(torch.int16).numpy().view(np.uint16))


@pytest.mark.parametrize("hashed", [True, False])
def test_vllm_ascend_form_is_its_hash_op(layer, hashed):
    kw = dict(input_ids=layer["input_ids"], tid2eid=layer["tid2eid"]) if hashed else dict(correction_bias=layer["bias"])
    i, w = _route(layer["logits"], "vllm-ascend", **kw)
    op_kw = dict(input_ids=layer["input_ids"], tid2eid=layer["tid2eid"]) if hashed else \
        dict(bias=layer["bias"].astype(bfloat16))              # text_bias.to(router_logits.dtype)
    y, ids, _ = w8a8.moe_gating_top_k(layer["logits"], K, group_select_mode=1, renorm=0, norm_type=2, eps=1e-20,
                                      routed_scaling_factor=1.0, **op_kw)
    np.testing.assert_array_equal(i, ids)
    np.testing.assert_array_equal(w, y.astype(np.float32))


# -- in the layer -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("serving", ["sglang", "vllm-ascend"])
@pytest.mark.parametrize("hashed", [True, False])
def test_layer_routes_as_given_ids_and_torch_cpu_agrees(layer, serving, hashed):
    kw = dict(input_ids=layer["input_ids"], tid2eid=layer["tid2eid"]) if hashed else dict(correction_bias=layer["bias"])
    kw.update(top_k=K, router_logits=layer["logits"], scoring_func="sqrtsoftplus", routed_scaling_factor=1.5,
              swiglu_limit=10.0, serving=serving)
    w = (layer["hidden"], layer["w13"], layer["s13"], layer["w2"], layer["s2"])
    st = w8a8.w8a8_moe_stages(*w, **kw)
    if hashed:
        np.testing.assert_array_equal(st["topk_ids"], layer["tid2eid"][layer["input_ids"]])
    given = {k: v for k, v in kw.items() if k in ("routed_scaling_factor", "swiglu_limit", "serving")}
    y = w8a8.w8a8_moe(*w, topk_ids=st["topk_ids"], topk_weights=st["topk_weights"], **given)
    np.testing.assert_array_equal(_bits(st["y"]), _bits(y))
    tc = backends.get("torch-cpu")
    np.testing.assert_array_equal(_bits(tc.w8a8_moe(*w, **kw)), _bits(w8a8.w8a8_moe(*w, **kw, numerics=tc.numerics)))


def test_engines_differ_on_bf16_logits(layer):
    # SGLang rounds the scores and the sum to bf16 before dividing; vllm-ascend divides fp32 scores: some weights
    # differ (the ids of a hash layer cannot)
    kw = dict(input_ids=layer["input_ids"], tid2eid=layer["tid2eid"])
    (i1, w1), (i2, w2) = _route(layer["logits"], "sglang", **kw), _route(layer["logits"], "vllm-ascend", **kw)
    np.testing.assert_array_equal(i1, i2)
    assert np.any(w1 != w2)


# -- bad input ---------------------------------------------------------------------------------------------------
_TID = np.array([[0, 1], [2, 3]], np.int32)


@pytest.mark.parametrize("kw, match", [
    (dict(input_ids=np.array([0] * 3)), r"argument 'tid2eid' must be given together with the other"),
    (dict(tid2eid=_TID), r"argument 'input_ids' must be given together with the other"),
    (dict(input_ids=np.array([0, 1, 0]), tid2eid=_TID, correction_bias=np.zeros(E, np.float32)),
     r"argument 'correction_bias' must be None on a hash layer"),
    (dict(input_ids=np.array([0, 1]), tid2eid=_TID), r"argument 'input_ids' must be of shape \[T\] = \[3\]"),
    (dict(input_ids=np.array([0, 2, 0]), tid2eid=_TID), r"argument 'input_ids' must be token ids in \[0, 2\)"),
    (dict(input_ids=np.array([0, 1, 0]), tid2eid=np.array([[0, 8], [1, 2]], np.int32)),
     r"argument 'tid2eid' must be expert ids in \[0, E = 8\)"),
    (dict(input_ids=np.array([0, 1, 0]), tid2eid=np.array([[0], [1]], np.int32)),
     r"argument 'tid2eid' must be of shape \[vocab, top_k\] = \[\*, 2\]"),
    (dict(input_ids=np.array([0.0, 1, 0]), tid2eid=_TID), r"argument 'input_ids' must be of dtype"),
    (dict(input_ids=np.array([0, 1, 0]), tid2eid=_TID, group_count=2, k_group=2),
     r"argument 'group_count' must be 1 \(with k_group 1\)"),
    (dict(), r"argument 'correction_bias' must be the \[E\] gate bias on a score layer"),
    (dict(input_ids=np.array([0, 1, 0]), tid2eid=_TID, scoring_func="sigmoid"),
     r"argument 'input_ids' must be None unless the layer routes DeepSeek-V4's hash layers"),
])
def test_bad_router_arguments_name_the_argument(kw, match):
    kw = {"scoring_func": "sqrtsoftplus", **kw}
    with pytest.raises((ValueError, TypeError), match=r"^w8a8_moe: " + match):
        w8a8.w8a8_moe(np.zeros((3, H), bfloat16), np.zeros((E, 2 * I, H), np.int8), np.ones((E, 2 * I), np.float32),
                      np.zeros((E, H, I), np.int8), np.ones((E, H), np.float32), top_k=K,
                      router_logits=np.zeros((3, E), bfloat16), **kw)


def test_hash_arguments_refused_with_given_ids():
    with pytest.raises(ValueError, match=r"^w8a8_moe: argument 'tid2eid' must be None unless"):
        w8a8.w8a8_moe(np.zeros((3, H), bfloat16), np.zeros((E, 2 * I, H), np.int8), np.ones((E, 2 * I), np.float32),
                      np.zeros((E, H, I), np.int8), np.ones((E, H), np.float32),
                      topk_ids=np.zeros((3, K), np.int32), topk_weights=np.ones((3, K), np.float32), tid2eid=_TID)


def test_sglang_renormalises_without_epsilon():
    # logits -200: exp(-200) underflows to 0 in fp32, softplus 0, score 0; SGLang's w / w.sum() is 0 / 0 = NaN,
    # vllm-ascend's op divides by sum + 1e-20: weights 0
    logits = np.full((1, E), -200, bfloat16)
    kw = dict(input_ids=np.array([0]), tid2eid=np.array([[0, 1]], np.int32))
    assert np.isnan(_route(logits, "sglang", **kw)[1]).all()
    assert _route(logits, "vllm-ascend", **kw)[1].tolist() == [[0.0, 0.0]]
