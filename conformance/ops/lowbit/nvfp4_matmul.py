"""``nvfp4_matmul``: the NVFP4 GEMM ``alpha * (A @ B^T)`` — exact float64 products of decoded elements and
block scales, times ``alpha = S_a * S_b``, rounded once to ``output_dtype``."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, BenchCase, Case, OpDecl, declare, outputs
from ...values import float_tensor, rng_for
from .. import _dsv4
from ._common import E4M3, F32, bench_ms, bench_tags, block_scaled_case, fx, nvfp4_params

OP = "nvfp4_matmul"


def _build(p):
    rng = rng_for(p["seed"], 3)
    a = float_tensor(rng, (p["rows"], 16 * p["blocks"]), "float32", "gaussian")
    b = float_tensor(rng, (7, 16 * p["blocks"]), "float32", "gaussian")
    sa, sb = np.float32(np.abs(a).max() / 2688), np.float32(np.abs(b).max() / 2688)
    ad, abs_ = w8a8.nvfp4_quantize(a, per_tensor_scale=sa)
    bd, bbs = w8a8.nvfp4_quantize(b, per_tensor_scale=sb)
    return (ad, abs_, bd, bbs, np.float32(sa * sb)), {"output_dtype": "bfloat16" if p["dtype"] == "float32"
                                                      else p["dtype"]}


def _vllm(out):
    def build():
        rng = np.random.default_rng(6)
        a = rng.standard_normal((9, 64)).astype(np.float32)
        b = rng.standard_normal((5, 64)).astype(np.float32)
        ga, gb = w8a8.nvfp4_global_scale(np.abs(a).max()), w8a8.nvfp4_global_scale(np.abs(b).max())
        ad, as_ = w8a8.nvfp4_quantize(a, global_scale=ga)
        bd, bs = w8a8.nvfp4_quantize(b, global_scale=gb)
        return (ad, as_, bd, bs, np.float32(1) / (ga * gb)), {"output_dtype": out}
    return build


CASES = [Case(f"vllm_alpha_{out}", _vllm(out),
              why="Operands in vLLM's convention (global scales 2688 / amax): alpha = 1 / (gs_a * gs_b).")
         for out in ("bfloat16", "float16", "float32")]

BAD_CALLS = [
    BadCall("alpha_nonfinite", lambda: ((fx().nd, fx().ns, fx().nd, fx().ns, np.float32(np.inf)), {}),
            ValueError, r"nvfp4_matmul: argument 'alpha' must be a finite fp32 scalar"),
    BadCall("b_block_scale_shape", lambda: ((fx().nd, fx().ns, fx().nd[:, :2], fx().ns[:, :1], fx().one), {}),
            ValueError, r"nvfp4_matmul: argument 'b_block_scale' must be float8_e4m3fn of shape"),
    BadCall(
        "alpha_nonfinite_2",
        lambda: (
            (
                np.full((1, 8), 119, np.uint8),
                np.full((1, 1), 0.171875, E4M3),
                np.full((1, 8), 119, np.uint8),
                np.full((1, 1), 0.171875, E4M3),
                np.array([1.0, 2.0], F32),
            ),
            {},
        ),
        ValueError,
        r"nvfp4_matmul: argument 'alpha' must be a finite fp32 scalar",
    ),
]


def _nvfp4_operands(a, b):
    sa, sb = np.float32(np.abs(a).max() / 2688), np.float32(np.abs(b).max() / 2688)
    return (*w8a8.nvfp4_quantize(a, per_tensor_scale=sa), *w8a8.nvfp4_quantize(b, per_tensor_scale=sb),
            np.float32(sa * sb))


def bench_case(m: int, k: int = _dsv4.H, n: int = 2 * _dsv4.I, tags=()) -> BenchCase:
    """Both operands NVFP4 (E2M1, E4M3 scale per 16, fp32 tensor scale amax/2688), bf16 output."""
    return block_scaled_case(OP, f"M{m}xK{k}xN{n}", m, k, n, _nvfp4_operands, tags)


declare(OpDecl(
    name=OP, family="lowbit", params=nvfp4_params, build=_build, outputs=outputs(("y", "float")),
    cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(m, tags=bench_tags(m)) for m in bench_ms(full) if m <= 512],
    description="NVFP4 GEMM alpha * (A @ B^T)"))
