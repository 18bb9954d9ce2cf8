"""The W8A8 MoE layer end to end, as SGLang's ascend_tp path runs it (SGLang
``layers/moe/token_dispatcher/ascend_tp.py``, ``layers/moe/moe_runner/ascend.py``).

::

    hidden bf16 [T, H]
      router:  topk_ids int32 [T, k], topk_weights fp32 [T, k] -> bf16
      moe_init_routing_v2(quant_mode=1)      -> x_q int8 [M, H], s_tok fp32 [M], row_idx int32 [M], counts int64 [E]
      grouped_matmul W13 (bf16 scale, s_tok) -> g bf16 [M, 2I]
      dequant_swiglu_quant(quant_mode=1, activate_left=True[, swiglu_limit])  -> a_q int8 [M, I], s2 fp32 [M]
      grouped_matmul W2 (bf16 scale, s2)     -> o bf16 [M, H]
      moe_finalize_routing(drop_pad_mode=2, scales=topk_weights bf16)         -> routed bf16 [T, H]
      (+ shared expert: W8A8_DYNAMIC gate/up linears, bf16 SwiGLU, down linear; bf16 add)

``M = T * k``. The weights come in the checkpoint layout and are converted here as the serving code
converts them at load time (SGLang ``hardware_backend/npu/quantization/moe_methods.py``). The NZ cast changes storage
only, so it is not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import serving as _sv
from .. import dtypes as _dt
from ..linear import w8a8_dynamic_linear
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from ..rounding import to_float
from . import _common as C
from .finalize import moe_finalize_routing
from .gating import (MoeGatingTopKArgs, MoeGatingTopKSoftmaxArgs, moe_gating_top_k, moe_gating_top_k_args,
                     moe_gating_top_k_softmax, moe_gating_top_k_softmax_args)
from .dsv4_routing import Dsv4RoutingArgs, dsv4_routing_args, route_torch_ops
from .grouped_matmul import grouped_matmul
from .routing import MoeInitRoutingV2Args, moe_init_routing_v2, moe_init_routing_v2_args
from .swiglu import dequant_swiglu_quant, swiglu

__all__ = ["w8a8_moe", "w8a8_moe_stages", "w8a8_moe_prequantized", "w8a8_moe_prequantized_stages"]

_SHARED_KEYS = ("gate_weight", "gate_scale", "up_weight", "up_scale", "down_weight", "down_scale")
_SCORING = {"softmax": None, "sigmoid": 1, "sqrtsoftplus": 2}


@dataclass(frozen=True)
class ExpertWeights:
    """The routed experts' checked weights, in checkpoint layout (see :func:`expert_weights_args`)."""

    w13: np.ndarray          # int8 [E, 2I, H]: gate rows [0, I), up rows [I, 2I)
    w13_scale: np.ndarray    # float32 / bfloat16 [E, 2I] (a view of the [E, 2I, 1] checkpoint scale)
    w2: np.ndarray           # int8 [E, H, I]
    w2_scale: np.ndarray     # float32 / bfloat16 [E, H]
    e: int                   # E, the experts
    i: int                   # I, the intermediate size


def _expert_scale(op: str, arg: str, value, e: int, rows: int) -> np.ndarray:
    """Checkpoint scale ``[E, out, 1]`` (or ``[E, out]``), float32 or bfloat16 -> an ``[E, out]`` view."""
    value = _check.array(op, arg, value, dtypes=(_dt.float32, _dt.bfloat16))
    if value.shape not in ((e, rows, 1), (e, rows)):
        _check.fail(op, arg, f"of shape [E, out, 1] = [{e}, {rows}, 1] or [{e}, {rows}]", _check.describe(value))
    return value.reshape(e, rows)


