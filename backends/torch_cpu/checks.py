"""Argument checks of the torch-cpu backend, on the NumPy side, before anything reaches torch.

The backend must reject exactly what the golden rejects, with the golden's exception type and
message. So each checker below runs the golden's own checks in the golden's order, through the same
helpers (:mod:`w8a8._check` and the golden modules' private checkers: ``_channel_vector``,
``_rows_to_groups``, ``_finite_params``, ``_resolve_output``, ``_COMBOS``, ``_weight``, ``_vector``),
and returns the arguments normalized for the device functions: dtype arguments resolved to names,
channel vectors reshaped to broadcast (views, no arithmetic), scales and biases flattened to 1-D.

Data-dependent checks that need the op's own arithmetic (``x * smooth_scales`` overflowing, a
load-time scale rounding to Inf in the model dtype, the int32 accumulator overflowing) run in
torch, in the op, with the golden's messages. This module imports no torch.
"""

from __future__ import annotations

import inspect

import numpy as np

import w8a8
from w8a8 import _check
from w8a8 import dtypes as _dt
from w8a8.dynamic_quant import _X_DTYPES as _DQ_X_DTYPES
from w8a8.dynamic_quant import _rows_to_groups
from w8a8.intgemm import _INT_DTYPES
from w8a8.layout import nz_c0, nz_storage_shape
from w8a8.linear import _X_DTYPES as _LIN_X_DTYPES
from w8a8.linear import _vector, _weight
from w8a8.numerics import ASCEND
from w8a8.quant_matmul import _COMBOS, _K_LIMIT, _resolve_output
from w8a8.quantize import _FLOATS, _channel_vector, _finite_params

_NUMERICS = ASCEND  # the record these checks apply (nan_policy="raise")


def bind(op: str, args: tuple, kwargs: dict) -> dict:
    """The golden's parameters of ``op`` bound to a call (defaults applied).

    A call that does not fit the signature gets the TypeError Python gives the golden function
    itself (raised by calling it: Python checks the arguments before running any of its body).
    """
    golden = getattr(w8a8, op)
    try:
        bound = inspect.signature(golden).bind(*args, **kwargs)
    except TypeError:
        golden(*args, **kwargs)
        raise
    bound.apply_defaults()
    params = dict(bound.arguments)
    params.pop("numerics", None)
    return params


# -- quantizers ------------------------------------------------------------------------------------

def _dynamic(op: str, x, smooth_scales, group_index, dst_type) -> dict:
    """``w8a8.dynamic_quant._prepare``'s checks."""
    x = _check.array(op, "x", x, dtypes=_DQ_X_DTYPES, min_ndim=2, max_ndim=8)
    dst = _dt.resolve(dst_type if dst_type is not None else "int8", arg="dst_type", op=op)
    if dst not in (_dt.int8, _dt.int4):
        _check.fail(op, "dst_type", "'int8' or 'int4' (torch.quint4x2)", repr(dst_type))
    h = x.shape[-1]
    if dst == _dt.int4 and h % 8:
        _check.fail(op, "x", "of last dimension a multiple of 8 for int4 output (8 codes per int32)", _check.describe(x))
    rows = int(np.prod(x.shape[:-1]))
    _check.finite(op, "x", x)
    smooth = gi = None
    if smooth_scales is not None:
        smooth = _check.array(op, "smooth_scales", smooth_scales, dtypes=(x.dtype,))
        _check.finite(op, "smooth_scales", smooth)
        if group_index is None:
            _check.shape(op, "smooth_scales", smooth, [(h,)], f"of shape [H] = [{h}] (without group_index)")
        else:
            gi = _check.array(op, "group_index", group_index, dtypes=(np.int32,), ndim=1)
            e = gi.shape[0]
            if e > 1024:
                _check.fail(op, "group_index", "of at most 1024 groups", _check.describe(gi))
            _check.shape(op, "smooth_scales", smooth, [(e, h)], f"of shape [E, H] = [{e}, {h}] (with group_index)")
            _rows_to_groups(op, gi, rows)  # the values: non-decreasing, >= 0, last == rows
    elif group_index is not None:
        _check.fail(op, "group_index", "None unless smooth_scales is given (it selects the smooth row)",
                    _check.describe(group_index))
    return {"x": x, "smooth_scales": smooth, "group_index": gi, "dst_type": _dt.name(dst)}


