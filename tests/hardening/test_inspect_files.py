"""Issue 19, ``w8a8 inspect`` rows: a hostile checkpoint directory is refused with one line, exit 2.

Rows covered: a weights file that is a FIFO (hung forever); an index naming an absolute shard path or
climbing out with ``../`` (read outside the checkpoint), symlinks out and symlink loops; a 100 000-deep
JSON (RecursionError); a ``!!python`` YAML tag in a recipe (ConstructorError traceback); and the
project's own safetensors parser without the ``safetensors`` package (overlapping tensors accepted,
list dtypes and string offsets as tracebacks); ``--verify --tokens 1e8`` (MemoryError) and ``--layers``
matching nothing ("0 modules", exit 0) — each now a clean error naming the file or argument, what was
expected and what came.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints import Checkpoint, CheckpointError, synthetic_checkpoint
from checkpoints.models import tiny_config
from checkpoints.reader import INDEX, WEIGHTS
from checkpoints.recipes import load_recipe
from checkpoints.safe_files import MAX_JSON_DEPTH, json_depth
from checkpoints.safetensors_io import SafetensorsError, read_header
from w8a8cli.main import main

DEEP = "[" * 100_000 + "]" * 100_000
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
needs_symlink = pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One tiny sharded checkpoint (two layers, four experts, hidden 64), copied by each test."""
    root = tmp_path_factory.mktemp("ckpt")
    cfg = tiny_config("v3", layers=2, experts=4, hidden=64, moe_inter=32, vocab=64)
    single = synthetic_checkpoint(root / "single", cfg)
    sharded = synthetic_checkpoint(root / "sharded", cfg, shard_bytes=64 * 1024)
    return {"single": single, "sharded": sharded}


@pytest.fixture
def single(template, tmp_path):
    return Path(shutil.copytree(template["single"], tmp_path / "single"))


@pytest.fixture
def sharded(template, tmp_path):
    return Path(shutil.copytree(template["sharded"], tmp_path / "sharded"))


