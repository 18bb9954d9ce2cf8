"""w8a8 — the golden: pure NumPy (+ ml_dtypes) implementations of the torch_npu W8A8 op surface.

Same op names without the ``npu_`` prefix, same arguments and defaults, same shapes, dtypes and
semantics, on NumPy arrays. bf16 is :data:`ml_dtypes.bfloat16`; dtype arguments take NumPy dtypes or
names (``"bfloat16"``, ``"int8"``). Every arithmetic choice on which backends differ is a field of
:class:`Numerics`, whose defaults are the Ascend A2/A3 kernels; each op computes the kernel variant
the host tiling picks for the call (:mod:`w8a8.variants`, the chip: :mod:`w8a8.platforms`).

Every op is registered where it is defined (:func:`w8a8.registry.golden_op`); :mod:`w8a8.registry`
lists them. Importing this package imports every module of it (the dense ops at the top, the
:mod:`w8a8.moe` and :mod:`w8a8.lowbit` families), which is what registers them, and exports what
each module lists in its ``__all__``: a new module needs no edit here.

This package imports NumPy and ml_dtypes only (no torch, nothing else of the project).
"""

from importlib.metadata import PackageNotFoundError, version as _version

from . import registry
from .dtypes import bfloat16

globals().update(_exports := registry.exports(registry.import_modules(__name__, __path__)))

try:
    __version__ = _version("w8a8")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"

__all__ = ["bfloat16", *_exports]
