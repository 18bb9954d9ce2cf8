"""Op families of the registry: ``dense`` (W8A8 dense ops), ``moe`` (grouped MoE), ``lowbit``.
Each module registers its :class:`~conformance.registry.OpSpec` objects on import."""
