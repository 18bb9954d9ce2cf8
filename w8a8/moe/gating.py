"""MoE gating: ``npu_moe_gating_top_k_softmax`` and ``npu_moe_gating_top_k`` (op-plugin
``test_npu_moe_gating_top_k_softmax.py``; ops-transformer ``moe_gating_top_k_generalized.h``).

Both score the router logits in fp32 and pick the top-k experts per token.

**Tie-breaking (golden choice, pinned by tests).** Among equal scores the lower expert index comes
first (a stable descending sort), and among equal group scores the lower group index. That is what
the op-plugin and CANN goldens do (``argsort(-x, kind="stable")`` / ``torch.sort(stable=True)``); the
device sorts (``Sort32`` + ``MrgSort``) are not documented to be stable, so a kernel may pick a
different one of two *exactly* equal scores — the CANN test harness itself re-canonicalises such
ties before comparing. Conformance should treat a swap between exactly equal scores as a tie, not
a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from ..rounding import to_float
from ..variants import calls as _variants
from . import _common as C

__all__ = ["moe_gating_top_k_softmax", "moe_gating_top_k"]

_MAX_E = 2048


def _topk_desc(score: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries per row, stable: equal scores keep ascending index order."""
    order = np.argsort(-score, axis=-1, kind="stable")
    return order[..., :k]


@dataclass(frozen=True)
class MoeGatingTopKSoftmaxArgs:
    """The checked arguments of :func:`moe_gating_top_k_softmax` (see :func:`moe_gating_top_k_softmax_args`)."""

    x: np.ndarray                  # [N, E] or [B, S, E], float16 / bfloat16 / float32, finite
    k: int                         # 1 <= k <= min(E, 1024)
    finished: np.ndarray | None    # bool of x.shape[:-1]


def moe_gating_top_k_softmax_args(x, finished=None, k=1, *, numerics: Numerics = ASCEND) -> MoeGatingTopKSoftmaxArgs:
    """The argument checks of :func:`moe_gating_top_k_softmax`, in its order, with its errors.

    Every implementation of the op (the golden, backends) calls this first: TypeError for dtypes,
    ValueError for rank, ``k``, ``finished``'s shape, NaN/Inf in x under ``nan_policy="raise"``.
    """
    op = "moe_gating_top_k_softmax"
    C.check_numerics(op, numerics)
    x = _check.array(op, "x", x, dtypes=C.FLOATS, min_ndim=2, max_ndim=3)
    e = x.shape[-1]
    k = _check.integer(op, "k", k, minimum=1, maximum=min(e, 1024))
    fin = _check.optional(op, "finished", finished, dtypes=(np.bool_,))
    if fin is not None:
        _check.shape(op, "finished", fin, [x.shape[:-1]], f"of shape x.shape[:-1] = {tuple(x.shape[:-1])}")
    C.check_finite(op, "x", x, numerics)
    return MoeGatingTopKSoftmaxArgs(x=x, k=k, finished=fin)


@dataclass(frozen=True)
class MoeGatingTopKArgs:
    """The checked arguments of :func:`moe_gating_top_k` (see :func:`moe_gating_top_k_args`)."""

    x: np.ndarray                      # [N, E], float16 / bfloat16 / float32, finite
    k: int                             # experts per token
    bias: np.ndarray | None            # [E], x's dtype, finite
    hashed: bool                       # hash mode: expert_idx = tid2eid[input_ids]
    input_ids: np.ndarray | None       # [N] int32 / int64, in [0, num_keys)
    tid2eid: np.ndarray | None         # [num_keys, k] int32 / int64, in [0, E)
    k_group: int                       # groups kept, 1 <= k_group <= group_count
    group_count: int                   # equal expert groups, a divisor of E
    per_group: int                     # E / group_count
    group_select_mode: int             # 0 max, 1 sum of the top two
    renorm: int                        # 0 or 1 (1 renormalises softmax scores too)
    norm_type: int                     # 0 softmax, 1 sigmoid, 2 sqrt-softplus
    out_flag: bool                     # whether the device writes norm_out
    routed_scaling_factor: np.float32  # as the formula uses it (fp32)
    eps: np.float32                    # as the formula uses it (fp32)


