"""``w8a8 run`` on a DeepSeek-V4 checkpoint: what :func:`modelrun.analysis.run` reports for the other
families, plus what is particular to DeepSeek-V4.

The quantized model runs :mod:`.forward` with every quantized module on the backend's serving path
(:mod:`.serving`), the float model runs the same forward on ``reference`` (a float model in the
checkpoint's own names: for a QuaRot + flex-smooth checkpoint, the rotated and smoothed float model the
quantizer saw, since the original model is the same function but not the same weights), both with the
:data:`~.readings.OFFICIAL` readings. Reported (float64 references):

* **logits**: rel-L2, top-1 and top-k agreement (``analysis.logits_agreement``); with an MTP block, the
  MTP logits too;
* **per quantized module** on the inputs it saw: SQNR, max error, the analytic bound of
  :func:`modelrun.bounds.dense_bound` against the reference weight (a merged shared-expert
  ``gate_up``: its two shards stacked) and the elements beyond it; routed experts: SQNR against the
  reference's float experts on the same input *with the serving router's choice and weights* (no
  analytic bound: the fused MoE's rounding chain); the first module beyond its bound;
* **one layer quantized at a time** (the rest float from the reference);
* **routing agreement** per MoE layer, split by hash layers (``tid2eid``: the same experts by
  construction, so only the weights can move) and score layers (a changed expert set is attributed to
  the serving router — the engine's DeepSeek-V4 router in ``w8a8_moe`` on its logits (rows M3, M4) — when the torch fp32
  router on the same input chose otherwise, else to the input's drift);
* **attention variant of each layer** (sliding only / indexed compressed / every compressed entry) and
  the compressed entries it had;
* **hyper-connection streams**: rel-L2 of the quantized run's residual streams against the float run's,
  after each layer;
* **reference disagreements**: the float model with each switch of :data:`~.readings.TOGGLES` (and
  the ``hf`` / ``msmodelslim`` presets) against the default float model: logits rel-L2 and top-1;
* **each backend against the golden**, bit for bit, on every quantized call.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from backends.torch_common import from_torch, to_torch
from checkpoints import CheckpointError, analyze

from .. import analysis as A
from .. import config_shapes
from ..bounds import dense_bound
from . import config as _config
from .forward import TORCH_DTYPES, Model
from .readings import OFFICIAL, PRESETS, TOGGLES
from .serving import DSV4ServingExecutor, composition
from .weights import load_dir


class _Log:
    """Collects the forward's observations (``attention``, ``router``, ``streams``)."""

    def __init__(self):
        self.attention: dict[str, dict] = {}
        self.router: dict[str, list] = {}
        self.streams: dict[str, list] = {}

    def __call__(self, event, name, **kw):
        if event == "attention":
            self.attention[name] = {"variant": kw["variant"], "ratio": kw["ratio"], "entries": kw["entries"]}
        elif event == "router":
            self.router.setdefault(name, []).append((kw["ids"].numpy().copy(), kw["hashed"]))
        elif event == "streams":
            self.streams.setdefault(name, []).append(kw["h"].float().numpy().copy())


def checkpoint_tensors(res) -> dict[str, torch.Tensor]:
    """The checkpoint's FLOAT-typed tensors by native name, as stored."""
    ck = res.checkpoint
    return {n: to_torch(np.array(ck.tensor(n))) for n in ck.entries if ck.description.types.get(n) == "FLOAT"}


def _check_reference(res, ref: dict, cfg) -> None:
    missing, shape = [], []
    for s, n in res.native_of.items():
        if not n.endswith(".weight") or res.types.get(s) != "W8A8_DYNAMIC":
            continue
        if n not in ref:
            missing.append(n)
        elif tuple(ref[n].shape) != tuple(res.checkpoint.entries[n].shape):
            shape.append(f"{n} {tuple(ref[n].shape)} vs {tuple(res.checkpoint.entries[n].shape)}")
    if missing or shape:
        raise ValueError("--reference does not match the checkpoint: " +
                         (f"missing {missing[:4]}" if missing else "") + (f" shapes differ: {shape[:4]}" if shape else ""))


