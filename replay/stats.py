"""Judging from statistics: what a ``statistics`` / ``md5`` dump allows.

* **CRC**: ``crc32(golden bytes) == md5`` is an exact bitwise verdict with no tensor file.
* **Max / Min** of a golden output are compared exactly: they do not depend on reduction order.
* **Mean / Norm** (floating outputs only) within ``2 ulp_dtype(|v|) + n * 2^-23 * max(|Max|, |Min|)``:
  the device's reduction order is unknown and it rounds them to the tensor dtype.
* **Without inputs** (nothing to run), exact invariants from the dump's own statistics: for
  ``dynamic_quant`` without smooth scales the scale's Max is the golden's scale of
  ``amax = max(|x.Max|, |x.Min|)``, ``|y| <= 127`` and ``y`` reaches ``+-127`` unless every row is zero;
  for the matmuls a crude magnitude bound from the input statistics; every op: output dtypes.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from . import golden
from .dump import TensorRecord
from .msprobe_compare import as_f64


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or (dtype.kind == "V" and dtype.itemsize <= 2 and dtype.name in ("bfloat16",))


def ulp(dtype: np.dtype, value: float) -> float:
    """The spacing of ``dtype`` at ``|value|`` (its smallest subnormal at 0)."""
    info = ml_dtypes.finfo(dtype) if dtype.kind == "V" else np.finfo(dtype)
    v = abs(float(value))
    tiny = float(info.smallest_subnormal)
    if v == 0 or not math.isfinite(v):
        return tiny
    return max(float(info.eps) * 2.0 ** math.floor(math.log2(v)), tiny)


def stats_of(array: np.ndarray) -> dict:
    """Max / Min / Mean / Norm as msprobe computes them (Mean/Norm only for float dtypes below fp64),
    here in float64 (the device's own Mean/Norm are rounded to its dtype)."""
    a = np.asarray(array)
    if a.size == 0:
        return {"Max": None, "Min": None, "Mean": None, "Norm": None}
    if a.dtype == np.bool_:
        return {"Max": bool(a.any()), "Min": bool(a.all()), "Mean": None, "Norm": None}
    f = as_f64(a) if a.dtype.kind in "fV" else a
    out = {"Max": f.max().item(), "Min": f.min().item(), "Mean": None, "Norm": None}
    if a.dtype.kind in "fV" and a.dtype != np.float64:
        with np.errstate(over="ignore", invalid="ignore"):
            out["Mean"] = float(f.mean())
            out["Norm"] = float(np.sqrt(np.sum(f * f)))
    return out


def compare_stats(rec: TensorRecord, array: np.ndarray) -> dict:
    """Every statistic of ``rec`` against those of ``array`` (the golden's): ``{"ok", "checks": [...]}``."""
    got = stats_of(array)
    checks = []
    for key in ("Max", "Min"):
        dev = getattr(rec, key.lower())
        if dev is None or got[key] is None:
            continue
        same = _equal(dev, got[key])
        checks.append({"stat": key, "device": dev, "golden": got[key], "ok": same, "rule": "exact"})
    if rec.dtype is not None and is_float(rec.dtype):
        big = max(abs(float(got["Max"] or 0.0)), abs(float(got["Min"] or 0.0)))
        n = int(np.asarray(array).size)
        for key in ("Mean", "Norm"):
            dev = getattr(rec, key.lower())
            if dev is None or got[key] is None:
                continue
            bound = 2 * ulp(rec.dtype, float(dev)) + n * 2.0 ** -23 * big
            delta = abs(float(dev) - float(got[key])) if math.isfinite(float(dev)) else math.inf
            ok = delta <= bound or (math.isnan(float(dev)) and math.isnan(float(got[key])))
            checks.append({"stat": key, "device": dev, "golden": got[key], "ok": bool(ok),
                           "rule": f"|delta| {delta:.3g} <= {bound:.3g}"})
    return {"ok": all(c["ok"] for c in checks), "checks": checks}


def _equal(a, b) -> bool:
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return a == b
    return fa == fb or (math.isnan(fa) and math.isnan(fb))


PROBE_BYTES = 4 << 20
"""The largest zero probe the statistics check builds (a statistics dump may claim any shape)."""


def _num(v) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _absmax(rec) -> float | None:
    if not isinstance(rec, TensorRecord):
        return None
    mx, mn = _num(rec.max), _num(rec.min)
    if mx is None or mn is None:
        return None
    return max(abs(mx), abs(mn))


def invariants(call, *, platform: str, numerics=None) -> dict:
    """Exact invariants of a call whose inputs are not available (module docstring).

    Returns ``{"ok": bool, "checks": [{"check", "ok", "detail"}...]}``; an empty ``checks`` means
    nothing could be checked.
    """
    checks = []
    op, outs, kw = call.op, call.outputs, call.kwargs
    from . import engine

    expected = engine.outputs_of(op)
    if len(outs) != len(expected):
        checks.append({"check": "output count", "ok": False,
                       "detail": f"{len(outs)} outputs dumped; {op} returns {len(expected)}"})
    if op == "dynamic_quant" and kw.get("smooth_scales") is None and kw.get("group_index") is None:
        x = call.args[0]
        y, s = (outs + [None, None])[:2]
        amax = _absmax(x)
        ymax, ymin = (_num(y.max), _num(y.min)) if isinstance(y, TensorRecord) else (None, None)
        if isinstance(y, TensorRecord) and y.max is not None and kw.get("dst_type") == "int8" and not (
                ymax is not None and ymin is not None and math.isfinite(ymax) and math.isfinite(ymin)):
            checks.append({"check": "int8 y statistics are integers", "ok": False,
                           "detail": f"y Max {y.max!r}, Min {y.min!r}: impossible for an int8 output"})
        elif isinstance(y, TensorRecord) and y.max is not None and kw.get("dst_type") == "int8":
            ok = int(ymax) <= 127 and int(ymin) >= -127
            checks.append({"check": "|y| <= 127", "ok": ok, "detail": f"y in [{y.min}, {y.max}]"})
            if amax is not None:
                zero = amax == 0
                hit = int(ymax) == 127 or int(ymin) == -127
                checks.append({"check": "y reaches +-127 unless every row is zero", "ok": hit or zero,
                               "detail": f"y in [{y.min}, {y.max}], input amax {amax}"})
        if isinstance(s, TensorRecord) and isinstance(x, TensorRecord) and amax is not None and s.max is not None \
                and x.dtype is not None and len(x.shape) >= 1 and x.numel:
            rows = max(1, x.numel // max(1, x.shape[-1]))
            if rows * x.shape[-1] * x.dtype.itemsize > PROBE_BYTES:  # the rows other than the first are zeros:
                rows = max(1, PROBE_BYTES // max(1, x.shape[-1] * x.dtype.itemsize))  # fewer give the same max
            probe = np.zeros((rows, x.shape[-1]), dtype=x.dtype)
            probe[:, 0] = np.asarray(amax, dtype=np.float32).astype(x.dtype)
            try:
                _, gs = golden.run("dynamic_quant", [probe], {"dst_type": kw.get("dst_type", "int8")},
                                   platform=platform, numerics=numerics)
                want = float(np.asarray(gs).max())
                checks.append({"check": "scale Max = golden scale of amax = max(|x.Max|, |x.Min|)",
                               "ok": _equal(s.max, want), "detail": f"device {s.max!r}, golden {want!r} "
                                                                   f"(amax {amax!r})"})
            except (ValueError, TypeError) as exc:
                checks.append({"check": "scale from amax", "ok": True, "detail": f"not checkable: {exc}"})
    if op in ("quant_matmul", "grouped_matmul"):
        bound = _matmul_bound(call)
        y = outs[0] if outs else None
        if bound is not None and isinstance(y, TensorRecord) and _absmax(y) is not None:
            ok = _absmax(y) <= bound * (1 + 2 ** -7) + 1e-30
            checks.append({"check": "|y| <= K max|x1| max|x2| max|scale| max|pertoken| + max|bias|", "ok": ok,
                           "detail": f"max|y| {_absmax(y)!r}, bound {bound:.6g}"})
    for (name, _kind), rec in zip(expected, outs):
        if isinstance(rec, TensorRecord) and rec.stats_null is False and rec.dtype is None:
            checks.append({"check": f"{name} dtype", "ok": False, "detail": f"unknown dtype {rec.torch_dtype}"})
    return {"ok": all(c["ok"] for c in checks), "checks": checks}


def _matmul_bound(call) -> float | None:
    if call.op == "quant_matmul":
        x1, x2, scale = call.args
        per, bias = call.kwargs.get("pertoken_scale"), call.kwargs.get("bias")
    else:
        x1, x2 = call.args[0][0], call.args[1][0]
        scale, per, bias = call.kwargs.get("scale"), call.kwargs.get("per_token_scale"), call.kwargs.get("bias")
    if not isinstance(x1, TensorRecord) or not isinstance(scale, TensorRecord) or not x1.shape:
        return None
    if call.kwargs.get("output_dtype") in ("int8", "int32"):
        return None
    if scale.torch_dtype == "torch.int64":
        return None   # packed FP19 scale: its statistics are the packed integers
    k = x1.shape[-1]
    w = _absmax(x2) if isinstance(x2, TensorRecord) else None
    if w is None and isinstance(x2, TensorRecord) and x2.torch_dtype == "torch.int8":
        w = 128.0   # an NZ weight (statistics null): int8 codes are at most 128 in magnitude
    parts = [_absmax(x1), w, _absmax(scale)]
    if per is not None:
        parts.append(_absmax(per))
    if any(p is None for p in parts):
        return None
    b = _absmax(bias) if isinstance(bias, TensorRecord) else 0.0
    return k * math.prod(parts) + (b or 0.0)
