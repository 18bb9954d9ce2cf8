"""FP8 block quantization, DeepSeek-V3 style: E4M3 with 128x128 weight tiles and 1x128 activations.

DeepSeek-V3 ``inference/kernel.py``. Weights ``W [N, K]`` are ``float8_e4m3fn`` with one fp32 scale per
128x128 tile, ``weight_scale_inv [ceil(N/128), ceil(K/128)]`` — despite the name, the
*dequantization multiplier*: ``W^ = W_q * s``. Activations get one scale per token per 128
channels, ``s [M, ceil(K/128)]``. Partial tiles at the right / bottom edges are ordinary (smaller)
blocks.

Conventions chosen (where the sources differ)

* ``scale_fmt=None`` (DeepSeek-V3): ``s = max(amax, eps) / 448`` (fp32 division) with
  ``eps = 1e-10`` — vLLM ``per_token_group_quant_fp8``'s guard; V3's own ``act_quant`` has none, so
  an all-zero block there is 0/0. An all-zero block therefore gets ``s = 1e-10/448`` and zero codes.
* ``scale_fmt="ue8m0"`` (V3.1 / V3.2 ``fast_round_scale``): ``s = 2^ceil(log2(max(amax, 1e-4) *
  fp32(1/448)))`` — a power of two rounded up (the same rule as MX ``"rceil"`` for E4M3), so no
  element exceeds 448.
* Codes: ``q = e4m3(clamp(x / s, -448, 448))``, fp32 division, RNE cast, saturating (vLLM clamps;
  the clamp also keeps ml_dtypes from producing NaN beyond 464).
* Matmul (:func:`fp8_block_matmul`) with per-128-K **fp32 promotion**, in the order of DeepSeek-V3
  ``inference/kernel.py::fp8_gemm_kernel``::

      for kb in K blocks:                        (ascending)
          P   = fp32( sum_{k in kb} a_q[m, k] * w_q[n, k] )   exact (float64) then one rounding
          acc = acc + (P * s_a[m, kb]) * s_w[n // 128, kb]    fp32, left to right
      y = cast(acc)                               RNE to output_dtype

  The partial sum ``P`` is exact before its rounding: E4M3 values are multiples of 2^-9 below
  2^9, so 128 products stay below 2^53 units of 2^-18. A tensor core's fp32 accumulation inside a
  block rounds differently (DeepGEMM promotes every 128 exactly because of it): a tolerance
  matter. DeepGEMM's own epilogue multiplies ``P * (s_a * s_w)``: an ulp-level difference.
* NaN / Inf input is refused, and so is an e4m3 NaN code (0x7F / 0xFF) in the codes or scales the
  dequantizer and the GEMM read: the quantizers never write one, so it marks a corrupted tensor.
* The quantizers pad to whole blocks and the dequantizer repeats each scale over its block: a
  ``block_shape`` / ``group_size`` / ``block_size`` whose padded fp32 tensor (or the GEMM's ``[M, N]``
  accumulator) exceeds the allocation budget (:func:`w8a8._check.within_budget`: 4 GiB or
  ``W8A8_GOLDEN_MAX_BYTES``) is refused, naming the argument, before anything is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..registry import golden_op
from ..rounding import to_float
from ._common import FLOAT_INPUTS, float_output
from .minifloat import E4M3_MAX, E4M3_TABLE, E8M0_TABLE, float_to_fp8
from .mx import mx_shared_exponent

__all__ = ["fp8_block_quantize", "per_token_group_quant_fp8", "fp8_block_dequantize", "fp8_block_matmul"]

BLOCK = 128
SCALE_FMTS = (None, "ue8m0")
_F32 = np.float32


def scale_fmt_eps(op: str, scale_fmt, eps) -> np.float32:
    """Check ``scale_fmt`` and ``eps`` (public: the backends run the same check); the fp32 amax floor
    (default 1e-10, or 1e-4 for ``"ue8m0"``)."""
    _check.choice(op, "scale_fmt", scale_fmt, SCALE_FMTS)
    if eps is None:
        eps = 1e-4 if scale_fmt == "ue8m0" else 1e-10
    e = np.float32(eps)
    if not (np.isfinite(e) and e > 0):
        _check.fail(op, "eps", "a positive finite float", repr(eps))
    return e


def _scale(amax: np.ndarray, scale_fmt, e: np.float32) -> np.ndarray:
    """fp32 scale of blocks with fp32 ``amax`` and the checked amax floor ``e`` (module docstring)."""
    a = np.maximum(amax, e).astype(np.float32)
    if scale_fmt == "ue8m0":
        return np.take(E8M0_TABLE, mx_shared_exponent(a, "e4m3", scale_mode="rceil"))
    return (a / _F32(E4M3_MAX)).astype(np.float32)


def _quantize_blocks(x: np.ndarray, rows: int, cols: int, scale_fmt, e: np.float32):
    """Blocks of ``rows x cols`` over the last two dims of fp32 ``x [..., R, C]`` (edges partial)."""
    *lead, r, c = x.shape
    rb, cb = -(-r // rows), -(-c // cols)
    padded = np.zeros(tuple(lead) + (rb * rows, cb * cols), np.float32)
    padded[..., :r, :c] = np.abs(x)
    tiles = padded.reshape(tuple(lead) + (rb, rows, cb, cols))
    amax = tiles.max(axis=(-3, -1), initial=0) if rows * cols else np.zeros(tuple(lead) + (rb, cb), np.float32)
    s = _scale(amax, scale_fmt, e)
    full = np.repeat(np.repeat(s, rows, axis=-2), cols, axis=-1)[..., :r, :c]
    with np.errstate(over="ignore", invalid="ignore"):
        q = float_to_fp8(np.clip(x / full, _F32(-E4M3_MAX), _F32(E4M3_MAX)), "e4m3")
    return q, s


# -- argument checks (public: the backends run the same checks before their own arithmetic) -----

@dataclass(frozen=True, eq=False)
class Fp8BlockQuantizeArgs:
    """The checked arguments of :func:`fp8_block_quantize` (:func:`fp8_block_quantize_args`)."""

    weight: np.ndarray
    """float32 / float16 / bfloat16 ``[..., N, K]``, finite (as given)."""
    block_rows: int
    """bn: rows (N) per scale block."""
    block_cols: int
    """bk: columns (K) per scale block."""
    scale_fmt: str | None
    """None (``amax / 448``) or ``"ue8m0"`` (a power of two)."""
    eps: np.float32
    """The amax floor in fp32 (the default of ``scale_fmt`` when ``eps`` is None)."""


def fp8_block_quantize_args(weight, *, block_shape=(BLOCK, BLOCK), scale_fmt=None, eps=None) -> Fp8BlockQuantizeArgs:
    """The argument checks of :func:`fp8_block_quantize`, in its order."""
    op = "fp8_block_quantize"
    weight = _check.array(op, "weight", weight, dtypes=FLOAT_INPUTS, min_ndim=2)
    _check.finite(op, "weight", weight, ieee_escape=False)
    bn, bk = _pair(op, "block_shape", block_shape)
    _padded_within_budget(op, "block_shape", weight.shape, bn, bk)
    return Fp8BlockQuantizeArgs(weight=weight, block_rows=bn, block_cols=bk, scale_fmt=scale_fmt,
                                eps=scale_fmt_eps(op, scale_fmt, eps))


@dataclass(frozen=True, eq=False)
class PerTokenGroupQuantFp8Args:
    """The checked arguments of :func:`per_token_group_quant_fp8` (:func:`per_token_group_quant_fp8_args`)."""

    x: np.ndarray
    """float32 / float16 / bfloat16 ``[..., K]``, finite (as given)."""
    group_size: int
    """G: elements per scale along K (the last group may be partial)."""
    scale_fmt: str | None
    """None or ``"ue8m0"``."""
    eps: np.float32
    """The amax floor in fp32."""


def per_token_group_quant_fp8_args(x, group_size=BLOCK, *, scale_fmt=None, eps=None) -> PerTokenGroupQuantFp8Args:
    """The argument checks of :func:`per_token_group_quant_fp8`, in its order."""
    op = "per_token_group_quant_fp8"
    x = _check.array(op, "x", x, dtypes=FLOAT_INPUTS, min_ndim=1)
    _check.finite(op, "x", x, ieee_escape=False)
    g = _check.integer(op, "group_size", group_size, minimum=1)
    _padded_within_budget(op, "group_size", x.shape[:-1] + (1,) + x.shape[-1:], 1, g)
    return PerTokenGroupQuantFp8Args(x=x, group_size=g, scale_fmt=scale_fmt, eps=scale_fmt_eps(op, scale_fmt, eps))


@dataclass(frozen=True, eq=False)
class Fp8BlockDequantizeArgs:
    """The checked arguments of :func:`fp8_block_dequantize` (:func:`fp8_block_dequantize_args`)."""

    weight_q: np.ndarray
    """``float8_e4m3fn`` ``[..., N, K]`` (as given)."""
    weight_scale_inv: np.ndarray
    """float32 ``[..., ceil(N/bn), ceil(K/bk)]``, finite (as given)."""
    block_rows: int
    """bn."""
    block_cols: int
    """bk."""
    out: np.dtype
    """The output dtype: bfloat16, float16 or float32."""


def fp8_block_dequantize_args(weight_q, weight_scale_inv, *, block_shape=(BLOCK, BLOCK),
                              output_dtype="bfloat16") -> Fp8BlockDequantizeArgs:
    """The argument checks of :func:`fp8_block_dequantize`, in its order."""
    op = "fp8_block_dequantize"
    weight_q = _check.array(op, "weight_q", weight_q, dtypes=(_dt.float8_e4m3fn,), min_ndim=2)
    _check.finite(op, "weight_q", weight_q, ieee_escape=False)  # a NaN code: never written by the quantizer
    bn, bk = _pair(op, "block_shape", block_shape)
    s = _scales(op, "weight_scale_inv", weight_scale_inv, weight_q.shape[:-2], weight_q.shape[-2:], (bn, bk))
    _padded_within_budget(op, "block_shape", weight_q.shape, bn, bk)
    return Fp8BlockDequantizeArgs(weight_q=weight_q, weight_scale_inv=s, block_rows=bn, block_cols=bk,
                                  out=float_output(op, output_dtype))


@dataclass(frozen=True, eq=False)
class Fp8BlockMatmulArgs:
    """The checked arguments of :func:`fp8_block_matmul` (:func:`fp8_block_matmul_args`), as given."""

    a_q: np.ndarray
    """``float8_e4m3fn`` ``[M, K]``."""
    a_scale: np.ndarray
    """float32 ``[M, ceil(K/block_size)]``, finite."""
    weight_q: np.ndarray
    """``float8_e4m3fn`` ``[N, K]``."""
    weight_scale_inv: np.ndarray
    """float32 ``[ceil(N/block_size), ceil(K/block_size)]``, finite."""
    block_size: int
    """The K group of both scales and the N tile of the weight scale."""
    out: np.dtype
    """The output dtype: bfloat16, float16 or float32."""


def fp8_block_matmul_args(a_q, a_scale, weight_q, weight_scale_inv, *, block_size=BLOCK,
                          output_dtype="bfloat16") -> Fp8BlockMatmulArgs:
    """The argument checks of :func:`fp8_block_matmul`, in its order."""
    op = "fp8_block_matmul"
    a_q = _check.array(op, "a_q", a_q, dtypes=(_dt.float8_e4m3fn,), ndim=2)
    weight_q = _check.array(op, "weight_q", weight_q, dtypes=(_dt.float8_e4m3fn,), ndim=2)
    for arg, value in (("a_q", a_q), ("weight_q", weight_q)):  # e4m3 NaN codes: never written by the quantizers
        _check.finite(op, arg, value, ieee_escape=False)
    m, k = a_q.shape
    n = weight_q.shape[0]
    if weight_q.shape[1] != k:
        _check.fail(op, "weight_q", f"of shape [N, K={k}] (K of a_q)", _check.describe(weight_q))
    bs = _check.integer(op, "block_size", block_size, minimum=1)
    sa = _scales(op, "a_scale", a_scale, (), (m, k), (1, bs))
    sw = _scales(op, "weight_scale_inv", weight_scale_inv, (), (n, k), (bs, bs))
    _padded_within_budget(op, "block_size", (n, sw.shape[1]), bs, 1)
    _check.within_budget(op, "weight_q", (m, n), 4, f"the fp32 accumulator [M, N] = [{m}, {n}]")
    return Fp8BlockMatmulArgs(a_q=a_q, a_scale=sa, weight_q=weight_q, weight_scale_inv=sw, block_size=bs,
                              out=float_output(op, output_dtype))


@golden_op("lowbit", check=fp8_block_quantize_args)
def fp8_block_quantize(weight: np.ndarray, *, block_shape=(BLOCK, BLOCK), scale_fmt=None,
                       eps=None) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a weight ``[..., N, K]`` to E4M3 with one fp32 scale per ``block_shape`` tile.

    Parameters
    ----------
    weight : float32 / float16 / bfloat16 ``[..., N, K]``, finite (leading dims: experts).
    block_shape : ``(128, 128)`` (DeepSeek's ``weight_block_size``); any positive pair accepted.
    scale_fmt : None (``amax / 448``) or ``"ue8m0"`` (power of two rounded up).
    eps : the amax floor; default 1e-10 (None) / 1e-4 (``"ue8m0"``).

    Returns
    -------
    weight_q : ``float8_e4m3fn`` ``[..., N, K]``.
    weight_scale_inv : float32 ``[..., ceil(N/bn), ceil(K/bk)]`` (the dequantization multiplier).
    """
    a = fp8_block_quantize_args(weight, block_shape=block_shape, scale_fmt=scale_fmt, eps=eps)
    weight, bn, bk, e = a.weight, a.block_rows, a.block_cols, a.eps
    return _quantize_blocks(weight.astype(np.float32), bn, bk, scale_fmt, e)


