"""The kernel variant each torch-cpu op computes: the golden's own selection step (:mod:`w8a8.variants.calls`).

torch-cpu computes, for every call, the arithmetic of the kernel the host tiling picks, exactly as the
golden does: the variant comes from :func:`w8a8.variants.calls.kernel` — the one step the golden's ops
take too — with the facts of the call (shapes, dtypes, options; torch dtypes named by
:func:`~w8a8.variants.calls.dtype_name`), on the platform of the record the call runs under. That record
is a parameter of every function here (``numerics``); left out, it is the backend's declared
:attr:`TorchCpuBackend.numerics <backends.torch_cpu.TorchCpuBackend.numerics>` — the only record a torch-cpu
call runs under, since the backend accepts no other (:meth:`backends.base.Backend.accepts_numerics`).
Where a loader holds the golden's checked Args it asks :mod:`w8a8.variants.calls` directly (the
``weight_quant_batchmatmul`` loader). Only the arithmetic is torch; this module imports no torch.

Ops whose kernels all compute what torch-cpu computes ask nothing: their variants decide no field
torch-cpu reads, or one it computes the same way on every registered platform (:data:`FIXED`).
"""

from __future__ import annotations

import math

from w8a8.numerics import Numerics
from w8a8.variants import Variant, calls

dtype_name = calls.dtype_name

FIXED = {"quant_matmul": {"epilogue_order": "scale_then_token"}, "grouped_matmul": {}, "quantize": {},
         "dynamic_quant_asymmetric": {}}
"""What torch-cpu computes, whatever the shape, for the ops with variants it does not select among: the
Numerics fields a variant of the op may decide, with torch-cpu's one choice (``quant_matmul``'s per-token
epilogue ``(acc * scale[n]) * token[m]``; the decode "opt" kernel's ``combined`` order is selected only on
a registered platform carrying a measured M limit, and torch-cpu does not compute it)."""


def declared() -> Numerics:
    """The record torch-cpu declares (:attr:`TorchCpuBackend.numerics`): the default of ``numerics``."""
    from . import TorchCpuBackend

    return TorchCpuBackend.numerics


def variant(op: str, numerics: Numerics | None = None, **facts) -> Variant:
    """The :class:`~w8a8.variants.Variant` of ``op`` for a call with these selector facts, on the platform of
    ``numerics`` (default :func:`declared`): :func:`w8a8.variants.calls.kernel`."""
    return calls.kernel(op, declared() if numerics is None else numerics, **facts)


def _record(op: str, numerics: Numerics | None, **facts) -> Numerics:
    """The record the op computes with: the variant's choices applied to ``numerics``."""
    n = declared() if numerics is None else numerics
    return variant(op, n, **facts).numerics(n)


def _name_or_none(tensor) -> str | None:
    return None if tensor is None else dtype_name(tensor.dtype)


def dynamic_quant(shape, dtype, *, dst: str = "int8", smooth: bool = False, groups: int | None = None,
                  numerics: Numerics | None = None) -> Numerics:
    """The record of ``dynamic_quant`` on x of ``shape`` / ``dtype`` (the scale formula it decides);
    ``groups`` = len(group_index) or None."""
    return _record("dynamic_quant", numerics, rows=math.prod(shape[:-1]), h=shape[-1], x_dtype=dtype_name(dtype),
                   dst=dst, smooth=smooth, groups=groups)


def swiglu(dtype, *, numerics: Numerics | None = None) -> Numerics:
    return _record("swiglu", numerics, x_dtype=dtype_name(dtype))


def dequant_swiglu_quant(*, x_dtype, tokens: int, groups: int | None, quant_mode: int, quant_scale, bias,
                         scalar: bool, numerics: Numerics | None = None) -> Numerics:
    """``quant_scale`` / ``bias``: the checked tensors (their dtype and size) or None."""
    return _record("dequant_swiglu_quant", numerics, x_dtype=dtype_name(x_dtype), tokens=tokens, groups=groups,
                   quant_mode=quant_mode, quant_scale_dtype=_name_or_none(quant_scale),
                   quant_scale_size=0 if quant_scale is None else math.prod(quant_scale.shape),
                   bias_dtype=_name_or_none(bias), scalar=scalar)


def finalize(*, dtype, scale_dtype, n: int, k: int, h: int, bias: bool, skip1: bool, skip2: bool,
             drop_pad_mode: int, numerics: Numerics | None = None) -> Numerics:
    return _record("moe_finalize_routing", numerics, dtype=dtype_name(dtype),
                   scale_dtype=None if scale_dtype is None else dtype_name(scale_dtype), n=n, k=k, h=h, bias=bias,
                   skip1=skip1, skip2=skip2, drop_pad_mode=drop_pad_mode)


def gating_softmax(*, e: int, k: int, dtype, numerics: Numerics | None = None) -> Numerics:
    return _record("moe_gating_top_k_softmax", numerics, e=e, k=k, dtype=dtype_name(dtype))


def init_routing_v2(*, x_dtype, numerics: Numerics | None = None, **facts) -> Numerics:
    """The record of ``moe_init_routing_v2`` (the selector's facts by keyword): its quant rounding."""
    return _record("moe_init_routing_v2", numerics, x_dtype=dtype_name(x_dtype), **facts)
