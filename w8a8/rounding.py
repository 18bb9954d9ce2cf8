"""Rounding and casts with the semantics of the device, not of NumPy's defaults.

* :func:`round_half_even` / :func:`round_half_away` round floats to integral floats, exactly (no
  ``floor(x + 0.5)`` double-rounding trap: ``0.49999997f + 0.5`` is ``1.0`` in fp32).
* :func:`to_int` rounds and converts to an integer dtype, saturating (default) or wrapping.
* :func:`to_float` rounds an fp32 result to the output float dtype with round-to-nearest-even
  (``CAST_RINT``), always *from fp32*: ml_dtypes converts float64 to bf16 through float32, so a
  direct float64 -> bf16 cast rounds twice and can be wrong at ties.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as _dt


def round_half_even(x: np.ndarray) -> np.ndarray:
    """Round to the nearest integer, ties to even (``CAST_RINT``, ``np.rint``). Keeps the dtype."""
    return np.rint(x)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Round to the nearest integer, ties away from zero (``CAST_ROUND``). Keeps the dtype.

    Computed as ``trunc(x) + sign(x) * (|x - trunc(x)| >= 0.5)``, which is exact: the fractional
    part of a float is exactly representable.
    """
    whole = np.trunc(x)
    with np.errstate(invalid="ignore"):  # +-Inf: inf - inf is NaN, whose step is 0 (Inf stays Inf)
        frac = np.abs(x - whole)
        step = np.where(frac >= 0.5, np.sign(x), 0).astype(x.dtype)
    return np.copysign(whole + step, x)  # -0.4 -> -0.0 as C round() (-0.0 + 0.0 would be +0.0)


def round_to_integral(x: np.ndarray, mode: str) -> np.ndarray:
    """Round with a :class:`~w8a8.numerics.Numerics` ``round_mode`` name."""
    if mode == "half_even":
        return round_half_even(x)
    if mode == "half_away":
        return round_half_away(x)
    raise ValueError(f"round_to_integral: argument 'mode' must be 'half_even' or 'half_away'; got {mode!r}")


def to_int(x: np.ndarray, dtype, *, mode: str = "half_even", saturate: bool = True,
           lo: int | None = None, hi: int | None = None, nan_value: int = 0) -> np.ndarray:
    """Round a float array and convert it to integer ``dtype`` (``"int4"`` gives int8 codes in [-8, 7]).

    NaN becomes ``nan_value`` (written as given, even outside ``[lo, hi]``: an all-zero row of a
    dynamic quantizer under ``zero_row="int_min"`` writes -128 although its codes clamp to
    [-127, 127]). With ``saturate`` values beyond the range clamp to ``[lo, hi]`` (default: the
    dtype's range; +-Inf included; the clamp runs in float64 for 32/64-bit outputs, whose range
    float32 does not hold exactly); without it they wrap modulo 2^bits like a two's-complement
    truncation.
    """
    dmin, dmax = _dt.int_range(dtype)
    lo = dmin if lo is None else lo
    hi = dmax if hi is None else hi
    out_dtype = np.dtype(np.int8) if dtype == _dt.int4 else np.dtype(dtype)
    r = np.asarray(round_to_integral(np.asarray(x, dtype=np.float64) if np.asarray(x).dtype.kind == "V"
                                     else np.asarray(x), mode))  # a fresh array: updated in place below
    nan = np.isnan(r)
    has_nan = bool(nan.any())
    if saturate:
        if out_dtype.itemsize >= 4:  # 2^31 - 1 is not a float32: clamp where the bounds are exact
            r = r.astype(np.float64)
        np.clip(r, lo, hi, out=r)  # NaN stays NaN here and becomes nan_value below
        if has_nan:
            r[nan] = nan_value
        return r.astype(out_dtype)
    if has_nan:
        r = np.where(nan, nan_value, r)
    bits = 4 if dtype == _dt.int4 else out_dtype.itemsize * 8
    finite = np.isfinite(r)
    r = np.where(finite, r, 0)
    wrapped = np.mod(r.astype(np.float64), 2.0 ** bits)
    wrapped = np.where(wrapped >= 2.0 ** (bits - 1), wrapped - 2.0 ** bits, wrapped)
    return wrapped.astype(np.int64).astype(out_dtype)


def to_float(x32: np.ndarray, dtype) -> np.ndarray:
    """Round an fp32 array to ``dtype`` (bf16, fp16 or fp32) with round-to-nearest-even.

    fp16 overflow gives +-Inf (IEEE); bf16 covers the fp32 range. The input must already be fp32:
    this is the kernel's final ``CAST_RINT`` of an fp32 epilogue.

    NaN stays NaN, silently (the casts' "overflow" / "invalid value" warnings are deliberate IEEE
    results here, not errors). Its bits: bf16 gets ``sign | 0x7FC0`` (ml_dtypes writes the quiet NaN
    with the sign kept and the payload dropped: fp32 ``0x7FC00000``, ``0x7F800001`` -> ``0x7FC0``;
    ``0xFFC00000`` -> ``0xFFC0``); fp16 keeps the sign and the top 10 payload bits (NumPy's IEEE
    conversion: ``0x7FC00000`` -> ``0x7E00``; a payload whose top bits are 0 becomes 1, ``0x7F800001``
    -> ``0x7C01``, so it stays a NaN). Devices write their own NaN patterns: compare NaN as NaN.
    """
    x32 = np.asarray(x32)
    if x32.dtype != np.float32:
        raise TypeError(f"to_float: argument 'x32' must be float32 (round from the fp32 result); got {x32.dtype}")
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return x32
    with np.errstate(over="ignore", invalid="ignore"):
        return x32.astype(dtype)


def f32(x) -> np.ndarray:
    """Exact widening of bf16/fp16/fp32 (or integer) data to float32 arrays."""
    return np.asarray(x).astype(np.float32)
