"""MoE token routing: ``npu_moe_init_routing`` (v1) and ``npu_moe_init_routing_v2`` (op-plugin
``test_npu_moe_init_routing.py``, ``MoeInitRoutingV2KernelNpuOpApi.cpp``; ops-transformer ``moe/moe_init_routing_v3/``).

Both sort the ``N * K`` (token, slot) pairs by expert id with a **stable** sort and gather the token
rows into expert order. They differ in how a (token, slot) pair is numbered:

* v1 takes the ``row_idx`` of :func:`moe_gating_top_k_softmax`, which numbers slot ``j`` of token
  ``t`` as ``j * N + t`` (column-major), and sorts the row-major flattening of ``expert_idx`` with
  those values attached;
* v2 numbers it ``t * K + j`` (token-major) itself.

:func:`dispatch_quant` is the golden's model of an int8 token dispatch (SGLang's ascend_tp dispatcher
and the INT8 DeepEP dispatch): the same per-row dynamic quantization as ``quant_mode=1``, applied to
the tokens before they are copied to experts. Copies of one token share codes and scale, so
quantize-then-gather equals gather-then-quantize bit for bit (without smooth scales).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..dynamic_quant import RowQuant, quantize_rows
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from ..rounding import to_int
from ..variants import calls as _variants
from ..variants import moe as _variant_rules
from . import _common as C

__all__ = ["moe_init_routing", "moe_init_routing_v2", "moe_init_routing_v2_valid", "dispatch_quant"]

_X_DTYPES = C.FLOATS
_V2_X_DTYPES = C.FLOATS + (_dt.int8,)
_MAX_EXPERT = 10240


@dataclass(frozen=True)
class MoeInitRoutingArgs:
    """The checked arguments of :func:`moe_init_routing` (see :func:`moe_init_routing_args`)."""

    x: np.ndarray            # [N, H] float16 / bfloat16 / float32
    row_idx: np.ndarray      # [N, K] int32, a permutation of 0 .. N*K-1
    expert_idx: np.ndarray   # [N, K] int32
    active_num: int          # >= 0


def moe_init_routing_args(x, row_idx, expert_idx, active_num) -> MoeInitRoutingArgs:
    """The argument checks of :func:`moe_init_routing` (v1), in its order, with its errors.

    TypeError for dtypes; ValueError for shapes, a ``row_idx`` that is not a permutation of
    ``0 .. N*K-1``, a negative ``active_num``.
    """
    op = "moe_init_routing"
    x = _check.array(op, "x", x, dtypes=_X_DTYPES, ndim=2)
    n = x.shape[0]
    row_idx = _check.array(op, "row_idx", row_idx, dtypes=(_dt.int32,), ndim=2)
    expert_idx = _check.array(op, "expert_idx", expert_idx, dtypes=(_dt.int32,), ndim=2)
    if row_idx.shape[0] != n:
        _check.fail(op, "row_idx", f"of shape [N, K] with N = {n} (rows of x)", _check.describe(row_idx))
    _check.same_shape(op, "expert_idx", expert_idx, "row_idx", row_idx)
    active_num = _check.integer(op, "active_num", active_num, minimum=0)
    nk = row_idx.size
    if nk and not np.array_equal(np.sort(row_idx.reshape(-1).astype(np.int64)), np.arange(nk)):
        _check.fail(op, "row_idx", f"a permutation of 0 .. N*K-1 = 0 .. {nk - 1}", f"{row_idx.reshape(-1).tolist()[:16]}")
    return MoeInitRoutingArgs(x=x, row_idx=row_idx, expert_idx=expert_idx, active_num=active_num)


@golden_op("moe", check=moe_init_routing_args, mirrors="torch_npu.npu_moe_init_routing")
def moe_init_routing(x: np.ndarray, row_idx: np.ndarray, expert_idx: np.ndarray,
                     active_num: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Routing v1, mirroring ``torch_npu.npu_moe_init_routing``.

    Parameters
    ----------
    x : float16 / bfloat16 / float32 ``[N, H]`` tokens.
    row_idx : int32 ``[N, K]``, a permutation of ``0 .. N*K-1`` (normally ``row_idx[t, j] = j*N + t``
        from :func:`moe_gating_top_k_softmax`).
    expert_idx : int32 ``[N, K]`` expert ids (any int32; they are only sorted).
    active_num : int >= 0; ``expanded_x`` keeps ``min(active_num, N) * K`` rows.

    Returns
    -------
    expanded_x : x's dtype ``[min(active_num, N) * K, H]``;
    expanded_row_idx : int32 ``[N * K]``, ``expanded_row_idx[src] = dst`` (src = a row_idx value);
    expanded_expert_idx : int32 ``[N * K]``, the sorted expert ids.

    Formula (op-plugin doc / test golden)::

        order = stable_argsort(expert_idx.reshape(-1))       # row-major flattening
        expanded_expert_idx = expert_idx.reshape(-1)[order]
        dst_to_src = row_idx.reshape(-1)[order]
        expanded_row_idx[dst_to_src] = arange(N * K)
        expanded_x = x[dst_to_src[:min(active_num, N) * K] % N]

    Errors: TypeError for dtypes; ValueError for shapes, a row_idx that is not a permutation,
    a negative active_num.
    """
    a = moe_init_routing_args(x, row_idx, expert_idx, active_num)
    x, row_idx, expert_idx, active_num = a.x, a.row_idx, a.expert_idx, a.active_num
    n, nk = x.shape[0], row_idx.size
    flat_rows = row_idx.reshape(-1).astype(np.int64)
    flat_experts = expert_idx.reshape(-1)
    order = np.argsort(flat_experts, kind="stable")
    dst_to_src = flat_rows[order]
    expanded_row_idx = np.empty(nk, dtype=np.int32)
    expanded_row_idx[dst_to_src] = np.arange(nk, dtype=np.int32)
    rows = min(active_num, n) * row_idx.shape[1]
    expanded_x = x[dst_to_src[:rows] % max(n, 1)]
    return expanded_x, expanded_row_idx, flat_experts[order].astype(np.int32)


