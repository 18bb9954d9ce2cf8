"""The lowered form of one golden-style op call on torch_npu: a small, inspectable plan.

Pure Python + NumPy: a plan is built and checked on any machine; only :mod:`.execution` needs the
device. A :class:`Plan` holds

* ``inputs``: the NumPy arrays that go to the device, already in the shape and dtype the torch_npu
  call wants (a ``(1, N)`` scale made 1-D, x flattened to 2-D, a weight scale rounded to bf16...),
  each tagged ``activation`` / ``weight`` / ``param``;
* ``load``: the load-time device steps a serving stack runs once per weight (transpose,
  ``contiguous``, ``npu_format_cast(w, 29)``, ``npu_trans_quant_param``), outside the timed region;
* ``calls``: the timed device work, in order: the exact ``torch_npu.*`` calls with their positional
  and keyword arguments;
* ``outputs`` (+ ``container``, ``truncate``, ``reshape``, ``readback``, ``fixups``): which device
  tensors are the golden's results, how they are returned (one array, a tuple, a one-element list) and
  what the host does to them after the copy back (keep the first rows, reshape, fill undefined rows);
* ``formats``: the storage format (``ND`` / ``NZ``) of every weight after load;
* ``decisions``: one line per choice the lowering made and why (NZ or ND, packed scale, ...).

Arguments of a :class:`Call` are scalars, lists, ``None``, :class:`T` (a named device tensor: an
input or an earlier call's output), :class:`DType` (a torch dtype by name, resolved to
``torch.<name>`` at execution) and :class:`Group` (the HCCL communicator name of the rank's group).
Function names are ``torch_npu.<fn>`` (the op plugin), ``torch.<fn>`` or ``Tensor.<method>`` (a method
of the first argument). An expert-parallel op lowers to an :class:`EpPlan`: one plan per rank.

Errors: a documented torch_npu / CANN constraint that the call would violate raises
:class:`ConstraintError` (a ``ValueError``) or :class:`ConstraintTypeError` (a ``TypeError``),
both :class:`backends.base.Unsupported` as well — conformance counts them as a skip ("the device
cannot run this call"), ordinary callers see a ``ValueError`` / ``TypeError`` naming the argument.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from w8a8 import _check

from ..base import Unsupported

ACL_FORMAT_ND = 2
ACL_FORMAT_FRACTAL_NZ = 29


class ConstraintError(Unsupported, ValueError):
    """The call violates a documented torch_npu / CANN constraint (a value, shape or combination)."""


class ConstraintTypeError(Unsupported, TypeError):
    """The call violates a documented torch_npu / CANN dtype constraint."""


def reject(op: str, arg: str, expected: str, got: str, source: str, *, dtype: bool = False):
    """Raise the constraint error for ``arg``: what the device needs, what came, where that is documented."""
    cls = ConstraintTypeError if dtype else ConstraintError
    raise cls(f"{op}: argument '{arg}' must be {expected} on torch_npu ({source}); got {got}")


@dataclass(frozen=True)
class T:
    """A named device tensor of the plan: an input, or an output of an earlier load step / call."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class DType:
    """A torch dtype by name: ``DType("bfloat16")`` is ``torch.bfloat16`` (``qint8``, ``quint4x2``...)."""

    name: str

    def __repr__(self) -> str:
        return f"torch.{self.name}"


@dataclass(frozen=True)
class Group:
    """The HCCL communicator name of the rank's process group (``group_ep`` / ``group_tp`` of the MC2 EP
    ops), resolved at execution: ``group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)``
    (op-plugin docs example). The golden's ``group_ep`` is only a checked name; the device needs this."""

    name: str = "ep"

    def __repr__(self) -> str:
        return f"<hccl comm name of group {self.name!r}>"


@dataclass(frozen=True)
class Input:
    """A host array transferred to the device (``kind``: ``activation``, ``weight`` or ``param``)."""

    name: str
    array: np.ndarray
    kind: str
    source: str = ""

    @property
    def dtype(self) -> str:
        return self.array.dtype.name


@dataclass(frozen=True)
class Call:
    """One device call: ``fn(*args, **kwargs)``; its result (element ``pick`` of it, when set) is bound
    to ``out`` (one name, or one name per element of a tuple result)."""

    fn: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    out: tuple[str, ...] = ()
    pick: int | None = None
    why: str = ""

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        head = ", ".join(self.out) + " = " if self.out else ""
        tail = f"[{self.pick}]" if self.pick is not None else ""
        return f"{head}{self.fn}({', '.join(parts)}){tail}"


