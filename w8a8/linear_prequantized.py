"""The W8A8_DYNAMIC Linear on an activation that arrives already quantized (serving row D2).

SGLang's ``NPUW8A8Int8DynamicLinearMethod.apply`` (sgl-project/sglang
``python/sglang/srt/hardware_backend/npu/quantization/linear_method_npu.py@03108f8a``) takes either a float x
(then ``npu_dynamic_quant(x)``, as :func:`w8a8.w8a8_dynamic_linear`) or a tuple ``(quant_out, dynamic_scale)``
that a fused prolog kernel produced (an RMSNorm + quant, an MLA prolog). For the tuple it skips the
quantization and hard-codes the output dtype::

    original_dtype = torch.bfloat16
    quant_out, dynamic_scale = x
    y = npu_quant_matmul(quant_out, weight, weight_scale, pertoken_scale=dynamic_scale, bias=bias,
                         output_dtype=original_dtype)

The weight is loaded as for a bf16 model (``weight.T``; the checkpoint ``weight_scale`` registered in bf16).
vllm-ascend's W8A8_DYNAMIC Linear quantizes its own input (row D2 ``float_only``), so that engine is refused here.

SGLang's static W8A8 path also takes an int8 x (it skips ``npu_quantize``), but then passes
``output_dtype=x.dtype``, i.e. int8, to ``npu_quant_matmul``. That form is not built here (see
docs/serving-compositions.md).
"""

from __future__ import annotations

import numpy as np

from . import _check
from . import dtypes as _dt
from . import serving as _serving
from .linear import dynamic_linear_params
from .numerics import ASCEND, Numerics
from .quant_matmul import quant_matmul_stages

__all__ = ["w8a8_dynamic_linear_prequantized", "dynamic_linear_prequantized_stages"]

_OP = "w8a8_dynamic_linear_prequantized"


def _args(x_q, x_scale, weight, weight_scale, bias, numerics, serving):
    sv = _serving.get(serving, _OP)
    if sv.dense_prequantized.value != "tuple_or_int8":
        _check.fail(_OP, "serving", "an engine whose dense Linear takes a pre-quantized (x_q, scale) input (sglang;"
                    " vllm-ascend quantizes its own input: w8a8_dynamic_linear)", repr(sv.name))
    x_q = _check.array(_OP, "x_q", x_q, dtypes=(_dt.int8,), min_ndim=1)
    x_scale = _check.array(_OP, "x_scale", x_scale, dtypes=(_dt.float32,))
    if x_scale.shape != x_q.shape[:-1]:
        _check.fail(_OP, "x_scale", f"of shape x_q.shape[:-1] = {list(x_q.shape[:-1])} (one scale per token)",
                    _check.describe(x_scale))
    _check.finite_under(_OP, numerics, (("x_scale", x_scale), ("weight_scale", weight_scale), ("bias", bias)))
    k = x_q.shape[-1]
    params = dynamic_linear_params(_dt.bfloat16, k, weight, weight_scale, bias, numerics=numerics, op=_OP)
    return x_q, x_scale, params


def dynamic_linear_prequantized_stages(x_q: np.ndarray, x_scale: np.ndarray, weight: np.ndarray,
                                       weight_scale: np.ndarray, *, bias: np.ndarray | None = None,
                                       numerics: Numerics = ASCEND, serving=None) -> dict:
    """:func:`w8a8_dynamic_linear_prequantized` with its intermediates: ``weight_kn``, ``weight_scale`` (bf16,
    as loaded), ``bias`` (as loaded), ``acc`` (int32) and ``y``."""
    x_q, x_scale, p = _args(x_q, x_scale, weight, weight_scale, bias, numerics, serving)
    w_kn = p.weight.T
    mm = quant_matmul_stages(x_q.reshape(-1, p.k), w_kn, p.weight_scale, pertoken_scale=x_scale.reshape(-1),
                             bias=p.bias, output_dtype=_dt.bfloat16, numerics=numerics)
    return {"weight_kn": w_kn, "weight_scale": p.weight_scale, "bias": p.bias, "acc": mm["acc"],
            "y": mm["y"].reshape(x_q.shape[:-1] + (p.n,))}


def w8a8_dynamic_linear_prequantized(x_q: np.ndarray, x_scale: np.ndarray, weight: np.ndarray,
                                     weight_scale: np.ndarray, *, bias: np.ndarray | None = None,
                                     numerics: Numerics = ASCEND, serving=None) -> np.ndarray:
    """The W8A8_DYNAMIC Linear on a pre-quantized activation ``(x_q, x_scale)`` (serving row D2, SGLang).

    Parameters
    ----------
    x_q : int8 ``[..., K]``: the activation codes a fused prolog produced. Not requantized.
    x_scale : float32 of shape ``x_q.shape[:-1]``: the per-token scales that came with them.
    weight : int8 ``[N, K]``; weight_scale : float32 / bfloat16 ``[N]`` or ``[N, 1]``; bias : optional float
        ``[N]``. All in checkpoint layout, loaded as :func:`w8a8.w8a8_dynamic_linear` loads them for a bf16
        model (the scale is rounded to bf16).
    numerics : passed to ``quant_matmul``.
    serving : an engine whose row D2 is ``"tuple_or_int8"`` (SGLang, the default); vllm-ascend is refused.

    Returns bfloat16 ``[..., N]`` (SGLang hard-codes bf16 for the tuple form)::

        y = quant_matmul(x_q, weight.T, bf16(weight_scale), pertoken_scale=x_scale, bias=bf16(bias),
                         output_dtype=bf16) = bf16(((fp32(acc) * s_w[n]) * x_scale[m]) + b[n])

    So ``w8a8_dynamic_linear_prequantized(*dynamic_quant(x), W, s)`` equals ``w8a8_dynamic_linear(x, W, s)``
    bit for bit for a bf16 ``x``.

    Errors: TypeError for dtypes; ValueError naming the argument for shapes (``x_scale`` against ``x_q``, a K
    mismatch names ``weight``), NaN/Inf in ``x_scale`` under ``nan_policy="raise"``, a scale or bias that
    becomes Inf at load, N > 65535, ``serving``.
    """
    return dynamic_linear_prequantized_stages(x_q, x_scale, weight, weight_scale, bias=bias, numerics=numerics,
                                              serving=serving)["y"]
