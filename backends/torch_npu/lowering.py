"""Lowering: golden-style arguments -> the exact torch_npu calls (pure Python + NumPy, runs anywhere).

:func:`lower` turns one call of a golden op (``w8a8.<op>`` arguments, NumPy arrays) into a
:class:`~backends.torch_npu.plan.Plan`: the arrays to transfer, the load-time steps, the timed
``torch_npu.*`` calls with their exact arguments, and what happens to the outputs. Every documented
torch_npu / CANN constraint the call would violate is raised here, before any device call
(:class:`~backends.torch_npu.plan.ConstraintError` / ``ConstraintTypeError``; golden-level bad input
raises the golden's ``ValueError`` / ``TypeError``).

Dense ops (spec/ascend-ops.md §1–§6, spec/serving-paths.md §3–§4, the torch_npu 2.13.0 docs and meta
registrations):

=====================  ===============================================================================
op                     lowered to
=====================  ===============================================================================
dynamic_quant          ``npu_dynamic_quant(x, smooth_scales=, group_index=, dst_type=torch.int8|quint4x2)``
dynamic_quant_asym...  ``npu_dynamic_quant_asymmetric`` (same arguments)
quantize               ``npu_quantize(x, scales, zero_points, torch.qint8|quint8|qint32|quint4x2, axis, div_mode)``
anti_quant             ``npu_anti_quant(x, scale, offset=, dst_dtype=, src_dtype=)``
trans_quant_param      ``npu_trans_quant_param(scale, offset[, round_mode=1])``; a ``(g, n)`` scale is
                       packed flattened (the packing is elementwise; the 2.13 meta takes 1-D / ``(1, n)`` only)
quant_matmul           ``npu_quant_matmul(x1, x2, scale, offset=, pertoken_scale=, bias=, output_dtype=)``
                       with the load steps below
format_cast_nz         ``npu_format_cast(w, 29)``; the raw NZ storage is read back
w8a8_dynamic_linear    load: ``w.transpose(0, 1).contiguous()`` (+ NZ); run: ``npu_dynamic_quant`` ->
                       ``npu_quant_matmul(pertoken_scale=)``
w8a8_static_linear     load: the same; run: ``npu_quantize(div_mode=False)`` -> ``npu_quant_matmul``
int_matmul             composition: ``npu_quant_matmul(a, b, ones(1) fp32, output_dtype=torch.int32)`` —
                       int32 output ignores the (required) scale: the exact accumulator; int8 only
dequantize             composition: ``npu_anti_quant(y, scale, offset=-zero_point, dst_dtype=)`` — int8 y,
                       per-channel along the last axis, fp16/bf16 output; everything else Unsupported
nz_to_nd               Unsupported: no torch_npu op takes FRACTAL_NZ storage as an input (NZ tensors are
                       only produced by ``npu_format_cast``)
=====================  ===============================================================================

quant_matmul rules (spec §3.2–§3.5, serving-paths §3–§4):

* ``scale`` fp32 with fp16 / int8 output and no ``pertoken_scale``: packed at load with
  ``npu_trans_quant_param(scale, offset)`` (FP19, truncated) — the adapter would do exactly this on
  every call, and graph mode requires it; the offset travels in the packed scale.
* fp16 scale rejected (error 161002); bf16 scale only for bf16 / int32 output; int32 output needs a
  float scale (meta check); a uint64 packed scale is passed as its int64 view (same bits).
* ``(1, N)`` scale / bias made 1-D (the meta takes 1-D only).
* ``pertoken_scale`` must be 1-D ``(M,)``; with a batched ``x1`` (and a 2-D ``x2``), x1 is flattened to
  ``[B*M, K]`` and the per-row scale repeated per batch (the golden's semantics), the result reshaped
  back (vllm-ascend #3257: the device fails on >2-D x with a per-token scale).
* K (last dim of x1) <= 65535 unless the scale is float and ``pertoken_scale`` is given; N (last dim of
  x2) <= 65535 always (vllm-ascend splits ``wq_b`` with N >= 65536 for this limit).
* ``x2`` is cast to FRACTAL_NZ by SGLang's rule (:mod:`._lower_common`).
"""

from __future__ import annotations

import numpy as np

