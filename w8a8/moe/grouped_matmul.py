"""``npu_grouped_matmul``, single-tensor int8 form (ops-transformer
``gmm/grouped_matmul/``, ``aclnn_grouped_matmul.cpp``; op-plugin ``GroupedMatmulKernelNpuOpApi.cpp``).

One ``x [M, K]`` whose rows are split into consecutive groups by ``group_list``, one weight
``[E, K, N]``, one output ``[M, N]`` (``split_item`` 2/3, ``group_type`` 0). Rows of group ``e`` are
multiplied by ``weight[e]``; the int32 accumulator is exact (:func:`w8a8.intgemm.int_matmul`);
the dequant epilogue is the one of :func:`w8a8.quant_matmul` (shared code), plus the activation.

Speed: one loop over the non-empty groups; for groups of few rows the weight is converted to float
in cache-sized column slabs instead of all at once (the same exact products, column by column).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..intgemm import add_int32, int_matmul
from ..numerics import ASCEND, Numerics
from ..quant_matmul import epilogue
from ..registry import golden_op
from ..rounding import to_float
from ..trans_quant_param import decode_quant_param, fp19
from . import _common as C

__all__ = ["grouped_matmul"]

_OP = "grouped_matmul"
_INNER_LIMIT = 65536
_SLAB_FLOATS = 1 << 19   # float32 elements of weight converted at a time for small groups (2 MB)
_SMALL_GROUP = 256       # groups with fewer rows than this use weight slabs
_ACTS = {0: "none", 1: "relu", 2: "gelu_tanh", 4: "fast_gelu", 5: "silu"}


def _single(arg: str, value, *, optional: bool = False):
    """Accept a tensor or the one-element list torch_npu takes; return (array or None, was_list)."""
    if value is None:
        if not optional:
            _check.fail(_OP, arg, "an array (or a one-element list)", "None")
        return None, False
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            _check.fail(_OP, arg, "a single tensor or a one-element list (the golden implements the "
                        "single-tensor form: one x [M, K], one weight [E, K, N], one y)", f"a list of {len(value)}")
        if value[0] is None:
            # torch_npu's schema types every list argument Tensor[] / Tensor[]? (op-plugin
            # op_plugin_functions.yaml:6346 @ 517f2e7d): a None element is refused by the argument
            # parser before the op runs (field report: per_token_scale=[None]).
            _check.fail(_OP, arg, "None or a list of arrays (torch_npu's Tensor[] takes no None element)",
                        "[None]", TypeError)
        return value[0], True
    return value, False


def _expert_acc(xs: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact int32 ``xs @ w`` for one group.

    For a group of few rows the GEMM is bound by converting ``w`` to float, so ``w`` is taken in
    column slabs of about 2 MB of float32 (``_SLAB_FLOATS / K`` columns): each slab is converted and
    used while it sits in cache. The column slab of the serving code's transposed weight view is a
    contiguous block of the checkpoint storage. Every slab is a full-K exact product.
    """
    m, k = xs.shape
    n = w.shape[1]
    cols = max(32, _SLAB_FLOATS // max(k, 1))
    if m >= _SMALL_GROUP or cols >= n:
        return int_matmul(xs, w, op=_OP)
    acc = np.empty((m, n), np.int32)
    for start in range(0, n, cols):
        acc[:, start:start + cols] = int_matmul(xs, w[:, start:start + cols], op=_OP)
    return acc


def _activate(v: np.ndarray, act_type: int, numerics: Numerics) -> np.ndarray:
    """fp32 activations of the GMM epilogue (CANN definitions)."""
    if act_type == 0:
        return v
    with np.errstate(over="ignore", invalid="ignore"):
        if act_type == 1:
            return np.maximum(v, np.float32(0))
        if act_type == 5:
            return C.silu(v, numerics)
        if act_type == 2:   # 0.5 v (1 + tanh(z)) = v / (1 + exp(-2z)), z = sqrt(2/pi) (v + 0.044715 v^3)
            z2 = np.float32(2 * np.sqrt(2 / np.pi)) * (v + np.float32(0.044715) * (v * v * v))
            return v / (np.float32(1) + C.exp(-z2, numerics))
        # 4: fast_gelu = v / (1 + exp(-1.702 |v|)) * exp(0.851 (v - |v|))
        a = np.abs(v)
        return (v / (np.float32(1) + C.exp(np.float32(-1.702) * a, numerics))) * C.exp(
            np.float32(0.851) * (v - a), numerics)


@dataclass(frozen=True)
class GroupedMatmulArgs:
    """The checked arguments of :func:`grouped_matmul` (see :func:`grouped_matmul_args`)."""

    x: np.ndarray                        # int8 [M, K]
    weight: np.ndarray                   # int8 [E, K, N] (any strides)
    bias: np.ndarray | None              # int32 [E, N]
    scale: np.ndarray | None             # [E, N] bfloat16 / float32 (finite) / int64 / uint64
    per_token_scale: np.ndarray | None   # float32 [M], finite
    out: np.dtype                        # int32, bfloat16, float16 or int8 (fixed by the scale's dtype)
    act_type: int                        # 0, 1, 2, 4, 5 (non-zero only with per_token_scale)
    group_list_type: int                 # 0 cumulative ends, 1 counts, 2 (group, count) pairs
    segments: tuple                      # ((group, start_row, stop_row), ...) in row order, empty ones included
    total: int                           # rows written: the group-list total (rows past it are unspecified)
    as_list: bool                        # x came as a one-element list: the result is one too
    group_list: np.ndarray               # int64, as given (checked by group_segments)
    split_item: int                      # 2 or 3 (one output tensor either way)

    @property
    def packed(self) -> bool:
        """The scale is the packed int64 / uint64 of trans_quant_param (int8 requant output)."""
        return self.scale is not None and self.scale.dtype in (_dt.int64, _dt.uint64)


def grouped_matmul_args(x, weight, *, bias=None, scale=None, offset=None, per_token_scale=None, group_list,
                        group_list_type: int = 0, act_type: int = 0, output_dtype=None, split_item: int = 3,
                        group_type: int = 0, numerics: Numerics = ASCEND) -> GroupedMatmulArgs:
    """The argument checks of :func:`grouped_matmul`, in its order, with its errors.

    Every implementation of the op (the golden, backends) calls this first. It unwraps the
    one-element lists, resolves ``output_dtype``, enforces the A2/A3 combination table and parses the
    group list (:func:`~w8a8.moe.group_segments`). TypeError for dtypes and combinations outside the
    table; ValueError for shapes, group lists, options, NaN/Inf scales under ``nan_policy="raise"``.
    """
    xa, as_list = _single("x", x)
    wa, _ = _single("weight", weight)
    ba, _ = _single("bias", bias, optional=True)
    sa, _ = _single("scale", scale, optional=True)
    pa, _ = _single("per_token_scale", per_token_scale, optional=True)
    oa, _ = _single("offset", offset, optional=True)
    return _checked(xa, wa, ba, sa, oa, pa, group_list, group_list_type, act_type, output_dtype, split_item,
                    group_type, numerics, as_list)


def _checked(x, w, b, s, o, pt, group_list, group_list_type, act_type, output_dtype, split_item, group_type,
             numerics, as_list) -> GroupedMatmulArgs:
    C.check_numerics(_OP, numerics)
    split_item = _check.choice(_OP, "split_item", split_item, (2, 3))
    _check.choice(_OP, "group_type", group_type, (0,))
    group_list_type = _check.choice(_OP, "group_list_type", group_list_type, (0, 1, 2))
    act_type = _check.integer(_OP, "act_type", act_type)
    if act_type not in _ACTS:
        _check.fail(_OP, "act_type", "0 (none), 1 (relu), 2 (gelu_tanh), 4 (fast_gelu) or 5 (silu); 3 is "
                    "not supported by the device", str(act_type))
    x = _check.array(_OP, "x", x, dtypes=(_dt.int8,), ndim=2)
    # int8 x takes only an int8 weight here: aclnnGroupedMatmul has no int8-x / bf16-weight pattern
    # ("GMM: there is no matching xDtype and weightDtype pattern", ops-transformer
    # gmm/grouped_matmul/op_host/op_api/aclnn_grouped_matmul.cpp:984-1005 @ c29bc106).
    w = _check.array(_OP, "weight", w, dtypes=(_dt.int8,), ndim=3)
    m, k = x.shape
    e, wk, n = w.shape
    if wk != k:
        _check.fail(_OP, "weight", f"of shape [E, K, N] with K = {k} (columns of x)", _check.describe(w))
    if k >= _INNER_LIMIT or n >= _INNER_LIMIT:
        _check.fail(_OP, "weight", f"K and N < {_INNER_LIMIT} (the device's inner-dimension limit)", _check.describe(w))
    if o is not None:
        _check.fail(_OP, "offset", "None (the quantized grouped matmul has no offset)", _check.describe(o))
    out = _dt.resolve("int8" if output_dtype is None else output_dtype, arg="output_dtype", op=_OP)
    if out not in (_dt.int8, _dt.bfloat16, _dt.float16, _dt.int32):
        _check.fail(_OP, "output_dtype", "None, int8, bfloat16, float16 or int32", repr(output_dtype), TypeError)
    if s is not None:
        s = _check.array(_OP, "scale", s, dtypes=(_dt.bfloat16, _dt.float32, _dt.int64, _dt.uint64), ndim=2)
        _check.shape(_OP, "scale", s, [(e, n)], f"of shape [E, N] = [{e}, {n}]")
    pt = _check.optional(_OP, "per_token_scale", pt, dtypes=(_dt.float32,), ndim=1)
    if pt is not None and pt.shape[0] != m:
        _check.fail(_OP, "per_token_scale", f"of shape [M] = [{m}]", _check.describe(pt))
    b = _check.optional(_OP, "bias", b, dtypes=(_dt.int32,), ndim=2)
    if b is not None:
        _check.shape(_OP, "bias", b, [(e, n)], f"of shape [E, N] = [{e}, {n}]")
    expected = {None: _dt.int32, _dt.bfloat16: _dt.bfloat16, _dt.float32: _dt.float16,
                _dt.int64: _dt.int8, _dt.uint64: _dt.int8}[None if s is None else s.dtype]
    if out != expected:
        what = "None" if s is None else _dt.name(s.dtype)
        _check.fail(_OP, "output_dtype", f"{_dt.name(expected)} for a {what} scale (bf16 scale -> bf16, "
                    "fp32 scale -> fp16, int64 -> int8, no scale -> int32; e.g. fp32 scale with bf16 output is "
                    "rejected by the device)", _dt.name(out), TypeError)
    if pt is not None and out not in (_dt.bfloat16, _dt.float16):
        _check.fail(_OP, "per_token_scale", "None unless scale is bf16 or fp32 (per-token dequant)",
                    _check.describe(pt))
    if act_type and pt is None:
        _check.fail(_OP, "act_type", "0 without per_token_scale (the device applies activations in the "
                    "per-token case only)", str(act_type))
    for arg, value in (("scale", s), ("per_token_scale", pt)):
        if value is not None and value.dtype != _dt.int64 and value.dtype != _dt.uint64:
            C.check_finite(_OP, arg, value, numerics)
    segs = C.group_segments(_OP, group_list, group_list_type, m, e)
    _check.within_budget(_OP, "weight", (m, n), 8, f"the int32 accumulator and the output [M, N] = [{m}, {n}]")
    return GroupedMatmulArgs(x=x, weight=w, bias=b, scale=s, per_token_scale=pt, out=out, act_type=act_type,
                             group_list_type=group_list_type, segments=tuple(segs),
                             total=max((stop for _, _, stop in segs), default=0), as_list=as_list,
                             group_list=group_list, split_item=split_item)


@golden_op("moe", check=grouped_matmul_args, mirrors="torch_npu.npu_grouped_matmul")
def grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, per_token_scale=None, group_list,
                   group_list_type: int = 0, act_type: int = 0, output_dtype=None, split_item: int = 3,
                   group_type: int = 0, numerics: Numerics = ASCEND):
    """Grouped int8 matmul, mirroring ``torch_npu.npu_grouped_matmul`` in its single-tensor MoE form.

    Parameters
    ----------
    x : int8 ``[M, K]`` (or ``[x]``: the one-element list torch_npu takes; then the result is a
        one-element list too). Multi-tensor lists are not implemented and raise.
    weight : int8 ``[E, K, N]`` (or ``[weight]``); any strided view (the serving code's transposed
        checkpoint weight works as is). ``K, N < 65536``.
    bias : int32 ``[E, N]`` (or ``[bias]``), added to the int32 accumulator.
    scale : ``[E, N]`` (or ``[scale]``): bfloat16 (-> bf16 output), float32 (-> fp16 output), or the
        packed int64/uint64 of :func:`~w8a8.trans_quant_param.trans_quant_param` (-> int8 output,
        per-channel requant). None -> the raw int32 accumulator.
    offset : must be None (the device requires it).
    per_token_scale : float32 ``[M]`` (or a list), with a bf16 or fp32 scale only.
    group_list : int64; ``group_list_type`` 0: ``[E]`` cumulative row ends (non-decreasing); 1:
        ``[E]`` counts; 2: ``[P, 2]`` ``(expert, count)`` pairs taken in order (the key-value output
        of :func:`moe_init_routing_v2`). Row total ``<= M``, at most 1024 entries.
    act_type : 0 none, 1 relu, 2 gelu_tanh, 4 fast_gelu, 5 silu (3 is unsupported on the device).
        Only with ``per_token_scale`` (the device applies activations in the per-token case only).
    output_dtype : None (= x's dtype, int8), ``"int8"``, ``"bfloat16"``, ``"float16"``, ``"int32"``.
    split_item : 2 or 3 (one output tensor); group_type : 0 (groups along M). torch_npu requires
        ``group_type`` explicitly; the golden defaults it to 0, the only value it implements.
    numerics : fields used: ``int32_bias``, ``epilogue_order``, ``fp19_scale``, ``fp19_round_mode``,
        ``requant_clamp9``, ``round_mode``, ``saturate``, ``transcendental`` (activations),
        ``nan_policy``.

    Allowed combinations (A2/A3, ops-transformer ``CheckQuantParamsDtype``; anything else raises)::

        scale          per_token_scale   output   act
        bf16 [E, N]    fp32 [M] | None   bf16     with per_token_scale only
        fp32 [E, N]    fp32 [M] | None   fp16     with per_token_scale only
        int64 [E, N]   None              int8     none
        None           None              int32    none

    Formula for a row ``m`` of group ``e`` (``acc`` = exact int32 ``x[m] @ weight[e]``)::

        acc = acc + bias[e]                                        # int32, in the cube
        int32:        y = acc
        bf16 / fp16:  v = (fp32(acc) * fp32(scale[e])) * per_token_scale[m]
                      v = act(v);  y = cast(v, RNE)
        int8:         y = requant(acc, FP19 scale[e], offset bits) # as quant_matmul's int8 output

    (Numerics can reorder the multiplies or move the bias; the defaults are the device.) The fp32
    scale is used at full precision: whether the GMM adapter reduces it to FP19 like
    ``npu_quant_matmul`` does is not confirmed, so ``fp19_scale="adapter"`` (default) and
    ``"never"`` leave it, ``"always"`` truncates it (``fp19_round_mode``). A bf16 scale fits FP19.
    Without per-token scale the device dequantizes straight into bf16 (``AscendDequant``, internal
    rounding undocumented); the golden rounds the fp32 product once. Activations in fp32: relu ``max(v, 0)``; silu
    ``v / (1 + exp(-v))``; gelu_tanh ``0.5 v (1 + tanh(z))`` evaluated as ``v / (1 + exp(-2z))``,
    ``z = sqrt(2/pi) (v + 0.044715 v^3)`` (the AscendC Gelu form, free of the fp32 cancellation of
    ``1 + tanh(z)`` for negative v);
    fast_gelu ``v / (1 + exp(-1.702 |v|)) * exp(0.851 (v - |v|))``.

    **Rows past the group-list total** are not written by the device (undefined contents); the
    golden writes 0 there. Compare only :func:`valid_rows` ``(group_list, M, group_list_type=...)``.

    Errors: TypeError for dtypes and combinations outside the table; ValueError for shapes, group
    lists, options, NaN/Inf scales under ``nan_policy="raise"``, an ``[M, N]`` accumulator beyond
    the allocation budget (:func:`w8a8._check.within_budget`; 4 GiB or ``W8A8_GOLDEN_MAX_BYTES``); OverflowError if a bias sum leaves int32.
    """
    a = grouped_matmul_args(x, weight, bias=bias, scale=scale, offset=offset, per_token_scale=per_token_scale,
                            group_list=group_list, group_list_type=group_list_type, act_type=act_type,
                            output_dtype=output_dtype, split_item=split_item, group_type=group_type,
                            numerics=numerics)
    y = _grouped_matmul(a, numerics)
    return [y] if a.as_list else y


