"""The two W8A8 Linear serving paths, end to end, as SGLang / vllm-ascend run them on Ascend.

Both take the weight as the checkpoint stores it (int8 ``[N, K]``, ``nn.Linear`` layout) and do the
load-time conversion the serving code does (transpose to ``[K, N]``; the NZ cast changes storage
only, not values) before the forward (SGLang ``hardware_backend/npu/quantization/linear_method_npu.py``;
vllm-ascend ``vllm_ascend/quantization/methods/w8a8_static.py``, ``w8a8_dynamic.py``).

Each path's checks are one public function that the op calls first and the backends call instead of
copying them: :func:`w8a8_dynamic_linear_args` / :func:`w8a8_static_linear_args` (the checks of the ops
the path runs included, on the parameters as loaded), with the load steps on their own for callers
without an activation: :func:`dynamic_linear_params`, :func:`static_activation_params`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _check
from . import dtypes as _dt
from .dynamic_quant import (DynamicQuantArgs, dynamic_quant_args, dynamic_quant_asymmetric_args,
                            dynamic_quant_asymmetric_from_args, dynamic_quant_from_args)
from .intgemm import int_matmul
from . import serving as _serving
from .numerics import ASCEND, Numerics
from .variants import calls as _variants
from .quant_matmul import effective_scale, epilogue, quant_matmul_args, quant_matmul_stages
from .quantize import QuantizeArgs, quantize_args, quantize_from_args
from .registry import golden_op

__all__ = ["w8a8_dynamic_linear", "w8a8_static_linear", "dynamic_linear_stages", "static_linear_stages"]

_X_DTYPES = (_dt.bfloat16, _dt.float16)
_FLOAT_BIAS = (_dt.float32, _dt.bfloat16, _dt.float16)
_DYN = "w8a8_dynamic_linear"
_STATIC = "w8a8_static_linear"
_DYN_NAMES = ("weight", "weight_scale", "bias")


def _weight(op: str, x: np.ndarray, weight) -> tuple[np.ndarray, int, int]:
    weight = _check.array(op, "weight", weight, dtypes=(_dt.int8,), ndim=2)
    n, k = weight.shape
    if k == 0:
        # aclnn returns before any kernel for an empty tensor: the quantized input is never written and
        # the matmul's output is whatever the allocation held; the golden refuses rather than invent it
        _check.fail(op, "weight", "[N, K] with K >= 1 (K = 0 leaves the device's output unwritten)",
                    _check.describe(weight))
    if x.shape[-1] != k:
        _check.fail(op, "x", f"of last dimension K = {k} (weight is [N, K] = {weight.shape})", _check.describe(x))
    return weight, n, k


def _vector(op: str, arg: str, value, n: int, dtypes) -> np.ndarray:
    """A checkpoint vector ``[n]`` or ``[n, 1]`` as 1-D."""
    value = _check.array(op, arg, value, dtypes=dtypes)
    if value.shape not in ((n,), (n, 1)):
        _check.fail(op, arg, f"of shape [{n}] or [{n}, 1]", _check.describe(value))
    return value.reshape(n)


def _model_dtype(op: str, x_dtype) -> np.dtype:
    dt = _dt.resolve(x_dtype, arg="x_dtype", op=op)
    if dt not in _X_DTYPES:
        _check.fail(op, "x_dtype", "bfloat16 or float16 (the model dtype)", repr(x_dtype), TypeError)
    return dt


def _check_matmul(m: int, k: int, n: int, scale: np.ndarray, bias, out, pertoken: bool, numerics: Numerics) -> None:
    """:func:`~w8a8.quant_matmul.quant_matmul_args` on the loaded parameters of a Linear.

    The operands (the quantized activation ``[m, K]``, the weight ``[K, N]`` and the per-token scale)
    stand in with their shapes and dtypes: those checks are the same, and their messages describe
    the same shapes and dtypes.
    """
    pt = _check.stand_in(np.float32, (m,)) if pertoken else None
    quant_matmul_args(_check.stand_in(np.int8, (m, k)), _check.stand_in(np.int8, (k, n)), scale, pertoken_scale=pt,
                      bias=bias, output_dtype=out, numerics=numerics)


# -- W8A8_DYNAMIC ------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class DynamicLinearParams:
    """A ``W8A8_DYNAMIC`` Linear's parameters after load (SGLang ``process_weights_after_loading``)."""

    weight: np.ndarray
    """int8 ``[N, K]``, the checkpoint layout (the forward uses ``weight.T``)."""
    n: int
    """N, the output features."""
    k: int
    """K, the input features."""
    weight_scale: np.ndarray
    """``[N]``: bfloat16 for a bf16 model (the fp32 checkpoint scale rounded!), float32 for fp16."""
    bias: np.ndarray | None
    """``[N]`` in the model dtype, or None."""


