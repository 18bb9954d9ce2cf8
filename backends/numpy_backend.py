"""``numpy``: the golden itself as a backend.

It implements every op whose golden has landed, with any :class:`w8a8.Numerics` record: a caller may
pass ``numerics=`` to run the golden under another record (the attribution engine does). Without
one it runs :data:`w8a8.ASCEND`, or the record given to the constructor.
"""

from __future__ import annotations

import inspect

from w8a8.numerics import ASCEND, Numerics

from .base import Backend
from .ops import OPS, golden_function


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

    def ops(self) -> tuple[str, ...]:
        return tuple(op for op in OPS if self._golden(op) is not None)

    def _golden(self, op: str):
        try:
            return golden_function(op)
        except (ImportError, AttributeError):
            return None

    def __getattr__(self, attr: str):
        # "_<op>": the golden function, given this backend's numerics where the op takes them.
        if attr.startswith("_") and attr[1:] in OPS:
            fn = self._golden(attr[1:])
            if fn is None:
                raise AttributeError(attr)
            takes_numerics = "numerics" in inspect.signature(fn).parameters

            def impl(*args, **kwargs):
                if takes_numerics:
                    kwargs.setdefault("numerics", self.numerics)
                else:  # ops without a choice point (layout, packing, exact GEMM) take no numerics
                    kwargs.pop("numerics", None)
                return fn(*args, **kwargs)

            return impl
        raise AttributeError(attr)
