"""Text the user chose, or a backend wrote, reaches the terminal as typed: rich markup in it (``[/x]`` is a
closing tag to rich, which raises MarkupError on an unmatched one, or ``[red]`` that would colour and vanish)
is escaped. Each case: a name rich would misread, printed back verbatim, exit status as without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from w8a8cli.main import main

RAISING = textwrap.dedent('''
    from conformance.planted import _PlantedBase

    class RaisingBackend(_PlantedBase):
        name = "planted-raising"
        bug = "raises with a source location in brackets"

        def _dynamic_quant(self, a):
            raise RuntimeError("[/path/file.cc:129] [red]kernel launch failed")
''')


def test_a_conformance_out_folder_with_markup_is_printed_verbatim(tmp_path, capsys):
    out = tmp_path / "r[/x]"
    rc = main(["conformance", "--backend", "numpy", "--op", "trans_quant_param", "--profile", "dev",
               "--workers", "0", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0 and (out / "report.md").exists()
    assert f"{out}/report.md" in err.replace("\n", "")


def test_a_tune_out_folder_and_write_path_with_markup_are_printed_verbatim(tmp_path, capsys):
    out, table = tmp_path / "r[/x]", tmp_path / "t[red]x.toml"
    rc = main(["tune", "--backend", "numpy", "--op", "trans_quant_param", "--samples", "3", "--out", str(out),
               "--write", str(table)])
    err = capsys.readouterr().err.replace("\n", "")
    assert rc == 0 and (out / "tune-report.html").exists() and table.exists()
    assert f"plots and report in {out}" in err
    assert f"to {table}" in err


def test_a_backend_error_with_brackets_is_printed_verbatim_by_bench(tmp_path):
    (tmp_path / "raising.py").write_text(RAISING)
    json_path = tmp_path / "b[/y].json"
    proc = subprocess.run([sys.executable, "-m", "w8a8cli.main", "bench", "--quick", "--op", "dynamic_quant",
                           "--no-peak", "--max-time", "0.05", "--min-rounds", "1", "--backend",
                           f"{tmp_path / 'raising.py'}:RaisingBackend", "--json", str(json_path)],
                          capture_output=True, text=True, timeout=600)
    err = proc.stderr.replace("\n", "")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr, err[-3000:]
    assert "[/path/file.cc:129] [red]kernel" in err, err[-3000:]
    assert f"wrote {json_path}" in err
