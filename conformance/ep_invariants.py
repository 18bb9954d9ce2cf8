"""The invariants of expert-parallel MoE (docs/expert-parallelism.md) as named checks.

Each check takes the **stages** of one EP layer run (the dict :func:`w8a8.w8a8_moe_ep_stages` returns:
per-rank lists ``payload``, ``payload_scale``, ``src``, ``expert_token_nums``, ``ep_recv_counts``,
``counts``, ``sender_quantizer_calls``, ``quantizer_calls``, ``gmm1_x``, ``gmm1_x_scale``, ``gmm2``,
``routed``, ``y`` and ``dispatch``; any implementation that reports those can be checked), the layer's
checked arguments (:func:`w8a8.moe.ep_layer.w8a8_moe_ep_args`: the per-rank hidden, routing and
weights) and the :class:`w8a8.Numerics` of the run, and returns a list of violations in words (empty:
the invariant holds). :data:`INVARIANTS` names them; :func:`violations` runs them all.

The equivalences (Claims A and B, rank-count invariance) re-run the golden layer and are
:func:`claim_a`, :func:`claim_b`, :func:`rank_count_invariance`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import w8a8
from w8a8 import dtypes as _dt
from w8a8.moe.ep_layer import W8a8MoeEpArgs, w8a8_moe_ep_args
from w8a8.rounding import to_float

Check = Callable[[dict, W8a8MoeEpArgs, w8a8.Numerics], list]


def _bits(a) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else a.reshape(-1)


def _same(a, b) -> bool:
    return a is not None and b is not None and a.dtype == b.dtype and a.shape == b.shape and \
        np.array_equal(_bits(a), _bits(b))


def reference_quant(h: np.ndarray, numerics: w8a8.Numerics) -> tuple[np.ndarray, np.ndarray]:
    """What a rank's tokens must become on the INT8 path: ``npu_dynamic_quant``'s main formula
    (``dynamic_quant`` with ``mul_inv`` / ``reciprocal``, no kernel variant), the MC2 sender's (ops-transformer
    ``mc2/moe_distribute_dispatch_v2/`` ``QuantProcess``)."""
    fixed = numerics.replace(variants="fixed", quant_codes="mul_inv", scale_out="reciprocal")
    return w8a8.dynamic_quant(h, numerics=fixed)


def _token_rows(values: list, src: np.ndarray) -> np.ndarray:
    """Per received row (src = (r, t, k)), the row ``values[r][t]``."""
    offsets = np.concatenate([[0], np.cumsum([v.shape[0] for v in values])]).astype(np.int64)
    cat = np.concatenate(values)
    s = np.asarray(src, np.int64).reshape(-1, 3)
    return cat[offsets[s[:, 0]] + s[:, 1]]


def no_second_quantization(stages: dict, a: W8a8MoeEpArgs, numerics: w8a8.Numerics) -> list:
    """INT8 path: each source rank quantizes once; the payload is int8 with its fp32 scale; every
    received row is the reference quantization of its token, bit for bit; the expert rank's quantizer
    runs 0 times and GMM1's input is exactly (payload, scale). Nothing to check on the bf16 path."""
    if stages["dispatch"] != "int8":
        return []
    out = []
    ref = [reference_quant(h, numerics) for h in a.hidden]
    for r, calls in enumerate(stages["sender_quantizer_calls"]):
        if calls != 1:
            out.append(f"source rank {r} ran the quantizer {calls} times (once expected on the int8 path)")
    for q, (x, s, src) in enumerate(zip(stages["payload"], stages["payload_scale"], stages["src"])):
        if x.dtype != np.int8 or s is None:
            out.append(f"rank {q}: the int8 path delivered {_dt.name(x.dtype)} rows"
                       f"{' without their scale' if s is None else ''} (int8 rows with their fp32 scale expected)")
            continue
        if stages["quantizer_calls"][q] != 0:
            out.append(f"rank {q}: the expert rank ran the quantizer {stages['quantizer_calls'][q]} times on the "
                       "int8 path (0 expected: the runner takes the received scale)")
        if not (_same(stages["gmm1_x"][q], x) and _same(stages["gmm1_x_scale"][q], s)):
            out.append(f"rank {q}: GMM1's input is not the received payload and scale bit for bit")
        want_x, want_s = _token_rows([c for c, _ in ref], src), _token_rows([v for _, v in ref], src)
        bad = np.flatnonzero(np.any(x != want_x, axis=1) | (_bits(s) != _bits(want_s)))
        if bad.size:
            out.append(f"rank {q}: {bad.size} of {len(src)} received rows differ from the sender's reference "
                       f"quantization of their token (first: row {bad[0]}, src {src[bad[0]].tolist()})")
    return out


