"""The EP ops of the torch-dist backend (a mixin of :class:`backends.torch_dist.TorchDistBackend`).

Each op's loader (untimed) maps the golden's checked Args (per-rank lists already in rank order) to one
payload per rank — NumPy arrays, pickled to the rank processes — and loads what is loaded once (the
layer's expert slices, under a key); its implementation (timed) sends the payloads, lets the ranks
exchange and compute (:mod:`.tasks`), and puts the per-rank results back in the caller's entry order
(``ep_rank_id``). Nothing of the golden computes here: the ranks run torch.

This module imports no torch.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..base import implements, loads
from ._common import KEEP, PLANTS

_KEYS = itertools.count()
F32 = np.float32


def quant_spec(numerics, rows: int, h: int) -> dict:
    """The sender's INT8 formula of ``numerics.ep_dispatch_quant`` for the rank processes
    (:func:`.quant.quantizer`'s arguments): ``mc2``; ``deepep_normal`` = ``mc2`` with ``amax_eps = 1e-12``;
    ``init_routing`` = the ``moe_init_routing_v2(quant_mode=1)`` formula with the rounding the golden's
    ``dispatch_quant`` selects for ``rows`` bf16 rows of width ``h``."""
    mode = numerics.ep_dispatch_quant
    if mode == "mc2":
        return {"formula": "mc2"}
    if mode == "deepep_normal":
        from w8a8.moe._ep import DEEPEP_AMAX_EPS

        return {"formula": "mc2", "amax_eps": float(DEEPEP_AMAX_EPS)}
    from w8a8.variants import moe as vmoe

    variant = vmoe.init_routing_v2(n=max(rows, 1), k=1, h=h, x_dtype="bfloat16", quant_mode=1, scale_shape=None,
                                   offset=False, start=0, end=1, expert_num=1, count_type=1, row_idx_type=0,
                                   platform=numerics.platform_record)
    return {"formula": "routing", "rounding": variant.numerics(numerics).routing_quant_round}


def in_entry_order(per_rank: list, entry_of_rank: tuple) -> list:
    """Per-rank values (rank order) in the caller's list order: entry ``entry_of_rank[q]`` holds rank q's."""
    out = [None] * len(per_rank)
    for q, value in enumerate(per_rank):
        out[entry_of_rank[q]] = value
    return out


class EpOps:
    """The expert-parallel ops of torch-dist (see the module docstring)."""

    # -- dispatch ------------------------------------------------------------------------------------
    @loads("moe_distribute_dispatch", "moe_distribute_dispatch_v2")
    def _load_dispatch(self, a, *, numerics):
        g = a.group
        quant = None
        if a.quant_mode == 2:
            quant = quant_spec(numerics, sum(x.shape[0] for x in a.x), a.h)
        payloads = [{"x": a.x[q], "ids": a.expert_ids[q], "active": None if a.active is None else a.active[q],
                     "carry": None if a.expert_scales is None else a.expert_scales[q], "quant": quant,
                     "smooth": a.scales, "smooth_offset": a.scale_row_offset, "num_experts": g.experts,
                     "v2": a.op.endswith("_v2"), "cumulative": a.expert_token_nums_type == 0,
                     "tp_world_size": g.tp_world_size} for q in range(g.ranks)]
        return g.ranks, payloads, g.entry_of_rank

    @implements("moe_distribute_dispatch", "moe_distribute_dispatch_v2")
    def _dispatch(self, loaded):
        ranks, payloads, entry = loaded
        results = self.pool(ranks).call("dispatch", payloads, ranks=ranks)
        return tuple(in_entry_order([r[i] for r in results], entry) for i in range(7))

    # -- combine -------------------------------------------------------------------------------------
    @loads("moe_distribute_combine", "moe_distribute_combine_v2")
    def _load_combine(self, a, *, numerics):
        g = a.group
        payloads = [{"y": a.expand_x[q], "ep_send_counts": a.ep_send_counts[q], "index": a.index[q],
                     "ids": a.expert_ids[q], "weights": a.expert_scales[q],
                     "weights_bf16": numerics.ep_combine_weights == "bfloat16",
                     "active": None if a.active is None else a.active[q],
                     "shared": None if a.shared_expert_x is None else a.shared_expert_x[q], "v2": a.op.endswith("_v2"),
                     "comm_quant": a.comm_quant_mode == 2, "e_loc": g.e_loc} for q in range(g.ranks)]
        return g.ranks, payloads, g.entry_of_rank

    @implements("moe_distribute_combine", "moe_distribute_combine_v2")
    def _combine(self, loaded):
        ranks, payloads, entry = loaded
        return in_entry_order(self.pool(ranks).call("combine", payloads, ranks=ranks), entry)

    # -- the EP layer ------------------------------------------------------------------------------------
    @loads("w8a8_moe_ep")
    def _load_moe_ep(self, a, *, numerics):
        """Each rank's expert slice loaded into its process (untimed), and the per-call payloads."""
        return _Layer.prepare(self, a, numerics)

    @implements("w8a8_moe_ep")
    def _moe_ep(self, layer):
        return [r["y"] for r in layer.run(self)]

    def w8a8_moe_ep_stages(self, *args, **kwargs) -> dict:
        """``w8a8_moe_ep`` run by the rank processes, with what crossed the wire and every intermediate,
        per rank (lists in rank order), under the names of the golden's :func:`w8a8.w8a8_moe_ep_stages`
        (so that the invariants of :mod:`conformance.ep_invariants` apply to this backend's real exchange), and
        ``seconds`` / ``wire`` (per rank: the phases' seconds, the bytes each rank sent)."""
        from w8a8 import registry

        self._require_available()
        numerics = self._numerics_for(kwargs.pop("numerics", None))
        a = self.checked_args(registry.get("w8a8_moe_ep"), args, kwargs, numerics)
        results = _Layer.prepare(self, a, numerics).run(self, stages=True)
        stages = {name: [r["stages"][name] for r in results] for name in results[0]["stages"]}
        stages.update(dispatch=a.dispatch, seconds=[r["seconds"] for r in results], wire=[r["wire"] for r in results])
        return stages


def expert_checks(a, numerics) -> None:
    """The argument checks the golden's expert ranks make before computing, rank by rank in its order
    (``grouped_matmul`` of GMM1 with the rank's slice of W13 and its scale as loaded in bf16, then
    ``dequant_swiglu_quant``'s ``swiglu_limit``, then GMM2), on empty stand-ins of the rows: the golden's
    exception and message (a scale that is Inf once rounded to bf16, a bad ``swiglu_limit``) before any
    rank process runs."""
    from w8a8 import dtypes as _dt
    from w8a8.moe.grouped_matmul import grouped_matmul_args
    from w8a8.moe.swiglu import dequant_swiglu_quant_args
    from w8a8.rounding import to_float

    def bf16(scale):
        return scale if scale.dtype == _dt.bfloat16 else to_float(scale.astype(np.float32), _dt.bfloat16)

    def gmm(k, weight, scale):
        grouped_matmul_args(np.zeros((0, k), np.int8), weight, scale=bf16(scale), per_token_scale=np.zeros(0, F32),
                            group_list=np.zeros(weight.shape[0], np.int64), group_list_type=1,
                            output_dtype=_dt.bfloat16, split_item=2, group_type=0, numerics=numerics)

    ex, e_loc = a.experts, a.e_loc
    for q in range(a.ranks):
        mine = slice(q * e_loc, (q + 1) * e_loc)
        gmm(a.h, ex.w13[mine].transpose(0, 2, 1), ex.w13_scale[mine])
        dequant_swiglu_quant_args(np.zeros((0, ex.w13.shape[1]), _dt.bfloat16), quant_mode=1, activate_left=True,
                                  swiglu_limit=a.swiglu_limit, numerics=numerics)
        gmm(ex.w2.shape[2], ex.w2[mine].transpose(0, 2, 1), ex.w2_scale[mine])


class _Layer:
    """A prepared ``w8a8_moe_ep`` call: the weights loaded in the rank processes under ``key``, the per-rank
    payloads of the call. ``timing``: barriers around the phases (:attr:`TorchDistBackend.time_phases`);
    ``last`` keeps the ranks' ``seconds`` and ``wire`` of the latest run."""

    def __init__(self, ranks, loads, payloads, dispatch):
        self.ranks, self.loads, self.payloads, self.dispatch = ranks, loads, payloads, dispatch
        self.pool = None
        self.last: list = []

    @classmethod
    def prepare(cls, backend, a, numerics) -> "_Layer":
        expert_checks(a, numerics)
        ex, r, e_loc = a.experts, a.ranks, a.e_loc
        key = f"layer-{next(_KEYS)}"
        shared = None if a.shared_expert is None else dict(a.shared_expert)
        mine = [slice(q * e_loc, (q + 1) * e_loc) for q in range(r)]
        loads = [{"key": key, "w13": ex.w13[mine[q]], "w13_scale": ex.w13_scale[mine[q]], "w2": ex.w2[mine[q]],
                  "w2_scale": ex.w2_scale[mine[q]],
                  "swiglu_limit": a.swiglu_limit, "shared": shared,
                  "shared_limit": getattr(a, "shared_limit", None)} for q in range(r)]
        quant = quant_spec(numerics, max(h.shape[0] for h in a.hidden), a.h) if a.dispatch == "int8" else None
        payloads = [{"key": key, "op": "w8a8_moe_ep", "x": a.hidden[q], "ids": a.topk_ids[q],
                     "weights": a.topk_weights[q], "weights_bf16": numerics.ep_combine_weights == "bfloat16",
                     "num_experts": ex.e, "quant": quant} for q in range(r)]
        layer = cls(r, loads, payloads, a.dispatch)
        layer.load(backend)
        return layer

    def load(self, backend) -> None:
        self.pool = backend.pool(self.ranks)
        self.pool.call("load_layer", self.loads, ranks=self.ranks)
        keys = self.pool.__dict__.setdefault("layer_keys", [])   # mirrors the ranks' caches (tasks.KEEP)
        key = self.loads[0]["key"]
        if key in keys:
            keys.remove(key)
        keys.append(key)
        del keys[:-KEEP]

    def run(self, backend, *, stages: bool = False) -> list:
        if backend.plant not in (None, *PLANTS):
            raise ValueError(f"torch-dist: plant must be None or one of {PLANTS}; got {backend.plant!r}")
        if self.pool is not backend.pool(self.ranks) or self.loads[0]["key"] not in self.pool.layer_keys:
            self.load(backend)   # the pool was restarted (an error, a larger R) or dropped it since the load
        extra = {"stages": stages, "timing": backend.time_phases, "plant": backend.plant}
        results = self.pool.call("moe_ep", [{**p, **extra} for p in self.payloads], ranks=self.ranks)
        self.last = [{"seconds": r["seconds"], "wire": r["wire"]} for r in results]
        backend.last_phases = self.last
        return results
