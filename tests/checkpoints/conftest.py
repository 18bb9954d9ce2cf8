"""Fixtures for the checkpoint tests: small synthetic DeepSeek checkpoints in both naming schemes.

``v3``: DeepSeek-V3 HF names (``model.layers.{L}.mlp.experts.{e}.gate_proj``), built with the
static-attention + dynamic-MLP recipe; ``v4``: DeepSeek-V4 native names
(``layers.{L}.ffn.experts.{e}.w1``), built with the DeepSeek-V4-Flash recipe. Two layers, four
experts, hidden 64: a few hundred KB each, written in milliseconds.
"""

from __future__ import annotations

import copy

import pytest

from checkpoints.models import tiny_config
from checkpoints.writer import synthetic_writer

SMALL = dict(layers=2, experts=4, hidden=64, moe_inter=32, vocab=64)
_BASE: dict = {}


def small_config(naming: str, **kw) -> dict:
    return tiny_config(naming, **{**SMALL, **kw})


def base_writer(naming: str, dtype: str = "bfloat16", **overrides):
    """A fresh copy of the small synthetic writer for ``naming`` ("v3" or "v4") and model ``dtype``."""
    key = (naming, dtype, tuple(sorted(overrides.items())))
    if key not in _BASE:
        _BASE[key] = synthetic_writer(small_config(naming, dtype=dtype), overrides=overrides or None)
    return copy.deepcopy(_BASE[key])


# Checkpoint names of the same module class in the two namings.
NAMES = {
    "v3": {
        "dyn": "model.layers.1.mlp.shared_experts.down_proj",          # W8A8_DYNAMIC Linear
        "static": "model.layers.1.self_attn.o_proj",                    # W8A8 Linear
        "static_overrides": {},
        "float": "model.layers.1.self_attn.kv_b_proj",                  # FLOAT Linear
        "packed": ("model.layers.1.mlp.shared_experts.gate_proj", "model.layers.1.mlp.shared_experts.up_proj"),
        "packed_module": "model.layers.1.mlp.shared_experts.gate_up_proj",
        "moe": "model.layers.1.mlp.experts",
        "expert": "model.layers.1.mlp.experts.{e}.{p}",
        "projs": ("gate_proj", "up_proj", "down_proj"),
        "router": "model.layers.1.mlp.gate",
    },
    "v4": {
        "dyn": "layers.1.ffn.shared_experts.w2",
        "static": "layers.1.attn.wq_b",                 # W8A8 with static_overrides (the DSV4 recipe has none)
        "static_overrides": {"*.attn.wq_b": "W8A8"},
        "float": "layers.1.attn.wo_b",
        "packed": ("layers.1.ffn.shared_experts.w1", "layers.1.ffn.shared_experts.w3"),
        "packed_module": "layers.1.ffn.shared_experts.gate_up_proj",
        "moe": "layers.1.ffn.experts",
        "expert": "layers.1.ffn.experts.{e}.{p}",
        "projs": ("w1", "w3", "w2"),
        "router": "layers.1.ffn.gate",
    },
}


def retag(writer, prefix: str, new_type: str) -> None:
    """Change the description type of every tensor of Linear ``prefix`` (not its FLOAT bias)."""
    for name in list(writer.types):
        if name.startswith(prefix + ".") and not name.endswith(".bias"):
            writer.types[name] = new_type


def requantize(writer, prefix: str, scheme: str, **kw) -> None:
    """Re-export Linear ``prefix`` as ``scheme`` from its dequantized (or float) weight."""
    import numpy as np

    w = writer.tensors[prefix + ".weight"]
    if w.dtype == np.int8:
        scale = writer.tensors.get(prefix + ".weight_scale")
        if scale is None:
            deq = writer.tensors[prefix + ".deq_scale"].astype(np.float32)
            scale = (deq / writer.tensors[prefix + ".input_scale"]).reshape(-1, 1)
        w = w.astype(np.float32) * scale.astype(np.float32)
    for name in [n for n in writer.tensors if n.startswith(prefix + ".")]:
        del writer.tensors[name]
        del writer.types[name]
    writer.add_linear(prefix, np.asarray(w, np.float32), scheme, **kw)


class Kit:
    """Helpers for one test: ``kit.make(naming, mutate)`` saves a (mutated) small checkpoint."""

    NAMES = NAMES
    small_config = staticmethod(small_config)
    base_writer = staticmethod(base_writer)
    retag = staticmethod(retag)
    requantize = staticmethod(requantize)

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self._n = 0

    def make(self, naming: str, mutate=None, *, overrides: dict | None = None, config: dict | None = None,
             dtype: str = "bfloat16", **save_kw):
        writer = base_writer(naming, dtype, **(overrides or {}))
        if mutate is not None:
            mutate(writer)
        self._n += 1
        return writer.save(self.tmp_path / f"ckpt{self._n}", config=config or small_config(naming, dtype=dtype),
                           **save_kw)


@pytest.fixture
def kit(tmp_path) -> Kit:
    return Kit(tmp_path)


@pytest.fixture(params=["v3", "v4"])
def naming(request) -> str:
    return request.param