@dataclass(frozen=True)
class Fixup:
    """Host-side, after the copy back: rows ``rows_from:`` of ``output``, which the device leaves
    undefined, are set to ``value`` — the golden's fill — so that results are deterministic."""

    output: str
    rows_from: int
    value: int
    why: str


@dataclass
class Plan:
    """A lowered op call (see the module docstring)."""

    op: str
    inputs: dict[str, Input]
    load: list[Call]
    calls: list[Call]
    outputs: tuple[str, ...]
    container: str
    reshape: dict[str, tuple[int, ...]] = field(default_factory=dict)
    readback: dict[str, tuple[int, ...]] = field(default_factory=dict)
    fixups: list[Fixup] = field(default_factory=list)
    formats: dict[str, str] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)
    truncate: dict[str, int] = field(default_factory=dict)

    def functions(self, stage: str = "calls") -> list[str]:
        """The function names of ``calls`` (or ``load``), in order."""
        return [c.fn for c in getattr(self, stage)]

    def find(self, fn: str, stage: str = "calls", index: int = 0) -> Call:
        """The ``index``-th call of ``fn`` (``"npu_quant_matmul"`` or ``"torch_npu.npu_quant_matmul"``)."""
        found = [c for c in getattr(self, stage) if c.fn == fn or c.fn.endswith("." + fn)]
        if len(found) <= index:
            raise KeyError(f"plan for {self.op} has no call {index} of {fn} in {stage}: {self.functions(stage)}")
        return found[index]

    def value(self, ref) -> Any:
        """The host array behind a :class:`T` that names an input (for inspection and tests)."""
        return self.inputs[ref.name].array if isinstance(ref, T) else ref

    def needs_internal_format(self) -> bool:
        """Whether any step casts to FRACTAL_NZ (execution then sets ``allow_internal_format``)."""
        return any(c.fn == "torch_npu.npu_format_cast" and ACL_FORMAT_FRACTAL_NZ in c.args
                   for c in self.load + self.calls)

    def finish(self, arrays: list[np.ndarray]):
        """Host side, after the copy back: reshape, fill the undefined rows, return in the golden's form."""
        results = []
        for name, array in zip(self.outputs, arrays, strict=True):
            if name in self.truncate:
                array = array[: self.truncate[name]]
            if name in self.reshape:
                array = array.reshape(self.reshape[name])
            fixes = [f for f in self.fixups if f.output == name]
            if fixes:
                array = np.array(array, copy=True)
                for f in fixes:
                    array[f.rows_from:] = f.value
            results.append(array)
        if self.container == "single":
            return results[0]
        if self.container == "list":
            return [results[0]]
        return tuple(results)

    def describe(self) -> str:
        """A readable multi-line account of the plan."""
        lines = [f"torch-npu plan for {self.op}", "inputs:"]
        for inp in self.inputs.values():
            lines.append(f"  {inp.name}: {inp.dtype} {tuple(inp.array.shape)} [{inp.kind}] {inp.source}".rstrip())
        if self.load:
            lines.append("load (once, untimed):")
            lines += [f"  {c!r}" + (f"    # {c.why}" if c.why else "") for c in self.load]
        lines.append("run (timed):")
        lines += [f"  {c!r}" + (f"    # {c.why}" if c.why else "") for c in self.calls]
        lines.append(f"outputs: {', '.join(self.outputs)}")
        for name, rows in self.truncate.items():
            lines.append(f"  {name} -> first {rows} rows (the valid ones; the device's capacity is larger)")
        for name, shape in self.reshape.items():
            lines.append(f"  {name} -> reshape {shape}")
        for name, shape in self.readback.items():
            lines.append(f"  {name} -> raw NZ storage {shape}")
        for f in self.fixups:
            lines.append(f"  {f.output}[{f.rows_from}:] = {f.value}    # {f.why}")
        if self.formats:
            lines.append("formats: " + ", ".join(f"{k}={v}" for k, v in self.formats.items()))
        lines += [f"- {d}" for d in self.decisions]
        return "\n".join(lines)