def dynamic_quant(x, smooth_scales=None, group_index=None, dst_type="int8"):
    return (), _dynamic("dynamic_quant", x, smooth_scales, group_index, dst_type)


def dynamic_quant_asymmetric(x, smooth_scales=None, group_index=None, dst_type="int8"):
    return (), _dynamic("dynamic_quant_asymmetric", x, smooth_scales, group_index, dst_type)


def quantize(x, scales, zero_points=None, dtype="int8", axis=1, div_mode=True):
    """``w8a8.quantize``'s checks; returns scales / zero_points shaped to broadcast against x."""
    op = "quantize"
    x = _check.array(op, "x", x, dtypes=_FLOATS, min_ndim=1)
    if x.ndim == 0:
        _check.fail(op, "x", "at least 1-D", _check.describe(x))
    out = _dt.resolve(dtype, arg="dtype", op=op)
    if not isinstance(div_mode, bool):
        _check.fail(op, "div_mode", "a bool", _check.describe(div_mode), TypeError)
    axis = _check.integer(op, "axis", axis)
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
        sf = _channel_vector(op, "scales", s, x.shape[ax], ax, x.ndim)
        z = _check.optional(op, "zero_points", zero_points, dtypes=(x.dtype,))
        _finite_params(op, _NUMERICS, s, z)
        zf = None if z is None else _channel_vector(op, "zero_points", z, x.shape[ax], ax, x.ndim)
        if out == _dt.int4 and x.shape[-1] % 8:
            _check.fail(op, "x", "of last dimension a multiple of 8 for int4 output", _check.describe(x))
    else:
        if out not in (_dt.int8, _dt.uint8, _dt.int32):
            _check.fail(op, "dtype", "'int8' (qint8), 'uint8' (quint8) or 'int32' (qint32) with div_mode=True", repr(dtype))
        if not -x.ndim <= axis < x.ndim:
            _check.fail(op, "axis", f"in [{-x.ndim}, {x.ndim - 1}] for a {x.ndim}-D x", str(axis))
        ax = axis % x.ndim
        s = _check.array(op, "scales", scales, dtypes=(_dt.float32, _dt.bfloat16))
        sf = _channel_vector(op, "scales", s, x.shape[ax], ax, x.ndim)
        z = _check.optional(op, "zero_points", zero_points,
                            dtypes=(_dt.int8, _dt.uint8, _dt.int32, _dt.bfloat16, _dt.float32))
        _finite_params(op, _NUMERICS, s, z)
        zf = None if z is None else _channel_vector(op, "zero_points", z, x.shape[ax], ax, x.ndim)
    return (x, sf, zf), {"dtype": _dt.name(out), "div_mode": div_mode}


_TORCH_CASTABLE = tuple(np.dtype(d) for d in (np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64,
                                             np.float16, np.float32, np.float64)) + (_dt.bfloat16,)


def _zero_point(value) -> np.ndarray:
    """A dequantize zero point as an array torch can take (host fp32 cast only for exotic dtypes)."""
    z = np.asarray(value)
    return z if z.dtype in _TORCH_CASTABLE else np.asarray(value, np.float32)


