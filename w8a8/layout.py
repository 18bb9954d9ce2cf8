"""FRACTAL_NZ weight layout (``npu_format_cast(w, 29)``) and SGLang's alignment rule.

Storage of an ND tensor ``[..., R, C]`` (Ascend/pytorch
``torch_npu/csrc/framework/FormatHelper.cpp::InferShapeNDToNZ``)::

    NZ storage [..., ceil(C / C0), ceil(R / 16), 16, C0]
    C0 = 32 / min(itemsize, 2): int8 / uint8 -> 32; fp16 / bf16 -> 16; fp32 / int32 -> 16
    element (r, c) lives at storage[..., c // C0, r // 16, r % 16, c % C0]

So an int8 weight ``[K, N]`` becomes ``[ceil(N/32), ceil(K/16), 16, 32]``: 512-byte fractals of
16 K-rows x 32 N-columns, row-major inside, ordered N-block-major. Unaligned shapes are padded with
zeros (required on Ascend 950; assumed, not confirmed, for A2/A3 TransData). The logical shape
does not change on the device, so :func:`nz_to_nd` needs it back.

:func:`is_nz_aligned` is SGLang's ``_is_nz_aligned`` (``hardware_backend/npu/utils.py``), which
decides whether serving code casts a weight to NZ or keeps it ND ("Falling back to 'ND'").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import _check
from . import dtypes as _dt
from .registry import golden_op

__all__ = ["format_cast_nz", "nz_to_nd", "is_nz_aligned", "nz_storage_shape"]

ACL_FORMAT_ND = 2
ACL_FORMAT_FRACTAL_NZ = 29
_ROWS = 16


def nz_c0(dtype) -> int:
    """Columns per fractal for ``dtype``: 32 bytes / min(itemsize, 2)."""
    return 32 // min(np.dtype(dtype).itemsize, 2)


def nz_storage_shape(shape: tuple[int, ...], dtype) -> tuple[int, ...]:
    """Storage shape of an ND tensor of ``shape`` and ``dtype`` in FRACTAL_NZ."""
    if len(shape) < 2:
        raise ValueError(f"nz_storage_shape: argument 'shape' must have at least 2 dims; got {tuple(shape)}")
    r, c = shape[-2], shape[-1]
    c0 = nz_c0(dtype)
    return tuple(shape[:-2]) + (math.ceil(c / c0), math.ceil(r / _ROWS), _ROWS, c0)


@dataclass(frozen=True, eq=False)
class FormatCastNzArgs:
    """The checked argument of :func:`format_cast_nz` and its NZ geometry."""

    w: np.ndarray
    """The ND tensor ``[..., R, C]`` (as given)."""
    c0: int
    """Columns per fractal for w's dtype (:func:`nz_c0`)."""
    storage_shape: tuple[int, ...]
    """``[..., ceil(C/C0), ceil(R/16), 16, C0]``."""


def format_cast_nz_args(w) -> FormatCastNzArgs:
    """The argument check of :func:`format_cast_nz` (an ndarray of at least 2 dims)."""
    w = _check.array("format_cast_nz", "w", w, min_ndim=2)
    storage = nz_storage_shape(w.shape, w.dtype)
    _check.within_budget("format_cast_nz", "w", storage, w.dtype.itemsize, f"the padded NZ storage {storage}")
    return FormatCastNzArgs(w=w, c0=nz_c0(w.dtype), storage_shape=storage)


@dataclass(frozen=True, eq=False)
class NzToNdArgs:
    """The checked arguments of :func:`nz_to_nd`."""

    w_nz: np.ndarray
    """NZ storage ``[..., C1, R1, 16, C0]`` (as given)."""
    shape: tuple[int, ...]
    """The logical ND shape, as a tuple of ints."""


def nz_to_nd_args(w_nz, shape) -> NzToNdArgs:
    """The argument checks of :func:`nz_to_nd`: ``w_nz`` an ndarray of at least 4 dims whose shape is the NZ
    storage shape of ``shape`` for its dtype (ValueError naming ``w_nz`` otherwise)."""
    op = "nz_to_nd"
    w_nz = _check.array(op, "w_nz", w_nz, min_ndim=4)
    shape = tuple(int(d) for d in shape)
    expected = nz_storage_shape(shape, w_nz.dtype)
    if tuple(w_nz.shape) != expected:
        _check.fail(op, "w_nz", f"of NZ storage shape {expected} for logical shape {shape} ({w_nz.dtype})",
                    _check.describe(w_nz))
    return NzToNdArgs(w_nz=w_nz, shape=shape)


