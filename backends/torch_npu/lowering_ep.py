"""Lowering of the expert-parallel ops to the MC2 calls each rank makes (pure Python + NumPy).

Golden signatures: :mod:`w8a8.moe.ep_dispatch`, :mod:`w8a8.moe.ep_combine`, :mod:`w8a8.moe.ep_layer` (one
entry per simulated rank). Sources: the torch_npu 2.13.0 schema, op-plugin docs and meta registrations; how SGLang
(``layers/moe/moe_runner/ascend.py``) and vllm-ascend (``vllm_ascend/ops/fused_moe/token_dispatcher.py``,
``moe_mlp.py``) chain the MC2 ops with the runner; docs/expert-parallelism.md.

An EP op lowers to an :class:`~backends.torch_npu.plan.EpPlan`: one :class:`~backends.torch_npu.plan.Plan`
per rank q, whose timed calls are the rank's own:

==========================  ===========================================================================
op                          rank q's calls
==========================  ===========================================================================
moe_distribute_dispatch     ``npu_moe_distribute_dispatch(x_q, expert_ids_q, group_ep=<hccl name>,
(_v2)                       ep_world_size=R, ep_rank_id=q, moe_expert_num=E, [scales=, x_active_mask=,
                            expert_scales=,] group_tp=, tp_world_size=, tp_rank_id=0, expert_shard_type=0,
                            shared_expert_num=, shared_expert_rank_num=, quant_mode=0|2, global_bs=,
                            expert_token_nums_type=[, comm_alg=])`` — every option explicit
moe_distribute_combine      ``npu_moe_distribute_combine[_v2](expand_x_q, expert_ids_q, expand_idx_q |
(_v2)                       assist_info_for_combine_q, ep_send_counts_q, expert_scales_q, group_ep=, ...,
                            comm_quant_mode=)``
w8a8_moe_ep                 load: the rank's experts ``[E_loc, ...]`` transposed (+ NZ), scales -> bf16;
                            run: ``npu_moe_distribute_dispatch_v2(quant_mode=2 | 0)`` -> [bf16 dispatch only:
                            ``npu_dynamic_quant(expand_x)``] -> ``npu_grouped_matmul(x, w13,
                            scale=[bf16], per_token_scale=[dynamic_scales | its scale], group_list=
                            expert_token_nums, group_list_type=1)`` -> ``npu_dequant_swiglu_quant`` ->
                            ``npu_grouped_matmul`` (W2) -> ``npu_moe_distribute_combine_v2(expert_scales=
                            fp32 weights)`` [+ the rank's shared expert, added in fp32, rounded once]
==========================  ===========================================================================

The INT8 path hands the received ``dynamic_scales`` to W13 as its ``per_token_scale``: the runner's
``if pertoken_scale is None: npu_dynamic_quant`` never runs (SGLang ``moe_runner/ascend.py``, vllm-ascend
``moe_mlp.py``), so the plan holds no ``npu_dynamic_quant`` call; the BF16 fallback quantizes once, on arrival.

Device shapes (the 2.13.0 meta): dispatch returns ``A = global_bs_real * min(E_loc, K)`` rows
(``global_bs_real = global_bs or BS * R``) of which the first ``A_q`` (the rows rank q receives) are
valid; the plan keeps those (``Plan.truncate``), as the golden returns only valid rows. The combine takes
the dispatch's shapes: the golden's valid rows are padded on the host to the device capacity (rows the
kernel never reads, located by ``ep_send_counts``).

Argument checks: the golden's ``<op>_args`` ran first (``Backend.prepare`` / :func:`~.lowering.lower`):
every A3 rule of the op-plugin dispatch docs is the golden's error, raised before any device call. What only the
device refuses is a :class:`~backends.torch_npu.plan.ConstraintError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from w8a8 import dtypes as _dt
from w8a8 import registry

from ._lower_common import DEFAULT, Options
from .lowering import lowers  # defined before .lowering imports this module
from .plan import Builder, ConstraintError, DType, EpPlan, Group, Plan, T, reject

EP_LOWERINGS: dict[str, Callable[..., EpPlan]] = {}
"""``{op: lowering(a, options) -> EpPlan}``: the EP ops the torch-npu backend lowers (:func:`lowers_ep`)."""

GROUP = Group("ep")


def lowers_ep(*ops: str):
    """Register the decorated ``lowering(a, options) -> EpPlan`` of ``ops`` in :data:`EP_LOWERINGS`."""
    return lowers(*ops, into=EP_LOWERINGS)


# -- what every EP lowering needs -------------------------------------------------------------------------------
def received_rows(expert_ids: list, active: list | None, e_loc: int, shared_ranks: int, ranks: int) -> list[int]:
    """``A_q`` of every rank q: the copies (r, t, k) sent to it, ``S + e // E_loc == q`` (unmasked ones only)."""
    counts = np.zeros(ranks, np.int64)
    for r, ids in enumerate(expert_ids):
        dest = shared_ranks + ids.astype(np.int64) // e_loc
        if active is not None:
            dest = dest[active[r]]
        counts += np.bincount(dest.reshape(-1), minlength=ranks)[:ranks]
    return [int(c) for c in counts]


