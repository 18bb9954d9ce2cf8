"""The W8A8 MoE layer run expert-parallel on simulated ranks (docs/expert-parallelism.md).

::

    rank r: hidden h_r bf16 [T_r, H] (T_r may be 0), topk_ids int32 [T_r, K], topk_weights fp32 [T_r, K]
      dispatch "int8": (q8, s) = sender_quant(h_r)  -> every copy (r, t, k) carries (q8[t], s[t])
      dispatch "bf16": every copy carries h_r[t] unchanged
    rank q: rows in canonical order (local expert, source rank, t * K + k), E_loc experts [q E_loc, (q+1) E_loc)
      x8, s = (payload, scale) if int8  else  dynamic_quant(payload)      # the one on-arrival quantization
      g  = grouped_matmul(x8, W13_q, bf16 scale, per_token_scale=s, group_list=expert_token_nums, type 1)
      a8, s2 = dequant_swiglu_quant(g, quant_mode=1, activate_left=True, swiglu_limit)
      y  = grouped_matmul(a8, W2_q, bf16 scale, per_token_scale=s2, ...)   -> bf16 [A_q, H]
    rank r: routed[t] = bf16(sum_k fp32 y(r, t, k) * w[t, k])   (fp32 from +0, ascending k, one rounding)
      y_r = bf16(fp32(routed) + fp32(shared_r))   with the shared expert run on h_r (the source rank)

The parts (:func:`ep_dispatch`, :func:`ep_experts`, :func:`ep_combine`) are public so that a test can
swap one for a faulty one (:func:`ep_layer`) and check the invariants of :mod:`conformance.ep_invariants` on what
crossed the wire (:func:`w8a8_moe_ep_stages`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..dynamic_quant import dynamic_quant
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from ..rounding import to_float
from . import _common as C
from . import _ep
from .grouped_matmul import grouped_matmul
from .. import serving as _sv
from .pipeline import ExpertWeights, _load_experts, _shared, expert_weights_args, shared_expert_args, swiglu_limit_arg
from .swiglu import dequant_swiglu_quant

__all__ = ["w8a8_moe_ep", "w8a8_moe_ep_stages"]

_OP = "w8a8_moe_ep"
DISPATCH = ("int8", "bf16")


@dataclass(frozen=True, eq=False)
class W8a8MoeEpArgs:
    """The checked arguments of :func:`w8a8_moe_ep` (:func:`w8a8_moe_ep_args`)."""

    hidden: list                     # per rank: bf16 [T_r, H] (T_r >= 0)
    experts: ExpertWeights           # the routed experts' checked weights (checkpoint layout, all E)
    topk_ids: list                   # per rank: int32 [T_r, K], K distinct ids per row in [0, E)
    topk_weights: list               # per rank: fp32 [T_r, K]
    ranks: int                       # R, the EP world size (len(hidden))
    e_loc: int                       # E_loc = E / R, the experts of each rank
    k: int                           # K
    h: int                           # H
    dispatch: str                    # "int8" (quantized by the sender) or "bf16" (quantized on arrival)
    swiglu_limit: object             # the routed experts' clamp the engine applies (serving row M1), or None
    shared_expert: Mapping | None    # the six checkpoint tensors, or None
    shared_limit: float | None = None   # the shared expert's bf16 clamp (serving row M5), or None


def w8a8_moe_ep_args(hidden, w13, w13_scale, w2, w2_scale, *, topk_ids, topk_weights, dispatch="int8",
                     swiglu_limit=None, shared_expert=None, numerics: Numerics = ASCEND,
                     serving=None) -> W8a8MoeEpArgs:
    """Every argument check of :func:`w8a8_moe_ep`, in its order: numerics, hidden (a list of bf16
    ``[T_r, H]``), the shared expert's structure, the experts' weights (E a multiple of R), the routing
    lists, ``dispatch``. TypeError for dtypes and non-lists, ValueError otherwise."""
    return _args(_OP, hidden, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights, dispatch, swiglu_limit,
                 shared_expert, numerics, serving)


def _args(op, hidden, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights, dispatch, swiglu_limit, shared_expert,
          numerics, serving=None) -> W8a8MoeEpArgs:
    C.check_numerics(op, numerics)
    sv = _sv.get(serving, op)
    limit = swiglu_limit_arg(op, swiglu_limit)
    hs = _ep.rank_list(op, "hidden", hidden, dtypes=(_dt.bfloat16,), ndim=2)
    r, h = len(hs), hs[0].shape[1]
    for q, a in enumerate(hs):
        if a.shape[1] != h:
            _check.fail(op, f"hidden[{q}]", f"of shape [T, H] with H = {h} like every rank", _check.describe(a))
        C.check_finite(op, f"hidden[{q}]", a, numerics)
    shared_expert_args(op, shared_expert, hs)
    experts = expert_weights_args(op, h, w13, w13_scale, w2, w2_scale)
    if experts.e % r:
        _check.fail(op, "w13", f"of E experts a multiple of the ranks R = len(hidden) = {r}", f"E = {experts.e}")
    ids = _ep.rank_list(op, "topk_ids", topk_ids, ranks=r, dtypes=(_dt.int32, _dt.int64), ndim=2)
    k = _ep.check_expert_ids(op, "topk_ids", ids, [a.shape[0] for a in hs], experts.e)
    wts = _ep.rank_list(op, "topk_weights", topk_weights, ranks=r, dtypes=C.FLOATS, ndim=2)
    for q, (w, i) in enumerate(zip(wts, ids)):
        _check.same_shape(op, f"topk_weights[{q}]", w, f"topk_ids[{q}]", i)
        C.check_finite(op, f"topk_weights[{q}]", w, numerics)
    dispatch = _check.choice(op, "dispatch", dispatch, DISPATCH)
    return W8a8MoeEpArgs(hidden=hs, experts=experts, topk_ids=[i.astype(np.int32) for i in ids],
                         topk_weights=[w.astype(np.float32) for w in wts], ranks=r, e_loc=experts.e // r, k=k, h=h,
                         dispatch=dispatch, swiglu_limit=_sv.routed_limit(sv, limit), shared_expert=shared_expert,
                         shared_limit=_sv.shared_limit(sv, limit))


@dataclass(frozen=True, eq=False)
class EpRecv:
    """What one rank received (``EpRecv``)."""

    x: np.ndarray                    # int8 or bf16 [A_q, H]: the payload rows, canonical order
    scale: np.ndarray | None         # fp32 [A_q]: the scales that travelled with the rows (int8), or None
    src: np.ndarray                  # int32 [A_q, 3]: (source rank, token, k) of every row
    expert_token_nums: np.ndarray    # int64 [E_loc]: rows per local expert (counts)
    ep_recv_counts: np.ndarray       # int32 [E_loc * R]: cumulative over (l, source), row-major
    counts: np.ndarray               # int64 [R, E_loc]: rows from each source rank to each local expert


def ep_dispatch(a: W8a8MoeEpArgs, numerics: Numerics) -> tuple[list, list]:
    """The golden dispatch: ``([EpRecv] per rank, [sender quantizer calls] per rank)``. int8: each rank
    quantizes its tokens once (:func:`w8a8.moe._ep.sender_quant`, ``numerics.ep_dispatch_quant``) and every
    copy carries its token's (codes, scale); bf16: the rows travel bit-identical."""
    p = _ep.place(a.topk_ids, None, a.e_loc, 0, a.ranks)
    rows, scales, calls = [], [], []
    for h in a.hidden:
        if a.dispatch == "int8":
            q8, s = _ep.sender_quant(h.astype(np.float32), numerics)
            rows.append(q8)
            scales.append(s)
        else:
            rows.append(h)
        calls.append(int(a.dispatch == "int8"))
    offsets = np.concatenate([[0], np.cumsum([h.shape[0] for h in a.hidden])])
    tok = offsets[p.copy_src[:, 0]] + p.copy_src[:, 1]
    cat = np.concatenate(rows)
    scat = np.concatenate(scales) if scales else None
    out = []
    for q in range(a.ranks):
        sel = tok[p.received[q]]
        out.append(EpRecv(x=cat[sel], scale=None if scat is None else scat[sel], src=p.src(q),
                          expert_token_nums=p.expert_token_nums(q), ep_recv_counts=p.ep_recv_counts(q),
                          counts=p.counts[q]))
    return out, calls


