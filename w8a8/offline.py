"""Offline (export-time) quantization with msModelSlim's formulas (msModelSlim
``msmodelslim/ir/api/impl/int_quantization.py``, ``core/quant_service/modelslim_v1/save/ascendv1.py``).

These produce the tensors an AscendV1 checkpoint stores; the serving paths in :mod:`w8a8.linear`
consume them. Two arithmetics:

* **msModelSlim's** (``model_dtype`` given to :func:`quantize_weight_per_channel` /
  :func:`calibrate_activation_per_tensor`, ``arithmetic="model"`` in :func:`static_params`): the
  tensors are in the model dtype ``dt`` and **every op rounds to dt** (torch on the float model:
  msModelSlim ``ir/api/impl/int_quantization.py`` ``calculate_int_qparam`` / ``int_quantize``, and
  ``save/ascendv1.py`` ``on_w8a8_static``, whose operands are the model's bf16 / fp16 tensors). A
  dt op is computed here as torch's CPU kernels compute it: in float32, rounded once to dt (RNE).
  This reproduces the checkpoints msModelSlim 26.1.0 writes bit for bit (every int8 weight, scale,
  ``deq_scale``, ``quant_bias``, ``input_scale`` and ``input_offset`` of the four real checkpoints
  in ``tests/modelrun/data``, every layer — ``tests/modelrun/test_offline_msmodelslim.py``).
* **float32** (the default, ``model_dtype=None`` / ``arithmetic="float32"``): the same formulas
  with every op in float32 — what an fp32 model gets from msModelSlim, and this module's behaviour
  before the msModelSlim mode existed (:mod:`checkpoints.writer` uses it on fp32 weights). For a
  bf16 / fp16 model it is *not* msModelSlim's result: about 10 % of the int8 weights differ by 1
  and ``quant_bias`` entries by up to ~100.

Rounding is ``torch.round`` (half to even). Bad input raises TypeError (dtypes) or ValueError
(shapes, NaN/Inf anywhere in the inputs — an export must not write them) naming the argument.
"""

from __future__ import annotations

import numpy as np

from . import _check
from . import dtypes as _dt
from .rounding import round_half_even, to_float
from .trans_quant_param import fp32_bits_to_int64

__all__ = ["quantize_weight_per_channel", "calibrate_activation_per_tensor", "static_params"]

_FLOATS = (_dt.float32, _dt.bfloat16, _dt.float16)
_EPS = np.finfo(np.float32).eps
_ARITHMETIC = ("float32", "model")


def _model_dtype(op: str, model_dtype) -> np.dtype | None:
    if model_dtype is None:
        return None
    dt = _dt.resolve(model_dtype, arg="model_dtype", op=op)
    if dt not in _FLOATS:
        _check.fail(op, "model_dtype", "None, bfloat16, float16 or float32", repr(model_dtype), TypeError)
    return np.dtype(dt)


def _rd(x32, dt: np.dtype) -> np.ndarray:
    """One torch op on dt tensors: the float32 result rounded to dt (RNE), returned as float32."""
    x32 = np.asarray(x32, dtype=np.float32)
    if dt == np.float32:
        return x32
    with np.errstate(over="ignore"):
        return to_float(x32, dt).astype(np.float32)


