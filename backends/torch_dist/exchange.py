"""The expert-parallel exchange on a torch.distributed process group (docs/expert-parallelism.md).

Runs on one rank, inside a rank process (:mod:`.worker`); the same code runs on gloo (CPU tensors) and
on HCCL (NPU tensors: ``device`` is where the buffers live). Vocabulary: R ranks, E routed
experts, ``E_loc = E / R`` per rank, expert ``e`` on rank ``e // E_loc`` as local expert ``e % E_loc`` (no
shared-expert ranks: the golden refuses S > 0), K slots per token, a *copy* is
``(t, k)`` with flat index ``f = t*K + k``.

**Dispatch** (:func:`dispatch`), in this order:

1. the sender orders its active copies by ``(global expert, f)`` (a stable sort: contiguous per
   destination rank and, inside, per local expert) and counts them per ``(destination, local expert)``;
2. **counts first**: ``all_to_all_single`` of the ``[R * E_loc]`` int64 counts with equal splits gives
   the receiver's ``cnt_recv [R, E_loc]`` (per source, per local expert); the split sizes of the
   variable-size exchanges are then host integers (``input_splits[q]`` copies to rank q,
   ``output_splits[src]`` copies from rank src);
3. the copies' ``(t, k)`` (int32 ``[M, 2]``: what the receiver reports as the source triple);
4. in int8 mode the **fp32 scales** ``[M]``;
5. the **payload**: int8 ``[M, H]`` (int8 mode: the codes of the sender's quantization, made once per
   token — or once per copy with smooth scales, which depend on the destination expert) or the bf16
   rows unchanged (bf16 mode);
6. the receiver's rows arrive in order ``(source, local expert, f)``; a stable sort by local expert
   (keys ``repeat_interleave(tile(arange(E_loc), R), cnt_recv)``) gives the **canonical order
   (local expert, source, f)** of the MC2 dispatch, kept as a permutation for the way back.

**Combine** (:func:`combine`): the expert outputs (canonical order) are put back in arrival order
(the inverse permutation), ``all_to_all_single`` returns them with the splits swapped, so the sender
receives its copies in its own send order; they are scattered to their ``(t, k)`` slots and summed
per token as the ops-transformer combine kernel does: ``acc = +0.0f``; for k ascending
``acc = fp32(acc + fp32(y) * w[t, k])`` (a multiply, then an add: two fp32 roundings, never a fused multiply-add),
then one RNE rounding to bf16. Inactive copies contribute nothing.

Every step is timed into ``clock`` (a dict of seconds per phase) when one is given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

F32 = torch.float32


@dataclass
class Handle:
    """What a rank keeps between dispatch and combine (the sender's and the receiver's halves)."""

    ranks: int
    e_loc: int
    tokens: int                    # T of this rank (as a sender)
    k: int
    order: torch.Tensor            # int64 [M_send]: flat copy index f of each sent copy, in send order
    input_splits: list[int]        # copies sent to each rank
    output_splits: list[int]       # copies received from each rank
    cnt_recv: torch.Tensor         # int64 [R, E_loc]: copies received per (source, local expert)
    perm: torch.Tensor             # int64 [A]: canonical row i is arrival row perm[i]


@dataclass
class Received:
    """A rank's received rows in canonical order (the golden's ``EpRecv``)."""

    x: torch.Tensor                      # int8 | bf16 [A, H]
    scale: torch.Tensor | None           # fp32 [A] (int8 mode) or None
    src: torch.Tensor                    # int32 [A, 3]: (source rank, token, k)
    expert_token_nums: torch.Tensor      # int64 [E_loc]: rows per local expert (counts)
    ep_recv_counts: torch.Tensor         # int32 [E_loc * R]: cumulative over (l, src), row-major
    handle: Handle
    block_pos: torch.Tensor              # int32 [T * K] (sender side): each copy's position among this rank's
                                         # earlier copies to the same expert; -1 for a copy not sent
    carried: torch.Tensor | None = None  # fp32 [A]: the per-copy values sent with the rows (``carry``), or None
    wire: dict = field(default_factory=dict)   # bytes sent to other ranks / to itself, per message kind


class _Clock:
    def __init__(self, sink: dict | None):
        self.sink, self.t = sink, time.perf_counter()

    def lap(self, name: str) -> None:
        if self.sink is not None:
            now = time.perf_counter()
            self.sink[name] = self.sink.get(name, 0.0) + now - self.t
            self.t = now


def _a2a(out: torch.Tensor, inp: torch.Tensor, out_splits, in_splits, group) -> torch.Tensor:
    dist.all_to_all_single(out, inp.contiguous(), out_splits, in_splits, group=group)
    return out


def send_order(ids: torch.Tensor, active: torch.Tensor | None, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(order, experts)``: the active copies' flat indices sorted stably by global expert, and their
    experts (int64 ``[M]`` each). ``active``: bool ``[T, K]`` (None: every copy)."""
    flat = ids.reshape(-1).to(torch.int64)
    f = torch.arange(flat.numel(), dtype=torch.int64, device=flat.device)
    if active is not None:
        keep = active.reshape(-1)
        f, flat = f[keep], flat[keep]
    by_expert = torch.sort(flat, stable=True).indices
    return f[by_expert], flat[by_expert]


