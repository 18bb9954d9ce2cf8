"""Import torchao without its two import-time notices on a CPU-only torch, and nothing else silenced.

On a torch without CUDA, ``import torchao`` logs a warning per CUDA extension it cannot load
(``Failed to load .../torchao/_C_mxfp8...so: Could not load this library``; those kernels are never used
on CPU), and torch logs a deprecation notice for each Enum torchao registers with pytree
(``<enum 'KernelPreference'> is an Enum subclass and is now natively supported by torch.compile...``).
:func:`import_torchao` drops exactly those records (kept in :data:`CAPTURED`, the message text), and lets
every other warning of torchao or torch through; Python warnings are not touched.
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager

CAPTURED: list[str] = []
"""The notices dropped so far (the full messages), for a caller that wants to show them."""

_DROPPED = {
    "torchao": re.compile(r"^Failed to load \S*torchao[/\\]_C[^/\\]*\.so\b"),
    "torch.utils._pytree": re.compile(r"^<enum '[^']+'> is an Enum subclass and is now natively supported by "
                                      r"torch\.compile"),
}


class _Drop(logging.Filter):
    def __init__(self, pattern: re.Pattern):
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.pattern.search(message):
            CAPTURED.append(message)
            return False
        return True


@contextmanager
def import_torchao():
    """A ``with`` block inside which torchao's import-time notices (see the module) are captured, not logged."""
    filters = [(logging.getLogger(name), _Drop(pattern)) for name, pattern in _DROPPED.items()]
    for log, f in filters:
        log.addFilter(f)
    try:
        yield
    finally:
        for log, f in filters:
            log.removeFilter(f)
