"""Replay a dump through the golden, call by call (docs/replay.md).

:func:`replay_dump` walks every rank/step of a dump in order and writes one result record per entry
to ``results.jsonl`` (fsynced per record, so an interrupted run loses at most one line and
``resume`` continues it). Per replayable call:

1. **resolve** every input: in chained mode the golden's output of the producing call (dataflow edge by
   CRC-32 + dtype + element count, confirmed by a 64-bit BLAKE2 digest of the bytes when both sides
   have bytes), else the dumped file, else a tensor of ``--inputs`` with the record's CRC (``md5``),
   else the ``--checkpoint`` weight of the call's module, else a :class:`~replay.dump.MissingTensor`;
2. **run** the golden (:func:`replay.golden.run`, the single call point) on the device's arguments;
3. **judge** every dumped output: bitwise / tolerance / ULP through the conformance engine when the
   dump has the tensor; CRC against the ``md5`` field; exact Max/Min and bounded Mean/Norm against the
   statistics; the exact invariants of :mod:`replay.stats` when no input is available;
4. **attribute** a disagreement (stage, cause) and note what msprobe's own criteria would have said.

Memory: one call's tensors at a time (memory-mapped ``.pt`` storages), plus, in chained mode, golden
outputs still waiting for a consumer, bounded by ``max_bytes`` (the oldest are dropped first; a
consumer then gets the device value and the chain break is reported).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import w8a8
from w8a8 import dtypes as _dt

from . import engine, golden, msprobe_criteria, stats
from .case import python_snippet, save_case
from .dump import Dump, DumpDir, MissingTensor, TensorLoader, TensorRecord, discover, load_dump, stats_note
from .mapping import MappedCall, map_entry
from .pt_reader import checksum_like, crc32_of

VERDICTS = ("agree-bitwise", "agree-tolerance", "disagree", "mistrusted", "missing-data", "stats-consistent",
            "stats-inconsistent", "crc-match", "crc-mismatch", "not-replayable")
BAD = ("disagree", "stats-inconsistent", "crc-mismatch")
"""Verdicts that make a call a divergence (the first divergence is the first of these)."""

STATUS = {"agree-bitwise": "pass", "crc-match": "pass", "agree-tolerance": "tolerated",
          "stats-consistent": "tolerated", "mistrusted": "mistrusted", "disagree": "fail", "crc-mismatch": "fail",
          "stats-inconsistent": "fail", "missing-data": "error", "not-replayable": "unsupported"}
"""Replay verdict -> the conformance record status (``w8a8 compare`` reads these)."""

_RANK = {"agree-bitwise": 0, "crc-match": 1, "stats-consistent": 2, "agree-tolerance": 3, "mistrusted": 4,
         "missing-data": 5, "stats-inconsistent": 6, "crc-mismatch": 7, "disagree": 8}


@dataclass
class Options:
    ops: list[str] | None = None          # golden or torch_npu op names
    calls: list[str] | None = None        # entry names (or substrings)
    layer: str | None = None              # construct.json ancestor substring
    chain: bool = False
    platform: str = golden.DEFAULT_PLATFORM
    numerics: object = None               # a w8a8.Numerics override, or None
    tolerances: object = None             # a ToleranceTable, or None (bitwise)
    attribute: bool = True
    checkpoint: object = None             # replay.weights.CheckpointWeights
    inputs: list = field(default_factory=list)   # extra tensor sources (other dump folders)
    max_calls: int | None = None
    max_bytes: int = 8 << 30
    export_case: list[str] = field(default_factory=list)
    case_dir: Path | None = None
    ranks: list[int] | None = None
    steps: list[int] | None = None


def worst(verdicts) -> str:
    vs = [v for v in verdicts if v in _RANK]
    return max(vs, key=_RANK.__getitem__) if vs else "agree-bitwise"


def _digest(array: np.ndarray) -> str:
    a = np.ascontiguousarray(array)
    h = hashlib.blake2b(digest_size=8)
    flat = a.reshape(-1).view(np.uint8) if a.size else b""
    for i in range(0, len(flat), 1 << 24):
        h.update(flat[i:i + (1 << 24)])
    return h.hexdigest()


def _key(crc: str, dtype_name: str, numel: int) -> tuple:
    return (crc.lower(), dtype_name, int(numel))


class TensorIndex:
    """Tensors of other dump folders, by CRC-32 + dtype + numel (``--inputs``): external inputs of a
    statistics/md5 dump (the layer input and weights that a ``tensor_list`` would have saved)."""

    def __init__(self, paths):
        self.entries: dict[tuple, tuple[TensorLoader, TensorRecord]] = {}
        self.problems: list[str] = []
        for p in paths:
            for d in discover(p):
                dump = load_dump(d)
                loader = TensorLoader(dump.tensor_dir)
                for e in dump.entries:
                    for rec in e.tensors():
                        if rec.data_name is None or rec.dtype is None:
                            continue
                        a = loader.load(rec)
                        if isinstance(a, MissingTensor):
                            continue
                        k = _key(crc32_of(a), _dt.name(rec.dtype), rec.numel)
                        self.entries.setdefault(k, (loader, rec))

    def find(self, rec: TensorRecord):
        if not rec.md5 or rec.dtype is None:
            return None
        hit = self.entries.get(_key(rec.md5, _dt.name(rec.dtype), rec.numel))
        if hit is None:
            return None
        loader, src = hit
        a = loader.load(src)
        return None if isinstance(a, MissingTensor) else a.reshape(rec.shape)


class ChainStore:
    """Golden outputs waiting for consumers, keyed like dataflow edges; bounded by bytes (LRU)."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.used = max_bytes, 0
        self.values: OrderedDict = OrderedDict()
        self.dropped: set = set()

    def put(self, key, value: np.ndarray) -> None:
        if key in self.values:
            self.used -= self.values.pop(key).nbytes
        self.values[key] = value
        self.used += value.nbytes
        while self.used > self.max_bytes and self.values:
            k, v = self.values.popitem(last=False)
            self.used -= v.nbytes
            self.dropped.add(k)

    def get(self, key):
        v = self.values.get(key)
        if v is not None:
            self.values.move_to_end(key)
        return v