def dequantize(y, scale, zero_point=None, axis=-1, output_dtype="float32"):
    """``w8a8.dequantize``'s checks; returns scale / zero_point shaped to broadcast against y."""
    op = "dequantize"
    y = _check.array(op, "y", y, dtypes=(_dt.int8, _dt.uint8, _dt.int32))
    out = _dt.resolve(output_dtype, arg="output_dtype", op=op)
    if out not in _dt.FLOAT_OUTPUTS:
        _check.fail(op, "output_dtype", "bfloat16, float16 or float32", repr(output_dtype))
    s = _check.array(op, "scale", scale, dtypes=_FLOATS)
    if axis is None:
        if s.shape != y.shape[:-1]:
            _check.fail(op, "scale", f"of shape y.shape[:-1] = {y.shape[:-1]} (per-row, axis=None)", _check.describe(s))
        sf = s[..., None]
        zf = None if zero_point is None else _zero_point(zero_point)[..., None]
    else:
        ax = _check.integer(op, "axis", axis, minimum=-y.ndim, maximum=y.ndim - 1) % y.ndim
        sf = _channel_vector(op, "scale", s, y.shape[ax], ax, y.ndim)
        zf = None if zero_point is None else _channel_vector(
            op, "zero_point", _zero_point(zero_point), y.shape[ax], ax, y.ndim)
    if zf is not None:
        try:
            np.broadcast_shapes(y.shape, zf.shape)
        except ValueError:  # the golden's `yf - zf` raises; raise NumPy's message for it (no data)
            np.broadcast_to(np.float32(0), y.shape) - np.broadcast_to(np.float32(0), zf.shape)
    return (y, sf, zf), {"output_dtype": _dt.name(out)}


def anti_quant(x, scale, offset=None, dst_dtype=None, src_dtype=None):
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
    return (x, s), {"offset": o, "dst_dtype": _dt.name(dst), "src_dtype": _dt.name(src)}


def trans_quant_param(scale, offset=None, round_mode=0):
    op = "trans_quant_param"
    s = _check.array(op, "scale", scale, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2)
    round_mode = _check.choice(op, "round_mode", round_mode, (0, 1))
    o = None
    if offset is not None:
        o = _check.array(op, "offset", offset, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2)
        if s.ndim == 1 and o.ndim == 1:
            if not (o.shape[0] == s.shape[0] or 1 in (o.shape[0], s.shape[0])):
                _check.fail(op, "offset", f"1-D of size {s.shape[0]} or 1 (or the scale of size 1)", _check.describe(o))
        elif o.shape != s.shape:
            _check.fail(op, "offset", f"of the scale's shape {s.shape}", _check.describe(o))
    return (s, o), {"round_mode": 0 if round_mode == 0 else 1}


# -- GEMMs -----------------------------------------------------------------------------------------

def int_matmul(a, b, op="int_matmul"):
    a = _check.array(op, "a", a, dtypes=_INT_DTYPES, min_ndim=2)
    b = _check.array(op, "b", b, dtypes=_INT_DTYPES, min_ndim=2)
    k = a.shape[-1]
    if b.shape[-2] != k:
        _check.fail(op, "b", f"of shape [..., K={k}, N] to match a {tuple(a.shape)}", _check.describe(b))
    np.broadcast_shapes(a.shape[:-2], b.shape[:-2])  # the golden's ValueError for unbroadcastable batches
    return (a, b), {"name": op}


