"""``anti_quant`` (npu_anti_quant): weight dequantization ``(x + offset) * scale`` of int8 or packed int4
weights, to fp16 / bf16."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs
from ...values import float_tensor, int8_tensor, int_tensor, positive_scales, rng_for
from ._common import BF16, I8

OP = "anti_quant"
XQ = np.array([[-128, 0, 127, 5]], np.int8)
SQ = np.array([0.5, 0.25, 2.0, 0.1], np.float32)
OQ = np.array([1.0, -1.0, 0.0, 0.5], np.float32)


@st.composite
def _params(draw):
    int4 = draw(st.booleans())
    n = draw(S.multiple_of(8, 16)) if int4 else draw(S.size(64, big=(1025,)))
    return {"rows": draw(S.size(32, big=())), "n": n, "int4": int4, "per_tensor": draw(st.booleans()),
            "scale_dtype": draw(st.sampled_from(("float32", "bfloat16"))), "offset": draw(st.booleans()),
            "dst_dtype": draw(st.sampled_from(("float16", "bfloat16"))), "seed": draw(S.seed())}


@st.composite
def _bits_params(draw):
    """Full-range int8 / int32-packed int4 words, signed scales of any magnitude, half-integer offsets,
    and the default destination dtype (``dst_dtype=None``: float16)."""
    return {"rows": draw(st.sampled_from((1, 2, 7, 8, 16, 17, 33))), "n": 8 * draw(st.sampled_from((1, 2, 5))),
            "int4": draw(st.booleans()), "per_tensor": draw(st.booleans()),
            "scale_dtype": draw(st.sampled_from(("float32", "bfloat16"))), "offset": draw(st.booleans()),
            "dst_dtype": draw(st.sampled_from((None, "float16", "bfloat16"))), "signed": True, "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    k = 1 if p["per_tensor"] else p["n"]
    if p.get("signed"):
        scale = float_tensor(rng, (k,), w8a8.dtypes.resolve(p["scale_dtype"]), "gaussian")
        sdt = w8a8.dtypes.resolve(p["scale_dtype"])
        offset = float_tensor(rng, (k,), sdt, "half_integers") if p["offset"] else None
        x = int_tensor(rng, (p["rows"], p["n"] // 8), np.int32) if p["int4"] else int_tensor(rng, (p["rows"], p["n"]),
                                                                                             np.int8)
        kw = {"offset": offset, "dst_dtype": p["dst_dtype"]}
        return (x, scale), kw | ({"src_dtype": "int4"} if p["int4"] else {})
    scale = positive_scales(rng, (k,), p["scale_dtype"], low=1e-3, high=1.0)
    offset = rng.integers(-8, 8, size=(k,)).astype(np.float32).astype(p["scale_dtype"]) if p["offset"] else None
    if p["int4"]:
        x = w8a8.pack_int4(rng.integers(-8, 8, size=(p["rows"], p["n"])).astype(np.int8))
        return (x, scale), {"offset": offset, "dst_dtype": p["dst_dtype"], "src_dtype": "int4"}
    x = int8_tensor(rng, (p["rows"], p["n"]))
    return (x, scale), {"offset": offset, "dst_dtype": p["dst_dtype"]}


CASES = [
    Case("int4_codes",
         lambda: ((np.array([[0x94D3E2F1 - (1 << 32)]], np.int32), np.float32([0.5])),
                  {"offset": np.float32([1.0]), "src_dtype": "int4"}),
         {"y": np.array([[1.0, 0.0, 1.5, -0.5, 2.0, -1.0, 2.5, -3.0]], np.float16)},
         "word 0x94D3E2F1 unpacks (LSB first) to 1, -1, 2, -2, 3, -3, 4, -7; offset +1, scale 0.5: (c + 1) * 0.5 = "
         "1, 0, 1.5, -0.5, 2, -1, 2.5, -3; fp16 by default."),
    Case("int8_formula",
         lambda: ((XQ, SQ), {"offset": OQ}),
         {"y": np.array([[-63.5, -0.25, 254.0, 0.55]], np.float32).astype(np.float16)},
         "(x + offset) * scale, the offset ADDED (the negated zero point), in fp32 then one RNE cast to fp16: "
         "(-128 + 1) * 0.5 = -63.5, (0 - 1) * 0.25 = -0.25, 127 * 2 = 254, (5 + 0.5) * 0.1f = 0.55 (fp32 "
         "0.55000001) -> fp16 0.5498."),
]

BAD_CALLS = [
    BadCall("src_dtype_dtype", lambda: ((I8, np.float32([1.0])), {"src_dtype": "int16"}),
            TypeError, r"anti_quant: argument 'src_dtype' must be a dtype or one of"),
    BadCall("src_dtype_dtype_2", lambda: ((I8, np.float32([1.0])), {"src_dtype": "foo"}),
            TypeError, r"anti_quant: argument 'src_dtype' must be a dtype or one of"),
    BadCall("x_dtype", lambda: ((I8, np.float32([1.0])), {"src_dtype": "int4"}),
            TypeError, r"anti_quant: argument 'x' must be of dtype int32"),
    BadCall("x_dtype_2", lambda: ((np.ones((3, 2), np.int32), np.float32([1.0])), {}),
            TypeError, r"anti_quant: argument 'x' must be of dtype int8"),
    BadCall("dst_dtype_value", lambda: ((I8, np.float32([1.0])), {"dst_dtype": "float32"}),
            ValueError, r"anti_quant: argument 'dst_dtype' must be float16 or bfloat16"),
    BadCall("scale_shape", lambda: ((I8, np.ones((1, 16), np.float32)), {}),
            ValueError, r"anti_quant: argument 'scale' must be 1-D"),
    BadCall("scale_shape_2", lambda: ((I8, np.ones(15, np.float32)), {}),
            ValueError, r"anti_quant: argument 'scale' must be 1-D of size 16 or 1"),
    BadCall("scale_dtype", lambda: ((I8, np.ones(16, np.float16)), {}),
            TypeError, r"anti_quant: argument 'scale' must be of dtype float32 or bfloat16"),
    BadCall("offset_dtype", lambda: ((I8, np.ones(16, np.float32)), {"offset": np.ones(16, BF16)}),
            TypeError, r"anti_quant: argument 'offset' must be of dtype float32"),
    BadCall("offset_shape", lambda: ((I8, np.ones(16, np.float32)), {"offset": np.ones(1, np.float32)}),
            ValueError, r"anti_quant: argument 'offset' must be of scale's shape"),
    BadCall("scale_shape_3", lambda: ((np.ones((3, 2), np.int32), np.ones(15, np.float32)), {"src_dtype": "int4"}),
            ValueError, r"anti_quant: argument 'scale' must be 1-D of size 16 or 1"),
    BadCall("src_dtype_value", lambda: ((XQ, SQ), dict(src_dtype='uint8')),
            ValueError, r"anti_quant: argument 'src_dtype' must be 'int8' or 'int4'"),
    BadCall("dst_dtype_value_2", lambda: ((XQ, SQ), dict(dst_dtype='float32')),
            ValueError, r"anti_quant: argument 'dst_dtype' must be float16 or bfloat16"),
    BadCall("scale_shape_4", lambda: ((XQ, np.ones(3, np.float32)), {}),
            ValueError, r"anti_quant: argument 'scale' must be 1-D of size 4 or 1"),
    BadCall("offset_dtype_2", lambda: ((XQ, SQ), dict(offset=OQ.astype(BF16))),
            TypeError, r"anti_quant: argument 'offset' must be of dtype float32"),
    BadCall("offset_shape_2", lambda: ((XQ, SQ), dict(offset=np.ones(1, np.float32))),
            ValueError, r"anti_quant: argument 'offset' must be of scale's shape"),
    BadCall("x_dtype_3", lambda: ((XQ.astype(np.int32), SQ), {}),
            TypeError, r"anti_quant: argument 'x' must be of dtype int8"),
    # nan_policy="raise": NaN / Inf in scale or offset refused, naming the argument and index.
    BadCall("scale_nan", lambda: ((XQ, np.float32([0.5, 0.25, np.nan, 0.1])), {}),
            ValueError, r"anti_quant: argument 'scale' must be finite .*; got NaN at index \(2,\)"),
    BadCall("scale_inf_bf16", lambda: ((XQ, np.float32([np.inf]).astype(BF16)), {}),
            ValueError, r"anti_quant: argument 'scale' must be finite .*; got Inf at index \(0,\)"),
    BadCall("offset_inf", lambda: ((XQ, SQ), dict(offset=np.float32([-np.inf, 0.0, 0.0, 0.0]))),
            ValueError, r"anti_quant: argument 'offset' must be finite .*; got Inf at index \(0,\)"),
]

declare(OpDecl(
    name=OP, family="dense", params=_params, build=_build, strategies={"bits": _bits_params},
    outputs=outputs(("y", "float")), cases=CASES, bad_calls=BAD_CALLS,
    description="weight dequantization (x + offset) * scale (npu_anti_quant)"))
