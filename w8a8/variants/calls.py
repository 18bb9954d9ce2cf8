"""The one selection step of every kernel variant: :func:`kernel` runs an op's selector from its facts on the
platform of a :class:`~w8a8.numerics.Numerics` record, and one function per op maps the op's checked
arguments (its ``*Args`` record, as the op's ``*_args`` check returns it) to those facts.

The golden ops call the per-op functions; :func:`w8a8.variants.select` runs an op's check and then one of
them. A backend asks the same step: with the golden's checked Args (a loader's, or the same record with
its arrays moved to the device) through the per-op function, or, where it knows only its tensors'
shapes and dtypes, through :func:`kernel` with the same facts (:func:`dtype_name` names a NumPy, ml_dtypes
or torch dtype alike). The platform is never a constant of its own: it is ``numerics.platform_record``.
"""

from __future__ import annotations

import math

from ..numerics import Numerics
from . import dynamic_quant as _dq
from . import matmul as _mm
from . import moe as _moe
from . import swiglu as _sw
from ._core import Variant

SELECTORS = {
    "dynamic_quant": _dq.select,           # also dynamic_quant_asymmetric (asymmetric=True)
    "swiglu": _sw.swiglu,
    "dequant_swiglu_quant": _sw.dequant_swiglu_quant,
    "moe_finalize_routing": _moe.finalize,
    "moe_gating_top_k_softmax": _moe.gating_softmax,
    "moe_init_routing_v2": _moe.init_routing_v2,
    "quant_matmul": _mm.quant_matmul,
    "grouped_matmul": _mm.grouped_matmul,
    "weight_quant_batchmatmul": _mm.weight_quant_batchmatmul,
    "quantize": _mm.quantize,
}
"""The selector of each op (:mod:`.dynamic_quant`, :mod:`.swiglu`, :mod:`.moe`, :mod:`.matmul`) by op name."""


def kernel(op: str, numerics: Numerics, **facts) -> Variant:
    """The :class:`Variant` the selector of ``op`` (:data:`SELECTORS`) picks from ``facts`` (its keyword
    arguments; dtypes by name, :func:`dtype_name`) on the platform of ``numerics``."""
    if op not in SELECTORS:
        raise ValueError(f"variants.calls.kernel: argument 'op' must be one of {sorted(SELECTORS)}; got {op!r}")
    if not isinstance(numerics, Numerics):
        raise TypeError(f"variants.calls.kernel: argument 'numerics' must be a w8a8.Numerics; "
                        f"got {type(numerics).__name__}")
    return SELECTORS[op](**facts, platform=numerics.platform_record)


def dtype_name(dtype) -> str:
    """The golden's name of a dtype: a NumPy / ml_dtypes dtype or name (``"bfloat16"``), or a device
    library's dtype such as ``torch.bfloat16`` (its name without the module prefix)."""
    text = str(dtype)
    if text.startswith("torch."):
        return text[len("torch."):]
    from .. import dtypes

    return dtypes.name(dtype)


_name = dtype_name


def _count(array) -> int:
    """The element count of a NumPy array or a device tensor (``.size`` is a method in torch)."""
    return math.prod(array.shape)


def dynamic_quant(a, numerics: Numerics, *, asymmetric: bool = False) -> Variant:
    """:class:`~w8a8.dynamic_quant.DynamicQuantArgs` -> the ``npu_dynamic_quant`` kernel."""
    groups = None if a.group_index is None else int(a.group_index.shape[0])
    return kernel("dynamic_quant", numerics, rows=a.rows, h=a.h, x_dtype=_name(a.x.dtype), dst=a.dst_name,
                  smooth=a.smooth_scales is not None, groups=groups, asymmetric=asymmetric)


def dynamic_quant_asymmetric(a, numerics: Numerics) -> Variant:
    return dynamic_quant(a, numerics, asymmetric=True)


