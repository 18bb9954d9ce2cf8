"""Static quantization (``npu_quantize``) and the dequantize helpers.

``quantize`` has two different kernels behind one name (op-plugin ``QuantizeKernelNpuOpApi.cpp``):

* ``div_mode=False`` -> ``aclnnAscendQuantV3``: **multiply**, ``y = rint(x * scale + offset)``.
  This is the W8A8-static activation quantizer of SGLang / vllm-ascend, which pass the reciprocal
  of ``input_scale`` as ``scales``.
* ``div_mode=True`` -> ``aclnnQuantize``, whose A2/A3 kernel is not public (ops-nn has only the arch35
  regbase one, ops-nn ``quant/quantize/op_api/aclnn_quantize.cpp``). Its vendor reference is
  ``torch.quantize_per_channel``, which (x86, torch 2.13, measured in ``tests/golden/test_quantize.py``) **multiplies
  by the fp32 reciprocal and adds the zero point before rounding**: ``y = rint(zero_point + x * fp32(1 / scale))``.
  The golden
  follows that reference (``Numerics.quantize_div="mul_rcp"``, ``zero_point_position="before_rounding"``);
  the device kernel's choice can only be settled on a device.

Each op's argument checks are one public function (:func:`quantize_args`, :func:`dequantize_args`,
:func:`anti_quant_args`) that the op calls first and the backends call instead of copying them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _check
from . import dtypes as _dt
from .int4 import pack_int4, unpack_int4
from .numerics import ASCEND, Numerics
from .registry import golden_op
from .rounding import round_to_integral, to_float, to_int

__all__ = ["quantize", "dequantize", "anti_quant"]

_FLOATS = (_dt.float32, _dt.float16, _dt.bfloat16)


def _channel_vector(op: str, arg: str, value: np.ndarray, n: int, axis: int, ndim: int) -> np.ndarray:
    """Reshape a per-channel vector (size n or 1; 1-D or full rank with 1s elsewhere) to broadcast on ``axis``."""
    if value.ndim == 1:
        if value.shape[0] not in (1, n):
            _check.fail(op, arg, f"of size {n} (x.shape[axis]) or 1", _check.describe(value))
        shape = [1] * ndim
        shape[axis] = value.shape[0]
        return value.reshape(shape)
    if value.ndim == ndim and all(d == 1 for i, d in enumerate(value.shape) if i != axis) \
            and value.shape[axis] in (1, n):
        return value
    _check.fail(op, arg, f"1-D of size {n} or 1, or {ndim}-D with 1s outside axis {axis}", _check.describe(value))


@dataclass(frozen=True, eq=False)
class QuantizeArgs:
    """The checked arguments of :func:`quantize` and the facts derived from them (views, no arithmetic)."""

    x: np.ndarray
    """float32 / float16 / bfloat16, at least 1-D."""
    scales: np.ndarray
    """As given (checked): 1-D of size C or 1, or full rank with 1s outside the channel axis."""
    zero_points: np.ndarray | None
    """As given (checked), or None."""
    scales_b: np.ndarray
    """``scales`` reshaped to broadcast against x along :attr:`channel_axis` (a view, scales' dtype)."""
    zero_points_b: np.ndarray | None
    """``zero_points`` reshaped the same way, or None."""
    out: np.dtype | str
    """int8 / int4 (``div_mode=False``); int8 / uint8 / int32 (``div_mode=True``)."""
    axis: int
    """The ``axis`` argument as given (an int)."""
    channel_axis: int
    """The axis the scales run along, in ``[0, x.ndim)``, after the AscendQuantV3 rule of ``div_mode=False``."""
    div_mode: bool
    """True: ``aclnnQuantize`` (divide); False: ``aclnnAscendQuantV3`` (multiply)."""

    @property
    def out_name(self) -> str:
        """The output dtype's name (``"int8"``, ``"int4"``, ``"uint8"``, ``"int32"``)."""
        return _dt.name(self.out)


def quantize_args(x, scales, zero_points=None, *, dtype="int8", axis: int = 1, div_mode: bool = True,
                  numerics: Numerics = ASCEND) -> QuantizeArgs:
    """Every argument check of :func:`quantize` (dtypes, axis rule, shapes, NaN/Inf under
    ``nan_policy="raise"``), in its order, with its exceptions and messages."""
    op = "quantize"
    x = _check.array(op, "x", x, dtypes=_FLOATS, min_ndim=1)
    if x.ndim == 0:
        _check.fail(op, "x", "at least 1-D", _check.describe(x))
    out = _dt.resolve(dtype, arg="dtype", op=op)
    if not isinstance(div_mode, bool):
        _check.fail(op, "div_mode", "a bool", _check.describe(div_mode), TypeError)
    axis = _check.integer(op, "axis", axis)
    if numerics.nan_policy == "raise":
        _check.finite(op, "x", x)
    if not div_mode:
        if axis < -2:
            _check.fail(op, "axis", ">= -2 (div_mode=False: -2 is the second-to-last axis, anything else the last)", str(axis))
        ax = x.ndim - 2 if axis == -2 else x.ndim - 1
        if ax < 0:
            _check.fail(op, "x", "at least 2-D for axis=-2", _check.describe(x))
        if out not in (_dt.int8, _dt.int4):
            _check.fail(op, "dtype", "'int8' (qint8) or 'int4' (quint4x2) with div_mode=False", repr(dtype))
        s = _check.array(op, "scales", scales, dtypes=(x.dtype,))
        sb = _channel_vector(op, "scales", s, x.shape[ax], ax, x.ndim)
        z = _check.optional(op, "zero_points", zero_points, dtypes=(x.dtype,))
        _finite_params(op, numerics, s, z)
        zb = None if z is None else _channel_vector(op, "zero_points", z, x.shape[ax], ax, x.ndim)
        if out == _dt.int4 and x.shape[-1] % 8:
            _check.fail(op, "x", "of last dimension a multiple of 8 for int4 output", _check.describe(x))
    else:
        if out not in (_dt.int8, _dt.uint8, _dt.int32):
            _check.fail(op, "dtype", "'int8' (qint8), 'uint8' (quint8) or 'int32' (qint32) with div_mode=True",
                        repr(dtype))
        if not -x.ndim <= axis < x.ndim:
            _check.fail(op, "axis", f"in [{-x.ndim}, {x.ndim - 1}] for a {x.ndim}-D x", str(axis))
        ax = axis % x.ndim
        s = _check.array(op, "scales", scales, dtypes=(_dt.float32, _dt.bfloat16))
        sb = _channel_vector(op, "scales", s, x.shape[ax], ax, x.ndim)
        z = _check.optional(op, "zero_points", zero_points,
                            dtypes=(_dt.int8, _dt.uint8, _dt.int32, _dt.bfloat16, _dt.float32))
        _finite_params(op, numerics, s, z)
        _check.nonzero_divisor(op, "scales", s, numerics)
        zb = None if z is None else _channel_vector(op, "zero_points", z, x.shape[ax], ax, x.ndim)
    return QuantizeArgs(x=x, scales=s, zero_points=z, scales_b=sb, zero_points_b=zb, out=out, axis=axis,
                        channel_axis=ax, div_mode=div_mode)


@golden_op("dense", check=quantize_args, mirrors="torch_npu.npu_quantize")
def quantize(x: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None = None, *, dtype="int8",
             axis: int = 1, div_mode: bool = True, numerics: Numerics = ASCEND) -> np.ndarray:
    """Static per-channel (or per-tensor) quantization, mirroring ``torch_npu.npu_quantize``.

    Parameters
    ----------
    x : float32 / float16 / bfloat16, any rank >= 1.
    scales : per-channel scales along ``axis``: 1-D of size ``x.shape[axis]`` or 1, or full rank
        with 1s elsewhere. ``div_mode=False``: same dtype as x. ``div_mode=True``: float32 or
        bfloat16.
    zero_points : optional, shaped like ``scales``. ``div_mode=False``: same dtype as x.
        ``div_mode=True``: int8 / uint8 / int32 / bfloat16 / float32.
    dtype : ``div_mode=False``: ``"int8"`` (``qint8``) or ``"int4"`` (``quint4x2``: int32 output
        with 8 codes per word, LSB first; last dim % 8 == 0). ``div_mode=True``: ``"int8"``,
        ``"uint8"`` (``quint8``) or ``"int32"`` (``qint32``).
    axis : the channel axis. ``div_mode=False`` mirrors the AscendQuantV3 rule: ``axis >= -2`` and
        **every axis other than -2 means the last axis** (-2 the second to last), whatever the
        rank. ``div_mode=True``: an ordinary axis (negative counts from the end).
    div_mode : selects the kernel (module docstring).
    numerics : ``round_mode``, ``saturate``, ``nan_policy``, ``nan_code`` (under ``nan_policy="ieee"``: a
        NaN becomes 0 or the output's minimum, onnxruntime ``QuantizeLinear``); ``div_mode=True`` also
        ``quantize_div`` and ``zero_point_position`` (see below).

    Formula (fp32)::

        div_mode=False:  y = sat(rint(fp32(x) * fp32(scale) + fp32(offset)))     # A2/A3: RINT
        div_mode=True:   t = fp32(x) * fp32(1 / fp32(scale))                      # quantize_div="mul_rcp"
                         y = sat(rint(fp32(zero_point) + t))                      # "before_rounding"

    ``sat`` clamps to the output range ([-128, 127] int8, [0, 255] uint8, [-8, 7] int4, int32).
    ``div_mode=True`` follows torch ``quantize_per_channel`` (module docstring): the A2/A3 kernel is
    closed, so whether it divides or multiplies by the reciprocal, and where it adds the zero point,
    is not confirmed. ``quantize_div="div"`` computes ``fp32(x) / fp32(scale)``;
    ``zero_point_position="after_rounding"`` computes ``rint(t) + rint(zero_point)``. The two zero-point
    positions differ at ties even for integer zero points (``rint(0.5) + 1 = 1``, ``rint(1.5) = 2``);
    division and reciprocal differ by one code where ``x / s`` and ``x * fp32(1/s)`` fall on opposite
    sides of a .5.

    Errors: TypeError for dtypes outside these lists, ValueError for shapes, axis, NaN/Inf in x,
    scales or a float zero_points, and a zero in ``scales`` with ``div_mode=True`` (it divides: ``x / 0``
    would saturate to +-qmax, ``0 / 0`` give the NaN code) — the last two under ``nan_policy="raise"``;
    under ``"ieee"`` they compute through with IEEE fp32 semantics.
    """
    a = quantize_args(x, scales, zero_points, dtype=dtype, axis=axis, div_mode=div_mode, numerics=numerics)
    return quantize_from_args(a, numerics)


def quantize_from_args(a: QuantizeArgs, numerics: Numerics = ASCEND) -> np.ndarray:
    """:func:`quantize` on arguments :func:`quantize_args` has checked (no second pass over x)."""
    xf = a.x.astype(np.float32)
    sf = a.scales_b.astype(np.float32)
    nan = _dt.int_range(a.out)[0] if numerics.nan_code == "qmin" else 0   # only reachable under nan_policy="ieee"
    if not a.div_mode:
        with np.errstate(over="ignore", invalid="ignore"):
            t = xf * sf
            if a.zero_points_b is not None:
                t = t + a.zero_points_b.astype(np.float32)
        if a.out == _dt.int4:
            return pack_int4(to_int(t, _dt.int4, mode=numerics.round_mode, saturate=numerics.saturate, nan_value=nan))
        return to_int(t, a.out, mode=numerics.round_mode, saturate=numerics.saturate, nan_value=nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = xf * (np.float32(1) / sf) if numerics.quantize_div == "mul_rcp" else xf / sf
    if a.zero_points_b is None:
        return to_int(t, a.out, mode=numerics.round_mode, saturate=numerics.saturate, nan_value=nan)
    zf = a.zero_points_b
    if numerics.zero_point_position == "before_rounding":
        with np.errstate(over="ignore", invalid="ignore"):
            t = t + zf.astype(np.float32)
    else:  # round first, then add the (rounded) zero point: exact in float64
        t = round_to_integral(t, numerics.round_mode).astype(np.float64) + \
            round_to_integral(zf.astype(np.float64), numerics.round_mode)
    return to_int(t, a.out, mode=numerics.round_mode, saturate=numerics.saturate, nan_value=nan)


def _finite_params(op: str, numerics: Numerics, scales: np.ndarray, zero_points: np.ndarray | None) -> None:
    """Under ``nan_policy="raise"``, NaN/Inf in a scale or a float zero point is an error too."""
    _check.finite_under(op, numerics, (("scales", scales), ("zero_points", zero_points)))


@dataclass(frozen=True, eq=False)
class DequantizeArgs:
    """The checked arguments of :func:`dequantize` (views, no arithmetic)."""

    y: np.ndarray
    """int8 / uint8 / int32 codes."""
    scale: np.ndarray
    """As given (checked), float32 / float16 / bfloat16."""
    zero_point: np.ndarray | None
    """``np.asarray(zero_point)`` (checked shape, any numeric dtype), or None."""
    scale_b: np.ndarray
    """``scale`` shaped to broadcast against y (``[..., 1]`` per row, or along :attr:`axis`)."""
    zero_point_b: np.ndarray | None
    """``zero_point`` shaped the same way, or None."""
    out: np.dtype
    """bfloat16, float16 or float32."""
    axis: int | None
    """None (per row), or the channel axis in ``[0, y.ndim)``."""


def dequantize_args(y, scale, zero_point=None, *, axis: int | None = -1, output_dtype="float32",
                    numerics: Numerics = ASCEND) -> DequantizeArgs:
    """Every argument check of :func:`dequantize`, in its order, with its exceptions and messages."""
    op = "dequantize"
    y = _check.array(op, "y", y, dtypes=(_dt.int8, _dt.uint8, _dt.int32))
    out = _dt.resolve(output_dtype, arg="output_dtype", op=op)
    if out not in _dt.FLOAT_OUTPUTS:
        _check.fail(op, "output_dtype", "bfloat16, float16 or float32", repr(output_dtype))
    s = _check.array(op, "scale", scale, dtypes=_FLOATS)
    z = None if zero_point is None else np.asarray(zero_point)
    _check.finite_under(op, numerics, (("scale", s), ("zero_point", z)))
    if axis is None:
        rows = y.shape[:-1]
        if s.shape != rows:
            _check.fail(op, "scale", f"of shape y.shape[:-1] = {rows} (per-row, axis=None)", _check.describe(s))
        if z is not None and z.shape != rows:
            _check.fail(op, "zero_point", f"of shape y.shape[:-1] = {rows} (per-row like scale, axis=None)",
                        _check.describe(z))
        return DequantizeArgs(y=y, scale=s, zero_point=z, scale_b=s[..., None],
                              zero_point_b=None if z is None else z[..., None], out=out, axis=None)
    ax = _check.integer(op, "axis", axis, minimum=-y.ndim, maximum=y.ndim - 1) % y.ndim
    sb = _channel_vector(op, "scale", s, y.shape[ax], ax, y.ndim)
    zb = None if z is None else _channel_vector(op, "zero_point", z, y.shape[ax], ax, y.ndim)
    return DequantizeArgs(y=y, scale=s, zero_point=z, scale_b=sb, zero_point_b=zb, out=out, axis=ax)


@golden_op("dense", check=dequantize_args)
def dequantize(y: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None, *, axis: int = -1,
               output_dtype="float32", numerics: Numerics = ASCEND) -> np.ndarray:
    """``(fp32(y) - zero_point) * scale`` in fp32, rounded to ``output_dtype``.

    The inverse of :func:`quantize` (``div_mode=True``) and of the dynamic quantizers: per-row
    dynamic scales have shape ``y.shape[:-1]`` — pass them with ``axis=None`` and they broadcast
    over the last dimension. ``scale``/``zero_point`` are otherwise per-channel vectors along
    ``axis`` (size ``y.shape[axis]`` or 1); with ``axis=None`` a zero point is per row too, of the
    scale's shape ``y.shape[:-1]``. int4 codes must be unpacked first (:func:`w8a8.int4.unpack_int4`).

    ``numerics``: ``nan_policy`` only. Under ``"raise"`` (the default) NaN / Inf in the scale or a float
    zero point is refused, as everywhere in the golden; under ``"ieee"`` they, and an fp32 overflow, give
    IEEE results (``0 * Inf`` is NaN; the NaN bits: :func:`w8a8.rounding.to_float`), without warnings.
    A zero scale is a valid (all-zero) result: the op multiplies by it.

    Errors (:func:`dequantize_args`): TypeError for y's or scale's dtype; ValueError for the
    output dtype, axis, the shapes of scale and zero_point, NaN/Inf in scale or a float zero_point
    (``nan_policy="raise"``).
    """
    a = dequantize_args(y, scale, zero_point, axis=axis, output_dtype=output_dtype, numerics=numerics)
    return _shift_scale(a.y, a.zero_point_b, True, a.scale_b, a.out)


def _shift_scale(codes: np.ndarray, shift, subtract: bool, scale: np.ndarray, out) -> np.ndarray:
    """``(fp32(codes) -/+ fp32(shift)) * fp32(scale)`` in fp32, one RNE rounding to ``out``.

    IEEE throughout, without warnings: an overflow is +-Inf, ``Inf - Inf`` and ``0 * Inf`` are NaN.
    """
    xf = codes.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        if shift is not None:
            sf = shift.astype(np.float32)
            xf = xf - sf if subtract else xf + sf
        v = (xf * scale.astype(np.float32)).astype(np.float32)
    return to_float(v, out)


@dataclass(frozen=True, eq=False)
class AntiQuantArgs:
    """The checked arguments of :func:`anti_quant` (as given: int4 words stay packed)."""

    x: np.ndarray
    """int8 codes, or int32 words packing 8 int4 codes (``src`` int4)."""
    scale: np.ndarray
    """float32 / bfloat16, 1-D of size n or 1."""
    offset: np.ndarray | None
    """scale's dtype and shape, or None."""
    src: np.dtype | str
    """int8 or ``"int4"``."""
    dst: np.dtype
    """float16 or bfloat16."""
    n: int
    """The last dim of the (unpacked) codes."""


def anti_quant_args(x, scale, *, offset=None, dst_dtype=None, src_dtype=None,
                    numerics: Numerics = ASCEND) -> AntiQuantArgs:
    """Every argument check of :func:`anti_quant`, in its order, with its exceptions and messages."""
    op = "anti_quant"
    src = _dt.resolve(src_dtype if src_dtype is not None else "int8", arg="src_dtype", op=op)
    if src == _dt.int4:
        x = _check.array(op, "x", x, dtypes=(_dt.int32,), min_ndim=1)
        n = x.shape[-1] * 8
    elif src == _dt.int8:
        x = _check.array(op, "x", x, dtypes=(_dt.int8,), min_ndim=1)
        n = x.shape[-1]
    else:
        _check.fail(op, "src_dtype", "'int8' or 'int4' (quint4x2)", repr(src_dtype))
    dst = _dt.resolve(dst_dtype if dst_dtype is not None else "float16", arg="dst_dtype", op=op)
    if dst not in (_dt.float16, _dt.bfloat16):
        _check.fail(op, "dst_dtype", "float16 or bfloat16", repr(dst_dtype))
    s = _check.array(op, "scale", scale, dtypes=(_dt.float32, _dt.bfloat16), ndim=1)
    if s.shape[0] not in (1, n):
        _check.fail(op, "scale", f"1-D of size {n} or 1", _check.describe(s))
    o = None
    if offset is not None:
        o = _check.array(op, "offset", offset, dtypes=(s.dtype,), ndim=1)
        if o.shape != s.shape:
            _check.fail(op, "offset", f"of scale's shape {s.shape}", _check.describe(o))
    _check.finite_under(op, numerics, (("scale", s), ("offset", o)))
    return AntiQuantArgs(x=x, scale=s, offset=o, src=src, dst=dst, n=int(n))


@golden_op("dense", check=anti_quant_args, mirrors="torch_npu.npu_anti_quant")
def anti_quant(x: np.ndarray, scale: np.ndarray, *, offset: np.ndarray | None = None, dst_dtype=None,
               src_dtype=None, numerics: Numerics = ASCEND) -> np.ndarray:
    """Weight dequantization mirroring ``torch_npu.npu_anti_quant``: ``(x + offset) * scale``.

    Parameters
    ----------
    x : int8, or int32 packing 8 int4 codes LSB first (``src_dtype="int4"``/``"quint4x2"``).
    scale : float32 / bfloat16, 1-D of size n (the last dim of the unpacked x) or 1.
    offset : optional, same dtype and shape as scale. It is **added** (the negated zero point).
    dst_dtype : float16 (default) or bfloat16.

    numerics : ``nan_policy`` only: under ``"raise"`` (default) NaN / Inf in scale or offset is refused
        (ValueError naming the argument); under ``"ieee"`` they give IEEE results.

    Formula: ``out = cast(fp32((x + offset) * scale))`` with the add and multiply in fp32 and one
    RNE rounding to ``dst_dtype``.

    Errors (:func:`anti_quant_args`): TypeError for dtypes, ValueError for shapes, ``src_dtype`` /
    ``dst_dtype`` outside the lists above, NaN/Inf in scale or offset (``nan_policy="raise"``).
    """
    a = anti_quant_args(x, scale, offset=offset, dst_dtype=dst_dtype, src_dtype=src_dtype, numerics=numerics)
    codes = unpack_int4(a.x) if a.src == _dt.int4 else a.x
    return _shift_scale(codes, a.offset, False, a.scale, a.dst)
