"""Low-bit benchmark cases: the second seed's formats at DeepSeek-V4-Flash's shared-expert W13 shape.

Every case is a GEMM ``[M, K] x [K, N]`` with K = H = 4096 and N = 2I = 4096 whose weight is stored
in the format (INT4 group G = 128 for W4A16 and W4A8, MXFP4, NVFP4, FP8 128x128 blocks); the
activation side is what the serving path feeds the kernel (bf16 for W4A16 and W4A8, already
quantized for the block-scaled formats). Useful work is 2*M*K*N.

The block-scaled float formats are computed exactly in float64 by both the golden and torch-cpu
(each product of two decoded elements and their scales is exact in float64; ``w8a8.lowbit.mx``),
so their "% of peak" is against the fp64 FMA ceiling whatever the backend declares; W4A16 runs a
float64 GEMM too. W4A8 runs the integer GEMM (int8 units on torch-cpu, fp32 BLAS in the golden).
"""

from __future__ import annotations

import numpy as np

from .cases import DECODE_M, PREFILL_M, BenchCase, H, I, factory, register

K, N = H, 2 * I


def _f32(rng, shape, scale=1.0):
    return rng.standard_normal(shape).astype(np.float32) * np.float32(scale)


@factory
def w4a16_case(m: int, k: int = K, n: int = N, group: int = 128, tags=()) -> BenchCase:
    """``weight_quant_batchmatmul``: bf16 x, int4 weight packed 8 per int32 along N, per-group bf16 scale."""
    def build(rng):
        import w8a8

        x = _f32(rng, (m, k)).astype(w8a8.bfloat16)
        w = w8a8.convert_weight_to_int4pack(rng.integers(-8, 8, size=(k, n)).astype(np.int32))
        scale = rng.uniform(1e-3, 2e-2, size=(k // group, n)).astype(np.float32).astype(w8a8.bfloat16)
        return (x, w, scale), {"antiquant_group_size": group}

    return BenchCase("weight_quant_batchmatmul", f"W4A16-G{group}-M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n}, build,
                     work=2.0 * m * k * n, tags=tags, compute="fp64")


@factory
def w4a8_case(m: int, k: int = K, n: int = N, tags=()) -> BenchCase:
    """``w4a8_dynamic_linear``: bf16 x quantized per token, int4 codes ``[N, K]``, one scale per 256 of K."""
    def build(rng):
        import w8a8

        x = _f32(rng, (m, k)).astype(w8a8.bfloat16)
        w = rng.integers(-8, 8, size=(n, k)).astype(np.int8)
        ws = rng.uniform(1e-3, 1e-2, size=(n, k // 256)).astype(np.float32)
        return (x, w, ws), {}

    return BenchCase("w4a8_dynamic_linear", f"M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n}, build,
                     work=2.0 * m * k * n, tags=tags)


def _block_scaled_case(op: str, label: str, m: int, k: int, n: int, quantize, tags) -> BenchCase:
    """A GEMM of two block-scaled operands: ``quantize(a [M, K], b [N, K]) -> args``, bf16 output."""
    def build(rng):
        return quantize(_f32(rng, (m, k)), _f32(rng, (n, k), 0.02)), {"output_dtype": "bfloat16"}

    return BenchCase(op, label, {"m": m, "k": k, "n": n}, build, work=2.0 * m * k * n, tags=tags, compute="fp64")


def _mxfp4_operands(a, b):
    import w8a8

    return (*w8a8.mx_quantize(a), *w8a8.mx_quantize(b))


def _nvfp4_operands(a, b):
    import w8a8

    sa, sb = np.float32(np.abs(a).max() / 2688), np.float32(np.abs(b).max() / 2688)
    return (*w8a8.nvfp4_quantize(a, per_tensor_scale=sa), *w8a8.nvfp4_quantize(b, per_tensor_scale=sb),
            np.float32(sa * sb))


def _fp8_block_operands(a, b):
    import w8a8

    return (*w8a8.per_token_group_quant_fp8(a), *w8a8.fp8_block_quantize(b))


@factory
def mxfp4_case(m: int, k: int = K, n: int = N, tags=()) -> BenchCase:
    """``mx_matmul``: both operands MXFP4 (E2M1, E8M0 scale per 32, FLOOR), bf16 output."""
    return _block_scaled_case("mx_matmul", f"MXFP4-M{m}xK{k}xN{n}", m, k, n, _mxfp4_operands, tags)


@factory
def nvfp4_case(m: int, k: int = K, n: int = N, tags=()) -> BenchCase:
    """``nvfp4_matmul``: both operands NVFP4 (E2M1, E4M3 scale per 16, fp32 tensor scale amax/2688)."""
    return _block_scaled_case("nvfp4_matmul", f"M{m}xK{k}xN{n}", m, k, n, _nvfp4_operands, tags)


@factory
def fp8_block_case(m: int, k: int = K, n: int = N, tags=()) -> BenchCase:
    """``fp8_block_matmul``: 1x128 E4M3 activations, 128x128-block E4M3 weight (DeepSeek-V3)."""
    return _block_scaled_case("fp8_block_matmul", f"M{m}xK{k}xN{n}", m, k, n, _fp8_block_operands, tags)


@register
def lowbit_cases(full: bool) -> list[BenchCase]:
    """Decode M = 16 in the quick set; every DSV4 M in the full run (prefill M = 4096 only for the
    integer paths: the float64 formats would take minutes per round in the golden)."""
    cases: list[BenchCase] = []
    for m in (DECODE_M + PREFILL_M if full else (16,)):
        tags = ("dsv4", "lowbit") + (("quick",) if m == 16 else ())
        cases.append(w4a8_case(m, tags=tags))
        if m <= 512:
            for make in (w4a16_case, mxfp4_case, nvfp4_case, fp8_block_case):
                cases.append(make(m, tags=tags))
    return cases