def ep_experts(recv: EpRecv, w13_kn, s13, w2_kn, s2w, swiglu_limit, numerics: Numerics) -> dict:
    """One expert rank's grouped W8A8 experts on its received rows (step 4 of the module docstring): ``gmm1_x`` /
    ``gmm1_x_scale`` (what GMM1 got), ``quantizer_calls`` (0 on the int8 path, 1 on the bf16 path:
    ``dynamic_quant`` of the whole payload, the runner's ``npu_dynamic_quant``), ``gmm1``, ``act_q``,
    ``act_scale``, ``gmm2`` (bf16 ``[A_q, H]``). The weights are the rank's slice in serving layout."""
    if recv.scale is None:
        x8, s = dynamic_quant(recv.x, numerics=numerics)
        calls = 1
    else:
        x8, s, calls = recv.x, recv.scale, 0
    gl = recv.expert_token_nums
    g = grouped_matmul(x8, w13_kn, scale=s13, per_token_scale=s, group_list=gl, group_list_type=1,
                       output_dtype=_dt.bfloat16, split_item=2, group_type=0, numerics=numerics)
    a8, s2 = dequant_swiglu_quant(g, quant_mode=1, activate_left=True, swiglu_limit=swiglu_limit, numerics=numerics)
    y = grouped_matmul(a8, w2_kn, scale=s2w, per_token_scale=s2, group_list=gl, group_list_type=1,
                       output_dtype=_dt.bfloat16, split_item=2, group_type=0, numerics=numerics)
    return {"gmm1_x": x8, "gmm1_x_scale": s, "quantizer_calls": calls, "gmm1": g, "act_q": a8, "act_scale": s2,
            "gmm2": y}


