"""Lowering: golden-style arguments -> the exact torch_npu calls (pure Python + NumPy, runs anywhere).

:func:`lower` turns one call of a golden op (``w8a8.<op>`` arguments, NumPy arrays) into a
:class:`~backends.torch_npu.plan.Plan`: the arrays to transfer, the load-time steps, the timed
``torch_npu.*`` calls with their exact arguments, and what happens to the outputs.

Each lowering is registered for its op (:func:`lowers`) and takes the golden's checked Args: the
golden's own check (``w8a8.registry.get(op).check``, one implementation of every rule) ran first —
in :meth:`backends.base.Backend.prepare`, or in :func:`lower` — so golden-level bad input raises the
golden's ``ValueError`` / ``TypeError`` with its message. A lowering then applies the documented
torch_npu / CANN constraints the golden does not have, before any device call
(:class:`~backends.torch_npu.plan.ConstraintError` / ``ConstraintTypeError``).

Dense ops (Ascend/op-plugin adapters and docs, hicann/ops-nn kernels, SGLang's and vllm-ascend's W8A8 Linear
methods, the torch_npu 2.13.0 docs and meta registrations):

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

quant_matmul rules (op-plugin ``QuantMatmulKernelNpuOpApi.cpp``, ops-nn ``aclnnQuantMatmulV4.md``):

* ``scale`` fp32 with fp16 / int8 output and no ``pertoken_scale``: packed at load with
  ``npu_trans_quant_param(scale, offset)`` (FP19, truncated) — the adapter would do exactly this on
  every call, and graph mode requires it; the offset travels in the packed scale.
* the golden's dtype table and limits (:func:`w8a8.quant_matmul.quant_matmul_args`): fp16 scale rejected
  (error 161002); bf16 scale only for bf16 / int32 output; int32 output needs a float scale (meta
  check); K and N limits below. A uint64 packed scale is passed as its int64 view (same bits).
* ``(1, N)`` scale / bias made 1-D (the meta takes 1-D only).
* ``pertoken_scale`` must be 1-D ``(M,)``; with a batched ``x1`` (and a 2-D ``x2``), x1 is flattened to
  ``[B*M, K]`` and the per-row scale repeated per batch (the golden's semantics), the result reshaped
  back (vllm-ascend #3257: the device fails on >2-D x with a per-token scale).
* K (last dim of x1) <= 65535 unless the scale is float and ``pertoken_scale`` is given; N (last dim of
  x2) <= 65535 always (vllm-ascend splits ``wq_b`` with N >= 65536 for this limit).
* ``x2`` is cast to FRACTAL_NZ by SGLang's rule (:mod:`._lower_common`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from w8a8 import dtypes as _dt
from w8a8 import registry
from w8a8.dynamic_quant import smoothed_rows
from w8a8.linear import DynamicLinearParams, dynamic_linear_params
from w8a8.numerics import ASCEND

from ..base import Unsupported
from ._lower_common import DEFAULT, Options, inner_limit, out_dtype, place_weight, transpose_weight
from .plan import ACL_FORMAT_FRACTAL_NZ, Builder, DType, EpPlan, Plan, T, describe, reject

_NUMERICS = ASCEND
"""The record the golden's checks run under here: the one :class:`~backends.torch_npu.TorchNpuBackend` declares."""

LOWERINGS: dict[str, Callable[..., Plan]] = {}
"""``{op: lowering(a, options) -> Plan}``: every op the torch-npu backend lowers (:func:`lowers`)."""


def lowers(*ops: str, into: dict | None = None):
    """Register the decorated ``lowering(a, options) -> Plan`` of ``ops`` (``a``: the golden's checked Args)
    in :data:`LOWERINGS`, or in ``into`` (the expert-parallel table, :mod:`.lowering_ep`)."""
    table = LOWERINGS if into is None else into

    def register(fn):
        for op in ops:
            if op not in registry.names():
                raise TypeError(f"torch-npu: @lowers({op!r}): no golden op {op!r}")
            table[op] = fn
        return fn

    return register