def _routing_quant(xf: np.ndarray, numerics: Numerics) -> tuple[np.ndarray, np.ndarray]:
    """Per-row dynamic int8 quantization of ``moe_init_routing_v2(quant_mode=1)`` (fp32 rows in).

    ``scale = rowmax|xf| / 127`` (scalar fp32 division), ``t = xf / scale`` (vector division), then
    per :attr:`Numerics.routing_quant_round`: ``"half_even"`` RINT, or ``"trunc_fp16_half_away"``
    fp32 -> fp16 toward zero then fp16 -> int8 half away from zero. An all-zero row has scale 0
    and codes ``numerics.zero_row`` (0 by default).
    """
    nan_code = 0 if numerics.zero_row == "zero" else -128
    if numerics.routing_quant_round == "half_even":
        return quantize_rows(xf, RowQuant(127, codes="div_scale", scale="amax_div", round_mode="half_even",
                                          nan_code=nan_code, saturate=numerics.saturate))
    _, scale = quantize_rows(xf, RowQuant(127, codes="div_scale", scale="amax_div", nan_code=nan_code,
                                          saturate=numerics.saturate))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = xf / scale[..., None]
    h = _trunc_to_fp16(t)
    y = to_int(h.astype(np.float32), _dt.int8, mode="half_away", lo=-127, hi=127,
               saturate=numerics.saturate, nan_value=nan_code)
    return y, scale


def _trunc_to_fp16(t32: np.ndarray) -> np.ndarray:
    """fp32 -> fp16 rounding toward zero (``CAST_TRUNC``): RNE, then one step back where it rounded away."""
    with np.errstate(over="ignore", invalid="ignore"):
        h = t32.astype(np.float16)
        away = np.abs(h.astype(np.float32)) > np.abs(t32)
        return np.where(away, np.nextafter(h, np.float16(0)), h)


@dataclass(frozen=True)
class DispatchQuantArgs:
    """The checked argument of :func:`dispatch_quant` (:func:`dispatch_quant_args`)."""

    hidden: np.ndarray      # [T, H] float16 / bfloat16 / float32 (as given)


def dispatch_quant_args(hidden, *, numerics: Numerics = ASCEND) -> DispatchQuantArgs:
    """The argument checks of :func:`dispatch_quant` (TypeError for the dtype, ValueError for the rank
    and NaN/Inf under ``nan_policy="raise"``)."""
    op = "dispatch_quant"
    C.check_numerics(op, numerics)
    hidden = _check.array(op, "hidden", hidden, dtypes=_X_DTYPES, ndim=2)
    C.check_finite(op, "hidden", hidden, numerics)
    return DispatchQuantArgs(hidden=hidden)