@dataclass
class Producer:
    entry: str
    output: str
    index: int
    digest: str | None


class Session:
    """State of one rank/step replay (see module docstring)."""

    def __init__(self, dump: Dump, options: Options, index: TensorIndex | None):
        self.dump, self.options, self.index = dump, options, index
        self.loader = TensorLoader(dump.tensor_dir)
        self.producers: dict[tuple, Producer] = {}
        self.chain = ChainStore(options.max_bytes)
        self.first_divergence: dict | None = None

    # -- inputs -----------------------------------------------------------------------------------
    def _record_key(self, rec: TensorRecord, array: np.ndarray | None) -> tuple | None:
        if rec.dtype is None:
            return None
        if array is not None:
            return _key(crc32_of(array), _dt.name(rec.dtype), rec.numel)
        if rec.md5 and len(rec.md5) == 8:
            return _key(rec.md5, _dt.name(rec.dtype), rec.numel)
        return None

    def resolve_input(self, rec: TensorRecord, call: MappedCall, sources: dict, edges: list, chained: bool):
        dumped = self.loader.load(rec)
        array = None if isinstance(dumped, MissingTensor) else dumped
        key = self._record_key(rec, array)
        producer = self.producers.get(key) if key else None
        if producer is not None and array is not None and producer.digest is not None and \
                producer.digest != _digest(array):
            producer = None   # a CRC collision: not the same bytes
        if producer is not None:
            edges.append({"input": rec.where, "from": producer.entry, "output": producer.output})
        else:
            edges.append({"input": rec.where, "from": None})
        if chained and producer is not None:
            g = self.chain.get(key)
            if g is not None:
                sources[rec.where] = f"chain: golden output {producer.output} of {producer.entry}"
                return g.reshape(rec.shape)
            reason = "dropped (memory bound)" if key in self.chain.dropped else "not computed by the golden"
            sources[rec.where] = f"chain break: {producer.entry}.{producer.output} {reason}; device value used"
        if array is not None:
            sources.setdefault(rec.where, "dump file")
            return array
        if self.index is not None:
            found = self.index.find(rec)
            if found is not None:
                sources[rec.where] = "--inputs (matched by CRC-32, dtype, numel)"
                return found
        if self.options.checkpoint is not None:
            modules = [m for m in _modules(call)]
            match = self.options.checkpoint.find(rec, modules)
            if match is not None:
                if match.array is not None:
                    sources[rec.where] = match.note
                    return match.array
                return MissingTensor(rec, match.note)
        return dumped

    def register_outputs(self, call: MappedCall, names: list[str], arrays: dict, golden_outs: dict | None) -> None:
        for name, rec in zip(names, call.outputs):
            if not isinstance(rec, TensorRecord):
                continue
            dev = arrays.get(name)
            dev = None if isinstance(dev, MissingTensor) else dev
            key = self._record_key(rec, dev)
            if key is None:
                continue
            self.producers[key] = Producer(call.entry.name.full, name, call.entry.index,
                                           _digest(dev) if dev is not None else None)
            if golden_outs is not None and golden_outs.get(name) is not None:
                self.chain.put(key, np.asarray(golden_outs[name]))