from w8a8 import _check
from w8a8 import dtypes as _dt
from w8a8.dynamic_quant import _prepare as _dynamic_quant_args
from w8a8.layout import nz_storage_shape
from w8a8.linear import _vector, _weight
from w8a8.numerics import ASCEND
from w8a8.quant_matmul import _COMBOS, _K_LIMIT, _resolve_output
from w8a8.quantize import _channel_vector

from ..base import Unsupported
from ._lower_common import DEFAULT, Options, inner_limit, out_dtype, place_weight, transpose_weight
from .plan import ACL_FORMAT_FRACTAL_NZ, Builder, DType, Plan, T, describe, reject

_PACKED = (_dt.int64, _dt.uint64)
_LINEAR_X = (_dt.bfloat16, _dt.float16)


# -- dynamic quantization -------------------------------------------------------------------------
def _dynamic(op: str, fn: str, names: tuple[str, ...], x, smooth_scales, group_index, dst_type) -> Plan:
    x, dst, _ = _dynamic_quant_args(op, x, smooth_scales, group_index, dst_type, ASCEND)
    b = Builder(op)
    kwargs = {}
    xt = b.input("x", x)
    if smooth_scales is not None:
        kwargs["smooth_scales"] = b.input("smooth_scales", smooth_scales, "param")
    if group_index is not None:
        gi = np.asarray(group_index)
        if gi.size > 1 and np.any(np.diff(gi.astype(np.int64)) == 0):
            reject(op, "group_index", "strictly increasing (no empty group)", f"{gi.tolist()[:16]}",
                   "torch_npu npu_dynamic_quant docs: group_index must increase monotonically")
        kwargs["group_index"] = b.input("group_index", gi, "param")
    kwargs["dst_type"] = DType("quint4x2" if dst == _dt.int4 else "int8")
    b.decide("quant_mode / dst_type_max left at their defaults ('pertoken', 0.0): the only mode Atlas A3 supports "
             "(spec §1.2), and absent from the 7.x schema")
    outs = b.call(fn, (xt,), kwargs, out=names)
    return b.build(outs)


def lower_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type="int8",
                        options: Options = DEFAULT) -> Plan:
    return _dynamic("dynamic_quant", "torch_npu.npu_dynamic_quant", ("y", "scale"), x, smooth_scales,
                    group_index, dst_type)


def lower_dynamic_quant_asymmetric(x, *, smooth_scales=None, group_index=None, dst_type="int8",
                                   options: Options = DEFAULT) -> Plan:
    return _dynamic("dynamic_quant_asymmetric", "torch_npu.npu_dynamic_quant_asymmetric", ("y", "scale", "offset"),
                    x, smooth_scales, group_index, dst_type)


# -- static quantization / dequantization ---------------------------------------------------------
_QUANTIZE_DTYPES = {False: {_dt.int8: "qint8", _dt.int4: "quint4x2"},
                    True: {_dt.int8: "qint8", _dt.uint8: "quint8", _dt.int32: "qint32"}}


def lower_quantize(x, scales, zero_points=None, *, dtype="int8", axis=1, div_mode=True,
                   options: Options = DEFAULT) -> Plan:
    op = "quantize"
    x = _check.array(op, "x", x, dtypes=(_dt.float32, _dt.float16, _dt.bfloat16), min_ndim=1)
    out = _dt.resolve(dtype, arg="dtype", op=op)
    if not isinstance(div_mode, bool):
        _check.fail(op, "div_mode", "a bool", describe(div_mode), TypeError)
    axis = _check.integer(op, "axis", axis)
    table = _QUANTIZE_DTYPES[div_mode]
    if out not in table:
        _check.fail(op, "dtype", f"one of {sorted(_dt.name(d) for d in table)} with div_mode={div_mode}", repr(dtype))
    if div_mode:
        if not -x.ndim <= axis < x.ndim:
            _check.fail(op, "axis", f"in [{-x.ndim}, {x.ndim - 1}] for a {x.ndim}-D x", str(axis))
        ax = axis % x.ndim
        s_types, z_types = (_dt.float32, _dt.bfloat16), (_dt.int8, _dt.uint8, _dt.int32, _dt.bfloat16, _dt.float32)
    else:
        if axis < -2:
            _check.fail(op, "axis", ">= -2 (div_mode=False: -2 is the second-to-last axis, anything else the last)",
                        str(axis))
        ax = x.ndim - 2 if axis == -2 else x.ndim - 1
        if ax < 0:
            _check.fail(op, "x", "at least 2-D for axis=-2", describe(x))
        s_types = z_types = (x.dtype,)
        if out == _dt.int4 and x.shape[-1] % 8:
            _check.fail(op, "x", "of last dimension a multiple of 8 for int4 output", describe(x))
    s = _check.array(op, "scales", scales, dtypes=s_types)
    _channel_vector(op, "scales", s, x.shape[ax], ax, x.ndim)
    z = _check.optional(op, "zero_points", zero_points, dtypes=z_types)
    if z is not None:
        _channel_vector(op, "zero_points", z, x.shape[ax], ax, x.ndim)
    for arg, value in (("x", x), ("scales", s), ("zero_points", z)):
        if value is not None and _dt.is_float(value.dtype):
            _check.finite(op, arg, value)
    b = Builder(op)
    args = (b.input("x", x), b.input("scales", s, "param"), b.optional("zero_points", z), DType(table[out]), axis,
            div_mode)
    if div_mode:
        b.decide("div_mode=True -> aclnnQuantize (divide); whether the A2/A3 kernel rounds before or after adding a "
                 "non-integer zero point is not confirmed (Numerics.zero_point_position)")
    y = b.call("torch_npu.npu_quantize", args, out="y")
    return b.build(y)


