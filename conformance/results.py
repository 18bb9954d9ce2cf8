"""The results file (JSON Lines) and what is computed from it.

Every result is appended as one line the moment it exists, then fsynced: a crash or a SIGKILL loses at
most the line being written, a full disk none (the append is cut back). On reopening, a torn last line
(no newline, or not valid JSON) is cut off before anything new is appended; a damaged line elsewhere (not
UTF-8, not a JSON object, no ``backend``/``case_id``) is skipped and said once (:mod:`.stateio`).
The file is the source of truth; every report is computed from it.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from . import stateio
from .evaluate import BAD_STATUSES
from .stateio import write_atomic  # noqa: F401 - the writer every report uses

SCHEMA = 1


class ResultsFile:
    """An append-only, crash-safe JSON Lines file of result records (read and written through
    :mod:`conformance.stateio`: regular files only, damaged lines skipped and said once, whole-line
    appends that a full disk cannot tear)."""

    def __init__(self, path: str | os.PathLike, *, required: tuple[str, ...] = ("backend", "case_id"),
                 consequence: str = "its case runs again on --resume", damage_log: stateio.DamageLog | None = None):
        self.path = Path(path)
        self.required = required
        self.consequence = consequence
        self.damage_log = damage_log or stateio.DamageLog()
        self.damaged: list[stateio.Damage] = []

    def repair(self) -> int:
        """Cut a torn last line off the file; return the number of bytes removed."""
        return stateio.cut_torn_tail(self.path)

    def records(self) -> list[dict]:
        """Every complete, valid record (a torn last line is left out; damaged lines are skipped and said
        once, on stderr)."""
        records, self.damaged = stateio.read_records(self.path, self.required)
        self.damage_log.report(self.path, self.damaged, self.consequence)
        return records

    def done_keys(self) -> set[tuple[str, str]]:
        return {(r["backend"], r["case_id"]) for r in self.records() if "status" in r}

    def append(self, record: dict) -> None:
        self.append_many([record])

    def append_many(self, records: list[dict]) -> None:
        """Append whole lines, then fsync once (the records that arrived together). On a full disk the
        file is left as it was before and :class:`~conformance.stateio.DiskError` names it."""
        if not records:
            return
        text = "".join(json.dumps({"schema": SCHEMA, **r}, sort_keys=False, default=_default) + "\n" for r in records)
        stateio.append_lines(self.path, text)


def _default(obj):
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def distance_text(value, kind: str = "ulp") -> str:
    """A distance as a person reads it: ``"3 ULP"``, ``"12,345 ULP"``, ``"1 code"`` / ``"17 codes"``,
    ``"inf/NaN"`` (a NaN against a number, or Inf: never 9223372036854775807); ``"-"`` for none."""
    from w8a8.ulp import NAN_DISTANCE

    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    value = int(value)
    if value >= NAN_DISTANCE - 1:
        return "inf/NaN"
    if kind == "code":
        return f"{value:,} code" + ("" if value == 1 else "s")
    return f"{value:,} ULP"


def record_distance(record: dict) -> tuple[int, str] | None:
    """The worst distance of a record's outputs: ``(value, "ulp" | "code")``, or None when all are 0."""
    best = None
    for comp in (record.get("outputs") or {}).values():
        for key, kind in (("max_ulp", "ulp"), ("max_code_diff", "code")):
            v = comp.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0 and \
                    (best is None or (kind == "ulp", v) > (best[1] == "ulp", best[0])):
                best = (v, kind)
    return best


def worst_text(records) -> str:
    """The worst distance over records, in words (the ULP and the code distances apart); ``"0"`` for none, and
    what records without output (the backend raised) are: a crash has no distance, and is never "0"."""
    records = list(records)
    dists = [d for d in map(record_distance, records) if d]
    ulp = max((v for v, k in dists if k == "ulp"), default=None)
    code = max((v for v, k in dists if k == "code"), default=None)
    parts = ([distance_text(ulp)] if ulp is not None else []) + ([distance_text(code, "code")] if code is not None else [])
    raised = sum(1 for r in records if not r.get("outputs") and r.get("status") in ("error", "crashed", "timeout"))
    if raised:
        parts.append(f"{raised} without output (raised)" if parts else "no output (the backend raised)")
    return ", ".join(parts) or "0"


def latest(records: list[dict]) -> list[dict]:
    """One record per (backend, case_id): the last one written."""
    seen: dict[tuple[str, str], dict] = {}
    for r in records:
        seen[(r["backend"], r["case_id"])] = r
    return list(seen.values())


def summarize(records: list[dict]) -> dict:
    """Counts per (backend, op) and status, the failures, and merged histograms.

    Returns ``{"cells": {backend: {op: {status: n, ..., "hist": {output: {bin: n}}}}},
    "totals": {status: n}, "failures": [records], "ok": bool, "variants": {op: {variant: n}}}``
    (``variants``: the kernel variants the golden modelled, over every backend's cases).
    """
    cells: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    by_cell: dict = defaultdict(list)
    hists: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(int))))
    worst_ulp: dict = defaultdict(lambda: defaultdict(int))
    totals: dict = defaultdict(int)
    variants: dict = defaultdict(lambda: defaultdict(int))
    failures = []
    for r in latest(records):
        b, op, status = r["backend"], r["op"], r["status"]
        cells[b][op][status] += 1
        if r.get("variant"):
            variants[op][r["variant"]] += 1
        by_cell[(b, op)].append(r)
        totals[status] += 1
        for name, comp in (r.get("outputs") or {}).items():
            for label, n in (comp.get("histogram") or {}).items():
                hists[b][op][name][label] += n
            m = comp.get("max_ulp") if comp.get("max_ulp") is not None else comp.get("max_code_diff")
            if isinstance(m, int):
                worst_ulp[b][op] = max(worst_ulp[b][op], m)
        if status in BAD_STATUSES:
            failures.append(r)
    result_cells = {}
    for b, ops in cells.items():
        result_cells[b] = {}
        for op, counts in ops.items():
            cell = dict(counts)
            cell["hist"] = {name: dict(h) for name, h in hists[b][op].items()}
            cell["worst"] = worst_ulp[b][op]
            cell["worst_text"] = worst_text(by_cell[(b, op)])
            result_cells[b][op] = cell
    return {"cells": result_cells, "totals": dict(totals), "failures": failures,
            "ok": not any(totals.get(s, 0) for s in BAD_STATUSES),
            "variants": {op: dict(sorted(v.items())) for op, v in sorted(variants.items())}}
