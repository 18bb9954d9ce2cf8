"""``convert_weight_to_int4pack`` (npu_convert_weight_to_int4pack): int4 values in int32 -> int32 words of
8 codes, least significant nibble first."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs
from ...values import rng_for

OP = "convert_weight_to_int4pack"


@st.composite
def _params(draw):
    return {"rows": draw(S.size(24, big=())), "n": draw(S.multiple_of(8, 16)), "seed": draw(S.seed())}


CASES = [
    Case("word_of_eight_codes", lambda: ((np.array([[1, -1, 2, -2, 3, -3, 4, -4]], np.int32),), {}),
         {"packed": np.array([[0xC4D3E2F1]], np.uint32).view(np.int32)},
         "Codes 1, -1, 2, -2, 3, -3, 4, -4 -> nibbles 1, F, 2, E, 3, D, 4, C from bit 0 up -> 0xC4D3E2F1."),
]

BAD_CALLS = [
    BadCall("weight_shape", lambda: ((np.zeros((3, 7), np.int32),), {}),
            ValueError, r"convert_weight_to_int4pack: argument 'weight' must be of last dimension a multiple of 8"),
    BadCall("weight_range", lambda: ((np.full((3, 8), 9, np.int32),), {}),
            ValueError, r"convert_weight_to_int4pack: argument 'weight' must be values in \[-8, 7\]"),
    BadCall("inner_k_tiles_range", lambda: ((np.zeros((3, 8), np.int32), -1), {}),
            ValueError, r"convert_weight_to_int4pack: argument 'inner_k_tiles' must be in \[0, inf\]"),
    BadCall("weight_range_2", lambda: ((np.full((1, 8), 8, np.int32),), {}),
            ValueError, r"convert_weight_to_int4pack: argument 'weight' must be values in \[-8, 7\]"),
    BadCall("weight_shape_2", lambda: ((np.full((1, 4), 0, np.int32),), {}),
            ValueError, r"convert_weight_to_int4pack: argument 'weight' must be of last dimension a multiple of 8"),
]

declare(OpDecl(
    name=OP, family="lowbit", params=_params,
    build=lambda p: ((rng_for(p["seed"]).integers(-8, 8, size=(p["rows"], p["n"])).astype(np.int32),), {}),
    outputs=outputs(("packed", "int")), cases=CASES, bad_calls=BAD_CALLS,
    description="int4 values -> int32 words, LSB first"))
