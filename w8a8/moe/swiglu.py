"""``npu_swiglu`` and ``npu_dequant_swiglu_quant`` (ops-nn
``activation/swi_glu/``, ``quant/dequant_swiglu_quant/``; op-plugin ``DequantSwigluQuantOpApi.cpp``).

SwiGLU is ``silu(A) * B`` on the two halves of the last (or given) dimension, computed in fp32 as
the kernel does: ``A / (1 + exp(-A)) * B`` for fp16 / bf16 x and ``((1 / (1 + exp(-A))) * A) * B`` for
fp32 x (two kernels, ops-nn ``swi_glu_tiling.cpp``). The fused op adds the int32 dequant in front and a per-row
int8 quantization behind, computed by one of two kernel families (with / without group_index) that
quantize differently (ops-nn ``dequant_swiglu_quant_tiling.cpp``, :mod:`w8a8.variants.swiglu`). ``swiglu_limit`` is this
project's addition for DeepSeek-V4's routed experts (docs/deepseek-v4.md): ``gate = min(gate, L)``,
``up = clip(up, -L, L)`` before ``silu(gate) * up`` — the clamp vllm-ascend's fused ``grouped_matmul_swiglu_quant``
applies (its ``swiglu_limit``); it is not an argument of ``npu_dequant_swiglu_quant``, whose own
``swiglu_mode``/``clamp_limit`` is the different GPT-OSS formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..dynamic_quant import RowQuant, quantize_rows
from ..intgemm import add_int32
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from ..rounding import to_float, to_int
from ..variants import calls as _variants
from . import _common as C

__all__ = ["swiglu", "dequant_swiglu_quant"]

_H_LIMIT = 10496


def _clamped_swiglu(gate: np.ndarray, up: np.ndarray, limit: float | None, numerics: Numerics) -> np.ndarray:
    """fp32 ``silu(gate) * up`` (with DeepSeek-V4's clamp when ``limit`` is given), in the order of
    ``numerics.swiglu_order``: ``"a_div"`` ``gate / (1 + e) * up``; ``"rcp_mul"``
    ``((1 / (1 + e)) * gate) * up``, ``e = exp(-gate)``."""
    if limit is not None:
        lim = np.float32(limit)
        gate = np.minimum(gate, lim)
        up = np.clip(up, -lim, lim)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if numerics.swiglu_order == "rcp_mul":
            return ((np.float32(1) / (np.float32(1) + C.exp(-gate, numerics))) * gate) * up
        return C.silu(gate, numerics) * up


@dataclass(frozen=True)
class SwigluArgs:
    """The checked arguments of :func:`swiglu` (see :func:`swiglu_args`)."""

    x: np.ndarray       # float32 / float16 / bfloat16, 1-D to 8-D, even along dim (as given)
    dim: int            # the split dimension, in [-x.ndim, x.ndim)


def swiglu_args(x, dim=-1, *, numerics: Numerics = ASCEND) -> SwigluArgs:
    """The argument checks of :func:`swiglu`, in its order, with its errors.

    TypeError for the dtype; ValueError for rank, dim, an odd split size, NaN/Inf under
    ``nan_policy="raise"``.
    """
    op = "swiglu"
    C.check_numerics(op, numerics)
    x = _check.array(op, "x", x, dtypes=C.FLOATS, min_ndim=1, max_ndim=8)
    dim = _check.integer(op, "dim", dim, minimum=-x.ndim, maximum=x.ndim - 1)
    size = x.shape[dim]
    if size % 2:
        _check.fail(op, "x", f"of even size along dim {dim}", _check.describe(x))
    C.check_finite(op, "x", x, numerics)
    return SwigluArgs(x=x, dim=dim)


@golden_op("moe", check=swiglu_args, mirrors="torch_npu.npu_swiglu")
def swiglu(x: np.ndarray, dim: int = -1, *, numerics: Numerics = ASCEND) -> np.ndarray:
    """``silu(A) * B`` with A the first half of ``dim``, mirroring ``torch_npu.npu_swiglu``.

    Parameters
    ----------
    x : float32 / float16 / bfloat16, 1-D to 8-D; ``x.shape[dim]`` even.
    dim : the split dimension.
    numerics : fields used: ``transcendental`` (exp), ``nan_policy``; ``swiglu_order`` is decided by
        the kernel (tiling key = x's dtype, :func:`w8a8.variants.select`).

    Returns x's dtype, ``x.shape`` with ``dim`` halved::

        a, b = fp32 halves of x along dim;  e = exp(-a)
        fp16 / bf16 x (keys 1, 27, swi_glu_bf16.hpp):  out = cast(a / (1 + e) * b -> x.dtype, RINT)
        fp32 x (key 0, swi_glu_impl.hpp):              out = ((1 / (1 + e)) * a) * b

    Errors: TypeError for the dtype; ValueError for rank, dim, an odd split size, NaN/Inf under
    ``nan_policy="raise"``.
    """
    checked = swiglu_args(x, dim, numerics=numerics)
    x, dim = checked.x, checked.dim
    n = _variants.swiglu(checked, numerics).numerics(numerics)
    a, b = np.split(x.astype(np.float32), 2, axis=dim)
    return to_float(_clamped_swiglu(a, b, None, n).astype(np.float32), x.dtype)


def _per_group(op: str, arg: str, value: np.ndarray, groups: int | None, width: int, allow_scalar: bool = False):
    """A per-group parameter ``[G, width]`` (with group_index) or ``[width]`` / ``[1, width]`` (without);
    returned as a ``[G or 1, width]`` view (``[1, 1]`` for an allowed scalar), dtype unchanged."""
    if groups is not None:
        _check.shape(op, arg, value, [(groups, width)], f"of shape [G, {width}] = [{groups}, {width}] (with group_index)")
        return value
    shapes = [(width,), (1, width)] + ([(1,)] if allow_scalar else [])
    _check.shape(op, arg, value, shapes, f"of shape [{width}] or [1, {width}]" + (" or [1]" if allow_scalar else "")
                 + " (without group_index)")
    return value.reshape(1, -1)


@dataclass(frozen=True)
class DequantSwigluQuantArgs:
    """The checked arguments of :func:`dequant_swiglu_quant` (see :func:`dequant_swiglu_quant_args`).

    Per-group parameters come back as ``[G or 1, width]`` views of the caller's arrays (dtype unchanged;
    ``[1, 1]`` for a scalar static ``quant_scale``), row 0 applying to every row without group_index.
    """

    x: np.ndarray                          # int32 / float16 / bfloat16 [T, 2H]
    t: int                                 # T, the rows
    h: int                                 # half width H
    quant_mode: int                        # 0 static, 1 dynamic
    activate_left: bool                    # the activated half is the left one
    swiglu_limit: float | None             # DeepSeek-V4's clamp (> 0), or None
    groups: int | None                     # G (with group_index), else None
    segments: tuple                        # ((group, start, stop), ...); ((0, 0, T),) without group_index
    total: int                             # rows written (sum of group_index, or T)
    weight_scale: np.ndarray | None        # float32 [G or 1, 2H]
    activation_scale: np.ndarray | None    # float32 [T, 1]
    bias: np.ndarray | None                # int32 [2H] (without group_index) or [G, 2H] (with it)
    quant_scale: np.ndarray | None         # [G or 1, H] ([1, 1]: scalar static); float32, fp16 / bf16 dynamic
    quant_offset: np.ndarray | None        # float32, quant_scale's normalized shape (static only)
    scalar: bool                           # a [1] static quant_scale without group_index (multiply by 1/s)
    group_index: np.ndarray | None         # int64 [G] group counts, as given, or None

    @property
    def is_int(self) -> bool:
        """x is an int32 accumulator (dequantized first)."""
        return self.x.dtype == _dt.int32


def dequant_swiglu_quant_args(x, *, weight_scale=None, activation_scale=None, bias=None, quant_scale=None,
                              quant_offset=None, group_index=None, activate_left=False, quant_mode=0,
                              swiglu_limit=None, numerics: Numerics = ASCEND) -> DequantSwigluQuantArgs:
    """The argument checks of :func:`dequant_swiglu_quant`, in its order, with its errors.

    Every implementation of the op (the golden, backends) calls this first. TypeError for dtypes;
    ValueError for shapes, combinations, ``swiglu_limit <= 0``, the group index, NaN/Inf under
    ``nan_policy="raise"``.
    """
    op = "dequant_swiglu_quant"
    C.check_numerics(op, numerics)
    x = _check.array(op, "x", x, dtypes=(_dt.int32, _dt.float16, _dt.bfloat16), ndim=2)
    t, h2 = x.shape
    if h2 % 2:
        _check.fail(op, "x", "of even last dimension [T, 2H]", _check.describe(x))
    h = h2 // 2
    quant_mode = _check.choice(op, "quant_mode", quant_mode, (0, 1))
    activate_left = C.boolean(op, "activate_left", activate_left)
    limit = None
    if swiglu_limit is not None:
        limit = C.real(op, "swiglu_limit", swiglu_limit)
        if limit <= 0:
            _check.fail(op, "swiglu_limit", "> 0 (DeepSeek-V4 uses 10.0) or None", repr(swiglu_limit))
    groups = None
    gi = _check.optional(op, "group_index", group_index, dtypes=(_dt.int64,), ndim=1)
    if gi is not None:
        groups = gi.shape[0]
        if h % 64 or h > _H_LIMIT:
            _check.fail(op, "x", f"of half width H a multiple of 64 and <= {_H_LIMIT} with group_index",
                        _check.describe(x))
    segs = C.group_segments(op, gi, 1, t, groups, arg="group_index") if gi is not None else [(0, 0, t)]
    is_int = x.dtype == _dt.int32
    ws = _check.optional(op, "weight_scale", weight_scale, dtypes=(_dt.float32,))
    act = _check.optional(op, "activation_scale", activation_scale, dtypes=(_dt.float32,))
    b = _check.optional(op, "bias", bias, dtypes=(_dt.int32,))
    if is_int and ws is None:
        _check.fail(op, "weight_scale", "a float32 dequant scale for int32 x", "None")
    for arg, value in (("weight_scale", ws), ("activation_scale", act), ("bias", b)):
        if value is not None and not is_int:
            _check.fail(op, arg, "None for float x (only an int32 x is dequantized)", _check.describe(value))
    if ws is not None:
        ws = _per_group(op, "weight_scale", ws, groups, h2)
    if act is not None:
        _check.shape(op, "activation_scale", act, [(t,), (t, 1)], f"of shape [T] or [T, 1] with T = {t}")
        act = act.reshape(t, 1)
    if b is not None:
        if gi is not None:
            # The group kernel adds bias[g] (CopyInBias(groupIdx), dequant_swiglu_quant.h:294-310); its
            # tiling checks a [G, 2H] bias (CheckScaleShapeWithDim, _tiling.cpp:386-420).
            _check.shape(op, "bias", b, [(groups, h2)], f"of shape [G, 2H] = [{groups}, {h2}] (with group_index)")
        else:
            _check.shape(op, "bias", b, [(h2,), (1, h2)], f"of shape [2H] = [{h2}] or [1, {h2}]")
            b = b.reshape(h2)
    qs_dtypes = (_dt.float32,) if quant_mode == 0 else (_dt.float32, _dt.float16, _dt.bfloat16)
    qs = _check.optional(op, "quant_scale", quant_scale, dtypes=qs_dtypes)
    qo = _check.optional(op, "quant_offset", quant_offset, dtypes=(_dt.float32,))
    scalar = False
    qs_g = qo_g = None
    if quant_mode == 0:
        if qs is None:
            _check.fail(op, "quant_scale", "a float32 static scale with quant_mode=0", "None")
        scalar = qs.shape == (1,) and gi is None
        qs_g = _per_group(op, "quant_scale", qs, groups, h, allow_scalar=True)
        if qo is not None:
            _check.same_shape(op, "quant_offset", qo, "quant_scale", qs)
            qo_g = qo.reshape(qs_g.shape)
    else:
        if qo is not None:
            _check.fail(op, "quant_offset", "None with quant_mode=1 (symmetric dynamic quantization)",
                        _check.describe(qo))
        qs_g = _per_group(op, "quant_scale", qs, groups, h) if qs is not None else None
    for arg, value in (("x", x), ("weight_scale", ws), ("activation_scale", act), ("quant_scale", qs),
                       ("quant_offset", qo)):
        C.check_finite(op, arg, value, numerics)
    if quant_mode == 0 and not scalar:  # o / quant_scale[g]: a zero divides (the scalar's 0 is static_zero_scale's)
        _check.nonzero_divisor(op, "quant_scale", qs, numerics)
    return DequantSwigluQuantArgs(x=x, t=t, h=h, quant_mode=quant_mode, activate_left=activate_left,
                                  swiglu_limit=limit, groups=groups, segments=tuple(segs),
                                  total=max((stop for _, _, stop in segs), default=0), weight_scale=ws,
                                  activation_scale=act, bias=b, quant_scale=qs_g, quant_offset=qo_g, scalar=scalar,
                                  group_index=gi)


@golden_op("moe", check=dequant_swiglu_quant_args, mirrors="torch_npu.npu_dequant_swiglu_quant")
def dequant_swiglu_quant(x: np.ndarray, *, weight_scale: np.ndarray | None = None,
                         activation_scale: np.ndarray | None = None, bias: np.ndarray | None = None,
                         quant_scale: np.ndarray | None = None, quant_offset: np.ndarray | None = None,
                         group_index: np.ndarray | None = None, activate_left: bool = False, quant_mode: int = 0,
                         swiglu_limit: float | None = None,
                         numerics: Numerics = ASCEND) -> tuple[np.ndarray, np.ndarray]:
    """Dequant + SwiGLU + int8 quant, mirroring ``torch_npu.npu_dequant_swiglu_quant``.

    Parameters
    ----------
    x : int32 ``[T, 2H]`` (a raw grouped-matmul accumulator) or float16 / bfloat16 ``[T, 2H]``.
    weight_scale : float32 ``[G, 2H]`` (with group_index) or ``[2H]`` / ``[1, 2H]``. Required for
        int32 x; must be None for float x (no dequant then).
    activation_scale : float32 ``[T]`` or ``[T, 1]``, int32 x only (optional).
    bias : int32, int32 x only: ``[2H]`` / ``[1, 2H]`` without group_index, ``[G, 2H]`` with it (the
        group kernel adds row ``bias[g]``: ``CopyInBias(groupIdx)``); added to x before the float
        conversion.
    quant_scale : ``quant_mode=1``: optional smooth scale (float32 / float16 / bfloat16), ``[G, H]``
        or ``[H]`` / ``[1, H]``, multiplied in; ``quant_mode=0``: required float32 ``[G, H]`` /
        ``[H]`` / ``[1, H]``, or ``[1]`` (a scalar), divided by.
    quant_offset : ``quant_mode=0`` only: float32 of quant_scale's shape (0 when omitted).
    group_index : int64 ``[G]`` counts (tokens per group), ``sum <= T``; with it ``H`` must be a
        multiple of 64 and ``<= 10496`` (device limits).
    activate_left : True: ``silu(x[:, :H]) * x[:, H:]`` (as npu_swiglu; what vllm-ascend and SGLang
        pass); False (the default): ``silu(x[:, H:]) * x[:, :H]``.
    quant_mode : 0 static, 1 dynamic per row.
    swiglu_limit : **not a torch_npu argument** (this project's): DeepSeek-V4's clamp
        ``gate = min(gate, L)``, ``up = clip(up, -L, L)`` before ``silu(gate) * up``; ``L > 0``.
    numerics : fields used: ``transcendental``, ``round_mode``, ``zero_row``, ``saturate``,
        ``nan_policy``; the kernel (:func:`w8a8.variants.select`) decides ``quant_codes``,
        ``scale_out`` and ``static_zero_scale``.

    Returns ``(y int8 [T, H], scale float32 [T])``.

    Formula (fp32; ``g`` = group of row t, 0 without group_index)::

        v = fp32(x[t] + bias[g]) * weight_scale[g] * activation_scale[t]   # int32 x; fp32(x) otherwise
        gate, up = (v[:H], v[H:]) if activate_left else (v[H:], v[:H])
        [swiglu_limit: gate = min(gate, L); up = clip(up, -L, L)]
        o = gate / (1 + exp(-gate)) * up
        dynamic: o = o * smooth[g];  m = rowmax|o|
            with group_index (group kernel, dequant_swiglu_quant.h:662-719):
                scale = m * fp32(1/127);  y = RINT(o / scale)
            without (legacy kernels, dequant_swiglu_quant_dynamic_base.hpp:184-191):
                scale = m / 127;  y = RINT(o * fp32(1 / scale))
        static:  y = RINT(o / quant_scale[g] + quant_offset[g]);  scale = 0
                 [1] quant_scale (without group_index, legacy static_base.hpp:74): o * (1 / s) + offset,
                 no zero guard (s = 0: +-inf / NaN -> saturated / 0)

    An all-zero dynamic row has scale 0 and codes ``numerics.zero_row`` (0). The static mode's
    scale output is not specified by the device (the golden writes 0). **Rows past
    sum(group_index)** are not written by the device (undefined, possibly Inf/NaN); the golden
    writes 0 codes and scale 0 — compare only :func:`valid_rows` ``(group_index, T,
    group_list_type=1)``. The device ignores ``quant_offset`` with group_index in dynamic mode; the
    golden refuses it instead (a caller passing it has a bug).

    Errors: TypeError for dtypes; ValueError for shapes, combinations, ``swiglu_limit <= 0``,
    NaN/Inf, and a zero in a static ``quant_scale`` that divides (every form but the ``[1]`` scalar,
    whose zero ``numerics.static_zero_scale`` defines) under ``nan_policy="raise"``; OverflowError when
    ``x + bias`` leaves int32.
    """
    a = dequant_swiglu_quant_args(x, weight_scale=weight_scale, activation_scale=activation_scale, bias=bias,
                                  quant_scale=quant_scale, quant_offset=quant_offset, group_index=group_index,
                                  activate_left=activate_left, quant_mode=quant_mode, swiglu_limit=swiglu_limit,
                                  numerics=numerics)
    op = "dequant_swiglu_quant"
    n = _variants.dequant_swiglu_quant(a, numerics).numerics(numerics)
    x, t, h, groups, b, act = a.x, a.t, a.h, a.groups, a.bias, a.activation_scale
    is_int, activate_left, limit, scalar = a.is_int, a.activate_left, a.swiglu_limit, a.scalar
    ws = None if a.weight_scale is None else a.weight_scale.astype(np.float32)
    qs_f = None if a.quant_scale is None else a.quant_scale.astype(np.float32)
    qo_f = None
    if a.quant_mode == 0:
        qo_f = np.zeros_like(qs_f) if a.quant_offset is None else a.quant_offset.astype(np.float32)

    y = np.zeros((t, h), np.int8)
    scale = np.zeros(t, np.float32)
    nan_code = 0 if n.zero_row == "zero" else -128
    for g, start, stop in a.segments:
        if stop == start:
            continue
        rows = slice(start, stop)
        if is_int:
            acc = x[rows]
            if b is not None:
                acc = add_int32(op, acc, b if groups is None else b[g])
            with np.errstate(over="ignore", invalid="ignore"):
                v = acc.astype(np.float32) * ws[0 if groups is None else g]
                if act is not None:
                    v = v * act[rows]
        else:
            v = x[rows].astype(np.float32)
        gate, up = (v[:, :h], v[:, h:]) if activate_left else (v[:, h:], v[:, :h])
        o = _clamped_swiglu(gate, up, limit, n).astype(np.float32)
        gsel = 0 if groups is None else g
        if a.quant_mode == 1:
            if qs_f is not None:
                with np.errstate(over="ignore", invalid="ignore"):
                    o = o * qs_f[gsel]
            y[rows], scale[rows] = quantize_rows(o, RowQuant(127, codes=n.quant_codes, scale=n.scale_out,
                                                             round_mode=n.round_mode, nan_code=nan_code,
                                                             saturate=n.saturate))
        else:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                if scalar:
                    s0 = qs_f[0, 0] if (qs_f[0, 0] != 0 or n.static_zero_scale == "ieee") else np.float32(1)
                    r = o * (np.float32(1) / s0) + qo_f[0, 0]
                else:
                    r = o / qs_f[gsel] + qo_f[gsel]
            y[rows] = to_int(r.astype(np.float32), _dt.int8, mode=n.round_mode, saturate=n.saturate, nan_value=0)
    return y, scale
