"""Planted expert-parallel bugs: proof that the invariants of :mod:`conformance.ep_invariants` catch the
mistakes real EP deployments make (docs/expert-parallelism.md).

Each plant replaces one or two parts of the golden layer (:func:`w8a8.moe.ep_layer.ep_layer`: the
dispatcher, the expert runner, the combiner) by a faulty one, written here:

* ``quantizes_twice`` — the int8 dispatch arrives, but the runner is handed dequantized bf16 rows without
  their scale, so its ``if pertoken_scale is None: quantize`` branch quantizes a second time;
* ``drops_scale_requantizes_with_routing_formula`` — the dispatcher drops the int8 path (bf16 rows, no
  scale) and the runner re-quantizes them with the ``npu_moe_init_routing_v2(quant_mode=1)`` formula
  (``s = m / 127``, ``q = x / s``) instead of ``npu_dynamic_quant``'s;
* ``combine_bf16_weights`` — a combine that rounds the fp32 routing weights to bf16 before the sum;
* ``arrival_order`` — a receiver that forgets the stable sort by local expert and keeps the arrival
  order (source rank, local expert, f).

:func:`run` gives the stages of a plant on a call, for the invariants to judge.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.moe import ep_layer as L
from w8a8.rounding import to_float


def _dequantized(recv: L.EpRecv) -> L.EpRecv:
    x = (recv.x.astype(np.float32) * recv.scale[:, None]).astype(np.float32)
    return dataclasses.replace(recv, x=to_float(x, _dt.bfloat16), scale=None)


def _quantizes_twice_experts(recv, *weights):
    return L.ep_experts(_dequantized(recv) if recv.scale is not None else recv, *weights)


def _bf16_dispatch(a, numerics):
    return L.ep_dispatch(dataclasses.replace(a, dispatch="bf16"), numerics)


def _routing_formula_experts(recv, *weights):
    """Quantize the bf16 rows with ``s = max|x| / 127`` and ``q = rint(x / s)`` (fp32), then the experts."""
    xf = recv.x.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (np.max(np.abs(xf), axis=1) / np.float32(127)).astype(np.float32) if xf.size else np.zeros(0, np.float32)
        q = np.nan_to_num(np.rint(xf / s[:, None]), nan=0.0)
    out = L.ep_experts(dataclasses.replace(recv, x=np.clip(q, -127, 127).astype(np.int8), scale=s), *weights)
    return {**out, "quantizer_calls": 1}


def _bf16_weights_combine(y, recv, a, numerics):
    outs = []
    for r, (ids, w) in enumerate(zip(a.topk_ids, a.topk_weights)):
        w16 = w.astype(_dt.bfloat16).astype(np.float32)
        rows = np.zeros(ids.shape + (a.h,), np.float32)
        for rows_q, rv in zip(y, recv):
            sel = rv.src[:, 0] == r
            rows[rv.src[sel, 1], rv.src[sel, 2]] = rows_q[sel].astype(np.float32)
        acc = np.zeros((ids.shape[0], a.h), np.float32)
        for k in range(a.k):
            acc = (acc + rows[:, k] * w16[:, k:k + 1]).astype(np.float32)
        outs.append(to_float(acc, _dt.bfloat16))
    return outs


def _arrival_order_dispatch(a, numerics):
    recv, calls = L.ep_dispatch(a, numerics)
    out = []
    for rv in recv:
        local = np.repeat(np.arange(a.e_loc), rv.expert_token_nums)
        order = np.lexsort((rv.src[:, 1] * a.k + rv.src[:, 2], local, rv.src[:, 0]))   # (source, l, f)
        out.append(dataclasses.replace(rv, x=rv.x[order], scale=None if rv.scale is None else rv.scale[order],
                                       src=rv.src[order]))
    return out, calls


PLANTS = {
    "quantizes_twice": {"experts": _quantizes_twice_experts},
    "drops_scale_requantizes_with_routing_formula": {"dispatcher": _bf16_dispatch,
                                                     "experts": _routing_formula_experts},
    "combine_bf16_weights": {"combiner": _bf16_weights_combine},
    "arrival_order": {"dispatcher": _arrival_order_dispatch},
}
"""Each plant: the parts of :func:`w8a8.moe.ep_layer.ep_layer` it replaces."""


def run(plant: str, a: L.W8a8MoeEpArgs, numerics) -> dict:
    """The stages of the layer with plant ``plant`` on the checked call ``a``."""
    return L.ep_layer(a, numerics, **PLANTS[plant])


def layer(plant: str):
    """The plant as a ``w8a8_moe_ep``-like function (for the equivalence checks)."""
    def fn(hidden, w13, w13_scale, w2, w2_scale, **kw):
        numerics = kw.pop("numerics")
        return run(plant, L.w8a8_moe_ep_args(hidden, w13, w13_scale, w2, w2_scale, numerics=numerics, **kw),
                   numerics)["y"]
    return fn
