"""The QAT grid: fake quantization on the golden's grids, with a straight-through estimator.

``fake_quant(w, fmt)`` is, in the forward pass, exactly ``dequantize(quantize(w))`` of the golden for
the format — the same bits, computed in torch by the torch-cpu low-bit kernels (themselves
bit-identical to the golden; ``tests/backends/test_qat.py`` checks the composition against the
golden for every format) — so a model trained with it sees at training time the very weights the
quantized checkpoint will hold. In the backward pass the quantizer is the identity: the gradient of
``fake_quant(w)`` with respect to ``w`` is the upstream gradient, unchanged (the plain STE of
Bengio et al. 2013: ``w + (q - w).detach()``).

Why no clipping mask. Every scale here is derived from the weight's own block maximum (amax / 7.5,
a shared exponent of amax, amax / 448 ...), so no weight lies outside its block's range: the only
saturated values are the largest ones of a block, pushed past the top code by the scale rule or the
scale's own rounding (GPTQ's 7.5 -> 7; MX ``"floor"`` clipping (6, 8) to 6; an NVFP4 E4M3 block
scale rounded down). A mask there would freeze exactly the weights that define the scale; the
identity lets them move, and the scale follows them on the next step.

Formats (``fmt``), the golden pair each one composes, and its options (defaults are the golden's):

* ``"int4"``: ``int4_group_quantize`` -> ``int4_group_dequantize``; ``group_size=128``,
  ``scheme="gptq_sym"`` (or ``"absmax_sym"``, ``"asym"``), ``scale_dtype="float16"``.
* ``"int8"``: ``quantize_weight_per_channel`` (msModelSlim, symmetric per output row) ->
  ``dequantize(axis=-2)``; no options.
* ``"mxfp4"``: ``mx_quantize(elem_dtype="e2m1")`` -> ``mx_dequantize``; ``scale_mode="floor"``,
  ``block_size=32``.
* ``"mxfp8"``: the same with ``elem_dtype="e4m3"`` (or ``"e5m2"``), ``scale_mode``, ``block_size``.
* ``"nvfp4"``: ``nvfp4_quantize(per_tensor_scale=S)`` -> ``nvfp4_dequantize`` with
  ``S = nvfp4_per_tensor_scale(max |w|)`` (the torchao convention); no options.
* ``"fp8_block"``: ``fp8_block_quantize`` -> ``fp8_block_dequantize``; ``block_shape=(128, 128)``,
  ``scale_fmt=None`` (or ``"ue8m0"``).

The weight is ``[..., N, K]`` (``nn.Linear`` layout, groups and blocks along K), float32, bfloat16
or float16; the result has the weight's dtype (the golden's dequantize with ``output_dtype`` = that
dtype). Bad arguments raise the golden's errors (its ``<op>_args`` functions run on the weight),
or a ValueError / TypeError naming the ``fake_quant`` argument.
"""

from __future__ import annotations

import numpy as np
import torch

from w8a8 import _check
from w8a8.lowbit.fp8_block import fp8_block_quantize_args
from w8a8.lowbit.int4_group import int4_group_quantize_args
from w8a8.lowbit.mx import mx_quantize_args
from w8a8.lowbit.nvfp4 import nvfp4_quantize_args

from ..torch_common import from_torch
from . import lowbit_fp, lowbit_int4
from .arith import const, to_float

_OP = "fake_quant"
FORMATS: dict[str, dict] = {
    "int4": {"group_size": 128, "scheme": "gptq_sym", "scale_dtype": "float16"},
    "int8": {},
    "mxfp4": {"scale_mode": "floor", "block_size": 32},
    "mxfp8": {"elem_dtype": "e4m3", "scale_mode": "floor", "block_size": 32},
    "nvfp4": {},
    "fp8_block": {"block_shape": (128, 128), "scale_fmt": None},
}
"""Each format's options and their defaults."""

_WEIGHT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_INT8_EPS = float(np.finfo(np.float32).eps)


def fake_quant(weight: torch.Tensor, fmt: str = "int4", **options) -> torch.Tensor:
    """``dequantize(quantize(weight))`` of the golden in the forward pass, the identity in the backward.

    Parameters
    ----------
    weight : float32 / bfloat16 / float16 tensor ``[..., N, K]`` (a parameter; may require grad).
    fmt : one of :data:`FORMATS` (module docstring).
    options : the format's options (module docstring); others are refused.

    Returns a tensor of the weight's shape and dtype whose values are the golden's grid point of
    each weight; ``d out / d weight`` is the identity (straight-through).
    """
    quantizer = quantizer_for(fmt, **options)
    _weight(weight)
    return _StraightThrough.apply(weight, quantizer)


def quantizer_for(fmt: str = "int4", **options):
    """The forward function of :func:`fake_quant` (``w -> dequantize(quantize(w))``, no autograd)."""
    _check.choice(_OP, "fmt", fmt, tuple(FORMATS))
    unknown = sorted(set(options) - set(FORMATS[fmt]))
    if unknown:
        _check.fail(_OP, unknown[0], f"an option of fmt={fmt!r} ({', '.join(FORMATS[fmt]) or 'none'})",
                    repr(options[unknown[0]]), TypeError)
    opts = {**FORMATS[fmt], **options}
    return lambda w: _FORWARD[fmt](_weight(w), **opts)


