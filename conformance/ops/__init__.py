"""The op declarations: ``<family>/<op>.py``, one file per op, each calling
:func:`conformance.declare.declare` once. Families: ``dense`` (the W8A8 dense ops), ``moe`` (grouped
MoE), ``lowbit`` (INT4 group, W4A8, MX, NVFP4, FP8 block). ``_common.py`` in a family holds what its
declarations share; ``_dsv4.py`` the DeepSeek-V4-Flash shapes the bench cases use. Every other module
under this package is discovered by :mod:`conformance.registry` (sorted by module path)."""
