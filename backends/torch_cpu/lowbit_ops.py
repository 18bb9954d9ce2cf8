"""The low-bit format ops of the torch-cpu backend (a mixin of :class:`backends.torch_cpu.TorchCpuBackend`).

Every op of :data:`backends.ops.LOWBIT_OPS`, bit-identical to the golden under :data:`w8a8.ASCEND`
(``tests/backends/test_torch_cpu_lowbit.py``). Each op has three parts, called by
:meth:`TorchCpuBackend.prepare` / ``load``:

* ``_<op>_args(args, kwargs)`` binds the call to the golden's signature and runs the golden's own
  argument checks (the public ``<op>_args`` functions of :mod:`w8a8.lowbit`: same exceptions, same
  messages, same order) on the NumPy side; it returns the checked arrays and the resolved options
  (element names, output dtype names, group sizes) for the device function;
* ``_load_<op>(args, kwargs)`` where an op has once-per-weight work (unpacking an int4 weight,
  its FP19 scale and ``8 * sum w s``; the antiquantized W4A16 / W8A16 weight; the weight side of
  the MX, NVFP4 and FP8-block matmuls decoded to float64 — never decoded again per call);
* ``_<op>(...)``: the device work, torch tensors in and out (:mod:`.lowbit_int4`, :mod:`.lowbit_fp`;
  decode tables and exact encoders in :mod:`.lowbit_codec`).

A call the golden accepts but torch cannot represent (``swizzle_block_scales`` of an element wider
than 8 bytes) raises :class:`backends.base.Unsupported`. This module imports no torch.
"""

from __future__ import annotations

import importlib

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.lowbit import fp8_block, int4_group, mx, nvfp4, packing, w4a8
from w8a8.lowbit.weight_quant_batchmatmul import weight_quant_batchmatmul_args
from w8a8.numerics import ASCEND
from w8a8.quant_matmul import quant_matmul_args
from w8a8.variants import calls as variant_calls

from . import checks


def _mod(name: str):
    return importlib.import_module(f"{__package__}.{name}")


def _tdtype(name: str):
    return _mod("arith").torch_dtype_of(name)


def _raw_fp8(data: np.ndarray) -> np.ndarray:
    """MX data as raw bytes: packed FP4 is uint8 already; fp8 arrays are viewed as uint8 (their element
    name travels as an option). ``backends.torch_common.to_torch`` cannot convert ml_dtypes
    ``float8_e5m2`` (its NumPy kind is ``'f'``, not ``'V'``), so the fp8 bytes cross as uint8."""
    return data.view(np.uint8)


def _stand_in(dtype, shape) -> np.ndarray:
    """A zero-stride array of the given dtype and shape (argument checks read dtypes and shapes only)."""
    return np.broadcast_to(np.zeros((), dtype), shape)