def quant_matmul(x1, x2, scale, offset=None, pertoken_scale=None, bias=None, output_dtype=None, *,
                 finite: bool = True):
    """``w8a8.quant_matmul_stages``'s checks (``finite=False`` skips the NaN/Inf ones).

    int32 ``x2`` (packed int4 weights) is the golden's A8W4 / A4W4 route, which torch-cpu does not
    implement: :class:`~backends.base.Unsupported` (a skip).
    """
    op = "quant_matmul"
    if isinstance(x2, np.ndarray) and x2.dtype == _dt.int32:
        from backends.base import Unsupported

        raise Unsupported("torch-cpu does not implement the int4 quant_matmul route (x2 int32-packed int4: "
                          "A8W4 / A4W4); dense int8 x int8 only")
    out = _resolve_output(output_dtype)
    x1 = _check.array(op, "x1", x1, dtypes=(_dt.int8,), min_ndim=2, max_ndim=6)
    x2 = _check.array(op, "x2", x2, dtypes=(_dt.int8,), min_ndim=2, max_ndim=6)
    m, k = x1.shape[-2:]
    if x2.shape[-2] != k:
        _check.fail(op, "x2", f"of shape [..., K={k}, N] (K of x1 {tuple(x1.shape)})", _check.describe(x2))
    n = x2.shape[-1]
    try:
        np.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    except ValueError:
        _check.fail(op, "x2", f"with batch dims broadcastable to x1's {x1.shape[:-2]}", _check.describe(x2))
    s = _check.array(op, "scale", scale)
    if s.dtype == _dt.float16:
        _check.fail(op, "scale", "float32, bfloat16, int64 or uint64 (the device rejects float16 scales, "
                    "error 161002)", _check.describe(s), TypeError)
    allowed_scale, allowed_bias, with_token = _COMBOS[out.name]
    pt = _check.optional(op, "pertoken_scale", pertoken_scale, dtypes=(_dt.float32,), ndim=1)
    if pt is not None:
        if with_token is None:
            _check.fail(op, "pertoken_scale", f"None for {out.name} output (per-token dequant gives bf16 or fp16)",
                        _check.describe(pt))
        allowed_scale, allowed_bias = with_token
        if pt.shape[0] != m:
            _check.fail(op, "pertoken_scale", f"of shape (M,) = ({m},) (1-D; flatten x1 to 2-D)", _check.describe(pt))
    if s.dtype not in allowed_scale:
        why = " with pertoken_scale" if pt is not None else ""
        _check.fail(op, "scale", f"of dtype {_check.dtype_names(allowed_scale)} for {out.name} output{why}",
                    _check.describe(s), TypeError)
    if k > _K_LIMIT and not (s.dtype in (_dt.float32, _dt.bfloat16) and s.ndim == 1 and pt is not None):
        _check.fail(op, "x1", f"K <= {_K_LIMIT} (only a 1-D float scale with pertoken_scale may exceed it)",
                    _check.describe(x1))
    if n > _K_LIMIT:
        _check.fail(op, "x2", f"N <= {_K_LIMIT} (the last dims of x1 and x2 are limited to 65535)", _check.describe(x2))
    if s.ndim == 2 and s.shape[0] == 1:
        s = s.reshape(-1)
    if s.ndim != 1 or s.shape[0] not in (1, n):
        _check.fail(op, "scale", f"of shape ({n},), (1,) or (1, {n})", _check.describe(scale))
    off = _check.optional(op, "offset", offset, dtypes=(_dt.float32,), ndim=1)
    if off is not None:
        if out != _dt.int8:
            _check.fail(op, "offset", "None unless output_dtype is int8 (requant)", _check.describe(off))
        if off.shape[0] not in (1, n):
            _check.fail(op, "offset", f"of shape ({n},) or (1,)", _check.describe(off))
    b = _check.optional(op, "bias", bias, dtypes=allowed_bias)
    if b is not None:
        if b.ndim == 2 and b.shape[0] == 1:
            b = b.reshape(-1)
        if b.shape != (n,):
            _check.fail(op, "bias", f"of shape ({n},)", _check.describe(bias))
    if finite:
        for arg, value in (("scale", s), ("offset", off), ("pertoken_scale", pt), ("bias", b)):
            if value is not None and _dt.is_float(value.dtype):
                _check.finite(op, arg, value)
    return (x1, x2, s), {"offset": off, "pertoken_scale": pt, "bias": b, "output_dtype": out.name}


# -- layout ----------------------------------------------------------------------------------------

_RAW = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def _raw(op: str, arg: str, w: np.ndarray) -> np.ndarray:
    """``w`` viewed as integers of its element width (layout ops move bits, never values)."""
    if w.dtype.hasobject or w.dtype.itemsize not in _RAW:
        from backends.base import Unsupported

        raise Unsupported(f"torch-cpu {op}: argument '{arg}' of dtype {w.dtype} (itemsize {w.dtype.itemsize}) has no "
                          "torch equivalent; 1, 2, 4 or 8-byte plain dtypes only")
    return np.ascontiguousarray(w).view(_RAW[w.dtype.itemsize])


def format_cast_nz(w):
    w = _check.array("format_cast_nz", "w", w, min_ndim=2)
    return (_raw("format_cast_nz", "w", w),), {"c0": nz_c0(w.dtype), "_view_as": w.dtype}


