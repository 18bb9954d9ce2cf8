"""The registry of op declarations (:mod:`conformance.declare`), discovered from ``conformance/ops``.

Every module under the :mod:`conformance.ops` package (``ops/<family>/<op>.py``) is imported once,
in sorted module-path order, and registers its op by calling :func:`conformance.declare.declare`;
modules whose name starts with ``_`` (``_common.py``: a family's shared helpers) declare nothing.
:func:`specs` lists the declarations in the golden's op order (:func:`golden_op_names`), then any
declared op the golden does not have (a test checks there is none).

Named cases and bad calls are addressed as ``"<op>/<name>"`` (:func:`named_case`, :func:`bad_call`).
"""

from __future__ import annotations

import importlib
import pkgutil

from .declare import BadCall, Case, OpDecl, Output, Stage  # noqa: F401 - re-exported

_REGISTRY: dict[str, OpDecl] = {}
_loaded = False


def golden_op_names() -> tuple[str, ...]:
    """The golden's ops (:func:`w8a8.registry.ops`), in its order: the one place conformance reads op
    names from."""
    import w8a8  # noqa: F401 - importing the golden registers its ops
    from w8a8 import registry

    return tuple(op.name for op in registry.ops())


def register(decl: OpDecl) -> OpDecl:
    """Record a checked declaration (called by :func:`conformance.declare.declare`)."""
    if decl.name in _REGISTRY and _REGISTRY[decl.name] is not decl:
        raise ValueError(f"op {decl.name!r} is declared twice ({_REGISTRY[decl.name].family} and {decl.family})")
    _REGISTRY[decl.name] = decl
    return decl


def declaration_modules() -> list[str]:
    """Every declaration module under :mod:`conformance.ops`, sorted (the discovery order)."""
    from . import ops

    found = []
    for info in pkgutil.walk_packages(ops.__path__, ops.__name__ + "."):
        leaf = info.name.rsplit(".", 1)[-1]
        if not info.ispkg and not leaf.startswith("_"):
            found.append(info.name)
    return sorted(found)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in declaration_modules():
        importlib.import_module(module)


def specs() -> dict[str, OpDecl]:
    """Every declared op, in the golden's op order (loading the declarations on first use)."""
    _load()
    order = {name: i for i, name in enumerate(golden_op_names())}
    return dict(sorted(_REGISTRY.items(), key=lambda kv: order.get(kv[0], len(order))))


declarations = specs


def get(name: str) -> OpDecl:
    all_specs = specs()
    if name not in all_specs:
        raise KeyError(f"no conformance spec for op {name!r}; known: {', '.join(sorted(all_specs))}")
    return all_specs[name]


def named_cases(op: str | None = None) -> list[Case]:
    """The named cases of ``op`` (or of every op), in declaration order."""
    return [c for d in specs().values() if op is None or d.name == op for c in d.cases]


def bad_calls(op: str | None = None) -> list[BadCall]:
    """The declared error inputs of ``op`` (or of every op), in declaration order."""
    return [b for d in specs().values() if op is None or d.name == op for b in d.bad_calls]


def _lookup(key: str, what: str, items) -> Case | BadCall:
    op, sep, name = key.partition("/")
    if not sep:
        raise KeyError(f"a {what} key is '<op>/<name>'; got {key!r}")
    listed = items(op) if op in specs() else []
    for item in listed:
        if item.name == name:
            return item
    raise KeyError(f"no {what} {key!r}; {op!r} has: {', '.join(i.name for i in listed) or 'none'}")


def named_case(key: str) -> Case:
    """The named case ``"<op>/<name>"``."""
    return _lookup(key, "named case", named_cases)


def bad_call(key: str) -> BadCall:
    """The bad call ``"<op>/<name>"``."""
    return _lookup(key, "bad call", bad_calls)
