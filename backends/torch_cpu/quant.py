"""The quantizers in torch: dynamic (symmetric / asymmetric), static, dequantize, anti_quant.

Each function reproduces the golden op of the same name under :data:`w8a8.ASCEND` bit for bit (the
arguments arrive as the golden's checked ``<Op>Args`` from :meth:`backends.base.Backend.prepare`;
channel vectors arrive shaped to broadcast). fp32 throughout, one torch op per golden step, no fused multiply-add.
"""

from __future__ import annotations

import math

import torch

from w8a8 import _check

from .arith import any_nonfinite, const, f32, pack_int4, to_float, to_int, unpack_int4, widen


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as fp32 rows ``[S, H]`` (a new tensor)."""
    return f32(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]))


def _smooth(op: str, xf: torch.Tensor, smooth: torch.Tensor | None, group_index: torch.Tensor | None) -> None:
    """``xf *= fp32(smooth[group of row])`` in place; ValueError if that overflows (golden's check)."""
    if smooth is None:
        return
    sf = smooth.to(torch.float32)
    if group_index is not None:  # cumulative row ends -> rows per group -> one smooth row per x row
        ends = group_index.to(torch.int64)
        counts = torch.diff(ends, prepend=ends.new_zeros(1))
        sf = torch.repeat_interleave(sf, counts, dim=0, output_size=xf.shape[0])
    xf.mul_(sf)
    if xf.numel() and not bool(torch.isfinite(xf).all()):
        _check.fail(op, "smooth_scales", "such that x * smooth_scales stays finite in fp32", "an overflow to Inf")


def _row_absmax(xf: torch.Tensor) -> torch.Tensor:
    """``max_j |xf_j|`` per row, fp32 ``[S]`` (+0 for an empty or all-zero row)."""
    if xf.shape[-1] == 0:
        return xf.new_zeros(xf.shape[0])
    # max(max x, -min x) is max |x| exactly (max is exact), without an |x| temporary; abs_ makes -0 +0.
    return torch.maximum(xf.amax(-1), xf.amin(-1).neg_()).abs_()


def quantize_rows(xf: torch.Tensor, qmax: int, scale_out: str = "reciprocal") -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`w8a8.dynamic_quant.quantize_rows` with ``codes="mul_inv"``, half-even, saturating, NaN
    code 0, and ``scale=scale_out``: ``"reciprocal"`` (``1 / inv``) or ``"amax_mul_rcp"``
    (``m * fp32(1/qmax)``: the single-row / multi-row / double-buffer kernels). ``xf`` (fp32 ``[S, H]``)
    is used as scratch."""
    m = _row_absmax(xf)
    inv = torch.div(const(qmax), m)  # 127 / m: an IEEE division (not reciprocal * 127)
    if scale_out == "amax_mul_rcp":
        scale = torch.mul(m, torch.div(const(1.0), const(qmax)))
    else:
        scale = torch.div(const(1.0), inv)
    t = xf.mul_(inv[:, None]).round_()
    if bool(torch.isinf(inv).any()):
        # m == 0 (0 * inf = NaN -> code 0) or m so small that 127 / m overflowed (+-inf -> +-qmax).
        t.nan_to_num_(nan=0.0, posinf=float(qmax), neginf=float(-qmax))
    # Otherwise |x * inv| <= m * (qmax / m)(1 + 2^-24) rounds to at most qmax: no clamp needed.
    return t.to(torch.int8), scale


def _out(y: torch.Tensor, shape, dst: str) -> torch.Tensor:
    y = y.reshape(shape)
    return pack_int4(y) if dst == "int4" else y


def dynamic_quant(x: torch.Tensor, *, smooth_scales=None, group_index=None, dst_type: str = "int8",
                  scale_out: str | None = None, numerics=None):
    """:func:`w8a8.dynamic_quant`: ``(y, scale)``; ``y`` int8 of x's shape or packed int4 words.

    ``scale_out``: the scale formula of the kernel (None: the one the host tiling picks for x's shape on
    the platform of ``numerics``, the call's record, :mod:`.kernel_variants`; a caller that quantizes a row
    block of a larger activation passes the whole activation's)."""
    if scale_out is None:
        from .kernel_variants import dynamic_quant as variant

        scale_out = variant(tuple(x.shape), x.dtype, dst=dst_type, smooth=smooth_scales is not None,
                            groups=None if group_index is None else group_index.numel(), numerics=numerics).scale_out
    xf = _rows(x)
    _smooth("dynamic_quant", xf, smooth_scales, group_index)
    y, scale = quantize_rows(xf, 7 if dst_type == "int4" else 127, scale_out)
    return _out(y, x.shape, dst_type), scale.reshape(x.shape[:-1])


def dynamic_quant_asymmetric(x: torch.Tensor, *, smooth_scales=None, group_index=None, dst_type: str = "int8"):
    """:func:`w8a8.dynamic_quant_asymmetric`: ``(y, scale, offset)``. In fp32, per row::

        scale  = max((rowmax - rowmin) / levels, 1e-12);  offset = top - rowmax / scale
        y      = sat(rint(x * (1 / scale) + offset))       levels, top = 255, 127 (int4: 15, 7)
    """
    xf = _rows(x)
    _smooth("dynamic_quant_asymmetric", xf, smooth_scales, group_index)
    int4 = dst_type == "int4"
    levels, top, lo, hi = (15.0, 7.0, -8, 7) if int4 else (255.0, 127.0, -128, 127)
    if xf.shape[-1]:
        rmax, rmin = xf.amax(-1, keepdim=True), xf.amin(-1, keepdim=True)
    else:
        rmax = rmin = xf.new_zeros(xf.shape[0], 1)
    scale = torch.maximum(torch.div(rmax - rmin, const(levels)), const(1e-12))
    offset = const(top) - torch.div(rmax, scale)
    t = xf.mul_(torch.div(const(1.0), scale)).add_(offset)
    y = to_int(t, lo, hi, torch.int8, inplace=True)
    shape = x.shape[:-1]
    return _out(y, x.shape, dst_type), scale[:, 0].reshape(shape), offset[:, 0].reshape(shape)


def quantize(x: torch.Tensor, scales: torch.Tensor, zero_points=None, *, dtype: str, div_mode: bool) -> torch.Tensor:
    """:func:`w8a8.quantize` (``scales`` / ``zero_points`` shaped to broadcast against ``x``).

    ``div_mode=False``: ``sat(rint(fp32(x) * fp32(scale) + fp32(offset)))`` to int8 / packed int4.
    ``div_mode=True``: ``sat(rint(fp32(zero_point) + fp32(x) * fp32(1 / scale)))`` to int8 / uint8 /
    int32 (torch ``quantize_per_channel``, the golden's ``quantize_div="mul_rcp"``,
    ``zero_point_position="before_rounding"``).
    """
    t = f32(x)
    if not div_mode:
        t.mul_(scales.to(torch.float32))
        if zero_points is not None:
            t.add_(zero_points.to(torch.float32))
        if dtype == "int4":
            return pack_int4(to_int(t, -8, 7, torch.int8, inplace=True))
        return to_int(t, -128, 127, torch.int8, inplace=True)
    out, lo, hi = {"int8": (torch.int8, -128, 127), "uint8": (torch.uint8, 0, 255),
                   "int32": (torch.int32, -(1 << 31), (1 << 31) - 1)}[dtype]
    t.mul_(torch.div(const(1.0), scales.to(torch.float32)))
    if zero_points is not None:  # the zero point before rounding, in fp32
        t.add_(zero_points.to(torch.float32))
    return to_int(t, lo, hi, out, inplace=True)


def dequantize(y: torch.Tensor, scale: torch.Tensor, zero_point=None, *, output_dtype: torch.dtype) -> torch.Tensor:
    """:func:`w8a8.dequantize`: ``(fp32(y) - fp32(zero_point)) * fp32(scale)`` rounded to the output."""
    v = y.to(torch.float32)
    zf = None
    if zero_point is not None:
        zf = widen(zero_point)
        v = torch.sub(v, zf)  # may broadcast to a larger shape, as NumPy does
    sf = widen(scale)  # an fp16 NaN keeps NumPy's payload bits
    v.mul_(sf)
    return to_float(v, output_dtype, may_nan=any_nonfinite(sf, zf))


def anti_quant(x: torch.Tensor, scale: torch.Tensor, *, offset=None, dst_dtype: torch.dtype, src_dtype: str):
    """:func:`w8a8.anti_quant`: ``(fp32(x) + fp32(offset)) * fp32(scale)``, one RNE cast to ``dst_dtype``."""
    codes = unpack_int4(x) if src_dtype == "int4" else x
    v = codes.to(torch.float32)
    of = None
    if offset is not None:
        of = widen(offset)
        v.add_(of)
    sf = widen(scale)
    v.mul_(sf)
    return to_float(v, dst_dtype, may_nan=any_nonfinite(sf, of))
