"""Analytic bounds on how far two *correct* implementations of an op may differ.

The derivations are in ``docs/tolerances.md``; this module states each bound, the term that
dominates it, and computes the per-element bound of ``w8a8_dynamic_linear`` for a given case.

Symbols: ``u32 = 2^-24`` (fp32 unit roundoff); ``ulp_out(y)`` the spacing of the output dtype at
``|y|``; ``s_w[n]`` the (loaded) per-channel weight scale, ``s_t[m]`` the per-token scale.

* **Bitwise** (given equal inputs): int32 accumulators (exact integer arithmetic); codes, scales
  and packed parameters under *equal* numerics (each is a fixed sequence of IEEE fp32 operations);
  routing indices, counts and permutations (integer ops, stable sort); layout casts.
* **1 ULP of the output dtype**: two fp32 evaluations of the same epilogue in different orders
  differ by a few fp32 roundings (<= 4 u32 relative), far below a bf16/fp16 ULP, so after the final
  round-to-nearest they straddle at most one rounding boundary.
* **Tie propagation** (dynamic quant followed by a K-deep GEMM): codes may differ by +-1 only where
  the pre-rounding value ``x * qmax / amax`` is within ``tie_eps`` of a .5 tie (a different rounding
  rule, or a scale formula a few fp32 ULPs away). Each flipped code k changes the accumulator by
  ``w[k, n]``, so ``|dy[m, n]| <= s_w[n] s_t[m] sum_{k in T_m} |w[k, n]| (1 + 4 u32) + ulp_out``
  where T_m is the set of near-tie positions of row m. Worst case ``|T_m| = K``:
  ``127 K s_w s_t`` — the tie term dominates whenever a row has any tie; otherwise the 1-ULP term.
* **bf16 scale** (grouped matmul, and vllm-ascend's ``w1_scale.to(bf16)``): rounding an fp32 scale to
  bf16 (8 significant bits, round-to-nearest) moves it by at most ``2^-8`` relative (half of bf16's
  epsilon ``2^-7``), so ``|dy| <= 2^-8 |y| + ulp_out`` — about 2 ULP of a bf16 output; the scale term
  dominates.
* **FP19 packing** (``trans_quant_param``, round_mode 0): truncation to 10 explicit mantissa bits
  moves a scale by less than ``2^-10`` relative (up to 2^-11 with round_mode 1), so
  ``|dy| < 2^-10 |y| + ulp_out`` — 2 to 3 ULP of an fp16 output; the scale term dominates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

U32 = 2.0**-24
BF16_SCALE_REL = 2.0**-8
FP19_TRUNC_REL = 2.0**-10
TIE_EPS = 1e-3


@dataclass(frozen=True)
class Bound:
    op: str
    output: str
    path: str
    kind: str  # "bitwise" | "ulp" | "relative" | "ties"
    ulp: int
    relative: float
    dominant: str
    formula: str


BOUNDS: tuple[Bound, ...] = (
    Bound("int_matmul", "acc", "int8 x int8 -> int32", "bitwise", 0, 0.0, "exact integer arithmetic", "dacc = 0"),
    Bound("dynamic_quant", "scale", "equal numerics", "bitwise", 0, 0.0, "IEEE fp32 ops", "ds = 0"),
    Bound("dynamic_quant", "scale", "reciprocal vs amax*(1/127) vs amax/127", "ulp", 2, 0.0,
          "two fp32 roundings", "|ds| <= 2 ulp_fp32(s)"),
    Bound("dynamic_quant", "y", "equal numerics", "bitwise", 0, 0.0, "IEEE fp32 ops", "dq = 0"),
    Bound("dynamic_quant", "y", "rounding rule or scale formula differs", "ties", 1, 0.0,
          "codes at .5 ties", "|dq| <= 1 where |frac(x*qmax/amax) - 0.5| <= tie_eps, else 0"),
    Bound("quant_matmul", "y", "bf16/fp16 out, fp32 epilogue order differs", "ulp", 1, 0.0,
          "final rounding", "|dy| <= 1 ulp_out(y)"),
    Bound("quant_matmul", "y", "fp16/int8 out, FP19 vs full fp32 scale", "relative", 1, FP19_TRUNC_REL,
          "scale truncation", "|dy| < 2^-10 |y| + ulp_out(y)"),
    Bound("grouped_matmul", "y", "bf16 vs fp32 scale", "relative", 1, BF16_SCALE_REL,
          "scale rounding", "|dy| <= 2^-8 |y| + ulp_out(y)"),
    Bound("w8a8_dynamic_linear", "y", "tie flips + epilogue order + output rounding", "ties", 1, 0.0,
          "ties if any, else final rounding",
          "|dy[m,n]| <= s_w[n] s_t[m] sum_{k in T_m} |w[k,n]| (1 + 4 u32) + ulp_out"),
)


def bounds_for(op: str) -> list[Bound]:
    return [b for b in BOUNDS if b.op == op]


def ulp_of_dtype(values: np.ndarray, dtype) -> np.ndarray:
    """The spacing of ``dtype`` at ``|values|`` (float64), subnormals included."""
    import ml_dtypes

    info = ml_dtypes.finfo(dtype) if np.dtype(dtype).kind == "V" else np.finfo(dtype)
    a = np.abs(np.asarray(values, dtype=np.float64))
    e = np.floor(np.log2(np.maximum(a, float(info.smallest_normal))))
    return np.maximum(2.0 ** (e - info.nmant), float(info.smallest_subnormal))


def dynamic_linear_bound(x: np.ndarray, weight: np.ndarray, weight_scale: np.ndarray, *, bias=None,
                         tie_eps: float = TIE_EPS, numerics=None, terms: bool = False):
    """Per-element bound on ``|y_A - y_B|`` for two correct ``w8a8_dynamic_linear`` implementations.

    They may differ in tie rounding, the scale formula (a few fp32 ULPs), the fp32 epilogue order
    and the final rounding (module docstring). ``T_m`` is taken from the golden's pre-rounding
    values ``x * 127 / amax`` of each row. With ``terms=True`` returns ``(bound, tie_term, ulp_term)``.
    """
    from w8a8.linear import dynamic_linear_stages

    st = dynamic_linear_stages(x, weight, weight_scale, bias=bias, **({"numerics": numerics} if numerics else {}))
    k = x.shape[-1]
    xf = np.asarray(x, dtype=np.float32).reshape(-1, k).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        pre = xf * 127.0 / np.abs(xf).max(axis=-1, keepdims=True)
    near_tie = np.abs(np.abs(pre - np.floor(pre)) - 0.5) <= tie_eps
    near_tie &= np.isfinite(pre)
    w_abs = np.abs(weight.astype(np.float64))  # [N, K]
    flips = near_tie.astype(np.float64) @ w_abs.T  # [M, N]: sum over near-tie k of |w[n, k]|
    s_w = st["weight_scale"].astype(np.float32).astype(np.float64)
    s_t = st["x_scale"].astype(np.float64)
    tie_term = flips * s_w[None, :] * s_t[:, None] * (1 + 4 * U32)
    y = st["y"].reshape(-1, weight.shape[0]).astype(np.float32).astype(np.float64)
    out_ulp = ulp_of_dtype(np.abs(y) + tie_term, x.dtype)
    shape = st["y"].shape
    bound = (tie_term + out_ulp).reshape(shape)
    return (bound, tie_term.reshape(shape), out_ulp.reshape(shape)) if terms else bound
