"""Fixtures of the model-run tests: the tiny checkpoints msModelSlim 26.1.0 wrote (``data/``, made by
``make_checkpoints.py``) and their float models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
FLOAT = DATA / "float"
QUANT = DATA / "msmodelslim"

CHECKPOINTS = {  # checkpoint -> (float model it was made from, model dtype)
    "qwen2-w8a8-dynamic": ("qwen2-bf16", "bfloat16"),
    "qwen2-w8a8-bf16": ("qwen2-bf16", "bfloat16"),
    "qwen2-w8a8-fp16": ("qwen2-fp16", "float16"),
    "dsv3-mix": ("dsv3-bf16", "bfloat16"),
}


class Data:
    """Where the fixtures lie (the ``data`` fixture)."""

    root = DATA
    float = FLOAT
    quant = QUANT
    checkpoints = CHECKPOINTS

    @staticmethod
    def calib_ranges() -> dict:
        return json.loads((DATA / "calib_ranges.json").read_text())


@pytest.fixture(scope="session")
def data() -> type[Data]:
    return Data


@pytest.fixture
def crafted(tmp_path):
    """``crafted(name)``: a copy of the msModelSlim checkpoint ``name`` in tmp, to alter."""

    def make(name: str) -> Path:
        out = tmp_path / name
        shutil.copytree(QUANT / name, out)
        return out

    return make
