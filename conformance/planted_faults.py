"""Backends that misbehave as processes, not as arithmetic: the fault-injection suite's subjects.

Each is the planted ``dynamic_quant`` of :mod:`conformance.planted` (correct arithmetic) with one fault
on every call:

* ``HangAlwaysBackend`` (``planted-hang-always``) — never returns (sleeps an hour);
* ``SegfaultAlwaysBackend`` (``planted-segfault-always``) — dies with SIGSEGV;
* ``LeakingBackend`` (``planted-leak``) — keeps :data:`LEAK_MB` MiB of touched memory per call;
* ``NanAcceptingBackend`` (``planted-nan-accept``) — computes through NaN/Inf inputs that the golden
  refuses under ``nan_policy="raise"`` (its argument check runs under ``"ieee"``): a kernel whose
  behaviour on such inputs nobody specified.

With ``W8A8_PLANTED_MARK`` set to a folder, the hanging and the leaking backend write a file
``<kind>-<pid>`` there when a call starts, so a test knows the call is under way.

Use one as ``w8a8 conformance --backend conformance.planted_faults:HangAlwaysBackend``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .planted import _PlantedBase

LEAK_MB = 300
_KEPT: list[np.ndarray] = []


def _mark(kind: str) -> None:
    folder = os.environ.get("W8A8_PLANTED_MARK")
    if folder:
        Path(folder, f"{kind}-{os.getpid()}").write_text(str(os.getpid()))


class HangAlwaysBackend(_PlantedBase):
    """Never returns from dynamic_quant."""

    name = "planted-hang-always"
    bug = "hangs on every call"

    def _dynamic_quant(self, a):
        import time

        _mark("hang")
        time.sleep(3600)
        return super()._dynamic_quant(a)


class SegfaultAlwaysBackend(_PlantedBase):
    """Dies with SIGSEGV in every dynamic_quant call."""

    name = "planted-segfault-always"
    bug = "segfaults on every call"

    def _dynamic_quant(self, a):
        import ctypes

        ctypes.string_at(0)  # a real segmentation fault
        return super()._dynamic_quant(a)  # pragma: no cover


class LeakingBackend(_PlantedBase):
    """A correct dynamic_quant that keeps :data:`LEAK_MB` MiB (written, so resident) per call."""

    name = "planted-leak"
    bug = f"keeps {LEAK_MB} MiB per call"

    def _dynamic_quant(self, a):
        _mark("leak")
        _KEPT.append(np.ones(LEAK_MB * 2**20, dtype=np.uint8))
        return super()._dynamic_quant(a)


class NanAcceptingBackend(_PlantedBase):
    """Takes NaN/Inf inputs the golden refuses: its argument check runs under ``nan_policy="ieee"``."""

    name = "planted-nan-accept"
    bug = "computes through NaN/Inf inputs"

    def checked_args(self, golden, args, kwargs, numerics):
        return super().checked_args(golden, args, kwargs, numerics.replace(nan_policy="ieee"))
