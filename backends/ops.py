"""The op names a backend can implement, and the golden function behind each.

Every name is a golden function (``w8a8.<name>``, or the module named in :data:`GOLDEN_MODULES`)
and a method of :class:`backends.base.Backend`. The three tuples are the three layers of the op
surface: the dense W8A8 ops, the grouped-MoE ops and the low-bit formats.
"""

from __future__ import annotations

import importlib

DENSE_OPS: tuple[str, ...] = (
    "dynamic_quant", "dynamic_quant_asymmetric", "quantize", "dequantize", "anti_quant",
    "trans_quant_param", "int_matmul", "quant_matmul", "format_cast_nz", "nz_to_nd",
    "w8a8_dynamic_linear", "w8a8_static_linear",
)

MOE_OPS: tuple[str, ...] = (
    "moe_gating_top_k_softmax", "moe_gating_top_k", "moe_init_routing", "moe_init_routing_v2",
    "grouped_matmul", "swiglu", "dequant_swiglu_quant", "moe_finalize_routing",
    "w8a8_moe", "w8a8_moe_prequantized",
)

LOWBIT_OPS: tuple[str, ...] = (
    "int4_group_quantize", "int4_group_dequantize", "weight_quant_batchmatmul", "convert_weight_to_int4pack",
    "quant_matmul_int4", "w4a8_dynamic_linear", "mx_quantize", "mx_dequantize", "mx_matmul",
    "nvfp4_quantize", "nvfp4_dequantize", "nvfp4_matmul", "swizzle_block_scales",
    "fp8_block_quantize", "per_token_group_quant_fp8", "fp8_block_dequantize", "fp8_block_matmul",
)

OPS: tuple[str, ...] = DENSE_OPS + MOE_OPS + LOWBIT_OPS

GOLDEN_MODULES: dict[str, str] = {}
"""Ops whose golden is not exported at the top of ``w8a8`` map to their module here."""


def golden_function(op: str):
    """The golden implementation of ``op`` (ImportError/AttributeError if it has not landed)."""
    module = importlib.import_module(GOLDEN_MODULES.get(op, "w8a8"))
    return getattr(module, op)