def lower_anti_quant(x, scale, *, offset=None, dst_dtype=None, src_dtype=None, options: Options = DEFAULT) -> Plan:
    op = "anti_quant"
    src = _dt.resolve(src_dtype if src_dtype is not None else "int8", arg="src_dtype", op=op)
    if src not in (_dt.int8, _dt.int4):
        _check.fail(op, "src_dtype", "'int8' or 'int4' (quint4x2)", repr(src_dtype))
    x = _check.array(op, "x", x, dtypes=(_dt.int32,) if src == _dt.int4 else (_dt.int8,), min_ndim=1)
    if x.ndim > 8:
        reject(op, "x", "at most 8-D", describe(x), "torch_npu npu_anti_quant docs")
    dst = _dt.resolve(dst_dtype if dst_dtype is not None else "float16", arg="dst_dtype", op=op)
    if dst not in (_dt.float16, _dt.bfloat16):
        _check.fail(op, "dst_dtype", "float16 or bfloat16", repr(dst_dtype))
    n = x.shape[-1] * (8 if src == _dt.int4 else 1)
    s = _check.array(op, "scale", scale, dtypes=(_dt.float32, _dt.bfloat16), ndim=1)
    if s.shape[0] not in (1, n):
        _check.fail(op, "scale", f"1-D of size {n} or 1", describe(s))
    o = _check.optional(op, "offset", offset, dtypes=(s.dtype,), ndim=1)
    if o is not None and o.shape != s.shape:
        _check.fail(op, "offset", f"of scale's shape {s.shape}", describe(o))
    b = Builder(op)
    kwargs = {"dst_dtype": DType(_dt.name(dst)), "src_dtype": DType("quint4x2" if src == _dt.int4 else "int8")}
    if o is not None:
        kwargs = {"offset": b.input("offset", o, "param"), **kwargs}
    y = b.call("torch_npu.npu_anti_quant", (b.input("x", x), b.input("scale", s, "param")), kwargs, out="y")
    return b.build(y)


