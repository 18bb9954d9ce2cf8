"""The one place where replay calls the golden.

:func:`run` is the only function of the package that executes a golden op. Everything that replays a
call — isolated replay, chained replay, the statistics invariants, an exported case — goes through
it, so that the platform reaches the golden at a single point.

**Platform.** The dump came from one chip; ``platform`` names it (``ascend910_93`` = A3 / 910C, the
default; ``ascend910b`` = A2; any platform registered with :func:`w8a8.platforms.register`). The
golden applies the kernel variant that platform's host tiling selects for each call's shapes
(:mod:`w8a8.variants`, ``Numerics.variants = "select"``): :func:`declared_numerics` is the platform's
record, and every golden call gets it. An explicit ``numerics`` (``--numerics``) is taken as it is:
its own ``platform`` and ``variants`` fields decide (``'{"variants": "fixed"}'`` replays every call
under the record's main-path formulas, what a kernel-variant-unaware reference computes).
"""

from __future__ import annotations

import inspect

import w8a8
from w8a8 import platforms as _platforms
from w8a8.numerics import Numerics

DEFAULT_PLATFORM = _platforms.A3.name
_RECORDS = {w8a8.ASCEND.platform: w8a8.ASCEND, w8a8.ASCEND_A2.platform: w8a8.ASCEND_A2}


def platform_names() -> tuple[str, ...]:
    """The platforms a dump may come from: every registered :mod:`w8a8.platforms` name."""
    return tuple(_platforms.names())


def check_platform(platform: str) -> str:
    if platform not in platform_names():
        raise ValueError(f"platform must be one of {', '.join(platform_names())}; got {platform!r}")
    return platform


def golden_function(op: str):
    fn = getattr(w8a8, op, None)
    if fn is None or not callable(fn):
        raise KeyError(f"the golden has no op {op!r}")
    return fn


def platform_numerics(platform: str = DEFAULT_PLATFORM) -> Numerics:
    """The Ascend record of ``platform``: its kernels, variants selected by its host tiling."""
    check_platform(platform)
    return _RECORDS.get(platform) or w8a8.ASCEND.replace(name=f"ascend-{platform}", platform=platform)


def declared_numerics(platform: str = DEFAULT_PLATFORM, numerics: Numerics | None = None) -> Numerics:
    """The record the golden computes under for ``platform`` (``numerics`` itself when given)."""
    check_platform(platform)
    return numerics if numerics is not None else platform_numerics(platform)


def variant_label(op: str, args, kwargs, *, platform: str = DEFAULT_PLATFORM,
                  numerics: Numerics | None = None) -> str | None:
    """The kernel the golden models for this call (:func:`w8a8.variants.label` under
    :func:`declared_numerics`)."""
    return w8a8.variants.label(op, args, kwargs, declared_numerics(platform, numerics))


def run(op: str, args, kwargs, *, platform: str = DEFAULT_PLATFORM, numerics: Numerics | None = None):
    """Call golden op ``op`` with the device's arguments; return what it returns (an array or a tuple).

    The golden gets :func:`declared_numerics` (``platform``'s record, or ``numerics`` when given), so the
    kernel variant the record's platform selects for these shapes is what it computes. Raises what the
    golden raises (ValueError / TypeError for refused inputs).
    """
    fn = golden_function(op)
    kwargs = dict(kwargs)
    if "numerics" in inspect.signature(fn).parameters:
        kwargs["numerics"] = declared_numerics(platform, numerics)
    else:
        check_platform(platform)
    return fn(*args, **kwargs)