@golden_op("lowbit", check=per_token_group_quant_fp8_args)
def per_token_group_quant_fp8(x: np.ndarray, group_size: int = BLOCK, *, scale_fmt=None,
                              eps=None) -> tuple[np.ndarray, np.ndarray]:
    """Dynamic 1 x ``group_size`` activation quantization (DeepSeek ``act_quant``, vLLM
    ``per_token_group_quant_fp8``): ``(x_q float8_e4m3fn [..., K], scale float32 [..., ceil(K/G)])``.

    ``x`` float32 / float16 / bfloat16 ``[..., K]``, finite; a last partial group is allowed.
    Scale and codes as :func:`fp8_block_quantize` (module docstring).
    """
    a = per_token_group_quant_fp8_args(x, group_size, scale_fmt=scale_fmt, eps=eps)
    x, g, e = a.x, a.group_size, a.eps
    xf = x.astype(np.float32).reshape(x.shape[:-1] + (1, x.shape[-1]))
    q, s = _quantize_blocks(xf, 1, g, scale_fmt, e)
    return q.reshape(x.shape), s.reshape(x.shape[:-1] + (s.shape[-1],))


@golden_op("lowbit", check=fp8_block_dequantize_args)
def fp8_block_dequantize(weight_q: np.ndarray, weight_scale_inv: np.ndarray, *, block_shape=(BLOCK, BLOCK),
                         output_dtype="bfloat16") -> np.ndarray:
    """``W^ = fp32(W_q) * s[n // bn, k // bk]`` in fp32, then RNE to ``output_dtype`` (DeepSeek
    ``weight_dequant``; bfloat16 by default, float16 or float32)."""
    a = fp8_block_dequantize_args(weight_q, weight_scale_inv, block_shape=block_shape, output_dtype=output_dtype)
    weight_q, s, bn, bk, out = a.weight_q, a.weight_scale_inv, a.block_rows, a.block_cols, a.out
    *lead, n, k = weight_q.shape
    full = np.repeat(np.repeat(s, bn, axis=-2), bk, axis=-1)[..., :n, :k]
    v = np.take(E4M3_TABLE, weight_q.view(np.uint8)) * full
    return to_float(v.astype(np.float32), out)


