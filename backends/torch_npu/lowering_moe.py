"""Lowering of the grouped-MoE ops and the W8A8 MoE serving path to torch_npu calls (pure Python + NumPy).

Golden signatures: :mod:`w8a8.moe`. Sources: hicann/ops-transformer (grouped matmul, MoE kernels), Ascend/op-plugin
adapters, SGLang's ascend_tp MoE path; the torch_npu 2.13.0 docs and meta registrations.

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

Argument checks: each lowering takes the golden's checked Args (the golden's own check of its op ran
first, :func:`~backends.torch_npu.lowering.lower` / :meth:`backends.base.Backend.prepare`: same
exceptions and messages as the golden, in its order), then refuses what torch_npu 2.13 cannot take
with a :class:`~backends.torch_npu.plan.ConstraintError` naming the documented constraint. Where the
golden checks an intermediate mid-chain (the MoE layer's expert scales at its grouped matmuls), the
lowering refuses the argument up front: the device chain cannot stop between calls.

Unsupported (raised before any device call): ``swiglu_limit`` (DeepSeek-V4's clamp is not a torch_npu
argument of ``npu_dequant_swiglu_quant``; its ``swiglu_mode`` variant computes ``gate * sigmoid(alpha *
gate) * (up + glu_bias)`` with unconfirmed half order), ``norm_type=2`` / ``renorm=1`` gating
(``aclnnMoeGatingTopKV2``, not in torch_npu 2.13), routing v2 static quantization and drop/pad mode.
"""

from __future__ import annotations

import numpy as np

from w8a8 import _check
from w8a8 import dtypes as _dt
from w8a8.moe.gating import MoeGatingTopKArgs
from w8a8.moe.pipeline import ExpertWeights, MoeRouting, W8a8MoeArgs
from w8a8.moe.routing import moe_init_routing_v2_masks

from ._lower_common import DEFAULT, Options, inner_limit, out_dtype, place_weight, transpose_weight
from .lowering import dynamic_linear_into, lowers
from .plan import Builder, DType, Plan, T, describe, reject

_DOCS = "torch_npu 2.13.0 docs"


def _finite(op: str, *pairs) -> None:
    for arg, value in pairs:
        if value is not None and _dt.is_float(value.dtype):
            _check.finite(op, arg, value)


def _attr(value32: np.float32) -> float:
    """A float attribute the golden checked as fp32, as the shortest decimal that reads back to it (the
    value the caller wrote, where it is one: ``1e-20``, ``2.5``); the kernel reads the same fp32."""
    return float(str(np.float32(value32)))


# -- gating ---------------------------------------------------------------------------------------------
def gating_softmax_into(b: Builder, op: str, x: T, finished: T | None, k: int):
    kwargs = {} if finished is None else {"finished": finished}
    kwargs["k"] = k
    return b.call("torch_npu.npu_moe_gating_top_k_softmax", (x,), kwargs, out=("y", "expert_idx", "row_idx"))


@lowers("moe_gating_top_k_softmax")
def lower_moe_gating_top_k_softmax(a, options: Options = DEFAULT) -> Plan:
    op = "moe_gating_top_k_softmax"
    b = Builder(op)
    outs = gating_softmax_into(b, op, b.input("x", a.x), b.optional("finished", a.finished, "activation"), a.k)
    return b.build(outs)


def _gating_rejects(op: str, g: MoeGatingTopKArgs) -> None:
    """What torch_npu 2.13's npu_moe_gating_top_k refuses among the golden's valid options."""
    if g.renorm != 0:
        reject(op, "renorm", "0", str(g.renorm), f"{_DOCS}: npu_moe_gating_top_k renorm 'currently only 0'")
    if g.norm_type == 2:
        reject(op, "norm_type", "0 (softmax) or 1 (sigmoid)", "2 (sqrt-softplus)",
               f"{_DOCS}: npu_moe_gating_top_k norm_type is 0 or 1 (2 needs aclnnMoeGatingTopKV2)")
    if g.per_group <= 2:
        reject(op, "group_count", "such that E / group_count > 2", f"{g.group_count} (E = {g.x.shape[1]})",
               f"{_DOCS}: npu_moe_gating_top_k group_count")


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


