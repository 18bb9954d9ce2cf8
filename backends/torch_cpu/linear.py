"""The two W8A8 Linear serving paths in torch: load once (:func:`load_dynamic`, :func:`load_static`),
then run per call (:func:`w8a8_dynamic_linear`, :func:`w8a8_static_linear`).

Contract: :func:`w8a8.w8a8_dynamic_linear` / :func:`w8a8.w8a8_static_linear` under
:data:`w8a8.ASCEND`. The load step is what the serving stack does once per weight (SGLang
``process_weights_after_loading``). The parameters arrive already converted and checked by the
golden's ``dynamic_linear_args`` / ``static_linear_args`` (:mod:`backends.torch_cpu.checks`: the scale
and bias in the model's dtype, the static reciprocal and offset, each refused with the golden's
message where it became Inf); the load here lays out the ``[K, N]`` weight for the int8 GEMM (and its
qlinear prepack on AMX machines).
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import torch

from .arith import I32_MAX, absmax
from .gemm import Int8Weight
from .qmatmul import quant_matmul
from .quant import dynamic_quant, quantize


@dataclass
class DynamicLinear:
    """A ``W8A8_DYNAMIC`` layer after load: weight ``[K, N]``, scale / bias as loaded, output dtype."""

    weight: Int8Weight
    scale: torch.Tensor  # the quant_matmul scale: bf16 for a bf16 model (rounded!), fp32 for fp16
    bias: torch.Tensor | None  # in the model dtype
    dtype: torch.dtype


def load_dynamic(x_dtype: torch.dtype, weight: torch.Tensor, weight_scale: torch.Tensor, bias, path: str) -> DynamicLinear:
    """SGLang's load: ``W = weight.T``; ``weight_scale`` (bf16 for a bf16 model, fp32 for fp16) and
    ``bias`` (model dtype) as loaded and checked by :func:`w8a8.linear.dynamic_linear_args`."""
    return DynamicLinear(Int8Weight.load(weight.mT, path), weight_scale, bias, x_dtype)


_BLOCK_BYTES = 4 << 20  # fp32 temporaries per row block: a few MB, cache-resident
_MIN_BLOCK_ROWS = 64


def _blocks(x2: torch.Tensor, layer, bias_absmax: int = 0):
    """Row blocks ``(r0, r1)`` of the flattened activation.

    Every stage of a Linear is row-wise (per-token quantization, GEMM rows, per-token epilogue), so
    running it block by block is bit-identical, keeps the fp32 temporaries of a block in cache and
    bounds the memory of a long prefill. One block where an OverflowError is possible, so that its
    message names the output index the golden names.
    """
    m = x2.shape[0]
    k, n = layer.weight.shape
    step = max(_MIN_BLOCK_ROWS, _BLOCK_BYTES // (4 * max(k, n, 1)))
    acc_max = k * 128 * layer.weight.absmax  # the activation is quantized to int8 first
    if m <= step or acc_max + bias_absmax > I32_MAX:
        return [(0, m)]
    return [(r, min(m, r + step)) for r in range(0, m, step)]


def _blockwise(x: torch.Tensor, layer, bias_absmax: int, forward) -> torch.Tensor:
    """``forward(rows of x)`` over the row blocks of ``x.reshape(-1, K)``, into one ``[..., N]`` output."""
    k, n = layer.weight.shape
    x2 = x.reshape(-1, k)
    blocks = _blocks(x2, layer, bias_absmax)
    if len(blocks) == 1:
        y = forward(x2)
    else:
        y = torch.empty(x2.shape[0], n, dtype=layer.dtype)
        for r0, r1 in blocks:
            y[r0:r1] = forward(x2[r0:r1])
    return y.reshape(*x.shape[:-1], n)


def w8a8_dynamic_linear(x: torch.Tensor, layer: DynamicLinear) -> torch.Tensor:
    """Per-token dynamic int8 ``x``, then ``quant_matmul(x_q, W, s_w, pertoken_scale=s_tok, bias=b)``
    (row block by row block, see :func:`_blocks`). The scale formula is the one of the kernel the tiling
    picks for the whole activation ``[prod(x.shape[:-1]), K]`` (not for a block)."""
    from .kernel_variants import dynamic_quant as variant

    scale_out = variant((math.prod(x.shape[:-1]), x.shape[-1]), x.dtype).scale_out

    def forward(rows):
        x_q, x_scale = dynamic_quant(rows, scale_out=scale_out)
        return quant_matmul(x_q, layer.weight, layer.scale, pertoken_scale=x_scale, bias=layer.bias,
                            output_dtype=layer.dtype)

    return _blockwise(x, layer, 0, forward)


@dataclass
class StaticLinear:
    """A static ``W8A8`` layer after load (see :func:`load_static`)."""

    weight: Int8Weight
    recip: torch.Tensor  # [K], model dtype: 1 / input_scale (w8a8.linear.static_activation_params)
    offset: torch.Tensor  # [K], model dtype
    deq_scale: torch.Tensor  # [N] float32 or int64
    bias: torch.Tensor | None  # [N] int32 quant_bias, or a float bias in the model dtype
    dtype: torch.dtype
    bias_absmax: int = 0  # max |quant_bias|


def load_static(x_dtype: torch.dtype, weight: torch.Tensor, recip: torch.Tensor, offset: torch.Tensor,
                deq_scale: torch.Tensor, bias, path: str) -> StaticLinear:
    """SGLang's load: ``W = weight.T``; the reciprocal and offset ``[K]`` in the model dtype, ``deq_scale`` and
    the matmul bias (int32 ``quant_bias`` or a float bias in the model dtype), as loaded and checked by
    :func:`w8a8.linear.static_linear_args`."""
    qb_max = absmax(bias) if bias is not None and bias.dtype == torch.int32 else 0
    return StaticLinear(Int8Weight.load(weight.mT, path), recip, offset, deq_scale, bias, x_dtype, qb_max)


def w8a8_static_linear(x: torch.Tensor, layer: StaticLinear) -> torch.Tensor:
    """``x_q = quantize(x, r, o, int8, div_mode=False)``, then ``quant_matmul(x_q, W, deq, bias=...)``
    (row block by row block, see :func:`_blocks`)."""
    def forward(rows):
        x_q = quantize(rows, layer.recip, layer.offset, dtype="int8", div_mode=False)
        return quant_matmul(x_q, layer.weight, layer.deq_scale, bias=layer.bias, output_dtype=layer.dtype)

    int_bias = layer.bias is not None and layer.bias.dtype == torch.int32
    return _blockwise(x, layer, layer.bias_absmax if int_bias else 0, forward)
