"""Kernel variants: the golden computes what the kernel the host tiling picks for *this* call computes.

Several Ascend ops run different kernels behind one name, chosen by the CANN host tiling (op_host)
from the shapes, dtypes, optional inputs and the platform's numbers, and the kernels do not all
compute the same arithmetic (spec/kernel-variants.md). ``npu_dynamic_quant`` on ``[16, 4096]`` bf16
runs the single-row kernel (tiling key 100), which writes ``scale = amax * fp32(1/127)``; on
``[64, 20000]`` it runs the large-shape kernel (key 6), which writes ``1 / (127 / amax)``.

This package mirrors the host tiling's conditions, in their order, as pure functions (NumPy only):

* one selector per op (:mod:`.dynamic_quant`, :mod:`.swiglu`, :mod:`.moe`, :mod:`.matmul`) from the
  facts the tiling reads and a :class:`~w8a8.platforms.Platform`, returning a :class:`Variant`: the
  tiling key, a name, the kernel, the :class:`~w8a8.numerics.Numerics` fields it decides (its *delta*),
  its arithmetic in order of operations, and the source lines (``repo:path:lines@commit``) of both;
* :mod:`.calls`: the same from an op's checked arguments (what every golden op calls);
* :func:`select`: the variant any caller's call gets, ``select(op, *args, **kwargs)`` with the op's own
  arguments (including ``numerics=``, whose ``platform`` picks the chip).

How an op uses it (``Numerics.variants``): under ``"select"`` (the default of :data:`w8a8.ASCEND` and
:data:`w8a8.ASCEND_A2`) the op computes with :meth:`Variant.numerics` — the record with the variant's
choices for every field the variant decides and the record leaves at its default; under ``"fixed"``
exactly the record. The ``*_stages`` outputs name the variants they modelled (``"variants"``).
"""

from __future__ import annotations

import importlib

from ._core import Variant, src
from . import calls

__all__ = ["Variant", "select", "explainable_ops", "src", "calls"]

# op -> (module of its check, name of its check). The check takes the op's exact arguments.
_CHECKS = {
    "dynamic_quant": ("w8a8.dynamic_quant", "dynamic_quant_args"),
    "dynamic_quant_asymmetric": ("w8a8.dynamic_quant", "dynamic_quant_asymmetric_args"),
    "swiglu": ("w8a8.moe.swiglu", "swiglu_args"),
    "dequant_swiglu_quant": ("w8a8.moe.swiglu", "dequant_swiglu_quant_args"),
    "moe_finalize_routing": ("w8a8.moe.finalize", "moe_finalize_routing_args"),
    "moe_gating_top_k_softmax": ("w8a8.moe.gating", "moe_gating_top_k_softmax_args"),
    "moe_init_routing_v2": ("w8a8.moe.routing", "moe_init_routing_v2_plan"),
    "quant_matmul": ("w8a8.quant_matmul", "quant_matmul_args"),
    "grouped_matmul": ("w8a8.moe.grouped_matmul", "grouped_matmul_args"),
    "weight_quant_batchmatmul": ("w8a8.lowbit.weight_quant_batchmatmul", "weight_quant_batchmatmul_args"),
    "quantize": ("w8a8.quantize", "quantize_args"),
}


def explainable_ops() -> tuple[str, ...]:
    """The ops :func:`select` knows."""
    return tuple(_CHECKS)


def select(op: str, *args, **kwargs) -> Variant:
    """The kernel variant the call ``w8a8.<op>(*args, **kwargs)`` gets on the platform of its
    ``numerics`` (default :data:`w8a8.ASCEND`: A3).

    The op's own argument check runs first (its TypeError / ValueError propagate). Example::

        >>> x = np.zeros((16, 4096), w8a8.bfloat16)
        >>> w8a8.variants.select("dynamic_quant", x).label
        'dynamic_quant/single-row[100]'
    """
    if op not in _CHECKS:
        raise ValueError(f"variants.select: argument 'op' must be one of {sorted(_CHECKS)}; got {op!r}")
    from ..numerics import ASCEND, Numerics

    module, name = _CHECKS[op]
    check = getattr(importlib.import_module(module), name)
    numerics = kwargs.get("numerics", ASCEND)
    if not isinstance(numerics, Numerics):
        raise TypeError(f"variants.select: argument 'numerics' must be a w8a8.Numerics; got {type(numerics).__name__}")
    checked = check(*args, **kwargs)
    if op == "swiglu":
        checked = checked[0]
    return getattr(calls, op)(checked, numerics)