class _StraightThrough(torch.autograd.Function):
    """Forward: the quantizer's value; backward: the upstream gradient, unchanged (no mask)."""

    @staticmethod
    def forward(ctx, weight, quantizer):
        return quantizer(weight.detach())

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class FakeQuantLinear(torch.nn.Linear):
    """``nn.Linear`` whose forward uses ``fake_quant(self.weight, fmt, **options)`` (QAT); ``quant=False``
    in :meth:`forward` gives the full-precision layer (the same parameters)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, fmt: str = "int4", **options):
        super().__init__(in_features, out_features, bias=bias)
        quantizer_for(fmt, **options)  # refuse bad options at construction
        self.fmt, self.options = fmt, options

    def forward(self, x: torch.Tensor, quant: bool = True) -> torch.Tensor:
        w = fake_quant(self.weight, self.fmt, **self.options) if quant else self.weight
        return torch.nn.functional.linear(x, w, self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, fmt={self.fmt!r}, options={self.options!r}"


# -- the forward of each format (the torch-cpu kernels; checks by the golden's check functions) --------

def _weight(w) -> torch.Tensor:
    if not isinstance(w, torch.Tensor):
        _check.fail(_OP, "weight", "a torch.Tensor", _check.describe(w), TypeError)
    if w.dtype not in _WEIGHT_DTYPES:
        _check.fail(_OP, "weight", "a float32, bfloat16 or float16 tensor", _check.describe(w), TypeError)
    if w.device.type != "cpu":
        _check.fail(_OP, "weight", "a CPU tensor (the torch-cpu kernels)", f"a tensor on {w.device}")
    return w.detach()


def _np(w: torch.Tensor) -> np.ndarray:
    """The weight's NumPy view (for the golden's checks: dtype, shape, finiteness)."""
    return from_torch(w)


def _int4(w, *, group_size, scheme, scale_dtype):
    a = int4_group_quantize_args(_np(w), group_size, scheme=scheme, scale_dtype=scale_dtype)
    g, groups, sdt = a.group_size, a.groups, a.scale_dtype
    m = lowbit_int4
    q, s, z = m.int4_group_quantize(w, g, groups, scheme, _torch_dtype(sdt))
    return m.int4_group_dequantize(q, s, z, w.dtype)


def _int8(w):
    """msModelSlim per-channel int8 (:func:`w8a8.quantize_weight_per_channel`), then
    ``dequantize(q, scale, axis=-2)``: ``fp32(q) * scale``, in the golden's order::

        lo = min(min_k w, 0);  hi = max(max_k w, 0);  scale = max(max(|lo|, hi) / 127, eps_fp32)
        q  = clamp(rint(w / scale), -128, 127)
    """
    op = "quantize_weight_per_channel"
    a = _check.array(op, "w", _np(w), min_ndim=2, max_ndim=3)
    _check.finite(op, "w", a)
    if a.shape[-1] == 0:  # the golden's min / max reduction has no identity
        _check.fail(_OP, "weight", "of a non-empty last dimension for fmt='int8'", _check.describe(a))
    wf = w.to(torch.float32)
    lo = wf.amin(-1, keepdim=True).clamp_(max=0.0)
    hi = wf.amax(-1, keepdim=True).clamp_(min=0.0)
    scale = torch.div(torch.maximum(lo.abs(), hi), const(127.0)).clamp_(min=_INT8_EPS)
    q = torch.div(wf, scale).round_().clamp_(-128, 127).to(torch.int8)  # int8 codes: -0.0 becomes 0
    return to_float(q.to(torch.float32).mul_(scale), w.dtype)


def _mx(w, *, scale_mode, block_size, elem_dtype="e2m1"):
    a = mx_quantize_args(_np(w), elem_dtype=elem_dtype, block_size=block_size, scale_mode=scale_mode)
    name, bs = a.elem_name, a.block_size
    data, scale = lowbit_fp.mx_quantize(w, name, bs, scale_mode)
    if not isinstance(data, torch.Tensor):  # e5m2 elements come back as their ml_dtypes array
        data = torch.from_numpy(data.view(np.uint8))
    return lowbit_fp.mx_dequantize(data, scale, name, w.dtype)


def _nvfp4(w):
    arr = _np(w)
    amax = w.to(torch.float32).abs().amax() if w.numel() else torch.zeros((), dtype=torch.float32)
    s = torch.div(amax.reshape(1), const(448.0 * 6.0))  # nvfp4_per_tensor_scale: amax / 2688, 1 where 0
    t = float(s) if float(s) != 0 else 1.0
    a = nvfp4_quantize_args(arr, per_tensor_scale=np.float32(t))
    kind, t32 = a.convention, a.tensor_scale
    data, block_scale = lowbit_fp.nvfp4_quantize(w, kind, float(t32))
    return lowbit_fp.nvfp4_dequantize(data, block_scale, kind, float(t32), w.dtype)


def _fp8_block(w, *, block_shape, scale_fmt):
    a = fp8_block_quantize_args(_np(w), block_shape=block_shape, scale_fmt=scale_fmt)
    bn, bk, eps = a.block_rows, a.block_cols, a.eps
    q, s = lowbit_fp.fp8_block_quantize(w, bn, bk, scale_fmt, float(eps))
    return lowbit_fp.fp8_block_dequantize(q, s, bn, bk, w.dtype)


_FORWARD = {"int4": _int4, "int8": _int8, "mxfp4": _mx, "mxfp8": _mx, "nvfp4": _nvfp4, "fp8_block": _fp8_block}


def _torch_dtype(dtype) -> torch.dtype:
    from ..torch_common import torch_dtype

    return torch_dtype(dtype)


__all__ = ["FORMATS", "FakeQuantLinear", "fake_quant", "quantizer_for"]