@lowers("moe_gating_top_k")
def lower_moe_gating_top_k(a, options: Options = DEFAULT) -> Plan:
    op = "moe_gating_top_k"
    _gating_rejects(op, a)
    b = Builder(op)
    ids = tab = None
    if a.hashed:
        ids, tab = b.input("input_ids", a.input_ids), b.input("tid2eid", a.tid2eid, "param")
    if not a.out_flag:
        b.decide("out_flag=False: the device does not write norm_out (undefined); the golden returns the scores "
                 "there — compare norm_out only with out_flag=True")
    outs = gating_top_k_into(b, op, b.input("x", a.x), a.k, b.optional("bias", a.bias), input_ids=ids, tid2eid=tab,
                             k_group=a.k_group, group_count=a.group_count, group_select_mode=a.group_select_mode,
                             norm_type=a.norm_type, out_flag=a.out_flag,
                             routed_scaling_factor=_attr(a.routed_scaling_factor), eps=_attr(a.eps))
    return b.build(outs)


# -- routing ------------------------------------------------------------------------------------------------
@lowers("moe_init_routing")
def lower_moe_init_routing(a, options: Options = DEFAULT) -> Plan:
    op = "moe_init_routing"
    x, row_idx, expert_idx, active_num = a.x, a.row_idx, a.expert_idx, a.active_num
    if x.size >= 1 << 24:
        reject(op, "x", "of fewer than 2^24 elements", describe(x), f"{_DOCS}: npu_moe_init_routing x")
    _finite(op, ("x", x))   # the golden computes through NaN/Inf (it only gathers); the device is not specified
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


@lowers("moe_init_routing_v2")
def lower_moe_init_routing_v2(p, options: Options = DEFAULT) -> Plan:
    op = "moe_init_routing_v2"
    r = p.routing
    # The golden's validity masks: what the device defines (the rest is fixed up on the host).
    x_mask, idx_mask, count_mask, scale_mask = moe_init_routing_v2_masks(p)
    source = f"{_DOCS}: npu_moe_init_routing_v2"
    if p.quant_mode not in (-1, 1):
        reject(op, "quant_mode", "-1 (none) or 1 (dynamic)", str(p.quant_mode), source + " 'static quantization is "
               "not supported'")
    if r.drop_pad:
        reject(op, "drop_pad_mode", "0 (dropless)", "1", source + " 'currently only 0'")
    if r.expert_num <= 0 or (r.count_type == 2 and r.expert_num > 5120):
        reject(op, "expert_num", "in (0, 10240] ((0, 5120] for key-value counts)", str(r.expert_num), source)
    ids = p.expert_idx
    if ids.size and (ids.min() < 0 or ids.max() > r.expert_num):
        reject(op, "expert_idx", f"expert ids in [0, expert_num = {r.expert_num}]",
               f"values in [{ids.min()}, {ids.max()}]", source + " 'expert ids must not exceed the expert count'")
    b = Builder(op)
    b.decide(f"active_expert_range passed explicitly as [{r.start}, {r.end}] (the adapter's empty-range default "
             "caches the first call's expert_num: op-plugin MoeInitRoutingV2KernelNpuOpApi.cpp)")
    tokens_type = 1 if r.count_type == 0 else r.count_type
    ex, row, counts, sc = routing_v2_into(
        b, op, b.input("x", p.x), b.input("expert_idx", ids), scale=b.optional("scale", p.scale),
        offset=b.optional("offset", p.offset), active_num=r.active_num, expert_capacity=r.capacity,
        expert_num=r.expert_num, tokens_type=tokens_type, row_idx_type=r.row_idx_type, quant_mode=p.quant_mode,
        expert_range=(r.start, r.end))
    if not r.count_flag:
        counts = b.call("Tensor.narrow", (counts, 0, 0, 0), out="expert_tokens_empty",
                        why="expert_tokens_num_flag=False: the device runs with True (the only documented value)")
        b.decide("expert_tokens_num_flag=False -> called with True, the count output replaced by its empty slice")
    elif r.count_type == 0:
        counts = b.call("torch.cumsum", (counts, 0), out="expert_tokens_cumsum",
                        why="expert_tokens_num_type=0: counts (type 1, documented) then an exact int64 cumsum")
        b.decide("expert_tokens_num_type=0 (cumsum) -> called with type 1 (counts) and torch.cumsum on the device")
    rows = x_mask.shape[0]
    b.fixup(ex, _prefix(x_mask), rows, "rows past the routed ones are not written by the device")
    b.fixup(sc, _prefix(scale_mask) if scale_mask.size else 0, scale_mask.shape[0] if scale_mask.size else 0,
            "expanded_scale is defined for routed rows only (all undefined with quant_mode=-1 and no scale)")
    if r.row_idx_type == 1:
        b.fixup(row, _prefix(idx_mask), idx_mask.shape[0], "scatter indices past the routed rows are undefined "
                "(the gather-sort perf kernels; the sort kernels write all N*K)", value=-1)
    if r.count_flag and r.count_type == 2:
        b.fixup(counts, _prefix(count_mask), count_mask.shape[0], "key-value rows past the (0, 0) terminator")
    return b.build((ex, row, counts, sc))


