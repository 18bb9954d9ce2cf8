"""The SHA-256 of a case's input bytes: evidence that two machines (or two executors) built the same case.

:func:`input_digest` hashes every input of the built case in order — an array as its dtype, shape and bytes
(C order), anything else as its ``repr`` — so equal digests mean the backend calls received equal bytes.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _feed(h, value) -> None:
    if isinstance(value, np.ndarray):
        h.update(f"ndarray {value.dtype.str} {value.shape}\0".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__} {len(value)}\0".encode())
        for v in value:
            _feed(h, v)
    elif isinstance(value, dict):
        h.update(f"dict {len(value)}\0".encode())
        for k in sorted(value, key=str):
            h.update(f"{k}\0".encode())
            _feed(h, value[k])
    else:
        h.update(f"{type(value).__name__} {value!r}\0".encode())


def input_digest(op: str, params: dict) -> str:
    """The hex SHA-256 of the inputs the case ``(op, params)`` builds (its positional then keyword arguments)."""
    from conformance.evaluate import build_inputs
    from conformance.registry import get

    args, kwargs = build_inputs(get(op), params)
    h = hashlib.sha256()
    _feed(h, list(args))
    _feed(h, dict(kwargs))
    return h.hexdigest()


def input_digests(cases: list[tuple[str, dict]]) -> list[str]:
    """:func:`input_digest` of every ``(op, params)``, in order."""
    return [input_digest(op, params) for op, params in cases]
