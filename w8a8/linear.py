"""The two W8A8 Linear serving paths, end to end, as SGLang / vllm-ascend run them on Ascend.

Both take the weight as the checkpoint stores it (int8 ``[N, K]``, ``nn.Linear`` layout) and do the
load-time conversion the serving code does (transpose to ``[K, N]``; the NZ cast changes storage
only, not values) before the forward (spec/serving-paths.md §3, §4).
"""

from __future__ import annotations

import numpy as np

from . import _check
from . import dtypes as _dt
from .dynamic_quant import dynamic_quant
from .numerics import ASCEND, Numerics
from .quant_matmul import quant_matmul_stages
from .quantize import quantize

_X_DTYPES = (_dt.bfloat16, _dt.float16)


def _weight(op: str, x: np.ndarray, weight) -> tuple[np.ndarray, int, int]:
    weight = _check.array(op, "weight", weight, dtypes=(_dt.int8,), ndim=2)
    n, k = weight.shape
    if x.shape[-1] != k:
        _check.fail(op, "x", f"of last dimension K = {k} (weight is [N, K] = {weight.shape})", _check.describe(x))
    return weight, n, k


def _vector(op: str, arg: str, value, n: int, dtypes) -> np.ndarray:
    """A checkpoint vector ``[n]`` or ``[n, 1]`` as 1-D."""
    value = _check.array(op, arg, value, dtypes=dtypes)
    if value.shape not in ((n,), (n, 1)):
        _check.fail(op, arg, f"of shape [{n}] or [{n}, 1]", _check.describe(value))
    return value.reshape(n)


def dynamic_linear_stages(x: np.ndarray, weight: np.ndarray, weight_scale: np.ndarray, *,
                          bias: np.ndarray | None = None, numerics: Numerics = ASCEND) -> dict[str, np.ndarray]:
    """:func:`w8a8_dynamic_linear` with every intermediate: ``x_q``, ``x_scale``, ``weight_kn``,
    ``weight_scale`` (as loaded), ``bias`` (as loaded), ``acc`` (int32) and ``y``."""
    op = "w8a8_dynamic_linear"
    x = _check.array(op, "x", x, dtypes=_X_DTYPES, min_ndim=1)
    weight, n, k = _weight(op, x, weight)
    ws = _vector(op, "weight_scale", weight_scale, n, (_dt.float32, _dt.bfloat16))
    # SGLang registers weight_scale in params_dtype: bf16 for a bf16 model, so the fp32 checkpoint
    # scale is rounded to bf16. An fp16 scale is illegal for npu_quant_matmul; fp16 models use the
    # fp32 copy (vllm-ascend's weight_scale_fp32).
    ws = ws.astype(_dt.bfloat16) if x.dtype == _dt.bfloat16 else ws.astype(np.float32)
    b = None
    if bias is not None:
        b = _vector(op, "bias", bias, n, (_dt.float32, _dt.bfloat16, _dt.float16)).astype(x.dtype)
    w_kn = weight.T
    x2 = x.reshape(-1, k)
    x_q, x_scale = dynamic_quant(x2, numerics=numerics)
    mm = quant_matmul_stages(x_q, w_kn, ws, pertoken_scale=x_scale, bias=b, output_dtype=x.dtype,
                             numerics=numerics)
    return {"x_q": x_q, "x_scale": x_scale, "weight_kn": w_kn, "weight_scale": ws, "bias": b, "acc": mm["acc"],
            "y": mm["y"].reshape(x.shape[:-1] + (n,))}


def w8a8_dynamic_linear(x: np.ndarray, weight: np.ndarray, weight_scale: np.ndarray, *,
                        bias: np.ndarray | None = None, numerics: Numerics = ASCEND) -> np.ndarray:
    """The ``W8A8_DYNAMIC`` Linear: per-token dynamic int8 activations, per-channel int8 weights.

    Parameters
    ----------
    x : bfloat16 or float16 ``[..., K]``.
    weight : int8 ``[N, K]`` (checkpoint layout).
    weight_scale : float32 (or bfloat16) ``[N]`` or ``[N, 1]`` (checkpoint layout).
    bias : optional float ``[N]`` (a ``FLOAT``-tagged checkpoint bias).
    numerics : passed to both ops.

    Steps (SGLang ``NPUW8A8Int8DynamicLinearMethod``; spec/serving-paths.md §4)::

        load:    W = weight.T ([K, N]);  s_w = weight_scale -> x.dtype for bf16 (rounded!),
                 fp32 for fp16 (the only legal fp16-output scale);  b = bias -> x.dtype
        forward: x_q, s_tok = dynamic_quant(x.reshape(-1, K))
                 y = quant_matmul(x_q, W, s_w, pertoken_scale=s_tok, bias=b, output_dtype=x.dtype)
                 = ((fp32(acc) * s_w[n]) * s_tok[m]) + b[n]   -> x.dtype (RNE)

    Returns ``[..., N]`` of x's dtype.
    """
    return dynamic_linear_stages(x, weight, weight_scale, bias=bias, numerics=numerics)["y"]


