"""The W8A8 MoE layer in torch: :func:`w8a8.w8a8_moe` and :func:`w8a8.w8a8_moe_prequantized`, bit for bit.

The golden runs the layer as a chain of ops (SGLang's ascend_tp path, :mod:`w8a8.moe.pipeline`): routing ->
``moe_init_routing_v2`` -> GMM1 -> ``dequant_swiglu_quant`` -> GMM2 -> ``moe_finalize_routing`` (+ the
shared expert). Every stage between the routing and the finalize is row-wise, so torch-cpu runs them
**fused, expert by expert**: for the rows of expert ``e`` (a contiguous block after the stable sort by
expert) the exact int8 GEMM with ``W13[e]``, the bf16 GMM1 epilogue, SwiGLU (+ the DeepSeek-V4 clamp)
and the per-row requant, the GEMM with ``W2[e]`` and the bf16 GMM2 epilogue, while the expert's rows are
in cache; the result rows are scattered to token-major order for the finalize. One loop over the
non-empty experts (empty ones skipped), dealt to worker threads that each run whole experts
single-threaded (:func:`_run_experts` says why). The dispatch quantizes each token once and gathers the
codes (the golden quantizes the ``T * k`` gathered copies: the same bits). Each intermediate is rounded
exactly where the golden's op boundary rounds it (GMM1 to bf16, the requant to int8, GMM2 to bf16).

**The fused chain** (the ``vnni`` MoE GEMM path, :mod:`.moe_experts`): the whole per-expert chain above
runs in one C kernel call for all experts (``w8a8_moe_experts`` in ``csrc/w8a8_cpu.c``: the experts taken
dynamically by the kernel's threads, each expert's rows gathered from the token codes, GEMM1 with the
bf16 rounding, the clamped SwiGLU with float64 ``exp`` rounded once to fp32, the per-row requant, GEMM2
and the bf16 rows written to their token-major slots), the same operations in the same order as the
torch chain (:func:`_expert_chain`). It is used only after a load-time probe (:func:`_probe_chain`:
extreme rows through the first and last expert) equals the torch chain bit for bit. Where the kernel
sees a non-finite intermediate it stops being trusted for that call: the torch chain reruns the
experts and raises the golden's error at its stage.

**Load** (:func:`load`, untimed): the experts' int8 weights loaded for the per-expert GEMM
(:class:`.moe_experts.ExpertGemm`: prepacked for fbgemm where that kernel is proven exact, else
transposed to row-major ``[K, N]`` for ``torch._int_mm``), the checkpoint scales rounded to bf16 as
SGLang loads them (and widened to fp32 for the epilogues), the shared expert's three Linears loaded as
the dense path loads them (:func:`backends.torch_cpu.linear.load_dynamic`).

**Errors, in the golden's order.** :meth:`backends.base.Backend.prepare` runs the golden's
:func:`~w8a8.moe.pipeline.w8a8_moe_args` (everything the golden checks before computing) before
:func:`load` gets its result. The checks the golden makes later — in the ops it runs, some on
intermediate values — are reproduced at the same points: the static ones (on arguments only: the
expert scales rounded to bf16 becoming Inf, ``swiglu_limit``, the shared expert's weights, ...) are
evaluated at load with the golden's validators on stand-ins of the intermediates and raised at their
stage (:data:`STAGES`); the data ones (an Inf/NaN in GMM1's bf16 output, in the requant scale, in GMM2's
output, in the bf16 routing weights, in the shared expert's activations) are detected in torch and
raised by calling the same golden validator on the real intermediate, so that the exception and its
message (index included) are the golden's.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from w8a8 import _check
from w8a8 import dtypes as _dt
from w8a8.linear import w8a8_dynamic_linear_args
from w8a8.moe.finalize import moe_finalize_routing_args
from w8a8.moe.grouped_matmul import grouped_matmul_args
from w8a8.moe.swiglu import dequant_swiglu_quant_args, swiglu_args
from w8a8.numerics import ASCEND

from ..torch_common import from_torch, to_torch
from .arith import absmax, any_nonfinite, to_float
from .bound import memoised
from .gemm import acc_bound
from . import kernel_variants
from .linear import load_dynamic, w8a8_dynamic_linear
from .moe_experts import ExpertGemm
from .moe_gating import gating_options, gating_top_k, gating_top_k_softmax
from .moe_gmm import may_nan
from .moe_math import F32, clamped_swiglu, dsq_quantize_rows, silu, sum_f32
from .moe_routing import dynamic_quant_rows
from .runtime import claim_threads

_BF16 = torch.bfloat16
_W_ABSMAX = 128
# The stages at which the golden raises a deferred (argument-only) error, in its order; the data checks
# sit between them (see forward).
STAGES = ("gmm1", "dsq", "gmm2", "finalize", "shared_gate", "shared_up", "shared_gu", "shared_down",
          "shared_down_load", "shared_out")


# -- the checked arguments (NumPy side) -------------------------------------------------------------------

def _host_inputs(a) -> tuple[tuple, dict]:
    """The forward's inputs and the layer's parameters from the golden's :class:`~w8a8.moe.pipeline.W8a8MoeArgs`
    (NumPy arrays, to be moved to the device)."""
    ex, r = a.experts, a.routing
    kwargs = {"op": a.op, "w13": ex.w13, "w13_scale": ex.w13_scale, "w2": ex.w2, "w2_scale": ex.w2_scale,
              "mode": r.mode, "k": r.k, "renormalize": r.renormalize, "swiglu_limit": a.swiglu_limit,
              "shared": None if a.shared_expert is None else dict(a.shared_expert), "gating": None,
              "routed_scale": getattr(a, "routed_scale", None), "shared_limit": getattr(a, "shared_limit", None)}
    ids = weights = logits = bias = None
    if r.mode == "ids":
        ids, weights = r.ids, r.weights
    else:
        logits = r.gating.x
        if r.mode == "top_k":
            bias, kwargs["gating"] = r.gating.bias, gating_options(r.gating)
    return (a.x, a.x_scale, a.shared_input, ids, weights, logits, bias), kwargs


# -- load (untimed) ------------------------------------------------------------------------------------

@dataclass
class MoeLayer:
    """The layer after load (see the module docstring)."""

    op: str
    w13: ExpertGemm                # H -> 2I per expert
    w2: ExpertGemm                 # I -> H
    s13: torch.Tensor              # bf16 [E, 2I], as loaded (SGLang: the checkpoint scale rounded to bf16)
    s2: torch.Tensor               # bf16 [E, H]
    s13f: torch.Tensor             # the same widened to fp32 (exact)
    s2f: torch.Tensor
    s13_absmax: float              # max |scale| (the overflow bound of the epilogues)
    s2_absmax: float
    mode: str                      # routing: "ids", "softmax", "top_k"
    k: int
    renormalize: bool
    gating: dict | None
    swiglu_limit: float | None
    shared: tuple | None = None    # (gate, up, down) DynamicLinear, or None
    deferred: tuple | None = None  # (stage, exception): the first argument-only error after the checks
    raw: dict = field(default_factory=dict)   # checkpoint tensors for the golden's messages (error paths)
    fused: bool = False            # the whole expert chain in the C kernel (probed at load)
    routed_scale: float | None = None   # serving row M2: bf16(fp32(routed) * fp32(factor)) after the finalize
    shared_limit: float | None = None   # serving row M5: the shared expert's bf16 gate / up clamp
    note: str = ""                 # why not, where the vnni GEMMs are in use

    @property
    def e(self) -> int:
        return self.w13.experts

    @property
    def i(self) -> int:
        return self.w2.k

    def raise_at(self, stage: str) -> None:
        if self.deferred is not None and self.deferred[0] == stage:
            raise self.deferred[1]


def _bf16_scale(s: torch.Tensor) -> torch.Tensor:
    return s if s.dtype == _BF16 else to_float(s.to(F32), _BF16)


def _standin(shape, dtype, value=0) -> np.ndarray:
    """A read-only array of ``shape`` holding ``value`` (no memory: zero strides)."""
    return np.broadcast_to(np.array(value, dtype=dtype), tuple(shape))


class _Stages:
    """Runs the argument-only checks in the golden's order and keeps the first failure with its stage."""

    def __init__(self):
        self.failed: tuple | None = None

    def run(self, stage: str, fn):
        if self.failed is not None:
            return None
        try:
            return fn()
        except (ValueError, TypeError, OverflowError) as exc:
            self.failed = (stage, exc)
            return None


