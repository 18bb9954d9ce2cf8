"""INT4 group-wise weight quantization (W4A16 weights: GPTQ, AWQ, vLLM ``moe_wna16.py``).

A weight ``[..., N, K]`` is cut along K into groups of G consecutive elements; each group of each
output row n gets one scale (and, asymmetric, one integer zero point). The golden's layout is the
compressed-tensors one: ``codes [..., N, K]``, ``scale [..., N, K/G]``, ``zero [..., N, K/G]``;
the checkpoint layouts are in :mod:`w8a8.lowbit.packing`.

Conventions chosen (where the sources differ)

* ``scheme="gptq_sym"`` (default): ``s = amax / 7.5`` (= GPTQ's ``2*amax/15``; the divisor is
  half the width 15 of the int4 range), ``q = clamp(rint(w / s), -8, 7)``, ``w^ = q * s``. The
  most negative value lands on -8 exactly, the most positive rounds 7.5 -> 8 and clips to 7.
  Codes are **signed** int8 in [-8, 7]; GPTQ / vLLM store them as ``q + 8`` (``uint4b8``).
* ``scheme="absmax_sym"``: ``s = amax / 7``, same rounding and clamp, so ``q in [-7, 7]`` — the
  common fake-quant recipe (and the scale rule of Ascend's int4 dynamic quant).
* ``scheme="asym"`` (AWQ ``zero_point``, GPTQ ``sym=False``): the range is widened to include 0
  (GPTQ's ``xmin = min(wmin, 0)``, ``xmax = max(wmax, 0)``), ``s = (xmax - xmin) / 15``,
  ``z = clamp(rint(-xmin / s), 0, 15)`` (an **integer** zero point), ``u = clamp(rint(w / s) + z,
  0, 15)``, ``w^ = (u - z) * s``. Codes and zero points are **unsigned** uint8 in [0, 15]. (The
  compressed-tensors signed form is ``q = u - 8``, ``z_ct = z - 8``: ``q - z_ct == u - z``; the
  torch CPU float-zero variant ``(u - 8) * s + z_float`` is not offered.)
* **Where the scale is rounded**: the fp32 scale is rounded (RNE) to ``scale_dtype`` first and the
  codes are computed by dividing by the *rounded* scale, so that ``w^ = q * s_stored`` is the
  nearest grid point of the grid the checkpoint describes. (GPTQ quantizes with the fp32 scale
  and rounds it on export; the two differ only where ``w / s`` sits within a scale-rounding error
  of a .5 tie.)
* An **all-zero group** takes GPTQ's rule: the range becomes ``[-1, 1]`` (symmetric: amax = 1), so
  its scale is a usable nonzero number and every code is 0 (asymmetric: ``u = z = 8``).
* All arithmetic is fp32; division ``w / s`` then ``rint`` (half to even).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..registry import golden_op
from ..rounding import to_float, to_int
from ._common import FLOAT_INPUTS, float_output, value_range as _range

__all__ = ["int4_group_quantize", "int4_group_dequantize"]

SCHEMES = ("gptq_sym", "absmax_sym", "asym")
_SCALE_DTYPES = (_dt.float16, _dt.bfloat16, _dt.float32)


def group_count(op: str, k: int, group_size) -> tuple[int, int]:
    """``(G, K // G)`` for a group size (``-1`` = one group per row); ValueError naming ``group_size``."""
    g = _check.integer(op, "group_size", group_size)
    if g == -1:
        if k == 0:
            _check.fail(op, "group_size", "a positive divisor of K (K is 0, so -1 'whole row' is empty)", str(g))
        return k, 1
    if g <= 0 or k % g:
        _check.fail(op, "group_size", f"a positive divisor of K = {k} (or -1 for one group per row)", str(g))
    return g, k // g


# -- argument checks (public: the backends run the same checks before their own arithmetic) -----

@dataclass(frozen=True, eq=False)
class Int4GroupQuantizeArgs:
    """The checked arguments of :func:`int4_group_quantize` (:func:`int4_group_quantize_args`)."""

    weight: np.ndarray
    """float32 / float16 / bfloat16 ``[..., N, K]``, finite (as given)."""
    group_size: int
    """G: the elements per group (K for ``group_size=-1``)."""
    groups: int
    """K // G: the groups per row."""
    scheme: str
    """``"gptq_sym"``, ``"absmax_sym"`` or ``"asym"``."""
    scale_dtype: np.dtype
    """float16, bfloat16 or float32."""


def int4_group_quantize_args(weight, group_size=128, *, scheme="gptq_sym",
                             scale_dtype="float16") -> Int4GroupQuantizeArgs:
    """The argument checks of :func:`int4_group_quantize`, in its order.

    The one data-dependent check that needs the op's arithmetic (a scale overflowing
    ``scale_dtype``) is :func:`check_scale_fits`.
    """
    op = "int4_group_quantize"
    weight = _check.array(op, "weight", weight, dtypes=FLOAT_INPUTS, min_ndim=2)
    _check.choice(op, "scheme", scheme, SCHEMES)
    sdt = _dt.resolve(scale_dtype, arg="scale_dtype", op=op)
    if sdt not in _SCALE_DTYPES:
        _check.fail(op, "scale_dtype", "float16, bfloat16 or float32", repr(scale_dtype), TypeError)
    _check.finite(op, "weight", weight, ieee_escape=False)
    g, groups = group_count(op, weight.shape[-1], group_size)
    return Int4GroupQuantizeArgs(weight=weight, group_size=g, groups=groups, scheme=scheme, scale_dtype=sdt)


def check_scale_fits(scale_f32: np.ndarray, sdt) -> None:
    """ValueError naming the first group whose scale (read back as fp32) overflowed ``sdt``."""
    if not np.isfinite(scale_f32).all():
        pos = tuple(int(i) for i in np.argwhere(~np.isfinite(scale_f32))[0])
        _check.fail("int4_group_quantize", "weight", f"groups whose scale fits {np.dtype(sdt).name}",
                    f"a scale overflow at group {pos}")


@dataclass(frozen=True, eq=False)
class Int4GroupDequantizeArgs:
    """The checked arguments of :func:`int4_group_dequantize` (:func:`int4_group_dequantize_args`), as given."""

    codes: np.ndarray
    """int8 ``[..., N, K]`` in [-8, 7] (symmetric) or uint8 in [0, 15] (asymmetric)."""
    scale: np.ndarray
    """float16 / bfloat16 / float32 ``[..., N, K/G]``."""
    zero: np.ndarray | None
    """uint8 ``[..., N, K/G]`` in [0, 15] for unsigned codes; None for signed codes."""
    out: np.dtype
    """The output dtype: float32, bfloat16 or float16."""


def int4_group_dequantize_args(codes, scale, zero=None, *, output_dtype="float32") -> Int4GroupDequantizeArgs:
    """The argument checks of :func:`int4_group_dequantize`, in its order."""
    op = "int4_group_dequantize"
    codes = _check.array(op, "codes", codes, dtypes=(np.int8, np.uint8), min_ndim=2)
    scale = _check.array(op, "scale", scale, dtypes=_SCALE_DTYPES, min_ndim=2)
    _check.finite(op, "scale", scale, ieee_escape=False)
    out = float_output(op, output_dtype)
    k = codes.shape[-1]
    groups = scale.shape[-1]
    if scale.shape[:-1] != codes.shape[:-1] or (groups == 0 and k) or (groups and k % groups):
        _check.fail(op, "scale", f"of shape [..., N, K/G] = {codes.shape[:-1]} + (K/G,) with K/G dividing K = {k}",
                    _check.describe(scale))
    if codes.dtype == np.int8:
        if zero is not None:
            _check.fail(op, "zero", "None for signed (symmetric) int8 codes", _check.describe(zero))
        _range(op, "codes", codes, -8, 7)
    else:
        if zero is None:
            _check.fail(op, "zero", "a uint8 zero point array for unsigned (asymmetric) codes", "None")
        zero = _check.array(op, "zero", zero, dtypes=(np.uint8,))
        _check.same_shape(op, "zero", zero, "scale", scale)
        _range(op, "codes", codes, 0, 15)
        _range(op, "zero", zero, 0, 15)
    return Int4GroupDequantizeArgs(codes=codes, scale=scale, zero=zero, out=out)


@golden_op("lowbit", check=int4_group_quantize_args)
def int4_group_quantize(weight: np.ndarray, group_size: int = 128, *, scheme: str = "gptq_sym",
                        scale_dtype="float16") -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Quantize a weight to INT4 with one scale (and zero point) per group of G along K.

    Parameters
    ----------
    weight : float32 / float16 / bfloat16 ``[..., N, K]`` (leading dims, e.g. experts, allowed),
        finite.
    group_size : G, a positive divisor of K (32, 64, 128, ... any divisor), or -1 for per-channel.
    scheme : ``"gptq_sym"`` (default), ``"absmax_sym"`` or ``"asym"`` (module docstring).
    scale_dtype : ``"float16"`` (default; GPTQ, AWQ), ``"bfloat16"`` (compressed-tensors with a
        bf16 model) or ``"float32"``.

    Returns
    -------
    codes : symmetric: int8 ``[..., N, K]`` in [-8, 7]; asymmetric: uint8 in [0, 15].
    scale : ``scale_dtype`` ``[..., N, K/G]``.
    zero : asymmetric: uint8 ``[..., N, K/G]`` in [0, 15]; symmetric: None.

    Formula, fp32, per group (``r`` = the scale rounded to ``scale_dtype`` and read back)::

        gptq_sym:   amax = max|w| (1 if 0);  r = round(amax / 7.5);  q = clamp(rint(w / r), -8, 7)
        absmax_sym: amax = max|w| (1 if 0);  r = round(amax / 7);    q = clamp(rint(w / r), -8, 7)
        asym:       lo = min(min w, 0), hi = max(max w, 0) ([-1, 1] if both 0)
                    r = round((hi - lo) / 15);  z = clamp(rint(-lo / r), 0, 15)
                    u = clamp(rint(w / r) + z, 0, 15)

    A scale that rounds to 0 in ``scale_dtype`` (a group whose amax is below the dtype's smallest
    subnormal times 7.5) gives saturated codes that dequantize to 0 (``q * 0``); a scale that
    overflows it is refused.

    Errors: TypeError for dtypes; ValueError for rank < 2, group_size, scheme, NaN/Inf in the
    weight, and a scale that overflows ``scale_dtype``.
    """
    a = int4_group_quantize_args(weight, group_size, scheme=scheme, scale_dtype=scale_dtype)
    weight, g, groups, sdt = a.weight, a.group_size, a.groups, a.scale_dtype
    w = weight.astype(np.float32).reshape(weight.shape[:-1] + (groups, g))
    one = np.float32(1)
    if scheme == "asym":
        lo = np.minimum(w.min(axis=-1, initial=0), 0).astype(np.float32)
        hi = np.maximum(w.max(axis=-1, initial=0), 0).astype(np.float32)
        empty = (lo == 0) & (hi == 0)
        lo, hi = np.where(empty, -one, lo), np.where(empty, one, hi)
        with np.errstate(over="ignore"):  # a range wider than the fp32 max: refused below
            s32 = (hi - lo) / np.float32(15)
    else:
        amax = np.abs(w).max(axis=-1, initial=0).astype(np.float32)
        amax = np.where(amax == 0, one, amax)
        s32 = amax / np.float32(7.5 if scheme == "gptq_sym" else 7)
    scale = to_float(s32.astype(np.float32), sdt)
    sf = scale.astype(np.float32)
    check_scale_fits(sf, sdt)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = w / sf[..., None]
        if scheme == "asym":
            z = to_int(-lo / sf, np.uint8, lo=0, hi=15)
            u = to_int(np.rint(t) + z[..., None].astype(np.float32), np.uint8, lo=0, hi=15)
            return u.reshape(weight.shape), scale, z
    q = to_int(t, _dt.int4, lo=-8, hi=7)
    return q.reshape(weight.shape), scale, None


@golden_op("lowbit", check=int4_group_dequantize_args)
def int4_group_dequantize(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray | None = None, *,
                          output_dtype="float32") -> np.ndarray:
    """Dequantize INT4 group codes: ``q * s`` (symmetric) or ``(u - z) * s`` (asymmetric).

    Parameters
    ----------
    codes : int8 ``[..., N, K]`` in [-8, 7] (symmetric, ``zero=None``) or uint8 in [0, 15]
        (asymmetric, with ``zero``).
    scale : float16 / bfloat16 / float32 ``[..., N, K/G]``; G = K / scale.shape[-1] must be an
        integer.
    zero : uint8 ``[..., N, K/G]`` in [0, 15], asymmetric only.
    output_dtype : float32 (default), bfloat16 or float16.

    Formula: ``fp32(q) * fp32(s)`` or ``(fp32(u) - fp32(z)) * fp32(s)`` — the subtraction is exact,
    the product rounds once in fp32 — then one RNE cast to ``output_dtype``.

    Errors (:func:`int4_group_dequantize_args`): TypeError for dtypes; ValueError for shapes, code and
    zero ranges, and NaN/Inf in ``scale`` (always: the op has no ``numerics``, and a device's
    behaviour on a non-finite group scale is not specified).
    """
    a = int4_group_dequantize_args(codes, scale, zero, output_dtype=output_dtype)
    codes, scale, zero, out = a.codes, a.scale, a.zero, a.out
    k = codes.shape[-1]
    groups = scale.shape[-1]
    if codes.dtype == np.int8:
        v = codes.astype(np.float32)
    else:
        v = codes.astype(np.float32) - np.repeat(zero.astype(np.float32), k // max(groups, 1), axis=-1)
    sf = np.repeat(scale.astype(np.float32), k // max(groups, 1), axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):
        return to_float((v * sf).astype(np.float32), out)
