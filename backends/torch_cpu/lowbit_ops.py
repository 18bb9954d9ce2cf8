"""The low-bit format ops of the torch-cpu backend (a mixin of :class:`backends.torch_cpu.TorchCpuBackend`).

Each op is a ``_<op>`` method in device space (torch tensors in and out); an op that needs its own
argument checks or load-time work defines ``_check_<op>(args, kwargs) -> (args, kwargs)`` and
``_load_<op>(args, kwargs) -> (args, kwargs)``.
"""

from __future__ import annotations


class LowbitOps:
    """Low-bit format ops of torch-cpu."""
