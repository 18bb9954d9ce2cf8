"""The ``Backend`` interface.

A backend is an implementation of (some of) the golden's ops. Its public op methods have the
golden's names and arguments and take and return NumPy arrays; conversion to and from the device
happens at the boundary. Internally every op is split in three so that benchmarks can time the
device work alone:

1. ``to_device`` for every array argument (host -> device transfer, dtype conversion);
2. ``load(op, args, kwargs)``: load-time work a serving stack does once per weight (transposes,
   NZ casts, weight prepacking) — not part of the timed op;
3. ``_<op>(*device_args, **kwargs)``: the device work; ``synchronize()`` after it;
4. ``from_device`` for every array in the result.

:meth:`Backend.prepare` performs 1 and 2 and returns a :class:`Prepared` whose ``run()`` is 3 and
whose ``finish()`` is 4. :meth:`Backend.call` (what the op methods use) is all four.

A subclass declares ``name``, ``numerics`` (the :class:`w8a8.Numerics` it implements: the golden run
with that record must reproduce it bit for bit), implements ``available()`` and the ``_<op>``
methods it supports, and optionally ``to_device`` / ``from_device`` / ``load`` / ``synchronize`` /
``supports``. It raises :class:`Unsupported` for a call it cannot make (an op, a dtype
combination, another numerics record).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from w8a8.numerics import ASCEND, Numerics

from .ops import OPS, golden_function


class Unsupported(Exception):
    """The backend cannot run this call (op, dtype combination, numerics): a skip, not a failure."""


@dataclass
class Prepared:
    """A backend call split at the device boundary (see the module docstring)."""

    op: str
    backend: str
    run: Callable[[], Any]
    finish: Callable[[Any], Any]
    transfer_in_s: float = 0.0
    load_s: float = 0.0
    notes: dict = field(default_factory=dict)

    def __call__(self):
        return self.finish(self.run())


class Backend:
    """Base class of every backend. See the module docstring for the contract."""

    name: str = "?"
    description: str = ""
    device: str = "cpu"
    numerics: Numerics = ASCEND
    compute: str = "int8"  # what its GEMMs run on: "int8" (int8 units) or "fp32" (float BLAS); bench's peak

    # -- identity -----------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """``(True, "")`` or ``(False, precise reason)``."""
        return True, ""

    def ops(self) -> tuple[str, ...]:
        """The ops this backend implements (those of :data:`backends.ops.OPS` with an ``_<op>`` method)."""
        return tuple(op for op in OPS if callable(getattr(self, "_" + op, None)))

    def supports(self, op: str, **dtypes) -> bool:
        """Whether the backend can run ``op`` with these dtype choices (e.g. ``output_dtype="float16"``).

        The default answers for the op only; backends with partial dtype coverage override it.
        """
        return op in self.ops()

    def info(self) -> dict:
        ok, reason = self.available()
        return {"name": self.name, "available": ok, "reason": reason, "device": self.device,
                "description": self.description, "numerics": self.numerics.as_dict(),
                "numerics_differences": {k: list(v) for k, v in ASCEND.differences(self.numerics).items()},
                "ops": list(self.ops())}

    # -- the boundary -------------------------------------------------------------------------
    def to_device(self, array: np.ndarray):
        return array

    def from_device(self, value) -> np.ndarray:
        return value

    def load(self, op: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Load-time preparation of device arguments (untimed). Default: none."""
        return args, kwargs

    def synchronize(self) -> None:
        """Wait for the device (no-op on synchronous backends)."""

    # -- calls ----------------------------------------------------------------------------------
    def prepare(self, op: str, /, *args, **kwargs) -> Prepared:
        """Convert and load the arguments of ``op``; return the device work and the way back."""
        impl = getattr(self, "_" + op, None)
        if op not in OPS or impl is None:
            raise Unsupported(f"backend '{self.name}' does not implement op '{op}'")
        numerics = kwargs.pop("numerics", None)
        if numerics is not None and numerics != self.numerics and not self.accepts_numerics(numerics):
            raise Unsupported(f"backend '{self.name}' implements numerics '{self.numerics.name}' only; "
                              f"got {numerics.differences(self.numerics) or numerics.name}")
        if numerics is not None and self.accepts_numerics(numerics):
            kwargs["numerics"] = numerics
        t0 = time.perf_counter()
        dargs = tuple(self._convert(a, self.to_device) for a in args)
        dkw = {k: self._convert(v, self.to_device) for k, v in kwargs.items()}
        t1 = time.perf_counter()
        dargs, dkw = self.load(op, dargs, dkw)
        t2 = time.perf_counter()

        def run():
            out = impl(*dargs, **dkw)
            self.synchronize()
            return out

        return Prepared(op=op, backend=self.name, run=run,
                        finish=lambda out: self._convert(out, self.from_device, inbound=False),
                        transfer_in_s=t1 - t0, load_s=t2 - t1)

    def call(self, op: str, /, *args, **kwargs):
        return self.prepare(op, *args, **kwargs)()

    def accepts_numerics(self, numerics: Numerics) -> bool:
        """Whether a caller may ask for another numerics record (the golden backend can; devices can't)."""
        return False

    def _convert(self, value, fn, inbound: bool = True):
        if isinstance(value, np.ndarray) if inbound else self._is_device_array(value):
            return fn(value)
        if isinstance(value, tuple):
            return tuple(self._convert(v, fn, inbound) for v in value)
        if isinstance(value, list):
            return [self._convert(v, fn, inbound) for v in value]
        if isinstance(value, dict):
            return {k: self._convert(v, fn, inbound) for k, v in value.items()}
        return value

    def _is_device_array(self, value) -> bool:
        """Whether ``value`` is an array of this backend (converted back by ``from_device``)."""
        return isinstance(value, np.ndarray)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} '{self.name}'>"


def _op_method(op: str):
    def method(self, *args, **kwargs):
        return self.call(op, *args, **kwargs)

    method.__name__ = op
    method.__qualname__ = f"Backend.{op}"
    method.__doc__ = f"``{op}`` on this backend: NumPy arrays in and out, the golden's arguments."
    try:
        golden = golden_function(op)
    except (ImportError, AttributeError):  # an op whose golden has not landed yet
        return method
    method.__doc__ = (f"``{op}`` on this backend: NumPy arrays in and out. Same arguments as the golden "
                      f":func:`{golden.__module__}.{golden.__name__}`.")
    params = list(inspect.signature(golden).parameters.values())
    method.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + params)
    return method


for _op in OPS:
    setattr(Backend, _op, _op_method(_op))
