"""torch-cpu asks the golden's kernel variant for every op with variants, every shape and every platform.

The golden's choice is :func:`w8a8.variants.select` (the op's check, then its selector on the record's
platform). torch-cpu's choice is whatever it asks :func:`w8a8.variants.calls.kernel` while it really runs
the call (``prepare`` and ``run``): a spy records each variant asked from torch-cpu's own modules. The
calls are the op's named cases, a few drawn ones, and for the ops whose selectors have thresholds a grid
across them (each threshold, one below and one above, odd sizes). Each platform the golden registers runs
through a torch-cpu whose declared record is on that platform.

Ops torch-cpu asks nothing for (its arithmetic is one kernel's on every shape) must have golden variants
that decide only what torch-cpu computes (``kernel_variants.FIXED``).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import w8a8
from backends.torch_cpu import TorchCpuBackend
from backends.torch_cpu import kernel_variants
from conformance import registry
from conformance.runner import draw_cases
from w8a8 import platforms
from w8a8.variants import calls

pytest.importorskip("torch")

BF16, FP16 = w8a8.bfloat16, np.float16
OPS = w8a8.variants.explainable_ops()


def _record(platform: str) -> w8a8.Numerics:
    return w8a8.ASCEND if platform == w8a8.ASCEND.platform else w8a8.ASCEND.replace(name=f"ascend-{platform}",
                                                                                      platform=platform)


@pytest.fixture(scope="module", params=platforms.names())
def on_platform(request):
    """``(record, torch-cpu declaring it)`` for one registered platform."""
    numerics = _record(request.param)
    cls = type(f"TorchCpuOn_{request.param}", (TorchCpuBackend,), {"numerics": numerics})
    return numerics, cls()


def _torch_cpu_asks(backend, op, args, kwargs, monkeypatch) -> list:
    """The variants torch-cpu's modules ask :func:`calls.kernel` for while running the call."""
    asked = []
    real = calls.kernel

    def spy(name, numerics, **facts):
        v = real(name, numerics, **facts)
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__") == calls.__name__:
            frame = frame.f_back   # a per-op function of calls: its caller asked
        if frame is not None and frame.f_globals.get("__name__", "").startswith("backends.torch_cpu"):
            asked.append(v)
        return v

    monkeypatch.setattr(calls, "kernel", spy)
    try:
        backend.prepare(op, *args, **kwargs).run()
    finally:
        monkeypatch.setattr(calls, "kernel", real)
    return asked


# -- grids across the selectors' thresholds ------------------------------------------------------------------

def _x(rows, h, dtype=BF16, lead=None):
    shape = (rows, h) if lead is None else (*lead, h)
    return np.full(shape, 0.5, dtype)


def _dynamic_quant_grid():
    out = []
    for dt in (BF16, FP16):
        for rows, h in [(1, 4096), (3, 4096), (4, 4096), (5, 4096), (383, 4096), (384, 4096), (385, 4096),
                        (4, 4095), (4, 4097), (7, 5120), (17, 10240), (2, 127), (2, 128), (2, 129), (7, 136),
                        (1, 16320), (1, 16321), (1, 16328), (1, 20000), (1025, 8), (1, 1), (17, 7)]:
            out.append(((_x(rows, h, dt),), {}))
        out.append(((_x(0, 4096, dt, lead=(2, 3)),), {}))                      # rows 6, 3-D
        for h in (12800, 12808, 10284, 10292):                                  # smooth-scale limits
            out.append(((_x(2, h, dt),), {"smooth_scales": np.ones(h, dt)}))
        for h in (4096, 11488, 11504):                                          # MoE group_index limits
            out.append(((_x(4, h, dt),), {"smooth_scales": np.ones((2, h), dt),
                                          "group_index": np.array([1, 4], np.int32)}))
        out.append(((_x(4, 4096, dt),), {"dst_type": "int4"}))
    return out


def _gating_grid():
    out = []
    for dt in (BF16, FP16, np.float32):
        for e, k in [(7, 7), (8, 8), (9, 1), (16, 8), (16, 9), (1023, 2), (1024, 8), (1025, 8), (1032, 8)]:
            out.append(((np.linspace(-1, 1, 3 * e, dtype=np.float32).astype(dt).reshape(3, e),),
                        {"k": k}))
    return out


def _finalize_grid():
    out = []
    for dt in (BF16, FP16, np.float32):
        for n, k, h in [(3, 6, 4096), (3, 6, 7168), (2, 2, 7168), (2, 4, 7168), (2, 4, 5120), (2, 2, 5120),
                        (1, 1, 7), (5, 3, 17), (1, 256, 8), (1, 257, 8)]:
            e = 4
            rows = np.full((n * k, h), 0.25, dt)
            src = np.arange(n * k, dtype=np.int32)
            experts = (np.arange(n * k, dtype=np.int32) % e).reshape(n, k)
            for bias in (True, False):
                out.append(((rows, np.ones((n, h), dt), None, np.ones((e, h), dt) if bias else None,
                             np.full((n, k), 0.5, dt), src, experts), {"k": k}))
    return out


