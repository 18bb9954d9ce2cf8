"""The task functions the rank processes run (:mod:`.worker`): ``fn(ctx, payload) -> result``.

Payloads and results are NumPy arrays (bf16 as ``ml_dtypes.bfloat16``) in dicts: they cross the parent's
socket pickled. Inside, everything is torch on ``ctx.device``. ``ctx.cache`` keeps what a ``load_*`` task
loaded under the key the parent chose (the last :data:`KEEP` loads per rank).
"""

from __future__ import annotations

from . import exchange

KEEP = 4   # loaded weight sets kept per rank (oldest dropped first)


def ping(ctx, payload):
    """``(rank, ranks, sum of the ranks, payload)``: a round trip through the pool and one all_reduce."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([ctx.rank], dtype=torch.int64)
    dist.all_reduce(t, group=ctx.group)
    return ctx.rank, ctx.ranks, int(t.item()), payload


def _torch(value, device="cpu"):
    from ..torch_common import to_torch

    return None if value is None else to_torch(value, device) if device != "cpu" else to_torch(value)


def _numpy(value):
    from ..torch_common import from_torch

    return None if value is None else from_torch(value.cpu())


def _keep(ctx, key, value) -> None:
    ctx.cache.pop(key, None)
    ctx.cache[key] = value
    while len(ctx.cache) > KEEP:
        ctx.cache.pop(next(iter(ctx.cache)))


def _loaded(ctx, key):
    if key not in ctx.cache:
        raise RuntimeError(f"torch-dist: rank {ctx.rank} holds no loaded weights {key!r} (dropped after {KEEP} "
                           "newer loads, or the pool was restarted): prepare the call again")
    return ctx.cache[key]


# -- the EP layer ------------------------------------------------------------------------------------------

def load_layer(ctx, payload) -> None:
    """Load this rank's experts (``w13``, ``w13_scale``, ``w2``, ``w2_scale``: its ``E_loc`` slice, checkpoint
    layout; ``swiglu_limit``) and the shared expert (``shared``: the three Linears' weights, or None) under
    ``payload["key"]``."""
    from . import experts, shared

    p = payload
    local = experts.load(_torch(p["w13"]), _torch(p["w13_scale"]), _torch(p["w2"]), _torch(p["w2_scale"]),
                         p["swiglu_limit"])
    _keep(ctx, p["key"], (local, None if p["shared"] is None else shared.load(p["shared"])))


def moe_ep(ctx, payload) -> dict:
    """The EP layer on this rank: dispatch -> local experts -> combine (+ the shared expert on this rank's
    own hidden). Payload: ``key`` (the loaded layer), ``x`` bf16 ``[T, H]``, ``ids`` int32 ``[T, K]``,
    ``weights`` fp32 ``[T, K]``, ``num_experts``, ``quant`` (None: bf16 dispatch; else the sender's
    formula: ``{"formula", "amax_eps", "rounding"}``), ``arrival`` (the on-arrival quantizer of the bf16
    dispatch, same form), ``stages`` (return what crossed the wire), ``timing`` (barriers between phases
    and their seconds). Returns ``{"y", "seconds", "wire"[, stages]}``."""
    import time

    import torch
    import torch.distributed as dist

    from . import experts, quant, shared

    p = payload
    local, shared_layer = _loaded(ctx, p["key"])
    x, ids, w = _torch(p["x"]), _torch(p["ids"]), _torch(p["weights"])
    clock: dict = {}
    timing = p.get("timing", False)

    def barrier():
        if timing:
            dist.barrier(group=ctx.group)

    send_q = None if p["quant"] is None else quant.quantizer(**p["quant"])
    barrier()
    t0 = time.perf_counter()
    recv = exchange.dispatch(x, ids, num_experts=p["num_experts"], group=ctx.group, ranks=ctx.ranks, rank=ctx.rank,
                             quantize=send_q, clock=clock)
    barrier()
    t1 = time.perf_counter()
    if recv.scale is None:   # bf16 dispatch: the single quantization, on arrival
        x8, s8 = quant.quantizer(**p["arrival"])(recv.x.to(torch.float32))
    else:
        x8, s8 = recv.x, recv.scale
    y_rows = experts.run(local, x8, s8, recv.expert_token_nums.tolist())
    barrier()
    t2 = time.perf_counter()
    rows = exchange.return_rows(y_rows, recv.handle, ctx.group, clock)
    acc = exchange.weighted_sum(rows, w, None)
    from ..torch_cpu.arith import to_float

    routed = to_float(acc, torch.bfloat16)
    barrier()
    t3 = time.perf_counter()
    y = routed if shared_layer is None else shared.add(routed, shared.forward(shared_layer, x))
    t4 = time.perf_counter()
    out = {"y": _numpy(y), "wire": recv.wire,
           "seconds": {"dispatch": t1 - t0, "experts": t2 - t1, "combine": t3 - t2, "shared": t4 - t3, **clock}}
    if p.get("stages"):
        out["stages"] = {"recv_x": _numpy(recv.x), "recv_scale": _numpy(recv.scale), "src": _numpy(recv.src),
                         "expert_token_nums": _numpy(recv.expert_token_nums),
                         "ep_recv_counts": _numpy(recv.ep_recv_counts), "gmm1_x": _numpy(x8),
                         "gmm1_scale": _numpy(s8), "expert_out": _numpy(y_rows), "routed": _numpy(routed)}
    return out


# -- the dispatch ops ----------------------------------------------------------------------------------------

def _quantizer(spec):
    from . import quant

    return None if spec is None else quant.quantizer(**spec)


def dispatch(ctx, payload) -> tuple:
    """``moe_distribute_dispatch[_v2]`` on this rank: the 7 outputs of this rank (see the golden op).
    Payload: ``x``, ``ids``, ``active`` (bool ``[T, K]`` or None), ``carry`` (fp32 ``[T, K]`` or None),
    ``quant`` (the sender's formula, or None for quant_mode 0), ``smooth`` / ``smooth_offset``,
    ``num_experts``, ``v2``, ``cumulative`` (expert_token_nums_type 0), ``tp_world_size``."""
    import torch

    p = payload
    dev = ctx.device
    recv = exchange.dispatch(_torch(p["x"], dev), _torch(p["ids"], dev), num_experts=p["num_experts"],
                             group=ctx.group, ranks=ctx.ranks, rank=ctx.rank, quantize=_quantizer(p["quant"]),
                             smooth=_torch(p["smooth"], dev), smooth_offset=p["smooth_offset"],
                             active=_torch(p["active"], dev), carry=_torch(p["carry"], dev))
    counts = recv.expert_token_nums
    index = recv.src.reshape(-1) if p["v2"] else recv.block_pos
    zeros = torch.zeros(0, dtype=torch.float32)
    return (_numpy(recv.x), _numpy(recv.scale if recv.scale is not None else zeros), _numpy(index),
            _numpy(torch.cumsum(counts, 0) if p["cumulative"] else counts), _numpy(recv.ep_recv_counts),
            _numpy(torch.zeros(p["tp_world_size"], dtype=torch.int32)),
            _numpy(recv.carried if recv.carried is not None else zeros))


# -- the combine ops -------------------------------------------------------------------------------------------

def combine(ctx, payload):
    """``moe_distribute_combine[_v2]`` on this rank: its ``[BS, H]`` output. Payload: ``y`` (this rank's
    expert rows), ``ep_send_counts``, ``index`` (v1 ``expand_idx`` / v2 ``assist_info_for_combine``),
    ``ids``, ``weights`` (fp32 ``[BS, K]``; ``weights_bf16``: rounded to bf16 first), ``active`` (or None),
    ``shared`` (``[BS, H]`` added unweighted, or None), ``v2``, ``comm_quant``, ``e_loc``."""
    import torch

    from ..torch_cpu.arith import to_float
    from . import quant

    p = payload
    dev = ctx.device
    y = _torch(p["y"], dev)
    if p["comm_quant"]:
        y = quant.comm_roundtrip(y)
    counts = _torch(p["ep_send_counts"], dev)
    a_rows = int(counts[-1]) if counts.numel() else 0
    ids = _torch(p["ids"], dev)
    t, k = ids.shape
    if p["v2"]:
        rows, present = exchange.return_by_triples(y[:a_rows], _torch(p["index"], dev)[:3 * a_rows], tokens=t, k=k,
                                                   ranks=ctx.ranks, group=ctx.group)
    else:
        rows, present = exchange.return_by_blocks(y, counts, _torch(p["index"], dev), ids, e_loc=p["e_loc"],
                                                  ranks=ctx.ranks, group=ctx.group)
    present = present.view(t, k)
    if p["active"] is not None:
        present &= _torch(p["active"], dev)
    acc = exchange.weighted_sum(rows, _weights(p), present, _torch(p["shared"], dev))
    return _numpy(to_float(acc, y.dtype))


def _weights(p):
    """The fp32 routing weights the combine multiplies by: as given, or rounded to bf16 first
    (``ep_combine_weights="bfloat16"``: ``weights_bf16``)."""
    import torch

    from ..torch_cpu.arith import to_float

    w = _torch(p["weights"]).to(torch.float32)
    return to_float(w, torch.bfloat16).to(torch.float32) if p.get("weights_bf16") else w
