"""JUnit XML: one ``testsuite`` per backend, one ``testcase`` per case (``classname`` =
``backend.op``); fail / error / crashed / timeout / leak become ``<failure>`` or ``<error>``, unsupported
becomes ``<skipped>``; the attribution and the repro command go into the message."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

from ..results import latest


def render(records: list[dict], meta: dict) -> str:
    by_backend: dict[str, list[dict]] = defaultdict(list)
    for r in latest(records):
        by_backend[r["backend"]].append(r)
    root = ET.Element("testsuites", name="w8a8 conformance")
    for backend, rows in sorted(by_backend.items()):
        suite = ET.SubElement(root, "testsuite", name=f"conformance[{backend}]")
        counts = defaultdict(int)
        total_time = 0.0
        for r in rows:
            tc = ET.SubElement(suite, "testcase", classname=f"{backend}.{r['op']}",
                               name=r.get("name") or r["case_id"], time=f"{r.get('duration_s', 0.0):.4f}")
            total_time += r.get("duration_s", 0.0) or 0.0
            status = r["status"]
            message = _message(r)
            if status == "fail":
                counts["failures"] += 1
                ET.SubElement(tc, "failure", message=message[:500], type="mismatch").text = message
            elif status in ("error", "crashed", "timeout", "leak"):
                counts["errors"] += 1
                ET.SubElement(tc, "error", message=message[:500], type=status).text = message + \
                    ("\n" + r["traceback"] if r.get("traceback") else "")
            elif status == "unsupported":
                counts["skipped"] += 1
                ET.SubElement(tc, "skipped", message=r.get("note", "unsupported"))
            elif status in ("mistrusted", "device-unspecified"):
                ET.SubElement(tc, "system-out").text = f"{status}: " + message
        suite.set("tests", str(len(rows)))
        for k in ("failures", "errors", "skipped"):
            suite.set(k, str(counts[k]))
        suite.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _message(r: dict) -> str:
    parts = [f"{r['status']}: {r.get('note') or ''}".strip()]
    for name, comp in (r.get("outputs") or {}).items():
        if comp.get("verdict") in ("fail", "mistrusted"):
            parts.append(f"{name}: {comp.get('note')}")
    at = r.get("attribution") or {}
    if at.get("cause"):
        parts.append(f"first diverging stage: {at.get('first_stage')}; likely cause: {at['cause']}")
    parts.append(f"repro: {r.get('repro')}")
    return "\n".join(parts)
