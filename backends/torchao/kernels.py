"""The torchao 0.18 calls the ``torchao`` backend makes (imports torch and torchao: loaded on first use).

Each function takes and returns torch tensors built by :mod:`backends.torch_common` (zero-copy views of the
NumPy arrays; bf16 through an int16 view) and calls torchao's own code — nothing here re-implements its
arithmetic:

* :func:`int8_rows` — ``Int8Tensor.from_hp(x, PerRow())`` (int8), or torchao's ``choose_qparams_affine`` /
  ``quantize_affine`` with the same arguments and the int4 range ``[-8, 7]``;
* :func:`int8_linear` — ``F.linear`` on an ``Int8Tensor`` weight built from the checkpoint codes and the
  golden's loaded scale, with per-row dynamic int8 activations (``Int8DynamicActivationInt8WeightConfig``'s
  forward, version 2);
* :func:`mx_quantize` / :func:`mx_dequantize` / :func:`mx_matmul` — ``to_mx``, ``to_dtype`` and the
  emulated ``MXTensor`` mm;
* :func:`nvfp4_quantize` / :func:`nvfp4_dequantize` — ``nvfp4_quantize`` and ``NVFP4Tensor.dequantize``.
"""

from __future__ import annotations


from .quiet import import_torchao  # torchao's notices about its CUDA kernels on a CPU-only torch: captured

with import_torchao():
    import torch
    import torchao
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import MXTensor, to_dtype, to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize as _nvfp4_quantize
    from torchao.quantization import Int8Tensor
    from torchao.quantization.granularity import PerRow
    from torchao.quantization.quant_primitives import MappingType, choose_qparams_affine, quantize_affine
    from torchao.quantization.quantize_.workflows.int8.int8_tensor import QuantizeTensorToInt8Kwargs
    from torchao.quantization.utils import get_block_size

VERSION = torchao.__version__
ELEMS = {"e2m1": torch.float4_e2m1fn_x2, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
MODES = {"floor": ScaleCalculationMode.FLOOR, "ceil": ScaleCalculationMode.CEIL, "even": ScaleCalculationMode.EVEN,
         "rceil": ScaleCalculationMode.RCEIL}
_EPS32 = torch.finfo(torch.float32).eps


def int8_rows(x2d: torch.Tensor, int4: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric codes and fp32 scales ``[S, 1]`` of ``x2d [S, H]``."""
    if not int4:
        t = Int8Tensor.from_hp(x2d, PerRow())
        return t.qdata, t.scale
    block = list(get_block_size(x2d.shape, PerRow()))
    scale, zero = choose_qparams_affine(input=x2d, mapping_type=MappingType.SYMMETRIC, block_size=block,
                                        target_dtype=torch.int8, quant_min=-8, quant_max=7, scale_dtype=torch.float32,
                                        zero_point_dtype=torch.int8, keepdim=True, eps=_EPS32)
    q = quantize_affine(x2d, block_size=block, scale=scale, zero_point=zero, output_dtype=torch.int8, quant_min=-8,
                        quant_max=7)
    return q, scale


def int8_weight(weight: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> Int8Tensor:
    """An ``Int8Tensor`` from checkpoint codes ``[N, K]`` and fp32 scales ``[N, 1]`` (what ``quantize_`` makes
    of a Linear, with the golden's loaded scale instead of its own), per-row dynamic activations."""
    return Int8Tensor(weight, scale, [1, weight.shape[1]], dtype,
                      act_quant_kwargs=QuantizeTensorToInt8Kwargs(granularity=PerRow()))


def int8_linear(x2d: torch.Tensor, weight: Int8Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    with torch.no_grad():
        return torch.nn.functional.linear(x2d, weight, bias)


def mx_quantize(x: torch.Tensor, elem: str, block: int, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``to_mx``: (scale bytes uint8, data: packed fp4 bytes uint8 or fp8) of a contiguous bf16 / fp32 x."""
    scale, data = to_mx(x, ELEMS[elem], block, MODES[mode])
    return scale.view(torch.uint8), data.view(torch.uint8) if elem == "e2m1" else data


def mx_dequantize(data: torch.Tensor, scale: torch.Tensor, elem: str, block: int, out: torch.dtype) -> torch.Tensor:
    return to_dtype(data, scale.view(torch.float8_e8m0fnu), ELEMS[elem], block, out)


def _mx_tensor(data: torch.Tensor, scale: torch.Tensor, elem: str, block: int, dtype: torch.dtype) -> MXTensor:
    """An MXTensor over existing data (MXFP4: the packed uint8 bytes) and E8M0 scale bytes."""
    from torchao.quantization.quantize_.common import KernelPreference

    return MXTensor(data, scale.view(torch.float8_e8m0fnu), ELEMS[elem], block, dtype, KernelPreference.EMULATED,
                    None, False)


def mx_matmul(a_data, a_scale, b_data, b_scale, elem: str, block: int, dtype: torch.dtype) -> torch.Tensor:
    """The emulated MX mm ``A @ B^T``: both operands dequantized to ``dtype``, an aten mm in ``dtype``."""
    a = _mx_tensor(a_data, a_scale, elem, block, dtype)
    b = _mx_tensor(b_data, b_scale, elem, block, dtype)
    with torch.no_grad():
        return torch.mm(a, b.t())


def nvfp4_quantize(x2d: torch.Tensor, per_tensor_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """torchao ``nvfp4_quantize`` with a per-tensor scale S: (block scales e4m3 ``[M, K/16]``, packed uint8)."""
    s = torch.tensor(per_tensor_scale, dtype=torch.float32)
    return _nvfp4_quantize(x2d, 16, s)


def nvfp4_dequantize(data: torch.Tensor, scale: torch.Tensor, per_tensor_scale: float, out: torch.dtype
                     ) -> torch.Tensor:
    t = NVFP4Tensor(data, scale, 16, out, per_tensor_scale=torch.tensor(per_tensor_scale, dtype=torch.float32))
    return t.dequantize(out)