def _grouped_matmul(a: GroupedMatmulArgs, numerics: Numerics) -> np.ndarray:
    x, w, b, s, pt, out, act_type = a.x, a.weight, a.bias, a.scale, a.per_token_scale, a.out, a.act_type
    m, n = x.shape[0], w.shape[2]
    y = np.zeros((m, n), dtype=out)
    int_bias = b is not None and (numerics.int32_bias == "accumulator" or out == _dt.int32)
    packed = a.packed
    for g, start, stop in a.segments:
        if stop == start:
            continue
        acc = _expert_acc(x[start:stop], w[g])
        bias_g = b[g] if b is not None else None
        if int_bias:
            acc = add_int32(_OP, acc, bias_g)
        if out == _dt.int32:
            y[start:stop] = acc
            continue
        if packed:
            deq, off = decode_quant_param(s[g])
            y[start:stop] = epilogue(acc, deq, off, None, None, bias_g, _dt.int8, numerics)
            continue
        token = pt[start:stop] if pt is not None else None
        deq = s[g].astype(np.float32)
        if numerics.fp19_scale == "always":
            deq = fp19(deq, numerics.fp19_round_mode)
        v = epilogue(acc, deq, None, None, token, bias_g, _dt.float32, numerics)
        y[start:stop] = to_float(_activate(v, act_type, numerics).astype(np.float32), out)
    return y
