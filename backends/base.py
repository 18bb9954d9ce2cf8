"""The ``Backend`` interface: ops implemented by registration, one prepare mechanism.

A backend implements (some of) the golden's ops (:mod:`w8a8.registry`). Its public op methods
(``backend.quant_matmul(...)``, one per registered op) have the golden's names and arguments and
take and return NumPy arrays. A subclass implements an op by registering methods::

    class MyBackend(Backend):
        name = "mine"
        numerics = w8a8.ASCEND              # the record it implements, bit for bit

        @loads("quant_matmul")              # optional: load-time work (untimed)
        def _load_qmm(self, a):             # a: the golden's QuantMatmulArgs (NumPy)
            return self.transfer(a.x1), ... # what the implementation gets
        @implements("quant_matmul")         # the device work (timed)
        def _qmm(self, loaded):
            ...

A registered method that declares a keyword-only ``op`` parameter gets the op's name (useful for
one method registered for several ops, ``@implements("a", "b")``), one that declares ``numerics``
the record the call runs under (the declared one, or another the backend accepts). An unknown op name, two methods of one class for the same op,
a loader without an implementation, or a registered method named like a public op method is a
``TypeError`` when the class is created.

:meth:`Backend.prepare` is the one mechanism, in this order:

1. the op is a registered golden op, else :class:`Unsupported`;
2. this backend implements it, else :class:`Unsupported` (never a broken test);
3. the backend is available, else :class:`Unsupported` with its reason;
4. the numerics asked for (``numerics=``) is the declared one or one the backend accepts
   (:meth:`Backend.accepts_numerics`), else :class:`Unsupported` — the one refusal for every backend;
5. the golden's check ``<op>_args(...)`` runs on the call (:meth:`Backend.checked_args`): its
   ``ValueError`` / ``TypeError`` propagate, so every backend refuses what the golden refuses, with
   the golden's message (NaN / Inf inputs under ``nan_policy="raise"`` included: a library that
   computes through them never sees them);
5b. :meth:`Backend.declines` on the checked Args: a reason (a call outside what the kernel takes: a
   dtype, a layout, a size) is :class:`Unsupported` with that reason. Conformance's planner asks the
   same method, so such cases are not drawn at all (``capabilities``: :mod:`backends.capabilities`);
6. the loader runs (untimed, ``Prepared.load_s``); what it converts with :meth:`Backend.transfer` is
   the host-to-device transfer (``Prepared.transfer_in_s``). Without a loader the implementation
   gets the Args with every array converted by :meth:`Backend.to_device`;
7. :meth:`Prepared.run` calls the implementation on what the loader returned, then
   :meth:`Backend.synchronize` (what benchmarks time);
8. :meth:`Prepared.finish` converts every device array of the result back with
   :meth:`Backend.from_device`.

A subclass declares ``name``, ``numerics``, optionally ``available()``, ``capabilities`` (or its own
``declines``), ``to_device`` / ``from_device`` / ``synchronize`` / ``supports``, and raises
:class:`Unsupported` from a loader or an implementation only for what ``declines`` cannot know
before loading (a data-dependent limit).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from w8a8 import registry
from w8a8.numerics import ASCEND, Numerics

from .ops import OPS


class Unsupported(Exception):
    """The backend cannot run this call (op, dtype combination, numerics): a skip, not a failure."""


@dataclass
class Prepared:
    """A backend call split at the device boundary (see the module docstring)."""

    op: str
    backend: str
    run: Callable[[], Any]
    finish: Callable[[Any], Any]
    transfer_in_s: float = 0.0
    load_s: float = 0.0
    notes: dict = field(default_factory=dict)

    def __call__(self):
        return self.finish(self.run())


class Bound:
    """A call of ``op`` with its weights bound (:meth:`Backend.bind`): ``bound(x, ...)`` runs it.

    ``bound(*activations, **per_call)`` calls ``backend.call(op, *activations, *bound_args,
    **bound_kwargs | per_call)``: the activations (``x``; ``x, x_scale`` of a prequantized MoE) come
    first, the bound arguments after them. This default prepares the whole call every time (the
    golden's checks, the loader — a weight's prepack included — then the run): the same results and
    costs as the direct method call. A backend overrides :meth:`Backend.bind` to pack the weights
    once. The bound arrays are read when the backend loads them (every call here, once per
    activation dtype where packed): do not modify them while bound.
    """

    def __init__(self, backend: "Backend", op: str, args: tuple, kwargs: dict):
        self.backend, self.op, self.args, self.kwargs = backend, op, tuple(args), dict(kwargs)

    def prepare(self, *activations, **per_call) -> "Prepared":
        """The bound call on ``activations`` split at the device boundary (:meth:`Backend.prepare`)."""
        return self.backend.prepare(self.op, *activations, *self.args, **{**self.kwargs, **per_call})

    def __call__(self, *activations, **per_call):
        return self.prepare(*activations, **per_call)()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.op} on '{self.backend.name}'>"


_MARKS = "_w8a8_backend_registrations"


def _mark(kind: str, ops: tuple[str, ...]) -> Callable[[Callable], Callable]:
    if not ops or not all(isinstance(op, str) for op in ops):
        raise TypeError(f"@{kind}: the op names, as strings (e.g. @{kind}('quant_matmul')); got {ops!r}")

    def decorate(fn: Callable) -> Callable:
        setattr(fn, _MARKS, getattr(fn, _MARKS, ()) + tuple((kind, op) for op in ops))
        return fn

    return decorate


def implements(*ops: str) -> Callable[[Callable], Callable]:
    """Register the decorated method as the backend's device work for ``ops`` (timed).

    It is called with what the op's loader returned (or, without a loader, the golden's Args with
    every array on the device) and returns the outputs in device space.
    """
    return _mark("implements", ops)


def loads(*ops: str) -> Callable[[Callable], Callable]:
    """Register the decorated method as the load-time work of ``ops`` (untimed).

    It is called with the golden's checked Args (NumPy arrays) and returns what the implementation
    gets; arrays it moves to the device go through :meth:`Backend.transfer`.
    """
    return _mark("loads", ops)


_CONTEXT = ("op", "numerics")  # what a registered method gets as keyword-only arguments, if it declares them


@functools.lru_cache(maxsize=None)
def _context_keywords(fn: Callable) -> tuple[str, ...]:
    params = inspect.signature(fn).parameters
    return tuple(k for k in _CONTEXT if k in params and params[k].kind is inspect.Parameter.KEYWORD_ONLY)


def _invoke(backend: Backend, method: str, value, op: str, numerics: Numerics):
    fn = getattr(backend, method)
    context = {"op": op, "numerics": numerics}
    return fn(value, **{k: context[k] for k in _context_keywords(getattr(fn, "__func__", fn))})


def _registrations(cls: type) -> tuple[dict[str, str], dict[str, str]]:
    """``({op: implementation method name}, {op: loader method name})`` of a class and its bases (the most
    derived registration wins; a subclass that overrides a registered method by name is called instead)."""
    known = set(registry.names())
    found: dict[str, dict[str, str]] = {"implements": {}, "loads": {}}
    for klass in reversed(cls.__mro__):
        own: dict[str, dict[str, str]] = {"implements": {}, "loads": {}}
        for attr, fn in vars(klass).items():
            for kind, op in getattr(fn, _MARKS, ()):
                if op not in known:
                    raise TypeError(f"{cls.__name__}.{attr}: @{kind}({op!r}): no golden op {op!r}; "
                                    f"known: {', '.join(sorted(known))}")
                if attr in known:
                    raise TypeError(f"{cls.__name__}.{attr}: a registered method must not be named like the public "
                                    f"op method {attr!r} (name it e.g. '_{attr}')")
                if own[kind].get(op, attr) != attr:
                    raise TypeError(f"{cls.__name__}: two methods @{kind}({op!r}): {own[kind][op]} and {attr}")
                own[kind][op] = attr
        for kind in found:
            found[kind].update(own[kind])
    orphans = sorted(set(found["loads"]) - set(found["implements"]))
    if orphans:
        raise TypeError(f"{cls.__name__}: @loads without @implements for {', '.join(orphans)}")
    return found["implements"], found["loads"]


class Backend:
    """Base class of every backend. See the module docstring for the contract."""

    name: str = "?"
    description: str = ""
    device: str = "cpu"
    numerics: Numerics = ASCEND
    compute: str = "int8"  # what its GEMMs run on: "int8" (int8 units) or "fp32" (float BLAS); bench's peak
    capabilities = None    # a backends.capabilities.Capabilities: what the kernels take (read by declines)
    in_default_runs = True  # False: run only when named (`--backend`): a library judged here, bugs and all
    float_sum_order = "golden"  # "golden": float sums in the golden's order (bitwise under the same record);
    #                             "library": the library's own order (float outputs may differ by reassociation,
    #                             which no Numerics field models: `w8a8 tune` measures it, no bound caps it at 0)

    _implementations: dict[str, str] = {}   # op -> the name of its registered method (implements)
    _loaders: dict[str, str] = {}           # op -> the name of its registered method (loads)
    _transfer_s: float | None = None  # seconds in transfer() while a call is being prepared

    _HOOKS = ("_is_device_array",)
    """The base class's private names a subclass may override (the device-array test of ``finish``)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _guard_private_names(cls)
        cls._implementations, cls._loaders = _registrations(cls)

    # -- identity -----------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """``(True, "")`` or ``(False, precise reason)``."""
        return True, ""

    def ops(self) -> tuple[str, ...]:
        """The ops this backend implements (registered with :func:`implements`), in registry order."""
        return tuple(op for op in OPS if op in self._implementations)

    def supports(self, op: str, **dtypes) -> bool:
        """Whether the backend can run ``op`` with these dtype choices (e.g. ``output_dtype="float16"``).

        The default answers for the op only; backends with partial dtype coverage override it.
        """
        return op in self.ops()

    def declines(self, op: str, a) -> str | None:
        """Why this backend does not take the call ``a`` (the golden's checked ``<Op>Args`` of ``op``), or
        None to accept it.

        Called by :meth:`prepare` right after the golden's check (a reason becomes :class:`Unsupported`),
        and by conformance's planner so that only accepted cases are drawn. The default reads
        :attr:`capabilities` (a :class:`backends.capabilities.Capabilities`) and accepts everything
        without one. Override it for a rule the declarative form cannot say; never raise from it.
        """
        caps = self.capabilities
        return None if caps is None else caps.declines(op, a)

    @property
    def spec(self) -> str:
        """The exact ``--backend`` spec this instance was created from (``backends.get``): a registered
        name, ``"package.module:Class"`` or ``"path/to/file.py:Class"`` — what a repro line must print
        to make the same backend again. Defaults to :attr:`name`."""
        return self.__dict__.get("_spec") or self.name

    @spec.setter
    def spec(self, value: str) -> None:
        self.__dict__["_spec"] = value

    def info(self) -> dict:
        ok, reason = self.available()
        caps = self.capabilities
        return {"name": self.name, "spec": self.spec, "available": ok, "reason": reason, "device": self.device,
                "description": self.description, "numerics": self.numerics.as_dict(),
                "numerics_differences": {k: list(v) for k, v in ASCEND.differences(self.numerics).items()},
                "ops": list(self.ops()), "capabilities": {} if caps is None else caps.describe(self.ops()),
                "in_default_runs": self.in_default_runs}

    # -- the boundary -------------------------------------------------------------------------
    def to_device(self, array: np.ndarray):
        return array

    def from_device(self, value) -> np.ndarray:
        return value

    def synchronize(self) -> None:
        """Wait for the device (no-op on synchronous backends)."""

    def transfer(self, value):
        """``value`` with every NumPy array in it converted by :meth:`to_device`: tuples, lists, dicts and
        dataclass instances (an Args) field by field; anything else as is. Loaders call this; the time
        it takes is the transfer of the call being prepared (``Prepared.transfer_in_s``)."""
        t0 = time.perf_counter()
        out = self._convert_in(value)
        if self._transfer_s is not None:
            self._transfer_s += time.perf_counter() - t0
        return out

    def accepts_numerics(self, numerics: Numerics) -> bool:
        """Whether a caller may ask for another numerics record (the golden backend can; devices can't)."""
        return False

    # -- calls ----------------------------------------------------------------------------------
    def prepare(self, op: str, /, *args, **kwargs) -> Prepared:
        """Check, convert and load a call of ``op``; return the device work and the way back (module docstring)."""
        golden = self._golden_op(op)
        method = self._implementation(op)
        self._require_available()
        numerics = self._numerics_for(kwargs.pop("numerics", None))
        checked = self.checked_args(golden, args, kwargs, numerics)
        reason = self.declines(op, checked)
        if reason:
            raise Unsupported(f"backend '{self.name}' declines {op}: {reason}")
        loaded, transfer_s, load_s = self._load(op, checked, numerics)

        def run():
            out = _invoke(self, method, loaded, op, numerics)
            self.synchronize()
            return out

        return Prepared(op=op, backend=self.name, run=run, finish=self._convert_out, transfer_in_s=transfer_s,
                        load_s=load_s, notes=self.notes(op, loaded))

    def call(self, op: str, /, *args, **kwargs):
        return self.prepare(op, *args, **kwargs)()

    def bind(self, op: str, /, *args, **kwargs) -> Bound:
        """``op`` with its weights bound: ``args`` / ``kwargs`` are the op's arguments after the activations
        (``bind("w8a8_dynamic_linear", weight, weight_scale, bias=b)`` then ``bound(x)``). Refuses what
        :meth:`prepare` refuses before the checks (unknown / unimplemented op, unavailable backend:
        :class:`Unsupported`). This default prepares every call (:class:`Bound`); backends that pack
        weights override it to pack once."""
        self._golden_op(op)
        self._implementation(op)
        self._require_available()
        return Bound(self, op, args, kwargs)

    def notes(self, op: str, loaded) -> dict:
        """What the backend records about a prepared call (``Prepared.notes``: a GEMM path, a plan). Default: none."""
        return {}

    def checked_args(self, golden: registry.GoldenOp, args: tuple, kwargs: dict, numerics: Numerics):
        """Step 5: the golden's check on the call (``numerics`` given where the op takes it): its Args."""
        if golden.takes_numerics:
            kwargs = {**kwargs, "numerics": numerics}
        return golden.args(*args, **kwargs)

    def _golden_op(self, op: str) -> registry.GoldenOp:
        try:
            return registry.get(op)
        except KeyError:
            raise Unsupported(f"backend '{self.name}' does not implement op '{op}' (no golden op of that name)") \
                from None

    def _implementation(self, op: str) -> str:
        method = self._implementations.get(op)
        if method is None:
            raise Unsupported(f"backend '{self.name}' does not implement op '{op}'")
        return method

    def _require_available(self) -> None:
        ok, reason = self.available()
        if not ok:
            raise Unsupported(f"backend '{self.name}' is not available: {reason}")

    def _numerics_for(self, requested) -> Numerics:
        """The record the call runs under: the declared one, or another the backend accepts."""
        if requested is None:
            return self.numerics
        if not isinstance(requested, Numerics):
            raise TypeError(f"backend '{self.name}': argument 'numerics' must be a w8a8.Numerics; "
                            f"got {type(requested).__name__} {requested!r}"[:200])
        if requested != self.numerics and not self.accepts_numerics(requested):
            raise Unsupported(f"backend '{self.name}' implements numerics '{self.numerics.name}' only; "
                              f"got {requested.differences(self.numerics) or requested.name}")
        return requested

    def _load(self, op: str, checked, numerics: Numerics) -> tuple[Any, float, float]:
        """Step 6: ``(what the implementation gets, transfer seconds, other load seconds)``."""
        loader = self._loaders.get(op)
        self._transfer_s = 0.0
        t0 = time.perf_counter()
        try:
            loaded = _invoke(self, loader, checked, op, numerics) if loader is not None else self.transfer(checked)
            transfer = self._transfer_s
        finally:
            self._transfer_s = None
        return loaded, transfer, max(time.perf_counter() - t0 - transfer, 0.0)

    def _convert_in(self, value):
        if isinstance(value, np.ndarray):
            return self.to_device(value)
        if isinstance(value, (tuple, list)):
            items = [self._convert_in(v) for v in value]
            return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
        if isinstance(value, dict):
            return {k: self._convert_in(v) for k, v in value.items()}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {}
            for f in dataclasses.fields(value):
                old = getattr(value, f.name)
                new = self._convert_in(old)
                if new is not old:
                    changes[f.name] = new
            return dataclasses.replace(value, **changes) if changes else value
        return value

    def _convert_out(self, value):
        if self._is_device_array(value):
            return self.from_device(value)
        if isinstance(value, (tuple, list)):
            return type(value)(self._convert_out(v) for v in value)
        if isinstance(value, dict):
            return {k: self._convert_out(v) for k, v in value.items()}
        return value

    def _is_device_array(self, value) -> bool:
        """Whether ``value`` is an array of this backend (converted back by ``from_device``)."""
        return isinstance(value, np.ndarray)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} '{self.name}'>"


def _guard_private_names(cls) -> None:
    """A subclass that defines one of :class:`Backend`'s own private names (``_load``, ``_convert_out``,
    ...) would silently replace the base class's machinery: a TypeError naming both, at class creation."""
    own = {n for n in vars(Backend) if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))}
    clash = sorted((own - set(Backend._HOOKS)) & set(vars(cls)))
    if clash:
        name = clash[0]
        raise TypeError(f"{cls.__module__}.{cls.__qualname__}.{name} shadows backends.Backend.{name}, the base "
                        f"class's own machinery; rename it (a backend's helpers may use any other name)")


def _op_method(op: registry.GoldenOp):
    def method(self, *args, **kwargs):
        return self.call(op.name, *args, **kwargs)

    method.__name__ = op.name
    method.__qualname__ = f"Backend.{op.name}"
    method.__doc__ = (f"``{op.name}`` on this backend: NumPy arrays in and out. Same arguments as the golden "
                      f":func:`{op.module}.{op.name}`.")
    method.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + list(op.signature.parameters.values()))
    return method


for _op in registry.ops():
    setattr(Backend, _op.name, _op_method(_op))
