"""``npu_dynamic_quant`` and ``npu_dynamic_quant_asymmetric``: per-token (per-row) dynamic quantization.

The kernel order matters and is mirrored here (ops-nn ``quant/dynamic_quant/op_kernel/dynamic_quant.h``): the reciprocal
``inv = 127 / amax`` is computed once per row and *multiplied*. That is not ``x / (amax / 127)``: the
two differ by one code wherever ``x * inv`` and ``x / scale`` round to different sides of a .5 tie.

The **scale written depends on the kernel the host tiling picks for the shape** (ops-nn
``quant/dynamic_quant/op_host/dynamic_quant_tiling.cpp``,
:mod:`w8a8.variants.dynamic_quant`): ``amax * fp32(1/127)`` in the single-row (key 100: H in {4096,
5120, 10240}, 4 <= rows <= 384), multi-row (key 10: 128 <= H <= 16320, H % 8 == 0) and double-buffer
(keys 2/3) kernels, ``1 / inv`` in the basic, large-shape and MoE kernels (keys 0/1, 6, 7, 8). The two
differ in the last bit for about a quarter of the rows. Every formula is selectable through
:class:`~w8a8.numerics.Numerics` (``scale_out``, ``quant_codes``; ``variants="fixed"`` for no shape
dependence).

The argument checks are public (:func:`dynamic_quant_args`, :func:`dynamic_quant_asymmetric_args`), so
that backends run the golden's checks instead of copying them; :func:`smoothed_rows` is the data
check (``x * smooth_scales`` overflowing) that needs the op's arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from . import _check
from . import dtypes as _dt
from .int4 import pack_int4
from .numerics import ASCEND, Numerics
from .registry import golden_op
from .rounding import round_to_integral as _round_to_integral
from .rounding import to_float, to_int
from .variants import Variant
from .variants import calls as _variants

__all__ = ["dynamic_quant", "dynamic_quant_asymmetric"]

_OP = "dynamic_quant"
_OP_ASYM = "dynamic_quant_asymmetric"
_X_DTYPES = (_dt.float16, _dt.bfloat16)


@dataclass(frozen=True)
class RowQuant:
    """Every choice of the symmetric per-row formula :func:`quantize_rows` computes, in one record.

    Fields
    ------
    qmax : 127 for int8, 7 for int4.
    codes, scale, round_mode : the :class:`~w8a8.numerics.Numerics` choices
        (``quant_codes``, ``scale_out``, ``round_mode``).
    nan_code : code written where ``t`` is NaN (an all-zero row: ``0 * inf``).
    saturate : clamp codes to ``[qmin, qmax]`` (codes of finite input are in range anyway:
        ``|x * inv| <= amax * (D / amax)`` is within an ulp of D); False wraps like a
        two's-complement cast and writes 0 for Inf.
    divisor : ``D`` (None: ``qmax``; ``Numerics.scale_divisor="half_range"``: 127.5 / 7.5).
    qmin : the lowest code (None: ``-qmax``; ``Numerics.code_range="full"``: -128 / -8).
    scale_dtype : None (fp32) or the dtype ``s`` is rounded to at once (``Numerics.scale_dtype="input"``).
    scale_floor : ``Numerics.scale_floor``; ``floor_dtype`` the dtype whose constants it reads.
    code_dtype : None (fp32) or the dtype ``inv`` / ``r`` and ``t`` are rounded to before ``rint``
        (``Numerics.code_arith="input"``).
    per_tensor : one amax over every row (``Numerics.dynamic_granularity="per_tensor"``); the scale
        is that value for every row.
    variant : the kernel variant whose choices these are (:func:`row_quant`), or None.
    """

    qmax: int
    codes: str = "mul_inv"
    scale: str = "reciprocal"
    round_mode: str = "half_even"
    nan_code: int = 0
    saturate: bool = True
    divisor: float | None = None
    qmin: int | None = None
    scale_dtype: object = None
    scale_floor: str = "none"
    floor_dtype: object = None
    code_dtype: object = None
    per_tensor: bool = False
    variant: Variant | None = None

    @classmethod
    def of(cls, n: Numerics, dtype, qmax: int, *, variant: Variant | None = None) -> "RowQuant":
        """The options for the symmetric fields of the record ``n`` (``dtype`` = x's dtype, ``qmax`` 127 / 7):
        ``quant_codes``, ``scale_out``, ``round_mode``, ``zero_row``, ``saturate``, ``scale_divisor``,
        ``code_range``, ``scale_dtype``, ``scale_floor``, ``code_arith``, ``dynamic_granularity``."""
        return cls(qmax=qmax, codes=n.quant_codes, scale=n.scale_out, round_mode=n.round_mode,
                   nan_code=0 if n.zero_row == "zero" else -(qmax + 1), saturate=n.saturate,
                   divisor=qmax + 0.5 if n.scale_divisor == "half_range" else qmax,
                   qmin=-(qmax + 1) if n.code_range == "full" else -qmax,
                   scale_dtype=dtype if n.scale_dtype == "input" else None,
                   scale_floor=n.scale_floor, floor_dtype=dtype,
                   code_dtype=dtype if n.code_arith == "input" else None,
                   per_tensor=n.dynamic_granularity == "per_tensor", variant=variant)


def row_quant(a: DynamicQuantArgs, numerics: Numerics = ASCEND) -> RowQuant:
    """The one selection step of a :func:`dynamic_quant` call: the kernel the host tiling picks for it on the
    platform of ``numerics`` (:func:`w8a8.variants.calls.dynamic_quant`), its choices applied to the record
    (:meth:`Variant.numerics <w8a8.variants.Variant.numerics>`), as the options of :func:`quantize_rows`.
    ``row_quant(a).scale`` is the scale formula the call writes; ``.variant`` names the kernel."""
    variant = _variants.dynamic_quant(a, numerics)
    return RowQuant.of(variant.numerics(numerics), a.x.dtype, a.qmax, variant=variant)


def quantize_rows(xf: np.ndarray, options: RowQuant) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row quantization of fp32 rows (the shared core of every dynamic quantizer).

    ``xf``: float32 ``[..., H]``; each row (last dim) gets its own scale. ``options``: a
    :class:`RowQuant` (``D`` = its divisor, default qmax).

    Returns
    -------
    (codes int8 ``[..., H]``, scale float32 ``[...]``). In fp32 throughout, in this order:

    * ``m = max_j |x_j|`` (per row, or over the whole array with ``per_tensor``)
    * ``inv = D / m``
    * ``scale == "reciprocal"``: ``s = 1 / inv``; ``"amax_mul_rcp"``: ``s = m * fp32(1/D)``;
      ``"amax_div"``: ``s = m / D``
    * ``s = fp32(scale_dtype(s))``; then the floor (:func:`scale_floor_of`)
    * ``codes == "mul_inv"``: ``t = x * inv``; ``"div_scale"``: ``t = x / s``;
      ``"mul_rcp"``: ``r = fp32(1 / s)``, ``t = x * r`` (``inv`` and ``r`` rounded to ``code_dtype``)
    * ``t = code_dtype(t)``; ``q = clamp(round(t), qmin, qmax)``

    An all-zero row has ``m = 0``: ``inv = inf``, ``s = 0`` (without a floor) and every code is
    ``nan_code``.
    """
    o = options
    if not isinstance(o, RowQuant):
        raise TypeError(f"quantize_rows: argument 'options' must be a RowQuant; got {type(o).__name__}")
    qmax, scale, codes, code_dtype = o.qmax, o.scale, o.codes, o.code_dtype
    xf = np.asarray(xf, dtype=np.float32)
    d32 = np.float32(qmax if o.divisor is None else o.divisor)
    lo = -qmax if o.qmin is None else o.qmin
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if not xf.shape[-1]:
            m = np.zeros(xf.shape[:-1] + (1,), np.float32)
        elif o.per_tensor:
            m = np.broadcast_to(np.max(np.abs(xf)) if xf.size else np.float32(0), xf.shape[:-1] + (1,))
        else:
            m = np.max(np.abs(xf), axis=-1, keepdims=True)
        m = np.asarray(m, np.float32)
        inv = d32 / m
        if scale == "reciprocal":
            s = np.float32(1) / inv
        elif scale == "amax_mul_rcp":
            s = m * (np.float32(1) / d32)
        elif scale == "amax_div":
            s = m / d32
        else:
            raise ValueError(f"quantize_rows: argument 'scale' must be 'reciprocal', 'amax_mul_rcp' or 'amax_div'; got {scale!r}")
        s = _in_dtype(s, o.scale_dtype)
        s = scale_floor_of(s, o.scale_floor, o.floor_dtype)
        if codes == "mul_inv":
            t = xf * _in_dtype(inv, code_dtype)
        elif codes == "div_scale":
            t = xf / s
        elif codes == "mul_rcp":
            t = xf * _in_dtype(np.float32(1) / s, code_dtype)
        else:
            raise ValueError(f"quantize_rows: argument 'codes' must be 'mul_inv', 'div_scale' or 'mul_rcp'; "
                             f"got {codes!r}")
        t = _in_dtype(t, code_dtype)
    y = to_int(t, _dt.int8, mode=o.round_mode, saturate=o.saturate, lo=lo, hi=qmax, nan_value=o.nan_code)
    return y, np.ascontiguousarray(s[..., 0], dtype=np.float32)


def _in_dtype(v: np.ndarray, dtype) -> np.ndarray:
    """``fp32(dtype(v))`` (RNE), or ``v`` itself for ``dtype`` None / float32."""
    if dtype is None or np.dtype(dtype) == np.float32:
        return v
    return to_float(np.asarray(v, np.float32), dtype).astype(np.float32)


def _finfo(dtype):
    return ml_dtypes.finfo(dtype) if dtype is not None and np.dtype(dtype) == _dt.bfloat16 else \
        np.finfo(np.float32 if dtype is None else dtype)


def scale_floor_of(s: np.ndarray, floor: str, dtype) -> np.ndarray:
    """``s`` after :attr:`~w8a8.numerics.Numerics.scale_floor` (fp32 values; ``dtype`` = x's dtype):

    ``"none"``: ``s``; ``"max_f32_eps"``: ``max(s, dtype(2^-23))``; ``"max_dtype_tiny"``:
    ``max(s, finfo(dtype).smallest_normal)``; ``"zero_to_dtype_eps"``: ``finfo(dtype).eps where s == 0``.
    NaN scales stay NaN (``np.maximum`` propagates them, as ``torch.clamp`` does)."""
    if floor == "none":
        return s
    if floor == "max_f32_eps":
        return np.maximum(s, _in_dtype(np.float32(2.0 ** -23), dtype))
    if floor == "max_dtype_tiny":
        return np.maximum(s, np.float32(_finfo(dtype).smallest_normal))
    if floor == "zero_to_dtype_eps":
        return np.where(s == 0, np.float32(_finfo(dtype).eps), s).astype(np.float32)
    raise ValueError(f"scale_floor_of: argument 'floor' must be one of {Numerics.choices()['scale_floor']}; got {floor!r}")


def _rows_to_groups(op: str, group_index: np.ndarray, rows: int) -> np.ndarray:
    """Group id of each row for cumulative end-row ``group_index`` (g = first with gi[g] >= row + 1)."""
    if group_index.size == 0:
        _check.fail(op, "group_index", "a non-empty 1-D int32 array of cumulative row ends", _check.describe(group_index))
    gi = group_index.astype(np.int64)
    if np.any(np.diff(gi) < 0) or gi[0] < 0:
        _check.fail(op, "group_index", "non-decreasing cumulative row ends (>= 0)", f"{gi.tolist()[:16]}")
    if gi[-1] != rows:
        _check.fail(op, "group_index", f"cumulative row ends whose last value equals the row count {rows}",
                    f"last value {int(gi[-1])}")
    return np.searchsorted(gi, np.arange(rows), side="right")


@dataclass(frozen=True, eq=False)
class DynamicQuantArgs:
    """The checked arguments of :func:`dynamic_quant` / :func:`dynamic_quant_asymmetric` (as given: no
    copies, no arithmetic) and the facts derived from them."""

    x: np.ndarray
    """float16 / bfloat16 ``[..., H]``, 2-D to 8-D."""
    smooth_scales: np.ndarray | None
    """x's dtype: ``[H]``, or ``[E, H]`` with ``group_index``; or None."""
    group_index: np.ndarray | None
    """int32 ``[E]``: non-decreasing cumulative row ends, the last equal to ``rows``; or None."""
    dst: np.dtype | str
    """``int8`` or ``"int4"`` (:data:`w8a8.dtypes.int4`)."""
    rows: int
    """``S = prod(x.shape[:-1])``: the number of tokens."""
    h: int
    """``H = x.shape[-1]``: the row width."""
    row_groups: np.ndarray | None
    """int ``[S]``: the smooth row of every x row (with ``group_index``), or None."""

    @property
    def qmax(self) -> int:
        """127 for int8 codes, 7 for int4."""
        return 7 if self.dst == _dt.int4 else 127

    @property
    def dst_name(self) -> str:
        """``"int8"`` or ``"int4"``."""
        return _dt.name(self.dst)


DynamicQuantAsymmetricArgs = DynamicQuantArgs
"""The checked arguments of :func:`dynamic_quant_asymmetric`: those of :func:`dynamic_quant`."""


_EXPONENT = {_dt.float16: np.uint16(0x7C00), _dt.bfloat16: np.uint16(0x7F80)}


def _all_finite(x: np.ndarray) -> bool:
    """No NaN / Inf in an fp16 / bf16 array: no exponent field of all ones (one pass over the 16-bit
    words, no float conversion: NumPy's fp16 ``isfinite`` is emulated and 4x slower)."""
    e = _EXPONENT[x.dtype]
    return not np.any((x.view(np.uint16) & e) == e)


def dynamic_quant_args(x, *, smooth_scales=None, group_index=None, dst_type="int8",
                       numerics: Numerics = ASCEND) -> DynamicQuantArgs:
    """Every argument check of :func:`dynamic_quant`, in its order, with its exceptions and messages.

    Not included: the data-dependent check that ``x * smooth_scales`` stays finite, which needs the
    op's arithmetic (:func:`smoothed_rows`).
    """
    return _args(_OP, x, smooth_scales, group_index, dst_type, numerics)


def dynamic_quant_asymmetric_args(x, *, smooth_scales=None, group_index=None, dst_type="int8",
                                  numerics: Numerics = ASCEND) -> DynamicQuantAsymmetricArgs:
    """:func:`dynamic_quant_args` for :func:`dynamic_quant_asymmetric` (its name in the messages)."""
    return _args(_OP_ASYM, x, smooth_scales, group_index, dst_type, numerics)


def _args(op: str, x, smooth_scales, group_index, dst_type, numerics: Numerics) -> DynamicQuantArgs:
    if not isinstance(numerics, Numerics):
        _check.fail(op, "numerics", "a w8a8.Numerics", _check.describe(numerics), TypeError)
    x = _check.array(op, "x", x, dtypes=_X_DTYPES, min_ndim=2, max_ndim=8)
    dst = _dt.resolve(dst_type if dst_type is not None else "int8", arg="dst_type", op=op)
    if dst not in (_dt.int8, _dt.int4):
        _check.fail(op, "dst_type", "'int8' or 'int4' (torch.quint4x2)", repr(dst_type))
    h = x.shape[-1]
    if dst == _dt.int4 and h % 8:
        _check.fail(op, "x", "of last dimension a multiple of 8 for int4 output (8 codes per int32)", _check.describe(x))
    rows = int(np.prod(x.shape[:-1]))
    if numerics.nan_policy == "raise" and not _all_finite(x):
        _check.finite(op, "x", x)  # names the first NaN/Inf position in x's own shape
    smooth = gi = groups = None
    if smooth_scales is not None:
        smooth = _check.array(op, "smooth_scales", smooth_scales, dtypes=(x.dtype,))
        if numerics.nan_policy == "raise":
            _check.finite(op, "smooth_scales", smooth)
        if group_index is None:
            _check.shape(op, "smooth_scales", smooth, [(h,)], f"of shape [H] = [{h}] (without group_index)")
        else:
            gi = _check.array(op, "group_index", group_index, dtypes=(np.int32,), ndim=1)
            e = gi.shape[0]
            if e > 1024:
                _check.fail(op, "group_index", "of at most 1024 groups", _check.describe(gi))
            _check.shape(op, "smooth_scales", smooth, [(e, h)], f"of shape [E, H] = [{e}, {h}] (with group_index)")
            groups = _rows_to_groups(op, gi, rows)
    elif group_index is not None:
        _check.fail(op, "group_index", "None unless smooth_scales is given (it selects the smooth row)",
                    _check.describe(group_index))
    return DynamicQuantArgs(x=x, smooth_scales=smooth, group_index=gi, dst=dst, rows=rows, h=int(h),
                            row_groups=groups)


def smoothed_rows(a: DynamicQuantArgs, numerics: Numerics = ASCEND, *, op: str = _OP) -> np.ndarray:
    """The fp32 rows ``[S, H]`` both dynamic quantizers start from: ``fp32(x) [* fp32(smooth[g])]``.

    A new array. Under ``nan_policy="raise"`` a product that overflows fp32 raises ``ValueError``
    naming ``smooth_scales`` (``op`` names the op): a check of the data that needs this arithmetic,
    so it is not part of :func:`dynamic_quant_args`.
    """
    xf = a.x.reshape(a.rows, a.h).astype(np.float32)
    if a.smooth_scales is None:
        return xf
    sf = a.smooth_scales.astype(np.float32)
    sf = sf[None, :] if a.row_groups is None else sf[a.row_groups]
    with np.errstate(over="ignore", invalid="ignore"):
        xf *= sf
    if numerics.nan_policy == "raise" and not np.isfinite(xf).all():
        _check.fail(op, "smooth_scales", "such that x * smooth_scales stays finite in fp32", "an overflow to Inf")
    return xf


def _pack(y: np.ndarray, dst, shape) -> np.ndarray:
    y = y.reshape(shape)
    return pack_int4(y) if dst == _dt.int4 else y


@golden_op("dense", check=dynamic_quant_args, mirrors="torch_npu.npu_dynamic_quant")
def dynamic_quant(x: np.ndarray, *, smooth_scales: np.ndarray | None = None,
                  group_index: np.ndarray | None = None, dst_type="int8",
                  numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-token quantization, mirroring ``torch_npu.npu_dynamic_quant``.

    Parameters
    ----------
    x : float16 or bfloat16, 2-D to 8-D ``[..., H]``. Every row (last dim) is one token.
    smooth_scales : same dtype as ``x``; ``[H]``, or ``[E, H]`` with ``group_index``.
    group_index : int32 ``[E]``, cumulative end rows (MoE mode): row r uses the smooth row of the
        first group g with ``group_index[g] >= r + 1``. Non-decreasing (empty groups allowed —
        the vendor doc says strictly increasing, which is not enforced here), last value = number
        of rows, E <= 1024.
    dst_type : ``"int8"`` (default, also None) or ``"int4"`` / ``"quint4x2"``.
    numerics : :class:`~w8a8.numerics.Numerics`; fields used: ``quant_codes``, ``scale_out``,
        ``round_mode``, ``zero_row``, ``nan_policy``, ``saturate``; ``platform`` / ``variants`` select
        the kernel (:func:`w8a8.variants.select`), which decides ``scale_out``.

    Returns
    -------
    y : int8 of x's shape; for int4, int32 ``[..., H/8]`` with 8 codes per word, LSB first.
    scale : float32 of shape ``x.shape[:-1]``.

    Formula (fp32, Ascend kernels; :mod:`w8a8.variants.dynamic_quant`)::

        xf  = fp32(x) [* fp32(smooth[g])]
        inv = qmax / max_j |xf_j|             # qmax = 127 (int8) or 7 (int4)
        y   = rint(xf * inv)                  # half to even; |y| <= qmax, so -128 never appears
        scale = max_j |xf_j| * fp32(1/qmax)   # keys 100, 10, 2, 3 (single-row, multi-row, double buffer)
              | 1 / inv                       # keys 0, 1, 6, 7, 8 (basic, large shape, MoE)

    On A3 with H = 4096 (DeepSeek-V4): rows 4..384 run key 100, rows 1..3 and >= 385 key 10, both
    ``amax * fp32(1/127)``; ``[64, 20000]`` runs key 6 (``1 / inv``); every ``group_index`` call runs
    key 7 / 8 (``1 / inv``).

    All-zero row: ``inv = inf`` and ``0 * inf`` is NaN; the device's integer for it is not
    confirmed, the golden writes 0 (``zero_row="zero"``; ``"int_min"`` writes -128 / -8). The
    scale is 0 either way.

    A row whose max is subnormal-small overflows ``inv`` to Inf (IEEE fp32): its nonzero codes
    saturate to +-qmax and its scale is ``1 / inf = 0`` in the reciprocal kernels, the subnormal
    ``amax * fp32(1/qmax)`` in the others — whether the device flushes subnormals is not confirmed.

    Errors
    ------
    TypeError for a wrong dtype (x not fp16/bf16, smooth_scales not x's dtype, group_index not
    int32); ValueError for rank, shape, group_index values, int4 with H % 8 != 0, and NaN/Inf in x
    under ``nan_policy="raise"`` (the default) — all raised by :func:`dynamic_quant_args` — and for
    ``x * smooth_scales`` overflowing fp32 (:func:`smoothed_rows`). Non-contiguous views are accepted:
    only the logical shape matters.
    """
    a = dynamic_quant_args(x, smooth_scales=smooth_scales, group_index=group_index, dst_type=dst_type,
                           numerics=numerics)
    return dynamic_quant_from_args(a, numerics)


def dynamic_quant_from_args(a: DynamicQuantArgs, numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dynamic_quant` on arguments :func:`dynamic_quant_args` has checked (no second pass over x)."""
    xf = smoothed_rows(a, numerics)
    y, scale = quantize_rows(xf, row_quant(a, numerics))
    return _pack(y, a.dst, a.x.shape), scale.reshape(a.x.shape[:-1])


@golden_op("dense", check=dynamic_quant_asymmetric_args, mirrors="torch_npu.npu_dynamic_quant_asymmetric")
def dynamic_quant_asymmetric(x: np.ndarray, *, smooth_scales: np.ndarray | None = None,
                             group_index: np.ndarray | None = None, dst_type="int8",
                             numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric per-token quantization, mirroring ``torch_npu.npu_dynamic_quant_asymmetric``.

    Arguments as :func:`dynamic_quant`. Returns ``(y, scale, offset)``: y as there, scale and
    offset float32 of shape ``x.shape[:-1]``.

    Formula (fp32; ``GetScaleAndOffset`` in ops-nn ``dynamic_quant_base.h``)::

        scale  = max((rowmax - rowmin) / 255, 1e-12)      # int4: / 15
        offset = 127 - rowmax / scale                      # int4: 7 - rowmax / scale
        y      = rint(xf * (1 / scale) + offset)           # saturated to [-128, 127] ([-8, 7])

    Dequantize with ``(y - offset) * scale``. A constant row clamps the scale to 1e-12, which makes
    the offset huge and the codes the result of fp32 cancellation: computed faithfully here, not
    reliable on any device. The symmetric ``quant_codes`` / ``scale_out`` choices do not apply to
    this formula.

    Other libraries (:class:`~w8a8.numerics.Numerics`): ``asym_range`` (the range through 0),
    ``asym_zero_point="integer"`` (an integer zero point, its own scale / code formula, with
    ``quant_codes``, ``zero_point_position``, ``scale_dtype``, ``scale_floor``, ``code_arith``),
    ``asym_degenerate`` (scale 1 for a constant range), ``dynamic_granularity="per_tensor"`` (one
    range over all rows) — :func:`asymmetric_rows`.
    """
    a = dynamic_quant_asymmetric_args(x, smooth_scales=smooth_scales, group_index=group_index,
                                      dst_type=dst_type, numerics=numerics)
    return dynamic_quant_asymmetric_from_args(a, numerics)


def dynamic_quant_asymmetric_from_args(a: DynamicQuantArgs, numerics: Numerics = ASCEND
                                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`dynamic_quant_asymmetric` on arguments :func:`dynamic_quant_asymmetric_args` has checked."""
    xf = smoothed_rows(a, numerics, op=_OP_ASYM)
    r, scale, offset = asymmetric_rows(xf, a.dst, numerics, a.x.dtype)
    shape = a.x.shape[:-1]
    return _pack(r, a.dst, a.x.shape), scale.reshape(shape), offset.reshape(shape)


def asymmetric_rows(xf: np.ndarray, dst, numerics: Numerics = ASCEND, dtype=None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric quantization of fp32 rows ``[S, H]``: ``(codes int8 [S, H], scale [S], offset [S])``.

    ``dst`` int8 or int4; ``dtype`` x's dtype (for ``scale_dtype`` / ``scale_floor`` / ``code_arith``).
    In fp32, in this order, with ``L`` = 255 / 15, ``top`` = 127 / 7, ``qmin`` = -128 / -8:

    * ``hi, lo`` = row max / min (``per_tensor``: over every row); ``asym_range="through_zero"``:
      ``hi = max(hi, 0)``, ``lo = min(lo, 0)``
    * ``"float_offset"`` (Ascend): ``s = max((hi - lo) / L, 1e-12)`` (``asym_degenerate="one"``:
      ``s = 1`` where ``hi == lo``), ``offset = top - hi / s``, ``y = rint(x * (1 / s) + offset)``
    * ``"integer"``: ``s = (hi - lo) / L``, then ``max(s, 1e-12)`` or ``1 where hi == lo``
      (``asym_degenerate``), ``s = fp32(dt(s))`` under ``scale_dtype="input"``, floored
      (``scale_floor``; ``"zero_to_dtype_eps"`` only after ``z``, as compressed-tensors does);
      ``z = qmin + clamp(rint(-(lo / s)), 0, L)`` (``asym_degenerate`` keeps ``s > 0`` for a
      constant row, so ``lo / s`` is finite for finite x);
      ``t = x / s`` (``div_scale``) or ``x * fp32(1 / s)`` (``mul_inv`` / ``mul_rcp``);
      ``y = sat(rint(t) + z)`` (``zero_point_position="after_rounding"``) or ``sat(rint(t + z))``
      (``"before_rounding"``); ``code_arith="input"`` rounds ``lo / s``, ``1 / s``, ``t`` and
      ``t + z`` to ``dt``; ``offset = fp32(z)``.

    NaN codes (an all-NaN ``t``) are 0 (``zero_row="zero"``) or ``qmin``.
    """
    n = numerics
    int4 = dst == _dt.int4
    levels, top, qmin = (np.float32(15), np.float32(7), -8) if int4 else (np.float32(255), np.float32(127), -128)
    xf = np.asarray(xf, np.float32)
    rows, h = xf.shape
    code_dt = dtype if n.code_arith == "input" else None
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if not h or not rows:
            hi = lo = np.zeros((rows, 1), np.float32)
        elif n.dynamic_granularity == "per_tensor":
            hi = np.full((rows, 1), xf.max(), np.float32)
            lo = np.full((rows, 1), xf.min(), np.float32)
        else:
            hi = xf.max(axis=-1, keepdims=True)
            lo = xf.min(axis=-1, keepdims=True)
        if n.asym_range == "through_zero":
            hi, lo = np.maximum(hi, np.float32(0)), np.minimum(lo, np.float32(0))
        s = (hi - lo) / levels
        s = np.maximum(s, np.float32(1e-12)) if n.asym_degenerate == "clamp_1e-12" else \
            np.where(hi == lo, np.float32(1), s).astype(np.float32)
        if n.asym_zero_point == "float_offset":
            offset = top - hi / s
            t = xf * (np.float32(1) / s) + offset
            y = to_int(t, dst, mode=n.round_mode, saturate=n.saturate, nan_value=0 if n.zero_row == "zero" else qmin)
            return y, s[:, 0], offset[:, 0]
        s = _in_dtype(s, dtype if n.scale_dtype == "input" else None)
        late_floor = n.scale_floor == "zero_to_dtype_eps"   # compressed-tensors: after the zero point
        if not late_floor:
            s = scale_floor_of(s, n.scale_floor, dtype)
        zr = _round_to_integral(-_in_dtype(lo / s, code_dt), n.round_mode)
        z = (np.float32(qmin) + np.clip(zr, np.float32(0), levels)).astype(np.float32)
        if late_floor:
            s = scale_floor_of(s, n.scale_floor, dtype)
        if n.quant_codes == "div_scale":
            t = xf / s
        else:
            t = xf * _in_dtype(np.float32(1) / s, code_dt)
        t = _in_dtype(t, code_dt)
        if n.zero_point_position == "before_rounding":
            t = _in_dtype(t + z, code_dt)
        else:
            t = _round_to_integral(t, n.round_mode) + z   # integers: exact in fp32 (|t| < 2^24 or saturating)
    y = to_int(t, dst, mode=n.round_mode, saturate=n.saturate, nan_value=0 if n.zero_row == "zero" else qmin)
    return y, s[:, 0], z[:, 0]