def inspect_fails(path, capsys, *extra) -> str:
    """``w8a8 inspect PATH EXTRA`` (default ``--headers-only``) exits 2 with one line on stderr, no traceback; that line."""
    assert main(["inspect", str(path), *(extra or ("--headers-only",))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("w8a8 inspect: ")
    return lines[0]


def first_shard(path: Path) -> str:
    return sorted(set(json.loads((path / INDEX).read_text())["weight_map"].values()))[0]


def rewrite_index(path: Path, shard_name: str) -> None:
    index = json.loads((path / INDEX).read_text())
    old = first_shard(path)
    index["weight_map"] = {k: (shard_name if v == old else v) for k, v in index["weight_map"].items()}
    (path / INDEX).write_text(json.dumps(index))


def test_the_template_opens(single, sharded, capsys):
    # the good outcome the hostile variants below are measured against
    for path in (single, sharded):
        Checkpoint.open(path)
        assert main(["inspect", str(path), "--headers-only"]) in (0, 1)   # 1: findings, not a crash
        assert "Traceback" not in capsys.readouterr().err


# -- FIFOs ------------------------------------------------------------------------------------------------

@needs_fifo
def test_weights_file_fifo_is_refused_without_hanging(single):
    # a subprocess with a generous timeout: before the fix this hung in open() forever
    (single / WEIGHTS).unlink()
    os.mkfifo(single / WEIGHTS)
    proc = subprocess.run([sys.executable, "-m", "w8a8cli.main", "inspect", str(single), "--headers-only"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"w8a8 inspect: {single / WEIGHTS}: weights file must be a regular file; got a FIFO (named pipe)"]


@needs_fifo
@pytest.mark.parametrize("which", ["shard", "description", "config", "index"])
def test_fifo_anywhere_is_refused(sharded, capsys, which):
    target = {"shard": lambda: sharded / first_shard(sharded), "description": lambda: sharded / "quant_model_description.json",
              "config": lambda: sharded / "config.json", "index": lambda: sharded / INDEX}[which]()
    target.unlink()
    os.mkfifo(target)
    line = inspect_fails(sharded, capsys)
    assert f"{target}" in line and "must be a regular file; got a FIFO (named pipe)" in line


# -- paths out of the directory ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, why", [
    ("/etc/passwd", "must be a relative file name inside .*; got the absolute path '/etc/passwd'"),
    ("../outside.safetensors", "must stay inside .*; got '../outside.safetensors', which climbs out with '..'"),
    ("sub/../../outside.safetensors", "must stay inside .*; got 'sub/../../outside.safetensors', which climbs out"),
])
def test_index_naming_a_path_outside_is_refused(sharded, capsys, name, why):
    shutil.copy(sharded / first_shard(sharded), sharded.parent / "outside.safetensors")  # it exists: not the reason
    rewrite_index(sharded, name)
    with pytest.raises(CheckpointError, match=rf"^{sharded / INDEX}: shard {why}"):
        Checkpoint.open(sharded)
    assert f"{sharded / INDEX}: shard" in inspect_fails(sharded, capsys)


@needs_symlink
def test_symlink_escaping_the_directory_is_refused(sharded, capsys):
    shard = first_shard(sharded)
    outside = sharded.parent / "elsewhere.safetensors"
    shutil.move(sharded / shard, outside)
    os.symlink(outside, sharded / shard)
    line = inspect_fails(sharded, capsys)
    assert f"shard {shard!r} must stay inside {sharded}; it resolves (through a symlink) to {outside.resolve()}" in line


@needs_symlink
def test_symlink_inside_the_directory_is_followed(sharded):
    # a shard stored under another name in the same directory and linked: legitimate, opened
    shard = first_shard(sharded)
    shutil.move(sharded / shard, sharded / "real.bin")
    os.symlink("real.bin", sharded / shard)
    assert Checkpoint.open(sharded).files[shard].entries


@needs_symlink
@pytest.mark.parametrize("layout", ["sharded", "single"])
def test_symlink_loop_is_an_error(template, tmp_path, capsys, layout):
    path = Path(shutil.copytree(template[layout], tmp_path / layout))
    target = path / (first_shard(path) if layout == "sharded" else WEIGHTS)
    target.unlink()
    os.symlink(target.name, target)          # points at itself
    line = inspect_fails(path, capsys)
    assert "symlink loop" in line and target.name in line


# -- JSON depth and YAML tags --------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["quant_model_description.json", "config.json", INDEX])
def test_hundred_thousand_deep_json_is_a_clean_error(sharded, capsys, which):
    (sharded / which).write_text(DEEP)
    line = inspect_fails(sharded, capsys)
    assert f"{sharded / which}" in line
    assert f"must be JSON nested at most {MAX_JSON_DEPTH} levels deep; got 100000 levels" in line


def test_deep_safetensors_header_is_a_clean_error(single, capsys):
    body = DEEP.encode()
    (single / WEIGHTS).write_bytes(struct.pack("<Q", len(body)) + body)
    line = inspect_fails(single, capsys)
    assert f"{single / WEIGHTS}: header must be JSON nested at most {MAX_JSON_DEPTH} levels deep" in line


def test_json_depth_skips_brackets_inside_strings():
    # depth counts [ and { outside strings only: '"[[[["' is a string, the escaped quote does not end it
    assert json_depth('{"a": "[[[[\\"{{", "b": [[1]]}') == 3
    assert json_depth("[]") == 1 and json_depth("7") == 0 and json_depth(DEEP) == 100_000


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system ['echo pwned']", "!!python/name:os.system",
                                 "!<tag:yaml.org,2002:python/object/new:os.getcwd> []"])
def test_python_yaml_tag_is_refused_naming_the_file(single, tmp_path, capsys, tag):
    recipe = tmp_path / "evil.yaml"
    recipe.write_text(f"name: evil\nsteps:\n  - {tag}\n")
    with pytest.raises(ValueError, match=rf"^recipe: {recipe}: line 3: must be plain YAML data .*; got the language tag"):
        load_recipe(str(recipe))
    line = inspect_fails(single, capsys, "--recipe", str(recipe))
    assert str(recipe) in line and "language tag" in line


def test_other_yaml_constructor_errors_name_the_file(tmp_path):
    recipe = tmp_path / "odd.yml"
    recipe.write_text("name: odd\nsteps: !!binary not-base64-at-all!\n")
    with pytest.raises(ValueError, match=rf"^recipe: {recipe}: must be plain YAML data; got ConstructorError"):
        load_recipe(str(recipe))


@needs_fifo
def test_recipe_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / "r.yaml")
    with pytest.raises(ValueError, match=r"recipe must be a regular file; got a FIFO"):
        load_recipe(str(tmp_path / "r.yaml"))


# -- the project's own safetensors parser, with and without the package ---------------------------------------

def _write(path: Path, header, data: bytes = b"") -> Path:
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)
    return path


