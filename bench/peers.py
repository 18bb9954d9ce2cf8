"""torch-cpu's ``w8a8_dynamic_linear`` next to its CPU peers: timed round-robin in one process.

Every candidate runs on the same shapes and the same inputs (the bench case's, from its seed), all of
them called in turn, round after round, so that a shared machine's drift is common to all, with a short
untimed pause before each (:data:`bench.timing.SETTLE_S`: the previous candidate's spinning thread pool
goes idle); the medians and quartiles of the rounds are reported. Candidates (each where installed; otherwise a record saying
why not):

* ``torch-cpu`` — ``backend.prepare(...).run`` (load untimed), checked bit for bit against the golden.
* ``torch-cpu bind + call`` — ``lin = backend.bind(...)`` once, then ``lin(x)`` timed: the bound call
  with its NumPy conversions and activation checks, checked bit for bit against the golden.
* ``torch-cpu GEMM only`` / ``torch._int_mm GEMM only`` — the int8 GEMM of the same shape on int8
  codes, int32 out, without quantization or epilogue: torch-cpu's own kernel (the ``vnni`` path's,
  on its packed weight) and ``torch._int_mm`` on the weight as the ``int_mm`` path loads it. Not the op:
  the floor its GEMM sets ("GEMM only").
* ``torch bf16 matmul`` — ``F.linear`` of the bf16 activation and the dequantized weight
  ``bf16(w * s_w)`` (the unquantized model's Linear).
* ``onnxruntime DynamicQuantizeMatMul`` — the contrib op (fp32 ``A`` quantized per tensor to u8 at run
  time, int8 weight ``[K, N]``, per-column scale), fp32 in / out.
* ``onnxruntime per-token graph`` — standard ONNX ops: per-row ``s = max|x| / 127``, ``QuantizeLinear``
  per row to u8 codes with zero point 128, ``MatMulInteger`` (u8 x s8, zero point 128), the int32 result
  times ``s`` and ``s_w``: the golden's scheme with ONNX's rounding (``x / s`` rather than ``x * (127 / m)``).
* ``torchao int8 dynamic (eager)`` — ``Int8DynamicActivationInt8WeightConfig`` on a bf16 ``nn.Linear``
  holding ``w * s_w`` (torchao quantizes the weight itself), eager mode.

Numerics: a candidate is "bit-identical" only if its output equals the golden's bit for bit (checked);
the others are "different numerics" with their SQNR against the golden's output in dB. onnxruntime
takes fp32 activations: the bf16 -> fp32 conversion is done once, outside the timing.

Run from ``w8a8 bench --peers`` (a process of its own, like every backend) or :func:`run_peers`.
"""

from __future__ import annotations

import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

from conformance.declare import BenchCase
from conformance.ops.dense.w8a8_dynamic_linear import bench_case as dynamic_linear_case

PEER_SHAPES_QUICK = ((16, 4096, 4096), (512, 4096, 4096), (2048, 2048, 2048))
PEER_SHAPES_FULL = ((1, 4096, 4096), (64, 4096, 4096)) + PEER_SHAPES_QUICK


def shapes(full: bool) -> tuple:
    return PEER_SHAPES_FULL if full else PEER_SHAPES_QUICK


@dataclass
class Candidate:
    name: str
    run: object                       # () -> output
    numerics: str = ""                # filled in after the check
    result: object = None             # () -> output as float64 NumPy (for the SQNR); None: not comparable
    gemm_only: bool = False
    notes: dict = field(default_factory=dict)


def sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    """``10 log10(sum ref^2 / sum (ref - got)^2)``; inf when equal."""
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64).reshape(ref.shape)
    err = float(np.sum((ref - got) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(ref ** 2)) / err)


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _torch_cpu(args, kwargs):
    import backends

    b = backends.get("torch-cpu")
    ok, why = b.available()
    if not ok:
        return None, why
    prepared = b.prepare("w8a8_dynamic_linear", *args, **kwargs)
    return Candidate("torch-cpu", prepared.run, result=lambda: prepared.finish(prepared.run()),
                     notes=dict(prepared.notes)), ""