@dataclass(frozen=True, eq=False)
class W8a8DynamicLinearArgs:
    """The checked arguments of :func:`w8a8_dynamic_linear`: the activation, the loaded parameters and
    the checked ``dynamic_quant`` call on the flattened activation."""

    x: np.ndarray
    """bfloat16 / float16 ``[..., K]``."""
    params: DynamicLinearParams
    """The weight, scale and bias as loaded (:func:`dynamic_linear_params`)."""
    quant: DynamicQuantArgs
    """:func:`~w8a8.dynamic_quant.dynamic_quant_args` of ``x.reshape(-1, K)`` (``dynamic_quant_asymmetric_args``
    under ``numerics.act_quant="asymmetric"``)."""


def _dynamic_load(op: str, names, x_dtype, n: int, weight_scale, bias) -> tuple[np.ndarray, np.ndarray | None]:
    """The checkpoint ``weight_scale`` / ``bias`` checked and converted as SGLang loads them."""
    ws = _vector(op, names[1], weight_scale, n, (_dt.float32, _dt.bfloat16))
    b = None if bias is None else _vector(op, names[2], bias, n, _FLOAT_BIAS)
    # SGLang registers weight_scale in params_dtype: bf16 for a bf16 model, so the fp32 checkpoint
    # scale is rounded to bf16. An fp16 scale is illegal for npu_quant_matmul; fp16 models use the
    # fp32 copy (vllm-ascend's weight_scale_fp32). A value beyond the model dtype's range becomes
    # +-Inf, as the torch cast makes it; quant_matmul's checks then refuse it.
    with np.errstate(over="ignore"):
        ws = ws.astype(_dt.bfloat16) if x_dtype == _dt.bfloat16 else ws.astype(np.float32)
        b = None if b is None else b.astype(x_dtype)
    return ws, b


def dynamic_linear_params(x_dtype, k: int, weight, weight_scale, bias=None, *, numerics: Numerics = ASCEND,
                          op: str = _DYN, names: tuple[str, str, str] = _DYN_NAMES) -> DynamicLinearParams:
    """Check a ``W8A8_DYNAMIC`` Linear's checkpoint parameters and load them for an activation of
    ``x_dtype`` (bfloat16 / float16) with ``K = k``: the load step of :func:`w8a8_dynamic_linear`.

    ``weight`` int8 ``[N, K]`` (a K other than ``k`` is a ValueError naming the weight),
    ``weight_scale`` float32 / bfloat16 ``[N]`` or ``[N, 1]``, ``bias`` float ``[N]`` or None; then
    :func:`~w8a8.quant_matmul.quant_matmul_args` on the loaded values (N <= 65535, a scale or bias
    that became Inf). ``op`` / ``names`` name the op and the three arguments in messages (a caller
    that loads, e.g., a shared expert's projections).
    """
    x_dtype = _model_dtype(op, x_dtype)
    k = _check.integer(op, "k", k, minimum=0)
    weight = _check.array(op, names[0], weight, dtypes=(_dt.int8,), ndim=2)
    n = weight.shape[0]
    if weight.shape[1] != k:
        _check.fail(op, names[0], f"of shape [N, K] with K = {k} (the last dim of the activation)",
                    _check.describe(weight))
    ws, b = _dynamic_load(op, names, x_dtype, n, weight_scale, bias)
    _check_matmul(1, k, n, ws, b, x_dtype, True, numerics)
    return DynamicLinearParams(weight=weight, n=int(n), k=k, weight_scale=ws, bias=b)


