"""``torchao``: torchao 0.18's CPU paths judged against the golden (extra ``torchao``).

Every op calls torchao's own code (:mod:`.kernels`): the int8 quant primitives / ``Int8Tensor`` as
``dynamic_quant``, the ``Int8DynamicActivationInt8WeightConfig`` forward as ``w8a8_dynamic_linear``, the MX
prototype (``to_mx``, ``to_dtype``, the emulated ``MXTensor`` mm) as ``mx_quantize`` / ``mx_dequantize`` /
``mx_matmul``, and ``nvfp4_quantize`` / ``NVFP4Tensor.dequantize``. What the backend does around them is
what a user does: zero-copy tensors of the NumPy arrays, 2-D views, the golden's loaded weight scale and
bias of ``w8a8_dynamic_linear`` (the bf16 rounding of the scale is part of that op's contract), packing
int4 codes into int32 words.

The record (:data:`NUMERICS`, docs/backends.md, verified against torchao 0.18.0:
``tests/backends/test_torchao.py``): the int8 scale is ``amax / 127.5`` computed in x's dtype and floored at
``2^-23``, the codes ``rint(x * fp32(1 / s))`` in ``[-128, 127]``, the linear's epilogue
``out(fp32(out(acc * s_x)) * s_w + b)``, NVFP4's codes ``x * ((1 / S) / s_b)``; MX is the golden's own
record (``scale_mode`` is an argument). torchao's genuine bugs are **not** declared — they fail, with their
cause: MX byte-0 blocks divided by 2^-126 (FLOOR / CEIL / EVEN) or multiplied by 1 (RCEIL), RCEIL's fp32
``log2`` one byte too small next to powers of two, a finite scale byte for a block holding Inf, the fp16
linear's intermediate overflowing to Inf, the emulated MXFP4 mm with N = 1 (an AssertionError).
"""

from __future__ import annotations

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.numerics import ASCEND, Numerics

from ..base import Backend, implements, loads
from ..capabilities import Accepts, Capabilities

__all__ = ["TorchaoBackend", "NUMERICS"]

VERIFIED_VERSION = "0.18.0"

NUMERICS = ASCEND.replace(name="torchao-0.18", variants="fixed", scale_divisor="half_range", scale_out="amax_div",
                          scale_dtype="input", scale_floor="max_f32_eps", quant_codes="mul_rcp", code_range="full",
                          epilogue_order="token_then_scale", epilogue_intermediate="output",
                          nvfp4_codes="mul_rcp_chain")
"""The record of ``torchao`` (module docstring)."""


def _mx_block(a) -> int:
    k = a.b_data.shape[-1] * (2 if a.b_elem_name == "e2m1" else 1)
    return k // max(a.b_scale.shape[-1], 1)


CAPABILITIES = Capabilities({
    # Int8Tensor.from_hp: no smooth scales (act_pre_scale multiplies in x's dtype: another arithmetic)
    "dynamic_quant": Accepts(absent=("smooth_scales", "group_index"), at_least={"rows": 1, "h": 1}),
    "w8a8_dynamic_linear": Accepts(at_least={"quant.rows": 1}),
    # to_mx: bf16 / fp32 input only
    "mx_quantize": Accepts(dtypes={"x": ("bfloat16", "float32")}, at_least={"x.ndim": 1}),
    # to_dtype: the product in the target dtype, exact for fp32 / bf16 (an fp16 target rounds the scale)
    "mx_dequantize": Accepts(values={"out": (_dt.float32, _dt.bfloat16)}),
    "mx_matmul": Accepts(values={"out": (_dt.float32, _dt.bfloat16)},
                         require=(("A and B of one element type (MXTensor mm)", lambda a: a.a_elem_name == a.b_elem_name),
                                  ("block 32 (MXTensor)", lambda a: _mx_block(a) == 32))),
    "nvfp4_quantize": Accepts(dtypes={"x": ("bfloat16", "float32")}, values={"convention": ("per_tensor_scale",)}),
    "nvfp4_dequantize": Accepts(values={"convention": ("per_tensor_scale",)}),
})