def dispatch_quant(hidden: np.ndarray, *, numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray]:
    """The golden's model of an int8 token dispatch: per-token dynamic quantization of ``hidden``.

    Parameters
    ----------
    hidden : float16 / bfloat16 / float32 ``[T, H]``.
    numerics : fields used: ``routing_quant_round`` (decided, under ``variants="select"``, as for
        :func:`moe_init_routing_v2`'s gather kernel), ``zero_row``, ``saturate``, ``nan_policy``.

    Returns ``(x_q int8 [T, H], scale float32 [T])`` with exactly the per-row formula of
    :func:`moe_init_routing_v2` ``quant_mode=1`` without smooth scale (its gather kernel: every such
    shape)::

        scale = max_h |fp32(x)| / 127;   t = fp32(x) / scale;   x_q = half_away(fp16_trunc(t))

    so that ``moe_init_routing_v2(*dispatch_quant(h) ..., quant_mode=-1, scale=s)`` and
    ``moe_init_routing_v2(h, ..., quant_mode=1)`` give the same int8 rows and scales. This is a model,
    not the dispatch kernel: ``MoeDistributeDispatchV2::QuantProcess`` (ops-transformer
    ``mc2/moe_distribute_dispatch_v2/op_kernel/moe_distribute_dispatch_v2.h:988-1037`` @ c29bc106)
    quantizes with ``inv = 127 / amax``, ``rint(x * inv)`` and writes ``1 / inv`` (the
    ``npu_dynamic_quant`` main formula), so a device dispatch differs from this model at ties and in
    the last bit of the scale (:mod:`w8a8.variants.moe`).
    """
    hidden = dispatch_quant_args(hidden, numerics=numerics).hidden
    t, h = hidden.shape
    variant = _variant_rules.init_routing_v2(n=t, k=1, h=h, x_dtype=_dt.name(hidden.dtype), quant_mode=1,
                                             scale_shape=None, offset=False, start=0, end=1, expert_num=1,
                                             count_type=1, row_idx_type=0, platform=numerics.platform_record)
    return _routing_quant(hidden.astype(np.float32), variant.numerics(numerics))


def _expert_range(op: str, active_expert_range, expert_num: int) -> tuple[int, int]:
    if active_expert_range is None or (isinstance(active_expert_range, (list, tuple)) and len(active_expert_range) == 0):
        if expert_num <= 0:
            _check.fail(op, "expert_num", "> 0 when active_expert_range is not given (the range is [0, expert_num))",
                        str(expert_num))
        return 0, expert_num
    rng = active_expert_range
    if isinstance(rng, np.ndarray):
        rng = rng.tolist()
    if not isinstance(rng, (list, tuple)) or len(rng) != 2 or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in rng):
        _check.fail(op, "active_expert_range", "two ints [start, end)", repr(active_expert_range))
    start, end = int(rng[0]), int(rng[1])
    if not 0 <= start < end <= _MAX_EXPERT:
        _check.fail(op, "active_expert_range", f"[start, end) with 0 <= start < end <= {_MAX_EXPERT}", repr(list(rng)))
    if expert_num > 0 and end > expert_num:
        _check.fail(op, "active_expert_range", f"within [0, expert_num = {expert_num}]", repr(list(rng)))
    return start, end


@dataclass(frozen=True)
class RoutingV2Options:
    """The checked routing options of :func:`moe_init_routing_v2` (:func:`routing_v2_options`): what the
    sort and the outputs' geometry depend on, shared by the op and its validity masks."""

    expert_idx: np.ndarray        # [N, K] int32 (as given)
    n: int                        # N, the tokens
    k: int                        # K, the slots per token
    drop_pad: bool                # drop_pad_mode == 1
    count_type: int               # expert_tokens_num_type: 0 cumsum, 1 counts, 2 key-value
    count_flag: bool              # expert_tokens_num_flag
    row_idx_type: int             # 0 gather, 1 scatter
    active_num: int               # -1, 0 (all N*K rows) or > 0
    capacity: int                 # expert_capacity (-1 or > 0; > 0 with drop_pad)
    expert_num: int               # -1 or > 0
    start: int                    # active_expert_range [start, end)
    end: int                      # (start < end)
    rows: int                     # rows of expanded_x / expanded_scale (expert_num * C with drop/pad)


