"""The low-bit format ops of the torch-cpu backend (a mixin of :class:`backends.torch_cpu.TorchCpuBackend`).

Every op of :data:`backends.ops.LOWBIT_OPS`, bit-identical to the golden under :data:`w8a8.ASCEND`
(``tests/backends/test_torch_cpu_lowbit.py``). Each op is registered with
:func:`~backends.base.implements` (the device work, torch tensors in and out: :mod:`.lowbit_int4`,
:mod:`.lowbit_fp`; decode tables and exact encoders in :mod:`.lowbit_codec`) and, where it has
once-per-weight work, with :func:`~backends.base.loads` (unpacking an int4 weight, its FP19 scale and
``8 * sum w s``; the antiquantized W4A16 / W8A16 weight; the weight side of the MX, NVFP4 and
FP8-block matmuls decoded to float64 — never decoded again per call). Both get the golden's checked
Args (the ``<op>_args`` of :mod:`w8a8.lowbit`, run by :meth:`Backend.prepare`: same exceptions, same
messages, same order); an op without a loader gets them with every array on the device.

A call the golden accepts but torch cannot represent (``swizzle_block_scales`` of an element wider
than 8 bytes) raises :class:`backends.base.Unsupported`. This module imports no torch.
"""

from __future__ import annotations

import importlib

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.variants import calls as variant_calls

from ..base import implements, loads
from .dense_ops import Bits, raw_bits


def _mod(name: str):
    return importlib.import_module(f"{__package__}.{name}")


def _tdtype(dtype):
    return _mod("arith").torch_dtype_of(_dt.name(dtype))


def _raw_fp8(data: np.ndarray) -> np.ndarray:
    """MX data as raw bytes: packed FP4 is uint8 already; fp8 arrays are viewed as uint8 (their element
    name travels with them): the MX kernels decode bytes through tables."""
    return data.view(np.uint8)


