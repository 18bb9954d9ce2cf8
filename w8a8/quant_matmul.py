"""``npu_quant_matmul``: int8 x int8 -> int32 accumulator -> dequant epilogue (ops-nn
``matmul/quant_batch_matmul_v3/``; op-plugin ``QuantMatmulKernelNpuOpApi.cpp``).

The accumulator is exact (:func:`w8a8.intgemm.int_matmul`); everything after it is fp32 arithmetic
in the kernel's order, then one round-to-nearest-even cast to the output dtype. The allowed dtype
combinations (op-plugin docs table 2, ops-nn ``aclnnQuantMatmulV4.md``) are enforced, so a call the device would reject fails here too.

The argument checks are one public function, :func:`quant_matmul_args` (the backends call it rather
than re-implementing the table); :func:`epilogue` and :func:`effective_scale` are the fp32 epilogue,
shared with :func:`w8a8.moe.grouped_matmul`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import _check
from . import dtypes as _dt
from .intgemm import add_int32, int_matmul
from .numerics import ASCEND, Numerics
from .registry import golden_op
from .rounding import round_to_integral, to_float, to_int
from .trans_quant_param import decode_quant_param, fp19
from .variants import calls as _variants

if TYPE_CHECKING:
    from .lowbit.w4a8 import QuantMatmulInt4Args

__all__ = ["quant_matmul", "quant_matmul_stages"]

_OP = "quant_matmul"
_PACKED = (_dt.int64, _dt.uint64)
DIM_LIMIT = 65535
"""The limit on K (the last dim of x1; lifted only for a 1-D float scale with pertoken_scale) and on N
(the last dim of x2) of ``npu_quant_matmul`` (ops-nn ``aclnnQuantMatmulV4.md``)."""

# output dtype -> (allowed scale dtypes, allowed bias dtypes) without / with pertoken_scale.
_COMBOS = {
    "int32": ((_dt.float32, _dt.bfloat16), (_dt.int32,), None),
    "bfloat16": ((_dt.float32, _dt.bfloat16), (_dt.int32, _dt.bfloat16, _dt.float32),
                 ((_dt.float32, _dt.bfloat16), (_dt.int32, _dt.bfloat16, _dt.float32))),
    "float16": ((_dt.int64, _dt.uint64, _dt.float32), (_dt.int32,),
                ((_dt.float32,), (_dt.int32, _dt.float16, _dt.float32))),
    "int8": ((_dt.int64, _dt.uint64, _dt.float32), (_dt.int32,), None),
}


def _s9(v: np.ndarray, mode: str) -> np.ndarray:
    """The CANN golden's 9-bit step: ``clip(round(v), -256, 255)`` (NaN -> 0)."""
    r = np.clip(round_to_integral(v, mode), -256, 255)
    return np.where(np.isnan(r), 0, r)


