"""``fp8_block_matmul``: the block-scaled FP8 GEMM of DeepSeek-V3 — 1x128 E4M3 activations against a
128x128-block E4M3 weight, each 128-deep K block's partial sum promoted to fp32 with its two scales."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, BenchCase, Case, OpDecl, declare, outputs, varied
from ...values import float_tensor, rng_for
from .. import _dsv4
from ._common import E4M3, F32, bench_ms, bench_tags, block_scaled_case, fp8_params, fp8_w, fx

OP = "fp8_block_matmul"


def _build(p):
    rng = rng_for(p["seed"], 4)
    a = float_tensor(rng, (min(p["n"], 17), p["k"]), "float32", "gaussian")
    aq, as_ = w8a8.per_token_group_quant_fp8(a, scale_fmt=p["fmt"])
    wq, ws = w8a8.fp8_block_quantize(fp8_w(p), scale_fmt=p["fmt"])
    return (aq, as_, wq, ws), {"output_dtype": "bfloat16"}


def _operands():
    rng = np.random.default_rng(9)
    a = rng.standard_normal((5, 1000)).astype(np.float32)
    w = rng.standard_normal((131, 1000)).astype(np.float32)
    return (*w8a8.per_token_group_quant_fp8(a), *w8a8.fp8_block_quantize(w))


CASES = [
    Case(f"k_1000_n_131_{out}", (lambda out=out: (_operands(), {"output_dtype": out})),
         why="K = 1000 (a partial 8th K block of 104) and N = 131 (a partial second weight block row), "
             f"{out} output.") for out in ("bfloat16", "float32", "float16")] + [
    Case("k_zero", lambda: (tuple(o[:, :0] for o in _operands()), {}),
         {"y": np.zeros((5, 131), np.float32).astype(w8a8.bfloat16)}, "K = 0: an empty sum, zeros."),
]

def _valid():
    """A valid call the bad calls below change one or two arguments of."""
    return (fx().aq, fx().as_, fx().wq, fx().ws), {}


BAD_CALLS = [
    BadCall("block_size_range", lambda: varied(_valid, block_size=0),
            ValueError, r"fp8_block_matmul: argument 'block_size' must be in \[1, inf\]"),
    BadCall("weight_q_shape", lambda: varied(_valid, {2: fx().wq[:, :3]}),
            ValueError, r"fp8_block_matmul: argument 'weight_q' must be of shape \[N, K=64\]"),
    BadCall("a_scale_shape", lambda: varied(_valid, {1: fx().as_[:, :0]}),
            ValueError, r"fp8_block_matmul: argument 'a_scale' must be float32 of shape"),
    BadCall("output_dtype_dtype", lambda: varied(_valid, output_dtype="i"),
            TypeError, r"fp8_block_matmul: argument 'output_dtype' must be a dtype or one of"),
    BadCall(
        "a_scale_shape_2",
        lambda: (
            (
                np.full((2, 3), 448.0, E4M3),
                np.full((1, 1), 0.002232143, F32),
                np.full((4, 3), 448.0, E4M3),
                np.full((1, 1), 0.002232143, F32),
            ),
            {},
        ),
        ValueError,
        r"fp8_block_matmul: argument 'a_scale' must be float32 of shape",
    ),
    BadCall(
        "a_q_dtype",
        lambda: (
            (
                np.full((2, 3), 126, np.uint8),
                np.full((2, 1), 0.002232143, F32),
                np.full((4, 3), 448.0, E4M3),
                np.full((1, 1), 0.002232143, F32),
            ),
            {},
        ),
        TypeError,
        r"fp8_block_matmul: argument 'a_q' must be of dtype float8_e4m3fn",
    ),
    BadCall(
        "output_dtype_value",
        lambda: (
            (
                np.full((2, 3), 448.0, E4M3),
                np.full((2, 1), 0.002232143, F32),
                np.full((4, 3), 448.0, E4M3),
                np.full((1, 1), 0.002232143, F32),
            ),
            {'output_dtype': 'int8'},
        ),
        TypeError,
        r"fp8_block_matmul: argument 'output_dtype' must be float32, bfloat16 or float16",
    ),
    BadCall("block_size_budget", lambda: varied(_valid, {1: np.ones((4, 1), np.float32), 3: np.ones((1, 1), np.float32)},
                                                 block_size=10**10),
            ValueError, r"fp8_block_matmul: argument 'block_size' must be small enough that .* allocation budget of 4294967296 bytes .*; got \(10000000000, 1\) x 4 B"),
    BadCall("a_q_nan_code", lambda: varied(_valid, {0: np.where(np.arange(fx().aq.size).reshape(fx().aq.shape) == 65,
                                                                 np.uint8(0xFF), fx().aq.view(np.uint8)).view(fx().aq.dtype)}),
            ValueError, r"fp8_block_matmul: argument 'a_q' must be finite .*; got NaN at index \(1, 1\)"),
]


def _fp8_block_operands(a, b):
    return (*w8a8.per_token_group_quant_fp8(a), *w8a8.fp8_block_quantize(b))


def bench_case(m: int, k: int = _dsv4.H, n: int = 2 * _dsv4.I, tags=()) -> BenchCase:
    """1x128 E4M3 activations, 128x128-block E4M3 weight (DeepSeek-V3)."""
    return block_scaled_case(OP, f"M{m}xK{k}xN{n}", m, k, n, _fp8_block_operands, tags)


declare(OpDecl(
    name=OP, family="lowbit", params=fp8_params, build=_build, outputs=outputs(("y", "float")),
    cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(m, tags=bench_tags(m)) for m in bench_ms(full) if m <= 512],
    description="block-scaled FP8 GEMM with per-128-K fp32 promotion"))
