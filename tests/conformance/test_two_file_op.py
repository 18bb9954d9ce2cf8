"""An op is two files: its golden module and its declaration (docs/adding-an-op.md).

Pinned with a real op, ``quant_scatter`` (``w8a8/quant_scatter.py`` + ``conformance/ops/dense/quant_scatter.py``),
which no backend implements: no other source file names it, and in a copy of the project made *without* those
two files and then given them, the suites that list ops stay green and ``w8a8 conformance --op quant_scatter``
exits 0, judges the golden's named cases and says which backends do not implement it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OP = "quant_scatter"
OP_FILES = ("w8a8/quant_scatter.py", "conformance/ops/dense/quant_scatter.py")


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the project's files cannot be listed")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def test_no_source_file_but_the_ops_two_names_it():
    here = str(Path(__file__).relative_to(ROOT))
    naming = [p for p in _tracked() if p.endswith(".py") and p not in OP_FILES and p != here
              and OP in (ROOT / p).read_text(encoding="utf-8", errors="replace")]
    assert naming == [], f"files other than the op's two re-list {OP}: {naming}"


def _run(cmd: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_adding_the_two_files_to_a_copy_of_the_project_is_all_it_takes(tmp_path):
    copy = tmp_path / "project"
    for rel in _tracked():
        if rel in OP_FILES:
            continue                      # the project as it was before the op
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, copy / rel)
    for rel in OP_FILES:                  # ... and the op's two files, nothing else
        shutil.copy2(ROOT / rel, copy / rel)
    probe = _run([sys.executable, "-c", "import w8a8, conformance; print(w8a8.__file__, conformance.__file__)"], copy)
    assert probe.stdout.split() == [str(copy / "w8a8/__init__.py"), str(copy / "conformance/__init__.py")], probe

    suites = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                   "tests/golden/test_registry.py", "tests/conformance/test_declarations.py",
                   "tests/backends/test_torch_cpu_conformance.py", "-k", f"not test_torch_cpu_conformance or {OP}"],
                  copy)
    assert suites.returncode == 0, suites.stdout[-3000:] + suites.stderr[-2000:]
    assert " passed" in suites.stdout and "failed" not in suites.stdout

    run = _run([sys.executable, "-m", "w8a8cli.main", "conformance", "--op", OP,
                "--profile", "dev", "--workers", "0", "--out", str(tmp_path / "run")], copy)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-3000:]
    assert f"torch-cpu does not implement {OP}: reported, not run" in said
    assert f"implemented by no backend tested: {OP}" in said
    import json

    records = [json.loads(line) for line in (tmp_path / "run/results.jsonl").read_text().splitlines() if line]
    named = [r for r in records if r["kind"] == "named"]
    assert named and all(r["backend"] == "numpy" and r["status"] == "pass" for r in named)
    assert {r["name"] for r in named} == {f"{OP}/bf16_divide_zero_point_round_half_even",
                                          f"{OP}/fp16_two_d_indices_pick_row_and_start", f"{OP}/axis_1_of_a_4d_input"}
