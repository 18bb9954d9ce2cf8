"""Argument checks shared by the low-bit modules (on top of :mod:`w8a8._check`)."""

from __future__ import annotations

import numpy as np

from .. import _check
from .. import dtypes as _dt

FLOAT_INPUTS = (_dt.float32, _dt.float16, _dt.bfloat16)
"""The float dtypes a low-bit quantizer reads (widened exactly to fp32)."""


def float_output(op: str, output_dtype) -> np.dtype:
    """Resolve ``output_dtype`` to float32 / bfloat16 / float16; TypeError naming it otherwise."""
    out = _dt.resolve(output_dtype, arg="output_dtype", op=op)
    if out not in _dt.FLOAT_OUTPUTS:
        _check.fail(op, "output_dtype", "float32, bfloat16 or float16", repr(output_dtype), TypeError)
    return out


def value_range(op: str, arg: str, value: np.ndarray, lo: int, hi: int) -> None:
    """ValueError naming ``arg`` unless every element of the integer array is in ``[lo, hi]``."""
    if value.size and (int(value.min()) < lo or int(value.max()) > hi):
        _check.fail(op, arg, f"values in [{lo}, {hi}]", f"values in [{int(value.min())}, {int(value.max())}]")