def lower_dequantize(y, scale, zero_point=None, *, axis=-1, output_dtype="float32", options: Options = DEFAULT) -> Plan:
    """Composition through ``npu_anti_quant``: ``(y + (-zp)) * scale`` is ``(y - zp) * scale`` exactly in fp32."""
    op = "dequantize"
    source = "dequantize lowers to npu_anti_quant"
    y = _check.array(op, "y", y, dtypes=(_dt.int8, _dt.uint8, _dt.int32))
    out = _dt.resolve(output_dtype, arg="output_dtype", op=op)
    if out not in _dt.FLOAT_OUTPUTS:
        _check.fail(op, "output_dtype", "bfloat16, float16 or float32", repr(output_dtype))
    if y.dtype != _dt.int8:
        reject(op, "y", "int8 (npu_anti_quant reads int32 as packed int4)", describe(y), source, dtype=True)
    if out == _dt.float32:
        reject(op, "output_dtype", "float16 or bfloat16", repr(output_dtype), source + " (fp16/bf16 output only)",
               dtype=True)
    if axis is None or y.ndim == 0 or \
            _check.integer(op, "axis", axis, minimum=-y.ndim, maximum=y.ndim - 1) % y.ndim != y.ndim - 1:
        reject(op, "axis", "the last axis (per-channel along the last dim)", repr(axis),
               source + " (its scale runs along the last dim)")
    s = _check.array(op, "scale", scale, dtypes=(_dt.float32, _dt.float16, _dt.bfloat16))
    s = _channel_vector(op, "scale", s, y.shape[-1], y.ndim - 1, y.ndim).reshape(-1)
    if s.dtype == _dt.float16:
        s = s.astype(np.float32)  # exact: every fp16 is an fp32
    neg = None
    if zero_point is not None:
        z = np.asarray(zero_point)
        z = _channel_vector(op, "zero_point", z, y.shape[-1], y.ndim - 1, y.ndim).reshape(-1)
        neg = exact_negation(op, z, s.dtype, source)
        size = max(s.size, neg.size)   # npu_anti_quant: offset of exactly the scale's shape
        s, neg = np.broadcast_to(s, (size,)), np.broadcast_to(neg, (size,))
    b = Builder(op)
    kwargs = {} if neg is None else {"offset": b.input("offset", neg, "param", "-zero_point in the scale's dtype")}
    kwargs.update(dst_dtype=DType(_dt.name(out)), src_dtype=DType("int8"))
    b.decide("dequantize has no torch_npu op: lowered to npu_anti_quant with offset = -zero_point "
             "((y + (-zp)) * s is (y - zp) * s exactly in fp32)")
    r = b.call("torch_npu.npu_anti_quant", (b.input("y", y), b.input("scale", s, "param")), kwargs, out="y_float")
    return b.build(r)


def exact_negation(op: str, z: np.ndarray, dtype, source: str) -> np.ndarray:
    """``-z`` in ``dtype``, when exact (a zero point that does not fit the scale's dtype is rejected)."""
    with np.errstate(over="ignore", invalid="ignore"):
        neg = (-z.astype(np.float64)).astype(dtype)
        if not np.array_equal(neg.astype(np.float64), -z.astype(np.float64)):
            reject(op, "zero_point", f"exactly representable in the scale's dtype {_dt.name(dtype)} "
                   "(npu_anti_quant takes the offset in the scale's dtype)", describe(z), source, dtype=True)
    return neg


# -- trans_quant_param --------------------------------------------------------------------------------
def lower_trans_quant_param(scale, offset=None, *, round_mode=0, options: Options = DEFAULT) -> Plan:
    op = "trans_quant_param"
    s = _check.array(op, "scale", scale, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2)
    round_mode = _check.choice(op, "round_mode", round_mode, (0, 1))
    o = _check.optional(op, "offset", offset, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2)
    if o is not None:
        if s.ndim == 1 and o.ndim == 1:
            if not (o.shape[0] == s.shape[0] or 1 in (o.shape[0], s.shape[0])):
                _check.fail(op, "offset", f"1-D of size {s.shape[0]} or 1 (or the scale of size 1)", describe(o))
        elif o.shape != s.shape:
            _check.fail(op, "offset", f"of the scale's shape {s.shape}", describe(o))
    b = Builder(op)
    reshape = {}
    if s.ndim == 2 and s.shape[0] != 1:
        b.decide(f"scale {s.shape} packed as ({s.size},) and reshaped back: the packing is elementwise and the "
                 "2.13 meta accepts (t,) and (1, n) scales only")
        reshape_to = s.shape
        s, o = s.reshape(-1), None if o is None else o.reshape(-1)
    else:
        reshape_to = None
    kwargs = {"round_mode": 1} if round_mode == 1 else {}
    if round_mode == 0:
        b.decide("round_mode 0 (truncation) is the default and is not passed (6.x/7.0 schemas lack round_mode)")
    packed = b.call("torch_npu.npu_trans_quant_param", (b.input("scale", s, "param"), b.optional("offset", o)),
                    kwargs, out="packed")
    if reshape_to is not None:
        reshape[packed] = reshape_to
    return b.build(packed, reshape=reshape)


