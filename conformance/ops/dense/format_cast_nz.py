"""``format_cast_nz`` (npu_format_cast to 29): ND -> FRACTAL_NZ storage ``[..., ceil(N/C0), ceil(K/16),
16, C0]`` with C0 = 32 bytes / element size, zero-padded."""

from __future__ import annotations

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import nz_bits_params, nz_params, nz_tensor

OP = "format_cast_nz"


def _nz_expected():
    w = (np.arange(17 * 33).reshape(17, 33) % 251 - 125).astype(np.int8)
    out = np.zeros((2, 2, 16, 32), np.int8)  # ceil(33/32) = 2 column blocks, ceil(17/16) = 2 row blocks
    for r in range(17):
        for c in range(33):
            out[c // 32, r // 16, r % 16, c % 32] = w[r, c]
    return w, out


CASES = [
    Case("int8_17x33_positions", lambda: ((_nz_expected()[0],), {}), {"w_nz": _nz_expected()[1]},
         "int8 C0 = 32: element (r, c) of a [17, 33] weight lives at [c//32, r//16, r%16, c%32] of a [2, 2, 16, 32] "
         "storage; everything else is zero padding. Expected built element by element from that rule."),
]

BAD_CALLS = [
    BadCall("w_shape", lambda: ((np.ones(16, np.int8),), {}),
            ValueError, r"format_cast_nz: argument 'w' must be at least 2-D"),
    BadCall("w_type", lambda: (([[1, 2], [3, 4]],), {}),
            TypeError, r"format_cast_nz: argument 'w' must be a numpy\.ndarray"),
    BadCall("w_shape_2", lambda: ((np.zeros(5, np.int8),), {}),
            ValueError, r"format_cast_nz: argument 'w' must be at least 2-D"),
    BadCall("w_list", lambda: (([[1, 2]],), {}),
            TypeError, r"format_cast_nz: argument 'w' must be a numpy\.ndarray"),
    # NZ pads every [1, 1] matrix to [16, 32] int8: 512x the input, refused past the budget.
    BadCall("storage_budget", lambda: ((np.broadcast_to(np.zeros((), np.int8), (1 << 24, 1, 1)),), {}),
            ValueError, r"format_cast_nz: argument 'w' must be small enough that .* allocation budget of 4294967296 bytes .*; got \(16777216, 1, 1, 16, 32\) x 1 B"),
]

declare(OpDecl(
    name=OP, family="dense", params=nz_params, build=lambda p: ((nz_tensor(p),), {}),
    strategies={"bits": nz_bits_params}, outputs=outputs(("w_nz", "scale")), cases=CASES, bad_calls=BAD_CALLS,
    description="ND -> FRACTAL_NZ storage (npu_format_cast 29)", mistrust_degenerate=False))
