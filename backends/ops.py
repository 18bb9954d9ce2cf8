"""The op names a backend can implement, and the golden function behind each.

They derive from the golden op registry (:mod:`w8a8.registry`): an op exists when its golden
function is registered. The three tuples are the three families of the op surface, in
:func:`w8a8.registry.ops` order: the dense W8A8 ops, the grouped-MoE ops and the low-bit formats.
"""

from __future__ import annotations

from w8a8 import registry

DENSE_OPS: tuple[str, ...] = registry.names("dense")
MOE_OPS: tuple[str, ...] = registry.names("moe")
LOWBIT_OPS: tuple[str, ...] = registry.names("lowbit")
OPS: tuple[str, ...] = registry.names()


def golden_function(op: str):
    """The golden implementation of ``op`` (KeyError naming the known ops for an unknown one)."""
    return registry.get(op).fn