@dataclass(frozen=True, eq=False)
class QuantMatmulArgs:
    """The arguments of one :func:`quant_matmul` call, checked and normalized.

    Arrays are the caller's (views at most, no copies, no arithmetic): ``scale`` and ``bias`` are
    made 1-D (a ``(1, N)`` row becomes ``(N,)``), everything else is as given.

    An int32 ``x2`` (int4 weights packed 8 per word) is the op's A4W4 / A8W4 route: then
    :attr:`int4` holds that route's checked arguments and the fields here describe the same call
    (``x1`` / ``x2`` packed as given, ``m`` / ``k`` / ``n`` the unpacked problem).
    """

    x1: np.ndarray
    """int8 ``[..., M, K]`` (int4 route: int32 ``[..., M, K/8]`` for A4W4, int8 ``[M, K]`` for A8W4)."""
    x2: np.ndarray
    """int8 ``[..., K, N]`` (int4 route: int32 ``[K, N/8]`` or ``[K/8, N]``)."""
    scale: np.ndarray
    """1-D ``(N,)`` or ``(1,)``: float32, bfloat16, or packed int64 / uint64 (A8W4: also ``[K/256, N]``)."""
    offset: np.ndarray | None
    """float32 ``(N,)`` / ``(1,)`` (int8 output only; A8W4: the ``yOffset`` auxiliary), or None."""
    pertoken_scale: np.ndarray | None
    """float32 ``(M,)`` (A8W4: also ``(M, 1)``), or None."""
    bias: np.ndarray | None
    """1-D ``(N,)``: int32, or the float dtype the combination allows; or None."""
    out: np.dtype
    """The output dtype: int8, float16, bfloat16 or int32."""
    m: int
    """M, the rows of x1."""
    k: int
    """K, the contracted dimension."""
    n: int
    """N, the columns of the result."""
    batch: tuple[int, ...]
    """The broadcast batch dims of x1 and x2 (``()`` for 2-D operands)."""
    int4: QuantMatmulInt4Args | None = None
    """The int4 route's checked arguments (:func:`w8a8.lowbit.w4a8.quant_matmul_int4_args`), or None
    for an int8 x int8 call."""

    @property
    def int_bias(self) -> bool:
        """An int32 bias (added to the accumulator under the Ascend numerics)."""
        return self.bias is not None and self.bias.dtype == _dt.int32

    @property
    def bias_kind(self) -> str | None:
        """``"int32"``, ``"float"`` or None."""
        return None if self.bias is None else ("int32" if self.int_bias else "float")

    @property
    def packed_scale(self) -> bool:
        """``scale`` is a packed int64 / uint64 quant parameter (:func:`~w8a8.trans_quant_param.trans_quant_param`)."""
        return self.scale.dtype in _PACKED

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.batch + (self.m, self.n)


def quant_matmul_args(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None,
                      numerics: Numerics = ASCEND) -> QuantMatmulArgs:
    """Every argument check of :func:`quant_matmul` (the dtype table, shapes, the 65535 limits,
    NaN/Inf under ``numerics.nan_policy="raise"``), in the op's order, with its exceptions and
    messages; returns the normalized arguments.

    Backends call this instead of re-implementing the rules, then add their own device restrictions.
    An int32-packed int4 ``x2`` takes the op's A8W4 / A4W4 route, whose checks are
    :func:`w8a8.lowbit.w4a8.quant_matmul_int4_args` (:attr:`QuantMatmulArgs.int4`).
    """
    if isinstance(x2, np.ndarray) and x2.dtype == _dt.int32:  # int4 weights: the A8W4 / A4W4 route
        from .lowbit.w4a8 import quant_matmul_int4_args  # lazy: lowbit.w4a8 imports this module

        i = quant_matmul_int4_args(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias,
                                   output_dtype=output_dtype, numerics=numerics)
        return QuantMatmulArgs(x1=i.x1, x2=i.x2, scale=i.scale, offset=i.offset, pertoken_scale=i.pertoken_scale,
                               bias=i.bias, out=i.out, m=int(i.x1.shape[-2]), k=i.k, n=i.n,
                               batch=tuple(i.x1.shape[:-2]), int4=i)
    return _int8_args(x1, x2, scale, offset, pertoken_scale, bias, output_dtype, numerics)