# -- dynamic quantization -------------------------------------------------------------------------
def _dynamic(op: str, fn: str, names: tuple[str, ...], a) -> Plan:
    if a.smooth_scales is not None:
        smoothed_rows(a, _NUMERICS, op=op)  # the golden's data check: x * smooth_scales must stay finite
    b = Builder(op)
    kwargs = {}
    xt = b.input("x", a.x)
    if a.smooth_scales is not None:
        kwargs["smooth_scales"] = b.input("smooth_scales", a.smooth_scales, "param")
    if a.group_index is not None:
        gi = a.group_index
        if gi.size > 1 and np.any(np.diff(gi.astype(np.int64)) == 0):
            reject(op, "group_index", "strictly increasing (no empty group)", f"{gi.tolist()[:16]}",
                   "torch_npu npu_dynamic_quant docs: group_index must increase monotonically")
        kwargs["group_index"] = b.input("group_index", gi, "param")
    kwargs["dst_type"] = DType("quint4x2" if a.dst == _dt.int4 else "int8")
    b.decide("quant_mode / dst_type_max left at their defaults ('pertoken', 0.0): the only mode Atlas A3 supports "
             "(ops-nn aclnnDynamicQuantV3.md), and absent from the 7.x schema")
    outs = b.call(fn, (xt,), kwargs, out=names)
    return b.build(outs)


@lowers("dynamic_quant")
def lower_dynamic_quant(a, options: Options = DEFAULT) -> Plan:
    return _dynamic("dynamic_quant", "torch_npu.npu_dynamic_quant", ("y", "scale"), a)


@lowers("dynamic_quant_asymmetric")
def lower_dynamic_quant_asymmetric(a, options: Options = DEFAULT) -> Plan:
    return _dynamic("dynamic_quant_asymmetric", "torch_npu.npu_dynamic_quant_asymmetric", ("y", "scale", "offset"), a)


# -- static quantization / dequantization ---------------------------------------------------------
_QUANTIZE_DTYPES = {False: {_dt.int8: "qint8", _dt.int4: "quint4x2"},
                    True: {_dt.int8: "qint8", _dt.uint8: "quint8", _dt.int32: "qint32"}}
"""The torch dtype that names each output dtype ``quantize_args`` accepts, per ``div_mode``."""


@lowers("quantize")
def lower_quantize(a, options: Options = DEFAULT) -> Plan:
    b = Builder("quantize")
    args = (b.input("x", a.x), b.input("scales", a.scales, "param"), b.optional("zero_points", a.zero_points),
            DType(_QUANTIZE_DTYPES[a.div_mode][a.out]), a.axis, a.div_mode)
    if a.div_mode:
        b.decide("div_mode=True -> aclnnQuantize (divide); whether the A2/A3 kernel rounds before or after adding a "
                 "non-integer zero point is not confirmed (Numerics.zero_point_position)")
    y = b.call("torch_npu.npu_quantize", args, out="y")
    return b.build(y)


@lowers("anti_quant")
def lower_anti_quant(a, options: Options = DEFAULT) -> Plan:
    op = "anti_quant"
    if a.x.ndim > 8:
        reject(op, "x", "at most 8-D", describe(a.x), "torch_npu npu_anti_quant docs")
    b = Builder(op)
    kwargs = {"dst_dtype": DType(_dt.name(a.dst)), "src_dtype": DType("quint4x2" if a.src == _dt.int4 else "int8")}
    if a.offset is not None:
        kwargs = {"offset": b.input("offset", a.offset, "param"), **kwargs}
    y = b.call("torch_npu.npu_anti_quant", (b.input("x", a.x), b.input("scale", a.scale, "param")), kwargs, out="y")
    return b.build(y)


