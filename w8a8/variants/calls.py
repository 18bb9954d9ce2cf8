"""The variant of one checked op call: each function maps an op's checked arguments (its ``*Args``
record, as the op's ``*_args`` check returns it) to the selector's facts, for the platform of ``numerics``.

The golden ops call these; :func:`w8a8.variants.select` runs an op's check and then one of these.
"""

from __future__ import annotations


from ..numerics import Numerics
from . import dynamic_quant as _dq
from . import matmul as _mm
from . import moe as _moe
from . import swiglu as _sw
from ._core import Variant


def _name(dtype) -> str:
    from .. import dtypes

    return dtypes.name(dtype)


def dynamic_quant(a, numerics: Numerics, *, asymmetric: bool = False) -> Variant:
    """:class:`~w8a8.dynamic_quant.DynamicQuantArgs` -> the ``npu_dynamic_quant`` kernel."""
    groups = None if a.group_index is None else int(a.group_index.shape[0])
    return _dq.select(a.rows, a.h, x_dtype=_name(a.x.dtype), dst=a.dst_name, smooth=a.smooth_scales is not None,
                      groups=groups, asymmetric=asymmetric, platform=numerics.platform_record)


def dynamic_quant_asymmetric(a, numerics: Numerics) -> Variant:
    return dynamic_quant(a, numerics, asymmetric=True)


def swiglu(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.swiglu.SwigluArgs` -> the ``npu_swiglu`` kernel (by x's dtype)."""
    return _sw.swiglu(_name(a.x.dtype), platform=numerics.platform_record)


def dequant_swiglu_quant(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.DequantSwigluArgs` -> the group or legacy kernel."""
    qs = a.quant_scale
    return _sw.dequant_swiglu_quant(
        x_dtype=_name(a.x.dtype), tokens=a.t, groups=a.groups, quant_mode=a.quant_mode,
        quant_scale_dtype=None if qs is None else _name(qs.dtype), quant_scale_size=0 if qs is None else int(qs.size),
        bias_dtype=None if a.bias is None else _name(a.bias.dtype), scalar=a.scalar, platform=numerics.platform_record)


def moe_finalize_routing(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.FinalizeArgs` -> the finalize template."""
    return _moe.finalize(dtype=_name(a.dtype), scale_dtype=None if a.scales is None else _name(a.scales.dtype),
                         n=a.n, k=a.k, h=a.h, bias=a.bias is not None, skip1=a.skip1 is not None,
                         skip2=a.skip2 is not None, drop_pad_mode=a.drop_pad_mode, platform=numerics.platform_record)


def moe_gating_top_k_softmax(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.GatingSoftmaxArgs` -> the gating template."""
    return _moe.gating_softmax(e=int(a.x.shape[-1]), k=a.k, dtype=_name(a.x.dtype), platform=numerics.platform_record)


def moe_init_routing_v2(p, numerics: Numerics) -> Variant:
    """:class:`~w8a8.moe.routing.MoeInitRoutingV2Args` -> the routing kernel."""
    return routing_v2_kernel(p.routing, h=p.h, x_dtype=p.x.dtype, quant_mode=p.quant_mode,
                             scale_shape=None if p.scale is None else tuple(p.scale.shape),
                             offset=p.offset is not None, numerics=numerics)


def routing_v2_kernel(r, *, h: int, x_dtype, quant_mode: int, scale_shape, offset: bool,
                      numerics: Numerics) -> Variant:
    """Checked routing options (:class:`~w8a8.moe.routing.RoutingV2Options`) and the input's facts -> the
    routing kernel (shared by the op and its validity masks)."""
    return _moe.init_routing_v2(n=r.n, k=r.k, h=h, x_dtype=_name(x_dtype), quant_mode=quant_mode,
                                scale_shape=scale_shape, offset=offset, start=r.start, end=r.end,
                                expert_num=r.expert_num, count_type=r.count_type, row_idx_type=r.row_idx_type,
                                platform=numerics.platform_record)


def quant_matmul(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.quant_matmul.QuantMatmulArgs` -> the QBMM epilogue."""
    return _mm.quant_matmul(m=a.m, out=_name(a.out), pertoken=a.pertoken_scale is not None,
                            per_tensor=a.scale.shape[0] == 1, platform=numerics.platform_record)


def grouped_matmul(a, numerics: Numerics) -> Variant:
    return _mm.grouped_matmul(out=_name(a.out), pertoken=a.per_token_scale is not None,
                              platform=numerics.platform_record)


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
    return _mm.weight_quant_batchmatmul(m=m, k=k, n=p.n, x_dtype=_name(p.x.dtype),
                                        weight="int8" if p.layout == "int8" else "int4", trans_b=trans_b, per=per,
                                        group=p.group, offset=p.offset is not None, int64_scale=p.packed,
                                        quant_out=p.quant_scale is not None, platform=numerics.platform_record)


def quantize(a, numerics: Numerics) -> Variant:
    """:class:`~w8a8.quantize.QuantizeArgs` -> AscendQuantV3 or the closed Quantize kernel."""
    return _mm.quantize(div_mode=a.div_mode, platform=numerics.platform_record)
