"""ULP distance between float arrays of the same dtype, by ordered integer keys.

The bit pattern of an IEEE-style float, read as sign-magnitude, is turned into an integer key that
is monotone in the float's value: adjacent representable values have adjacent keys, ``+0`` and
``-0`` share the key 0. The ULP distance of two values is the difference of their keys — the number
of representable values between them — for bf16, fp16, fp32, fp64 and the fp8 formats (e4m3fn,
e5m2). NaN has no place in the order: a NaN against a non-NaN is :data:`NAN_DISTANCE`, two NaNs
are at distance 0.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as _dt

__all__ = ["ulp_distance"]

NAN_DISTANCE = np.iinfo(np.int64).max
"""The distance reported between NaN and a number (larger than any real distance)."""

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _supported(dtype: np.dtype) -> None:
    if not _dt.is_float(dtype) or dtype in (_dt.float8_e8m0fnu, _dt.float4_e2m1fn):
        raise TypeError(f"ulp: dtype must be bf16, fp16, fp32, fp64, float8_e4m3fn or float8_e5m2; got {dtype}")


def ordered_key(x: np.ndarray) -> np.ndarray:
    """int64 keys, monotone in value, one step per representable number; ``-0`` and ``+0`` -> 0."""
    x = np.asarray(x)
    _supported(x.dtype)
    bits = x.dtype.itemsize * 8
    raw = x.view(_UINT[x.dtype.itemsize]).astype(np.uint64)
    sign = (raw >> np.uint64(bits - 1)) & np.uint64(1)
    mag = (raw & np.uint64((1 << (bits - 1)) - 1)).astype(np.int64)
    return np.where(sign == 1, -mag, mag)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise number of representable values between ``a`` and ``b`` (same float dtype).

    Returns int64; NaN vs number gives :data:`NAN_DISTANCE`, NaN vs NaN gives 0. Inf is the next
    key after the largest finite value, so ``max`` vs ``inf`` is 1 ULP apart. fp64 distances across
    zero can exceed the int64 range (``-inf`` vs ``inf`` is about 1.8e19): they saturate at
    ``NAN_DISTANCE - 1``, still larger than any distance that fits and smaller than a NaN's.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_distance: arguments 'a' and 'b' must have the same dtype; got {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"ulp_distance: arguments 'a' and 'b' must have the same shape; got {a.shape} and {b.shape}")
    ka, kb = ordered_key(a), ordered_key(b)
    # |ka - kb| in uint64: across zero it is |ka| + |kb|, which overflows int64 for fp64 keys.
    same_side = (ka >= 0) == (kb >= 0)
    wide = np.where(same_side, np.abs(ka - kb).astype(np.uint64),
                    np.abs(ka).astype(np.uint64) + np.abs(kb).astype(np.uint64))
    dist = np.minimum(wide, np.uint64(NAN_DISTANCE - 1)).astype(np.int64)
    na = _isnan(a)
    nb = _isnan(b)
    dist = np.where(na ^ nb, NAN_DISTANCE, dist)
    return np.where(na & nb, 0, dist)


def _isnan(x: np.ndarray) -> np.ndarray:
    return np.isnan(x.astype(np.float32) if x.dtype.kind == "V" else x)


def ulp_of(x: np.ndarray) -> np.ndarray:
    """Size of one ULP at each value of ``x`` (the gap to the next value away from zero), as fp64."""
    x = np.asarray(x)
    _supported(x.dtype)
    ax = np.abs(x.astype(np.float64))
    if x.dtype.kind == "f":
        info = np.finfo(x.dtype)
    else:
        import ml_dtypes
        info = ml_dtypes.finfo(x.dtype)
    tiny = float(info.smallest_subnormal)
    exp = np.floor(np.log2(np.maximum(ax, float(info.smallest_normal))))
    return np.maximum(2.0 ** (exp - info.nmant), tiny)
