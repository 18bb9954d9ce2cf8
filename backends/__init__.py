"""Backends: one interface (:class:`Backend`), a registry, and the built-ins.

Built-ins: ``numpy`` (the golden), ``torch-cpu`` (PyTorch on the CPU, native int8 paths),
``torch-npu`` (Ascend 910C through torch_npu). A backend implements ops by registering methods
(:func:`implements`, :func:`loads`; docs/adding-a-backend.md). Third-party backends register through
the entry-point group ``w8a8.backends``: ``name = "package.module:factory"``, where the factory is a
``Backend`` subclass or a callable returning a ``Backend``.

Importing this package imports neither torch nor torch_npu: backends that need them import them
when first used, and report in ``available()`` why they cannot run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points

from .base import Backend, Prepared, Unsupported, implements, loads
from .ops import OPS

ENTRY_POINT_GROUP = "w8a8.backends"

_BUILTINS: dict[str, str] = {
    "numpy": "backends.numpy_backend:NumpyBackend",
    "torch-cpu": "backends.torch_cpu:TorchCpuBackend",
    "torch-npu": "backends.torch_npu:TorchNpuBackend",
}
_registered: dict[str, Callable[[], Backend] | str] = {}
_instances: dict[str, Backend] = {}


def register(name: str, factory: Callable[[], Backend] | str) -> None:
    """Register a backend factory (a class, a callable, or ``"module:attr"``) under ``name``."""
    _registered[name] = factory
    _instances.pop(name, None)


def _factories() -> dict[str, Callable[[], Backend] | str]:
    found: dict[str, Callable[[], Backend] | str] = dict(_BUILTINS)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    found.update(_registered)
    return found


def names() -> list[str]:
    """Every known backend name: built-ins, entry points, registered — available or not."""
    return list(_factories())


def _load(factory) -> Backend:
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        factory = obj
    backend = factory()
    if not isinstance(backend, Backend):
        raise TypeError(f"backend factory {factory!r} returned {type(backend).__name__}, not a backends.Backend")
    return backend


def get(name: str) -> Backend:
    """The backend called ``name`` (one instance per process). KeyError lists the known names.

    ``name`` may also be ``"package.module:factory"``: a backend class (or factory) that is not
    registered anywhere, loaded directly — handy for a kernel under development.
    """
    if name in _instances:
        return _instances[name]
    factories = _factories()
    if name not in factories and ":" in name:
        backend = _load(name)
        _instances[name] = _instances[backend.name] = backend
        return backend
    if name not in factories:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(sorted(factories))}")
    backend = _load(factories[name])
    if backend.name != name:
        backend.name = name
    _instances[name] = backend
    return backend


def available() -> list[Backend]:
    """The backends that can run here (a backend whose factory fails to load is left out)."""
    result = []
    for name in names():
        try:
            backend = get(name)
        except Exception:  # noqa: BLE001 - a broken third-party backend must not break discovery
            continue
        if backend.available()[0]:
            result.append(backend)
    return result


def describe_all() -> list[dict]:
    """``[{name, available, reason, numerics, ops, ...}]`` for every known backend."""
    rows = []
    for name in names():
        try:
            rows.append(get(name).info())
        except Exception as exc:  # noqa: BLE001
            rows.append({"name": name, "available": False, "reason": f"failed to load: {type(exc).__name__}: {exc}",
                         "device": "?", "description": "", "numerics": None, "numerics_differences": {},
                         "ops": []})
    return rows


__all__ = ["Backend", "Prepared", "Unsupported", "implements", "loads", "OPS", "ENTRY_POINT_GROUP", "register",
           "names", "get", "available", "describe_all"]