# -- quant_matmul ---------------------------------------------------------------------------------------
def check_matmul_params(op: str, k: int, n: int, scale, offset, has_token: bool, bias, out: np.dtype):
    """The npu_quant_matmul dtype / shape table (spec §3.3) and the inner-axis limits.

    Returns ``(scale 1-D, offset, bias 1-D)`` as the device takes them.
    """
    s = _check.array(op, "scale", scale)
    if s.dtype == _dt.float16:
        _check.fail(op, "scale", "float32, bfloat16, int64 or uint64 (the device rejects float16 scales, "
                    "error 161002)", describe(s), TypeError)
    allowed_scale, allowed_bias, with_token = _COMBOS[out.name]
    if has_token:
        if with_token is None:
            _check.fail(op, "pertoken_scale", f"None for {out.name} output (per-token dequant gives bf16 or fp16)",
                        "a per-token scale")
        allowed_scale, allowed_bias = with_token
    if s.dtype not in allowed_scale:
        why = " with pertoken_scale" if has_token else ""
        _check.fail(op, "scale", f"of dtype {_check.dtype_names(allowed_scale)} for {out.name} output{why}",
                    describe(s), TypeError)
    if k > _K_LIMIT and not (s.dtype in (_dt.float32, _dt.bfloat16) and s.ndim == 1 and has_token):
        _check.fail(op, "x1", f"K <= {_K_LIMIT} (only float scale + pertoken_scale may exceed it)", f"K = {k}")
    inner_limit(op, "x2", n, "N (the last dim of x2 [K, N])")
    if s.ndim == 2 and s.shape[0] == 1:
        s = s.reshape(-1)
    if s.ndim != 1 or s.shape[0] not in (1, n):
        _check.fail(op, "scale", f"of shape ({n},), (1,) or (1, {n})", describe(scale))
    off = _check.optional(op, "offset", offset, dtypes=(_dt.float32,), ndim=1)
    if off is not None:
        if out != _dt.int8:
            _check.fail(op, "offset", "None unless output_dtype is int8 (requant)", describe(off))
        if off.shape[0] not in (1, n):
            _check.fail(op, "offset", f"of shape ({n},) or (1,)", describe(off))
    bb = _check.optional(op, "bias", bias, dtypes=allowed_bias)
    if bb is not None:
        if bb.ndim == 2 and bb.shape[0] == 1:
            bb = bb.reshape(-1)
        if bb.shape != (n,):
            _check.fail(op, "bias", f"of shape ({n},)", describe(bias))
    for arg, value in (("scale", s), ("offset", off), ("bias", bb)):
        if value is not None and _dt.is_float(value.dtype):
            _check.finite(op, arg, value)
    return s, off, bb


def matmul_call(b: Builder, x1: T, x2: T, s: np.ndarray, off, pertoken: T | None, bias, out: np.dtype, *,
                scale_name: str = "scale", bias_name: str = "bias") -> T:
    """Param inputs, the scale packing load step and the ``npu_quant_matmul`` call (checked params);
    ``scale_name`` / ``bias_name`` name the inputs after the golden's arguments."""
    kwargs = {}
    if s.dtype == _dt.float32 and pertoken is None and out in (_dt.float16, _dt.int8):
        raw = b.input(scale_name, s, "param")
        scale = b.load("torch_npu.npu_trans_quant_param", (raw, b.optional("offset", off)), out=f"{scale_name}_packed",
                       why="fp32 scale, fp16/int8 output, no pertoken_scale: FP19 int64 as the adapter packs it")
        b.decide(f"scale float32 with {out.name} output and no pertoken_scale -> npu_trans_quant_param at load "
                 "(FP19, truncated; spec §3.5: the adapter would pack it on every call)"
                 + ("; the offset is packed into it" if off is not None else ""))
        off = None
    elif s.dtype == _dt.uint64:
        scale = b.input(scale_name, s.view(np.int64), "param", "uint64 packed scale as its int64 view (same bits)")
        b.decide(f"{scale_name} uint64 passed as its int64 view (same bits)")
    else:
        scale = b.input(scale_name, s, "param")
    if off is not None:
        kwargs["offset"] = b.input("offset", off, "param")
    if pertoken is not None:
        kwargs["pertoken_scale"] = pertoken
    if bias is not None:
        kwargs["bias"] = b.input(bias_name, bias, "param")
    kwargs["output_dtype"] = out_dtype(out)
    return b.call("torch_npu.npu_quant_matmul", (x1, x2, scale), kwargs, out="y")


