"""``npu_weight_quant_batchmatmul``: the W8A16 / W4A16 weight-only matmul (op-plugin
``test_npu_weight_quant_batchmatmul.py``; ops-nn ``matmul/weight_quant_batch_matmul_v2/``).

``y = x @ ((w + antiquant_offset) * antiquant_scale) + bias``, optionally requantized to int8
with ``quant_scale`` / ``quant_offset`` (aclnnWeightQuantBatchMatmulV2). The antiquant offset is
**added**: it is the negated zero point (``-z``), as in :func:`w8a8.anti_quant`.

Computation order (the Custom kernel, ``weight_quant_batch_matmul_v2_common.h`` / ``anti_quant.h``)::

    bf16 x:  w_hat = cast_bf16( (fp32(w) + fp32(offset)) * fp32(scale) )   # fp32 antiquant, one RINT cast
    fp16 x:  w_hat = fp16( fp16(half(w) + offset) * scale )               # half Adds, then half Muls
    acc   = x @ w_hat, products exact, summed exactly (float64), rounded once to fp32
    acc   = acc + fp32(bias)                                          # fp32
    y     = cast_x_dtype(acc)                                         # RNE
      or, with quant_scale:  y = sat_int8(rint(acc * qs[n] + qo[n]))

* The weight is dequantized **to x's dtype** before the matmul: the cube multiplies two fp16 /
  bf16 operands with fp32 accumulation. The antiquant type is ``AntiQuantCalType<biasType>``: half
  for fp16 x, float for bf16 x (``weight_quant_batch_matmul_v2_common.h:83-100``), so with an fp16 x
  and an offset the weight is rounded to fp16 twice (``anti_quant.h:265-280``:
  ``Numerics.antiquant_precision="x_dtype"``); without an offset the fp16 product of an int8 code and
  an fp16 scale is exact in fp32, so both orders give one rounding.
* Kernel variants (:func:`w8a8.variants.select`): for per-channel calls with ``M <= 64`` and K, N
  multiples of 32 (and int4 per-group ``M <= G/8``) the host tiling runs the **MSD** kernels, a
  different algorithm (x split into int8 digits, exact integer GEMMs, a ``CAST_ROUND`` output) that
  the golden does **not** model: it computes the Custom formula there (a tolerance-level difference).
* The fp32 accumulation order of the device is not specified; the golden's sum is exact before
  one fp32 rounding, so a device differs by fp32 summation error only (a tolerance matter).
* A float32 ``quant_scale`` is used at full precision; an int64 one (from
  :func:`w8a8.trans_quant_param`) is decoded to its FP19 value and its packed offset, and then
  ``quant_offset`` must be None (the golden's choice: the offset travels in the packed bits). Where
  an fp32 ``quant_scale`` is also reduced to FP19 on the device is **not confirmed**.
* The requant rounding is RINT (half to even), saturating to [-128, 127] (not confirmed; the
  quant_matmul golden's 9-bit intermediate clamp is not applied here).
* ``inner_precise`` (0 high precision, 1 high performance) is accepted and does not change the
  golden result.
* NaN / Inf in ``x`` propagate with IEEE fp32 semantics (an int8 output writes 0 for NaN and
  saturates Inf); NaN / Inf in the scale, offset and bias parameters are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from .. import dtypes as _dt
from ..int4 import unpack_int4
from ..numerics import ASCEND, Numerics
from ..registry import golden_op
from ..rounding import to_float, to_int
from ..trans_quant_param import decode_quant_param
from ..variants import calls as _variants

__all__ = ["weight_quant_batchmatmul"]

_OP = "weight_quant_batchmatmul"
_DIM_LIMIT = 65535


@dataclass(frozen=True, eq=False)
class WeightQuantBatchmatmulArgs:
    """The checked arguments of :func:`weight_quant_batchmatmul` (:func:`weight_quant_batchmatmul_args`):
    the caller's arrays, reshaped where said (views, no arithmetic)."""

    x: np.ndarray
    """float16 / bfloat16 ``[M, K]``."""
    weight: np.ndarray
    """The weight as given (see :attr:`layout`)."""
    layout: str
    """``"int8"`` (``[K, N]``), ``"int4_n"`` (int32 ``[K, N/8]``, packed along N) or ``"int4_k"`` (int32
    ``[K/8, N]``, packed along K)."""
    n: int
    """N, the output columns."""
    scale: np.ndarray
    """The antiquant scale as rows ``[R, N or 1]``: R = 1 (per tensor / per channel) or ceil(K/G) (per
    group); with :attr:`packed`, int64 ``[1, N]``."""
    group: int | None
    """G for the per-group form, else None."""
    offset: np.ndarray | None
    """The antiquant offset, shaped like :attr:`scale` (int32 ``[1, N]`` with :attr:`packed`), or None."""
    packed: bool
    """The scale is the packed int64 FP19 scale of :func:`w8a8.trans_quant_param`."""
    quant_scale: np.ndarray | None
    """None (no requant), or float32 / int64 ``[Q]`` (Q = 1 or N): int8 output."""
    quant_offset: np.ndarray | None
    """float32 ``[Q]``, or None."""
    bias: np.ndarray | None
    """``[B]`` (B = 1 or N), or None."""


