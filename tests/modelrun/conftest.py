"""Fixtures of the model-run tests: the tiny checkpoints msModelSlim 26.1.0 wrote (``data/``, made by
``make_checkpoints.py``), their float models, and crafted copies of them.

``crafted(name)`` copies checkpoint ``name`` into tmp and returns a :class:`Crafted` to alter it:
``crafted.tensors`` (name -> array, editable), ``crafted.types`` (the description's tensor entries),
``crafted.config``; ``crafted.save()`` writes them back the way the checkpoint stores them (one
shard plus its index, as msModelSlim wrote it) and returns the path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from checkpoints.safetensors_io import MappedFile, write_file

DATA = Path(__file__).resolve().parent / "data"


class Data:
    """Where the fixtures lie (the ``data`` fixture)."""

    root = DATA
    float = DATA / "float"
    quant = DATA / "msmodelslim"
    recipes = DATA / "recipes"

    @staticmethod
    def calib_ranges() -> dict:
        return json.loads((DATA / "calib_ranges.json").read_text())


@pytest.fixture(scope="session")
def data() -> type[Data]:
    return Data


class Crafted:
    def __init__(self, path: Path):
        self.path = path
        self.index = json.loads((path / "quant_model_weights.safetensors.index.json").read_text())
        (self.shard,) = sorted(set(self.index["weight_map"].values()))
        mf = MappedFile(path / self.shard)
        self.tensors = {k: np.array(mf.tensor(k)) for k in mf.entries}
        desc = json.loads((path / "quant_model_description.json").read_text())
        self.globals = {k: v for k, v in desc.items() if not isinstance(v, str) or k in ("version", "model_quant_type")}
        self.types = {k: v for k, v in desc.items() if k not in self.globals}
        self.config = json.loads((path / "config.json").read_text())

    def save(self) -> Path:
        write_file(self.path / self.shard, self.tensors)
        self.index["weight_map"] = {k: self.shard for k in sorted(self.tensors)}
        (self.path / "quant_model_weights.safetensors.index.json").write_text(json.dumps(self.index))
        (self.path / "quant_model_description.json").write_text(json.dumps({**self.types, **self.globals}, indent=1))
        (self.path / "config.json").write_text(json.dumps(self.config, indent=1))
        return self.path


@pytest.fixture
def crafted(tmp_path):
    """``crafted(name)``: a copy of the msModelSlim checkpoint ``name`` in tmp, to alter (module docstring)."""

    def make(name: str, dest: str | None = None) -> Crafted:
        out = tmp_path / (dest or name)
        shutil.copytree(DATA / "msmodelslim" / name, out)
        return Crafted(out)

    return make


@pytest.fixture
def float_copy(tmp_path):
    """``float_copy(name)``: (path, tensors dict) of a copy of float model ``name``; write the dict back
    with ``write_file(path / "model.safetensors", tensors)``."""

    def make(name: str, dest: str | None = None):
        out = tmp_path / (dest or f"float-{name}")
        shutil.copytree(DATA / "float" / name, out)
        mf = MappedFile(out / "model.safetensors")
        return out, {k: np.array(mf.tensor(k)) for k in mf.entries}

    return make