def _forward(model: Model, seqs, mtp: bool):
    main, extra = [], []
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor(s, dtype=torch.int64)
            if mtp:
                a, b = model.forward_mtp(ids)
                extra.append(from_torch(b[0].float()))
            else:
                a = model.forward(ids)
            main.append(from_torch(a[0].float()))
    return np.concatenate(main), (np.concatenate(extra) if extra else None)


def _ref_weight(ref: dict, call) -> np.ndarray:
    names = call.extra.get("shards") or [call.name]
    return np.concatenate([A._f64(from_torch(ref[n + ".weight"].float())) for n in names])


def _moe_reference(ref: dict, prefix: str, x: np.ndarray, ids: np.ndarray, w: np.ndarray, cfg) -> np.ndarray:
    """Float routed experts (reference weights, fp64) on ``x`` with the serving choice ``ids`` / weights ``w``."""
    xf = A._f64(x)
    lim = cfg.swiglu_limit
    y = np.zeros_like(xf)
    wf = A._f64(w)
    for e in np.unique(ids):
        tok, slot = np.nonzero(ids == e)
        g = lambda n: A._f64(from_torch(ref[f"{prefix}.experts.{int(e)}.{n}.weight"].float()))  # noqa: E731
        gate, up = np.minimum(xf[tok] @ g("w1").T, lim), np.clip(xf[tok] @ g("w3").T, -lim, lim)
        h = gate / (1 + np.exp(-gate)) * up
        np.add.at(y, tok, (h @ g("w2").T) * wf[tok, slot, None])
    return y


def _module_results(res, cfg, ex, ref, dt) -> list:
    by, order = {}, {}
    for i, c in enumerate(ex.calls):
        by.setdefault(c.name, []).append(c)
        order.setdefault(c.name, i)
    out = []
    for name, calls in sorted(by.items(), key=lambda kv: order[kv[0]]):
        c0 = calls[0]
        x, y, backends = A.gather_calls(calls)
        if c0.kind == "linear":
            w = _ref_weight(ref, c0)
            y_ref = A._f64(x) @ w.T
            shards = c0.extra.get("shards") or [name]
            tensors = {s: np.concatenate([np.asarray(res.tensor(ex.serving_of[n] + s)) for n in shards])
                       for s in (".weight", ".weight_scale")}
            bd = dense_bound(c0.scheme, x, w, None, tensors, np.dtype(A._np_dtype(dt)))
            err = np.abs(A._f64(y) - y_ref)
            ratio = err / bd.bound
            r = A.ModuleResult(name, "linear", c0.scheme, c0.layer, order[name], x.shape[0], A._sqnr(A._f64(y), y_ref),
                               float(err.max()), float(np.abs(y_ref).max()), float(bd.bound.max()),
                               int(np.count_nonzero(err > bd.bound)), float(ratio.max()), bd.saturated,
                               bd.saturated_channels, A.outlier_channels(x), backends)
        else:
            prefix = name.rsplit(".experts", 1)[0]
            ids = np.concatenate([c.extra["serving_ids"] for c in calls])
            wts = np.concatenate([c.extra["serving_weights"] for c in calls])
            y_ref = _moe_reference(ref, prefix, x, ids, wts, cfg)
            err = np.abs(A._f64(y) - y_ref)
            r = A.ModuleResult(name, "moe", c0.scheme, c0.layer, order[name], x.shape[0], A._sqnr(A._f64(y), y_ref),
                               float(err.max()), float(np.abs(y_ref).max()), outliers=A.outlier_channels(x),
                               backends=backends)
        out.append(r)
    return out


def _routing(ex, float_log: _Log, quant_log: _Log, quant_model: Model, cfg) -> list[dict]:
    rows = []
    calls = {}
    for c in ex.calls:
        if c.kind == "moe":
            calls.setdefault(c.name.rsplit(".experts", 1)[0], []).append(c)
    for prefix, cs in calls.items():
        f = np.concatenate([i for i, _ in float_log.router.get(prefix, [])])
        tq = np.concatenate([i for i, _ in quant_log.router.get(prefix, [])])    # torch fp32 router, same input
        s = np.concatenate([c.extra["serving_ids"] for c in cs])
        hashed = cs[0].extra["hashed"]
        sets = lambda a: [frozenset(r.tolist()) for r in a]  # noqa: E731
        fs, ts, ss = sets(f), sets(tq), sets(s)
        n = min(len(fs), len(ss))
        causes = {"serving router (the engine's logits dtype and DeepSeek-V4 router, rows M4, M3)": 0, "router input drift": 0}
        changed = 0
        for t in range(n):
            if fs[t] != ss[t]:
                changed += 1
                causes["serving router (the engine's logits dtype and DeepSeek-V4 router, rows M4, M3)" if ts[t] != ss[t]
                       else "router input drift"] += 1
        rows.append({"module": prefix + ".experts", "kind": "hash" if hashed else "score", "tokens": n,
                     "changed": changed, "agreement": 1.0 - changed / n if n else 1.0, "causes": causes,
                     "note": "hash layer: tid2eid[input_ids] fixes the experts; only the weights move" if hashed
                     else None})
    return rows


