"""Static quantization (``npu_quantize``) and the dequantize helpers.

``quantize`` has two different kernels behind one name (spec/ascend-ops.md §2):

* ``div_mode=False`` -> ``aclnnAscendQuantV3``: **multiply**, ``y = rint(x * scale + offset)``.
  This is the W8A8-static activation quantizer of SGLang / vllm-ascend, which pass the reciprocal
  of ``input_scale`` as ``scales``.
* ``div_mode=True`` -> ``aclnnQuantize`` (torch ``quantize_per_channel`` semantics): **divide**,
  ``y = rint(x / scale) + zero_point``.
"""

from __future__ import annotations

import numpy as np

from . import _check
from . import dtypes as _dt
from .int4 import pack_int4, unpack_int4
from .numerics import ASCEND, Numerics
from .rounding import round_to_integral, to_float, to_int

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
    numerics : ``round_mode``, ``saturate``, ``nan_policy``; ``div_mode=True`` also
        ``zero_point_position`` (see below).

    Formula (fp32)::

        div_mode=False:  y = sat(rint(fp32(x) * fp32(scale) + fp32(offset)))     # A2/A3: RINT
        div_mode=True:   y = sat(rint(fp32(x) / fp32(scale)) + zero_point)

    ``sat`` clamps to the output range ([-128, 127] int8, [0, 255] uint8, [-8, 7] int4, int32).
    With ``div_mode=True`` it is not confirmed whether the device rounds before or after adding the
    zero point; the golden rounds first (torch ``quantize_per_channel`` semantics) and adds
    ``rint(zero_point)`` (``numerics.zero_point_position="before_rounding"`` adds it first).

    Errors: TypeError for dtypes outside these lists, ValueError for shapes, axis, NaN/Inf in x,
    scales or a float zero_points (under ``nan_policy="raise"``).
    """
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
    xf = x.astype(np.float32)
    if not div_mode:
        if axis < -2:
            _check.fail(op, "axis", ">= -2 (div_mode=False: -2 is the second-to-last axis, anything else the last)", str(axis))
        ax = x.ndim - 2 if axis == -2 else x.ndim - 1
        if ax < 0:
            _check.fail(op, "x", "at least 2-D for axis=-2", _check.describe(x))
        if out not in (_dt.int8, _dt.int4):
            _check.fail(op, "dtype", "'int8' (qint8) or 'int4' (quint4x2) with div_mode=False", repr(dtype))
        s = _check.array(op, "scales", scales, dtypes=(x.dtype,))
        sf = _channel_vector(op, "scales", s, x.shape[ax], ax, x.ndim).astype(np.float32)
        z = _check.optional(op, "zero_points", zero_points, dtypes=(x.dtype,))
        _finite_params(op, numerics, s, z)
        with np.errstate(over="ignore", invalid="ignore"):
            t = xf * sf
            if z is not None:
                t = t + _channel_vector(op, "zero_points", z, x.shape[ax], ax, x.ndim).astype(np.float32)
        if out == _dt.int4:
            if x.shape[-1] % 8:
                _check.fail(op, "x", "of last dimension a multiple of 8 for int4 output", _check.describe(x))
            return pack_int4(to_int(t, _dt.int4, mode=numerics.round_mode, saturate=numerics.saturate))
        return to_int(t, out, mode=numerics.round_mode, saturate=numerics.saturate)

    if out not in (_dt.int8, _dt.uint8, _dt.int32):
        _check.fail(op, "dtype", "'int8' (qint8), 'uint8' (quint8) or 'int32' (qint32) with div_mode=True", repr(dtype))
    if not -x.ndim <= axis < x.ndim:
        _check.fail(op, "axis", f"in [{-x.ndim}, {x.ndim - 1}] for a {x.ndim}-D x", str(axis))
    ax = axis % x.ndim
    s = _check.array(op, "scales", scales, dtypes=(_dt.float32, _dt.bfloat16))
    sf = _channel_vector(op, "scales", s, x.shape[ax], ax, x.ndim).astype(np.float32)
    z = _check.optional(op, "zero_points", zero_points,
                        dtypes=(_dt.int8, _dt.uint8, _dt.int32, _dt.bfloat16, _dt.float32))
    _finite_params(op, numerics, s, z)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = xf / sf
    if z is None:
        return to_int(t, out, mode=numerics.round_mode, saturate=numerics.saturate)
    zf = _channel_vector(op, "zero_points", z, x.shape[ax], ax, x.ndim)
    if numerics.zero_point_position == "before_rounding":
        with np.errstate(over="ignore", invalid="ignore"):
            t = t + zf.astype(np.float32)
    else:  # round first, then add the (rounded) zero point: exact in float64
        t = round_to_integral(t, numerics.round_mode).astype(np.float64) + \
            round_to_integral(zf.astype(np.float64), numerics.round_mode)
    return to_int(t, out, mode=numerics.round_mode, saturate=numerics.saturate)


def _finite_params(op: str, numerics: Numerics, scales: np.ndarray, zero_points: np.ndarray | None) -> None:
    """Under ``nan_policy="raise"``, NaN/Inf in a scale or a float zero point is an error too."""
    if numerics.nan_policy != "raise":
        return
    _check.finite(op, "scales", scales)
    if zero_points is not None and _dt.is_float(zero_points.dtype):
        _check.finite(op, "zero_points", zero_points)


def dequantize(y: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None, *, axis: int = -1,
               output_dtype="float32") -> np.ndarray:
    """``(fp32(y) - zero_point) * scale`` in fp32, rounded to ``output_dtype``.

    The inverse of :func:`quantize` (``div_mode=True``) and of the dynamic quantizers: per-row
    dynamic scales have shape ``y.shape[:-1]`` — pass them with ``axis=None`` and they broadcast
    over the last dimension. ``scale``/``zero_point`` are otherwise per-channel vectors along
    ``axis`` (size ``y.shape[axis]`` or 1). int4 codes must be unpacked first
    (:func:`w8a8.int4.unpack_int4`).
    """
    op = "dequantize"
    y = _check.array(op, "y", y, dtypes=(_dt.int8, _dt.uint8, _dt.int32))
    out = _dt.resolve(output_dtype, arg="output_dtype", op=op)
    if out not in _dt.FLOAT_OUTPUTS:
        _check.fail(op, "output_dtype", "bfloat16, float16 or float32", repr(output_dtype))
    s = _check.array(op, "scale", scale, dtypes=_FLOATS)
    yf = y.astype(np.float32)
    if axis is None:
        if s.shape != y.shape[:-1]:
            _check.fail(op, "scale", f"of shape y.shape[:-1] = {y.shape[:-1]} (per-row, axis=None)", _check.describe(s))
        sf = s.astype(np.float32)[..., None]
        zf = None if zero_point is None else np.asarray(zero_point, np.float32)[..., None]
    else:
        ax = _check.integer(op, "axis", axis, minimum=-y.ndim, maximum=y.ndim - 1) % y.ndim
        sf = _channel_vector(op, "scale", s, y.shape[ax], ax, y.ndim).astype(np.float32)
        zf = None if zero_point is None else _channel_vector(
            op, "zero_point", np.asarray(zero_point), y.shape[ax], ax, y.ndim).astype(np.float32)
    if zf is not None:
        yf = yf - zf
    return to_float((yf * sf).astype(np.float32), out)


def anti_quant(x: np.ndarray, scale: np.ndarray, *, offset: np.ndarray | None = None, dst_dtype=None,
               src_dtype=None) -> np.ndarray:
    """Weight dequantization mirroring ``torch_npu.npu_anti_quant``: ``(x + offset) * scale``.

    Parameters
    ----------
    x : int8, or int32 packing 8 int4 codes LSB first (``src_dtype="int4"``/``"quint4x2"``).
    scale : float32 / bfloat16, 1-D of size n (the last dim of the unpacked x) or 1.
    offset : optional, same dtype and shape as scale. It is **added** (the negated zero point).
    dst_dtype : float16 (default) or bfloat16.

    Formula: ``out = cast(fp32((x + offset) * scale))`` with the add and multiply in fp32 and one
    RNE rounding to ``dst_dtype``.
    """
    op = "anti_quant"
    src = _dt.resolve(src_dtype if src_dtype is not None else "int8", arg="src_dtype", op=op)
    if src == _dt.int4:
        x = unpack_int4(_check.array(op, "x", x, dtypes=(_dt.int32,), min_ndim=1))
    elif src == _dt.int8:
        x = _check.array(op, "x", x, dtypes=(_dt.int8,), min_ndim=1)
    else:
        _check.fail(op, "src_dtype", "'int8' or 'int4' (quint4x2)", repr(src_dtype))
    dst = _dt.resolve(dst_dtype if dst_dtype is not None else "float16", arg="dst_dtype", op=op)
    if dst not in (_dt.float16, _dt.bfloat16):
        _check.fail(op, "dst_dtype", "float16 or bfloat16", repr(dst_dtype))
    n = x.shape[-1]
    s = _check.array(op, "scale", scale, dtypes=(_dt.float32, _dt.bfloat16), ndim=1)
    if s.shape[0] not in (1, n):
        _check.fail(op, "scale", f"1-D of size {n} or 1", _check.describe(s))
    xf = x.astype(np.float32)
    if offset is not None:
        o = _check.array(op, "offset", offset, dtypes=(s.dtype,), ndim=1)
        if o.shape != s.shape:
            _check.fail(op, "offset", f"of scale's shape {s.shape}", _check.describe(o))
        xf = xf + o.astype(np.float32)
    return to_float((xf * s.astype(np.float32)).astype(np.float32), dst)
