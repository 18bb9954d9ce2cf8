"""NVFP4: E2M1 elements, an E4M3 scale per 16 along K, and an fp32 tensor-level scale.

torchao ``prototype/mx_formats/nvfp4_tensor.py::nvfp4_quantize``. Two-level scaling: ``x^ = q * s_b * S`` with ``q``
E2M1, ``s_b`` an (effectively unsigned) E4M3 block scale and ``S`` one fp32 scale per tensor.

Conventions chosen (where the sources differ)

* **Tensor scale, two spellings.** torchao / ModelOpt keep the *dequantization multiplier*
  ``S = amax / (448 * 6)`` (:func:`nvfp4_per_tensor_scale`); vLLM ``scaled_fp4_quant``, flashinfer
  ``fp4_quantize`` and compressed-tensors keep its reciprocal, ``global_scale = 448 * 6 / amax``
  (:func:`nvfp4_global_scale`). The GEMM's alpha is ``S_a * S_b = 1 / (gs_a * gs_b)``. Each
  quantizer / dequantizer takes exactly one of ``per_tensor_scale=`` or ``global_scale=`` and then
  follows **that** library's fp32 order of operations bit for bit — an fp32 reciprocal is not
  exact, so ``1 / (1 / S)`` may differ from S in the last bit and the two orders may pick a
  different code near a tie; quantize with the convention the checkpoint was written with.
  An all-zero tensor (amax = 0, or one so small that S / gs is not a positive finite fp32) gets
  ``S = 1`` / ``gs = 1`` from the helpers (the libraries divide by 0: torchao 0.18's
  ``per_tensor_amax_to_scale(0)`` is 0, and its quantizer then writes NaN block scales): every
  code is then 0.

  - ``per_tensor_scale=S`` (torchao's convention, ``per_tensor_amax_to_scale``)::

        s_b = e4m3( clamp( (amax_b / 6) / S, 2^-6, 448 ) )      fp32 divisions, RNE cast
        q   = e2m1( clamp( x / (S * fp32(s_b)), -6, 6 ) )        RNE   (Numerics.nvfp4_codes="div_total")
        q   = e2m1( clamp( x * ((1 / S) / fp32(s_b)), -6, 6 ) )  RNE   ("mul_rcp_chain": torchao 0.18)

    The block scale is torchao's; the **code order is not**: torchao 0.18 ``nvfp4_quantize``
    (``nvfp4_tensor.py``) multiplies by ``r = fp32(fp32(1 / S) / fp32(s_b))``, which picks another
    code than ``x / (S * s_b)`` for about 13 % of the bytes (measured against torchao 0.18:
    ``tests/backends/test_torchao.py``). NVFP4 has no Ascend kernel, so the default stays the
    golden's documented ``"div_total"`` (one rounding of the total scale, then one division) and a
    torchao backend declares ``nvfp4_codes="mul_rcp_chain"``. torchao without a tensor scale
    (``per_tensor_scale=None``: ``r = 1 / s_b``) is ``S = 1`` under ``"mul_rcp_chain"``.

  - ``global_scale=gs`` (vLLM ``ref_nvfp4_quant``)::

        s_b = e4m3( min( gs * (amax_b * fp32(1/6)), 448 ) )     no lower clamp: s_b may be 0
        r   = 1 / (fp32(s_b) * (1 / gs))   (0 where the product is 0)
        q   = e2m1( clamp( x * r, -6, 6 ) )

* Dequantization: ``q * (S * s_b)`` or ``q * (s_b / gs)`` in fp32 (torchao / vLLM).
* E2M1 rounding RNE (vLLM's ``cast_to_fp4`` thresholds send ties to the even code too).
* Storage: data uint8 ``[..., K/2]`` (low nibble = even k), block scales ``float8_e4m3fn``
  ``[..., K/16]`` in the **linear** layout; kernels want them swizzled
  (:func:`swizzle_block_scales`).
* Matmul (:func:`nvfp4_matmul`): ``y = alpha * sum (q_a s_a)(q_b s_b)``, the sum exact in float64,
  rounded once to fp32, then multiplied by ``alpha`` in fp32 and cast to ``output_dtype``.
* NaN / Inf input is refused (NVFP4 has no encoding for them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from ..rounding import to_float
from ._common import FLOAT_INPUTS, float_output
from .minifloat import (E2M1_MAX, E4M3_MAX, E4M3_TABLE, E4M3_TINY, float_to_e2m1, float_to_fp8, fp4_to_float,
                        pack_fp4)

__all__ = ["nvfp4_quantize", "nvfp4_dequantize", "nvfp4_matmul", "nvfp4_per_tensor_scale", "nvfp4_global_scale",
           "swizzle_block_scales", "unswizzle_block_scales"]

BLOCK_SIZE = 16
_F32 = np.float32


def nvfp4_per_tensor_scale(amax) -> np.ndarray:
    """``S = amax / (448 * 6)`` in fp32 (torchao ``per_tensor_amax_to_scale``).

    ``amax`` is a non-negative finite scalar or array (e.g. ``np.abs(x).max()``). Where S is not a
    positive fp32 — amax 0, or below ~3.8e-42 where the division underflows to 0 — the golden
    returns 1 (the libraries would divide by 0); every code of such a tensor is then 0.
    """
    a = _amax("nvfp4_per_tensor_scale", amax)
    with np.errstate(under="ignore"):
        s = a / _F32(E4M3_MAX * E2M1_MAX)
    return np.where(s == 0, _F32(1), s).astype(np.float32)


def nvfp4_global_scale(amax) -> np.ndarray:
    """``global_scale = 448 * 6 / amax`` in fp32 (vLLM / flashinfer / compressed-tensors
    ``generate_gparam``), the reciprocal of :func:`nvfp4_per_tensor_scale`. Where it is not a finite
    fp32 — amax 0, or below ~7.9e-36 where the division overflows — the golden returns 1."""
    a = _amax("nvfp4_global_scale", amax)
    with np.errstate(divide="ignore", over="ignore"):
        gs = _F32(E4M3_MAX * E2M1_MAX) / a
    return np.where(np.isfinite(gs), gs, _F32(1)).astype(np.float32)


# -- argument checks (public: the backends run the same checks before their own arithmetic) -----

@dataclass(frozen=True, eq=False)
class Nvfp4QuantizeArgs:
    """The checked arguments of :func:`nvfp4_quantize` (:func:`nvfp4_quantize_args`)."""

    x: np.ndarray
    """float32 / float16 / bfloat16 ``[..., K]``, finite, K a multiple of 16 (as given)."""
    convention: str
    """Which tensor scale was given: ``"per_tensor_scale"`` (torchao ``S``) or ``"global_scale"`` (vLLM ``1/S``)."""
    tensor_scale: np.float32
    """Its value in fp32, positive and finite."""


def nvfp4_quantize_args(x, *, per_tensor_scale=None, global_scale=None,
                        numerics: Numerics = ASCEND) -> Nvfp4QuantizeArgs:
    """The argument checks of :func:`nvfp4_quantize`, in its order."""
    op = "nvfp4_quantize"
    if not isinstance(numerics, Numerics):
        _check.fail(op, "numerics", "a w8a8.Numerics", _check.describe(numerics), TypeError)
    x = _check.array(op, "x", x, dtypes=FLOAT_INPUTS, min_ndim=1)
    _check.finite(op, "x", x)
    kind, t = _tensor_scale(op, per_tensor_scale, global_scale)
    if x.shape[-1] % BLOCK_SIZE:
        _check.fail(op, "x", f"of last dimension a multiple of {BLOCK_SIZE} (the NVFP4 block)", _check.describe(x))
    return Nvfp4QuantizeArgs(x=x, convention=kind, tensor_scale=t)


@dataclass(frozen=True, eq=False)
class Nvfp4DequantizeArgs:
    """The checked arguments of :func:`nvfp4_dequantize` (:func:`nvfp4_dequantize_args`)."""

    data: np.ndarray
    """uint8 ``[..., K/2]`` (as given)."""
    block_scale: np.ndarray
    """``float8_e4m3fn`` ``[..., K/16]``, linear layout (as given)."""
    convention: str
    """``"per_tensor_scale"`` or ``"global_scale"``."""
    tensor_scale: np.float32
    """Its value in fp32."""
    out: np.dtype
    """The output dtype: float32, bfloat16 or float16."""


def nvfp4_dequantize_args(data, block_scale, *, per_tensor_scale=None, global_scale=None,
                          output_dtype="float32") -> Nvfp4DequantizeArgs:
    """The argument checks of :func:`nvfp4_dequantize`, in its order."""
    op = "nvfp4_dequantize"
    data, block_scale = _operand(op, "data", data, "block_scale", block_scale)
    kind, t = _tensor_scale(op, per_tensor_scale, global_scale)
    return Nvfp4DequantizeArgs(data=data, block_scale=block_scale, convention=kind, tensor_scale=t,
                               out=float_output(op, output_dtype))


@dataclass(frozen=True, eq=False)
class Nvfp4MatmulArgs:
    """The checked arguments of :func:`nvfp4_matmul` (:func:`nvfp4_matmul_args`)."""

    a_data: np.ndarray
    """A: uint8 ``[M, K/2]`` (as given)."""
    a_block_scale: np.ndarray
    """A's ``float8_e4m3fn`` ``[M, K/16]``."""
    b_data: np.ndarray
    """B (the weight, ``nn.Linear`` layout): uint8 ``[N, K/2]``."""
    b_block_scale: np.ndarray
    """B's ``float8_e4m3fn`` ``[N, K/16]``."""
    alpha: np.ndarray
    """``alpha`` as a 0-d float32 array, finite."""
    out: np.dtype
    """The output dtype: bfloat16, float16 or float32."""