def dispatch(x: torch.Tensor, ids: torch.Tensor, *, num_experts: int, group, ranks: int, rank: int,
             quantize=None, smooth: torch.Tensor | None = None, smooth_offset: int = 0,
             active: torch.Tensor | None = None, carry: torch.Tensor | None = None, canonical: bool = True, clock: dict | None = None) -> Received:
    """Dispatch this rank's tokens (module docstring). ``x``: bf16 / fp16 ``[T, H]``; ``ids``: int ``[T, K]``;
    ``quantize``: ``fn(fp32 rows [S, H]) -> (int8 [S, H], fp32 [S])`` for int8 mode, None to send x's rows;
    ``smooth``: fp32 ``[E + smooth_offset, H]``: copy to expert e is ``fp32(x[t]) * smooth[e + smooth_offset]``
    before quantizing; ``active``: bool ``[T, K]`` copies to send (None: all); ``carry``: fp32 ``[T, K]``
    values sent with the copies (the v2 ``expert_scales``); ``canonical=False`` keeps the arrival order
    (a planted bug: ``tasks.PLANTS``)."""
    c = _Clock(clock)
    dev = x.device
    t, h = x.shape
    k = ids.shape[1] if ids.ndim == 2 else 0
    e_loc = num_experts // ranks       # no shared-expert ranks (S = 0: the only value the golden computes)
    order, experts = send_order(ids, active, num_experts)
    cnt_send = torch.bincount(experts, minlength=num_experts)   # [R * E_loc]: (destination, local expert)
    cnt_recv = _a2a(torch.empty_like(cnt_send), cnt_send, None, None, group).view(ranks, e_loc)
    in_splits = cnt_send.view(ranks, e_loc).sum(1).tolist()
    out_splits = cnt_recv.sum(1).tolist()
    tok = torch.div(order, k, rounding_mode="floor") if k else order
    c.lap("dispatch_counts")
    tk = torch.stack([tok, order - tok * k], 1).to(torch.int32)
    tk_recv = _a2a(torch.empty(sum(out_splits), 2, dtype=torch.int32, device=dev), tk, out_splits, in_splits, group)
    scale_recv = None
    if quantize is not None:
        # the quantizers are torch-cpu's: they run on the host (a no-op move on gloo)
        if smooth is None:   # one quantization per token, gathered per copy (identical copies, identical bits)
            q_tok, s_tok = (v.to(dev) for v in quantize(x.cpu().to(F32)))
            q_send, s_send = q_tok.index_select(0, tok), s_tok.index_select(0, tok)
        else:                # per copy: the destination expert's smooth row
            rows = x.index_select(0, tok).to(F32).mul_(smooth.index_select(0, experts + smooth_offset))
            q_send, s_send = (v.to(dev) for v in quantize(rows.cpu()))
        c.lap("dispatch_quant")
        scale_recv = _a2a(torch.empty(sum(out_splits), dtype=F32, device=dev), s_send.contiguous(), out_splits,
                          in_splits, group)
        c.lap("dispatch_scales")
    else:
        q_send = x.index_select(0, tok)
    x_recv = _a2a(torch.empty(sum(out_splits), h, dtype=q_send.dtype, device=dev), q_send.contiguous(), out_splits,
                  in_splits, group)
    c.lap("dispatch_payload")
    carried = None
    if carry is not None:
        carried = _a2a(torch.empty(sum(out_splits), dtype=F32, device=dev), carry.reshape(-1).to(F32)[order],
                       out_splits, in_splits, group)
    # arrival order is (source, local expert, f): a stable sort by local expert makes it canonical
    keys = torch.repeat_interleave(torch.arange(e_loc, device=dev).repeat(ranks), cnt_recv.reshape(-1))
    perm = torch.sort(keys, stable=True).indices if canonical else torch.arange(keys.numel(), device=dev)
    src_rank = torch.repeat_interleave(torch.arange(ranks, device=dev), torch.tensor(out_splits, device=dev))
    src = torch.cat([src_rank[:, None].to(torch.int32), tk_recv], 1).index_select(0, perm)
    x_c = x_recv.index_select(0, perm)
    s_c = None if scale_recv is None else scale_recv.index_select(0, perm)
    ep_recv_counts = torch.cumsum(cnt_recv.t().reshape(-1), 0).to(torch.int32)
    block_pos = torch.full((t * k,), -1, dtype=torch.int32, device=dev)
    block_pos[order] = (torch.arange(order.numel(), device=dev)
                        - torch.searchsorted(experts, experts, right=False)).to(torch.int32)
    handle = Handle(ranks=ranks, e_loc=e_loc, tokens=t, k=k, order=order, input_splits=in_splits,
                    output_splits=out_splits, cnt_recv=cnt_recv, perm=perm)
    c.lap("dispatch_sort")
    return Received(x=x_c, scale=s_c, src=src, expert_token_nums=cnt_recv.sum(0), ep_recv_counts=ep_recv_counts,
                    handle=handle, block_pos=block_pos,
                    carried=None if carried is None else carried.index_select(0, perm),
                    wire=wire_bytes(in_splits, rank, h, q_send.element_size(), quantize is not None))


