"""``npu_moe_distribute_dispatch`` and ``npu_moe_distribute_dispatch_v2`` (MC2) on simulated ranks.

Sources: the torch_npu 2.13.0 schema, the op-plugin docs, hicann/ops-transformer @ c29bc106
``mc2/moe_distribute_dispatch{,_v2}/``. Every rank's tokens are quantized (optionally) by the sender
and sent to the ranks that own their experts; each rank receives its rows in the canonical order
(local expert, source rank, flat copy index) with the counts and index outputs combine needs. The
golden takes every rank's arguments at once: ``x`` and ``expert_ids`` (and the other per-rank
tensors) are lists with one array per rank, and every output is a list with one array per rank.
The A3 constraints of the docs are argument errors; the device's capacity padding (``A``) is not
modelled: the golden returns the valid rows only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from . import _common as C
from . import _ep

__all__ = ["moe_distribute_dispatch", "moe_distribute_dispatch_v2"]

_X = (_dt.bfloat16, _dt.float16)
_V1_WORLD = (8, 16, 32, 64, 128, 144, 256, 288)
_COMM_ALG = ("", "fullmesh_v1", "fullmesh_v2", "hierarchy")


@dataclass(frozen=True, eq=False)
class MoeDistributeDispatchArgs:
    """The checked arguments of :func:`moe_distribute_dispatch` / ``_v2`` (per-rank lists in **rank
    order**; ``entry_of_rank`` maps back to the caller's list order) and the facts derived from them."""

    op: str                          # "moe_distribute_dispatch" or "moe_distribute_dispatch_v2"
    x: list                          # per rank: bf16 / fp16 [BS_r, H]
    expert_ids: list                 # per rank: int32 [BS_r, K], distinct ids per row in [0, E)
    group: "EpGroup"                 # the checked group arguments (R, E, E_loc, S, the entries' rank ids)
    k: int                           # K
    h: int                           # H
    scales: np.ndarray | None        # fp32 [E + offset, H] smooth scales (quant_mode 2 only), or None
    scale_row_offset: int            # the smooth row of expert e is e + scale_row_offset
    active: list | None              # per rank: bool [BS_r, K], which copies are sent (v2 x_active_mask), or None
    expert_scales: list | None       # per rank: fp32 [BS_r, K] (v2 with comm_alg "hierarchy"), or None
    quant_mode: int                  # 0 (none) or 2 (dynamic per-token int8)
    global_bs: int                   # as given: 0 or max_r BS_r * R
    expert_token_nums_type: int      # 0: prefix sums, 1: counts


def _rank_ids(op: str, ep_rank_id, r: int) -> tuple:
    if not isinstance(ep_rank_id, (list, tuple)) or len(ep_rank_id) != r or \
            sorted(int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else -1
                   for v in ep_rank_id) != list(range(r)):
        _check.fail(op, "ep_rank_id", f"the rank id of each entry: {r} distinct ints in [0, ep_world_size = {r})",
                    repr(ep_rank_id)[:120])
    entry = [0] * r
    for i, q in enumerate(ep_rank_id):
        entry[int(q)] = i
    return tuple(entry)


def _in_rank_order(values: list | None, entry: tuple) -> list | None:
    return None if values is None else [values[i] for i in entry]


def _world(op: str, v2: bool, ep_world_size, r: int, comm_alg: str) -> int:
    if v2:
        w = _check.integer(op, "ep_world_size", ep_world_size, minimum=2, maximum=768)
        if comm_alg == "hierarchy" and not (16 <= w <= 256 and w % 16 == 0):
            _check.fail(op, "ep_world_size", "in [16, 256] and a multiple of 16 with comm_alg 'hierarchy'", str(w))
    else:
        w = _check.integer(op, "ep_world_size", ep_world_size)
        if w not in _V1_WORLD:
            _check.fail(op, "ep_world_size", f"one of {_V1_WORLD} (A3, v1)", str(w))
    if w != r:
        _check.fail(op, "ep_world_size", f"the number of simulated ranks, len(x) = {r}", str(w))
    return w


@dataclass(frozen=True, eq=False)
class EpGroup:
    """The checked communication-group arguments every EP op shares (:func:`group_args`)."""

    entry_of_rank: tuple             # entry_of_rank[q]: the list position holding rank q (from ep_rank_id)
    ranks: int                       # R = ep_world_size
    experts: int                     # E = moe_expert_num
    e_loc: int                       # E_loc = E / (R - S)
    shared_ranks: int                # S = shared_expert_rank_num
    shared_expert_num: int           # shared experts (v1: 1; v2: [0, 4])
    tp_world_size: int               # 0 or 1
    comm_alg: str                    # v2: "", "fullmesh_v1", "fullmesh_v2" or "hierarchy"; v1: ""
    group_ep: str                    # the HCCL EP group name, as given (what a lowering passes on)
    group_tp: str                    # the TP group name, as given
    tp_rank_id: int                  # 0
    expert_shard_type: int           # 0 (shared-expert ranks first)


def group_args(op: str, v2: bool, r: int, group_ep, ep_world_size, ep_rank_id, moe_expert_num, group_tp,
               tp_world_size, tp_rank_id, expert_shard_type, shared_expert_num, shared_expert_rank_num,
               comm_alg) -> EpGroup:
    """The group checks of the EP ops (``r`` = the number of simulated ranks given), A3 rules of the op-plugin docs."""
    comm_alg = _check.choice(op, "comm_alg", comm_alg, _COMM_ALG) if v2 else ""
    _world(op, v2, ep_world_size, r, comm_alg)
    entry = _rank_ids(op, ep_rank_id, r)
    if not isinstance(group_ep, str) or not 1 <= len(group_ep) < 128:
        _check.fail(op, "group_ep", "an HCCL group name of length in [1, 128)", repr(group_ep)[:80])
    if not isinstance(group_tp, str):
        _check.fail(op, "group_tp", "a str", repr(group_tp)[:80], TypeError)
    tp = _check.integer(op, "tp_world_size", tp_world_size)
    if tp not in (0, 1):
        _check.fail(op, "tp_world_size", "0 or 1 (the docs: reserved; the golden does not model the kernels' tp = 2 "
                    "all-gather path)", str(tp))
    tp_rank = _check.integer(op, "tp_rank_id", tp_rank_id, minimum=0, maximum=0)
    shard = _check.integer(op, "expert_shard_type", expert_shard_type, minimum=0, maximum=0)
    sen = _check.integer(op, "shared_expert_num", shared_expert_num, minimum=0 if v2 else 1, maximum=4 if v2 else 1)
    s = _check.integer(op, "shared_expert_rank_num", shared_expert_rank_num, minimum=0, maximum=r - 1)
    if s and not v2 and r % s:
        _check.fail(op, "shared_expert_rank_num", f"a divisor of ep_world_size = {r} (v1)", str(s))
    if s and v2 and (sen == 0 or s % sen):
        _check.fail(op, "shared_expert_rank_num", f"a multiple of shared_expert_num = {sen} (v2)", str(s))
    if v2 and not s and sen > 1:
        # torch_npu accepts (1, 0) and (0, 0) only; the tiling resets the default 1 to 0 without shared-expert
        # ranks and then refuses any other count (CheckSharedAttrs)
        _check.fail(op, "shared_expert_num", "0 or 1 (the default) with shared_expert_rank_num = 0 (v2: torch_npu "
                    "and the tiling refuse shared experts without shared-expert ranks)", str(sen))
    if s and comm_alg == "hierarchy":
        _check.fail(op, "shared_expert_rank_num", "0 with comm_alg 'hierarchy'", str(s))
    e = _check.integer(op, "moe_expert_num", moe_expert_num, minimum=1, maximum=1024 if v2 else 512)
    if e % (r - s):
        _check.fail(op, "moe_expert_num", f"a multiple of the routed-expert ranks ep_world_size - "
                    f"shared_expert_rank_num = {r - s}", str(e))
    e_loc = e // (r - s)
    if v2 and e_loc * r > 2048:
        _check.fail(op, "moe_expert_num", "such that E_loc * ep_world_size <= 2048 (v2)", f"E_loc = {e_loc}, R = {r}")
    return EpGroup(entry_of_rank=entry, ranks=r, experts=e, e_loc=e_loc, shared_ranks=s, shared_expert_num=sen,
                   tp_world_size=tp, comm_alg=comm_alg, group_ep=group_ep, group_tp=group_tp, tp_rank_id=tp_rank,
                   expert_shard_type=shard)


def tokens_args(op: str, v2: bool, arg: str, xs: list, g: EpGroup, numerics: Numerics) -> tuple[int, list]:
    """Per-rank rows (rank order) of one dtype and one H: H in [1024, 8192] (v2) or 7168 (v1), BS_r in
    (0, 512] ((0, 256] with fullmesh_v2 / hierarchy), finite. Returns ``(H, [BS_r])``."""
    h = xs[0].shape[1]
    for q, a in enumerate(xs):
        if a.dtype != xs[0].dtype or a.shape[1] != h:
            _check.fail(op, f"{arg}[{g.entry_of_rank[q]}]", f"of dtype {_dt.name(xs[0].dtype)} and H = {h} like "
                        "every rank", _check.describe(a))
        C.check_finite(op, f"{arg}[{g.entry_of_rank[q]}]", a, numerics)
    if v2 and not 1024 <= h <= 8192:
        _check.fail(op, arg, "of hidden size H in [1024, 8192] (A3, v2)", f"H = {h}")
    if not v2 and h != 7168:
        _check.fail(op, arg, "of hidden size H = 7168 (the only one v1 supports on A3)", f"H = {h}")
    return h, [a.shape[0] for a in xs]


def ids_args(op: str, v2: bool, expert_ids, g: EpGroup, bs: list | None) -> tuple[list, int, list]:
    """Per-rank ``expert_ids`` (rank order): int32 ``[BS_r, K]``, BS_r in (0, 512] ((0, 256] with fullmesh_v2 /
    hierarchy) and matching ``bs`` if given, K in (0, 8] (v1) / (0, 16] (v2; 12 with fullmesh_v2), distinct
    ids in [0, E). Returns ``(ids, K, [BS_r])``."""
    ids = _in_rank_order(_ep.rank_list(op, "expert_ids", expert_ids, ranks=g.ranks, dtypes=(_dt.int32,), ndim=2),
                         g.entry_of_rank)
    rows = [a.shape[0] for a in ids] if bs is None else bs
    max_bs = 256 if g.comm_alg in ("fullmesh_v2", "hierarchy") else 512
    if min(rows) < 1 or max(rows) > max_bs:
        _check.fail(op, "x" if bs is not None else "expert_ids", f"of BS in (0, {max_bs}] tokens on every rank",
                    f"BS = {rows}")
    k = _ep.check_expert_ids(op, "expert_ids", ids, rows, g.experts)
    k_max = 12 if g.comm_alg == "fullmesh_v2" else (16 if v2 else 8)
    if k > k_max:
        _check.fail(op, "expert_ids", f"of K in (0, {k_max}]", f"K = {k}")
    return ids, k, rows


def mask_args(op: str, v2: bool, x_active_mask, g: EpGroup, bs: list, k: int) -> list | None:
    """``x_active_mask``: None (v1: reserved), or per rank bool ``[BS_r]`` (True rows first) or ``[BS_r, K]``;
    1-D only with hierarchy; all True when the ranks' BS differ. Returns per rank bool ``[BS_r, K]``."""
    if x_active_mask is None:
        return None
    if not v2:
        _check.fail(op, "x_active_mask", "None (reserved in v1)", _check.describe(x_active_mask))
    masks = _in_rank_order(_ep.rank_list(op, "x_active_mask", x_active_mask, ranks=g.ranks, dtypes=(np.bool_,)),
                           g.entry_of_rank)
    active = []
    for q, (m, t) in enumerate(zip(masks, bs)):
        name = f"x_active_mask[{g.entry_of_rank[q]}]"
        if m.shape not in ((t,), (t, k)):
            _check.fail(op, name, f"of shape [BS] = [{t}] or [BS, K] = [{t}, {k}]", _check.describe(m))
        if m.ndim == 2 and g.comm_alg == "hierarchy":
            _check.fail(op, name, "1-D [BS] with comm_alg 'hierarchy'", _check.describe(m))
        if m.ndim == 1 and np.any(m[1:] & ~m[:-1]):
            _check.fail(op, name, "True rows first (a 1-D mask is a prefix)", str(m.astype(int).tolist())[:80])
        active.append(np.broadcast_to(m[:, None], (t, k)) if m.ndim == 1 else m)
    if len(set(bs)) > 1 and not all(a.all() for a in active):
        _check.fail(op, "x_active_mask", "all True when the ranks' BS differ", f"BS = {bs}")
    return active


def global_bs_args(op: str, global_bs, bs: list, r: int) -> int:
    """``global_bs``: 0 or ``max BS * R``, and not 0 when the ranks' BS differ."""
    gbs = _check.integer(op, "global_bs", global_bs, minimum=0)
    uneven = len(set(bs)) > 1
    if gbs not in (0, max(bs) * r) or (gbs == 0 and uneven):
        _check.fail(op, "global_bs", f"max BS * ep_world_size = {max(bs) * r}" +
                    (" (the ranks' BS differ)" if uneven else " or 0"), str(gbs))
    return gbs


def not_modelled(op: str, g: EpGroup, special: dict) -> None:
    """The arguments the golden does not compute: special experts, elastic / performance info, A5 dtypes
    (None / 0 only), shared-expert ranks (S = 0 only). Checked last, after every A3 rule."""
    for name, value in special.items():
        if value is not None and not (isinstance(value, int) and value == 0):
            _check.fail(op, name, "None / 0 (not modelled by the golden)", repr(value)[:80])
    if g.shared_ranks:
        _check.fail(op, "shared_expert_rank_num", "0: the golden does not model shared-expert ranks (no serving "
                    "path of SGLang or vllm-ascend uses them)", str(g.shared_ranks))


def smooth_row_offset(g: EpGroup, v2: bool) -> int:
    """The smooth-scale row of expert e is ``e + offset``. v2: the tiling's ``sharedExpertNum`` (it resets the
    default ``shared_expert_num = 1`` to 0 when ``shared_expert_rank_num = 0``; the kernel reads row
    ``dstExpertId + sharedExpertNum_``); v1: 1 when there are shared-expert ranks, else 0."""
    if v2:
        return g.shared_expert_num if g.shared_ranks else 0
    return 1 if g.shared_ranks else 0


def dispatch_args(op: str, v2: bool, x, expert_ids, group_ep, ep_world_size, ep_rank_id, moe_expert_num, scales,
                  x_active_mask, expert_scales, group_tp, tp_world_size, tp_rank_id, expert_shard_type,
                  shared_expert_num, shared_expert_rank_num, quant_mode, global_bs, expert_token_nums_type,
                  comm_alg, special, numerics) -> MoeDistributeDispatchArgs:
    """The checks of both dispatch ops, in this order (A3 rules of the op-plugin docs and the tiling)."""
    C.check_numerics(op, numerics)
    xs = _ep.rank_list(op, "x", x, dtypes=_X, ndim=2)
    g = group_args(op, v2, len(xs), group_ep, ep_world_size, ep_rank_id, moe_expert_num, group_tp, tp_world_size,
                   tp_rank_id, expert_shard_type, shared_expert_num, shared_expert_rank_num, comm_alg)
    xs = _in_rank_order(xs, g.entry_of_rank)
    h, bs = tokens_args(op, v2, "x", xs, g, numerics)
    ids, k, _ = ids_args(op, v2, expert_ids, g, bs)
    qm = _check.integer(op, "quant_mode", quant_mode)
    if qm == 1:
        _check.fail(op, "quant_mode", "0 or 2 (the tiling: 'cannot support static quant now')", "1")
    if qm not in (0, 2):
        _check.fail(op, "quant_mode", "0 (none) or 2 (dynamic per-token int8) on A3", str(qm))
    offset = smooth_row_offset(g, v2)
    sc = None
    if scales is not None:
        if qm != 2:
            _check.fail(op, "scales", "None with quant_mode 0 (smooth scales need quant_mode 2)",
                        _check.describe(scales))
        sc = _check.array(op, "scales", scales, dtypes=(_dt.float32,), ndim=2)
        _check.shape(op, "scales", sc, [(g.experts + offset, h)],
                     f"of shape [E + {offset}, H] = [{g.experts + offset}, {h}]" +
                     (" (v2 without shared-expert ranks: the tiling resets shared_expert_num to 0)"
                      if v2 and not g.shared_ranks else ""))
        C.check_finite(op, "scales", sc, numerics)
    if qm == 2 and numerics.ep_dispatch_quant == "init_routing" and (sc is not None or xs[0].dtype != _dt.bfloat16):
        # that formula is npu_moe_init_routing_v2(quant_mode=1)'s, on the bf16 rows it gathers: an fp16 x or
        # smoothed (fp32) rows would need a rounding to bf16 the modelled deployment never does
        _check.fail(op, "numerics", "ep_dispatch_quant 'mc2' or 'deepep_normal' for an fp16 x or smooth scales "
                    "('init_routing' models moe_init_routing_v2's quantizer on bf16 rows)",
                    f"'init_routing' with x {_dt.name(xs[0].dtype)}" + (" and smooth scales" if sc is not None else ""))
    active = mask_args(op, v2, x_active_mask, g, bs, k)
    es = None
    if expert_scales is not None:
        if not v2:
            _check.fail(op, "expert_scales", "None (unsupported by v1 on A3)", _check.describe(expert_scales))
        if g.comm_alg != "hierarchy":
            _check.fail(op, "expert_scales", "None unless comm_alg is 'hierarchy' (A3)", _check.describe(expert_scales))
        es = _in_rank_order(_ep.rank_list(op, "expert_scales", expert_scales, ranks=g.ranks, dtypes=(_dt.float32,),
                                          ndim=2), g.entry_of_rank)
        for q, (a, t) in enumerate(zip(es, bs)):
            _check.shape(op, f"expert_scales[{g.entry_of_rank[q]}]", a, [(t, k)], f"of shape [BS, K] = [{t}, {k}]")
    elif g.comm_alg == "hierarchy":
        _check.fail(op, "expert_scales", "the fp32 [BS, K] routing weights with comm_alg 'hierarchy'", "None")
    gbs = global_bs_args(op, global_bs, bs, g.ranks)
    ent = _check.integer(op, "expert_token_nums_type", expert_token_nums_type, minimum=0, maximum=1)
    not_modelled(op, g, special)
    return MoeDistributeDispatchArgs(
        op=op, x=xs, expert_ids=ids, group=g, k=k, h=h, scales=sc, scale_row_offset=offset, active=active,
        expert_scales=es, quant_mode=qm, global_bs=gbs, expert_token_nums_type=ent)


def entry_order(g: EpGroup, per_rank: list) -> list:
    """A per-rank list (rank order) in the caller's entry order."""
    out = [None] * g.ranks
    for q, i in enumerate(g.entry_of_rank):
        out[i] = per_rank[q]
    return out


def _dispatch(a: MoeDistributeDispatchArgs, numerics: Numerics, v2: bool):
    g = a.group
    p = _ep.place(a.expert_ids, a.active, g.e_loc, g.shared_ranks, g.ranks)
    offsets = np.concatenate([[0], np.cumsum([x.shape[0] for x in a.x])])
    tok = offsets[p.copy_src[:, 0]] + p.copy_src[:, 1]          # every copy's row in the ranks' concatenation
    xcat = np.concatenate(a.x)
    if a.quant_mode == 2 and a.scales is not None:              # per copy: the destination expert's smooth row
        xf = xcat[tok].astype(np.float32) * a.scales[p.copy_expert + a.scale_row_offset]
        rows, scale = _ep.sender_quant(xf.astype(np.float32), numerics)
    elif a.quant_mode == 2:                                     # identical copies: one quantization per token
        q8, s8 = _ep.sender_quant(xcat.astype(np.float32), numerics)
        rows, scale = q8[tok], s8[tok]
    else:
        rows, scale = xcat[tok], None
    wcat = None if a.expert_scales is None else np.concatenate([w.reshape(-1) for w in a.expert_scales])
    out = {n: [] for n in ("expand_x", "dynamic_scales", "index", "expert_token_nums", "ep_recv_counts",
                           "tp_recv_counts", "expand_scales")}
    for q in range(g.ranks):
        sel = p.received[q]
        out["expand_x"].append(rows[sel])
        out["dynamic_scales"].append(scale[sel] if scale is not None else np.zeros(0, np.float32))
        if v2:
            out["index"].append(p.src(q).reshape(-1))
        else:
            out["index"].append(p.block_pos[q].copy())
        out["expert_token_nums"].append(p.expert_token_nums(q, cumulative=a.expert_token_nums_type == 0))
        out["ep_recv_counts"].append(p.ep_recv_counts(q))
        out["tp_recv_counts"].append(np.zeros(g.tp_world_size, np.int32))
        if a.expert_scales is None:
            out["expand_scales"].append(np.zeros(0, np.float32))
        else:
            out["expand_scales"].append(wcat[tok[sel] * a.k + p.copy_src[sel, 2]])
    return tuple(entry_order(g, vals) for vals in out.values())


_DOC_COMMON = """
    Parameters (each rank's own tensors as a list, one entry per rank)
    ----------
    x : list of R bf16 / fp16 ``[BS_r, H]`` (same dtype and H everywhere); BS_r in (0, 512].
    expert_ids : list of R int32 ``[BS_r, K]``: K distinct routed experts per token, in ``[0, E)``.
    group_ep : the HCCL group name, length in [1, 128) (checked, no effect).
    ep_world_size : R, the number of list entries.
    ep_rank_id : list of R distinct ints in ``[0, R)``: the rank id of each entry (``list(range(R))``
        when the lists are in rank order). Every output list follows the entries' order.
    moe_expert_num : E, a multiple of ``R - shared_expert_rank_num``; ``E_loc = E / (R - S)``.
    scales : optional fp32 ``[E + offset, H]`` smooth scales (quant_mode 2 only); the row of expert e is
        ``e + offset`` with offset = the tiling's shared-expert count: ``shared_expert_num`` with
        shared-expert ranks, **0 without** (v2: the tiling resets the default 1 to 0 when S = 0, so the
        tensor is ``[E, H]`` there), ``1 if S else 0`` (v1).
    group_tp, tp_world_size (0 or 1), tp_rank_id (0): reserved (the kernels' tp = 2 path is not modelled).
    expert_shard_type : 0 only. shared_expert_rank_num : S; **the golden computes S = 0 only** (ValueError
        otherwise, after the A3 checks). shared_expert_num : v1 1, v2 [0, 4]; with S = 0 only 0 or 1
        (torch_npu and the tiling refuse 2 - 4 without shared-expert ranks).
    quant_mode : 0 (rows travel in x's dtype) or 2 (dynamic per-token int8; 1 is rejected by the tiling).
    global_bs : 0 or ``max_r BS_r * R``; 0 only when every rank has the same BS.
    expert_token_nums_type : 1 counts (default), 0 prefix sums.
    numerics : ``ep_dispatch_quant`` (the sender's formula: ``"mc2"`` the kernel's, ``"deepep_normal"``,
        ``"init_routing"``), ``round_mode``, ``saturate``, ``zero_row``, ``nan_policy``.

    Formula. Copy (r, t, k) with ``e = expert_ids[r][t, k]`` goes to rank ``q = S + e // E_loc`` as local
    expert ``l = e % E_loc``. quant_mode 2, per copy, fp32 (ops-transformer
    ``mc2/moe_distribute_dispatch_v2/`` ``QuantProcess``)::

        xf = fp32(x[r][t]) [* scales[e + offset]];  m = max_h |xf_h|;  inv = 127 / m
        q8 = clamp(rint(xf * inv), -127, 127) -> int8;   s = 1 / inv         (numerics.ep_dispatch_quant)

    (without smooth scales the K copies of a token carry identical (q8, s): quantized once per token).
    Receiver q orders its rows by (l, r, f = t * K + k) ascending (op-plugin
    ``test_moe_distribute_dispatch.py::_construct_excepted_result``).
"""

_DOC_RETURNS = """
    Returns a tuple of 7 lists (one array per entry, in entry order; A_q = rows rank q receives):
    ``expand_x`` int8 (quant_mode 2) or x's dtype ``[A_q, H]``; ``dynamic_scales`` fp32 ``[A_q]``
    (quant_mode 2; ``[0]`` otherwise: the device leaves it unwritten); {index};
    ``expert_token_nums`` int64 ``[E_loc]``; ``ep_recv_counts`` int32 ``[E_loc * R]``, entry ``l * R + r``
    = rows received from sources before (l, r) and (l, r) itself (cumulative, row-major);
    ``tp_recv_counts`` int32 ``[tp_world_size]`` (reserved: zeros); ``expand_scales`` fp32 {expand_scales}.
    The device's capacity padding ``A = global_bs * min(E_loc, K)`` is not modelled: only valid rows.

    Errors: TypeError for a non-list per-rank argument or a dtype; ValueError naming the argument for
    every A3 rule of the docs (H, BS, K, R, E, E_loc * R, quant_mode, scales, global_bs, ...)
    and for arguments the golden does not model (S > 0, tp = 2{v2_extra}).
"""


def moe_distribute_dispatch_args(x, expert_ids, group_ep, ep_world_size, ep_rank_id, moe_expert_num, *, scales=None,
                                 x_active_mask=None, expert_scales=None, group_tp="", tp_world_size=0, tp_rank_id=0,
                                 expert_shard_type=0, shared_expert_num=1, shared_expert_rank_num=0, quant_mode=0,
                                 global_bs=0, expert_token_nums_type=1,
                                 numerics: Numerics = ASCEND) -> MoeDistributeDispatchArgs:
    """Every argument check of :func:`moe_distribute_dispatch`, in its order (A3, v1)."""
    return dispatch_args("moe_distribute_dispatch", False, x, expert_ids, group_ep, ep_world_size, ep_rank_id,
                         moe_expert_num, scales, x_active_mask, expert_scales, group_tp, tp_world_size, tp_rank_id,
                         expert_shard_type, shared_expert_num, shared_expert_rank_num, quant_mode, global_bs,
                         expert_token_nums_type, "", {}, numerics)


@golden_op("moe", check=moe_distribute_dispatch_args, mirrors="torch_npu.npu_moe_distribute_dispatch")
def moe_distribute_dispatch(x: list, expert_ids: list, group_ep: str, ep_world_size: int, ep_rank_id: list,
                            moe_expert_num: int, *, scales: np.ndarray | None = None, x_active_mask=None,
                            expert_scales=None, group_tp: str = "", tp_world_size: int = 0, tp_rank_id: int = 0,
                            expert_shard_type: int = 0, shared_expert_num: int = 1, shared_expert_rank_num: int = 0,
                            quant_mode: int = 0, global_bs: int = 0, expert_token_nums_type: int = 1,
                            numerics: Numerics = ASCEND) -> tuple:
    return _dispatch(moe_distribute_dispatch_args(
        x, expert_ids, group_ep, ep_world_size, ep_rank_id, moe_expert_num, scales=scales,
        x_active_mask=x_active_mask, expert_scales=expert_scales, group_tp=group_tp, tp_world_size=tp_world_size,
        tp_rank_id=tp_rank_id, expert_shard_type=expert_shard_type, shared_expert_num=shared_expert_num,
        shared_expert_rank_num=shared_expert_rank_num, quant_mode=quant_mode, global_bs=global_bs,
        expert_token_nums_type=expert_token_nums_type, numerics=numerics), numerics, v2=False)


moe_distribute_dispatch.__doc__ = (
    """``torch_npu.npu_moe_distribute_dispatch`` (MC2 v1, A3) on simulated ranks: quantize, send, receive.

    A3 v1: H = 7168 only, R in {8, 16, 32, 64, 128, 144, 256, 288}, E in [1, 512], K in (0, 8];
    ``x_active_mask`` and ``expert_scales`` are reserved (must be None).
    """ + _DOC_COMMON + _DOC_RETURNS.format(
        index="``expand_idx`` int32 ``[BS_r * K]`` (**sender side**: for copy f, its position among the "
              "earlier copies of this rank to the same expert)",
        expand_scales="``[0]`` (no expert_scales in v1)", v2_extra=""))


MoeDistributeDispatchV2Args = MoeDistributeDispatchArgs
"""The checked arguments of :func:`moe_distribute_dispatch_v2`: those of :func:`moe_distribute_dispatch`."""


def moe_distribute_dispatch_v2_args(x, expert_ids, group_ep, ep_world_size, ep_rank_id, moe_expert_num, *,
                                    scales=None, x_active_mask=None, expert_scales=None, elastic_info=None,
                                    performance_info=None, group_tp="", tp_world_size=0, tp_rank_id=0,
                                    expert_shard_type=0, shared_expert_num=1, shared_expert_rank_num=0, quant_mode=0,
                                    global_bs=0, expert_token_nums_type=1, comm_alg="", zero_expert_num=0,
                                    copy_expert_num=0, const_expert_num=0, y_dtype=None, x_dtype=None,
                                    scales_dtype=None, numerics: Numerics = ASCEND) -> MoeDistributeDispatchV2Args:
    """Every argument check of :func:`moe_distribute_dispatch_v2`, in its order (A3, v2)."""
    special = {"elastic_info": elastic_info, "performance_info": performance_info, "zero_expert_num": zero_expert_num,
               "copy_expert_num": copy_expert_num, "const_expert_num": const_expert_num, "y_dtype": y_dtype,
               "x_dtype": x_dtype, "scales_dtype": scales_dtype}
    return dispatch_args("moe_distribute_dispatch_v2", True, x, expert_ids, group_ep, ep_world_size, ep_rank_id,
                         moe_expert_num, scales, x_active_mask, expert_scales, group_tp, tp_world_size, tp_rank_id,
                         expert_shard_type, shared_expert_num, shared_expert_rank_num, quant_mode, global_bs,
                         expert_token_nums_type, comm_alg, special, numerics)


@golden_op("moe", check=moe_distribute_dispatch_v2_args, mirrors="torch_npu.npu_moe_distribute_dispatch_v2")
def moe_distribute_dispatch_v2(x: list, expert_ids: list, group_ep: str, ep_world_size: int, ep_rank_id: list,
                               moe_expert_num: int, *, scales: np.ndarray | None = None, x_active_mask=None,
                               expert_scales=None, elastic_info=None, performance_info=None, group_tp: str = "",
                               tp_world_size: int = 0, tp_rank_id: int = 0, expert_shard_type: int = 0,
                               shared_expert_num: int = 1, shared_expert_rank_num: int = 0, quant_mode: int = 0,
                               global_bs: int = 0, expert_token_nums_type: int = 1, comm_alg: str = "",
                               zero_expert_num: int = 0, copy_expert_num: int = 0, const_expert_num: int = 0,
                               y_dtype=None, x_dtype=None, scales_dtype=None, numerics: Numerics = ASCEND) -> tuple:
    return _dispatch(moe_distribute_dispatch_v2_args(
        x, expert_ids, group_ep, ep_world_size, ep_rank_id, moe_expert_num, scales=scales,
        x_active_mask=x_active_mask, expert_scales=expert_scales, elastic_info=elastic_info,
        performance_info=performance_info, group_tp=group_tp, tp_world_size=tp_world_size, tp_rank_id=tp_rank_id,
        expert_shard_type=expert_shard_type, shared_expert_num=shared_expert_num,
        shared_expert_rank_num=shared_expert_rank_num, quant_mode=quant_mode, global_bs=global_bs,
        expert_token_nums_type=expert_token_nums_type, comm_alg=comm_alg, zero_expert_num=zero_expert_num,
        copy_expert_num=copy_expert_num, const_expert_num=const_expert_num, y_dtype=y_dtype, x_dtype=x_dtype,
        scales_dtype=scales_dtype, numerics=numerics), numerics, v2=True)


moe_distribute_dispatch_v2.__doc__ = (
    """``torch_npu.npu_moe_distribute_dispatch_v2`` (MC2 v2, A3) on simulated ranks.

    A3 v2: H in [1024, 8192], R in [2, 768], E in [1, 1024] with E_loc * R <= 2048, K in (0, 16];
    ``comm_alg``: "" / "fullmesh_v1", "fullmesh_v2" (BS <= 256, K <= 12) or "hierarchy" (R in [16, 256],
    a multiple of 16; no shared experts; 1-D mask; ``expert_scales`` required). The layout is the same
    for every comm_alg. ``x_active_mask``: per rank bool ``[BS_r]`` (True rows first) or ``[BS_r, K]``
    (per copy): masked copies are not sent; with unequal BS every token must be active.
    ``expert_scales``: per rank fp32 ``[BS_r, K]`` (hierarchy only), carried with the rows.
    ``elastic_info``, ``performance_info``, the special experts (``zero/copy/const_expert_num``) and the
    A5 dtypes (``y_dtype``, ``x_dtype``, ``scales_dtype``) are not modelled: None / 0 only.
    """ + _DOC_COMMON + _DOC_RETURNS.format(
        index="``assist_info_for_combine`` int32 ``[3 * A_q]`` (**receiver side**: row i's (source rank, "
              "source token, k) at ``[3i, 3i + 2]``)",
        expand_scales="``[A_q]`` (the rows' expert_scales; ``[0]`` without expert_scales)",
        v2_extra=", special experts, elastic / performance info, A5 dtypes"))