def expert_weights_args(op: str, h: int, w13, w13_scale, w2, w2_scale) -> ExpertWeights:
    """The checks of the routed experts' weights of the MoE layer (``op`` names the entry point; ``h``
    is the hidden size): int8 ``w13 [E, 2I, H]`` with an even 2I, ``w2 [E, H, I]``, scales ``[E, out, 1]``
    or ``[E, out]`` float32 / bfloat16. TypeError for dtypes, ValueError for shapes."""
    w13 = _check.array(op, "w13", w13, dtypes=(_dt.int8,), ndim=3)
    e, i2, h13 = w13.shape
    if h13 != h or i2 % 2:
        _check.fail(op, "w13", f"of shape [E, 2I, H] with H = {h} and an even 2I (gate rows then up rows)",
                    _check.describe(w13))
    w2 = _check.array(op, "w2", w2, dtypes=(_dt.int8,), ndim=3)
    _check.shape(op, "w2", w2, [(e, h, i2 // 2)], f"of shape [E, H, I] = [{e}, {h}, {i2 // 2}]")
    s13 = _expert_scale(op, "w13_scale", w13_scale, e, i2)
    s2 = _expert_scale(op, "w2_scale", w2_scale, e, h)
    return ExpertWeights(w13=w13, w13_scale=s13, w2=w2, w2_scale=s2, e=e, i=i2 // 2)


_CHECKED_EXPERTS: ContextVar[tuple | None] = ContextVar("w8a8_moe_checked_experts", default=None)


@contextmanager
def experts_checked(weights: tuple, experts: ExpertWeights):
    """Within the block, the MoE layer's argument check takes ``experts`` (the result of
    :func:`expert_weights_args` on ``weights = (w13, w13_scale, w2, w2_scale)``) as the check of weights passed
    as these very objects (``is``) with the same hidden size, instead of checking them again; any other
    weights are checked. For a caller that binds the weights once (a backend's bound MoE) and checks the rest
    per call: the weights' check depends on nothing but them and H, so it passed once and passes again."""
    token = _CHECKED_EXPERTS.set((tuple(weights), experts))
    try:
        yield
    finally:
        _CHECKED_EXPERTS.reset(token)


def _experts_of(op: str, h: int, w13, w13_scale, w2, w2_scale) -> ExpertWeights:
    """:func:`expert_weights_args`, or the one of :func:`experts_checked` for the same objects and H."""
    known = _CHECKED_EXPERTS.get()
    if known is not None:
        weights, experts = known
        if all(a is b for a, b in zip(weights, (w13, w13_scale, w2, w2_scale))) and experts.w13.shape[2] == h:
            return experts
    return expert_weights_args(op, h, w13, w13_scale, w2, w2_scale)


def _bf16_scale(value: np.ndarray) -> np.ndarray:
    """SGLang's load of an expert scale: ``[E, out]`` -> bf16 (RNE; a bf16 scale is kept)."""
    return value if value.dtype == _dt.bfloat16 else to_float(value.astype(np.float32), _dt.bfloat16)


def _load_experts(w: ExpertWeights):
    """Checkpoint layout -> serving layout: ``W13 [E, 2I, H] -> [E, H, 2I]``, ``W2 [E, H, I] -> [E, I, H]``
    (transposed views), fp32 ``[E, out]`` scales -> bf16 ``[E, out]``."""
    return w.w13.transpose(0, 2, 1), _bf16_scale(w.w13_scale), w.w2.transpose(0, 2, 1), _bf16_scale(w.w2_scale)


@dataclass(frozen=True)
class MoeRouting:
    """How the MoE layer routes (see :func:`moe_routing_args`).

    ``mode`` ``"ids"``: the given ``ids`` (int32 ``[T, k]``) and ``weights`` (fp32 ``[T, k]``);
    ``"softmax"``: :func:`moe_gating_top_k_softmax` on the logits (``gating``), then the fp32 L1
    ``renormalize`` if asked; ``"top_k"``: :func:`moe_gating_top_k` (``gating``: fp32 logits, or vllm-ascend's
    DeepSeek-V4 ``moe_gating_top_k_hash`` on the logits as given, hash mode included); ``"dsv4"``: SGLang's
    DeepSeek-V4 router as torch ops (``dsv4``, :func:`w8a8.moe.dsv4_routing.route_torch_ops`).
    """

    mode: str                                  # "ids", "softmax", "top_k" or "dsv4"
    k: int                                     # experts per token
    ids: np.ndarray | None = None              # mode "ids": int32 [T, k]
    weights: np.ndarray | None = None          # mode "ids": fp32 [T, k]
    renormalize: bool = False                  # mode "softmax": the fp32 L1 renormalisation
    gating: MoeGatingTopKSoftmaxArgs | MoeGatingTopKArgs | None = None  # the router op's checked arguments
    dsv4: Dsv4RoutingArgs | None = None        # DeepSeek-V4's router (serving row M3), modes "dsv4" and "top_k"


def moe_routing_args(op: str, t: int, e: int, top_k, router_logits, topk_ids, topk_weights, scoring_func,
                     renormalize, correction_bias, k_group, group_count, group_select_mode, routed_scaling_factor,
                     numerics: Numerics = ASCEND, input_ids=None, tid2eid=None, serving=None) -> MoeRouting:
    """The routing checks of the MoE layer (``op`` names the entry point; ``t`` tokens, ``e`` experts),
    including the router op's own checks (:func:`moe_gating_top_k_softmax_args` /
    :func:`moe_gating_top_k_args`) on exactly the arguments the layer passes it.

    DeepSeek-V4's router (serving row M3) is ``scoring_func="sqrtsoftplus"`` without expert groups
    (``k_group == group_count == 1``): score layers with ``correction_bias``, hash layers with ``input_ids``
    and ``tid2eid``; it is composed as ``serving`` composes it (:mod:`w8a8.moe.dsv4_routing`). With expert
    groups, sqrt-softplus runs as :func:`moe_gating_top_k` (``norm_type=2``) on fp32 logits (no engine's
    DeepSeek-V4 path; the op itself)."""
    hashed = input_ids is not None or tid2eid is not None
    if hashed and (topk_ids is not None or topk_weights is not None or scoring_func != "sqrtsoftplus"):
        arg = "input_ids" if input_ids is not None else "tid2eid"
        _check.fail(op, arg, "None unless the layer routes DeepSeek-V4's hash layers itself (router_logits with "
                    "scoring_func='sqrtsoftplus')", "an array")
    if topk_ids is not None or topk_weights is not None:
        if router_logits is not None:
            _check.fail(op, "router_logits", "None when topk_ids / topk_weights are given", _check.describe(router_logits))
        if topk_ids is None or topk_weights is None:
            missing = "topk_ids" if topk_ids is None else "topk_weights"
            _check.fail(op, missing, "given together with the other (topk_ids and topk_weights)", "None")
        ids = _check.array(op, "topk_ids", topk_ids, dtypes=(_dt.int32, _dt.int64), ndim=2)
        if ids.shape[0] != t:
            _check.fail(op, "topk_ids", f"of shape [T, k] with T = {t}", _check.describe(ids))
        if top_k is not None and ids.shape[1] != top_k:
            _check.fail(op, "top_k", f"None or topk_ids.shape[1] = {ids.shape[1]}", repr(top_k))
        wts = _check.array(op, "topk_weights", topk_weights, dtypes=C.FLOATS, ndim=2)
        _check.same_shape(op, "topk_weights", wts, "topk_ids", ids)
        C.check_finite(op, "topk_weights", wts, numerics)
        if ids.size and (ids.min() < 0 or ids.max() >= e):
            _check.fail(op, "topk_ids", f"expert ids in [0, E = {e})", f"values in [{ids.min()}, {ids.max()}]")
        return MoeRouting(mode="ids", k=ids.shape[1], ids=ids.astype(np.int32), weights=wts.astype(np.float32))
    if router_logits is None:
        _check.fail(op, "router_logits", "the [T, E] router logits (or pass topk_ids and topk_weights)", "None")
    logits = _check.array(op, "router_logits", router_logits, dtypes=C.FLOATS, ndim=2)
    _check.shape(op, "router_logits", logits, [(t, e)], f"of shape [T, E] = [{t}, {e}]")
    if top_k is None:
        _check.fail(op, "top_k", "an int (experts per token) with router_logits", "None")
    if scoring_func not in _SCORING:
        _check.fail(op, "scoring_func", f"one of {tuple(_SCORING)}", repr(scoring_func))
    renormalize = C.boolean(op, "renormalize", renormalize)
    if scoring_func == "softmax":
        if correction_bias is not None or group_count != 1 or k_group != 1 or routed_scaling_factor != 1.0:
            _check.fail(op, "scoring_func", "'sigmoid' or 'sqrtsoftplus' for correction_bias / expert groups / "
                        "routed_scaling_factor (the softmax path is npu_moe_gating_top_k_softmax)", repr(scoring_func))
        g = moe_gating_top_k_softmax_args(logits, None, top_k, numerics=numerics)
        return MoeRouting(mode="softmax", k=g.k, renormalize=renormalize, gating=g)
    if renormalize:
        _check.fail(op, "renormalize", f"False with scoring_func={scoring_func!r} (moe_gating_top_k renormalises "
                    "sigmoid / sqrt-softplus weights itself)", "True")
    if scoring_func == "sqrtsoftplus" and (hashed or (k_group == 1 and group_count == 1)):
        return _dsv4_routing(op, logits, top_k, correction_bias, input_ids, tid2eid, k_group, group_count,
                             routed_scaling_factor, numerics, _sv.get(serving, op))
    # SGLang: npu_moe_gating_top_k(logits.float(), k, bias=bias.float(), ...), sigmoid or sqrt-softplus.
    bias = None if correction_bias is None else _check.array(
        op, "correction_bias", correction_bias, dtypes=C.FLOATS, ndim=1).astype(np.float32)
    g = moe_gating_top_k_args(logits.astype(np.float32), top_k, bias=bias, k_group=k_group, group_count=group_count,
                              group_select_mode=group_select_mode, norm_type=_SCORING[scoring_func],
                              routed_scaling_factor=routed_scaling_factor, numerics=numerics)
    return MoeRouting(mode="top_k", k=g.k, gating=g)


def _dsv4_routing(op, logits, top_k, correction_bias, input_ids, tid2eid, k_group, group_count,
                  routed_scaling_factor, numerics, sv) -> MoeRouting:
    """DeepSeek-V4's router as the engine ``sv`` composes it (serving row M3; :mod:`w8a8.moe.dsv4_routing`)."""
    if k_group != 1 or group_count != 1:
        _check.fail(op, "group_count", "1 (with k_group 1) with input_ids / tid2eid: DeepSeek-V4's router has "
                    "no expert groups", f"group_count={group_count!r}, k_group={k_group!r}")
    k = _check.integer(op, "top_k", top_k, minimum=1, maximum=logits.shape[1])
    form = sv.dsv4_routing.value
    d = dsv4_routing_args(op, logits, k, correction_bias, input_ids, tid2eid, form=form, numerics=numerics)
    if form == "torch_ops":
        if routed_scaling_factor != 1.0:   # SGLang's HashTopK asserts apply_routed_scaling_factor_on_output False
            _check.fail(op, "routed_scaling_factor", "applied on the output under this engine (row M2)",
                        repr(routed_scaling_factor))
        return MoeRouting(mode="dsv4", k=k, dsv4=d)
    # vllm-ascend: moe_gating_top_k_hash(x=router_logits, bias=bias.to(x.dtype), group_select_mode=1, renorm=0,
    # norm_type=2, eps=1e-20, out_flag=False): the golden moe_gating_top_k on the logits as given
    bias = None if d.bias is None else to_float(d.bias.astype(np.float32), logits.dtype)
    g = moe_gating_top_k_args(logits, k, bias=bias, input_ids=d.input_ids, tid2eid=d.tid2eid, k_group=1,
                              group_count=1, group_select_mode=1, renorm=0, norm_type=2, out_flag=False,
                              routed_scaling_factor=routed_scaling_factor, eps=1e-20, numerics=numerics)
    return MoeRouting(mode="top_k", k=g.k, gating=g, dsv4=d)


def moe_route(r: MoeRouting, numerics: Numerics = ASCEND):
    """``(topk_ids int32 [T, k], topk_weights fp32 [T, k])`` of the layer's checked routing
    (:func:`moe_routing_args`): given, or from the router the layer runs."""
    if r.mode == "ids":
        return r.ids, r.weights
    if r.mode == "dsv4":
        return route_torch_ops(r.dsv4, numerics)
    g = r.gating
    if r.mode == "softmax":
        y, ids, _ = moe_gating_top_k_softmax(g.x, k=g.k, numerics=numerics)
        w = y.astype(np.float32)
        if r.renormalize:  # SGLang's l1_norm, in fp32
            with np.errstate(divide="ignore", invalid="ignore"):
                w = (w / C.sum_f32(w)).astype(np.float32)
        return ids, w
    y, ids, _ = moe_gating_top_k(g.x, g.k, bias=g.bias, input_ids=g.input_ids, tid2eid=g.tid2eid,
                                 k_group=g.k_group, group_count=g.group_count,
                                 group_select_mode=g.group_select_mode, norm_type=g.norm_type,
                                 routed_scaling_factor=float(g.routed_scaling_factor), numerics=numerics)
    return ids, y.astype(np.float32)     # vllm-ascend: topk_weights.to(torch.float32) (fp32 logits: y is fp32)


def shared_expert_args(op: str, shared_expert, shared_input):
    """The structural checks of the shared expert (a mapping with exactly the six checkpoint keys, and
    an input to run on). Its weights are checked by :func:`w8a8.w8a8_dynamic_linear` when it runs."""
    if shared_expert is None:
        return None
    if not isinstance(shared_expert, Mapping) or set(shared_expert) != set(_SHARED_KEYS):
        _check.fail(op, "shared_expert", f"a mapping with exactly the keys {_SHARED_KEYS} (checkpoint layout: "
                    "weights int8 [out, in], scales float32 [out, 1])", _check.describe(shared_expert), TypeError)
    if shared_input is None:
        _check.fail(op, "shared_input", "the bf16 hidden states [T, H] the shared expert runs on", "None")
    return shared_expert


def _shared(op: str, shared_expert, x: np.ndarray, numerics: Numerics, limit=None) -> np.ndarray:
    """Shared expert: W8A8_DYNAMIC gate and up linears (the engines' merged ``gate_up_proj`` gives the same
    bits: one per-token quantization of x, independent output columns), with ``limit`` the bf16 clamps
    ``gate.clamp(max=L)``, ``up.clamp(-L, L)`` (serving row M5), ``npu_swiglu``, the down linear."""
    g = w8a8_dynamic_linear(x, shared_expert["gate_weight"], shared_expert["gate_scale"], numerics=numerics)
    u = w8a8_dynamic_linear(x, shared_expert["up_weight"], shared_expert["up_scale"], numerics=numerics)
    if g.shape != u.shape:
        _check.fail(op, "shared_expert", "gate and up weights of the same shape", f"{g.shape} vs {u.shape}")
    if limit is not None:   # a clamp of bf16 values to a bf16-representable bound: exact, stays bf16
        lim = np.float32(limit)
        g = np.minimum(g.astype(np.float32), lim).astype(_dt.bfloat16)
        u = np.clip(u.astype(np.float32), -lim, lim).astype(_dt.bfloat16)
    a = swiglu(np.concatenate([g, u], axis=-1), numerics=numerics)
    return w8a8_dynamic_linear(a, shared_expert["down_weight"], shared_expert["down_scale"], numerics=numerics)


@dataclass(frozen=True)
class W8a8MoeArgs:
    """The checked arguments of the MoE layer (see :func:`w8a8_moe_args`, :func:`w8a8_moe_prequantized_args`).

    ``routing_plan`` is :func:`~w8a8.moe.routing.moe_init_routing_v2_args` of the dispatch step, checked on stand-in ids of
    the routing's shape ``[T, k]`` (its checks do not read the id values). Checks the layer makes later,
    on intermediate values, stay in the ops it runs (``swiglu_limit`` in ``dequant_swiglu_quant``, the
    shared expert's weights in ``w8a8_dynamic_linear``, NaN/Inf of intermediates).
    """

    op: str                              # "w8a8_moe" or "w8a8_moe_prequantized"
    x: np.ndarray                        # bf16 hidden [T, H], or the int8 dispatched x_q [T, H]
    x_scale: np.ndarray | None           # float32 [T] (pre-quantized entry point)
    shared_input: np.ndarray | None      # what the shared expert runs on (hidden for w8a8_moe)
    experts: ExpertWeights               # the routed experts' checked weights (checkpoint layout)
    routing: MoeRouting                  # how tokens are routed (the router op's checked arguments)
    routing_plan: MoeInitRoutingV2Args   # the dispatch step's checked routing
    swiglu_limit: object                 # the routed experts' clamp the engine applies (M1; None: unclamped)
    shared_expert: Mapping | None        # the six checkpoint tensors, or None
    serving: "_sv.Serving" = _sv.DEFAULT  # the engine whose composition is modelled
    routed_scale: float | None = None    # M2: the bf16 multiply of the routed output after the finalize, or None
    shared_limit: float | None = None    # M5: the shared expert's bf16 clamp, or None

    @property
    def t(self) -> int:
        """T, the tokens."""
        return self.x.shape[0]

    @property
    def h(self) -> int:
        """H, the hidden size."""
        return self.x.shape[1]


W8a8MoePrequantizedArgs = W8a8MoeArgs
"""The checked arguments of :func:`w8a8_moe_prequantized`: those of the MoE layer."""


def _layer_args(op, x, x_scale, shared_input, w13, w13_scale, w2, w2_scale, top_k, router_logits, topk_ids,
                topk_weights, scoring_func, renormalize, correction_bias, k_group, group_count, group_select_mode,
                routed_scaling_factor, swiglu_limit, shared_expert, numerics, serving=None, input_ids=None,
                tid2eid=None) -> W8a8MoeArgs:
    C.check_numerics(op, numerics)
    sv = _sv.get(serving, op)
    limit = swiglu_limit_arg(op, swiglu_limit)
    if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float, np.floating)) \
            or not np.isfinite(float(routed_scaling_factor)):
        _check.fail(op, "routed_scaling_factor", "a finite float", repr(routed_scaling_factor))
    rsf = float(routed_scaling_factor)
    shared_expert_args(op, shared_expert, shared_input)
    t, h = x.shape
    experts = _experts_of(op, h, w13, w13_scale, w2, w2_scale)
    routing = moe_routing_args(op, t, experts.e, top_k, router_logits, topk_ids, topk_weights, scoring_func,
                               renormalize, correction_bias, k_group, group_count, group_select_mode,
                               _sv.gating_scaling(sv, rsf), numerics, input_ids, tid2eid, sv)
    plan = moe_init_routing_v2_args(x, np.zeros((t, routing.k), np.int32), scale=x_scale,
                                    quant_mode=1 if x_scale is None else -1,
                                    **_dispatch_options(t, routing.k, experts.e), numerics=numerics)
    return W8a8MoeArgs(op=op, x=x, x_scale=x_scale, shared_input=shared_input, experts=experts, routing=routing,
                       routing_plan=plan, swiglu_limit=_sv.routed_limit(sv, limit), shared_expert=shared_expert,
                       serving=sv, routed_scale=_sv.output_scaling(sv, rsf), shared_limit=_sv.shared_limit(sv, limit))


def swiglu_limit_arg(op: str, swiglu_limit):
    """``swiglu_limit``: None, or a finite float > 0 (DeepSeek-V4: 10.0), checked whichever clamp the engine runs."""
    if swiglu_limit is None:
        return None
    if isinstance(swiglu_limit, bool) or not isinstance(swiglu_limit, (int, float, np.floating, np.integer)) or \
            not (np.isfinite(float(swiglu_limit)) and float(swiglu_limit) > 0):
        _check.fail(op, "swiglu_limit", "None or a finite float > 0 (DeepSeek-V4's clamp, 10.0)", repr(swiglu_limit))
    return float(swiglu_limit)


def scale_routed(routed: np.ndarray, factor: float | None) -> np.ndarray:
    """Serving row M2: ``bf16(fp32(routed) * fp32(routed_scaling_factor))`` (SGLang's bf16 ``*=``; vllm-ascend's
    ``muls_add``, whose bf16 ``x * scale`` rounds the same way), or ``routed`` unchanged for None."""
    if factor is None:
        return routed
    return to_float(routed.astype(np.float32) * np.float32(factor), _dt.bfloat16)


def _dispatch_options(t: int, k: int, e: int) -> dict:
    """The ``moe_init_routing_v2`` options of the dispatch step (SGLang ``token_dispatcher/ascend_tp.py``)."""
    return dict(active_num=t * k, expert_num=e, expert_tokens_num_type=1, expert_tokens_num_flag=True,
                active_expert_range=[0, e])


def _forward(a: W8a8MoeArgs, numerics: Numerics) -> dict:
    w13_kn, s13, w2_kn, s2w = _load_experts(a.experts)
    ids, wts = moe_route(a.routing, numerics)
    routing = dict(_dispatch_options(a.t, ids.shape[1], a.experts.e), numerics=numerics)
    if a.x_scale is None:
        x_e, row_idx, counts, s_e = moe_init_routing_v2(a.x, ids, quant_mode=1, **routing)
    else:
        x_e, row_idx, counts, s_e = moe_init_routing_v2(a.x, ids, scale=a.x_scale, quant_mode=-1, **routing)
    gmm1 = grouped_matmul(x_e, w13_kn, scale=s13, per_token_scale=s_e, group_list=counts, group_list_type=1,
                          output_dtype=_dt.bfloat16, split_item=2, group_type=0, numerics=numerics)
    a_q, a_s = dequant_swiglu_quant(gmm1, quant_mode=1, activate_left=True, swiglu_limit=a.swiglu_limit,
                                    numerics=numerics)
    gmm2 = grouped_matmul(a_q, w2_kn, scale=s2w, per_token_scale=a_s, group_list=counts, group_list_type=1,
                          output_dtype=_dt.bfloat16, split_item=2, group_type=0, numerics=numerics)
    weights_bf16 = to_float(wts, _dt.bfloat16)   # SGLang: topk_weights.to(hidden.dtype)
    routed = moe_finalize_routing(gmm2, None, None, None, weights_bf16, row_idx, ids, drop_pad_mode=2,
                                  numerics=numerics)
    routed = scale_routed(routed, a.routed_scale)
    shared = None
    y = routed
    if a.shared_expert is not None:
        shared = _shared(a.op, a.shared_expert, a.shared_input, numerics, a.shared_limit)
        if shared.shape != routed.shape:
            _check.fail(a.op, "shared_expert", f"a down projection to [T, H] = {routed.shape}", f"{shared.shape}")
        y = to_float(routed.astype(np.float32) + shared.astype(np.float32), _dt.bfloat16)
    return {"topk_ids": ids, "topk_weights": wts, "expanded_x": x_e, "expanded_scale": s_e,
            "expanded_row_idx": row_idx, "expert_tokens": counts, "w13_scale": s13, "w2_scale": s2w,
            "gmm1": gmm1, "act_q": a_q, "act_scale": a_s, "gmm2": gmm2, "routed": routed, "shared": shared, "y": y,
            "variants": _layer_variants(a, ids.shape[1], gmm1.shape[0], numerics)}


def _layer_variants(a: "MoeArgs", k: int, rows: int, numerics: Numerics) -> dict:
    """The kernel variant of each op of the layer (:mod:`w8a8.variants`), from the layer's wiring above."""
    from ..variants import matmul as vm, moe as vmoe, swiglu as vsw

    plat = numerics.platform_record
    e = a.experts.e
    out = {}
    g = a.routing.gating
    if a.routing.mode == "softmax":
        out["moe_gating_top_k_softmax"] = vmoe.gating_softmax(e=e, k=k, dtype=_dt.name(g.x.dtype), platform=plat)
    quant = 1 if a.x_scale is None else -1
    out["moe_init_routing_v2"] = vmoe.init_routing_v2(
        n=a.t, k=k, h=a.h, x_dtype=_dt.name(a.x.dtype), quant_mode=quant, scale_shape=None if quant == 1 else (a.t,),
        offset=False, start=0, end=e, expert_num=e, count_type=1, row_idx_type=0, platform=plat)
    out["grouped_matmul"] = vm.grouped_matmul(out="bfloat16", pertoken=True, platform=plat)
    out["dequant_swiglu_quant"] = vsw.dequant_swiglu_quant(
        x_dtype="bfloat16", tokens=rows, groups=None, quant_mode=1, quant_scale_dtype=None, quant_scale_size=0,
        bias_dtype=None, scalar=False, platform=plat)
    out["moe_finalize_routing"] = vmoe.finalize(dtype="bfloat16", scale_dtype="bfloat16", n=a.t, k=k, h=a.h,
                                                bias=False, skip1=False, skip2=False, drop_pad_mode=2, platform=plat)
    if a.shared_expert is not None:
        out["swiglu"] = vsw.swiglu("bfloat16", platform=plat)
    return out


def w8a8_moe_args(hidden, w13, w13_scale, w2, w2_scale, *, top_k=None, router_logits=None, topk_ids=None,
                  topk_weights=None, scoring_func="softmax", renormalize=False, correction_bias=None, k_group=1,
                  group_count=1, group_select_mode=0, routed_scaling_factor=1.0, swiglu_limit=None,
                  shared_expert=None, numerics: Numerics = ASCEND, serving=None, input_ids=None,
                  tid2eid=None) -> W8a8MoeArgs:
    """The argument checks of :func:`w8a8_moe` made before it computes anything, in its order, with its
    errors: hidden, the shared expert's structure, the experts' weights, the routing (with the router
    op's checks) and the dispatch step's routing options. TypeError for dtypes, ValueError otherwise."""
    op = "w8a8_moe"
    C.check_numerics(op, numerics)
    hidden = _check.array(op, "hidden", hidden, dtypes=(_dt.bfloat16,), ndim=2)
    C.check_finite(op, "hidden", hidden, numerics)
    return _layer_args(op, hidden, None, hidden, w13, w13_scale, w2, w2_scale, top_k, router_logits, topk_ids,
                       topk_weights, scoring_func, renormalize, correction_bias, k_group, group_count,
                       group_select_mode, routed_scaling_factor, swiglu_limit, shared_expert, numerics, serving,
                       input_ids, tid2eid)


def w8a8_moe_prequantized_args(x_q, x_scale, w13, w13_scale, w2, w2_scale, *, top_k=None, router_logits=None,
                               topk_ids=None, topk_weights=None, scoring_func="softmax", renormalize=False,
                               correction_bias=None, k_group=1, group_count=1, group_select_mode=0,
                               routed_scaling_factor=1.0, swiglu_limit=None, shared_expert=None, shared_input=None,
                               numerics: Numerics = ASCEND, serving=None, input_ids=None,
                               tid2eid=None) -> W8a8MoePrequantizedArgs:
    """The argument checks of :func:`w8a8_moe_prequantized` made before it computes anything (as
    :func:`w8a8_moe_args`, on ``x_q``, ``x_scale`` and ``shared_input``)."""
    op = "w8a8_moe_prequantized"
    x_q = _check.array(op, "x_q", x_q, dtypes=(_dt.int8,), ndim=2)
    x_scale = _check.array(op, "x_scale", x_scale, dtypes=(_dt.float32,), ndim=1)
    if x_scale.shape[0] != x_q.shape[0]:
        _check.fail(op, "x_scale", f"of shape [T] = [{x_q.shape[0]}] (one scale per token)", _check.describe(x_scale))
    if shared_input is not None:
        shared_input = _check.array(op, "shared_input", shared_input, dtypes=(_dt.bfloat16,), ndim=2)
        _check.same_shape(op, "shared_input", shared_input, "x_q", x_q)
    return _layer_args(op, x_q, x_scale, shared_input, w13, w13_scale, w2, w2_scale, top_k, router_logits, topk_ids,
                       topk_weights, scoring_func, renormalize, correction_bias, k_group, group_count,
                       group_select_mode, routed_scaling_factor, swiglu_limit, shared_expert, numerics, serving,
                       input_ids, tid2eid)


def w8a8_moe_stages(hidden: np.ndarray, w13: np.ndarray, w13_scale: np.ndarray, w2: np.ndarray,
                    w2_scale: np.ndarray, *, top_k: int | None = None, router_logits: np.ndarray | None = None,
                    topk_ids: np.ndarray | None = None, topk_weights: np.ndarray | None = None,
                    scoring_func: str = "softmax", renormalize: bool = False,
                    correction_bias: np.ndarray | None = None, k_group: int = 1, group_count: int = 1,
                    group_select_mode: int = 0, routed_scaling_factor: float = 1.0,
                    swiglu_limit: float | None = None, shared_expert: Mapping | None = None,
                    numerics: Numerics = ASCEND, serving=None, input_ids: np.ndarray | None = None,
                    tid2eid: np.ndarray | None = None) -> dict:
    """:func:`w8a8_moe` with every intermediate, for attribution: ``topk_ids``, ``topk_weights``
    (fp32), ``expanded_x`` (int8 [M, H]), ``expanded_scale`` (fp32 [M]), ``expanded_row_idx``,
    ``expert_tokens`` (int64 counts [E]), ``w13_scale`` / ``w2_scale`` (as loaded, bf16),
    ``gmm1`` (bf16 [M, 2I]), ``act_q`` (int8 [M, I]), ``act_scale`` (fp32 [M]), ``gmm2``
    (bf16 [M, H]), ``routed`` (bf16 [T, H]), ``shared`` (bf16 [T, H] or None) and ``y``."""
    a = w8a8_moe_args(hidden, w13, w13_scale, w2, w2_scale, top_k=top_k, router_logits=router_logits,
                      topk_ids=topk_ids, topk_weights=topk_weights, scoring_func=scoring_func, renormalize=renormalize,
                      correction_bias=correction_bias, k_group=k_group, group_count=group_count,
                      group_select_mode=group_select_mode, routed_scaling_factor=routed_scaling_factor,
                      swiglu_limit=swiglu_limit, shared_expert=shared_expert, numerics=numerics, serving=serving,
                      input_ids=input_ids, tid2eid=tid2eid)
    return _forward(a, numerics)


@golden_op("moe", check=w8a8_moe_args)
def w8a8_moe(hidden: np.ndarray, w13: np.ndarray, w13_scale: np.ndarray, w2: np.ndarray, w2_scale: np.ndarray, *,
             top_k: int | None = None, router_logits: np.ndarray | None = None, topk_ids: np.ndarray | None = None,
             topk_weights: np.ndarray | None = None, scoring_func: str = "softmax", renormalize: bool = False,
             correction_bias: np.ndarray | None = None, k_group: int = 1, group_count: int = 1,
             group_select_mode: int = 0, routed_scaling_factor: float = 1.0, swiglu_limit: float | None = None,
             shared_expert: Mapping | None = None, numerics: Numerics = ASCEND, serving=None,
             input_ids: np.ndarray | None = None, tid2eid: np.ndarray | None = None) -> np.ndarray:
    """The ``W8A8_DYNAMIC`` MoE layer (routed experts + optional shared expert), SGLang ascend_tp path.

    Parameters
    ----------
    hidden : bfloat16 ``[T, H]``.
    w13 : int8 ``[E, 2I, H]`` (checkpoint layout: gate rows ``[0, I)``, up rows ``[I, 2I)``).
    w13_scale : float32 ``[E, 2I, 1]`` (or ``[E, 2I]``; bf16 accepted as already loaded).
    w2 : int8 ``[E, H, I]``; w2_scale : float32 ``[E, H, 1]`` (or ``[E, H]``).
    Routing, either
        ``topk_ids`` int32/int64 ``[T, k]`` in ``[0, E)`` with ``topk_weights`` float ``[T, k]``, or
        ``router_logits`` float ``[T, E]`` with ``top_k`` and ``scoring_func``:
        ``"softmax"`` -> :func:`moe_gating_top_k_softmax` (+ fp32 L1 ``renormalize`` if asked);
        ``"sigmoid"`` / ``"sqrtsoftplus"`` -> :func:`moe_gating_top_k` on fp32 logits with
        ``correction_bias`` (fp32), ``k_group``, ``group_count``, ``group_select_mode``,
        (renormalised by the op).
        DeepSeek-V4 (``"sqrtsoftplus"``, no expert groups; serving row M3): score layers pass the gate bias as
        ``correction_bias``, hash layers pass ``input_ids`` int32/int64 ``[T]`` and ``tid2eid`` int32/int64
        ``[vocab, top_k]`` (experts ``tid2eid[input_ids]``; no bias). SGLang composes the router from torch ops
        in the logits' dtype, vllm-ascend calls ``moe_gating_top_k_hash`` (:mod:`w8a8.moe.dsv4_routing`).
    input_ids, tid2eid : DeepSeek-V4's hash layers (both or neither; only with ``scoring_func="sqrtsoftplus"``).
    routed_scaling_factor : the model's factor (DeepSeek-V3 2.5, V4 1.5), applied where ``serving`` applies
        it (row M2): both engines give the gating op 1 (weights normalised without it) and multiply the bf16
        routed output by it after the finalize, before the shared expert is added.
    swiglu_limit : the model's SwiGLU clamp (DeepSeek-V4: 10.0), None: none. Row M1: the routed experts are
        clamped inside ``dequant_swiglu_quant`` under vllm-ascend and **not at all** under SGLang (its
        ascend_tp path); row M5: the shared expert's gate / up are clamped in bf16 under both.
    shared_expert : optional mapping ``{gate_weight, gate_scale, up_weight, up_scale, down_weight,
        down_scale}`` in checkpoint layout (int8 ``[I_s, H]`` / ``[H, I_s]``, fp32 ``[out, 1]``
        scales), run through :func:`w8a8.w8a8_dynamic_linear` with ``npu_swiglu`` (M5's clamp first).
    numerics : passed to every op.
    serving : the engine whose composition is modelled: a :class:`w8a8.serving.Serving` record or its name
        (``"sglang"``, the default, or ``"vllm-ascend"``).

    Returns bf16 ``[T, H]``. Steps (module docstring)::

        load:     W13 -> [E, H, 2I], W2 -> [E, I, H]; scales squeeze(-1) -> bf16 (RNE)
        route:    ids int32, weights fp32 (the router ops above)
        dispatch: x_q, row_idx, counts, s_tok = moe_init_routing_v2(hidden, ids, active_num=T*k,
                      expert_num=E, expert_tokens_num_type=1, expert_tokens_num_flag=True,
                      active_expert_range=[0, E], quant_mode=1)
        g   = grouped_matmul(x_q, W13, scale=s13, per_token_scale=s_tok, group_list=counts,
                             group_list_type=1, output_dtype=bf16)
        a_q, s2 = dequant_swiglu_quant(g, quant_mode=1, activate_left=True, swiglu_limit=L_routed)  # M1
        o   = grouped_matmul(a_q, W2, scale=s2w, per_token_scale=s2, group_list=counts, ...)
        routed = moe_finalize_routing(o, None, None, None, bf16(weights), row_idx, ids, drop_pad_mode=2)
        routed = bf16(fp32(routed) * fp32(routed_scaling_factor))                              # M2
        y   = bf16(fp32(routed) + fp32(shared))       # shared = down(swiglu([clamp(gate(x)), clamp(up(x))]))
    """
    return w8a8_moe_stages(hidden, w13, w13_scale, w2, w2_scale, top_k=top_k, router_logits=router_logits,
                           topk_ids=topk_ids, topk_weights=topk_weights, scoring_func=scoring_func,
                           renormalize=renormalize, correction_bias=correction_bias, k_group=k_group,
                           group_count=group_count, group_select_mode=group_select_mode,
                           routed_scaling_factor=routed_scaling_factor, swiglu_limit=swiglu_limit,
                           shared_expert=shared_expert, numerics=numerics, serving=serving, input_ids=input_ids,
                           tid2eid=tid2eid)["y"]


def w8a8_moe_prequantized_stages(x_q: np.ndarray, x_scale: np.ndarray, w13: np.ndarray, w13_scale: np.ndarray,
                                 w2: np.ndarray, w2_scale: np.ndarray, *, top_k: int | None = None,
                                 router_logits: np.ndarray | None = None, topk_ids: np.ndarray | None = None,
                                 topk_weights: np.ndarray | None = None, scoring_func: str = "softmax",
                                 renormalize: bool = False, correction_bias: np.ndarray | None = None,
                                 k_group: int = 1, group_count: int = 1, group_select_mode: int = 0,
                                 routed_scaling_factor: float = 1.0, swiglu_limit: float | None = None,
                                 shared_expert: Mapping | None = None, shared_input: np.ndarray | None = None,
                                 numerics: Numerics = ASCEND, serving=None, input_ids: np.ndarray | None = None,
                                 tid2eid: np.ndarray | None = None) -> dict:
    """:func:`w8a8_moe_prequantized` with the intermediates of :func:`w8a8_moe_stages`."""
    a = w8a8_moe_prequantized_args(
        x_q, x_scale, w13, w13_scale, w2, w2_scale, top_k=top_k, router_logits=router_logits, topk_ids=topk_ids,
        topk_weights=topk_weights, scoring_func=scoring_func, renormalize=renormalize,
        correction_bias=correction_bias, k_group=k_group, group_count=group_count,
        group_select_mode=group_select_mode, routed_scaling_factor=routed_scaling_factor,
        swiglu_limit=swiglu_limit, shared_expert=shared_expert, shared_input=shared_input, numerics=numerics,
        serving=serving, input_ids=input_ids, tid2eid=tid2eid)
    return _forward(a, numerics)


@golden_op("moe", check=w8a8_moe_prequantized_args)
def w8a8_moe_prequantized(x_q: np.ndarray, x_scale: np.ndarray, w13: np.ndarray, w13_scale: np.ndarray,
                          w2: np.ndarray, w2_scale: np.ndarray, *, top_k: int | None = None,
                          router_logits: np.ndarray | None = None, topk_ids: np.ndarray | None = None,
                          topk_weights: np.ndarray | None = None, scoring_func: str = "softmax",
                          renormalize: bool = False, correction_bias: np.ndarray | None = None, k_group: int = 1,
                          group_count: int = 1, group_select_mode: int = 0, routed_scaling_factor: float = 1.0,
                          swiglu_limit: float | None = None, shared_expert: Mapping | None = None,
                          shared_input: np.ndarray | None = None, numerics: Numerics = ASCEND,
                          serving=None, input_ids: np.ndarray | None = None,
                          tid2eid: np.ndarray | None = None) -> np.ndarray:
    """The MoE layer on tokens that arrive already quantized (an INT8 DeepEP dispatch): no second quant.

    Parameters
    ----------
    x_q : int8 ``[T, H]`` and x_scale : float32 ``[T]``: the dispatched tokens and their per-token
        scales (the golden's model of that dispatch is :func:`dispatch_quant`).
    shared_input : bf16 ``[T, H]``, required with ``shared_expert``: the shared expert runs on the
        unquantized tokens (before the dispatch, on the local rank).
    Everything else as :func:`w8a8_moe` (the router logits, if given, are the ones computed from the
    bf16 hidden states before dispatch).

    The only difference from :func:`w8a8_moe` is the dispatch step::

        x_e, row_idx, counts, s_tok = moe_init_routing_v2(x_q, ids, scale=x_scale, quant_mode=-1, ...)

    (the int8 rows and their scales are gathered, not requantized). Hence
    ``w8a8_moe_prequantized(*dispatch_quant(h), ..., shared_input=h)`` equals ``w8a8_moe(h, ...)``
    bit for bit.
    """
    return w8a8_moe_prequantized_stages(
        x_q, x_scale, w13, w13_scale, w2, w2_scale, top_k=top_k, router_logits=router_logits, topk_ids=topk_ids,
        topk_weights=topk_weights, scoring_func=scoring_func, renormalize=renormalize,
        correction_bias=correction_bias, k_group=k_group, group_count=group_count,
        group_select_mode=group_select_mode, routed_scaling_factor=routed_scaling_factor,
        swiglu_limit=swiglu_limit, shared_expert=shared_expert, shared_input=shared_input,
        numerics=numerics, serving=serving, input_ids=input_ids, tid2eid=tid2eid)["y"]