def weight_quant_batchmatmul_args(x, weight, antiquant_scale, antiquant_offset=None, quant_scale=None,
                                   quant_offset=None, bias=None, antiquant_group_size=0,
                                   inner_precise=0, *, numerics: Numerics = ASCEND) -> WeightQuantBatchmatmulArgs:
    """The argument checks of :func:`weight_quant_batchmatmul`, in its order (public: the backends
    run them before their own arithmetic). Returns :class:`WeightQuantBatchmatmulArgs`."""
    if not isinstance(numerics, Numerics):
        _check.fail(_OP, "numerics", "a w8a8.Numerics", _check.describe(numerics), TypeError)
    x = _check.array(_OP, "x", x, dtypes=(_dt.float16, _dt.bfloat16), ndim=2)
    _check.finite_under(_OP, numerics, (("x", x),))
    m, k = x.shape
    weight, layout, n = _weight(x, weight)
    _check.choice(_OP, "inner_precise", inner_precise, (0, 1))
    for arg, dim in (("K", k), ("N", n)):
        if not 1 <= dim <= _DIM_LIMIT:
            _check.fail(_OP, "weight" if arg == "N" else "x", f"{arg} in [1, {_DIM_LIMIT}]", f"{arg} = {dim}")
    s = _check.array(_OP, "antiquant_scale", antiquant_scale, dtypes=(x.dtype, _dt.int64), min_ndim=1, max_ndim=2)
    g = _check.integer(_OP, "antiquant_group_size", antiquant_group_size, minimum=0)
    packed = s.dtype == _dt.int64
    if packed:
        s, o = _packed_antiquant(x, weight, s, antiquant_offset, n, m, k)
        group = None
    else:
        s, o, group = _float_antiquant(x, s, antiquant_offset, g, n, k)
    qs, qo = _quant_params(quant_scale, quant_offset, n, packed)
    return WeightQuantBatchmatmulArgs(x, weight, layout, n, s, group, o, packed, qs, qo, _bias(x, bias, n))