def nz_to_nd(w_nz, shape):
    op = "nz_to_nd"
    w_nz = _check.array(op, "w_nz", w_nz, min_ndim=4)
    shape = tuple(int(d) for d in shape)
    expected = nz_storage_shape(shape, w_nz.dtype)
    if tuple(w_nz.shape) != expected:
        _check.fail(op, "w_nz", f"of NZ storage shape {expected} for logical shape {shape} ({w_nz.dtype})",
                    _check.describe(w_nz))
    return (_raw(op, "w_nz", w_nz), shape), {"_view_as": w_nz.dtype}


# -- the Linear paths ------------------------------------------------------------------------------

def w8a8_dynamic_linear(x, weight, weight_scale, bias=None):
    """``w8a8.dynamic_linear_stages``'s checks, then ``dynamic_quant``'s on the flattened x.

    The ``quant_matmul`` checks cannot fail here (its dtype table allows every combination this
    path makes) except for a scale / bias that becomes Inf in the model dtype: checked at load.
    """
    op = "w8a8_dynamic_linear"
    x = _check.array(op, "x", x, dtypes=_LIN_X_DTYPES, min_ndim=1)
    weight, n, k = _weight(op, x, weight)
    ws = _vector(op, "weight_scale", weight_scale, n, (_dt.float32, _dt.bfloat16))
    b = None if bias is None else _vector(op, "bias", bias, n, (_dt.float32, _dt.bfloat16, _dt.float16))
    x2 = x.reshape(-1, k)  # NumPy's ValueError for K = 0, as in the golden
    _dynamic("dynamic_quant", x2, None, None, "int8")
    return (x, weight, ws), {"bias": b}


def w8a8_static_linear(x, weight, input_scale, input_offset, deq_scale, quant_bias, bias=None):
    """``w8a8.static_linear_stages``'s checks, ``quantize``'s on x, ``quant_matmul``'s on the dtypes
    (the load-time reciprocal / offset / float bias are checked for Inf at load)."""
    op = "w8a8_static_linear"
    x = _check.array(op, "x", x, dtypes=_LIN_X_DTYPES, min_ndim=1)
    weight, n, k = _weight(op, x, weight)
    s_in = _check.array(op, "input_scale", input_scale, dtypes=(_dt.float32, _dt.bfloat16, _dt.float16))
    o_in = _check.array(op, "input_offset", input_offset, dtypes=(_dt.float32, _dt.bfloat16, _dt.float16, _dt.int8))
    for arg, value in (("input_scale", s_in), ("input_offset", o_in)):
        if value.size != 1:
            _check.fail(op, arg, "per-tensor, of shape [1]", _check.describe(value))
    deq = _vector(op, "deq_scale", deq_scale, n, (_dt.float32, _dt.int64))
    qb = None if quant_bias is None else _vector(op, "quant_bias", quant_bias, n, (_dt.int32,))
    if qb is not None and bias is not None:
        _check.fail(op, "bias", "None when quant_bias is given (msModelSlim folds the float bias into quant_bias)",
                    _check.describe(bias))
    b = None if bias is None else _vector(op, "bias", bias, n, (_dt.float32, _dt.bfloat16, _dt.float16))
    x2 = x.reshape(-1, k)
    _check.finite("quantize", "x", x2)
    # quant_matmul's dtype / shape rules on stand-ins of the right dtypes (no data is touched).
    x_q = np.broadcast_to(np.int8(0), x2.shape)
    mm_bias = qb if qb is not None else (None if b is None else np.zeros(n, x.dtype))
    quant_matmul(x_q, weight.T, deq, bias=mm_bias, output_dtype=x.dtype, finite=False)
    if deq.dtype == _dt.float32:
        _check.finite("quant_matmul", "scale", deq)
    return (x, weight), {"input_scale": s_in, "input_offset": o_in, "deq_scale": deq, "quant_bias": qb, "bias": b}


def check(op: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Bind a call of ``op`` to the golden's signature, check it, return ``(args, kwargs)`` for torch."""
    params = bind(op, args, kwargs)
    return globals()[op](**params)


