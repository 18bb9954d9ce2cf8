"""Fixtures of the replay tests: the bundled samples and the dumps made with msprobe (samples/README.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

_S = Path(__file__).resolve().parent / "samples"
PATHS = SimpleNamespace(
    root=_S, tensor=_S / "constructed-w8a8-tensor-L1", md5=_S / "constructed-w8a8-statistics-md5-L1",
    mix=_S / "msprobe-repo-pytorch-statistics-mix", pt_variants=_S / "pt-variants", made=_S / "made",
    planted=_S / "made" / "planted-tensor-mix", planted_md5=_S / "made" / "planted-statistics-md5-mix",
    raised=_S / "made" / "raised-mid-step", checkpoint=_S / "made" / "checkpoint")


@pytest.fixture
def samples():
    """Paths of the sample dumps (see samples/README.md)."""
    return PATHS


@pytest.fixture
def copy_sample(tmp_path):
    """A writable copy of a sample dump folder (tests never write inside the committed samples)."""

    def copy(src: Path) -> Path:
        dst = tmp_path / f"copy-{src.name}"
        shutil.copytree(src, dst)
        for p in dst.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        return dst

    return copy


@pytest.fixture
def run_replay(tmp_path):
    """Run the replay in-process: ``run_replay(path, **Options)`` -> ({entry name: record}, records)."""
    from replay.engine import ResultsFile
    from replay.runner import Options, replay_dump

    def run(path, **options):
        out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}"
        results = ResultsFile(out / "results.jsonl")
        options.setdefault("case_dir", out / "cases")
        replay_dump(path, Options(**options), results)
        records = results.records()
        return {r["name"]: r for r in records if r.get("kind") == "replay"}, records

    return run