def lower_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None,
                       options: Options = DEFAULT) -> Plan:
    op = "quant_matmul"
    out = _resolve_output(output_dtype)
    x1 = _check.array(op, "x1", x1, dtypes=(_dt.int8,), min_ndim=2, max_ndim=6)
    x2 = _check.array(op, "x2", x2, dtypes=(_dt.int8,), min_ndim=2, max_ndim=6)
    m, k = x1.shape[-2:]
    if x2.shape[-2] != k:
        _check.fail(op, "x2", f"of shape [..., K={k}, N] (K of x1 {tuple(x1.shape)})", describe(x2))
    n = x2.shape[-1]
    try:
        batch = np.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    except ValueError:
        _check.fail(op, "x2", f"with batch dims broadcastable to x1's {x1.shape[:-2]}", describe(x2))
    pt = _check.optional(op, "pertoken_scale", pertoken_scale, dtypes=(_dt.float32,), ndim=1)
    if pt is not None:
        if pt.shape[0] != m:
            _check.fail(op, "pertoken_scale", f"of shape (M,) = ({m},) (1-D; flatten x1 to 2-D)", describe(pt))
        _check.finite(op, "pertoken_scale", pt)
    s, off, bb = check_matmul_params(op, k, n, scale, offset, pt is not None, bias, out)
    b = Builder(op)
    reshape = {}
    if pt is not None and x1.ndim > 2:
        if x2.ndim > 2:
            reject(op, "x2", "2-D when pertoken_scale is given with a batched x1", describe(x2),
                   "the device takes a 1-D (m,) pertoken_scale of a 2-D x1; vllm-ascend #3257")
        reps = int(np.prod(x1.shape[:-2]))
        x1t = b.input("x1", x1.reshape(-1, k), source=f"x1 {tuple(x1.shape)} flattened to 2-D")
        ptt = b.input("pertoken_scale", np.tile(pt, reps), source=f"pertoken_scale repeated for {reps} batches")
        b.decide(f"x1 {tuple(x1.shape)} flattened to [{reps * m}, {k}] and pertoken_scale repeated per batch "
                 "(1-D): the device needs a 2-D x1 with a per-token scale (vllm-ascend #3257)")
        reshape_to = tuple(batch) + (m, n)
    else:
        x1t = b.input("x1", x1)
        ptt = b.optional("pertoken_scale", pt, "activation")
        reshape_to = None
    w = place_weight(b, b.input("x2", x2, "weight"), x2.shape, _dt.int8, options, op=op, arg="x2")
    y = matmul_call(b, x1t, w, s, off, ptt, bb, out)
    if reshape_to is not None:
        reshape[y] = reshape_to
    return b.build(y, reshape=reshape)


def lower_int_matmul(a, b, *, op: str = "int_matmul", options: Options = DEFAULT) -> Plan:
    """Composition: int32-output ``npu_quant_matmul`` (scale required but ignored) is the exact accumulator."""
    name = "int_matmul"
    source = "int_matmul lowers to npu_quant_matmul(output_dtype=torch.int32)"
    for arg, value in (("a", a), ("b", b)):
        value = _check.array(name, arg, value, min_ndim=2)
        if value.dtype != _dt.int8:
            reject(name, arg, "int8", describe(value), source, dtype=True)
        if value.ndim > 6:
            reject(name, arg, "2-D to 6-D", describe(value), source)
    k = a.shape[-1]
    if b.shape[-2] != k:
        _check.fail(name, "b", f"of shape [..., K={k}, N] (K of a {tuple(a.shape)})", describe(b))
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        _check.fail(name, "b", f"with batch dims broadcastable to a's {a.shape[:-2]}", describe(b))
    inner_limit(name, "a", k, "K (the last dim of a)")
    inner_limit(name, "b", b.shape[-1], "N (the last dim of b)")
    pb = Builder(name)
    ones = pb.input("scale", np.ones(1, np.float32), "param", "ones(1): required by the op, ignored for int32 output")
    y = pb.call("torch_npu.npu_quant_matmul", (pb.input("a", a), pb.input("b", b), ones),
                {"output_dtype": DType("int32")}, out="acc")
    pb.decide("int_matmul has no torch_npu op: npu_quant_matmul with int32 output returns the raw accumulator "
              "(scale ignored; spec §3.4)")
    return pb.build(y)


