"""The adapter to the conformance engine: the only module of replay that imports :mod:`conformance`.

Replay judges a dumped call in the engine's vocabulary, through its public entry points only:

* :func:`conformance.registry.get` — per op, its outputs (name, kind), masks and pre-rounding values;
* :func:`conformance.compare.compare` — one output against the golden's (bitwise / tolerance / ULP);
* :func:`conformance.attribution.attribute` — the first diverging stage and the Numerics change that
  reproduces the device bit for bit;
* :class:`conformance.results.ResultsFile` / :func:`~conformance.results.write_atomic` — the crash-safe
  results file and atomic report writes; :class:`conformance.tolerances.ToleranceTable` — tolerances;
  :func:`conformance.plots.png_base64` — figures for the HTML page; :mod:`conformance.reports.junit` —
  the JUnit XML report.

The device is not callable, so attribution gets a :class:`RecordedDevice`: a stand-in backend that
answers exactly the dumped call with the dumped outputs and declines every other call (so stages that
need another call of the device, like a quant_matmul's int32 accumulator, are "unavailable").
"""

from __future__ import annotations

import numpy as np

from backends.base import Unsupported
from conformance import attribution as _attribution
from conformance import compare as _compare
from conformance import registry as _registry
from conformance.results import ResultsFile, write_atomic  # noqa: F401 - re-exported for replay
from conformance.tolerances import ToleranceTable

BACKEND = "device-dump"
"""The backend name of replay results and of tolerance-table lookups."""

PASS, TOLERATED, FAIL, MISTRUSTED = _compare.PASS, _compare.TOLERATED, _compare.FAIL, _compare.MISTRUSTED


def outputs_of(op: str) -> list[tuple[str, str]]:
    """``[(name, kind), ...]`` of the op's outputs in return order."""
    return [(o.name, o.kind) for o in _registry.get(op).outputs]


def name_outputs(op: str, result) -> dict[str, np.ndarray | None]:
    return _registry.get(op).as_outputs(result)


def masks(op: str, args, kwargs) -> dict:
    spec = _registry.get(op)
    if spec.mask is None:
        return {}
    try:
        return spec.mask(tuple(args), dict(kwargs))
    except Exception:  # noqa: BLE001 - a mask that cannot be derived means: compare everything
        return {}


def pre_round(op: str, args, kwargs, numerics) -> dict:
    spec = _registry.get(op)
    if spec.pre_round is None:
        return {}
    try:
        return spec.pre_round(tuple(args), dict(kwargs), numerics)
    except Exception:  # noqa: BLE001
        return {}


def mistrust_degenerate(op: str) -> bool:
    return _registry.get(op).mistrust_degenerate


def load_tolerances(path: str | None, exact: bool) -> ToleranceTable | None:
    if exact:
        return None
    return ToleranceTable.load(path) if path else ToleranceTable.packaged()


def tolerance(table: ToleranceTable | None, op: str, output: str, dtype_name: str):
    """The tolerance of (device-dump, op, output, dtype) and the entry's description (None: bitwise)."""
    if table is None:
        return _compare.Tolerance(), None
    entry = table.find(BACKEND, op, output, dtype_name)
    return (entry.tolerance(), entry.describe()) if entry else (_compare.Tolerance(), None)


def compare_output(op: str, name: str, kind: str, reference, actual, *, tol=None, pre=None, mask=None) -> dict:
    comp = _compare.compare(name, kind, reference, actual, tolerance=tol or _compare.Tolerance(), pre_round=pre,
                            mask=mask, mistrust_degenerate=mistrust_degenerate(op))
    return comp.as_dict()


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and \
            a.dtype == b.dtype and (a is b or np.array_equal(a.view(np.uint8) if a.dtype.kind == "V" else a,
                                                             b.view(np.uint8) if b.dtype.kind == "V" else b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


class RecordedDevice:
    """The device as the dump saw it: answers the dumped call only (module docstring)."""

    name = BACKEND

    def __init__(self, op: str, args, kwargs, outputs: dict, numerics):
        self.op, self.args, self.kwargs, self.numerics = op, list(args), dict(kwargs), numerics
        self._outputs = outputs

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)

        def call(*args, **kwargs):
            if attr != self.op or not _same(list(args), self.args) or not _same(kwargs, self.kwargs):
                raise Unsupported(f"the dump holds only the device's outputs of this {self.op} call")
            names = [n for n, _ in outputs_of(self.op)]
            values = tuple(self._outputs.get(n) for n in names)
            return values[0] if len(values) == 1 else values

        return call


def attribute(op: str, args, kwargs, device_outputs: dict, comparisons: dict, numerics, masks_: dict) -> dict:
    """Stage and cause of a disagreement (see :func:`conformance.attribution.attribute`)."""
    device = RecordedDevice(op, args, kwargs, device_outputs, numerics)
    try:
        return _attribution.attribute(_registry.get(op), tuple(args), dict(kwargs), device, device_outputs,
                                      comparisons, masks=masks_)
    except Exception as exc:  # noqa: BLE001 - attribution is best effort; the disagreement stands
        return {"error": f"{type(exc).__name__}: {exc}"}


def junit(records: list[dict], meta: dict) -> str:
    """JUnit XML of the results (the conformance writer: one testcase per call)."""
    from conformance.reports import junit as _junit

    return _junit.render(records, meta)


def png_base64(fig) -> str:
    from conformance import plots

    return plots.png_base64(fig)