@lowers("dequantize")
def lower_dequantize(a, options: Options = DEFAULT) -> Plan:
    """Composition through ``npu_anti_quant``: ``(y + (-zp)) * scale`` is ``(y - zp) * scale`` exactly in fp32.

    The golden's checks first; then what the composition cannot do (int8 ``y`` only, fp16 / bf16
    output, per-channel along the last axis, a zero point exact in the scale's dtype) is
    :class:`~backends.Unsupported`.
    """
    op = "dequantize"
    source = "dequantize lowers to npu_anti_quant"
    y = a.y
    if y.dtype != _dt.int8:
        reject(op, "y", "int8 (npu_anti_quant reads int32 as packed int4)", describe(y), source, dtype=True)
    if a.out == _dt.float32:
        reject(op, "output_dtype", "float16 or bfloat16", repr(_dt.name(a.out)), source + " (fp16/bf16 output only)",
               dtype=True)
    if a.axis is None or a.axis != y.ndim - 1:
        reject(op, "axis", "the last axis (per-channel along the last dim)", repr(a.axis),
               source + " (its scale runs along the last dim)")
    s = a.scale_b.reshape(-1)
    if s.dtype == _dt.float16:
        s = s.astype(np.float32)  # exact: every fp16 is an fp32
    neg = None
    if a.zero_point_b is not None:
        neg = exact_negation(op, a.zero_point_b.reshape(-1), s.dtype, source)
        size = max(s.size, neg.size)   # npu_anti_quant: offset of exactly the scale's shape
        s, neg = np.broadcast_to(s, (size,)), np.broadcast_to(neg, (size,))
    b = Builder(op)
    kwargs = {} if neg is None else {"offset": b.input("offset", neg, "param", "-zero_point in the scale's dtype")}
    kwargs.update(dst_dtype=DType(_dt.name(a.out)), src_dtype=DType("int8"))
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
@lowers("trans_quant_param")
def lower_trans_quant_param(a, options: Options = DEFAULT) -> Plan:
    s, o = a.scale, a.offset
    b = Builder("trans_quant_param")
    reshape = {}
    if s.ndim == 2 and s.shape[0] != 1:
        b.decide(f"scale {s.shape} packed as ({s.size},) and reshaped back: the packing is elementwise and the "
                 "2.13 meta accepts (t,) and (1, n) scales only")
        reshape_to = s.shape
        s, o = s.reshape(-1), None if o is None else o.reshape(-1)
    else:
        reshape_to = None
    kwargs = {"round_mode": 1} if a.round_mode == 1 else {}
    if a.round_mode == 0:
        b.decide("round_mode 0 (truncation) is the default and is not passed (6.x/7.0 schemas lack round_mode)")
    packed = b.call("torch_npu.npu_trans_quant_param", (b.input("scale", s, "param"), b.optional("offset", o)),
                    kwargs, out="packed")
    if reshape_to is not None:
        reshape[packed] = reshape_to
    return b.build(packed, reshape=reshape)


