"""``mx_matmul``: the block-scaled MX GEMM ``A @ B^T`` — each product of two decoded elements and their
scales is exact in float64, summed per row, rounded once to ``output_dtype``."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, BenchCase, Case, OpDecl, declare, outputs
from ...values import float_tensor, rng_for
from .. import _dsv4
from ._common import bench_ms, bench_tags, block_scaled_case, fx, mx_params

OP = "mx_matmul"


def _build(p):
    rng = rng_for(p["seed"], 2)
    a = float_tensor(rng, (p["rows"], 32 * p["blocks"]), "float32", "gaussian")
    b = float_tensor(rng, (max(1, p["blocks"] * 3), 32 * p["blocks"]), "float32", "gaussian")
    ad, as_ = w8a8.mx_quantize(a, elem_dtype=p["elem"], scale_mode=p["mode"])
    bd, bs = w8a8.mx_quantize(b, elem_dtype=p["elem"], scale_mode=p["mode"])
    return (ad, as_, bd, bs), {"elem_dtype": p["elem"], "output_dtype": p["dtype"]}


def _mixed(a_elem, b_elem, out, nan_row):
    def build():
        rng = np.random.default_rng(4)
        a = rng.standard_normal((17, 96)).astype(np.float32)
        b = rng.standard_normal((7, 96)).astype(np.float32)
        ad, as_ = w8a8.mx_quantize(a, elem_dtype=a_elem)
        bd, bs = w8a8.mx_quantize(b, elem_dtype=b_elem, scale_mode="rceil")
        if nan_row:
            as_[3, 1] = 255  # a NaN scale: row 3 is NaN
        return (ad, as_, bd, bs), {"elem_dtype": a_elem, "b_elem_dtype": b_elem, "output_dtype": out}
    return build


CASES = [
    Case(f"mixed_{a}_{b}_{out}{'_nan_scale_row_3' if nan else ''}", _mixed(a, b, out, nan),
         why=f"A in {a}, B in {b} (RCEIL scales), {out} output" + ("; a NaN scale byte in A's row 3 makes the "
                                                                  "whole row 3 of y NaN." if nan else "."))
    for a, b in (("e2m1", "e2m1"), ("e4m3", "e2m1"), ("e5m2", "e5m2"), ("e4m3", "e5m2"))
    for out in ("float32", "bfloat16", "float16") for nan in (False, True)]

BAD_CALLS = [
    BadCall("b_scale_shape", lambda: ((fx().d, fx().s2, fx().d[:, :8], fx().s2[:, :1]), {}),
            ValueError, r"mx_matmul: argument 'b_scale' must be of shape"),
    BadCall("b_elem_dtype_value", lambda: ((fx().d, fx().s2, fx().d, fx().s2), {"b_elem_dtype": "zz"}),
            ValueError, r"mx_matmul: argument 'b_elem_dtype' must be 'e2m1'"),
    BadCall("b_data_shape", lambda: ((fx().d[0], fx().s2[0], fx().d, fx().s2), {}),
            ValueError, r"mx_matmul: argument 'b_data' must be a 2-D \[N, K\] operand with K = 64"),
    BadCall(
        "b_data_shape_2",
        lambda: (
            (
                np.full((2, 32), 102, np.uint8),
                np.full((2, 2), 125, np.uint8),
                np.full((2, 16), 102, np.uint8),
                np.full((2, 1), 125, np.uint8),
            ),
            {},
        ),
        ValueError,
        r"mx_matmul: argument 'b_data' must be a 2-D \[N, K\] operand with K = 64",
    ),
]


def _mxfp4_operands(a, b):
    return (*w8a8.mx_quantize(a), *w8a8.mx_quantize(b))


def bench_case(m: int, k: int = _dsv4.H, n: int = 2 * _dsv4.I, tags=()) -> BenchCase:
    """Both operands MXFP4 (E2M1, E8M0 scale per 32, FLOOR), bf16 output."""
    return block_scaled_case(OP, f"MXFP4-M{m}xK{k}xN{n}", m, k, n, _mxfp4_operands, tags)


declare(OpDecl(
    name=OP, family="lowbit", params=mx_params, build=_build, outputs=outputs(("y", "float")),
    cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(m, tags=bench_tags(m)) for m in bench_ms(full) if m <= 512],
    description="block-scaled MX GEMM A @ B^T"))
