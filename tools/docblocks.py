"""The code blocks of README.md and docs/*.md, as the documentation tests run them.

A fenced block is **python** (```` ```python ````), **shell** (a block any of whose lines starts with a
command: ``w8a8``, ``python``, ``pip``, ``pytest``, ``source``...; ``$ CMD`` lines are commands whose
following lines, up to the next ``$``, are the output the page promises) or **text** (layout
sketches, sample output: nothing to run). An HTML comment on the line before the fence says how a
block is run:

    <!-- docs-test: skip (REASON) -->   never run here: REASON says why (a device, a placeholder path)
    <!-- docs-test: long -->            run only with W8A8_DOCS_LONG=1 (minutes)
    <!-- docs-test: slow -->            run in the test suite, marked slow

Unannotated blocks are run by the default test run. Blocks of one page run in order in one scratch
folder (a later block may read what an earlier one wrote); ``tests`` and ``examples`` are linked
into it so that the repository's relative paths hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND_WORDS = {"w8a8", "python", "python3", "python3.11", "pip", "pytest", "pytest-benchmark", "source",
                 "npu-smi"}


def _is_command(line: str) -> bool:
    words = line.split()
    return bool(words) and (words[0] in COMMAND_WORDS or re.fullmatch(r"[A-Z][A-Z0-9_]*=\S*", words[0]) is not None)
ANNOTATION = re.compile(r"<!--\s*docs-test:\s*(skip|long|slow)\s*(?:\((.*?)\))?\s*-->")


@dataclass
class DocBlock:
    page: str
    line: int          # 1-based line of the opening fence
    lang: str
    text: str
    mode: str = "run"  # run | slow | long | skip
    reason: str = ""
    commands: list = field(default_factory=list)   # shell: [(command, [expected output lines])]

    @property
    def kind(self) -> str:
        if self.lang == "python":
            return "python"
        return "shell" if self.commands else "text"

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _commands(text: str) -> list[tuple[str, list[str]]]:
    """The commands of a shell block (continuation lines joined, trailing ``# comments`` dropped)."""
    out: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    dollar = any(ln.startswith("$ ") for ln in lines)
    i = 0
    while i < len(lines):
        ln = lines[i]
        i += 1
        if dollar:
            if not ln.startswith("$ "):
                if out and ln.strip():
                    out[-1][1].append(ln.rstrip())
                continue
            ln = ln[2:]
        elif not _is_command(ln):
            continue
        while ln.rstrip().endswith("\\") and i < len(lines):
            ln = ln.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
        out.append((_strip_comment(ln).strip(), []))
    return out


def _strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` outside quotes."""
    quote = None
    for j, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (j == 0 or line[j - 1].isspace()):
            return line[:j]
    return line


def blocks(page: str, root: Path = ROOT) -> list[DocBlock]:
    lines = (root / page).read_text().splitlines()
    found: list[DocBlock] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        text = "\n".join(lines[i + 1:j])
        b = DocBlock(page, start + 1, lang, text)
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        ann = ANNOTATION.search(lines[k]) if k >= 0 else None
        if ann:
            b.mode, b.reason = ann.group(1), (ann.group(2) or "")
        if lang != "python":
            b.commands = _commands(text)
        found.append(b)
        i = j + 1
    return found


def pages(root: Path = ROOT) -> list[str]:
    return ["README.md", *sorted(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))]