def capacity(bs: list[int], global_bs: int, e_loc: int, k: int) -> int:
    """The device's rows per routed-expert rank, ``A = global_bs_real * min(E_loc, K)`` (2.13.0 meta)."""
    real = global_bs or bs[0] * len(bs)
    return int(real * min(e_loc, k))


def device_mask(active: np.ndarray) -> np.ndarray:
    """The ``x_active_mask`` the device gets for a rank's checked ``[BS, K]`` mask: 1-D ``[BS]`` when every
    row is all-in or all-out (a prefix: the golden checked it for 1-D masks), else the 2-D per-copy mask."""
    rows = active.all(axis=1)
    if np.array_equal(rows, active.any(axis=1)) and not np.any(rows[1:] & ~rows[:-1]):
        return np.ascontiguousarray(rows)
    return np.ascontiguousarray(active)


def group_kwargs(b: Builder, g, q: int, *, tp_world_size: int) -> dict:
    """The group arguments of rank q's MC2 call, in the schema's order (torch_npu 2.13.0)."""
    b.decide(f"group_ep: the HCCL communicator name of the rank's process group, resolved at execution "
             f"(get_hccl_comm_name), for the golden's group {g.group_ep!r}")
    if tp_world_size:
        b.decide("tp_world_size=1: group_tp is the EP group's name, tp_rank_id=0 (as vllm-ascend passes on A3, "
                 "vllm-ascend TokenDispatcherWithMC2)")
    return {"group_ep": GROUP, "ep_world_size": g.ranks, "ep_rank_id": q, "moe_expert_num": g.experts}


def shared_kwargs(g, *, tp_world_size: int) -> dict:
    """The tp and shared-expert arguments of an MC2 call (tp 0, or 1 on the EP group), as the golden checked them."""
    return {"group_tp": GROUP if tp_world_size else "", "tp_world_size": int(tp_world_size),
            "tp_rank_id": int(g.tp_rank_id), "expert_shard_type": int(g.expert_shard_type),
            "shared_expert_num": g.shared_expert_num, "shared_expert_rank_num": g.shared_ranks}