@golden_op("lowbit", check=fp8_block_matmul_args)
def fp8_block_matmul(a_q: np.ndarray, a_scale: np.ndarray, weight_q: np.ndarray, weight_scale_inv: np.ndarray, *,
                     block_size: int = BLOCK, output_dtype="bfloat16") -> np.ndarray:
    """Block-scaled FP8 GEMM ``y = A @ W^T`` with per-128-K fp32 promotion (DeepSeek-V3 ``fp8_gemm``).

    Parameters
    ----------
    a_q : ``float8_e4m3fn`` ``[M, K]``; a_scale : float32 ``[M, ceil(K/128)]``
        (:func:`per_token_group_quant_fp8`).
    weight_q : ``float8_e4m3fn`` ``[N, K]``; weight_scale_inv : float32
        ``[ceil(N/128), ceil(K/128)]`` (:func:`fp8_block_quantize`).
    block_size : 128 (the K group of both scales and the N tile of the weight scale).
    output_dtype : bfloat16 (default), float16 or float32.

    Formula: module docstring — ``C[m, n] = sum_kb (P_kb * s_a[m, kb]) * s_w[n // 128, kb]`` in fp32.
    """
    p = fp8_block_matmul_args(a_q, a_scale, weight_q, weight_scale_inv, block_size=block_size,
                              output_dtype=output_dtype)
    a_q, sa, weight_q, sw, bs, out = p.a_q, p.a_scale, p.weight_q, p.weight_scale_inv, p.block_size, p.out
    m, k = a_q.shape
    n = weight_q.shape[0]
    a = np.take(E4M3_TABLE, a_q.view(np.uint8)).astype(np.float64)
    w = np.take(E4M3_TABLE, weight_q.view(np.uint8)).astype(np.float64)
    sw_rows = np.repeat(sw, bs, axis=0)[:n]  # [N, KB]
    acc = np.zeros((m, n), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for kb in range(sa.shape[1]):
            cols = slice(kb * bs, min(k, (kb + 1) * bs))
            p = (a[:, cols] @ w[:, cols].T).astype(np.float32)
            acc = acc + (p * sa[:, kb:kb + 1]) * sw_rows[None, :, kb]
    return to_float(acc.astype(np.float32), out)


def _padded_within_budget(op: str, arg: str, shape: tuple, rows: int, cols: int) -> None:
    """The fp32 copy of ``[..., R, C]`` padded up to whole ``rows x cols`` blocks (the quantizers' padded
    amax, the dequantizer's repeated scales) within the allocation budget: a block size far beyond the
    tensor would otherwise allocate rows x cols floats per block."""
    *lead, r, c = shape
    padded = tuple(lead) + (-(-r // rows) * rows, -(-c // cols) * cols)
    _check.within_budget(op, arg, padded, 4, f"the fp32 tensor padded to whole {rows}x{cols} blocks {padded}")


def _pair(op: str, arg: str, value) -> tuple[int, int]:
    try:
        a, b = value
    except (TypeError, ValueError):
        _check.fail(op, arg, "a pair of positive ints (rows, cols)", repr(value))
    return _check.integer(op, arg, a, minimum=1), _check.integer(op, arg, b, minimum=1)


def _scales(op: str, arg: str, scale, lead: tuple, shape: tuple, block: tuple) -> np.ndarray:
    want = tuple(lead) + tuple(-(-d // b) for d, b in zip(shape, block))
    s = _check.array(op, arg, scale, dtypes=(_dt.float32,))
    _check.shape(op, arg, s, [want], f"float32 of shape {want} (one per {block[0]}x{block[1]} block)")
    _check.finite(op, arg, s, ieee_escape=False)
    return s

