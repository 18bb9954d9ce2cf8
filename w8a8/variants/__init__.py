"""Kernel variants: the golden computes what the kernel the host tiling picks for *this* call computes.

Several Ascend ops run different kernels behind one name, chosen by the CANN host tiling (op_host)
from the shapes, dtypes, optional inputs and the platform's numbers, and the kernels do not all
compute the same arithmetic (docs/kernel-variants.md). ``npu_dynamic_quant`` on ``[16, 4096]`` bf16
runs the single-row kernel (tiling key 100), which writes ``scale = amax * fp32(1/127)``; on
``[64, 20000]`` it runs the large-shape kernel (key 6), which writes ``1 / (127 / amax)``.

This package mirrors the host tiling's conditions, in their order, as pure functions (NumPy only):

* one selector per op (:mod:`.dynamic_quant`, :mod:`.swiglu`, :mod:`.moe`, :mod:`.matmul`) from the
  facts the tiling reads and a :class:`~w8a8.platforms.Platform`, returning a :class:`Variant`: the
  tiling key, a name, the kernel, the :class:`~w8a8.numerics.Numerics` fields it decides (its *delta*),
  its arithmetic in order of operations, and the source lines (``repo:path:lines@commit``) of both;
* :mod:`.calls`: the same from an op's checked arguments (what every golden op calls);
* :func:`select`: the variant any caller's call gets, ``select(op, *args, **kwargs)`` with the op's own
  arguments (including ``numerics=``, whose ``platform`` picks the chip); :func:`label` its name for a
  record (conformance and replay results say which kernel was modelled).

How an op uses it (``Numerics.variants``): under ``"select"`` (the default of :data:`w8a8.ASCEND` and
:data:`w8a8.ASCEND_A2`) the op computes with :meth:`Variant.numerics` — the record with the variant's
choices for every field the variant decides and the record leaves at its default; under ``"fixed"``
exactly the record. The ``*_stages`` outputs name the variants they modelled (``"variants"``).
"""

from __future__ import annotations

from ._core import Variant, src
from . import calls

__all__ = ["Variant", "select", "label", "explainable_ops", "src", "calls"]
FLATTEN = False  # w8a8.variants stays a namespace: w8a8.variants.select, not w8a8.select


def explainable_ops() -> tuple[str, ...]:
    """The ops :func:`select` knows: the golden's ops (:func:`w8a8.registry.names`, in its order) that have a
    function of their name in :mod:`.calls`, taking the op's checked arguments (its ``<op>_args`` result)
    and the record whose platform picks the chip. A new selector is that one function."""
    from .. import registry

    return tuple(op for op in registry.names() if callable(getattr(calls, op, None)))


def select(op: str, *args, **kwargs) -> Variant:
    """The kernel variant the call ``w8a8.<op>(*args, **kwargs)`` gets on the platform of its
    ``numerics`` (default :data:`w8a8.ASCEND`: A3).

    The op's own argument check runs first (its TypeError / ValueError propagate). Example::

        >>> x = np.zeros((16, 4096), w8a8.bfloat16)
        >>> w8a8.variants.select("dynamic_quant", x).label
        'dynamic_quant/single-row[100]'
    """
    known = explainable_ops()
    if op not in known:
        raise ValueError(f"variants.select: argument 'op' must be one of {sorted(known)}; got {op!r}")
    from .. import registry
    from ..numerics import ASCEND, Numerics

    numerics = kwargs.get("numerics", ASCEND)
    if not isinstance(numerics, Numerics):
        raise TypeError(f"variants.select: argument 'numerics' must be a w8a8.Numerics; got {type(numerics).__name__}")
    checked = registry.get(op).args(*args, **kwargs)
    return getattr(calls, op)(checked, numerics)


def label(op: str, args, kwargs, numerics) -> str | None:
    """The name of the kernel the golden models for ``w8a8.<op>(*args, **kwargs)`` under ``numerics``:
    its :attr:`Variant.label` (``"dynamic_quant/single-row[100]"``), ``"fixed"`` under
    ``variants="fixed"`` (the record's own formulas for every shape), or None for an op with one kernel
    or a call its check refuses."""
    if op not in explainable_ops():
        return None
    if numerics.variants == "fixed":
        return "fixed"
    try:
        return select(op, *args, **{**dict(kwargs), "numerics": numerics}).label
    except (ValueError, TypeError, OverflowError):
        return None
