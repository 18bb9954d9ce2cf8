"""Exact integer GEMM in torch on the CPU: the int32 accumulator of the device cube.

Contract: :func:`w8a8.intgemm.int_matmul` — ``a @ b`` exactly, as int32, and ``OverflowError``
(the golden's message) wherever the exact sum leaves the int32 range.

Routes, fastest first:

1. int8 (or uint8) ``a`` x int8 ``b``: ``torch._int_mm`` (2-D only on the CPU; batch dims are folded
   into M when ``b`` has none, else looped). It accumulates in int32 and wraps on overflow, so it
   runs in one piece only while ``K * max|a| * max|b| <= 2^31 - 1`` — always for int8 x int8 with
   ``K <= 131071`` —, and otherwise in K-chunks that each satisfy the bound, summed in int64 and
   range-checked. int8 ``a`` x uint8 ``b`` runs as ``(b^T a^T)^T``.
2. With a weight prepacked for ``onednn.qlinear_pointwise`` (AMX machines, see
   :mod:`~backends.torch_cpu.runtime`), a float epilogue can take ``fp32(acc)`` straight from the
   AMX kernel: :func:`int8_gemm_f32`. Used only where ``acc`` cannot overflow and only after a
   load-time probe showed the kernel equal to ``_int_mm`` (:meth:`Int8Weight.load`).
3. Anything else (int16 / int32 / uint8 x uint8 operands): float64 GEMM in K-chunks whose every
   partial sum is an integer below 2^53 (exact in any summation order), or int64 GEMM chunks where
   single products pass 2^53; chunk results are summed exactly as ``hi * 2^31 + lo`` limbs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from w8a8.intgemm import check_int32

from .arith import I32_MAX, I32_MIN, absmax
from .runtime import gemm_threads

_F64_EXACT = 1 << 53
_I64_MAX = (1 << 63) - 1
_DTYPE_ABSMAX = {torch.int8: 128, torch.uint8: 255, torch.int16: 1 << 15, torch.int32: 1 << 31}


def _canonical(t: torch.Tensor) -> torch.Tensor:
    """``t`` (2-D) with strides ``_int_mm`` reads right: row-major ``(C, 1)``, or column-major ``(1, R)``
    with both dims > 1; anything else is copied row-major.

    torch 2.13's CPU ``_int_mm`` takes the layout from the strides literally and returns garbage for a
    column-major reading of a matrix with a dimension of 1 (e.g. ``[1, K]`` with strides ``(1, 1)``,
    which ``.contiguous()`` leaves as it is): pinned by ``test_int_mm_degenerate_strides``.
    """
    r, c = t.shape
    s = t.stride()
    if s == (c, 1) or (r > 1 and c > 1 and s == (1, r)):
        return t
    return torch.empty((r, c), dtype=t.dtype).copy_(t)


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``_int_mm`` of 2-D int8/uint8 ``a`` and int8/uint8 ``b`` (not both uint8): int32, wrapping."""
    if b.dtype == torch.uint8:
        return torch._int_mm(_canonical(b.mT), _canonical(a.mT)).mT
    return torch._int_mm(_canonical(a), _canonical(b))


