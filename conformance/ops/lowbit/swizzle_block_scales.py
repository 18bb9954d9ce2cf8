"""``swizzle_block_scales``: the 128x4 block-scale swizzle of NVFP4 / MX GEMM kernels — scale (r, c) of an
[M, S] matrix (padded to multiples of 128 and 4) lands at flat offset ``((r//128 * Sp/4 + c//4) * 32 +
r%32) * 16 + (r%128)//32 * 4 + c%4``; any element width, leading batch dims."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs
from ...values import rng_for
from ._common import BF16, E4M3

OP = "swizzle_block_scales"


@st.composite
def _params(draw):
    return {"rows": draw(st.integers(1, 300)), "cols": draw(st.integers(1, 12)), "seed": draw(S.seed())}


def _positions():
    m, s = 130, 5
    scale = (np.arange(m * s, dtype=np.float32) + 1).reshape(m, s).astype(E4M3)
    mp, sp = 256, 8
    flat = np.zeros(mp * sp, np.uint8)
    r, c = np.meshgrid(np.arange(m), np.arange(s), indexing="ij")
    pos = ((r // 128 * (sp // 4) + c // 4) * 32 + r % 32) * 16 + (r % 128) // 32 * 4 + c % 4
    flat[pos] = scale.view(np.uint8)
    return scale, flat.reshape(mp, sp).view(E4M3)


CASES = [
    Case("positions_follow_the_formula", lambda: ((_positions()[0],), {}), {"swizzled": _positions()[1]},
         "A [130, 5] E4M3 scale matrix of distinct values 1 .. 650, padded to [256, 8]: each value is placed at "
         "((r//128 * 2 + c//4) * 32 + r%32) * 16 + (r%128)//32 * 4 + c%4 by the formula itself; the padding is zero."),
] + [Case(f"width_{np.dtype(dt).name}_batch_2x3",
          (lambda dt=dt: ((np.arange(2 * 3 * 129 * 6).reshape(2, 3, 129, 6).astype(dt),), {})),
          why="Any element width (1, 2, 4, 8 bytes, bf16) and two leading batch dims, [129, 6] per matrix.")
     for dt in (np.uint8, np.int16, np.float32, np.int64, BF16)]

BAD_CALLS = [
    BadCall("scale_shape", lambda: ((np.zeros(5, np.float32),), {}),
            ValueError, r"swizzle_block_scales: argument 'scale' must be at least 2-D"),
    BadCall("scale_type", lambda: (([1, 2],), {}),
            TypeError, r"swizzle_block_scales: argument 'scale' must be a numpy\.ndarray"),
]

declare(OpDecl(
    name=OP, family="lowbit", params=_params,
    build=lambda p: ((rng_for(p["seed"]).uniform(0.01, 400, size=(p["rows"], p["cols"])).astype(np.float32)
                      .astype(E4M3),), {}),
    outputs=outputs(("swizzled", "scale")), cases=CASES, bad_calls=BAD_CALLS,
    description="the 128x4 block-scale swizzle", mistrust_degenerate=False))
