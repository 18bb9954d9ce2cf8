"""Low-bit formats of the golden (INT4 group-wise, W4A8, MXFP4/MXFP8, NVFP4, FP8 block).

One module per format or concern, each with a docstring that records the conventions it chose
where the sources differ (docs/low-bit.md):

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

Every module of the package is imported here (which registers its ops, :mod:`w8a8.registry`) and
what it lists in ``__all__`` is exported: a new module needs no edit of this file.
"""

from .. import registry as _registry

globals().update(_exports := _registry.exports(_registry.import_modules(__name__, __path__)))

__all__: list[str] = list(_exports)
