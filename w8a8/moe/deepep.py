"""The MoE layer behind a DeepEP-style INT8 dispatch, as SGLang's Ascend runner composes it (serving row M8).

With ``--moe-a2a-backend deepep`` SGLang quantizes each token once at its source rank and dispatches the int8
row **with its per-token scale**. The receiving rank gets the rows already grouped by expert and the count of
rows per expert (``num_recv_tokens_per_expert``). There is no ``npu_moe_init_routing_v2`` and no second
quantization (``layers/moe/moe_runner/ascend.py@0dd459f6``: ``pre_permute_deepep_normal_to_ascend``,
``AscendRunnerCore.run``). The chain::

    recv_x, recv_scale = x_q[src], x_scale[src]      # src: the token of each expert-grouped row (stable by token)
    g   = grouped_matmul(recv_x, W13, scale=s13, per_token_scale=recv_scale, group_list=counts,
                         group_list_type=1, output_dtype=bf16)
    a_q, s2 = swiglu_quant(g, counts, 1)             # sgl_kernel_npu's Triton kernel (NPUSwigluDeepEPKernel)
    o   = grouped_matmul(a_q, W2, scale=s2w, per_token_scale=s2, group_list=counts, ...)
    routed[t] = bf16(sum_j fp32(topk_weights[t, j]) * fp32(o[row(t, j)]))   # the DeepEP combine, j in order
    routed = bf16(fp32(routed) * fp32(routed_scaling_factor))              # row M2, then + shared (row M7)

:func:`swiglu_quant` is the golden of that Triton kernel (``sgl-project/sgl-kernel-npu``
``python/sgl_kernel_npu/sgl_kernel_npu/activation/swiglu_quant.py@11f29176``). Its arithmetic is in the
input's dtype (bf16), and the quotient is cast to bf16 **before** ``rint``. This gives different codes from
``npu_dequant_swiglu_quant``, which computes in fp32.

What was read and what was modelled: the dispatch layout (one rank, rows stable by token inside an expert)
and the combine's precision (fp32 weights times the bf16 rows, an fp32 sum in k order, one rounding) are
modelled. The DeepEP kernels for Ascend were not read. Nothing here has run on a device.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import _check
from .. import dtypes as _dt
from .. import serving as _sv
from ..numerics import ASCEND, Numerics
from ..rounding import to_float
from . import _common as C
from .grouped_matmul import grouped_matmul
from .pipeline import (_load_experts, _shared, expert_weights_args, moe_routing_args, scale_routed,
                       shared_expert_args, swiglu_limit_arg)

__all__ = ["swiglu_quant", "w8a8_moe_deepep", "w8a8_moe_deepep_stages"]

_DTYPE_MAX = np.float32(127)


def swiglu_quant(x: np.ndarray, group_list: np.ndarray, group_list_type: int = 1, *,
                 numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray]:
    """sgl_kernel_npu's Triton ``swiglu_quant(x, group_list, group_list_type, need_quant=True)``.

    Parameters
    ----------
    x : bfloat16 / float16 ``[M, 2I]``: the GMM1 output, gate half first.
    group_list : int32 / int64 ``[E]``: rows per expert (``group_list_type=1``) or their cumulative sum (0).
        Its total must be ``M`` here; the kernel leaves rows past the total unwritten.
    numerics : fields used: ``transcendental`` (the sigmoid's exp).

    Returns ``(codes int8 [M, I], scale float32 [M])``. Per row, in x's dtype ``d`` (Triton's types: each op
    rounds to ``d``)::

        sig   = d(1 / (1 + exp(-fp32(x1))))
        out   = d(fp32(d(fp32(x1) * fp32(sig))) * fp32(x2))      # x1 * sigmoid(x1) * x2
        scale = fp32(max |out|) / 127                               # fp32 division
        codes = rint(d(fp32(out) / scale))                          # the quotient rounded to d, then rint

    No clamp to ``[-128, 127]`` (the kernel's is commented out; ``|codes| <= 127`` holds anyway). A row that
    is all zero has ``scale = 0`` and ``0 / 0`` on the device (unspecified codes). The golden writes codes 0
    there, and GMM2 then multiplies by the scale 0 either way.

    Errors: TypeError for dtypes; ValueError for rank, an odd width, or a group total other than M.
    """
    op = "swiglu_quant"
    x = _check.array(op, "x", x, dtypes=(_dt.bfloat16, _dt.float16), ndim=2)
    m, w = x.shape
    if w % 2:
        _check.fail(op, "x", "of shape [M, 2I] with an even last dimension (gate half, then up half)",
                    _check.describe(x))
    group_list_type = _check.choice(op, "group_list_type", group_list_type, (0, 1))
    gl = _check.array(op, "group_list", group_list, dtypes=(_dt.int32, _dt.int64), ndim=1)
    total = int(gl[-1]) if group_list_type == 0 and gl.size else int(np.sum(gl, dtype=np.int64))
    if gl.size and gl.min() < 0 or total != m:
        _check.fail(op, "group_list", f"non-negative counts totalling M = {m} rows", f"{gl.tolist()[:16]}")
    d = x.dtype
    x1, x2 = x[:, : w // 2].astype(np.float32), x[:, w // 2:].astype(np.float32)
    with np.errstate(over="ignore"):
        sig = to_float((np.float32(1) / (np.float32(1) + C.exp(-x1, numerics))).astype(np.float32), d)
    a = to_float(x1 * sig.astype(np.float32), d).astype(np.float32)
    out = to_float(a * x2, d).astype(np.float32)
    amax = np.abs(out).max(axis=1, initial=np.float32(0)).astype(np.float32)
    scale = (amax / _DTYPE_MAX).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1))[:, None]
    q = np.rint(to_float((out / safe).astype(np.float32), d).astype(np.float32))
    q[scale == 0] = 0
    return q.astype(np.int8), scale


def _deepep_args(op, x_q, x_scale, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights, routed_scaling_factor,
                 shared_expert, shared_input, numerics, serving):
    C.check_numerics(op, numerics)
    sv = _sv.get(serving, op)
    if sv.prequantized_moe.value != "deepep_expert_grouped":
        _check.fail(op, "serving", "an engine whose pre-quantized MoE is the DeepEP expert-grouped path (sglang; "
                    "vllm-ascend's is the MC2 dispatch, w8a8_moe_ep)", repr(sv.name))
    x_q = _check.array(op, "x_q", x_q, dtypes=(_dt.int8,), ndim=2)
    x_scale = _check.array(op, "x_scale", x_scale, dtypes=(_dt.float32,), ndim=1)
    if x_scale.shape[0] != x_q.shape[0]:
        _check.fail(op, "x_scale", f"of shape [T] = [{x_q.shape[0]}] (the per-token scale carried with each int8 "
                    "row)", _check.describe(x_scale))
    C.check_finite(op, "x_scale", x_scale, numerics)
    if shared_input is not None:
        shared_input = _check.array(op, "shared_input", shared_input, dtypes=(_dt.bfloat16,), ndim=2)
        _check.same_shape(op, "shared_input", shared_input, "x_q", x_q)
    shared_expert_args(op, shared_expert, shared_input)
    if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float, np.floating)) \
            or not np.isfinite(float(routed_scaling_factor)):
        _check.fail(op, "routed_scaling_factor", "a finite float", repr(routed_scaling_factor))
    t, h = x_q.shape
    experts = expert_weights_args(op, h, w13, w13_scale, w2, w2_scale)
    if topk_ids is None or topk_weights is None:
        _check.fail(op, "topk_ids" if topk_ids is None else "topk_weights",
                    "given (the dispatch carries the router's topk_ids and fp32 topk_weights)", "None")
    routing = moe_routing_args(op, t, experts.e, None, None, topk_ids, topk_weights, "softmax", False, None, 1, 1,
                               0, 1.0, numerics)
    return sv, x_q, x_scale, shared_input, experts, routing, float(routed_scaling_factor)


def w8a8_moe_deepep_stages(x_q: np.ndarray, x_scale: np.ndarray, w13: np.ndarray, w13_scale: np.ndarray,
                           w2: np.ndarray, w2_scale: np.ndarray, *, topk_ids: np.ndarray, topk_weights: np.ndarray,
                           routed_scaling_factor: float = 1.0, shared_expert: Mapping | None = None,
                           shared_input: np.ndarray | None = None, swiglu_limit: float | None = None,
                           numerics: Numerics = ASCEND, serving=None) -> dict:
    """:func:`w8a8_moe_deepep` with every intermediate: ``recv_x`` (int8 ``[M, H]``, expert-grouped),
    ``recv_scale`` (fp32 ``[M]``), ``src_token`` (int64 ``[M]``), ``expert_tokens`` (int64 ``[E]``), ``gmm1``,
    ``act_q``, ``act_scale``, ``gmm2``, ``routed``, ``shared`` and ``y``."""
    op = "w8a8_moe_deepep"
    sv, x_q, x_scale, shared_input, ex, r, rsf = _deepep_args(
        op, x_q, x_scale, w13, w13_scale, w2, w2_scale, topk_ids, topk_weights, routed_scaling_factor,
        shared_expert, shared_input, numerics, serving)
    limit = swiglu_limit_arg(op, swiglu_limit)        # checked; the routed experts are not clamped here (M1)
    t, h = x_q.shape
    ids, wts = r.ids, r.weights
    k = ids.shape[1]
    w13_kn, s13, w2_kn, s2w = _load_experts(ex)
    order = np.argsort(ids.reshape(-1), kind="stable")          # expert-grouped, stable by token
    src = order // k
    counts = np.bincount(ids.reshape(-1), minlength=ex.e).astype(np.int64)
    recv_x, recv_scale = x_q[src], x_scale[src]                  # the payload as dispatched: no requant
    gmm1 = grouped_matmul(recv_x, w13_kn, scale=s13, per_token_scale=recv_scale, group_list=counts,
                          group_list_type=1, output_dtype=_dt.bfloat16, split_item=2, group_type=0, numerics=numerics)
    a_q, a_s = swiglu_quant(gmm1, counts, 1, numerics=numerics)
    gmm2 = grouped_matmul(a_q, w2_kn, scale=s2w, per_token_scale=a_s, group_list=counts, group_list_type=1,
                          output_dtype=_dt.bfloat16, split_item=2, group_type=0, numerics=numerics)
    slot = np.empty(t * k, np.int64)
    slot[order] = np.arange(t * k)                              # the expert-grouped row of copy (t, j)
    rows = gmm2[slot.reshape(t, k)].astype(np.float32)          # [T, k, H]
    acc = np.zeros((t, h), np.float32)
    for j in range(k):                                          # fp32 weights, fp32 sum in k order
        acc = (acc + wts[:, j:j + 1] * rows[:, j]).astype(np.float32)
    routed = scale_routed(to_float(acc, _dt.bfloat16), _sv.output_scaling(sv, rsf))
    shared = None
    y = routed
    if shared_expert is not None:
        shared = _shared(op, shared_expert, shared_input, numerics, _sv.shared_limit(sv, limit))
        y = to_float(routed.astype(np.float32) + shared.astype(np.float32), _dt.bfloat16)
    return {"recv_x": recv_x, "recv_scale": recv_scale, "src_token": src, "expert_tokens": counts, "gmm1": gmm1,
            "act_q": a_q, "act_scale": a_s, "gmm2": gmm2, "routed": routed, "shared": shared, "y": y}


def w8a8_moe_deepep(x_q: np.ndarray, x_scale: np.ndarray, w13: np.ndarray, w13_scale: np.ndarray, w2: np.ndarray,
                    w2_scale: np.ndarray, *, topk_ids: np.ndarray, topk_weights: np.ndarray,
                    routed_scaling_factor: float = 1.0, shared_expert: Mapping | None = None,
                    shared_input: np.ndarray | None = None, swiglu_limit: float | None = None,
                    numerics: Numerics = ASCEND, serving=None) -> np.ndarray:
    """The W8A8_DYNAMIC MoE layer on tokens dispatched DeepEP-style, already quantized (serving row M8).

    Parameters
    ----------
    x_q : int8 ``[T, H]`` and x_scale : float32 ``[T]``: each token quantized **once**, at its source, with the
        scale carried alongside (:func:`w8a8.dispatch_quant` gives SGLang's per-token quantization).
        Neither is requantized.
    w13, w13_scale, w2, w2_scale : the routed experts, as for :func:`w8a8.w8a8_moe`.
    topk_ids : int32/int64 ``[T, k]`` in ``[0, E)``; topk_weights : float ``[T, k]``, kept in fp32 for the
        combine (the DeepEP combine takes the router's weights as they are).
    routed_scaling_factor : row M2, applied to the bf16 routed output after the combine.
    shared_expert, shared_input : optional shared expert on the bf16 tokens (``shared_input``, ``[T, H]``),
        clamped per row M5 at ``swiglu_limit``.
    swiglu_limit : checked. The routed experts run **unclamped**: SGLang's DeepEP activation is built without
        a limit for this family (``gemm1_clamp_limit`` unset), and this ``swiglu_quant`` has none.
    serving : an engine whose ``prequantized_moe`` is ``"deepep_expert_grouped"`` (SGLang, the default).
        vllm-ascend's pre-quantized path is the MC2 dispatch (:func:`w8a8.w8a8_moe_ep`) and is refused here.

    Returns bf16 ``[T, H]``. Steps: module docstring. Errors: TypeError / ValueError naming the argument
    (``x_q``, ``x_scale``, ``topk_ids``, ``topk_weights``, the experts' weights, ``serving``, ...).
    """
    return w8a8_moe_deepep_stages(
        x_q, x_scale, w13, w13_scale, w2, w2_scale, topk_ids=topk_ids, topk_weights=topk_weights,
        routed_scaling_factor=routed_scaling_factor, shared_expert=shared_expert, shared_input=shared_input,
        swiglu_limit=swiglu_limit, numerics=numerics, serving=serving)["y"]
