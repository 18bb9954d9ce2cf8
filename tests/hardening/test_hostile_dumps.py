"""Hostile msprobe dumps for ``w8a8 replay``: every one a verdict or a one-line refusal, never a
traceback, a read outside the dump folder, or an allocation the records do not justify.

The dumps are the committed samples (one made with the real msprobe writer's layout) with one field
changed by hand per test."""

import json
import os
import resource
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from replay.dump import DumpDir, TensorLoader, load_dump, tensor_record
from replay.engine import ResultsFile
from replay.runner import Options, replay_dump

SAMPLES = Path(__file__).resolve().parents[1] / "replay" / "samples"
TENSOR = SAMPLES / "constructed-w8a8-tensor-L1" / "step0" / "rank0"
STATS = SAMPLES / "constructed-w8a8-statistics-md5-L1" / "step0" / "rank0"
DQ = "NPU.npu_dynamic_quant.0.forward"


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "dump" / "step0" / "rank0"
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def _edit(folder: Path, change) -> None:
    doc = json.loads((folder / "dump.json").read_text())
    change(doc["data"])
    (folder / "dump.json").write_text(json.dumps(doc))


def _replay(folder: Path, tmp_path: Path) -> dict:
    out = tmp_path / "out"
    results = ResultsFile(out / "results.jsonl")
    replay_dump(folder, Options(case_dir=out / "cases"), results)
    return {r["name"]: r for r in results.records() if r.get("kind") == "replay"}, results.records()


def _reasons(record: dict) -> str:
    return json.dumps({k: record.get(k) for k in ("verdict", "missing", "note", "reason")})


# --- paths ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../../../outside/x.pt", "/etc/passwd", "link.pt", "sub/../../x.pt"])
def test_a_data_name_that_leaves_the_dump_folder_is_refused(tmp_path, name):
    folder = _copy(TENSOR, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(folder / "dump_tensor_data" / f"{DQ}.input.0.pt", outside / "x.pt")
    (folder / "dump_tensor_data" / "link.pt").symlink_to(outside / "x.pt")
    _edit(folder, lambda d: d[DQ]["input_args"][0].__setitem__("data_name", name))
    by_name, _ = _replay(folder, tmp_path)
    # before: the file outside was read (and replayed as the call's input). Now: refused, named
    record = by_name[DQ]
    assert record["verdict"] == "missing-data" and "inside" in _reasons(record), _reasons(record)


# --- sizes before decompressing / allocating --------------------------------------------------------

def test_a_pt_storage_inflating_past_its_record_is_refused_before_decompressing(tmp_path):
    import numpy as np

    from replay.pt_reader import read_tensor_file

    folder = _copy(TENSOR, tmp_path)
    pt = folder / "dump_tensor_data" / f"{DQ}.input.0.pt"
    # rewrite the storage member with 64 MiB of zeros, deflated (~64 KiB on disk), and the pickle's numel
    with zipfile.ZipFile(pt) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    data = next(n for n in members if "/data/" in n)
    members[data] = bytes(64 << 20)  # the pickle's numel is left as is: the sizes disagree
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in members.items():
            z.writestr(n, b)
    assert bomb.stat().st_size < 1 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(Exception) as info:
        read_tensor_file(bomb, expect_bytes=4 * 16 * 2)
    assert "bytes" in str(info.value) and type(info.value).__name__ == "DumpFormatError"
    # nothing near the 64 MiB was inflated (ru_maxrss in KiB)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 << 10
    del np


def test_a_zip_member_lying_about_its_size_is_never_inflated_whole(tmp_path):
    from replay.pt_reader import DumpFormatError, read_tensor_file

    folder = _copy(TENSOR, tmp_path)
    pt = folder / "dump_tensor_data" / f"{DQ}.input.0.pt"
    with zipfile.ZipFile(pt) as z:
        infos = z.infolist()
        members = {i.filename: z.read(i) for i in infos}
    data = next(n for n in members if "/data/" in n)
    small = len(members[data])
    members[data] = bytes(256 << 20)  # inflates to 256 MiB
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in members.items():
            z.writestr(n, b)
    # the central directory then claims the honest small size again: only the stream inflates far
    raw = bytearray(bomb.read_bytes())
    with zipfile.ZipFile(bomb) as z:
        info = z.getinfo(data)
    for at in _find_all(raw, (256 << 20).to_bytes(4, "little")):
        raw[at:at + 4] = small.to_bytes(4, "little")
    bomb.write_bytes(bytes(raw))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DumpFormatError):
        read_tensor_file(bomb, expect_bytes=small)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10
    del info


def _find_all(buf: bytes, pat: bytes):
    i = buf.find(pat)
    while i >= 0:
        yield i
        i = buf.find(pat, i + 1)


