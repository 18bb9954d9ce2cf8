"""What a person reads first: failures grouped by (backend, op, stage, cause), distances in human units.

* :func:`groups` — every bad record (fail / error / crashed / timeout) in one group per backend, op,
  first diverging stage (or the outputs that differ) and cause, with its count, one representative
  repro, the worst distance and the **parameter that separates** the group's cases from the others
  (:func:`separating`: "fails only with bias=True", "only with k >= 1025");
* :func:`distance_text` — a distance as a person reads it: ``"3 ULP"``, ``"1 code"``, ``"inf/NaN"``
  (never 9223372036854775807).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..evaluate import BAD_STATUSES, UNSPECIFIED
from ..results import distance_text, record_distance, worst_text  # noqa: F401 - re-exported

BAD = BAD_STATUSES
GOOD = ("pass", "tolerated", "refused", "mistrusted", UNSPECIFIED)
_IGNORED_PARAMS = ("seed",)


def _normalized(text: str) -> str:
    """A note without its numbers and quoted values (what varies from case to case)."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text or "")
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", text)[:160]


def stage_of(record: dict) -> str:
    at = record.get("attribution") or {}
    if at.get("first_stage"):
        return str(at["first_stage"])
    failing = [n for n, c in (record.get("outputs") or {}).items() if c.get("verdict") == "fail"]
    return ", ".join(failing) if failing else "-"


def cause_of(record: dict) -> str:
    """The cause a record is grouped by: its attribution's cause, else what its note says."""
    at = record.get("attribution") or {}
    if at.get("cause"):
        return str(at["cause"])
    if at.get("error"):
        return f"attribution failed: {_normalized(at['error'])}"
    note = record.get("note") or ""
    if record.get("expected_mismatch"):
        return "differs from the documented values: " + _normalized(record["expected_mismatch"][0])
    if record["status"] in ("crashed", "timeout", "leak"):
        return record["status"] + (": " + _normalized(note) if note else "")
    return _normalized(note.splitlines()[0] if note else record["status"])


def cause_key(record: dict) -> str:
    """What a record is grouped by: the change that reproduces the backend bit for bit when attribution found
    one (one bug, one group, whatever the call asked: a kernel ignoring ``scale_mode`` fails 'ceil' and 'rceil'
    calls alike), else the cause text."""
    at = record.get("attribution") or {}
    if at.get("reproduced") and at.get("numerics_change"):
        return "change " + json.dumps(at["numerics_change"], sort_keys=True, default=str)
    return cause_of(record)


@dataclass
class Group:
    backend: str
    op: str
    stage: str
    cause: str
    records: list = field(default_factory=list)
    separating: list = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def representative(self) -> dict:
        """The smallest case of the group (the fewest elements compared), a named case first."""
        def size(r):
            return (r.get("kind") != "named", sum((c.get("n") or 0) for c in (r.get("outputs") or {}).values()))
        return min(self.records, key=size)

    @property
    def statuses(self) -> dict:
        out: dict = defaultdict(int)
        for r in self.records:
            out[r["status"]] += 1
        return dict(out)

    def as_dict(self) -> dict:
        rep = self.representative
        return {"backend": self.backend, "op": self.op, "stage": self.stage, "cause": self.cause, "count": self.count,
                "statuses": self.statuses, "worst": worst_text(self.records), "separating": self.separating,
                "repro": rep.get("repro"), "case_id": rep.get("case_id"),
                "reproduced": bool((rep.get("attribution") or {}).get("reproduced"))}


def _value(params: dict, key: str):
    return json.dumps(params.get(key), sort_keys=True)


def separating(group_records: list[dict], op_records: list[dict]) -> list[str]:
    """The drawn parameters whose value separates the group's cases from the op's passing ones: every case
    with that value (or past that threshold) fails, no case of the group lies outside it."""
    group = [r for r in group_records if r.get("kind") == "drawn" and isinstance(r.get("params"), dict)]
    drawn = [r for r in op_records if r.get("kind") == "drawn" and isinstance(r.get("params"), dict)
             and r["status"] in BAD + GOOD]
    if len(group) < 2 or len(drawn) <= len(group):
        return []
    keys = sorted({k for r in group for k in r["params"]} - set(_IGNORED_PARAMS))
    found = []
    for key in keys:
        values = {_value(r["params"], key) for r in drawn}
        inside = {_value(r["params"], key) for r in group}
        if len(values) < 2 or len(inside) >= len(values):
            continue
        members = [r for r in drawn if _value(r["params"], key) in inside]
        if len(members) >= 2 and all(r["status"] in BAD for r in members):
            shown = ", ".join(sorted(inside))
            found.append(f"{key}={shown}" if len(inside) == 1 else f"{key} in {{{shown}}}")
            continue
        nums = [r["params"].get(key) for r in drawn]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in nums):
            lo = min(r["params"][key] for r in group)
            hi = max(r["params"][key] for r in group)
            above = [r for r in drawn if r["params"][key] >= lo]
            below = [r for r in drawn if r["params"][key] <= hi]
            if len(above) < len(drawn) and all(r["status"] in BAD for r in above):
                found.append(f"{key} >= {lo}")
            elif len(below) < len(drawn) and all(r["status"] in BAD for r in below):
                found.append(f"{key} <= {hi}")
    return found


def groups(records: list[dict]) -> list[Group]:
    """The bad records in groups (module docstring), the largest first."""
    from ..results import latest

    recs = latest(records)
    by_op: dict = defaultdict(list)
    for r in recs:
        by_op[(r["backend"], r["op"])].append(r)
    found: dict = {}
    for r in recs:
        if r.get("status") not in BAD:
            continue
        key = (r["backend"], r["op"], stage_of(r), cause_key(r))
        found.setdefault(key, Group(*key)).records.append(r)
    out = list(found.values())
    for g in out:
        g.separating = separating(g.records, by_op[(g.backend, g.op)])
        texts = Counter(cause_of(r) for r in g.records).most_common()
        g.cause = texts[0][0] + (f" (the same change also explains {len(texts) - 1} other form(s) of the call)"
                                 if len(texts) > 1 else "")
    return sorted(out, key=lambda g: (-g.count, g.backend, g.op, g.stage, g.cause))