def _modules(call: MappedCall) -> list[str]:
    from .dump import EntryName

    out = []
    for p in call.entry.parents:
        n = EntryName.parse(p)
        if n.kind == "module" and n.module_path:
            out.append(n.module_path)
    return out


def _replace(value, fn):
    if isinstance(value, TensorRecord):
        return fn(value)
    if isinstance(value, list):
        return [_replace(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(_replace(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _replace(v, fn) for k, v in value.items()}
    return value


def _missing(value) -> list[MissingTensor]:
    if isinstance(value, MissingTensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in _missing(v)]
    if isinstance(value, dict):
        return [m for v in value.values() for m in _missing(v)]
    return []


def _selected(call: MappedCall, options: Options) -> bool:
    n = call.entry.name
    if options.ops and not any(o in (call.op, n.api, n.api.replace("npu_", "")) for o in options.ops):
        return False
    if options.calls and not any(c == n.full or c in n.full for c in options.calls):
        return False
    if options.layer and not any(options.layer in p for p in call.entry.parents):
        return False
    return True


# ------------------------------------------------------------------------------------------------
# judging one call


def _golden(call: MappedCall, args, kwargs, options: Options):
    """Run the golden, trying the call's alternatives (ambiguous defaults); return (outputs, label, error)."""
    tries = call.alternatives or [(None, {})]
    results = []
    for label, override in tries:
        kw = {**kwargs, **override}
        try:
            out = golden.run(call.op, args, kw, platform=options.platform, numerics=options.numerics)
            results.append((engine.name_outputs(call.op, out), label, None, kw))
        except (ValueError, TypeError, OverflowError) as exc:
            results.append((None, label, f"{type(exc).__name__}: {exc}", kw))
    return results


def crc_mismatch_hint(entry) -> str:
    """What to do about a CRC mismatch: dump this call's tensors. msprobe's ``list`` selects calls by API name
    (an entry is dumped when a listed string is a substring of its name, e.g. ``NPU.npu_quant_matmul.0.forward``;
    ``npu_quant_matmul`` selects every call of the op) — not by output."""
    api = entry.name.api if entry is not None else None
    full = entry.name.full if entry is not None else None
    if not full:
        return ("CRC differs: the output is not bitwise the golden's; a msprobe tensor dump of this call "
                "(\"task\": \"tensor\", its API name in \"list\") gives the differing elements")
    return ("CRC differs: the output is not bitwise the golden's; a msprobe tensor dump of this call gives the "
            f"differing elements: \"task\": \"tensor\", \"tensor\": {{\"list\": [\"{full}\"]}} (list takes API "
            f"names, matched as substrings: [\"{api}\"] dumps every call of the op)")


def _output_verdict(op: str, name: str, kind: str, ref, dev, rec, options, pre, masks, entry=None) -> dict:
    """One output: compare arrays, else CRC, else statistics."""
    if ref is None:
        if dev is None or rec is None:
            return {"name": name, "verdict": "agree-bitwise", "note": "absent on both sides", "n": 0}
        return {"name": name, "verdict": "disagree", "note": "the golden returns no such output; the device did"}
    if isinstance(dev, np.ndarray):
        tol, described = engine.tolerance(options.tolerances, op, name, _dt.name(ref.dtype))
        comp = engine.compare_output(op, name, kind, ref, dev, tol=tol, pre=pre().get(name) if tol.tie_off_by_one else None,
                                     mask=masks.get(name))
        comp["verdict_engine"] = comp.pop("verdict")
        comp["verdict"] = {"pass": "agree-bitwise", "tolerated": "agree-tolerance", "fail": "disagree",
                           "mistrusted": "mistrusted"}[comp["verdict_engine"]]
        if described:
            comp["tolerance"] = described
        note = stats_note(rec, dev) if isinstance(rec, TensorRecord) else None
        if note:
            comp["file_note"] = note
        return comp
    if not isinstance(rec, TensorRecord):
        return {"name": name, "verdict": "missing-data", "note": "no output record"}
    out = {"name": name, "kind": kind}
    got = checksum_like(rec.md5, ref) if rec.md5 else None
    if got is not None:
        out.update(verdict="crc-match" if got == rec.md5.lower() else "crc-mismatch", crc_golden=got,
                   crc_device=rec.md5)
        st = stats.compare_stats(rec, ref)
        out["statistics"] = st["checks"]
        if out["verdict"] == "crc-mismatch":
            out["note"] = crc_mismatch_hint(entry)
        return out
    if rec.stats_null:
        out.update(verdict="missing-data", note=dev.reason if isinstance(dev, MissingTensor) else "no statistics")
        return out
    st = stats.compare_stats(rec, ref)
    out.update(verdict="stats-consistent" if st["ok"] else "stats-inconsistent", statistics=st["checks"])
    if not st["ok"]:
        out["note"] = "dumped statistics differ from the golden output's: " + statistics_failures(st["checks"])
    return out


def invariant_failures(checks: list[dict]) -> str:
    """The broken invariants of a statistics-only call, with their numbers (what report and terminal show)."""
    return "; ".join(f"broken: {c['check']}: {c.get('detail')}" for c in checks if not c.get("ok"))


def statistics_failures(checks: list[dict]) -> str:
    """The dumped statistics that differ from the golden output's, device vs golden."""
    return "; ".join(f"{c['stat']} device {c.get('device')!r}, golden {c.get('golden')!r} ({c.get('rule')})"
                     for c in checks if not c.get("ok"))


def judge_call(call: MappedCall, args, kwargs, device: dict, options: Options) -> dict:
    """Golden vs device for one call with complete inputs (``device``: output name -> array / Missing / None)."""
    names = [n for n, _ in engine.outputs_of(call.op)]
    kinds = dict(engine.outputs_of(call.op))
    results = _golden(call, args, kwargs, options)
    judged = []
    for ref, label, error, kw in results:
        if error is not None:
            hint = ("; NaN/Inf inputs: try --numerics '{\"nan_policy\":\"ieee\"}'" if "NaN" in error or "Inf" in error
                    else "; shape inconsistent: a sliced dump? (msprobe does not record its slice config)"
                    if "shape" in error else "")
            judged.append({"verdict": "not-replayable", "reason": f"the golden refused the input: {error}{hint}",
                           "alternative": label})
            continue
        numerics = golden.declared_numerics(options.platform, options.numerics)
        masks = engine.masks(call.op, args, kw)
        cache: dict = {}

        def pre(kw=kw, numerics=numerics):   # the pre-rounding values, only for a tie-aware tolerance
            if "v" not in cache:
                cache["v"] = engine.pre_round(call.op, args, kw, numerics)
            return cache["v"]

        outs = {}
        for i, name in enumerate(names):
            rec = call.outputs[i] if i < len(call.outputs) else None
            outs[name] = _output_verdict(call.op, name, kinds[name], ref.get(name), device.get(name), rec, options,
                                         pre, masks, call.entry)
        verdict = worst(o["verdict"] for o in outs.values())
        if verdict == "mistrusted" and any(o["verdict"] == "agree-bitwise" for o in outs.values()):
            verdict = "agree-bitwise"
        judged.append({"verdict": verdict, "outputs": outs, "alternative": label, "golden": ref, "kwargs": kw,
                       "masks": masks, "variant": golden.variant_label(call.op, args, kw, platform=options.platform,
                                                                       numerics=options.numerics)})
    ok = [j for j in judged if j["verdict"] not in BAD and j["verdict"] != "not-replayable"]
    best = ok[0] if ok else (next((j for j in judged if j["verdict"] != "not-replayable"), judged[0]))
    if call.alternatives and best.get("alternative"):
        best["note_alternative"] = f"judged with {best['alternative']}" + (
            "" if ok else " (no alternative agrees)")
    return best


def _msprobe(call: MappedCall, best: dict, device: dict) -> dict | None:
    outs = best.get("outputs") or {}
    ref = best.get("golden") or {}
    api = call.entry.name.api
    arrays = {n: (device[n], ref[n]) for n in outs if isinstance(device.get(n), np.ndarray) and ref.get(n) is not None}
    if arrays:
        return msprobe_criteria.judge_call(api, arrays)
    crcs = {n: (o["crc_device"], o["crc_golden"]) for n, o in outs.items() if "crc_device" in o}
    if crcs:
        return msprobe_criteria.judge_crc(crcs)
    stat_pairs = {}
    for i, (n, o) in enumerate(outs.items()):
        rec = call.outputs[i] if i < len(call.outputs) else None
        if "statistics" in o and isinstance(rec, TensorRecord) and ref.get(n) is not None:
            stat_pairs[n] = ({"Max": rec.max, "Min": rec.min, "Mean": rec.mean, "Norm": rec.norm},
                             stats.stats_of(ref[n]))
    return msprobe_criteria.judge_stats(stat_pairs) if stat_pairs else None


# ------------------------------------------------------------------------------------------------
# the walk


def _record(dump: Dump, call: MappedCall, options: Options) -> dict:
    e = call.entry
    rec = {"op": call.op or e.name.api, "backend": engine.BACKEND, "case_id": f"{dump.where.label}/{e.name.full}",
           "params": {"dump": dump.where.label, "entry": e.name.full, "index": e.index, "platform": options.platform},
           "kind": "replay", "name": e.name.full, "numerics": golden.declared_numerics(options.platform,
                                                                                     options.numerics).name,
           "platform": options.platform, "torch_npu_op": e.name.api if e.name.prefix in ("NPU", "_C_ascend") else None,
           "step": dump.where.step, "rank": dump.where.rank, "rank_label": dump.where.rank_label,
           "module": e.module, "parents": e.parents[:8],
           "stack": ([s for s in e.stack if "site-packages" not in s] or e.stack)[:3]}
    if call.inferred:
        rec["inferred"] = call.inferred
    if call.notes:
        rec["notes"] = list(call.notes)
    return rec


def _finish(rec: dict, verdict: str, **fields) -> dict:
    rec.update(fields)
    rec["verdict"] = verdict
    rec["status"] = STATUS[verdict]
    return rec


def replay_call(session: Session, call: MappedCall, options: Options, repro_base: str) -> dict:
    dump = session.dump
    rec = _record(dump, call, options)
    t0 = time.perf_counter()
    if not call.replayable:
        reason = call.skip or call.not_replayable
        return _finish(rec, "not-replayable", reason=reason, note=reason, quant_op=call.op is not None,
                       duration_s=0.0)
    names = [n for n, _ in engine.outputs_of(call.op)]
    if len(call.outputs) != len(names):
        return _finish(rec, "not-replayable", reason=f"{len(call.outputs)} outputs dumped; the golden {call.op} "
                       f"returns {len(names)} ({', '.join(names)})", quant_op=True)
    device = {}
    for name, orec in zip(names, call.outputs):
        device[name] = session.loader.load(orec) if isinstance(orec, TensorRecord) else None
    file_problems = [d for d in device.values() if isinstance(d, MissingTensor) and
                     (d.reason.startswith(("refused", "unreadable", "CRC", "file holds", "file absent")))]
    sources: dict = {}
    edges: list = []
    iso_args = _replace(call.args, lambda r: session.resolve_input(r, call, sources, edges, chained=False))
    iso_kwargs = _replace(call.kwargs, lambda r: session.resolve_input(r, call, sources, edges, chained=False))
    rec["inputs"] = {w: s for w, s in sources.items()}
    rec["dataflow"] = edges
    missing_in = _missing(iso_args) + _missing(iso_kwargs)
    best = None
    golden_for_chain = None
    if not missing_in:
        best = judge_call(call, iso_args, iso_kwargs, device, options)
        golden_for_chain = best.get("golden")
    chained = None
    if options.chain:
        csources: dict = {}
        c_args = _replace(call.args, lambda r: session.resolve_input(r, call, csources, [], chained=True))
        c_kwargs = _replace(call.kwargs, lambda r: session.resolve_input(r, call, csources, [], chained=True))
        if not _missing(c_args) + _missing(c_kwargs):
            linked = any(s.startswith("chain:") for s in csources.values())
            if linked or best is None:
                cbest = judge_call(call, c_args, c_kwargs, device, options)
                chained = {"inputs": csources, "verdict": cbest["verdict"],
                           "outputs": {n: {k: o.get(k) for k in ("verdict", "max_ulp", "max_code_diff", "mismatches",
                                                                 "sqnr_db", "histogram", "crc_golden", "crc_device")
                                           if k in o} for n, o in (cbest.get("outputs") or {}).items()}}
                golden_for_chain = cbest.get("golden")
                if best is None:
                    best = cbest
                    rec["judged_in"] = "chain (the dump lacks this call's own inputs)"
            else:
                chained = {"inputs": csources, "verdict": best["verdict"] if best else None,
                           "note": "no input comes from a golden-replayed producer (chain starts or is broken here)"}
        else:
            chained = {"inputs": csources, "missing": [m.describe() for m in _missing(c_args) + _missing(c_kwargs)]}
        rec["chain"] = chained
    session.register_outputs(call, names, device, golden_for_chain)
    rec["duration_s"] = round(time.perf_counter() - t0, 4)
    if best is None:
        inv = stats.invariants(call, platform=options.platform, numerics=options.numerics)
        missing = [m.describe() for m in missing_in]
        outputs_have_files = any(isinstance(d, np.ndarray) for d in device.values())
        if inv["checks"] and not outputs_have_files:
            v = "stats-consistent" if inv["ok"] else "stats-inconsistent"
            note = ("inputs not available: only the exact invariants of the statistics were checked" if inv["ok"]
                    else invariant_failures(inv["checks"]) + " (an exact invariant of the dumped statistics; "
                                                                "inputs not saved)")
            return _finish(rec, v, invariants=inv["checks"], missing=missing, note=note)
        return _finish(rec, "missing-data", missing=missing + [d.describe() for d in file_problems],
                       note="; ".join(missing[:3]))
    verdict = best["verdict"]
    if file_problems and verdict not in BAD:
        verdict = "missing-data"
        rec["missing"] = [d.describe() for d in file_problems]
    rec["outputs"] = best.get("outputs")
    if best.get("variant"):
        rec["variant"] = best["variant"]
    if best.get("reason"):
        rec["reason"] = best["reason"]
    if best.get("note_alternative"):
        rec.setdefault("notes", []).append(best["note_alternative"])
    ms = _msprobe(call, best, device)
    if ms:
        rec["msprobe"] = ms
    if verdict == "disagree":
        comps = best.get("outputs") or {}
        first = next(((n, o) for n, o in comps.items() if o.get("verdict") == "disagree"), None)
        if first:
            rec["first_mismatch"] = {"output": first[0], "index": first[1].get("first_mismatch")}
        if options.attribute:
            dev_arrays = {n: d for n, d in device.items() if isinstance(d, np.ndarray)}
            rec["attribution"] = engine.attribute(call.op, iso_args, best["kwargs"], dev_arrays, comps,
                                                  golden.declared_numerics(options.platform, options.numerics),
                                                  best.get("masks") or {})
        rec["repro"] = repro_line(repro_base, call.entry.name.full, options)
        if ms and ms["verdict"] == "pass":
            rec["stricter"] = "msprobe's criteria pass this call; the golden does not"
    rec["note"] = _note(rec, verdict)
    if options.case_dir is not None and not missing_in and (
            call.entry.name.full in options.export_case or
            (verdict in BAD and session.first_divergence is None and verdict == "disagree")):
        path = options.case_dir / f"{dump.where.label.replace('/', '_')}_{call.entry.name.full}.npz"
        save_case(path, op=call.op, args=iso_args, kwargs=best["kwargs"], device_outputs={
            n: (d if isinstance(d, np.ndarray) else None) for n, d in device.items()},
            meta={"entry": call.entry.name.full, "dump": dump.where.label, "platform": options.platform,
                  "numerics": options.numerics.as_dict() if options.numerics is not None else None,
                  "inferred": call.inferred})
        rec["case"] = str(path)
        rec["repro"] = f"w8a8 replay {path}"
        record = golden.declared_numerics(options.platform, options.numerics)
        rec["repro_python"] = python_snippet(path, call.op, None if record == w8a8.ASCEND else record.as_dict())
    return _finish(rec, verdict)


def repro_line(repro_base: str, entry: str, options: Options) -> str:
    """The command that re-judges one call and exports it as a single-op case (``--export-case`` takes the
    call's NAME): the dump, the call, and the platform and record the call was judged under."""
    words = [*shlex.split(repro_base), "--call", entry, "--export-case", entry]
    if options.platform != "ascend910_93":
        words += ["--platform", options.platform]
    if options.numerics is not None:
        base = golden.platform_numerics(options.platform).as_dict()
        changed = {k: v for k, v in options.numerics.as_dict().items()
                   if base.get(k) != v and k not in ("name", "platform")}
        if changed:
            words += ["--numerics", json.dumps(changed, sort_keys=True)]
    return shlex.join(words)


def _note(rec: dict, verdict: str) -> str:
    if verdict == "disagree":
        at = rec.get("attribution") or {}
        fm = rec.get("first_mismatch") or {}
        stage = f"stage {at['first_stage']}; " if at.get("first_stage") else ""
        return f"output {fm.get('output')} differs first at {fm.get('index')}; {stage}cause: {at.get('cause')}"
    outs = rec.get("outputs") or {}
    return "; ".join(f"{n}: {o.get('note')}" for n, o in outs.items() if o.get("note")) or verdict


def dump_problem_records(dump: Dump, options: Options) -> list[dict]:
    """Records for what is wrong with a dump folder as a whole (truncated JSON, a step cut by a raise)."""
    out = []
    base = {"backend": engine.BACKEND, "kind": "replay-dump", "platform": options.platform, "step": dump.where.step,
            "rank": dump.where.rank, "rank_label": dump.where.rank_label, "numerics": ""}
    if dump.truncated:
        out.append({**base, "op": "dump.json", "case_id": f"{dump.where.label}/dump.json", "name": "dump.json",
                    "verdict": "missing-data", "status": "error",
                    "note": f"{dump.truncated}; {len(dump.entries)} complete entries were read"})
    for p in dump.problems:
        out.append({**base, "op": "dump", "case_id": f"{dump.where.label}/{p[:40]}", "name": "dump",
                    "verdict": "missing-data", "status": "error", "note": p})
    last = dump.last_entry_without_output()
    if last is not None:
        out.append({**base, "op": "step", "case_id": f"{dump.where.label}/step-truncated", "name": last.name.full,
                    "verdict": "missing-data", "status": "error",
                    "note": f"the last API entry ({last.name.full}) has no output: the call raised or data_mode "
                            "excluded outputs; after a raise msprobe records no further call of that thread in "
                            "this step, so the step may be silently truncated here"})
    return out


def plan(dump_path, options: Options) -> list[DumpDir]:
    dirs = discover(dump_path)
    if options.steps:
        dirs = [d for d in dirs if d.step in options.steps]
    if options.ranks:
        dirs = [d for d in dirs if d.rank in options.ranks]
    return dirs


def replay_dump(dump_path, options: Options, results, *, resume: bool = False, on_call=None, on_dump=None,
                repro_base: str | None = None) -> dict:
    """Replay every selected call of every rank/step under ``dump_path`` into ``results``
    (a :class:`conformance.results.ResultsFile`). Returns run statistics."""
    results.repair()
    done = {r["case_id"] for r in results.records() if "status" in r} if resume else set()
    index = TensorIndex(options.inputs) if options.inputs else None
    stats_: dict = {"dumps": 0, "entries": 0, "written": 0, "skipped_done": 0, "first_divergence": {}}
    repro_base = repro_base or shlex.join(["w8a8", "replay", str(dump_path)])
    budget = options.max_calls
    for where in plan(dump_path, options):
        dump = load_dump(where)
        stats_["dumps"] += 1
        if on_dump:
            on_dump(dump)
        for r in dump_problem_records(dump, options):
            if r["case_id"] not in done:
                results.append(r)
                stats_["written"] += 1
        session = Session(dump, options, index)
        for entry in dump.entries:
            stats_["entries"] += 1
            call = map_entry(entry)
            if not _selected(call, options):
                if on_call:
                    on_call(None, entry)
                continue
            case_id = f"{dump.where.label}/{entry.name.full}"
            if case_id in done and not options.chain:
                stats_["skipped_done"] += 1
                if on_call:
                    on_call(None, entry)
                continue
            if budget is not None and call.replayable:
                if budget <= 0:
                    break
                budget -= 1
            record = replay_call(session, call, options, repro_base)
            if record["verdict"] in BAD and session.first_divergence is None:
                session.first_divergence = record
                stats_["first_divergence"][dump.where.label] = record["name"]
            if case_id in done:
                stats_["skipped_done"] += 1
            else:
                results.append(record)
                stats_["written"] += 1
            if on_call:
                on_call(record, entry)
    return stats_


def replay_case(case, options: Options) -> dict:
    """Judge an exported single-op case (:mod:`replay.case`): the golden on its inputs against the device
    outputs it holds. Returns a record like :func:`replay_call`'s."""
    names = [n for n, _ in engine.outputs_of(case.op)]
    call = MappedCall(entry=None, op=case.op, outputs=[None] * len(names))
    device = {n: case.device_outputs.get(n) for n in names}
    best = judge_call(call, case.args, case.kwargs, device, options)
    rec = {"name": case.entry, "op": case.op, "verdict": best["verdict"], "outputs": best.get("outputs"),
           "note": best.get("reason")}
    if best["verdict"] == "disagree":
        comps = best.get("outputs") or {}
        first = next(((n, o) for n, o in comps.items() if o.get("verdict") == "disagree"), None)
        if first:
            rec["first_mismatch"] = {"output": first[0], "index": first[1].get("first_mismatch")}
        if options.attribute:
            rec["attribution"] = engine.attribute(case.op, case.args, best["kwargs"],
                                                  {n: d for n, d in device.items() if isinstance(d, np.ndarray)},
                                                  comps, golden.declared_numerics(options.platform, options.numerics),
                                                  best.get("masks") or {})
        rec["note"] = _note(rec, "disagree")
    return rec
