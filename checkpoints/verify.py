"""``w8a8 inspect --verify``: a checkpoint's real weights through a backend, against the golden.

For every selected quantized module the real checkpoint tensors are run on a deterministic random
activation (seeded by the module name and ``seed``) through

* the backend's op (``w8a8_dynamic_linear`` / ``w8a8_static_linear`` for dense Linears, one
  checkpoint Linear at a time — a packed module's shards produce independent output columns;
  ``w8a8_moe`` for routed experts, with deterministic ``topk_ids`` / ``topk_weights``), and
* the golden run with the **backend's declared numerics** — so a backend passes only when it is
  bit-exact, the project's conformance rule. The number of equal elements and the maximum ULP
  distance are reported either way.

SQNR (dB) is measured against a float reference, computed in float64: the float weights of
``reference`` (a directory of safetensors holding ``<module>.weight`` under the checkpoint's
names, e.g. the model the checkpoint was exported from) when they are there, otherwise the
checkpoint's own dequantized weights (``w_q * scale``; static: ``w_q * deq_scale / input_scale``
plus the bias folded into ``quant_bias``), which isolates activation quantization and output
rounding.

Activations: **real** ones when the caller passes ``activations`` — what each module saw in the float
model on real tokens (``w8a8 inspect --verify --reference FLOAT_DIR --prompts FILE``, captured by
:func:`modelrun.capture.capture`; MoE blocks get the float router's choice as well). Otherwise, and for
a module the capture does not hold, **synthetic** ones, said so in every result (``inputs``):
dynamic layers get a standard-normal bf16 ``x``; static layers get values spread over the range the
layer was calibrated for, ``(u - input_offset) * input_scale`` with ``u`` uniform in [-128, 127], so
that the static quantizer is exercised rather than saturated — which flatters it: real activations
have outlier channels and values beyond the calibrated range, synthetic ones have neither, and the
SQNR on them can be far higher than on the model's own activations.

A ``reference`` is checked first (:func:`checkpoints.reference.check_reference`: names, shapes,
float-vs-dequantized distance); a reference that is not the checkpoint's float model is an error
(ValueError with the findings), never a silent fallback to the dequantized weights.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np

import w8a8
from w8a8 import _check
from w8a8 import dtypes as _dt
from w8a8.rounding import to_float
from w8a8.ulp import ulp_distance

from . import safe_files
from .issues import Findings
from .reference import check_reference, deq_precision
from .safetensors_io import MappedFile
from .schemes import Module, Resolution
from .validate import decode_deq_scale


@dataclass
class VerifyResult:
    module: str
    kind: str                 # "linear" | "moe"
    scheme: str | None
    status: str               # "pass" | "fail" | "skip"
    message: str = ""
    shape: str = ""
    elements: int = 0
    equal: int = 0            # elements bitwise equal to the golden
    max_ulp: int | None = None
    sqnr_db: float | None = None
    reference: str | None = None
    inputs: str = "synthetic"     # "real (<tokens> tokens of <float model>)" or "synthetic (...)"
    seconds: float = 0.0
    deq_scale_precision: str = ""  # static: the deq_scale's precision finding, with its effect on these outputs

    def as_dict(self) -> dict:
        """As a dict for JSON: a non-finite SQNR (an exact result) becomes the string "inf"."""
        d = asdict(self)
        if d["sqnr_db"] is not None and not np.isfinite(d["sqnr_db"]):
            d["sqnr_db"] = str(d["sqnr_db"])
        return d


class ReferenceWeights:
    """Float weights by tensor name from the safetensors files of a directory (lazy)."""

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise ValueError(f"--reference: {self.path} is not a directory")
        self.files = [MappedFile(safe_files.contained(self.path, f, "--reference weights file"))
                      for f in sorted(self.path.glob("*.safetensors"))]
        if not self.files:
            raise ValueError(f"--reference: {self.path} holds no .safetensors files")

    def get(self, *names: str, shape: tuple[int, ...]) -> np.ndarray | None:
        for name in names:
            for f in self.files:
                e = f.entries.get(name)
                if e is not None and e.shape == tuple(shape) and _dt.is_float(e.dtype):
                    return np.asarray(f.tensor(name)).astype(np.float64)
        return None


def _rng(name: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def sqnr_db(y: np.ndarray, ref: np.ndarray) -> float:
    """``10 log10(sum ref^2 / sum (y - ref)^2)`` in float64 (inf when exact)."""
    ref = np.asarray(ref, dtype=np.float64)
    err = np.asarray(y).astype(np.float32).astype(np.float64) - ref
    noise = float(np.sum(err * err))
    signal = float(np.sum(ref * ref))
    if noise == 0.0:
        return float("inf")
    return 10.0 * np.log10(signal / noise) if signal > 0 else float("-inf")


def _compare(result: VerifyResult, y_b: np.ndarray, y_g: np.ndarray) -> None:
    result.shape = str(list(y_g.shape))
    result.elements = int(y_g.size)
    if y_b.shape != y_g.shape or y_b.dtype != y_g.dtype:
        result.status = "fail"
        result.message = f"backend returned {_dt.name(y_b.dtype)} {list(y_b.shape)}, golden {_dt.name(y_g.dtype)} " \
                         f"{list(y_g.shape)}"
        return
    ulp = ulp_distance(y_b, y_g)
    result.equal = int(np.count_nonzero(ulp == 0))
    result.max_ulp = int(ulp.max()) if ulp.size else 0
    result.status = "pass" if result.equal == result.elements else "fail"
    if result.status == "fail":
        result.message = f"{result.elements - result.equal} of {result.elements} elements differ from the golden " \
                         f"(max {result.max_ulp} ULP)"


def _arr(res: Resolution, prefix: str, suffix: str) -> np.ndarray | None:
    name = res.linears.get(prefix, {}).get(suffix)
    return None if name is None else np.array(res.tensor(name))


def _real(activations, *names):
    found = getattr(activations, "linear", None) or {}
    for name in names:
        if name in found:
            return found[name]
    return None


def _verify_linear(res: Resolution, prefix: str, t: str, backend, tokens: int, seed: int,
                   reference: ReferenceWeights | None, activations=None) -> VerifyResult:
    native = res.native_prefix(prefix)
    result = VerifyResult(native, "linear", t, "skip")
    t0 = time.perf_counter()
    w = _arr(res, prefix, ".weight")
    n, k = w.shape
    rng = _rng(native, seed)
    bias = _arr(res, prefix, ".bias")
    # Activations in the model dtype (bf16; fp16 models run fp16 — an int64 deq_scale needs fp16 output).
    xdt = _dt.float16 if res.checkpoint.model_dtype == _dt.float16 else _dt.bfloat16
    real = _real(activations, native, prefix)
    if real is not None:
        x = real if real.dtype == xdt else to_float(np.asarray(real, dtype=np.float32), xdt)
        result.inputs = f"real ({x.shape[0]} rows of {activations.source})"
    if t == "W8A8_DYNAMIC":
        if real is None:
            x = to_float(rng.standard_normal((tokens, k)).astype(np.float32), xdt)
            result.inputs = f"synthetic (standard normal, {tokens} rows)"
        ws = _arr(res, prefix, ".weight_scale")
        y_g = w8a8.w8a8_dynamic_linear(x, w, ws, bias=bias, numerics=backend.numerics)
        y_b = backend.bind("w8a8_dynamic_linear", w, ws, bias=bias)(x)   # the serving shape: bound once, called
        w_deq = w.astype(np.float64) * ws.astype(np.float32).astype(np.float64).reshape(n, 1)
        b_ref = None if bias is None else bias.astype(np.float64)
    else:
        s_in = _arr(res, prefix, ".input_scale")
        o_in = _arr(res, prefix, ".input_offset")
        deq = _arr(res, prefix, ".deq_scale")
        qb = _arr(res, prefix, ".quant_bias")
        s, o = float(np.float32(s_in.reshape(-1)[0])), float(np.float32(o_in.reshape(-1)[0]))
        if real is None:
            u = rng.uniform(-128.0, 127.0, (tokens, k))
            x = to_float(((u - o) * s).astype(np.float32), xdt)
            result.inputs = f"synthetic (uniform over the calibrated range, {tokens} rows)"
        kwargs = dict(input_scale=s_in, input_offset=o_in, deq_scale=deq, quant_bias=qb)
        y_g = w8a8.w8a8_static_linear(x, w, numerics=backend.numerics, **kwargs)
        y_b = backend.bind("w8a8_static_linear", w, **kwargs)(x)
        deq32 = decode_deq_scale(res, res.linears[prefix][".deq_scale"], deq, Findings()).astype(np.float64)
        w_deq = w.astype(np.float64) * (deq32 / s).reshape(n, 1)
        b_ref = (qb.astype(np.float64) + o * w.astype(np.float64).sum(axis=1)) * deq32
    _compare(result, np.asarray(y_b), y_g)
    w_ref = reference.get(native + ".weight", prefix + ".weight", shape=(n, k)) if reference else None
    result.reference = "float weights" if w_ref is not None else "dequantized weights"
    y_ref = x.astype(np.float64) @ (w_ref if w_ref is not None else w_deq).T
    if b_ref is not None:
        y_ref = y_ref + b_ref
    result.sqnr_db = sqnr_db(y_b, y_ref)
    if t == "W8A8" and w_ref is not None:
        _deq_precision(result, res, prefix, w_ref, x, w, kwargs, backend, y_ref)
    result.seconds = time.perf_counter() - t0
    return result


def _deq_precision(result: VerifyResult, res: Resolution, prefix: str, w_ref, x, w, kwargs: dict, backend,
                   y_ref) -> None:
    """The deq_scale precision finding of a static Linear, measured on this module's inputs: the SQNR with the
    stored deq_scale (the result's) and with ``input_scale * weight step`` in fp32 (the golden re-run)."""
    p = deq_precision(res, prefix, w_ref)
    if p is None:
        return
    deq = kwargs["deq_scale"]
    ideal = p.ideal.view(np.int32).astype(np.int64) if deq.dtype == np.int64 else p.ideal.astype(deq.dtype)
    try:
        y_ideal = w8a8.w8a8_static_linear(x, w, numerics=backend.numerics, **{**kwargs, "deq_scale": ideal})
        effect = (f"; on these inputs the module's SQNR is {result.sqnr_db:.1f} dB, "
                  f"{sqnr_db(y_ideal, y_ref):.1f} dB with the deq_scale in fp32")
    except ValueError as exc:
        effect = f"; the golden refused the fp32 deq_scale ({exc})"
    result.deq_scale_precision = p.text() + effect


def _silu(v: np.ndarray) -> np.ndarray:
    return v / (1.0 + np.exp(-v))


def _verify_moe(res: Resolution, m: Module, backend, tokens: int, seed: int,
                reference: ReferenceWeights | None, activations=None) -> VerifyResult:
    result = VerifyResult(m.name, "moe", m.scheme, "skip")
    golden = getattr(w8a8, "w8a8_moe", None)
    if golden is None:
        result.message = "the MoE golden w8a8.w8a8_moe is not available in this installation"
        return result
    if not backend.supports("w8a8_moe"):
        result.message = f"backend '{backend.name}' does not implement w8a8_moe"
        return result
    t0 = time.perf_counter()
    info = m.moe
    gate, up, down = info.naming
    experts = info.experts
    ws = {p: [_arr(res, info.expert_prefix(e, p), ".weight") for e in experts] for p in info.naming}
    ss = {p: [_arr(res, info.expert_prefix(e, p), ".weight_scale") for e in experts] for p in info.naming}
    w13 = np.stack([np.concatenate([g, u], axis=0) for g, u in zip(ws[gate], ws[up])])
    s13 = np.stack([np.concatenate([g, u], axis=0) for g, u in zip(ss[gate], ss[up])])
    w2, s2 = np.stack(ws[down]), np.stack(ss[down])
    e, i2, h = w13.shape
    cfg = res.checkpoint.config or {}
    k = max(1, min(int(cfg.get("num_experts_per_tok", 2) or 2), e))
    limit = cfg.get("swiglu_limit")
    limit = float(limit) if isinstance(limit, (int, float)) and limit > 0 else None
    rng = _rng(m.name, seed)
    real = (getattr(activations, "moe", None) or {}).get(m.name) or (getattr(activations, "moe", None) or {}).get(
        m.serving_name)
    if real is not None:
        x, ids, wts = real
        x = x if x.dtype == _dt.bfloat16 else to_float(np.asarray(x, dtype=np.float32), _dt.bfloat16)
        ids, wts = ids.astype(np.int32), wts.astype(np.float32)
        tokens, k = ids.shape
        result.inputs = f"real ({tokens} tokens of {activations.source}, the float router's choice)"
    else:
        x = to_float(rng.standard_normal((tokens, h)).astype(np.float32), _dt.bfloat16)
        ids = np.argsort(rng.random((tokens, e)), axis=1)[:, :k].astype(np.int32)
        wts = rng.uniform(0.1, 1.0, (tokens, k)).astype(np.float32)
        wts = (wts / wts.sum(axis=1, keepdims=True)).astype(np.float32)
        result.inputs = f"synthetic (standard normal, random top-{k} routing, {tokens} tokens)"
    kwargs = dict(topk_ids=ids, topk_weights=wts, swiglu_limit=limit)
    y_g = golden(x, w13, s13, w2, s2, numerics=backend.numerics, **kwargs)
    y_b = np.asarray(backend.bind("w8a8_moe", w13, s13, w2, s2, **kwargs)(x))
    _compare(result, y_b, y_g)
    # float64 reference: sum_j w_j * W2_e (act(W1_e x, W3_e x)), per-expert float or dequantized weights
    used_float = True

    def weight(idx: int, proj: str) -> np.ndarray:
        nonlocal used_float
        q = ws[proj][idx]
        ref = reference.get(res.native_prefix(info.expert_prefix(experts[idx], proj)) + ".weight",
                            shape=q.shape) if reference else None
        if ref is None:
            used_float = False
            return q.astype(np.float64) * ss[proj][idx].astype(np.float32).astype(np.float64).reshape(-1, 1)
        return ref

    xf = x.astype(np.float64)
    y_ref = np.zeros((tokens, h))
    for idx in np.unique(ids):
        rows, slot = np.nonzero(ids == idx)
        g = xf[rows] @ weight(idx, gate).T
        u = xf[rows] @ weight(idx, up).T
        if limit is not None:
            g, u = np.minimum(g, limit), np.clip(u, -limit, limit)
        y_ref[rows] += wts[rows, slot][:, None] * ((_silu(g) * u) @ weight(idx, down).T)
    result.reference = "float weights" if used_float and reference else "dequantized weights"
    result.sqnr_db = sqnr_db(y_b, y_ref)
    result.seconds = time.perf_counter() - t0
    result.message = result.message or f"{e} experts, top-{k}, {tokens} tokens" + (
        f", swiglu_limit {limit:g}" if limit else "")
    return result


def select(res: Resolution, layers: str = "*") -> list[Module]:
    """The modules whose name or layer matches the glob ``layers``."""
    return [m for m in res.modules if fnmatchcase(m.name, layers) or fnmatchcase(m.layer, layers)
            or fnmatchcase(m.serving_name, layers)]


_BYTES_PER_VALUE = 64
"""What one activation value of the widest module costs verify at most: the float64 draw, its fp32 and
bf16 copies, the backend's and the golden's outputs and the float64 reference (an upper estimate)."""


def _tokens_within_budget(res: Resolution, modules: list[Module], tokens: int) -> None:
    """Refuse a ``tokens`` whose activations would exceed the golden's allocation budget, before any
    module runs: ``tokens`` rows of the widest selected weight dimension (times top-k plus the expert
    count for an MoE layer: its rows are expanded per expert and routed from a ``[T, E]`` draw),
    :data:`_BYTES_PER_VALUE` bytes each."""
    entries = res.checkpoint.entries
    cfg = res.checkpoint.config or {}
    top_k = cfg.get("num_experts_per_tok", 2)
    top_k = top_k if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0 else 2
    width = 1
    for m in modules:
        if m.kind == "moe" and m.moe is not None and m.moe.experts:
            prefixes = [m.moe.expert_prefix(m.moe.experts[0], p) for p in m.moe.naming]
            factor = top_k + len(m.moe.experts)
        else:
            prefixes, factor = list(m.shards), 1
        for prefix in prefixes:
            entry = entries.get(prefix + ".weight")
            if entry is not None and entry.shape:
                width = max(width, max(entry.shape) * factor)
    _check.within_budget("verify", "tokens", (tokens, width), _BYTES_PER_VALUE,
                         f"{tokens} token rows of the widest selected module ({width} values a row)")


def verify(res: Resolution, *, backend: str = "numpy", layers: str = "*", tokens: int = 16, seed: int = 0,
           reference=None, error_modules: set[str] | None = None, activations=None) -> list[VerifyResult]:
    """Run the selected quantized modules of ``res`` through ``backend`` against the golden.

    ``activations``: real inputs (module docstring; an object with ``linear`` {name: x}, ``moe``
    {name: (x, ids, weights)} and ``source``), else synthetic ones.
    Raises ValueError for an unknown or unavailable backend (with its reason), bad arguments, a
    ``layers`` glob that matches no module, a ``tokens`` whose activations exceed the golden's
    allocation budget (:func:`_tokens_within_budget`, before any work), or a ``reference`` that is not
    this checkpoint's float model (with the findings).
    Modules listed in ``error_modules`` (those with checkpoint errors) are skipped.
    """
    import backends as _backends

    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise ValueError(f"verify: argument 'tokens' must be a positive int; got {tokens!r}")
    try:
        be = _backends.get(backend)
    except KeyError as exc:
        raise ValueError(f"verify: {exc.args[0]}") from None
    ok, why = be.available()
    if not ok:
        raise ValueError(f"verify: backend {backend!r} is not available here: {why}")
    modules = select(res, layers)
    if not modules:
        names = ", ".join(m.name for m in res.modules[:3]) + (", ..." if len(res.modules) > 3 else "")
        raise ValueError(f"verify: argument 'layers' must match at least one module (by name, layer or serving "
                         f"name); got {layers!r}, which matches none of the {len(res.modules)} modules ({names})")
    _tokens_within_budget(res, modules, tokens)
    ref = ReferenceWeights(reference) if reference is not None else None
    if ref is not None:
        arrays = {name: f.tensor(name) for f in ref.files for name in f.entries}
        cfg = None
        if (ref.path / "config.json").is_file():
            try:
                cfg = safe_files.load_json(ref.path / "config.json", "config.json")
            except ValueError:  # unreadable, not JSON or nested too deep: no config to check against
                cfg = None
        found, _ = check_reference(res, arrays, cfg if isinstance(cfg, dict) else None)
        if found.errors:
            raise ValueError(f"verify: --reference {ref.path} is not this checkpoint's float model:\n  "
                             + "\n  ".join(str(f) for f in found.errors))
    out: list[VerifyResult] = []
    for m in modules:
        if error_modules and m.name in error_modules:
            out.append(VerifyResult(m.name, "moe" if m.kind == "moe" else "linear", m.scheme, "skip",
                                    "the checkpoint has errors for this module"))
            continue
        if m.kind == "moe":
            if m.scheme == "W8A8_DYNAMIC":
                out.append(_verify_moe(res, m, be, tokens, seed, ref, activations))
            continue
        if m.kind not in ("linear", "packed"):
            continue
        for prefix in m.shards:
            t = res.types.get(prefix + ".weight")
            if t in ("W8A8_DYNAMIC", "W8A8"):
                op = "w8a8_dynamic_linear" if t == "W8A8_DYNAMIC" else "w8a8_static_linear"
                if not be.supports(op):
                    out.append(VerifyResult(res.native_prefix(prefix), "linear", t, "skip",
                                            f"backend '{be.name}' does not implement {op}"))
                    continue
                out.append(_verify_linear(res, prefix, t, be, tokens, seed, ref, activations))
            elif t == "W8A8_MIX":
                out.append(VerifyResult(res.native_prefix(prefix), "linear", t, "skip",
                                        "W8A8_MIX (PD-mix) is not verified"))
    return out
