"""Exact integer GEMM through float BLAS.

``np.matmul`` on integer arrays does not use BLAS (about 0.4 GOP/s, 300x slower than float64 BLAS,
measured with numpy 2.4.6 / OpenBLAS 0.3.31 on a 2-core Xeon). An integer matmul is exact in float arithmetic as long
as every partial sum is an integer the float format holds exactly, whatever the summation order:

* float32 holds every integer up to 2^24, so a K-chunk is exact when
  ``chunk * max|a| * max|b| <= 2^24`` — 1024 for arbitrary int8 x int8 (128 * 128 * 1024 = 2^24),
  16384 for int4 x int8;
* the chunk results (exact integers) are then summed in float64, exact up to 2^53.

The chunk length is taken from the actual maxima of the operands, so typical data (and int4
weights) need fewer chunks. Wider operands (int16 / int32 data whose single products exceed 2^24)
take float64 chunks (exact while ``chunk * max|a| * max|b| <= 2^53``) summed in int64, or, past
that, Python integers. The result is the int32 accumulator of the device cube; where the true
sum leaves the int32 range (possible only when ``K * max|a| * max|b| >= 2^31``) an
``OverflowError`` names the first overflowing element, since the device result there is not
specified.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _check
from .registry import golden_op

__all__ = ["int_matmul"]

_F32_EXACT = 1 << 24
_F64_EXACT = 1 << 53
_I32_MAX = (1 << 31) - 1
_I64_MAX = (1 << 63) - 1
_INT_DTYPES = (np.int8, np.uint8, np.int16, np.int32)


@dataclass(frozen=True, eq=False)
class IntMatmulArgs:
    """The checked operands of :func:`int_matmul` (as given) and the shape of the result."""

    a: np.ndarray
    """int8 / uint8 / int16 / int32 ``[..., M, K]``."""
    b: np.ndarray
    """int8 / uint8 / int16 / int32 ``[..., K, N]``."""
    k: int
    """K, the contracted dimension."""
    out_shape: tuple[int, ...]
    """``broadcast(a.shape[:-2], b.shape[:-2]) + (M, N)``."""
    op: str
    """The op named in the messages (the ``op`` argument)."""


def int_matmul_args(a, b, *, op: str = "int_matmul") -> IntMatmulArgs:
    """The argument checks of :func:`int_matmul` (``op`` names the op in the messages).

    TypeError for a non-integer operand, ValueError for rank < 2 or mismatched K, or a result beyond the
    allocation budget (:func:`w8a8._check.within_budget`); batch dims that do not broadcast raise NumPy's
    ``ValueError`` of ``np.broadcast_shapes``.
    """
    a = _check.array(op, "a", a, dtypes=_INT_DTYPES, min_ndim=2)
    b = _check.array(op, "b", b, dtypes=_INT_DTYPES, min_ndim=2)
    k = a.shape[-1]
    if b.shape[-2] != k:
        _check.fail(op, "b", f"of shape [..., K={k}, N] to match a {tuple(a.shape)}", _check.describe(b))
    out_shape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) + (a.shape[-2], b.shape[-1])
    _check.within_budget(op, "b", out_shape, 4, f"the int32 result [..., M, N] = {out_shape}")
    return IntMatmulArgs(a=a, b=b, k=int(k), out_shape=tuple(int(d) for d in out_shape), op=op)


@golden_op("dense", check=int_matmul_args)
def int_matmul(a: np.ndarray, b: np.ndarray, *, op: str = "int_matmul") -> np.ndarray:
    """Exact ``a @ b`` of integer arrays, as the int32 accumulator.

    Parameters
    ----------
    a : int8/uint8/int16/int32 array ``[..., M, K]`` (int4 codes travel as int8)
    b : int8/uint8/int16/int32 array ``[..., K, N]``; batch dims broadcast like ``np.matmul``

    Returns
    -------
    int32 array ``[..., M, N]``, bit-identical to an int64 matmul whenever that fits int32.

    Raises
    ------
    TypeError for non-integer operands, ValueError for mismatched K or rank < 2, OverflowError when
    a sum leaves the int32 range.
    """
    args = int_matmul_args(a, b, op=op)
    a, b, k, out_shape = args.a, args.b, args.k, args.out_shape
    amax = _absmax(a)
    bmax = _absmax(b)
    bound = amax * bmax
    if bound == 0 or k == 0 or 0 in out_shape:
        return np.zeros(out_shape, dtype=np.int32)
    if bound > _F32_EXACT:  # a single product may not be a float32 (int16 / int32 data)
        return _wide_matmul(op, a, b, out_shape, k, bound)
    chunk = min(k, _F32_EXACT // bound)
    a32 = a.astype(np.float32)
    b32 = b.astype(np.float32)
    if chunk >= k:  # one exact float32 GEMM
        return np.matmul(a32, b32).astype(np.int32)
    # Exact chunk sums. While K * bound fits int32 no partial sum can overflow: add in int32.
    wide = k * bound > _I32_MAX
    total = None
    part = np.empty(out_shape, dtype=np.float32)
    for start in range(0, k, chunk):
        stop = min(k, start + chunk)
        np.matmul(a32[..., start:stop], b32[..., start:stop, :], out=part)
        if total is None:
            total = part.astype(np.float64 if wide else np.int32)
        else:
            total += part.astype(total.dtype)
    if wide:
        check_int32(op, total)
        return total.astype(np.int32)
    return total


def _wide_matmul(op: str, a: np.ndarray, b: np.ndarray, out_shape: tuple, k: int, bound: int) -> np.ndarray:
    """Exact ``a @ b`` when ``max|a| * max|b| > 2^24``: float64 chunks summed in int64, else Python ints."""
    if bound <= _F64_EXACT and k * bound <= _I64_MAX:
        chunk = _F64_EXACT // bound
        a64 = a.astype(np.float64)
        b64 = b.astype(np.float64)
        total = np.zeros(out_shape, dtype=np.int64)
        for start in range(0, k, chunk):
            stop = min(k, start + chunk)
            total += np.matmul(a64[..., start:stop], b64[..., start:stop, :]).astype(np.int64)
    else:  # products beyond 2^53 (int32 data): exact but slow
        total = np.matmul(a.astype(object), b.astype(object))
    check_int32(op, total)
    return total.astype(np.int32)


def _absmax(x: np.ndarray) -> int:
    if x.size == 0:
        return 0
    return int(max(abs(int(x.max())), abs(int(x.min()))))


def check_int32(op: str, total: np.ndarray) -> None:
    """Raise OverflowError naming the first element of an exact sum that leaves the int32 range."""
    bad = np.asarray((total > _I32_MAX) | (total < -_I32_MAX - 1), dtype=bool)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise OverflowError(f"{op}: the int32 accumulator overflows at output index {pos} "
                            f"(exact sum {int(total[pos])}); the device result is not specified there")


def add_int32(op: str, acc: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``acc + bias`` in int32, raising OverflowError (not wrapping) when a sum leaves int32."""
    wide = acc.astype(np.int64) + bias.astype(np.int64)
    check_int32(op, wide)
    return wide.astype(np.int32)