def _torch_cpu_bound(args, kwargs):
    """The serving shape of the call: ``lin = backend.bind(op, weight, scale, ...)`` once (its load, untimed,
    in the first call), then ``lin(x)``: NumPy in and out, the activation checks included."""
    import backends

    b = backends.get("torch-cpu")
    ok, why = b.available()
    if not ok:
        return None, why
    x, rest = args[0], args[1:]
    lin = b.bind("w8a8_dynamic_linear", *rest, **kwargs)
    lin(x)
    return Candidate("torch-cpu bind + call", lambda: lin(x), result=lambda: lin(x),
                     notes={"gemm": lin.gemm_path(x.dtype)}), ""


def _codes(x):
    from backends.torch_common import to_torch
    from backends.torch_cpu.quant import dynamic_quant

    return dynamic_quant(to_torch(x))[0]


def _vnni_gemm(args, kwargs):
    import torch

    from backends.torch_cpu import packed

    ok, why = packed.available()
    if not ok:
        return None, why
    x, w, _ = args
    pw = packed.PackedWeight.pack(torch.from_numpy(w))
    codes = _codes(x)
    return Candidate("torch-cpu GEMM only", lambda: packed.run(packed.IN_CODES, codes, pw, torch.int32),
                     gemm_only=True), ""


def _int_mm_gemm(args, kwargs):
    import torch

    x, w, _ = args
    codes = _codes(x)
    kn = torch.from_numpy(w).mT   # [K, N] column-major: the int_mm path's layout
    return Candidate("torch._int_mm GEMM only", lambda: torch._int_mm(codes, kn), gemm_only=True), ""


def _dequantized(w, ws):
    import torch

    return (torch.from_numpy(w).to(torch.float32) * torch.from_numpy(ws.astype(np.float32))[:, None]).to(torch.bfloat16)


def _bf16(args, kwargs):
    import torch

    from backends.torch_common import to_torch

    x, w, ws = args
    xt, wt = to_torch(x), _dequantized(w, ws)

    def run():
        return torch.nn.functional.linear(xt, wt)

    return Candidate("torch bf16 matmul", run, result=lambda: run().to(torch.float32).numpy()), ""


