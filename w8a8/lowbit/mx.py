"""MXFP4 / MXFP8 (OCP Microscaling v1.0): block of 32 along K, one E8M0 scale per block.

OCP Microscaling Formats (MX) v1.0; torchao ``prototype/mx_formats/mx_tensor.py::to_mx``. Elements are E2M1 (MXFP4),
E4M3 or E5M2 (MXFP8); each block of ``block_size`` (32) consecutive elements of the **last** (reduction) dimension
shares the scale ``X = 2^(b - 127)`` stored as the biased exponent byte ``b`` (uint8). ``V^_i = X * P_i``.

Conventions chosen (where the sources differ). Scales and elements equal torchao 0.18 ``to_mx`` (eager CPU) in all
four modes and the three element types **except in the blocks where torchao has a bug** (measured:
``tests/backends/test_torchao.py``): (1) under FLOOR / CEIL / EVEN
every block whose exponent clamps to -127 (``amax < 2^(emax - 126)``, normal fp32 values for E4M3 /
E5M2) is written with byte 0 but divided by 2^-126, so it decodes to half its value (the golden
divides by 2^-127); (2) under RCEIL a byte-0 block is multiplied by 1.0 (every code +-0); (3) RCEIL
computes ``ceil(log2(amax / vmax))`` with an fp32 ``log2``, which rounds to the integer just above
a power of two, so its byte is one too small there and the block clips; (4) a block holding +-Inf
gets a finite byte (``255 - emax``; 254 under RCEIL) where the golden writes 255. The element
codes of a NaN block are don't-cares (torchao writes garbage; the golden zeros, see below).

* **Shared exponent**, from the block's fp32 ``amax`` (``emax`` = 2 for E2M1, 8 for E4M3, 15 for
  E5M2; ``vmax`` = 6, 448, 57344):

  - ``"floor"`` (default; OCP MX v1.0's rule, torchao's default): ``e = floor(log2 amax) - emax``,
    read from the fp32 exponent field. ``amax / X`` lies in ``[2^emax, 2^(emax+1))``, so for E2M1
    the values in (6, 8) **clip to 6**.
  - ``"ceil"``: ``floor(log2 amax)`` plus 1 when amax is not a power of two, minus emax.
  - ``"even"``: amax's significand is first rounded to ``mbits`` bits (half up, into the exponent
    on carry), then ``"floor"`` — torchao ``EVEN``.
  - ``"rceil"`` (NVIDIA cuBLAS, PTX ``cvt.rp.ue8m0x2.f32``, DeepSeek's ``fast_round_scale``):
    ``X = 2^ceil(log2(amax * fp32(1 / vmax)))`` with an exact ceiling read from the fp32 bits —
    the scaled block never exceeds vmax, **never clips**. (torchao divides ``amax / vmax``; the
    quotient and this product differ in the last bit for about half of the amax values next to
    ``vmax * 2^k``, but the exact-ceiling byte never does — measured over 92425 such values — so
    the order is not a choice point. torchao's fp32 ``log2`` is: bug (3) above.)

  The exponent is clamped to [-127, 127]. An **all-zero block** gets ``b = 0`` (2^-127), as do
  blocks whose amax is below ``2^(emax - 127)``. A block holding **Inf or NaN** gets ``b = 255``
  (the E8M0 NaN) and, the golden's choice, all-zero element codes: it decodes to NaN whatever
  they are. (Under ``"even"`` an amax within one rounding step of the fp32 maximum rounds up to
  2^128 and gets the exponent ``128 - emax``, as in torchao 0.18.)
* **Elements**: ``P_i = cast(V_i * 2^(127 - b))`` — a multiplication by the exact reciprocal power
  of two, then the RNE cast, **saturating** at +-vmax (clamp before the cast: ml_dtypes E4M3 would
  give NaN beyond 464). E2M1 ties: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2,
  3.5 -> 4, 5 -> 4.
* **Storage**: MXFP4 elements packed two per byte, element 2j in the low nibble (``[..., K/2]``
  uint8); MXFP8 elements as ml_dtypes ``float8_e4m3fn`` / ``float8_e5m2`` ``[..., K]``; scales
  uint8 ``[..., K/32]``. gpt-oss checkpoints store the same bytes as ``blocks [..., K/32, 16]`` and
  ``scales [..., K/32]`` (:func:`mx_from_gptoss`).
* **Matmul** (:func:`mx_matmul`): both operands are dequantized exactly in float64
  (``P * 2^(b - 127)`` is exact; in fp32 it could overflow at the top of the E8M0 range), the
  product is accumulated in float64 and rounded once to fp32, then to ``output_dtype``. A kernel
  accumulating in fp32 differs from it by its summation rounding only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..registry import golden_op
from ..rounding import to_float
from ._common import FLOAT_INPUTS, float_output
from .minifloat import (E2M1_TABLE, E4M3_TABLE, E5M2_TABLE, E8M0_NAN, E8M0_TABLE, float_to_e2m1,
                        float_to_fp8, fp4_to_float, pack_fp4)

__all__ = ["mx_quantize", "mx_dequantize", "mx_matmul", "mx_shared_exponent", "mx_from_gptoss", "mx_to_gptoss"]

SCALE_MODES = ("floor", "ceil", "even", "rceil")
BLOCK_SIZE = 32

# element name -> (storage, emax, vmax, mbits, decode table)
_ELEMS = {
    "e2m1": ("fp4", 2, 6.0, 1, E2M1_TABLE),
    "e4m3": (_dt.float8_e4m3fn, 8, 448.0, 3, E4M3_TABLE),
    "e5m2": (_dt.float8_e5m2, 15, 57344.0, 2, E5M2_TABLE),
}


def elem_name(op: str, arg: str, elem_dtype) -> str:
    """``"e2m1"``, ``"e4m3"`` or ``"e5m2"`` from a name or an ml_dtypes dtype."""
    if isinstance(elem_dtype, str) and elem_dtype.lower() in ("e2m1", "fp4", "mxfp4", "fp4_e2m1", "float4_e2m1fn"):
        return "e2m1"
    try:
        dt = _dt.resolve(elem_dtype, arg=arg, op=op)
    except TypeError:
        dt = None
    for name, (storage, *_rest) in _ELEMS.items():
        if dt is not None and (dt == storage or (name == "e2m1" and dt == _dt.float4_e2m1fn)):
            return name
    _check.fail(op, arg, "'e2m1' (MXFP4), 'e4m3' or 'e5m2' (MXFP8)", repr(elem_dtype))


def mx_shared_exponent(amax: np.ndarray, elem_dtype="e2m1", *, scale_mode: str = "floor") -> np.ndarray:
    """The E8M0 scale byte (uint8) of blocks with the given fp32 ``amax`` (module docstring).

    ``amax`` is float32 and >= 0 (NaN / Inf give 255); the rule is ``scale_mode``. Also the
    power-of-two scale rule of DeepSeek's ``ue8m0`` (:mod:`.fp8_block`): ``"rceil"`` for E4M3.
    """
    op = "mx_shared_exponent"
    name = elem_name(op, "elem_dtype", elem_dtype)
    _check.choice(op, "scale_mode", scale_mode, SCALE_MODES)
    _, emax, vmax, mbits, _ = _ELEMS[name]
    a = np.asarray(amax, dtype=np.float32)
    finite = np.isfinite(a)
    if scale_mode == "rceil":
        with np.errstate(over="ignore"):
            d = a * np.float32(np.float32(1) / np.float32(vmax))
        bits = d.view(np.uint32).astype(np.int64)
        field, mant = (bits >> 23) & 0xFF, bits & 0x7FFFFF
        b = field + np.where(field == 0, mant > 0x400000, mant != 0)
    else:
        bits = a.view(np.uint32).astype(np.int64)
        if scale_mode == "even":
            bits = (bits + (1 << (23 - mbits - 1))) & 0xFF800000  # a carry may reach 2^128: kept
        field, mant = (bits >> 23) & 0xFF, bits & 0x7FFFFF
        e = field - 127 + ((mant != 0) if scale_mode == "ceil" else 0) - emax
        b = np.clip(e, -127, 127) + 127
    return np.where(finite, np.minimum(b, 254), E8M0_NAN).astype(np.uint8)


# -- argument checks (public: the backends run the same checks before their own arithmetic) -----

@dataclass(frozen=True, eq=False)
class MxQuantizeArgs:
    """The checked arguments of :func:`mx_quantize` (:func:`mx_quantize_args`)."""

    x: np.ndarray
    """float32 / float16 / bfloat16 ``[..., K]`` (as given)."""
    elem_name: str
    """The element type: ``"e2m1"``, ``"e4m3"`` or ``"e5m2"``."""
    block_size: int
    """Elements per scale (K is a multiple of it)."""
    scale_mode: str
    """One of :data:`SCALE_MODES`."""


def mx_quantize_args(x, *, elem_dtype="e2m1", block_size=BLOCK_SIZE, scale_mode="floor") -> MxQuantizeArgs:
    """The argument checks of :func:`mx_quantize`, in its order."""
    op = "mx_quantize"
    x = _check.array(op, "x", x, dtypes=FLOAT_INPUTS, min_ndim=1)
    name = elem_name(op, "elem_dtype", elem_dtype)
    _check.choice(op, "scale_mode", scale_mode, SCALE_MODES)
    bs = _block(op, x, block_size)
    if _ELEMS[name][0] == "fp4" and x.shape[-1] % 2:
        _check.fail(op, "x", "of even last dimension for MXFP4 (two elements per byte)", _check.describe(x))
    return MxQuantizeArgs(x=x, elem_name=name, block_size=bs, scale_mode=scale_mode)


@dataclass(frozen=True, eq=False)
class MxDequantizeArgs:
    """The checked arguments of :func:`mx_dequantize` (:func:`mx_dequantize_args`)."""

    data: np.ndarray
    """Packed FP4 bytes uint8 ``[..., K/2]`` or an fp8 array ``[..., K]`` (as given)."""
    scale: np.ndarray
    """The E8M0 scale bytes ``[..., K/block_size]``, viewed as uint8."""
    elem_name: str
    """The element type: ``"e2m1"``, ``"e4m3"`` or ``"e5m2"``."""
    out: np.dtype
    """The output dtype: float32, bfloat16 or float16."""


def mx_dequantize_args(data, scale, *, elem_dtype="e2m1", block_size=BLOCK_SIZE,
                       output_dtype="float32") -> MxDequantizeArgs:
    """The argument checks of :func:`mx_dequantize`, in its order."""
    op = "mx_dequantize"
    name = elem_name(op, "elem_dtype", elem_dtype)
    data, shape = _data(op, "data", data, name)
    sf = _scale(op, "scale", scale, shape, block_size)
    return MxDequantizeArgs(data=data, scale=sf, elem_name=name, out=float_output(op, output_dtype))


@dataclass(frozen=True, eq=False)
class MxMatmulArgs:
    """The checked arguments of :func:`mx_matmul` (:func:`mx_matmul_args`)."""

    a_data: np.ndarray
    """A ``[M, K]``'s data: uint8 ``[M, K/2]`` (MXFP4) or fp8 ``[M, K]`` (as given)."""
    a_scale: np.ndarray
    """A's scale bytes ``[M, K/block_size]``, viewed as uint8."""
    b_data: np.ndarray
    """B ``[N, K]``'s data, likewise."""
    b_scale: np.ndarray
    """B's scale bytes ``[N, K/block_size]``, viewed as uint8."""
    a_elem_name: str
    """A's element type: ``"e2m1"``, ``"e4m3"`` or ``"e5m2"``."""
    b_elem_name: str
    """B's element type."""
    out: np.dtype
    """The output dtype: float32, bfloat16 or float16."""


