"""Dtypes of the golden: names, resolution, integer ranges.

bf16 is :data:`ml_dtypes.bfloat16`. Every dtype argument of a golden op takes a NumPy dtype (or scalar
type) or one of the names below, so ``output_dtype="bfloat16"``, ``output_dtype="bf16"`` and
``output_dtype=ml_dtypes.bfloat16`` mean the same thing. torch-style names (``"qint8"``,
``"quint4x2"``) are accepted where the torch_npu op takes them.

``"int4"`` is not a NumPy dtype: ops that produce int4 pack eight 4-bit codes into one int32 word,
least significant nibble first (see :mod:`w8a8.int4`). :func:`resolve` therefore returns the string
``"int4"`` for it, and ops that accept it say so.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int4 = "int4"
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint64 = np.dtype(np.uint64)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)
float4_e2m1fn = np.dtype(ml_dtypes.float4_e2m1fn)

_NAMES: dict[str, np.dtype | str] = {
    "bfloat16": bfloat16, "bf16": bfloat16,
    "float16": float16, "fp16": float16, "half": float16,
    "float32": float32, "fp32": float32, "float": float32,
    "float64": float64, "fp64": float64, "double": float64,
    "int4": int4, "quint4x2": int4,
    "int8": int8, "qint8": int8,
    "uint8": uint8, "quint8": uint8,
    "int32": int32, "qint32": int32,
    "int64": int64, "uint64": uint64,
    "float8_e4m3fn": float8_e4m3fn, "e4m3": float8_e4m3fn, "fp8_e4m3": float8_e4m3fn,
    "float8_e5m2": float8_e5m2, "e5m2": float8_e5m2,
    "float8_e8m0fnu": float8_e8m0fnu, "e8m0": float8_e8m0fnu,
    "float4_e2m1fn": float4_e2m1fn, "e2m1": float4_e2m1fn, "fp4": float4_e2m1fn,
}

FLOAT_OUTPUTS = (bfloat16, float16, float32)
"""The float dtypes a kernel writes (each rounded to nearest-even from an fp32 result)."""


def resolve(dtype, *, arg: str = "dtype", op: str | None = None) -> np.dtype | str:
    """Turn a dtype argument (NumPy dtype, scalar type, name) into a ``np.dtype`` (or ``"int4"``).

    Raises ``TypeError`` naming ``arg`` when the value is not a dtype this project knows.
    """
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        if key in _NAMES:
            return _NAMES[key]
        raise TypeError(f"{_where(op)}argument '{arg}' must be a dtype or one of "
                        f"{sorted(_NAMES)}; got the string {dtype!r}")
    if dtype is None:
        raise TypeError(f"{_where(op)}argument '{arg}' must be a dtype; got None")
    try:
        return np.dtype(dtype)
    except TypeError:
        name = getattr(dtype, "__name__", None) or str(dtype)
        # torch dtypes print as "torch.int8": accept them by name so adapters can pass them through.
        if name.startswith("torch."):
            return resolve(name, arg=arg, op=op)
        raise TypeError(f"{_where(op)}argument '{arg}' must be a dtype; got {dtype!r}") from None


def name(dtype) -> str:
    """Canonical short name of a dtype (``"bfloat16"``, ``"int8"``, ``"int4"``...)."""
    if isinstance(dtype, str):
        resolved = resolve(dtype)
        return resolved if isinstance(resolved, str) else resolved.name
    return np.dtype(dtype).name


def int_range(dtype) -> tuple[int, int]:
    """(min, max) of an integer dtype, ``"int4"`` included."""
    if dtype == int4:
        return -8, 7
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


_ML_FLOATS = (bfloat16, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float4_e2m1fn)


def is_float(dtype) -> bool:
    """True for IEEE floats and the ml_dtypes floats (whose NumPy kind is 'V')."""
    if isinstance(dtype, str):
        return False
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype in _ML_FLOATS


def _where(op: str | None) -> str:
    return f"{op}: " if op else ""