def dispatch_into(b: Builder, a, q: int, x: T, ids: T, *, quant_mode: int, v2: bool):
    """Rank q's dispatch call (every option explicit); returns its seven output tensors."""
    g = a.group
    kwargs = group_kwargs(b, g, q, tp_world_size=g.tp_world_size)
    if a.scales is not None:
        kwargs["scales"] = b.input("scales", a.scales, "param", f"fp32 [E + {a.scale_row_offset}, H] smooth")
    if a.active is not None:
        kwargs["x_active_mask"] = b.input("x_active_mask", device_mask(a.active[q]))
    if a.expert_scales is not None:
        kwargs["expert_scales"] = b.input("expert_scales", a.expert_scales[q], source="fp32 [BS, K]")
    kwargs.update(shared_kwargs(g, tp_world_size=g.tp_world_size))
    kwargs.update(quant_mode=int(quant_mode), global_bs=int(a.global_bs),
                  expert_token_nums_type=int(a.expert_token_nums_type))
    if v2:
        kwargs["comm_alg"] = g.comm_alg
    fn = "torch_npu.npu_moe_distribute_dispatch_v2" if v2 else "torch_npu.npu_moe_distribute_dispatch"
    index = "assist_info_for_combine" if v2 else "expand_idx"
    return b.call(fn, (x, ids), kwargs, out=("expand_x", "dynamic_scales", index, "expert_token_nums",
                                              "ep_recv_counts", "tp_recv_counts", "expand_scales"),
                  why=f"rank {q} of {g.ranks}; quant_mode {quant_mode}")


def dispatch_truncation(a, a_q: int, outs, *, v2: bool) -> dict:
    """The valid part of each dispatch output the golden returns (module docstring)."""
    g = a.group
    ex, ds, idx, _, recv, _, es = outs
    keep = {ex: a_q, ds: a_q if a.quant_mode == 2 else 0, recv: g.ranks * g.e_loc,
            es: a_q if a.expert_scales is not None else 0}
    if v2:
        keep[idx] = 3 * a_q
    return keep


# -- dispatch ---------------------------------------------------------------------------------------------------------
@lowers_ep("moe_distribute_dispatch", "moe_distribute_dispatch_v2")
def lower_moe_distribute_dispatch(a, options: Options = DEFAULT) -> EpPlan:
    op, v2 = a.op, a.op.endswith("_v2")
    g = a.group
    rows = received_rows(a.expert_ids, a.active, g.e_loc, g.shared_ranks, g.ranks)
    plans: list[Plan] = []
    for q in range(g.ranks):
        b = Builder(op)
        outs = dispatch_into(b, a, q, b.input("x", a.x[q]), b.input("expert_ids", a.expert_ids[q]),
                             quant_mode=a.quant_mode, v2=v2)
        keep = dispatch_truncation(a, rows[q], outs, v2=v2)
        b.fixup(outs[5], 0, g.tp_world_size, "tp_recv_counts is reserved (the golden's zeros)")
        b.decide(f"rank {q} receives A_q = {rows[q]} rows; the device returns its capacity "
                 f"A = {capacity([x.shape[0] for x in a.x], a.global_bs, g.e_loc, a.k)}: the first A_q are kept")
        plans.append(b.build(outs, truncate=keep))
    return EpPlan(op, plans, tuple(g.entry_of_rank), "lists")


# -- combine ----------------------------------------------------------------------------------------------------------
def fit_rows(array: np.ndarray, rows: int) -> np.ndarray:
    """``array`` with exactly ``rows`` rows: zero rows appended (the device capacity, never read by the kernel)
    or trailing rows dropped (past the valid ones: the golden ignores them too)."""
    if array.shape[0] >= rows:
        return array[:rows]
    pad = np.zeros((rows - array.shape[0],) + array.shape[1:], array.dtype)
    return np.concatenate([array, pad])