def _int8_args(x1, x2, scale, offset, pertoken_scale, bias, output_dtype, numerics: Numerics) -> QuantMatmulArgs:
    """The checks of an int8 x int8 call (:func:`quant_matmul_args`): an int32 ``x2`` is refused here as
    a dtype (TypeError on ``x2``)."""
    out = _resolve_output(output_dtype)
    x1 = _check.array(_OP, "x1", x1, dtypes=(_dt.int8,), min_ndim=2, max_ndim=6)
    x2 = _check.array(_OP, "x2", x2, dtypes=(_dt.int8,), min_ndim=2, max_ndim=6)
    m, k = x1.shape[-2:]
    if x2.shape[-2] != k:
        _check.fail(_OP, "x2", f"of shape [..., K={k}, N] (K of x1 {tuple(x1.shape)})", _check.describe(x2))
    n = x2.shape[-1]
    try:
        batch = np.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    except ValueError:
        _check.fail(_OP, "x2", f"with batch dims broadcastable to x1's {x1.shape[:-2]}", _check.describe(x2))
    out_shape = tuple(batch) + (m, n)
    _check.within_budget(_OP, "x2", out_shape, 4, f"the int32 accumulator [..., M, N] = {out_shape}")
    s = _check.array(_OP, "scale", scale)
    if s.dtype == _dt.float16:
        _check.fail(_OP, "scale", "float32, bfloat16, int64 or uint64 (the device rejects float16 scales, "
                    "error 161002)", _check.describe(s), TypeError)
    allowed_scale, allowed_bias, with_token = _COMBOS[out.name]
    pt = _check.optional(_OP, "pertoken_scale", pertoken_scale, dtypes=(_dt.float32,), ndim=1)
    if pt is not None:
        if with_token is None:
            _check.fail(_OP, "pertoken_scale", f"None for {out.name} output (per-token dequant gives bf16 or fp16)",
                        _check.describe(pt))
        allowed_scale, allowed_bias = with_token
        if pt.shape[0] != m:
            _check.fail(_OP, "pertoken_scale", f"of shape (M,) = ({m},) (1-D; flatten x1 to 2-D)", _check.describe(pt))
    if s.dtype not in allowed_scale:
        why = " with pertoken_scale" if pt is not None else ""
        _check.fail(_OP, "scale", f"of dtype {_check.dtype_names(allowed_scale)} for {out.name} output{why}",
                    _check.describe(s), TypeError)
    if k > DIM_LIMIT and not (s.dtype in (_dt.float32, _dt.bfloat16) and s.ndim == 1 and pt is not None):
        _check.fail(_OP, "x1", f"K <= {DIM_LIMIT} (only a 1-D float scale with pertoken_scale may exceed it)",
                    _check.describe(x1))
    if n > DIM_LIMIT:
        _check.fail(_OP, "x2", f"N <= {DIM_LIMIT} (the last dims of x1 and x2 are limited to 65535)",
                    _check.describe(x2))
    if s.ndim == 2 and s.shape[0] == 1:
        s = s.reshape(-1)
    if s.ndim != 1 or s.shape[0] not in (1, n):
        _check.fail(_OP, "scale", f"of shape ({n},), (1,) or (1, {n})", _check.describe(scale))
    off = _check.optional(_OP, "offset", offset, dtypes=(_dt.float32,), ndim=1)
    if off is not None:
        if out != _dt.int8:
            _check.fail(_OP, "offset", "None unless output_dtype is int8 (requant)", _check.describe(off))
        if off.shape[0] not in (1, n):
            _check.fail(_OP, "offset", f"of shape ({n},) or (1,)", _check.describe(off))
    b = _check.optional(_OP, "bias", bias, dtypes=allowed_bias)
    if b is not None:
        if b.ndim == 2 and b.shape[0] == 1:
            b = b.reshape(-1)
        if b.shape != (n,):
            _check.fail(_OP, "bias", f"of shape ({n},)", _check.describe(bias))
    if numerics.nan_policy == "raise":
        for arg, value in (("scale", s), ("offset", off), ("pertoken_scale", pt), ("bias", b)):
            if value is not None and _dt.is_float(value.dtype):
                _check.finite(_OP, arg, value)
    return QuantMatmulArgs(x1=x1, x2=x2, scale=s, offset=off, pertoken_scale=pt, bias=b, out=out, m=int(m), k=int(k),
                           n=int(n), batch=tuple(batch))