def _batched(fn, a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``fn`` (a 2-D GEMM) over the broadcast batch dims of ``a [..., M, K]`` and ``b [..., K, N]``."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.ndim == 2:  # fold the batch into M: one GEMM
        return fn(a.reshape(-1, k), b).reshape(*a.shape[:-2], m, n)
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = a.expand(*batch, m, k)
    b = b.expand(*batch, k, n)
    out = torch.empty(*batch, m, n, dtype=out_dtype)
    for idx in itertools.product(*(range(d) for d in batch)):
        out[idx] = fn(a[idx], b[idx])
    return out


def _check_range(op: str, total: torch.Tensor) -> torch.Tensor:
    """int64 exact sums -> int32, or the golden's OverflowError naming the first bad element."""
    if total.numel() and bool(((total > I32_MAX) | (total < I32_MIN)).any()):
        check_int32(op, total.numpy())
    return total.to(torch.int32)


def _limb_sum(op: str, parts) -> torch.Tensor:
    """Exact ``sum(parts)`` of int64 tensors (each |part| < 2^63) as int32, or OverflowError.

    Each part is split as ``hi * 2^31 + lo`` with ``0 <= lo < 2^31`` (arithmetic shift); the limbs
    add without overflow, and the total lies in int32 exactly when the normalized ``hi`` is 0 or -1.
    """
    hi = lo = None
    for p in parts:
        h, l = torch.bitwise_right_shift(p, 31), torch.bitwise_and(p, I32_MAX)
        hi, lo = (h, l) if hi is None else (hi + h, lo + l)
    hi = hi + torch.bitwise_right_shift(lo, 31)
    lo = torch.bitwise_and(lo, I32_MAX)
    bad = (hi != 0) & (hi != -1)
    if bool(bad.any()):
        exact = hi.numpy().astype(object) * (1 << 31) + lo.numpy().astype(object)
        check_int32(op, exact)
    return (hi * (1 << 31) + lo).to(torch.int32)


def _k_chunks(k: int, chunk: int):
    return [(s, min(k, s + chunk)) for s in range(0, k, chunk)]


def int_matmul(a: torch.Tensor, b: torch.Tensor, *, op: str = "int_matmul", b_absmax: int | None = None) -> torch.Tensor:
    """Exact int32 ``a @ b`` (see the module docstring); ``b_absmax``: ``max|b|`` if known (a weight);
    ``op`` names the op in the OverflowError. Runs on all of torch's threads (``runtime.gemm_threads``)."""
    with gemm_threads():
        return _int_matmul(a, b, op, b_absmax)


def _int_matmul(a: torch.Tensor, b: torch.Tensor, op: str, b_absmax: int | None) -> torch.Tensor:
    k = a.shape[-1]
    out_shape = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])) + (a.shape[-2], b.shape[-1])
    if k == 0 or 0 in out_shape:
        return torch.zeros(out_shape, dtype=torch.int32)
    fast = a.dtype in (torch.int8, torch.uint8) and b.dtype in (torch.int8, torch.uint8) \
        and not (a.dtype == torch.uint8 and b.dtype == torch.uint8)
    if fast:
        bmax = _DTYPE_ABSMAX[b.dtype] if b_absmax is None else b_absmax
        if k * _DTYPE_ABSMAX[a.dtype] * bmax <= I32_MAX:  # no data pass needed
            return _batched(_mm, a, b, torch.int32)
        amax = absmax(a)
        bmax = absmax(b) if b_absmax is None else b_absmax
        bound = amax * bmax
        if bound == 0:
            return torch.zeros(out_shape, dtype=torch.int32)
        if k * bound <= I32_MAX:
            return _batched(_mm, a, b, torch.int32)
        chunk = I32_MAX // bound  # every chunk's sum fits int32: _int_mm is exact on it
        total = torch.zeros(out_shape, dtype=torch.int64)
        for s, e in _k_chunks(k, chunk):
            total += _batched(_mm, a[..., s:e], b[..., s:e, :], torch.int32)
        return _check_range(op, total)
    return _wide(a, b, out_shape, op)


def _wide(a: torch.Tensor, b: torch.Tensor, out_shape: tuple, op: str) -> torch.Tensor:
    """Exact GEMM of int16 / int32 / uint8 x uint8 operands (route 3 of the module docstring)."""
    k = a.shape[-1]
    bound = absmax(a) * absmax(b)
    if bound == 0:
        return torch.zeros(out_shape, dtype=torch.int32)
    if bound <= _F64_EXACT:
        chunk, dtype = _F64_EXACT // bound, torch.float64
    else:
        chunk, dtype = _I64_MAX // bound, torch.int64
    a_w, b_w = a.to(dtype), b.to(dtype)
    parts = (torch.matmul(a_w[..., s:e], b_w[..., s:e, :]).to(torch.int64).expand(out_shape)
             for s, e in _k_chunks(k, chunk))
    if chunk >= k:
        return _check_range(op, next(parts).contiguous())
    return _limb_sum(op, parts)


