"""``int_matmul``: the exact integer GEMM (int8 / uint8 / int16 / int32 operands, int32 result, an
OverflowError where the exact int32 accumulator does not fit)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, declare, outputs
from ...values import int8_tensor, int_tensor, rng_for
from .. import _dsv4
from ._common import bench_int8, I8, W, XF, random_int8

OP = "int_matmul"
BIG = 2**31 - 1


@st.composite
def _params(draw):
    return {"m": draw(S.size(48, big=())), "k": draw(S.size(96, big=(1025, 4097, 5000))),
            "n": draw(S.size(48, big=(1025,))), "batch": draw(st.sampled_from(([], [2], [2, 1]))),
            "dist_a": draw(S.int8_dist()), "dist_b": draw(S.int8_dist()), "seed": draw(S.seed())}


DTYPE_PAIRS = (("int8", "int8"), ("uint8", "int8"), ("int8", "uint8"), ("uint8", "uint8"), ("int16", "int8"),
               ("int16", "int16"), ("int32", "int8"), ("int32", "int32"))


@st.composite
def _bits_params(draw):
    """Every operand dtype pair, batch dims on either side (broadcast), full-range or small values:
    full-range int32 operands mostly overflow, and both sides must then raise."""
    return {"m": draw(st.sampled_from((1, 2, 7, 8, 16, 17, 33))), "k": draw(st.sampled_from((1, 7, 17, 64))),
            "n": draw(st.sampled_from((1, 2, 7, 8, 16, 17, 33))), "dtypes": list(draw(st.sampled_from(DTYPE_PAIRS))),
            "batches": [list(b) for b in draw(st.sampled_from((((), ()), ((3,), ()), ((), (2,)), ((2, 1), (3,)))))],
            "full": draw(st.booleans()), "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    if "dtypes" in p:
        (ba, bb), (da, db) = p["batches"], p["dtypes"]
        a = int_tensor(rng, tuple(ba) + (p["m"], p["k"]), np.dtype(da), full=p["full"])
        b = int_tensor(rng, tuple(bb) + (p["k"], p["n"]), np.dtype(db), full=True)
        return (a, b), {}
    a = int8_tensor(rng, tuple(p["batch"]) + (p["m"], p["k"]), p["dist_a"])
    b = int8_tensor(rng, (p["k"], p["n"]), p["dist_b"])
    return (a, b), {}


def _long_k(k):
    return lambda: ((random_int8(rng_for(k), 3, k), random_int8(rng_for(k, 1), k, 5)), {})


def _all_minus_128(k):
    return lambda: ((np.full((2, k), -128, np.int8), np.full((k, 3), -128, np.int8)), {})


def _alternating():
    a = np.full((1, 131073), -128, np.int8)
    a[0, 1::2] = 127
    return (a, np.full((131073, 2), -128, np.int8)), {}


CASES = [Case(f"long_k_{k}", _long_k(k), why=f"K = {k}: beyond the 1024 / 4096 K tiles, random int8.")
         for k in (1025, 4097, 5000)] + [
    Case(f"all_minus_128_k_{k}", _all_minus_128(k), {"acc": np.full((2, 3), k * 16384, np.int32)},
         f"Every product is (-128)^2 = 16384, so the sum is K * 2^14 = {k * 16384}: beyond 2^24, where a float32 "
         f"accumulator stops being exact.") for k in (1025, 4097, 5000)] + [
    Case("alternating_signs_k_131073", _alternating,
         {"acc": np.full((1, 2), 65537 * 16384 - 65536 * 127 * 128, np.int32)},
         "K = 131073: a = -128 at even k (65537 of them), 127 at odd k (65536); b = -128: 65537 * 16384 - 65536 * "
         "16256 = 1073823744 fits int32, though the all -128 sum would not; a chunked accumulation must stay exact."),
    Case("int32_operands_cancel_beyond_2_53", lambda: ((np.array([[BIG, -BIG, 1]], np.int32),
                                                        np.array([[BIG], [BIG], [1]], np.int32)), {}),
         {"acc": np.array([[1]], np.int32)},
         "(2^31 - 1)^2 - (2^31 - 1)^2 + 1 = 1 exactly: each product is beyond 2^53, so a float64 sum would not be."),
] + [Case(f"empty_{'x'.join(map(str, a))}_{'x'.join(map(str, b))}",
          (lambda a=a, b=b: ((np.ones(a, np.int8), np.ones(b, np.int8)), {})),
          why="A zero-size M, K, N or batch: the result has the broadcast shape, zeros where K = 0.")
     for a, b in (((0, 4), (4, 3)), ((2, 0), (0, 3)), ((2, 4), (4, 0)), ((0, 2, 4), (4, 3)))]

BAD_CALLS = [
    BadCall("a_dtype", lambda: ((XF, W), {}),
            TypeError, r"int_matmul: argument 'a' must be of dtype int8, uint8, int16 or int32"),
    BadCall("b_dtype", lambda: ((I8, W.astype(np.int64)), {}),
            TypeError, r"int_matmul: argument 'b' must be of dtype int8, uint8, int16 or int32"),
    BadCall("a_shape", lambda: ((np.ones(16, np.int8), W), {}),
            ValueError, r"int_matmul: argument 'a' must be at least 2-D"),
    BadCall("b_shape", lambda: ((I8, np.ones((15, 5), np.int8)), {}),
            ValueError, r"int_matmul: argument 'b' must be of shape \[\.\.\., K=16, N\] to match a"),
    BadCall(
        "other",
        lambda: ((np.ones((2, 3, 16), np.int8), np.ones((4, 16, 5), np.int8)), {}),
        ValueError,
        r"shape mismatch: objects cannot be broadcast to a single shape\.  Mismatch is between arg 0 with shape",
    ),
    BadCall("a_dtype_2", lambda: ((np.zeros((2, 3), np.int8).astype(np.float32), np.zeros((3, 2), np.int8)), {}),
            TypeError, r"int_matmul: argument 'a' must be of dtype int8, uint8, int16 or int32"),
    BadCall("b_dtype_2", lambda: ((np.zeros((2, 3), np.int8), np.zeros((3, 2), np.int64)), {}),
            TypeError, r"int_matmul: argument 'b' must be of dtype int8, uint8, int16 or int32"),
    BadCall("a_list", lambda: (([[1, 2, 3]], np.zeros((3, 2), np.int8)), {}),
            TypeError, r"int_matmul: argument 'a' must be a numpy\.ndarray"),
    BadCall("a_shape_2", lambda: ((np.zeros(3, np.int8), np.zeros((3, 2), np.int8)), {}),
            ValueError, r"int_matmul: argument 'a' must be at least 2-D"),
    BadCall("b_shape_2", lambda: ((np.zeros((2, 3), np.int8), np.zeros((4, 2), np.int8)), {}),
            ValueError, r"int_matmul: argument 'b' must be of shape \[\.\.\., K=3, N\] to match a"),
    BadCall(
        "overflow_positive",
        lambda: ((np.full((1, 131072), -128, np.int8), np.full((131072, 1), -128, np.int8)), {}),
        OverflowError,
        r"int_matmul: the int32 accumulator overflows at output index \(0, 0\) \(exact sum 2147483648\)",
        "131072 * 16384 = 2^31: one past int32's maximum (131071 terms fit exactly).",
    ),
    BadCall(
        "overflow_negative",
        lambda: ((np.full((1, 132105), -128, np.int8), np.full((132105, 1), 127, np.int8)), {}),
        OverflowError,
        r"int_matmul: the int32 accumulator overflows at output index \(0, 0\) \(exact sum -2147498880\)",
    ),
    BadCall(
        "batch_not_broadcastable",
        lambda: ((np.zeros((2, 5, 3), np.int8), np.zeros((4, 3, 7), np.int8)), {}),
        ValueError,
        r"shape mismatch: objects cannot be broadcast to a single shape\.  Mismatch is between arg 0 with shape",
    ),
    BadCall(
        "overflow_k_131073",
        lambda: ((np.full((1, 131073), -128, np.int8), np.full((131073, 2), -128, np.int8)), {}),
        OverflowError,
        r"int_matmul: the int32 accumulator overflows at output index \(0, 0\) " r"\(exact sum 2147500032\)",
        "All -128 at K = 131073: 131073 * 16384 = 2147500032 > 2^31 - 1.",
    ),
    BadCall("overflow_int32_operands", lambda: ((np.array([[BIG, BIG]], np.int32), np.array([[1], [1]], np.int32)), {}),
            OverflowError, r"int_matmul: the int32 accumulator overflows at output index \(0, 0\) "
                           r"\(exact sum 4294967294\)"),
    # the result's size comes from the shapes: [2^16, 0] @ [0, 2^15] holds no data but asks 8 GiB.
    BadCall("result_budget", lambda: ((np.zeros((1 << 16, 0), np.int8), np.zeros((0, 1 << 15), np.int8)), {}),
            ValueError, r"int_matmul: argument 'b' must be small enough that .* allocation budget of 4294967296 bytes .*; got \(65536, 32768\) x 4 B = 8589934592 bytes"),
]


def _bench_inputs(p, rng):
    return (bench_int8(rng, p["m"], p["k"]), bench_int8(rng, p["k"], p["n"])), {}


def bench_case(m: int, k: int, n: int, tags=()) -> BenchCase:
    return BenchCase(OP, f"M{m}xK{k}xN{n}", {"m": m, "k": k, "n": n}, _bench_inputs, work=2.0 * m * k * n, tags=tags)


declare(OpDecl(
    name=OP, family="dense", params=_params, build=_build, strategies={"bits": _bits_params},
    outputs=outputs(("acc", "int")), cases=CASES, bad_calls=BAD_CALLS,
    bench=lambda full: [bench_case(m, _dsv4.H, 2 * _dsv4.I, _dsv4.tags(m)) for m in _dsv4.token_counts(full)],
    description="exact int8 x int8 -> int32 GEMM"))
