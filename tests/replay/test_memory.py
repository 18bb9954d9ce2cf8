"""Streaming: replaying a large dump holds one call's tensors at a time.

A synthetic msprobe-layout dump of N ``npu_dynamic_quant`` calls (tensor files written by
``torch.save``, the writer msprobe uses; outputs computed by the golden, so every call agrees) is
replayed through ``w8a8 replay`` (rich progress bar and all) in a fresh process, and its peak RSS
(``ru_maxrss``) is compared with that of the same replay of a single call of the same shapes: if
the replay kept tensors across calls, the difference would grow with N (about 24 MB per call here).
The slow variant is a 1 GB directory; the fast one is the same check at 1/16 of the size.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

import w8a8
from w8a8 import dtypes as _dt


def _record(dtype, shape, data_name, **stats):
    return {"type": "torch.Tensor", "dtype": f"torch.{dtype}", "shape": list(shape), "Max": stats.get("mx"),
            "Min": stats.get("mn"), "Mean": None, "Norm": None, "requires_grad": False, "data_name": data_name}


def make_dump(root, calls: int, rows: int, h: int) -> int:
    """Write the dump; return the bytes of tensor data written."""
    torch = pytest.importorskip("torch")
    d = root / "step0" / "rank0" / "dump_tensor_data"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, h), dtype=np.float32) * 3).astype(_dt.bfloat16)
    y, s = w8a8.dynamic_quant(x)
    first = "NPU.npu_dynamic_quant.0.forward"
    torch.save(torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16), d / f"{first}.input.0.pt")
    torch.save(torch.from_numpy(y), d / f"{first}.output.0.pt")
    torch.save(torch.from_numpy(s), d / f"{first}.output.1.pt")
    data = {}
    total = 0
    xf = x.astype(np.float32)
    for i in range(calls):
        name = f"NPU.npu_dynamic_quant.{i}.forward"
        for part in ("input.0", "output.0", "output.1"):
            if i:
                shutil.copyfile(d / f"{first}.{part}.pt", d / f"{name}.{part}.pt")
            total += (d / f"{name}.{part}.pt").stat().st_size
        data[name] = {"input_args": [_record("bfloat16", x.shape, f"{name}.input.0.pt", mx=float(xf.max()),
                                             mn=float(xf.min()))],
                      "input_kwargs": {},
                      "output": [_record("int8", y.shape, f"{name}.output.0.pt", mx=int(y.max()), mn=int(y.min())),
                                 _record("float32", s.shape, f"{name}.output.1.pt", mx=float(s.max()),
                                         mn=float(s.min()))]}
    (root / "step0" / "rank0" / "dump.json").write_text(json.dumps(
        {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}, indent=1))
    return total


def peak_rss_mb(dump, out) -> tuple[float, dict]:
    code = ("import json, resource, sys; from w8a8cli.main import main; "
            f"rc = main(['replay', {str(dump)!r}, '--out', {str(out)!r}, '--no-attribution']); "
            "print(json.dumps({'rc': rc, 'rss_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(run.stdout.strip().splitlines()[-1])
    return result["rss_kb"] / 1024, {"rc": result["rc"], "stderr": run.stderr}


def _check(tmp_path, calls, rows, h, slack_mb):
    one, many = tmp_path / "one", tmp_path / "many"
    make_dump(one, 1, rows, h)
    total = make_dump(many, calls, rows, h)
    base, r1 = peak_rss_mb(one, tmp_path / "o1")
    peak, r2 = peak_rss_mb(many, tmp_path / "o2")
    assert r1["rc"] == 0 and r2["rc"] == 0, r2["stderr"][-2000:]
    assert f"{calls}/{calls}" in r2["stderr"]              # the progress bar ran to the end
    records = [json.loads(x) for x in (tmp_path / "o2" / "results.jsonl").read_text().splitlines()]
    assert len(records) == calls and {r["verdict"] for r in records} == {"agree-bitwise"}
    print(f"\n{calls} calls, {total / 2**20:.0f} MiB of tensor files: peak RSS {peak:.0f} MiB; "
          f"one call of the same shapes: {base:.0f} MiB")
    assert peak - base < slack_mb, (peak, base, total)
    return peak, base, total


def test_memory_does_not_grow_with_the_dump(tmp_path):
    # 20 calls of x bf16 [512, 1024] (1 MiB) + y int8 + scale: 30 MiB of files
    _check(tmp_path, 20, 512, 1024, slack_mb=12)


@pytest.mark.slow
def test_one_gigabyte_dump_streams(tmp_path):
    # 42 calls of x bf16 [2048, 4096] (16 MiB) + y int8 (8 MiB) + scale: 1.0 GiB of files
    peak, base, total = _check(tmp_path, 42, 2048, 4096, slack_mb=100)
    assert total > 1.0e9
