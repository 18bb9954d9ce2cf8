"""Every command and code block of README.md and docs/*.md runs as written (tools/docblocks.py says how a
block is run and which are not: each of those says why).

Shell commands run with this interpreter's ``w8a8`` and ``python``, in one scratch folder per page, in page
order; a command passes when it exits 0 or 1 (1: the run found disagreements, which several examples
show on purpose) without a traceback, and a ``$ CMD`` line's promised output lines all appear in what it
printed. A python block passes when it runs and prints the lines its trailing ``# `` comments promise.
Blocks marked ``slow`` are marked slow here; ``long`` ones run only with W8A8_DOCS_LONG=1.

README's commands run on an 80-column pseudo-terminal, as a person sees them; every repro line they print
(the line after a ``repro:`` label) is then pasted back as it was printed and must run too (exit 0 or 1,
no traceback, no usage error).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import shlex

from .conftest import ROOT, command_env, printed_repro_lines, run_in_pty, scratch

_DIRS: dict = {}
_PASTED: list = []   # (README command, the repro line it printed), for the summary test below


def _folder(tmp_path_factory, page: str):
    if page not in _DIRS:
        _DIRS[page] = scratch(tmp_path_factory, page.replace("/", "_").replace(".", "_"))
    return _DIRS[page]


def _promised(block_text: str) -> list[str]:
    """The output a python block's trailing ``# `` comments promise (each up to a ``...``)."""
    lines = block_text.rstrip().splitlines()
    out = []
    while lines and lines[-1].startswith("#"):
        out.insert(0, lines.pop()[1:].strip())
    return [ln.split("...")[0].strip() for ln in out if ln.split("...")[0].strip()]


def _run(cmd: list[str] | str, cwd, shell=False) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, shell=shell, executable="/bin/bash" if shell else None, env=command_env(),
                          capture_output=True, text=True, timeout=900)


def test_doc_block_runs(doc_block, tmp_path_factory):
    cwd = _folder(tmp_path_factory, doc_block.page)
    where = f"{doc_block.page} line {doc_block.line}"
    if doc_block.kind == "python":
        script = cwd / f"block_{doc_block.line}.py"
        script.write_text(doc_block.text + "\n")
        proc = _run([sys.executable, str(script)], cwd)
        assert proc.returncode == 0, f"{where}: the python block failed:\n{proc.stderr[-3000:]}"
        for line in _promised(doc_block.text):
            assert line in proc.stdout, f"{where}: promised output {line!r} not printed:\n{proc.stdout[-2000:]}"
        return
    for command, expected in doc_block.commands:
        if doc_block.page == "README.md":
            rc, printed = run_in_pty(command, cwd)
            proc = subprocess.CompletedProcess(command, rc, printed, "")
            for line in printed_repro_lines(printed):
                _paste_back(where, command, line, cwd)
        else:
            proc = _run(command, cwd, shell=True)
        printed = proc.stdout + proc.stderr
        assert "Traceback (most recent call last)" not in printed, f"{where}: {command}\n{printed[-3000:]}"
        if expected:
            lines = {ln.strip() for ln in printed.splitlines()}
            for want in expected:
                assert want.strip() in lines, (f"{where}: {command}\nthe page promises {want!r}; it printed:\n"
                                               f"{printed[-2000:]}")
        else:
            assert proc.returncode in (0, 1), f"{where}: {command} exited {proc.returncode}:\n{printed[-3000:]}"


def _paste_back(where: str, command: str, line: str, cwd) -> None:
    shlex.split(line)   # a hard-wrapped line would leave a quote open: ValueError
    proc = _run(line, cwd, shell=True)
    printed = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1) and "Traceback (most recent call last)" not in printed, (
        f"{where}: {command} printed the repro line\n{line}\nwhich, pasted back, exited {proc.returncode}:\n"
        f"{printed[-3000:]}")
    _PASTED.append((command, line))


def test_readme_repro_lines_were_pasted_back():
    """After README's blocks ran (above): its conformance and replay examples printed repro lines at 80
    columns, and each ran when pasted back."""
    if not any(c.startswith("w8a8 conformance --backend conformance.planted") for c, _ in _PASTED):
        pytest.skip("README's blocks were not run in this session (-k / -m selected others)")
    commands = {c.split()[1] for c, _ in _PASTED}
    assert {"conformance", "replay"} <= commands, _PASTED


def test_every_block_not_run_says_why(docblocks):
    for page in docblocks.pages():
        for b in docblocks.blocks(page):
            if b.mode == "skip":
                assert b.reason.strip(), f"{b.id}: a block marked skip must say why"


def test_ci_runs_the_readme_test_command(docblocks):
    quick = next(b for b in docblocks.blocks("README.md") if "python -m pytest" in b.text)
    line = next(c for c, _ in quick.commands if "python -m pytest" in c)
    assert line in (ROOT / ".ci" / "run").read_text(), f".ci/run must run the README's test command {line!r}"
    assert len(quick.commands) == 2, "the quick start is two command lines"