def w8a8_dynamic_linear_args(x, weight, weight_scale, *, bias=None,
                             numerics: Numerics = ASCEND, serving=None) -> W8a8DynamicLinearArgs:
    """Every argument check of :func:`w8a8_dynamic_linear`, in its order, with its exceptions and
    messages: its own (dtypes, shapes), then those of the ``dynamic_quant`` and ``quant_matmul`` it
    runs (NaN/Inf in x, N <= 65535, a scale or bias that became Inf at load). Returns the activation,
    the loaded parameters and the checked ``dynamic_quant`` call."""
    op = _DYN
    _serving.get(serving, op)   # both engines compose the float-input Linear alike (docstring of the op)
    x = _check.array(op, "x", x, dtypes=_X_DTYPES, min_ndim=1)
    weight, n, k = _weight(op, x, weight)
    _check.finite_under(op, numerics, (("x", x), ("weight_scale", weight_scale), ("bias", bias)))
    ws, b = _dynamic_load(op, _DYN_NAMES, x.dtype, n, weight_scale, bias)
    x2 = x.reshape(-1, k)
    if numerics.act_quant == "asymmetric":
        if numerics.asym_zero_point != "integer":
            _check.fail(op, "numerics", "asym_zero_point='integer' with act_quant='asymmetric' (the zero point "
                        "enters the int32 accumulator)", f"asym_zero_point={numerics.asym_zero_point!r}")
        quant = dynamic_quant_asymmetric_args(x2, numerics=numerics)
    else:
        quant = dynamic_quant_args(x2, numerics=numerics)
    _check_matmul(x2.shape[0], k, n, ws, b, x.dtype, True, numerics)
    params = DynamicLinearParams(weight=weight, n=int(n), k=int(k), weight_scale=ws, bias=b)
    return W8a8DynamicLinearArgs(x=x, params=params, quant=quant)


def dynamic_linear_stages(x: np.ndarray, weight: np.ndarray, weight_scale: np.ndarray, *,
                          bias: np.ndarray | None = None, numerics: Numerics = ASCEND,
                          serving=None) -> dict[str, np.ndarray]:
    """:func:`w8a8_dynamic_linear` with every intermediate: ``x_q``, ``x_scale``, ``weight_kn``,
    ``weight_scale`` (as loaded), ``bias`` (as loaded), ``acc`` (int32), ``y``, and ``variants``: the
    kernels modelled (``{"dynamic_quant": Variant, "quant_matmul": Variant}``, :mod:`w8a8.variants`)."""
    a = w8a8_dynamic_linear_args(x, weight, weight_scale, bias=bias, numerics=numerics, serving=serving)
    p = a.params
    w_kn = p.weight.T
    if numerics.act_quant == "asymmetric":
        return _asymmetric_stages(a, w_kn, numerics)
    x_q, x_scale = dynamic_quant_from_args(a.quant, numerics)
    mm = quant_matmul_stages(x_q, w_kn, p.weight_scale, pertoken_scale=x_scale, bias=p.bias, output_dtype=a.x.dtype,
                             numerics=numerics)
    return {"x_q": x_q, "x_scale": x_scale, "weight_kn": w_kn, "weight_scale": p.weight_scale, "bias": p.bias,
            "acc": mm["acc"], "y": mm["y"].reshape(a.x.shape[:-1] + (p.n,)),
            "variants": {"dynamic_quant": _variants.dynamic_quant(a.quant, numerics), **mm["variants"]}}