@golden_op("dense", check=quant_matmul_args, mirrors="torch_npu.npu_quant_matmul")
def quant_matmul(x1: np.ndarray, x2: np.ndarray, scale: np.ndarray, *, offset: np.ndarray | None = None,
                 pertoken_scale: np.ndarray | None = None, bias: np.ndarray | None = None,
                 output_dtype=None, numerics: Numerics = ASCEND) -> np.ndarray:
    """Quantized matmul mirroring ``torch_npu.npu_quant_matmul`` (x2 is ``[K, N]``).

    Parameters
    ----------
    x1 : int8 ``[..., M, K]``, 2-D to 6-D (int32-packed int4: the A4W4 / A8W4 path).
    x2 : int8 ``[..., K, N]``, 2-D to 6-D; batch dims broadcast. Any strided view works
        (torch_npu detects a transposed ``[N, K]`` storage from strides; the math is the same).
    scale : per-channel dequant scale, ``(N,)``, ``(1,)`` or ``(1, N)``: float32, bfloat16, or the
        packed int64/uint64 of :func:`~w8a8.trans_quant_param.trans_quant_param`. float16 is
        rejected, as on the device (error 161002).
    offset : float32 ``(N,)`` / ``(1,)``, int8 output only (requant offset).
    pertoken_scale : float32 ``(M,)`` (1-D, M = ``x1.shape[-2]``; the same per-row scale applies to
        every batch — serving code flattens x1 to 2-D first).
    bias : ``(N,)``; int32, or bfloat16 / float16 / float32 where the combination allows it.
    output_dtype : None (= int8), ``"int8"``, ``"float16"``, ``"bfloat16"`` or ``"int32"``.
    numerics : fields used: ``fp19_scale``, ``fp19_round_mode``, ``int32_bias``,
        ``epilogue_order``, ``epilogue_intermediate`` (with ``pertoken_scale``), ``requant_clamp9``,
        ``round_mode``, ``nan_policy``.

    Allowed combinations (A2/A3, ops-nn ``aclnnQuantMatmulV4.md``)::

        output   scale                 offset     bias                   pertoken
        fp16     int64 | fp32          -          int32                  -
        int8     int64 | fp32          fp32 | -   int32                  -
        bf16     fp32 | bf16           -          int32 | bf16 | fp32    fp32 | -
        fp16     fp32                  -          int32 | fp16 | fp32    fp32 (required)
        int32    fp32 | bf16 (ignored) -          int32                  -
        (int4 x1 / x2 packed in int32: see w8a8.lowbit.w4a8.quant_matmul_int4)

    Formula, in order (``acc`` = exact int32 ``x1 @ x2``)::

        int32 bias:  acc = acc + bias                          # inside the cube, before scaling
        int32 out:   y = acc                                   # scale ignored
        bf16 / fp16 out:
            y = ((fp32(acc) * scale[n]) * pertoken[m]) + fp32(bias_float[n])   -> RNE cast
        int8 out (requant), s9(v) = clip(rint(v), -256, 255):
            y = clip(s9(s9(fp32(acc) * deq[n]) + s9(offset[n])), -128, 127)

    ``scale`` where the torch_npu adapter packs it (fp32 scale, no pertoken_scale, fp16 or int8
    output; op-plugin ``QuantMatmulKernelNpuOpApi.cpp``) is silently reduced to FP19 by truncation — up to 2^-10
    relative error — and a packed int64 scale decodes to its FP19 value (and its offset bits when ``offset`` is
    None). The bf16-output and per-token paths use the scale at full precision: for int8 x1 the adapter
    packs only an fp32 scale without pertoken_scale and with an fp16 / int8 output (op-plugin
    ``QuantMatmulKernelNpuOpApi.cpp:261-298`` @ 517f2e7d: ``use_trans_quant_param``). Whether CANN itself
    reduces a bf16-output fp32 scale inside the kernel is not confirmed; the golden does not.
    Without pertoken_scale the bf16 output comes from ``AscendDequant``, whose internal rounding
    is not documented: the golden rounds the fp32 product once (RNE).

    Kernel variants (:func:`w8a8.variants.select`): with ``pertoken_scale`` and a bf16 / fp16 output the
    decode ("opt") kernel computes ``acc * (scale[n] * pertoken[m])`` (``epilogue_order="combined"``)
    where M is at most the closed TBE tiling's ``baseM``; that threshold is not derivable from public
    source, so the golden selects the opt kernel only on a platform record that carries a measured
    limit (:mod:`w8a8.platforms`) and otherwise computes the basic / TBE order above.

    Errors
    ------
    TypeError: a dtype outside the table. ValueError: ranks, K mismatch, K > 65535 (allowed only
    for a 1-D float scale with pertoken_scale), N > 65535, shapes of scale / offset / bias / pertoken_scale, a
    required or forbidden argument, NaN/Inf in a float parameter under ``nan_policy="raise"``, an
    accumulator ``[..., M, N]`` beyond the allocation budget (:func:`w8a8._check.within_budget`; 4 GiB or ``W8A8_GOLDEN_MAX_BYTES``) (all raised by :func:`quant_matmul_args`).
    OverflowError: the int32 accumulator (plus bias) overflows.
    """
    return quant_matmul_stages(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias,
                               output_dtype=output_dtype, numerics=numerics)["y"]


