"""Grouped MoE ops of the golden (routing, grouped matmul, SwiGLU + requant, finalize, the pipeline).

Ops mirroring torch_npu (spec/ascend-ops.md §5, §7): :func:`moe_gating_top_k_softmax`,
:func:`moe_gating_top_k`, :func:`moe_init_routing`, :func:`moe_init_routing_v2`,
:func:`grouped_matmul`, :func:`swiglu`, :func:`dequant_swiglu_quant`, :func:`moe_finalize_routing`.
The serving path (spec/serving-paths.md §5): :func:`w8a8_moe`, :func:`w8a8_moe_prequantized` (and
their ``*_stages``), :func:`dispatch_quant` (the int8 dispatch model).

Where the device leaves outputs unwritten, the golden writes zeros and says which elements are
specified: :func:`valid_rows` (grouped_matmul, dequant_swiglu_quant) and
:func:`moe_init_routing_v2_valid`.

**Validators** (:data:`VALIDATORS`, importable from ``w8a8.moe``, not re-exported at the top of
``w8a8``): each op's argument checks as one public function that the golden op itself calls first
and that returns the normalized arguments, so that a backend rejects exactly what the golden rejects,
with the same exception and message, without copying the checks: :func:`moe_gating_top_k_softmax_args`,
:func:`moe_gating_top_k_args`, :func:`moe_init_routing_args`, :func:`moe_init_routing_v2_plan`,
:func:`dispatch_quant_args`, :func:`grouped_matmul_args`, :func:`group_segments` (every group list),
:func:`swiglu_args`, :func:`dequant_swiglu_quant_args`, :func:`moe_finalize_routing_args`,
:func:`w8a8_moe_args`, :func:`w8a8_moe_prequantized_args` (with their parts
:func:`expert_weights_args`, :func:`moe_routing_args`, :func:`shared_expert_args`).
"""

from ._common import group_segments, valid_rows
from .finalize import FinalizeArgs, moe_finalize_routing, moe_finalize_routing_args
from .gating import (GatingSoftmaxArgs, GatingTopKArgs, moe_gating_top_k, moe_gating_top_k_args,
                     moe_gating_top_k_softmax, moe_gating_top_k_softmax_args)
from .grouped_matmul import GroupedMatmulArgs, grouped_matmul, grouped_matmul_args
from .pipeline import (ExpertWeights, MoeArgs, MoeRouting, expert_weights_args, moe_routing_args,
                       shared_expert_args, w8a8_moe, w8a8_moe_args, w8a8_moe_prequantized, w8a8_moe_prequantized_args,
                       w8a8_moe_prequantized_stages, w8a8_moe_stages)
from .routing import (InitRoutingArgs, RoutingV2Plan, dispatch_quant, dispatch_quant_args, moe_init_routing,
                      moe_init_routing_args, moe_init_routing_v2, moe_init_routing_v2_plan, moe_init_routing_v2_valid)
from .swiglu import DequantSwigluArgs, dequant_swiglu_quant, dequant_swiglu_quant_args, swiglu, swiglu_args

__all__: list[str] = [
    "moe_gating_top_k_softmax", "moe_gating_top_k",
    "moe_init_routing", "moe_init_routing_v2", "moe_init_routing_v2_valid", "dispatch_quant",
    "grouped_matmul", "valid_rows",
    "swiglu", "dequant_swiglu_quant",
    "moe_finalize_routing",
    "w8a8_moe", "w8a8_moe_stages", "w8a8_moe_prequantized", "w8a8_moe_prequantized_stages",
]

VALIDATORS: tuple[str, ...] = (
    "moe_gating_top_k_softmax_args", "moe_gating_top_k_args", "moe_init_routing_args", "moe_init_routing_v2_plan",
    "dispatch_quant_args", "grouped_matmul_args", "group_segments", "swiglu_args", "dequant_swiglu_quant_args",
    "moe_finalize_routing_args", "w8a8_moe_args", "w8a8_moe_prequantized_args", "expert_weights_args",
    "moe_routing_args", "shared_expert_args",
)
"""The public argument validators of the MoE ops (see the module docstring)."""
