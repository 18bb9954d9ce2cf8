"""``--last-failed``: the cases of a previous run that did not pass, read from that run's saved state.

A run in ``--out`` leaves ``plan.json`` (every planned task, with the flags that defined the run) and
``results.jsonl`` (one record per case judged). :func:`failed_tasks` reads both through
:mod:`conformance.stateio` (regular files only, bounded, validated) and returns the planned tasks whose
latest record has a failing status (:data:`~conformance.evaluate.BAD_STATUSES`: fail, error, crashed,
timeout, leak). The rerun is a new run of only those tasks in the same folder: the earlier results are
archived first (``results-<time>.jsonl``), so a second ``--last-failed`` reruns what still fails.

Every problem is one :class:`~conformance.stateio.StateError` line naming the file: no previous run (no
``plan.json``), a plan or results file that is not a regular file, too large, not JSON, or whose tasks are
malformed. Damaged lines of ``results.jsonl`` are skipped and counted (:attr:`LastFailed.damaged`): their
cases are unknown, neither failed nor passed, and the caller says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .evaluate import BAD_STATUSES
from .results import latest
from .stateio import StateError, read_records, regular


@dataclass
class LastFailed:
    """The tasks to run again and what the previous run's state said."""

    tasks: list              # conformance.runner.Task, in the plan's order
    flags: dict              # the plan's flags (conformance.resume.plan_flags), {} for an older plan
    meta: dict               # the plan's metadata (not_implemented, outside, profile, seed, flags)
    judged: int = 0          # planned cases with a record
    not_run: int = 0         # planned cases without one (an interrupted run)
    damaged: int = 0         # damaged lines of results.jsonl, skipped
    statuses: dict = field(default_factory=dict)  # failing status -> count


def failed_tasks(out) -> LastFailed:
    """The planned tasks of the run saved in ``out`` whose latest record failed (see the module)."""
    from .runner import load_plan

    out = Path(out)
    plan_path, results_path = out / "plan.json", out / "results.jsonl"
    if not regular(plan_path, "saved plan"):
        raise StateError(plan_path, "no previous run here (no saved plan): run 'w8a8 conformance --out "
                                    f"{out}' first, then --last-failed reruns its failures")
    try:
        tasks, meta = load_plan(plan_path)
    except StateError as exc:
        problem = str(exc)[len(f"{plan_path}: "):].replace("; start a new run without --resume", "")
        raise StateError(plan_path, f"{problem}; start a new run without --last-failed") from None
    if not regular(results_path, "results file"):
        raise StateError(results_path, "the previous run recorded no results (no results.jsonl): nothing "
                                       "failed yet; run it again with --resume to finish it")
    records, damaged = read_records(results_path)
    status = {(r["backend"], r["case_id"]): r.get("status") for r in latest(records)}
    planned = {t.key for t in tasks}
    chosen, counts = [], {}
    for t in tasks:
        s = status.get(t.key)
        if s in BAD_STATUSES:
            chosen.append(t)
            counts[s] = counts.get(s, 0) + 1
    judged = sum(1 for key in planned if key in status)
    flags = meta.get("flags") if isinstance(meta.get("flags"), dict) else {}
    return LastFailed(tasks=chosen, flags=flags, meta=meta, judged=judged, not_run=len(planned) - judged,
                      damaged=len(damaged), statuses=counts)


def describe(found: LastFailed) -> str:
    """One line: how many cases of the previous run are rerun and why (their statuses)."""
    parts = ", ".join(f"{n} {s}" for s, n in sorted(found.statuses.items()))
    line = f"--last-failed: rerunning {len(found.tasks)} of {found.judged} judged case(s) of the previous run"
    line += f" ({parts})" if parts else ""
    if found.not_run:
        line += f"; {found.not_run} planned case(s) never ran (--resume runs them)"
    if found.damaged:
        line += f"; {found.damaged} damaged line(s) of results.jsonl skipped: their cases are not rerun"
    return line
