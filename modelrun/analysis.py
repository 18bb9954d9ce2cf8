"""``w8a8 run``: what the serving path computes for a quantized model, against its float model.

:func:`run` takes a checkpoint, the float model it was exported from (``reference``) and token
sequences, and measures (everything on the real activations of the run, float64 references):

* **logits**: relative L2 distance ``||l_q - l_f|| / ||l_f||`` over every position, top-1
  agreement (positions whose argmax agrees), top-k agreement (mean ``|topk_q ∩ topk_f| / k``) of the
  quantized model (every quantized module on the backend's serving path, :mod:`.serving`) against
  the float model (the reference, in its own dtype, through :mod:`.forward`);
* **per quantized module**, on the inputs it saw in the quantized run: SQNR and max error of its
  output against the float module (reference weights) on the same input, the analytic error bound
  (:mod:`.bounds`) and the elements beyond it, saturated static activations, activation outlier
  channels (input channels whose max ``|x|`` exceeds :data:`OUTLIER_RATIO` times the median channel's);
  MoE blocks against the float routed experts (the reference's router, bias included) on the same
  input — no analytic bound there (routing is discontinuous);
* **one layer quantized at a time**: the logits distance with only that layer's quantized modules
  on the serving path (the other quantized modules use the reference's float weights), after a
  baseline row with none quantized: the checkpoint's own float tensors against the reference's (a
  router without its correction bias shows there);
* **MoE routing agreement**: tokens whose expert *set* differs between the float run and the
  quantized run, attributed in this order: the correction bias (the checkpoint's router bias —
  zeros when missing, as msModelSlim's saver drops transformers' ``e_score_correction_bias`` buffer —
  against the reference's, on the same input), the router op (``npu_moe_gating_top_k`` against
  transformers' router on the same input: ``-inf`` vs ``masked_fill(0)`` outside the kept groups,
  summation order), else the router's input (drift from upstream quantization error);
* **the first module whose error exceeds its bound**, in execution order;
* **each backend against the golden**: every quantized call re-run on each backend with the same
  input and compared bit for bit with the golden under the backend's declared numerics.

Inputs are bounded: at most ``max_tokens`` tokens in all (ValueError naming the limit), each
sequence at most the model's ``max_position_embeddings``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

import numpy as np
import torch

from backends.torch_common import from_torch
from checkpoints import CheckpointError, analyze
from checkpoints.reference import check_reference

from . import config as _config
from . import config_shapes
from .bounds import dense_bound
from .forward import TORCH_DTYPES, FloatExecutor, Model
from .serving import ServingExecutor, layer_index
from .weights import FloatModel, checkpoint_float_tensors

OUTLIER_RATIO = 6.0
MAX_TOKENS = 512


def _sqnr(y: np.ndarray, ref: np.ndarray) -> float:
    noise = float(np.sum((y - ref) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return float("inf")
    return 10.0 * float(np.log10(signal / noise)) if signal > 0 else float("-inf")


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float32).astype(np.float64)


def logits_agreement(lq: np.ndarray, lf: np.ndarray, top_k: int) -> dict:
    """rel-L2, top-1 and top-k agreement of logits ``[P, V]`` against ``lf``."""
    lq, lf = _f64(lq), _f64(lf)
    norm = float(np.linalg.norm(lf))
    rel = float(np.linalg.norm(lq - lf) / norm) if norm else float("inf")
    top1 = float(np.mean(lq.argmax(-1) == lf.argmax(-1)))
    k = min(top_k, lf.shape[-1])
    tq, tf = np.argsort(-lq, axis=-1)[:, :k], np.argsort(-lf, axis=-1)[:, :k]
    overlap = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(tq, tf)]))
    return {"rel_l2": rel, "top1": top1, "topk": overlap, "k": k, "positions": int(lf.shape[0])}


def outlier_channels(x: np.ndarray) -> dict:
    amax = np.abs(_f64(x)).max(axis=0)
    med = float(np.median(amax)) if amax.size else 0.0
    ratio = amax / med if med > 0 else np.zeros_like(amax)
    idx = np.argsort(-ratio)
    out = [int(i) for i in idx if ratio[i] > OUTLIER_RATIO][:8]
    return {"channels": out, "ratios": [round(float(ratio[i]), 1) for i in out],
            "max_ratio": float(ratio.max()) if ratio.size else 0.0, "median_absmax": med}


@dataclass
class ModuleResult:
    name: str
    kind: str
    scheme: str
    layer: int | None
    order: int
    tokens: int
    sqnr_db: float
    max_error: float
    max_ref: float
    bound_max: float | None = None
    exceed: int = 0
    worst_ratio: float | None = None     # max(|err| / bound)
    saturated: int = 0
    saturated_channels: tuple = ()
    outliers: dict = field(default_factory=dict)
    backends: dict = field(default_factory=dict)   # name -> {bitwise, equal, elements, max_ulp, error}
    routing: dict | None = None

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        for k in ("sqnr_db", "worst_ratio"):
            if d[k] is not None and not np.isfinite(d[k]):
                d[k] = str(d[k])
        d["saturated_channels"] = list(self.saturated_channels)
        return d


QWEN2_CLASSES = ("Qwen2Tokenizer", "Qwen2TokenizerFast")
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                 r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
"""Qwen2's pre-tokenization pattern (transformers ``tokenization_qwen2.PRETOKENIZE_REGEX``)."""