@golden_op("dense", check=format_cast_nz_args, mirrors="torch_npu.npu_format_cast")
def format_cast_nz(w: np.ndarray) -> np.ndarray:
    """ND ``[..., R, C]`` -> NZ storage ``[..., ceil(C/C0), ceil(R/16), 16, C0]``, zero padded.

    Any dtype of itemsize 1, 2 or 4 (and 8, treated like 4 — torch_npu never casts those).
    Raises ValueError for fewer than 2 dims, or an NZ storage (zero padded to 16 x C0 tiles) beyond
    the allocation budget (:func:`w8a8._check.within_budget`; 4 GiB or ``W8A8_GOLDEN_MAX_BYTES``). NaN / Inf values are moved bit for bit like any other.
    """
    a = format_cast_nz_args(w)
    w, c0 = a.w, a.c0
    r, c = w.shape[-2:]
    r1, c1 = math.ceil(r / _ROWS), math.ceil(c / c0)
    padded = np.zeros(w.shape[:-2] + (r1 * _ROWS, c1 * c0), dtype=w.dtype)
    padded[..., :r, :c] = w
    lead = w.shape[:-2]
    blocks = padded.reshape(lead + (r1, _ROWS, c1, c0))
    n = len(lead)
    perm = tuple(range(n)) + (n + 2, n, n + 1, n + 3)
    return np.ascontiguousarray(blocks.transpose(perm))


@golden_op("dense", check=nz_to_nd_args)
def nz_to_nd(w_nz: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Inverse of :func:`format_cast_nz`: NZ storage -> ND of the logical ``shape`` (padding dropped).

    Raises ValueError when ``w_nz.shape`` is not the NZ storage shape of ``shape`` for its dtype.
    """
    a = nz_to_nd_args(w_nz, shape)
    w_nz, shape = a.w_nz, a.shape
    c1, r1, _, c0 = w_nz.shape[-4:]
    lead = w_nz.shape[:-4]
    n = len(lead)
    perm = tuple(range(n)) + (n + 1, n + 2, n, n + 3)
    nd = w_nz.transpose(perm).reshape(lead + (r1 * _ROWS, c1 * c0))
    return np.ascontiguousarray(nd[..., : shape[-2], : shape[-1]])


def is_nz_aligned(shape: tuple[int, ...], dtype) -> bool:
    """SGLang's ``_is_nz_aligned``: may serving code cast this ``[..., k, n]`` weight to NZ?

    ``k, n = shape[-2], shape[-1]`` (the already transposed ``[K, N]`` orientation):

    * fewer than 2 dims -> False
    * bf16 / fp16 -> ``k % 16 == 0 and n % 16 == 0``
    * int8 -> ``k % 16 == 0 and n % 32 == 0``
    * uint8 / int32 / ``"int4"`` (packed int4) -> ``k % 16 == 0 and n % 64 == 0``
    * any other dtype -> True

    Independently, NZ weights are not supported by the quantized matmuls when either of the last
    two dims is 1 (:func:`nz_supported_by_matmul`).
    """
    shape = tuple(shape)
    if len(shape) < 2:
        return False
    k, n = shape[-2], shape[-1]
    resolved = _dt.resolve(dtype, arg="dtype", op="is_nz_aligned")
    if resolved == _dt.int4:  # "int4" / "quint4x2" name packed int4, stored as int32 words
        resolved = _dt.int32
    dt = np.dtype(resolved)
    if dt in (_dt.bfloat16, _dt.float16):
        return k % 16 == 0 and n % 16 == 0
    if dt == _dt.int8:
        return k % 16 == 0 and n % 32 == 0
    if dt in (_dt.uint8, _dt.int32):
        return k % 16 == 0 and n % 64 == 0
    return True


def nz_supported_by_matmul(shape: tuple[int, ...]) -> bool:
    """``aclnnQuantMatmulWeightNz`` / grouped matmul NZ: neither of the last two dims may be 1."""
    return len(shape) >= 2 and shape[-2] != 1 and shape[-1] != 1


def nz_fallback_reason(shape: tuple[int, ...], dtype) -> str | None:
    """Why serving code keeps this weight ND (None when it casts it to NZ)."""
    if len(tuple(shape)) < 2:
        return "fewer than 2 dims"
    if not is_nz_aligned(shape, dtype):
        k, n = shape[-2], shape[-1]
        resolved = _dt.resolve(dtype)
        dt = np.dtype(_dt.int32 if resolved == _dt.int4 else resolved)
        need = {np.dtype(np.int8): "k % 16 and n % 32", np.dtype(np.uint8): "k % 16 and n % 64",
                np.dtype(np.int32): "k % 16 and n % 64"}.get(dt, "k % 16 and n % 16")
        return f"not NZ-aligned for {_dt.name(dt)}: [k={k}, n={n}] needs {need} == 0 (SGLang falls back to ND)"
    if not nz_supported_by_matmul(shape):
        return "a last dim of 1 (NZ weights are not supported by the quantized matmuls)"
    return None
