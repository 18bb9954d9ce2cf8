"""The evidence of a mismatch: the values at the first differing elements, for a person to read.

``w8a8 conformance --case`` reruns one case; for every output judged ``fail`` or ``tolerated``,
:func:`mismatch_evidence` lists the first differing elements (where the output is specified), each with
its index, the golden's and the backend's value, the golden's pre-rounding value where the op defines
one, and the inputs at that element: an input of the output's shape at the element, an input sharing
the output's rows as that row (its first values and its largest magnitude), a per-column or per-row
vector at the column or row. :func:`render` turns the list into text.
"""

from __future__ import annotations

import inspect

import numpy as np

ROW_VALUES = 8  # values of an input row shown (the row's largest magnitude is shown too)
_RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _number(value):
    """A JSON-friendly Python number for one element (bf16 and other extension floats through fp32)."""
    a = np.asarray(value)
    if a.dtype.kind in "iub":
        return int(a)
    f = float(a.astype(np.float32) if a.dtype.kind == "V" or a.dtype.kind not in "fc" else a)
    return f if np.isfinite(f) else str(f)


def _floats(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).astype(np.float64) if a.dtype.kind not in "iub" else a.astype(np.float64)


def _named_inputs(op: str, args: tuple, kwargs: dict) -> dict[str, np.ndarray]:
    """The array arguments of a call by parameter name (the golden op's signature)."""
    from w8a8 import registry

    try:
        bound = inspect.signature(registry.get(op).fn).bind_partial(*args, **kwargs).arguments
    except (TypeError, KeyError):
        bound = {f"arg{i}": a for i, a in enumerate(args)} | dict(kwargs)
    return {k: v for k, v in bound.items() if isinstance(v, np.ndarray) and v.ndim > 0}


def _input_at(arr: np.ndarray, out_shape: tuple, index: tuple):
    """What ``arr`` holds at output element ``index`` (None when its shape does not line up)."""
    row = index[:-1]
    if arr.shape == out_shape:  # the element, and its row (whose largest magnitude sets a row's scale)
        return {"value": _number(arr[index]), **(_row(arr[row], row) if row else {})}
    if row and arr.shape[:-1] == out_shape[:-1]:    # the same rows: x [M, K] for y [M, N]
        return _row(arr[row], row)
    if arr.ndim >= 2 and arr.shape[:-1] == out_shape:  # a row per element: x [M, H] for scale [M]
        return _row(arr[index], index)
    if arr.ndim == 1 and out_shape and arr.shape[0] == out_shape[-1]:  # per column: scale [N]
        return {"value": _number(arr[index[-1]]), "where": [index[-1]]}
    if row and arr.shape == out_shape[:-1]:          # per row: pertoken_scale [M]
        return {"value": _number(arr[row]), "where": list(row)}
    return None


def _row(vec: np.ndarray, where: tuple) -> dict:
    vals = _floats(vec).ravel()
    finite = vals[np.isfinite(vals)]
    return {"row": [_number(v) for v in vec.ravel()[:ROW_VALUES]], "length": int(vals.size),
            "amax": float(np.abs(finite).max()) if finite.size else None, "where": list(where)}


def _differing(ref: np.ndarray, got: np.ndarray, mask) -> np.ndarray:
    raw = _RAW.get(ref.dtype.itemsize)
    if raw is None or ref.dtype != got.dtype:
        differs = ~((ref == got) | (np.isnan(_floats(ref)) & np.isnan(_floats(got))))
    else:
        differs = np.ascontiguousarray(ref).view(raw) != np.ascontiguousarray(got).view(raw)
    if mask is not None:
        differs &= np.broadcast_to(np.asarray(mask, dtype=bool), differs.shape)
    return differs


def mismatch_evidence(spec, params: dict, backend, record: dict, *, limit: int = 5) -> list[dict]:
    """The first ``limit`` differing elements of every output ``record`` judged fail or tolerated (the
    case is run again on the golden under the backend's numerics and on ``backend``)."""
    from backends.numpy_backend import NumpyBackend

    from .evaluate import REFUSALS, _run, _unpacked, resolve_case

    failing = [n for n, c in (record.get("outputs") or {}).items() if c.get("verdict") in ("fail", "tolerated")]
    if not failing:
        return []
    args, kwargs = resolve_case(spec, params, kind=record.get("kind") or "drawn", name=record.get("name")).build()
    ref = _run(spec, NumpyBackend(backend.numerics), args, kwargs, catch=REFUSALS, numerics=backend.numerics)
    got = _run(spec, backend, args, kwargs, catch=Exception)
    if ref.refused or got.refused:
        return []
    pre = spec.pre_round(args, kwargs, backend.numerics) if spec.pre_round else {}
    masks = spec.mask(args, kwargs) if spec.mask else {}
    inputs = _named_inputs(spec.name, args, kwargs)
    evidence = []
    for name in failing:
        p = pre.get(name)
        r, g = _unpacked(ref.outputs[name], p), _unpacked(got.outputs[name], p)
        if r.shape != g.shape:
            evidence.append({"output": name, "note": f"shapes differ: golden {r.shape}, backend {g.shape}"})
            continue
        with np.errstate(all="ignore"):
            differs = _differing(r, g, masks.get(name))
        for idx in np.argwhere(differs)[:limit]:
            index = tuple(int(i) for i in idx)
            at = {k: v for k, v in ((k, _input_at(a, r.shape, index)) for k, a in inputs.items()) if v is not None}
            evidence.append({"output": name, "index": list(index), "golden": _number(r[index]),
                             "backend": _number(g[index]),
                             "pre_round": _number(p[index]) if p is not None and p.shape == r.shape else None,
                             "inputs": at, "differing": int(differs.sum()), "size": int(differs.size)})
    return evidence


def _input_text(name: str, item: dict) -> str:
    parts = []
    if "value" in item:
        where = f"[{','.join(map(str, item['where']))}]" if item.get("where") and "row" not in item else \
            " at the element"
        parts.append(f"{name}{where} = {_fmt(item['value'])}")
    if "row" in item:
        where = ",".join(map(str, item["where"]))
        more = ", …" if item["length"] > len(item["row"]) else ""
        amax = f"; max |.| {item['amax']:.6g}" if item.get("amax") is not None else ""
        values = ", ".join(_fmt(v) for v in item["row"])
        parts.append(f"{name}[{where}] = [{values}{more}] ({item['length']} values{amax})")
    return "; row ".join(parts)


def _fmt(v) -> str:
    return f"{v:.9g}" if isinstance(v, float) else str(v)


def render(evidence: list[dict]) -> str:
    """The evidence as indented text lines (empty when there is none)."""
    lines = []
    for e in evidence:
        if "index" not in e:
            lines.append(f"  {e['output']}: {e['note']}")
            continue
        idx = ", ".join(map(str, e["index"]))
        pre = f", pre-rounding {_fmt(e['pre_round'])}" if e.get("pre_round") is not None else ""
        lines.append(f"  {e['output']}[{idx}]: golden {_fmt(e['golden'])}, backend {_fmt(e['backend'])}{pre}"
                     f"   ({e['differing']} of {e['size']} elements differ)")
        lines += [f"      {_input_text(k, v)}" for k, v in e["inputs"].items()]
    return "\n".join(lines)