def moe_gating_top_k_args(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
                          group_select_mode=0, renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0,
                          eps=1e-20, numerics: Numerics = ASCEND) -> MoeGatingTopKArgs:
    """The argument checks of :func:`moe_gating_top_k`, in its order, with its errors.

    Every implementation of the op (the golden, backends) calls this first. TypeError for dtypes;
    ValueError for shapes and every range of the op's docstring, NaN/Inf under ``nan_policy="raise"``.
    ``routed_scaling_factor`` and ``eps`` come back as the fp32 values the formula uses.
    """
    op = "moe_gating_top_k"
    C.check_numerics(op, numerics)
    x = _check.array(op, "x", x, dtypes=C.FLOATS, ndim=2)
    n, e = x.shape
    if not 1 <= e <= _MAX_E:
        _check.fail(op, "x", f"of last dimension (experts) in [1, {_MAX_E}]", _check.describe(x))
    group_count = _check.integer(op, "group_count", group_count, minimum=1)
    if e % group_count:
        _check.fail(op, "group_count", f"a divisor of the expert count {e}", str(group_count))
    per_group = e // group_count
    if -(-per_group // 32) * 32 * group_count > _MAX_E:
        _check.fail(op, "group_count", f"such that ceil32(E / group_count) * group_count <= {_MAX_E}",
                    f"{group_count} (E = {e})")
    k_group = _check.integer(op, "k_group", k_group, minimum=1, maximum=group_count)
    group_select_mode = _check.choice(op, "group_select_mode", group_select_mode, (0, 1))
    if group_select_mode == 1 and group_count > 1 and per_group < 2:
        _check.fail(op, "group_count", "at most E / 2 groups with group_select_mode=1 (top-2 sum per group)",
                    f"{group_count} groups of {per_group} expert")
    renorm = _check.choice(op, "renorm", renorm, (0, 1))
    norm_type = _check.choice(op, "norm_type", norm_type, (0, 1, 2))
    out_flag = C.boolean(op, "out_flag", out_flag)
    rsf = np.float32(C.real(op, "routed_scaling_factor", routed_scaling_factor))
    eps32 = np.float32(C.real(op, "eps", eps))
    hashed = input_ids is not None or tid2eid is not None
    ids = table = None
    if hashed:
        if input_ids is None or tid2eid is None:
            missing = "input_ids" if input_ids is None else "tid2eid"
            _check.fail(op, missing, "given together with the other hash-mode argument (input_ids and tid2eid)", "None")
        k = _check.integer(op, "k", k, minimum=1, maximum=min(64, e))
        if not (k_group == group_count or group_count == e):
            _check.fail(op, "k_group", "equal to group_count (or group_count == E) in hash mode", str(k_group))
        ids = _check.array(op, "input_ids", input_ids, dtypes=(_dt.int32, _dt.int64), ndim=1)
        table = _check.array(op, "tid2eid", tid2eid, dtypes=(_dt.int32, _dt.int64), ndim=2)
        if ids.shape[0] != n:
            _check.fail(op, "input_ids", f"of shape [N] = [{n}]", _check.describe(ids))
        if table.shape[1] != k:
            _check.fail(op, "tid2eid", f"of shape [num_keys, k] = [*, {k}]", _check.describe(table))
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            _check.fail(op, "input_ids", f"in [0, {table.shape[0]}) (rows of tid2eid)", f"{ids.tolist()[:16]}")
        if table.size and (table.min() < 0 or table.max() >= e):
            _check.fail(op, "tid2eid", f"expert ids in [0, {e})", f"values in [{table.min()}, {table.max()}]")
    else:
        k = _check.integer(op, "k", k, minimum=1, maximum=per_group * k_group)
    b = _check.optional(op, "bias", bias, dtypes=(x.dtype,), ndim=1)
    if b is not None and b.shape[0] != e:
        _check.fail(op, "bias", f"of shape [E] = [{e}]", _check.describe(b))
    C.check_finite(op, "x", x, numerics)
    C.check_finite(op, "bias", b, numerics)
    return MoeGatingTopKArgs(x=x, k=k, bias=b, hashed=hashed, input_ids=ids, tid2eid=table, k_group=k_group,
                          group_count=group_count, per_group=per_group, group_select_mode=group_select_mode,
                          renorm=renorm, norm_type=norm_type, out_flag=out_flag, routed_scaling_factor=rsf, eps=eps32)


@golden_op("moe", check=moe_gating_top_k_softmax_args, mirrors="torch_npu.npu_moe_gating_top_k_softmax")
def moe_gating_top_k_softmax(x: np.ndarray, finished: np.ndarray | None = None, k: int = 1, *,
                             numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Softmax then top-k, mirroring ``torch_npu.npu_moe_gating_top_k_softmax`` (no renormalisation).

    Parameters
    ----------
    x : float16 / bfloat16 / float32, 2-D ``[N, E]`` or 3-D ``[B, S, E]`` router logits.
    finished : optional bool of shape ``x.shape[:-1]``: rows marked True get expert id ``E``.
    k : experts per row, ``1 <= k <= min(E, 1024)``.
    numerics : fields used: ``transcendental`` (exp), ``nan_policy``; the template
        (:func:`w8a8.variants.select`) decides ``gating_precision``.

    Returns
    -------
    y : x's dtype, shape ``x.shape[:-1] + (k,)``: the top-k softmax probabilities, descending.
    expert_idx : int32, same shape: their expert ids (``E`` on finished rows).
    row_idx : int32, same shape: ``row_idx[t, j] = j * N + t`` with ``N`` the number of rows (for
        3-D input, ``N = B * S`` over the flattened rows) — the column-major source ids that
        :func:`moe_init_routing` (v1) takes.

    Formula (fp32; op-plugin golden and ``moe_gating_top_k_softmax_perf.h``)::

        xf = fp32(x);  e = exp(xf - max_j xf);  p = e / sum_j e     # vector division
        expert_idx = stable top-k of p (ties: lower expert index first)
        y = cast(p[expert_idx] -> x.dtype, RNE)

    Templates (ops-transformer ``moe_gating_top_k_softmax`` tiling, :mod:`w8a8.variants.moe`): the perf kernel (``(E <= 1024 and E % 8 == 0 and k <= 8) or E < 8``)
    ranks the fp32 probabilities. Outside it the full-load kernels run ``SoftMax<half>`` /
    ``TopK<half>`` on fp16 logits: the probabilities are rounded to fp16 **before** ranking
    (``gating_precision="fp16"``), so probabilities that differ only below fp16 precision tie and the
    lower expert index wins; bf16 and fp32 logits are ranked in fp32 there too.

    The row sum is taken in float64 and rounded once to fp32 (the device sums fp32 partials in a
    tree: a few-ulp difference). ``y`` of a finished row keeps its softmax values; only its ids
    change.

    Errors: TypeError for dtypes; ValueError for rank, k, finished's shape, NaN/Inf in x under
    ``nan_policy="raise"``.
    """
    a = moe_gating_top_k_softmax_args(x, finished, k, numerics=numerics)
    n16 = _variants.moe_gating_top_k_softmax(a, numerics).numerics(numerics).gating_precision == "fp16"
    x, k, fin = a.x, a.k, a.finished
    e = x.shape[-1]
    xf = x.reshape(-1, e).astype(np.float32)
    n = xf.shape[0]
    with np.errstate(invalid="ignore"):
        shifted = xf - xf.max(axis=-1, keepdims=True) if xf.size else xf
    ex = C.exp(shifted, numerics)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = ex / C.sum_f32(ex)
    if n16 and x.dtype == _dt.float16:  # SoftMax<half> then TopK<half>: rank the fp16 probabilities
        p = p.astype(np.float16).astype(np.float32)
    idx = _topk_desc(p, k)
    y = to_float(np.take_along_axis(p, idx, axis=-1), x.dtype)
    expert_idx = idx.astype(np.int32)
    if fin is not None:
        expert_idx[fin.reshape(-1)] = e
    row_idx = (np.arange(k, dtype=np.int32)[None, :] * n + np.arange(n, dtype=np.int32)[:, None])
    shape = x.shape[:-1] + (k,)
    return y.reshape(shape), expert_idx.reshape(shape), row_idx.astype(np.int32).reshape(shape)


@golden_op("moe", check=moe_gating_top_k_args, mirrors="torch_npu.npu_moe_gating_top_k")
def moe_gating_top_k(x: np.ndarray, k: int, *, bias: np.ndarray | None = None, input_ids: np.ndarray | None = None,
                     tid2eid: np.ndarray | None = None, k_group: int = 1, group_count: int = 1,
                     group_select_mode: int = 0, renorm: int = 0, norm_type: int = 0, out_flag: bool = False,
                     routed_scaling_factor: float = 1.0, eps: float = 1e-20,
                     numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Grouped, biased top-k gating, mirroring ``torch_npu.npu_moe_gating_top_k``.

    Parameters
    ----------
    x : float16 / bfloat16 / float32 ``[N, E]`` router logits, ``E <= 2048``.
    k : experts per token, ``1 <= k <= E / group_count * k_group`` (hash mode: ``k <= 64``).
    bias : optional ``[E]`` of x's dtype: the correction bias, used for **selection only**.
    input_ids, tid2eid : hash mode (both or neither): int32/int64 ``[N]`` token ids and
        int32/int64 ``[num_keys, k]`` table; ``expert_idx = tid2eid[input_ids]``, no sorting.
        Only with the simplified grouping (``k_group == group_count`` or ``group_count == E``).
    k_group, group_count : keep the best ``k_group`` of ``group_count`` equal expert groups
        (``E % group_count == 0``, ``ceil32(E / group_count) * group_count <= 2048``).
    group_select_mode : group score: 0 = max of the group, 1 = sum of its top two
        (``E / group_count >= 2`` then).
    renorm : 0 or 1; 1 renormalises softmax scores too (newer kernels, ``aclnnMoeGatingTopKV2``;
        older CANN accepts only 0). Sigmoid / sqrt-softplus scores are always renormalised.
    norm_type : 0 softmax, 1 sigmoid, 2 ``sqrt(softplus(x))`` (DeepSeek-V4's score,
        ``aclnnMoeGatingTopKV2``).
    out_flag : whether the device writes ``norm_out``. The golden always returns the scores there;
        with ``out_flag=False`` the device leaves it unwritten, so conformance must not compare it.
    routed_scaling_factor, eps : see the formula.
    numerics : fields used: ``transcendental``, ``nan_policy``.

    Returns
    -------
    y : x's dtype ``[N, k]``; expert_idx : int32 ``[N, k]``; norm_out : float32 ``[N, E]``.

    Formula (fp32; kernel ``moe_gating_top_k_generalized.h``)::

        s   = softmax: exp(xf - max) * (1 / sum exp)         # reciprocal then multiply (Muls)
              sigmoid: 1 / (1 + exp(-xf));  sqrtsoftplus: sqrt(max(xf, 0) + log1p(exp(-|xf|)))
        sel = s + fp32(bias)                                  # selection only
        groups (group_count > 1): score_g = max(sel_g) or top1 + top2; keep the k_group best
              groups (stable: lower group first), the other experts' sel = -inf
        idx = stable top-k of sel (ties: lower expert first)  # or tid2eid[input_ids]
        w   = s[idx]                                          # the pre-bias scores
        w   = w / (sum(w) + eps)     if norm_type in (1, 2) or renorm == 1   # vector division
        y   = cast(w * fp32(routed_scaling_factor) -> x.dtype, RINT)

    The README formula renormalises softmax too; the kernel and the op-plugin golden do not
    (ops-transformer ``moe_gating_top_k_generalized.h:529``: ``if (normType == 1)``): the kernel is followed. Sums are
    float64 rounded once to fp32.

    Errors: TypeError for dtypes; ValueError for shapes and every range above, NaN/Inf under
    ``nan_policy="raise"``.
    """
    a = moe_gating_top_k_args(x, k, bias=bias, input_ids=input_ids, tid2eid=tid2eid, k_group=k_group,
                              group_count=group_count, group_select_mode=group_select_mode, renorm=renorm,
                              norm_type=norm_type, out_flag=out_flag, routed_scaling_factor=routed_scaling_factor,
                              eps=eps, numerics=numerics)
    x, k, b = a.x, a.k, a.bias
    n, e = x.shape
    norm_type, group_count, per_group = a.norm_type, a.group_count, a.per_group

    xf = x.astype(np.float32)
    if norm_type == 0:
        with np.errstate(invalid="ignore"):
            shifted = xf - xf.max(axis=-1, keepdims=True) if xf.size else xf
        ex = C.exp(shifted, numerics)
        with np.errstate(divide="ignore", over="ignore"):
            s = ex * (np.float32(1) / C.sum_f32(ex))
    elif norm_type == 1:
        s = C.sigmoid(xf, numerics)
    else:
        with np.errstate(over="ignore"):
            softplus = np.maximum(xf, np.float32(0)) + C.log1p(C.exp(-np.abs(xf), numerics), numerics)
        s = np.sqrt(softplus)
    s = s.astype(np.float32)

    if a.hashed:
        idx = a.tid2eid[a.input_ids].astype(np.int64)
    else:
        sel = s + b.astype(np.float32) if b is not None else s
        if group_count > 1:
            grouped = sel.reshape(n, group_count, per_group)
            if a.group_select_mode == 0:
                gscore = grouped.max(axis=-1)
            else:
                top2 = -np.sort(-grouped, axis=-1)[..., :2]
                gscore = top2[..., 0] + top2[..., 1]
            keep = _topk_desc(gscore, a.k_group)
            mask = np.ones((n, group_count), dtype=bool)
            np.put_along_axis(mask, keep, False, axis=-1)
            sel = np.where(mask[..., None], np.float32(-np.inf), grouped).reshape(n, e)
        idx = _topk_desc(sel, k)
    w = np.take_along_axis(s, idx, axis=-1)
    if norm_type in (1, 2) or a.renorm == 1:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            w = w / (C.sum_f32(w) + a.eps)
    with np.errstate(over="ignore"):
        w = (w * a.routed_scaling_factor).astype(np.float32)
    return to_float(w, x.dtype), idx.astype(np.int32), s
