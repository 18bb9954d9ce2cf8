"""The float model's real activations at every Linear and MoE block (``w8a8 inspect --verify``'s inputs).

:func:`capture` runs the reference float model (:mod:`.forward`, in its own dtype) on token
sequences and keeps, per module name, the rows each Linear saw, and per MoE block the hidden states
and the float router's choice (``topk ids`` int32 and weights fp32, transformers' router with the
reference's correction bias). Names are the HF module names (``model.layers.0.self_attn.q_proj``,
``model.layers.1.mlp.experts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from backends.torch_common import from_torch

from . import config as _config
from . import config_shapes
from .analysis import MAX_TOKENS, check_sequences
from .forward import TORCH_DTYPES, FloatExecutor, Model
from .weights import FloatModel


@dataclass
class Captured:
    linear: dict[str, np.ndarray] = field(default_factory=dict)      # name -> x [rows, K] (model dtype)
    moe: dict[str, tuple] = field(default_factory=dict)               # "<mlp>.experts" -> (x [T, H], ids, weights)
    tokens: int = 0
    source: str = ""


class _Recorder(FloatExecutor):
    def __init__(self, tensors):
        super().__init__(tensors)
        self.rows: dict[str, list[np.ndarray]] = {}

    def linear(self, name, x):
        self.rows.setdefault(name, []).append(from_torch(x.detach().reshape(-1, x.shape[-1]).contiguous()))
        return super().linear(name, x)


def capture(reference, sequences: list[list[int]], *, max_tokens: int = MAX_TOKENS, flag: str | None = None
            ) -> Captured:
    """Run the float model in ``reference`` (a directory) on ``sequences`` and keep what every module saw."""
    ref = FloatModel(reference)
    cfg = _config.parse(ref.config)
    config_shapes.check(cfg, {n: a.shape for n, a in ref.arrays.items()}, f"the --reference {reference}", complete=True)
    check_sequences(sequences, cfg.vocab, ref.config.get("max_position_embeddings"), max_tokens, flag)
    tensors = ref.torch_tensors(TORCH_DTYPES[cfg.dtype])
    rec = _Recorder(tensors)
    model = Model(cfg, tensors, rec)
    moe: dict[str, list] = {}
    model.router_observer = lambda p, h, ids, w: moe.setdefault(p + ".experts", []).append(
        (from_torch(h.detach().contiguous()), ids.numpy().astype(np.int32), w.detach().numpy().astype(np.float32)))
    with torch.no_grad():
        for s in sequences:
            model.forward(torch.tensor(s, dtype=torch.int64))
    out = Captured(tokens=int(sum(len(s) for s in sequences)), source=str(reference))
    out.linear = {k: np.concatenate(v) for k, v in rec.rows.items()}
    out.moe = {k: tuple(np.concatenate([part[i] for part in v]) for i in range(3)) for k, v in moe.items()}
    return out
