"""torch-cpu's dense W8A8 Linear at M = K = N = 2048 against its anchors (pytest-benchmark; no
assertions on time).

Run: ``python -m pytest benchmarks/test_bench_torch_cpu_dense.py --benchmark-only`` (about half a
minute on two cores, plus a second for the golden's bit-exactness check).

* ``torch-cpu w8a8_dynamic_linear``: bf16 ``x [2048, 2048]``, int8 weight ``[2048, 2048]`` (checkpoint
  ``[N, K]``), fp32 per-channel scale, timed through ``backend.prepare(...).run`` — the device work
  only: dynamic per-token quantization, the int8 GEMM, the per-channel x per-token epilogue and the
  bf16 cast (argument checks, conversion and the load step happen in ``prepare``, once).
* ``torch bf16 matmul``: ``F.linear`` of the same bf16 ``x`` and a bf16 weight (target: torch-cpu
  >= 1.0x its speed).
* ``torchao int8 dynamic (eager)``: ``Int8DynamicActivationInt8WeightConfig`` on a bf16
  ``nn.Linear`` of the same weight, eager mode (target: torch-cpu >= 2x its speed). Skipped, with the
  reason, where torchao is missing or does not work with this torch.
* ``torch._int_mm`` alone on the same shape: the GEMM floor of torch-cpu's ``int_mm`` path. (On an
  AVX-512 VNNI CPU without AMX the default is the ``vnni`` path, whose quantization, GEMM and epilogue
  are one kernel; ``benchmarks/test_bench_torch_cpu_peers.py`` times it against its own GEMM alone,
  ``_int_mm``, onnxruntime and the rest, round-robin.)

The timed runs are sequential (pytest-benchmark); ``test_interleaved_ratios`` also runs the
candidates round-robin and records the ratios of medians in its ``extra_info``, which is the number
to trust on a shared, noisy machine. The module's summary line prints both sets of ratios.

Reading the torchao ratio: on an AVX-512 VNNI CPU without AMX (the 2-core Zen 4 this was written
on) ``torch._int_mm`` alone takes ~19.5 ms at 2048^3 and torchao's eager path 37-44 ms on idle
cores, so 2x torchao needs the whole Linear to cost about its bare GEMM — what the fused ``vnni``
kernel does; on a busy machine torchao's many 2-thread elementwise kernels slow down far more (220 ms)
than torch-cpu's.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import backends
from bench.timing import round_robin
from w8a8 import bfloat16, w8a8_dynamic_linear

torch = pytest.importorskip("torch")

M = K = N = 2048
ROUNDS = dict(rounds=7, iterations=1, warmup_rounds=2)
GROUP = "dense-linear-2048"
_MEDIANS: dict[str, float] = {}
_INTERLEAVED: dict[str, float] = {}


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32).astype(bfloat16)
    weight = rng.integers(-127, 128, (N, K), dtype=np.int8)  # checkpoint layout [N, K]
    weight_scale = (rng.random(N, dtype=np.float32) * 1e-3 + 1e-4).astype(np.float32)
    return x, weight, weight_scale


@pytest.fixture(scope="module")
def torch_cpu_run(operands):
    backend = backends.get("torch-cpu")
    ok, reason = backend.available()
    if not ok:
        pytest.skip(reason)
    prepared = backend.prepare("w8a8_dynamic_linear", *operands)
    # Correctness once, outside any timing: the result is the golden's, bit for bit.
    got = prepared.finish(prepared.run())
    want = w8a8_dynamic_linear(*operands, numerics=backend.numerics)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    return prepared.run


@pytest.fixture(scope="module")
def bf16_run(operands):
    from backends.torch_common import to_torch

    x = to_torch(operands[0])
    w = torch.from_numpy(operands[1]).to(torch.bfloat16)
    return lambda: torch.nn.functional.linear(x, w)


def _torchao_linear(operands):
    """The torchao eager int8-dynamic Linear, or a skip reason."""
    try:
        from backends.torchao.quiet import import_torchao

        with warnings.catch_warnings(), import_torchao():   # its CUDA-kernel notices on a CPU-only torch
            warnings.simplefilter("ignore")
            import torchao
            from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable with this torch
        return None, f"torchao is not usable here ({type(exc).__name__}: {exc}); pip install torchao --no-deps"
    from backends.torch_common import to_torch

    x = to_torch(operands[0])
    lin = torch.nn.Linear(K, N, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(operands[1]).to(torch.bfloat16))
    try:
        quantize_(lin, Int8DynamicActivationInt8WeightConfig())
        with torch.no_grad():
            lin(x)
    except Exception as exc:  # noqa: BLE001
        return None, f"torchao {torchao.__version__} Int8DynamicActivationInt8WeightConfig failed: {type(exc).__name__}: {exc}"

    def run():
        with torch.no_grad():
            return lin(x)

    return run, f"torchao {torchao.__version__}"


@pytest.fixture(scope="module")
def torchao_run(operands):
    run, reason = _torchao_linear(operands)
    if run is None:
        pytest.skip(reason)
    return run


def _record(name: str, benchmark) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is not None and getattr(stats, "stats", None) is not None:
        _MEDIANS[name] = float(stats.stats.median)


def test_torch_cpu_w8a8_dynamic_linear(benchmark, torch_cpu_run):
    benchmark.group = GROUP
    benchmark.extra_info["gemm_path"] = backends.get("torch-cpu").gemm_path
    out = benchmark.pedantic(torch_cpu_run, **ROUNDS)
    _record("torch-cpu", benchmark)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (M, N)


def test_torch_bf16_matmul(benchmark, bf16_run):
    benchmark.group = GROUP
    benchmark.pedantic(bf16_run, **ROUNDS)
    _record("bf16", benchmark)


def test_torchao_int8_dynamic_eager(benchmark, torchao_run):
    benchmark.group = GROUP
    benchmark.pedantic(torchao_run, **ROUNDS)
    _record("torchao", benchmark)


def test_torch_int_mm_gemm_only(benchmark, operands):
    a = torch.from_numpy(operands[1])  # any int8 [2048, 2048] activation
    b = torch.from_numpy(operands[1]).mT  # the weight as torch-cpu loads it: [K, N], column-major
    benchmark.group = GROUP
    benchmark.pedantic(torch._int_mm, args=(a, b), **ROUNDS)
    _record("int_mm", benchmark)


def test_interleaved_ratios(benchmark, operands, torch_cpu_run, bf16_run):
    """Round-robin medians (more robust to a shared machine's drift than the sequential runs)."""
    candidates = {"torch-cpu": torch_cpu_run, "bf16": bf16_run}
    ao, _ = _torchao_linear(operands)
    if ao is not None:
        candidates["torchao"] = ao
    one_round, times = round_robin(candidates)

    benchmark.group = GROUP + "-interleaved"
    benchmark.pedantic(one_round, rounds=7, iterations=1, warmup_rounds=1)
    med = {name: float(np.median(v[1:])) for name, v in times.items()}  # drop the warm-up round
    _INTERLEAVED.update(med)
    benchmark.extra_info.update({f"median_{k}_ms": round(v * 1e3, 2) for k, v in med.items()})
    benchmark.extra_info["speedup_vs_bf16"] = round(med["bf16"] / med["torch-cpu"], 3)
    if "torchao" in med:
        benchmark.extra_info["speedup_vs_torchao"] = round(med["torchao"] / med["torch-cpu"], 3)


class _Summary:
    """A plugin registered by this module: prints the ratios at the end of the terminal summary."""

    @staticmethod
    def pytest_terminal_summary(terminalreporter):
        lines = []
        for label, m in (("sequential medians", _MEDIANS), ("interleaved medians", _INTERLEAVED)):
            if "torch-cpu" not in m:
                continue
            parts = []
            if "bf16" in m:
                parts.append(f"{m['bf16'] / m['torch-cpu']:.2f}x bf16 matmul (target >= 1.0x)")
            if "torchao" in m:
                parts.append(f"{m['torchao'] / m['torch-cpu']:.2f}x torchao eager (target >= 2x)")
            if "int_mm" in m:
                parts.append(f"time / its _int_mm GEMM {m['torch-cpu'] / m['int_mm']:.2f}")
            lines.append(f"torch-cpu w8a8_dynamic_linear 2048^3, {label}: " + "; ".join(parts))
        if lines:
            terminalreporter.section("torch-cpu dense targets (this run)")
            for line in lines:
                terminalreporter.write_line(line)


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    manager = request.config.pluginmanager
    if manager.get_plugin("w8a8-torch-cpu-bench-summary") is None:
        manager.register(_Summary(), "w8a8-torch-cpu-bench-summary")
