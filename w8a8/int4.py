"""Ascend int4 packing: eight signed 4-bit codes per int32 word, least significant nibble first.

This is the layout of ``torch.quint4x2`` outputs of ``npu_dynamic_quant`` / ``npu_quantize`` and of
int4 matmul operands (op-plugin ``test_npu_dynamic_quant.py::convert_int4_to_int8``): element ``8*j + i`` of the last
dimension sits in bits ``[4*i, 4*i + 3]`` of word ``j``, as a 4-bit two's-complement value. Seen as bytes
(little-endian), element ``2*i`` is the low nibble of byte ``i`` and element ``2*i + 1`` the high
nibble.

Example: codes ``[1, -1, 2, -2, 3, -3, 4, -4]`` -> nibbles ``1, F, 2, E, 3, D, 4, C`` from bit 0
upward -> word ``0xC4D3E2F1`` (as int32: -992746767).
"""

from __future__ import annotations

import numpy as np

from . import _check

__all__ = ["pack_int4", "unpack_int4"]

_SHIFTS = np.arange(8, dtype=np.uint32) * 4


def pack_int4(codes: np.ndarray) -> np.ndarray:
    """Pack int4 codes (int8 values in [-8, 7], last dim a multiple of 8) into int32 ``[..., n/8]``."""
    op = "pack_int4"
    codes = _check.array(op, "codes", codes, dtypes=(np.int8, np.int16, np.int32, np.int64), min_ndim=1)
    if codes.shape[-1] % 8:
        _check.fail(op, "codes", "an array whose last dimension is a multiple of 8", _check.describe(codes))
    if codes.size and (codes.min() < -8 or codes.max() > 7):
        _check.fail(op, "codes", "int4 values in [-8, 7]", f"values in [{codes.min()}, {codes.max()}]")
    nibbles = (codes.astype(np.int64) & 0xF).astype(np.uint32)
    grouped = nibbles.reshape(codes.shape[:-1] + (codes.shape[-1] // 8, 8))
    words = np.bitwise_or.reduce(grouped << _SHIFTS, axis=-1)
    return words.astype(np.uint32).view(np.int32)


def unpack_int4(words: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_int4`: int32 ``[..., n]`` -> int8 codes ``[..., 8n]`` in [-8, 7]."""
    words = _check.array("unpack_int4", "words", words, dtypes=(np.int32, np.uint32), min_ndim=1)
    u = words.view(np.uint32)[..., None] >> _SHIFTS
    nib = (u & 0xF).astype(np.int8)
    nib = np.where(nib >= 8, nib - 16, nib).astype(np.int8)
    return nib.reshape(words.shape[:-1] + (words.shape[-1] * 8,))