def _json_dict(f) -> dict:
    """A small JSON object file, or {} (absent, too large, unreadable, not an object)."""
    import json

    try:
        if not f.is_file() or f.stat().st_size > 1 << 24:
            return {}
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def load_tokenizer(d):
    """The tokenizer of a model folder with the ``tokenizers`` library, or None: its ``tokenizer.json``, else the
    slow byte-level BPE files ``vocab.json`` + ``merges.txt`` (GPT-2 / Qwen2 slow tokenizers), built as a
    byte-level BPE (``ByteLevelBPETokenizer``; no prefix space, as GPT-2 and Qwen2 encode). Special tokens
    named in ``tokenizer_config.json`` / ``added_tokens.json`` are added so they encode to their ids. A
    ``tokenizer_class`` of Qwen2 gets Qwen2's split pattern and NFC, as transformers' Qwen2 tokenizer."""
    from pathlib import Path

    from tokenizers import Tokenizer
    from tokenizers.implementations import ByteLevelBPETokenizer

    d = Path(d)
    if (d / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(d / "tokenizer.json"))
    if not ((d / "vocab.json").is_file() and (d / "merges.txt").is_file()):
        return None
    tok = ByteLevelBPETokenizer(str(d / "vocab.json"), str(d / "merges.txt"), add_prefix_space=False)
    config = _json_dict(d / "tokenizer_config.json")
    if config.get("tokenizer_class") in QWEN2_CLASSES:
        # Qwen2's slow tokenizer splits with its own pattern (digits one by one) before the byte-level map, and
        # normalizes to NFC: what transformers' Qwen2 converter builds for the fast tokenizer
        from tokenizers import Regex, normalizers, pre_tokenizers

        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    specials = []
    for name in ("added_tokens.json", "tokenizer_config.json"):
        data = _json_dict(d / name)
        if name == "added_tokens.json":
            specials += [k for k in data if isinstance(k, str)]
        else:
            for v in (data.get("added_tokens_decoder") or {}).values():
                if isinstance(v, dict) and isinstance(v.get("content"), str):
                    specials.append(v["content"])
            specials += [v for k, v in data.items() if k.endswith("_token") and isinstance(v, str)]
    vocab = tok.get_vocab()
    known = sorted({s for s in specials if s in vocab})
    if known:
        tok.add_special_tokens(known)
    return tok


