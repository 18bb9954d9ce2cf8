"""A weak tolerance table is visible: entries looser than their measured basis, without a basis, or accepting
anything are flagged in every report (terminal, report.md, report.html, summary.json), and "tolerated" is
never counted as passed in the agreement matrix.

Before: a table allowing everything (``ulp = 1e9``, ``mismatch_rate = 1``, no basis) turned planted-bug
failures into "tolerated"; the reports showed only the table's path and the matrix counted them as passed."""

from __future__ import annotations

import io
import json

from conformance import reports
from conformance.reports import cell_text, terminal
from conformance.tolerance_strength import reasons, weak_entries
from conformance.tolerances import Entry, ToleranceTable, packaged_path

WEAK = """
[[entry]]
backend = "*"
op = "dynamic_quant"
output = "y"
ulp = 1000000000
mismatch_rate = 1.0
basis = "none"
"""


def test_the_allow_everything_entry_is_flagged_for_each_reason():
    e = Entry("*", "dynamic_quant", "y", dtype="bfloat16", ulp=10 ** 9, mismatch_rate=1.0, basis="none")
    why = "; ".join(reasons(e))
    assert "basis 'none' is neither measured nor analytic" in why
    assert "1000000000 ULP accepts any bfloat16 value (>= 256" in why
    assert "mismatch_rate 1: that fraction of elements is not compared" in why


def test_thresholds_of_a_measured_entry():
    base = dict(backend="x", op="quant_matmul", output="y", dtype="bfloat16", basis="measured", samples=400)
    assert reasons(Entry(**base, ulp=2, max_observed=1)) == []          # 2 <= max(2 * 1, 1 + 2)
    assert reasons(Entry(**base, ulp=3, max_observed=1)) == []          # 3 <= 3
    assert reasons(Entry(**base, ulp=4, max_observed=1)) == ["allows 4 ULP, 1 the worst seen in its 400 measured cases"]
    assert reasons(Entry(**base, ulp=8, max_observed=4)) == []          # twice the worst
    assert reasons(Entry(**base, ulp=9, max_observed=4))                # more than twice
    assert reasons(Entry(**{**base, "samples": 0}, ulp=0)) == ["no measurement behind it (samples 0)"]
    assert reasons(Entry(**{**base, "basis": "analytic"}, ulp=1)) == ["analytic without a stated bound"]
    assert reasons(Entry(**{**base, "basis": "analytic"}, ulp=1, bound="k * 2^-8")) == []
    assert "atol 0.1 / rtol 0 on an entry measured in ULP" in reasons(Entry(**base, atol=0.1))


def test_the_packaged_table_flags_exactly_its_one_tail_fit_entry_far_beyond_its_cases():
    """One measured entry allows far more than its cases showed (torchao mx_matmul, its tail fit), and says so.
    onnxruntime weight_quant_batchmatmul was flagged while it allowed 19 ULP on 114 cases (1 the worst seen);
    re-tuned on 45,532 cases (worst 294) it allows 444, within twice its basis, and is no longer flagged."""
    weak = weak_entries(ToleranceTable.load(packaged_path()))
    assert sorted((r["backend"], r["op"]) for r in weak) == [("torchao", "mx_matmul")]
    assert weak[0]["why"] == "allows 1336 ULP, 512 the worst seen in its 1977 measured cases"


def _records():
    out = []
    for i, status in enumerate(["pass"] * 3 + ["tolerated"] * 4):
        out.append({"schema": 1, "backend": "b", "op": "dynamic_quant", "case_id": f"c{i}", "status": status,
                    "outputs": {"y": {"verdict": status, "max_ulp": 0 if status == "pass" else 5}}})
    return out


def test_every_report_flags_the_weak_entry_and_never_counts_tolerated_as_passed(tmp_path):
    table = tmp_path / "weak.toml"
    table.write_text(WEAK)
    meta = {"tolerances": str(table), "backends": {"b": {"numerics": "ascend-a2a3", "numerics_differences": {}}}}
    records = _records()
    paths = reports.write_all(tmp_path, records, meta)
    summary = json.loads(paths["json"].read_text())
    (row,) = summary["tolerance_warnings"]
    assert row["op"] == "dynamic_quant" and "neither measured nor analytic" in row["why"]
    md, html = paths["markdown"].read_text(), paths["html"].read_text()
    assert "## Weak tolerances" in md and "mismatch_rate 1: that fraction of elements is not compared" in md
    assert "id='weak-tolerances'" in html and "<th>0 / 1</th>" in html   # the op is not counted as passing
    cell = summary["matrix"]["b"]["dynamic_quant"]
    assert cell_text(cell) == "3/7 (4 tolerated)"                        # before: "7/7"
    assert "| 3/7 (4 tolerated)" in md
    from rich.console import Console

    buf = io.StringIO()
    terminal.print_summary(records, meta, console=Console(file=buf, width=80))
    text = buf.getvalue()
    assert "1 tolerance entries weaker than their basis" in text and "dynamic_quant.y" in text
    assert "3/7 +4 tol." in text


def test_no_table_no_warning(tmp_path):
    meta = {"tolerances": "none (bitwise)"}
    assert reports.tolerance_warnings({"cells": {"b": {"dynamic_quant": {}}}}, meta) == []
