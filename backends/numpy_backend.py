"""``numpy``: the golden itself as a backend.

It implements every registered op, with any :class:`w8a8.Numerics` record: a caller may pass
``numerics=`` to run the golden under another record (the attribution engine does). Without one it
runs :data:`w8a8.ASCEND`, or the record given to the constructor.

The golden function checks its own arguments, so this backend skips the check step of
:meth:`backends.base.Backend.prepare` (running it would check every call twice): the call itself
is what the implementation gets.
"""

from __future__ import annotations

from w8a8 import registry
from w8a8.numerics import ASCEND, Numerics

from .base import Backend, implements


class GoldenCall:
    """A call of a golden function, arguments bound (what :meth:`NumpyBackend._run_golden` runs)."""

    __slots__ = ("fn", "args", "kwargs")

    def __init__(self, fn, args: tuple, kwargs: dict):
        self.fn, self.args, self.kwargs = fn, args, kwargs

    def __call__(self):
        return self.fn(*self.args, **self.kwargs)


class NumpyBackend(Backend):
    name = "numpy"
    description = "the golden: pure NumPy + ml_dtypes, exact where the device is exact"
    device = "cpu"
    compute = "fp32"  # exact integer GEMMs through float32 BLAS (w8a8.intgemm)

    def __init__(self, numerics: Numerics = ASCEND, name: str | None = None):
        self.numerics = numerics
        if name is not None:
            self.name = name

    def accepts_numerics(self, numerics: Numerics) -> bool:
        return True

    def checked_args(self, golden: registry.GoldenOp, args: tuple, kwargs: dict, numerics: Numerics) -> GoldenCall:
        """The call itself: the golden op checks its arguments when it runs. ``numerics`` is this call's
        record where the op takes one (ops without a choice point — layout, packing, exact GEMM — take none)."""
        if golden.takes_numerics:
            kwargs = {**kwargs, "numerics": numerics}
        return GoldenCall(golden.fn, args, kwargs)

    @implements(*registry.names())
    def _run_golden(self, call: GoldenCall):
        return call()
