"""Backends: one interface (:class:`Backend`), a registry, and the built-ins.

Built-ins: ``numpy`` (the golden), ``torch-cpu`` (PyTorch on the CPU, native int8 paths),
``torch-npu`` (Ascend 910C through torch_npu), ``onnxruntime`` / ``onnxruntime-dqmm`` (onnxruntime's
CPU kernels, extra ``ort``), ``torchao`` (torchao 0.18's CPU paths, extra ``torchao``). A backend
implements ops by registering methods (:func:`implements`, :func:`loads`; docs/adding-a-backend.md).
Third-party backends register through the entry-point group ``w8a8.backends``:
``name = "package.module:factory"``, where the factory is a ``Backend`` subclass or a callable
returning a ``Backend``.

:func:`get` also takes a spec that is registered nowhere: ``"package.module:Class"`` (the current
directory is on the import path, as for ``python -m``) or ``"path/to/file.py:Class"``. The backend
keeps the exact spec it came from (``backend.spec``), which is what repro lines print.

Importing this package imports neither torch, torch_npu, onnxruntime nor torchao: backends that need
them import them when first used, and report in ``available()`` why they cannot run.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points

from .base import Backend, Prepared, Unsupported, implements, loads
from .capabilities import Accepts, Capabilities
from .ops import OPS

ENTRY_POINT_GROUP = "w8a8.backends"

_BUILTINS: dict[str, str] = {
    "numpy": "backends.numpy_backend:NumpyBackend",
    "torch-cpu": "backends.torch_cpu:TorchCpuBackend",
    "torch-npu": "backends.torch_npu:TorchNpuBackend",
    "torch-dist": "backends.torch_dist:TorchDistBackend",
    "onnxruntime": "backends.onnxruntime:OnnxruntimeBackend",
    "onnxruntime-dqmm": "backends.onnxruntime:OnnxruntimeDqmmBackend",
    "torchao": "backends.torchao:TorchaoBackend",
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


def _import_target(target: str):
    """The object a ``"module:attr"`` or ``"path/to/file.py:attr"`` target names.

    ImportError (with the reason) for a module or file that cannot be imported, AttributeError for a
    missing attribute."""
    module, sep, attr = target.rpartition(":")
    if not sep or not module or not attr:
        raise ImportError(f"backend spec {target!r}: expected 'package.module:Class' or 'path/to/file.py:Class'")
    if module.endswith(".py") or os.sep in module or "/" in module:
        obj = _import_file(module, target)
    else:
        cwd = os.getcwd()
        if cwd not in sys.path and "" not in sys.path:
            sys.path.append(cwd)  # 'module:Class' from the current directory, as with python -m
        obj = importlib.import_module(module)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"backend spec {target!r}: {getattr(obj, '__name__', obj)!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


def _import_file(path: str, target: str):
    full = os.path.abspath(path)
    if not os.path.isfile(full):
        raise ImportError(f"backend spec {target!r}: no file {path!r} (looked at {full})")
    name = "w8a8_backend_" + os.path.splitext(os.path.basename(full))[0] + "_" + \
        hashlib.sha1(full.encode()).hexdigest()[:8]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, full)
    if spec is None or spec.loader is None:
        raise ImportError(f"backend spec {target!r}: {path!r} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: dataclasses and pickling look the module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _load(factory) -> Backend:
    if isinstance(factory, str):
        factory = _import_target(factory)
    backend = factory()
    if not isinstance(backend, Backend):
        raise TypeError(f"backend factory {factory!r} returned {type(backend).__name__}, not a backends.Backend")
    return backend


def get(name: str) -> Backend:
    """The backend called ``name`` (one instance per process). KeyError lists the known names.

    ``name`` may also be ``"package.module:factory"`` or ``"path/to/file.py:factory"``: a backend class
    (or factory) that is not registered anywhere, loaded directly — handy for a kernel under
    development (ImportError / AttributeError say what is missing). The instance keeps ``name`` as
    its :attr:`~backends.base.Backend.spec`; a name registered with a string target
    (:func:`register`, as conformance's workers do) keeps that target as its spec.
    """
    if name in _instances:
        return _instances[name]
    factories = _factories()
    if name not in factories and ":" in name:
        backend = _load(name)
        backend.spec = name
        _instances[name] = _instances[backend.name] = backend
        return backend
    if name not in factories:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(sorted(factories))}")
    factory = factories[name]
    backend = _load(factory)
    if backend.name != name:
        backend.name = name
    if isinstance(factory, str) and name in _registered:
        backend.spec = factory
    _instances[name] = backend
    return backend


def available(*, named_only: bool = False) -> list[Backend]:
    """The backends that can run here and take part in default runs (a backend whose factory fails to load is
    left out). ``named_only=True`` adds those that run only when named (``Backend.in_default_runs = False``:
    ``onnxruntime``, ``onnxruntime-dqmm``, ``torchao`` — libraries judged here, whose genuine bugs fail by
    design, so a default ``w8a8 conformance`` / test suite stays the project's own gate)."""
    result = []
    for name in names():
        try:
            backend = get(name)
        except Exception:  # noqa: BLE001 - a broken third-party backend must not break discovery
            continue
        if backend.available()[0] and (named_only or backend.in_default_runs):
            result.append(backend)
    return result


def describe_all() -> list[dict]:
    """``[{name, available, reason, numerics, ops, ...}]`` for every known backend."""
    rows = []
    for name in names():
        try:
            rows.append(get(name).info())
        except Exception as exc:  # noqa: BLE001
            rows.append({"name": name, "spec": name, "available": False,
                         "reason": f"failed to load: {type(exc).__name__}: {exc}", "device": "?", "description": "",
                         "numerics": None, "numerics_differences": {}, "ops": [], "capabilities": {},
                         "in_default_runs": False})
    return rows


__all__ = ["Backend", "Prepared", "Unsupported", "implements", "loads", "Accepts", "Capabilities", "OPS",
           "ENTRY_POINT_GROUP", "register", "names", "get", "available", "describe_all"]