def _asymmetric_stages(a: W8a8DynamicLinearArgs, w_kn: np.ndarray, numerics: Numerics) -> dict[str, np.ndarray]:
    """``act_quant="asymmetric"``: ``x_q, s, z = dynamic_quant_asymmetric(x)``, ``acc = (x_q - z) @ W``
    exact in int32, then the per-token epilogue of :func:`~w8a8.quant_matmul.quant_matmul` (stage
    ``x_offset`` added; ``acc`` is the zero-point-corrected accumulator)."""
    p = a.params
    x_q, x_scale, x_offset = dynamic_quant_asymmetric_from_args(a.quant, numerics)
    qa = quant_matmul_args(x_q, w_kn, p.weight_scale, pertoken_scale=x_scale, bias=p.bias, output_dtype=a.x.dtype,
                           numerics=numerics)
    variant = _variants.quant_matmul(qa, numerics)
    n = variant.numerics(numerics)
    shifted = x_q.astype(np.int16) - x_offset.astype(np.int16)[:, None]   # |x_q - z| <= 255
    acc = int_matmul(shifted, w_kn, op=_DYN)
    deq, _ = effective_scale(qa.scale, qa.out, True, n)
    y = epilogue(acc, deq, None, None, x_scale, qa.bias, qa.out, n)
    return {"x_q": x_q, "x_scale": x_scale, "x_offset": x_offset, "weight_kn": w_kn, "weight_scale": p.weight_scale,
            "bias": p.bias, "acc": acc, "y": y.reshape(a.x.shape[:-1] + (p.n,)),
            "variants": {"dynamic_quant_asymmetric": _variants.dynamic_quant(a.quant, numerics, asymmetric=True),
                         "quant_matmul": variant}}


@golden_op("dense", check=w8a8_dynamic_linear_args)
def w8a8_dynamic_linear(x: np.ndarray, weight: np.ndarray, weight_scale: np.ndarray, *,
                        bias: np.ndarray | None = None, numerics: Numerics = ASCEND, serving=None) -> np.ndarray:
    """The ``W8A8_DYNAMIC`` Linear: per-token dynamic int8 activations, per-channel int8 weights.

    ``serving`` (:mod:`w8a8.serving`, default SGLang): both engines run ``npu_dynamic_quant`` ->
    ``npu_quant_matmul`` on a float x alike; SGLang's pre-quantized ``(x_q, scale)`` entry (row D2) is
    not this op.

    Parameters
    ----------
    x : bfloat16 or float16 ``[..., K]``.
    weight : int8 ``[N, K]`` (checkpoint layout).
    weight_scale : float32 (or bfloat16) ``[N]`` or ``[N, 1]`` (checkpoint layout).
    bias : optional float ``[N]`` (a ``FLOAT``-tagged checkpoint bias).
    numerics : passed to both ops.

    Steps (SGLang ``NPUW8A8Int8DynamicLinearMethod``, ``linear_method_npu.py``)::

        load:    W = weight.T ([K, N]);  s_w = weight_scale -> x.dtype for bf16 (rounded!),
                 fp32 for fp16 (the only legal fp16-output scale);  b = bias -> x.dtype
        forward: x_q, s_tok = dynamic_quant(x.reshape(-1, K))
                 y = quant_matmul(x_q, W, s_w, pertoken_scale=s_tok, bias=b, output_dtype=x.dtype)
                 = ((fp32(acc) * s_w[n]) * s_tok[m]) + b[n]   -> x.dtype (RNE)

    Returns ``[..., N]`` of x's dtype.

    **The load conversions are part of this op's contract**: a backend multiplies by the *loaded*
    weight scale — rounded to bf16 for a bf16 model, as SGLang registers it in ``params_dtype`` — and
    adds the loaded bias (rounded to x's dtype), not the checkpoint's fp32 values. A backend gets them
    from the checked Args (``a.params.weight_scale``, ``a.params.bias``: :func:`dynamic_linear_params`),
    never by converting the checkpoint itself. (The bf16 rounding moves a scale by up to 2^-9
    relative: a backend using the fp32 scale differs from this op, and from the device, by up to
    about two bf16 ULPs of the output.)

    Other libraries (:class:`~w8a8.numerics.Numerics`): the activation quantizer's fields
    (``scale_divisor``, ``scale_dtype``, ``scale_floor``, ``code_range``, ``dynamic_granularity``,
    ...: :func:`~w8a8.dynamic_quant.quantize_rows`), ``act_quant="asymmetric"`` (onnxruntime
    ``DynamicQuantizeMatMul``: ``x_q, s, z = dynamic_quant_asymmetric(x)``, ``acc = (x_q - z) @ W``
    exact, the same epilogue with ``s`` as the per-token scale), ``epilogue_order`` and
    ``epilogue_intermediate`` (torchao: ``out(fp32(out(acc * s_tok)) * s_w + b)``).

    Errors (all checked up front by :func:`w8a8_dynamic_linear_args`, load-time values included): TypeError
    for dtypes; ValueError for shapes (a K mismatch names ``x``), NaN/Inf in x (named by
    ``dynamic_quant``), a scale or bias that becomes +-Inf in the model dtype at load or N > 65535
    (named by ``quant_matmul``).
    """
    return dynamic_linear_stages(x, weight, weight_scale, bias=bias, numerics=numerics, serving=serving)["y"]