def encode_prompts(path_or_dir, prompts: list[str]) -> list[list[int]]:
    """Token ids of each prompt with the checkpoint's own tokenizer (:func:`load_tokenizer`: ``tokenizer.json``,
    or ``vocab.json`` + ``merges.txt``) through the ``tokenizers`` library."""
    from pathlib import Path

    try:
        import tokenizers  # noqa: F401
    except ModuleNotFoundError:
        raise ValueError("--prompts needs the tokenizers library (pip install tokenizers), or pass --tokens") from None
    for d in ([Path(p) for p in path_or_dir] if isinstance(path_or_dir, (list, tuple)) else [Path(path_or_dir)]):
        try:
            tok = load_tokenizer(d)
        except Exception as exc:  # noqa: BLE001 - a malformed tokenizer file: say which, never a traceback
            raise ValueError(f"--prompts: the tokenizer in {d} cannot be read ({type(exc).__name__}: {exc})") from None
        if tok is not None:
            return [tok.encode(p).ids for p in prompts]
    raise ValueError(f"--prompts: no tokenizer.json, nor vocab.json + merges.txt, in {path_or_dir}; "
                     "pass token ids with --tokens")


def check_sequences(seqs: list[list[int]], vocab: int, max_pos: int | None, max_tokens: int,
                    flag: str | None = "--max-tokens") -> None:
    """Refuse empty input, more than ``max_tokens`` tokens (``flag``: the caller's option that sets the bound, or
    None when the caller has none), ids outside the vocabulary and sequences beyond the position table."""
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("the input must hold at least one non-empty sequence (--tokens or --prompts)")
    total = sum(len(s) for s in seqs)
    if total > max_tokens:
        bound = f"{flag} {max_tokens}" if flag else f"the limit of {max_tokens}"
        raise ValueError(f"{total} tokens exceed {bound} (every quantized module's input is kept "
                         "for the per-module analysis); shorten the prompts" + (" or raise the limit" if flag else ""))
    for s in seqs:
        bad = [t for t in s if not (isinstance(t, int) and 0 <= t < vocab)]
        if bad:
            raise ValueError(f"token ids must be integers in [0, vocab_size = {vocab}); got {bad[:8]}")
        if max_pos is not None and len(s) > max_pos:
            raise ValueError(f"a sequence of {len(s)} tokens exceeds max_position_embeddings {max_pos}")


class _RouterLog:
    def __init__(self):
        self.ids: dict[str, list[np.ndarray]] = {}

    def __call__(self, prefix, h, ids, weights):
        self.ids.setdefault(prefix, []).append(ids.numpy().copy())


def _select(glob: str):
    def pick(name: str) -> bool:
        li = layer_index(name)
        return fnmatchcase(name, glob) or (li is not None and fnmatchcase(f"layers.{li}", glob))
    return pick