def nvfp4_matmul_args(a_data, a_block_scale, b_data, b_block_scale, alpha, *,
                      output_dtype="bfloat16") -> Nvfp4MatmulArgs:
    """The argument checks of :func:`nvfp4_matmul`, in its order."""
    op = "nvfp4_matmul"
    a_data, a_block_scale = _operand(op, "a_data", a_data, "a_block_scale", a_block_scale)
    b_data, b_block_scale = _operand(op, "b_data", b_data, "b_block_scale", b_block_scale)
    if a_data.ndim != 2 or b_data.ndim != 2 or a_data.shape[1] != b_data.shape[1]:
        _check.fail(op, "b_data", f"a 2-D [N, K/2] operand with K = {2 * a_data.shape[-1]} "
                    f"(A is {a_data.shape[:-1] + (2 * a_data.shape[-1],)})", _check.describe(b_data))
    m, n = a_data.shape[0], b_data.shape[0]
    _check.within_budget(op, "b_data", (m, n), 8, f"the output [M, N] = [{m}, {n}]")
    al = np.asarray(alpha, dtype=np.float32)
    if al.size != 1 or not np.isfinite(al).all():
        _check.fail(op, "alpha", "a finite fp32 scalar (S_a * S_b)", _check.describe(np.asarray(alpha)))
    return Nvfp4MatmulArgs(a_data=a_data, a_block_scale=a_block_scale, b_data=b_data, b_block_scale=b_block_scale,
                           alpha=al.reshape(()), out=float_output(op, output_dtype))


