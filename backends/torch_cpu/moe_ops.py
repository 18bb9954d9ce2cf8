"""The grouped-MoE ops of the torch-cpu backend (a mixin of :class:`backends.torch_cpu.TorchCpuBackend`).

Each op is a ``_<op>`` method in device space (torch tensors in and out), with its argument checks in
``_check_<op>(args, kwargs) -> (args, kwargs)`` (NumPy side, before anything reaches torch) and its
load-time work in ``_load_<op>(args, kwargs) -> (args, kwargs)`` (untimed by benchmarks).

The checks are the golden's own public validators (``w8a8.moe.<op>_args``, listed in
:data:`w8a8.moe.VALIDATORS`): the call is bound to the golden's signature, validated by exactly the code
the golden runs first (same exceptions, same messages, same order), and the normalized result is mapped
to the device functions' arguments. Nothing of the golden computes here: the device work is torch
(:mod:`.moe_gating`, :mod:`.moe_routing`, :mod:`.moe_gmm`, :mod:`.moe_swiglu`, :mod:`.moe_finalize`,
:mod:`.moe_layer`). Numerics: :data:`w8a8.ASCEND`, bit for bit (``tests/backends/test_torch_cpu_moe.py``).

This module imports no torch.
"""

from __future__ import annotations

import importlib

import numpy as np

from w8a8 import dtypes as _dt
from w8a8 import moe as _moe
from w8a8.numerics import ASCEND

_NUMERICS = ASCEND  # the record torch-cpu declares (the checks apply its nan_policy="raise")


def _mod(name: str):
    return importlib.import_module(f"{__package__}.{name}")


def _bound(op: str, args: tuple, kwargs: dict) -> dict:
    """The call bound to the golden's signature, defaults applied, ``numerics`` dropped."""
    return _mod("checks").bind(op, args, kwargs)


def _validate(op: str, validator, args: tuple, kwargs: dict):
    return validator(**_bound(op, args, kwargs), numerics=_NUMERICS)


