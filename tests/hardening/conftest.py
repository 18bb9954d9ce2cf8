"""Helpers of the fault-injection tests: the process tree of a run, read from /proc (Linux)."""

import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest


class ProcessTree:
    """What a test needs to check that no process of a killed run is left."""

    available = Path("/proc/self/stat").exists()

    @staticmethod
    def stat(pid: int) -> list[str] | None:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        return text.rsplit(")", 1)[1].split()  # [state, ppid, ...]

    @classmethod
    def descendants(cls, root: int) -> set[int]:
        children = defaultdict(list)
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (st := cls.stat(int(entry))):
                children[int(st[1])].append(int(entry))
        found, todo = set(), [root]
        while todo:
            for child in children[todo.pop()]:
                found.add(child)
                todo.append(child)
        return found

    @classmethod
    def alive(cls, pid: int) -> bool:
        st = cls.stat(pid)
        return st is not None and st[0] not in ("Z", "X")  # a zombie waiting for init to reap it is dead

    @classmethod
    def left_after(cls, pids: set[int], seconds: float) -> list[int]:
        """The ``pids`` still alive once they are all gone or ``seconds`` have passed (polled); any left are
        then killed, so that a failing check leaves no orphan running."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(cls.alive(p) for p in pids):
            time.sleep(0.1)
        left = [p for p in pids if cls.alive(p)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        return left

    @staticmethod
    def wait_for(predicate, seconds: float, what: str):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"gave up waiting for {what}")


@pytest.fixture
def procs():
    if not ProcessTree.available:
        pytest.skip("reads the process tree from /proc")
    return ProcessTree