def _torchao(args, kwargs):
    import torch

    from backends.torch_common import to_torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torchao
            from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable with this torch
        return None, f"torchao is not usable here ({type(exc).__name__}: {exc})"
    x, w, ws = args
    n, k = w.shape
    xt = to_torch(x)
    lin = torch.nn.Linear(k, n, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(_dequantized(w, ws))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_(lin, Int8DynamicActivationInt8WeightConfig())
            with torch.no_grad():
                lin(xt)
    except Exception as exc:  # noqa: BLE001
        return None, f"torchao {torchao.__version__} Int8DynamicActivationInt8WeightConfig failed: {exc}"

    def run():
        with torch.no_grad():
            return lin(xt)

    return Candidate(f"torchao {torchao.__version__} int8 dynamic (eager)", run,
                     result=lambda: run().to(torch.float32).numpy()), ""


def _ort_session(model, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # ORT's pool spins after a run by default: round-robin, it would take the cores from the candidate
    # timed next (thread pools clash: NumPy's OpenBLAS and torch's OpenMP)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _onnxruntime():
    """``(onnxruntime, "")``, or ``(None, why)`` where it (or onnx, which builds the graphs) is missing."""
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError as exc:
        return None, f"{exc.name} is not installed (pip install 'w8a8[bench]')"
    return onnxruntime, ""


def _ort_dqmm(args, kwargs):
    ort, why = _onnxruntime()
    if ort is None:
        return None, why
    from onnx import TensorProto, helper, numpy_helper

    x, w, ws = args
    n, k = w.shape
    inits = [numpy_helper.from_array(np.ascontiguousarray(w.T), "B"),
             numpy_helper.from_array(ws.astype(np.float32), "S"), numpy_helper.from_array(np.zeros(n, np.int8), "Z")]
    node = helper.make_node("DynamicQuantizeMatMul", ["X", "B", "S", "Z"], ["Y"], domain="com.microsoft")
    graph = helper.make_graph([node], "dqmm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return _ort_candidate(f"onnxruntime {ort.__version__} DynamicQuantizeMatMul (per-tensor u8)", model, x), ""


def _ort_candidate(name: str, model, x: np.ndarray) -> Candidate:
    """A session of ``model`` (input ``X``) on the fp32 copy of ``x`` (made here, outside the timing)."""
    sess = _ort_session(model, _threads())
    a = np.ascontiguousarray(x.astype(np.float32))

    def run():
        return sess.run(None, {"X": a})[0]

    return Candidate(name, run, result=run)


def per_token_graph(k: int, n: int, w: np.ndarray, ws: np.ndarray):
    """The ONNX model of the per-token graph (module docstring): ``X fp32 [M, K] -> Y fp32 [M, N]``."""
    from onnx import TensorProto, helper, numpy_helper

    def const(name, value):
        return numpy_helper.from_array(np.asarray(value), name)

    inits = [numpy_helper.from_array(np.ascontiguousarray(w.T), "W"), const("WS", ws.astype(np.float32)),
             const("Q", np.float32(127)), const("TINY", np.float32(1e-30)), const("ZP", np.uint8(128)),
             const("ROW", np.array([-1], np.int64))]
    nodes = [
        helper.make_node("Abs", ["X"], ["ax"]),
        helper.make_node("ReduceMax", ["ax"], ["amax"], axes=[1], keepdims=1),
        helper.make_node("Div", ["amax", "Q"], ["s0"]),
        helper.make_node("Max", ["s0", "TINY"], ["s"]),                 # [M, 1]; an all-zero row: codes 0
        helper.make_node("Reshape", ["s", "ROW"], ["s1"]),              # [M]
        helper.make_node("Shape", ["s1"], ["m"]),
        helper.make_node("Expand", ["ZP", "m"], ["zp"]),                # [M] of 128
        helper.make_node("QuantizeLinear", ["X", "s1", "zp"], ["xq"], axis=0),
        helper.make_node("MatMulInteger", ["xq", "W", "ZP"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["accf", "s"], ["t"]),
        helper.make_node("Mul", ["t", "WS"], ["Y"]),
    ]
    graph = helper.make_graph(nodes, "per_token", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort_per_token(args, kwargs):
    ort, why = _onnxruntime()
    if ort is None:
        return None, why
    x, w, ws = args
    graph = per_token_graph(w.shape[1], w.shape[0], w, ws)
    return _ort_candidate(f"onnxruntime {ort.__version__} per-token graph (u8 codes)", graph, x), ""


BUILDERS = (_torch_cpu, _torch_cpu_bound, _vnni_gemm, _int_mm_gemm, _bf16, _ort_dqmm, _ort_per_token, _torchao)


def _record(case: BenchCase, name: str, order: int) -> dict:
    return {"backend": name, "case": f"{case.name} [peers]", "op": case.op, "label": case.label,
            "params": case.params, "work": case.work, "unit": case.unit, "tags": list(case.tags) + ["peers"],
            "group": "peers", "order": order}


def run_case(case: BenchCase, *, min_rounds: int = 7, max_rounds: int = 40, max_time: float = 4.0,
             warmup: int = 2) -> list[dict]:
    """Every candidate of one ``w8a8_dynamic_linear`` case, round-robin (see the module docstring)."""
    import w8a8
    from bench.runner import case_seed
    from bench.timing import SETTLE_S, round_robin, stats

    args, kwargs = case.build(np.random.default_rng(case_seed(case.name)))
    want = w8a8.w8a8_dynamic_linear(*args, **kwargs)
    x, w, ws = args
    flat = (x, w, np.asarray(ws, np.float32).reshape(-1))   # the peers take a 1-D per-channel scale
    records, cands = [], []
    for order, build in enumerate(BUILDERS):
        try:
            cand, why = build(args, kwargs) if build in (_torch_cpu, _torch_cpu_bound) else build(flat, kwargs)
        except Exception as exc:  # noqa: BLE001 - a peer that fails is a result
            cand, why = None, f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        if cand is None:
            rec = _record(case, build.__name__.strip("_").replace("_", " "), order)
            rec.update(status="unavailable", note=why)
            records.append(rec)
            continue
        cand.notes["order"] = order
        cands.append(cand)
    base = {}
    for cand in cands:
        rec = _record(case, cand.name, cand.notes.pop("order"))
        if cand.gemm_only:
            cand.numerics, rec["verified"] = "GEMM only (int8 codes -> int32): not the op", False
        elif cand.name in ("torch-cpu", "torch-cpu bind + call"):
            got = cand.result()
            same = got.dtype == want.dtype and got.tobytes() == want.tobytes()
            cand.numerics = "bit-identical to the golden" if same else "DIFFERS from the golden"
            rec["verified"] = same
        else:
            db = sqnr_db(want.astype(np.float64), cand.result())
            cand.numerics = f"different numerics: SQNR {db:.1f} dB vs the golden"
            rec.update(verified=False, sqnr_db=db, no_roofline=True)
        rec.update(numerics=cand.numerics, notes=cand.notes)
        base[cand.name] = rec
    one_round, times = round_robin({c.name: c.run for c in cands}, settle=SETTLE_S)
    for _ in range(warmup):
        one_round()
    for v in times.values():
        v.clear()
    start = time.perf_counter()
    while True:
        one_round()
        n = len(next(iter(times.values()))) if times else 0
        if n >= max_rounds or (n >= min_rounds and time.perf_counter() - start >= max_time):
            break
    ref = stats(times["torch-cpu"])["median"] if "torch-cpu" in times and times["torch-cpu"] else None
    for cand in cands:
        rec = base[cand.name]
        st = stats(times[cand.name])
        rec.update(status="ok", stats=st, data=list(times[cand.name]))
        if ref and cand.name != "torch-cpu":
            rec["torch_cpu_speedup"] = st["median"] / ref
        records.append(rec)
    return records


def expected_unverified(r: dict) -> bool:
    """A peers record whose output is not the golden's by design (another numerics, a bare GEMM)."""
    return r.get("group") == "peers" and r.get("backend") != "torch-cpu"


def _worker(conn, cases, timing, parent_pid):
    from conformance.processes import die_with_parent

    from .runner import started

    die_with_parent(parent_pid)
    try:
        for case in cases:  # BenchCase objects: plain data and a module-level builder, pickled whole
            conn.send(started(case))
            for rec in run_case(case, **timing):
                conn.send(rec)
    except Exception as exc:  # noqa: BLE001
        conn.send({"backend": "peers", "case": "?", "group": "peers", "status": "error",
                   "note": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]})
    conn.send(None)


def peer_case_list(full: bool) -> list[BenchCase]:
    return [dynamic_linear_case(m, k, n, ("peers",)) for m, k, n in shapes(full)]


def run_peers(cases: list[BenchCase], *, timing: dict | None = None, on_record=None,
              timeout: float | None = None) -> list[dict]:
    """:func:`run_case` for each case in a fresh process (spawn: no thread pool shared with the caller; it
    dies with the caller), every case under ``timeout`` seconds (default: the bench's)."""
    import multiprocessing as mp

    from .runner import DEFAULT_TIMEOUT_S, collect, start

    p, conn = start(mp.get_context("spawn"), _worker, list(cases), timing or {})
    return collect(conn, p, {"backend": "peers", "case": "?", "group": "peers"}, on_record,
                   timeout=timeout or DEFAULT_TIMEOUT_S)[0]
