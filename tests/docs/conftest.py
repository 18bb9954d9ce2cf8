"""Load the repository's tools/ modules (not an installed package) for the documentation tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tool(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


import os
import shutil

import pytest

LONG = os.environ.get("W8A8_DOCS_LONG") == "1"


@pytest.fixture(scope="session")
def docblocks():
    return tool("docblocks")


@pytest.fixture(scope="session")
def gen_docs():
    return tool("gen_docs")


def scratch(tmp_path_factory, name: str) -> Path:
    """A scratch folder for one page's blocks, with the repository's tests/ and examples/ linked in."""
    d = tmp_path_factory.mktemp(name)
    for sub in ("tests", "examples"):
        (d / sub).symlink_to(ROOT / sub)
    return d


def command_env() -> dict:
    """The environment the documented commands run in: this interpreter's bin folder first on PATH (its
    ``w8a8``, ``python``, ``pytest``), a fixed terminal width unset."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("COLUMNS", None)
    return env


def has_w8a8_script() -> bool:
    return shutil.which("w8a8", path=str(Path(sys.executable).parent)) is not None


def runnable_blocks() -> list:
    """The code blocks the test run executes: python and shell blocks not marked ``skip`` (``long`` ones
    only with W8A8_DOCS_LONG=1), each with its marks."""
    db = tool("docblocks")
    params = []
    for page in db.pages():
        for b in db.blocks(page):
            if b.kind == "text" or b.mode == "skip" or (b.mode == "long" and not LONG):
                continue
            marks = [pytest.mark.slow] if b.mode in ("slow", "long") else []
            params.append(pytest.param(b, id=b.id, marks=marks))
    return params


def pytest_generate_tests(metafunc):
    if "doc_block" in metafunc.fixturenames:
        metafunc.parametrize("doc_block", runnable_blocks())


def run_in_pty(command: str, cwd, columns: int = 80, timeout: float = 900) -> tuple[int, str]:
    """Run ``command`` (bash) with stdout and stderr on a pseudo-terminal ``columns`` wide, as a person at
    an 80-column terminal sees it; return (exit status, the text printed, escape sequences removed)."""
    import fcntl
    import pty
    import re
    import select
    import struct
    import subprocess
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = command_env()
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(["/bin/bash", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while True:
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(command)
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:   # EIO: the child side closed
                data = b""
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None and not select.select([master], [], [], 0.2)[0]:
            break
    os.close(master)
    rc = proc.wait()
    text = b"".join(chunks).decode("utf-8", "replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]", "", text)
    lines = [ln.split("\r")[-1] if ln.replace("\r", "") else "" for ln in text.replace("\r\n", "\n").split("\n")]
    return rc, "\n".join(lines)


def printed_repro_lines(text: str) -> list[str]:
    """The commands a run printed for pasting back: the line after each ``repro:`` label."""
    lines = text.splitlines()
    return [lines[i + 1].strip() for i, ln in enumerate(lines[:-1]) if ln.strip() == "repro:" and lines[i + 1].strip()]
