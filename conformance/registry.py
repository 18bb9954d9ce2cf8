"""The op registry: per op, how to draw valid inputs, how to judge each output, which stages exist.

An :class:`OpSpec` holds

* ``params`` — a Hypothesis strategy of a JSON-able parameter dict (shapes, dtypes, options, the
  value distribution and a ``seed``); shapes and options are drawn first, so they shrink;
* ``build(params) -> (args, kwargs)`` — the concrete NumPy inputs, deterministic from the dict;
* ``outputs`` — the name and kind (``"int"``, ``"float"``, ``"scale"``) of each returned array, in
  return order;
* ``stages`` — for attribution, the pipeline's intermediate results in order, each computed on
  any backend from the *golden's* upstream values, so the first stage that diverges is the one
  that is wrong (not merely fed wrong inputs);
* ``numerics_fields`` — the :class:`w8a8.Numerics` fields the op depends on (what attribution varies);
* ``pre_round`` — for int outputs, the golden's float64 value before rounding (tie-aware compare);
* ``mask`` — where outputs are specified (rows beyond a group_list total are not).

Op families register themselves from :mod:`conformance.ops` (dense, moe, lowbit).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Output:
    name: str
    kind: str  # "int" | "float" | "scale"


@dataclass(frozen=True)
class Stage:
    """One intermediate result: ``fn(backend, args, kwargs, upstream) -> array`` where ``upstream``
    holds the golden's values of the earlier stages."""

    name: str
    kind: str
    fn: Callable[..., np.ndarray]


@dataclass
class OpSpec:
    name: str
    family: str
    params: Callable[[], Any]
    build: Callable[[dict], tuple[tuple, dict]]
    outputs: tuple[Output, ...]
    numerics_fields: tuple[str, ...] = ()
    stages: tuple[Stage, ...] = ()
    pre_round: Callable[[tuple, dict, Any], dict[str, np.ndarray]] | None = None
    mask: Callable[[tuple, dict], dict[str, np.ndarray]] | None = None
    description: str = ""
    dtypes_of: Callable[[dict], dict] = field(default=lambda params: {})
    mistrust_degenerate: bool = True  # False for pure data movement (see conformance.compare.compare)

    def as_outputs(self, result) -> dict[str, np.ndarray]:
        """Name the arrays an op returned (a single array or a tuple, in ``outputs`` order)."""
        values = result if isinstance(result, (tuple, list)) else (result,)
        if len(values) != len(self.outputs):
            raise ValueError(f"{self.name}: expected {len(self.outputs)} output(s) "
                             f"({', '.join(o.name for o in self.outputs)}), got {len(values)}")
        return {o.name: (None if v is None else np.asarray(v)) for o, v in zip(self.outputs, values)}


_REGISTRY: dict[str, OpSpec] = {}
_FAMILIES = ("conformance.ops.dense", "conformance.ops.moe", "conformance.ops.lowbit")
_loaded = False


def register(spec: OpSpec) -> OpSpec:
    _REGISTRY[spec.name] = spec
    return spec


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _FAMILIES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def specs() -> dict[str, OpSpec]:
    """Every registered op (loading the op families on first use)."""
    _load()
    return dict(_REGISTRY)


def get(name: str) -> OpSpec:
    all_specs = specs()
    if name not in all_specs:
        raise KeyError(f"no conformance spec for op {name!r}; known: {', '.join(sorted(all_specs))}")
    return all_specs[name]
