"""``npu_moe_distribute_combine`` and ``npu_moe_distribute_combine_v2`` (MC2) on simulated ranks.

Sources: hicann/ops-transformer @ c29bc106 ``mc2/moe_distribute_combine{,_v2}/``, the op-plugin docs. Each expert rank
sends its rows back to the ranks that own the
tokens (v1: located through the sender-side ``expand_idx`` and ``ep_send_counts``; v2: through the
receiver-side ``assist_info_for_combine`` triples); each token's K rows are summed in fp32 with the
fp32 routing weights ``expert_scales`` in ascending k, starting from +0, and rounded once. Per-rank
arguments are lists with one array per rank; the result is a list with one ``[BS_r, H]`` per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from ..rounding import to_float
from . import _common as C
from . import _ep
from .ep_dispatch import (EpGroup, entry_order, global_bs_args, group_args, ids_args, mask_args, not_modelled,
                          tokens_args)

__all__ = ["moe_distribute_combine", "moe_distribute_combine_v2"]

_X = (_dt.bfloat16, _dt.float16)


@dataclass(frozen=True, eq=False)
class MoeDistributeCombineArgs:
    """The checked arguments of :func:`moe_distribute_combine` / ``_v2`` (per-rank lists in **rank order**)."""

    op: str                          # "moe_distribute_combine" or "moe_distribute_combine_v2"
    expand_x: list                   # per rank q: bf16 / fp16 [A_q, H], the expert rows in canonical order
    expert_ids: list                 # per rank r: int32 [BS_r, K] (the dispatch's)
    index: list                      # per rank: v1 expand_idx int32 [BS_r * K]; v2 assist_info int32 [>= 3 A_q]
    ep_send_counts: list             # per rank q: int32 [E_loc * R], the dispatch's ep_recv_counts
    expert_scales: list              # per rank r: fp32 [BS_r, K], the routing weights
    group: EpGroup                   # the checked group arguments
    k: int                           # K
    h: int                           # H
    active: list | None              # per rank r: bool [BS_r, K], the copies that were sent (v2), or None
    shared_expert_x: list | None     # per rank r: [BS_r, H] of expand_x's dtype, added unweighted (v2), or None
    comm_quant_mode: int             # 0, or 2 (int8 return trip in groups of 8)
    global_bs: int                   # as given
    expand_scales: list | None       # as given (v2 hierarchy: the dispatch's expand_scales; not read by the golden)
    tp_send_counts: object           # as given (reserved; not read by the golden)


MoeDistributeCombineV2Args = MoeDistributeCombineArgs
"""The checked arguments of :func:`moe_distribute_combine_v2`: those of :func:`moe_distribute_combine`."""


def _index_args(op: str, v2: bool, index, g: EpGroup, rows: list, bs: list, k: int) -> list:
    name = "assist_info_for_combine" if v2 else "expand_idx"
    idx = _ep.rank_list(op, name, index, ranks=g.ranks, dtypes=(_dt.int32,), ndim=1)
    idx = [idx[i] for i in g.entry_of_rank]
    for q, a in enumerate(idx):
        nm = f"{name}[{g.entry_of_rank[q]}]"
        if v2:
            if a.shape[0] < 3 * rows[q]:
                _check.fail(op, nm, f"at least 3 * A = {3 * rows[q]} entries (a triple per valid row)",
                            _check.describe(a))
            t = a[:3 * rows[q]].reshape(-1, 3).astype(np.int64)
            if t.size and (t[:, 0].min() < 0 or t[:, 0].max() >= g.ranks or t[:, 2].min() < 0 or t[:, 2].max() >= k
                           or t[:, 1].min() < 0 or np.any(t[:, 1] >= np.asarray(bs)[t[:, 0]])):
                _check.fail(op, nm, "(source rank, token, k) triples within the ranks, their BS and K",
                            f"{t.min(axis=0).tolist()} .. {t.max(axis=0).tolist()}")
        else:
            if a.shape[0] != bs[q] * k:
                _check.fail(op, nm, f"of shape [BS * K] = [{bs[q] * k}]", _check.describe(a))
            if a.size and a.min() < 0:
                _check.fail(op, nm, "positions >= 0", f"minimum {a.min()}")
    return idx


def combine_args(op: str, v2: bool, expand_x, expert_ids, index, ep_send_counts, expert_scales, group_ep,
                 ep_world_size, ep_rank_id, moe_expert_num, tp_send_counts, x_active_mask, shared_expert_x,
                 expand_scales, reserved, group_tp, tp_world_size, tp_rank_id, expert_shard_type, shared_expert_num, shared_expert_rank_num,
                 global_bs, comm_quant_mode, comm_alg, special, numerics) -> MoeDistributeCombineArgs:
    """The checks of both combine ops, in this order (A3 rules of the op-plugin docs)."""
    C.check_numerics(op, numerics)
    ys = _ep.rank_list(op, "expand_x", expand_x, dtypes=_X, ndim=2)
    g = group_args(op, v2, len(ys), group_ep, ep_world_size, ep_rank_id, moe_expert_num, group_tp, tp_world_size,
                   tp_rank_id, expert_shard_type, shared_expert_num, shared_expert_rank_num, comm_alg)
    ys = [ys[i] for i in g.entry_of_rank]
    h, _ = tokens_args(op, v2, "expand_x", ys, g, numerics)
    ids, k, bs = ids_args(op, v2, expert_ids, g, None)
    cnt = _ep.rank_list(op, "ep_send_counts", ep_send_counts, ranks=g.ranks, dtypes=(_dt.int32,), ndim=1)
    cnt = [cnt[i] for i in g.entry_of_rank]
    rows = []
    for q, c in enumerate(cnt):
        nm = f"ep_send_counts[{g.entry_of_rank[q]}]"
        _check.shape(op, nm, c, [(g.e_loc * g.ranks,)], f"of shape [E_loc * R] = [{g.e_loc * g.ranks}]")
        if c.size and (c[0] < 0 or np.any(np.diff(c.astype(np.int64)) < 0)):
            _check.fail(op, nm, "non-decreasing cumulative row counts >= 0", str(c.tolist())[:80])
        a_q = int(c[-1]) if c.size else 0
        if a_q > ys[q].shape[0]:
            _check.fail(op, f"expand_x[{g.entry_of_rank[q]}]", f"at least ep_send_counts[-1] = {a_q} rows",
                        _check.describe(ys[q]))
        rows.append(a_q)
    idx = _index_args(op, v2, index, g, rows, bs, k)
    w = _ep.rank_list(op, "expert_scales", expert_scales, ranks=g.ranks, dtypes=(_dt.float32,), ndim=2)
    w = [w[i] for i in g.entry_of_rank]
    for q, (a, t) in enumerate(zip(w, bs)):
        _check.shape(op, f"expert_scales[{g.entry_of_rank[q]}]", a, [(t, k)], f"of shape [BS, K] = [{t}, {k}]")
        C.check_finite(op, f"expert_scales[{g.entry_of_rank[q]}]", a, numerics)
    for name, value in reserved.items():
        if value is not None and not (isinstance(value, int) and value == 0):
            _check.fail(op, name, "None / 0 (reserved in v1)", repr(value)[:80])
    active = mask_args(op, v2, x_active_mask, g, bs, k)
    shared = None
    if shared_expert_x is not None:
        if not v2:
            _check.fail(op, "shared_expert_x", "None (the golden models shared_expert_x in v2 only)",
                        _check.describe(shared_expert_x))
        sx = _ep.rank_list(op, "shared_expert_x", shared_expert_x, ranks=g.ranks, dtypes=(ys[0].dtype,))
        shared = []
        for q, (a, t) in enumerate(zip([sx[i] for i in g.entry_of_rank], bs)):
            if a.ndim not in (2, 3) or int(np.prod(a.shape[:-1])) != t or a.shape[-1] != h:
                _check.fail(op, f"shared_expert_x[{g.entry_of_rank[q]}]", f"[BS, H] = [{t}, {h}] (or 3-D with the "
                            "product of the first two dims = BS)", _check.describe(a))
            C.check_finite(op, f"shared_expert_x[{g.entry_of_rank[q]}]", a, numerics)
            shared.append(a.reshape(t, h))
    gbs = global_bs_args(op, global_bs, bs, g.ranks)
    cqm = _check.integer(op, "comm_quant_mode", comm_quant_mode)
    if cqm not in (0, 2):
        _check.fail(op, "comm_quant_mode", "0 or 2 (int8 return trip) on A3", str(cqm))
    not_modelled(op, g, special)
    return MoeDistributeCombineArgs(op=op, expand_x=ys, expert_ids=ids, index=idx, ep_send_counts=cnt,
                                    expert_scales=w, group=g, k=k, h=h, active=active, shared_expert_x=shared,
                                    comm_quant_mode=cqm, global_bs=gbs, expand_scales=expand_scales,
                                    tp_send_counts=tp_send_counts)


def _combine(a: MoeDistributeCombineArgs, numerics: Numerics, v2: bool) -> list:
    g = a.group
    ys = a.expand_x if a.comm_quant_mode == 0 else [_ep.comm_quant_roundtrip(y) for y in a.expand_x]
    bs = tuple(i.shape[0] for i in a.expert_ids)
    if v2:
        src = [i[:3 * int(c[-1])].reshape(-1, 3) for i, c in zip(a.index, a.ep_send_counts)]
        rows, present = _ep.gather_rows([y[:len(s)] for y, s in zip(ys, src)], src, bs, a.k, a.h)
    else:
        rows, present = [], []
        cum = np.stack([np.concatenate([[0], c.astype(np.int64)]) for c in a.ep_send_counts])
        for r, (ids, pos) in enumerate(zip(a.expert_ids, a.index)):
            e = ids.reshape(-1).astype(np.int64)
            q, l = g.shared_ranks + e // g.e_loc, e % g.e_loc
            block = l * g.ranks + r                                      # entry of ep_send_counts on rank q
            start, end = cum[q, block], cum[q, block + 1]
            row = start + pos.astype(np.int64)
            ok = row < end
            got = np.zeros((e.size, a.h), np.float32)
            for dst in np.unique(q[ok]):
                sel = ok & (q == dst)
                got[sel] = ys[dst][row[sel]].astype(np.float32)
            rows.append(got.reshape(bs[r], a.k, a.h))
            present.append(ok.reshape(bs[r], a.k))
    out = []
    for r in range(g.ranks):
        pres = present[r] if a.active is None else present[r] & a.active[r]
        extra = None if a.shared_expert_x is None else a.shared_expert_x[r]
        acc = _ep.weighted_sum(rows[r], pres, _ep.combine_weights(a.expert_scales[r], numerics), extra)
        out.append(to_float(acc, a.expand_x[0].dtype))
    return entry_order(g, out)


_DOC = """
    Parameters (each rank's own tensors as a list, one entry per rank, as in the dispatch)
    ----------
    expand_x : list of R bf16 / fp16 ``[A_q, H]``: the expert outputs in the dispatch's receive order
        (rows past ``ep_send_counts[q][-1]`` are ignored).
    expert_ids : the dispatch's per-rank int32 ``[BS_r, K]``.
    {index}
    ep_send_counts : the dispatch's per-rank ``ep_recv_counts`` int32 ``[E_loc * R]``, unchanged.
    expert_scales : per rank fp32 ``[BS_r, K]``: the routing weights.
    group_ep, ep_world_size, ep_rank_id, moe_expert_num, group_tp, tp_world_size, tp_rank_id,
    expert_shard_type, shared_expert_num, shared_expert_rank_num, global_bs : as the dispatch (the same
        values: the ops are used in pairs); S = 0 only.
    tp_send_counts : reserved (ignored).
    comm_quant_mode : 0, or 2: every expert row makes the return trip as int8 in groups of 8 elements
        (``s_g = max|y_g| * fp32(1/127)``, codes ``rint(fp16(y / s_g))``, the scale in x's dtype,
        ``y' = x_dtype(fp32(fp16(q)) * s_x)``; lossy).
    numerics : ``ep_combine_weights`` (``"float32"``: the kernel; ``"bfloat16"``: weights rounded first).

    Returns a list of R arrays of expand_x's dtype ``[BS_r, H]`` (entry order). Per token t of rank r, fp32::

        acc = +0.0
        for k in 0 .. K-1:                           # ascending k; a copy that was not sent is skipped
            acc = acc + fp32(row(r, t, k)) * expert_scales[r][t, k]     # Muls then Add: two roundings
        {shared}out[t] = x_dtype(acc)                                # RINT, once

    Errors: TypeError for a non-list per-rank argument or a dtype; ValueError naming the argument for
    the A3 rules shared with the dispatch, index / count arrays of the wrong shape or out of range.
"""


def moe_distribute_combine_args(expand_x, expert_ids, expand_idx, ep_send_counts, expert_scales, group_ep,
                                ep_world_size, ep_rank_id, moe_expert_num, *, tp_send_counts=None,
                                x_active_mask=None, activation_scale=None, weight_scale=None, group_list=None,
                                expand_scales=None, shared_expert_x=None, group_tp="", tp_world_size=0, tp_rank_id=0,
                                expert_shard_type=0, shared_expert_num=1, shared_expert_rank_num=0, global_bs=0,
                                out_dtype=0, comm_quant_mode=0, group_list_type=0,
                                numerics: Numerics = ASCEND) -> MoeDistributeCombineArgs:
    """Every argument check of :func:`moe_distribute_combine`, in its order (A3, v1)."""
    reserved = {"activation_scale": activation_scale, "weight_scale": weight_scale, "group_list": group_list,
                "expand_scales": expand_scales, "out_dtype": out_dtype, "group_list_type": group_list_type}
    return combine_args("moe_distribute_combine", False, expand_x, expert_ids, expand_idx, ep_send_counts,
                        expert_scales, group_ep, ep_world_size, ep_rank_id, moe_expert_num, tp_send_counts,
                        x_active_mask, shared_expert_x, expand_scales, reserved, group_tp, tp_world_size, tp_rank_id,
                        expert_shard_type, shared_expert_num, shared_expert_rank_num, global_bs, comm_quant_mode, "",
                        {}, numerics)


@golden_op("moe", check=moe_distribute_combine_args, mirrors="torch_npu.npu_moe_distribute_combine")
def moe_distribute_combine(expand_x: list, expert_ids: list, expand_idx: list, ep_send_counts: list,
                           expert_scales: list, group_ep: str, ep_world_size: int, ep_rank_id: list,
                           moe_expert_num: int, *, tp_send_counts=None, x_active_mask=None, activation_scale=None,
                           weight_scale=None, group_list=None, expand_scales=None, shared_expert_x=None,
                           group_tp: str = "", tp_world_size: int = 0, tp_rank_id: int = 0, expert_shard_type: int = 0,
                           shared_expert_num: int = 1, shared_expert_rank_num: int = 0, global_bs: int = 0,
                           out_dtype: int = 0, comm_quant_mode: int = 0, group_list_type: int = 0,
                           numerics: Numerics = ASCEND) -> list:
    return _combine(moe_distribute_combine_args(
        expand_x, expert_ids, expand_idx, ep_send_counts, expert_scales, group_ep, ep_world_size, ep_rank_id,
        moe_expert_num, tp_send_counts=tp_send_counts, x_active_mask=x_active_mask, activation_scale=activation_scale,
        weight_scale=weight_scale, group_list=group_list, expand_scales=expand_scales, shared_expert_x=shared_expert_x,
        group_tp=group_tp, tp_world_size=tp_world_size, tp_rank_id=tp_rank_id, expert_shard_type=expert_shard_type,
        shared_expert_num=shared_expert_num, shared_expert_rank_num=shared_expert_rank_num, global_bs=global_bs,
        out_dtype=out_dtype, comm_quant_mode=comm_quant_mode, group_list_type=group_list_type, numerics=numerics),
        numerics, v2=False)


moe_distribute_combine.__doc__ = (
    """``torch_npu.npu_moe_distribute_combine`` (MC2 v1, A3) on simulated ranks: return trip and weighted sum.

    A3 v1: H = 7168. Reserved (None / 0 only): x_active_mask, activation_scale, weight_scale, group_list,
    expand_scales, out_dtype, group_list_type; shared_expert_x: None (modelled for v2).
    """ + _DOC.format(
        index="expand_idx : the dispatch's per-rank int32 ``[BS_r * K]``: copy (r, f) with expert e is row "
              "``ep_send_counts[q][l * R + r - 1] + expand_idx[r][f]`` of rank ``q = e // E_loc`` "
              "(``l = e % E_loc``; 0 for the first block); a row at or past its block's end is not read.",
        shared=""))


def moe_distribute_combine_v2_args(expand_x, expert_ids, assist_info_for_combine, ep_send_counts, expert_scales,
                                   group_ep, ep_world_size, ep_rank_id, moe_expert_num, *, tp_send_counts=None,
                                   x_active_mask=None, expand_scales=None, shared_expert_x=None, elastic_info=None,
                                   ori_x=None, const_expert_alpha_1=None, const_expert_alpha_2=None,
                                   const_expert_v=None, performance_info=None, group_tp="", tp_world_size=0,
                                   tp_rank_id=0, expert_shard_type=0, shared_expert_num=1, shared_expert_rank_num=0,
                                   global_bs=0, comm_quant_mode=0, comm_alg="", zero_expert_num=0, copy_expert_num=0,
                                   const_expert_num=0, numerics: Numerics = ASCEND) -> MoeDistributeCombineV2Args:
    """Every argument check of :func:`moe_distribute_combine_v2`, in its order (A3, v2)."""
    special = {"elastic_info": elastic_info, "ori_x": ori_x, "const_expert_alpha_1": const_expert_alpha_1,
               "const_expert_alpha_2": const_expert_alpha_2, "const_expert_v": const_expert_v,
               "performance_info": performance_info, "zero_expert_num": zero_expert_num,
               "copy_expert_num": copy_expert_num, "const_expert_num": const_expert_num}
    return combine_args("moe_distribute_combine_v2", True, expand_x, expert_ids, assist_info_for_combine,
                        ep_send_counts, expert_scales, group_ep, ep_world_size, ep_rank_id, moe_expert_num,
                        tp_send_counts, x_active_mask, shared_expert_x, expand_scales, {}, group_tp, tp_world_size,
                        tp_rank_id, expert_shard_type, shared_expert_num, shared_expert_rank_num, global_bs, comm_quant_mode,
                        comm_alg, special, numerics)


@golden_op("moe", check=moe_distribute_combine_v2_args, mirrors="torch_npu.npu_moe_distribute_combine_v2")
def moe_distribute_combine_v2(expand_x: list, expert_ids: list, assist_info_for_combine: list, ep_send_counts: list,
                              expert_scales: list, group_ep: str, ep_world_size: int, ep_rank_id: list,
                              moe_expert_num: int, *, tp_send_counts=None, x_active_mask=None, expand_scales=None,
                              shared_expert_x=None, elastic_info=None, ori_x=None, const_expert_alpha_1=None,
                              const_expert_alpha_2=None, const_expert_v=None, performance_info=None,
                              group_tp: str = "", tp_world_size: int = 0, tp_rank_id: int = 0,
                              expert_shard_type: int = 0, shared_expert_num: int = 1, shared_expert_rank_num: int = 0,
                              global_bs: int = 0, comm_quant_mode: int = 0, comm_alg: str = "",
                              zero_expert_num: int = 0, copy_expert_num: int = 0, const_expert_num: int = 0,
                              numerics: Numerics = ASCEND) -> list:
    return _combine(moe_distribute_combine_v2_args(
        expand_x, expert_ids, assist_info_for_combine, ep_send_counts, expert_scales, group_ep, ep_world_size,
        ep_rank_id, moe_expert_num, tp_send_counts=tp_send_counts, x_active_mask=x_active_mask,
        expand_scales=expand_scales, shared_expert_x=shared_expert_x, elastic_info=elastic_info, ori_x=ori_x,
        const_expert_alpha_1=const_expert_alpha_1, const_expert_alpha_2=const_expert_alpha_2,
        const_expert_v=const_expert_v, performance_info=performance_info, group_tp=group_tp,
        tp_world_size=tp_world_size, tp_rank_id=tp_rank_id, expert_shard_type=expert_shard_type,
        shared_expert_num=shared_expert_num, shared_expert_rank_num=shared_expert_rank_num, global_bs=global_bs,
        comm_quant_mode=comm_quant_mode, comm_alg=comm_alg, zero_expert_num=zero_expert_num,
        copy_expert_num=copy_expert_num, const_expert_num=const_expert_num, numerics=numerics), numerics, v2=True)


moe_distribute_combine_v2.__doc__ = (
    """``torch_npu.npu_moe_distribute_combine_v2`` (MC2 v2, A3) on simulated ranks.

    A3 v2: H in [1024, 8192]; ``comm_alg`` as the dispatch. ``x_active_mask`` (per rank ``[BS_r]`` or
    ``[BS_r, K]``): a masked copy contributes nothing; a token with every copy masked (1-D: an inactive
    token) is **not written** by the kernel (it combines only the active tokens into an output it never
    initialises): its row is unspecified; the golden writes the sum of nothing there (+0, plus
    ``shared_expert_x`` if given) and the op's declaration masks those rows out of comparisons. ``shared_expert_x`` (per rank ``[BS_r, H]``,
    or 3-D) is added to the sum unweighted before the one rounding. ``expand_scales`` is accepted and
    ignored (carried for the hierarchy path); ``elastic_info``, ``ori_x``, the const-expert tensors,
    ``performance_info`` and the special experts are not modelled (None / 0 only).
    """ + _DOC.format(
        index="assist_info_for_combine : the dispatch's per-rank int32 ``[>= 3 * A_q]``: row i of rank q goes "
              "back to (source rank, token, k) = ``assist[3i : 3i + 3]``.",
        shared="acc = acc + fp32(shared_expert_x[r][t])      # unweighted, if given\n        "))