def routing_v2_options(op, expert_idx, active_num, expert_capacity, expert_num, drop_pad_mode, expert_tokens_num_type,
                       expert_tokens_num_flag, active_expert_range, row_idx_type) -> RoutingV2Options:
    """The option checks of routing v2, in the op's order (``op`` names the op in the messages)."""
    expert_idx = _check.array(op, "expert_idx", expert_idx, dtypes=(_dt.int32,), ndim=2)
    drop_pad = _check.choice(op, "drop_pad_mode", drop_pad_mode, (0, 1)) == 1
    count_type = _check.choice(op, "expert_tokens_num_type", expert_tokens_num_type, (0, 1, 2))
    count_flag = C.boolean(op, "expert_tokens_num_flag", expert_tokens_num_flag)
    row_idx_type = _check.choice(op, "row_idx_type", row_idx_type, (0, 1))
    active_num = _check.integer(op, "active_num", active_num, minimum=-1)
    expert_capacity = _check.integer(op, "expert_capacity", expert_capacity, minimum=-1)
    expert_num = _check.integer(op, "expert_num", expert_num, minimum=-1, maximum=_MAX_EXPERT)
    if expert_num == 0:
        _check.fail(op, "expert_num", "> 0 (or -1: unused)", "0")
    start, end = _expert_range(op, active_expert_range, expert_num)
    if count_flag and count_type == 2 and expert_num <= 0:
        _check.fail(op, "expert_num", "> 0 with expert_tokens_num_type=2 (the key-value output is [expert_num, 2])",
                    str(expert_num))
    n, k = expert_idx.shape
    if drop_pad:
        if row_idx_type != 0:
            _check.fail(op, "row_idx_type", "0 (gather indices) with drop_pad_mode=1", str(row_idx_type))
        if expert_capacity <= 0:
            _check.fail(op, "expert_capacity", "> 0 with drop_pad_mode=1", str(expert_capacity))
        if expert_num <= 0:
            _check.fail(op, "expert_num", "> 0 with drop_pad_mode=1 (the output is [expert_num, C, H])",
                        str(expert_num))
        rows = expert_num * expert_capacity
    else:
        rows = n * k if active_num <= 0 else min(active_num, n * k)
    return RoutingV2Options(expert_idx=expert_idx, n=n, k=k, drop_pad=drop_pad, count_type=count_type,
                            count_flag=count_flag, row_idx_type=row_idx_type, active_num=active_num,
                            capacity=expert_capacity, expert_num=expert_num, start=start, end=end, rows=rows)


@dataclass(frozen=True)
class MoeInitRoutingV2Args:
    """The checked arguments of :func:`moe_init_routing_v2` and the geometry of its outputs
    (see :func:`moe_init_routing_v2_args`). No routing is done here: the sort is the op's work."""

    x: np.ndarray                 # [N, H]
    h: int                        # H
    quant_mode: int               # -1 none, 0 static, 1 dynamic
    scale: np.ndarray | None      # float32: [N] (quant_mode -1), [1] (0), [end - start, H] or [1, H] (1)
    offset: np.ndarray | None     # float32 [1], quant_mode 0 only
    routing: RoutingV2Options     # the checked routing options (expert_idx, the active range, the row count)

    @property
    def expert_idx(self) -> np.ndarray:
        """int32 ``[N, K]`` (as given)."""
        return self.routing.expert_idx

    @property
    def out_dtype(self) -> np.dtype:
        """dtype of ``expanded_x``: x's, or int8 when quantizing."""
        return self.x.dtype if self.quant_mode == -1 else np.dtype(_dt.int8)

    @property
    def count_shape(self) -> tuple[int, ...]:
        """Shape of ``expert_token_cumsum_or_count``."""
        r = self.routing
        if not r.count_flag:
            return (0,)
        return (r.expert_num, 2) if r.count_type == 2 else (r.end - r.start,)


