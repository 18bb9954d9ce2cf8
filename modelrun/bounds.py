"""How far a quantized Linear may be from its float module on the same input: an analytic bound.

For one activation ``x [M, K]`` (the model dtype ``dt``, what the module really saw), the float
module ``y_f = x W^T + b`` (float64, the reference model's weights) and the serving path's output
``y_q``, :func:`dense_bound` gives ``B[m, n]`` with ``|y_q - y_f| <= B`` wherever the assumptions
hold. It uses the constants and the output-spacing helper of :mod:`conformance.bounds`
(``U32 = 2^-24``, ``BF16_SCALE_REL = 2^-8`` — bf16's unit roundoff, ``FP19_TRUNC_REL = 2^-10``,
:func:`~conformance.bounds.ulp_of_dtype`); ``u = ulp_dt(1) / 2`` is dt's unit roundoff.

Write ``x̂`` / ``ŵ`` for the dequantized activation and weight the kernel effectively multiplies.
Then exactly ``y_f - x̂ ŵ^T = x (W - ŵ)^T + (x - x̂) ŵ^T``, so

``B = sum_k |x_k| e_w[n, k] + sum_k |ŵ_nk| e_x[m, k] + e_b[n] + 4 u32 |y| + ulp_dt(|y|) / 2``

(the last two: the fp32 epilogue and the rounding to dt), times ``1 + 4u`` for second-order terms.

* **W8A8_DYNAMIC**: ``w_q = rint(dt(W / s_w))`` so ``|W - w_q s_w| <= s_w / 2 + u |W|``; the loaded
  scale ``s_w'`` (bf16 for a bf16 model) adds ``|w_q| |s_w' - s_w|``: ``e_w = s_w/2 + u|W| +
  |w_q||s_w' - s_w|``, ``ŵ = w_q s_w'``. Per-token ``s_t = max|x_m| / 127``: ``e_x = s_t / 2 + 2 u32 |x|``
  (never saturates). ``e_b = u |b|`` (the bias loaded in dt).
* **W8A8 (static)**: ``r = dt(1 / s)``, ``x_q = sat(rint(x r + o))``; *unsaturated*, ``x̂ = s (x_q - o)``
  has ``e_x = |x| (u + u32) + s/2``. msModelSlim writes no weight scale: ``deq = dt(s s_w)``, read by
  the kernel as ``deq'`` (fp32, or FP19 for an fp16 model: ``rho = 2^-10``), so ``ŵ = w_q deq'/s`` and
  ``e_w = s_w/2 + u|W| + |w_q| s_w (u_d + rho)`` with ``s_w <= (deq/s)(1 + u_d)``, ``u_d = max(u,
  ulp_dt(deq) / 2deq)`` (msModelSlim rounds ``deq`` to dt: an fp16 ``deq`` below 2^-14 is subnormal and
  keeps fewer bits). The folded bias
  ``deq' rint(fp32(dt(b / deq)))`` gives ``e_b = (rho + u(1 + rho)) |b| + deq'/2``.
  The clamp to ``[-128, 127]`` adds ``s * beyond`` where ``beyond`` is how far ``x r + o`` lies outside;
  up to one code is included in ``e_x`` (the calibration's extremes land there through the rounded
  reciprocal). **A saturated activation** — more than one code outside, i.e. outside the calibrated
  range — is not: those values are counted, and the error there may exceed the bound, which is
  what "the first module whose error exceeds its bound" finds.

The weight terms assume ``W`` is the float weight the checkpoint was exported from (no smoothing
or rotation folded in since): a wrong reference, or an anti-outlier step, exceeds the bound too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.bounds import BF16_SCALE_REL, FP19_TRUNC_REL, U32, ulp_of_dtype
from w8a8 import dtypes as _dt


@dataclass
class DenseBound:
    bound: np.ndarray            # [M, N] float64
    saturated: int = 0           # static: activation values outside the calibrated range
    saturated_channels: tuple = ()


def unit_roundoff(dt) -> float:
    if np.dtype(dt) == _dt.bfloat16:
        return BF16_SCALE_REL
    return float(ulp_of_dtype(np.array([1.0]), dt)[0]) / 2


def _loaded_scale(scale32: np.ndarray, dt) -> np.ndarray:
    """W8A8_DYNAMIC: the weight scale as the layer holds it (bf16 for a bf16 model, else fp32)."""
    s = scale32.astype(np.float32).reshape(-1)
    return s.astype(_dt.bfloat16).astype(np.float64) if np.dtype(dt) == _dt.bfloat16 else s.astype(np.float64)


def _deq_as_read(deq: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(exported fp32 deq, the value the kernel reads, its relative truncation bound)."""
    if deq.dtype == np.float32:
        d = deq.astype(np.float64)
        return d, d, 0.0
    low = (deq.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)
    exact = low.view(np.float32).astype(np.float64)
    read = (low & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    return exact, read, FP19_TRUNC_REL


def dense_bound(scheme: str, x: np.ndarray, w_ref: np.ndarray, b_ref, tensors: dict, dt) -> DenseBound:
    """``B [M, N]`` (module docstring) for a dense Linear of ``scheme`` ("W8A8_DYNAMIC" / "W8A8").

    ``x`` ``[..., K]`` in ``dt``; ``w_ref`` float ``[N, K]`` and ``b_ref`` (or None) from the
    reference; ``tensors``: the checkpoint tensors by suffix (``".weight"``, ``".weight_scale"``,
    ``".input_scale"``, ...).
    """
    u = unit_roundoff(dt)
    k = x.shape[-1]
    xf = np.asarray(x, dtype=np.float32).reshape(-1, k).astype(np.float64)
    ax = np.abs(xf)
    w_q = np.asarray(tensors[".weight"]).astype(np.float64)
    aw_q = np.abs(w_q)
    aw = np.abs(np.asarray(w_ref, dtype=np.float64))
    ab = np.zeros(w_q.shape[0]) if b_ref is None else np.abs(np.asarray(b_ref, dtype=np.float64))
    out = DenseBound(np.zeros((xf.shape[0], w_q.shape[0])))
    if scheme == "W8A8_DYNAMIC":
        s_w = np.asarray(tensors[".weight_scale"]).astype(np.float64).reshape(-1)
        s_load = _loaded_scale(np.asarray(tensors[".weight_scale"]), dt)
        e_w_scalar = (s_w / 2)[:, None] + u * aw + aw_q * np.abs(s_load - s_w)[:, None]    # [N, K]
        w_hat = aw_q * s_load[:, None]
        s_t = ax.max(axis=1) / 127.0
        term_w = ax @ e_w_scalar.T
        term_x = (s_t / 2)[:, None] * w_hat.sum(axis=1)[None, :] + 2 * U32 * (ax @ w_hat.T)
        e_b = u * ab
    elif scheme == "W8A8":
        s = float(np.asarray(tensors[".input_scale"], dtype=np.float32).reshape(-1)[0])
        o = float(np.asarray(tensors[".input_offset"], dtype=np.float32).reshape(-1)[0])
        deq, deq_read, rho = _deq_as_read(np.asarray(tensors[".deq_scale"]))
        r = float(np.float32(np.float32(1) / np.float32(np.float32(s).astype(dt))).astype(dt))
        pre = np.asarray(x, dtype=np.float32).reshape(-1, k).astype(np.float64) * r + o
        beyond = np.maximum(np.maximum(-128.0 - pre, pre - 127.0), 0.0)     # codes outside [-128, 127]
        sat = beyond > 1.0
        out.saturated = int(sat.sum())
        if out.saturated:
            counts = sat.sum(axis=0)
            out.saturated_channels = tuple(int(c) for c in np.argsort(-counts)[: min(8, int((counts > 0).sum()))])
        # deq = dt(s * s_w): relative rounding u, more where it is subnormal in dt (fp16 below 2^-14)
        u_deq = np.maximum(u, ulp_of_dtype(deq, dt) / (2 * deq))
        s_w = deq / s * (1 + u_deq)
        e_w_scalar = (s_w / 2)[:, None] + u * aw + aw_q * (s_w * (u_deq + rho))[:, None]
        w_hat = aw_q * (deq_read / s)[:, None]
        term_w = ax @ e_w_scalar.T
        e_x = ax * (u + U32) + s * (0.5 + np.minimum(beyond, 1.0))
        term_x = e_x @ w_hat.T
        e_b = (rho + u * (1 + rho)) * ab + deq_read / 2
    else:
        raise ValueError(f"dense_bound: argument 'scheme' must be 'W8A8_DYNAMIC' or 'W8A8'; got {scheme!r}")
    y = np.abs(xf @ np.asarray(w_ref, dtype=np.float64).T) + ab[None, :]
    b0 = (term_w + term_x + e_b[None, :]) * (1 + 4 * u)
    mag = y + b0
    out.bound = b0 + 4 * U32 * mag + ulp_of_dtype(mag, dt) / 2
    return out
