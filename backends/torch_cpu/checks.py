"""Argument checks of the torch-cpu backend, on the NumPy side, before anything reaches torch.

The backend must reject exactly what the golden rejects, with the golden's exception type and
message, so every checker below calls the golden's own public argument function
(``w8a8.<module>.<op>_args``: one implementation of each rule, in the golden's order) and maps the
normalized result to the arguments of the device functions: dtype arguments resolved to names,
channel vectors reshaped to broadcast (views, no arithmetic), scales and biases flattened to 1-D, the
Linear paths' parameters as loaded (the golden's load-time conversions, checked).

What is torch-cpu's own: the calls it declines (:class:`~backends.base.Unsupported`: the int4
``quant_matmul`` route, layout dtypes torch has no equivalent for) and the host-side conversion of
zero points of dtypes torch cannot take. Data-dependent checks that need the op's own arithmetic
(``x * smooth_scales`` overflowing, the int32 accumulator overflowing) run in torch, in the op, with
the golden's messages. This module imports no torch.
"""

from __future__ import annotations

import inspect

import numpy as np

import w8a8
from w8a8 import dtypes as _dt
from w8a8.dynamic_quant import dynamic_quant_args, dynamic_quant_asymmetric_args
from w8a8.intgemm import int_matmul_args
from w8a8.layout import format_cast_nz_args, nz_to_nd_args
from w8a8.linear import dynamic_linear_args, static_linear_args
from w8a8.numerics import ASCEND
from w8a8.quant_matmul import quant_matmul_args
from w8a8.quantize import anti_quant_args, dequantize_args, quantize_args
from w8a8.trans_quant_param import trans_quant_param_args

_NUMERICS = ASCEND  # the record these checks apply (nan_policy="raise"): the one torch-cpu declares


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

def _dynamic_kwargs(a) -> dict:
    return {"x": a.x, "smooth_scales": a.smooth_scales, "group_index": a.group_index, "dst_type": a.dst_name}


def dynamic_quant(x, smooth_scales=None, group_index=None, dst_type="int8"):
    return (), _dynamic_kwargs(dynamic_quant_args(x, smooth_scales=smooth_scales, group_index=group_index,
                                                  dst_type=dst_type, numerics=_NUMERICS))


def dynamic_quant_asymmetric(x, smooth_scales=None, group_index=None, dst_type="int8"):
    return (), _dynamic_kwargs(dynamic_quant_asymmetric_args(x, smooth_scales=smooth_scales, group_index=group_index,
                                                             dst_type=dst_type, numerics=_NUMERICS))


def quantize(x, scales, zero_points=None, dtype="int8", axis=1, div_mode=True):
    """The golden's checks; scales / zero_points shaped to broadcast against x."""
    a = quantize_args(x, scales, zero_points, dtype=dtype, axis=axis, div_mode=div_mode, numerics=_NUMERICS)
    return (a.x, a.scales_b, a.zero_points_b), {"dtype": a.out_name, "div_mode": a.div_mode}


_TORCH_CASTABLE = tuple(np.dtype(d) for d in (np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64,
                                             np.float16, np.float32, np.float64)) + (_dt.bfloat16,)


def _zero_point(z: np.ndarray) -> np.ndarray:
    """A dequantize zero point as an array torch can take (host fp32 cast only for exotic dtypes)."""
    return z if z.dtype in _TORCH_CASTABLE else z.astype(np.float32)


def dequantize(y, scale, zero_point=None, axis=-1, output_dtype="float32"):
    """The golden's checks; scale / zero_point shaped to broadcast against y."""
    a = dequantize_args(y, scale, zero_point, axis=axis, output_dtype=output_dtype)
    zb = None if a.zero_point_b is None else _zero_point(a.zero_point_b)
    return (a.y, a.scale_b, zb), {"output_dtype": _dt.name(a.out)}


def anti_quant(x, scale, offset=None, dst_dtype=None, src_dtype=None):
    a = anti_quant_args(x, scale, offset=offset, dst_dtype=dst_dtype, src_dtype=src_dtype)
    return (a.x, a.scale), {"offset": a.offset, "dst_dtype": _dt.name(a.dst), "src_dtype": _dt.name(a.src)}


def trans_quant_param(scale, offset=None, round_mode=0):
    a = trans_quant_param_args(scale, offset, round_mode=round_mode)
    return (a.scale, a.offset), {"round_mode": a.round_mode}


# -- GEMMs -----------------------------------------------------------------------------------------

def int_matmul(a, b, op="int_matmul"):
    args = int_matmul_args(a, b, op=op)
    return (args.a, args.b), {"name": op}


def quant_matmul(x1, x2, scale, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
    """The golden's checks (:func:`w8a8.quant_matmul.quant_matmul_args`).

    int32 ``x2`` (packed int4 weights) is the golden's A8W4 / A4W4 route, which torch-cpu does not
    implement: :class:`~backends.base.Unsupported` (a skip).
    """
    if isinstance(x2, np.ndarray) and x2.dtype == _dt.int32:
        from backends.base import Unsupported

        raise Unsupported("torch-cpu does not implement the int4 quant_matmul route (x2 int32-packed int4: "
                          "A8W4 / A4W4); dense int8 x int8 only")
    a = quant_matmul_args(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias,
                          output_dtype=output_dtype, numerics=_NUMERICS)
    return (a.x1, a.x2, a.scale), {"offset": a.offset, "pertoken_scale": a.pertoken_scale, "bias": a.bias,
                                   "output_dtype": a.out.name}


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
    a = format_cast_nz_args(w)
    return (_raw("format_cast_nz", "w", a.w),), {"c0": a.c0, "_view_as": a.w.dtype}


def nz_to_nd(w_nz, shape):
    a = nz_to_nd_args(w_nz, shape)
    return (_raw("nz_to_nd", "w_nz", a.w_nz), a.shape), {"_view_as": a.w_nz.dtype}


# -- the Linear paths ------------------------------------------------------------------------------

def w8a8_dynamic_linear(x, weight, weight_scale, bias=None):
    """The golden's checks, which include ``dynamic_quant``'s on the flattened x and ``quant_matmul``'s
    on the loaded parameters; returns the weight scale and bias as loaded (bf16 / fp32, model dtype)."""
    a = dynamic_linear_args(x, weight, weight_scale, bias=bias, numerics=_NUMERICS)
    p = a.params
    return (a.x, p.weight, p.weight_scale), {"bias": p.bias}


def w8a8_static_linear(x, weight, input_scale, input_offset, deq_scale, quant_bias, bias=None):
    """The golden's checks, which include ``quantize``'s and ``quant_matmul``'s on the loaded parameters;
    returns those parameters as loaded (the reciprocal and offset in the model dtype, the matmul bias)."""
    a = static_linear_args(x, weight, input_scale=input_scale, input_offset=input_offset, deq_scale=deq_scale,
                           quant_bias=quant_bias, bias=bias, numerics=_NUMERICS)
    return (a.x, a.weight), {"input_scale_reciprocal": a.input_scale_reciprocal, "input_offset": a.input_offset,
                             "deq_scale": a.deq_scale, "bias": a.matmul_bias}


def check(op: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Bind a call of ``op`` to the golden's signature, check it, return ``(args, kwargs)`` for torch."""
    params = bind(op, args, kwargs)
    return globals()[op](**params)
