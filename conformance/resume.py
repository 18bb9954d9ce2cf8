"""Resume that cannot lie: a run's plan records the flags that define it, and ``--resume`` holds to them.

The flags that decide which cases exist and how they are judged — backends, ops, profile, seed, the
tolerance table — are saved in ``plan.json`` (:func:`plan_flags`). On ``--resume``
(:func:`reconcile`), a flag left at its default takes the plan's value (said in a note); a flag given
with another value than the plan's is a conflict: the run is refused with one line naming the flag,
the plan's value and the given one. The reports then take their metadata from the plan's flags, never
from a command line that did not produce the results.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = ("backends", "ops", "profile", "seed", "tolerances")
"""The flags a plan records, as :func:`plan_flags` names them."""

_OPTION = {"backends": "--backend", "ops": "--op", "profile": "--profile", "seed": "--seed",
           "tolerances": "--tolerances / --exact"}


def plan_flags(*, backends: list[str], backend_specs: list[str] | None, ops: list[str] | None, profile: str,
               seed: int, tolerances: str | None) -> dict:
    """The flags to save with a plan. ``backends``: the resolved names; ``backend_specs``: ``--backend``
    as given (None: every available backend), what a resume passes again; ``ops``: None for every op;
    ``tolerances``: the table's path, None for bitwise (``--exact``)."""
    return {"backends": sorted(backends), "backend_specs": list(backend_specs) if backend_specs else None,
            "ops": sorted(ops) if ops else None, "profile": profile, "seed": seed, "tolerances": tolerances}


def _shown(flag: str, value) -> str:
    if value is None:
        return {"ops": "every op", "tolerances": "none (bitwise, --exact)", "backends": "every available backend"
                }.get(flag, "none")
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


@dataclass
class Reconciled:
    """The flags a resumed run uses (the plan's), what was said about them, or the conflict."""

    flags: dict
    notes: list[str] = field(default_factory=list)
    conflict: str | None = None


def reconcile(saved: dict, given: dict, explicit: set[str]) -> Reconciled:
    """The plan's ``saved`` flags against the ``given`` ones (same keys, :data:`FLAGS`).

    ``explicit``: the flags the user gave (the others are defaults). A given flag that differs from the
    plan's is a conflict (the first one, in :data:`FLAGS` order, is named); a default that differs is
    replaced by the plan's value, with a note."""
    flags = dict(saved)
    notes = []
    for flag in FLAGS:
        if flag not in saved:
            continue
        want, got = saved[flag], given.get(flag)
        if _same(flag, want, got):
            continue
        if flag in explicit:
            return Reconciled(flags, notes, f"--resume: {_OPTION[flag]} conflicts with the saved plan: the plan has "
                                            f"{_shown(flag, want)}, the command gives {_shown(flag, got)} (resume "
                                            f"without it, or start a new run without --resume)")
        notes.append(f"{_OPTION[flag]}: continuing with the plan's {_shown(flag, want)} (not the default "
                     f"{_shown(flag, got)})")
    return Reconciled(flags, notes)


def _same(flag: str, a, b) -> bool:
    if flag in ("backends", "ops") and a is not None and b is not None:
        return sorted(a) == sorted(b)
    return a == b