# -- static W8A8 -----------------------------------------------------------------------------------------

def _activation_inputs(op: str, input_scale, input_offset) -> tuple[np.ndarray, np.ndarray]:
    s_in = _check.array(op, "input_scale", input_scale, dtypes=(_dt.float32, _dt.bfloat16, _dt.float16))
    o_in = _check.array(op, "input_offset", input_offset, dtypes=(_dt.float32, _dt.bfloat16, _dt.float16, _dt.int8))
    for arg, value in (("input_scale", s_in), ("input_offset", o_in)):
        if value.size != 1:
            _check.fail(op, arg, "per-tensor, of shape [1]", _check.describe(value))
    v = float(s_in.reshape(()).astype(np.float32))
    if not (np.isfinite(v) and v > 0):
        _check.fail(op, "input_scale", "finite and > 0 (a per-tensor calibration scale; the activation is "
                    "multiplied by its reciprocal)", repr(v))
    return s_in, o_in


def _activation_params(params: np.dtype, s_in: np.ndarray, o_in: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    # The torch casts of the load make a value beyond the fp16 range +-Inf, silently: so do these (the
    # quantize checks then refuse an Inf reciprocal or offset).
    with np.errstate(over="ignore", divide="ignore"):
        s_param = s_in.reshape(1).astype(np.float32).astype(params)
        recip = (np.float32(1) / s_param.astype(np.float32)).astype(params)
        off = o_in.reshape(1).astype(np.float32).astype(params)
    return np.repeat(recip, k), np.repeat(off, k)


def static_activation_params(x_dtype, input_scale, input_offset, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The static activation quantizer's parameters as SGLang loads them: ``(reciprocal [K], offset [K])``.

    Parameters
    ----------
    x_dtype : the model (params) dtype, bfloat16 or float16.
    input_scale : per-tensor ``[1]`` float32 / bfloat16 / float16, finite and > 0.
    input_offset : per-tensor ``[1]`` float32 / bfloat16 / float16 / int8.
    k : the activation's last dim K.

    Formula (``NPUW8A8Int8LinearMethod.process_weights_after_loading``)::

        s = params(fp32(input_scale))            # the parameter is registered in params_dtype
        r = params(fp32(1) / fp32(s))            # torch divides bf16 / fp16 in fp32, rounds once (RNE)
        o = params(fp32(input_offset))
        -> (repeat(r, K), repeat(o, K))          # aclnn_input_scale_reciprocal / aclnn_input_offset

    A scale that is tiny in the params dtype gives ``r = +Inf`` (fp16: below 2^-16 it rounds to 0, or
    its reciprocal overflows), an offset beyond fp16's range +-Inf: returned as such, as the device
    load makes them (``quantize`` refuses them under ``nan_policy="raise"``).

    Errors: TypeError for dtypes outside these lists; ValueError for a non-per-tensor shape, an
    ``input_scale`` that is not finite and > 0, or a negative ``k``.
    """
    op = "static_activation_params"
    params = _model_dtype(op, x_dtype)
    k = _check.integer(op, "k", k, minimum=0)
    s_in, o_in = _activation_inputs(op, input_scale, input_offset)
    return _activation_params(params, s_in, o_in, k)


@dataclass(frozen=True, eq=False)
class W8a8StaticLinearArgs:
    """The checked arguments of :func:`w8a8_static_linear`, its parameters as loaded, and the checked
    ``quantize`` call on the flattened activation."""

    x: np.ndarray
    """bfloat16 / float16 ``[..., K]``."""
    weight: np.ndarray
    """int8 ``[N, K]`` (the forward uses ``weight.T``)."""
    n: int
    """N, the output features."""
    k: int
    """K, the input features."""
    input_scale_reciprocal: np.ndarray
    """``[K]`` in x's dtype (:func:`static_activation_params`)."""
    input_offset: np.ndarray
    """``[K]`` in x's dtype."""
    deq_scale: np.ndarray
    """``[N]`` float32 or int64 (raw fp32 bits)."""
    quant_bias: np.ndarray | None
    """int32 ``[N]``, or None."""
    bias: np.ndarray | None
    """A float bias ``[N]`` as loaded (x's dtype), or None (never together with ``quant_bias``)."""
    quant: QuantizeArgs
    """:func:`~w8a8.quantize.quantize_args` of ``x.reshape(-1, K)`` with the loaded parameters."""

    @property
    def matmul_bias(self) -> np.ndarray | None:
        """The bias ``quant_matmul`` gets: ``quant_bias`` (int32), else the float bias, else None."""
        return self.quant_bias if self.quant_bias is not None else self.bias


def w8a8_static_linear_args(x, weight, *, input_scale, input_offset, deq_scale, quant_bias, bias=None,
                            numerics: Numerics = ASCEND, serving=None) -> W8a8StaticLinearArgs:
    """Every argument check of :func:`w8a8_static_linear`, in its order, with its exceptions and
    messages: its own (dtypes, shapes, ``input_scale`` finite and > 0), then those of the ``quantize``
    and ``quant_matmul`` it runs on the loaded parameters (NaN/Inf in x, an Inf reciprocal / offset /
    bias, the deq_scale dtype for the output, K and N <= 65535)."""
    op = _STATIC
    _serving.get(serving, op)   # both engines load the reciprocal as 1 / bf16 tensor (row D4)
    x = _check.array(op, "x", x, dtypes=_X_DTYPES, min_ndim=1)
    weight, n, k = _weight(op, x, weight)
    s_in, o_in = _activation_inputs(op, input_scale, input_offset)
    deq = _vector(op, "deq_scale", deq_scale, n, (_dt.float32, _dt.int64))
    _check.finite_under(op, numerics, (("x", x), ("input_offset", o_in), ("deq_scale", deq), ("bias", bias)))
    qb = None if quant_bias is None else _vector(op, "quant_bias", quant_bias, n, (_dt.int32,))
    if qb is not None and bias is not None:
        _check.fail(op, "bias", "None when quant_bias is given (msModelSlim folds the float bias into quant_bias)",
                    _check.describe(bias))
    b = None
    if bias is not None:
        b = _vector(op, "bias", bias, n, _FLOAT_BIAS)
        with np.errstate(over="ignore"):  # beyond fp16's range: Inf, as the torch cast (quant_matmul refuses it)
            b = b.astype(x.dtype)
    recip_k, off_k = _activation_params(x.dtype, s_in, o_in, k)
    x2 = x.reshape(-1, k)
    quant = quantize_args(x2, recip_k, off_k, dtype="int8", axis=-1, div_mode=False, numerics=numerics)
    _check_matmul(x2.shape[0], k, n, deq, qb if qb is not None else b, x.dtype, False, numerics)
    return W8a8StaticLinearArgs(x=x, weight=weight, n=int(n), k=int(k), input_scale_reciprocal=recip_k,
                            input_offset=off_k, deq_scale=deq, quant_bias=qb, bias=b, quant=quant)


def static_linear_stages(x: np.ndarray, weight: np.ndarray, *, input_scale: np.ndarray, input_offset: np.ndarray,
                         deq_scale: np.ndarray, quant_bias: np.ndarray | None, bias: np.ndarray | None = None,
                         numerics: Numerics = ASCEND, serving=None) -> dict[str, np.ndarray]:
    """:func:`w8a8_static_linear` with its intermediates: ``input_scale_reciprocal``, ``input_offset``
    (as loaded, ``[K]``), ``x_q``, ``acc``, ``y`` and ``variants`` (the kernels modelled)."""
    a = w8a8_static_linear_args(x, weight, input_scale=input_scale, input_offset=input_offset, deq_scale=deq_scale,
                           quant_bias=quant_bias, bias=bias, numerics=numerics, serving=serving)
    x_q = quantize_from_args(a.quant, numerics)
    mm = quant_matmul_stages(x_q, a.weight.T, a.deq_scale, bias=a.matmul_bias, output_dtype=a.x.dtype,
                             numerics=numerics)
    return {"input_scale_reciprocal": a.input_scale_reciprocal, "input_offset": a.input_offset, "x_q": x_q,
            "acc": mm["acc"], "y": mm["y"].reshape(a.x.shape[:-1] + (a.n,)),
            "variants": {"quantize": _variants.quantize(a.quant, numerics), **mm["variants"]}}


@golden_op("dense", check=w8a8_static_linear_args)
def w8a8_static_linear(x: np.ndarray, weight: np.ndarray, *, input_scale: np.ndarray, input_offset: np.ndarray,
                       deq_scale: np.ndarray, quant_bias: np.ndarray | None, bias: np.ndarray | None = None,
                       numerics: Numerics = ASCEND, serving=None) -> np.ndarray:
    """The static ``W8A8`` Linear: per-tensor static int8 activations with an offset, int8 weights.

    ``serving`` (:mod:`w8a8.serving`): both engines load ``1 / bf16(input_scale)`` as a device bf16 division
    (row D4), modelled as ``bf16(fp32(1) / fp32(s))``: equal if that division rounds once.

    Parameters
    ----------
    x : bfloat16 or float16 ``[..., K]``.
    weight : int8 ``[N, K]``.
    input_scale, input_offset : per-tensor ``[1]`` (checkpoint float32; int8 offsets accepted as
        vllm-ascend registers them).
    deq_scale : ``[N]``: float32 for a bf16 model, int64 for an fp16 model (msModelSlim stores the
        raw fp32 bits; the fix-pipe reads them as FP19 — :func:`~w8a8.trans_quant_param.decode_quant_param`).
    quant_bias : int32 ``[N]`` = ``round(b / deq - input_offset * sum_k w_q)`` (msModelSlim), or None
        (on tensor-parallel ranks > 0 of a RowParallelLinear, where it must be added once only).
    bias : a float bias ``[N]`` to add after dequant instead (compressed-tensors style; bf16 output
        only). Not allowed together with quant_bias.

    Steps (SGLang ``NPUW8A8Int8LinearMethod``, ``linear_method_npu.py``)::

        load:    W = weight.T;  r = 1 / input_scale (in params dtype), repeated to [K];
                 o = input_offset (params dtype), repeated to [K]
        forward: x_q = quantize(x, r, o, dtype=int8, axis=-1, div_mode=False)
                     = sat_int8(rint(fp32(x) * fp32(r) + fp32(o)))
                 y = quant_matmul(x_q, W, deq_scale, bias=quant_bias, output_dtype=x.dtype)
                   = fp32(acc + quant_bias) * deq[n]   -> x.dtype (bf16 full precision;
                     fp16: FP19 scale in the fix-pipe)

    The load is :func:`static_activation_params`: a reciprocal or offset beyond the fp16 range is
    +-Inf, as the torch casts make it, and the quantize step refuses it.

    Returns ``[..., N]`` of x's dtype.

    Errors (all checked up front by :func:`w8a8_static_linear_args`, load-time values included): TypeError
    for dtypes; ValueError for shapes, an ``input_scale`` that is not finite and > 0 (NaN, 0 or a
    negative scale: a broken calibration, whatever ``numerics.nan_policy``), ``bias`` together with
    ``quant_bias``, NaN/Inf in x or an Inf reciprocal / offset (named by ``quantize``), the deq_scale
    dtype for the output, K or N > 65535, an Inf deq_scale or float bias (named by ``quant_matmul``).
    """
    return static_linear_stages(x, weight, input_scale=input_scale, input_offset=input_offset,
                                deq_scale=deq_scale, quant_bias=quant_bias, bias=bias, numerics=numerics,
                                serving=serving)["y"]