# -- grouped matmul -------------------------------------------------------------------------------------------
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


@lowers("grouped_matmul")
def lower_grouped_matmul(a, options: Options = DEFAULT) -> Plan:
    """torch_npu's "every tensor's last dim < 65536" is the golden's own limit (its check ran)."""
    op = "grouped_matmul"
    if a.group_list_type == 1 and len(a.segments) == 1:
        reject(op, "group_list", "of length > 1 with group_list_type=1", "a single count",
               f"{_DOCS}: npu_grouped_matmul 'group_list_type 1: non-negative, length must not be 1'")
    m, k = a.x.shape
    n, out, s, total = a.weight.shape[2], a.out, a.scale, a.total
    b = Builder(op)
    nd_only = ("the per-channel int8-output combination takes ND weights (ops-transformer CheckQuantParamsDtype)"
               if out == _dt.int8 else None)
    w = place_weight(b, b.input("weight", a.weight, "weight"), (k, n), _dt.int8, options, op=op, arg="weight",
                     nd_only=nd_only)
    if s is not None and s.dtype == _dt.uint64:
        s = s.view(np.int64)
        b.decide("scale uint64 passed as its int64 view (same bits)")
    ptt = b.optional("per_token_scale", a.per_token_scale, "activation")
    gl = b.input("group_list", a.group_list, "param")
    y = grouped_call(b, b.input("x", a.x), w, scale=b.optional("scale", s), per_token=ptt,
                     bias=b.optional("bias", a.bias), group_list=gl, group_list_type=a.group_list_type,
                     act_type=a.act_type, out=out, split_item=a.split_item)
    b.fixup(y, total, m, "rows past the group-list total are not written by the device (op-plugin "
                         "GroupedMatmulKernelNpuOpApi.cpp allocates y uninitialized)")
    return b.build(y, container="list" if a.as_list else "single")


# -- activation -------------------------------------------------------------------------------------------------
@lowers("swiglu")
def lower_swiglu(a, options: Options = DEFAULT) -> Plan:
    b = Builder("swiglu")
    return b.build(b.call("torch_npu.npu_swiglu", (b.input("x", a.x),), {"dim": a.dim}, out="y"))


def dequant_swiglu_call(b: Builder, x: T, *, activate_left: bool, quant_mode: int, **tensors):
    kwargs = {k: v for k, v in tensors.items() if v is not None}
    kwargs.update(activate_left=bool(activate_left), quant_mode=int(quant_mode))
    return b.call("torch_npu.npu_dequant_swiglu_quant", (x,), kwargs, out=("y", "scale"))


