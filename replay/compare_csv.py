"""``compare.csv``: a replay's per-tensor results as the sheet ``msprobe compare`` writes, to filter the same way.

One row per output tensor of every judged call, the device (NPU) against the golden (Bench): first
msprobe's own columns in its order (:data:`~replay.msprobe_compare.COMPARE_RESULT_HEADER`), then
``Accuracy Reached or Not``, then the project's (:data:`OWN_COLUMNS`): the call's and the output's
verdict, the largest distance in ULP or integer codes, the first differing index, msprobe's
``acc_check`` verdict and rule, the note and the repro command. A call without tensors (a statistics or
md5 dump, missing data, not replayable) gives one row with its verdict and note, msprobe's columns empty.
Cells are text as written; a cell starting with ``=``, ``+``, ``-`` or ``@`` that is not a number is
prefixed with ``'`` so a spreadsheet does not run it as a formula.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from conformance.stateio import write_atomic

from .msprobe_compare import ACCURACY, BENCH_NAME, COMPARE_RESULT_HEADER, ERROR_MESSAGE, NPU_NAME

OWN_COLUMNS = ["w8a8 verdict", "w8a8 output", "w8a8 output verdict", "w8a8 max distance", "w8a8 first mismatch",
               "msprobe acc_check", "w8a8 note", "w8a8 repro"]
HEADER = COMPARE_RESULT_HEADER + [ACCURACY] + OWN_COLUMNS
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _cell(value) -> str:
    text = "" if value is None else str(value)
    if text[:1] in ("=", "+", "-", "@") and not _NUMBER.match(text):
        return "'" + text
    return text


def _distance(comp: dict) -> str:
    if comp.get("max_ulp") is not None:
        return f"{comp['max_ulp']} ULP"
    if comp.get("max_code_diff") is not None:
        return f"{comp['max_code_diff']} code"
    return ""


def rows(records: list[dict]) -> list[dict]:
    """The sheet's rows (dicts keyed by :data:`HEADER`) for replay records, in record order."""
    out = []
    for r in records:
        call = r.get("name", "")
        comps = r.get("outputs") or {}
        ms = r.get("msprobe") or {}
        ms_out = ms.get("outputs") or {}
        base = {"w8a8 verdict": r.get("verdict", ""), "w8a8 note": r.get("note") or "",
                "w8a8 repro": r.get("repro") or ""}
        tensors = [(i, n) for i, n in enumerate(comps) if (ms_out.get(n) or {}).get("columns")]
        if not tensors:
            out.append({**base, NPU_NAME: call, BENCH_NAME: call, ERROR_MESSAGE: r.get("reason") or ""})
            continue
        for i, name in tensors:
            comp, mine = comps.get(name) or {}, ms_out[name]
            first = comp.get("first_mismatch")
            out.append({**base, **mine["columns"], NPU_NAME: f"{call}.output.{i}", BENCH_NAME: f"{call}.output.{i}",
                        "w8a8 output": name, "w8a8 output verdict": comp.get("verdict", ""),
                        "w8a8 max distance": _distance(comp), "w8a8 first mismatch": "" if first is None else first,
                        "msprobe acc_check": f"{mine.get('verdict', '')}: {mine.get('rule', '')}"})
    return out


def text(records: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=HEADER, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows(records):
        writer.writerow({k: _cell(row.get(k)) for k in HEADER})
    return buf.getvalue()


def write(path, records: list[dict]) -> Path:
    """Write the sheet atomically (UTF-8 with a BOM, which spreadsheet programs need to read it as UTF-8)."""
    write_atomic(path, "\ufeff" + text(records))
    return Path(path)
