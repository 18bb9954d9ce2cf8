"""INT4 packing layouts of the checkpoints and kernels users meet (GPTQ ``qlinear_cuda_old.py``, AWQ
``awq_triton.py``, compressed-tensors ``pack_quantized/helpers.py::pack_to_int32``, vLLM ``moe_wna16.py``).

The packers take **4-bit nibbles** (uint8 values in [0, 15]) and the unpackers return them; what a
nibble means is the format's business, not the layout's:

* GPTQ, AWQ, compressed-tensors ``pack-quantized`` and vLLM ``moe_wna16`` store the *unsigned*
  code. A symmetric signed code ``q in [-8, 7]`` is stored as ``u = q + 8`` (offset binary; vLLM
  ``uint4b8``, compressed-tensors ``q + 2^(b-1)``): convert with :func:`to_uint4b8` /
  :func:`from_uint4b8`. An asymmetric code is already unsigned (``u in [0, 15]``, zero point z).
* Ascend ``quint4x2`` stores the *signed* code as a 4-bit two's complement (``q & 0xF``): that is
  :func:`w8a8.pack_int4` / :func:`w8a8.unpack_int4` (int32 words, LSB first) and
  :func:`convert_weight_to_int4pack` here. For a symmetric code the two stored nibbles differ in
  the top bit only: ``(q + 8) & 0xF == (q & 0xF) ^ 0x8``.

Layouts (element ``(n, k)`` of a weight ``[N, K]``, bits counted from bit 0 of the word)::

    GPTQ qweight        int32 [K/8, N]      word [k//8, n], bits 4*(k%8)          (along K, in order)
    GPTQ qzeros         int32 [G, N/8]      word [g, n//8], bits 4*(n%8)          (along N, in order)
                        v1 stores (z - 1) mod 16, gptq_v2 stores z
    AWQ qweight/qzeros  int32 [K, N/8]      word [k, n//8], bits 4*slot(n%8)      (along N, interleaved)
                        nibble slot i holds column ORDER[i], ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
    compressed-tensors  int32 [N, ceil(K/8)] word [n, k//8], bits 4*(k%8)         (along K, in order)
                        weight_zero_point: int32 [ceil(N/8), G], along N (dim 0), in order
    vLLM moe_wna16      uint8 [E, N, K/2]   byte [e, n, k//2], low nibble = even k
                        qzeros uint8 [E, N/2, G], low nibble = even n
    msModelSlim W4A8    int8  [N/2, K]      byte [n//2, k], low nibble = even n   (along N, dim 0)
    Ascend quint4x2     int32 [..., L/8]    word [..., l//8], bits 4*(l%8), signed (w8a8.int4)

Every layout is a view of one primitive, :func:`pack_nibbles`: nibbles along one axis, ``per``
(8 per int32 word, 2 per byte) in a slot order, little-endian.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from ..int4 import pack_int4
from ..registry import golden_op
from ._common import value_range as _range

__all__ = [
    "pack_nibbles", "unpack_nibbles", "to_uint4b8", "from_uint4b8",
    "pack_int4_gptq", "unpack_int4_gptq", "pack_gptq_qzeros", "unpack_gptq_qzeros",
    "pack_int4_awq", "unpack_int4_awq", "pack_int4_compressed_tensors", "unpack_int4_compressed_tensors",
    "pack_int4_moe_wna16", "unpack_int4_moe_wna16", "pack_int4_msmodelslim", "unpack_int4_msmodelslim",
    "convert_weight_to_int4pack",
]

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""AWQ's nibble order: slot i of an int32 word holds column ``AWQ_ORDER[i]`` of its group of 8."""

_CONTAINERS = {"int32": (np.int32, 8), "uint8": (np.uint8, 2), "int8": (np.int8, 2)}