def swiglu(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.swiglu.SwigluArgs` -> the ``npu_swiglu`` kernel (by x's dtype)."""
    return kernel("swiglu", numerics, x_dtype=_name(a.x.dtype))


def dequant_swiglu_quant(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.DequantSwigluArgs` -> the group or legacy kernel."""
    qs = a.quant_scale
    return kernel(
        "dequant_swiglu_quant", numerics, x_dtype=_name(a.x.dtype), tokens=a.t, groups=a.groups,
        quant_mode=a.quant_mode, quant_scale_dtype=None if qs is None else _name(qs.dtype),
        quant_scale_size=0 if qs is None else _count(qs), bias_dtype=None if a.bias is None else _name(a.bias.dtype),
        scalar=a.scalar)


def moe_finalize_routing(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.FinalizeArgs` -> the finalize template."""
    return kernel("moe_finalize_routing", numerics, dtype=_name(a.dtype),
                  scale_dtype=None if a.scales is None else _name(a.scales.dtype), n=a.n, k=a.k, h=a.h,
                  bias=a.bias is not None, skip1=a.skip1 is not None, skip2=a.skip2 is not None,
                  drop_pad_mode=a.drop_pad_mode)


def moe_gating_top_k_softmax(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.GatingSoftmaxArgs` -> the gating template."""
    return kernel("moe_gating_top_k_softmax", numerics, e=int(a.x.shape[-1]), k=a.k, dtype=_name(a.x.dtype))


def moe_init_routing_v2(p, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.routing.MoeInitRoutingV2Args` -> the routing kernel."""
    return routing_v2_kernel(p.routing, h=p.h, x_dtype=p.x.dtype, quant_mode=p.quant_mode,
                             scale_shape=None if p.scale is None else tuple(p.scale.shape),
                             offset=p.offset is not None, numerics=numerics)


def routing_v2_kernel(r, *, h: int, x_dtype, quant_mode: int, scale_shape, offset: bool,
                      numerics: Numerics) -> Variant:
    """Checked routing options (:class:`~w8a8.moe.routing.RoutingV2Options`) and the input's facts -> the
    routing kernel (shared by the op and its validity masks)."""
    return kernel("moe_init_routing_v2", numerics, n=r.n, k=r.k, h=h, x_dtype=_name(x_dtype), quant_mode=quant_mode,
                  scale_shape=scale_shape, offset=offset, start=r.start, end=r.end, expert_num=r.expert_num,
                  count_type=r.count_type, row_idx_type=r.row_idx_type)


def quant_matmul(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.quant_matmul.QuantMatmulArgs` -> the QBMM epilogue."""
    return kernel("quant_matmul", numerics, m=a.m, out=_name(a.out), pertoken=a.pertoken_scale is not None,
                  per_tensor=a.scale.shape[0] == 1)


def grouped_matmul(a, numerics: Numerics) -> Variant:
    return kernel("grouped_matmul", numerics, out=_name(a.out), pertoken=a.per_token_scale is not None)


def weight_quant_batchmatmul(p, numerics: Numerics) -> Variant:
    """:class:`~w8a8.lowbit.weight_quant_batchmatmul.WeightQuantBatchmatmulArgs` -> the WQBMM template."""
    m, k = p.x.shape
    if p.packed:
        per = "channel"
    elif p.group is not None:
        per = "group"
    else:
        per = "tensor" if p.scale.shape[-1] == 1 and p.n != 1 else "channel"
    # transB: a [K, N] view of a row-major [N, K] storage (or the int4 layout packed along K)
    w = p.weight
    trans_b = p.layout == "int4_k" or (p.layout == "int8" and w.ndim == 2 and w.strides[0] < w.strides[1])
    return kernel("weight_quant_batchmatmul", numerics, m=m, k=k, n=p.n, x_dtype=_name(p.x.dtype),
                  weight="int8" if p.layout == "int8" else "int4", trans_b=trans_b, per=per, group=p.group,
                  offset=p.offset is not None, int64_scale=p.packed, quant_out=p.quant_scale is not None)


def quantize(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.quantize.QuantizeArgs` -> AscendQuantV3 or the closed Quantize kernel."""
    return kernel("quantize", numerics, div_mode=a.div_mode)
