"""Weights the dump lacks, from the msModelSlim checkpoint (``--checkpoint``; docs/replay.md).

msprobe saves no FRACTAL_NZ tensor, so the int8 weights that SGLang and vllm-ascend cast to NZ at
load are missing from every current dump. :class:`CheckpointWeights` finds them in the checkpoint
(:class:`checkpoints.reader.Checkpoint`) by the call's module path (``construct.json`` in a ``mix``
dump) and the tensor's dtype and shape **after the serving load conversions** (the ones
``w8a8 inspect`` models):

* a dense Linear ``P``: ``P.weight`` int8 ``[N, K]`` -> transposed ``[K, N]``; ``P.weight_scale`` fp32
  ``[N, 1]`` -> ``[N]`` in the model dtype (bf16 for a bf16 model: rounded) or kept fp32;
  ``P.deq_scale`` / ``P.quant_bias`` as stored;
* a FusedMoE ``P`` (experts ``P.{e}.{gate,up,down}_proj`` or ``w1/w3/w2``): W13 = per expert
  ``concat(gate, up)`` stacked and transposed to ``[E, K, 2I]``, W2 ``[E, I, H]``; their scales
  ``[E, 2I]`` / ``[E, H]`` in the model dtype or fp32.

A candidate must match dtype and shape, and the dumped Max/Min where msprobe wrote them. For an NZ
tensor those are null, so the match rests on module path and shape only — and the result says so.
Several candidates that fit equally are reported as ambiguous and none is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.rounding import to_float

from .dump import TensorRecord


@dataclass
class Candidate:
    name: str
    how: str
    build: object          # () -> np.ndarray
    dtype: np.dtype
    shape: tuple[int, ...]


@dataclass
class WeightMatch:
    array: np.ndarray | None
    note: str


_EXPERT = re.compile(r"^(?P<prefix>.+)\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj|w1|w3|w2)\.(?P<suffix>weight|weight_scale)$")
_GATE_UP_DOWN = {"gate_proj": "gate", "w1": "gate", "up_proj": "up", "w3": "up", "down_proj": "down", "w2": "down"}


class CheckpointWeights:
    """Checkpoint tensors offered to the replay for missing inputs (module docstring)."""

    def __init__(self, path):
        from checkpoints.reader import Checkpoint

        self.checkpoint = Checkpoint.open(path, check_with_safetensors=False)
        self.path = str(path)
        self.model_dtype = self.checkpoint.model_dtype or _dt.bfloat16
        self._cache: dict[str, list[Candidate]] = {}

    def _tensor(self, name: str) -> np.ndarray:
        return np.asarray(self.checkpoint.tensor(name))

    def _scale_forms(self, name: str, values, what: str) -> list[Candidate]:
        out = []
        for dt in dict.fromkeys([self.model_dtype, np.dtype(np.float32)]):
            label = "fp32" if dt == np.float32 else _dt.name(dt)

            def build(values=values, dt=dt):
                v = np.asarray(values(), dtype=np.float32)
                return v if dt == np.float32 else to_float(v, dt)
            out.append(Candidate(name, f"{what} -> {label}", build, np.dtype(dt), None))
        return out

    def candidates(self, module: str) -> list[Candidate]:
        if module in self._cache:
            return self._cache[module]
        entries = self.checkpoint.entries
        # the dump's module path may lack the serving model's outer prefix ("layers.0..." for "model.layers.0...")
        names = [n for n in entries if n.startswith(module + ".") or ("." + module + ".") in n]
        cands: list[Candidate] = []
        experts: dict[str, dict[int, dict[str, dict[str, str]]]] = {}
        for n in names:
            m = _EXPERT.match(n)
            if m:
                experts.setdefault(m["prefix"], {}).setdefault(int(m["e"]), {}).setdefault(
                    _GATE_UP_DOWN[m["proj"]], {})[m["suffix"]] = n
                continue
            e = entries[n]
            dtype = np.dtype(e.dtype)
            if n.endswith(".weight") and len(e.shape) == 2 and dtype == np.int8:
                cands.append(Candidate(n, "int8 [N, K] transposed to [K, N] (serving load)",
                                       lambda n=n: np.ascontiguousarray(self._tensor(n).T), dtype,
                                       (e.shape[1], e.shape[0])))
            elif n.endswith(".weight_scale"):
                for c in self._scale_forms(n, lambda n=n: self._tensor(n).reshape(-1), "fp32 [N, 1] -> [N]"):
                    c.shape = (int(np.prod(e.shape)),)
                    cands.append(c)
            elif n.endswith((".deq_scale", ".quant_bias", ".input_scale", ".input_offset")):
                cands.append(Candidate(n, "as stored", lambda n=n: self._tensor(n), dtype, tuple(e.shape)))
        for prefix, by_expert in experts.items():
            cands.extend(self._moe(prefix, by_expert))
        self._cache[module] = cands
        return cands

    def _moe(self, prefix: str, by_expert: dict) -> list[Candidate]:
        ids = sorted(by_expert)
        if ids != list(range(len(ids))):
            return []
        out = []
        try:
            g = [by_expert[e]["gate"]["weight"] for e in ids]
            u = [by_expert[e]["up"]["weight"] for e in ids]
            d = [by_expert[e]["down"]["weight"] for e in ids]
        except KeyError:
            return []
        entries = self.checkpoint.entries
        n_i, k = entries[g[0]].shape
        h_out, i_in = entries[d[0]].shape
        e_n = len(ids)

        def w13():
            return np.ascontiguousarray(np.stack([np.concatenate([self._tensor(a), self._tensor(b)], axis=0).T
                                                  for a, b in zip(g, u)]))

        def w2():
            return np.ascontiguousarray(np.stack([self._tensor(x).T for x in d]))

        out.append(Candidate(f"{prefix}.*.{{gate,up}}.weight", "W13: concat(gate, up) per expert, stacked, "
                             "transposed to [E, K, 2I]", w13, np.dtype(np.int8), (e_n, k, 2 * n_i)))
        out.append(Candidate(f"{prefix}.*.down.weight", "W2: stacked, transposed to [E, I, H]", w2,
                             np.dtype(np.int8), (e_n, i_in, h_out)))
        try:
            gs = [by_expert[e]["gate"]["weight_scale"] for e in ids]
            us = [by_expert[e]["up"]["weight_scale"] for e in ids]
            ds = [by_expert[e]["down"]["weight_scale"] for e in ids]
        except KeyError:
            return out
        for c in self._scale_forms(f"{prefix}.*.{{gate,up}}.weight_scale", lambda: np.stack(
                [np.concatenate([self._tensor(a).reshape(-1), self._tensor(b).reshape(-1)]) for a, b in zip(gs, us)]),
                "W13 scales stacked [E, 2I]"):
            c.shape = (e_n, 2 * n_i)
            out.append(c)
        for c in self._scale_forms(f"{prefix}.*.down.weight_scale",
                                   lambda: np.stack([self._tensor(x).reshape(-1) for x in ds]), "W2 scales stacked [E, H]"):
            c.shape = (e_n, h_out)
            out.append(c)
        return out

    def find(self, rec: TensorRecord, modules: list[str]) -> WeightMatch | None:
        """The checkpoint tensor for ``rec`` under the nearest of ``modules`` (nearest first), or None."""
        if rec.dtype is None:
            return None
        for module in modules:
            fits = [c for c in self.candidates(module) if c.dtype == rec.dtype and tuple(c.shape) == rec.shape]
            if not fits:
                continue
            if not rec.stats_null:
                built = [(c, c.build()) for c in fits]
                fits_stats = [(c, a) for c, a in built if _stats_equal(rec, a)]
                if len(fits_stats) == 1:
                    c, a = fits_stats[0]
                    return WeightMatch(a, f"from checkpoint {c.name} ({c.how}); matched by module {module!r}, "
                                          "shape, dtype and the dumped Max/Min")
                if not fits_stats:
                    continue
                return WeightMatch(None, f"ambiguous: {len(fits_stats)} checkpoint tensors under {module!r} match "
                                         f"{rec.describe()} and its Max/Min ({', '.join(c.name for c, _ in fits_stats)})")
            if len(fits) == 1:
                c = fits[0]
                return WeightMatch(c.build(), f"from checkpoint {c.name} ({c.how}); the match rests on module path "
                                              f"{module!r} and shape only (the dump's statistics are null)")
            return WeightMatch(None, f"ambiguous: {len(fits)} checkpoint tensors under {module!r} have "
                                     f"{rec.describe()} ({', '.join(c.name for c in fits)}) and the dump's "
                                     "statistics are null")
        return None


def _stats_equal(rec: TensorRecord, a: np.ndarray) -> bool:
    if a.size == 0:
        return True
    f = a.astype(np.float32) if a.dtype.kind == "V" else a
    try:
        return float(f.max()) == float(rec.max) and float(f.min()) == float(rec.min)
    except (TypeError, ValueError):
        return False