# -- layout ---------------------------------------------------------------------------------------------
def lower_format_cast_nz(w, *, options: Options = DEFAULT) -> Plan:
    op = "format_cast_nz"
    w = _check.array(op, "w", w, min_ndim=2)
    if w.dtype.itemsize > 4 or w.dtype.kind not in "iufV":
        reject(op, "w", "a 1-, 2- or 4-byte dtype", describe(w), "torch_npu casts no 8-byte tensors to NZ",
               dtype=True)
    b = Builder(op)
    nz = b.call("torch_npu.npu_format_cast", (b.input("w", w, "weight"), ACL_FORMAT_FRACTAL_NZ), out="w_nz")
    b.decide("the result's raw storage is read back (the logical shape stays ND); the readback through "
             "untyped_storage is inferred from the torch_npu sources, not confirmed on a device")
    return b.build(nz, readback={nz: nz_storage_shape(w.shape, w.dtype)})


# -- the Linear serving paths ------------------------------------------------------------------------------
def dynamic_linear_into(b: Builder, op: str, x2: T, k: int, x_dtype, weight, weight_scale, bias, options: Options,
                        names: tuple[str, str, str] = ("weight", "weight_scale", "bias")) -> tuple[T, int]:
    """The W8A8_DYNAMIC Linear on a 2-D device activation ``x2 [M, K]`` of ``x_dtype``: checks, load steps
    (weight ``[N, K]`` -> ``[K, N]`` contiguous -> NZ decision; scale -> bf16 / fp32 on the host) and the two
    calls. Returns ``(y [M, N], N)``. ``names`` are the golden argument names (for messages and formats)."""
    w_name, s_name, b_name = names
    weight = _check.array(op, w_name, weight, dtypes=(_dt.int8,), ndim=2)
    n = weight.shape[0]
    if weight.shape[1] != k:
        _check.fail(op, w_name, f"of shape [N, K] with K = {k} (the last dim of the activation)", describe(weight))
    ws = _vector(op, s_name, weight_scale, n, (_dt.float32, _dt.bfloat16))
    ws = ws.astype(_dt.bfloat16) if x_dtype == _dt.bfloat16 else ws.astype(np.float32)
    floats = (_dt.float32, _dt.bfloat16, _dt.float16)
    bb = None if bias is None else _vector(op, b_name, bias, n, floats).astype(x_dtype)
    s, _, bb = check_matmul_params(op, k, n, ws, None, True, bb, np.dtype(x_dtype))
    b.decide(f"{s_name} -> {_dt.name(ws.dtype)} on the host at load (SGLang params_dtype; fp32 for fp16 output, "
             "the only legal per-token fp16 scale)")
    w = transpose_weight(b, b.input(w_name, weight, "weight", "checkpoint [N, K]"), (0, 1), w_name)
    w = place_weight(b, w, (k, n), _dt.int8, options, op=op, arg=w_name)
    x_q, x_scale = b.call("torch_npu.npu_dynamic_quant", (x2,), {"dst_type": DType("int8")}, out=("x_q", "x_scale"))
    return matmul_call(b, x_q, w, s, None, x_scale, bb, np.dtype(x_dtype), scale_name=s_name, bias_name=b_name), n


def lower_w8a8_dynamic_linear(x, weight, weight_scale, *, bias=None, options: Options = DEFAULT) -> Plan:
    op = "w8a8_dynamic_linear"
    x = _check.array(op, "x", x, dtypes=_LINEAR_X, min_ndim=1)
    weight, n, k = _weight(op, x, weight)
    _check.finite(op, "x", x)
    b = Builder(op)
    x2 = b.input("x", x.reshape(-1, k), source=f"x {tuple(x.shape)} flattened to 2-D")
    y, n = dynamic_linear_into(b, op, x2, k, x.dtype, weight, weight_scale, bias, options)
    return b.build(y, reshape={y: x.shape[:-1] + (n,)})


