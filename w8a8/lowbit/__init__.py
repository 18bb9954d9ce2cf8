"""Low-bit formats of the golden (INT4 group-wise, W4A8, MXFP4/MXFP8, NVFP4, FP8 block).

One module per format or concern, each with a docstring that records the conventions it chose
where the sources differ (spec/lowbit-formats.md §7):

* :mod:`.minifloat` — E2M1 / E4M3 / E5M2 / E8M0 encode (RNE, saturating) and table decode; FP4
  packing (low nibble = even element).
* :mod:`.packing` — the INT4 checkpoint and kernel layouts (GPTQ, AWQ, compressed-tensors, vLLM
  moe_wna16, msModelSlim, Ascend ``npu_convert_weight_to_int4pack``).
* :mod:`.int4_group` — INT4 group-wise weight quantization (W4A16).
* :mod:`.weight_quant_batchmatmul` — ``npu_weight_quant_batchmatmul`` (W8A16 / W4A16).
* :mod:`.w4a8` — ``npu_quant_matmul`` with int4 operands (A4W4, A8W4) and the W4A8_DYNAMIC Linear.
* :mod:`.mx` — MXFP4 / MXFP8 (OCP MX v1.0), gpt-oss layout.
* :mod:`.nvfp4` — NVFP4, both tensor-scale conventions, the 128x4 scale swizzle.
* :mod:`.fp8_block` — DeepSeek-V3 FP8 128x128 / 1x128 block quantization and GEMM.
"""

from .fp8_block import fp8_block_dequantize, fp8_block_matmul, fp8_block_quantize, per_token_group_quant_fp8
from .int4_group import int4_group_dequantize, int4_group_quantize
from .minifloat import (e2m1_to_float, e8m0_to_float, float_to_e2m1, float_to_fp8, fp4_to_float, fp8_to_float,
                        pack_fp4, unpack_fp4)
from .mx import mx_dequantize, mx_from_gptoss, mx_matmul, mx_quantize, mx_shared_exponent, mx_to_gptoss
from .nvfp4 import (nvfp4_dequantize, nvfp4_global_scale, nvfp4_matmul, nvfp4_per_tensor_scale, nvfp4_quantize,
                    swizzle_block_scales, unswizzle_block_scales)
from .packing import (convert_weight_to_int4pack, from_uint4b8, pack_gptq_qzeros, pack_int4_awq,
                      pack_int4_compressed_tensors, pack_int4_gptq, pack_int4_moe_wna16, pack_int4_msmodelslim,
                      pack_nibbles, to_uint4b8, unpack_gptq_qzeros, unpack_int4_awq,
                      unpack_int4_compressed_tensors, unpack_int4_gptq, unpack_int4_moe_wna16,
                      unpack_int4_msmodelslim, unpack_nibbles)
from .w4a8 import (a8w4_y_offset, quant_matmul_int4, quant_matmul_int4_stages, w4a8_dynamic_linear,
                   w4a8_dynamic_linear_stages)
from .weight_quant_batchmatmul import weight_quant_batchmatmul

__all__: list[str] = [
    # element types
    "float_to_e2m1", "e2m1_to_float", "float_to_fp8", "fp8_to_float", "e8m0_to_float", "pack_fp4", "unpack_fp4",
    "fp4_to_float",
    # INT4 layouts
    "pack_nibbles", "unpack_nibbles", "to_uint4b8", "from_uint4b8",
    "pack_int4_gptq", "unpack_int4_gptq", "pack_gptq_qzeros", "unpack_gptq_qzeros",
    "pack_int4_awq", "unpack_int4_awq", "pack_int4_compressed_tensors", "unpack_int4_compressed_tensors",
    "pack_int4_moe_wna16", "unpack_int4_moe_wna16", "pack_int4_msmodelslim", "unpack_int4_msmodelslim",
    "convert_weight_to_int4pack",
    # INT4 group-wise (W4A16), weight-only matmul, W4A8
    "int4_group_quantize", "int4_group_dequantize", "weight_quant_batchmatmul",
    "quant_matmul_int4", "quant_matmul_int4_stages", "a8w4_y_offset",
    "w4a8_dynamic_linear", "w4a8_dynamic_linear_stages",
    # MX
    "mx_quantize", "mx_dequantize", "mx_matmul", "mx_shared_exponent", "mx_from_gptoss", "mx_to_gptoss",
    # NVFP4
    "nvfp4_quantize", "nvfp4_dequantize", "nvfp4_matmul", "nvfp4_per_tensor_scale", "nvfp4_global_scale",
    "swizzle_block_scales", "unswizzle_block_scales",
    # FP8 block
    "fp8_block_quantize", "per_token_group_quant_fp8", "fp8_block_dequantize", "fp8_block_matmul",
]