def static_linear_stages(x: np.ndarray, weight: np.ndarray, *, input_scale: np.ndarray, input_offset: np.ndarray,
                         deq_scale: np.ndarray, quant_bias: np.ndarray | None, bias: np.ndarray | None = None,
                         numerics: Numerics = ASCEND) -> dict[str, np.ndarray]:
    """:func:`w8a8_static_linear` with its intermediates: ``input_scale_reciprocal``, ``input_offset``
    (as loaded, ``[K]``), ``x_q``, ``acc`` and ``y``."""
    op = "w8a8_static_linear"
    x = _check.array(op, "x", x, dtypes=_X_DTYPES, min_ndim=1)
    weight, n, k = _weight(op, x, weight)
    s_in = _check.array(op, "input_scale", input_scale, dtypes=(_dt.float32, _dt.bfloat16, _dt.float16))
    o_in = _check.array(op, "input_offset", input_offset, dtypes=(_dt.float32, _dt.bfloat16, _dt.float16, _dt.int8))
    for arg, value in (("input_scale", s_in), ("input_offset", o_in)):
        if value.size != 1:
            _check.fail(op, arg, "per-tensor, of shape [1]", _check.describe(value))
    deq = _vector(op, "deq_scale", deq_scale, n, (_dt.float32, _dt.int64))
    qb = None if quant_bias is None else _vector(op, "quant_bias", quant_bias, n, (_dt.int32,))
    if qb is not None and bias is not None:
        _check.fail(op, "bias", "None when quant_bias is given (msModelSlim folds the float bias into quant_bias)",
                    _check.describe(bias))
    b = None if bias is None else _vector(op, "bias", bias, n, (_dt.float32, _dt.bfloat16, _dt.float16))
    # Load: params_dtype parameters repeated to [K]; the reciprocal is computed in params_dtype
    # (torch computes a bf16 division in fp32 and rounds once), as SGLang does.
    params = x.dtype
    s_param = s_in.reshape(1).astype(np.float32).astype(params)
    with np.errstate(over="ignore", divide="ignore"):  # a degenerate (eps) scale overflows fp16: Inf, as on device
        recip = (np.float32(1) / s_param.astype(np.float32)).astype(params)
    recip_k = np.repeat(recip, k)
    off_k = np.repeat(o_in.reshape(1).astype(np.float32).astype(params), k)
    x2 = x.reshape(-1, k)
    x_q = quantize(x2, recip_k, off_k, dtype="int8", axis=-1, div_mode=False, numerics=numerics)
    w_kn = weight.T
    mm = quant_matmul_stages(x_q, w_kn, deq, bias=qb if qb is not None else (None if b is None else b.astype(params)),
                             output_dtype=x.dtype, numerics=numerics)
    return {"input_scale_reciprocal": recip_k, "input_offset": off_k, "x_q": x_q, "acc": mm["acc"],
            "y": mm["y"].reshape(x.shape[:-1] + (n,))}


def w8a8_static_linear(x: np.ndarray, weight: np.ndarray, *, input_scale: np.ndarray, input_offset: np.ndarray,
                       deq_scale: np.ndarray, quant_bias: np.ndarray | None, bias: np.ndarray | None = None,
                       numerics: Numerics = ASCEND) -> np.ndarray:
    """The static ``W8A8`` Linear: per-tensor static int8 activations with an offset, int8 weights.

    Parameters
    ----------
    x : bfloat16 or float16 ``[..., K]``.
    weight : int8 ``[N, K]``.
    input_scale, input_offset : per-tensor ``[1]`` (checkpoint float32; int8 offsets accepted as
        vllm-ascend registers them).
    deq_scale : ``[N]``: float32 for a bf16 model, int64 for an fp16 model (msModelSlim stores the
        raw fp32 bits; the fix-pipe reads them as FP19 — :func:`~w8a8.trans_quant_param.decode_quant_param`).
    quant_bias : int32 ``[N]`` = ``round(b / deq - input_offset * sum_k w_q)`` (msModelSlim), or None
        (on tensor-parallel ranks > 0 of a RowParallelLinear, where it must be added once only).
    bias : a float bias ``[N]`` to add after dequant instead (compressed-tensors style; bf16 output
        only). Not allowed together with quant_bias.

    Steps (SGLang ``NPUW8A8Int8LinearMethod``; spec/serving-paths.md §3)::

        load:    W = weight.T;  r = 1 / input_scale (in params dtype), repeated to [K];
                 o = input_offset (params dtype), repeated to [K]
        forward: x_q = quantize(x, r, o, dtype=int8, axis=-1, div_mode=False)
                     = sat_int8(rint(fp32(x) * fp32(r) + fp32(o)))
                 y = quant_matmul(x_q, W, deq_scale, bias=quant_bias, output_dtype=x.dtype)
                   = fp32(acc + quant_bias) * deq[n]   -> x.dtype (bf16 full precision;
                     fp16: FP19 scale in the fix-pipe)

    Returns ``[..., N]`` of x's dtype.
    """
    return static_linear_stages(x, weight, input_scale=input_scale, input_offset=input_offset,
                                deq_scale=deq_scale, quant_bias=quant_bias, bias=bias, numerics=numerics)["y"]
