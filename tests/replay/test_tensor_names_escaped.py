"""Tensor file names from a dump reach the terminal as written: rich markup in ``data_name`` (``x[/y].npy`` is a
closing tag to rich, which would raise MarkupError or drop the text) is printed verbatim, and a file with a
``.npy`` name that holds a zip (a ``.pt``) is refused with one line, not a traceback."""

from __future__ import annotations

import json
import shutil

from tests.replay.conftest import _S
from w8a8cli.main import main

ENTRY = "NPU.npu_dynamic_quant.0.forward"


def _dump(tmp_path, name: str, copy_file: bool):
    dump = tmp_path / "d"
    shutil.copytree(_S / "constructed-w8a8-tensor-L1", dump)
    rank = dump / "step0" / "rank0"
    data = json.loads((rank / "dump.json").read_text())
    record = data["data"][ENTRY]["input_args"][0]
    if copy_file:
        target = rank / "dump_tensor_data" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(rank / "dump_tensor_data" / record["data_name"], target)
    record["data_name"] = name
    (rank / "dump.json").write_text(json.dumps(data))
    return dump


def test_a_missing_file_named_with_markup_is_printed_verbatim(tmp_path, capsys):
    rc = main(["replay", str(_dump(tmp_path, "x[/y].npy", copy_file=False)), "--out", str(tmp_path / "r"),
               "--no-attribution", "--op", "dynamic_quant"])
    err = capsys.readouterr().err
    assert rc == 1 and "MarkupError" not in err
    assert "file absent: x[/y].npy is not in" in " ".join(err.split())


def test_a_zip_under_a_npy_name_with_markup_is_refused_in_one_line(tmp_path, capsys):
    rc = main(["replay", str(_dump(tmp_path, "x[/y].npy", copy_file=True)), "--out", str(tmp_path / "r"),
               "--no-attribution", "--op", "dynamic_quant"])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 1 and "Traceback" not in err and "MarkupError" not in err
    assert "x[/y].npy" in err and "not a .npy file: a zip archive" in err