def lower_w8a8_static_linear(x, weight, *, input_scale, input_offset, deq_scale, quant_bias, bias=None,
                             options: Options = DEFAULT) -> Plan:
    op = "w8a8_static_linear"
    x = _check.array(op, "x", x, dtypes=_LINEAR_X, min_ndim=1)
    weight, n, k = _weight(op, x, weight)
    s_in = _check.array(op, "input_scale", input_scale, dtypes=(_dt.float32, _dt.bfloat16, _dt.float16))
    o_in = _check.array(op, "input_offset", input_offset, dtypes=(_dt.float32, _dt.bfloat16, _dt.float16, _dt.int8))
    for arg, value in (("input_scale", s_in), ("input_offset", o_in)):
        if value.size != 1:
            _check.fail(op, arg, "per-tensor, of shape [1]", describe(value))
    deq = _vector(op, "deq_scale", deq_scale, n, (_dt.float32, _dt.int64))
    qb = None if quant_bias is None else _vector(op, "quant_bias", quant_bias, n, (_dt.int32,))
    if qb is not None and bias is not None:
        _check.fail(op, "bias", "None when quant_bias is given (msModelSlim folds the float bias into quant_bias)",
                    describe(bias))
    floats = (_dt.float32, _dt.bfloat16, _dt.float16)
    fb = None if bias is None else _vector(op, "bias", bias, n, floats).astype(x.dtype)
    _check.finite(op, "x", x)
    s, _, bb = check_matmul_params(op, k, n, deq, None, False, qb if qb is not None else fb, x.dtype)
    # Load: SGLang's params_dtype parameters, repeated to [K]; the reciprocal in params_dtype (torch
    # computes a bf16 / fp16 division in fp32 and rounds once), as the golden's static_linear_stages.
    params = x.dtype
    s_param = s_in.reshape(1).astype(np.float32).astype(params)
    with np.errstate(over="ignore", divide="ignore"):
        recip = (np.float32(1) / s_param.astype(np.float32)).astype(params)
    off = o_in.reshape(1).astype(np.float32).astype(params)
    b = Builder(op)
    x2 = b.input("x", x.reshape(-1, k), source=f"x {tuple(x.shape)} flattened to 2-D")
    r = b.input("input_scale_reciprocal", np.repeat(recip, k), "param", "1 / input_scale in x's dtype, repeated to K")
    o = b.input("input_offset", np.repeat(off, k), "param", "input_offset in x's dtype, repeated to K")
    b.decide("input_scale reciprocal and input_offset prepared on the host at load in x's dtype, repeated to [K] "
             "(SGLang aclnn_input_scale_reciprocal / aclnn_input_offset)")
    w = transpose_weight(b, b.input("weight", weight, "weight", "checkpoint [N, K]"), (0, 1), "weight")
    w = place_weight(b, w, (k, n), _dt.int8, options, op=op, arg="weight")
    x_q = b.call("torch_npu.npu_quantize", (x2, r, o, DType("qint8"), -1, False), out="x_q")
    y = matmul_call(b, x_q, w, s, None, None, bb, x.dtype, scale_name="deq_scale",
                    bias_name="quant_bias" if qb is not None else "bias")
    return b.build(y, reshape={y: x.shape[:-1] + (n,)})


# -- registry -------------------------------------------------------------------------------------------------
UNSUPPORTED: dict[str, str] = {
    "nz_to_nd": "no torch_npu op takes FRACTAL_NZ storage as an input (NZ tensors only come out of "
                "npu_format_cast); format_cast_nz covers the layout",
}
"""Ops of :data:`backends.ops.OPS` that the torch-npu backend declares unsupported, with the reason."""

LOWERINGS = {
    "dynamic_quant": lower_dynamic_quant,
    "dynamic_quant_asymmetric": lower_dynamic_quant_asymmetric,
    "quantize": lower_quantize,
    "dequantize": lower_dequantize,
    "anti_quant": lower_anti_quant,
    "trans_quant_param": lower_trans_quant_param,
    "int_matmul": lower_int_matmul,
    "quant_matmul": lower_quant_matmul,
    "format_cast_nz": lower_format_cast_nz,
    "w8a8_dynamic_linear": lower_w8a8_dynamic_linear,
    "w8a8_static_linear": lower_w8a8_static_linear,
}


def _register_moe() -> None:
    from . import lowering_moe

    LOWERINGS.update(lowering_moe.LOWERINGS)
    UNSUPPORTED.update(lowering_moe.UNSUPPORTED)


_register_moe()


def lower(op: str, *args, options: Options = DEFAULT, **kwargs) -> Plan:
    """The plan of ``op`` called with golden-style ``args`` / ``kwargs`` (see the module docstring).

    Raises :class:`backends.Unsupported` for an op the backend does not lower, the golden's
    ``ValueError`` / ``TypeError`` for bad input, and ``ConstraintError`` / ``ConstraintTypeError``
    for a documented device constraint.
    """
    if op in UNSUPPORTED:
        raise Unsupported(f"torch-npu: {op}: {UNSUPPORTED[op]}")
    if op not in LOWERINGS:
        raise Unsupported(f"torch-npu: no lowering for op '{op}'")
    return LOWERINGS[op](*args, options=options, **kwargs)