def moe_init_routing_v2_args(x, expert_idx, *, scale=None, offset=None, active_num=-1, expert_capacity=-1,
                             expert_num=-1, drop_pad_mode=0, expert_tokens_num_type=0, expert_tokens_num_flag=False,
                             quant_mode=-1, active_expert_range=None, row_idx_type=0,
                             numerics: Numerics = ASCEND) -> MoeInitRoutingV2Args:
    """The argument checks of :func:`moe_init_routing_v2`, in its order, with its errors, and the
    checked options (the active range resolved, the output row count).

    Every implementation of the op (the golden, backends) calls this first. TypeError for dtypes;
    ValueError for shapes, ranges, options that do not combine, NaN/Inf under ``nan_policy="raise"``, an
    ``expanded_x`` beyond the allocation budget (:func:`w8a8._check.within_budget`).
    """
    op = "moe_init_routing_v2"
    C.check_numerics(op, numerics)
    x = _check.array(op, "x", x, dtypes=_V2_X_DTYPES, ndim=2)
    quant_mode = _check.choice(op, "quant_mode", quant_mode, (-1, 0, 1))
    opts = routing_v2_options(op, expert_idx, active_num, expert_capacity, expert_num, drop_pad_mode,
                              expert_tokens_num_type, expert_tokens_num_flag, active_expert_range, row_idx_type)
    n, h = x.shape
    if opts.n != n:
        _check.fail(op, "expert_idx", f"of shape [N, K] with N = {n} (rows of x)", _check.describe(expert_idx))
    if x.dtype == _dt.int8 and quant_mode != -1:
        _check.fail(op, "x", "float16, bfloat16 or float32 when quantizing (an int8 x needs quant_mode=-1)",
                    _check.describe(x), TypeError)
    s = _check.optional(op, "scale", scale, dtypes=(_dt.float32,))
    o = _check.optional(op, "offset", offset, dtypes=(_dt.float32,))
    if o is not None and quant_mode != 0:
        _check.fail(op, "offset", "None unless quant_mode=0 (static)", _check.describe(o))
    if quant_mode == -1 and s is not None:
        _check.shape(op, "scale", s, [(n,)], f"of shape [N] = [{n}] (a per-token scale) with quant_mode=-1")
    elif quant_mode == 0:
        if s is None:
            _check.fail(op, "scale", "a float32 [1] static scale with quant_mode=0", "None")
        _check.shape(op, "scale", s, [(1,)], "of shape [1] with quant_mode=0")
        if o is not None:
            _check.shape(op, "offset", o, [(1,)], "of shape [1] with quant_mode=0")
    elif quant_mode == 1 and s is not None:
        width = opts.end - opts.start
        _check.shape(op, "scale", s, [(width, h), (1, h)],
                     f"of shape [end - start, H] = [{width}, {h}] or [1, {h}] (smooth scale)")
    C.check_finite(op, "x", x, numerics)
    for arg, value in (("scale", s), ("offset", o)):
        C.check_finite(op, arg, value, numerics)
    out_itemsize = x.dtype.itemsize if quant_mode == -1 else 1
    # expanded_x [rows, H], expanded_scale [rows] fp32 and the valid-row mask: rows is expert_num * C (drop/pad)
    _check.within_budget(op, "expert_capacity" if opts.drop_pad else "expert_idx", (opts.rows,), h * out_itemsize + 5,
                         f"expanded_x [{opts.rows}, {h}] (with its row scale and mask)")
    return MoeInitRoutingV2Args(x=x, h=h, quant_mode=quant_mode, scale=s, offset=o, routing=opts)


