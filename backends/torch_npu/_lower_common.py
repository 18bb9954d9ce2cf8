"""Helpers shared by the dense and MoE lowerings: options, weight placement (ND / NZ), dtypes, checks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from w8a8 import _check
from w8a8 import dtypes as _dt
from w8a8.layout import is_nz_aligned, nz_fallback_reason, nz_supported_by_matmul
from w8a8.quant_matmul import DIM_LIMIT

from .plan import ACL_FORMAT_FRACTAL_NZ, Builder, DType, T, describe, reject

K_LIMIT = DIM_LIMIT
"""Inner-axis limit of npu_quant_matmul / npu_grouped_matmul: the last dim of x and of the weight (the
golden's :data:`w8a8.quant_matmul.DIM_LIMIT`)."""

WEIGHT_FORMATS = ("auto", "ND", "NZ")


@dataclass(frozen=True)
class Options:
    """Lowering choices that are not golden arguments.

    weight_format : ``"auto"`` (default) casts a weight to FRACTAL_NZ exactly where SGLang does
        (``w8a8.layout.is_nz_aligned`` on the ``[K, N]`` orientation, and not with a last dim of 1),
        keeping it ND otherwise with the reason recorded; ``"ND"`` never casts; ``"NZ"`` always casts
        (as vllm-ascend's ``maybe_trans_nz`` does, without the alignment check) and rejects the
        shapes NZ weights cannot have.
    """

    weight_format: str = "auto"

    def __post_init__(self):
        if self.weight_format not in WEIGHT_FORMATS:
            raise ValueError(f"torch-npu: option 'weight_format' must be one of {WEIGHT_FORMATS}; "
                             f"got {self.weight_format!r}")


DEFAULT = Options()


def torch_name(dtype) -> str:
    """The torch dtype name of a NumPy / ml_dtypes dtype (``bfloat16``, ``int8``...)."""
    return np.dtype(dtype).name


def out_dtype(dtype) -> DType:
    return DType(torch_name(dtype))


def place_weight(b: Builder, ref: T, shape: tuple[int, ...], dtype, options: Options, *, op: str, arg: str,
                 nd_only: str | None = None) -> T:
    """Decide the device storage format of a weight ``[..., K, N]`` and add the NZ cast when it is NZ.

    ``nd_only`` names a reason why this call cannot take an NZ weight at all (then NZ is never
    chosen, and ``weight_format="NZ"`` is rejected). Returns the reference the call should use.
    """
    shape = tuple(int(d) for d in shape)
    forced = options.weight_format
    if nd_only is not None:
        if forced == "NZ":
            reject(op, arg, "ND (weight_format='NZ' was requested)", f"a call that takes ND weights only: {nd_only}",
                   "hicann/ops-transformer aclnn_grouped_matmul.cpp CheckQuantParamsDtype: "
                   "int64 scale takes ND weights")
        return _keep_nd(b, ref, arg, nd_only)
    if forced == "ND":
        return _keep_nd(b, ref, arg, "weight_format='ND' requested")
    if not nz_supported_by_matmul(shape):
        if forced == "NZ":
            reject(op, arg, "a weight without a last dim of 1 to be cast to FRACTAL_NZ",
                   f"shape {shape}", "aclnnQuantMatmulWeightNz constraints; vllm-ascend #10014")
        return _keep_nd(b, ref, arg, "a last dim of 1 (NZ weights are not supported by the quantized matmuls)")
    reason = nz_fallback_reason(shape, dtype)
    if forced == "auto" and reason is not None:
        return _keep_nd(b, ref, arg, reason)
    why = ("SGLang npu_format_cast: aligned" if is_nz_aligned(shape, dtype)
           else "weight_format='NZ' requested (not SGLang-aligned: the device pads)")
    nz = b.load("torch_npu.npu_format_cast", (ref, ACL_FORMAT_FRACTAL_NZ), out=f"{arg}_nz", why=why)
    b.formats[arg] = "NZ"
    b.decide(f"{arg} {list(shape)} {_dt.name(dtype)} -> FRACTAL_NZ (npu_format_cast 29): {why}")
    return nz


def _keep_nd(b: Builder, ref: T, arg: str, reason: str) -> T:
    b.formats[arg] = "ND"
    b.decide(f"{arg} stays ND: {reason}")
    return ref


def transpose_weight(b: Builder, ref: T, dims: tuple[int, int], arg: str) -> T:
    """Load steps ``w.transpose(*dims).contiguous()`` (SGLang's layout change before the NZ cast)."""
    t = b.load("Tensor.transpose", (ref,) + tuple(dims), out=f"{arg}_t", why="checkpoint layout -> [.., K, N]")
    return b.load("Tensor.contiguous", (t,), out=f"{arg}_kn")


def ints(op: str, arg: str, value: np.ndarray, *, ndim: int | None = None) -> np.ndarray:
    """An integer index array (any signed/unsigned integer dtype) as its values."""
    value = _check.array(op, arg, value, ndim=ndim)
    if value.dtype.kind not in "iu":
        _check.fail(op, arg, "an integer array", describe(value), TypeError)
    return value


def inner_limit(op: str, arg: str, size: int, what: str) -> None:
    if size > K_LIMIT:
        reject(op, arg, f"with {what} <= {K_LIMIT}", f"{what} = {size}",
               "torch_npu docs: inner-axis limit 65535")
