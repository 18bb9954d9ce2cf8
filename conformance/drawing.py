"""Drawing inside what a backend takes: cases outside its capabilities are not drawn.

A backend says which calls its kernels take (:meth:`backends.base.Backend.declines`, usually through
declared ``capabilities``). The planner and the pytest suite ask it about every drawn case — the
case's inputs are built, the golden's argument check runs on them, and the backend reads the checked
``<Op>Args`` — and draw again, a bounded number of times, where it declines. A declined case is *not
drawn*: it is counted per op ("outside the backend's capabilities"), never run, never reported as
"unsupported". An input the golden itself refuses (NaN, a bad shape) is kept: the backend must refuse
it the same way, which is the error contract, not a capability.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

REFUSALS = (ValueError, TypeError, OverflowError)
MAX_ROUNDS = 4          # draws of n cases per strategy, at most, to find n the backend takes
_ROUND_SEED = 1_000_003  # the seed of round i is seed + i * _ROUND_SEED


@dataclass
class DrawStats:
    """What drawing inside a backend's capabilities found for one op."""

    drawn: int = 0        # cases drawn (every round, every strategy)
    outside: int = 0      # of those, declined by the backend (not run)
    accepted: int = 0     # planned
    named_outside: int = 0
    reasons: Counter = field(default_factory=Counter)

    @property
    def none_acceptable(self) -> bool:
        """The backend declined every drawn case of the op."""
        return self.drawn > 0 and self.accepted == 0

    def as_dict(self) -> dict:
        return {"drawn": self.drawn, "outside": self.outside, "accepted": self.accepted,
                "named_outside": self.named_outside, "none_acceptable": self.none_acceptable,
                "reasons": dict(self.reasons.most_common(5))}


def can_decline(backend) -> bool:
    """Whether asking ``backend.declines`` can ever say no (a default backend accepts everything)."""
    from backends.base import Backend

    declines = getattr(type(backend), "declines", None)
    return declines is not None and (declines is not Backend.declines or getattr(backend, "capabilities", None)
                                     is not None)


def declined(backend, spec, build) -> str | None:
    """Why ``backend`` declines the case built by ``build()`` (None: it takes it, or the golden refuses it)."""
    from w8a8 import registry

    try:
        args, kwargs = build()
        golden = registry.get(spec.name)
        checked = backend.checked_args(golden, tuple(args), dict(kwargs), backend.numerics)
    except REFUSALS:
        return None  # the golden refuses the input: the backend must refuse it too (kept)
    except Exception:  # noqa: BLE001 - a case whose inputs cannot be built is the runner's error result
        return None
    try:
        return backend.declines(spec.name, checked) or None
    except Exception:  # noqa: BLE001 - declines must not raise; if it does, the case is run and judged
        return None


def draw_accepted(spec, backend, n: int, seed: int, strategy: str = "main", stats: DrawStats | None = None
                  ) -> list[dict]:
    """``n`` parameter dicts of ``strategy`` that ``backend`` takes (fewer when it declines most of them:
    at most :data:`MAX_ROUNDS` draws of ``n``)."""
    from .evaluate import case_id
    from .runner import draw_cases

    stats = stats if stats is not None else DrawStats()
    if not can_decline(backend):
        got = draw_cases(spec, n, seed, strategy)
        stats.drawn += len(got)
        stats.accepted += len(got)
        return got
    taken, seen = [], set()
    for i in range(MAX_ROUNDS):
        for params in draw_cases(spec, n, seed + i * _ROUND_SEED, strategy):
            cid = case_id(spec.name, params)
            if cid in seen:
                continue
            seen.add(cid)
            stats.drawn += 1
            reason = declined(backend, spec, lambda p=params: spec.build(p))
            if reason:
                stats.outside += 1
                stats.reasons[reason] += 1
                continue
            taken.append(params)
            if len(taken) == n:
                break
        if len(taken) == n:
            break
    stats.accepted += len(taken)
    return taken


def named_accepted(spec, backend, cases, stats: DrawStats | None = None) -> list:
    """The named cases of ``cases`` the backend takes."""
    if not can_decline(backend):
        return list(cases)
    out = []
    for c in cases:
        reason = declined(backend, spec, c.build)
        if reason:
            if stats is not None:
                stats.named_outside += 1
                stats.reasons[reason] += 1
            continue
        out.append(c)
    return out


def op_cases_for(spec, backend, n: int, seed: int, *, declared: bool = True, stats: DrawStats | None = None
                 ) -> list[tuple[dict, str, str | None]]:
    """:func:`conformance.runner.op_cases` inside what ``backend`` takes: its named cases it takes, every bad
    call, and per strategy as many accepted draws as the runner would draw."""
    from .runner import EXTRA_STRATEGY_SHARE

    stats = stats if stats is not None else DrawStats()
    items = []
    if declared:
        items += [({"named": c.key}, "named", c.key) for c in named_accepted(spec, backend, spec.cases, stats)]
        items += [({"error": b.key}, "error", b.key) for b in spec.bad_calls]
    for strategy in spec.all_strategies():
        count = n if strategy == "main" else max(1, n // EXTRA_STRATEGY_SHARE)
        items += [(p, "drawn", None) for p in draw_accepted(spec, backend, count, seed, strategy, stats)]
    return items