def bf16_quantizes_once_on_arrival(stages: dict, a: W8a8MoeEpArgs, numerics: w8a8.Numerics) -> list:
    """BF16 path: no quantization by the sender; every received row is its token's bf16 row bit
    for bit; the expert rank's quantizer runs once; GMM1's input is the reference quantization of the
    token (so, by Claim B, what the INT8 path delivers). Nothing to check on the int8 path."""
    if stages["dispatch"] != "bf16":
        return []
    out = []
    ref = [reference_quant(h, numerics) for h in a.hidden]
    for r, calls in enumerate(stages["sender_quantizer_calls"]):
        if calls:
            out.append(f"source rank {r} ran the quantizer {calls} times on the bf16 path (0 expected)")
    for q, (x, src) in enumerate(zip(stages["payload"], stages["src"])):
        if not _same(x, _token_rows(a.hidden, src)):
            out.append(f"rank {q}: the bf16 payload is not its tokens' rows bit for bit")
        if stages["quantizer_calls"][q] != 1:
            out.append(f"rank {q}: the expert rank ran the quantizer {stages['quantizer_calls'][q]} times "
                       "(once expected, on arrival)")
        want_x, want_s = _token_rows([c for c, _ in ref], src), _token_rows([v for _, v in ref], src)
        if not (_same(stages["gmm1_x"][q], want_x) and _same(stages["gmm1_x_scale"][q], want_s)):
            out.append(f"rank {q}: the on-arrival quantization is not the reference (npu_dynamic_quant main "
                       "formula) of the received rows")
    return out


def _copy_values(values: list, src: np.ndarray) -> np.ndarray:
    """Per received row (src = (r, t, k)), the entry ``values[r][t, k]`` of per-rank ``[T_r, K]`` arrays."""
    offsets = np.concatenate([[0], np.cumsum([v.size for v in values])]).astype(np.int64)
    flat = np.concatenate([v.reshape(-1) for v in values])
    k = values[0].shape[1]
    return flat[offsets[src[:, 0]] + src[:, 1] * k + src[:, 2]]


def _flat(src: np.ndarray, k: int) -> np.ndarray:
    return src[:, 1].astype(np.int64) * k + src[:, 2]


