"""DeepSeek-V4's router as the serving engines compose it (serving row M3).

DeepSeek-V4 scores experts by ``sqrt(softplus(logits))``. Its first ``num_hash_layers`` layers take their
experts from a table, ``tid2eid[input_ids]`` (hash layers); the other layers pick the top-k of the scores plus
the gate's correction bias (score layers). The weights are the chosen scores, renormalised to sum to 1;
``routed_scaling_factor`` is applied later, on the routed output (row M2).

Two compositions (:mod:`w8a8.serving`, field ``dsv4_routing``):

``"torch_ops"`` (SGLang, ``layers/moe/deepseek_v4_topk.py``: ``HashTopK._forward_torch`` and
``biased_topk_impl``). Every step is a torch op in the router logits' own dtype ``d`` (bf16 under SGLang's row
M4). Each op computes in fp32 and rounds once to its output dtype::

    sp  = d(softplus(fp32(x)))            # torch softplus: x if x > 20 else log1p(exp(x))
    s   = d(sqrt(fp32(sp)))
    hash layers:  ids = tid2eid[input_ids]
    score layers: sel = R(fp32(s) + fp32(bias)), R = torch's promoted dtype of (d, bias dtype)
                  ids = top-k of sel (torch.topk, sorted=False: golden order descending, ties lower expert first)
    w   = s[ids]                          # gather, dtype d
    w   = d(fp32(w) / d(sum_j fp32(w)))   # renormalise: the sum rounded to d, then the division rounded to d
                                          # no epsilon: k scores that all underflow to 0 give NaN weights
    weights = fp32(w)                     # exact

``"moe_gating_top_k_hash"`` (vllm-ascend, ``ops/fused_moe/router/fused_topk_router.py``): one fused op,
``torch.ops._C_ascend.moe_gating_top_k_hash(x, k, bias=bias.to(x.dtype), input_ids=, tid2eid=, k_group,
group_count, routed_scaling_factor, eps=1e-20, group_select_mode=1, renorm=0, norm_type=2, out_flag=False)``
for hash and score layers alike. That op has the formula of :func:`w8a8.moe_gating_top_k` (its hash mode), so
the golden runs that op on the logits as given.

:func:`dsv4_routing_args` checks the router's arguments for the layer that calls it. :func:`route_torch_ops`
computes SGLang's form. Neither form has been run on an Ascend device here. What only a device can settle:
whether torch_npu's bf16 ``softplus`` / ``sqrt`` / ``div`` round once from fp32 as torch on the CPU does, and
the order ``torch.topk(sorted=False)`` returns (``moe_finalize_routing`` sums the k copies in that order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..numerics import ASCEND, Numerics
from ..rounding import to_float
from . import _common as C

__all__ = ["Dsv4RoutingArgs", "dsv4_routing_args", "route_torch_ops", "sqrt_softplus_torch"]

FORMS = ("torch_ops", "moe_gating_top_k_hash")
_SOFTPLUS_THRESHOLD = np.float32(20.0)   # torch.nn.functional.softplus's default threshold (beta 1)


@dataclass(frozen=True)
class Dsv4RoutingArgs:
    """The checked arguments of DeepSeek-V4's router (see :func:`dsv4_routing_args`)."""

    logits: np.ndarray              # [T, E] float16 / bfloat16 / float32, as given
    k: int                          # experts per token
    bias: np.ndarray | None         # [E] float (score layers), None on hash layers
    input_ids: np.ndarray | None    # [T] int32 / int64 (hash layers)
    tid2eid: np.ndarray | None      # [V, k] int32 / int64, values in [0, E) (hash layers)

    @property
    def hashed(self) -> bool:
        """Whether this is a hash layer (experts from ``tid2eid[input_ids]``)."""
        return self.tid2eid is not None


