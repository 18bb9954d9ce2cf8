"""The declaration vocabulary: everything conformance knows about one op, in one :class:`OpDecl`.

An op exists for conformance when its file under ``conformance/ops/<family>/<op>.py`` calls
:func:`declare` (the files are discovered; nothing else is edited). A declaration holds

* ``params`` — a Hypothesis strategy of a JSON-able parameter dict (shapes, dtypes, options, the
  value distribution and a ``seed``): drawn first, so they shrink; ``strategies`` — more named
  strategies for regions the main one does not reach (random bit patterns, odd layouts), each
  with the same ``build``;
* ``build(params) -> (args, kwargs)`` — the concrete NumPy inputs, deterministic from the dict;
* ``outputs`` — the name and kind of each returned array, in return order (:class:`Output`);
* ``stages`` — for attribution, the pipeline's intermediate results in order (:class:`Stage`),
  each computed on any backend from the *golden's* upstream values;
* ``numerics_fields`` — the :class:`w8a8.Numerics` fields the op depends on (what attribution varies);
* ``pre_round`` — for int outputs, the golden's float64 value before rounding (tie-aware compare);
* ``mask`` — where outputs are specified (rows beyond a group_list total are not);
* ``cases`` — named cases (:class:`Case`): small inputs with hand-derived expected bits;
* ``bad_calls`` — error inputs (:class:`BadCall`): the exception type and message every backend
  must reproduce (the golden's, since ``Backend.prepare`` runs the golden's argument check);
* ``bench`` — ``(full) -> [BenchCase]``: the op at the model shapes that matter.

At least one named case is required: the first is the op's *valid call* (:meth:`OpDecl.valid_call`),
from which the golden's contract tests derive their bad inputs (no test keeps its own list of ops).
The op's kernel variants are not declared here: every caller asks :func:`w8a8.variants.select`.

Everything in a declaration is data or a pure function of its inputs: the runner, the pytest
suite, the bench, tolerance validation and ``w8a8 conformance --list-ops`` all read it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

OUTPUT_KINDS = ("int", "float", "scale")
Inputs = tuple[tuple, dict]


@dataclass(frozen=True)
class Output:
    """One returned array: ``kind`` is ``"int"`` (bitwise; tie-aware off-by-one allowed by a
    tolerance), ``"float"`` (ULP of its dtype) or ``"scale"`` (bitwise unless a tolerance says
    otherwise). See :mod:`conformance.compare`."""

    name: str
    kind: str


def outputs(*pairs: tuple[str, str]) -> tuple[Output, ...]:
    """``outputs(("y", "int"), ("scale", "scale"))``: the op's outputs in return order."""
    return tuple(Output(n, k) for n, k in pairs)


@dataclass(frozen=True)
class Stage:
    """One intermediate result: ``fn(backend, args, kwargs, upstream) -> array`` where ``upstream``
    holds the golden's values of the earlier stages."""

    name: str
    kind: str
    fn: Callable[..., np.ndarray]


@dataclass(frozen=True)
class Case:
    """A named case: ``build() -> (args, kwargs)`` and the documented values of some (or all)
    outputs, derived by hand in ``why`` — from the vendor documentation or the format's definition,
    not from the golden. Both the golden and the backend must produce them (bit for bit, where the
    output is specified). A case with no ``expected`` pins an input whose point is its shape or
    path (K = 4097, an empty group, a transposed weight); it is compared with the golden only.

    The documented values hold under ``numerics`` (default: :data:`w8a8.ASCEND`, the device's record
    with its kernel variants). A backend that declares another record is held to them where the
    golden under that record gives them too, and otherwise compared with the golden under its record
    only. ``op`` is set by :func:`declare`."""

    name: str
    build: Callable[[], Inputs]
    expected: Mapping[str, np.ndarray] = field(default_factory=dict)
    why: str = ""
    op: str = ""
    numerics: Any = None

    @property
    def key(self) -> str:
        return f"{self.op}/{self.name}"


@dataclass(frozen=True)
class BadCall:
    """An error input: ``build() -> (args, kwargs)`` must raise ``raises`` with a message matching
    the regular expression ``match`` — on the golden (else the declaration is wrong) and on every
    backend. ``op`` is set by :func:`declare`."""

    name: str
    build: Callable[[], Inputs]
    raises: type[Exception]
    match: str
    why: str = ""
    op: str = ""

    @property
    def key(self) -> str:
        return f"{self.op}/{self.name}"

    def judge(self, exc: BaseException | None) -> str | None:
        """None when ``exc`` is the declared error, else what is wrong with it (in words)."""
        if exc is None:
            return f"returned; {self.raises.__name__} matching {self.match!r} was expected"
        if not isinstance(exc, self.raises):
            return f"raised {type(exc).__name__}: {exc}; {self.raises.__name__} was expected"
        if not re.search(self.match, str(exc)):
            return f"raised {type(exc).__name__} whose message {str(exc)!r} does not match {self.match!r}"
        return None


DROP = object()
"""In :func:`varied`: remove that keyword argument."""


def varied(base: Callable[[], Inputs], args: Mapping[int, Any] | None = None, **kwargs) -> Inputs:
    """``base()`` — a valid call's ``(args, kwargs)`` — with the positional arguments in ``args``
    (``{index: value}``) and the keyword arguments in ``kwargs`` replaced (:data:`DROP` removes one):
    how a bad call says what it changes in a call that is otherwise right."""
    base_args, base_kwargs = base()
    new_args = list(base_args)
    for i, value in (args or {}).items():
        new_args[i] = value
    new_kwargs = {**base_kwargs, **kwargs}
    return tuple(new_args), {k: v for k, v in new_kwargs.items() if v is not DROP}


