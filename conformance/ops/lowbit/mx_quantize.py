"""``mx_quantize``: OCP MX quantization — E2M1 (MXFP4, two codes per byte, low nibble first) or E4M3 /
E5M2 (MXFP8) elements with one E8M0 scale byte per block of 32 (FLOOR, CEIL, EVEN or RCEIL scale)."""

from __future__ import annotations

import numpy as np

from ...declare import BadCall, Case, OpDecl, declare, outputs
from ._common import BF16, E4M3, E5M2, F32, fx, mx_params, mx_x

OP = "mx_quantize"


def _row(*values, width=32):
    x = np.zeros((1, width), np.float32)
    x[0, :len(values)] = values
    return x


def _bytes(*values, width=16, dtype=np.uint8):
    b = np.zeros((1, width), np.uint8)
    b[0, :len(values)] = values
    return b.view(dtype)


def _nonfinite_blocks():
    x = np.ones((2, 64), np.float32)
    x[0, 3], x[1, 40] = np.inf, np.nan
    return x


def _subnormal(mode, elem, bf16):
    def build():
        x = (np.random.default_rng(3).standard_normal((7, 96)) * 1e-39).astype(np.float32)  # fp32 subnormals
        if bf16:
            return (x.astype(BF16),), {"elem_dtype": elem, "scale_mode": mode, "block_size": 16}
        return (x,), {"elem_dtype": elem, "scale_mode": mode}
    return build


CASES = [
    Case("floor_clips_rceil_does_not", lambda: ((_row(7.0),), {"scale_mode": "floor"}),
         {"data": _bytes(0x07), "scale": np.array([[127]], np.uint8)},
         "amax 7: FLOOR gives shared_exp = floor(log2 7) - 2 = 0, b = 127, X = 1; 7/1 = 7 is beyond E2M1's max 6 "
         "and saturates to code 7 (= 6). Codes pack low nibble first: byte 0 = 0x07."),
    Case("rceil_never_clips", lambda: ((_row(7.0),), {"scale_mode": "rceil"}),
         {"data": _bytes(0x06), "scale": np.array([[128]], np.uint8)},
         "RCEIL: X = 2^ceil(log2(7/6)) = 2, b = 128; 7/2 = 3.5 is an E2M1 tie between 3 and 4 and rounds to "
         "the even code 6 (= 4)."),
    Case("zero_block", lambda: ((np.zeros((1, 32), np.float32),), {}),
         {"data": np.zeros((1, 16), np.uint8), "scale": np.array([[0]], np.uint8)},
         "An all-zero block gets the smallest scale byte 0 (2^-127) and zero codes (torchao, microxcaling)."),
    Case("zero_blocks_2x64", lambda: ((np.zeros((2, 64), np.float32),), {}),
         {"data": np.zeros((2, 32), np.uint8), "scale": np.zeros((2, 2), np.uint8)},
         "Two rows of two all-zero blocks: scale byte 0 and zero codes everywhere."),
    Case("floor_clips_6_to_8", lambda: ((_row(7.5, 6.5, 3.0, 0.3),), {"scale_mode": "floor"}),
         {"data": _bytes(0x77, 0x15), "scale": np.array([[127]], np.uint8)},
         "FLOOR: b = floor(log2 7.5) - 2 + 127 = 127, X = 1: 7.5 and 6.5 clip to 6 (code 7); 3 -> code 5; 0.3 is "
         "above the 0.25 midpoint -> 0.5 (code 1). Low nibble first: 0x77, 0x15."),
    Case("rceil_6_to_8", lambda: ((_row(7.5, 6.5, 3.0, 0.3),), {"scale_mode": "rceil"}),
         {"data": _bytes(0x56, 0x03), "scale": np.array([[128]], np.uint8)},
         "RCEIL: 7.5 * fp32(1/6) = 1.25 -> X = 2^ceil(log2 1.25) = 2, b = 128: 3.75 -> 4 (code 6), 3.25 -> 3 "
         "(code 5), 1.5 (code 3), 0.15 is below 0.25 -> 0. Bytes 0x56, 0x03."),
    Case("e2m1_ties_to_even", lambda: ((_row(0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -5.0),), {}),
         {"data": _bytes(0x20, 0x42, 0x64, 0x76, 0xE8), "scale": np.array([[127]], np.uint8)},
         "amax 6 -> X = 1. Ties: 0.25 -> 0 (code 0), 0.75 -> 1 (code 2), 1.25 -> 1 (2), 1.75 -> 2 (4), 2.5 -> 2 (4), "
         "3.5 -> 4 (6), 5 -> 4 (6); 6 -> code 7; -0.25 -> -0 (code 8); -5 -> -4 (code 14)."),
    Case("e4m3_max", lambda: ((_row(448.0, -448.0),), {"elem_dtype": "e4m3"}),
         {"data": _bytes(0x7E, 0xFE, width=32, dtype=E4M3), "scale": np.array([[127]], np.uint8)},
         "E4M3 block with amax 448: floor(log2 448) - 8 = 0 -> X = 1; 448 -> 0x7E, -448 -> 0xFE."),
    Case("e5m2_max", lambda: ((_row(57344.0, -57344.0),), {"elem_dtype": "e5m2"}),
         {"data": _bytes(0x7B, 0xFB, width=32, dtype=E5M2), "scale": np.array([[127]], np.uint8)},
         "E5M2 with amax 57344 = 1.75 * 2^15: X = 1; 57344 -> 0x7B, -57344 -> 0xFB."),
    Case("mxfp4_top_of_e8m0", lambda: ((_row(3e38, -3e38),), {}),
         {"data": _bytes(0xF7), "scale": np.array([[252]], np.uint8)},
         "MXFP4 at the top of the E8M0 range: amax 3e38 -> b = 127 + 127 - 2 = 252; the elements saturate at 6 "
         "(codes 7 and F): byte 0xF7."),
] + [Case(f"nonfinite_blocks_{elem}", (lambda elem=elem: ((_nonfinite_blocks(),), {"elem_dtype": elem})),
          {"scale": np.array([[255, 127 - emax], [127 - emax, 255]], np.uint8)},
          f"A block holding Inf or NaN gets the E8M0 NaN (255) and zero codes; the other blocks (all ones) get b = "
          f"floor(log2 1) - emax + 127 = {127 - emax} (emax of {elem}: {emax}).")
     for elem, emax in (("e2m1", 2), ("e4m3", 8), ("e5m2", 15))] + [
    Case(f"fp32_subnormals_{mode}_{elem}{'_bf16_block_16' if bf16 else ''}", _subnormal(mode, elem, bf16),
         why="fp32 subnormal inputs (N(0, 1) * 1e-39): the shared exponent at the bottom of E8M0" +
             (", as bf16 with blocks of 16." if bf16 else "."))
    for mode in ("floor", "ceil", "even", "rceil") for elem in ("e2m1", "e4m3", "e5m2") for bf16 in (False, True)]

