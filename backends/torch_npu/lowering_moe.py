"""Lowering of the grouped-MoE ops and the W8A8 MoE serving path to torch_npu calls (pure Python + NumPy).

Golden signatures: :mod:`w8a8.moe`. Sources: spec/ascend-ops.md §5, §7; spec/serving-paths.md §5; the
torch_npu 2.13.0 docs and meta registrations.

=========================  ==================================================================================
op                         lowered to
=========================  ==================================================================================
moe_gating_top_k_softmax   ``npu_moe_gating_top_k_softmax(x, [finished=], k=k)``
moe_gating_top_k           ``npu_moe_gating_top_k(x, k, bias=, input_ids=, tid2eid=, k_group=, group_count=,
                           group_select_mode=, renorm=0, norm_type=, out_flag=, routed_scaling_factor=, eps=)``
                           (every option explicit)
moe_init_routing           ``npu_moe_init_routing(x, row_idx, expert_idx, active_num)`` (v1)
moe_init_routing_v2        ``npu_moe_init_routing_v2(x, expert_idx, scale=, offset=, active_num=,
                           expert_capacity=, expert_num=, drop_pad_mode=0, expert_tokens_num_type=1|2,
                           expert_tokens_num_flag=True, quant_mode=-1|1, active_expert_range=[start, end],
                           row_idx_type=)`` — ``quant_mode`` and ``active_expert_range`` always explicit
                           (the default changed between releases; the adapter caches the first call's
                           ``expert_num`` in a function-local static vector when the range is empty).
                           ``expert_tokens_num_type=0`` (cumsum) runs as 1 + ``torch.cumsum``;
                           ``expert_tokens_num_flag=False`` runs as True and returns the empty count tensor
                           (torch_npu 2.13 documents only type 1/2 and flag True).
grouped_matmul             ``npu_grouped_matmul([x], [w], bias=[b], scale=[s], per_token_scale=[pt],
                           group_list=, split_item=, group_type=0, group_list_type=, act_type=,
                           output_dtype=)[0]`` — ``group_type`` always explicit (the adapter refuses None)
swiglu                     ``npu_swiglu(x, dim=)``
dequant_swiglu_quant       ``npu_dequant_swiglu_quant(x, weight_scale=, activation_scale=, bias=, quant_scale=,
                           quant_offset=, group_index=, activate_left=, quant_mode=)``
moe_finalize_routing       ``npu_moe_finalize_routing(rows, skip1, skip2, bias, scales, src_to_dst, experts,
                           drop_pad_mode=[, k=])``
w8a8_moe                   SGLang ascend_tp: [gating] -> init_routing_v2(quant_mode=1) -> GMM1 (bf16 scale,
                           per-token) -> dequant_swiglu_quant(quant_mode=1, activate_left=True) -> GMM2 ->
                           finalize(drop_pad_mode=2) [+ shared expert as three W8A8_DYNAMIC Linears]
w8a8_moe_prequantized      the same with init_routing_v2(x_q, scale=x_scale, quant_mode=-1)
=========================  ==================================================================================

Rows the device leaves unwritten (past a group-list total, past the routed rows) are set on the host
to the golden's fill after the copy back (:class:`~backends.torch_npu.plan.Fixup`).

Unsupported (raised before any device call): ``swiglu_limit`` (DeepSeek-V4's clamp is not a torch_npu
argument of ``npu_dequant_swiglu_quant``; its ``swiglu_mode`` variant computes ``gate * sigmoid(alpha *
gate) * (up + glu_bias)`` with unconfirmed half order), ``norm_type=2`` / ``renorm=1`` gating
(``aclnnMoeGatingTopKV2``, not in torch_npu 2.13), routing v2 static quantization and drop/pad mode.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from w8a8 import _check
from w8a8 import dtypes as _dt
from w8a8.moe import _common as C
from w8a8.moe.grouped_matmul import _single
from w8a8.moe.routing import moe_init_routing_v2_valid

from ._lower_common import DEFAULT, Options, inner_limit, out_dtype, place_weight, transpose_weight
from .lowering import dynamic_linear_into
from .plan import Builder, DType, Plan, T, describe, reject

_FLOATS = C.FLOATS
_DOCS = "torch_npu 2.13.0 docs"


def _finite(op: str, *pairs) -> None:
    for arg, value in pairs:
        if value is not None and _dt.is_float(value.dtype):
            _check.finite(op, arg, value)


# -- gating ---------------------------------------------------------------------------------------------
def gating_softmax_into(b: Builder, op: str, x: T, finished: T | None, k: int):
    kwargs = {} if finished is None else {"finished": finished}
    kwargs["k"] = k
    return b.call("torch_npu.npu_moe_gating_top_k_softmax", (x,), kwargs, out=("y", "expert_idx", "row_idx"))


def lower_moe_gating_top_k_softmax(x, finished=None, k=1, *, options: Options = DEFAULT) -> Plan:
    op = "moe_gating_top_k_softmax"
    x = _check.array(op, "x", x, dtypes=_FLOATS, min_ndim=2, max_ndim=3)
    k = _check.integer(op, "k", k, minimum=1, maximum=min(x.shape[-1], 1024))
    fin = _check.optional(op, "finished", finished, dtypes=(np.bool_,))
    if fin is not None:
        _check.shape(op, "finished", fin, [x.shape[:-1]], f"of shape x.shape[:-1] = {tuple(x.shape[:-1])}")
    _finite(op, ("x", x))
    b = Builder(op)
    outs = gating_softmax_into(b, op, b.input("x", x), b.optional("finished", fin, "activation"), k)
    return b.build(outs)


def _gating_options(op: str, e: int, k, k_group, group_count, group_select_mode, renorm, norm_type, hashed: bool):
    """The npu_moe_gating_top_k ranges (golden's and the 2.13 doc's); returns the checked ints."""
    if not 1 <= e <= 2048:
        _check.fail(op, "x", "of last dimension (experts) in [1, 2048]", f"E = {e}")
    group_count = _check.integer(op, "group_count", group_count, minimum=1)
    if e % group_count:
        _check.fail(op, "group_count", f"a divisor of the expert count {e}", str(group_count))
    per_group = e // group_count
    if -(-per_group // 32) * 32 * group_count > 2048:
        _check.fail(op, "group_count", "such that ceil32(E / group_count) * group_count <= 2048",
                    f"{group_count} (E = {e})")
    k_group = _check.integer(op, "k_group", k_group, minimum=1, maximum=group_count)
    group_select_mode = _check.choice(op, "group_select_mode", group_select_mode, (0, 1))
    renorm = _check.choice(op, "renorm", renorm, (0, 1))
    norm_type = _check.choice(op, "norm_type", norm_type, (0, 1, 2))
    k = _check.integer(op, "k", k, minimum=1, maximum=min(64, e) if hashed else per_group * k_group)
    if renorm != 0:
        reject(op, "renorm", "0", str(renorm), f"{_DOCS}: npu_moe_gating_top_k renorm 'currently only 0'")
    if norm_type == 2:
        reject(op, "norm_type", "0 (softmax) or 1 (sigmoid)", "2 (sqrt-softplus)",
               f"{_DOCS}: npu_moe_gating_top_k norm_type is 0 or 1 (2 needs aclnnMoeGatingTopKV2)")
    if per_group <= 2:
        reject(op, "group_count", "such that E / group_count > 2", f"{group_count} (E = {e})",
               f"{_DOCS}: npu_moe_gating_top_k group_count; spec §7.4")
    return k, k_group, group_count, group_select_mode, norm_type


def gating_top_k_into(b: Builder, op: str, x: T, k: int, bias: T | None, *, input_ids=None, tid2eid=None,
                      k_group=1, group_count=1, group_select_mode=0, norm_type=0, out_flag=False,
                      routed_scaling_factor=1.0, eps=1e-20):
    kwargs = {}
    if bias is not None:
        kwargs["bias"] = bias
    if input_ids is not None:
        kwargs.update(input_ids=input_ids, tid2eid=tid2eid)
    kwargs.update(k_group=k_group, group_count=group_count, group_select_mode=group_select_mode, renorm=0,
                  norm_type=norm_type, out_flag=bool(out_flag), routed_scaling_factor=float(routed_scaling_factor),
                  eps=float(eps))
    return b.call("torch_npu.npu_moe_gating_top_k", (x, k), kwargs, out=("y", "expert_idx", "norm_out"))


def lower_moe_gating_top_k(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
                           group_select_mode=0, renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0,
                           eps=1e-20, options: Options = DEFAULT) -> Plan:
    op = "moe_gating_top_k"
    x = _check.array(op, "x", x, dtypes=_FLOATS, ndim=2)
    n, e = x.shape
    hashed = input_ids is not None or tid2eid is not None
    if hashed and (input_ids is None or tid2eid is None):
        _check.fail(op, "input_ids" if input_ids is None else "tid2eid",
                    "given together with the other hash-mode argument (input_ids and tid2eid)", "None")
    k, k_group, group_count, group_select_mode, norm_type = _gating_options(
        op, e, k, k_group, group_count, group_select_mode, renorm, norm_type, hashed)
    bb = _check.optional(op, "bias", bias, dtypes=(x.dtype,), ndim=1)
    if bb is not None and bb.shape[0] != e:
        _check.fail(op, "bias", f"of shape [E] = [{e}]", describe(bb))
    if not isinstance(out_flag, (bool, np.bool_)):
        _check.fail(op, "out_flag", "a bool", describe(out_flag), TypeError)
    _finite(op, ("x", x), ("bias", bb))
    b = Builder(op)
    ids = tab = None
    if hashed:
        if not (k_group == group_count or group_count == e):
            _check.fail(op, "k_group", "equal to group_count (or group_count == E) in hash mode", str(k_group))
        ia = _check.array(op, "input_ids", input_ids, dtypes=(_dt.int32, _dt.int64), ndim=1)
        ta = _check.array(op, "tid2eid", tid2eid, dtypes=(_dt.int32, _dt.int64), ndim=2)
        if ia.shape[0] != n:
            _check.fail(op, "input_ids", f"of shape [N] = [{n}]", describe(ia))
        if ta.shape[1] != k:
            _check.fail(op, "tid2eid", f"of shape [num_keys, k] = [*, {k}]", describe(ta))
        if ia.size and (ia.min() < 0 or ia.max() >= ta.shape[0]):
            _check.fail(op, "input_ids", f"in [0, {ta.shape[0]}) (rows of tid2eid)", f"{ia.tolist()[:16]}")
        if ta.size and (ta.min() < 0 or ta.max() >= e):
            _check.fail(op, "tid2eid", f"expert ids in [0, {e})", f"values in [{ta.min()}, {ta.max()}]")
        ids, tab = b.input("input_ids", ia), b.input("tid2eid", ta, "param")
    if not out_flag:
        b.decide("out_flag=False: the device does not write norm_out (undefined); the golden returns the scores "
                 "there — compare norm_out only with out_flag=True")
    outs = gating_top_k_into(b, op, b.input("x", x), k, b.optional("bias", bb), input_ids=ids, tid2eid=tab,
                             k_group=k_group, group_count=group_count, group_select_mode=group_select_mode,
                             norm_type=norm_type, out_flag=out_flag, routed_scaling_factor=routed_scaling_factor,
                             eps=eps)
    return b.build(outs)


# -- routing ------------------------------------------------------------------------------------------------
def lower_moe_init_routing(x, row_idx, expert_idx, active_num, *, options: Options = DEFAULT) -> Plan:
    op = "moe_init_routing"
    x = _check.array(op, "x", x, dtypes=_FLOATS, ndim=2)
    n = x.shape[0]
    row_idx = _check.array(op, "row_idx", row_idx, dtypes=(_dt.int32,), ndim=2)
    expert_idx = _check.array(op, "expert_idx", expert_idx, dtypes=(_dt.int32,), ndim=2)
    if row_idx.shape[0] != n:
        _check.fail(op, "row_idx", f"of shape [N, K] with N = {n} (rows of x)", describe(row_idx))
    _check.shape(op, "expert_idx", expert_idx, [row_idx.shape], f"of row_idx's shape {tuple(row_idx.shape)}")
    active_num = _check.integer(op, "active_num", active_num, minimum=0)
    nk = row_idx.size
    if nk and not np.array_equal(np.sort(row_idx.reshape(-1).astype(np.int64)), np.arange(nk)):
        _check.fail(op, "row_idx", f"a permutation of 0 .. N*K-1 = 0 .. {nk - 1}",
                    f"{row_idx.reshape(-1).tolist()[:16]}")
    if x.size >= 1 << 24:
        reject(op, "x", "of fewer than 2^24 elements", describe(x), f"{_DOCS}: npu_moe_init_routing x")
    _finite(op, ("x", x))
    b = Builder(op)
    outs = b.call("torch_npu.npu_moe_init_routing",
                  (b.input("x", x), b.input("row_idx", row_idx), b.input("expert_idx", expert_idx), active_num),
                  out=("expanded_x", "expanded_row_idx", "expanded_expert_idx"))
    return b.build(outs)


def _prefix(mask: np.ndarray) -> int:
    """Length of the leading all-True rows of a row mask (the device writes a prefix)."""
    rows = mask.reshape(mask.shape[0], -1).all(axis=1) if mask.ndim > 1 else mask
    bad = np.flatnonzero(~rows)
    return int(bad[0]) if bad.size else int(rows.shape[0])


def routing_v2_into(b: Builder, op: str, x: T, ids: T, *, scale: T | None, offset: T | None, active_num: int,
                    expert_capacity: int, expert_num: int, tokens_type: int, row_idx_type: int, quant_mode: int,
                    expert_range: tuple[int, int]):
    """The init_routing_v2 call with every option explicit (device-supported values only)."""
    kwargs = {}
    if scale is not None:
        kwargs["scale"] = scale
    if offset is not None:
        kwargs["offset"] = offset
    kwargs.update(active_num=int(active_num), expert_capacity=int(expert_capacity), expert_num=int(expert_num),
                  drop_pad_mode=0, expert_tokens_num_type=int(tokens_type), expert_tokens_num_flag=True,
                  quant_mode=int(quant_mode), active_expert_range=[int(expert_range[0]), int(expert_range[1])],
                  row_idx_type=int(row_idx_type))
    return b.call("torch_npu.npu_moe_init_routing_v2", (x, ids), kwargs,
                  out=("expanded_x", "expanded_row_idx", "expert_tokens", "expanded_scale"),
                  why="quant_mode and active_expert_range explicit (default changed; adapter static-vector pitfall)")


def lower_moe_init_routing_v2(x, expert_idx, *, scale=None, offset=None, active_num=-1, expert_capacity=-1,
                              expert_num=-1, drop_pad_mode=0, expert_tokens_num_type=0, expert_tokens_num_flag=False,
                              quant_mode=-1, active_expert_range=None, row_idx_type=0,
                              options: Options = DEFAULT) -> Plan:
    op = "moe_init_routing_v2"
    args = dict(scale=scale, offset=offset, active_num=active_num, expert_capacity=expert_capacity,
                expert_num=expert_num, drop_pad_mode=drop_pad_mode, expert_tokens_num_type=expert_tokens_num_type,
                expert_tokens_num_flag=expert_tokens_num_flag, quant_mode=quant_mode,
                active_expert_range=active_expert_range, row_idx_type=row_idx_type)
    # The golden's own validity masks check every argument as the golden does (and say what is defined).
    x_mask, idx_mask, count_mask, scale_mask = moe_init_routing_v2_valid(x, expert_idx, **args)
    source = f"{_DOCS}: npu_moe_init_routing_v2"
    if quant_mode not in (-1, 1):
        reject(op, "quant_mode", "-1 (none) or 1 (dynamic)", str(quant_mode), source + " 'static quantization is not "
               "supported'")
    if drop_pad_mode != 0:
        reject(op, "drop_pad_mode", "0 (dropless)", str(drop_pad_mode), source + " 'currently only 0'")
    if expert_num <= 0 or (expert_tokens_num_type == 2 and expert_num > 5120):
        reject(op, "expert_num", "in (0, 10240] ((0, 5120] for key-value counts)", str(expert_num), source)
    ids = np.asarray(expert_idx)
    if ids.size and (ids.min() < 0 or ids.max() > expert_num):
        reject(op, "expert_idx", f"expert ids in [0, expert_num = {expert_num}]",
               f"values in [{ids.min()}, {ids.max()}]", source + " 'expert ids must not exceed the expert count'")
    _finite(op, ("x", x), ("scale", scale), ("offset", offset))
    start, end = (0, expert_num) if active_expert_range is None or len(active_expert_range) == 0 \
        else (int(active_expert_range[0]), int(active_expert_range[1]))
    b = Builder(op)
    if active_expert_range is None or len(active_expert_range) == 0:
        b.decide(f"active_expert_range passed explicitly as [0, {expert_num}] (the adapter's empty-range default "
                 "caches the first call's expert_num; spec §7.6)")
    tokens_type = 1 if expert_tokens_num_type == 0 else expert_tokens_num_type
    ex, row, counts, sc = routing_v2_into(
        b, op, b.input("x", x), b.input("expert_idx", ids), scale=b.optional("scale", scale),
        offset=b.optional("offset", offset), active_num=active_num, expert_capacity=expert_capacity,
        expert_num=expert_num, tokens_type=tokens_type, row_idx_type=row_idx_type, quant_mode=quant_mode,
        expert_range=(start, end))
    if not expert_tokens_num_flag:
        counts = b.call("Tensor.narrow", (counts, 0, 0, 0), out="expert_tokens_empty",
                        why="expert_tokens_num_flag=False: the device runs with True (the only documented value)")
        b.decide("expert_tokens_num_flag=False -> called with True, the count output replaced by its empty slice")
    elif expert_tokens_num_type == 0:
        counts = b.call("torch.cumsum", (counts, 0), out="expert_tokens_cumsum",
                        why="expert_tokens_num_type=0: counts (type 1, documented) then an exact int64 cumsum")
        b.decide("expert_tokens_num_type=0 (cumsum) -> called with type 1 (counts) and torch.cumsum on the device")
    rows = x_mask.shape[0]
    b.fixup(ex, _prefix(x_mask), rows, "rows past the routed ones are not written by the device")
    b.fixup(sc, _prefix(scale_mask) if scale_mask.size else 0, scale_mask.shape[0] if scale_mask.size else 0,
            "expanded_scale is defined for routed rows only (all undefined with quant_mode=-1 and no scale)")
    if row_idx_type == 1:
        b.fixup(row, _prefix(idx_mask), idx_mask.shape[0], "scatter indices past the routed rows are undefined",
                value=-1)
    if expert_tokens_num_flag and expert_tokens_num_type == 2:
        b.fixup(counts, _prefix(count_mask), count_mask.shape[0], "key-value rows past the (0, 0) terminator")
    return b.build((ex, row, counts, sc))


# -- grouped matmul -------------------------------------------------------------------------------------------
_GMM_OUT = {None: _dt.int32, _dt.bfloat16: _dt.bfloat16, _dt.float32: _dt.float16, _dt.int64: _dt.int8,
            _dt.uint64: _dt.int8}
_ACTS = (0, 1, 2, 4, 5)


def check_grouped(op: str, m: int, k: int, e: int, n: int, scale, per_token: bool, bias, out, act_type,
                  group_list, group_list_type: int) -> tuple:
    """The single-tensor int8 GMM table (spec §5.3) and the group list; returns the checked ``(scale, bias)``
    and the row total of the group list."""
    inner_limit(op, "x", k, "K (the last dim of x)")
    inner_limit(op, "weight", n, "N (the last dim of weight [E, K, N])")
    s = None if scale is None else _check.array(op, "scale", scale, dtypes=tuple(d for d in _GMM_OUT if d), ndim=2)
    if s is not None:
        _check.shape(op, "scale", s, [(e, n)], f"of shape [E, N] = [{e}, {n}]")
    expected = _GMM_OUT[None if s is None else s.dtype]
    if out != expected:
        what = "None" if s is None else _dt.name(s.dtype)
        _check.fail(op, "output_dtype", f"{_dt.name(expected)} for a {what} scale (spec §5.3: bf16 scale -> bf16, "
                    "fp32 scale -> fp16, int64 -> int8, no scale -> int32; fp32 scale with bf16 output is rejected "
                    "by the device)", _dt.name(out), TypeError)
    if per_token and out not in (_dt.bfloat16, _dt.float16):
        _check.fail(op, "per_token_scale", "None unless scale is bf16 or fp32 (per-token dequant)", "a per-token scale")
    act_type = _check.integer(op, "act_type", act_type)
    if act_type not in _ACTS:
        _check.fail(op, "act_type", "0 (none), 1 (relu), 2 (gelu_tanh), 4 (fast_gelu) or 5 (silu); 3 is not "
                    "supported by the device", str(act_type))
    if act_type and not per_token:
        _check.fail(op, "act_type", "0 without per_token_scale (the device applies activations in the per-token "
                    "case only)", str(act_type))
    bb = _check.optional(op, "bias", bias, dtypes=(_dt.int32,), ndim=2)
    if bb is not None:
        _check.shape(op, "bias", bb, [(e, n)], f"of shape [E, N] = [{e}, {n}]")
    segs = C.segments(op, group_list, group_list_type, m, e)
    if group_list_type == 1 and len(segs) == 1:
        reject(op, "group_list", "of length > 1 with group_list_type=1", "a single count",
               f"{_DOCS}: npu_grouped_matmul 'group_list_type 1: non-negative, length must not be 1'")
    total = max((stop for _, _, stop in segs), default=0)
    _finite(op, ("scale", s if s is not None and s.dtype not in (_dt.int64, _dt.uint64) else None))
    return s, bb, total


def grouped_call(b: Builder, x: T, w: T, *, scale: T | None, per_token: T | None, bias: T | None, group_list: T,
                 group_list_type: int, act_type: int, out, split_item: int, group_type: int = 0) -> T:
    kwargs = {}
    if bias is not None:
        kwargs["bias"] = [bias]
    if scale is not None:
        kwargs["scale"] = [scale]
    if per_token is not None:
        kwargs["per_token_scale"] = [per_token]
    kwargs.update(group_list=group_list, split_item=int(split_item), group_type=int(group_type),
                  group_list_type=int(group_list_type), act_type=int(act_type), output_dtype=out_dtype(out))
    return b.call("torch_npu.npu_grouped_matmul", ([x], [w]), kwargs, out="y", pick=0,
                  why="single x / weight / y; group_type explicit (the adapter refuses None)")


def lower_grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, per_token_scale=None, group_list,
                         group_list_type=0, act_type=0, output_dtype=None, split_item=3, group_type=0,
                         options: Options = DEFAULT) -> Plan:
    op = "grouped_matmul"
    xa, as_list = _single("x", x)
    wa, _ = _single("weight", weight)
    ba, _ = _single("bias", bias, optional=True)
    sa, _ = _single("scale", scale, optional=True)
    pa, _ = _single("per_token_scale", per_token_scale, optional=True)
    oa, _ = _single("offset", offset, optional=True)
    _check.choice(op, "split_item", split_item, (2, 3))
    _check.choice(op, "group_type", group_type, (0,))
    group_list_type = _check.choice(op, "group_list_type", group_list_type, (0, 1, 2))
    xa = _check.array(op, "x", xa, dtypes=(_dt.int8,), ndim=2)
    wa = _check.array(op, "weight", wa, dtypes=(_dt.int8,), ndim=3)
    m, k = xa.shape
    e, wk, n = wa.shape
    if wk != k:
        _check.fail(op, "weight", f"of shape [E, K, N] with K = {k} (columns of x)", describe(wa))
    if oa is not None:
        _check.fail(op, "offset", "None (the quantized grouped matmul has no offset)", describe(oa))
    out = _dt.resolve("int8" if output_dtype is None else output_dtype, arg="output_dtype", op=op)
    if out not in (_dt.int8, _dt.bfloat16, _dt.float16, _dt.int32):
        _check.fail(op, "output_dtype", "None, int8, bfloat16, float16 or int32", repr(output_dtype), TypeError)
    pt = _check.optional(op, "per_token_scale", pa, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2)
    if pt is not None:
        if pt.shape not in ((m,), (m, 1)):
            _check.fail(op, "per_token_scale", f"of shape [M] = [{m}]", describe(pt))
        _finite(op, ("per_token_scale", pt))
    s, bb, total = check_grouped(op, m, k, e, n, sa, pt is not None, ba, out, act_type, group_list, group_list_type)
    b = Builder(op)
    nd_only = "the per-channel int8-output combination takes ND weights (spec §5.3)" if out == _dt.int8 else None
    w = place_weight(b, b.input("weight", wa, "weight"), (k, n), _dt.int8, options, op=op, arg="weight",
                     nd_only=nd_only)
    if s is not None and s.dtype == _dt.uint64:
        s = s.view(np.int64)
        b.decide("scale uint64 passed as its int64 view (same bits)")
    ptt = None
    if pt is not None:
        ptt = b.input("per_token_scale", pt.reshape(m), source="flattened to 1-D [M]" if pt.ndim == 2 else "")
        if pt.ndim == 2:
            b.decide("per_token_scale [M, 1] flattened to 1-D (the device takes [M])")
    gl = b.input("group_list", np.asarray(group_list, np.int64), "param")
    y = grouped_call(b, b.input("x", xa), w, scale=b.optional("scale", s), per_token=ptt, bias=b.optional("bias", bb),
                     group_list=gl, group_list_type=group_list_type, act_type=act_type, out=out,
                     split_item=split_item)
    b.fixup(y, total, m, "rows past the group-list total are not written by the device (spec §5.2)")
    return b.build(y, container="list" if as_list else "single")


# -- activation -------------------------------------------------------------------------------------------------
def lower_swiglu(x, dim=-1, *, options: Options = DEFAULT) -> Plan:
    op = "swiglu"
    x = _check.array(op, "x", x, dtypes=_FLOATS, min_ndim=1, max_ndim=8)
    dim = _check.integer(op, "dim", dim, minimum=-x.ndim, maximum=x.ndim - 1)
    if x.shape[dim] % 2:
        _check.fail(op, "x", f"of even size along dim {dim}", describe(x))
    _finite(op, ("x", x))
    b = Builder(op)
    return b.build(b.call("torch_npu.npu_swiglu", (b.input("x", x),), {"dim": dim}, out="y"))


def dequant_swiglu_call(b: Builder, x: T, *, activate_left: bool, quant_mode: int, **tensors):
    kwargs = {k: v for k, v in tensors.items() if v is not None}
    kwargs.update(activate_left=bool(activate_left), quant_mode=int(quant_mode))
    return b.call("torch_npu.npu_dequant_swiglu_quant", (x,), kwargs, out=("y", "scale"))


def lower_dequant_swiglu_quant(x, *, weight_scale=None, activation_scale=None, bias=None, quant_scale=None,
                               quant_offset=None, group_index=None, activate_left=False, quant_mode=0,
                               swiglu_limit=None, options: Options = DEFAULT) -> Plan:
    op = "dequant_swiglu_quant"
    source = f"{_DOCS}: npu_dequant_swiglu_quant"
    x = _check.array(op, "x", x, dtypes=(_dt.int32, _dt.float16, _dt.bfloat16), ndim=2)
    t, h2 = x.shape
    if h2 % 2:
        _check.fail(op, "x", "of even last dimension [T, 2H]", describe(x))
    h = h2 // 2
    quant_mode = _check.choice(op, "quant_mode", quant_mode, (0, 1))
    if not isinstance(activate_left, (bool, np.bool_)):
        _check.fail(op, "activate_left", "a bool", describe(activate_left), TypeError)
    if swiglu_limit is not None:
        reject(op, "swiglu_limit", "None", repr(swiglu_limit), "DeepSeek-V4's clamp is not a torch_npu argument; "
               "swiglu_mode=1/2 computes gate * sigmoid(alpha * gate) * (up + glu_bias) with an unconfirmed half "
               "order (spec §7.2)")
    is_int = x.dtype == _dt.int32
    ws = _check.optional(op, "weight_scale", weight_scale, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2)
    act = _check.optional(op, "activation_scale", activation_scale, dtypes=(_dt.float32,), min_ndim=1, max_ndim=2)
    bb = _check.optional(op, "bias", bias, dtypes=(_dt.int32,), min_ndim=1, max_ndim=2)
    for arg, value in (("weight_scale", ws), ("activation_scale", act), ("bias", bb)):
        if value is not None and not is_int:
            _check.fail(op, arg, "None for float x (only an int32 x is dequantized)", describe(value))
    if is_int and ws is None:
        _check.fail(op, "weight_scale", "a float32 dequant scale for int32 x", "None")
    if is_int and act is None:
        reject(op, "activation_scale", "the float32 [T] per-token scale for int32 x", "None",
               source + " 'required when x is int32'")
    gi = _check.optional(op, "group_index", group_index, dtypes=(_dt.int64,), ndim=1)
    groups = None if gi is None else gi.shape[0]
    total = t
    if gi is not None:
        if h % 64 or h > 10496:
            _check.fail(op, "x", "of half width H a multiple of 64 and <= 10496 with group_index", describe(x))
        total = max((stop for _, _, stop in C.segments(op, gi, 1, t, groups, arg="group_index")), default=0)
        if quant_mode != 1:
            reject(op, "quant_mode", "1 (dynamic) with group_index", str(quant_mode), source)
        for arg, value in (("bias", bb), ("quant_offset", quant_offset)):
            if value is not None:
                _check.fail(op, arg, "None with group_index (the device ignores it there)", describe(value))
    rows = groups or 1
    if ws is not None:
        _check.shape(op, "weight_scale", ws, [(rows, h2)] + ([(h2,)] if gi is None else []),
                     f"of shape [G, 2H] = [{rows}, {h2}]" + (f" or [{h2}]" if gi is None else ""))
        ws = ws.reshape(rows, h2)
    if act is not None:
        _check.shape(op, "activation_scale", act, [(t,), (t, 1)], f"of shape [T] or [T, 1] with T = {t}")
        act = act.reshape(t)
    if bb is not None:
        _check.shape(op, "bias", bb, [(h2,), (1, h2)], f"of shape [2H] = [{h2}] or [1, {h2}]")
    qs = _check.optional(op, "quant_scale", quant_scale,
                         dtypes=(_dt.float32,) if quant_mode == 0 else (_dt.float32, _dt.float16, _dt.bfloat16))
    qo = _check.optional(op, "quant_offset", quant_offset, dtypes=(_dt.float32,))
    if quant_mode == 0 and qs is None:
        _check.fail(op, "quant_scale", "a float32 static scale with quant_mode=0", "None")
    if quant_mode == 1 and qo is not None:
        _check.fail(op, "quant_offset", "None with quant_mode=1 (symmetric dynamic quantization)", describe(qo))
    if qs is not None:
        scalar = quant_mode == 0 and qs.shape == (1,) and gi is None
        allowed = [(rows, h)] + ([(h,)] if gi is None else []) + ([(1,)] if scalar else [])
        _check.shape(op, "quant_scale", qs, allowed, f"of shape [G, H] = [{rows}, {h}]")
        if not scalar:
            qs = qs.reshape(rows, h)
        if qo is not None:
            if qo.size != qs.size:
                _check.fail(op, "quant_offset", f"of quant_scale's shape {tuple(qs.shape)}", describe(qo))
            qo = qo.reshape(qs.shape)
    _finite(op, ("x", x), ("weight_scale", ws), ("activation_scale", act), ("quant_scale", qs), ("quant_offset", qo))
    b = Builder(op)
    y, sc = dequant_swiglu_call(
        b, b.input("x", x), activate_left=activate_left, quant_mode=quant_mode,
        weight_scale=b.optional("weight_scale", ws), activation_scale=b.optional("activation_scale", act, "activation"),
        bias=b.optional("bias", bb), quant_scale=b.optional("quant_scale", qs),
        quant_offset=b.optional("quant_offset", qo),
        group_index=b.optional("group_index", gi))
    why = "rows past sum(group_index) are not cleared by the device (garbage, possibly Inf/NaN)"
    b.fixup(y, total, t, why)
    b.fixup(sc, total, t, why)
    return b.build((y, sc))


# -- finalize ----------------------------------------------------------------------------------------------------
def lower_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                               export_for_source_row, *, drop_pad_mode=0, k=1, options: Options = DEFAULT) -> Plan:
    op = "moe_finalize_routing"
    drop_pad_mode = _check.choice(op, "drop_pad_mode", drop_pad_mode, (0, 1, 2, 3))
    rows = _check.array(op, "expanded_permuted_rows", expanded_permuted_rows, dtypes=_FLOATS, min_ndim=2, max_ndim=3)
    if rows.ndim == 3 and drop_pad_mode in (0, 2):
        _check.fail(op, "expanded_permuted_rows", f"2-D [N*K, H] with drop_pad_mode={drop_pad_mode}", describe(rows))
    dtype, h = rows.dtype, rows.shape[-1]
    nrows = rows.size // max(h, 1)
    idx = _check.array(op, "expanded_src_to_dst_row", expanded_src_to_dst_row, dtypes=(_dt.int32,), ndim=1)
    sc = _check.optional(op, "scales", scales, dtypes=(dtype, _dt.float32) if dtype == _dt.bfloat16 else (dtype,),
                         ndim=2)
    if sc is not None:
        n, kk = sc.shape
    else:
        kk = _check.integer(op, "k", k, minimum=1)
        if idx.shape[0] % kk:
            _check.fail(op, "k", f"a divisor of the index length {idx.shape[0]} (scales is None)", str(k))
        n = idx.shape[0] // kk
    if idx.shape[0] != n * kk:
        _check.fail(op, "expanded_src_to_dst_row", f"of shape [N*K] = [{n * kk}]", describe(idx))
    if drop_pad_mode in (0, 2) and nrows != n * kk:
        _check.fail(op, "expanded_permuted_rows", f"of shape [N*K, H] = [{n * kk}, {h}]", describe(rows))
    s1 = _check.optional(op, "skip1", skip1, dtypes=(dtype,), ndim=2)
    s2 = _check.optional(op, "skip2", skip2, dtypes=(dtype,), ndim=2)
    if s2 is not None and s1 is None:
        _check.fail(op, "skip1", "given when skip2 is (CANN: skip2 requires skip1)", "None")
    if s1 is not None and s2 is None:
        reject(op, "skip2", "given when skip1 is", "None",
               f"{_DOCS}: npu_moe_finalize_routing 'when skip2 is None, skip1 must be None too'")
    for arg, value in (("skip1", s1), ("skip2", s2)):
        if value is not None:
            _check.shape(op, arg, value, [(n, h)], f"of shape [N, H] = [{n}, {h}]")
    bb = _check.optional(op, "bias", bias, dtypes=(dtype,), ndim=2)
    experts = _check.optional(op, "export_for_source_row", export_for_source_row, dtypes=(_dt.int32,), ndim=2)
    if bb is not None:
        if bb.shape[1] != h:
            _check.fail(op, "bias", f"of shape [E, H] with H = {h}", describe(bb))
        if experts is None:
            _check.fail(op, "export_for_source_row", "the [N, K] expert ids when bias is given", "None")
        if experts.size and (experts.min() < 0 or experts.max() >= bb.shape[0]):
            _check.fail(op, "export_for_source_row", f"expert ids in [0, E = {bb.shape[0]})",
                        f"values in [{experts.min()}, {experts.max()}]")
    if experts is not None:
        _check.shape(op, "export_for_source_row", experts, [(n, kk)], f"of shape [N, K] = [{n}, {kk}]")
    lo = -1 if drop_pad_mode in (1, 3) else 0
    if idx.size and (idx.min() < lo or idx.max() >= nrows):
        why = " (-1 marks a dropped slot only in drop/pad modes 1 and 3)" if idx.min() == -1 else ""
        _check.fail(op, "expanded_src_to_dst_row", f"row indices in [{lo}, {nrows}){why}",
                    f"values in [{idx.min()}, {idx.max()}]")
    _finite(op, ("expanded_permuted_rows", rows), ("skip1", s1), ("skip2", s2), ("bias", bb), ("scales", sc))
    b = Builder(op)
    act = "activation"
    y = finalize_call(b, b.input("expanded_permuted_rows", rows), b.optional("skip1", s1, act),
                      b.optional("skip2", s2, act), b.optional("bias", bb), b.optional("scales", sc, act),
                      b.input("expanded_src_to_dst_row", idx), b.optional("export_for_source_row", experts, act),
                      drop_pad_mode=drop_pad_mode, k=None if sc is not None else kk)
    if drop_pad_mode != 0:
        b.decide(f"drop_pad_mode={drop_pad_mode}: the torch_npu 2.13 doc lists only 0, SGLang and the CANN "
                 "aclnnMoeFinalizeRoutingV2 doc use 1-3 (confirm on the device)")
    return b.build(y)


def finalize_call(b: Builder, rows: T, skip1, skip2, bias, scales, idx: T, experts, *, drop_pad_mode: int,
                  k: int | None) -> T:
    kwargs = {"drop_pad_mode": int(drop_pad_mode)}
    if k is not None:
        kwargs["k"] = int(k)
        b.decide(f"scales is None: k={k} passed explicitly (the device infers N from it; aclnnMoeFinalizeRoutingV4)")
    return b.call("torch_npu.npu_moe_finalize_routing", (rows, skip1, skip2, bias, scales, idx, experts), kwargs,
                  out="y")


# -- the W8A8 MoE serving path ------------------------------------------------------------------------------------
_SHARED_KEYS = ("gate_weight", "gate_scale", "up_weight", "up_scale", "down_weight", "down_scale")


def _expert_weights(b: Builder, op: str, h: int, w13, w13_scale, w2, w2_scale, options: Options):
    """Load: W13 [E, 2I, H] -> [E, H, 2I], W2 [E, H, I] -> [E, I, H] (transpose(1, 2).contiguous(), NZ
    decision), scales [E, out(, 1)] -> bf16 [E, out] on the host (SGLang modular path, serving-paths §5.0)."""
    w13 = _check.array(op, "w13", w13, dtypes=(_dt.int8,), ndim=3)
    e, i2, h13 = w13.shape
    if h13 != h or i2 % 2:
        _check.fail(op, "w13", f"of shape [E, 2I, H] with H = {h} and an even 2I (gate rows then up rows)",
                    describe(w13))
    w2 = _check.array(op, "w2", w2, dtypes=(_dt.int8,), ndim=3)
    _check.shape(op, "w2", w2, [(e, h, i2 // 2)], f"of shape [E, H, I] = [{e}, {h}, {i2 // 2}]")
    scales = []
    for arg, value, rows in (("w13_scale", w13_scale, i2), ("w2_scale", w2_scale, h)):
        value = _check.array(op, arg, value, dtypes=(_dt.float32, _dt.bfloat16))
        if value.shape not in ((e, rows, 1), (e, rows)):
            _check.fail(op, arg, f"of shape [E, out, 1] = [{e}, {rows}, 1] or [{e}, {rows}]", describe(value))
        _finite(op, (arg, value))
        scales.append(value.reshape(e, rows).astype(_dt.bfloat16))
    b.decide("w13_scale / w2_scale squeezed and rounded to bf16 on the host at load (SGLang modular path: the "
             "bf16-output grouped matmul takes a bf16 scale; an fp32 one is rejected)")
    placed = []
    for arg, w, kn in (("w13", w13, (h, i2)), ("w2", w2, (i2 // 2, h))):
        t = transpose_weight(b, b.input(arg, w, "weight", "checkpoint [E, out, in]"), (1, 2), arg)
        placed.append(place_weight(b, t, kn, _dt.int8, options, op=op, arg=arg))
    for arg, size in (("H", h), ("2I", i2)):
        inner_limit(op, "w13", size, arg)
    s13 = b.input("w13_scale", scales[0], "param", "bf16 [E, 2I]")
    s2 = b.input("w2_scale", scales[1], "param", "bf16 [E, H]")
    return e, i2 // 2, placed[0], s13, placed[1], s2


def _route(b: Builder, op: str, t: int, e: int, top_k, router_logits, topk_ids, topk_weights, scoring_func,
           renormalize, correction_bias, k_group, group_count, group_select_mode, routed_scaling_factor):
    """(ids T int32 [T, k], weights T fp32 [T, k], k): given (host inputs) or from the device gating ops."""
    if topk_ids is not None or topk_weights is not None:
        if router_logits is not None:
            _check.fail(op, "router_logits", "None when topk_ids / topk_weights are given", describe(router_logits))
        if topk_ids is None or topk_weights is None:
            _check.fail(op, "topk_ids" if topk_ids is None else "topk_weights",
                        "given together with the other (topk_ids and topk_weights)", "None")
        ids = _check.array(op, "topk_ids", topk_ids, dtypes=(_dt.int32, _dt.int64), ndim=2)
        if ids.shape[0] != t:
            _check.fail(op, "topk_ids", f"of shape [T, k] with T = {t}", describe(ids))
        if top_k is not None and ids.shape[1] != top_k:
            _check.fail(op, "top_k", f"None or topk_ids.shape[1] = {ids.shape[1]}", repr(top_k))
        wts = _check.array(op, "topk_weights", topk_weights, dtypes=_FLOATS, ndim=2)
        _check.shape(op, "topk_weights", wts, [ids.shape], f"of topk_ids' shape {tuple(ids.shape)}")
        _finite(op, ("topk_weights", wts))
        if ids.size and (ids.min() < 0 or ids.max() >= e):
            _check.fail(op, "topk_ids", f"expert ids in [0, E = {e})", f"values in [{ids.min()}, {ids.max()}]")
        return (b.input("topk_ids", ids.astype(np.int32), source="int32"),
                b.input("topk_weights", wts.astype(np.float32), source="fp32"), ids.shape[1])
    if router_logits is None:
        _check.fail(op, "router_logits", "the [T, E] router logits (or pass topk_ids and topk_weights)", "None")
    logits = _check.array(op, "router_logits", router_logits, dtypes=_FLOATS, ndim=2)
    _check.shape(op, "router_logits", logits, [(t, e)], f"of shape [T, E] = [{t}, {e}]")
    if top_k is None:
        _check.fail(op, "top_k", "an int (experts per token) with router_logits", "None")
    if scoring_func not in ("softmax", "sigmoid", "sqrtsoftplus"):
        _check.fail(op, "scoring_func", "one of ('softmax', 'sigmoid', 'sqrtsoftplus')", repr(scoring_func))
    if not isinstance(renormalize, (bool, np.bool_)):
        _check.fail(op, "renormalize", "a bool", describe(renormalize), TypeError)
    _finite(op, ("router_logits", logits))
    if scoring_func == "softmax":
        if correction_bias is not None or group_count != 1 or k_group != 1 or routed_scaling_factor != 1.0:
            _check.fail(op, "scoring_func", "'sigmoid' or 'sqrtsoftplus' for correction_bias / expert groups / "
                        "routed_scaling_factor (the softmax path is npu_moe_gating_top_k_softmax)", repr(scoring_func))
        k = _check.integer(op, "top_k", top_k, minimum=1, maximum=min(e, 1024))
        y, ids, _ = gating_softmax_into(b, op, b.input("router_logits", logits), None, k)
        w = b.call("Tensor.to", (y, DType("float32")), out="topk_weights", why="SGLang: weights to fp32")
        if renormalize:
            total = b.call("Tensor.sum", (w, -1), {"keepdim": True}, out="topk_weight_sum")
            w = b.call("torch.div", (w, total), out="topk_weights_renorm",
                       why="SGLang l1_norm as torch ops (fp32 device sum: a tolerance, not bitwise, vs the golden)")
        return ids, w, k
    if renormalize:
        _check.fail(op, "renormalize", f"False with scoring_func={scoring_func!r} (moe_gating_top_k renormalises "
                    "sigmoid / sqrt-softplus weights itself)", "True")
    norm_type = 1 if scoring_func == "sigmoid" else 2
    k, k_group, group_count, group_select_mode, _ = _gating_options(
        op, e, top_k, k_group, group_count, group_select_mode, 0, norm_type, False)
    bias = None if correction_bias is None else _check.array(
        op, "correction_bias", correction_bias, dtypes=_FLOATS, ndim=1).astype(np.float32)
    if bias is not None and bias.shape != (e,):
        _check.fail(op, "correction_bias", f"of shape [E] = [{e}]", describe(bias))
    b.decide("router logits and correction bias as fp32 (SGLang: logits.float(), bias.float())")
    y, ids, _ = gating_top_k_into(
        b, op, b.input("router_logits", logits.astype(np.float32), source="fp32"), k,
        b.optional("correction_bias", bias), k_group=k_group, group_count=group_count,
        group_select_mode=group_select_mode, norm_type=norm_type,
        routed_scaling_factor=C.real(op, "routed_scaling_factor", routed_scaling_factor))
    return ids, y, k


def _shared(b: Builder, op: str, shared_expert, x: T, t: int, h: int, options: Options) -> T:
    """Shared expert: gate / up W8A8_DYNAMIC Linears, ``npu_swiglu`` on ``cat([g, u])``, down Linear."""
    if not isinstance(shared_expert, Mapping) or set(shared_expert) != set(_SHARED_KEYS):
        _check.fail(op, "shared_expert", f"a mapping with exactly the keys {_SHARED_KEYS}", describe(shared_expert),
                    TypeError)
    se = shared_expert
    g, gi = dynamic_linear_into(b, op, x, h, _dt.bfloat16, se["gate_weight"], se["gate_scale"], None, options,
                                ("shared_expert.gate_weight", "shared_expert.gate_scale", "bias"))
    u, ui = dynamic_linear_into(b, op, x, h, _dt.bfloat16, se["up_weight"], se["up_scale"], None, options,
                                ("shared_expert.up_weight", "shared_expert.up_scale", "bias"))
    if gi != ui:
        _check.fail(op, "shared_expert", "gate and up weights of the same shape", f"[{gi}, {h}] vs [{ui}, {h}]")
    gu = b.call("torch.cat", ([g, u], -1), out="shared_gate_up")
    a = b.call("torch_npu.npu_swiglu", (gu,), {"dim": -1}, out="shared_act")
    d, dn = dynamic_linear_into(b, op, a, gi, _dt.bfloat16, se["down_weight"], se["down_scale"], None, options,
                                ("shared_expert.down_weight", "shared_expert.down_scale", "bias"))
    if dn != h:
        _check.fail(op, "shared_expert", f"a down projection to H = {h}", f"N = {dn}")
    return d


def _moe(op: str, x_arr: np.ndarray, x_scale, shared_input, w13, w13_scale, w2, w2_scale, top_k, router_logits,
         topk_ids, topk_weights, scoring_func, renormalize, correction_bias, k_group, group_count, group_select_mode,
         routed_scaling_factor, swiglu_limit, shared_expert, options: Options) -> Plan:
    if swiglu_limit is not None:
        reject(op, "swiglu_limit", "None", repr(swiglu_limit), "DeepSeek-V4's clamp has no torch_npu lowering on "
               "this path (spec/serving-paths.md §8.4; npu_dequant_swiglu_quant has no such argument)")
    t, h = x_arr.shape
    b = Builder(op)
    e, _, w13t, s13, w2t, s2w = _expert_weights(b, op, h, w13, w13_scale, w2, w2_scale, options)
    ids, wts, k = _route(b, op, t, e, top_k, router_logits, topk_ids, topk_weights, scoring_func, renormalize,
                         correction_bias, k_group, group_count, group_select_mode, routed_scaling_factor)
    x = b.input("hidden" if x_scale is None else "x_q", x_arr)
    xs = None if x_scale is None else b.input("x_scale", x_scale)
    x_e, row_idx, counts, s_e = routing_v2_into(
        b, op, x, ids, scale=xs, offset=None, active_num=t * k, expert_capacity=-1, expert_num=e, tokens_type=1,
        row_idx_type=0, quant_mode=1 if x_scale is None else -1, expert_range=(0, e))
    g = grouped_call(b, x_e, w13t, scale=s13, per_token=s_e, bias=None, group_list=counts, group_list_type=1,
                     act_type=0, out=_dt.bfloat16, split_item=2)
    a_q, a_s = dequant_swiglu_call(b, g, activate_left=True, quant_mode=1)
    o = grouped_call(b, a_q, w2t, scale=s2w, per_token=a_s, bias=None, group_list=counts, group_list_type=1,
                     act_type=0, out=_dt.bfloat16, split_item=2)
    w_bf16 = b.call("Tensor.to", (wts, DType("bfloat16")), out="topk_weights_bf16",
                    why="SGLang: topk_weights.to(hidden.dtype)")
    y = finalize_call(b, o, None, None, None, w_bf16, row_idx, ids, drop_pad_mode=2, k=None)
    b.decide("finalize drop_pad_mode=2: the row-major (t*K + j) gather map of init_routing_v2 row_idx_type=0")
    if shared_expert is not None:
        if x_scale is None:
            sx = x   # w8a8_moe: the shared expert runs on the same bf16 hidden states
        elif shared_input is None:
            _check.fail(op, "shared_input", "the bf16 hidden states [T, H] the shared expert runs on", "None")
        else:
            sx = b.input("shared_input", shared_input)
        d = _shared(b, op, shared_expert, sx, t, h, options)
        total = b.call("torch.add", (b.call("Tensor.float", (y,), out="routed_f32"),
                                     b.call("Tensor.float", (d,), out="shared_f32")), out="sum_f32")
        y = b.call("Tensor.to", (total, DType("bfloat16")), out="y_bf16", why="bf16(fp32(routed) + fp32(shared))")
    return b.build(y)


def lower_w8a8_moe(hidden, w13, w13_scale, w2, w2_scale, *, top_k=None, router_logits=None, topk_ids=None,
                   topk_weights=None, scoring_func="softmax", renormalize=False, correction_bias=None, k_group=1,
                   group_count=1, group_select_mode=0, routed_scaling_factor=1.0, swiglu_limit=None,
                   shared_expert=None, options: Options = DEFAULT) -> Plan:
    op = "w8a8_moe"
    hidden = _check.array(op, "hidden", hidden, dtypes=(_dt.bfloat16,), ndim=2)
    _finite(op, ("hidden", hidden))
    return _moe(op, hidden, None, None, w13, w13_scale, w2, w2_scale, top_k, router_logits, topk_ids, topk_weights,
                scoring_func, renormalize, correction_bias, k_group, group_count, group_select_mode,
                routed_scaling_factor, swiglu_limit, shared_expert, options)


def lower_w8a8_moe_prequantized(x_q, x_scale, w13, w13_scale, w2, w2_scale, *, top_k=None, router_logits=None,
                                topk_ids=None, topk_weights=None, scoring_func="softmax", renormalize=False,
                                correction_bias=None, k_group=1, group_count=1, group_select_mode=0,
                                routed_scaling_factor=1.0, swiglu_limit=None, shared_expert=None, shared_input=None,
                                options: Options = DEFAULT) -> Plan:
    op = "w8a8_moe_prequantized"
    x_q = _check.array(op, "x_q", x_q, dtypes=(_dt.int8,), ndim=2)
    x_scale = _check.array(op, "x_scale", x_scale, dtypes=(_dt.float32,), ndim=1)
    if x_scale.shape[0] != x_q.shape[0]:
        _check.fail(op, "x_scale", f"of shape [T] = [{x_q.shape[0]}] (one scale per token)", describe(x_scale))
    _finite(op, ("x_scale", x_scale))
    if shared_input is not None:
        shared_input = _check.array(op, "shared_input", shared_input, dtypes=(_dt.bfloat16,), ndim=2)
        _check.shape(op, "shared_input", shared_input, [x_q.shape], f"of x_q's shape {tuple(x_q.shape)}")
        _finite(op, ("shared_input", shared_input))
    return _moe(op, x_q, x_scale, shared_input, w13, w13_scale, w2, w2_scale, top_k, router_logits, topk_ids,
                topk_weights, scoring_func, renormalize, correction_bias, k_group, group_count, group_select_mode,
                routed_scaling_factor, swiglu_limit, shared_expert, options)


UNSUPPORTED: dict[str, str] = {}

LOWERINGS = {
    "moe_gating_top_k_softmax": lower_moe_gating_top_k_softmax,
    "moe_gating_top_k": lower_moe_gating_top_k,
    "moe_init_routing": lower_moe_init_routing,
    "moe_init_routing_v2": lower_moe_init_routing_v2,
    "grouped_matmul": lower_grouped_matmul,
    "swiglu": lower_swiglu,
    "dequant_swiglu_quant": lower_dequant_swiglu_quant,
    "moe_finalize_routing": lower_moe_finalize_routing,
    "w8a8_moe": lower_w8a8_moe,
    "w8a8_moe_prequantized": lower_w8a8_moe_prequantized,
}