class _Routing:
    """The index work of routing v2 (shared by the op and its validity masks), on checked options ``o``.

    ``full_scatter``: a ``row_idx_type=1`` kernel writes the whole sorted permutation (every sort
    kernel) or only its active entries (the gather-sort perf kernels)."""

    def __init__(self, o: RoutingV2Options, full_scatter: bool = True):
        self.o = o
        nk = o.n * o.k
        flat = o.expert_idx.reshape(-1).astype(np.int64)
        active = (flat >= o.start) & (flat < o.end)
        # Ids below the range go to the very end, ids at or above it after the active ones.
        key = np.where(flat < o.start, np.int64(1) << 40, flat)
        self.order = np.argsort(key, kind="stable")
        self.available = int(active.sum())
        self.sorted_experts = flat[self.order[:self.available]]
        self.flat = flat
        self.active = active
        src = self.order[:self.available]
        if o.drop_pad:
            se = self.sorted_experts
            rank = np.arange(self.available) - np.searchsorted(se, se, side="left")
            keep = rank < o.capacity
            self.src = src[keep]                                  # flat (t*K + j) ids that got a slot
            self.dst = (se[keep] * o.capacity + rank[keep])       # their slot in [expert_num * C]
            self.valid_rows = np.zeros(o.rows, dtype=bool)
            self.valid_rows[self.dst] = True
        else:
            valid = min(o.rows, self.available)
            self.src = src[:valid]
            self.dst = np.arange(valid)
            self.valid_rows = np.zeros(o.rows, dtype=bool)
            self.valid_rows[:valid] = True
        self.row_idx = np.full(nk, -1, dtype=np.int32)
        self.row_idx_valid = np.ones(nk, dtype=bool)
        if o.row_idx_type == 0:
            if o.drop_pad:
                self.row_idx[self.src] = self.dst
            else:
                self.row_idx[src] = np.arange(self.available)
        else:  # the sort kernels write all N*K sorted source ids (moe_v3_sort_one_core.h:52-112)
            self.row_idx[:] = self.order
            if not full_scatter:
                self.row_idx_valid[self.available:] = False

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(expert_token_cumsum_or_count int64, its validity mask)."""
        o = self.o
        if not o.count_flag:
            return np.zeros(0, np.int64), np.zeros(0, bool)
        counts = np.bincount(self.sorted_experts - o.start, minlength=o.end - o.start).astype(np.int64)
        if o.count_type == 1:
            return counts, np.ones(counts.shape, bool)
        if o.count_type == 0:
            return np.cumsum(counts).astype(np.int64), np.ones(counts.shape, bool)
        kv = np.zeros((o.expert_num, 2), np.int64)
        present = np.flatnonzero(counts)
        kv[:present.size, 0] = present + o.start
        kv[:present.size, 1] = counts[present]
        valid = np.zeros(kv.shape, bool)
        valid[:min(present.size + 1, o.expert_num)] = True   # the pairs and the (0, 0) terminator
        return kv, valid


@golden_op("moe", check=moe_init_routing_v2_args, mirrors="torch_npu.npu_moe_init_routing_v2")
def moe_init_routing_v2(x: np.ndarray, expert_idx: np.ndarray, *, scale: np.ndarray | None = None,
                        offset: np.ndarray | None = None, active_num: int = -1, expert_capacity: int = -1,
                        expert_num: int = -1, drop_pad_mode: int = 0, expert_tokens_num_type: int = 0,
                        expert_tokens_num_flag: bool = False, quant_mode: int = -1,
                        active_expert_range=None, row_idx_type: int = 0,
                        numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Routing v2 (with optional int8 quantization), mirroring ``torch_npu.npu_moe_init_routing_v2``.

    Defaults are torch_npu's (master yaml): ``expert_tokens_num_type=0`` (cumsum), ``quant_mode=-1``
    (the 7.0-7.3 yaml had ``quant_mode=0``; a summary table elsewhere said type 1) — serving code passes
    both explicitly, and so should callers.

    Parameters
    ----------
    x : float16 / bfloat16 / float32 / int8 ``[N, H]`` (int8 only with ``quant_mode=-1``).
    expert_idx : int32 ``[N, K]``. Ids outside ``active_expert_range`` are dropped (sorted last).
    scale : float32.
        ``quant_mode=-1``: optional ``[N]`` per-token scale, gathered per expanded row into
        ``expanded_scale`` (the scale of an int8 x from an INT8 dispatch).
        ``quant_mode=0``: ``[1]`` static scale (required).
        ``quant_mode=1``: optional smooth scale ``[end - start, H]`` (row ``e - start`` for expert
        ``e``) or ``[1, H]``.
    offset : float32 ``[1]``, ``quant_mode=0`` only (0 when omitted).
    active_num : -1 or 0 = all ``N*K`` rows; > 0: ``expanded_x`` has ``min(active_num, N*K)`` rows.
        Ignored with ``drop_pad_mode=1``.
    expert_capacity : C, required (> 0) with ``drop_pad_mode=1``.
    expert_num : total experts; needed when ``active_expert_range`` is not given (then the range is
        ``[0, expert_num)``), for ``expert_tokens_num_type=2`` and for ``drop_pad_mode=1``.
    drop_pad_mode : 0 dropless; 1 drop/pad: ``expanded_x`` is ``[expert_num, C, H]``, slot
        ``e*C + r`` holds the r-th (stable order) token of expert e, tokens past C are dropped
        (row index -1), empty slots are zero. (torch_npu documents only 0 as supported.)
    expert_tokens_num_type : 0 cumsum, 1 counts (both ``[end - start]``), 2 key-value
        ``[expert_num, 2]``: ``(expert id, count)`` for experts with tokens, ascending, then one
        ``(0, 0)`` terminator, then zeros (unspecified on the device). Counts are over the whole
        active range, before any capacity drop.
    expert_tokens_num_flag : False: the count output is empty ``(0,)`` int64.
    quant_mode : -1 none, 0 static, 1 dynamic per row.
    active_expert_range : ``[start, end)``, or None / ``[]`` for ``[0, expert_num)``. Pass it
        explicitly on the device (op-plugin ``MoeInitRoutingV2KernelNpuOpApi.cpp``: the adapter caches the first
        call's expert_num).
    row_idx_type : 0 gather (``expanded_row_idx[t*K + j] = dst row``, -1 for dropped pairs);
        1 scatter (``expanded_row_idx[i] = t*K + j`` of sorted position i: the whole stable
        permutation, N*K entries, as the one-core and multi-core sort kernels write it; the
        gather-sort perf kernels — quant_mode -1, count type 1, expert_num 256, a range of at most 32,
        384 <= N <= 8192, k = 8 — write only the first ``available``, the rest unspecified:
        :func:`moe_init_routing_v2_valid`). Must be 0 with drop_pad_mode=1.
    numerics : fields used: ``round_mode`` (static), ``zero_row``, ``saturate``, ``nan_policy``; the
        kernel (:func:`w8a8.variants.select`) decides ``routing_quant_round``.

    Returns
    -------
    expanded_x : ``[rows, H]`` (x's dtype, int8 when quantized) or ``[expert_num, C, H]``;
    expanded_row_idx : int32 ``[N*K]``;
    expert_token_cumsum_or_count : int64 (see above);
    expanded_scale : float32 ``[rows]`` (``[expert_num*C]`` with drop/pad); ``(0,)`` for
        ``quant_mode=0``; zeros for ``quant_mode=-1`` without ``scale`` (unspecified on the device).

    Sort: flat (token-major) ids ``t*K + j`` are stably sorted by expert id, ids below ``start``
    moved past all others; the first ``available = #{start <= id < end}`` sorted pairs are routed.
    ``expanded_x[i] = x[src_i // K]``. Only the first ``min(rows, available)`` rows of a dropless
    ``expanded_x`` / ``expanded_scale`` are written by the device; the golden writes 0 past them
    (:func:`moe_init_routing_v2_valid` gives the masks).

    Quantization (fp32 rows ``xf``; smooth ``xf = fp32(x) * smooth[e - start]``)::

        quant_mode=1: expanded_scale = rowmax|xf| / 127;  t = xf / expanded_scale
                      q = half_away(fp16_trunc(t))       (gather kernel: every shape but the one below)
                        | RINT(t)                        (full-load perf kernel: x [1, 7168] bf16, k = 8,
                                                          smooth scale [256, 7168], key-value counts)
        quant_mode=0: q = round(fp16(fp16(fp16(x) * fp16(scale)) + fp16(offset)))   # fp16 math
                      saturated to [-128, 127] (torch_npu documents static mode as unsupported)

    Errors: TypeError for dtypes; ValueError for shapes, ranges, options that do not combine, NaN/Inf
    under ``nan_policy="raise"``, and an output beyond the golden's allocation budget
    (:func:`w8a8._check.within_budget`, 4 GiB unless ``W8A8_GOLDEN_MAX_BYTES`` says otherwise): the
    ``expanded_x`` of ``expert_num * expert_capacity`` rows (drop/pad) or of ``N*K`` rows is sized before
    anything is allocated, and the message names ``expert_capacity`` (or ``expert_idx``) and the bytes.
    """
    op = "moe_init_routing_v2"
    p = moe_init_routing_v2_args(x, expert_idx, scale=scale, offset=offset, active_num=active_num,
                                 expert_capacity=expert_capacity, expert_num=expert_num, drop_pad_mode=drop_pad_mode,
                                 expert_tokens_num_type=expert_tokens_num_type,
                                 expert_tokens_num_flag=expert_tokens_num_flag, quant_mode=quant_mode,
                                 active_expert_range=active_expert_range, row_idx_type=row_idx_type, numerics=numerics)
    x, s, o, h, quant_mode, r = p.x, p.scale, p.offset, p.h, p.quant_mode, p.routing
    variant = _variants.moe_init_routing_v2(p, numerics)
    numerics = variant.numerics(numerics)
    plan = _Routing(r, _variant_rules.writes_full_scatter(variant))

    tokens = plan.src // max(r.k, 1)
    expanded_x = np.zeros((r.rows, h), dtype=p.out_dtype)
    expanded_scale = np.zeros(r.rows if quant_mode != 0 else 0, dtype=np.float32)
    if quant_mode == -1:
        expanded_x[plan.dst] = x[tokens]
        if s is not None:
            expanded_scale[plan.dst] = s[tokens]
    elif quant_mode == 1:
        xf = x[tokens].astype(np.float32)
        if s is not None:
            smooth = s[0] if s.shape[0] == 1 else s[plan.flat[plan.src] - r.start]
            with np.errstate(over="ignore", invalid="ignore"):
                xf = xf * smooth
            if numerics.nan_policy == "raise" and not np.isfinite(xf).all():
                _check.fail(op, "scale", "such that x * scale stays finite in fp32", "an overflow to Inf")
        q, qs = _routing_quant(xf, numerics)
        expanded_x[plan.dst] = q
        expanded_scale[plan.dst] = qs
    else:
        expanded_x[plan.dst] = _static_quant(x[tokens], s, o, numerics)
    if r.drop_pad:
        expanded_x = expanded_x.reshape(r.expert_num, r.capacity, h)
    counts, _ = plan.counts()
    return expanded_x, plan.row_idx, counts, expanded_scale


