"""Benchmark cases: ops at the shapes that matter.

DeepSeek-V4-Flash: hidden H = 4096, moe_intermediate I = 2048, E = 256 routed experts + 1 shared,
top-6. Dense Linear shapes are those of the shared expert (W13: K = H, N = 2I; W2: K = I, N = H);
the MoE layer uses the routed experts. M is the number of tokens: decode M in {1, 16, 64}, prefill
M in {512, 4096}. A small grid (M x K x N, E, top-k) feeds the scaling study.

Each :class:`BenchCase` builds its inputs deterministically from a seed and states its useful work
(2*M*K*N for a GEMM; for the MoE layer only the routed rows that exist, plus the shared expert) so
that throughput is comparable across backends and shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

H, I, E, TOP_K = 4096, 2048, 256, 6
DECODE_M = (1, 16, 64)
PREFILL_M = (512, 4096)


@dataclass
class BenchCase:
    op: str
    label: str
    params: dict
    build: Callable[[np.random.Generator], tuple[tuple, dict]]
    work: float  # useful operations (int8 MACs x 2, or elements for elementwise ops)
    unit: str = "OPS"  # "OPS" -> TOPS in tables; "elem" -> G elements/s
    tags: tuple = field(default_factory=tuple)  # "quick", "dsv4", "grid", "scaling:<axis>"
    recipe: tuple | None = None  # ("module:factory", args, kwargs): how another process rebuilds it
    compute: str | None = None  # the units the work runs on whatever the backend declares ("fp64"), or None

    @property
    def name(self) -> str:
        return f"{self.op}[{self.label}]"


def factory(fn):
    """Mark a BenchCase factory: its cases carry the recipe to rebuild them in a worker process."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        case = fn(*args, **kwargs)
        case.recipe = (f"{fn.__module__}:{fn.__qualname__}", args, kwargs)
        return case

    return wrapper


def rebuild(recipe: tuple) -> BenchCase:
    import importlib

    target, args, kwargs = recipe
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)(*args, **kwargs)


def _bf16(rng, shape, scale=1.0):
    from w8a8 import bfloat16

    return (rng.standard_normal(shape).astype(np.float32) * np.float32(scale)).astype(bfloat16)


def _int8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def _weights(rng, n, k):
    import w8a8

    return w8a8.quantize_weight_per_channel(rng.standard_normal((n, k)).astype(np.float32) * np.float32(0.02))[:2]


@factory
def dynamic_quant_case(m: int, h: int = H, tags=()) -> BenchCase:
    return BenchCase("dynamic_quant", f"M{m}xH{h}", {"m": m, "h": h},
                     lambda rng: ((_bf16(rng, (m, h)),), {}), work=m * h, unit="elem", tags=tags)


@factory
def quant_matmul_case(m: int, k: int, n: int, tags=(), scale_dtype: str = "bfloat16") -> BenchCase:
    """The per-token W8A8 GEMM: bf16 output, per-channel scale (bf16 as served, or fp32) x fp32 per-token."""
    def build(rng):
        from w8a8 import dtypes

        scale = rng.uniform(1e-3, 2e-3, n).astype(np.float32).astype(dtypes.resolve(scale_dtype))
        pt = rng.uniform(1e-3, 2e-3, m).astype(np.float32)
        return (_int8(rng, (m, k)), _int8(rng, (k, n)), scale), {"pertoken_scale": pt, "output_dtype": "bfloat16"}

    label = f"M{m}xK{k}xN{n}" + ("" if scale_dtype == "bfloat16" else f"-{scale_dtype}-scale")
    return BenchCase("quant_matmul", label, {"m": m, "k": k, "n": n}, build, work=2.0 * m * k * n, tags=tags)


@factory
def int_matmul_case(m: int, k: int, n: int, tags=()) -> BenchCase:
    return BenchCase("int_matmul", f"M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n},
                     lambda rng: ((_int8(rng, (m, k)), _int8(rng, (k, n))), {}), work=2.0 * m * k * n, tags=tags)


@factory
def dynamic_linear_case(m: int, k: int, n: int, tags=()) -> BenchCase:
    def build(rng):
        w, ws = _weights(rng, n, k)
        return (_bf16(rng, (m, k)), w, ws), {}

    return BenchCase("w8a8_dynamic_linear", f"M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n}, build,
                     work=2.0 * m * k * n, tags=tags)


@factory
def static_linear_case(m: int, k: int, n: int, tags=()) -> BenchCase:
    def build(rng):
        import w8a8

        x = _bf16(rng, (m, k))
        w, ws = _weights(rng, n, k)
        s_in, o_in = w8a8.calibrate_activation_per_tensor(x)
        deq, qb = w8a8.static_params(w, ws, s_in, o_in)
        return (x, w), {"input_scale": s_in, "input_offset": o_in, "deq_scale": deq, "quant_bias": qb}

    return BenchCase("w8a8_static_linear", f"M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n}, build,
                     work=2.0 * m * k * n, tags=tags)


_REGISTRY: list[Callable[[bool], list[BenchCase]]] = []


def register(fn: Callable[[bool], list[BenchCase]]) -> Callable[[bool], list[BenchCase]]:
    """Register a function ``(full: bool) -> [BenchCase]`` (op families add their own)."""
    _REGISTRY.append(fn)
    return fn


@register
def dense_cases(full: bool) -> list[BenchCase]:
    ms = DECODE_M + PREFILL_M if full else (16, 512)
    cases: list[BenchCase] = []
    for m in ms:
        quick = ("quick",) if m in (16, 512) else ()
        dsv4 = ("dsv4",) + quick
        cases.append(dynamic_quant_case(m, H, dsv4 + ("scaling:M",)))
        cases.append(quant_matmul_case(m, H, 2 * I, dsv4))
        cases.append(dynamic_linear_case(m, H, 2 * I, dsv4 + ("scaling:M",)))   # shared expert W13
        cases.append(dynamic_linear_case(m, I, H, dsv4))                         # shared expert W2
        cases.append(static_linear_case(m, H, 2 * I, dsv4))
        cases.append(int_matmul_case(m, H, 2 * I, dsv4))
    if full:  # the trend grid: K and N at fixed M
        for k in (1024, 2048, 4096, 8192):
            cases.append(dynamic_linear_case(512, k, 2048, ("grid", "scaling:K")))
        for n in (1024, 2048, 4096, 8192):
            cases.append(dynamic_linear_case(512, 2048, n, ("grid", "scaling:N")))
    return cases


def all_cases(full: bool) -> list[BenchCase]:
    import importlib

    for module in ("bench.moe_cases", "bench.lowbit_cases"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    seen, out = set(), []
    for fn in _REGISTRY:
        for c in fn(full):
            if c.name not in seen:
                seen.add(c.name)
                out.append(c)
    return out