def wire_bytes(in_splits: list[int], rank: int, h: int, payload_itemsize: int, scales: bool) -> dict:
    """Bytes this rank sends in the dispatch, to other ranks (``remote_*``) and to itself (``local_*``):
    the payload rows, the fp32 scales, the (t, k) metadata (int32 pairs); not the ``R * E_loc`` int64
    counts (``in_splits[q]`` copies to rank q, of ``payload_itemsize``-byte elements, ``h`` per row)."""
    remote = sum(n for q, n in enumerate(in_splits) if q != rank)
    local = in_splits[rank] if rank < len(in_splits) else 0
    out = {}
    for where, n in (("remote", remote), ("local", local)):
        out[f"{where}_copies"] = n
        out[f"{where}_payload"] = n * h * payload_itemsize
        out[f"{where}_scales"] = n * 4 if scales else 0
        out[f"{where}_meta"] = n * 8
    return out


def return_rows(y: torch.Tensor, handle: Handle, group, clock: dict | None = None) -> torch.Tensor:
    """The expert outputs ``y [A, H]`` (canonical order) sent back: this rank's copies ``[T*K, H]`` in
    flat order (rows of copies that were not sent are zeros)."""
    c = _Clock(clock)
    h = y.shape[1]
    arrival = torch.empty_like(y)
    arrival.index_copy_(0, handle.perm, y)
    back = _a2a(torch.empty(sum(handle.input_splits), h, dtype=y.dtype, device=y.device), arrival,
                handle.input_splits, handle.output_splits, group)
    c.lap("combine_a2a")
    rows = torch.zeros(handle.tokens * handle.k, h, dtype=y.dtype, device=y.device)
    rows.index_copy_(0, handle.order, back)
    c.lap("combine_scatter")
    return rows