def _streams(float_log: _Log, quant_log: _Log) -> list[dict]:
    rows = []
    for name, fl in float_log.streams.items():
        ql = quant_log.streams.get(name)
        if not ql:
            continue
        f, q = np.concatenate([a.reshape(-1) for a in fl]), np.concatenate([a.reshape(-1) for a in ql])
        nf = float(np.linalg.norm(f.astype(np.float64)))
        rows.append({"layer": name, "rel_l2": float(np.linalg.norm((q - f).astype(np.float64)) / nf) if nf else 0.0})
    return rows


def _readings_effect(cfg, ref_t, seqs, lf, top_k) -> list[dict]:
    rows = []
    variants = [(f"{k} = {v!r}", OFFICIAL.with_(**{k: v})) for k, v in TOGGLES.items()]
    variants += [(f"preset {n}", r) for n, r in PRESETS.items() if n != "official"]
    for label, r in variants:
        lq, _ = _forward(Model(cfg, ref_t, readings=r), seqs, False)
        ag = A.logits_agreement(lq, lf, top_k)
        rows.append({"reading": label, "changes": r.differs(OFFICIAL), "rel_l2": ag["rel_l2"], "top1": ag["top1"]})
    return rows


def run(checkpoint, reference, sequences, *, backends=("numpy",), layers: str = "*", top_k: int = 5,
        max_tokens: int = A.MAX_TOKENS, per_layer: bool = True, loader: str = "sglang", readings_effect: bool = True,
        report=None, serving: str = "sglang") -> dict:
    """The DeepSeek-V4 analysis (module docstring) as a JSON-able dict (the keys of ``analysis.run`` plus
    ``dsv4``). ValueError for bad input, :class:`CheckpointError` for a checkpoint with errors."""
    t0 = time.perf_counter()
    if loader != "sglang":
        raise ValueError(f"--loader {loader}: the DeepSeek-V4 run composes SGLang's serving path only")
    report = report or analyze(checkpoint, loader=loader)
    if not report.ok:
        raise CheckpointError.from_issues(list(report.findings), f"{checkpoint}")
    res = report.resolution
    cfg = _config.parse(res.checkpoint.config)
    if cfg.dtype != "bfloat16":
        raise ValueError(f"config.json: torch_dtype {cfg.dtype}: the DeepSeek-V4 serving path runs bf16")
    config_shapes.check_dsv4(cfg, {n: e.shape for n, e in res.checkpoint.entries.items()}, f"the checkpoint {checkpoint}")
    ref_t = load_dir(reference)
    config_shapes.check_dsv4(cfg, {n: tuple(t.shape) for n, t in ref_t.items()}, f"the --reference {reference}")
    _check_reference(res, ref_t, cfg)
    A.check_sequences(sequences, cfg.vocab, res.checkpoint.config.get("max_position_embeddings"), max_tokens)
    bes, unavailable = A.available_backends(backends)
    primary, dt = bes[0], TORCH_DTYPES[cfg.dtype]
    ck_t = checkpoint_tensors(res)
    mtp = cfg.mtp > 0 and any(n.startswith("mtp.0.") for n in ck_t)
    flog, qlog = _Log(), _Log()
    float_model = Model(cfg, ref_t, observe=flog)
    select = A._select(layers)
    ex = DSV4ServingExecutor(res, cfg, ck_t, ref_t, primary, compare=bes[1:], select=select, serving=serving)
    quant_model = Model(cfg, ck_t, executor=ex, observe=qlog)
    lf, lf_mtp = _forward(float_model, sequences, mtp)
    lq, lq_mtp = _forward(quant_model, sequences, mtp)
    modules = _module_results(res, cfg, ex, ref_t, dt)
    first = next((m for m in modules if m.exceed), None)
    out = {"checkpoint": str(checkpoint), "reference": str(reference), "family": "deepseek_v4", "serving": ex.serving.name,
           "model_dtype": cfg.dtype, "backend": primary.name, "backends": [b.name for b in bes],
           "unavailable_backends": unavailable, "layers": layers, "sequences": len(sequences),
           "tokens": int(sum(len(s) for s in sequences)), "logits": A.logits_agreement(lq, lf, top_k),
           "reference_distance": [], "modules": [m.as_dict() for m in modules],
           "first_exceeding": None if first is None else {
               "module": first.name, "elements": first.exceed, "worst_ratio": first.worst_ratio, "saturated": 0,
               "why": "the error exceeds the bound: the reference weights are not what this module was quantized "
                      "from, or the serving path is wrong"},
           "backend_summary": A._backend_summary(modules, bes)}
    rows = []
    if per_layer:
        qlayers = sorted({m.layer for m in modules if m.layer is not None})
        for L in [None] + qlayers:
            pick = (lambda L: lambda name: L is not None and A.layer_index(name) == L and select(name))(L)
            exl = DSV4ServingExecutor(res, cfg, ck_t, ref_t, primary, select=pick, record=False,
                                     serving=serving)
            lql, _ = _forward(Model(cfg, ck_t, executor=exl), sequences, False)
            rows.append({"layer": L, **A.logits_agreement(lql, lf, top_k)})
    out["per_layer"] = rows
    routing = _routing(ex, flog, qlog, quant_model, cfg)
    out["routing"] = [{k: v for k, v in r.items() if k != "kind"} for r in routing]
    out["findings"] = [f.as_dict() for f in report.findings if f.severity != "info"]
    out["dsv4"] = {
        "readings": {k: (v if not isinstance(v, float) else float(v)) for k, v in OFFICIAL.__dict__.items()},
        "serving_composition": {k: v[0] for k, v in composition(serving).items()},
        "attention": [{"layer": k, **v} for k, v in flog.attention.items()],
        "routing": {kind: {"layers": [r["module"] for r in routing if r["kind"] == kind],
                           "tokens": sum(r["tokens"] for r in routing if r["kind"] == kind),
                           "changed": sum(r["changed"] for r in routing if r["kind"] == kind)}
                    for kind in ("hash", "score")},
        "streams": _streams(flog, qlog),
        "mtp_logits": None if lf_mtp is None else A.logits_agreement(lq_mtp, lf_mtp, top_k),
        "readings_effect": _readings_effect(cfg, ref_t, sequences, lf, top_k) if readings_effect else [],
    }
    for v in out["dsv4"]["routing"].values():
        v["agreement"] = 1.0 - v["changed"] / v["tokens"] if v["tokens"] else 1.0
    out["seconds"] = time.perf_counter() - t0
    return out


