"""``quant_matmul_int4``: quant_matmul's int4 routes on int32-packed operands — A4W4 (int4 x1, int4 x2;
fp32 scale FP19-packed by the adapter without a token scale) and A8W4 (int8 x1, int4 x2 with the packed
int64 scale per channel or per group of 256 and the yOffset auxiliary)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...declare import BadCall, Case, OpDecl, declare, outputs
from ...values import rng_for
from ._common import F32, _random, fx

OP = "quant_matmul_int4"


@st.composite
def _params(draw):
    return {"m": draw(S.size(16, big=())), "k": draw(S.multiple_of(8, 24)), "n": draw(S.multiple_of(8, 8)),
            "out": draw(st.sampled_from(("float16", "bfloat16"))), "seed": draw(S.seed())}


def _build(p):
    rng = rng_for(p["seed"])
    m, k, n = p["m"], p["k"], p["n"]
    x1 = w8a8.pack_int4(rng.integers(-8, 8, size=(m, k)).astype(np.int8))
    x2 = w8a8.convert_weight_to_int4pack(rng.integers(-8, 8, size=(k, n)).astype(np.int32))
    scale = rng.uniform(1e-3, 1e-2, size=(n,)).astype(np.float32)
    return (x1, x2, scale), {"pertoken_scale": rng.uniform(0.5, 2.0, size=(m,)).astype(np.float32),
                             "output_dtype": p["out"]}


def _a4w4(layout, variant):
    def build():
        rng = np.random.default_rng(12)
        m, k, n = 7, 64, 16
        x1 = w8a8.pack_int4(rng.integers(-8, 8, (2, m, k)).astype(np.int8))
        codes = rng.integers(-8, 8, (k, n)).astype(np.int32)
        x2 = w8a8.convert_weight_to_int4pack(codes) if layout == "kn8" else \
            np.ascontiguousarray(w8a8.convert_weight_to_int4pack(np.ascontiguousarray(codes.T)).T)
        s = rng.uniform(1e-3, 1e-2, n).astype(np.float32)
        if variant == "fp32_scale_fp16":
            return (x1, x2, s), {"output_dtype": "float16"}
        if variant == "packed_scale_bias":
            return (x1, x2, w8a8.trans_quant_param(s)), {"output_dtype": "float16",
                                                         "bias": rng.integers(-99, 99, n).astype(np.int32)}
        return (x1[0], x2, s), {"pertoken_scale": rng.uniform(0.5, 2, m).astype(np.float32), "output_dtype": "bfloat16"}
    return build


def _a8w4(k, per_group, out, shifted):
    def build():
        rng = np.random.default_rng(13)
        m, n = 6, 16
        x1 = rng.integers(-128, 128, (m, k)).astype(np.int8)
        codes = rng.integers(-8, 8, (k, n)).astype(np.int32)
        x2 = w8a8.convert_weight_to_int4pack(codes) if k else np.zeros((0, n // 8), np.int32)
        s32 = rng.uniform(1e-3, 1e-2, (k // 256, n) if per_group else (n,)).astype(np.float32)
        scale = w8a8.trans_quant_param(s32)
        off = w8a8.a8w4_y_offset(codes.astype(np.int8), scale) if k else np.zeros(n, np.float32)
        pt = rng.uniform(0.01, 0.1, (m, 1)).astype(np.float32)
        if shifted:
            return (x1, x2, scale), {"offset": off + 1, "pertoken_scale": pt[:, 0], "output_dtype": out}
        return (x1, x2, scale), {"offset": off, "pertoken_scale": pt, "output_dtype": out}
    return build


CASES = [
    Case(f"a4w4_{layout}_{variant}", _a4w4(layout, variant),
         why=f"A4W4 with x2 as int32 words [K, N/8] (kn8) or [K/8, N] (k8n): {variant.replace('_', ' ')}.")
    for layout in ("kn8", "k8n") for variant in ("fp32_scale_fp16", "packed_scale_bias", "pertoken_bf16")] + [
    Case(f"a8w4_k{k}_{'group' if pg else 'channel'}_{out}{'_shifted_offset' if sh else ''}", _a8w4(k, pg, out, sh),
         why=f"A8W4, K = {k} ({'per group of 256' if pg else 'per channel'}), yOffset = a8w4_y_offset of the codes"
             f"{' + 1, a 1-D token scale' if sh else ''}, {out} output" + ("; K = 0: zeros" if k == 0 else ""))
    for k, pg in ((512, True), (256, False), (24, False), (0, False)) for out in ("float16", "bfloat16")
    for sh in (False, True)]

BAD_CALLS = [
    BadCall("quant_matmul_output_dtype_value", lambda: ((fx().x1, fx().x2, np.ones(16, np.float32)), {}),
            ValueError, r"quant_matmul: argument 'output_dtype' must be float16 or bfloat16 for int4 operands"),
    BadCall(
        "quant_matmul_output_dtype_value_2",
        lambda: ((fx().x1, fx().x2, np.ones(16, np.float32)), {"output_dtype": "bfloat16"}),
        TypeError,
        r"quant_matmul: argument 'output_dtype' must be float16 for int4 x1 without pertoken_scale",
    ),
    BadCall(
        "quant_matmul_x2_shape",
        lambda: ((fx().x1, fx().x2[:3], np.ones(16, np.float32)), {"output_dtype": "float16"}),
        ValueError,
        r"quant_matmul: argument 'x2' must be int32 of shape \[K, N/8\] or \[K/8, N\] with K = 64",
    ),
    BadCall(
        "quant_matmul_scale_shape",
        lambda: ((fx().x1, fx().x2, np.ones(16, np.float16)), {"output_dtype": "float16"}),
        TypeError,
        r"quant_matmul: argument 'scale' must be float32, bfloat16, int64 or uint64",
    ),
    BadCall(
        "quant_matmul_pertoken_scale_shape",
        lambda: (
            (fx().x1, fx().x2, np.ones(16, np.float32)),
            {"output_dtype": "float16", "pertoken_scale": np.ones(3, np.float32)},
        ),
        ValueError,
        r"quant_matmul: argument 'pertoken_scale' must be of shape",
    ),
    BadCall(
        "quant_matmul_scale_shape_2",
        lambda: ((fx().x1, fx().x2, np.ones(3, np.float32)), {"output_dtype": "float16"}),
        ValueError,
        r"quant_matmul: argument 'scale' must be of shape",
    ),
    BadCall(
        "quant_matmul_offset_shape",
        lambda: ((fx().xi8, fx().x2b, fx().sc), {"output_dtype": "float16", "pertoken_scale": fx().pt}),
        ValueError,
        r"quant_matmul: argument 'offset' must be float32 of shape",
    ),
    BadCall(
        "quant_matmul_scale_shape_3",
        lambda: (
            (fx().xi8, fx().x2b, fx().sc[:1]),
            {"output_dtype": "float16", "pertoken_scale": fx().pt, "offset": np.zeros(16, np.float32)},
        ),
        ValueError,
        r"quant_matmul: argument 'scale' must be of shape",
    ),
    BadCall(
        "quant_matmul_pertoken_scale_nonfinite",
        lambda: (
            (fx().xi8, fx().x2b, fx().sc),
            {"output_dtype": "float16", "pertoken_scale": fx().pt * np.nan, "offset": np.zeros(16, np.float32)},
        ),
        ValueError,
        r"quant_matmul: argument 'pertoken_scale' must be finite",
    ),
    BadCall(
        "quant_matmul_x1_shape",
        lambda: (
            (fx().xi8[:, :100], fx().x2b[:100], fx().sc),
            {"output_dtype": "float16", "pertoken_scale": fx().pt, "offset": np.zeros(16, np.float32)},
        ),
        ValueError,
        r"quant_matmul: argument 'x1' must be K a multiple of 256 below 29576 for a per-group scale",
    ),
    BadCall(
        "quant_matmul_output_dtype_value_3",
        lambda: (
            (_random((2, 256), np.int8), _random((256, 1), np.int32), w8a8.trans_quant_param(_random((1, 8), F32))),
            {'offset': _random((8,), F32), 'pertoken_scale': np.array([[0.027225258], [0.011914343]], F32)},
        ),
        ValueError,
        r"quant_matmul: argument 'output_dtype' must be float16 or bfloat16 for int4 operands",
    ),
    BadCall(
        "quant_matmul_offset_shape_2",
        lambda: (
            (_random((2, 256), np.int8), _random((256, 1), np.int32), w8a8.trans_quant_param(_random((1, 8), F32))),
            {
                'offset': None,
                'pertoken_scale': np.array([[0.027225258], [0.011914343]], F32),
                'output_dtype': 'float16',
            },
        ),
        ValueError,
        r"quant_matmul: argument 'offset' must be float32 of shape",
    ),
    BadCall(
        "quant_matmul_pertoken_scale_shape_2",
        lambda: (
            (_random((2, 256), np.int8), _random((256, 1), np.int32), w8a8.trans_quant_param(_random((1, 8), F32))),
            {'offset': _random((8,), F32), 'pertoken_scale': None, 'output_dtype': 'float16'},
        ),
        ValueError,
        r"quant_matmul: argument 'pertoken_scale' must be float32 of shape",
    ),
    BadCall(
        "quant_matmul_bias_shape",
        lambda: (
            (_random((2, 256), np.int8), _random((256, 1), np.int32), w8a8.trans_quant_param(_random((1, 8), F32))),
            {
                'bias': np.full((8,), 0, np.int32),
                'offset': _random((8,), F32),
                'pertoken_scale': np.array([[0.027225258], [0.011914343]], F32),
                'output_dtype': 'float16',
            },
        ),
        ValueError,
        r"quant_matmul: argument 'bias' must be None for int8 x1 with int4 x2",
    ),
    BadCall(
        "quant_matmul_scale_dtype",
        lambda: (
            (_random((2, 256), np.int8), _random((256, 1), np.int32), np.full((1, 8), 1.0, F32)),
            {
                'offset': _random((8,), F32),
                'pertoken_scale': np.array([[0.027225258], [0.011914343]], F32),
                'output_dtype': 'float16',
            },
        ),
        TypeError,
        r"quant_matmul: argument 'scale' must be of dtype int64 or uint64",
    ),
    BadCall(
        "quant_matmul_x1_shape_2",
        lambda: (
            (_random((2, 128), np.int8), _random((128, 1), np.int32), w8a8.trans_quant_param(_random((1, 8), F32))),
            {
                'offset': _random((8,), F32),
                'pertoken_scale': np.array([[0.027225258], [0.011914343]], F32),
                'output_dtype': 'float16',
            },
        ),
        ValueError,
        r"quant_matmul: argument 'x1' must be K a multiple of 256 below 29576 for a per-group scale",
    ),
    BadCall(
        "quant_matmul_x2_shape_2",
        lambda: (
            (_random((2, 256), np.int8), _random((32, 8), np.int32), w8a8.trans_quant_param(_random((1, 8), F32))),
            {
                'offset': _random((8,), F32),
                'pertoken_scale': np.array([[0.027225258], [0.011914343]], F32),
                'output_dtype': 'float16',
            },
        ),
        ValueError,
        r"quant_matmul: argument 'x2' must be int32 \[K=256, N/8\]",
    ),
    BadCall(
        "quant_matmul_output_dtype_value_4",
        lambda: (
            (_random((2, 256), np.int8), _random((256, 1), np.int32), w8a8.trans_quant_param(_random((1, 8), F32))),
            {
                'offset': _random((8,), F32),
                'pertoken_scale': np.array([[0.027225258], [0.011914343]], F32),
                'output_dtype': 'int32',
            },
        ),
        TypeError,
        r"quant_matmul: argument 'output_dtype' must be float16 or bfloat16 for int8 x1 with int4 x2",
    ),
    BadCall(
        "quant_matmul_offset_shape_3",
        lambda: (
            (_random((2, 8), np.int32), _random((64, 1), np.int32), np.full((8,), 1.0, F32)),
            {'offset': np.full((8,), 1.0, F32), 'output_dtype': 'float16'},
        ),
        ValueError,
        r"quant_matmul: argument 'offset' must be None for int4 x1",
    ),
    BadCall(
        "quant_matmul_output_dtype_value_5",
        lambda: (
            (_random((2, 8), np.int32), _random((64, 1), np.int32), np.full((8,), 1.0, F32)),
            {'output_dtype': 'bfloat16'},
        ),
        TypeError,
        r"quant_matmul: argument 'output_dtype' must be float16 for int4 x1 without pertoken_scale",
    ),
    BadCall(
        "quant_matmul_x2_shape_3",
        lambda: (
            (
                _random((2, 8), np.int32),
                np.array([[69617085], [1022334622], [1653286516], [-984712580]], np.int32),
                np.full((8,), 1.0, F32),
            ),
            {'output_dtype': 'float16'},
        ),
        ValueError,
        r"quant_matmul: argument 'x2' must be int32 of shape \[K, N/8\] or \[K/8, N\] with K = 64",
    ),
]

declare(OpDecl(
    name=OP, family="lowbit", params=_params, build=_build, outputs=outputs(("y", "float")),
    numerics_fields=("epilogue_order",), cases=CASES, bad_calls=BAD_CALLS,
    description="A4W4 quant_matmul on int32-packed int4 operands"))