def mx_matmul_args(a_data, a_scale, b_data, b_scale, *, elem_dtype="e2m1", b_elem_dtype=None, block_size=BLOCK_SIZE,
                   output_dtype="float32") -> MxMatmulArgs:
    """The argument checks of :func:`mx_matmul`, in its order."""
    op = "mx_matmul"
    a_name = elem_name(op, "elem_dtype", elem_dtype)
    b_name = a_name if b_elem_dtype is None else elem_name(op, "b_elem_dtype", b_elem_dtype)
    a_data, a_shape = _data(op, "a_data", a_data, a_name)
    a_scale = _scale(op, "a_scale", a_scale, a_shape, block_size)
    b_data, b_shape = _data(op, "b_data", b_data, b_name)
    b_scale = _scale(op, "b_scale", b_scale, b_shape, block_size)
    if len(a_shape) != 2 or len(b_shape) != 2 or a_shape[1] != b_shape[1]:
        _check.fail(op, "b_data", f"a 2-D [N, K] operand with K = {a_shape[-1]} (A is {a_shape})",
                    _check.describe(b_data))
    _check.within_budget(op, "b_data", (a_shape[0], b_shape[0]), 8, f"the output [M, N] = [{a_shape[0]}, {b_shape[0]}]")
    return MxMatmulArgs(a_data=a_data, a_scale=a_scale, b_data=b_data, b_scale=b_scale, a_elem_name=a_name,
                        b_elem_name=b_name, out=float_output(op, output_dtype))


