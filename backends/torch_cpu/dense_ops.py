"""The dense W8A8 ops of the torch-cpu backend (a mixin of :class:`backends.torch_cpu.TorchCpuBackend`).

Each op is registered with :func:`~backends.base.implements` (the device work, torch tensors in and
out) and, where it has load-time work or arguments torch cannot take as they are, with
:func:`~backends.base.loads`. Both get the golden's checked Args: :meth:`Backend.prepare` ran the
golden's check first, so torch-cpu refuses exactly what the golden refuses, with its message. An op
without a loader gets the Args with every array on the device (zero-copy ``torch.from_numpy``
views). Nothing of the golden computes here: the device work is :mod:`.quant`, :mod:`.gemm`,
:mod:`.qmatmul`, :mod:`.layout` and :mod:`.linear`.

What is torch-cpu's own: the calls it declines (:class:`~backends.base.Unsupported`: the int4 route
of ``quant_matmul``, layout dtypes torch has no equivalent for) and the host-side conversion of
zero points of dtypes torch cannot take. Data-dependent checks that need the op's own arithmetic
(``x * smooth_scales`` overflowing, the int32 accumulator overflowing) run in torch, in the op,
with the golden's messages. This module imports no torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

from w8a8 import dtypes as _dt

from ..base import Unsupported, implements, loads


def _mod(name: str):
    return importlib.import_module(f"{__package__}.{name}")


def _tdtype(dtype):
    return _mod("arith").torch_dtype_of(_dt.name(dtype))


_TORCH_CASTABLE = tuple(np.dtype(d) for d in (np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64,
                                             np.float16, np.float32, np.float64)) + (_dt.bfloat16,)


def _torch_castable(z: np.ndarray) -> np.ndarray:
    """A dequantize zero point as an array torch can take (a host fp32 cast only for exotic dtypes)."""
    return z if z.dtype in _TORCH_CASTABLE else z.astype(np.float32)


_RAW = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def raw_bits(op: str, arg: str, w: np.ndarray) -> np.ndarray:
    """``w`` viewed as integers of its element width (layout ops move bits, never values)."""
    if w.dtype.hasobject or w.dtype.itemsize not in _RAW:
        raise Unsupported(f"torch-cpu {op}: argument '{arg}' of dtype {w.dtype} (itemsize {w.dtype.itemsize}) has no "
                          "torch equivalent; 1, 2, 4 or 8-byte plain dtypes only")
    return np.ascontiguousarray(w).view(_RAW[w.dtype.itemsize])


@dataclass
class Bits:
    """A device result of raw integers that reads back as ``dtype`` (the output of a layout op)."""

    tensor: object
    dtype: np.dtype


class DenseOps:
    """Dense W8A8 ops of torch-cpu (see the module docstring)."""

    # -- quantizers --------------------------------------------------------------------------------
    @implements("dynamic_quant")
    def _dynamic_quant(self, a, *, numerics):
        return _mod("quant").dynamic_quant(a.x, smooth_scales=a.smooth_scales, group_index=a.group_index,
                                           dst_type=a.dst_name, numerics=numerics)

    @implements("dynamic_quant_asymmetric")
    def _dynamic_quant_asymmetric(self, a):
        return _mod("quant").dynamic_quant_asymmetric(a.x, smooth_scales=a.smooth_scales, group_index=a.group_index,
                                                      dst_type=a.dst_name)

    @implements("quantize")
    def _quantize(self, a):   # scales / zero points shaped to broadcast against x (the golden's views)
        return _mod("quant").quantize(a.x, a.scales_b, a.zero_points_b, dtype=a.out_name, div_mode=a.div_mode)

    @loads("dequantize")
    def _load_dequantize(self, a):
        zb = None if a.zero_point_b is None else _torch_castable(a.zero_point_b)
        return self.transfer((a.y, a.scale_b, zb)), a.out

    @implements("dequantize")
    def _dequantize(self, loaded):
        (y, scale, zero_point), out = loaded
        return _mod("quant").dequantize(y, scale, zero_point, output_dtype=_tdtype(out))

    @implements("anti_quant")
    def _anti_quant(self, a):
        return _mod("quant").anti_quant(a.x, a.scale, offset=a.offset, dst_dtype=_tdtype(a.dst),
                                        src_dtype=_dt.name(a.src))

    @implements("trans_quant_param")
    def _trans_quant_param(self, a):
        return _mod("arith").trans_quant_param(a.scale, a.offset, round_mode=a.round_mode)

    # -- GEMMs ---------------------------------------------------------------------------------------
    @implements("int_matmul")
    def _int_matmul(self, a):
        return _mod("gemm").int_matmul(a.a, a.b, op=a.op)

    @loads("quant_matmul")
    def _load_quant_matmul(self, a):
        """The int8 weight laid out for the GEMM path, once (untimed)."""
        if a.int4 is not None:
            raise Unsupported("torch-cpu does not implement the int4 quant_matmul route (x2 int32-packed int4: "
                              "A8W4 / A4W4); dense int8 x int8 only (quant_matmul_int4 is its own op)")
        x1, x2, scale, offset, pertoken, bias = self.transfer((a.x1, a.x2, a.scale, a.offset, a.pertoken_scale,
                                                               a.bias))
        weight = _mod("gemm").Int8Weight.load(x2, self.gemm_path)
        return x1, weight, scale, dict(offset=offset, pertoken_scale=pertoken, bias=bias, output_dtype=_tdtype(a.out))

    @implements("quant_matmul")
    def _quant_matmul(self, loaded):
        x1, weight, scale, options = loaded
        return _mod("qmatmul").quant_matmul(x1, weight, scale, **options)

    # -- layout (bits move, values don't: raw integers of the element width) --------------------------
    @loads("format_cast_nz")
    def _load_format_cast_nz(self, a):
        return self.transfer(raw_bits("format_cast_nz", "w", a.w)), a.c0, a.w.dtype

    @implements("format_cast_nz")
    def _format_cast_nz(self, loaded):
        w, c0, dtype = loaded
        return Bits(_mod("layout").format_cast_nz(w, c0=c0), dtype)

    @loads("nz_to_nd")
    def _load_nz_to_nd(self, a):
        return self.transfer(raw_bits("nz_to_nd", "w_nz", a.w_nz)), a.shape, a.w_nz.dtype

    @implements("nz_to_nd")
    def _nz_to_nd(self, loaded):
        w_nz, shape, dtype = loaded
        return Bits(_mod("layout").nz_to_nd(w_nz, shape), dtype)

    # -- the Linear paths (the serving stack's once-per-weight work at load) ---------------------------
    @loads("w8a8_dynamic_linear")
    def _load_w8a8_dynamic_linear(self, a):
        """Weight ``[K, N]`` for the GEMM path; scale and bias as the golden loaded and checked them."""
        p = a.params
        x, weight, scale, bias = self.transfer((a.x, p.weight, p.weight_scale, p.bias))
        return x, _mod("linear").load_dynamic(x.dtype, weight, scale, bias, self.gemm_path)

    @implements("w8a8_dynamic_linear")
    def _w8a8_dynamic_linear(self, loaded):
        return _mod("linear").w8a8_dynamic_linear(*loaded)

    @loads("w8a8_static_linear")
    def _load_w8a8_static_linear(self, a):
        """Weight ``[K, N]``; the reciprocal and offset ``[K]`` in the model dtype, ``deq_scale`` and the
        matmul bias, as the golden loaded and checked them."""
        x, weight, recip, offset, deq, bias = self.transfer((a.x, a.weight, a.input_scale_reciprocal, a.input_offset,
                                                             a.deq_scale, a.matmul_bias))
        return x, _mod("linear").load_static(x.dtype, weight, recip, offset, deq, bias, self.gemm_path)

    @implements("w8a8_static_linear")
    def _w8a8_static_linear(self, loaded):
        return _mod("linear").w8a8_static_linear(*loaded)
