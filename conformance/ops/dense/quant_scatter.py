"""``quant_scatter`` (npu_quant_scatter): ``updates`` quantized to int8 (``fp32(u) / fp32(s) + fp32(z)``, round
half to even, saturating) and written into a copy of ``input`` at the segments ``indices`` names."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from w8a8 import dtypes as _dt

from ... import strategies as S
from ...declare import DROP, BadCall, Case, OpDecl, declare, outputs, varied
from ...values import float_tensor, int8_tensor, literal, positive_scales, rng_for

OP = "quant_scatter"
BF16, F16 = np.dtype(_dt.bfloat16), np.dtype(np.float16)
AXES = dict(axis=-2, quant_axis=-1)


def _row(head, n=32):
    return list(head) + [0] * (n - len(head))


def _bf16_case():
    """input [1, 2, 32] of 7s, 1-D indices [1] (batch row 0 -> input row 0, from position 1 along axis -2)."""
    x = np.full((1, 2, 32), 7, np.int8)
    u = literal([[_row([5, 7, -5, 300, -300, 2, 0.5, 1])]], BF16)
    s = literal([2.0] * 32, BF16)
    z = literal(_row([0, 0, 0, 0, 0, 0.5]), BF16)
    return (x, np.array([1], np.int32), u, s, z), dict(AXES)


def _fp16_case():
    """input [2, 4, 32] of -1s, 2-D indices [[1, 2]]: batch row 0 -> input row 1, positions 2 and 3."""
    x = np.full((2, 4, 32), -1, np.int8)
    u = np.stack([np.full(32, 3.0), np.full(32, -1.0)])[None].astype(F16)
    return (x, np.array([[1, 2]], np.int32), u, np.full(32, 4.0, np.float32), np.full(32, 1, np.int32)), dict(AXES)


def _expected_bf16():
    out = np.full((1, 2, 32), 7, np.int8)
    out[0, 1] = _row([2, 4, -2, 127, -128, 2, 0, 0])
    return out


def _expected_fp16():
    out = np.full((2, 4, 32), -1, np.int8)
    out[1, 2], out[1, 3] = 2, 1
    return out


def _axis1_case():
    x = np.zeros((1, 3, 2, 32), np.int8)
    return (x, np.array([2], np.int32), np.ones((1, 1, 2, 32), BF16), np.ones(32, BF16)), dict(axis=1, quant_axis=-1)


def _expected_axis1():
    out = np.zeros((1, 3, 2, 32), np.int8)
    out[0, 2] = 1
    return out


CASES = [
    Case("bf16_divide_zero_point_round_half_even", _bf16_case, {"y": _expected_bf16()},
         "scale 2: 5/2 = 2.5 -> 2 and -5/2 -> -2 (half to even), 7/2 = 3.5 -> 4, 300/2 = 150 -> 127 and -150 -> "
         "-128 (saturating), 2/2 + zero point 0.5 = 1.5 -> 2, 0.5/2 = 0.25 -> 0, 1/2 = 0.5 -> 0 (even), 0 -> 0; "
         "1-D indices: batch row 0 writes input row 0 from position 1; row 0's position 0 keeps its 7s."),
    Case("fp16_two_d_indices_pick_row_and_start", _fp16_case, {"y": _expected_fp16()},
         "[[1, 2]]: input row 1, positions 2..3 along axis -2; fp16 updates take an fp32 scale (4) and an int32 zero "
         "point (1): 3/4 + 1 = 1.75 -> 2, -1/4 + 1 = 0.75 -> 1; every other element keeps input's -1."),
    Case("axis_1_of_a_4d_input", _axis1_case, {"y": _expected_axis1()},
         "axis 1 (not the default -2) of a 4-D input: [1, 1, 2, 32] ones / 1 -> 1 written at position 2 of dim 1."),
]


def _bad(name, raises, match, why="", args=None, **kwargs):
    return BadCall(name, lambda: varied(_bf16_case, args, **kwargs), raises, f"quant_scatter: argument {match}", why)


_X = np.full((1, 2, 32), 7, np.int8)
_U = literal([[_row([1.0])]], BF16)

BAD_CALLS = [
    _bad("input_dtype", TypeError, r"'input' must be of dtype int8", args={0: _X.astype(np.int16)}),
    _bad("input_rank", ValueError, r"'input' must be 3-D to 8-D", args={0: _X[0]}),
    _bad("indices_dtype", TypeError, r"'indices' must be of dtype int32 or int64", args={1: np.array([1], np.int16)}),
    _bad("indices_pairs", ValueError, r"'indices' must be \[B\] or \[B, 2\]", args={1: np.array([[0, 1, 0]], np.int32)}),
    _bad("updates_dtype", TypeError, r"'updates' must be of dtype", args={2: _U.astype(np.float32)}),
    _bad("updates_rank", ValueError, r"'updates' must be 3-D", args={2: _U[0]}),
    _bad("updates_batch", ValueError, r"'updates' must be of first dim indices.shape\[0\] = 2",
         args={1: np.array([0, 1], np.int32)}),
    _bad("axis_first", ValueError, r"'axis' must be neither the first nor the last dim", axis=0),
    _bad("axis_last", ValueError, r"'axis' must be neither the first nor the last dim", axis=-1),
    _bad("axis_type", TypeError, r"'axis' must be an integer", axis=1.0),
    _bad("quant_axis_not_last", ValueError, r"'quant_axis' must be the last dim", quant_axis=1),
    _bad("torch_npu_defaults", ValueError, r"'axis' must be neither the first nor the last dim", axis=DROP,
         quant_axis=DROP, why="torch_npu's defaults axis=0, quant_axis=1 break its own documented rules"),
    _bad("reduce", ValueError, r"'reduce' must be one of \('update',\)", reduce="add"),
    _bad("updates_more_batch_rows_than_input", ValueError, r"'updates' must be of first dim at most input.shape\[0\]",
         args={1: np.array([0, 0], np.int32), 2: np.concatenate([_U, _U])}),
    _bad("updates_axis_too_long", ValueError, r"'updates' must be of dim 1 at most input's 2",
         args={1: np.array([0], np.int32), 2: literal(np.ones((1, 3, 32)), BF16)}),
    _bad("updates_other_dim", ValueError, r"'updates' must be of input's dims",
         args={0: np.zeros((1, 2, 64), np.int8)}),
    _bad("input_not_32_byte_aligned", ValueError, r"'input' must be of last dim a multiple of 32",
         args={0: np.zeros((1, 2, 16), np.int8), 2: literal(np.ones((1, 1, 16)), BF16),
               3: literal(np.ones(16), BF16), 4: literal(np.zeros(16), BF16)}),
    _bad("scales_dtype_for_bf16", TypeError, r"'quant_scales' must be of dtype bfloat16",
         args={3: np.ones(32, np.float32)}, why="bf16 updates take bf16 scales (the vendor dtype table)"),
    _bad("scales_size", ValueError, r"'quant_scales' must be of 32 elements", args={3: literal(np.ones(16), BF16)}),
    _bad("zero_points_dtype", TypeError, r"'quant_zero_points' must be of dtype bfloat16",
         args={4: np.zeros(32, np.int32)}),
    _bad("zero_points_size", ValueError, r"'quant_zero_points' must be of 32 elements",
         args={4: literal(np.zeros(1), BF16)}),
    _bad("start_out_of_range", ValueError, r"'indices' must be starts in \[0, 1\]", args={1: np.array([2], np.int32)},
         why="input.shape[1] - updates.shape[1] = 1: a segment from 2 would write past the end (the device does "
             "not check)"),
    _bad("negative_start", ValueError, r"'indices' must be starts in \[0, 1\]", args={1: np.array([-1], np.int32)}),
    _bad("row_out_of_range", ValueError, r"'indices' must be rows \(column 0\) in \[0, 0\]",
         args={1: np.array([[1, 0]], np.int32)}),
    _bad("overlapping_segments", ValueError, r"'indices' must be segments that do not overlap.*row 0: starts 0 and 1",
         args={0: np.zeros((1, 4, 32), np.int8), 1: np.array([[0, 0], [0, 1]], np.int32),
               2: literal(np.ones((2, 2, 32)), BF16)}),
    _bad("nan_update", ValueError, r"'updates' must be finite", args={2: literal([[_row([np.nan])]], BF16)}),
    _bad("zero_scale", ValueError, r"'quant_scales' must be non-zero", args={3: literal([0.0] + [1.0] * 31, BF16)}),
    _bad("inf_scale", ValueError, r"'quant_scales' must be finite", args={3: literal([np.inf] + [1.0] * 31, BF16)}),
]


@st.composite
def _params(draw):
    nd = draw(st.sampled_from((3, 4)))
    return {"nd": nd, "axis": -2 if nd == 3 else draw(st.sampled_from((1, 2, -2))),
            "b": draw(S.size(8, big=())), "extra_rows": draw(st.integers(0, 3)), "s": draw(S.size(17, big=())),
            "m": draw(st.integers(1, 3)), "d": draw(S.multiple_of(32, 4)), "two_d": draw(st.booleans()),
            "dtype": draw(S.half_dtype()), "zero_points": draw(st.booleans()),
            "dist": draw(S.float_dist(allow_nan=False)), "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    b, s, d = p["b"], p["s"], p["d"]
    u_len = int(rng.integers(1, s + 1))
    axis = p["axis"] % p["nd"]
    dims = [b + p["extra_rows"], s, d] if p["nd"] == 3 else [b + p["extra_rows"], p["m"], p["m"], d]
    dims[axis] = s
    x = int8_tensor(rng, tuple(dims))
    u_dims = [b] + dims[1:]
    u_dims[axis] = u_len
    dt = BF16 if p["dtype"] == "bfloat16" else F16
    updates = float_tensor(rng, tuple(u_dims), dt, p["dist"])
    starts = rng.integers(0, s - u_len + 1, size=b)
    if p["two_d"]:
        rows = rng.permutation(dims[0])[:b]
        indices = np.stack([rows, starts], axis=1).astype(np.int32)
    else:
        indices = starts.astype(np.int32)
    scale_dt, zp_dt = (BF16, BF16) if dt == BF16 else (np.dtype(np.float32), np.dtype(np.int32))
    scales = positive_scales(rng, (d,), scale_dt, low=1e-3, high=10.0)
    zp = None
    if p["zero_points"]:
        zp = rng.integers(-8, 8, size=d).astype(np.float32).astype(zp_dt)
    return (x, indices, updates, scales, zp), dict(axis=p["axis"], quant_axis=-1)


declare(OpDecl(
    name=OP, family="dense", params=_params, build=_build, outputs=outputs(("y", "int")), cases=CASES,
    bad_calls=BAD_CALLS, description="int8-quantize updates, write them at indices of a copy of input"))