@golden_op("lowbit", check=mx_quantize_args)
def mx_quantize(x: np.ndarray, *, elem_dtype="e2m1", block_size: int = BLOCK_SIZE,
                scale_mode: str = "floor") -> tuple[np.ndarray, np.ndarray]:
    """Quantize to MX along the last dimension: ``(data, scale)``.

    Parameters
    ----------
    x : float32 / float16 / bfloat16 ``[..., K]``, K a multiple of ``block_size``. NaN / Inf are
        allowed: their block gets the NaN scale (255).
    elem_dtype : ``"e2m1"`` (MXFP4, default), ``"e4m3"`` or ``"e5m2"`` (MXFP8); ml_dtypes dtypes
        are accepted too.
    block_size : 32 (the MX block; other positive sizes are accepted for experiments).
    scale_mode : ``"floor"`` (default), ``"ceil"``, ``"even"`` or ``"rceil"``.

    Returns
    -------
    data : MXFP4: uint8 ``[..., K/2]`` (element 2j in the low nibble); MXFP8: ``float8_e4m3fn`` /
        ``float8_e5m2`` ``[..., K]``.
    scale : uint8 ``[..., K/block_size]``, the biased E8M0 exponent.

    Formula (fp32): ``amax = max|x|`` per block; ``b`` by ``scale_mode`` (:func:`mx_shared_exponent`);
    ``P = cast_sat(x * 2^(127 - b))`` (exact power-of-two multiply, RNE cast, clamp to +-vmax);
    blocks with ``b = 255`` get zero codes.

    Errors: TypeError for x's dtype; ValueError for rank 0, K % block_size, elem_dtype, scale_mode.
    """
    a = mx_quantize_args(x, elem_dtype=elem_dtype, block_size=block_size, scale_mode=scale_mode)
    x, name, bs = a.x, a.elem_name, a.block_size
    storage = _ELEMS[name][0]
    blocks = x.astype(np.float32).reshape(x.shape[:-1] + (x.shape[-1] // bs, bs))
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(blocks), axis=-1, initial=0) if bs else np.zeros(blocks.shape[:-1], np.float32)
    scale = mx_shared_exponent(amax.astype(np.float32), name, scale_mode=scale_mode)
    nan = scale == E8M0_NAN
    inv = np.take(E8M0_TABLE, np.where(nan, 127, 254 - scale.astype(np.int64)))  # 2^(127 - b), exact
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.where(nan[..., None], np.float32(0), blocks * inv[..., None]).reshape(x.shape)
    if storage == "fp4":
        return pack_fp4(float_to_e2m1(scaled)), scale
    return float_to_fp8(scaled, name), scale


@golden_op("lowbit", check=mx_dequantize_args)
def mx_dequantize(data: np.ndarray, scale: np.ndarray, *, elem_dtype="e2m1", block_size: int = BLOCK_SIZE,
                  output_dtype="float32") -> np.ndarray:
    """``V^ = P * 2^(b - 127)``: fp32 product (exact unless it overflows fp32), RNE cast to output_dtype.

    ``data`` and ``scale`` as :func:`mx_quantize` returns them (a ``float8_e8m0fnu`` scale is
    accepted too); byte 255 decodes to NaN for its whole block.
    """
    a = mx_dequantize_args(data, scale, elem_dtype=elem_dtype, block_size=block_size, output_dtype=output_dtype)
    data, sf, name, out = a.data, a.scale, a.elem_name, a.out
    p = _decode(data, name)
    with np.errstate(over="ignore", invalid="ignore"):
        v = _blocks(p, sf) * np.take(E8M0_TABLE, sf)[..., None]
    return to_float(v.reshape(p.shape).astype(np.float32), out)


@golden_op("lowbit", check=mx_matmul_args)
def mx_matmul(a_data: np.ndarray, a_scale: np.ndarray, b_data: np.ndarray, b_scale: np.ndarray, *,
              elem_dtype="e2m1", b_elem_dtype=None, block_size: int = BLOCK_SIZE,
              output_dtype="float32") -> np.ndarray:
    """Block-scaled matmul ``y = A @ B^T`` of two MX operands, both blocked along K.

    Parameters
    ----------
    a_data, a_scale : ``A [M, K]`` as :func:`mx_quantize` returns it (``[M, K/2]`` / ``[M, K]``,
        scale ``[M, K/32]``).
    b_data, b_scale : ``B [N, K]`` likewise (the weight in ``nn.Linear`` layout).
    elem_dtype : A's element type; ``b_elem_dtype`` B's (default: the same; MXFP8 x MXFP4 is
        allowed).
    output_dtype : float32 (default), bfloat16 or float16.

    Formula: ``y[m, n] = sum_k A^[m, k] * B^[n, k]`` with ``A^ = P * 2^(b - 127)`` exact in
    float64, accumulated in float64, rounded once to fp32, then RNE to ``output_dtype``. A NaN
    scale makes every output it touches NaN (the OCP MX definition: accepted, as NaN elements are).

    Errors (:func:`mx_matmul_args`): ValueError for shapes, element types, block sizes, and an
    ``[M, N]`` output beyond the allocation budget (:func:`w8a8._check.within_budget`; 4 GiB or ``W8A8_GOLDEN_MAX_BYTES``).
    """
    p = mx_matmul_args(a_data, a_scale, b_data, b_scale, elem_dtype=elem_dtype, b_elem_dtype=b_elem_dtype,
                       block_size=block_size, output_dtype=output_dtype)
    a_data, a_scale, b_data, b_scale, a_name, b_name, out = (p.a_data, p.a_scale, p.b_data, p.b_scale, p.a_elem_name,
                                                             p.b_elem_name, p.out)
    a = _dequant64(a_data, a_scale, a_name)
    b = _dequant64(b_data, b_scale, b_name)
    with np.errstate(over="ignore", invalid="ignore"):
        y = (a @ b.T).astype(np.float32)
    return to_float(y, out)


def mx_from_gptoss(blocks: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """gpt-oss ``*.blocks`` (uint8 ``[..., G, 16]``) and ``*.scales`` (uint8 ``[..., G]``) -> MXFP4
    ``(data [..., G*16], scale [..., G])``, K = 32 G. The bytes are already this module's layout
    (low nibble = even element; scale = biased exponent), so only the shape changes."""
    op = "mx_from_gptoss"
    blocks = _check.array(op, "blocks", blocks, dtypes=(np.uint8,), min_ndim=2)
    if blocks.shape[-1] != BLOCK_SIZE // 2:
        _check.fail(op, "blocks", "uint8 [..., G, 16] (16 bytes = 32 FP4 values per block)", _check.describe(blocks))
    scales = _check.array(op, "scales", scales, dtypes=(np.uint8,))
    _check.shape(op, "scales", scales, [blocks.shape[:-1]], f"uint8 of shape blocks.shape[:-1] = {blocks.shape[:-1]}")
    return blocks.reshape(blocks.shape[:-2] + (blocks.shape[-2] * blocks.shape[-1],)), scales


def mx_to_gptoss(data: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`mx_from_gptoss`: MXFP4 ``(data [..., K/2], scale [..., K/32])`` -> gpt-oss
    ``(blocks [..., K/32, 16], scales [..., K/32])``."""
    op = "mx_to_gptoss"
    data = _check.array(op, "data", data, dtypes=(np.uint8,), min_ndim=1)
    scale = _check.array(op, "scale", scale, dtypes=(np.uint8,), min_ndim=1)
    if scale.shape[:-1] != data.shape[:-1] or data.shape[-1] != scale.shape[-1] * (BLOCK_SIZE // 2):
        _check.fail(op, "scale", f"uint8 [..., K/32] matching data {data.shape} (16 bytes per scale)",
                    _check.describe(scale))
    return data.reshape(data.shape[:-1] + (scale.shape[-1], BLOCK_SIZE // 2)), scale


def _block(op: str, x: np.ndarray, block_size) -> int:
    bs = _check.integer(op, "block_size", block_size, minimum=1)
    if x.shape[-1] % bs:
        _check.fail(op, "x", f"of last dimension a multiple of block_size = {bs}", _check.describe(x))
    return bs


def _data(op: str, arg: str, data, name: str) -> tuple[np.ndarray, tuple]:
    """The checked MX data (packed FP4 bytes or an fp8 array) and its element shape ``[..., K]``."""
    storage = _ELEMS[name][0]
    if storage == "fp4":
        data = _check.array(op, arg, data, dtypes=(np.uint8,), min_ndim=1)
        return data, data.shape[:-1] + (2 * data.shape[-1],)
    data = _check.array(op, arg, data, dtypes=(storage,), min_ndim=1)
    return data, data.shape


def _decode(data: np.ndarray, name: str) -> np.ndarray:
    """fp32 element values ``[..., K]`` of checked MX data."""
    if _ELEMS[name][0] == "fp4":
        return fp4_to_float(data)
    return np.take(_ELEMS[name][4], data.view(np.uint8))


def _scale(op: str, arg: str, scale, shape: tuple, block_size) -> np.ndarray:
    scale = _check.array(op, arg, scale, dtypes=(np.uint8, _dt.float8_e8m0fnu), min_ndim=1)
    scale = scale.view(np.uint8)
    bs = _check.integer(op, "block_size", block_size, minimum=1)
    if scale.shape[:-1] != shape[:-1] or scale.shape[-1] * bs != shape[-1]:
        _check.fail(op, arg, f"of shape {shape[:-1] + (shape[-1] // bs,)} (one per {bs} elements)",
                    _check.describe(scale))
    return scale


def _dequant64(data, scale, name) -> np.ndarray:
    p = _decode(data, name)
    v = _blocks(p.astype(np.float64), scale) * np.take(E8M0_TABLE, scale).astype(np.float64)[..., None]
    return v.reshape(p.shape)


def _blocks(p: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Elements ``[..., K]`` viewed as ``[..., K/bs, bs]`` against their scales ``[..., K/bs]``."""
    return p.reshape(scale.shape + (p.shape[-1] // max(scale.shape[-1], 1),))