def print_dsv4(out: dict, console) -> None:
    """The DeepSeek-V4 part of the terminal report."""
    from rich.markup import escape

    d = out["dsv4"]
    console.print("[bold]DeepSeek-V4[/]: attention per layer: " + escape("; ".join(
        f"{a['layer']}: {a['variant']}, {a['entries']} compressed entries" for a in d["attention"])))
    for kind, r in d["routing"].items():
        console.print(escape(f"routing, {kind} layers ({', '.join(r['layers']) or '-'}): {r['changed']} of {r['tokens']} "
                             f"token-layers changed expert set (agreement {r['agreement']:.1%})"))
    console.print(escape("hyper-connection streams rel-L2 after each layer: " +
                         ", ".join(f"{s['layer']} {s['rel_l2']:.3g}" for s in d["streams"])))
    if d["mtp_logits"]:
        m = d["mtp_logits"]
        console.print(escape(f"MTP logits: rel-L2 {m['rel_l2']:.4g}, top-1 {m['top1']:.1%}, top-{m['k']} {m['topk']:.1%}"))
    for r in d["readings_effect"]:
        console.print(escape(f"reading {r['reading']}: float logits rel-L2 {r['rel_l2']:.3g} against the default "
                             f"readings, top-1 {r['top1']:.1%}"))
