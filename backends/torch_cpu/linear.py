"""The two W8A8 Linear serving paths in torch: load once (:func:`load_dynamic`, :func:`load_static`),
then run per call (:func:`w8a8_dynamic_linear`, :func:`w8a8_static_linear`).

Contract: :func:`w8a8.w8a8_dynamic_linear` / :func:`w8a8.w8a8_static_linear` under
:data:`w8a8.ASCEND`. The load step is what the serving stack does once per weight (SGLang
``process_weights_after_loading``): the ``[K, N]`` weight for the int8 GEMM (and its qlinear
prepack on AMX machines), the scale and bias in the model's dtype, the static reciprocal. The
golden's checks on those load-time values (``quant_matmul`` / ``quantize`` refusing a scale or
bias that became Inf when rounded to the model dtype) run here, with the golden's messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from w8a8 import _check

from .arith import I32_MAX, absmax, const
from .gemm import Int8Weight
from .qmatmul import quant_matmul
from .quant import dynamic_quant, quantize


def _finite(op: str, arg: str, t: torch.Tensor, repeat: int | None = None) -> None:
    """The golden's ``_check.finite`` on a load-time tensor (``repeat``: as the golden's [K] vector)."""
    if t.numel() and not bool(torch.isfinite(t).all()):
        from backends.torch_common import from_torch

        value = from_torch(t)
        if repeat is not None:
            value = value.repeat(repeat)
        _check.finite(op, arg, value)


@dataclass
class DynamicLinear:
    """A ``W8A8_DYNAMIC`` layer after load: weight ``[K, N]``, fp32 scale / bias values, output dtype."""

    weight: Int8Weight
    scale: torch.Tensor  # the quant_matmul scale: bf16 for a bf16 model (rounded!), fp32 for fp16
    bias: torch.Tensor | None  # in the model dtype
    dtype: torch.dtype


def load_dynamic(x_dtype: torch.dtype, weight: torch.Tensor, weight_scale: torch.Tensor, bias, path: str) -> DynamicLinear:
    """SGLang's load: ``W = weight.T``; ``weight_scale`` -> bf16 (bf16 model) / fp32 (fp16 model);
    ``bias`` -> model dtype. Raises like the golden's ``quant_matmul`` when those became Inf."""
    n = weight.shape[0]
    scale = weight_scale.reshape(n).to(torch.bfloat16 if x_dtype == torch.bfloat16 else torch.float32)
    b = None if bias is None else bias.reshape(n).to(x_dtype)
    _finite("quant_matmul", "scale", scale)
    if b is not None:
        _finite("quant_matmul", "bias", b)
    return DynamicLinear(Int8Weight.load(weight.mT, path), scale, b, x_dtype)


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
    (row block by row block, see :func:`_blocks`)."""
    def forward(rows):
        x_q, x_scale = dynamic_quant(rows)
        return quant_matmul(x_q, layer.weight, layer.scale, pertoken_scale=x_scale, bias=layer.bias,
                            output_dtype=layer.dtype)

    return _blockwise(x, layer, 0, forward)


@dataclass
class StaticLinear:
    """A static ``W8A8`` layer after load (see :func:`load_static`)."""

    weight: Int8Weight
    recip: torch.Tensor  # [1], model dtype: 1 / input_scale
    offset: torch.Tensor  # [1], model dtype
    deq_scale: torch.Tensor  # [N] float32 or int64
    bias: torch.Tensor | None  # [N] int32 quant_bias, or a float bias in the model dtype
    dtype: torch.dtype
    bias_absmax: int = 0  # max |quant_bias|


def load_static(x_dtype: torch.dtype, weight: torch.Tensor, input_scale: torch.Tensor, input_offset: torch.Tensor,
                deq_scale: torch.Tensor, quant_bias, bias, path: str) -> StaticLinear:
    """SGLang's load: ``r = 1 / input_scale`` and ``o = input_offset`` in the model dtype (the
    division in fp32, one rounding), ``W = weight.T``, ``deq_scale`` / bias as given (a float bias
    in the model dtype). Raises like the golden's ``quantize`` / ``quant_matmul`` on Inf values."""
    n, k = weight.shape
    s_param = input_scale.reshape(1).to(torch.float32).to(x_dtype)
    recip = torch.div(const(1.0), s_param.to(torch.float32)).to(x_dtype)
    offset = input_offset.reshape(1).to(torch.float32).to(x_dtype)
    _finite("quantize", "scales", recip, repeat=k)
    _finite("quantize", "zero_points", offset, repeat=k)
    b = quant_bias.reshape(n) if quant_bias is not None else (None if bias is None else bias.reshape(n).to(x_dtype))
    if b is not None and b.dtype != torch.int32:
        _finite("quant_matmul", "bias", b)
    qb_max = absmax(b) if b is not None and b.dtype == torch.int32 else 0
    return StaticLinear(Int8Weight.load(weight.mT, path), recip, offset, deq_scale.reshape(n), b, x_dtype, qb_max)


def w8a8_static_linear(x: torch.Tensor, layer: StaticLinear) -> torch.Tensor:
    """``x_q = quantize(x, r, o, int8, div_mode=False)``, then ``quant_matmul(x_q, W, deq, bias=...)``
    (row block by row block, see :func:`_blocks`)."""
    def forward(rows):
        x_q = quantize(rows, layer.recip, layer.offset, dtype="int8", div_mode=False)
        return quant_matmul(x_q, layer.weight, layer.deq_scale, bias=layer.bias, output_dtype=layer.dtype)

    int_bias = layer.bias is not None and layer.bias.dtype == torch.int32
    return _blockwise(x, layer, layer.bias_absmax if int_bias else 0, forward)
