"""A single-op case exported from a dump: one ``.npz``, no pickle.

The archive holds ``meta`` (UTF-8 JSON as a uint8 array: the golden op, the source entry and dump,
the platform and numerics, the argument tree) and one uint8 array per tensor (its raw little-endian
bits; the dtype name and shape are in ``meta``), so bf16 and fp8 survive without NumPy's object
dtypes. It loads with ``np.load(allow_pickle=False)``.

``w8a8 replay CASE.npz`` replays it (needs no dump); :func:`python_snippet` prints the equivalent
Python lines.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from w8a8 import dtypes as _dt

FORMAT = "w8a8-replay-case/1"


@dataclass
class Case:
    op: str
    args: list
    kwargs: dict
    device_outputs: dict           # output name -> array (or None)
    meta: dict

    @property
    def entry(self) -> str:
        return self.meta.get("entry", "")


def _encode(value, arrays: dict):
    if isinstance(value, np.ndarray):
        key = f"t{len(arrays)}"
        a = np.ascontiguousarray(value)
        arrays[key] = a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)
        return {"$array": key, "dtype": _dt.name(a.dtype), "shape": list(a.shape)}
    if isinstance(value, (list, tuple)):
        return {"$list": [_encode(v, arrays) for v in value]}
    if isinstance(value, dict):
        return {"$dict": {k: _encode(v, arrays) for k, v in value.items()}}
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"case export: cannot store a {type(value).__name__}")


def _decode(value, z):
    if isinstance(value, dict):
        if "$array" in value:
            dt = _dt.resolve(value["dtype"])
            raw = z[value["$array"]]
            if raw.dtype != np.uint8:
                raise ValueError(f"case: tensor {value['$array']} is not stored as raw bytes")
            return raw.view(dt).reshape(value["shape"]).copy()
        if "$list" in value:
            return [_decode(v, z) for v in value["$list"]]
        if "$dict" in value:
            return {k: _decode(v, z) for k, v in value["$dict"].items()}
        raise ValueError(f"case: unknown node {sorted(value)}")
    return value


def save_case(path, *, op: str, args, kwargs, device_outputs: dict, meta: dict) -> Path:
    """Write a case file atomically; return its path."""
    from .engine import write_atomic

    arrays: dict = {}
    tree = {"format": FORMAT, "op": op, **meta, "args": _encode(list(args), arrays),
            "kwargs": _encode(dict(kwargs), arrays), "device_outputs": _encode(dict(device_outputs), arrays)}
    arrays["meta"] = np.frombuffer(json.dumps(tree, default=str).encode("utf-8"), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    path = Path(path)
    write_atomic(path, buf.getvalue())
    return path


def load_case(path) -> Case:
    """Read a case file (no pickle). Raises ValueError for a file that is not one."""
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable .npz case ({exc})") from None
    with z:
        if "meta" not in z.files:
            raise ValueError(f"{path}: no 'meta' member: not a w8a8 replay case")
        meta = json.loads(z["meta"].tobytes().decode("utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
        args = _decode(meta.pop("args"), z)
        kwargs = _decode(meta.pop("kwargs"), z)
        outs = _decode(meta.pop("device_outputs"), z)
    return Case(meta["op"], args, kwargs, outs, meta)


def python_snippet(path, op: str, numerics: dict | None = None) -> str:
    """Python lines that rerun the case's golden call and compare with the device's outputs."""
    extra = f", numerics=w8a8.Numerics.from_dict({numerics!r})" if numerics else ""
    return (f"from replay.case import load_case; import w8a8, numpy as np\n"
            f"case = load_case({str(path)!r})\n"
            f"golden = w8a8.{op}(*case.args, **case.kwargs{extra})\n"
            f"golden = golden if isinstance(golden, tuple) else (golden,)\n"
            f"for (name, dev), ref in zip(case.device_outputs.items(), golden):\n"
            f"    print(name, 'bitwise equal' if dev.tobytes() == np.asarray(ref).tobytes() else 'DIFFERS')")
