"""The task functions the rank processes run (:mod:`.worker`): ``fn(ctx, payload) -> result``.

Payloads and results are NumPy arrays (bf16 as ``ml_dtypes.bfloat16``) in dicts: they cross the parent's
socket pickled. Inside, everything is torch on ``ctx.device``. ``ctx.cache`` keeps what a ``load_*`` task
loaded under the key the parent chose (the last :data:`KEEP` loads per rank).
"""

from __future__ import annotations

from . import exchange

from ._common import KEEP


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
    layout; ``swiglu_limit``) and keep the shared expert's checkpoint tensors (``shared``, or None) under
    ``payload["key"]``."""
    from . import experts

    p = payload
    local = experts.load(_torch(p["w13"]), _torch(p["w13_scale"]), _torch(p["w2"]), _torch(p["w2_scale"]),
                         p["swiglu_limit"])
    _keep(ctx, p["key"], (local, p["shared"], p.get("shared_limit")))


def moe_ep(ctx, payload) -> dict:
    """The EP layer on this rank: dispatch -> local experts -> combine (+ the shared expert on this rank's
    own hidden). Payload: ``key`` (the loaded layer), ``x`` bf16 ``[T, H]``, ``ids`` int32 ``[T, K]``,
    ``weights`` fp32 ``[T, K]`` (``weights_bf16``: rounded to bf16 first), ``num_experts``, ``quant`` (the
    sender's formula, or None for the bf16 dispatch, which quantizes on arrival with ``dynamic_quant``),
    ``stages`` (return what crossed the wire and every intermediate), ``timing`` (barriers around the
    phases), ``plant`` (a deliberate bug, tests only: :data:`PLANTS`). Returns ``{"y", "seconds", "wire"[,
    "stages"]}``."""
    import time

    import torch
    import torch.distributed as dist

    from ..torch_cpu.arith import to_float
    from . import experts, shared

    p = payload
    local, shared_weights, shared_limit = _loaded(ctx, p["key"])
    dev = ctx.device
    x, ids = _torch(p["x"], dev), _torch(p["ids"], dev)
    clock: dict = {}
    calls = {"sender": 0, "arrival": 0}
    plant = p.get("plant")
    sender = None if plant == "drops_scale_requantizes_with_routing_formula" else _quantizer(p["quant"])

    def counted(xf):
        calls["sender"] += 1
        return sender(xf)

    def barrier():
        if p.get("timing"):
            dist.barrier(group=ctx.group)

    barrier()
    t0 = time.perf_counter()
    recv = exchange.dispatch(x, ids, num_experts=p["num_experts"], group=ctx.group, ranks=ctx.ranks, rank=ctx.rank,
                             quantize=None if sender is None else counted, canonical=plant != "arrival_order",
                             clock=clock)
    barrier()
    t1 = time.perf_counter()
    x8, s8 = _runner_input(recv, plant, calls)
    parts = experts.run(local, x8, s8, recv.expert_token_nums.tolist(), stages=p.get("stages", False))
    barrier()
    t2 = time.perf_counter()
    rows = exchange.return_rows(parts["gmm2"].to(dev), recv.handle, ctx.group, clock)
    acc = exchange.weighted_sum(rows, _weights({**p, "weights_bf16": p.get("weights_bf16") or
                                                plant == "combine_bf16_weights"}).to(dev), None)
    routed = to_float(acc, torch.bfloat16)
    barrier()
    t3 = time.perf_counter()
    sh = None if shared_weights is None else shared.forward(shared_weights, p["x"], shared_limit)
    y = routed if sh is None else shared.add(routed, sh, p["op"])
    t4 = time.perf_counter()
    out = {"y": _numpy(y), "wire": recv.wire,
           "seconds": {"dispatch": t1 - t0, "experts": t2 - t1, "combine": t3 - t2, "shared": t4 - t3, **clock}}
    if p.get("stages"):
        out["stages"] = {"payload": _numpy(recv.x), "payload_scale": _numpy(recv.scale), "src": _numpy(recv.src),
                         "expert_token_nums": _numpy(recv.expert_token_nums),
                         "ep_recv_counts": _numpy(recv.ep_recv_counts), "counts": _numpy(recv.handle.cnt_recv),
                         "wire_bytes": int(recv.x.numel() * recv.x.element_size()
                                           + (0 if recv.scale is None else recv.scale.numel() * 4)),
                         "sender_quantizer_calls": calls["sender"], "quantizer_calls": calls["arrival"],
                         "gmm1_x": _numpy(x8), "gmm1_x_scale": _numpy(s8),
                         **{name: _numpy(parts[name]) for name in ("gmm1", "act_q", "act_scale", "gmm2")},
                         "routed": _numpy(routed), "shared": _numpy(sh), "y": out["y"]}
    return out


def _runner_input(recv, plant, calls: dict):
    """GMM1's ``(int8 rows, fp32 scales)`` on the host: the received payload and scale (int8 dispatch: no
    second quantization), or ``dynamic_quant`` of the received bf16 rows (the one on-arrival quantization,
    counted in ``calls["arrival"]``, with the kernel variant its row count selects). Plants: ``quantizes_twice``
    hands the runner the dequantized bf16 rows without their scale; the routing-formula plant quantizes
    with ``s = m / 127``, ``q = rint(x / s)``."""
    import torch

    from ..torch_cpu.arith import to_float
    from ..torch_cpu.quant import dynamic_quant

    rows = recv.x.cpu()
    scale = None if recv.scale is None else recv.scale.cpu()
    if plant == "quantizes_twice" and scale is not None:
        rows, scale = to_float(rows.to(torch.float32).mul_(scale[:, None]), torch.bfloat16), None
    if scale is not None:
        return rows, scale
    calls["arrival"] += 1
    if plant == "drops_scale_requantizes_with_routing_formula":
        return _quantizer({"formula": "routing"})(rows.to(torch.float32))
    return dynamic_quant(rows)


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
    from ..torch_cpu.arith import to_float
    from . import quant

    p = payload
    dev = ctx.device
    y = _torch(p["y"], dev)
    if p["comm_quant"]:
        y = quant.comm_roundtrip(y.cpu()).to(dev)
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
    acc = exchange.weighted_sum(rows, _weights(p).to(dev), present, _torch(p["shared"], dev))
    return _numpy(to_float(acc, y.dtype))


def _weights(p):
    """The fp32 routing weights the combine multiplies by: as given, or rounded to bf16 first
    (``ep_combine_weights="bfloat16"``: ``weights_bf16``)."""
    import torch

    from ..torch_cpu.arith import to_float

    w = _torch(p["weights"]).to(torch.float32)
    return to_float(w, torch.bfloat16).to(torch.float32) if p.get("weights_bf16") else w


def boom(ctx, payload):
    """A task that fails on rank 1 with a ValueError while the others wait in a collective (tests)."""
    import torch
    import torch.distributed as dist

    if ctx.rank == 1:
        raise ValueError("boom: argument 'x' must be fine; got rank 1")
    dist.all_reduce(torch.zeros(1), group=ctx.group)
    return ctx.rank


def stall(ctx, payload):
    """Rank 1 sleeps ``payload`` seconds before an all_reduce the others wait in (tests: the collective's
    timeout)."""
    import time

    import torch
    import torch.distributed as dist

    if ctx.rank == 1:
        time.sleep(payload)
    dist.all_reduce(torch.zeros(1), group=ctx.group)
    return ctx.rank