@lowers("dequant_swiglu_quant")
def lower_dequant_swiglu_quant(a, options: Options = DEFAULT) -> Plan:
    op = "dequant_swiglu_quant"
    source = f"{_DOCS}: npu_dequant_swiglu_quant"
    if a.swiglu_limit is not None:
        reject(op, "swiglu_limit", "None", repr(a.swiglu_limit), "DeepSeek-V4's clamp is not a torch_npu argument; "
               "swiglu_mode=1/2 computes gate * sigmoid(alpha * gate) * (up + glu_bias) with an unconfirmed half "
               "order")
    if a.is_int and a.activation_scale is None:
        reject(op, "activation_scale", "the float32 [T] per-token scale for int32 x", "None",
               source + " 'required when x is int32'")
    if a.groups is not None and a.quant_mode != 1:
        reject(op, "quant_mode", "1 (dynamic) with group_index", str(a.quant_mode), source)
    t, total = a.t, a.total
    act = None if a.activation_scale is None else a.activation_scale.reshape(t)
    qs = a.quant_scale.reshape(1) if a.scalar else a.quant_scale   # [G, H], or the [1] scalar as given
    qo = None if a.quant_offset is None else a.quant_offset.reshape(qs.shape)
    b = Builder(op)
    y, sc = dequant_swiglu_call(
        b, b.input("x", a.x), activate_left=a.activate_left, quant_mode=a.quant_mode,
        weight_scale=b.optional("weight_scale", a.weight_scale), activation_scale=b.optional("activation_scale", act,
                                                                                            "activation"),
        bias=b.optional("bias", a.bias), quant_scale=b.optional("quant_scale", qs),
        quant_offset=b.optional("quant_offset", qo), group_index=b.optional("group_index", a.group_index))
    why = "rows past sum(group_index) are not cleared by the device (garbage, possibly Inf/NaN)"
    b.fixup(y, total, t, why)
    b.fixup(sc, total, t, why)
    return b.build((y, sc))