def add_int32(op: str, acc: torch.Tensor, bias: torch.Tensor, acc_bound: int) -> torch.Tensor:
    """:func:`w8a8.intgemm.add_int32`: ``acc + bias`` in int32, OverflowError instead of wrapping.

    ``acc_bound`` bounds ``|acc|``; when ``acc_bound + max|bias|`` fits int32 the add runs in int32.
    """
    if acc_bound + absmax(bias) <= I32_MAX:
        return acc + bias
    return _check_range(op, acc.to(torch.int64) + bias.to(torch.int64))


# -- weights prepared at load time ----------------------------------------------------------------

@dataclass
class Int8Weight:
    """An int8 ``[..., K, N]`` GEMM operand prepared once (the serving stack's load step).

    ``kn`` is laid out column-major (``[N, K]`` storage, what ``_int_mm`` reads fastest at large
    N); ``absmax`` is ``max|w|`` (it lets most calls skip the overflow check); ``packed`` is the
    ``qlinear_prepack`` tensor where the qlinear path is in use, else None; ``note`` says why not.
    """

    kn: torch.Tensor
    absmax: int
    packed: object = None
    note: str = ""

    @classmethod
    def load(cls, w_kn: torch.Tensor, path: str) -> "Int8Weight":
        kn = w_kn.mT.contiguous().mT if w_kn.ndim == 2 else w_kn.contiguous()
        weight = cls(kn=kn, absmax=absmax(kn))
        if path == "qlinear":
            weight.packed, weight.note = _qlinear_pack(kn)
        return weight

    @property
    def shape(self):
        return self.kn.shape


def _qlinear_pack(kn: torch.Tensor):
    """Prepack for ``onednn.qlinear_pointwise`` and prove it exact on a probe, else ``(None, why)``."""
    if kn.ndim != 2 or kn.dtype != torch.int8 or 0 in kn.shape:
        return None, "qlinear: 2-D non-empty int8 weights only"
    k, n = kn.shape
    if k * 128 * 128 > I32_MAX:
        return None, "qlinear: K too large for an overflow-free int32 accumulator"
    packed = torch.ops.onednn.qlinear_prepack(kn.mT.contiguous(), None)
    gen = torch.Generator().manual_seed(0)
    probe = torch.randint(-128, 128, (8, k), dtype=torch.int8, generator=gen)
    probe[0] = -128
    probe[1] = 127
    probe[2] = torch.where(kn[:, 0] < 0, -128, 127).to(torch.int8)  # drives column 0 to its extreme
    got = _qlinear(probe, packed, n)
    want = torch._int_mm(probe, kn).to(torch.float32)
    if not torch.equal(got, want):
        return None, "qlinear: the load-time probe differed from torch._int_mm; using _int_mm"
    return packed, ""


def _qlinear(x2d: torch.Tensor, packed, n: int) -> torch.Tensor:
    ones = torch.ones(n, dtype=torch.float32)
    zeros = torch.zeros(n, dtype=torch.int32)
    return torch.ops.onednn.qlinear_pointwise(x2d, 1.0, 0, packed, ones, zeros, None, 1.0, 0, torch.float32,
                                              "none", [], "")


def int8_gemm_f32(x: torch.Tensor, w: Int8Weight) -> torch.Tensor | None:
    """``fp32(x @ w)`` from the prepacked qlinear kernel, or None where that path does not apply."""
    if w.packed is None or x.dtype != torch.int8 or x.shape[-2] * x.shape[-1] == 0:
        return None
    k, n = w.kn.shape
    with gemm_threads():
        return _qlinear(x.reshape(-1, k), w.packed, n).reshape(*x.shape[:-1], n)


def acc_bound(a: torch.Tensor, b_absmax: int) -> int:
    """A bound on ``|a @ b|`` from dtypes (no data pass), capped at the int32 range."""
    return min(I32_MAX + 1, a.shape[-1] * _DTYPE_ABSMAX.get(a.dtype, 1 << 31) * b_absmax)

