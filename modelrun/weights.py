"""Tensors for the forward: a float model directory, and the float tensors of a checkpoint.

A float model directory is what transformers' ``save_pretrained`` writes (``config.json`` plus
``*.safetensors``, sharded or not); it is read through :class:`checkpoints.safetensors_io.MappedFile`
(headers parsed, data memory-mapped, nothing executed) and converted with
:func:`backends.torch_common.to_torch` (bit-exact for bf16 / fp16).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from backends.torch_common import to_torch
from checkpoints import safe_files
from checkpoints.safetensors_io import MappedFile, SafetensorsError

from . import config as _config

CONFIG_LIMIT = 16 << 20   # bytes of a config.json (real ones are a few KB)


class FloatModel:
    """A float model directory: ``config`` (dict), ``arrays`` (name -> read-only NumPy view)."""

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise ValueError(f"--reference: {self.path} is not a directory (a float model: config.json + "
                             "*.safetensors, as save_pretrained writes it)")
        cfg_path = self.path / "config.json"
        if not cfg_path.is_file():
            raise ValueError(f"--reference: {self.path} has no config.json")
        text = safe_files.read_text(cfg_path, "config.json", limit=CONFIG_LIMIT)
        self.config = safe_files.loads_json(text, f"--reference: {cfg_path}", "config.json")
        files = sorted(self.path.glob("*.safetensors"))
        if not files:
            raise ValueError(f"--reference: {self.path} holds no .safetensors files")
        self.arrays: dict[str, np.ndarray] = {}
        for f in files:
            try:
                mf = MappedFile(f)
            except SafetensorsError as exc:
                raise ValueError(f"--reference: {exc}") from None
            for name in mf.entries:
                self.arrays[name] = mf.tensor(name)

    @property
    def dtype(self) -> str:
        return _config.model_dtype(self.config)

    def torch_tensors(self, dtype=None) -> dict:
        """Every float tensor as torch, cast to ``dtype`` (a torch dtype) when given."""
        out = {}
        for name, a in self.arrays.items():
            if np.asarray(a).dtype.kind not in "fV":
                continue
            t = to_torch(np.array(a))
            out[name] = t.to(dtype) if dtype is not None else t
        return out


def checkpoint_float_tensors(res, dtype) -> dict:
    """The float tensors of a resolved checkpoint (norms, embeddings, the router, FLOAT Linears,
    lm_head) under their serving names, as torch in ``dtype``; the FLOAT-tagged fp32 ``.bias`` of a
    quantized Linear is left out (the serving path folds it into ``quant_bias`` or adds it itself)."""
    out = {}
    for serving, native in res.native_of.items():
        entry = res.checkpoint.entries.get(native)
        if entry is None or entry.dtype.kind not in "fV":
            continue
        prefix, _, suffix = serving.rpartition(".")
        if suffix == "bias" and res.types.get(prefix + ".weight") not in (None, "FLOAT"):
            continue
        if res.types.get(serving) not in (None, "FLOAT"):
            continue          # scales, offsets of quantized Linears
        out[serving] = to_torch(np.array(res.checkpoint.tensor(native))).to(dtype)
    return out