def load(a, transfer, gemm_path: str, memo: dict | None = None) -> tuple[tuple, MoeLayer]:
    """``(the forward's device inputs, the loaded MoeLayer)`` of the golden's checked
    :class:`~w8a8.moe.pipeline.W8a8MoeArgs`; ``transfer`` moves NumPy arrays to the device (the
    backend's :meth:`~backends.base.Backend.transfer`). See the module docstring. ``memo``: a bound
    call's (:mod:`.bound`): the weights' packing and probes made once, reused by later calls."""
    args, kwargs = transfer(_host_inputs(a))
    x, x_scale, shared_input, ids, weights, logits, bias = args
    t, k = x.shape[0], kwargs["k"]
    m = t * k
    w13, w2 = kwargs["w13"], kwargs["w2"]
    e, i2, h = w13.shape
    s13, s2 = _bf16_scale(kwargs["w13_scale"]), _bf16_scale(kwargs["w2_scale"])
    stages = _Stages()
    w13_view = from_torch(w13).transpose(0, 2, 1)  # [E, H, 2I]: the golden's transposed view (numpy)
    w2_view = from_torch(w2).transpose(0, 2, 1)
    no_groups = np.zeros(e, np.int64)

    def gmm_args(x_shape, w_view, scale):
        return grouped_matmul_args(_standin(x_shape, np.int8), w_view, scale=from_torch(scale),
                                   per_token_scale=_standin((m,), np.float32, 1), group_list=no_groups,
                                   group_list_type=1, output_dtype="bfloat16", split_item=2, group_type=0,
                                   numerics=ASCEND)

    limit = kwargs["swiglu_limit"]
    stages.run("gmm1", lambda: gmm_args((m, h), w13_view, s13))
    stages.run("dsq", lambda: dequant_swiglu_quant_args(_standin((m, i2), _dt.bfloat16), quant_mode=1,
                                                        activate_left=True, swiglu_limit=limit, numerics=ASCEND))
    stages.run("gmm2", lambda: gmm_args((m, i2 // 2), w2_view, s2))
    stages.run("finalize", lambda: moe_finalize_routing_args(
        _standin((m, h), _dt.bfloat16), None, None, None, _standin((t, k), _dt.bfloat16),
        np.arange(m, dtype=np.int32), _standin((t, k), np.int32), drop_pad_mode=2, numerics=ASCEND))
    shared = None
    if kwargs["shared"] is not None:
        shared = _load_shared(stages, kwargs["op"], kwargs["shared"], shared_input, h, gemm_path, memo)
    s13f, s2f = s13.to(F32), s2.to(F32)
    layer = MoeLayer(op=kwargs["op"], w13=memoised(memo, "w13", lambda: ExpertGemm.load(w13, layout="enk")),
                     w2=memoised(memo, "w2", lambda: ExpertGemm.load(w2, layout="enk")),
                     s13=s13, s2=s2, s13f=s13f, s2f=s2f, s13_absmax=float(absmax(s13f)),
                     s2_absmax=float(absmax(s2f)), mode=kwargs["mode"], k=k,
                     renormalize=kwargs["renormalize"], gating=kwargs["gating"],
                     swiglu_limit=None if limit is None else float(limit), shared=shared, deferred=stages.failed,
                     raw={"w2_view": w2_view, "shared": kwargs["shared"]}, routed_scale=kwargs["routed_scale"],
                     shared_limit=kwargs["shared_limit"])
    if layer.w13.path == "vnni" and layer.w2.path == "vnni":
        layer.s13f, layer.s2f = layer.s13f.contiguous(), layer.s2f.contiguous()
        layer.note = memoised(memo, "chain_probe", lambda: _probe_chain(layer))
        layer.fused = not layer.note
    return (x, x_scale, shared_input, ids, weights, logits, bias), layer


def _load_shared(stages: _Stages, op: str, se: dict, shared_input: torch.Tensor, h: int, gemm_path: str,
                 memo: dict | None = None):
    """The shared expert's three W8A8_DYNAMIC Linears, loaded, with the golden's checks at their stages."""
    x_np = from_torch(shared_input)
    t = x_np.shape[0]

    def linear(x_like, name):
        p = w8a8_dynamic_linear_args(x_like, _np(se[f"{name}_weight"]), _np(se[f"{name}_scale"]),
                                     numerics=ASCEND).params
        return memoised(memo, ("shared", name), lambda: load_dynamic(_BF16, to_torch(p.weight),
                                                                     to_torch(p.weight_scale), None, gemm_path))

    gate = stages.run("shared_gate", lambda: linear(x_np, "gate"))
    up = stages.run("shared_up", lambda: linear(x_np, "up"))
    if stages.failed is None and gate.weight.shape[1] != up.weight.shape[1]:
        stages.run("shared_gu", lambda: _check.fail(
            op, "shared_expert", "gate and up weights of the same shape",
            f"{(t, gate.weight.shape[1])} vs {(t, up.weight.shape[1])}"))
    if stages.failed is not None:
        return None
    a_like = _standin((t, gate.weight.shape[1]), _dt.bfloat16)
    down = stages.run("shared_down", lambda: linear(a_like, "down"))
    if down is None:  # before or after the golden's data check of the activation (dynamic_quant's NaN/Inf)?
        exc = stages.failed[1]
        stages.failed = None
        stages.run("probe", lambda: linear(_standin(a_like.shape, _dt.bfloat16, np.nan), "down"))
        after = stages.failed is not None and str(stages.failed[1]) != str(exc)  # the NaN check fired first
        stages.failed = ("shared_down_load" if after else "shared_down", exc)
    elif down.weight.shape[1] != h:
        stages.run("shared_out", lambda: _check.fail(op, "shared_expert", f"a down projection to [T, H] = {(t, h)}",
                                                     f"{(t, down.weight.shape[1])}"))
    return gate, up, down


def _np(value):
    """A shared-expert entry for the golden's validator: a tensor back to NumPy (zero-copy), else as is."""
    return from_torch(value) if isinstance(value, torch.Tensor) else value


# -- forward (the timed op) ------------------------------------------------------------------------------

def _route(layer: MoeLayer, ids, weights, logits, bias):
    """``(topk_ids int32 [T, k], topk_weights fp32 [T, k])``: given, or from the router op."""
    if layer.mode == "ids":
        return ids, weights
    if layer.mode == "softmax":
        y, idx, _ = gating_top_k_softmax(logits, None, k=layer.k)
        w = y.to(F32)
        if layer.renormalize:  # SGLang's l1_norm, in fp32
            w = torch.div(w, sum_f32(w))
        return idx, w
    y, idx, _ = gating_top_k(logits, bias, None, None, **layer.gating)
    return idx, y


@dataclass
class _FirstBad:
    """The first expert group (in row order) whose rows of an intermediate are not finite."""

    start: int = -1
    rows: torch.Tensor | None = None

    def note(self, start: int, rows: torch.Tensor, check: bool) -> None:
        if check and self.rows is None and rows.numel() and not bool(torch.isfinite(rows).all()):
            self.start, self.rows = start, rows

    def full(self, shape, fill) -> np.ndarray:
        """The intermediate as the golden has it, as far as its checks see: these rows, finite ``fill``
        elsewhere (earlier groups were finite; the golden reports the first bad element)."""
        rows = from_torch(self.rows)
        out = np.full(shape, fill, dtype=rows.dtype)
        out[self.start:self.start + rows.shape[0]] = rows
        return out


def _golden_refuses(check, *args, **kwargs) -> None:
    """Raise what the golden's ``check`` raises on an intermediate torch found not finite."""
    check(*args, **kwargs)
    raise AssertionError(f"torch-cpu: {check.__name__} accepted an intermediate with NaN/Inf (internal error)")


class _Clock:
    """Seconds per phase into ``sink`` (a dict) when it is not None; free otherwise (a ``None`` test per lap)."""

    def __init__(self, sink: dict | None):
        self.sink = sink
        self.t = time.perf_counter() if sink is not None else 0.0

    def lap(self, name: str) -> None:
        if self.sink is not None:
            now = time.perf_counter()
            self.sink[name] = self.sink.get(name, 0.0) + now - self.t
            self.t = now


PROFILE: dict | None = None
"""Set to a dict to accumulate :func:`forward`'s seconds per phase (benchmarks): wall time of ``route``,
``dispatch``, ``experts``, ``finalize``, ``shared``; and, inside ``experts``, the time of ``gemm1``,
``act`` (GMM1 epilogue, SwiGLU, requant), ``gemm2``, ``out`` (GMM2 epilogue, scatter) summed over the
worker threads."""


@dataclass
class _Expert:
    """Everything one expert's fused chain reads (shared by the workers; each writes its own rows)."""

    layer: MoeLayer
    x_e: torch.Tensor        # int8 [M, H] dispatched rows, expert-sorted
    s_e: torch.Tensor        # fp32 [M] their scales
    order: torch.Tensor      # int64 [M]: the flat (t*k + j) id of each row
    o_tok: torch.Tensor      # bf16 [M, H] output rows in token order
    nan1: bool               # GMM1's epilogue may overflow (check for Inf / fix NaN bits)
    bound2: int              # |GMM2 accumulator| bound


def _expert_chain(c: _Expert, runs, threads: bool, sink: dict | None):
    """GEMM1 -> bf16 -> SwiGLU -> requant -> GEMM2 -> bf16 -> scatter, for each ``(expert, start, stop)``.

    Each epilogue is the golden's ``(fp32(acc) * scale[e]) * token scale`` rounded once to bf16; NaN bits
    need fixing (and Inf / NaN checking) only where ``|acc| * max|scale| * max|token scale|`` can overflow.
    Returns the first non-finite rows of GEMM1's output, the requant scale and GEMM2's output."""
    layer, i, clock = c.layer, c.layer.i, _Clock(sink)
    bad_g, bad_scale, bad_o = _FirstBad(), _FirstBad(), _FirstBad()
    # the golden's dequant_swiglu_quant without group_index: the legacy kernel's quantization
    dsq = _dsq_record(c.x_e.shape[0])
    for ex, start, stop in runs:
        acc = layer.w13.f32(ex, c.x_e[start:stop], threads=threads)
        clock.lap("gemm1")
        g = to_float(acc.mul_(layer.s13f[ex]).mul_(c.s_e[start:stop, None]), _BF16, may_nan=c.nan1)
        bad_g.note(start, g, c.nan1)
        gf = g.to(F32)
        a_q, a_s = dsq_quantize_rows(clamped_swiglu(gf[:, :i], gf[:, i:], layer.swiglu_limit), dsq)
        bad_scale.note(start, a_s, True)
        clock.lap("act")
        acc = layer.w2.f32(ex, a_q, threads=threads)
        clock.lap("gemm2")
        nan2 = may_nan(c.bound2, layer.s2_absmax, a_s)
        o_rows = to_float(acc.mul_(layer.s2f[ex]).mul_(a_s[:, None]), _BF16, may_nan=nan2)
        bad_o.note(start, o_rows, nan2)
        c.o_tok.index_copy_(0, c.order[start:stop], o_rows)
        clock.lap("out")
    return bad_g, bad_scale, bad_o


@contextlib.contextmanager
def _one_thread():
    """torch's intra-op thread count at 1 for a block (the worker threads each run single-threaded)."""
    previous = torch.get_num_threads()
    if previous != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


_POOL: list = []   # [ThreadPoolExecutor] of the expert workers, created on first use


def _pool(workers: int) -> ThreadPoolExecutor:
    if not _POOL or _POOL[0]._max_workers != workers:
        if _POOL:
            _POOL.pop().shutdown(wait=False)
        _POOL.append(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="w8a8-moe"))
    return _POOL[0]


def _balanced(runs, workers: int) -> list:
    """The experts dealt to ``workers`` lists, largest first to the least loaded (by rows)."""
    shares: list[list] = [[] for _ in range(workers)]
    loads = [0] * workers
    for run in sorted(runs, key=lambda r: r[1] - r[2]):
        w = loads.index(min(loads))
        shares[w].append(run)
        loads[w] += run[2] - run[1]
    return [sorted(share, key=lambda r: r[1]) for share in shares if share]


def _in_workers(fn, shares: list) -> list:
    """``fn(share, threads)`` for every share: on the worker threads, each single-threaded
    (``threads=False``), when there are two or more shares; else here, the GEMMs on all of torch's
    threads (``threads=True``). Results in the order of ``shares``."""
    if len(shares) <= 1:
        return [fn(share, True) for share in shares]
    with _one_thread():
        futures = [_pool(len(shares)).submit(fn, share, False) for share in shares]
        return [f.result() for f in futures]


def _workers(units: int) -> int:
    """How many workers for ``units`` independent pieces of work: torch's thread count (the GEMM one)."""
    return max(1, min(claim_threads()["torch_threads"], units))


def _run_experts(c: _Expert, runs, sink: dict | None):
    """The experts' chains: with two or more torch threads and two or more experts, dealt to worker
    threads that each run whole experts single-threaded; else one after the other on the GEMM threads.

    Why workers: every expert is two short GEMMs (0.3-3 ms at 6-48 rows) and a few elementwise ops. Run
    one after the other, each GEMM is an OpenMP region across the cores, and on a shared machine a region
    waits a whole scheduler slice for a descheduled second thread: 8 ms per GEMM measured here with another
    process on one of the two cores (fbgemm at 6 rows: 0.56 ms on idle cores). Workers that each run whole
    experts single-threaded never wait on each other (0.9 ms per expert under the same load); on idle cores
    they match the two-thread regions (6 rows: 0.61 vs 0.59-0.67 ms per expert, memory-bound at ~27 GB/s;
    48 rows: 2.4-2.5 vs 2.3 ms). Every expert's arithmetic is the same either way (the kernels are exact,
    the elementwise ops row-wise), so the result is bit-identical."""
    shares = _balanced(runs, _workers(len(runs)))
    sinks = [None if sink is None else {} for _ in shares]
    results = _in_workers(lambda share, threads: _expert_chain(c, share[0], threads, share[1]),
                          list(zip(shares, sinks)))
    for sk in sinks:
        for name, seconds in (sk or {}).items():
            sink[name] = sink.get(name, 0.0) + seconds
    return results


_FINALIZE_BLOCK = 32   # tokens per block: the fp32 temporaries of a block (32 x H x 4 bytes) stay in cache


def _finalize(o_tok: torch.Tensor, weights_bf16: torch.Tensor, t: int, k: int, h: int) -> torch.Tensor:
    """``moe_finalize_routing(drop_pad_mode=2)`` of the token-ordered rows: ``out[t] = sum_j w[t, j] *
    o[t*k + j]``, slot by slot in fp32 (the golden's order), one rounding to bf16. Row-wise, so it runs in
    blocks of tokens (3-4x faster than whole-array passes at T = 2048, H = 4096), split over the workers."""
    rows, wf = o_tok.view(t, k, h), weights_bf16.to(F32)
    out = torch.zeros(t, h, dtype=_BF16)

    def blocks(span, threads):
        for b0 in range(span[0], span[1], _FINALIZE_BLOCK):
            b1 = min(span[1], b0 + _FINALIZE_BLOCK)
            acc = None
            for j in range(k):
                r = rows[b0:b1, j].to(F32).mul_(wf[b0:b1, j:j + 1])
                acc = r if acc is None else acc.add_(r)
            if acc is not None:   # a NaN anywhere makes the sum NaN: fix NaN bits only then
                out[b0:b1] = to_float(acc, _BF16, may_nan=not bool(torch.isfinite(acc.sum())))

    n = _workers(-(-t // _FINALIZE_BLOCK))
    step = -(-t // (n * _FINALIZE_BLOCK)) * _FINALIZE_BLOCK
    _in_workers(blocks, [(s, min(t, s + step)) for s in range(0, t, step)] if t else [])
    return out


def _first(records: list) -> _FirstBad:
    """The record with the smallest start among the workers' (the first bad rows in row order)."""
    found = [r for r in records if r.rows is not None]
    return min(found, key=lambda r: r.start) if found else _FirstBad()


_REQUANT_SCALE = {"amax_div": 0, "amax_mul_rcp": 1}     # the C kernel's flags for the requant's variant
_REQUANT_CODES = {"div_scale": 0, "mul_rcp": 1}


def _dsq_record(tokens: int):
    """The record of the chain's dequant_swiglu_quant (no group_index): its requant formulas."""
    return kernel_variants.dequant_swiglu_quant(x_dtype=_BF16, tokens=tokens, groups=None, quant_mode=1,
                                                quant_scale=None, bias=None, scalar=False)


def _requant_flags(tokens: int) -> tuple[int, int] | None:
    """The C kernel's flags for the requant of ``tokens`` dispatched rows, or None for a formula it lacks."""
    dsq = _dsq_record(tokens)
    if dsq.scale_out not in _REQUANT_SCALE or dsq.quant_codes not in _REQUANT_CODES:
        return None
    return _REQUANT_SCALE[dsq.scale_out], _REQUANT_CODES[dsq.quant_codes]


def _fused_chain(layer: MoeLayer, q_tok, s_tok, tokens, order, runs, o_tok) -> int:
    """The experts' chains in the C kernel (module docstring): 0, 1 where an intermediate was not finite, -1
    where the requant's variant is one the kernel lacks (nothing computed: the torch chain runs)."""
    from . import native

    lib = native.library()
    e13, e2 = layer.w13.vnni, layer.w2.vnni
    runs_t = torch.tensor(runs, dtype=torch.int64).reshape(-1, 3)
    limit = layer.swiglu_limit
    flags = _requant_flags(tokens.numel())   # the requant's formulas, as the torch chain takes them
    if flags is None:
        return -1
    rc = lib.w8a8_moe_experts(q_tok.data_ptr(), s_tok.data_ptr(), tokens.data_ptr(), order.data_ptr(),
                              runs_t.data_ptr(), runs_t.shape[0], e13.k, e2.k, e13.data.data_ptr(),
                              e13.comp.data_ptr(), layer.s13f.data_ptr(), e2.data.data_ptr(), e2.comp.data_ptr(),
                              layer.s2f.data_ptr(), limit is not None, 0.0 if limit is None else limit,
                              *flags, o_tok.data_ptr(), claim_threads()["torch_threads"])
    if rc < 0:
        raise RuntimeError(f"torch-cpu: w8a8_moe_experts failed ({rc})")
    return rc


def _probe_chain(layer: MoeLayer) -> str:
    """``""`` if the fused chain equals the torch chain on probe rows through the first and the last expert
    (random codes, codes of +-127 and 0, tiny and zero token scales), else why not."""
    h, e = layer.w13.k, layer.e
    gen = torch.Generator().manual_seed(18)
    t = 8
    q = torch.randint(-127, 128, (t, h), dtype=torch.int8, generator=gen)
    q[1], q[2], q[3] = 127, -127, 0
    q[4] = torch.where(torch.arange(h) % 2 == 0, 127, -127).to(torch.int8)
    s = torch.rand(t, generator=gen) * 0.05 + 1e-4
    s[5], s[6] = 0.0, 1e-30
    experts = [0] if e == 1 else [0, e - 1]
    tokens = torch.arange(t).repeat(len(experts))
    order = torch.arange(tokens.numel())
    runs = [(ex, j * t, (j + 1) * t) for j, ex in enumerate(experts)]
    got = torch.empty(tokens.numel(), h, dtype=_BF16)
    try:
        rc = _fused_chain(layer, q, s, tokens, order, runs, got)
    except RuntimeError as exc:
        return f"vnni chain: {exc}"
    if rc < 0:
        return "vnni chain: the requant's kernel variant is not one the C kernel computes"
    want = torch.empty_like(got)
    c = _Expert(layer=layer, x_e=q.index_select(0, tokens), s_e=s.index_select(0, tokens), order=order, o_tok=want,
                nan1=True, bound2=layer.i * 127 * _W_ABSMAX)
    bad = _expert_chain(c, runs, True, None)
    if rc != (1 if any(r.rows is not None for r in bad) else 0):
        return "vnni chain: the load-time probe's finiteness report differed from the torch chain"
    if rc == 0 and not torch.equal(got.view(torch.int16), want.view(torch.int16)):
        return "vnni chain: the load-time probe differed from the torch chain"
    return ""


def forward(x, x_scale, shared_input, ids, weights, logits, bias, *, layer: MoeLayer):
    """The layer (see the module docstring): bf16 ``[T, H]``."""
    sink = PROFILE
    clock = _Clock(sink)
    t, h = x.shape
    ids, weights = _route(layer, ids, weights, logits, bias)
    k = ids.shape[1]
    m = t * k
    layer.raise_at("gmm1")
    layer.raise_at("dsq")
    clock.lap("route")
    # dispatch: a stable sort of the flat (t*k + j) ids by expert; each token quantized once
    flat = ids.reshape(-1).to(torch.int64)
    order = torch.sort(flat, stable=True).indices
    counts = torch.bincount(flat, minlength=layer.e).tolist()
    tokens = torch.div(order, k, rounding_mode="floor")
    if x_scale is None:  # the golden's moe_init_routing_v2(quant_mode=1) of this layer: its kernel's rounding
        rec = kernel_variants.init_routing_v2(
            n=t, k=k, h=h, x_dtype=kernel_variants.dtype_name(x.dtype), quant_mode=1, scale_shape=None, offset=False,
            start=0, end=layer.e, expert_num=layer.e, count_type=1, row_idx_type=0)
        q_tok, s_tok = dynamic_quant_rows(x.to(F32), rec.routing_quant_round)
    else:
        q_tok, s_tok = x, x_scale
    ends = np.cumsum(counts).tolist()
    runs = [(ex, end - count, end) for ex, (count, end) in enumerate(zip(counts, ends)) if count]
    o_tok = torch.empty(m, h, dtype=_BF16)
    records = None
    fused = layer.fused and s_tok.dtype == F32
    if fused:
        q_tok, s_tok = q_tok.contiguous(), s_tok.contiguous()
        clock.lap("dispatch")
        if _fused_chain(layer, q_tok, s_tok, tokens, order, runs, o_tok) == 0:
            records = [(_FirstBad(), _FirstBad(), _FirstBad())]
    if records is None:   # the torch chain (also where the fused one saw a non-finite intermediate)
        x_e = q_tok.index_select(0, tokens)
        s_e = s_tok.index_select(0, tokens)
        bound1 = acc_bound(x_e, _W_ABSMAX)
        c = _Expert(layer=layer, x_e=x_e, s_e=s_e, order=order, o_tok=o_tok,
                    nan1=may_nan(bound1, layer.s13_absmax, s_e), bound2=layer.i * 127 * _W_ABSMAX)  # codes in +-127
        if not fused:
            clock.lap("dispatch")
        records = _run_experts(c, runs, sink)
    clock.lap("experts")
    weights_bf16 = to_float(weights.to(F32), _BF16)   # SGLang: topk_weights.to(hidden.dtype)
    _raise_data_errors(layer, *(_first([r[n] for r in records]) for n in range(3)), weights_bf16, ids, m, h)
    routed = _finalize(o_tok, weights_bf16, t, k, h)
    if layer.routed_scale is not None:   # the engine's bf16 multiply of the routed output (w8a8.moe.pipeline)
        routed = to_float(routed.to(F32).mul_(torch.tensor(layer.routed_scale, dtype=F32)), _BF16)
    clock.lap("finalize")
    y = _add_shared(layer, routed, shared_input)
    clock.lap("shared")
    return y


def _raise_data_errors(layer: MoeLayer, bad_g: _FirstBad, bad_scale: _FirstBad, bad_o: _FirstBad, weights_bf16,
                       ids, m: int, h: int) -> None:
    """The golden's checks between GMM1 and the finalize, in its order (static ones at their stages)."""
    i = layer.i
    if bad_g.rows is not None:   # dequant_swiglu_quant refuses NaN/Inf in x (GMM1's output)
        _golden_refuses(dequant_swiglu_quant_args, bad_g.full((m, 2 * i), 0), quant_mode=1, activate_left=True,
                        swiglu_limit=layer.swiglu_limit, numerics=ASCEND)
    layer.raise_at("gmm2")
    if bad_scale.rows is not None:   # GMM2 refuses a NaN/Inf per-token scale (the requant's)
        _golden_refuses(grouped_matmul_args, _standin((m, i), np.int8), layer.raw["w2_view"],
                        scale=from_torch(layer.s2), per_token_scale=bad_scale.full((m,), 1),
                        group_list=np.zeros(layer.e, np.int64), group_list_type=1, output_dtype="bfloat16",
                        split_item=2, group_type=0, numerics=ASCEND)
    layer.raise_at("finalize")
    if bad_o.rows is not None or any_nonfinite(weights_bf16):   # the finalize's rows, then scales
        rows = bad_o.full((m, h), 0) if bad_o.rows is not None else _standin((m, h), _dt.bfloat16)
        _golden_refuses(moe_finalize_routing_args, rows, None, None, None, from_torch(weights_bf16),
                        np.arange(m, dtype=np.int32), from_torch(ids), drop_pad_mode=2, numerics=ASCEND)


def _add_shared(layer: MoeLayer, routed: torch.Tensor, shared_input) -> torch.Tensor:
    """``bf16(fp32(routed) + fp32(shared))``, the shared expert run as the golden runs it."""
    if layer.raw["shared"] is None:
        return routed
    for stage in ("shared_gate", "shared_up", "shared_gu"):
        layer.raise_at(stage)
    gate, up, down = layer.shared
    g = w8a8_dynamic_linear(shared_input, gate)
    u = w8a8_dynamic_linear(shared_input, up)
    if layer.shared_limit is not None:   # bf16 clamps (exact); NaN passes through as in the golden's minimum / clip
        lim = float(layer.shared_limit)
        g, u = torch.clamp(g, max=lim), torch.clamp(u, min=-lim, max=lim)
    if any_nonfinite(g, u):   # swiglu refuses NaN/Inf in cat([g, u])
        _golden_refuses(swiglu_args, np.concatenate([from_torch(g), from_torch(u)], axis=-1), numerics=ASCEND)
    a = to_float(silu(g.to(F32)).mul_(u.to(F32)), _BF16)
    layer.raise_at("shared_down")
    if any_nonfinite(a):   # the down Linear's dynamic_quant refuses NaN/Inf in the activation
        se = layer.raw["shared"]
        _golden_refuses(w8a8_dynamic_linear_args, from_torch(a), _np(se["down_weight"]), _np(se["down_scale"]),
                        numerics=ASCEND)
    layer.raise_at("shared_down_load")
    layer.raise_at("shared_out")
    shared = w8a8_dynamic_linear(a, down)
    return to_float(routed.to(F32).add_(shared.to(F32)), _BF16)


__all__ = ["load", "forward", "MoeLayer", "STAGES"]
