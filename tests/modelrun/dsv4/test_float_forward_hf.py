"""modelrun's DeepSeek-V4 float forward equals transformers' ``deepseek_v4`` bit for bit in fp32.

transformers >= 5.8 (the first release with ``models/deepseek_v4``) cannot share an environment with the
transformers 4.51.0 the other modelrun tests pin, so this test runs in its own environment, which
``.ci/run`` provides (transformers 5.8.1 and its dependencies installed into ``.ci/dsv4-hf`` with ``pip --target``, first on ``PYTHONPATH`` for this file only). Where
``DeepseekV4ForCausalLM`` is not importable the test is skipped with that reason.

The model: msModelSlim's own classes' tiny random DeepSeek-V4 (``data/float/dsv4-bf16``: 4 layers with
compress ratios 0 / 4 / 128 / 4, hash routing on layers 0-1, sliding window 16, indexer top-8), loaded by
transformers from the native names through its own checkpoint conversion mapping (no renaming of ours),
eager attention and the eager experts loop (transformers' default on CPU is a grouped_mm kernel, another
summation order). 160 tokens: the ratio-128 layer emits one compressed entry, the ratio-4 layers 40, of
which the indexer keeps 8. Our forward runs with the ``HF`` readings (every disagreement set to
transformers' side).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from modelrun.deepseek_v4 import config, forward, readings, weights

transformers = pytest.importorskip("transformers", reason="transformers >= 5.8 needed (see module docstring)")
if not hasattr(transformers, "DeepseekV4ForCausalLM"):
    pytest.skip(f"transformers {transformers.__version__} has no DeepseekV4ForCausalLM (>= 5.8 needed; "
                ".ci/run runs this file with .ci/dsv4-hf first on the path)", allow_module_level=True)

FLOAT = Path(__file__).parent / "data" / "float" / "dsv4-bf16"


@pytest.fixture(scope="module")
def models():
    hf = transformers.DeepseekV4ForCausalLM.from_pretrained(
        FLOAT, dtype=torch.float32, experts_implementation="eager", attn_implementation="eager")
    hf.eval()
    cfg = config.parse(json.loads((FLOAT / "config.json").read_text()))
    ours = forward.Model(cfg, weights.load_dir(FLOAT, torch.float32), readings=readings.HF)
    return hf, ours, cfg


def _ids(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("n", [160, 131, 7])
def test_logits_bit_identical(models, n):
    hf, ours, cfg = models
    ids = _ids(n, n)
    seen = []
    ours.observe = lambda ev, name, **kw: seen.append((name, kw)) if ev == "attention" else None
    with torch.no_grad():
        a = hf(ids.view(1, -1)).logits
        b = ours.forward(ids)
    ours.observe = lambda *a, **k: None
    assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape == (1, n, cfg.vocab)
    assert torch.equal(a, b), f"max |diff| {float((a - b).abs().max())}"
    entries = {name: kw["entries"] for name, kw in seen}
    assert entries == {"layers.0.attn": 0, "layers.1.attn": n // 4, "layers.2.attn": n // 128, "layers.3.attn": n // 4}


def test_the_config_exercises_every_variant(models):
    """Guards the test's power: all three ratios, hash and score layers, a window shorter than the prompt,
    and an indexer that must choose (fewer kept entries than it has)."""
    _, _, cfg = models
    assert set(cfg.ratios[:cfg.layers]) == {0, 4, 128}
    assert 0 < cfg.hash_layers < cfg.layers
    assert cfg.window < 131 and cfg.index_topk < 131 // 4


def test_a_single_reading_changes_the_bits(models):
    """The switches are live: the official hyper-connection normalisation order (mixes scaled after the fn
    matmul) alone moves the fp32 logits off transformers', by rounding only."""
    hf, ours, cfg = models
    ids = _ids(160, 160)
    other = forward.Model(cfg, ours.t, readings=readings.HF.with_(hc_norm="mixes"))
    with torch.no_grad():
        a = hf(ids.view(1, -1)).logits
        b = other.forward(ids)
    assert not torch.equal(a, b)
    assert float((a - b).abs().max()) < 1e-3