class LowbitOps:
    """Low-bit format ops of torch-cpu (see the module docstring)."""

    # -- INT4 group-wise --------------------------------------------------------------------------
    @implements("int4_group_quantize")
    def _int4_group_quantize(self, a):
        return _mod("lowbit_int4").int4_group_quantize(a.weight, a.group_size, a.groups, a.scheme,
                                                       _tdtype(a.scale_dtype))

    @implements("int4_group_dequantize")
    def _int4_group_dequantize(self, a):
        return _mod("lowbit_int4").int4_group_dequantize(a.codes, a.scale, a.zero, _tdtype(a.out))

    # -- W8A16 / W4A16 ----------------------------------------------------------------------------
    @loads("weight_quant_batchmatmul")
    def _load_weight_quant_batchmatmul(self, a, *, numerics):
        """Once per weight: ``w_hat`` (the antiquantized weight, as float64 for the exact GEMM), the
        requant values and the fp32 bias."""
        d = self.transfer(a)
        m = _mod("lowbit_int4")
        precision = variant_calls.weight_quant_batchmatmul(a, numerics).numerics(numerics).antiquant_precision
        w_hat = m.antiquant_weight(d.weight, a.layout, d.scale, a.group, d.offset, a.packed, d.x.dtype,
                                   precision=precision)
        qs, qo = m.quant_values(d.quant_scale, d.quant_offset)
        return d.x, w_hat.double(), qs, qo, None if d.bias is None else d.bias.float()

    @implements("weight_quant_batchmatmul")
    def _weight_quant_batchmatmul(self, loaded):
        return _mod("lowbit_int4").weight_quant_batchmatmul(*loaded)

    @implements("convert_weight_to_int4pack")
    def _convert_weight_to_int4pack(self, a):
        return _mod("lowbit_int4").convert_weight_to_int4pack(a.weight)

    # -- int4 quant_matmul (A4W4, A8W4) and the W4A8 Linear -----------------------------------------
    @loads("quant_matmul_int4")
    def _load_quant_matmul_int4(self, a):
        """A4W4: the unpacked weight codes loaded for the int8 GEMM path; A8W4: the unpacked codes, the
        FP19 group scale and ``8 * sum w s``."""
        m = _mod("lowbit_int4")
        d = self.transfer(a)
        if a.mode == "a4w4":
            codes = m.weight_codes(d.x2, "int4_n" if a.x2_layout == "kn8" else "int4_k")
            return "a4w4", d.x1, _mod("gemm").Int8Weight.load(codes, self.gemm_path), d, _tdtype(a.out)
        w = m.weight_codes(d.x2, "int4_n")
        sf = m.a8w4_group_scale(d.scale)
        return "a8w4", d.x1, (w, sf, m.y_offset(w, sf, a.group)), d, _tdtype(a.out)

    @implements("quant_matmul_int4")
    def _quant_matmul_int4(self, loaded):
        mode, x1, weight, d, out = loaded
        m = _mod("lowbit_int4")
        if mode == "a4w4":
            return m.a4w4(x1, weight, d.scale, d.pertoken_scale, d.bias, out)
        w, sf, y_off = weight
        return m.a8w4(x1, w, sf, d.group, y_off, d.offset, d.pertoken_scale, out)

    @loads("w4a8_dynamic_linear")
    def _load_w4a8_dynamic_linear(self, a):
        x, weight, s32, bias = self.transfer((a.x, a.weight, a.weight_scale_f32, a.bias))
        return x, _mod("lowbit_int4").W4A8Layer(weight, s32, bias, x.dtype)

    @implements("w4a8_dynamic_linear")
    def _w4a8_dynamic_linear(self, loaded):
        return _mod("lowbit_int4").w4a8_dynamic_linear(*loaded)

    # -- MX -----------------------------------------------------------------------------------------
    @implements("mx_quantize")
    def _mx_quantize(self, a):
        return _mod("lowbit_fp").mx_quantize(a.x, a.elem_name, a.block_size, a.scale_mode)

    @loads("mx_dequantize")
    def _load_mx_dequantize(self, a):
        return self.transfer((_raw_fp8(a.data), a.scale)), a.elem_name, a.out

    @implements("mx_dequantize")
    def _mx_dequantize(self, loaded):
        (data, scale), name, out = loaded
        return _mod("lowbit_fp").mx_dequantize(data, scale, name, _tdtype(out))

    @loads("mx_matmul")
    def _load_mx_matmul(self, a):
        a_data, a_scale, b_data, b_scale = self.transfer((_raw_fp8(a.a_data), a.a_scale, _raw_fp8(a.b_data),
                                                          a.b_scale))
        b = _mod("lowbit_fp").mx_operand64(b_data, b_scale, a.b_elem_name)  # once per weight
        return a_data, a_scale, b, a.a_elem_name, _tdtype(a.out)

    @implements("mx_matmul")
    def _mx_matmul(self, loaded):
        return _mod("lowbit_fp").mx_matmul(*loaded)

    # -- NVFP4 --------------------------------------------------------------------------------------
    @implements("nvfp4_quantize")
    def _nvfp4_quantize(self, a):
        return _mod("lowbit_fp").nvfp4_quantize(a.x, a.convention, float(a.tensor_scale))

    @implements("nvfp4_dequantize")
    def _nvfp4_dequantize(self, a):
        return _mod("lowbit_fp").nvfp4_dequantize(a.data, a.block_scale, a.convention, float(a.tensor_scale),
                                                  _tdtype(a.out))

    @loads("nvfp4_matmul")
    def _load_nvfp4_matmul(self, a):
        a_data, a_scale, b_data, b_scale = self.transfer((a.a_data, a.a_block_scale, a.b_data, a.b_block_scale))
        b = _mod("lowbit_fp").nvfp4_operand64(b_data, b_scale)  # once per weight
        return a_data, a_scale, b, float(a.alpha), _tdtype(a.out)

    @implements("nvfp4_matmul")
    def _nvfp4_matmul(self, loaded):
        return _mod("lowbit_fp").nvfp4_matmul(*loaded)

    @loads("swizzle_block_scales")
    def _load_swizzle_block_scales(self, a):
        return self.transfer(raw_bits("swizzle_block_scales", "scale", a.scale)), a.scale.dtype

    @implements("swizzle_block_scales")
    def _swizzle_block_scales(self, loaded):
        scale, dtype = loaded
        return Bits(_mod("lowbit_fp").swizzle_block_scales(scale), dtype)

    # -- FP8 block ----------------------------------------------------------------------------------
    @implements("fp8_block_quantize")
    def _fp8_block_quantize(self, a):
        return _mod("lowbit_fp").fp8_block_quantize(a.weight, a.block_rows, a.block_cols, a.scale_fmt, float(a.eps))

    @implements("per_token_group_quant_fp8")
    def _per_token_group_quant_fp8(self, a):
        return _mod("lowbit_fp").per_token_group_quant_fp8(a.x, a.group_size, a.scale_fmt, float(a.eps))

    @implements("fp8_block_dequantize")
    def _fp8_block_dequantize(self, a):
        return _mod("lowbit_fp").fp8_block_dequantize(a.weight_q, a.weight_scale_inv, a.block_rows, a.block_cols,
                                                      _tdtype(a.out))

    @loads("fp8_block_matmul")
    def _load_fp8_block_matmul(self, a):
        a_q, a_scale, weight_q, w_scale = self.transfer((a.a_q, a.a_scale, a.weight_q, a.weight_scale_inv))
        w_blocks = _mod("lowbit_fp").fp8_block_weight64(weight_q, a.block_size, a_scale.shape[1])  # once per weight
        return a_q, a_scale, w_blocks, w_scale, a.block_size, _tdtype(a.out)

    @implements("fp8_block_matmul")
    def _fp8_block_matmul(self, loaded):
        return _mod("lowbit_fp").fp8_block_matmul(*loaded)
