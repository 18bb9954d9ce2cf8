"""The one place where replay calls the golden.

:func:`run` is the only function of the package that executes a golden op. Everything that replays a
call — isolated replay, chained replay, the statistics invariants, an exported case — goes through
it, so that the platform reaches the golden at a single point.

**Platform.** The dump came from one chip; ``platform`` names it (``ascend910_93`` = A3 / 910C, the
default; ``ascend910b`` = A2). The golden of this branch implements one :class:`w8a8.Numerics` record
for A2 and A3 (:data:`w8a8.ASCEND`), so today the platform is validated, recorded in every result and
otherwise does not change the arithmetic. The kernel-variant work (issue 13) makes the golden apply
the variant the platform's host tiling selects for the call's shapes; when it lands, this function
passes ``platform`` on and nothing else in replay changes. An explicit ``numerics`` (``--numerics``)
overrides everything, as it does for the golden.
"""

from __future__ import annotations

import inspect

import w8a8
from w8a8.numerics import Numerics

PLATFORMS = {"ascend910_93": "Ascend A3 (910C)", "ascend910b": "Ascend A2 (910B)"}
DEFAULT_PLATFORM = "ascend910_93"


def check_platform(platform: str) -> str:
    if platform not in PLATFORMS:
        raise ValueError(f"platform must be one of {', '.join(PLATFORMS)}; got {platform!r}")
    return platform


def golden_function(op: str):
    fn = getattr(w8a8, op, None)
    if fn is None or not callable(fn):
        raise KeyError(f"the golden has no op {op!r}")
    return fn


def declared_numerics(platform: str = DEFAULT_PLATFORM, numerics: Numerics | None = None) -> Numerics:
    """The record the golden computes under for ``platform`` (or ``numerics`` when given)."""
    check_platform(platform)
    return numerics if numerics is not None else w8a8.ASCEND


def run(op: str, args, kwargs, *, platform: str = DEFAULT_PLATFORM, numerics: Numerics | None = None):
    """Call golden op ``op`` with the device's arguments; return what it returns (an array or a tuple).

    ``numerics`` is passed only when given (so the golden's own default — and, with issue 13, its
    variant selection — applies otherwise). Raises what the golden raises (ValueError / TypeError for
    refused inputs).
    """
    check_platform(platform)
    fn = golden_function(op)
    kwargs = dict(kwargs)
    if numerics is not None and "numerics" in inspect.signature(fn).parameters:
        kwargs["numerics"] = numerics
    return fn(*args, **kwargs)
