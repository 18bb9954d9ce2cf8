"""``trans_quant_param`` (npu_trans_quant_param): an fp32 scale packed as FP19 (13 low mantissa bits
dropped: truncated, or rounded to nearest even with ``round_mode=1``), the bit-46 flag, and a 9-bit
two's-complement offset at bits 37..45, into an int64."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs
from ...values import literal as a, rng_for

OP = "trans_quant_param"
FLAG = 1 << 46


@st.composite
def _params(draw):
    return {"n": draw(S.size(64, big=())), "offset": draw(st.sampled_from(("none", "vector", "scalar"))),
            "round_mode": draw(st.sampled_from((0, 1))), "two_d": draw(st.booleans()), "seed": draw(S.seed())}


@st.composite
def _bits_params(draw):
    """Every fp32 bit pattern as the scale (NaN, Inf, subnormals, the rounding carry), [1, N] / [N, 1]
    / [2, 5] shapes, offsets on .5 ties beyond the 9-bit range [-256, 255] with a NaN among them, or
    one offset for a 1-D scale."""
    return {"shape": list(draw(st.sampled_from(((1,), (7,), (1, 17), (3, 1), (2, 5))))),
            "round_mode": draw(st.sampled_from((0, 1))), "offset": draw(st.sampled_from(("none", "same", "one"))),
            "seed": draw(S.seed())}


def _bits_build(p):
    rng = rng_for(p["seed"])
    shape = tuple(p["shape"])
    scale = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32).view(np.float32)
    off = None
    if p["offset"] == "same":
        off = (rng.integers(-600, 600, shape) / 2.0).astype(np.float32)
        off.reshape(-1)[0] = np.nan
    elif p["offset"] == "one" and len(shape) == 1:
        off = np.float32([rng.integers(-300, 300) + 0.5])
    return (scale, off), {"round_mode": p["round_mode"]}


def _build(p):
    if "shape" in p:
        return _bits_build(p)
    rng = rng_for(p["seed"])
    raw = rng.integers(0, 1 << 32, size=(p["n"],), dtype=np.uint64).astype(np.uint32)
    # random mantissas, exponents in a scale-like range, plus edge values (carry, zero, subnormal)
    exp = rng.integers(100, 135, size=p["n"]).astype(np.uint32)
    bits = (raw & np.uint32(0x807FFFFF)) | (exp << np.uint32(23))
    scale = bits.view(np.float32).copy()
    edges = np.array([1.0, 0.0123456, np.float32(1.9999999), 1e-40, 0.0, 3.0e38], np.float32)
    scale[: min(p["n"], edges.size)] = edges[: min(p["n"], edges.size)]
    if p["two_d"]:
        scale = scale.reshape(1, -1)
    kw = {"round_mode": p["round_mode"]}
    if p["offset"] == "vector":
        off = rng.uniform(-300, 300, size=scale.shape).astype(np.float32)
        off.flat[0] = 2.5
        return (scale, off), kw
    if p["offset"] == "scalar" and not p["two_d"]:
        return (scale, np.array([rng.uniform(-20, 20)], np.float32)), kw
    return (scale,), kw


def _bits(*words):
    return np.array(words, np.uint32).view(np.float32)


CASES = [
    Case("one", lambda: ((a([1.0], np.float32),), {}), {"packed": np.array([0x0000_4000_3F80_0000], np.int64)},
         "1.0f = 0x3F800000 (low mantissa bits already zero) | bit 46 (0x4000_0000_0000) flag."),
    Case("one_offset_minus_3", lambda: ((a([1.0], np.float32), a([-3.0], np.float32)), {}),
         {"packed": np.array([0x0000_7FA0_3F80_0000], np.int64)},
         "offset -3 -> 9-bit two's complement 0x1FD, << 37 = 0x3FA0_0000_0000; | flag | 0x3F800000."),
    Case("offsets_zero_and_minus_3", lambda: ((a([1.0, 1.0], np.float32), a([0.0, -3.0], np.float32)), {}),
         {"packed": np.array([0x4000_3F80_0000, 0x7FA0_3F80_0000], np.int64)},
         "1.0 -> 0x3F800000 | 1 << 46; offset 0 adds nothing, offset -3 -> (-3 & 0x1FF) << 37 = 0x1FD << 37 = "
         "0x3FA0_0000_0000."),
    Case("fp19_truncation", lambda: ((a([1.0009765], np.float32),), {}),
         {"packed": np.array([0x0000_4000_3F80_0000], np.int64)},
         "1.0009765f = 0x3F801FFF: its mantissa bits 0..12 are all set and truncation (round_mode 0) clears them "
         "to 1.0: the largest possible FP19 error, just under 2^-10 relative."),
    Case("fp19_round_even_carry", lambda: ((a([1.0009765], np.float32),), {"round_mode": 1}),
         {"packed": np.array([0x0000_4000_3F80_2000], np.int64)},
         "round_mode 1: the dropped bits 0x1FFF exceed half (0x1000), so the kept mantissa rounds up by 0x2000: "
         "0x3F802000 = 1.0009766f."),
    Case("fp19_round_mode_1_above_half_and_tie", lambda: ((_bits(0x3F803000, 0x3F801000),), {"round_mode": 1}),
         {"packed": np.array([FLAG | 0x3F804000, FLAG | 0x3F800000], np.int64)},
         "round_mode 1 on 1 + 2^-10 + 2^-11 (0x3F803000): dropped bits 0x1000 with kept LSB (bit 13) set -> an exact "
         "tie with an odd kept mantissa rounds up to 0x3F804000; 1 + 2^-11 (0x3F801000): an exact tie with an even "
         "kept LSB stays 0x3F800000."),
    Case("fp19_round_mode_0_truncates", lambda: ((_bits(0x3F803000, 0x3F801000),), {"round_mode": 0}),
         {"packed": np.array([FLAG | 0x3F802000, FLAG | 0x3F800000], np.int64)},
         "round_mode 0 clears the 13 low bits: 0x3F803000 -> 0x3F802000, 0x3F801000 -> 0x3F800000."),
    Case("offset_ties", lambda: ((a([1.0, 1.0], np.float32), a([2.5, 3.5], np.float32)), {}),
         {"packed": np.array([0x0000_4000_3F80_0000 | (2 << 37), 0x0000_4000_3F80_0000 | (4 << 37)], np.int64)},
         "Offsets round half to even before packing: 2.5 -> 2, 3.5 -> 4."),
]

BAD_CALLS = [
    BadCall("scale_dtype", lambda: ((np.float16([1.0]),), {}),
            TypeError, r"trans_quant_param: argument 'scale' must be of dtype float32"),
    BadCall("scale_shape", lambda: ((np.ones((1, 1, 2), np.float32),), {}),
            ValueError, r"trans_quant_param: argument 'scale' must be 1-D to 2-D"),
    BadCall("round_mode_choice", lambda: ((np.float32([1.0]),), {"round_mode": 2}),
            ValueError, r"trans_quant_param: argument 'round_mode' must be one of"),
    BadCall("offset_shape", lambda: ((np.ones(3, np.float32), np.ones(2, np.float32)), {}),
            ValueError, r"trans_quant_param: argument 'offset' must be 1-D of size 3 or 1"),
    BadCall("offset_shape_2", lambda: ((np.ones((2, 3), np.float32), np.ones((1, 3), np.float32)), {}),
            ValueError, r"trans_quant_param: argument 'offset' must be of the scale's shape"),
    BadCall("offset_dtype", lambda: ((np.ones(3, np.float32), np.ones(3, np.float64)), {}),
            TypeError, r"trans_quant_param: argument 'offset' must be of dtype float32"),
    BadCall("scale_dtype_2", lambda: ((np.ones(3, np.float16),), {}),
            TypeError, r"trans_quant_param: argument 'scale' must be of dtype float32"),
    BadCall("scale_dtype_3", lambda: ((np.ones(3, np.float64),), {}),
            TypeError, r"trans_quant_param: argument 'scale' must be of dtype float32"),
    BadCall("scale_list", lambda: (([1.0],), {}),
            TypeError, r"trans_quant_param: argument 'scale' must be a numpy\.ndarray"),
    BadCall("scale_shape_2", lambda: ((np.ones((1, 1, 3), np.float32),), {}),
            ValueError, r"trans_quant_param: argument 'scale' must be 1-D to 2-D"),
    BadCall("scale_shape_3", lambda: ((np.ones((), np.float32),), {}),
            ValueError, r"trans_quant_param: argument 'scale' must be 1-D to 2-D"),
    BadCall("offset_dtype_2", lambda: ((np.ones(3, np.float32), np.ones(3, np.float16)), {}),
            TypeError, r"trans_quant_param: argument 'offset' must be of dtype float32"),
    BadCall("offset_shape_3", lambda: ((np.ones(3, np.float32), np.ones(2, np.float32)), {}),
            ValueError, r"trans_quant_param: argument 'offset' must be 1-D of size 3 or 1"),
    BadCall("offset_shape_4", lambda: ((np.ones((2, 3), np.float32), np.ones(3, np.float32)), {}),
            ValueError, r"trans_quant_param: argument 'offset' must be of the scale's shape"),
    BadCall("round_mode_choice_2", lambda: ((np.ones(3, np.float32),), dict(round_mode=2)),
            ValueError, r"trans_quant_param: argument 'round_mode' must be one of"),
    # nan_policy="raise": a NaN / Inf scale would pack exponent 255 into the fix-pipe word (unspecified on
    # the device), a NaN offset silently 0: both refused, naming the argument and index.
    BadCall("scale_nan", lambda: ((np.float32([1.0, np.nan]),), {}),
            ValueError, r"trans_quant_param: argument 'scale' must be finite .*; got NaN at index \(1,\)"),
    BadCall("scale_inf_2d", lambda: ((np.float32([[1.0, -np.inf]]),), {}),
            ValueError, r"trans_quant_param: argument 'scale' must be finite .*; got Inf at index \(0, 1\)"),
    BadCall("offset_nan", lambda: ((np.ones(3, np.float32), np.float32([np.nan])), {}),
            ValueError, r"trans_quant_param: argument 'offset' must be finite .*; got NaN at index \(0,\)"),
]

declare(OpDecl(
    name=OP, family="dense", params=_params, build=_build, strategies={"bits": _bits_params},
    outputs=outputs(("packed", "int")), numerics_fields=(), cases=CASES, bad_calls=BAD_CALLS,
    description="FP19 + bit-46 + 9-bit offset packing (npu_trans_quant_param)"))