@lowers_ep("moe_distribute_combine", "moe_distribute_combine_v2")
def lower_moe_distribute_combine(a, options: Options = DEFAULT) -> EpPlan:
    op, v2 = a.op, a.op.endswith("_v2")
    g = a.group
    bs = [i.shape[0] for i in a.expert_ids]
    cap = capacity(bs, a.global_bs, g.e_loc, a.k)
    es = a.expand_scales if v2 else None
    if es is not None and (not isinstance(es, (list, tuple)) or len(es) != g.ranks
                           or any(not isinstance(v, np.ndarray) or v.ndim != 1 for v in es)):
        reject(op, "expand_scales", f"a list of {g.ranks} 1-D fp32 arrays (the dispatch's expand_scales, one per "
               "entry)", type(es).__name__, "torch_npu 2.13.0 schema: Tensor? expand_scales, per rank")
    plans: list[Plan] = []
    for q in range(g.ranks):
        b = Builder(op)
        if a.tp_send_counts is not None:
            b.decide("tp_send_counts is reserved on A3 (the golden ignores it): not passed")
        x = b.input("expand_x", fit_rows(a.expand_x[q], cap), source=f"padded to the capacity A = {cap}")
        index = a.index[q]
        if v2:
            index = fit_rows(index, max(bs[q] * a.k, cap * 128))
        kwargs = group_kwargs(b, g, q, tp_world_size=g.tp_world_size)
        if a.active is not None:
            kwargs["x_active_mask"] = b.input("x_active_mask", device_mask(a.active[q]))
        if a.shared_expert_x is not None:
            kwargs["shared_expert_x"] = b.input("shared_expert_x", a.shared_expert_x[q])
        if es is not None:                           # as given, in entry order: the dispatch's, padded like its rows
            kwargs["expand_scales"] = b.input("expand_scales", fit_rows(es[g.entry_of_rank[q]], cap), "param")
        kwargs.update(shared_kwargs(g, tp_world_size=g.tp_world_size))
        kwargs.update(global_bs=int(a.global_bs), comm_quant_mode=int(a.comm_quant_mode))
        if v2:
            kwargs["comm_alg"] = g.comm_alg
        fn = "torch_npu.npu_moe_distribute_combine_v2" if v2 else "torch_npu.npu_moe_distribute_combine"
        y = b.call(fn, (x, b.input("expert_ids", a.expert_ids[q]),
                        b.input("assist_info_for_combine" if v2 else "expand_idx", index, "param"),
                        b.input("ep_send_counts", a.ep_send_counts[q], "param"),
                        b.input("expert_scales", a.expert_scales[q], source="fp32 [BS, K] routing weights")),
                   kwargs, out="y", why=f"rank {q} of {g.ranks}")
        b.decide(f"expand_x [A_q, H] padded to the device capacity A = {cap} rows (the dispatch's shape); the kernel "
                 "reads the rows ep_send_counts locates" + ("; assist_info_for_combine padded to "
                                                           "max(BS * K, A * 128)" if v2 else ""))
        plans.append(b.build(y))
    return EpPlan(op, plans, tuple(g.entry_of_rank), "list")


# -- the EP layer -------------------------------------------------------------------------------------------------
def mc2_dispatch_args(a, quant_mode: int):
    """The golden's check of the MC2 dispatch the layer lowers to (its A3 rules: BS in (0, 512], H in
    [1024, 8192], R in [2, 768], K <= 16, E_loc * R <= 2048...), refused as a device constraint."""
    bs = [h.shape[0] for h in a.hidden]
    gbs = 0 if len(set(bs)) == 1 else max(bs) * a.ranks
    try:
        return registry.get("moe_distribute_dispatch_v2").args(
            a.hidden, a.topk_ids, GROUP.name, a.ranks, list(range(a.ranks)), a.experts.e, quant_mode=quant_mode,
            global_bs=gbs, expert_token_nums_type=1)
    except (ValueError, TypeError) as exc:
        raise ConstraintError(f"w8a8_moe_ep: the MC2 dispatch it lowers to (npu_moe_distribute_dispatch_v2) "
                              f"refuses this call on A3: {exc}") from None


