"""``swiglu`` (npu_swiglu): ``silu(first half) * second half`` along ``dim`` in fp32, rounded to x's dtype."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs
from ...values import float_tensor, rng_for
from ._common import BF16, F32

OP = "swiglu"


@st.composite
def _params(draw):
    return {"lead": draw(S.lead_shape(24)), "h": draw(S.size(64, big=(1025,))),
            "dtype": draw(st.sampled_from(("float32", "float16", "bfloat16"))),
            "dim_first": draw(st.booleans()), "dist": draw(S.float_dist(allow_nan=False, edges=False)),
            "seed": draw(S.seed())}


def _build(p):
    x = float_tensor(rng_for(p["seed"]), tuple(p["lead"]) + (2 * p["h"],), p["dtype"], p["dist"])
    x = np.clip(x.astype(np.float32), -80, 80).astype(x.dtype)
    if p["dim_first"] and len(p["lead"]) >= 1:
        return (np.ascontiguousarray(np.moveaxis(x, -1, 0)),), {"dim": 0}
    return (x,), {}


_EXTREMES = np.array([[-3e38, 3e38, -0.0, 5.0], [100.0, -100.0, 1e-40, 2.0]], F32)

CASES = [
    Case("extremes_last_dim", lambda: ((_EXTREMES,), {}),
         why="silu(-3e38) = -3e38 / (1 + exp(3e38)) = -0 (exp overflows to Inf), times 3e38 rounds to -0; silu(-0) "
             "* 5 = -0; silu(100) = 100 and silu(-100) ~ -3.7e-42 (a subnormal) times an fp32 subnormal 1e-40."),
    Case("extremes_dim_0", lambda: ((np.ascontiguousarray(_EXTREMES.T),), {"dim": 0}),
         why="The same values split along dim 0 of the transposed array."),
    Case("bf16_3d_dim_1", lambda: ((_EXTREMES.astype(BF16).reshape(2, 2, 2),), {"dim": 1}),
         why="bf16 [2, 2, 2] split along the middle dim."),
]

BAD_CALLS = [
    BadCall("x_shape", lambda: ((np.ones((2, 5), F32),), {}),
            ValueError, r"swiglu: argument 'x' must be of even size along dim -1"),
    BadCall("dim_range", lambda: ((np.ones((2, 4), F32),), {"dim": 2}),
            ValueError, r"swiglu: argument 'dim' must be in \[-2, 1\]"),
    BadCall("x_nonfinite", lambda: ((np.array([[1, np.inf]], F32),), {}),
            ValueError, r"swiglu: argument 'x' must be finite"),
    BadCall("x_shape_2", lambda: ((np.full((2, 3), 0.0, F32),), {}),
            ValueError, r"swiglu: argument 'x' must be of even size along dim -1"),
    BadCall("x_dtype", lambda: ((np.full((2, 4), 0, np.int32),), {}),
            TypeError, r"swiglu: argument 'x' must be of dtype float16, bfloat16 or float32"),
    BadCall("dim_range_2", lambda: ((np.full((2, 4), 0.0, F32),), {'dim': 2}),
            ValueError, r"swiglu: argument 'dim' must be in \[-2, 1\]"),
    BadCall("x_nonfinite_2", lambda: ((np.full((2, 4), np.nan, F32),), {}),
            ValueError, r"swiglu: argument 'x' must be finite"),
]

declare(OpDecl(
    name=OP, family="moe", params=_params, build=_build, outputs=outputs(("y", "float")),
    numerics_fields=("transcendental",), cases=CASES, bad_calls=BAD_CALLS,
    description="silu(first half) * second half (npu_swiglu)"))