def run(checkpoint, reference, sequences: list[list[int]], *, backends=("numpy",), layers: str = "*",
        top_k: int = 5, max_tokens: int = MAX_TOKENS, per_layer: bool = True, loader: str = "sglang",
        serving: str = "sglang") -> dict:
    """The whole analysis (module docstring) as a JSON-able dict. ValueError for bad input (a wrong
    reference included, with its findings); :class:`CheckpointError` for a checkpoint with errors."""

    t0 = time.perf_counter()
    report = analyze(checkpoint, loader=loader)
    if not report.ok:
        raise CheckpointError.from_issues(list(report.findings), f"{checkpoint}")
    res = report.resolution
    ckpt_cfg = res.checkpoint.config
    if not ckpt_cfg:
        raise ValueError(f"{checkpoint}: config.json is missing: the architecture is unknown")
    from .deepseek_v4 import config as _dsv4_config
    if _dsv4_config.is_deepseek_v4(ckpt_cfg):      # its own forward and report (modelrun.deepseek_v4.run)
        from .deepseek_v4.run import run as run_dsv4
        return run_dsv4(checkpoint, reference, sequences, backends=backends, layers=layers, top_k=top_k,
                        max_tokens=max_tokens, per_layer=per_layer, loader=loader, report=report,
                        serving=serving)
    cfg = _config.parse(ckpt_cfg)
    config_shapes.check(cfg, {s: res.checkpoint.entries[n].shape for s, n in res.native_of.items()
                              if n in res.checkpoint.entries}, f"the checkpoint {checkpoint}")
    ref = FloatModel(reference)
    ref_cfg = _config.parse(ref.config)
    config_shapes.check(ref_cfg, {n: a.shape for n, a in ref.arrays.items()}, f"the --reference {reference}", complete=True)
    findings, distances = check_reference(res, ref.arrays, ref.config)
    if findings.errors:
        raise ValueError("--reference does not match the checkpoint:\n  " + "\n  ".join(str(f) for f in findings.errors))
    check_sequences(sequences, cfg.vocab, ckpt_cfg.get("max_position_embeddings"), max_tokens)
    bes, unavailable = available_backends(backends)
    primary = bes[0]
    dt = TORCH_DTYPES[cfg.dtype]
    ref_t = ref.torch_tensors(dt)
    ck_t = checkpoint_float_tensors(res, dt)
    float_model = Model(ref_cfg, ref_t)
    log = _RouterLog()
    float_model.router_observer = log
    select = _select(layers)
    ex = ServingExecutor(res, cfg, ck_t, ref_t, primary, compare=bes[1:], select=select, serving=serving)
    quant_model = Model(cfg, ck_t, ex)
    lf, lq = [], []
    with torch.no_grad():
        for s in sequences:
            ids = torch.tensor(s, dtype=torch.int64)
            lf.append(from_torch(float_model.forward(ids)[0].float()))
            lq.append(from_torch(quant_model.forward(ids)[0].float()))
    lf_all, lq_all = np.concatenate(lf), np.concatenate(lq)
    out = {"checkpoint": str(checkpoint), "reference": str(reference), "family": cfg.family, "model_dtype": cfg.dtype,
           "serving": ex.serving.name,
           "backend": primary.name, "backends": [b.name for b in bes], "unavailable_backends": unavailable,
           "layers": layers, "sequences": len(sequences), "tokens": int(sum(len(s) for s in sequences)),
           "logits": logits_agreement(lq_all, lf_all, top_k),
           "reference_distance": [d.__dict__ for d in distances]}
    modules = _module_results(res, cfg, ex, ref, ref_cfg, dt, log)
    out["modules"] = [m.as_dict() for m in modules]
    first = next((m for m in modules if m.exceed), None)
    out["first_exceeding"] = None if first is None else {
        "module": first.name, "elements": first.exceed, "worst_ratio": first.worst_ratio,
        "saturated": first.saturated,
        "why": (f"{first.saturated} activation values outside the calibrated range saturate the static quantizer"
                if first.saturated else "the error exceeds the bound without saturation: the reference weights are not "
                                        "what this module was quantized from, or the serving path is wrong")}
    out["backend_summary"] = _backend_summary(modules, bes)
    out["per_layer"] = _per_layer(res, cfg, ck_t, ref_t, primary, float_model, sequences, lf_all, top_k, select,
                                  serving=serving) \
        if per_layer else []
    moe_rows = [m for m in modules if m.routing is not None]
    out["routing"] = [{"module": m.name, **m.routing} for m in moe_rows]
    out["findings"] = [f.as_dict() for f in report.findings if f.severity != "info"]
    out["seconds"] = time.perf_counter() - t0
    return out


def available_backends(backends) -> tuple[list, dict]:
    """The available backends of ``backends`` (names) and ``{name: why}`` for the others; ValueError naming
    ``--backend`` for an unknown name or when none is available."""
    import backends as _backends

    bes, unavailable = [], {}
    for name in backends:
        try:
            b = _backends.get(name)
        except KeyError as exc:
            raise ValueError(f"--backend: {exc.args[0]}") from None
        ok, why = b.available()
        if ok:
            bes.append(b)
        else:
            unavailable[name] = why
    if not bes:
        raise ValueError(f"--backend: none of {list(backends)} is available here: "
                         + "; ".join(f"{k}: {v}" for k, v in unavailable.items()))
    return bes, unavailable