@lowers_ep("w8a8_moe_ep")
def lower_w8a8_moe_ep(a, options: Options = DEFAULT) -> EpPlan:
    """Rank q: dispatch_v2 -> [bf16: npu_dynamic_quant] -> GMM1 (per_token_scale = the received scales) ->
    dequant_swiglu_quant -> GMM2 -> combine_v2 [+ shared expert] (module docstring)."""

    from .lowering_moe import (_expert_weights, _shared, dequant_swiglu_call, grouped_call,  # they import .lowering
                               routed_pre_clamp)

    op = "w8a8_moe_ep"
    int8 = a.dispatch == "int8"
    d = mc2_dispatch_args(a, 2 if int8 else 0)
    rows = received_rows(d.expert_ids, None, d.group.e_loc, 0, a.ranks)
    plans: list[Plan] = []
    for q in range(a.ranks):
        b = Builder(op)
        lo, hi = q * a.e_loc, (q + 1) * a.e_loc
        ew = a.experts
        mine = replace(ew, w13=ew.w13[lo:hi], w13_scale=ew.w13_scale[lo:hi], w2=ew.w2[lo:hi],
                       w2_scale=ew.w2_scale[lo:hi], e=a.e_loc)
        b.decide(f"rank {q} holds experts [{lo}, {hi}) of {ew.e} (contiguous slices, expert shard type 0, no "
                 "shared-expert ranks)")
        _, w13, s13, w2, s2 = _expert_weights(b, op, a.h, mine, options)
        x = b.input("hidden", a.hidden[q])
        ids = b.input("topk_ids", a.topk_ids[q], source="int32")
        ex, ds, assist, counts, recv, tp_recv, _ = dispatch_into(b, d, q, x, ids, quant_mode=d.quant_mode, v2=True)
        if int8:
            xq, xs = ex, ds
            b.decide("INT8 dispatch: the received int8 rows and their fp32 dynamic_scales go to W13 as x and "
                     "per_token_scale; no npu_dynamic_quant (the runner's `if pertoken_scale is None` is false)")
        else:
            xq, xs = b.call("torch_npu.npu_dynamic_quant", (ex,), {"dst_type": DType("int8")}, out=("x_q", "x_scale"),
                            why="BF16 dispatch: W13 quantizes on arrival, once (HiddenStatesDynamicQuant)")
            b.decide("BF16 dispatch: one npu_dynamic_quant of the received rows before W13")
        g = grouped_call(b, xq, w13, scale=s13, per_token=xs, bias=None, group_list=counts, group_list_type=1,
                         act_type=0, out=_dt.bfloat16, split_item=2)
        if a.swiglu_limit is not None:   # serving row M1 where the engine clamps the routed experts
            g = routed_pre_clamp(b, g, a.swiglu_limit)
        a8, a8s = dequant_swiglu_call(b, g, activate_left=True, quant_mode=1)
        y = grouped_call(b, a8, w2, scale=s2, per_token=a8s, bias=None, group_list=counts, group_list_type=1,
                         act_type=0, out=_dt.bfloat16, split_item=2)
        kwargs = group_kwargs(b, d.group, q, tp_world_size=0)
        kwargs.update(shared_kwargs(d.group, tp_world_size=0))
        kwargs.update(global_bs=int(d.global_bs), comm_quant_mode=0, comm_alg="")
        wts = b.input("topk_weights", a.topk_weights[q], source="fp32 (combine expert_scales)")
        out = b.call("torch_npu.npu_moe_distribute_combine_v2", (y, ids, assist, recv, wts), kwargs, out="routed",
                     why="fp32 weights, ascending k from +0, rounded once "
                         "(ops-transformer moe_distribute_combine_v2)")
        b.decide(f"rank {q} receives A_q = {rows[q]} rows in a device buffer of "
                 f"{capacity([h.shape[0] for h in a.hidden], d.global_bs, d.group.e_loc, a.k)}; the grouped matmuls "
                 "and the combine touch only the first A_q (group_list, ep_send_counts)")
        if a.shared_expert is not None:
            sh = _shared(b, op, a.shared_expert, x, a.h, options, a.shared_limit)
            total = b.call("torch.add", (b.call("Tensor.float", (out,), out="routed_f32"),
                                         b.call("Tensor.float", (sh,), out="shared_f32")), out="sum_f32")
            out = b.call("Tensor.to", (total, DType("bfloat16")), out="y_bf16",
                         why="bf16(fp32(routed) + fp32(shared)), the shared expert on the source rank")
        plans.append(b.build(out))
    return EpPlan(op, plans, tuple(range(a.ranks)), "list",
                  [f"dispatch {a.dispatch}: quant_mode {d.quant_mode}; global_bs {d.global_bs}"])