def ep_combine(y: list, recv: list, a: W8a8MoeEpArgs, numerics: Numerics) -> list:
    """The golden combine (step 5 of the module docstring): per source rank bf16 ``[T_r, H]``, each token's K rows
    summed in fp32 from +0 in ascending k with the weights of ``numerics.ep_combine_weights``, rounded once."""
    tokens = tuple(h.shape[0] for h in a.hidden)
    rows, present = _ep.gather_rows(y, [r.src for r in recv], tokens, a.k, a.h)
    return [to_float(_ep.weighted_sum(rows[r], present[r], _ep.combine_weights(a.topk_weights[r], numerics)),
                     _dt.bfloat16) for r in range(a.ranks)]


def ep_layer(a: W8a8MoeEpArgs, numerics: Numerics, *, dispatcher: Callable = ep_dispatch,
             experts: Callable = ep_experts, combiner: Callable = ep_combine) -> dict:
    """The layer on checked arguments with its parts replaceable (the golden's by default); returns
    the stages of :func:`w8a8_moe_ep_stages`."""
    w13_kn, s13, w2_kn, s2w = _load_experts(a.experts)
    recv, sender_calls = dispatcher(a, numerics)
    parts = []
    for q, rv in enumerate(recv):
        lo, hi = q * a.e_loc, (q + 1) * a.e_loc
        parts.append(experts(rv, w13_kn[lo:hi], s13[lo:hi], w2_kn[lo:hi], s2w[lo:hi], a.swiglu_limit, numerics))
    routed = combiner([p["gmm2"] for p in parts], recv, a, numerics)
    shared, ys = [], []
    for h, rt in zip(a.hidden, routed):
        if a.shared_expert is None:
            shared.append(None)
            ys.append(rt)
            continue
        sh = _shared(_OP, a.shared_expert, h, numerics, a.shared_limit)
        if sh.shape != rt.shape:
            _check.fail(_OP, "shared_expert", f"a down projection to [T, H] = {rt.shape}", f"{sh.shape}")
        shared.append(sh)
        ys.append(to_float(rt.astype(np.float32) + sh.astype(np.float32), _dt.bfloat16))
    stages = {"dispatch": a.dispatch, "payload": [r.x for r in recv], "payload_scale": [r.scale for r in recv],
              "src": [r.src for r in recv], "expert_token_nums": [r.expert_token_nums for r in recv],
              "ep_recv_counts": [r.ep_recv_counts for r in recv], "counts": [r.counts for r in recv],
              "wire_bytes": [int(r.x.nbytes + (0 if r.scale is None else r.scale.nbytes)) for r in recv],
              "sender_quantizer_calls": sender_calls}
    for name in ("gmm1_x", "gmm1_x_scale", "quantizer_calls", "gmm1", "act_q", "act_scale", "gmm2"):
        stages[name] = [p[name] for p in parts]
    stages.update(routed=routed, shared=shared, y=ys)
    return stages


