"""What the expert-parallel (EP) golden ops share (docs/expert-parallelism.md): the checks of per-rank
lists, the placement of (token, k) copies on the ranks in canonical receive order, the sender's INT8
quantizer, the gather of expert rows back to their copies, and the fp32 weighted combine.

The EP ops run on **simulated ranks**: an argument that each rank holds its own value of is a list
(or tuple) with one array per rank, in rank order. ``S`` shared-expert ranks come first (expert
shard type 0); routed expert ``e`` lives on rank ``S + e // E_loc`` as local expert ``e % E_loc``.
A *copy* is one (source rank r, token t, slot k); its flat index is ``f = t * K + k``. The canonical
receive order on a rank is ascending (local expert l, source rank r, f) (op-plugin
``test_moe_distribute_dispatch.py::_construct_excepted_result``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..dynamic_quant import RowQuant, quantize_rows
from ..numerics import Numerics
from ..rounding import to_float, to_int
from .routing import dispatch_quant

DEEPEP_AMAX_EPS = np.float32(1e-12)
"""The amax epsilon of Ascend DeepEP's normal-mode dispatch kernel (``inv = 127 / (m + 1e-12)``,
sgl-kernel-npu ``csrc/deepep/``)."""


def rank_list(op: str, arg: str, value, *, ranks: int | None = None, dtypes=None, ndim: int | None = None,
              optional: bool = False) -> list | None:
    """A per-rank argument: a list or tuple of ``ranks`` arrays (at least one), each checked by
    :func:`w8a8._check.array` and named ``arg[r]`` in messages. TypeError for a value that is not a
    list / tuple (or an element's dtype), ValueError for the number of ranks."""
    if value is None and optional:
        return None
    if not isinstance(value, (list, tuple)) or isinstance(value, np.ndarray):
        _check.fail(op, arg, "a list with one array per rank", _check.describe(value), TypeError)
    if not value or (ranks is not None and len(value) != ranks):
        want = "at least one rank" if ranks is None else f"{ranks} ranks (ep_world_size)"
        _check.fail(op, arg, f"a list of {want}", f"a list of {len(value)}")
    return [_check.array(op, f"{arg}[{r}]", v, dtypes=dtypes, ndim=ndim) for r, v in enumerate(value)]


def check_expert_ids(op: str, arg: str, ids: list, rows: list[int], e: int, k: int | None = None) -> int:
    """Each rank's ids are ``[T_r, K]`` (one K for every rank) with values in ``[0, E)`` and the K ids of a
    row distinct (the kernels' rule). Returns K."""
    for r, (a, t) in enumerate(zip(ids, rows)):
        if a.shape[0] != t or (k is not None and a.shape[1] != k):
            want = f"[T, K] = [{t}, {'K' if k is None else k}]"
            _check.fail(op, f"{arg}[{r}]", f"of shape {want} (tokens of that rank, one K for every rank)",
                        _check.describe(a))
        k = a.shape[1]
        if a.size and (a.min() < 0 or a.max() >= e):
            _check.fail(op, f"{arg}[{r}]", f"expert ids in [0, moe_expert_num = {e})",
                        f"values in [{a.min()}, {a.max()}]")
        if a.size and k > 1:
            srt = np.sort(a, axis=1)
            if np.any(srt[:, 1:] == srt[:, :-1]):
                row = int(np.flatnonzero(np.any(srt[:, 1:] == srt[:, :-1], axis=1))[0])
                _check.fail(op, f"{arg}[{r}]", "K distinct expert ids in every row", f"row {row}: {a[row].tolist()}")
    return int(k)


@dataclass(frozen=True, eq=False)
class Placement:
    """Where every (token, k) copy goes and in which order it is received (:func:`place`)."""

    ranks: int                      # R, the EP world size
    e_loc: int                      # E_loc, routed experts per routed-expert rank
    shared_ranks: int               # S, shared-expert ranks (the first S ranks receive no routed copies)
    k: int                          # K, slots per token
    tokens: tuple                   # T_r of every rank
    copy_src: np.ndarray            # int64 [M, 3]: (rank, token, k) of every sent copy, in (rank, f) order
    copy_expert: np.ndarray         # int64 [M]: its global expert
    received: tuple                 # per rank q: int64 [A_q] indices into the copies, canonical order
    counts: tuple                   # per rank q: int64 [R, E_loc] copies from source r to local expert l
    block_pos: tuple                # per rank r: int32 [T_r * K]: a copy's position in its (r -> e) block, -1 unsent

    def src(self, q: int) -> np.ndarray:
        """int32 ``[A_q, 3]``: the (source rank, token, k) of each row rank ``q`` receives."""
        return self.copy_src[self.received[q]].astype(np.int32)

    def local(self, q: int) -> np.ndarray:
        """int64 ``[A_q]``: the local expert of each row rank ``q`` receives."""
        return self.copy_expert[self.received[q]] % self.e_loc

    def expert_token_nums(self, q: int, cumulative: bool = False) -> np.ndarray:
        """int64 ``[E_loc]``: rows per local expert on rank ``q`` (counts, or their running sum)."""
        c = self.counts[q].sum(axis=0).astype(np.int64)
        return np.cumsum(c) if cumulative else c

    def ep_recv_counts(self, q: int) -> np.ndarray:
        """int32 ``[E_loc * R]``: rows received, cumulative over (l, source) in row-major order."""
        return np.cumsum(self.counts[q].T.ravel()).astype(np.int32)


def place(ids: list, valid: list | None, e_loc: int, shared_ranks: int, ranks: int) -> Placement:
    """The placement of every copy: copy (r, t, k) with expert ``e = ids[r][t, k]`` (unless ``valid[r][t, k]``
    is False) goes to rank ``S + e // E_loc``, local expert ``e % E_loc``; each receiver orders its rows
    by (l, r, f), ascending. ``block_pos[r][f]`` is the number of earlier copies of rank r to the same
    expert (the v1 ``expand_idx``)."""
    k = ids[0].shape[1]
    srcs, experts, pos = [], [], []
    for r, a in enumerate(ids):
        e = a.reshape(-1).astype(np.int64)
        f = np.arange(e.size, dtype=np.int64)
        keep = np.ones(e.size, bool) if valid is None else valid[r].reshape(-1)
        kf, ke = f[keep], e[keep]
        order = np.argsort(ke, kind="stable")
        se = ke[order]
        p = np.full(e.size, -1, np.int32)
        p[kf[order]] = np.arange(se.size) - np.searchsorted(se, se, side="left")
        pos.append(p)
        srcs.append(np.stack([np.full(kf.size, r, np.int64), kf // k, kf % k], axis=1))
        experts.append(ke)
    copy_src = np.concatenate(srcs) if srcs else np.zeros((0, 3), np.int64)
    copy_expert = np.concatenate(experts)
    dest = shared_ranks + copy_expert // e_loc
    local = copy_expert % e_loc
    flat = copy_src[:, 1] * k + copy_src[:, 2]
    received, counts = [], []
    for q in range(ranks):
        sel = np.flatnonzero(dest == q)
        received.append(sel[np.lexsort((flat[sel], copy_src[sel, 0], local[sel]))])
        counts.append(np.bincount(copy_src[sel, 0] * e_loc + local[sel], minlength=ranks * e_loc)
                      .reshape(ranks, e_loc).astype(np.int64))
    return Placement(ranks=ranks, e_loc=e_loc, shared_ranks=shared_ranks, k=k, tokens=tuple(a.shape[0] for a in ids),
                     copy_src=copy_src, copy_expert=copy_expert, received=tuple(received), counts=tuple(counts),
                     block_pos=tuple(pos))


def sender_quant(xf: np.ndarray, numerics: Numerics) -> tuple[np.ndarray, np.ndarray]:
    """The EP sender's per-row INT8 quantization of fp32 rows ``[M, H]`` (``numerics.ep_dispatch_quant``):

    ``"mc2"`` / ``"deepep_normal"`` (ops-transformer ``mc2/moe_distribute_dispatch_v2/`` ``QuantProcess``;
    sgl-kernel-npu ``csrc/deepep/``), fp32 throughout::

        m = max_h |xf_h|;  inv = 127 / (m + eps);  q = clamp(rint(xf * inv), -127, 127);  s = 1 / inv

    with ``eps`` 0 (MC2: exactly ``dynamic_quant``'s ``mul_inv`` / ``reciprocal`` formula) or 1e-12
    (Ascend DeepEP normal). An all-zero row: MC2 ``inv = inf``, codes ``zero_row`` (NaN before the cast,
    not confirmed), ``s = 0``; DeepEP ``inv = 1.27e14``, codes 0, ``s = 1 / 1.27e14``.
    ``"init_routing"``: :func:`w8a8.dispatch_quant` (``s = m / 127``, ``q = xf / s``, the
    ``moe_init_routing_v2(quant_mode=1)`` formula of the sgl-kernel-npu ``alltoall`` strategy); its
    rows are the bf16 values ``xf`` holds exactly. Returns ``(int8 [M, H], fp32 [M])``.
    """
    nan_code = 0 if numerics.zero_row == "zero" else -128
    mode = numerics.ep_dispatch_quant
    if mode == "init_routing":
        return dispatch_quant(to_float(xf, _dt.bfloat16), numerics=numerics)
    if mode == "mc2":
        return quantize_rows(xf, RowQuant(127, codes="mul_inv", scale="reciprocal", round_mode=numerics.round_mode,
                                          nan_code=nan_code, saturate=numerics.saturate))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        m = np.max(np.abs(xf), axis=-1, keepdims=True) if xf.shape[-1] else np.zeros(xf.shape[:-1] + (1,), np.float32)
        inv = np.float32(127) / (m.astype(np.float32) + DEEPEP_AMAX_EPS)
        t = xf * inv
        s = np.float32(1) / inv
    q = to_int(t, _dt.int8, mode=numerics.round_mode, saturate=numerics.saturate, lo=-127, hi=127, nan_value=nan_code)
    return q, np.ascontiguousarray(s[..., 0], dtype=np.float32)


def gather_rows(rows: list, src: list, tokens: tuple, k: int, h: int) -> tuple[list, list]:
    """Expert rows back to their copies: for each rank r, fp32 ``[T_r, K, H]`` (zeros where nothing
    came back) and bool ``[T_r, K]`` (which copies came back); ``rows[q][i]`` is the copy
    ``src[q][i] = (r, t, k)``."""
    out = [np.zeros((t, k, h), np.float32) for t in tokens]
    present = [np.zeros((t, k), bool) for t in tokens]
    for y, s in zip(rows, src):
        s = np.asarray(s, np.int64).reshape(-1, 3)
        for r in np.unique(s[:, 0]):
            sel = s[:, 0] == r
            out[r][s[sel, 1], s[sel, 2]] = y[sel].astype(np.float32)
            present[r][s[sel, 1], s[sel, 2]] = True
    return out, present


def combine_weights(w: np.ndarray, numerics: Numerics) -> np.ndarray:
    """The fp32 weights the combine multiplies by: as given, or bf16-rounded (``ep_combine_weights``)."""
    w = np.asarray(w, np.float32)
    if numerics.ep_combine_weights == "bfloat16":
        return to_float(w, _dt.bfloat16).astype(np.float32)
    return w


def weighted_sum(rows: np.ndarray, present: np.ndarray, w32: np.ndarray, extra: np.ndarray | None = None) -> np.ndarray:
    """The combine of one rank (ops-transformer ``mc2/moe_distribute_combine_v2/``), fp32 ``[T, H]``::

        acc = +0.0
        for k in 0 .. K-1 (where the copy came back):  acc = acc + fp32(row[t, k]) * w[t, k]   # two roundings
        acc = acc + fp32(extra[t])                                                            # if given, unweighted
    """
    t, k, h = rows.shape
    acc = np.zeros((t, h), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(k):
            term = (rows[:, j] * w32[:, j:j + 1]).astype(np.float32)
            acc = np.where(present[:, j:j + 1], (acc + term).astype(np.float32), acc)
        if extra is not None:
            acc = (acc + extra.astype(np.float32)).astype(np.float32)
    return acc


def comm_quant_roundtrip(y: np.ndarray) -> np.ndarray:
    """``comm_quant_mode = 2``: the int8 return trip of the combine in groups of 8 elements (ops-transformer combine
    ``QuantProcess`` / ``DequantProcess``)::

        s_g  = max_{h in g} |fp32(y_h)| * fp32(1/127)
        q    = int8(rint(fp16(rint-to-fp16(fp32(y) / s_g))))        # divides by the unrounded fp32 s_g
        s_x  = x_dtype(s_g) (RNE);  y' = x_dtype(fp32(fp16(q)) * fp32(s_x))

    An all-zero group (``s_g = 0``: 0 / 0) gets codes 0 (not confirmed). ``y`` is bf16 / fp16 ``[A, H]``
    with ``H % 8 == 0``; returns ``y'`` of y's dtype."""
    a, h = y.shape
    g = y.astype(np.float32).reshape(a, h // 8, 8)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.max(np.abs(g), axis=-1, keepdims=True) * (np.float32(1) / np.float32(127))
        t16 = (g / s).astype(np.float16)
        q = to_int(t16.astype(np.float32), _dt.int8, mode="half_even", lo=-128, hi=127, nan_value=0)
        s_x = to_float(s.astype(np.float32), y.dtype).astype(np.float32)
        out = q.astype(np.float16).astype(np.float32) * s_x
    return to_float(out.astype(np.float32).reshape(a, h), y.dtype)
