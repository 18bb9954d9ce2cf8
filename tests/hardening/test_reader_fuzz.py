"""Seeded mutation fuzzers of the state and dump readers, in-process: each mutates a valid file 1,000
times (truncation, byte flips, type swaps, huge numbers, NaN, deep nesting, duplicate keys, paths) and
asserts the outcome is a clean verdict or the reader's one-line error — never another exception. Peak
resident memory of the whole test stays under :data:`RSS_BOUND_MB` above its start."""

import json
import random
import resource
import shutil
from pathlib import Path

import pytest

from conformance.results import ResultsFile
from conformance.stateio import StateError

MUTATIONS = 1000
RSS_BOUND_MB = 512
SAMPLES = Path(__file__).resolve().parents[1] / "replay" / "samples"
STATS = SAMPLES / "constructed-w8a8-statistics-md5-L1" / "step0" / "rank0"

_VALUES = [5, -1, 2 ** 63, 2 ** 200, 1e308, float("nan"), float("inf"), None, True, "x", "../../etc/passwd",
           "/etc/passwd", [], {}, [1, [2, [3]]], "\u202e", ""]


def _mutate_value(rng: random.Random, value):
    """``value`` with one node replaced (type swaps, huge numbers, NaN, nesting, paths)."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(list(value))
        return {**value, key: _mutate_value(rng, value[key])}
    if isinstance(value, list) and value and rng.random() < 0.7:
        i = rng.randrange(len(value))
        return value[:i] + [_mutate_value(rng, value[i])] + value[i + 1:]
    if rng.random() < 0.1:
        depth = rng.choice([70, 1000])
        return json.loads("[" * depth + "]" * depth) if depth < 900 else "DEEP"
    return rng.choice(_VALUES)


def _mutate_text(rng: random.Random, text: bytes, doc) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return text[:rng.randrange(len(text) + 1)]  # truncation
    if kind == 1:
        b = bytearray(text)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)  # byte flips (non-UTF-8 included)
        return bytes(b)
    if kind == 2:
        return b"[" * 200_000 + b"]" * 200_000  # deep nesting
    if kind == 3 and text.startswith(b"{"):
        return text[:-1] + b', "tasks": 5, "data": 5}'  # duplicate keys
    out = json.dumps(_mutate_value(rng, doc)).encode()
    return out.replace(b'"DEEP"', b"[" * 100_000 + b"]" * 100_000)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.slow
def test_results_jsonl_reader_fuzz(tmp_path, capsys):
    rng = random.Random(26)
    lines = [json.dumps({"schema": 1, "backend": "numpy", "case_id": f"c{i}", "op": "dynamic_quant", "status": "pass",
                         "outputs": {"y": {"max_ulp": 0}}}) for i in range(5)]
    start = _rss_mb()
    f = ResultsFile(tmp_path / "r.jsonl")
    for _ in range(MUTATIONS):
        i = rng.randrange(len(lines))
        bad = _mutate_text(rng, lines[i].encode(), json.loads(lines[i])).replace(b"\n", b" ")
        f.path.write_bytes(b"\n".join(x.encode() for x in lines[:i]) + (b"\n" if i else b"") + bad + b"\n" +
                           b"\n".join(x.encode() for x in lines[i + 1:]) + b"\n")
        f.repair()
        records = f.records()
        assert all(isinstance(r, dict) and isinstance(r["backend"], str) and isinstance(r["case_id"], str)
                   for r in records)
        f.done_keys()
        f.append({"backend": "numpy", "case_id": "new", "status": "pass"})
        assert ResultsFile(f.path).records()[-1]["case_id"] == "new"
    capsys.readouterr()
    assert _rss_mb() - start < RSS_BOUND_MB


def test_plan_json_reader_fuzz(tmp_path):
    from conformance.runner import Task, load_plan, save_plan

    rng = random.Random(27)
    tasks = [Task("numpy", "dynamic_quant", {"lead": [2], "h": 8, "seed": i}) for i in range(3)]
    save_plan(tmp_path / "good.json", tasks, {"profile": "dev", "flags": {"backends": ["numpy"]}})
    text = (tmp_path / "good.json").read_bytes()
    doc = json.loads(text)
    start = _rss_mb()
    clean = 0
    for _ in range(MUTATIONS):
        (tmp_path / "plan.json").write_bytes(_mutate_text(rng, text, doc))
        try:
            got, meta = load_plan(tmp_path / "plan.json", ["numpy"])
        except StateError as exc:
            assert "\n" not in str(exc) and "plan.json" in str(exc)
            continue
        clean += 1
        assert all(isinstance(t.params, dict) and t.backend == "numpy" for t in got) and isinstance(meta, dict)
    assert clean  # some mutations leave a valid plan (a value inside params changed)
    assert _rss_mb() - start < RSS_BOUND_MB


@pytest.mark.parametrize("name", ["dump.json", "stack.json", "construct.json"])
def test_dump_json_reader_fuzz(tmp_path, name):
    from replay.dump import DumpDir, TensorLoader, iter_tensors, load_dump

    rng = random.Random(hash(name) & 0xFFFF)
    folder = tmp_path / "rank0"
    shutil.copytree(STATS, folder)
    text = (STATS / name).read_bytes()
    doc = json.loads(text)
    start = _rss_mb()
    for _ in range(MUTATIONS):
        (folder / name).write_bytes(_mutate_text(rng, text, doc))
        dump = load_dump(DumpDir(folder, 0, 0, "rank0"))
        assert all(isinstance(p, str) and "\n" not in p for p in dump.problems)
        loader = TensorLoader(folder / "dump_tensor_data")
        for entry in dump.entries:
            for rec in entry.tensors() if callable(getattr(entry, "tensors", None)) else iter_tensors(entry.args):
                loader.load(rec)  # an array or a MissingTensor with its reason, never an exception
    assert _rss_mb() - start < RSS_BOUND_MB