def every_copy_arrives_once(stages: dict, a: W8a8MoeEpArgs, numerics: w8a8.Numerics) -> list:
    """The src triples over all ranks are exactly {(r, t, k)}; each on rank ``ids // E_loc`` in the
    block of local expert ``ids % E_loc``; ``sum expert_token_nums = sum T_r K``; ``ep_recv_counts`` is the
    (l, source) row-major cumulative count of the rows received, ending at A_q."""
    out = []
    got = np.concatenate([np.asarray(s, np.int64).reshape(-1, 3) for s in stages["src"]])
    want = np.concatenate([np.stack([np.full(i.size, r), np.arange(i.size) // a.k, np.arange(i.size) % a.k], 1)
                           for r, i in enumerate(a.topk_ids)]) if a.topk_ids else np.zeros((0, 3), np.int64)
    key = lambda v: sorted(map(tuple, v.tolist()))  # noqa: E731
    if key(got) != key(want):
        out.append(f"the received (rank, token, k) copies are not each valid copy exactly once ({len(got)} received, "
                   f"{len(want)} sent)")
    total = sum(int(np.sum(e)) for e in stages["expert_token_nums"])
    if total != sum(i.size for i in a.topk_ids):
        out.append(f"sum of expert_token_nums is {total}, not sum T_r K = {sum(i.size for i in a.topk_ids)}")
    for q, (src, etn, erc) in enumerate(zip(stages["src"], stages["expert_token_nums"], stages["ep_recv_counts"])):
        src = np.asarray(src, np.int64).reshape(-1, 3)
        local = np.repeat(np.arange(a.e_loc), np.asarray(etn, np.int64)) if int(np.sum(etn)) == len(src) else None
        if local is None:
            out.append(f"rank {q}: expert_token_nums sum to {int(np.sum(etn))}, not the {len(src)} rows received")
            continue
        ids = _copy_values([i.astype(np.int64) for i in a.topk_ids], src)
        wrong = np.flatnonzero((ids // a.e_loc != q) | (ids % a.e_loc != local))
        if wrong.size:
            out.append(f"rank {q}: {wrong.size} rows are on the wrong rank or in the wrong local-expert block "
                       f"(first: row {wrong[0]}, src {src[wrong[0]].tolist()}, expert {int(ids[wrong[0]])})")
        blocks = np.bincount(src[:, 0] * a.e_loc + local, minlength=a.ranks * a.e_loc).reshape(a.ranks, a.e_loc)
        if not np.array_equal(np.asarray(erc, np.int64), np.cumsum(blocks.T.ravel())):
            out.append(f"rank {q}: ep_recv_counts {np.asarray(erc).tolist()} is not the (l, source) cumulative "
                       f"count {np.cumsum(blocks.T.ravel()).tolist()}")
    return out


def canonical_order(stages: dict, a: W8a8MoeEpArgs, numerics: w8a8.Numerics) -> list:
    """Each rank's rows are strictly ascending in (local expert, source rank, t K + k)."""
    out = []
    for q, (src, etn) in enumerate(zip(stages["src"], stages["expert_token_nums"])):
        src = np.asarray(src, np.int64).reshape(-1, 3)
        if int(np.sum(etn)) != len(src):
            continue  # reported by every_copy_arrives_once
        local = np.repeat(np.arange(a.e_loc), np.asarray(etn, np.int64))
        key = (local * a.ranks + src[:, 0]) * (a.k * (max(i.shape[0] for i in a.topk_ids) + 1)) + _flat(src, a.k)
        bad = np.flatnonzero(np.diff(key) <= 0)
        if bad.size:
            out.append(f"rank {q}: rows {bad[0]} and {bad[0] + 1} are out of the canonical (l, source, f) order "
                       f"({src[bad[0]].tolist()} then {src[bad[0] + 1].tolist()})")
    return out


def combine_formula(stages: dict, a: W8a8MoeEpArgs, numerics: w8a8.Numerics) -> list:
    """Each token's routed output is ``bf16(sum_k fp32(row) * w)`` with the fp32
    weights as given, from +0 in ascending k, recomputed here from the expert rows (``gmm2``) and their
    src triples; a combine that rounds the weights to bf16 or sums in another order fails."""
    out = []
    rows = [np.zeros((i.shape[0], a.k, a.h), np.float32) for i in a.topk_ids]
    for y, src in zip(stages["gmm2"], stages["src"]):
        s = np.asarray(src, np.int64).reshape(-1, 3)
        for r in np.unique(s[:, 0]):
            sel = s[:, 0] == r
            rows[r][s[sel, 1], s[sel, 2]] = y[sel].astype(np.float32)
    for r, (w, got) in enumerate(zip(a.topk_weights, stages["routed"])):
        acc = np.zeros((w.shape[0], a.h), np.float32)
        for k in range(a.k):
            acc = (acc + (rows[r][:, k] * w[:, k:k + 1]).astype(np.float32)).astype(np.float32)
        want = to_float(acc, _dt.bfloat16)
        bad = np.flatnonzero(np.any(_bits(got).reshape(want.shape) != _bits(want).reshape(want.shape), axis=1)) \
            if want.size else np.zeros(0, int)
        if bad.size:
            out.append(f"rank {r}: {bad.size} of {w.shape[0]} tokens' combined outputs are not the fp32-weight sum "
                       f"from +0 in k order (first: token {bad[0]})")
    return out


def combine_restores_token_order(a: W8a8MoeEpArgs, dispatcher=None, combiner=None) -> list:
    """With identity experts (each expert returns its bf16 row), bf16 dispatch and one-hot weights,
    ``combine(dispatch(h)) == h`` bit for bit on every rank."""
    from w8a8.moe import ep_layer as L

    one_hot = [np.eye(a.k, dtype=np.float32)[np.zeros(i.shape[0], int)] for i in a.topk_ids]
    b = w8a8_moe_ep_args(a.hidden, a.experts.w13, a.experts.w13_scale, a.experts.w2, a.experts.w2_scale,
                         topk_ids=a.topk_ids, topk_weights=one_hot, dispatch="bf16")
    recv, _ = (dispatcher or L.ep_dispatch)(b, w8a8.ASCEND)
    back = (combiner or L.ep_combine)([rv.x for rv in recv], recv, b, w8a8.ASCEND)
    return [f"rank {r}: combine(dispatch(h)) with identity experts and one-hot weights is not h"
            for r, (h, y) in enumerate(zip(a.hidden, back)) if not _same(h, y)]


INVARIANTS: dict[str, Check] = {
    "no_second_quantization": no_second_quantization,
    "bf16_quantizes_once_on_arrival": bf16_quantizes_once_on_arrival,
    "every_copy_arrives_once": every_copy_arrives_once,
    "canonical_order": canonical_order,
    "combine_formula": combine_formula,
}
"""The invariants checked on one run's stages, by name."""


def violations(stages: dict, a: W8a8MoeEpArgs, numerics: w8a8.Numerics = w8a8.ASCEND) -> dict[str, list]:
    """``{invariant: [violations]}`` for every check of :data:`INVARIANTS` (an empty list: it holds)."""
    return {name: check(stages, a, numerics) for name, check in INVARIANTS.items()}


# ---------------------------------------------------------------------------------------------------------
# the equivalences: each re-runs the golden layer

def _concat_equal(a: list, b: np.ndarray) -> bool:
    """Bitwise, except that +0 and -0 are equal."""
    x = np.concatenate(a).astype(np.float32) if a else np.zeros((0,) + b.shape[1:], np.float32)
    y = b.astype(np.float32)
    return x.shape == y.shape and np.array_equal(np.where(x == 0, 0, x).view(np.uint32),
                                                 np.where(y == 0, 0, y).view(np.uint32))


def claim_a(a: W8a8MoeEpArgs, numerics: w8a8.Numerics, *, layer: Callable = w8a8.w8a8_moe_ep) -> list:
    """Claim A: ``concat(w8a8_moe_ep(..., dispatch="int8"))`` equals ``w8a8_moe_prequantized(*dynamic_quant(
    concat h), ...)`` (the reference quantization) bit for bit, zeros sign-blind. Holds under these
    conditions: ``ep_dispatch_quant="mc2"``, bf16-grid weights, no smooth scales, ``variants="fixed"``."""
    h = np.concatenate(a.hidden)
    y = layer(a.hidden, a.experts.w13, a.experts.w13_scale, a.experts.w2, a.experts.w2_scale, topk_ids=a.topk_ids,
              topk_weights=a.topk_weights, dispatch="int8", swiglu_limit=a.swiglu_limit, shared_expert=a.shared_expert,
              numerics=numerics)
    ref = w8a8.w8a8_moe_prequantized(
        *reference_quant(h, numerics), a.experts.w13, a.experts.w13_scale, a.experts.w2, a.experts.w2_scale,
        topk_ids=np.concatenate(a.topk_ids), topk_weights=np.concatenate(a.topk_weights), swiglu_limit=a.swiglu_limit,
        shared_expert=a.shared_expert, shared_input=h if a.shared_expert is not None else None, numerics=numerics)
    return [] if _concat_equal(y, ref) else ["Claim A: the int8 EP layer differs from w8a8_moe_prequantized on the "
                                             "reference quantization of the concatenated tokens"]


def claim_b(a: W8a8MoeEpArgs, numerics: w8a8.Numerics, *, layer: Callable = w8a8.w8a8_moe_ep) -> list:
    """Claim B: ``dispatch="bf16"`` equals ``dispatch="int8"`` bit for bit."""
    ys = [layer(a.hidden, a.experts.w13, a.experts.w13_scale, a.experts.w2, a.experts.w2_scale, topk_ids=a.topk_ids,
                topk_weights=a.topk_weights, dispatch=d, swiglu_limit=a.swiglu_limit, shared_expert=a.shared_expert,
                numerics=numerics) for d in ("int8", "bf16")]
    return [] if _concat_equal(ys[0], np.concatenate(ys[1])) else \
        ["Claim B: bf16 dispatch (quantized on arrival) differs from int8 dispatch"]


def rank_count_invariance(a: W8a8MoeEpArgs, numerics: w8a8.Numerics, ranks=(1, 2, 4, 8), *,
                          layer: Callable = w8a8.w8a8_moe_ep) -> list:
    """The same tokens spread over R ranks (contiguously) give the same outputs for every R in ``ranks``
    that divides E (bit for bit, zeros sign-blind)."""
    h, ids, w = (np.concatenate(v) for v in (a.hidden, a.topk_ids, a.topk_weights))
    outs = {}
    for r in ranks:
        if a.experts.e % r:
            continue
        parts = np.array_split(np.arange(h.shape[0]), r)
        y = layer([h[p] for p in parts], a.experts.w13, a.experts.w13_scale, a.experts.w2, a.experts.w2_scale,
                  topk_ids=[ids[p] for p in parts], topk_weights=[w[p] for p in parts], dispatch=a.dispatch,
                  swiglu_limit=a.swiglu_limit, shared_expert=a.shared_expert, numerics=numerics)
        outs[r] = np.concatenate(y)
    first = min(outs)
    return [f"R = {r} differs from R = {first}" for r in outs if not _concat_equal([outs[r]], outs[first])]