def quant_matmul_stages(x1: np.ndarray, x2: np.ndarray, scale: np.ndarray, *, offset: np.ndarray | None = None,
                        pertoken_scale: np.ndarray | None = None, bias: np.ndarray | None = None,
                        output_dtype=None, numerics: Numerics = ASCEND) -> dict[str, np.ndarray]:
    """:func:`quant_matmul` with its stages: ``acc`` (the raw int32 accumulator ``x1 @ x2``, before
    any bias), ``scale`` (the fp32 scale the epilogue used, after FP19 packing where it applies),
    ``y``, and ``variants`` (``{"quant_matmul": Variant}``: the kernel modelled). Same arguments,
    checks and result.

    int4 operands (int32 words packing 8 codes, LSB first: A4W4, A8W4) are routed to
    :func:`w8a8.lowbit.w4a8.quant_matmul_int4_stages`, whose stages add ``x1_codes``/``x2_codes``.
    """
    if isinstance(x2, np.ndarray) and x2.dtype == _dt.int32:  # int4 weights: A8W4 (x1 int8) or A4W4 (x1 int32)
        from .lowbit.w4a8 import quant_matmul_int4_stages  # lazy: lowbit.w4a8 imports this module

        return quant_matmul_int4_stages(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias,
                                        output_dtype=output_dtype, numerics=numerics)
    a = quant_matmul_args(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias,
                          output_dtype=output_dtype, numerics=numerics)
    variant = _variants.quant_matmul(a, numerics)
    numerics = variant.numerics(numerics)
    raw = int_matmul(a.x1, a.x2, op=_OP)
    raw = np.broadcast_to(raw, a.batch + (a.m, a.n)) if raw.shape[:-2] != a.batch else raw
    acc = raw
    if a.int_bias and (numerics.int32_bias == "accumulator" or a.out == _dt.int32):
        acc = add_int32(_OP, acc, a.bias)
    if a.out == _dt.int32:
        return {"acc": raw, "scale": None, "y": np.ascontiguousarray(acc, dtype=np.int32),
                "variants": {_OP: variant}}
    deq, packed_offset = effective_scale(a.scale, a.out, a.pertoken_scale is not None, numerics)
    return {"acc": raw, "scale": deq,
            "y": epilogue(acc, deq, packed_offset, a.offset, a.pertoken_scale, a.bias, a.out, numerics),
            "variants": {_OP: variant}}


