"""The two W8A8 Linear serving paths in torch: load once (:func:`load_dynamic`, :func:`load_static`),
then run per call (:func:`w8a8_dynamic_linear`, :func:`w8a8_static_linear`).

Contract: :func:`w8a8.w8a8_dynamic_linear` / :func:`w8a8.w8a8_static_linear` under
:data:`w8a8.ASCEND`. The load step is what the serving stack does once per weight (SGLang
``process_weights_after_loading``). The parameters arrive already converted and checked by the
golden's ``w8a8_dynamic_linear_args`` / ``w8a8_static_linear_args`` (run by ``Backend.prepare``: the scale
and bias in the model's dtype, the static reciprocal and offset, each refused with the golden's
message where it became Inf); the load here lays out the ``[K, N]`` weight for the int8 GEMM (and its
qlinear prepack on AMX machines).

On the ``"vnni"`` and ``"amx"`` GEMM paths (:mod:`.runtime`) the load also packs the weight for the fused kernel
(:mod:`.packed`: quantization, exact int32 GEMM and fp32 epilogue in one pass over each row block) and
probes it against the reference path on extreme rows; a Linear whose probe differs, or whose exact
accumulator could leave the int32 range (static: ``K * 128 * max|w| + max|quant_bias|`` past
``2^31 - 1``), keeps the reference path (``layer.note`` says why). Both paths give the same bits.
"""

from __future__ import annotations

import functools
import math

from dataclasses import dataclass

import torch

from .arith import I32_MAX, absmax
from .gemm import Int8Weight
from .qmatmul import effective_scale, quant_matmul
from .quant import dynamic_quant, quantize


@dataclass
class Fused:
    """A Linear's weight and epilogue parameters as the fused VNNI kernel takes them (:func:`.packed.run`):
    the packed weight, the compensation (an int32 bias folded in), the fp32 ``deq [N]`` and float bias,
    and for the static path the fp32 reciprocal / offset ``[K]``."""

    weight: object          # packed.PackedWeight
    comp: torch.Tensor
    deq: torch.Tensor
    fbias: torch.Tensor | None = None
    recip: torch.Tensor | None = None
    offset: torch.Tensor | None = None


_FUSED = ("vnni", "amx")   # the GEMM paths of torch-cpu's own fused kernels (.packed)


def _fused(make, probe) -> tuple[Fused | None, str]:
    """``(Fused, "")`` if it packs and its probe passes, else ``(None, why)``."""
    try:
        fused = make()
        why = probe(fused)
    except (RuntimeError, ValueError) as exc:
        return None, f"fused kernel: {type(exc).__name__}: {exc}"
    return (fused, "") if not why else (None, why)


def _amx_fallback(layer, weight: torch.Tensor, path: str) -> None:
    """A Linear of the ``"amx"`` path whose fused kernel is not used: its reference GEMM on oneDNN's
    prepacked AMX ``qlinear`` (itself probed) where this torch has it, else ``torch._int_mm``."""
    from .runtime import has_qlinear

    if path == "amx" and layer.fused is None and has_qlinear():
        layer.weight = Int8Weight.load(weight.mT, "qlinear")


@dataclass
class DynamicLinear:
    """A ``W8A8_DYNAMIC`` layer after load: weight ``[K, N]``, scale / bias as loaded, output dtype."""

    weight: Int8Weight
    scale: torch.Tensor  # the quant_matmul scale: bf16 for a bf16 model (rounded!), fp32 for fp16
    bias: torch.Tensor | None  # in the model dtype
    dtype: torch.dtype
    fused: Fused | None = None  # the "vnni" path where it packed and passed its probe
    note: str = ""              # why not, where the "vnni" path was asked for


def load_dynamic(x_dtype: torch.dtype, weight: torch.Tensor, weight_scale: torch.Tensor, bias, path: str) -> DynamicLinear:
    """SGLang's load: ``W = weight.T``; ``weight_scale`` (bf16 for a bf16 model, fp32 for fp16) and
    ``bias`` (model dtype) as loaded and checked by :func:`w8a8.linear.w8a8_dynamic_linear_args`. On the
    ``"vnni"`` path also packed for the fused kernel and probed (module docstring)."""
    layer = DynamicLinear(Int8Weight.load(weight.mT, path), weight_scale, bias, x_dtype)
    if path in _FUSED:
        from . import packed

        def make():
            pw = packed.PackedWeight.pack(weight, path)
            deq, _ = effective_scale(weight_scale, x_dtype, True)
            fbias = None if bias is None else bias.to(torch.float32)
            return Fused(pw, pw.comp, deq.contiguous(), fbias)

        layer.fused, layer.note = _fused(make, lambda f: packed.probe_dynamic(f.weight, weight, f.deq, f.fbias,
                                                                              x_dtype, x_dtype))
        _amx_fallback(layer, weight, path)
    return layer


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


@functools.lru_cache(maxsize=512)
def _scale_out(rows: int, k: int, dtype: torch.dtype) -> str:
    """The per-token scale formula of the dynamic_quant kernel the tiling picks for ``[rows, k]`` of
    ``dtype`` (the selector is a pure function of these: cached, it costs a dict look-up per call)."""
    from .kernel_variants import dynamic_quant as variant

    return variant((rows, k), dtype).scale_out


