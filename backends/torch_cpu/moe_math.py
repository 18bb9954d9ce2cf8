"""The elementwise arithmetic of the MoE ops in torch, bit for bit as the golden's :mod:`w8a8.moe._common`.

Under :data:`w8a8.ASCEND` (``transcendental="float64"``) every ``exp`` / ``log1p`` is evaluated in
float64 and rounded once to float32, as the golden does. torch's and NumPy's float64 ``exp`` differ
in the last float64 bit for ~5% of arguments (different vector libraries), but a float64 result
within an ulp of the true value rounds to the same float32 except when the true value lies within
~2^-29 relative of a float32 rounding boundary: 0 mismatches in 2*10^7 random arguments here (the
golden's ``_common`` docstring makes the same argument). Row sums are float64 sums rounded once to
float32 (the golden's ``sum_f32``), with the same caveat for summation order.

Everything else is float32 arithmetic, one torch op per golden step (no fused multiply-add), with
the traps of :mod:`backends.torch_cpu.arith` avoided (tensor / tensor divisions only, explicit
widening before mixed-dtype arithmetic). NumPy semantics that torch does not share are written out:

* torch's float32 ``sqrt`` is not correctly rounded (a 0.5-ulp-class vector approximation: 16% of
  random arguments differ from NumPy's IEEE ``sqrt``): :func:`sqrt32` takes the float64 square root
  (correctly rounded) and rounds it to float32, which is the correctly rounded float32 square root
  (53 >= 2 * 24 + 2 bits: the double rounding is innocuous);
* ``np.maximum(v, 0)`` turns ``-0.0`` into ``+0.0`` (torch's ``clamp_min`` keeps ``-0.0``): :func:`relu_`;
* a float64 -> float16 cast in torch rounds twice (via float32) where NumPy rounds once: :func:`f64_to_f16`.
"""

from __future__ import annotations

import torch

from .arith import const, to_int
from .quant import _row_absmax

F32 = torch.float32
F64 = torch.float64


_EXP_LO, _EXP_HI = -104.0, 89.0
"""Every x <= -104 has exp(x) < 2^-150 (half the smallest fp32 subnormal): it rounds to 0; every x >= 89
has exp(x) > fp32 max + half an ulp: it rounds to +Inf. Clamping the argument to [-104, 89] changes no
fp32 result and keeps float64 ``exp`` off its slow out-of-range path (~5-10x slower, in NumPy too)."""


def exp32(x32: torch.Tensor) -> torch.Tensor:
    """fp32 ``exp``: float64 evaluation, one rounding to float32 (overflow to +Inf is IEEE; NaN stays NaN)."""
    return x32.to(F64).clamp_(_EXP_LO, _EXP_HI).exp_().to(F32)


def log1p32(x32: torch.Tensor) -> torch.Tensor:
    """fp32 ``log1p``: float64 evaluation, one rounding to float32."""
    return x32.to(F64).log1p_().to(F32)


def sqrt32(x32: torch.Tensor) -> torch.Tensor:
    """The correctly rounded fp32 square root (IEEE, as ``np.sqrt``; see the module docstring)."""
    return x32.to(F64).sqrt_().to(F32)


def silu(a32: torch.Tensor) -> torch.Tensor:
    """``a / (1 + exp(-a))`` in fp32 (the SwiGlu kernel's order: exp, add, divide); a new tensor."""
    return torch.div(a32, exp32(-a32).add_(1.0))


def sigmoid(x32: torch.Tensor) -> torch.Tensor:
    """``1 / (1 + exp(-x))`` in fp32."""
    return torch.div(const(1.0), exp32(-x32).add_(1.0))


def relu_(v32: torch.Tensor) -> torch.Tensor:
    """``np.maximum(v, 0)`` in place: negatives -> +0.0, ``-0.0`` -> ``+0.0``, NaN kept."""
    return v32.clamp_min_(0.0).add_(0.0)