class LowbitOps:
    """Low-bit format ops of torch-cpu (see the module docstring)."""

    # -- INT4 group-wise --------------------------------------------------------------------------
    def _check_int4_group_quantize(self, args, kwargs):
        p = checks.bind("int4_group_quantize", args, kwargs)
        w, g, groups, sdt = int4_group.int4_group_quantize_args(p["weight"], p["group_size"], p["scheme"],
                                                                 p["scale_dtype"])
        return (w,), {"g": g, "groups": groups, "scheme": p["scheme"], "scale_dtype": _dt.name(sdt)}

    def _int4_group_quantize(self, weight, *, g, groups, scheme, scale_dtype):
        return _mod("lowbit_int4").int4_group_quantize(weight, g, groups, scheme, _tdtype(scale_dtype))

    def _check_int4_group_dequantize(self, args, kwargs):
        p = checks.bind("int4_group_dequantize", args, kwargs)
        codes, scale, zero, out = int4_group.int4_group_dequantize_args(p["codes"], p["scale"], p["zero"],
                                                                         p["output_dtype"])
        return (codes, scale, zero), {"output_dtype": _dt.name(out)}

    def _int4_group_dequantize(self, codes, scale, zero, *, output_dtype):
        return _mod("lowbit_int4").int4_group_dequantize(codes, scale, zero, _tdtype(output_dtype))

    # -- W8A16 / W4A16 ----------------------------------------------------------------------------
    def _check_weight_quant_batchmatmul(self, args, kwargs):
        p = weight_quant_batchmatmul_args(**checks.bind("weight_quant_batchmatmul", args, kwargs))
        precision = variant_calls.weight_quant_batchmatmul(p, ASCEND).numerics(ASCEND).antiquant_precision
        return (p.x, p.weight, p.scale, p.offset), {
            "layout": p.layout, "group": p.group, "packed": p.packed, "quant_scale": p.quant_scale,
            "quant_offset": p.quant_offset, "bias": p.bias, "antiquant_precision": precision}

    def _load_weight_quant_batchmatmul(self, args, kwargs):
        """Once per weight: ``w_hat`` (the antiquantized weight, as float64 for the exact GEMM), the
        requant values and the fp32 bias."""
        x, weight, scale, offset = args
        m = _mod("lowbit_int4")
        w_hat = m.antiquant_weight(weight, kwargs["layout"], scale, kwargs["group"], offset, kwargs["packed"], x.dtype,
                                   precision=kwargs["antiquant_precision"])
        qs, qo = m.quant_values(kwargs["quant_scale"], kwargs["quant_offset"])
        bias = kwargs["bias"]
        return (x, w_hat.double()), {"quant_scale": qs, "quant_offset": qo,
                                     "bias": None if bias is None else bias.float()}

    def _weight_quant_batchmatmul(self, x, w_hat, *, quant_scale, quant_offset, bias):
        return _mod("lowbit_int4").weight_quant_batchmatmul(x, w_hat, quant_scale, quant_offset, bias)

    def _check_convert_weight_to_int4pack(self, args, kwargs):
        p = checks.bind("convert_weight_to_int4pack", args, kwargs)
        return (packing.convert_weight_to_int4pack_args(p["weight"], p["inner_k_tiles"]),), {}

    def _convert_weight_to_int4pack(self, weight):
        return _mod("lowbit_int4").convert_weight_to_int4pack(weight)

    # -- int4 quant_matmul (A4W4, A8W4) and the W4A8 Linear -----------------------------------------
    def _check_quant_matmul_int4(self, args, kwargs):
        p = checks.bind("quant_matmul_int4", args, kwargs)
        a = w4a8.quant_matmul_int4_args(p["x1"], p["x2"], p["scale"], p["offset"], p["pertoken_scale"], p["bias"],
                                         p["output_dtype"], self.numerics)
        if a.mode == "a4w4":  # the rest are quant_matmul's checks on the unpacked codes: run on stand-ins
            lead = a.x1.shape[:-1]
            q = quant_matmul_args(_stand_in(np.int8, lead + (a.k,)), _stand_in(np.int8, (a.k, a.n)), p["scale"],
                                  pertoken_scale=p["pertoken_scale"], bias=p["bias"], output_dtype=a.out,
                                  numerics=self.numerics)
            return (a.x1, a.x2, q.scale), {"mode": "a4w4", "layout": a.x2_layout, "pertoken_scale": q.pertoken_scale,
                                           "bias": q.bias, "output_dtype": q.out.name}
        return (a.x1, a.x2, a.scale), {"mode": "a8w4", "group": a.group, "offset": a.offset,
                                        "pertoken_scale": a.pertoken_scale, "output_dtype": _dt.name(a.out)}

    def _load_quant_matmul_int4(self, args, kwargs):
        m = _mod("lowbit_int4")
        x1, x2, scale = args
        if kwargs["mode"] == "a4w4":
            codes = m.weight_codes(x2, "int4_n" if kwargs.pop("layout") == "kn8" else "int4_k")
            return (x1, _mod("gemm").Int8Weight.load(codes, self.gemm_path), scale), kwargs
        w = m.weight_codes(x2, "int4_n")
        sf = m.a8w4_group_scale(scale)
        y_off = m.y_offset(w, sf, kwargs["group"])
        return (x1, w, sf), {**kwargs, "y_off": y_off}

    def _quant_matmul_int4(self, x1, x2, scale, *, mode, output_dtype, pertoken_scale, bias=None, offset=None,
                           group=None, y_off=None):
        m = _mod("lowbit_int4")
        out = _tdtype(output_dtype)
        if mode == "a4w4":
            return m.a4w4(x1, x2, scale, pertoken_scale, bias, out)
        return m.a8w4(x1, x2, scale, group, y_off, offset, pertoken_scale, out)

    def _check_w4a8_dynamic_linear(self, args, kwargs):
        p = checks.bind("w4a8_dynamic_linear", args, kwargs)
        x, weight, s32, b = w4a8.w4a8_dynamic_linear_args(p["x"], p["weight"], p["weight_scale"], p["bias"],
                                                           self.numerics)
        return (x, weight, s32), {"bias": b}

    def _load_w4a8_dynamic_linear(self, args, kwargs):
        x, weight, s32 = args
        return (x, _mod("lowbit_int4").W4A8Layer(weight, s32, kwargs["bias"], x.dtype)), {}

    def _w4a8_dynamic_linear(self, x, layer):
        return _mod("lowbit_int4").w4a8_dynamic_linear(x, layer)

    # -- MX -----------------------------------------------------------------------------------------
    def _check_mx_quantize(self, args, kwargs):
        p = checks.bind("mx_quantize", args, kwargs)
        x, name, bs = mx.mx_quantize_args(p["x"], p["elem_dtype"], p["block_size"], p["scale_mode"])
        return (x,), {"name": name, "block_size": bs, "scale_mode": p["scale_mode"]}

    def _mx_quantize(self, x, *, name, block_size, scale_mode):
        return _mod("lowbit_fp").mx_quantize(x, name, block_size, scale_mode)

    def _check_mx_dequantize(self, args, kwargs):
        p = checks.bind("mx_dequantize", args, kwargs)
        data, scale, name, out = mx.mx_dequantize_args(p["data"], p["scale"], p["elem_dtype"], p["block_size"],
                                                        p["output_dtype"])
        return (_raw_fp8(data), scale), {"name": name, "output_dtype": _dt.name(out)}

    def _mx_dequantize(self, data, scale, *, name, output_dtype):
        return _mod("lowbit_fp").mx_dequantize(data, scale, name, _tdtype(output_dtype))

    def _check_mx_matmul(self, args, kwargs):
        p = checks.bind("mx_matmul", args, kwargs)
        ad, as_, bd, bs, an, bn, out = mx.mx_matmul_args(p["a_data"], p["a_scale"], p["b_data"], p["b_scale"],
                                                          p["elem_dtype"], p["b_elem_dtype"], p["block_size"],
                                                          p["output_dtype"])
        return (_raw_fp8(ad), as_, _raw_fp8(bd), bs), {"a_name": an, "b_name": bn, "output_dtype": _dt.name(out)}

    def _load_mx_matmul(self, args, kwargs):
        a_data, a_scale, b_data, b_scale = args
        b = _mod("lowbit_fp").mx_operand64(b_data, b_scale, kwargs["b_name"])  # once per weight
        return (a_data, a_scale, b), {k: v for k, v in kwargs.items() if k != "b_name"}

    def _mx_matmul(self, a_data, a_scale, b, *, a_name, output_dtype):
        return _mod("lowbit_fp").mx_matmul(a_data, a_scale, b, a_name, _tdtype(output_dtype))

    # -- NVFP4 --------------------------------------------------------------------------------------
    def _check_nvfp4_quantize(self, args, kwargs):
        p = checks.bind("nvfp4_quantize", args, kwargs)
        x, kind, t = nvfp4.nvfp4_quantize_args(p["x"], p["per_tensor_scale"], p["global_scale"])
        return (x,), {"kind": kind, "t": float(t)}

    def _nvfp4_quantize(self, x, *, kind, t):
        return _mod("lowbit_fp").nvfp4_quantize(x, kind, t)

    def _check_nvfp4_dequantize(self, args, kwargs):
        p = checks.bind("nvfp4_dequantize", args, kwargs)
        data, scale, kind, t, out = nvfp4.nvfp4_dequantize_args(p["data"], p["block_scale"], p["per_tensor_scale"],
                                                                 p["global_scale"], p["output_dtype"])
        return (data, scale), {"kind": kind, "t": float(t), "output_dtype": _dt.name(out)}

    def _nvfp4_dequantize(self, data, block_scale, *, kind, t, output_dtype):
        return _mod("lowbit_fp").nvfp4_dequantize(data, block_scale, kind, t, _tdtype(output_dtype))

    def _check_nvfp4_matmul(self, args, kwargs):
        p = checks.bind("nvfp4_matmul", args, kwargs)
        ad, as_, bd, bs, alpha, out = nvfp4.nvfp4_matmul_args(p["a_data"], p["a_block_scale"], p["b_data"],
                                                               p["b_block_scale"], p["alpha"], p["output_dtype"])
        return (ad, as_, bd, bs), {"alpha": float(alpha), "output_dtype": _dt.name(out)}

    def _load_nvfp4_matmul(self, args, kwargs):
        a_data, a_block_scale, b_data, b_block_scale = args
        return (a_data, a_block_scale, _mod("lowbit_fp").nvfp4_operand64(b_data, b_block_scale)), kwargs  # once

    def _nvfp4_matmul(self, a_data, a_block_scale, b, *, alpha, output_dtype):
        return _mod("lowbit_fp").nvfp4_matmul(a_data, a_block_scale, b, alpha, _tdtype(output_dtype))

    def _check_swizzle_block_scales(self, args, kwargs):
        op = "swizzle_block_scales"
        scale = nvfp4.swizzle_block_scales_args(**checks.bind(op, args, kwargs))
        return (checks._raw(op, "scale", scale),), {"_view_as": scale.dtype}  # bits move, values don't

    def _swizzle_block_scales(self, scale):
        return _mod("lowbit_fp").swizzle_block_scales(scale)

    # -- FP8 block ----------------------------------------------------------------------------------
    def _check_fp8_block_quantize(self, args, kwargs):
        p = checks.bind("fp8_block_quantize", args, kwargs)
        w, bn, bk, eps = fp8_block.fp8_block_quantize_args(p["weight"], p["block_shape"], p["scale_fmt"], p["eps"])
        return (w,), {"bn": bn, "bk": bk, "scale_fmt": p["scale_fmt"], "eps": float(eps)}

    def _fp8_block_quantize(self, weight, *, bn, bk, scale_fmt, eps):
        return _mod("lowbit_fp").fp8_block_quantize(weight, bn, bk, scale_fmt, eps)

    def _check_per_token_group_quant_fp8(self, args, kwargs):
        p = checks.bind("per_token_group_quant_fp8", args, kwargs)
        x, g, eps = fp8_block.per_token_group_quant_fp8_args(p["x"], p["group_size"], p["scale_fmt"], p["eps"])
        return (x,), {"g": g, "scale_fmt": p["scale_fmt"], "eps": float(eps)}

    def _per_token_group_quant_fp8(self, x, *, g, scale_fmt, eps):
        return _mod("lowbit_fp").per_token_group_quant_fp8(x, g, scale_fmt, eps)

    def _check_fp8_block_dequantize(self, args, kwargs):
        p = checks.bind("fp8_block_dequantize", args, kwargs)
        wq, s, bn, bk, out = fp8_block.fp8_block_dequantize_args(p["weight_q"], p["weight_scale_inv"],
                                                                  p["block_shape"], p["output_dtype"])
        return (wq, s), {"bn": bn, "bk": bk, "output_dtype": _dt.name(out)}

    def _fp8_block_dequantize(self, weight_q, weight_scale_inv, *, bn, bk, output_dtype):
        return _mod("lowbit_fp").fp8_block_dequantize(weight_q, weight_scale_inv, bn, bk, _tdtype(output_dtype))

    def _check_fp8_block_matmul(self, args, kwargs):
        p = checks.bind("fp8_block_matmul", args, kwargs)
        aq, sa, wq, sw, bs, out = fp8_block.fp8_block_matmul_args(p["a_q"], p["a_scale"], p["weight_q"],
                                                                   p["weight_scale_inv"], p["block_size"],
                                                                   p["output_dtype"])
        return (aq, sa, wq, sw), {"block_size": bs, "output_dtype": _dt.name(out)}

    def _load_fp8_block_matmul(self, args, kwargs):
        a_q, a_scale, weight_q, weight_scale_inv = args
        w_blocks = _mod("lowbit_fp").fp8_block_weight64(weight_q, kwargs["block_size"], a_scale.shape[1])
        return (a_q, a_scale, w_blocks, weight_scale_inv), kwargs

    def _fp8_block_matmul(self, a_q, a_scale, w_blocks, weight_scale_inv, *, block_size, output_dtype):
        return _mod("lowbit_fp").fp8_block_matmul(a_q, a_scale, w_blocks, weight_scale_inv, block_size,
                                                  _tdtype(output_dtype))