class TorchaoBackend(Backend):
    """torchao 0.18 on the CPU (module docstring)."""

    name = "torchao"
    description = ("torchao 0.18 CPU paths: Int8Tensor quant primitives and int8 dynamic linear, MX to_mx / to_dtype / "
                   "emulated mm, NVFP4 quantize / dequantize")
    device = "cpu"
    compute = "int8"
    numerics: Numerics = NUMERICS
    capabilities = CAPABILITIES
    in_default_runs = False   # judged when named (its genuine bugs fail by design): `--backend torchao`
    float_sum_order = "library"  # torch's fp32 matmuls (mx / nvfp4 emulation) sum in their own order

    def available(self) -> tuple[bool, str]:
        try:
            from . import kernels  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - any import failure is a reason, never a crash
            return False, (f"import torch / torchao failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
                           f"(pip install 'w8a8[torchao]', torchao=={VERIFIED_VERSION})")
        return True, ""

    def info(self) -> dict:
        info = super().info()
        if info["available"]:
            from . import kernels
            info["library"] = f"torchao {kernels.VERSION} (numerics verified with {VERIFIED_VERSION})"
        return info

    @staticmethod
    def _k():
        from . import kernels
        return kernels

    @staticmethod
    def _t(array: np.ndarray):
        from ..torch_common import to_torch
        return to_torch(np.ascontiguousarray(array))

    @staticmethod
    def _n(tensor) -> np.ndarray:
        from ..torch_common import from_torch
        return from_torch(tensor.contiguous())

    # -- int8 -------------------------------------------------------------------------------------
    @implements("dynamic_quant")
    def _dynamic_quant(self, a):
        from w8a8.int4 import pack_int4

        int4 = a.dst_name == "int4"
        q, s = self._k().int8_rows(self._t(a.x.reshape(a.rows, a.h)), int4)
        q = self._n(q).reshape(a.x.shape)
        return (pack_int4(q) if int4 else q), self._n(s).astype(np.float32).reshape(a.x.shape[:-1])

    @loads("w8a8_dynamic_linear")
    def _load_dynamic_linear(self, a):
        """The Int8Tensor weight from the checkpoint codes and the golden's **loaded** weight scale (bf16 for a
        bf16 model: part of the op's contract) as fp32 ``[N, 1]``; the loaded bias in the model dtype."""
        from ..torch_common import torch_dtype

        p = a.params
        w = self._k().int8_weight(self._t(p.weight), self._t(p.weight_scale.astype(np.float32).reshape(p.n, 1)),
                                  torch_dtype(a.x.dtype))
        bias = None if p.bias is None else self._t(p.bias)
        return self._t(a.x.reshape(-1, p.k)), w, bias, a

    @implements("w8a8_dynamic_linear")
    def _dynamic_linear(self, loaded):
        x, w, bias, a = loaded
        y = self._n(self._k().int8_linear(x, w, bias))
        return y.reshape(a.x.shape[:-1] + (a.params.n,))

    # -- MX ---------------------------------------------------------------------------------------
    @implements("mx_quantize")
    def _mx_quantize(self, a):
        from ..torch_common import numpy_dtype

        scale, data = self._k().mx_quantize(self._t(a.x), a.elem_name, a.block_size, a.scale_mode)
        data_np = self._n(data)
        if a.elem_name != "e2m1":
            data_np = data_np.view(numpy_dtype(data.dtype)) if data_np.dtype == np.uint8 else data_np
        return data_np, self._n(scale)

    @implements("mx_dequantize")
    def _mx_dequantize(self, a):
        from ..torch_common import torch_dtype

        data = a.data.view(np.uint8) if a.elem_name == "e2m1" else a.data
        k = a.data.shape[-1] * (2 if a.elem_name == "e2m1" else 1)
        block = k // max(a.scale.shape[-1], 1)
        y = self._k().mx_dequantize(self._t(data), self._t(a.scale), a.elem_name, block, torch_dtype(a.out))
        return self._n(y)

    @implements("mx_matmul")
    def _mx_matmul(self, a):
        from ..torch_common import torch_dtype

        y = self._k().mx_matmul(self._t(a.a_data), self._t(a.a_scale), self._t(a.b_data), self._t(a.b_scale),
                                a.a_elem_name, _mx_block(a), torch_dtype(a.out))
        return self._n(y)

    # -- NVFP4 ------------------------------------------------------------------------------------
    @implements("nvfp4_quantize")
    def _nvfp4_quantize(self, a):
        k = a.x.shape[-1]
        scale, data = self._k().nvfp4_quantize(self._t(a.x.reshape(-1, k)), float(a.tensor_scale))
        lead = a.x.shape[:-1]
        return self._n(data).reshape(lead + (k // 2,)), self._n(scale).reshape(lead + (k // 16,))

    @implements("nvfp4_dequantize")
    def _nvfp4_dequantize(self, a):
        from ..torch_common import torch_dtype

        half = a.data.shape[-1]
        data = self._t(a.data.reshape(-1, half))
        scale = self._t(a.block_scale.reshape(-1, a.block_scale.shape[-1]))
        y = self._k().nvfp4_dequantize(data, scale, float(a.tensor_scale), torch_dtype(a.out))
        return self._n(y).reshape(a.data.shape[:-1] + (2 * half,))