def w8a8_dynamic_linear(x: torch.Tensor, layer: DynamicLinear, check_finite: bool = False) -> torch.Tensor:
    """Per-token dynamic int8 ``x``, then ``quant_matmul(x_q, W, s_w, pertoken_scale=s_tok, bias=b)``
    (row block by row block, see :func:`_blocks`; fused in one kernel on the "vnni" path). The scale formula
    is the one of the kernel the tiling picks for the whole activation ``[prod(x.shape[:-1]), K]`` (not
    for a block). ``check_finite`` (fused paths only, see :func:`fused_checks_finite`): raise
    :class:`.packed.NonFinite` on an Inf / NaN element of ``x``, found while quantizing."""
    scale_out = _scale_out(math.prod(x.shape[:-1]), x.shape[-1], x.dtype)
    if layer.fused is not None:
        return _run_fused(x, layer, scale_out, check_finite)

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
    fused: Fused | None = None
    note: str = ""


def load_static(x_dtype: torch.dtype, weight: torch.Tensor, recip: torch.Tensor, offset: torch.Tensor,
                deq_scale: torch.Tensor, bias, path: str) -> StaticLinear:
    """SGLang's load: ``W = weight.T``; the reciprocal and offset ``[K]`` in the model dtype, ``deq_scale`` and
    the matmul bias (int32 ``quant_bias`` or a float bias in the model dtype), as loaded and checked by
    :func:`w8a8.linear.static_linear_args`. On the ``"vnni"`` path also packed and probed where the
    exact accumulator plus ``quant_bias`` fits int32 (module docstring)."""
    int_bias = bias is not None and bias.dtype == torch.int32
    qb_max = absmax(bias) if int_bias else 0
    layer = StaticLinear(Int8Weight.load(weight.mT, path), recip, offset, deq_scale, bias, x_dtype, qb_max)
    if path in _FUSED:
        from . import packed

        if not packed.acc_fits(weight.shape[1], 128, layer.weight.absmax, qb_max):
            layer.note = f"{path}: K * 128 * max|w| + max|quant_bias| may leave int32 (the reference path raises)"
            _amx_fallback(layer, weight, path)
            return layer

        def make():
            pw = packed.PackedWeight.pack(weight, path)
            deq, _ = effective_scale(deq_scale, x_dtype, False)
            deq = deq.expand(pw.n).contiguous()
            fbias = None if bias is None or int_bias else bias.to(torch.float32)
            return Fused(pw, pw.comp_with(bias if int_bias else None), deq, fbias, recip.to(torch.float32),
                         offset.to(torch.float32))

        def probe(f):
            return packed.probe_static(f.weight, weight, f.recip, f.offset, f.deq, bias if int_bias else None,
                                       f.fbias, x_dtype, x_dtype)

        layer.fused, layer.note = _fused(make, probe)
        _amx_fallback(layer, weight, path)
    return layer


def path_taken(layer) -> str:
    """The GEMM path a loaded Linear's calls take: its fused kernel's (``"vnni"`` / ``"amx"``), else the weight's
    (``"qlinear"`` where prepacked, else ``"int_mm"``)."""
    if layer.fused is not None:
        return layer.fused.weight.layout
    return "qlinear" if layer.weight.packed is not None else "int_mm"


def fused_checks_finite(layer) -> bool:
    """Whether ``layer``'s calls can find an Inf / NaN activation element themselves (``check_finite``): on
    the fused kernels, which flag it while quantizing; the reference path cannot."""
    return layer.fused is not None


def w8a8_static_linear(x: torch.Tensor, layer: StaticLinear, check_finite: bool = False) -> torch.Tensor:
    """``x_q = quantize(x, r, o, int8, div_mode=False)``, then ``quant_matmul(x_q, W, deq, bias=...)``
    (row block by row block, see :func:`_blocks`; fused in one kernel on the "vnni" path). ``check_finite``:
    as :func:`w8a8_dynamic_linear`'s."""
    if layer.fused is not None:
        return _run_fused(x, layer, None, check_finite)

    def forward(rows):
        x_q = quantize(rows, layer.recip, layer.offset, dtype="int8", div_mode=False)
        return quant_matmul(x_q, layer.weight, layer.deq_scale, bias=layer.bias, output_dtype=layer.dtype)

    int_bias = layer.bias is not None and layer.bias.dtype == torch.int32
    return _blockwise(x, layer, layer.bias_absmax if int_bias else 0, forward)


def _run_fused(x: torch.Tensor, layer, scale_out: str | None, check_finite: bool = False) -> torch.Tensor:
    """The fused kernel on ``x.reshape(-1, K)`` (:func:`.packed.run`), into ``[..., N]``: the dynamic path
    with the per-token scale formula ``scale_out`` (the kernel variant's), or the static path (None)."""
    from . import packed

    f = layer.fused
    k, n = layer.weight.shape
    x2 = x.reshape(-1, k)
    if scale_out is not None:
        y = packed.run(packed.dynamic_kind(x.dtype, scale_out), x2, f.weight, layer.dtype, deq=f.deq, fbias=f.fbias,
                       check_finite=check_finite)
    else:
        y = packed.run(packed.IN_STATIC[x.dtype], x2, f.weight, layer.dtype, deq=f.deq, comp=f.comp, fbias=f.fbias,
                       recip=f.recip, offset=f.offset, check_finite=check_finite)
    return y.reshape(*x.shape[:-1], n)