def to_uint4b8(q: np.ndarray) -> np.ndarray:
    """Signed int4 codes (int8 in [-8, 7]) -> offset-binary nibbles ``q + 8`` (uint8 in [0, 15])."""
    q = _check.array("to_uint4b8", "q", q, dtypes=(np.int8, np.int16, np.int32, np.int64))
    _range("to_uint4b8", "q", q, -8, 7)
    return (q.astype(np.int16) + 8).astype(np.uint8)


def from_uint4b8(u: np.ndarray) -> np.ndarray:
    """Offset-binary nibbles (uint8 in [0, 15]) -> signed int4 codes ``u - 8`` (int8)."""
    u = _nibbles("from_uint4b8", "u", u)
    return (u.astype(np.int16) - 8).astype(np.int8)


def pack_nibbles(nibbles: np.ndarray, *, axis: int = -1, container: str = "int32",
                 order=None) -> np.ndarray:
    """Pack 4-bit values along ``axis``, little-endian, ``per`` to a container element.

    Parameters
    ----------
    nibbles : uint8 in [0, 15]; ``shape[axis]`` a multiple of ``per`` (8 for ``"int32"``, 2 for
        ``"uint8"`` / ``"int8"``) — pad first where a format packs a ragged tail.
    axis : the packed axis; the result has ``shape[axis] / per`` there.
    container : ``"int32"``, ``"uint8"`` or ``"int8"`` (the words' dtype; bits are the same).
    order : slot order, a permutation of ``range(per)``: nibble slot ``i`` (bits ``4i..4i+3``)
        holds element ``order[i]`` of each group of ``per``. Default: in order.
    """
    op = "pack_nibbles"
    nibbles = _nibbles(op, "nibbles", nibbles)
    dtype, per, order = _layout(op, container, order)
    axis = _axis(op, nibbles, axis)
    if nibbles.shape[axis] % per:
        _check.fail(op, "nibbles", f"a multiple of {per} along axis {axis} ({container} holds {per})",
                    _check.describe(nibbles))
    moved = np.moveaxis(nibbles, axis, -1)
    grouped = moved.reshape(moved.shape[:-1] + (moved.shape[-1] // per, per))[..., list(order)]
    shifts = (np.arange(per, dtype=np.uint32) * 4)
    words = np.bitwise_or.reduce(grouped.astype(np.uint32) << shifts, axis=-1)
    words = words.astype(np.uint32 if per == 8 else np.uint8).view(dtype)
    return np.moveaxis(words, -1, axis)


def unpack_nibbles(words: np.ndarray, *, axis: int = -1, order=None) -> np.ndarray:
    """Inverse of :func:`pack_nibbles`: int32 (8 per word) or uint8/int8 (2 per byte) -> uint8 nibbles."""
    op = "unpack_nibbles"
    words = _check.array(op, "words", words, dtypes=(np.int32, np.uint32, np.uint8, np.int8), min_ndim=1)
    per = 8 if words.dtype.itemsize == 4 else 2
    _, _, order = _layout(op, "int32" if per == 8 else "uint8", order)
    axis = _axis(op, words, axis)
    u = np.moveaxis(words, axis, -1).view(np.uint32 if per == 8 else np.uint8).astype(np.uint32)
    slots = ((u[..., None] >> (np.arange(per, dtype=np.uint32) * 4)) & 0xF).astype(np.uint8)
    out = np.empty_like(slots)
    out[..., list(order)] = slots
    out = out.reshape(out.shape[:-2] + (out.shape[-2] * per,))
    return np.moveaxis(out, -1, axis)


# --- GPTQ ------------------------------------------------------------------------------------

def pack_int4_gptq(nibbles: np.ndarray) -> np.ndarray:
    """GPTQ ``qweight``: nibbles of a weight ``[N, K]`` -> int32 ``[K/8, N]`` packed along K.

    Word ``[k//8, n]`` holds element ``(n, k)`` in bits ``4*(k%8)..+3``. K must be a multiple of 8.
    Symmetric GPTQ stores ``q + 8`` (:func:`to_uint4b8`).
    """
    u = _nibbles("pack_int4_gptq", "nibbles", nibbles, ndim=2)
    return pack_nibbles(u.T, axis=0)


def unpack_int4_gptq(qweight: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_int4_gptq`: int32 ``[K/8, N]`` -> nibbles ``[N, K]``."""
    qweight = _check.array("unpack_int4_gptq", "qweight", qweight, dtypes=(np.int32,), ndim=2)
    return np.ascontiguousarray(unpack_nibbles(qweight, axis=0).T)


def pack_gptq_qzeros(zeros: np.ndarray, *, checkpoint_format: str = "gptq") -> np.ndarray:
    """GPTQ ``qzeros``: integer zero points ``[N, G]`` (uint8 in [0, 15]) -> int32 ``[G, N/8]``.

    ``checkpoint_format="gptq"`` (v1, AutoGPTQ) stores ``(z - 1) mod 16`` (AutoGPTQ subtracts 1
    before packing; vLLM's ``convert_gptq_int4_qzeros`` adds it back); ``"gptq_v2"`` stores z.
    A symmetric GPTQ checkpoint has z = 8 everywhere, so v1 words are ``0x77777777``.
    """
    op = "pack_gptq_qzeros"
    z = _nibbles(op, "zeros", zeros, ndim=2)
    shift = _gptq_shift(op, checkpoint_format)
    stored = ((z.astype(np.int16) - shift) & 0xF).astype(np.uint8)
    return pack_nibbles(stored.T, axis=1)


def unpack_gptq_qzeros(qzeros: np.ndarray, *, checkpoint_format: str = "gptq") -> np.ndarray:
    """Inverse of :func:`pack_gptq_qzeros`: int32 ``[G, N/8]`` -> zero points ``[N, G]`` (v1: +1 mod 16)."""
    op = "unpack_gptq_qzeros"
    qzeros = _check.array(op, "qzeros", qzeros, dtypes=(np.int32,), ndim=2)
    shift = _gptq_shift(op, checkpoint_format)
    stored = unpack_nibbles(qzeros, axis=1)
    return np.ascontiguousarray(((stored.astype(np.int16) + shift) & 0xF).astype(np.uint8).T)


# --- AWQ -------------------------------------------------------------------------------------

def pack_int4_awq(nibbles: np.ndarray) -> np.ndarray:
    """AWQ (GEMM) ``qweight`` / ``qzeros``: nibbles ``[R, N]`` -> int32 ``[R, N/8]`` along N, interleaved.

    ``R`` is K for ``qweight`` (AWQ keeps the input dimension first) and the group count for
    ``qzeros``. Slot i of word ``[r, j]`` holds column ``8j + AWQ_ORDER[i]``; so column ``c`` of a
    word sits at bits ``4 * [0, 4, 1, 5, 2, 6, 3, 7][c]``.
    """
    u = _nibbles("pack_int4_awq", "nibbles", nibbles, ndim=2)
    return pack_nibbles(u, axis=1, order=AWQ_ORDER)


def unpack_int4_awq(qweight: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_int4_awq`: int32 ``[R, N/8]`` -> nibbles ``[R, N]``."""
    qweight = _check.array("unpack_int4_awq", "qweight", qweight, dtypes=(np.int32,), ndim=2)
    return unpack_nibbles(qweight, axis=1, order=AWQ_ORDER)


# --- compressed-tensors pack-quantized -------------------------------------------------------

def pack_int4_compressed_tensors(nibbles: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """compressed-tensors ``pack-quantized`` (4 bits): ``weight_packed`` along ``axis``, in order.

    ``weight [..., N, K]`` nibbles (the offset-binary ``q + 8``) -> int32 ``[..., N, ceil(K/8)]``
    with the default ``axis=-1``. A ragged tail (K % 8 != 0) is padded with zero nibbles
    (``pack_to_int32`` pads the unsigned values with 0). ``axis=0`` packs a zero-point tensor
    ``[N, G]`` into ``weight_zero_point [ceil(N/8), G]``.
    """
    u = _nibbles("pack_int4_compressed_tensors", "nibbles", nibbles, min_ndim=1)
    ax = _axis("pack_int4_compressed_tensors", u, axis)
    pad = -u.shape[ax] % 8
    if pad:
        widths = [(0, 0)] * u.ndim
        widths[ax] = (0, pad)
        u = np.pad(u, widths)
    return pack_nibbles(u, axis=ax)


def unpack_int4_compressed_tensors(weight_packed: np.ndarray, size: int, *, axis: int = -1) -> np.ndarray:
    """Inverse of :func:`pack_int4_compressed_tensors`; ``size`` is the unpacked length along ``axis``
    (``weight_shape[axis]``), which drops the padding."""
    op = "unpack_int4_compressed_tensors"
    weight_packed = _check.array(op, "weight_packed", weight_packed, dtypes=(np.int32,), min_ndim=1)
    ax = _axis(op, weight_packed, axis)
    size = _check.integer(op, "size", size, minimum=0)
    if -(-size // 8) != weight_packed.shape[ax]:
        _check.fail(op, "size", f"a length that packs into {weight_packed.shape[ax]} words along axis {ax} "
                    f"(ceil(size / 8) == {weight_packed.shape[ax]})", str(size))
    u = unpack_nibbles(weight_packed, axis=ax)
    return np.take(u, np.arange(size), axis=ax)


# --- vLLM moe_wna16 (the Triton int_wna16 kernel's layout) -------------------------------------

def pack_int4_moe_wna16(nibbles: np.ndarray) -> np.ndarray:
    """vLLM ``moe_wna16`` bytes: nibbles ``[..., N, K]`` -> uint8 ``[..., N, K/2]``, low nibble = even k.

    Its ``qzeros [E, N/2, G]`` (low nibble = even n) are ``pack_nibbles(z, axis=-2,
    container="uint8")`` of the zero points ``[E, N, G]``. Without zero points the kernel's default
    zero point is 8 (symmetric codes are stored as ``q + 8``).
    """
    u = _nibbles("pack_int4_moe_wna16", "nibbles", nibbles, min_ndim=1)
    return pack_nibbles(u, axis=-1, container="uint8")


def unpack_int4_moe_wna16(qweight: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_int4_moe_wna16`: uint8 ``[..., N, K/2]`` -> nibbles ``[..., N, K]``."""
    qweight = _check.array("unpack_int4_moe_wna16", "qweight", qweight, dtypes=(np.uint8,), min_ndim=1)
    return unpack_nibbles(qweight, axis=-1)


# --- Ascend ----------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ConvertWeightToInt4packArgs:
    """The checked arguments of :func:`convert_weight_to_int4pack` (:func:`convert_weight_to_int4pack_args`)."""

    weight: np.ndarray
    """int32 ``[k, n]`` or ``[n, k]``, values in [-8, 7], last dim a multiple of 8 (as given)."""
    inner_k_tiles: int
    """Reserved by the vendor (>= 0), ignored."""


def convert_weight_to_int4pack_args(weight, inner_k_tiles=0) -> ConvertWeightToInt4packArgs:
    """The argument checks of :func:`convert_weight_to_int4pack` (public: the backends run them
    before their own packing)."""
    op = "convert_weight_to_int4pack"
    weight = _check.array(op, "weight", weight, dtypes=(np.int32,), ndim=2)
    inner_k_tiles = _check.integer(op, "inner_k_tiles", inner_k_tiles, minimum=0)
    if weight.shape[-1] % 8:
        _check.fail(op, "weight", "of last dimension a multiple of 8 (8 int4 per int32)", _check.describe(weight))
    _range(op, "weight", weight, -8, 7)
    return ConvertWeightToInt4packArgs(weight=weight, inner_k_tiles=inner_k_tiles)


@golden_op("lowbit", check=convert_weight_to_int4pack_args, mirrors="torch_npu.npu_convert_weight_to_int4pack")
def convert_weight_to_int4pack(weight: np.ndarray, inner_k_tiles: int = 0) -> np.ndarray:
    """``torch_npu.npu_convert_weight_to_int4pack``: int32 int4 values -> int32 words, 8 per word.

    Parameters
    ----------
    weight : int32 ``[k, n]`` or ``[n, k]``, values in [-8, 7], last dim a multiple of 8.
    inner_k_tiles : reserved by the vendor (0); accepted and ignored.

    Returns int32 ``[k, n/8]`` (or ``[n, k/8]``): along the last dim, LSB first, signed 4-bit
    two's complement (:func:`w8a8.pack_int4`). The vendor text calls the arrangement
    "交叠排放" (interleaved); the op-plugin tests it is pinned by (``test_npu_dynamic_quant.py::convert_int4_to_int8``) unpack
    it in order, which the golden follows — **not confirmed** on hardware.
    """
    return pack_int4(convert_weight_to_int4pack_args(weight, inner_k_tiles).weight)


def pack_int4_msmodelslim(codes: np.ndarray) -> np.ndarray:
    """msModelSlim W4A8 weight: signed codes ``[N, K]`` (int8 in [-8, 7]) -> int8 ``[N/2, K]``.

    Two int4 per int8 **along the output dimension** (dim 0), low nibble = even n, two's
    complement nibbles. vllm-ascend transposes it to ``[K, N/2]`` and views it as int32
    ``[K, N/8]``, which is then exactly the Ascend LSB-first layout along N.
    """
    op = "pack_int4_msmodelslim"
    codes = _check.array(op, "codes", codes, dtypes=(np.int8,), ndim=2)
    _range(op, "codes", codes, -8, 7)
    return pack_nibbles((codes & 0xF).astype(np.uint8), axis=0, container="int8")


def unpack_int4_msmodelslim(weight: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_int4_msmodelslim`: int8 ``[N/2, K]`` -> signed codes int8 ``[N, K]``."""
    weight = _check.array("unpack_int4_msmodelslim", "weight", weight, dtypes=(np.int8,), ndim=2)
    u = unpack_nibbles(weight, axis=0).astype(np.int8)
    return np.where(u >= 8, u - 16, u).astype(np.int8)


# --- helpers ---------------------------------------------------------------------------------

def _nibbles(op: str, arg: str, value, **kw) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype.kind == "i":
        _check.fail(op, arg, "uint8 nibbles in [0, 15] (convert signed int4 codes with to_uint4b8, "
                    "or use w8a8.pack_int4 for the signed Ascend layout)", _check.describe(value), TypeError)
    value = _check.array(op, arg, value, dtypes=(np.uint8,), **kw)
    _range(op, arg, value, 0, 15)
    return value


def _axis(op: str, value: np.ndarray, axis) -> int:
    axis = _check.integer(op, "axis", axis)
    if not -value.ndim <= axis < value.ndim:
        _check.fail(op, "axis", f"in [{-value.ndim}, {value.ndim - 1}]", str(axis))
    return axis % value.ndim


def _layout(op: str, container: str, order):
    if container not in _CONTAINERS:
        _check.fail(op, "container", f"one of {tuple(_CONTAINERS)}", repr(container))
    dtype, per = _CONTAINERS[container]
    order = tuple(range(per)) if order is None else tuple(int(i) for i in order)
    if sorted(order) != list(range(per)):
        _check.fail(op, "order", f"a permutation of range({per})", repr(order))
    return dtype, per, order


def _gptq_shift(op: str, checkpoint_format: str) -> int:
    _check.choice(op, "checkpoint_format", checkpoint_format, ("gptq", "gptq_v2"))
    return 1 if checkpoint_format == "gptq" else 0
