"""The repository stands alone: no tracked file points at design notes that are not in it.

The code, tests and docs cite primary sources (kernel, adapter and serving-engine files with their
commits) or the pages under ``docs/``. A pointer into notes outside the repository — a path to a
note of the ``spec`` folder, a section sign after the word ``spec``, the old design document's file
name, the shared folder those notes lived in — is a reference a reader cannot follow. This test
fails on any such line in a tracked ``.py`` / ``.md`` / ``.toml`` file, naming the file and line.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".py", ".md", ".toml")

# Written so that this file does not match itself.
POINTER = re.compile("|".join((
    r"\bspec/[A-Za-z0-9_-]+\.md",          # a note of the spec folder
    r"\bspec[ ]\u00a7",                     # "spec" + section sign
    r"\bDESIGN\.md",                        # the design document
    r"/work/sha[r]ed",                      # the folder outside the repository
)))

PLANTED = {
    "see spec/" + "serving-paths.md for the rule": True,
    "the A3 rules of spec " + "\u00a71.3": True,
    "as in " + "DESIGN" + ".md": True,
    "copied from /work/" + "shared/spec/samples/": True,
    "the ``--backend`` spec of a report": False,
    "section \u00a73 of docs/tolerances.md": False,
    "importlib.util.spec_from_file_location": False,
}


def tracked_files() -> list[Path]:
    """Every tracked file with a checked suffix (``git ls-files``; without git, the working tree)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *(f"*{s}" for s in SUFFIXES)], cwd=ROOT,
                             capture_output=True, check=True, timeout=60).stdout.decode()
        files = [ROOT / p for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        skip = {".git", ".venv", "build", "dist", "node_modules"}
        files = [p for p in ROOT.rglob("*") if p.suffix in SUFFIXES and not skip & set(p.relative_to(ROOT).parts)]
    return [p for p in files if p.is_file()]


def pointers(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of every line of ``text`` that points outside the repository."""
    return [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1) if POINTER.search(line)]


@pytest.mark.parametrize("line, is_pointer", PLANTED.items())
def test_the_pattern_tells_pointers_from_ordinary_words(line, is_pointer):
    assert bool(pointers(line)) is is_pointer


def test_no_tracked_file_points_outside_the_repository():
    files = tracked_files()
    assert len(files) > 100, f"expected the repository's files, found {len(files)} under {ROOT}"
    found = [f"{p.relative_to(ROOT)}:{i}: {line[:120]}"
             for p in files for i, line in pointers(p.read_text(encoding="utf-8", errors="replace"))]
    assert not found, ("pointers to notes outside the repository (cite the primary source or a docs/ page):\n"
                       + "\n".join(found))