def _ref_linear(ref: FloatModel, res, prefix: str):
    native = res.native_prefix(prefix)
    for name in (native, prefix):
        if name + ".weight" in ref.arrays:
            b = ref.arrays.get(name + ".bias")
            return _f64(ref.arrays[name + ".weight"]), None if b is None else _f64(b)
    raise ValueError(f"--reference has no {native}.weight")


def gather_calls(calls) -> tuple[np.ndarray, np.ndarray, dict]:
    """One module's calls joined: inputs ``[rows, K]``, outputs ``[rows, N]`` and, per backend, the elements
    equal to the golden (``equal``, ``elements``, ``max_ulp``, ``error``, ``bitwise``)."""
    x = np.concatenate([c.x.reshape(-1, c.x.shape[-1]) for c in calls])
    y = np.concatenate([c.y.reshape(-1, c.y.shape[-1]) for c in calls])
    backends = {}
    for c in calls:
        for m in c.matches:
            b = backends.setdefault(m.backend, {"equal": 0, "elements": 0, "max_ulp": 0, "error": None})
            b["equal"] += m.equal
            b["elements"] += m.elements
            b["max_ulp"] = max(b["max_ulp"], m.max_ulp)
            b["error"] = b["error"] or m.error
    for b in backends.values():
        b["bitwise"] = b["error"] is None and b["equal"] == b["elements"]
    return x, y, backends


def _module_results(res, cfg, ex: ServingExecutor, ref: FloatModel, ref_cfg, dt, log: _RouterLog) -> list[ModuleResult]:
    by_name: dict[str, list] = {}
    order: dict[str, int] = {}
    for i, c in enumerate(ex.calls):
        by_name.setdefault(c.name, []).append(c)
        order.setdefault(c.name, i)
    ref_fp32 = None
    out = []
    moe_seen: dict[str, int] = {}
    for name, calls in sorted(by_name.items(), key=lambda kv: order[kv[0]]):
        c0 = calls[0]
        x, y, backends = gather_calls(calls)
        if c0.kind == "linear":
            w, b = _ref_linear(ref, res, name)
            y_ref = _f64(x) @ w.T + (0 if b is None else b)
            tensors = {s: np.asarray(res.tensor(n)) for s, n in res.linears[name].items()}
            bd = dense_bound(c0.scheme, x, w, b, tensors, np.dtype(_np_dtype(dt)))
            err = np.abs(_f64(y) - y_ref)
            ratio = err / bd.bound
            r = ModuleResult(name, "linear", c0.scheme, c0.layer, order[name], x.shape[0], _sqnr(_f64(y), y_ref),
                             float(err.max()), float(np.abs(y_ref).max()), float(bd.bound.max()),
                             int(np.count_nonzero(err > bd.bound)), float(ratio.max()), bd.saturated,
                             bd.saturated_channels, outlier_channels(x), backends)
        else:
            if ref_fp32 is None:
                ref_fp32 = Model(ref_cfg, ref.torch_tensors(torch.float32))
            prefix = name.rsplit(".experts", 1)[0]
            with torch.no_grad():
                xt = torch.from_numpy(_f64(x).astype(np.float32))
                y_ref = ref_fp32._float_routed(prefix, xt).numpy().astype(np.float64)
            err = np.abs(_f64(y) - y_ref)
            r = ModuleResult(name, "moe", c0.scheme, c0.layer, order[name], x.shape[0], _sqnr(_f64(y), y_ref),
                             float(err.max()), float(np.abs(y_ref).max()), outliers=outlier_channels(x),
                             backends=backends)
            r.routing = _routing(prefix, calls, x, ex, ref_fp32, log, moe_seen)
        out.append(r)
    return out


def _np_dtype(dt):
    from w8a8 import dtypes as _dt

    return {torch.bfloat16: _dt.bfloat16, torch.float16: np.float16, torch.float32: np.float32}[dt]