HOSTILE_HEADERS = {
    # name: (header, data, expected message after "{file}: ")
    "overlapping": ({"a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]},
                     "b": {"dtype": "I32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12),
                    "tensors 'a' and 'b' must not overlap; got data [{s}, {s8}) and [{s4}, {s12}) (file offsets) "
                    "sharing 4 bytes"),
    "list_dtype": ({"a": {"dtype": ["I8"], "shape": [1], "data_offsets": [0, 1]}}, bytes(1),
                   "tensor 'a': dtype ['I8'] is not supported here: must be one of"),
    "string_offsets": ({"a": {"dtype": "I8", "shape": [2], "data_offsets": ["0", "2"]}}, bytes(2),
                       "tensor 'a': data_offsets must be two integers [begin, end] with 0 <= begin <= end; "
                       "got ['0', '2']"),
    "bool_offsets": ({"a": {"dtype": "I8", "shape": [1], "data_offsets": [False, True]}}, bytes(1),
                     "data_offsets must be two integers"),
    "reversed_offsets": ({"a": {"dtype": "I8", "shape": [0], "data_offsets": [5, 2]}}, bytes(5),
                         "data_offsets must be two integers [begin, end] with 0 <= begin <= end; got [5, 2]"),
    "negative_offset": ({"a": {"dtype": "I8", "shape": [2], "data_offsets": [-2, 0]}}, bytes(2),
                        "data_offsets must be two integers"),
    "out_of_range": ({"a": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}}, bytes(2),
                     "tensor 'a': data [0, 4] lies beyond the end of the file (2 data bytes): truncated file"),
    "size_mismatch": ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8),
                      "tensor 'a': data_offsets [0, 8] hold 8 bytes; F32 x [3] needs 12"),
    "float_shape": ({"a": {"dtype": "I8", "shape": [1.5], "data_offsets": [0, 1]}}, bytes(1),
                    "tensor 'a': shape must be a list of integers >= 0; got [1.5]"),
    "negative_shape": ({"a": {"dtype": "I8", "shape": [-1, -2], "data_offsets": [0, 2]}}, bytes(2),
                       "shape must be a list of integers >= 0"),
    "entry_not_object": ({"a": [1, 2, 3]}, b"",
                         "tensor 'a': header entry must be an object with dtype, shape and data_offsets"),
    "metadata_list": ({"__metadata__": ["x"], "a": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}},
                      bytes(1), "__metadata__ must be an object of strings; got ['x']"),
}


@pytest.fixture(params=[False, True], ids=["with-safetensors", "safetensors-hidden"])
def hide_safetensors(request, monkeypatch):
    if request.param:
        monkeypatch.setitem(sys.modules, "safetensors", None)   # `import safetensors` -> ModuleNotFoundError
    return request.param


@pytest.mark.parametrize("case", sorted(HOSTILE_HEADERS))
def test_hostile_headers_refused_by_our_parser(tmp_path, hide_safetensors, case):
    header, data, expected = HOSTILE_HEADERS[case]
    path = _write(tmp_path / "w.safetensors", header, data)
    start = 8 + len(json.dumps(header).encode())
    expected = expected.format(s=start, s4=start + 4, s8=start + 8, s12=start + 12)
    with pytest.raises(SafetensorsError) as info:
        read_header(path)
    assert str(info.value).startswith(f"{path}: "), str(info.value)
    assert expected in str(info.value)


@pytest.mark.parametrize("case", ["overlapping", "list_dtype", "string_offsets"])
def test_hostile_weights_through_inspect(single, capsys, hide_safetensors, case):
    header, data, expected = HOSTILE_HEADERS[case]
    _write(single / WEIGHTS, header, data)
    line = inspect_fails(single, capsys)
    assert line.startswith(f"w8a8 inspect: {single / WEIGHTS}: ")
    assert expected.split("{")[0] in line


def test_a_valid_file_still_reads_without_safetensors(single, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    ckpt = Checkpoint.open(single)
    name = next(iter(ckpt.entries))
    assert ckpt.tensor(name).shape == ckpt.entries[name].shape


# -- --verify's sizes ---------------------------------------------------------------------------------------

def _resolved(path):
    from checkpoints import resolve

    return resolve(Checkpoint.open(path))


def test_verify_tokens_beyond_the_budget_is_one_line(single, capsys):
    # 10^8 token rows of the widest module: refused before any module runs (was a MemoryError traceback).
    # The command line refuses it while parsing; the library refuses it too, against the allocation budget.
    line = inspect_fails(single, capsys, "--verify", "--tokens", str(10**8))
    assert line == "w8a8 inspect: error: --tokens: expected an integer in 1..4096, got 100000000"
    from checkpoints.verify import verify

    with pytest.raises(ValueError) as info:
        verify(_resolved(single), tokens=10**8)
    msg = str(info.value)
    assert msg.startswith("verify: argument 'tokens' must be small enough that 100000000 token rows")
    assert "allocation budget of 4294967296 bytes" in msg


def test_verify_layers_matching_nothing_is_an_error(single, capsys):
    # was "0 modules", exit 0: refused by the command line, and by the library
    line = inspect_fails(single, capsys, "--verify", "--layers", "no.such.layer")
    assert "--layers: expected a pattern matching some module" in line and "'no.such.layer'" in line
    from checkpoints.verify import verify

    with pytest.raises(ValueError, match="verify: argument 'layers' must match at least one module .*'no.such.layer'"):
        verify(_resolved(single), layers="no.such.layer")