BAD_CALLS = [
    BadCall("elem_dtype_value", lambda: ((fx().x,), {"elem_dtype": "e3m3"}),
            ValueError, r"mx_quantize: argument 'elem_dtype' must be 'e2m1'"),
    BadCall("scale_mode_choice", lambda: ((fx().x,), {"scale_mode": "up"}),
            ValueError, r"mx_quantize: argument 'scale_mode' must be one of"),
    BadCall("x_shape", lambda: ((fx().x[:, :33],), {"block_size": 33}),
            ValueError, r"mx_quantize: argument 'x' must be of even last dimension for MXFP4"),
    BadCall("block_size_range", lambda: ((fx().x,), {"block_size": 0}),
            ValueError, r"mx_quantize: argument 'block_size' must be in \[1, inf\]"),
    BadCall("x_shape_2", lambda: ((fx().x[:, :48],), {}),
            ValueError, r"mx_quantize: argument 'x' must be of last dimension a multiple of block_size = 32"),
    BadCall("x_shape_3", lambda: ((np.full((1, 48), 0.0, F32),), {}),
            ValueError, r"mx_quantize: argument 'x' must be of last dimension a multiple of block_size = 32"),
    BadCall("elem_dtype_value_2", lambda: ((np.full((1, 32), 0.0, F32),), {'elem_dtype': 'e3m2'}),
            ValueError, r"mx_quantize: argument 'elem_dtype' must be 'e2m1'"),
    BadCall("scale_mode_choice_2", lambda: ((np.full((1, 32), 0.0, F32),), {'scale_mode': 'round'}),
            ValueError, r"mx_quantize: argument 'scale_mode' must be one of"),
    BadCall("x_dtype", lambda: ((np.full((1, 32), 0, np.int32),), {}),
            TypeError, r"mx_quantize: argument 'x' must be of dtype float32, float16 or bfloat16"),
]

def _mask(args, kwargs):
    """The codes of a block whose scale is the E8M0 NaN (255: the block holds Inf or NaN) are don't-cares:
    the block decodes to NaN whatever they are (the golden writes zeros, torchao garbage). Such bytes are
    unspecified, as rows beyond a group_list total are; the scale bytes are compared everywhere."""
    x = args[0] if args else kwargs["x"]
    bs = int(kwargs.get("block_size", 32))
    x = np.asarray(x).astype(np.float32)
    if bs < 1 or x.ndim < 1 or x.shape[-1] % bs:
        return {}
    nonfinite = ~np.isfinite(x.reshape(x.shape[:-1] + (x.shape[-1] // bs, bs))).all(axis=-1)
    specified = np.repeat(~nonfinite, bs, axis=-1)                     # per element of x
    from w8a8.lowbit.mx import elem_name

    if elem_name(OP, "elem_dtype", kwargs.get("elem_dtype", "e2m1")) == "e2m1":
        specified = specified.reshape(x.shape[:-1] + (x.shape[-1] // 2, 2)).all(axis=-1)  # two codes per byte
    return {"data": specified}


declare(OpDecl(
    name=OP, family="lowbit", params=mx_params, mask=_mask,
    build=lambda p: ((mx_x(p),), {"elem_dtype": p["elem"], "scale_mode": p["mode"]}),
    outputs=outputs(("data", "scale"), ("scale", "int")), cases=CASES, bad_calls=BAD_CALLS,
    description="OCP MX quantization (E2M1/E4M3/E5M2 elements, E8M0 scale per 32)"))
