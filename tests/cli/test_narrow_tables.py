"""``w8a8 backends``, ``tune`` and ``bench`` on an 80-column pseudo-terminal: every table line fits in 80
columns, each op name is printed whole on a line of its own, and the GEMM path torch-cpu took is shown."""

from __future__ import annotations

import re
import sys

import pytest

from tests.docs.conftest import run_in_pty


def _table(text: str, header: str, until: str) -> list[str]:
    """The lines of the table whose header line starts with ``header``, up to the line ``until`` (a regular
    expression) matches at its start."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    end = next(i for i in range(start, len(lines)) if re.match(until, lines[i]))
    return lines[start:end]


SCRIPT = """
from w8a8cli.main import main

if __name__ == "__main__":   # bench's worker processes import this file again
    main(["backends"])
    print("==tune", flush=True)
    main(["tune", "--backend", "torch-cpu", "--op", "dynamic_quant", "--op", "moe_init_routing_v2", "--samples", "3"])
    print("==bench", flush=True)
    raise SystemExit(main(["bench", "--quick", "--op", "dynamic_quant", "--backend", "torch-cpu", "--no-peak",
                           "--max-time", "0.001", "--min-rounds", "1"]))
"""


@pytest.mark.slow   # about 10 s of CPU: bench's worker process imports torch again
def test_backends_tune_and_bench_tables_fit_80_columns(tmp_path):
    """One interpreter runs the three commands (their imports paid once), its output on an 80-column pty."""
    (tmp_path / "three.py").write_text(SCRIPT)
    rc, text = run_in_pty(f"{sys.executable} three.py", tmp_path, columns=80, timeout=600)
    assert rc == 0, text[-3000:]
    backends_part, rest = text.split("==tune", 1)
    tune_part, bench_part = rest.split("==bench", 1)

    table = _table(backends_part, "backend ", r"\S+ is not available: |diff\.:")
    assert all(len(ln) <= 80 for ln in table), "\n".join(table)
    torch_cpu = next(ln for ln in table if ln.startswith("torch-cpu "))
    assert re.search(r"\s(amx|vnni|qlinear|int_mm)\s", torch_cpu), torch_cpu
    names = [ln.split()[0] for ln in table[2:]]
    assert {"numpy", "torch-cpu", "torch-npu", "torchao", "onnxruntime-dqmm"} <= set(names), names

    table = _table(tune_part, "op / output ", "each entry's analytic bound")
    assert all(len(ln) <= 80 for ln in table), "\n".join(table)
    assert {"dynamic_quant", "moe_init_routing_v2"} <= {ln.strip() for ln in table}
    assert any(ln.startswith("  expanded_row_idx ") for ln in table)

    table = _table(bench_part, "op / shape ", "vs best:")
    assert all(len(ln) <= 80 for ln in table), "\n".join(table)
    assert "dynamic_quant" in {ln.strip() for ln in table}
    assert any(ln.startswith("  M512xH4096 ") and "torch-cpu" in ln for ln in table), "\n".join(table)


def test_the_bench_table_names_the_gemm_path_and_fits_80_columns():
    """Records as the runner writes them (a GEMM op on torch-cpu, a long case, an unverified one), printed on
    an 80-column console."""
    import io

    from rich.console import Console

    from bench import report
    from bench.peak import Peaks

    def rec(op, label, backend, median, **extra):
        return {"op": op, "label": label, "case": f"{op}[{label}]", "backend": backend, "status": "ok",
                "verified": True, "stats": {"median": median}, "ratio_to_fastest": 1.0, **extra}

    records = [rec("weight_quant_batchmatmul", "W4A16-G128-M512xK4096xN4096", "onnxruntime-dqmm", 0.5),
               rec("w8a8_dynamic_linear", "M512xK4096xN4096", "torch-cpu", 0.02, gemm="vnni", ratio_to_peak=0.71),
               {**rec("w8a8_dynamic_linear", "M512xK4096xN4096", "torchao", 0.03), "verified": False,
                "verify_note": "output differs from the golden at [0, 3] by 2 ULP"}]
    buf = io.StringIO()
    report.print_table(records, Peaks(0.0, 0.0, "not measured", "not measured", "skipped", 2),
                       console=Console(file=buf, width=80, force_terminal=False))
    table = _table(buf.getvalue(), "op / shape ", "vs best:")
    assert all(len(ln) <= 80 for ln in table), "\n".join(table)
    assert "weight_quant_batchmatmul" in [ln.strip() for ln in table]
    line = next(ln for ln in table if "torch-cpu" in ln)
    assert line.rstrip().endswith("vnni") and "71%" in line
    assert "w8a8_dynamic_linear[M512xK4096xN4096] torchao: unverified: output differs" in buf.getvalue()