class Builder:
    """Assembles a :class:`Plan`: unique names, inputs, load steps, calls, decisions."""

    def __init__(self, op: str):
        self.op = op
        self.inputs: dict[str, Input] = {}
        self.load_steps: list[Call] = []
        self.calls: list[Call] = []
        self.decisions: list[str] = []
        self.formats: dict[str, str] = {}
        self.fixups: list[Fixup] = []
        self._names: set[str] = set()

    def _name(self, name: str) -> str:
        base, i = name, 1
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    def input(self, name: str, array: np.ndarray, kind: str = "activation", source: str = "") -> T:
        name = self._name(name)
        array = np.ascontiguousarray(array)
        if not array.flags.writeable:   # a broadcast view: torch.from_numpy wants writable memory
            array = array.copy()
        self.inputs[name] = Input(name, array, kind, source)
        return T(name)

    def optional(self, name: str, array: np.ndarray | None, kind: str = "param", source: str = "") -> T | None:
        return None if array is None else self.input(name, array, kind, source)

    def _step(self, steps: list, fn: str, args, kwargs, out, pick, why):
        out = (out,) if isinstance(out, str) else tuple(out)
        names = tuple(self._name(o) for o in out)
        steps.append(Call(fn, tuple(args), dict(kwargs or {}), names, pick, why))
        refs = tuple(T(n) for n in names)
        return refs[0] if len(refs) == 1 else refs

    def load(self, fn: str, args=(), kwargs=None, *, out, pick=None, why: str = ""):
        """A load-time step (untimed); returns the :class:`T` of its result(s)."""
        return self._step(self.load_steps, fn, args, kwargs, out, pick, why)

    def call(self, fn: str, args=(), kwargs=None, *, out, pick=None, why: str = ""):
        """A timed device call; returns the :class:`T` of its result(s)."""
        return self._step(self.calls, fn, args, kwargs, out, pick, why)

    def decide(self, text: str) -> None:
        self.decisions.append(text)

    def fixup(self, output: T, rows_from: int, total_rows: int, why: str, value: int = 0) -> None:
        """Fill rows ``rows_from:`` of ``output`` with ``value`` on the host (nothing when none are left)."""
        if rows_from < total_rows:
            self.fixups.append(Fixup(output.name, int(rows_from), int(value), why))

    def build(self, outputs, *, container: str | None = None, reshape: dict | None = None,
              readback: dict | None = None, truncate: dict | None = None) -> Plan:
        """The plan; ``container`` defaults to ``"single"`` for one output and ``"tuple"`` for several."""
        outputs = (outputs,) if isinstance(outputs, T) else tuple(outputs)
        container = container or ("single" if len(outputs) == 1 else "tuple")
        if container not in ("single", "tuple", "list"):
            raise ValueError(f"Builder.build: container must be 'single', 'tuple' or 'list'; got {container!r}")
        key = lambda d: {k.name if isinstance(k, T) else k: tuple(v) for k, v in (d or {}).items()}  # noqa: E731
        rows = {k.name if isinstance(k, T) else k: int(v) for k, v in (truncate or {}).items()}
        return Plan(self.op, self.inputs, self.load_steps, self.calls, tuple(o.name for o in outputs), container,
                    key(reshape), key(readback), self.fixups, self.formats, self.decisions, rows)


def describe(value) -> str:
    """Short description of an argument for error messages (the golden's wording)."""
    return _check.describe(value)


@dataclass
class EpPlan:
    """An expert-parallel op lowered for an HCCL group: one :class:`Plan` per rank, in rank order, each
    making that rank's own torch_npu calls (the MC2 ops take the rank's tensors and ``ep_rank_id``; their
    ``group_ep`` is a :class:`Group`). The golden takes and returns one entry per rank in the caller's
    entry order (``ep_rank_id``); ``entry_of_rank[q]`` is rank q's entry. ``container``: ``"lists"``
    (the golden returns a tuple of per-entry lists, one per output) or ``"list"`` (one list of arrays).
    Executed by :mod:`.execution_ep` (one process per rank over HCCL)."""

    op: str
    ranks: list[Plan]
    entry_of_rank: tuple[int, ...]
    container: str
    decisions: list[str] = field(default_factory=list)

    def finish(self, per_rank: list):
        """The golden's form of the ranks' finished results (``per_rank[q]``: rank q's :meth:`Plan.finish`)."""
        by_entry = [None] * len(self.ranks)
        for q, i in enumerate(self.entry_of_rank):
            by_entry[i] = per_rank[q]
        if self.container == "list":
            return by_entry
        return tuple(list(values) for values in zip(*by_entry, strict=True))

    def describe(self) -> str:
        lines = [f"torch-npu EP plan for {self.op}: {len(self.ranks)} ranks (one process each, one HCCL group)"]
        lines += [f"- {d}" for d in self.decisions]
        for q, plan in enumerate(self.ranks):
            lines.append(f"== rank {q} (entry {self.entry_of_rank[q]})")
            lines.append(plan.describe())
        return "\n".join(lines)