@dataclass(frozen=True)
class BenchCase:
    """The op at one benchmark shape: ``inputs(params, rng) -> (args, kwargs)`` builds the inputs
    (deterministic from the generator), ``work`` is the useful work (int8 MACs x 2, or elements for
    elementwise ops; ``unit`` ``"OPS"`` or ``"elem"``), ``tags`` select sets (``"quick"``,
    ``"dsv4"``, ``"grid"``, ``"scaling:<axis>"``) and ``compute`` names the units the work runs on
    whatever the backend declares (``"fp64"``), or None.

    ``inputs`` is a module-level function and ``params`` plain JSON, so a case pickles by
    reference: the bench sends it whole to its per-backend worker process."""

    op: str
    label: str
    params: dict
    inputs: Callable[[dict, np.random.Generator], Inputs]
    work: float
    unit: str = "OPS"
    tags: tuple = ()
    compute: str | None = None

    @property
    def name(self) -> str:
        return f"{self.op}[{self.label}]"

    def build(self, rng: np.random.Generator) -> Inputs:
        return self.inputs(self.params, rng)


@dataclass
class OpDecl:
    """Everything conformance knows about one op (see the module docstring)."""

    name: str
    family: str
    params: Callable[[], Any]
    build: Callable[[dict], Inputs]
    outputs: tuple[Output, ...]
    numerics_fields: tuple[str, ...] = ()
    stages: tuple[Stage, ...] = ()
    pre_round: Callable[[tuple, dict, Any], dict[str, np.ndarray]] | None = None
    mask: Callable[[tuple, dict], dict[str, np.ndarray]] | None = None
    description: str = ""
    mistrust_degenerate: bool = True  # False for pure data movement (see conformance.compare.compare)
    strategies: Mapping[str, Callable[[], Any]] = field(default_factory=dict)
    cases: Sequence[Case] = ()
    bad_calls: Sequence[BadCall] = ()
    bench: Callable[[bool], Sequence[BenchCase]] | None = None
    ranked: bool = False  # the op runs on a list of simulated ranks (expert parallelism): see as_outputs

    def as_outputs(self, result) -> dict[str, np.ndarray]:
        """Name the arrays an op returned (a single array or a tuple, in ``outputs`` order).

        A ``ranked`` op (one that takes and returns a list with one array per simulated rank) returns
        a list per output (a single output: the list itself); each is compared as the concatenation of
        its ranks' arrays along axis 0, in the op's list order."""
        if self.ranked:
            values = result if isinstance(result, tuple) else (result,)
            values = tuple(np.concatenate(v) if isinstance(v, list) else v for v in values)
        else:
            values = result if isinstance(result, (tuple, list)) else (result,)
        if len(values) != len(self.outputs):
            raise ValueError(f"{self.name}: expected {len(self.outputs)} output(s) "
                             f"({', '.join(o.name for o in self.outputs)}), got {len(values)}")
        return {o.name: (None if v is None else np.asarray(v)) for o, v in zip(self.outputs, values)}

    def valid_call(self) -> Inputs:
        """A valid call of the op, ``(args, kwargs)``: its first named case's inputs (:func:`declare`
        requires one). The golden's contract tests break it argument by argument
        (``tests/golden/test_registry.py``)."""
        return self.cases[0].build()

    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)

    def all_strategies(self) -> dict[str, Callable[[], Any]]:
        """``{"main": params, **strategies}``: every strategy the op's inputs are drawn from."""
        return {"main": self.params, **self.strategies}

    def bench_cases(self, full: bool) -> list[BenchCase]:
        return list(self.bench(full)) if self.bench else []


def declare(decl: OpDecl) -> OpDecl:
    """Check a declaration and register it (what makes the op exist for conformance).

    Raises ValueError for a malformed declaration: no named case, an unknown output kind, duplicate
    output, case or bad-call names, a case expecting an output the op does not have, a bad call without a
    ValueError / TypeError / OverflowError, or a ``match`` that is not a regular expression.
    """
    from . import registry

    where = f"declaration of {decl.name!r}"
    if not decl.cases:
        raise ValueError(f"{where}: declares no named case; its first named case is the op's valid call")
    names = decl.output_names()
    for o in decl.outputs:
        if o.kind not in OUTPUT_KINDS:
            raise ValueError(f"{where}: output {o.name!r} has kind {o.kind!r}; expected one of {OUTPUT_KINDS}")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: duplicate output names {names}")
    decl.cases = tuple(dataclasses.replace(c, op=decl.name) for c in decl.cases)
    decl.bad_calls = tuple(dataclasses.replace(b, op=decl.name) for b in decl.bad_calls)
    for what, items in (("case", decl.cases), ("bad call", decl.bad_calls)):
        seen = [i.name for i in items]
        dupes = sorted({n for n in seen if seen.count(n) > 1})
        if dupes:
            raise ValueError(f"{where}: duplicate {what} names {dupes}")
    for c in decl.cases:
        unknown = [k for k in c.expected if k not in names]
        if unknown:
            raise ValueError(f"{where}: case {c.name!r} expects unknown output(s) {unknown}; outputs: {names}")
    for b in decl.bad_calls:
        if not (isinstance(b.raises, type) and issubclass(b.raises, (ValueError, TypeError, OverflowError))):
            raise ValueError(f"{where}: bad call {b.name!r} must raise ValueError, TypeError or OverflowError; "
                             f"got {b.raises!r}")
        try:
            re.compile(b.match)
        except re.error as exc:
            raise ValueError(f"{where}: bad call {b.name!r} has an invalid 'match' regex: {exc}") from None
    registry.register(decl)
    return decl