@golden_op("lowbit", check=weight_quant_batchmatmul_args, mirrors="torch_npu.npu_weight_quant_batchmatmul")
def weight_quant_batchmatmul(x: np.ndarray, weight: np.ndarray, antiquant_scale: np.ndarray,
                             antiquant_offset: np.ndarray | None = None, quant_scale: np.ndarray | None = None,
                             quant_offset: np.ndarray | None = None, bias: np.ndarray | None = None,
                             antiquant_group_size: int = 0, inner_precise: int = 0, *,
                             numerics: Numerics = ASCEND) -> np.ndarray:
    """Weight-only quantized matmul mirroring ``torch_npu.npu_weight_quant_batchmatmul``.

    Parameters
    ----------
    x : float16 or bfloat16 ``[M, K]``.
    weight : the ``[K, N]`` weight, one of
        * int8 ``[K, N]`` (W8A16; any strided view, e.g. ``w_nk.T``);
        * int32 ``[K, N/8]``: int4 packed 8 per word **along N**, LSB first, signed
          (:func:`convert_weight_to_int4pack` of a ``[K, N]`` int32 weight);
        * int32 ``[K/8, N]``: int4 packed **along K** — the transposed view of a ``[N, K/8]``
          packed weight (the vendor's ``weight_int4.transpose(-1, -2)``).
        Which of the last two is meant is read from the shape against x's K (``[K, N/8]`` has K
        rows, ``[K/8, N]`` has K/8; they never coincide for K >= 1).
    antiquant_scale : x's dtype (float16 / bfloat16); per-tensor ``(1,)`` / ``(1, 1)``,
        per-channel ``(N,)`` / ``(1, N)``, per-group ``(ceil(K/G), N)``. Or int64 (the packed
        FP19 scale of :func:`w8a8.trans_quant_param`): float16 x, int8 weight, per-channel only,
        M in [1, 96], K and N multiples of 64.
    antiquant_offset : optional, antiquant_scale's shape; x's dtype, or int32 with an int64 scale.
    quant_scale : optional float32 or int64 ``(N,)`` / ``(1, N)`` / ``(1,)``: int8 output.
    quant_offset : optional float32 of quant_scale's shape (float32 quant_scale only).
    bias : optional ``(N,)`` / ``(1, N)`` / ``(1,)``: float32 for bfloat16 x, float16 for float16 x.
    antiquant_group_size : G for the per-group form: a multiple of 32 in [32, K - 1]; 0 otherwise
        (ignored by the other forms, as on the device).
    inner_precise : 0 or 1 (no effect on the golden result).
    numerics : ``antiquant_precision`` (decided by the kernel under ``variants="select"``: ``"x_dtype"``
        for fp16 x, ``"fp32"`` for bf16 x); ``platform`` picks the chip; ``antiquant_dtype``
        (``"float32"``: ``w_hat`` is not rounded to x's dtype before the matmul — onnxruntime
        ``MatMulNBits``; with ``antiquant_precision="x_dtype"`` the intermediate roundings stay, the
        final one is dropped).

    Returns
    -------
    ``[M, N]`` of x's dtype, or int8 with ``quant_scale``. Formula: module docstring.

    Errors
    ------
    TypeError for dtypes outside the lists above; ValueError for ranks, shapes, K / N outside
    [1, 65535], the group size, a forbidden combination, NaN/Inf in a float parameter (always), NaN/Inf
    in x (under ``numerics.nan_policy="raise"``: the int8 output of ``quant_scale`` has no specified
    code for NaN, and the golden refuses it for every output dtype alike).
    """
    p = weight_quant_batchmatmul_args(x, weight, antiquant_scale, antiquant_offset, quant_scale, quant_offset, bias,
                                       antiquant_group_size, inner_precise, numerics=numerics)
    n = _variants.weight_quant_batchmatmul(p, numerics).numerics(numerics)
    x = p.x
    k = x.shape[1]
    w = _codes(p)
    if p.packed:
        sf, _ = decode_quant_param(p.scale)
        of = None if p.offset is None else p.offset.astype(np.float32)
    else:
        sf = _rows(_as_2d(p.scale), p.group, k)
        of = None if p.offset is None else _rows(_as_2d(p.offset), p.group, k)
    w_hat = _antiquant(w, sf, of, x.dtype, n.antiquant_precision, keep_fp32=n.antiquant_dtype == "float32")
    qs, qo = _quant_values(p.quant_scale, p.quant_offset)
    b = None if p.bias is None else p.bias.astype(np.float32)
    acc = np.matmul(x.astype(np.float64), w_hat.astype(np.float64)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        if b is not None:
            acc = acc + b
        if qs is None:
            return to_float(acc.astype(np.float32), x.dtype)
        return to_int((acc * qs + qo).astype(np.float32), _dt.int8)


def _weight(x: np.ndarray, weight) -> tuple[np.ndarray, str, int]:
    """The checked weight, its layout and N."""
    weight = _check.array(_OP, "weight", weight, dtypes=(_dt.int8, _dt.int32), ndim=2)
    k = x.shape[1]
    if weight.dtype == _dt.int8:
        if weight.shape[0] != k:
            _check.fail(_OP, "weight", f"of shape [K={k}, N] (K of x)", _check.describe(weight))
        return weight, "int8", weight.shape[1]
    if weight.shape[0] == k:  # [K, N/8], packed along N
        return weight, "int4_n", weight.shape[1] * 8
    if weight.shape[0] * 8 == k:  # [K/8, N], packed along K (a transposed [N, K/8])
        return weight, "int4_k", weight.shape[1]
    _check.fail(_OP, "weight", f"int32-packed int4 of shape [K, N/8] or [K/8, N] with K = {k} (K of x)",
                _check.describe(weight))


def _codes(p: WeightQuantBatchmatmulArgs) -> np.ndarray:
    """The weight as int8/int4 codes ``[K, N]`` (int8 array)."""
    if p.layout == "int8":
        return p.weight
    if p.layout == "int4_n":
        return unpack_int4(p.weight)
    return np.ascontiguousarray(unpack_int4(np.ascontiguousarray(p.weight.T)).T)


def _float_antiquant(x, s, offset, g, n, k):
    """Per-tensor / per-channel / per-group scale and offset as rows ``[R, N or 1]``, and the group."""
    shape = tuple(s.shape)
    if shape in ((1,), (1, 1), (n,), (1, n)):  # per tensor, per channel
        rows = None
    elif s.ndim == 2 and s.shape[1] == n and s.shape[0] > 1:
        if g == 0:
            _check.fail(_OP, "antiquant_group_size", f"the group size G (scale of shape (ceil(K/G), N) = {shape})", "0")
        if g % 32 or not 32 <= g <= k - 1:
            _check.fail(_OP, "antiquant_group_size", f"a multiple of 32 in [32, K - 1 = {k - 1}]", str(g))
        if s.shape[0] != -(-k // g):
            _check.fail(_OP, "antiquant_scale", f"of shape (ceil(K/G), N) = ({-(-k // g)}, {n}) for G = {g}",
                        _check.describe(s))
        rows = g
    else:
        _check.fail(_OP, "antiquant_scale", f"of shape (1,), (1, 1), ({n},), (1, {n}) or (ceil(K/G), {n})",
                    _check.describe(s))
    _check.finite(_OP, "antiquant_scale", s, ieee_escape=False)
    o = _offset_of(offset, "antiquant_offset", x.dtype, "antiquant_scale", s)
    return _row_view(s), None if o is None else _row_view(o), rows


def _row_view(v: np.ndarray) -> np.ndarray:
    """A 1-D ``(n,)`` parameter as the row ``[1, n]``; 2-D kept (a view)."""
    return v.reshape(1, -1) if v.ndim == 1 else v


def _as_2d(v: np.ndarray) -> np.ndarray:
    """A row parameter ``[R, n]`` (:func:`_row_view`) as float32."""
    return v.astype(np.float32)


def _rows(v: np.ndarray, group: int | None, k: int) -> np.ndarray:
    """A ``[R, N or 1]`` parameter expanded to ``[K, N or 1]`` (per-group) or kept ``[1, N or 1]``."""
    return v if group is None else np.repeat(v, group, axis=0)[:k]


def _packed_antiquant(x, weight, s, offset, n, m, k):
    """The int64 antiquant scale path: fp16 x, int8 weight (not int4), per-channel, int32 offset.

    Returns the scale as int64 ``[1, N]`` and the offset as int32 ``[1, N]`` (or None)."""
    if x.dtype != _dt.float16:
        _check.fail(_OP, "antiquant_scale", "float16 or bfloat16 (x's dtype); int64 only with float16 x",
                    _check.describe(s), TypeError)
    if weight.dtype != _dt.int8:
        _check.fail(_OP, "weight", "int8 with an int64 antiquant_scale", _check.describe(weight), TypeError)
    if tuple(s.shape) not in ((n,), (1, n)):
        _check.fail(_OP, "antiquant_scale", f"per-channel ({n},) or (1, {n}) when int64", _check.describe(s))
    if not 1 <= m <= 96 or k % 64 or n % 64:
        _check.fail(_OP, "x", "M in [1, 96] and K, N multiples of 64 with an int64 antiquant_scale",
                    f"M={m}, K={k}, N={n}")
    o = _offset_of(offset, "antiquant_offset", _dt.int32, "antiquant_scale", s)
    return s.reshape(1, n), None if o is None else o.reshape(1, n)


def _antiquant(w: np.ndarray, sf: np.ndarray, of: np.ndarray | None, dtype, precision: str, *,
               keep_fp32: bool = False) -> np.ndarray:
    """``w_hat`` in x's dtype ``dtype`` (float32 with ``keep_fp32``, ``antiquant_dtype="float32"``: the
    final rounding dropped): ``(w + offset) * scale`` in fp32 with one rounding (``precision="fp32"``)
    or in x's dtype with a rounding after the add and after the multiply (``"x_dtype"``; each fp32
    result of two fp16 operands rounded to fp16 is the correctly rounded fp16 result: the codes are
    exact in fp16, a product of two fp16 values is exact in fp32, a sum is exact unless the smaller
    operand is below a quarter ulp of the larger)."""
    v = w.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        if of is not None:
            v = v + of
            if precision == "x_dtype":
                v = to_float(v.astype(np.float32), dtype).astype(np.float32)
        v = (v * sf).astype(np.float32)
        return v if keep_fp32 else to_float(v, dtype)


def _quant_params(quant_scale, quant_offset, n, packed_antiquant):
    """The checked requant parameters, 1-D (views): ``(quant_scale, quant_offset)``."""
    if quant_scale is None:
        if quant_offset is not None:
            _check.fail(_OP, "quant_offset", "None without quant_scale", _check.describe(quant_offset))
        return None, None
    if packed_antiquant:
        _check.fail(_OP, "quant_scale", "None with an int64 antiquant_scale", _check.describe(quant_scale))
    qs = _check.array(_OP, "quant_scale", quant_scale, dtypes=(_dt.float32, _dt.int64), min_ndim=1, max_ndim=2)
    if tuple(qs.shape) not in ((1,), (n,), (1, n), (1, 1)):
        _check.fail(_OP, "quant_scale", f"of shape ({n},), (1, {n}) or (1,)", _check.describe(qs))
    if qs.dtype == _dt.int64:
        if quant_offset is not None:
            _check.fail(_OP, "quant_offset", "None with an int64 quant_scale (its offset is in the packed bits)",
                        _check.describe(quant_offset))
        return qs.reshape(-1), None
    _check.finite(_OP, "quant_scale", qs, ieee_escape=False)
    qo = _offset_of(quant_offset, "quant_offset", _dt.float32, "quant_scale", qs)
    return qs.reshape(-1), None if qo is None else qo.reshape(-1)


def _offset_of(offset, arg: str, dtype, scale_arg: str, scale: np.ndarray) -> np.ndarray | None:
    """An optional offset: of ``dtype``, of its scale's shape, finite."""
    if offset is None:
        return None
    o = _check.array(_OP, arg, offset, dtypes=(dtype,))
    _check.same_shape(_OP, arg, o, scale_arg, scale)
    _check.finite(_OP, arg, o, ieee_escape=False)
    return o


def _quant_values(qs, qo):
    """fp32 ``(quant_scale, quant_offset)`` of the checked requant parameters (None without them):
    an int64 scale decoded to its FP19 value and packed offset; a missing offset is 0."""
    if qs is None:
        return None, None
    if qs.dtype == _dt.int64:
        return decode_quant_param(qs)
    return qs, (np.zeros(1, np.float32) if qo is None else qo)


def _bias(x, bias, n):
    """The checked bias, 1-D (a view), or None."""
    if bias is None:
        return None
    want = _dt.float32 if x.dtype == _dt.bfloat16 else _dt.float16
    b = _check.array(_OP, "bias", bias, min_ndim=1, max_ndim=2)
    if b.dtype != want:
        _check.fail(_OP, "bias", f"{want.name} for {x.dtype.name} x", _check.describe(b), TypeError)
    if tuple(b.shape) not in ((n,), (1, n), (1,), (1, 1)):
        _check.fail(_OP, "bias", f"of shape ({n},), (1, {n}) or (1,)", _check.describe(b))
    _check.finite(_OP, "bias", b, ieee_escape=False)
    return b.reshape(-1)