@pytest.mark.parametrize("shape", [[2 ** 62, 4096], [262144, 4096], [-1, 16], [True, 16], ["4", 16], [1.5, 2]])
def test_an_absurd_claimed_shape_gets_a_verdict_and_allocates_nothing(tmp_path, shape):
    folder = _copy(STATS, tmp_path)
    _edit(folder, lambda d: d[DQ]["input_args"][0].__setitem__("shape", shape))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    by_name, _ = _replay(folder, tmp_path)
    # before: [262144, 4096] bf16 built a full-shape zero probe (2 GiB here, 17 GB at H=65536); 2^62 a traceback
    assert DQ in by_name and by_name[DQ]["verdict"], by_name
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 << 10


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "127", None, True, 1e308])
def test_absurd_statistics_on_an_int8_output_get_a_verdict(tmp_path, value):
    folder = _copy(STATS, tmp_path)
    _edit(folder, lambda d: d[DQ]["output"][0].__setitem__("Max", value))
    by_name, _ = _replay(folder, tmp_path)
    # before: Max = NaN on the int8 output -> ValueError (cannot convert float NaN to integer)
    assert by_name[DQ]["verdict"]


# --- JSON bounds ------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [600, 200_000])
def test_deeply_nested_json_is_refused_naming_the_limit(tmp_path, depth):
    folder = _copy(STATS, tmp_path)
    text = (folder / "dump.json").read_text()
    cut = text.index('"input_kwargs": {}')
    (folder / "dump.json").write_text(text[:cut] + '"input_kwargs": {"deep": ' + "[" * depth + "]" * depth
                                      + "}" + text[cut + len('"input_kwargs": {}'):])
    dump = load_dump(DumpDir(folder, 0, 0, "rank0"))
    # before: RecursionError (200,000) or a failure later in str() (600). Now: a problem naming the limit
    assert not dump.entries and "nested" in dump.problems[0] and "limit" in dump.problems[0], dump.problems


@pytest.mark.parametrize("name", ["stack.json", "construct.json"])
def test_deeply_nested_stack_or_construct_is_a_problem_not_a_traceback(tmp_path, name):
    folder = _copy(STATS, tmp_path)
    (folder / name).write_text("[" * 100_000 + "]" * 100_000)
    dump = load_dump(DumpDir(folder, 0, 0, "rank0"))
    assert dump.entries and any(name in p and "nested" in p for p in dump.problems), dump.problems


def test_a_dump_json_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from replay import dump as dump_module

    folder = _copy(STATS, tmp_path)
    monkeypatch.setattr(dump_module, "MAX_JSON_BYTES", 1000)
    loaded = load_dump(DumpDir(folder, 0, 0, "rank0"))
    assert not loaded.entries and "over the limit of 1,000 bytes" in loaded.problems[0], loaded.problems


@pytest.mark.slow
def test_a_300_mb_dump_json_under_a_1_5_gb_memory_limit_is_one_line(tmp_path):
    folder = _copy(STATS, tmp_path)
    doc = json.loads((folder / "dump.json").read_text())
    with open(folder / "dump.json", "w") as f:
        f.write('{"task": "statistics", "level": "L1", "framework": "pytorch", "data": {')
        one = json.dumps(doc["data"][DQ])
        n = (300 << 20) // len(one)
        f.write(",".join(f'"NPU.npu_dynamic_quant.{i}.forward": {one}' for i in range(n)))
        f.write("}}")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20)); "
            "from w8a8cli.main import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "replay", str(folder), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600)
    # before: MemoryError traceback. Now: the dump refused in one line naming the size limit
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr[-2000:]
    notes = [r.get("note", "") for r in ResultsFile(tmp_path / "out" / "results.jsonl").records()]
    assert proc.returncode == 1 and any("over the limit of" in n for n in notes), notes


def test_an_entry_name_given_twice_is_reported(tmp_path):
    folder = _copy(STATS, tmp_path)
    text = (folder / "dump.json").read_text()
    doc = json.loads(text)
    first = json.dumps(doc["data"][DQ])
    # the same name again at the end of "data" (a JSON object with a duplicate key)
    body = text.rstrip().rstrip("}").rstrip().rstrip("}")
    (folder / "dump.json").write_text(body + f', "{DQ}": {first}' + "}}")
    dump = load_dump(DumpDir(folder, 0, 0, "rank0"))
    # before: the first call silently dropped from every report. Now: a problem names the duplicate
    assert any(DQ in p and "twice" in p for p in dump.problems), dump.problems


def test_replay_resume_over_damaged_results_lines_says_them_once(tmp_path, capsys):
    from w8a8cli.main import main

    out = tmp_path / "out"
    assert main(["replay", str(STATS), "--out", str(out)]) in (0, 1)
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines[1] = b"5\n"
    lines.insert(2, b"\xff\xfe\n")
    (out / "results.jsonl").write_bytes(b"".join(lines))
    capsys.readouterr()
    code = main(["replay", str(STATS), "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    # before: TypeError / UnicodeDecodeError on --resume. Now: one warning, the damaged call replayed again
    assert code in (0, 1) and "Traceback" not in err and err.count("skipped") == 1, err


def test_a_tensor_record_with_a_shape_of_the_wrong_type_is_a_record_without_shape():
    rec = tensor_record({"type": "torch.Tensor", "dtype": "torch.int8", "shape": {"a": 1}}, "x")
    assert rec.shape == () and rec.problem


def test_a_fifo_dump_json_is_refused_at_once(tmp_path):
    folder = _copy(STATS, tmp_path)
    (folder / "dump.json").unlink()
    os.mkfifo(folder / "dump.json")
    dump = load_dump(DumpDir(folder, 0, 0, "rank0"))
    assert not dump.entries and "FIFO" in dump.problems[0]