def _static_quant(x: np.ndarray, scale: np.ndarray, offset: np.ndarray | None, numerics: Numerics) -> np.ndarray:
    """``round(fp16(fp16(fp16(x) * fp16(s)) + fp16(o)))`` -> int8, every fp16 op rounded once (RNE).

    Each op is computed exactly in float64 (a product of two fp16 is exact there, so is a sum) and
    rounded straight to fp16, i.e. correctly rounded fp16 arithmetic.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        x16 = x.astype(np.float32).astype(np.float16)
        s16 = scale.astype(np.float16)[0]
        o16 = (offset.astype(np.float16)[0] if offset is not None else np.float16(0))
        prod = (x16.astype(np.float64) * np.float64(s16)).astype(np.float16)
        total = (prod.astype(np.float64) + np.float64(o16)).astype(np.float16)
    return to_int(total.astype(np.float32), _dt.int8, mode=numerics.round_mode, saturate=numerics.saturate)


def moe_init_routing_v2_valid(x: np.ndarray, expert_idx: np.ndarray, *, scale: np.ndarray | None = None,
                              offset: np.ndarray | None = None, active_num: int = -1, expert_capacity: int = -1,
                              expert_num: int = -1, drop_pad_mode: int = 0, expert_tokens_num_type: int = 0,
                              expert_tokens_num_flag: bool = False, quant_mode: int = -1,
                              active_expert_range=None, row_idx_type: int = 0,
                              numerics: Numerics = ASCEND) -> tuple[np.ndarray, ...]:
    """Which elements of :func:`moe_init_routing_v2`'s four outputs the device specifies.

    Takes exactly the op's arguments and returns four bool arrays of the outputs' shapes. False
    marks what the device leaves unwritten or undefined (the golden writes zeros / -1 there):
    dropless ``expanded_x`` / ``expanded_scale`` rows past ``min(rows, available)``; the
    ``row_idx_type=1`` entries past ``available`` in the gather-sort perf kernels (the sort kernels
    write all ``N*K``); ``expanded_scale`` entirely for
    ``quant_mode=-1`` without ``scale``; key-value rows past the ``(0, 0)`` terminator. Conformance
    compares only where True.
    """
    op = "moe_init_routing_v2_valid"
    x = _check.array(op, "x", x, dtypes=_V2_X_DTYPES, ndim=2)
    quant_mode = _check.choice(op, "quant_mode", quant_mode, (-1, 0, 1))
    r = routing_v2_options(op, expert_idx, active_num, expert_capacity, expert_num, drop_pad_mode,
                           expert_tokens_num_type, expert_tokens_num_flag, active_expert_range, row_idx_type)
    variant = _variants.routing_v2_kernel(r, h=x.shape[1], x_dtype=x.dtype, quant_mode=quant_mode,
                                          scale_shape=None if scale is None else tuple(np.shape(scale)),
                                          offset=offset is not None, numerics=numerics)
    return _valid(r, x.shape[1], quant_mode, scale is None, _variant_rules.writes_full_scatter(variant))


def moe_init_routing_v2_masks(a: MoeInitRoutingV2Args, numerics: Numerics = ASCEND) -> tuple[np.ndarray, ...]:
    """:func:`moe_init_routing_v2_valid` of a call :func:`moe_init_routing_v2_args` has checked."""
    full = _variant_rules.writes_full_scatter(_variants.moe_init_routing_v2(a, numerics))
    return _valid(a.routing, a.h, a.quant_mode, a.scale is None, full)


def _valid(r: RoutingV2Options, h: int, quant_mode: int, no_scale: bool, full_scatter: bool) -> tuple[np.ndarray, ...]:
    plan = _Routing(r, full_scatter)
    rows = plan.valid_rows if not r.drop_pad else np.ones(r.rows, bool)  # padded slots are zeros
    x_mask = np.broadcast_to(rows[:, None], (r.rows, h))
    if r.drop_pad:
        x_mask = x_mask.reshape(r.expert_num, r.capacity, h)
    if quant_mode == 0:
        scale_mask = np.zeros(0, bool)
    elif quant_mode == -1 and no_scale:
        scale_mask = np.zeros(r.rows, bool)
    else:
        scale_mask = rows.copy()
    _, count_mask = plan.counts()
    return x_mask, plan.row_idx_valid, count_mask, scale_mask