def sum_f32(x32: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Row sums of fp32 data (keepdim): a float64 sum rounded once to float32."""
    return x32.to(F64).sum(dim, keepdim=True).to(F32)


def topk_desc(score: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (int64) of the ``k`` largest entries per row, stable: equal scores keep ascending index
    order (the golden's ``argsort(-score, kind="stable")``; ``-0.0 == 0.0`` there and here)."""
    return torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :k]


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float | None) -> torch.Tensor:
    """fp32 ``silu(gate) * up``, with DeepSeek-V4's clamp ``gate = min(gate, L)``, ``up = clip(up, -L, L)``
    when ``limit`` is given (torch's clamp keeps ``-0.0`` and NaN as ``np.minimum`` / ``np.clip`` do)."""
    if limit is not None:
        gate = torch.clamp(gate, max=limit)  # the Python float is rounded to fp32, as np.float32(limit)
        up = torch.clamp(up, min=-limit, max=limit)
    return silu(gate).mul_(up)


def quantize_rows_div(xf: torch.Tensor, scale: str, *, qmax: int = 127,
                      codes: str = "div_scale") -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`w8a8.dynamic_quant.quantize_rows` with ``codes="div_scale"`` (``q = rint(x / s)``) or
    ``"mul_rcp"`` (``q = rint(x * fp32(1 / s))``: the legacy dequant_swiglu_quant kernels), half to
    even, saturating, NaN code 0: ``m = rowmax|x|``; ``s = m / qmax`` (``scale="amax_div"``) or
    ``m * fp32(1 / qmax)`` (``"amax_mul_rcp"``). An all-zero row has ``s = 0`` and codes 0 (``0 / 0``,
    ``0 * inf``). ``xf`` (fp32 ``[S, H]``) is used as scratch. Returns ``(int8 [S, H], fp32 [S])``."""
    m = _row_absmax(xf)
    if scale == "amax_div":
        s = torch.div(m, const(float(qmax)))
    else:
        s = m.mul_(torch.div(const(1.0), const(float(qmax))))
    if codes == "mul_rcp":
        t = xf.mul_(torch.div(const(1.0), s)[:, None])
    else:
        t = xf.div_(s[:, None])
    return to_int(t, -qmax, qmax, torch.int8, inplace=True), s


def dsq_quantize_rows(o: torch.Tensor, numerics) -> tuple[torch.Tensor, torch.Tensor]:
    """The dynamic quantization of ``dequant_swiglu_quant`` under a resolved record: the group kernel's
    ``amax * fp32(1/127)`` and ``o / scale``, or the legacy kernels' ``amax / 127`` and
    ``o * fp32(1 / scale)`` (``numerics.scale_out`` / ``quant_codes``)."""
    return quantize_rows_div(o, numerics.scale_out, codes=numerics.quant_codes)


def f64_to_f16(t64: torch.Tensor) -> torch.Tensor:
    """float64 -> float16 rounded once, to nearest even (NumPy's cast).

    torch converts through float32 and can round twice. Here the float32 step rounds to *odd* (an
    inexact result keeps an odd last bit, so it never lands on a float16 tie that was not one), which
    makes the following float32 -> float16 rounding the correct one-step rounding (float32 has 13 more
    significand bits than float16; round-to-odd needs 2).
    """
    r = t64.to(F32)
    back = r.to(F64)
    inexact = back != t64  # False for NaN / Inf (and an Inf from overflow rounds to Inf in fp16 anyway)
    even = torch.bitwise_and(r.view(torch.int32), 1) == 0
    fix = inexact & even & torch.isfinite(r)
    if bool(fix.any()):
        toward = torch.where(t64 > back, torch.tensor(float("inf"), dtype=F32), torch.tensor(float("-inf"), dtype=F32))
        r = torch.where(fix, torch.nextafter(r, toward), r)
    return r.to(torch.float16)