def w8a8_moe_ep_stages(hidden: list, w13: np.ndarray, w13_scale: np.ndarray, w2: np.ndarray, w2_scale: np.ndarray,
                       *, topk_ids: list, topk_weights: list, dispatch: str = "int8", swiglu_limit: float | None = None,
                       shared_expert: Mapping | None = None, numerics: Numerics = ASCEND, serving=None) -> dict:
    """:func:`w8a8_moe_ep` with what crossed the wire and every intermediate, per rank (lists, rank order):

    ``payload`` (int8 or bf16 ``[A_q, H]``), ``payload_scale`` (fp32 ``[A_q]`` or None), ``src`` (int32
    ``[A_q, 3]``), ``expert_token_nums``, ``ep_recv_counts``, ``counts`` (int64 ``[R, E_loc]``),
    ``wire_bytes`` (payload + scale bytes received), ``sender_quantizer_calls`` (per source rank: 1 on the
    int8 path, else 0), ``quantizer_calls`` (per expert rank: 0 on the int8 path, 1 on the bf16 path),
    ``gmm1_x`` / ``gmm1_x_scale`` (GMM1's input), ``gmm1``, ``act_q``, ``act_scale``, ``gmm2``, ``routed``,
    ``shared`` (or None), ``y``; and ``dispatch``."""
    return ep_layer(w8a8_moe_ep_args(hidden, w13, w13_scale, w2, w2_scale, topk_ids=topk_ids,
                                     topk_weights=topk_weights, dispatch=dispatch, swiglu_limit=swiglu_limit,
                                     shared_expert=shared_expert, numerics=numerics, serving=serving), numerics)


@golden_op("moe", check=w8a8_moe_ep_args)
def w8a8_moe_ep(hidden: list, w13: np.ndarray, w13_scale: np.ndarray, w2: np.ndarray, w2_scale: np.ndarray, *,
                topk_ids: list, topk_weights: list, dispatch: str = "int8", swiglu_limit: float | None = None,
                shared_expert: Mapping | None = None, numerics: Numerics = ASCEND, serving=None) -> list:
    """The ``W8A8_DYNAMIC`` MoE layer run expert-parallel over R = ``len(hidden)`` simulated ranks.

    Parameters
    ----------
    hidden : list of R bf16 ``[T_r, H]`` (a rank may hold 0 tokens).
    w13, w13_scale, w2, w2_scale : every routed expert in checkpoint layout, as :func:`w8a8.w8a8_moe`;
        E a multiple of R: rank q owns experts ``[q E_loc, (q + 1) E_loc)``.
    topk_ids : list of R int32 / int64 ``[T_r, K]``, K distinct ids per row in ``[0, E)``.
    topk_weights : list of R float ``[T_r, K]`` (used as fp32).
    dispatch : ``"int8"`` (the sender quantizes once, the payload travels with its per-token scale and the
        expert rank does not quantize again) or ``"bf16"`` (the rows travel as they are and the expert rank
        quantizes them on arrival with :func:`w8a8.dynamic_quant`).
    swiglu_limit, shared_expert, serving : as :func:`w8a8.w8a8_moe` (rows M1, M5; the shared expert runs on the
        source rank, on its bf16 hidden). The weights are given, so row M2 is the caller's.
    numerics : ``ep_dispatch_quant`` (the sender's formula: ``"mc2"``, ``"deepep_normal"``,
        ``"init_routing"``), ``ep_combine_weights`` (fp32 / bf16 weights in the combine), and every field
        the layer's ops read.

    Returns a list of R bf16 ``[T_r, H]``. Steps: module docstring.

    Equivalences (docs/expert-parallelism.md): with ``ep_dispatch_quant="mc2"``, fp32 combine weights that are bf16 values,
    no smooth scales and ``variants="fixed"`` (so that no op's kernel variant depends on a rank's row
    count), ``concat(w8a8_moe_ep(h, ...))`` equals ``w8a8_moe_prequantized(*dynamic_quant(concat h),
    ..., shared_input=concat h)`` bit for bit up to the sign of zeros (Claim A), ``dispatch="bf16"`` equals
    ``"int8"`` (Claim B), and every R gives the same bits. ``"deepep_normal"`` breaks Claim B for rows with
    amax < 2^-15; ``"init_routing"`` for rows where the two formulas round apart.

    Errors: as :func:`w8a8_moe_ep_args`; then those of the ops the layer runs.
    """
    return w8a8_moe_ep_stages(hidden, w13, w13_scale, w2, w2_scale, topk_ids=topk_ids, topk_weights=topk_weights,
                              dispatch=dispatch, swiglu_limit=swiglu_limit, shared_expert=shared_expert,
                              numerics=numerics, serving=serving)["y"]