def weighted_sum(rows: torch.Tensor, weights: torch.Tensor, present: torch.Tensor | None,
                 extra: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 ``acc [T, H]`` of the combine (ops-transformer ``mc2/moe_distribute_combine_v2/``): from +0, for k
    ascending, where the copy is ``present`` (bool ``[T, K]``, None: all), ``acc = acc + fp32(row) * w[t, k]`` (a
    multiply, then an add); then ``acc = acc + fp32(extra[t])`` (unweighted) if given. ``rows``: ``[T*K, H]`` in flat
    order."""
    t, k = weights.shape
    h = rows.shape[1]
    r = rows.view(t, k, h)
    wf = weights.to(F32)
    acc = torch.zeros(t, h, dtype=F32, device=rows.device)
    zero = torch.zeros((), dtype=F32, device=rows.device)
    for j in range(k):
        term = r[:, j].to(F32).mul_(wf[:, j:j + 1])
        acc = acc.add_(term if present is None else torch.where(present[:, j:j + 1], term, zero))
    if extra is not None:
        acc = acc.add_(extra.to(F32))
    return acc


def _scatter_last(slots: torch.Tensor, n_slots: int, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out [n_slots, H], present bool [n_slots])``: ``out[slots[i]] = rows[i]``, the last ``i`` winning
    where slots repeat (NumPy's fancy assignment), zeros where no row lands."""
    dev = rows.device
    pos = torch.full((n_slots,), -1, dtype=torch.int64, device=dev)
    if slots.numel():
        pos.scatter_reduce_(0, slots, torch.arange(slots.numel(), device=dev), "amax", include_self=True)
    present = pos >= 0
    out = torch.zeros(n_slots, rows.shape[1], dtype=rows.dtype, device=dev)
    out[present] = rows.index_select(0, pos[present])
    return out, present


def return_by_triples(y: torch.Tensor, triples: torch.Tensor, *, tokens: int, k: int, ranks: int, group,
                      clock: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The v2 return trip (``assist_info_for_combine``): row i of ``y`` goes back to
    ``triples[i] = (source rank, token, k)``. Expert side: rows sorted stably by source rank, counts
    exchanged, then the rows and their ``(t, k)``. Token side: ``(rows [T*K, H], present [T*K])``; a slot
    that several rows name keeps the last one in (source rank of the sender, row) order."""
    c = _Clock(clock)
    dev = y.device
    trip = triples.to(torch.int64).view(-1, 3)
    order = torch.sort(trip[:, 0], stable=True).indices
    send = torch.bincount(trip[:, 0], minlength=ranks)
    recv = _a2a(torch.empty_like(send), send, None, None, group)
    in_splits, out_splits = send.tolist(), recv.tolist()
    tk = _a2a(torch.empty(sum(out_splits), 2, dtype=torch.int64, device=dev), trip.index_select(0, order)[:, 1:],
              out_splits, in_splits, group)
    rows = _a2a(torch.empty(sum(out_splits), y.shape[1], dtype=y.dtype, device=dev),
                y.index_select(0, order).contiguous(), out_splits, in_splits, group)
    c.lap("combine_a2a")
    out = _scatter_last(tk[:, 0] * k + tk[:, 1], tokens * k, rows)
    c.lap("combine_scatter")
    return out


def return_by_blocks(y: torch.Tensor, ep_send_counts: torch.Tensor, expand_idx: torch.Tensor, ids: torch.Tensor, *,
                     e_loc: int, ranks: int, group) -> tuple[torch.Tensor, torch.Tensor]:
    """The v1 return trip (``expand_idx``, ``ep_send_counts``). Expert side: block (l, r) is rows
    ``[cum[l*R + r - 1], cum[l*R + r])`` of ``y`` (``cum = ep_send_counts``, 0 before the first); rank r
    gets its blocks for l = 0 .. E_loc-1 in that order, after their sizes. Token side: copy f with expert
    ``e`` (on rank ``q = e // E_loc``, ``l = e % E_loc``) reads the received row ``expand_idx[f]`` of block
    (q, l), if that is inside the block. Returns ``(rows [T*K, H], present [T*K])``."""
    dev = y.device
    cum = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), ep_send_counts.to(torch.int64)])
    sizes = torch.diff(cum).view(e_loc, ranks)                    # [l, r]
    dst = torch.arange(ranks, device=dev).repeat(e_loc)            # block (l, r) -> r, row-major
    row_dst = torch.repeat_interleave(dst, sizes.reshape(-1))
    order = torch.sort(row_dst, stable=True).indices               # (r, l, row) order
    got = _a2a(torch.empty(ranks, e_loc, dtype=torch.int64, device=dev), sizes.t().contiguous(), None, None,
               group)                                              # [q, l]: rows of block (q, l) for me
    in_splits, out_splits = sizes.sum(0).tolist(), got.sum(1).tolist()
    rows = _a2a(torch.empty(sum(out_splits), y.shape[1], dtype=y.dtype, device=dev),
                y[:int(cum[-1])].index_select(0, order).contiguous(), out_splits, in_splits, group)
    starts = (torch.cumsum(got.reshape(-1), 0) - got.reshape(-1)).view(ranks, e_loc)   # first row of block (q, l)
    e = ids.reshape(-1).to(torch.int64)
    q, l = torch.div(e, e_loc, rounding_mode="floor"), e % e_loc
    pos = expand_idx.to(torch.int64)
    present = pos < got[q, l]
    row = torch.where(present, starts[q, l] + pos, torch.zeros((), dtype=torch.int64, device=dev))
    out = torch.zeros(e.numel(), y.shape[1], dtype=y.dtype, device=dev)
    out[present] = rows.index_select(0, row[present])
    return out, present


__all__ = ["Handle", "Received", "dispatch", "return_rows", "return_by_triples", "return_by_blocks", "weighted_sum",
           "send_order", "wire_bytes"]