# -- finalize ----------------------------------------------------------------------------------------------------
@lowers("moe_finalize_routing")
def lower_moe_finalize_routing(a, options: Options = DEFAULT) -> Plan:
    op = "moe_finalize_routing"
    if a.skip1 is not None and a.skip2 is None:
        reject(op, "skip2", "given when skip1 is", "None",
               f"{_DOCS}: npu_moe_finalize_routing 'when skip2 is None, skip1 must be None too'")
    experts = a.experts
    if experts is not None:   # passed to the device, which reads it: checked even without bias
        _check.shape(op, "export_for_source_row", experts, [(a.n, a.k)], f"of shape [N, K] = [{a.n}, {a.k}]")
    b = Builder(op)
    act = "activation"
    y = finalize_call(b, b.input("expanded_permuted_rows", a.expanded_permuted_rows),
                      b.optional("skip1", a.skip1, act), b.optional("skip2", a.skip2, act), b.optional("bias", a.bias),
                      b.optional("scales", a.scales, act), b.input("expanded_src_to_dst_row", a.expanded_src_to_dst_row),
                      b.optional("export_for_source_row", experts, act), drop_pad_mode=a.drop_pad_mode,
                      k=None if a.scales is not None else a.k)
    if a.drop_pad_mode != 0:
        b.decide(f"drop_pad_mode={a.drop_pad_mode}: the torch_npu 2.13 doc lists only 0, SGLang and the CANN "
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
def _expert_weights(b: Builder, op: str, h: int, ew: ExpertWeights, options: Options):
    """Load: W13 [E, 2I, H] -> [E, H, 2I], W2 [E, H, I] -> [E, I, H] (transpose(1, 2).contiguous(), NZ
    decision), scales [E, out] (the golden's checked views) -> bf16 on the host (SGLang modular path,
    ``hardware_backend/npu/quantization/moe_methods.py``)."""
    e, i2 = ew.e, 2 * ew.i
    scales = []
    for arg, value in (("w13_scale", ew.w13_scale), ("w2_scale", ew.w2_scale)):
        _finite(op, (arg, value))   # the golden refuses them at the grouped matmul; the lowering up front
        scales.append(value.astype(_dt.bfloat16))
    b.decide("w13_scale / w2_scale squeezed and rounded to bf16 on the host at load (SGLang modular path: the "
             "bf16-output grouped matmul takes a bf16 scale; an fp32 one is rejected)")
    placed = []
    for arg, w, kn in (("w13", ew.w13, (h, i2)), ("w2", ew.w2, (i2 // 2, h))):
        t = transpose_weight(b, b.input(arg, w, "weight", "checkpoint [E, out, in]"), (1, 2), arg)
        placed.append(place_weight(b, t, kn, _dt.int8, options, op=op, arg=arg))
    for arg, size in (("H", h), ("2I", i2)):
        inner_limit(op, "w13", size, arg)
    s13 = b.input("w13_scale", scales[0], "param", "bf16 [E, 2I]")
    s2 = b.input("w2_scale", scales[1], "param", "bf16 [E, H]")
    return e, placed[0], s13, placed[1], s2


def _route(b: Builder, op: str, r: MoeRouting):
    """(ids T int32 [T, k], weights T fp32 [T, k]): given (host inputs) or from the device gating ops."""
    if r.mode == "ids":
        return b.input("topk_ids", r.ids, source="int32"), b.input("topk_weights", r.weights, source="fp32")
    g = r.gating
    if r.mode == "softmax":
        y, ids, _ = gating_softmax_into(b, op, b.input("router_logits", g.x), None, g.k)
        w = b.call("Tensor.to", (y, DType("float32")), out="topk_weights", why="SGLang: weights to fp32")
        if r.renormalize:
            total = b.call("Tensor.sum", (w, -1), {"keepdim": True}, out="topk_weight_sum")
            w = b.call("torch.div", (w, total), out="topk_weights_renorm",
                       why="SGLang l1_norm as torch ops (fp32 device sum: a tolerance, not bitwise, vs the golden)")
        return ids, w
    _gating_rejects(op, g)
    b.decide("router logits and correction bias as fp32 (SGLang: logits.float(), bias.float())")
    y, ids, _ = gating_top_k_into(
        b, op, b.input("router_logits", g.x, source="fp32"), g.k, b.optional("correction_bias", g.bias),
        k_group=g.k_group, group_count=g.group_count, group_select_mode=g.group_select_mode,
        norm_type=g.norm_type, routed_scaling_factor=_attr(g.routed_scaling_factor))
    return ids, y


def _shared(b: Builder, op: str, se, x: T, h: int, options: Options, limit=None) -> T:
    """Shared expert (its structure checked by the golden): gate / up W8A8_DYNAMIC Linears, [the engines' bf16
    clamps ``g.clamp(max=L)``, ``u.clamp(-L, L)``: serving row M5], ``npu_swiglu`` on ``cat([g, u])``, down Linear."""
    g, gi = dynamic_linear_into(b, op, x, h, _dt.bfloat16, se["gate_weight"], se["gate_scale"], None, options,
                                ("shared_expert.gate_weight", "shared_expert.gate_scale", "bias"))
    u, ui = dynamic_linear_into(b, op, x, h, _dt.bfloat16, se["up_weight"], se["up_scale"], None, options,
                                ("shared_expert.up_weight", "shared_expert.up_scale", "bias"))
    if gi != ui:
        _check.fail(op, "shared_expert", "gate and up weights of the same shape", f"[{gi}, {h}] vs [{ui}, {h}]")
    if limit is not None:
        g = b.call("torch.clamp", (g,), {"max": float(limit)}, out="shared_gate_clamped",
                   why="the engine's bf16 shared-expert clamp before SiluAndMul (serving row M5)")
        u = b.call("torch.clamp", (u,), {"min": -float(limit), "max": float(limit)}, out="shared_up_clamped")
    gu = b.call("torch.cat", ([g, u], -1), out="shared_gate_up")
    a = b.call("torch_npu.npu_swiglu", (gu,), {"dim": -1}, out="shared_act")
    d, dn = dynamic_linear_into(b, op, a, gi, _dt.bfloat16, se["down_weight"], se["down_scale"], None, options,
                                ("shared_expert.down_weight", "shared_expert.down_scale", "bias"))
    if dn != h:
        _check.fail(op, "shared_expert", f"a down projection to H = {h}", f"N = {dn}")
    return d


def routed_pre_clamp(b: Builder, g: T, limit) -> T:
    """The routed experts' clamp as bf16 torch ops on the GMM1 output before ``npu_dequant_swiglu_quant``
    (which has no clamp argument): gate half ``clamp(max=L)``, up half ``clamp(-L, L)``. On a bf16 input the
    op only computes SwiGLU, so this equals the golden's clamp inside it (bf16 clamps to a bound are exact;
    not run on a device: docs/serving-compositions.md)."""
    lim = float(limit)
    gate, up = b.call("torch.chunk", (g, 2, -1), out=("gmm1_gate", "gmm1_up"))
    gate = b.call("torch.clamp", (gate,), {"max": lim}, out="gmm1_gate_clamped",
                  why="the routed experts' swiglu_limit as a bf16 pre-clamp (serving row M1)")
    up = b.call("torch.clamp", (up,), {"min": -lim, "max": lim}, out="gmm1_up_clamped")
    return b.call("torch.cat", ([gate, up], -1), out="gmm1_clamped")


@lowers("w8a8_moe", "w8a8_moe_prequantized")
def lower_w8a8_moe(a: W8a8MoeArgs, options: Options = DEFAULT) -> Plan:
    """Both entry points of the layer, on the golden's checked :class:`~w8a8.moe.pipeline.W8a8MoeArgs`
    (its checks of the dispatch step included): they differ in the dispatch (quantize here, or gather
    the dispatched int8 rows and their scales)."""
    op, prequantized = a.op, a.x_scale is not None
    # The golden computes through these until an op it runs refuses them; the device chain cannot stop.
    _finite(op, ("x_scale", a.x_scale), ("shared_input", a.shared_input))
    t, h = a.t, a.h
    b = Builder(op)
    e, w13t, s13, w2t, s2w = _expert_weights(b, op, h, a.experts, options)
    ids, wts = _route(b, op, a.routing)
    k = a.routing.k
    x = b.input("x_q" if prequantized else "hidden", a.x)
    xs = b.input("x_scale", a.x_scale) if prequantized else None
    x_e, row_idx, counts, s_e = routing_v2_into(
        b, op, x, ids, scale=xs, offset=None, active_num=t * k, expert_capacity=-1, expert_num=e, tokens_type=1,
        row_idx_type=0, quant_mode=-1 if prequantized else 1, expert_range=(0, e))
    g = grouped_call(b, x_e, w13t, scale=s13, per_token=s_e, bias=None, group_list=counts, group_list_type=1,
                     act_type=0, out=_dt.bfloat16, split_item=2)
    if a.swiglu_limit is not None:   # serving row M1 where the engine clamps the routed experts
        g = routed_pre_clamp(b, g, a.swiglu_limit)
    a_q, a_s = dequant_swiglu_call(b, g, activate_left=True, quant_mode=1)
    o = grouped_call(b, a_q, w2t, scale=s2w, per_token=a_s, bias=None, group_list=counts, group_list_type=1,
                     act_type=0, out=_dt.bfloat16, split_item=2)
    w_bf16 = b.call("Tensor.to", (wts, DType("bfloat16")), out="topk_weights_bf16",
                    why="SGLang: topk_weights.to(hidden.dtype)")
    y = finalize_call(b, o, None, None, None, w_bf16, row_idx, ids, drop_pad_mode=2, k=None)
    b.decide("finalize drop_pad_mode=2: the row-major (t*K + j) gather map of init_routing_v2 row_idx_type=0")
    if a.routed_scale is not None:
        y = b.call("torch.mul", (y, float(a.routed_scale)), out="routed_scaled",
                   why=f"{a.serving.name}: the bf16 routed output times routed_scaling_factor after the finalize "
                       "(serving row M2; the gating op got 1)")
    if a.shared_expert is not None:
        # w8a8_moe: the shared expert runs on the same bf16 hidden states; prequantized: on shared_input
        sx = b.input("shared_input", a.shared_input) if prequantized else x
        d = _shared(b, op, a.shared_expert, sx, h, options, a.shared_limit)
        total = b.call("torch.add", (b.call("Tensor.float", (y,), out="routed_f32"),
                                     b.call("Tensor.float", (d,), out="shared_f32")), out="sum_f32")
        y = b.call("Tensor.to", (total, DType("bfloat16")), out="y_bf16", why="bf16(fp32(routed) + fp32(shared))")
    return b.build(y)
