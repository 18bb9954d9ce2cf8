"""Offline (export-time) quantization with msModelSlim's formulas (spec/serving-paths.md §1.3, §1.4, §3.3).

These produce the tensors an AscendV1 checkpoint stores; the serving paths in :mod:`w8a8.linear`
consume them. All arithmetic is float32 as in msModelSlim (torch), with ``torch.round``
(half to even). Bad input raises TypeError (dtypes) or ValueError (shapes, NaN/Inf anywhere in the
inputs — an export must not write them) naming the argument.
"""

from __future__ import annotations

import numpy as np

from . import _check
from . import dtypes as _dt
from .rounding import round_half_even
from .trans_quant_param import fp32_bits_to_int64

__all__ = ["quantize_weight_per_channel", "calibrate_activation_per_tensor", "static_params"]

_FLOATS = (_dt.float32, _dt.bfloat16, _dt.float16)
_EPS = np.finfo(np.float32).eps


def quantize_weight_per_channel(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Symmetric per-channel int8 weight quantization (msModelSlim ``minmax``, W8A8 / W8A8_DYNAMIC).

    Parameters
    ----------
    w : float ``[N, K]`` (``nn.Linear`` layout; one scale per output row), or ``[E, N, K]``.

    Returns ``(weight int8 [.., N, K], weight_scale float32 [.., N, 1], weight_offset float32 [.., N, 1] = 0)``::

        lo = min(min_k w, 0);  hi = max(max_k w, 0)          # range clamped to include 0
        scale = max(max(|lo|, hi) / 127, eps_fp32)
        q = clamp(rint(w / scale), -128, 127)
    """
    op = "quantize_weight_per_channel"
    w = _check.array(op, "w", w, dtypes=_FLOATS, min_ndim=2, max_ndim=3)
    _check.finite(op, "w", w)
    wf = w.astype(np.float32)
    lo = np.minimum(wf.min(axis=-1, keepdims=True), 0)
    hi = np.maximum(wf.max(axis=-1, keepdims=True), 0)
    scale = np.maximum(np.maximum(np.abs(lo), hi) / np.float32(127), _EPS).astype(np.float32)
    q = np.clip(round_half_even(wf / scale), -128, 127).astype(np.int8)
    return q, scale, np.zeros_like(scale)


def calibrate_activation_per_tensor(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Asymmetric per-tensor activation parameters (msModelSlim static W8A8): ``(input_scale [1], input_offset [1])``::

        lo = min(min x, 0);  hi = max(max x, 0)
        scale = max(hi / 255 - lo / 255, eps_fp32)
        offset = rint(-lo / scale) - 128                  # integral, in [-128, 127]
    """
    op = "calibrate_activation_per_tensor"
    x = _check.array(op, "x", x, dtypes=_FLOATS)
    if x.size == 0:
        _check.fail(op, "x", "a non-empty calibration sample", _check.describe(x))
    _check.finite(op, "x", x)
    xf = x.astype(np.float32)
    lo = np.float32(min(float(xf.min()), 0.0))
    hi = np.float32(max(float(xf.max()), 0.0))
    scale = np.float32(max(hi / np.float32(255) - lo / np.float32(255), _EPS))
    offset = np.float32(round_half_even(np.float32(-lo / scale)) - 128)
    return np.array([scale], np.float32), np.array([offset], np.float32)


def static_params(weight: np.ndarray, weight_scale: np.ndarray, input_scale: np.ndarray, input_offset: np.ndarray,
                  bias: np.ndarray | None = None, *, model_dtype="bfloat16") -> tuple[np.ndarray, np.ndarray]:
    """``deq_scale`` and ``quant_bias`` of a static W8A8 Linear (msModelSlim ``on_w8a8_static``).

    Parameters
    ----------
    weight : int8 ``[N, K]``; weight_scale : float32 ``[N]`` / ``[N, 1]``;
    input_scale, input_offset : float32 ``[1]``; bias : optional float ``[N]``;
    model_dtype : ``"bfloat16"`` -> deq_scale float32; anything else -> int64 (raw fp32 bits,
        msModelSlim ``deqscale2int64``).

    Returns ``(deq_scale [N], quant_bias int32 [N])``, in fp32::

        deq_scale  = input_scale * weight_scale
        quant_bias = rint(b / deq_scale - sum_k(fp32(weight[n, k])) * input_offset)
    """
    op = "static_params"
    w = _check.array(op, "weight", weight, dtypes=(_dt.int8,), ndim=2)
    n = w.shape[0]
    ws = _check.array(op, "weight_scale", weight_scale, dtypes=(_dt.float32,))
    if ws.shape not in ((n,), (n, 1)):
        _check.fail(op, "weight_scale", f"of shape [{n}] or [{n}, 1]", _check.describe(ws))
    s_in = _check.array(op, "input_scale", input_scale, dtypes=(_dt.float32,))
    o_in = _check.array(op, "input_offset", input_offset, dtypes=(_dt.float32,))
    for arg, value in (("weight_scale", ws), ("input_scale", s_in), ("input_offset", o_in)):
        _check.finite(op, arg, value)
    deq = (s_in.reshape(()) * ws.reshape(n)).astype(np.float32)
    b = np.zeros(n, np.float32) if bias is None else _check.array(op, "bias", bias, dtypes=_FLOATS).astype(np.float32)
    _check.finite(op, "bias", b)
    if b.shape != (n,):
        _check.fail(op, "bias", f"of shape [{n}]", _check.describe(bias))
    correction = w.astype(np.float32).sum(axis=1, dtype=np.float32) * o_in.reshape(()).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        qb = round_half_even((b / deq - correction).astype(np.float32))
    # In float32, 2**31 - 1 rounds up to 2**31: compare with the exact bounds [-2^31, 2^31).
    if not np.isfinite(qb).all() or (qb >= 2.0**31).any() or (qb < -2.0**31).any():
        _check.fail(op, "weight_scale", "such that quant_bias fits int32 (no zero deq_scale)", "an overflow")
    qb = qb.astype(np.int32)
    is_bf16 = _dt.resolve(model_dtype, arg="model_dtype", op=op) == _dt.bfloat16
    return (deq if is_bf16 else fp32_bits_to_int64(deq)), qb
