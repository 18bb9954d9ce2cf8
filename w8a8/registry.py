"""The golden op registry: registering an op's golden function is what makes the op exist.

Every public op of the golden is decorated where it is defined::

    @golden_op("dense", check=quant_matmul_args, mirrors="torch_npu.npu_quant_matmul")
    def quant_matmul(x1, x2, scale, *, offset=None, ..., numerics=ASCEND): ...

The check contract (docs/architecture.md) is enforced at registration, so a misdeclared op fails at
import: the check is named ``<op>_args`` and has exactly the op's parameters and defaults. (That
it returns a frozen dataclass named ``<CamelCaseOp>Args`` — :func:`args_type_name` — is a property
of its result, pinned by ``tests/golden/test_registry.py``.)

:func:`ops` and :func:`names` list the registered ops; ``backends.ops.OPS``, the backends' op
methods and everything else that needs op names derive from them. :func:`import_modules` is what a
family package's ``__init__`` calls to import (and so register) every module it holds: a new module
is picked up without editing the package.

NumPy-free and project-free: this module imports the standard library only.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType

FAMILIES: tuple[str, ...] = ("dense", "moe", "lowbit")
"""The op families, in the order :func:`ops` lists them: the dense W8A8 ops, the grouped-MoE ops,
the low-bit formats."""


@dataclass(frozen=True)
class GoldenOp:
    """One registered golden op."""

    name: str
    """The op's name: its function's name, ``w8a8.<name>`` (torch_npu's name without ``npu_``)."""
    fn: Callable
    """The golden function."""
    check: Callable
    """``<name>_args``: the op's argument checks, same signature, returning the op's ``...Args``."""
    family: str
    """One of :data:`FAMILIES`."""
    mirrors: str
    """The torch_npu op it mirrors (``"torch_npu.npu_quant_matmul"``), or ``""`` for a serving path or
    a format with no torch_npu op."""
    takes_numerics: bool
    """Whether the op (and so its check) takes ``numerics=``."""
    module: str
    """The module that defines it (``"w8a8.quant_matmul"``)."""
    signature: inspect.Signature = field(repr=False, compare=False)
    """The op's (and its check's) signature."""

    @property
    def args_type_name(self) -> str:
        """The name of the dataclass its check returns (:func:`args_type_name`)."""
        return args_type_name(self.name)

    def args(self, *args, **kwargs):
        """The op's check on a call, exactly as the op itself would see it.

        A call that does not fit the op's signature raises the ``TypeError`` Python gives the op
        (the golden function is called for it: Python rejects the call before running any of its
        body), so even a misspelt keyword gets the op's own message, not its check's.
        """
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError:
            self.fn(*args, **kwargs)
            raise
        return self.check(*args, **kwargs)


_OPS: dict[str, GoldenOp] = {}


def args_type_name(op: str) -> str:
    """The naming rule of the check's result: each ``_``-separated part of the op's name capitalized,
    then ``Args``: ``quant_matmul`` -> ``QuantMatmulArgs``, ``w8a8_dynamic_linear`` ->
    ``W8a8DynamicLinearArgs``, ``moe_init_routing_v2`` -> ``MoeInitRoutingV2Args``."""
    return "".join(part.capitalize() for part in op.split("_")) + "Args"


def _parameters(sig: inspect.Signature) -> list[tuple]:
    """What the check contract compares of a signature: names, kinds and defaults (not annotations)."""
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def golden_op(family: str, *, check: Callable, mirrors: str = "") -> Callable[[Callable], Callable]:
    """Register the decorated golden function as an op of ``family`` whose argument checks are ``check``.

    Raises ``ValueError`` for an unknown family or a second op of the same name from another module,
    ``TypeError`` when ``check`` is not named ``<op>_args`` or does not have exactly the op's
    parameters and defaults. Returns the function unchanged.
    """
    if family not in FAMILIES:
        raise ValueError(f"golden_op: argument 'family' must be one of {FAMILIES}; got {family!r}")

    def register(fn: Callable) -> Callable:
        name = fn.__name__
        if check.__name__ != f"{name}_args":
            raise TypeError(f"golden_op {name!r}: its check must be named '{name}_args'; got {check.__name__!r}")
        sig = inspect.signature(fn)
        if _parameters(inspect.signature(check)) != _parameters(sig):
            raise TypeError(f"golden_op {name!r}: {check.__name__} must have exactly the op's parameters "
                            f"{sig}; got {inspect.signature(check)}")
        old = _OPS.get(name)
        if old is not None and old.module != fn.__module__:
            raise ValueError(f"golden_op {name!r}: already registered by {old.module}; got a second one in "
                             f"{fn.__module__}")
        _OPS[name] = GoldenOp(name=name, fn=fn, check=check, family=family, mirrors=mirrors,
                              takes_numerics="numerics" in sig.parameters, module=fn.__module__, signature=sig)
        return fn

    return register


def _loaded() -> dict[str, GoldenOp]:
    importlib.import_module("w8a8")  # the package imports every module, which registers every op
    return _OPS


def ops(family: str | None = None) -> tuple[GoldenOp, ...]:
    """The registered ops, family by family (:data:`FAMILIES` order), each in registration order;
    those of ``family`` only when given (ValueError for an unknown family)."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"w8a8.registry.ops: argument 'family' must be one of {FAMILIES}; got {family!r}")
    registered = _loaded().values()
    return tuple(op for fam in FAMILIES if family in (None, fam) for op in registered if op.family == fam)


def names(family: str | None = None) -> tuple[str, ...]:
    """The names of :func:`ops`, in its order."""
    return tuple(op.name for op in ops(family))


def get(name: str) -> GoldenOp:
    """The registered op called ``name``; KeyError naming the known ops otherwise."""
    registered = _loaded()
    if name not in registered:
        raise KeyError(f"no golden op {name!r}; known: {', '.join(names())}")
    return registered[name]


def import_modules(package: str, path: Iterable[str]) -> list[ModuleType]:
    """Import every public module of a package: its plain modules in name order, then its public
    subpackages in name order (``_private`` ones are skipped). Importing a module registers its ops;
    a family package's ``__init__`` calls this so that a new module needs no edit there."""
    found = sorted(pkgutil.iter_modules(list(path)), key=lambda m: (m.ispkg, m.name))
    return [importlib.import_module(f"{package}.{m.name}") for m in found if not m.name.startswith("_")]


def exports(modules: Iterable[ModuleType]) -> dict[str, object]:
    """``{name: object}`` for every name in the ``__all__`` of each module (modules without one export
    nothing, and so does a subpackage that sets ``FLATTEN = False``: it stays a namespace, e.g.
    ``w8a8.variants``), in module order; a name exported by two modules is a ValueError."""
    out: dict[str, object] = {}
    for module in modules:
        if getattr(module, "FLATTEN", True) is False:
            continue
        for name in getattr(module, "__all__", ()):
            if name in out and out[name] is not getattr(module, name):
                raise ValueError(f"w8a8: {name!r} is exported by two modules (the second is {module.__name__})")
            out[name] = getattr(module, name)
    return out
