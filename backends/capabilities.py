"""What a backend's kernels take, declared: the rules behind :meth:`backends.base.Backend.declines`.

A library kernel takes less than the golden op: fewer dtypes, one layout, a shape limit, a per-tensor
scale where the op has per-channel ones. A backend says so once, per op, and both the base class (a
call outside is :class:`~backends.base.Unsupported` with the reason) and conformance's planner (such
cases are not drawn) read the same rules::

    from backends.capabilities import Accepts, Capabilities

    class MyBackend(Backend):
        capabilities = Capabilities({
            "quantize": Accepts(dtypes={"x": ("float32", "float16")}, values={"div_mode": (True,)}),
            "int_matmul": Accepts(dtypes={"a": ("int8", "uint8"), "b": ("int8", "uint8")}, max_ndim={"b": 2}),
            "mx_quantize": Accepts(multiple_of={"x.shape[-1]": 32}, require=[("contiguous x", lambda a: ...)]),
        })

Every rule reads the golden's checked ``<Op>Args`` (``a``): a name is an attribute path of it
(``"x"``, ``"params.weight_scale"``, ``"quant.x"``), optionally followed by ``.shape[i]``, ``.ndim``,
``.size`` or ``.dtype``. A reason names the argument, what the kernel takes and what came. An op
without an entry is accepted whole (what the golden's check let through); an op with
``Accepts(never="why")`` is declined whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from w8a8 import dtypes as _dt

__all__ = ["Accepts", "Capabilities", "resolve"]

_TAIL = re.compile(r"^(?P<path>[A-Za-z_][\w.]*?)(?:\.(?P<attr>shape\[(?P<axis>-?\d+)\]|ndim|size|dtype))?$")
_MISSING = object()


def _parse(name: str) -> re.Match:
    m = _TAIL.match(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"capabilities: cannot read {name!r} (an attribute path, optionally .shape[i], .ndim, "
                         ".size or .dtype)")
    return m


def resolve(a, name: str):
    """The value ``name`` reads from ``a`` (see the module docstring); ``_MISSING`` where a part is
    absent, None where an optional argument is None."""
    m = _parse(name)
    value = a
    for part in m.group("path").split("."):
        value = getattr(value, part, _MISSING)
        if value is _MISSING or value is None:
            return value
    attr = m.group("attr")
    if attr is None:
        return value
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if attr == "ndim":
        return arr.ndim
    if attr == "size":
        return int(arr.size)
    if attr == "dtype":
        return arr.dtype
    axis = int(m.group("axis"))
    return int(arr.shape[axis]) if -arr.ndim <= axis < arr.ndim else _MISSING


def _dtype_name(value) -> str:
    try:
        return _dt.name(value.dtype if isinstance(value, np.ndarray) else value)
    except (TypeError, ValueError, KeyError, AttributeError):
        return str(getattr(value, "dtype", value))


def _value_name(value) -> str:
    return _dtype_name(value) if isinstance(value, np.dtype) else repr(value)


def _shown(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{_dtype_name(value)} of shape {tuple(value.shape)}"
    return repr(value)


@dataclass(frozen=True)
class Accepts:
    """The calls of one op a kernel takes. Every condition must hold (the first that fails is the reason).

    dtypes : ``{name: dtype names}`` — the array (or dtype) ``name`` has one of these dtypes; None is
        accepted (an absent optional argument).
    values : ``{name: allowed values}`` — a plain value (``div_mode``, ``dst_name``, ``out_name``,
        ``scale_mode`` ...) is one of these.
    absent : names that must be None (an optional argument the kernel has no input for).
    per_tensor : names whose array, when given, must hold a single value (size 1).
    ndim, max_ndim : ``{name: n}`` — exactly / at most n dims (None accepted).
    multiple_of : ``{name: m}`` — an integer (``"k"``, ``"x.shape[-1]"``) that is a multiple of m.
    at_least, at_most : ``{name: bound}`` — an integer within the bound.
    require : ``[(what, predicate)]`` — ``predicate(a)`` must be true; ``what`` says what the kernel
        needs, in words (it is the reason when it fails).
    never : a reason to decline every call of the op (an op the library has no kernel for on this
        host, kept registered so that the report says why).
    """

    dtypes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    values: dict[str, tuple] = field(default_factory=dict)
    absent: tuple[str, ...] = ()
    per_tensor: tuple[str, ...] = ()
    ndim: dict[str, int] = field(default_factory=dict)
    max_ndim: dict[str, int] = field(default_factory=dict)
    multiple_of: dict[str, int] = field(default_factory=dict)
    at_least: dict[str, int] = field(default_factory=dict)
    at_most: dict[str, int] = field(default_factory=dict)
    require: tuple[tuple[str, Callable], ...] = ()
    never: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "require", tuple(self.require))
        for names in (self.dtypes, self.values, self.ndim, self.max_ndim, self.multiple_of, self.at_least,
                      self.at_most, self.absent, self.per_tensor):
            for name in names:
                _parse(name)  # a malformed name is an error when the backend class is defined
        for item in self.require:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and callable(item[1])):
                raise TypeError(f"Accepts: 'require' holds (what, predicate) pairs; got {item!r}")

    def declines(self, a) -> str | None:
        """The first condition ``a`` breaks, in words, or None."""
        if self.never:
            return self.never
        for name, allowed in self.dtypes.items():
            v = resolve(a, name)
            if v is None or v is _MISSING:
                continue
            got = _dtype_name(v)
            if got not in allowed:
                return f"{name}: dtype {' / '.join(allowed)} only; got {got}"
        for name, allowed in self.values.items():
            v = resolve(a, name)
            if v is not _MISSING and v not in allowed:
                return f"{name}: {' / '.join(map(_value_name, allowed))} only; got {_value_name(v)}"
        for name in self.absent:
            v = resolve(a, name)
            if v is not None and v is not _MISSING:
                return f"{name}: not taken by this kernel (None only); got {_shown(v)}"
        for name in self.per_tensor:
            v = resolve(a, name)
            if isinstance(v, np.ndarray) and v.size != 1:
                return f"{name}: per-tensor (one value) only; got {_shown(v)}"
        for rules, test, words in ((self.ndim, lambda v, n: v == n, "exactly {} dims"),
                                   (self.max_ndim, lambda v, n: v <= n, "at most {} dims")):
            for name, n in rules.items():
                v = resolve(a, name)
                if isinstance(v, np.ndarray) and not test(v.ndim, n):
                    return f"{name}: {words.format(n)}; got {_shown(v)}"
        for rules, test, words in ((self.multiple_of, lambda v, m: v % m == 0, "a multiple of {}"),
                                   (self.at_least, lambda v, m: v >= m, ">= {}"),
                                   (self.at_most, lambda v, m: v <= m, "<= {}")):
            for name, bound in rules.items():
                v = resolve(a, name)
                if v is _MISSING or v is None:
                    continue
                if not test(int(v), bound):
                    return f"{name}: {words.format(bound)}; got {int(v)}"
        for what, predicate in self.require:
            if not predicate(a):
                return f"needs {what}"
        return None

    def describe(self) -> list[str]:
        """The conditions in words (for ``w8a8 backends`` and the README tables)."""
        if self.never:
            return [f"never: {self.never}"]
        out = [f"{n}: {' / '.join(d)}" for n, d in self.dtypes.items()]
        out += [f"{n}: {' / '.join(_value_name(x) for x in v)}" for n, v in self.values.items()]
        out += [f"{n}: none" for n in self.absent]
        out += [f"{n}: per-tensor" for n in self.per_tensor]
        out += [f"{n}: {k} dims" for n, k in self.ndim.items()]
        out += [f"{n}: <= {k} dims" for n, k in self.max_ndim.items()]
        out += [f"{n} % {m} == 0" for n, m in self.multiple_of.items()]
        out += [f"{n} >= {m}" for n, m in self.at_least.items()]
        out += [f"{n} <= {m}" for n, m in self.at_most.items()]
        out += [what for what, _ in self.require]
        return out


class Capabilities:
    """``{op: Accepts}`` for one backend: :meth:`declines` is :meth:`backends.base.Backend.declines`."""

    def __init__(self, rules: dict[str, Accepts]):
        for op, rule in rules.items():
            if not isinstance(rule, Accepts):
                raise TypeError(f"Capabilities: op {op!r} needs an Accepts(...); got {type(rule).__name__}")
        self.rules = dict(rules)

    def declines(self, op: str, a) -> str | None:
        rule = self.rules.get(op)
        return None if rule is None else rule.declines(a)

    def describe(self, ops: Iterable[str] | None = None) -> dict[str, list[str]]:
        """``{op: [condition, ...]}`` for ``ops`` (default: every op with a rule); an op without one:
        ``[]`` (everything the golden accepts)."""
        names = self.rules if ops is None else ops
        return {op: self.rules[op].describe() if op in self.rules else [] for op in names}

    def merged(self, other: dict[str, Accepts]) -> Capabilities:
        """A copy with ``other``'s rules added (or replacing rules of the same op)."""
        return Capabilities({**self.rules, **other})