def quantize_weight_per_channel(w: np.ndarray, *, model_dtype=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Symmetric per-channel int8 weight quantization (msModelSlim ``minmax``, W8A8 / W8A8_DYNAMIC).

    Parameters
    ----------
    w : float ``[N, K]`` (``nn.Linear`` layout; one scale per output row), or ``[E, N, K]``.
    model_dtype : None (default): float32 arithmetic on ``fp32(w)``. ``"bfloat16"`` / ``"float16"`` /
        ``"float32"``: msModelSlim's arithmetic — ``w`` is rounded to that dtype first (the float
        model holds it so) and every op rounds to it (module docstring).

    Returns ``(weight int8 [.., N, K], weight_scale float32 [.., N, 1], weight_offset float32 [.., N, 1] = 0)``::

        dt = model_dtype (float32 when None)
        lo = min(min_k w, 0);  hi = max(max_k w, 0)          # exact in dt
        scale = max(dt(max(|lo|, hi) / 127), dt(eps_fp32))
        q = clamp(rint(dt(w / scale)), -128, 127)            # weight_scale = fp32(scale)
    """
    op = "quantize_weight_per_channel"
    dt = _model_dtype(op, model_dtype)
    w = _check.array(op, "w", w, dtypes=_FLOATS, min_ndim=2, max_ndim=3)
    _check.finite(op, "w", w)
    calc = np.dtype(np.float32) if dt is None else dt
    wf = _rd(w.astype(np.float32), calc)
    lo = np.minimum(wf.min(axis=-1, keepdims=True), np.float32(0))
    hi = np.maximum(wf.max(axis=-1, keepdims=True), np.float32(0))
    eps = _rd(np.float32(_EPS), calc)
    scale = np.maximum(_rd(np.maximum(np.abs(lo), hi) / np.float32(127), calc), eps).astype(np.float32)
    with np.errstate(over="ignore"):
        q = np.clip(round_half_even(_rd(wf / scale, calc)), -128, 127).astype(np.int8)
    return q, scale, np.zeros_like(scale)


def calibrate_activation_per_tensor(x: np.ndarray, *, model_dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """Asymmetric per-tensor activation parameters (msModelSlim static W8A8): ``(input_scale [1], input_offset [1])``.

    Parameters
    ----------
    x : float, any shape: the calibration activations (or just their observed ``[min, max]``).
    model_dtype : None (default): float32 arithmetic. A dtype: msModelSlim's arithmetic in it
        (``x`` rounded to it first; every op rounds to it).

    Formula (msModelSlim ``calculate_int_qparam``, asymmetric: ``max/255 - min/255``, two
    quotients and a difference, not ``(max - min)/255``; both stored as float32)::

        dt = model_dtype (float32 when None)
        lo = min(min x, 0);  hi = max(max x, 0)
        scale = max(dt(dt(hi / 255) - dt(lo / 255)), dt(eps_fp32))
        offset = rint(dt(-lo / scale)) - 128                 # integral, in [-128, 127]
    """
    op = "calibrate_activation_per_tensor"
    dt = _model_dtype(op, model_dtype)
    x = _check.array(op, "x", x, dtypes=_FLOATS)
    if x.size == 0:
        _check.fail(op, "x", "a non-empty calibration sample", _check.describe(x))
    _check.finite(op, "x", x)
    calc = np.dtype(np.float32) if dt is None else dt
    xf = _rd(x.astype(np.float32), calc)
    lo = np.float32(min(float(xf.min()), 0.0))
    hi = np.float32(max(float(xf.max()), 0.0))
    eps = _rd(np.float32(_EPS), calc)
    scale = np.float32(max(_rd(_rd(hi / np.float32(255), calc) - _rd(lo / np.float32(255), calc), calc), eps))
    offset = np.float32(round_half_even(_rd(np.float32(-lo) / scale, calc)) - 128)
    return np.array([scale], np.float32), np.array([offset], np.float32)


def static_params(weight: np.ndarray, weight_scale: np.ndarray, input_scale: np.ndarray, input_offset: np.ndarray,
                  bias: np.ndarray | None = None, *, model_dtype="bfloat16",
                  arithmetic: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    """``deq_scale`` and ``quant_bias`` of a static W8A8 Linear (msModelSlim ``on_w8a8_static``).

    Parameters
    ----------
    weight : int8 ``[N, K]``; weight_scale : float32 ``[N]`` / ``[N, 1]``;
    input_scale, input_offset : float32 ``[1]``; bias : optional float ``[N]``;
    model_dtype : the model's dtype. It decides the stored ``deq_scale``: ``"bfloat16"`` -> float32;
        anything else -> int64 (raw fp32 bits, msModelSlim ``deqscale2int64``); and, with
        ``arithmetic="model"``, the dtype the arithmetic rounds to.
    arithmetic : ``"float32"`` (default): every op in float32. ``"model"``: msModelSlim's — the
        scales, the bias and the quotient are model-dtype tensors (reproduces its checkpoints).

    Returns ``(deq_scale [N], quant_bias int32 [N])``::

        dt = model_dtype if arithmetic == "model" else float32
        deq_scale  = dt(dt(input_scale) * dt(weight_scale))          # stored as fp32 (or its bits)
        quant_bias = rint(fp32(dt(dt(b) / deq_scale)) - fp32(sum_k weight[n, k]) * input_offset)

    (the row sum and its product with the offset in float32; b = 0 without a bias.)
    """
    op = "static_params"
    arithmetic = _check.choice(op, "arithmetic", arithmetic, _ARITHMETIC)
    w = _check.array(op, "weight", weight, dtypes=(_dt.int8,), ndim=2)
    n = w.shape[0]
    ws = _check.array(op, "weight_scale", weight_scale, dtypes=(_dt.float32,))
    if ws.shape not in ((n,), (n, 1)):
        _check.fail(op, "weight_scale", f"of shape [{n}] or [{n}, 1]", _check.describe(ws))
    s_in = _check.array(op, "input_scale", input_scale, dtypes=(_dt.float32,))
    o_in = _check.array(op, "input_offset", input_offset, dtypes=(_dt.float32,))
    for arg, value in (("weight_scale", ws), ("input_scale", s_in), ("input_offset", o_in)):
        _check.finite(op, arg, value)
    mdt = _dt.resolve(model_dtype, arg="model_dtype", op=op)
    calc = np.dtype(mdt) if arithmetic == "model" else np.dtype(np.float32)
    if arithmetic == "model" and calc not in _FLOATS:
        _check.fail(op, "model_dtype", "bfloat16, float16 or float32 with arithmetic='model'", repr(model_dtype),
                    TypeError)
    deq = _rd(_rd(s_in.reshape(()), calc) * _rd(ws.reshape(n), calc), calc).astype(np.float32)
    qb = _quant_bias(op, "weight_scale", w, deq, o_in, bias, calc)
    is_bf16 = mdt == _dt.bfloat16
    return (deq if is_bf16 else fp32_bits_to_int64(deq)), qb


def static_quant_bias(weight: np.ndarray, deq_scale: np.ndarray, input_offset: np.ndarray,
                      bias: np.ndarray | None = None, *, model_dtype="bfloat16", arithmetic: str = "float32") -> np.ndarray:
    """``quant_bias`` int32 ``[N]`` of a static W8A8 Linear from its fp32 ``deq_scale [N]`` (the second
    half of :func:`static_params`; for a checkpoint that stores ``deq_scale`` but no weight scale)::

        quant_bias = rint(fp32(dt(dt(b) / deq_scale)) - fp32(sum_k weight[n, k]) * input_offset)

    ``dt`` as in :func:`static_params`. ValueError when a value does not fit int32 (a zero deq_scale).
    """
    op = "static_quant_bias"
    arithmetic = _check.choice(op, "arithmetic", arithmetic, _ARITHMETIC)
    w = _check.array(op, "weight", weight, dtypes=(_dt.int8,), ndim=2)
    n = w.shape[0]
    deq = _check.array(op, "deq_scale", deq_scale, dtypes=(_dt.float32,))
    if deq.shape != (n,):
        _check.fail(op, "deq_scale", f"float32 of shape [{n}]", _check.describe(deq))
    o_in = _check.array(op, "input_offset", input_offset, dtypes=(_dt.float32,))
    _check.finite(op, "input_offset", o_in)
    mdt = _dt.resolve(model_dtype, arg="model_dtype", op=op)
    calc = np.dtype(mdt) if arithmetic == "model" else np.dtype(np.float32)
    if calc not in _FLOATS:
        _check.fail(op, "model_dtype", "bfloat16, float16 or float32", repr(model_dtype), TypeError)
    return _quant_bias(op, "deq_scale", w, deq, o_in, bias, calc)


def _quant_bias(op: str, scale_arg: str, w: np.ndarray, deq: np.ndarray, o_in: np.ndarray, bias, calc) -> np.ndarray:
    n = w.shape[0]
    b = np.zeros(n, np.float32) if bias is None else _check.array(op, "bias", bias, dtypes=_FLOATS).astype(np.float32)
    _check.finite(op, "bias", b)
    if b.shape != (n,):
        _check.fail(op, "bias", f"of shape [{n}]", _check.describe(bias))
    correction = w.astype(np.float32).sum(axis=1, dtype=np.float32) * o_in.reshape(()).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        qb = round_half_even((_rd(_rd(b, calc) / deq, calc) - correction).astype(np.float32))
    # In float32, 2**31 - 1 rounds up to 2**31: compare with the exact bounds [-2^31, 2^31).
    if not np.isfinite(qb).all() or (qb >= 2.0**31).any() or (qb < -2.0**31).any():
        _check.fail(op, scale_arg, "such that quant_bias fits int32 (no zero deq_scale)", "an overflow")
    return qb.astype(np.int32)
