"""torch dtype strings as msprobe records them (``"torch.bfloat16"``) -> NumPy / ml_dtypes dtypes and the
golden's dtype names. No torch import."""

from __future__ import annotations

import numpy as np

from .pt_reader import TORCH_DTYPES


def numpy_dtype(torch_dtype: str) -> np.dtype | None:
    """``"torch.int8"`` -> ``np.dtype(int8)``; None for dtypes without a NumPy equivalent (fp4, HiFloat8, ...)."""
    name = str(torch_dtype).replace("torch.", "")
    return TORCH_DTYPES.get(name)


def golden_name(torch_dtype: str) -> str | None:
    """``"torch.bfloat16"`` -> ``"bfloat16"`` (the golden's dtype name), None if unknown."""
    dt = numpy_dtype(torch_dtype)
    if dt is None:
        return None
    from w8a8 import dtypes as _dt

    return _dt.name(dt)
