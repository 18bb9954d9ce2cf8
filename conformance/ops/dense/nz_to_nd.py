"""``nz_to_nd``: FRACTAL_NZ storage back to the logical ND shape (the inverse of ``format_cast_nz``)."""

from __future__ import annotations

import numpy as np

import w8a8

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import nz_bits_params, nz_params, nz_tensor

OP = "nz_to_nd"


def _round_trip():
    w = (np.arange(17 * 33).reshape(17, 33) % 251 - 125).astype(np.int8)
    return w8a8.format_cast_nz(w), w


CASES = [
    Case("int8_17x33_round_trip", lambda: ((_round_trip()[0], (17, 33)), {}), {"w": _round_trip()[1]},
         "nz_to_nd(format_cast_nz(w), w.shape) is w: element (r, c) is read back from [c//32, r//16, r%16, c%32] and "
         "the padding dropped."),
]

BAD_CALLS = [
    BadCall("w_nz_shape", lambda: ((np.ones((1, 1, 16, 32), np.int8), (16, 33)), {}),
            ValueError, r"nz_to_nd: argument 'w_nz' must be of NZ storage shape"),
    BadCall("shape_one_dim", lambda: ((np.ones((1, 1, 16, 32), np.int8), (16,)), {}),
            ValueError, r"nz_storage_shape: argument 'shape' must have at least 2 dims",
            "The golden's message names its helper nz_storage_shape, not nz_to_nd (the argument is nz_to_nd's shape)."),
    BadCall("w_nz_shape_2", lambda: ((np.ones((1, 16, 32), np.int8), (16, 32)), {}),
            ValueError, r"nz_to_nd: argument 'w_nz' must be at least 4-D"),
    BadCall("shape_none", lambda: ((np.ones((1, 1, 16, 32), np.int8), None), {}),
            TypeError, r"'NoneType' object is not iterable",
            "A gap in the golden's checks: shape=None reaches Python's own TypeError, which names no argument."),
    BadCall("three_column_blocks", lambda: ((w8a8.format_cast_nz(np.ones((17, 33), np.int8)), (17, 65)), {}),
            ValueError, r"nz_to_nd: argument 'w_nz' must be of NZ storage shape"),
    BadCall("three_row_blocks", lambda: ((w8a8.format_cast_nz(np.ones((17, 33), np.int8)), (33, 33)), {}),
            ValueError, r"nz_to_nd: argument 'w_nz' must be of NZ storage shape"),
    BadCall("fp16_c0_16", lambda: ((w8a8.format_cast_nz(np.ones((17, 33), np.int8)).astype(np.float16), (17, 33)), {}),
            ValueError, r"nz_to_nd: argument 'w_nz' must be of NZ storage shape"),
    BadCall("w_nz_3d", lambda: ((w8a8.format_cast_nz(np.ones((17, 33), np.int8))[0], (17, 33)), {}),
            ValueError, r"nz_to_nd: argument 'w_nz' must be at least 4-D"),
    BadCall("batch_it_lacks", lambda: ((w8a8.format_cast_nz(np.ones((17, 33), np.int8)), (2, 17, 33)), {}),
            ValueError, r"nz_to_nd: argument 'w_nz' must be of NZ storage shape"),
]

declare(OpDecl(
    name=OP, family="dense", params=nz_params,
    build=lambda p: ((w8a8.format_cast_nz(nz_tensor(p)), tuple(p["shape"])), {}),
    strategies={"bits": nz_bits_params}, outputs=outputs(("w", "scale")), cases=CASES, bad_calls=BAD_CALLS,
    description="FRACTAL_NZ storage -> ND"))
