"""w8a8 — the golden: pure NumPy (+ ml_dtypes) implementations of the torch_npu W8A8 op surface.

Same op names without the ``npu_`` prefix, same arguments and defaults, same shapes, dtypes and
semantics, on NumPy arrays. bf16 is :data:`ml_dtypes.bfloat16`; dtype arguments take NumPy dtypes or
names (``"bfloat16"``, ``"int8"``). Every arithmetic choice on which backends differ is a field of
:class:`Numerics`, whose defaults are the Ascend A2/A3 kernels; each op computes the kernel variant
the host tiling picks for the call (:mod:`w8a8.variants`, the chip: :mod:`w8a8.platforms`).

This package imports NumPy and ml_dtypes only (no torch, nothing else of the project).
"""

from importlib.metadata import PackageNotFoundError, version as _version

from .dtypes import bfloat16
from .dynamic_quant import dynamic_quant, dynamic_quant_asymmetric
from .int4 import pack_int4, unpack_int4
from .intgemm import int_matmul
from .layout import format_cast_nz, is_nz_aligned, nz_storage_shape, nz_to_nd
from .linear import (dynamic_linear_stages, static_linear_stages, w8a8_dynamic_linear,
                     w8a8_static_linear)
from .numerics import ASCEND, ASCEND_A2, Numerics
from . import platforms, variants
from .offline import calibrate_activation_per_tensor, quantize_weight_per_channel, static_params
from .quant_matmul import quant_matmul, quant_matmul_stages
from .quantize import anti_quant, dequantize, quantize
from .trans_quant_param import decode_quant_param, fp32_bits_to_int64, trans_quant_param
from .ulp import ulp_distance
from .moe import *  # noqa: F401,F403 - the MoE ops (w8a8.moe.__all__)
from .lowbit import *  # noqa: F401,F403 - the low-bit formats (w8a8.lowbit.__all__)
from . import lowbit as _lowbit, moe as _moe

try:
    __version__ = _version("w8a8")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "ASCEND", "ASCEND_A2", "Numerics", "bfloat16", "platforms", "variants",
    "dynamic_quant", "dynamic_quant_asymmetric", "quantize", "dequantize", "anti_quant",
    "pack_int4", "unpack_int4",
    "trans_quant_param", "decode_quant_param", "fp32_bits_to_int64",
    "int_matmul", "quant_matmul", "quant_matmul_stages",
    "format_cast_nz", "nz_to_nd", "is_nz_aligned", "nz_storage_shape",
    "w8a8_dynamic_linear", "w8a8_static_linear", "dynamic_linear_stages", "static_linear_stages",
    "quantize_weight_per_channel", "calibrate_activation_per_tensor", "static_params",
    "ulp_distance",
] + list(_moe.__all__) + list(_lowbit.__all__)
