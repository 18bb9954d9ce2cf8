"""DeepSeek-V4 config.json checks and the reading switches: bad input named, every switch live.

The hyper-connection pieces are checked against numbers worked out here: a uniform ``comb`` is a fixed
point of Sinkhorn in both readings; ``pre`` differs by exactly ``hc_eps`` between them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from modelrun.deepseek_v4 import config, forward, readings, weights

FLOAT = Path(__file__).parent / "data" / "float" / "dsv4-bf16"
CFG = json.loads((FLOAT / "config.json").read_text())


def test_parse_the_shipped_config():
    c = config.parse(CFG)
    assert (c.hidden, c.layers, c.ratios[:4], c.hash_layers, c.window, c.index_topk) == (64, 4, (0, 4, 128, 4), 2,
                                                                                         16, 8)
    assert c.yarn == {"factor": 16.0, "original_max_position_embeddings": 65536.0, "beta_fast": 32.0,
                      "beta_slow": 1.0}


@pytest.mark.parametrize("change,message", [
    ({"compress_ratios": [0, 4, 64, 4, 0]}, "'compress_ratios' must list one of (0, 4, 128)"),
    ({"compress_ratios": [0, 4]}, "for each of the 4 layers"),
    ({"num_key_value_heads": 2}, "'num_key_value_heads' must be 1"),
    ({"qk_rope_head_dim": 7}, "'qk_rope_head_dim' must be even"),
    ({"o_groups": 3}, "'o_groups' 3 must divide"),
    ({"scoring_func": "sigmoid"}, "'scoring_func' sqrtsoftplus"),
    ({"num_experts_per_tok": 9}, "'num_experts_per_tok' 9 exceeds n_routed_experts 8"),
    ({"hidden_size": "64"}, "'hidden_size' must be int"),
    ({"rope_scaling": {"type": "linear", "factor": 2}}, "'rope_scaling' must be yarn"),
    ({"torch_dtype": "float8"}, "'torch_dtype' must be"),
])
def test_bad_config_named(change, message):
    with pytest.raises(ValueError, match="^config.json: ") as e:
        config.parse({**CFG, **change})
    assert message in str(e.value)


def test_missing_key_named():
    cfg = dict(CFG)
    del cfg["hc_mult"]
    with pytest.raises(ValueError, match=r"'hc_mult' is missing"):
        config.parse(cfg)


def test_reading_values_checked():
    with pytest.raises(ValueError, match=r"Readings.sinkhorn: expected one of \['official', 'msmodelslim'\], got 'x'"):
        readings.OFFICIAL.with_(sinkhorn="x")
    assert readings.MSMODELSLIM.differs(readings.OFFICIAL) == {"shared_expert_clamp": False, "sinkhorn": "msmodelslim"}
    assert set(readings.TOGGLES) <= set(readings.CHOICES)


@pytest.fixture(scope="module")
def tensors():
    return weights.load_dir(FLOAT, torch.float32)


def _model(tensors, r):
    return forward.Model(config.parse(CFG), tensors, readings=r)


def test_sinkhorn_readings_on_a_uniform_comb(tensors):
    """fn = 0, base = 0: mixes 0, comb logits 0 -> softmax 1/4 + eps, a doubly stochastic fixed point up
    to eps; pre = sigmoid(0) = 0.5 (+ hc_eps in the official reading)."""
    t = dict(tensors)
    for k in ("fn", "base"):
        t[f"layers.0.hc_attn_{k}"] = torch.zeros_like(t[f"layers.0.hc_attn_{k}"])
    h = torch.randn(1, 3, 4, 64, dtype=torch.float64)
    out = {}
    for name in ("official", "msmodelslim"):
        m = _model(t, readings.OFFICIAL.with_(sinkhorn=name))
        out[name] = m.hc_pre(h, "layers.0", "attn")
    (xo, po, co), (xm, pm, cm) = out["official"], out["msmodelslim"]
    assert torch.allclose(co, torch.full_like(co, 0.25), atol=1e-5) and torch.allclose(cm, co, atol=1e-6)
    assert torch.allclose(po, torch.ones_like(po)) and torch.equal(po, pm)       # post = 2 sigmoid(0)
    eps = CFG["hc_eps"]
    assert torch.allclose(xm, 0.5 * h.sum(2), rtol=1e-12, atol=0)
    # the official pre is sigmoid + eps: eps * sum_i h_i more (eps held in fp32 next to 0.5: a few % of eps)
    assert torch.allclose(xo - xm, eps * h.sum(2), rtol=0.1, atol=1e-12)


@pytest.mark.parametrize("switch,value", sorted(readings.TOGGLES.items()))
def test_each_toggle_changes_the_bf16_logits_or_is_inert_for_a_reason(tensors, switch, value):
    bf = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in tensors.items()}
    ids = torch.arange(140) % 256
    with torch.no_grad():
        a = _model(bf, readings.OFFICIAL).forward(ids)
        b = _model(bf, readings.OFFICIAL.with_(**{switch: value})).forward(ids)
    if switch == "shared_expert_clamp":       # this random model's shared-expert pre-activations stay below 10
        assert torch.equal(a, b)
    else:
        assert not torch.equal(a, b)