def dsv4_routing_args(op: str, logits: np.ndarray, k: int, bias, input_ids, tid2eid, *, form: str,
                      numerics: Numerics = ASCEND) -> Dsv4RoutingArgs:
    """The checks of DeepSeek-V4's router, raised in the name of ``op`` (the MoE layer). ``logits`` is the
    layer's checked ``[T, E]`` router logits and ``k`` its checked ``top_k``.

    Hash layers: ``input_ids`` int32/int64 ``[T]`` and ``tid2eid`` int32/int64 ``[V, top_k]``, both or
    neither, ids in ``[0, V)``, table entries in ``[0, E)``, no ``correction_bias``. Score layers:
    ``correction_bias`` float ``[E]``; SGLang's form requires it (``biased_topk_impl`` adds it).
    TypeError for dtypes, ValueError otherwise, each naming the argument."""
    if form not in FORMS:
        raise ValueError(f"{op}: the serving record's dsv4_routing must be one of {FORMS}; got {form!r}")
    t, e = logits.shape
    if (input_ids is None) != (tid2eid is None):
        missing = "input_ids" if input_ids is None else "tid2eid"
        _check.fail(op, missing, "given together with the other (input_ids and tid2eid: a hash layer)", "None")
    ids = table = b = None
    if tid2eid is not None:
        if bias is not None:
            _check.fail(op, "correction_bias", "None on a hash layer (input_ids / tid2eid given: the experts come "
                        "from tid2eid)", _check.describe(bias))
        ids = _check.array(op, "input_ids", input_ids, dtypes=(_dt.int32, _dt.int64), ndim=1)
        if ids.shape[0] != t:
            _check.fail(op, "input_ids", f"of shape [T] = [{t}] (one token id per router row)", _check.describe(ids))
        table = _check.array(op, "tid2eid", tid2eid, dtypes=(_dt.int32, _dt.int64), ndim=2)
        if table.shape[1] != k:
            _check.fail(op, "tid2eid", f"of shape [vocab, top_k] = [*, {k}]", _check.describe(table))
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            _check.fail(op, "input_ids", f"token ids in [0, {table.shape[0]}) (the rows of tid2eid)",
                        f"values in [{ids.min()}, {ids.max()}]")
        if table.size and (table.min() < 0 or table.max() >= e):
            _check.fail(op, "tid2eid", f"expert ids in [0, E = {e})", f"values in [{table.min()}, {table.max()}]")
    else:
        if bias is None and form == "torch_ops":
            _check.fail(op, "correction_bias", "the [E] gate bias on a score layer (SGLang's biased_topk_impl adds "
                        "it; or pass input_ids and tid2eid for a hash layer)", "None")
        if bias is not None:
            b = _check.array(op, "correction_bias", bias, dtypes=C.FLOATS, ndim=1)
            if b.shape[0] != e:
                _check.fail(op, "correction_bias", f"of shape [E] = [{e}]", _check.describe(b))
            C.check_finite(op, "correction_bias", b, numerics)
    return Dsv4RoutingArgs(logits=logits, k=k, bias=b, input_ids=ids, tid2eid=table)


def sqrt_softplus_torch(x: np.ndarray, numerics: Numerics = ASCEND) -> np.ndarray:
    """``torch.nn.functional.softplus(x).sqrt()`` in x's dtype: each op in fp32, rounded once to x's dtype
    (softplus ``x if x > 20 else log1p(exp(x))``; fp32 input: no rounding beyond fp32's)."""
    xf = x.astype(np.float32)
    with np.errstate(over="ignore"):
        soft = np.where(xf > _SOFTPLUS_THRESHOLD, xf, C.log1p(C.exp(xf, numerics), numerics)).astype(np.float32)
    soft = to_float(soft, x.dtype).astype(np.float32)
    return to_float(np.sqrt(soft), x.dtype)


def _promoted(a: np.dtype, b: np.dtype) -> np.dtype:
    """torch's result dtype of ``tensor(a) + tensor(b)`` for float16 / bfloat16 / float32 (both 1-D or more)."""
    if a == b:
        return a
    return np.dtype(np.float32)     # any mix of the two half types, or either with fp32, promotes to fp32


def route_torch_ops(a: Dsv4RoutingArgs, numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray]:
    """SGLang's DeepSeek-V4 router (module docstring, form ``"torch_ops"``): ``(topk_ids int32 [T, k],
    topk_weights fp32 [T, k])``."""
    d = a.logits.dtype
    s = sqrt_softplus_torch(a.logits, numerics)
    if a.hashed:
        idx = a.tid2eid[a.input_ids].astype(np.int64)
    else:
        r = _promoted(d, a.bias.dtype)
        sel = to_float(s.astype(np.float32) + a.bias.astype(np.float32)[None, :], r)
        idx = np.argsort(-sel.astype(np.float32), axis=-1, kind="stable")[:, :a.k]
    w = np.take_along_axis(s, idx, axis=-1).astype(np.float32)
    total = to_float(C.sum_f32(w), d).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = to_float(w / total, d).astype(np.float32)
    return idx.astype(np.int32), w