# -- quant_matmul ---------------------------------------------------------------------------------------
def matmul_call(b: Builder, x1: T, x2: T, s: np.ndarray, off, pertoken: T | None, bias, out: np.dtype, *,
                scale_name: str = "scale", bias_name: str = "bias") -> T:
    """Param inputs, the scale packing load step and the ``npu_quant_matmul`` call (params checked by
    :func:`w8a8.quant_matmul.quant_matmul_args`: 1-D scale / bias); ``scale_name`` / ``bias_name`` name the
    inputs after the golden's arguments."""
    kwargs = {}
    if s.dtype == _dt.float32 and pertoken is None and out in (_dt.float16, _dt.int8):
        raw = b.input(scale_name, s, "param")
        scale = b.load("torch_npu.npu_trans_quant_param", (raw, b.optional("offset", off)), out=f"{scale_name}_packed",
                       why="fp32 scale, fp16/int8 output, no pertoken_scale: FP19 int64 as the adapter packs it")
        b.decide(f"scale float32 with {out.name} output and no pertoken_scale -> npu_trans_quant_param at load "
                 "(FP19, truncated; op-plugin QuantMatmulKernelNpuOpApi.cpp would pack it on every call)"
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


@lowers("quant_matmul")
def lower_quant_matmul(a, options: Options = DEFAULT) -> Plan:
    op = "quant_matmul"
    if a.int4 is not None:
        raise Unsupported("torch-npu: quant_matmul's int4 route (x2 int32-packed int4: A8W4 / A4W4) is not lowered")
    x1, x2, pt = a.x1, a.x2, a.pertoken_scale
    b = Builder(op)
    reshape = {}
    if pt is not None and x1.ndim > 2:
        if x2.ndim > 2:
            reject(op, "x2", "2-D when pertoken_scale is given with a batched x1", describe(x2),
                   "the device takes a 1-D (m,) pertoken_scale of a 2-D x1; vllm-ascend #3257")
        reps = int(np.prod(x1.shape[:-2]))
        x1t = b.input("x1", x1.reshape(-1, a.k), source=f"x1 {tuple(x1.shape)} flattened to 2-D")
        ptt = b.input("pertoken_scale", np.tile(pt, reps), source=f"pertoken_scale repeated for {reps} batches")
        b.decide(f"x1 {tuple(x1.shape)} flattened to [{reps * a.m}, {a.k}] and pertoken_scale repeated per batch "
                 "(1-D): the device needs a 2-D x1 with a per-token scale (vllm-ascend #3257)")
        reshape_to = a.out_shape
    else:
        x1t = b.input("x1", x1)
        ptt = b.optional("pertoken_scale", pt, "activation")
        reshape_to = None
    w = place_weight(b, b.input("x2", x2, "weight"), x2.shape, _dt.int8, options, op=op, arg="x2")
    y = matmul_call(b, x1t, w, a.scale, a.offset, ptt, a.bias, a.out)
    if reshape_to is not None:
        reshape[y] = reshape_to
    return b.build(y, reshape=reshape)


@lowers("int_matmul")
def lower_int_matmul(args, options: Options = DEFAULT) -> Plan:
    """Composition: int32-output ``npu_quant_matmul`` (scale required but ignored) is the exact accumulator.

    On the golden's checked operands (``args.op`` names the op in messages), int8 operands only, 2-D
    to 6-D, and K, N <= 65535 (npu_quant_matmul's limits) are device constraints.
    """
    op = args.op
    source = "int_matmul lowers to npu_quant_matmul(output_dtype=torch.int32)"
    for arg, value in (("a", args.a), ("b", args.b)):
        if value.dtype != _dt.int8:
            reject(op, arg, "int8", describe(value), source, dtype=True)
        if value.ndim > 6:
            reject(op, arg, "2-D to 6-D", describe(value), source)
    inner_limit(op, "a", args.k, "K (the last dim of a)")
    inner_limit(op, "b", args.b.shape[-1], "N (the last dim of b)")
    pb = Builder(op)
    ones = pb.input("scale", np.ones(1, np.float32), "param", "ones(1): required by the op, ignored for int32 output")
    y = pb.call("torch_npu.npu_quant_matmul", (pb.input("a", args.a), pb.input("b", args.b), ones),
                {"output_dtype": DType("int32")}, out="acc")
    pb.decide("int_matmul has no torch_npu op: npu_quant_matmul with int32 output returns the raw accumulator "
              "(scale ignored)")
    return pb.build(y)


# -- layout ---------------------------------------------------------------------------------------------
@lowers("format_cast_nz")
def lower_format_cast_nz(a, options: Options = DEFAULT) -> Plan:
    op = "format_cast_nz"
    w = a.w
    if w.dtype.itemsize > 4 or w.dtype.kind not in "iufV":
        reject(op, "w", "a 1-, 2- or 4-byte dtype", describe(w), "torch_npu casts no 8-byte tensors to NZ",
               dtype=True)
    b = Builder(op)
    nz = b.call("torch_npu.npu_format_cast", (b.input("w", w, "weight"), ACL_FORMAT_FRACTAL_NZ), out="w_nz")
    b.decide("the result's raw storage is read back (the logical shape stays ND); the readback through "
             "untyped_storage is inferred from the torch_npu sources, not confirmed on a device")
    return b.build(nz, readback={nz: a.storage_shape})


# -- the Linear serving paths ------------------------------------------------------------------------------
_DYN_NAMES = ("weight", "weight_scale", "bias")


def _dynamic_linear_calls(b: Builder, op: str, x2: T, p: DynamicLinearParams, x_dtype, options: Options,
                          names: tuple[str, str, str]) -> T:
    """The load steps (weight ``[N, K]`` -> ``[K, N]`` contiguous -> NZ decision) and the two calls of the
    W8A8_DYNAMIC Linear, for parameters loaded and checked by the golden."""
    w_name, s_name, b_name = names
    b.decide(f"{s_name} -> {_dt.name(p.weight_scale.dtype)} on the host at load (SGLang params_dtype; fp32 for fp16 "
             "output, the only legal per-token fp16 scale)")
    w = transpose_weight(b, b.input(w_name, p.weight, "weight", "checkpoint [N, K]"), (0, 1), w_name)
    w = place_weight(b, w, (p.k, p.n), _dt.int8, options, op=op, arg=w_name)
    x_q, x_scale = b.call("torch_npu.npu_dynamic_quant", (x2,), {"dst_type": DType("int8")}, out=("x_q", "x_scale"))
    return matmul_call(b, x_q, w, p.weight_scale, None, x_scale, p.bias, np.dtype(x_dtype), scale_name=s_name,
                       bias_name=b_name)


def dynamic_linear_into(b: Builder, op: str, x2: T, k: int, x_dtype, weight, weight_scale, bias, options: Options,
                        names: tuple[str, str, str] = _DYN_NAMES) -> tuple[T, int]:
    """The W8A8_DYNAMIC Linear on a 2-D device activation ``x2 [M, K]`` of ``x_dtype``: the golden's load-time
    checks and conversions (:func:`w8a8.linear.dynamic_linear_params`), the load steps and the two calls.
    Returns ``(y [M, N], N)``. ``names`` are the golden argument names (for messages and formats)."""
    p = dynamic_linear_params(x_dtype, k, weight, weight_scale, bias, numerics=_NUMERICS, op=op, names=names)
    return _dynamic_linear_calls(b, op, x2, p, x_dtype, options, names), p.n


@lowers("w8a8_dynamic_linear")
def lower_w8a8_dynamic_linear(a, options: Options = DEFAULT) -> Plan:
    op = "w8a8_dynamic_linear"
    p = a.params
    b = Builder(op)
    x2 = b.input("x", a.x.reshape(-1, p.k), source=f"x {tuple(a.x.shape)} flattened to 2-D")
    y = _dynamic_linear_calls(b, op, x2, p, a.x.dtype, options, _DYN_NAMES)
    return b.build(y, reshape={y: a.x.shape[:-1] + (p.n,)})


@lowers("w8a8_static_linear")
def lower_w8a8_static_linear(a, options: Options = DEFAULT) -> Plan:
    op = "w8a8_static_linear"
    b = Builder(op)
    x2 = b.input("x", a.x.reshape(-1, a.k), source=f"x {tuple(a.x.shape)} flattened to 2-D")
    r = b.input("input_scale_reciprocal", a.input_scale_reciprocal, "param",
                "1 / input_scale in x's dtype, repeated to K")
    o = b.input("input_offset", a.input_offset, "param", "input_offset in x's dtype, repeated to K")
    b.decide("input_scale reciprocal and input_offset prepared on the host at load in x's dtype, repeated to [K] "
             "(SGLang aclnn_input_scale_reciprocal / aclnn_input_offset; w8a8.linear.static_activation_params)")
    w = transpose_weight(b, b.input("weight", a.weight, "weight", "checkpoint [N, K]"), (0, 1), "weight")
    w = place_weight(b, w, (a.k, a.n), _dt.int8, options, op=op, arg="weight")
    x_q = b.call("torch_npu.npu_quantize", (x2, r, o, DType("qint8"), -1, False), out="x_q")
    y = matmul_call(b, x_q, w, a.deq_scale, None, None, a.matmul_bias, a.x.dtype, scale_name="deq_scale",
                    bias_name="quant_bias" if a.quant_bias is not None else "bias")
    return b.build(y, reshape={y: a.x.shape[:-1] + (a.n,)})


# -- registry -------------------------------------------------------------------------------------------------
UNSUPPORTED: dict[str, str] = {
    "nz_to_nd": "no torch_npu op takes FRACTAL_NZ storage as an input (NZ tensors only come out of "
                "npu_format_cast); format_cast_nz covers the layout",
}
"""Ops of :data:`backends.ops.OPS` that the torch-npu backend declares unsupported, with the reason."""

from . import lowering_moe  # noqa: E402,F401 - registers the MoE lowerings (it imports this module)
from .lowering_ep import EP_LOWERINGS  # noqa: E402 - the expert-parallel lowerings (one plan per rank)


def unsupported_reason(op: str) -> str | None:
    """Why the backend does not lower ``op`` (None when it does)."""
    if op in UNSUPPORTED:
        return f"torch-npu: {op}: {UNSUPPORTED[op]}"
    if op not in LOWERINGS and op not in EP_LOWERINGS:
        return f"torch-npu: no lowering for op '{op}'"
    return None


def lower(op: str, /, *args, options: Options = DEFAULT, **kwargs) -> Plan | EpPlan:
    """The plan of ``op`` called with golden-style ``args`` / ``kwargs`` (see the module docstring):
    the golden's check on the call (under :data:`w8a8.ASCEND`, the record the backend declares), then
    the op's lowering on its result. An expert-parallel op gives an :class:`~.plan.EpPlan` (one plan per
    rank, :mod:`.lowering_ep`).

    Raises :class:`backends.Unsupported` for an op the backend does not lower, the golden's
    ``ValueError`` / ``TypeError`` for bad input, and ``ConstraintError`` / ``ConstraintTypeError``
    for a documented device constraint.
    """
    reason = unsupported_reason(op)
    if reason is not None:
        raise Unsupported(reason)
    golden = registry.get(op)
    if golden.takes_numerics:
        kwargs = {**kwargs, "numerics": _NUMERICS}
    lowering = LOWERINGS.get(op) or EP_LOWERINGS[op]
    return lowering(golden.args(*args, **kwargs), options)