class MoeOps:
    """Grouped-MoE ops of torch-cpu (see the module docstring)."""

    # -- gating ------------------------------------------------------------------------------------------
    def _check_moe_gating_top_k_softmax(self, args, kwargs):
        a = _validate("moe_gating_top_k_softmax", _moe.moe_gating_top_k_softmax_args, args, kwargs)
        return (a.x, a.finished), {"k": a.k}

    def _moe_gating_top_k_softmax(self, x, finished, *, k):
        return _mod("moe_gating").gating_top_k_softmax(x, finished, k=k)

    def _check_moe_gating_top_k(self, args, kwargs):
        a = _validate("moe_gating_top_k", _moe.moe_gating_top_k_args, args, kwargs)
        return (a.x, a.bias, a.input_ids, a.tid2eid), _mod("moe_gating").gating_options(a)

    def _moe_gating_top_k(self, x, bias, input_ids, tid2eid, **options):
        return _mod("moe_gating").gating_top_k(x, bias, input_ids, tid2eid, **options)

    # -- routing -----------------------------------------------------------------------------------------
    def _check_moe_init_routing(self, args, kwargs):
        a = _moe.moe_init_routing_args(**_bound("moe_init_routing", args, kwargs))
        return (a.x, a.row_idx, a.expert_idx), {"active_num": a.active_num}

    def _moe_init_routing(self, x, row_idx, expert_idx, *, active_num):
        return _mod("moe_routing").init_routing(x, row_idx, expert_idx, active_num=active_num)

    def _check_moe_init_routing_v2(self, args, kwargs):
        p = _validate("moe_init_routing_v2", _moe.moe_init_routing_v2_plan, args, kwargs)
        return (p.x, p.expert_idx), {
            "scale": p.scale, "offset": p.offset, "quant_mode": p.quant_mode, "k": p.k, "h": p.h, "start": p.start,
            "end": p.end, "drop_pad": p.drop_pad, "capacity": p.capacity, "expert_num": p.expert_num,
            "rows": p.rows, "row_idx_type": p.row_idx_type, "count_type": p.count_type, "count_flag": p.count_flag}

    def _moe_init_routing_v2(self, x, expert_idx, **options):
        return _mod("moe_routing").init_routing_v2(x, expert_idx, **options)

    # -- grouped matmul ------------------------------------------------------------------------------------
    def _check_grouped_matmul(self, args, kwargs):
        a = _validate("grouped_matmul", _moe.grouped_matmul_args, args, kwargs)
        return (a.x, a.weight), {"scale": a.scale, "bias": a.bias, "per_token_scale": a.per_token_scale,
                                 "segments": a.segments, "total": a.total, "out": _dt.name(a.out),
                                 "act_type": a.act_type, "as_list": a.as_list}

    def _load_grouped_matmul(self, args, kwargs):
        x, weight = args
        gmm = _mod("moe_gmm")
        path = "int_mm" if gmm.needs_int32(kwargs["scale"], kwargs["bias"]) else "auto"
        scale = kwargs.pop("scale")
        kwargs["scale"] = None if scale is None else gmm.GroupedScale.load(scale)
        return (x, _mod("moe_experts").ExpertGemm.load(weight, layout="ekn", path=path)), kwargs

    def _grouped_matmul(self, x, weight, *, as_list, **options):
        y = _mod("moe_gmm").grouped_matmul(x, weight, **options)
        return [y] if as_list else y

    # -- activation ----------------------------------------------------------------------------------------
    def _check_swiglu(self, args, kwargs):
        x, dim = _validate("swiglu", _moe.swiglu_args, args, kwargs)
        return (x,), {"dim": dim}

    def _swiglu(self, x, *, dim):
        return _mod("moe_swiglu").swiglu(x, dim=dim)

    def _check_dequant_swiglu_quant(self, args, kwargs):
        a = _validate("dequant_swiglu_quant", _moe.dequant_swiglu_quant_args, args, kwargs)
        counts = None if a.groups is None else np.asarray([stop - start for _, start, stop in a.segments], np.int64)
        return (a.x,), {"weight_scale": a.weight_scale, "activation_scale": a.activation_scale, "bias": a.bias,
                        "quant_scale": a.quant_scale, "quant_offset": a.quant_offset, "group_counts": counts,
                        "total": a.total, "quant_mode": a.quant_mode, "activate_left": a.activate_left,
                        "swiglu_limit": a.swiglu_limit, "scalar": a.scalar}

    def _dequant_swiglu_quant(self, x, **options):
        return _mod("moe_swiglu").dequant_swiglu_quant(x, **options)

    # -- finalize --------------------------------------------------------------------------------------------
    def _check_moe_finalize_routing(self, args, kwargs):
        a = _validate("moe_finalize_routing", _moe.moe_finalize_routing_args, args, kwargs)
        experts = a.experts if a.bias is not None else None   # read for the bias only
        return (a.rows, a.skip1, a.skip2, a.bias, a.scales, a.slots, experts), {"drop_pad_mode": a.drop_pad_mode}

    def _moe_finalize_routing(self, rows, skip1, skip2, bias, scales, slots, experts, *, drop_pad_mode):
        return _mod("moe_finalize").finalize_routing(rows, skip1, skip2, bias, scales, slots, experts,
                                                     drop_pad_mode=drop_pad_mode)

    # -- the W8A8 MoE layer ------------------------------------------------------------------------------------
    def _check_w8a8_moe(self, args, kwargs):
        return _mod("moe_layer").check("w8a8_moe", _validate("w8a8_moe", _moe.w8a8_moe_args, args, kwargs))

    def _load_w8a8_moe(self, args, kwargs):
        return _mod("moe_layer").load(args, kwargs, self.gemm_path)

    def _w8a8_moe(self, *args, **kwargs):
        return _mod("moe_layer").forward(*args, **kwargs)

    def _check_w8a8_moe_prequantized(self, args, kwargs):
        a = _validate("w8a8_moe_prequantized", _moe.w8a8_moe_prequantized_args, args, kwargs)
        return _mod("moe_layer").check("w8a8_moe_prequantized", a)

    def _load_w8a8_moe_prequantized(self, args, kwargs):
        return _mod("moe_layer").load(args, kwargs, self.gemm_path)

    def _w8a8_moe_prequantized(self, *args, **kwargs):
        return _mod("moe_layer").forward(*args, **kwargs)