def _routing_grid():
    out = []
    for n, k in [(1, 1), (7, 3), (17, 8), (760, 8), (761, 8), (6080, 1), (6081, 1), (2730, 8), (2731, 8),
                 (2732, 8), (8192, 8), (8193, 8), (384, 8),
                 (383, 8)]:
        x = np.full((n, 16), 0.5, BF16)
        idx = (np.arange(n * k, dtype=np.int32) % 256).reshape(n, k)
        out.append(((x, idx), {"active_num": n * k, "expert_num": 256, "expert_tokens_num_type": 1,
                                "expert_tokens_num_flag": True, "active_expert_range": [0, 32],
                                "row_idx_type": 1}))
        out.append(((x, idx), {"active_num": n * k, "expert_num": 256, "quant_mode": 1}))
    return out


def _swiglu_grid():
    return [((np.linspace(-2, 2, rows * 2 * h, dtype=np.float32).astype(dt).reshape(rows, 2 * h),), {})
            for dt in (BF16, FP16, np.float32) for rows, h in [(1, 1), (3, 7), (17, 64)]]


GRIDS = {"dynamic_quant": _dynamic_quant_grid, "moe_gating_top_k_softmax": _gating_grid,
         "moe_finalize_routing": _finalize_grid, "moe_init_routing_v2": _routing_grid, "swiglu": _swiglu_grid}


def _declared_calls(op: str, drawn: int = 6) -> list:
    """The op's named cases and ``drawn`` cases of its main strategy (seed 0)."""
    spec = registry.get(op)
    out = [c.build() for c in spec.cases]
    out += [spec.build(p) for p in draw_cases(spec, drawn, 0)]
    return out


def _calls(op: str) -> list:
    return _declared_calls(op) + (GRIDS[op]() if op in GRIDS else [])


def test_every_op_with_variants_is_covered():
    """Each op the golden selects variants for is either asked by torch-cpu or fixed (kernel_variants.FIXED)."""
    assert "dynamic_quant" in OPS and "moe_init_routing_v2" in OPS
    asked_for = set(GRIDS) | {"dequant_swiglu_quant", "weight_quant_batchmatmul"}
    known = asked_for | set(kernel_variants.FIXED)
    assert set(OPS) == known, sorted(set(OPS) ^ known)


@pytest.mark.parametrize("op", [op for op in OPS if op not in kernel_variants.FIXED])
def test_torch_cpu_asks_the_golden_variant(op, on_platform, monkeypatch):
    numerics, backend = on_platform
    checked = 0
    for args, kwargs in _calls(op):
        try:
            want = w8a8.variants.select(op, *args, **{**kwargs, "numerics": numerics})
        except (TypeError, ValueError):
            continue   # a drawn call the golden refuses: no variant
        got = _torch_cpu_asks(backend, op, args, kwargs, monkeypatch)
        shapes = [getattr(a, "shape", a) for a in args]
        assert got, f"{op} {shapes} {kwargs}: torch-cpu asked for no variant"
        assert {v.label for v in got} == {want.label}, (op, shapes, [v.label for v in got], want.label)
        assert got[0] == want, (op, shapes)
        checked += 1
    assert checked >= 3, f"{op}: only {checked} valid calls"


@pytest.mark.parametrize("op", sorted(kernel_variants.FIXED))
def test_fixed_ops_decide_only_what_torch_cpu_computes(op, on_platform, monkeypatch):
    numerics, backend = on_platform
    fixed = kernel_variants.FIXED[op]
    checked = 0
    for args, kwargs in _calls(op):
        try:
            want = w8a8.variants.select(op, *args, **{**kwargs, "numerics": numerics})
        except (TypeError, ValueError):
            continue
        assert set(want.decides.items()) <= set(fixed.items()), (op, want.label, want.decides)
        checked += 1
    assert checked >= 3


def test_a_platform_of_its_own_changes_torch_cpus_scale_as_the_golden_s(monkeypatch):
    """A registered platform with a smaller UB: x [32, 8192] bf16 leaves the multi-row kernel (amax * fp32(1/127)
    on A3) for the large-shape one (1 / (127 / amax)); torch-cpu declaring that record writes the golden's bits."""
    small = platforms.Platform(name="test-ub-64k", description="a test platform: UB 64 KiB", vector_cores=48,
                               ai_cores=24, ub_bytes=65536)
    monkeypatch.setitem(platforms._REGISTRY, small.name, small)
    record = w8a8.ASCEND.replace(name="ascend-test-ub-64k", platform=small.name)
    backend = type("TorchCpuSmallUb", (TorchCpuBackend,), {"numerics": record})()
    x = np.random.default_rng(0).normal(0, 1, (32, 8192)).astype(BF16)   # 32 rows, one amax each
    assert w8a8.variants.select("dynamic_quant", x, numerics=record).key == 6
    assert w8a8.variants.select("dynamic_quant", x).key == 10
    _, want = w8a8.dynamic_quant(x, numerics=record)
    _, got = backend.dynamic_quant(x)
    _, a3 = TorchCpuBackend().dynamic_quant(x)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert a3.view(np.uint32).tolist() != want.view(np.uint32).tolist()   # the two formulas differ here
