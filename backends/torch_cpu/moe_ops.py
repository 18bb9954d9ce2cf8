"""The grouped-MoE ops of the torch-cpu backend (a mixin of :class:`backends.torch_cpu.TorchCpuBackend`).

Each op is registered with :func:`~backends.base.implements` (the device work, torch tensors in and
out) and, where it has load-time work (untimed by benchmarks), with :func:`~backends.base.loads`.
Both get the golden's checked Args (``w8a8.moe.<module>.<Op>Args``): :meth:`Backend.prepare` ran the
golden's own check first (same exceptions, same messages, same order), and each method here maps the
normalized result to the device functions' arguments; an op without a loader gets the Args with every
array on the device. Nothing of the golden computes here: the device work is torch
(:mod:`.moe_gating`, :mod:`.moe_routing`, :mod:`.moe_gmm`, :mod:`.moe_swiglu`, :mod:`.moe_finalize`,
:mod:`.moe_layer`). Numerics: :data:`w8a8.ASCEND`, bit for bit (``tests/backends/test_torch_cpu_moe.py``).

This module imports no torch.
"""

from __future__ import annotations

import importlib

import numpy as np

from w8a8 import dtypes as _dt

from ..base import implements, loads


def _mod(name: str):
    return importlib.import_module(f"{__package__}.{name}")


class MoeOps:
    """Grouped-MoE ops of torch-cpu (see the module docstring)."""

    # -- gating ------------------------------------------------------------------------------------------
    @implements("moe_gating_top_k_softmax")
    def _moe_gating_top_k_softmax(self, a, *, numerics):
        return _mod("moe_gating").gating_top_k_softmax(a.x, a.finished, k=a.k, numerics=numerics)

    @implements("moe_gating_top_k")
    def _moe_gating_top_k(self, a):
        m = _mod("moe_gating")
        return m.gating_top_k(a.x, a.bias, a.input_ids, a.tid2eid, **m.gating_options(a))

    # -- routing -----------------------------------------------------------------------------------------
    @implements("moe_init_routing")
    def _moe_init_routing(self, a):
        return _mod("moe_routing").init_routing(a.x, a.row_idx, a.expert_idx, active_num=a.active_num)

    @implements("moe_init_routing_v2")
    def _moe_init_routing_v2(self, a, *, numerics):
        r = a.routing
        return _mod("moe_routing").init_routing_v2(
            a.x, a.expert_idx, scale=a.scale, offset=a.offset, quant_mode=a.quant_mode, k=r.k, h=a.h, start=r.start,
            end=r.end, drop_pad=r.drop_pad, capacity=r.capacity, expert_num=r.expert_num, rows=r.rows,
            row_idx_type=r.row_idx_type, count_type=r.count_type, count_flag=r.count_flag, numerics=numerics)

    # -- grouped matmul ------------------------------------------------------------------------------------
    @loads("grouped_matmul")
    def _load_grouped_matmul(self, a):
        """The experts' weights loaded for the GEMM path (``int_mm`` wherever the epilogue needs the exact
        int32 accumulator) and the scale prepared, once."""
        gmm = _mod("moe_gmm")
        x, weight, scale, bias, per_token = self.transfer((a.x, a.weight, a.scale, a.bias, a.per_token_scale))
        path = "int_mm" if gmm.needs_int32(scale, bias) else "auto"
        memoised = _mod("bound").memoised
        experts = memoised(self.bind_memo, "experts",
                           lambda: _mod("moe_experts").ExpertGemm.load(weight, layout="ekn", path=path))
        scale = None if scale is None else memoised(self.bind_memo, "scale", lambda: gmm.GroupedScale.load(scale))
        return x, experts, dict(scale=scale, bias=bias,
                                per_token_scale=per_token, segments=a.segments, total=a.total, out=_dt.name(a.out),
                                act_type=a.act_type), a.as_list

    @implements("grouped_matmul")
    def _grouped_matmul(self, loaded):
        x, experts, options, as_list = loaded
        y = _mod("moe_gmm").grouped_matmul(x, experts, **options)
        return [y] if as_list else y

    # -- activation ----------------------------------------------------------------------------------------
    @implements("swiglu")
    def _swiglu(self, a, *, numerics):
        return _mod("moe_swiglu").swiglu(a.x, dim=a.dim, numerics=numerics)

    @loads("dequant_swiglu_quant")
    def _load_dequant_swiglu_quant(self, a):
        counts = None if a.groups is None else np.asarray([stop - start for _, start, stop in a.segments], np.int64)
        return self.transfer((a, counts))

    @implements("dequant_swiglu_quant")
    def _dequant_swiglu_quant(self, loaded, *, numerics):
        a, counts = loaded
        return _mod("moe_swiglu").dequant_swiglu_quant(
            a.x, weight_scale=a.weight_scale, activation_scale=a.activation_scale, bias=a.bias,
            quant_scale=a.quant_scale, quant_offset=a.quant_offset, group_counts=counts, total=a.total,
            quant_mode=a.quant_mode, activate_left=a.activate_left, swiglu_limit=a.swiglu_limit, scalar=a.scalar,
            numerics=numerics)

    # -- finalize --------------------------------------------------------------------------------------------
    @implements("moe_finalize_routing")
    def _moe_finalize_routing(self, a, *, numerics):
        experts = a.experts if a.bias is not None else None   # read for the bias only
        return _mod("moe_finalize").finalize_routing(a.rows, a.skip1, a.skip2, a.bias, a.scales, a.slots, experts,
                                                     drop_pad_mode=a.drop_pad_mode, numerics=numerics)

    # -- the W8A8 MoE layer ------------------------------------------------------------------------------------
    @loads("w8a8_moe", "w8a8_moe_prequantized")
    def _load_moe_layer(self, a):
        """The experts, the routing and the shared expert loaded (:func:`.moe_layer.load`)."""
        return _mod("moe_layer").load(a, self.transfer, self.gemm_path, memo=self.bind_memo)

    @implements("w8a8_moe", "w8a8_moe_prequantized")
    def _moe_layer(self, loaded):
        inputs, layer = loaded
        return _mod("moe_layer").forward(*inputs, layer=layer)
