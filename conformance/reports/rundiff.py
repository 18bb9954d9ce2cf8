"""The difference between two conformance runs (``w8a8 compare RUN_A RUN_B``): another library version,
another CANN, another kernel build, another declared Numerics record.

A run is a ``results.jsonl`` (or the ``--out`` folder holding one). Its records are matched case by case
(``case_id``: the op and its parameters) between one backend of each run — the backends of the same name,
or the only backend of each run, or the ones named. :func:`diff` gives

* ``changed``: the cases whose verdict changed (``pass -> fail`` is a regression, ``fail -> pass`` a fix),
  each with its repro line from run B;
* ``new_causes`` / ``gone_causes``: per op, the failure causes (:func:`.grouping.cause_of`) only one run has,
  with their counts;
* ``shifts``: per op, the worst distance to the golden when it moved (in human units);
* ``only_a`` / ``only_b``: cases one run has and the other does not (another plan, another seed).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from ..results import ResultsFile, distance_text, latest, record_distance
from .grouping import BAD, GOOD, cause_of

REGRESSION = "regression"
FIX = "fix"
OTHER = "changed"


def load(path: str | Path) -> list[dict]:
    """The latest record per (backend, case) of a run: ``path`` is a results.jsonl or a folder with one."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.jsonl"
    from ..stateio import regular

    if not regular(p, "results file"):  # a FIFO or device there is refused, never read (it would block)
        raise FileNotFoundError(f"w8a8 compare: argument RUN must be a results.jsonl or a conformance --out folder "
                                f"holding one; got {str(path)!r} (no such file)")
    records = [r for r in latest(ResultsFile(p).records()) if "status" in r and "case_id" in r]
    if not records:
        raise ValueError(f"w8a8 compare: {str(p)!r} holds no result records")
    return records


def pick_backend(records: list[dict], asked: str | None, other: set[str], run: str) -> str:
    """The backend of a run to compare: ``asked``, else the one both runs have, else the run's only one."""
    names = sorted({r["backend"] for r in records})
    if asked is not None:
        if asked not in names:
            raise ValueError(f"w8a8 compare: backend {asked!r} is not in run {run} (it has {', '.join(names)})")
        return asked
    shared = [n for n in names if n in other]
    if len(shared) == 1 or len(names) == 1:
        return shared[0] if len(shared) == 1 else names[0]
    raise ValueError(f"w8a8 compare: run {run} has backends {', '.join(names)}; name one with --backend-{run.lower()}")


def _kind(a: str, b: str) -> str:
    if a in GOOD and b in BAD:
        return REGRESSION
    if a in BAD and b in GOOD:
        return FIX
    return OTHER


def _worst(records: list[dict]) -> tuple[int, str] | None:
    dists = [d for d in map(record_distance, records) if d]
    return max(dists, key=lambda d: (d[1] == "ulp", d[0])) if dists else None


def diff(a_records: list[dict], b_records: list[dict], backend_a: str | None = None,
         backend_b: str | None = None) -> dict:
    """The differences from run A to run B (module docstring)."""
    names_a, names_b = {r["backend"] for r in a_records}, {r["backend"] for r in b_records}
    ba = pick_backend(a_records, backend_a, names_b, "A")
    bb = pick_backend(b_records, backend_b, names_a, "B")
    a = {r["case_id"]: r for r in a_records if r["backend"] == ba}
    b = {r["case_id"]: r for r in b_records if r["backend"] == bb}
    changed = []
    for cid in sorted(a.keys() & b.keys()):
        ra, rb = a[cid], b[cid]
        if ra["status"] != rb["status"]:
            changed.append({"op": rb["op"], "case_id": cid, "name": rb.get("name"), "from": ra["status"],
                            "to": rb["status"], "kind": _kind(ra["status"], rb["status"]),
                            "cause": cause_of(rb) if rb["status"] in BAD else cause_of(ra),
                            "repro": rb.get("repro")})
    causes_a, causes_b = defaultdict(Counter), defaultdict(Counter)
    for r in a.values():
        if r["status"] in BAD:
            causes_a[r["op"]][cause_of(r)] += 1
    for r in b.values():
        if r["status"] in BAD:
            causes_b[r["op"]][cause_of(r)] += 1
    new = [{"op": op, "cause": c, "cases": n} for op in sorted(causes_b) for c, n in causes_b[op].most_common()
           if c not in causes_a.get(op, {})]
    gone = [{"op": op, "cause": c, "cases": n} for op in sorted(causes_a) for c, n in causes_a[op].most_common()
            if c not in causes_b.get(op, {})]
    shifts = []
    ops = sorted({r["op"] for r in a.values()} & {r["op"] for r in b.values()})
    for op in ops:
        shared = a.keys() & b.keys()
        wa = _worst([r for cid, r in a.items() if r["op"] == op and cid in shared])
        wb = _worst([r for cid, r in b.items() if r["op"] == op and cid in shared])
        if wa != wb:
            shifts.append({"op": op, "from": _text(wa), "to": _text(wb)})
    order = {REGRESSION: 0, OTHER: 1, FIX: 2}
    changed.sort(key=lambda c: (order[c["kind"]], c["op"], c["case_id"]))
    return {"backend_a": ba, "backend_b": bb, "compared": len(a.keys() & b.keys()), "changed": changed,
            "regressions": sum(c["kind"] == REGRESSION for c in changed),
            "fixes": sum(c["kind"] == FIX for c in changed), "new_causes": new, "gone_causes": gone,
            "shifts": shifts, "only_a": len(a.keys() - b.keys()), "only_b": len(b.keys() - a.keys())}


def _text(d: tuple[int, str] | None) -> str:
    return "0" if d is None else distance_text(d[0], d[1])


def render(d: dict, limit: int = 20) -> str:
    """The diff as Markdown a person reads."""
    lines = [f"# w8a8 compare: `{d['backend_a']}` (A) -> `{d['backend_b']}` (B)", "",
             f"{d['compared']} case(s) in both runs; {len(d['changed'])} changed verdict "
             f"({d['regressions']} regression(s), {d['fixes']} fix(es)); only in A: {d['only_a']}, "
             f"only in B: {d['only_b']}.", ""]
    if d["changed"]:
        lines += ["## Cases that changed verdict", "", "| op | case | A | B | cause | repro (B) |", "|---|---|---|---|---|---|"]
        for c in d["changed"][:limit]:
            lines.append(f"| `{c['op']}` | {c['name'] or c['case_id']} | {c['from']} | {c['to']} | "
                         f"{c['cause'].replace('|', '/')} | `{c['repro']}` |")
        if len(d["changed"]) > limit:
            lines.append(f"| … | {len(d['changed']) - limit} more | | | | |")
        lines.append("")
    for key, title in (("new_causes", "New causes (in B, not in A)"), ("gone_causes", "Causes gone (in A, not in B)")):
        if d[key]:
            lines += [f"## {title}", "", "| op | cause | cases |", "|---|---|---|"]
            lines += [f"| `{c['op']}` | {c['cause'].replace('|', '/')} | {c['cases']} |" for c in d[key]]
            lines.append("")
    if d["shifts"]:
        lines += ["## Worst distance to the golden, per op (cases in both runs)", "", "| op | A | B |", "|---|---|---|"]
        lines += [f"| `{s['op']}` | {s['from']} | {s['to']} |" for s in d["shifts"]]
        lines.append("")
    if not (d["changed"] or d["new_causes"] or d["gone_causes"] or d["shifts"]):
        lines.append("No differences.")
    return "\n".join(lines) + "\n"