@dataclass(frozen=True, eq=False)
class SwizzleBlockScalesArgs:
    """The checked argument of :func:`swizzle_block_scales` (:func:`swizzle_block_scales_args`)."""

    scale: np.ndarray
    """``[..., M, S]`` of any dtype (as given)."""


def swizzle_block_scales_args(scale) -> SwizzleBlockScalesArgs:
    """The argument check of :func:`swizzle_block_scales`: an array of at least 2 dims."""
    return SwizzleBlockScalesArgs(scale=_check.array("swizzle_block_scales", "scale", scale, min_ndim=2))


@golden_op("lowbit", check=nvfp4_quantize_args)
def nvfp4_quantize(x: np.ndarray, *, per_tensor_scale=None, global_scale=None,
                   numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray]:
    """Quantize to NVFP4 along the last dimension: ``(data, block_scale)``.

    Parameters
    ----------
    x : float32 / float16 / bfloat16 ``[..., K]``, finite, K a multiple of 16.
    per_tensor_scale : fp32 ``S`` (torchao convention), a positive finite scalar — or
    global_scale : fp32 ``gs = 1 / S`` (vLLM convention). Exactly one of the two.
    numerics : ``nvfp4_codes`` (with ``per_tensor_scale``: the golden's ``x / (S * s_b)`` or
        torchao's ``x * ((1 / S) / s_b)``).

    Returns
    -------
    data : uint8 ``[..., K/2]``, two E2M1 codes per byte, low nibble = even k.
    block_scale : ``float8_e4m3fn`` ``[..., K/16]`` (linear layout).

    Formula: module docstring (the order of the chosen convention).

    Errors: TypeError for dtypes; ValueError for K % 16, NaN/Inf in x, a missing or double
    tensor scale, a non-positive or non-finite one.
    """
    a = nvfp4_quantize_args(x, per_tensor_scale=per_tensor_scale, global_scale=global_scale, numerics=numerics)
    x, kind, t = a.x, a.convention, a.tensor_scale
    bs = BLOCK_SIZE
    blocks = x.astype(np.float32).reshape(x.shape[:-1] + (x.shape[-1] // bs, bs))
    amax = np.max(np.abs(blocks), axis=-1, initial=0).astype(np.float32)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if kind == "per_tensor_scale":
            s = np.clip((amax / _F32(E2M1_MAX)) / t, _F32(E4M3_TINY), _F32(E4M3_MAX))
            s8 = float_to_fp8(s, "e4m3")
            sb = np.take(E4M3_TABLE, s8.view(np.uint8))
            if numerics.nvfp4_codes == "mul_rcp_chain":   # torchao 0.18: r = (1 / S) / s_b
                scaled = blocks * ((_F32(1) / t) / sb)[..., None]
            else:
                scaled = blocks / (t * sb)[..., None]
        else:
            s = np.minimum(t * (amax * (_F32(1) / _F32(E2M1_MAX))), _F32(E4M3_MAX))
            s8 = float_to_fp8(s, "e4m3")
            prod = np.take(E4M3_TABLE, s8.view(np.uint8)) * (_F32(1) / t)
            r = np.where(prod == 0, _F32(0), _F32(1) / prod)
            scaled = blocks * r[..., None]
        scaled = np.clip(scaled, _F32(-E2M1_MAX), _F32(E2M1_MAX)).astype(np.float32)
    return pack_fp4(float_to_e2m1(scaled.reshape(x.shape))), s8


@golden_op("lowbit", check=nvfp4_dequantize_args)
def nvfp4_dequantize(data: np.ndarray, block_scale: np.ndarray, *, per_tensor_scale=None, global_scale=None,
                     output_dtype="float32") -> np.ndarray:
    """``q * (S * s_b)`` (``per_tensor_scale``) or ``q * (s_b / gs)`` (``global_scale``), fp32, then
    an RNE cast to ``output_dtype`` (float32, bfloat16, float16).

    ``data`` uint8 ``[..., K/2]``, ``block_scale`` ``float8_e4m3fn`` ``[..., K/16]`` (linear layout).

    Errors (:func:`nvfp4_dequantize_args`): TypeError for dtypes; ValueError for shapes, the tensor
    scale, and an e4m3 NaN code in ``block_scale`` (always: :func:`nvfp4_quantize` never writes one).
    """
    p = nvfp4_dequantize_args(data, block_scale, per_tensor_scale=per_tensor_scale, global_scale=global_scale,
                              output_dtype=output_dtype)
    data, block_scale, kind, t, out = p.data, p.block_scale, p.convention, p.tensor_scale, p.out
    q, s = _decode(data, block_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        total = t * s if kind == "per_tensor_scale" else s / t
        v = q.reshape(s.shape + (BLOCK_SIZE,)) * total[..., None]
    return to_float(v.reshape(q.shape).astype(np.float32), out)


@golden_op("lowbit", check=nvfp4_matmul_args)
def nvfp4_matmul(a_data: np.ndarray, a_block_scale: np.ndarray, b_data: np.ndarray, b_block_scale: np.ndarray,
                 alpha, *, output_dtype="bfloat16") -> np.ndarray:
    """NVFP4 GEMM ``y = alpha * (A @ B^T)`` with block-scaled operands blocked along K.

    Parameters
    ----------
    a_data, a_block_scale : ``A [M, K]``: uint8 ``[M, K/2]``, ``float8_e4m3fn`` ``[M, K/16]``.
    b_data, b_block_scale : ``B [N, K]`` likewise (the weight, ``nn.Linear`` layout).
    alpha : fp32 scalar ``S_a * S_b`` (torchao) = ``1 / (gs_a * gs_b)`` (vLLM, flashinfer).
    output_dtype : bfloat16 (default), float16 or float32.

    Formula: ``acc = sum_k (q_a s_a)(q_b s_b)`` exact in float64 (each factor is exact), rounded
    once to fp32; ``y = cast(acc * fp32(alpha))``.

    Errors (:func:`nvfp4_matmul_args`): TypeError for dtypes; ValueError for shapes, a non-finite
    ``alpha``, an e4m3 NaN code in a block scale (always), and an ``[M, N]`` output beyond the allocation budget (:func:`w8a8._check.within_budget`; 4 GiB or ``W8A8_GOLDEN_MAX_BYTES``).
    """
    p = nvfp4_matmul_args(a_data, a_block_scale, b_data, b_block_scale, alpha, output_dtype=output_dtype)
    a_data, a_block_scale, b_data, b_block_scale, al, out = (p.a_data, p.a_block_scale, p.b_data, p.b_block_scale,
                                                             p.alpha, p.out)
    qa, sa = _decode(a_data, a_block_scale)
    qb, sb = _decode(b_data, b_block_scale)
    a = (qa.reshape(sa.shape + (BLOCK_SIZE,)) * sa[..., None].astype(np.float64)).reshape(qa.shape)
    b = (qb.reshape(sb.shape + (BLOCK_SIZE,)) * sb[..., None].astype(np.float64)).reshape(qb.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        y = (a @ b.T).astype(np.float32) * al.reshape(())
    return to_float(y.astype(np.float32), out)


@golden_op("lowbit", check=swizzle_block_scales_args)
def swizzle_block_scales(scale: np.ndarray) -> np.ndarray:
    """The 128x4 swizzled block-scale layout of the CUTLASS / cuBLAS / flashinfer FP4 kernels.

    ``scale [..., M, S]`` (any dtype; ``S = K/16``) is zero-padded to ``[..., Mp, Sp]`` with
    ``Mp = ceil(M/128)*128``, ``Sp = ceil(S/4)*4``, viewed as ``(B, Mp/128, 4, 32, Sp/4, 4)``, its
    axes permuted to ``(0, 1, 4, 3, 2, 5)`` and flattened back to ``[..., Mp, Sp]`` (vLLM
    ``swizzle_blockscale``). So scale ``(r, c)`` lands at flat offset
    ``((r//128 * Sp/4 + c//4) * 32 + r%32) * 16 + (r%128)//32 * 4 + c%4`` of each batch.
    """
    scale = swizzle_block_scales_args(scale).scale
    *lead, m, s = scale.shape
    mp, sp = -(-m // 128) * 128, -(-s // 4) * 4
    padded = np.zeros(tuple(lead) + (mp, sp), dtype=scale.dtype)
    padded[..., :m, :s] = scale
    tiles = padded.reshape(tuple(lead) + (mp // 128, 4, 32, sp // 4, 4))
    nl = len(lead)
    perm = tuple(range(nl)) + tuple(nl + i for i in (0, 3, 2, 1, 4))
    return np.ascontiguousarray(tiles.transpose(perm)).reshape(tuple(lead) + (mp, sp))


def unswizzle_block_scales(swizzled: np.ndarray, m: int, s: int) -> np.ndarray:
    """Inverse of :func:`swizzle_block_scales`: ``[..., Mp, Sp]`` -> the linear ``[..., m, s]``
    (vLLM ``convert_swizzled_to_linear``: view as ``(Mp/128, Sp/4, 32, 4, 4)``, permute back, crop)."""
    op = "unswizzle_block_scales"
    swizzled = _check.array(op, "swizzled", swizzled, min_ndim=2)
    m = _check.integer(op, "m", m, minimum=0)
    s = _check.integer(op, "s", s, minimum=0)
    mp, sp = -(-m // 128) * 128, -(-s // 4) * 4
    *lead, rows, cols = swizzled.shape
    if (rows, cols) != (mp, sp):
        _check.fail(op, "swizzled", f"of padded shape [..., {mp}, {sp}] for m = {m}, s = {s}",
                    _check.describe(swizzled))
    tiles = swizzled.reshape(tuple(lead) + (mp // 128, sp // 4, 32, 4, 4))
    nl = len(lead)
    perm = tuple(range(nl)) + tuple(nl + i for i in (0, 3, 2, 1, 4))
    linear = tiles.transpose(perm).reshape(tuple(lead) + (mp, sp))
    return np.ascontiguousarray(linear[..., :m, :s])


def _amax(op: str, amax) -> np.ndarray:
    a = np.asarray(amax, dtype=np.float32)
    if not np.isfinite(a).all() or (a < 0).any():
        _check.fail(op, "amax", "a finite amax >= 0", _check.describe(np.asarray(amax)))
    return a


def _tensor_scale(op: str, per_tensor_scale, global_scale) -> tuple[str, np.float32]:
    if (per_tensor_scale is None) == (global_scale is None):
        _check.fail(op, "per_tensor_scale", "given, or global_scale given — exactly one of the two "
                    "(S = amax/2688, or its reciprocal global_scale = 2688/amax)",
                    "both" if per_tensor_scale is not None else "neither")
    if per_tensor_scale is not None:
        kind, value = "per_tensor_scale", per_tensor_scale
    else:
        kind, value = "global_scale", global_scale
    v = np.asarray(value)
    if v.size != 1 or v.dtype.kind != "f":
        _check.fail(op, kind, "a float32 scalar", _check.describe(v))
    v32 = np.float32(v.reshape(()))
    if not (np.isfinite(v32) and v32 > 0):
        _check.fail(op, kind, "positive and finite", repr(float(v32)))
    return kind, v32


def _operand(op: str, data_arg: str, data, scale_arg: str, scale) -> tuple[np.ndarray, np.ndarray]:
    """The checked ``(data uint8 [..., K/2], block scale float8_e4m3fn [..., K/16])`` of one operand."""
    data = _check.array(op, data_arg, data, dtypes=(np.uint8,), min_ndim=1)
    scale = _check.array(op, scale_arg, scale, dtypes=(_dt.float8_e4m3fn,), min_ndim=1)
    k = data.shape[-1] * 2
    if scale.shape[:-1] != data.shape[:-1] or scale.shape[-1] * BLOCK_SIZE != k:
        _check.fail(op, scale_arg, f"float8_e4m3fn of shape {data.shape[:-1] + (k // BLOCK_SIZE,)} "
                    f"(one per {BLOCK_SIZE} elements, linear layout)", _check.describe(scale))
    # e4m3's NaN codes (0x7F, 0xFF): nvfp4_quantize never writes them (it refuses non-finite input), so one is a
    # corrupted scale, whose decode the kernels do not agree on: refused, as the quantizer's input is
    _check.finite(op, scale_arg, scale, ieee_escape=False)
    return data, scale


def _decode(data: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fp32 element values ``[..., K]``, fp32 block scales ``[..., K/16]``) of a checked operand."""
    return fp4_to_float(data), np.take(E4M3_TABLE, scale.view(np.uint8))