def _routing(prefix: str, calls, x: np.ndarray, ex: ServingExecutor, ref_fp32: Model, log: _RouterLog, seen) -> dict:
    """Tokens whose expert set differs between the float and the quantized run, and why (module docstring)."""
    float_ids = np.concatenate(log.ids.get(prefix, [np.zeros((0, 1), np.int64)]))
    serving = np.concatenate([c.extra["serving_ids"] for c in calls])
    xt = torch.from_numpy(_f64(x).astype(np.float32)).to(torch.bfloat16)
    ck_bias = ex.t.get(prefix + ".gate.e_score_correction_bias")
    ck_bias = torch.zeros(ex.cfg.n_experts) if ck_bias is None else ck_bias.float()
    with torch.no_grad():
        ids_ref_bias = ref_fp32.router(prefix, xt)[0].numpy()
        ids_ck_bias = ref_fp32.router(prefix, xt, bias=ck_bias)[0].numpy()
    sets = lambda a: [frozenset(r.tolist()) for r in a]  # noqa: E731
    f, s, a, b = sets(float_ids), sets(serving), sets(ids_ref_bias), sets(ids_ck_bias)
    n = min(len(f), len(s))
    causes = {"correction bias": 0, "router op": 0, "router input drift": 0}
    changed = 0
    for t in range(n):
        if f[t] == s[t]:
            continue
        changed += 1
        if a[t] != b[t]:
            causes["correction bias"] += 1
        elif b[t] != s[t]:
            causes["router op"] += 1
        else:
            causes["router input drift"] += 1
    ref_bias = ref_fp32.t.get(prefix + ".gate.e_score_correction_bias")
    note = None
    if prefix + ".gate.e_score_correction_bias" not in ex.t and ref_bias is not None and bool(torch.any(ref_bias != 0)):
        note = ("the checkpoint has no e_score_correction_bias (msModelSlim's saver drops transformers' buffer): the "
                "serving router selects without it")
    return {"tokens": n, "changed": changed, "agreement": 1.0 - changed / n if n else 1.0, "causes": causes,
            "note": note}


def _per_layer(res, cfg, ck_t, ref_t, primary, float_model, sequences, lf_all, top_k, select,
               serving=None) -> list[dict]:
    layers = sorted({layer_index(p) for p in res.linears if res.types.get(p + ".weight") in ("W8A8", "W8A8_DYNAMIC")
                     and layer_index(p) is not None})
    rows = []
    for L in [None] + layers:     # None: no module quantized — what the checkpoint's float tensors alone change
        pick = (lambda L: lambda name: L is not None and layer_index(name) == L and select(name))(L)
        ex = ServingExecutor(res, cfg, ck_t, ref_t, primary, select=pick, record=False, serving=serving)
        model = Model(cfg, ck_t, ex)
        lq = []
        with torch.no_grad():
            for s in sequences:
                lq.append(from_torch(model.forward(torch.tensor(s, dtype=torch.int64))[0].float()))
        rows.append({"layer": L, **logits_agreement(np.concatenate(lq), lf_all, top_k)})
    return rows


def _backend_summary(modules: list[ModuleResult], backends) -> dict:
    """Each compared backend (the golden ``numpy`` left out) against the golden over every module, with the int8
    GEMM path it reports (``info()["gemm"]["path"]``, torch-cpu: ``vnni`` / ``amx`` / ``int_mm`` ...; None when the
    backend reports none)."""
    out = {}
    for backend in backends:
        name = backend.name
        if name == "numpy":
            continue
        rows = [m.backends.get(name) for m in modules if name in m.backends]
        out[name] = {"modules": len(rows), "bitwise_modules": sum(1 for r in rows if r["bitwise"]),
                     "elements": sum(r["elements"] for r in rows), "equal": sum(r["equal"] for r in rows),
                     "max_ulp": max((r["max_ulp"] for r in rows), default=0),
                     "errors": [r["error"] for r in rows if r["error"]][:3]}
        out[name]["bitwise"] = bool(rows) and out[name]["bitwise_modules"] == len(rows)
        gemm = backend.info().get("gemm")
        out[name]["gemm"] = gemm.get("path") if isinstance(gemm, dict) else None
    return out
