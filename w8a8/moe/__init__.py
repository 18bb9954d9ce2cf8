"""Grouped MoE ops of the golden (routing, grouped matmul, SwiGLU + requant, finalize, the pipeline).

Ops mirroring torch_npu (spec/ascend-ops.md §5, §7): :func:`moe_gating_top_k_softmax`,
:func:`moe_gating_top_k`, :func:`moe_init_routing`, :func:`moe_init_routing_v2`,
:func:`grouped_matmul`, :func:`swiglu`, :func:`dequant_swiglu_quant`, :func:`moe_finalize_routing`.
The serving path (spec/serving-paths.md §5): :func:`w8a8_moe`, :func:`w8a8_moe_prequantized` (and
their ``*_stages``), :func:`dispatch_quant` (the int8 dispatch model).

Where the device leaves outputs unwritten, the golden writes zeros and says which elements are
specified: :func:`valid_rows` (grouped_matmul, dequant_swiglu_quant) and
:func:`moe_init_routing_v2_valid`.
"""

from ._common import valid_rows
from .finalize import moe_finalize_routing
from .gating import moe_gating_top_k, moe_gating_top_k_softmax
from .grouped_matmul import grouped_matmul
from .pipeline import w8a8_moe, w8a8_moe_prequantized, w8a8_moe_prequantized_stages, w8a8_moe_stages
from .routing import dispatch_quant, moe_init_routing, moe_init_routing_v2, moe_init_routing_v2_valid
from .swiglu import dequant_swiglu_quant, swiglu

__all__: list[str] = [
    "moe_gating_top_k_softmax", "moe_gating_top_k",
    "moe_init_routing", "moe_init_routing_v2", "moe_init_routing_v2_valid", "dispatch_quant",
    "grouped_matmul", "valid_rows",
    "swiglu", "dequant_swiglu_quant",
    "moe_finalize_routing",
    "w8a8_moe", "w8a8_moe_stages", "w8a8_moe_prequantized", "w8a8_moe_prequantized_stages",
]
