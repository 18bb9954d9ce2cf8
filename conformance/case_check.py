"""Checks of a case given by hand (``w8a8 conformance --case JSON``) before anything is built from it.

A case is its parameter dict (:mod:`conformance.evaluate`): the keys its op's strategies draw, or
``{"named": "<op>/<name>"}`` / ``{"error": "<op>/<name>"}``. :func:`check_params` refuses what no
strategy could have drawn — not an object, an unknown key, a boolean or string where the strategies
draw numbers, a negative size or seed, a non-finite float — and :func:`measure_build` builds the inputs
in a child process whose address space is capped, so a case asking for too much memory (``h = 100000``
with ``lead = [30000]``: 3e9 elements) is refused with its size instead of exhausting the machine.

The schema of an op's parameters is read off its strategies (:func:`schema`: a fixed, derandomized
sample of each strategy), so a new op needs nothing here.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field

CASE_BYTES = 1 << 30
"""Budget of a case's inputs: their arrays may hold at most 1 GiB, and building them may reserve at most
twice that beyond what the process already has (the child's address-space cap)."""

SCHEMA_SAMPLES = 30  # draws per strategy read for the schema
BUILD_SECONDS = 120  # a build that takes longer is refused (and its child killed)


class CaseError(ValueError):
    """A case the op cannot have: ``expected`` and ``got`` in words (the CLI prints them for ``--case``)."""

    def __init__(self, expected: str, got: str):
        self.expected, self.got = expected, got
        super().__init__(f"expected {expected}, got {got}")


@dataclass
class KeyShape:
    """What the strategies drew for one key: the JSON kinds, and whether every number was >= 0 and finite."""

    kinds: set = field(default_factory=set)       # "int", "float", "str", "bool", "none", "list"
    non_negative: bool = True                     # every int (or int in a list) drawn was >= 0
    finite: bool = True                           # every float drawn was finite
    int_lists: bool = True                        # every list drawn held only ints


def _kind(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "bool"
    return {int: "int", float: "float", str: "str", list: "list"}.get(type(v), type(v).__name__)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _note(shape: KeyShape, v) -> None:
    shape.kinds.add(_kind(v))
    if _is_int(v) and v < 0:
        shape.non_negative = False
    if isinstance(v, float) and not math.isfinite(v):
        shape.finite = False
    if isinstance(v, list):
        if not all(_is_int(x) for x in v):
            shape.int_lists = False
        elif any(x < 0 for x in v):
            shape.non_negative = False


_SCHEMAS: dict[str, dict[str, KeyShape]] = {}


def schema(spec) -> dict[str, KeyShape]:
    """Per key, what ``spec``'s strategies draw (a fixed sample of :data:`SCHEMA_SAMPLES` per strategy)."""
    if spec.name in _SCHEMAS:
        return _SCHEMAS[spec.name]
    from hypothesis import HealthCheck, Phase, given, settings

    shapes: dict[str, KeyShape] = {}
    for strategy in spec.all_strategies().values():
        @settings(max_examples=SCHEMA_SAMPLES, database=None, deadline=None, derandomize=True,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(strategy())
        def collect(params):
            for k, v in params.items():
                _note(shapes.setdefault(k, KeyShape()), v)

        collect()
    _SCHEMAS[spec.name] = shapes
    return shapes


def _describe_kinds(shape: KeyShape) -> str:
    words = {"int": "a non-negative integer" if shape.non_negative else "an integer",
             "float": "a finite number" if shape.finite else "a number", "str": "a string", "bool": "true/false",
             "none": "null", "list": "a list of non-negative integers" if shape.int_lists and shape.non_negative
             else "a list"}
    return " or ".join(words.get(k, k) for k in sorted(shape.kinds))


def _value_ok(shape: KeyShape, v) -> bool:
    kind = _kind(v)
    if kind == "int" and "int" not in shape.kinds and "float" in shape.kinds:
        kind = "float"  # JSON writes 2.0 as 2
    if kind not in shape.kinds:
        return False
    if kind == "int" and shape.non_negative and v < 0:
        return False
    if kind == "float" and shape.finite and not math.isfinite(v):
        return False
    if kind == "list" and shape.int_lists:
        return all(_is_int(x) and (x >= 0 or not shape.non_negative) for x in v)
    return True


def check_params(spec, params) -> None:
    """Raise :class:`CaseError` unless ``params`` could be a case of ``spec`` (module docstring)."""
    from . import registry

    if not isinstance(params, dict):
        raise CaseError(f"a JSON object of {spec.name} parameters", f"{_kind(params)} {json.dumps(params)[:80]}")
    for form, known in (("named", registry.named_cases), ("error", registry.bad_calls)):
        if form in params:
            keys = sorted(c.key for c in known() if c.op == spec.name)
            if set(params) != {form} or params[form] not in keys:
                raise CaseError(f'{{"{form}": KEY}} with KEY one of {", ".join(keys[:4])}'
                                f'{", ..." if len(keys) > 4 else ""} ({len(keys)} for {spec.name})',
                                json.dumps(params)[:120])
            return
    shapes = schema(spec)
    if not params:
        raise CaseError(f"the parameters of a {spec.name} case (keys {', '.join(sorted(shapes))})", "{}")
    for key, value in params.items():
        if key not in shapes:
            raise CaseError(f"keys of a {spec.name} case ({', '.join(sorted(shapes))})", f"unknown key {key!r}")
        if not _value_ok(shapes[key], value):
            raise CaseError(f"{key!r} {_describe_kinds(shapes[key])}", json.dumps(value)[:80])


def _nbytes(obj) -> int:
    import numpy as np

    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_nbytes(o) for o in obj.values())
    return 0


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def measure_build(build, budget: int = CASE_BYTES) -> int | None:
    """The bytes of the arrays ``build()`` returns, built in a forked child whose address space may grow
    by at most ``2 * budget``; :class:`CaseError` when the inputs exceed ``budget``, cannot be built (the
    builder's error, in one line) or take more than :data:`BUILD_SECONDS` (the child is killed). None where this cannot be measured (no fork, or not Linux:
    the cap is Linux's ``RLIMIT_AS``)."""
    if not (sys.platform.startswith("linux") and hasattr(os, "fork")):
        return None
    import resource

    read, write = os.pipe()
    with warnings.catch_warnings():  # Python >= 3.12 warns about fork in a threaded process: the child only builds
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: cap, build, report, exit without running the parent's cleanup
        os.close(read)
        from .processes import pdeathsig

        pdeathsig()  # a kill -9 of the parent takes the child with it
        try:
            _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            cap = _vm_bytes() + 2 * budget
            resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
            msg = {"bytes": _nbytes(build())}
        except KeyError as exc:
            msg = {"missing": str(exc.args[0] if exc.args else exc)[:100]}
        except MemoryError:
            msg = {"memory": True}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            msg = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        os.write(write, json.dumps(msg).encode())
        os._exit(0)
    os.close(write)
    data, deadline, finished = b"", time.monotonic() + BUILD_SECONDS, False
    with os.fdopen(read, "rb") as f:
        while not finished and time.monotonic() < deadline:
            if select.select([f], [], [], max(0.0, deadline - time.monotonic()))[0]:
                chunk = os.read(f.fileno(), 1 << 16)
                finished = not chunk
                data += chunk
    if not finished:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if not finished:
        raise CaseError(f"parameters whose inputs build within {BUILD_SECONDS} s", "a build that did not finish")
    msg = json.loads(data) if data else {"killed": status}
    limit = f"inputs of at most {budget / (1 << 30):g} GiB"
    if msg.get("memory") or "killed" in msg:
        raise CaseError(limit, f"parameters whose inputs need more than {2 * budget / (1 << 30):g} GiB to build")
    if "missing" in msg:
        raise CaseError("every key the op's build reads", f"parameters without {msg['missing']!r}")
    if "error" in msg:
        raise CaseError("parameters the op's build accepts", msg["error"])
    if msg["bytes"] > budget:
        raise CaseError(limit, f"{msg['bytes'] / (1 << 30):.3g} GiB")
    return msg["bytes"]


def check_case(spec, params, budget: int = CASE_BYTES) -> int | None:
    """:func:`check_params`, then :func:`measure_build` on the case's builder (named, error or drawn)."""
    from .evaluate import resolve_case

    check_params(spec, params)
    return measure_build(resolve_case(spec, params).build, budget)