def epilogue(acc: np.ndarray, deq: np.ndarray, packed_offset: np.ndarray | None, off: np.ndarray | None,
             pt: np.ndarray | None, b: np.ndarray | None, out, numerics: Numerics = ASCEND) -> np.ndarray:
    """The fp32 dequant epilogue of a (biased) int32 accumulator, then the cast to ``out``.

    Shared by :func:`quant_matmul` and :func:`w8a8.moe.grouped_matmul` (the formula of
    :func:`quant_matmul`'s docstring, in its order).

    Parameters
    ----------
    acc : int32 ``[..., M, N]``, with an int32 bias already added where ``numerics.int32_bias`` is
        ``"accumulator"``.
    deq : float32 ``(N,)`` / ``(1,)``: the effective scale (:func:`effective_scale`).
    packed_offset : float32 offset decoded from a packed scale, or None (int8 output only).
    off : float32 ``offset`` argument, or None (int8 output only; it wins over ``packed_offset``).
    pt : float32 per-token scale ``(M,)``, or None.
    b : the 1-D bias ``(N,)`` (int32 or float), or None.
    out : int8, float16, bfloat16 or float32 (float32: no rounding, for a later activation).
    numerics : ``round_mode``, ``requant_clamp9``, ``saturate``, ``epilogue_order``, ``int32_bias``,
        ``epilogue_intermediate`` (with ``pt``: ``"output"`` rounds the first product of the order to
        ``out`` before the second, as torchao's int8 linear does; a product beyond ``out``'s range keeps
        its fp32 value — the overflow to Inf of such a kernel is a defect the golden does not model).

    fp32 overflow and NaN are computed through (IEEE, no warning): the caller's checks decide what
    reaches here.
    """
    int_bias = b is not None and b.dtype == _dt.int32
    with np.errstate(over="ignore", invalid="ignore"):
        v = acc.astype(np.float32)
        if out == _dt.int8:
            if int_bias and numerics.int32_bias == "after_dequant":
                v = v * deq + b.astype(np.float32)
            else:
                v = v * deq
            o = off.astype(np.float32) if off is not None else packed_offset
            mode = numerics.round_mode
            if numerics.requant_clamp9:
                r = _s9(_s9(v, mode) + (0 if o is None else _s9(o, mode)), mode)
            else:
                r = v if o is None else v + o
            return to_int(np.asarray(r, np.float32), _dt.int8, mode=mode, saturate=numerics.saturate)
        # v is a fresh fp32 array and every operand below is fp32: the in-place updates round
        # exactly like the expressions they stand for
        if pt is not None:
            t = pt[:, None]
            order = numerics.epilogue_order
            first, second = ((deq, t) if order == "scale_then_token" else (t, deq) if order == "token_then_scale"
                             else (deq * t, None))
            v *= first
            if numerics.epilogue_intermediate == "output":   # torchao: the first product in the output dtype
                r = to_float(v, out).astype(np.float32)
                v = np.where(np.isinf(r) & np.isfinite(v), v, r)  # an overflow is a defect, not modelled
            if second is not None:
                v *= second
        else:
            v *= deq
        if b is not None and (b.dtype != _dt.int32 or numerics.int32_bias == "after_dequant"):
            v += b.astype(np.float32)
        return to_float(v, out)


def _resolve_output(output_dtype) -> np.dtype:
    out = _dt.resolve("int8" if output_dtype is None else output_dtype, arg="output_dtype", op=_OP)
    if out not in (_dt.int8, _dt.float16, _dt.bfloat16, _dt.int32):
        _check.fail(_OP, "output_dtype", "None, int8, float16, bfloat16 or int32", repr(output_dtype))
    return out


def effective_scale(s: np.ndarray, out: np.dtype, has_token: bool, numerics: Numerics = ASCEND):
    """The fp32 scale the epilogue multiplies by, and the offset packed in an int64 scale (or None).

    A packed int64 / uint64 scale decodes to its FP19 value and its 9-bit offset
    (:func:`~w8a8.trans_quant_param.decode_quant_param`); an fp32 scale is reduced to FP19 where
    ``numerics.fp19_scale`` says the torch_npu adapter packs it (fp32 scale, no per-token scale, fp16
    or int8 output, under ``"adapter"``); otherwise the scale is used at full precision.
    """
    if s.dtype in _PACKED:
        value, packed_offset = decode_quant_param(s)
        return value, packed_offset
    sf = s.astype(np.float32)
    adapter_packs = s.dtype == _dt.float32 and not has_token and out in (_dt.float16, _dt.int8)
    if numerics.fp19_scale == "always" or (numerics.fp19_scale == "adapter" and adapter_packs):
        sf = fp19(sf, numerics.fp19_round_mode)
    return sf, None
