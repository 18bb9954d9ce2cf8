"""What the dense declarations share: Numerics field groups, the dynamic quantizers' strategy and
builder, the NZ layout strategy, the Linear paths' strategy and stages, the fixtures of their bad
calls, and the bench helpers."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ...declare import BadCall

import w8a8
from w8a8 import dtypes as _dt

from ... import strategies as S
from ...values import float_tensor, int_tensor, positive_scales, rng_for

QUANT_FIELDS = ("round_mode", "quant_codes", "scale_out", "zero_row", "saturate")
MATMUL_FIELDS = ("fp19_scale", "fp19_round_mode", "int32_bias", "epilogue_order", "requant_clamp9", "round_mode",
                 "saturate")
BF16 = np.dtype(_dt.bfloat16)
F16 = np.dtype(np.float16)


def f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# dynamic_quant / dynamic_quant_asymmetric

@st.composite
def dynamic_quant_params(draw):
    dst = draw(st.sampled_from(("int8", "int8", "int4")))
    h = draw(S.multiple_of(8, 16, big=(1024,))) if dst == "int4" else draw(S.size(128, big=(1025,)))
    lead = draw(S.lead_shape())
    smooth = draw(st.sampled_from(("none", "none", "vector", "group")))
    groups = None
    if smooth == "group":
        rows = int(np.prod(lead))
        e = draw(st.integers(1, 6))
        cuts = sorted(draw(st.lists(st.integers(0, rows), min_size=e - 1, max_size=e - 1)))
        groups = cuts + [rows]
    return {"lead": lead, "h": h, "dtype": draw(S.half_dtype()), "dst_type": dst, "smooth": smooth,
            "group_index": groups, "dist": draw(S.float_dist()), "seed": draw(S.seed())}


@st.composite
def dynamic_quant_bits_params(draw):
    """Bit-level inputs (random finite bit patterns, fp32 subnormals, half-integer ties, one nonzero
    element) and smooth scales of either sign at any magnitude (10^-4 .. 10^4): the golden refuses what
    overflows fp32, and so must the backend."""
    dst = draw(st.sampled_from(("int8", "int4")))
    h = draw(st.sampled_from((1, 7, 8, 17, 64)))
    if dst == "int4":
        h = 8 * max(1, h // 8)
    lead = list(draw(st.sampled_from(((), (2,), (1, 3))))) + [draw(st.sampled_from((1, 2, 7, 8, 16, 17, 33)))]
    smooth = draw(st.sampled_from(("none", "vector", "group")))
    groups = None
    if smooth == "group":
        rows = int(np.prod(lead))
        e = draw(st.integers(1, 4))
        groups = sorted(draw(st.lists(st.integers(0, rows), min_size=e - 1, max_size=e - 1))) + [rows]
    return {"lead": lead, "h": h, "dtype": draw(S.half_dtype()), "dst_type": dst, "smooth": smooth,
            "group_index": groups, "dist": draw(S.bit_dist()), "signed_smooth": True, "seed": draw(S.seed())}


def unwritten_when_hidden_is_empty(*names):
    """The mask of a per-token quantizer: with H = 0 ``aclnnDynamicQuant`` returns before any kernel runs
    (``x->IsEmpty()``: ops-nn ``quant/dynamic_quant/op_host/op_api/aclnn_dynamic_quant.cpp:368`` @ e5c3fa93),
    so the per-row outputs ``names`` (scale, offset) of the rows that exist are never written: unspecified."""
    def mask(args, kwargs):
        x = args[0]
        if x.shape[-1] != 0:
            return {}
        return {n: np.zeros(x.shape[:-1], bool) for n in names}
    return mask


def dynamic_quant_build(p):
    rng = rng_for(p["seed"])
    x = float_tensor(rng, tuple(p["lead"]) + (p["h"],), p["dtype"], p["dist"])
    kw = {"dst_type": p["dst_type"]}
    if p["dist"] == "extremes":  # smoothing would overflow fp32 on top of near-max values
        p = {**p, "smooth": "none"}
    n = {"vector": None, "group": len(p["group_index"] or ())}.get(p["smooth"], 0)
    if p["smooth"] != "none":
        shape = (p["h"],) if n is None else (n, p["h"])
        if p.get("signed_smooth"):
            v = rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 4)
            kw["smooth_scales"] = v.astype(np.float32).astype(p["dtype"])
        else:
            kw["smooth_scales"] = positive_scales(rng, shape, p["dtype"], low=0.25, high=4.0)
    if p["smooth"] == "group":
        kw["group_index"] = np.asarray(p["group_index"], np.int32)
    return (x,), kw


def smoothed(args, kwargs) -> np.ndarray:
    """x * smooth_scales in fp32 (the row selected by group_index), as float64 rows [rows, H]."""
    x = args[0]
    xf = f64(x).reshape(-1, x.shape[-1])
    smooth = kwargs.get("smooth_scales")
    if smooth is not None:
        if kwargs.get("group_index") is None:
            sf = f64(smooth)[None, :]
        else:
            gi = kwargs["group_index"].astype(np.int64)
            sf = f64(smooth)[np.searchsorted(gi, np.arange(xf.shape[0]), side="right")]
        xf = (xf.astype(np.float32) * sf.astype(np.float32)).astype(np.float64)
    return xf


# ---------------------------------------------------------------------------------------------
# the NZ layout

@st.composite
def nz_params(draw):
    return {"shape": [draw(st.sampled_from(([], [], [3])))][0] + [draw(S.size(48, big=())), draw(S.size(80, big=()))],
            "dtype": draw(st.sampled_from(("int8", "bfloat16", "float16", "float32", "int32"))), "seed": draw(S.seed())}


NZ_BIT_DTYPES = ("int8", "uint8", "bfloat16", "float16", "float32", "int32", "int64", "float64", "bool", "uint16",
                 "complex64", "float8_e4m3fn", "float4_e2m1fn")


@st.composite
def nz_bits_params(draw):
    """Any element width (1 to 8 bytes, bool, complex, fp8, fp4 stored in a byte) with random bytes,
    [r, c] around the 16 x C0 tiles, with and without leading dims."""
    return {"shape": list(draw(st.sampled_from(((), (2,), (1, 2))))) + [draw(st.sampled_from((1, 7, 16, 17, 33))),
                                                                         draw(st.sampled_from((1, 15, 16, 17, 32, 33,
                                                                                               65)))],
            "dtype": draw(st.sampled_from(NZ_BIT_DTYPES)), "raw_bytes": True, "seed": draw(S.seed())}


def _element_dtype(name: str) -> np.dtype:
    """A NumPy or ml_dtypes dtype by name (layout ops move any element type)."""
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name, None) or name)


def nz_tensor(p):
    rng = rng_for(p["seed"])
    dt = _element_dtype(p["dtype"])
    if p.get("raw_bytes"):
        *lead, r, c = p["shape"]
        return rng.integers(0, 256, tuple(lead) + (r, c * dt.itemsize), dtype=np.uint8).view(dt)
    if dt.kind in "iu":
        return rng.integers(-100, 100, size=tuple(p["shape"])).astype(dt)
    return float_tensor(rng, tuple(p["shape"]), dt, "gaussian")


# ---------------------------------------------------------------------------------------------
# the Linear paths

@st.composite
def linear_params(draw):
    return {"lead": draw(S.lead_shape(32)), "k": draw(S.size(96, big=(1025, 4097))), "n": draw(S.size(64, big=(1025,))),
            "dtype": draw(S.half_dtype()), "bias": draw(st.booleans()), "dist": draw(S.float_dist(edges=False)),
            "seed": draw(S.seed())}


def checkpoint_weights(rng, n, k):
    """An int8 per-channel checkpoint weight [N, K] with its fp32 scale (msModelSlim's layout)."""
    wf = rng.standard_normal((n, k)).astype(np.float32) * np.float32(0.02)
    return w8a8.quantize_weight_per_channel(wf)


def stage_acc(b, a, k, up):
    """The int32 accumulator of a Linear path: the golden's x_q against the weight [N, K]^T."""
    return b.quant_matmul(up["x_q"], a[1].T, np.ones(1, np.float32), output_dtype="int32")


def random_int8(rng, *shape):
    return int_tensor(rng, shape, np.int8)


# ---------------------------------------------------------------------------------------------
# fixtures of the bad calls (small arrays; each call gets its own copies from the runner)

X = np.ones((3, 16), BF16)
XH = np.ones((3, 16), np.float16)
XF = np.ones((3, 16), np.float32)
I8 = np.ones((3, 16), np.int8)
W = np.ones((16, 5), np.int8)          # a [K, N] GEMM operand
S5 = np.full(5, 0.01, np.float32)
LW = np.ones((5, 16), np.int8)         # a checkpoint weight [N, K]
NAN_X = X.copy()
NAN_X[1, 2] = np.nan
INF_H = XH.copy()
INF_H[2, 0] = np.inf


def quantizer_bad_calls(op: str) -> list[BadCall]:
    """The bad calls of both dynamic quantizers (one argument check, ``_args``, with the op's name)."""
    return [
        BadCall("x_dtype", lambda: ((XF,), {}),
                TypeError, rf"{op}: argument 'x' must be of dtype float16 or bfloat16"),
        BadCall("x_rank_1d", lambda: ((np.ones(16, BF16),), {}),
                ValueError, rf"{op}: argument 'x' must be 2-D to 8-D"),
        BadCall("x_rank_9d", lambda: ((np.ones((1,) * 9, BF16),), {}),
                ValueError, rf"{op}: argument 'x' must be 2-D to 8-D"),
        BadCall("x_int8", lambda: ((I8,), {}),
                TypeError, rf"{op}: argument 'x' must be of dtype float16 or bfloat16"),
        BadCall("x_list", lambda: ((np.ones((2, 8), F16).tolist(),), {}),
                TypeError, rf"{op}: argument 'x' must be"),
        BadCall("dst_type_int16", lambda: ((X,), {"dst_type": "int16"}),
                TypeError, rf"{op}: argument 'dst_type' must be a dtype or one of"),
        BadCall("dst_type_bogus", lambda: ((X,), {"dst_type": "bogus"}),
                TypeError, rf"{op}: argument 'dst_type' must be a dtype or one of"),
        BadCall("dst_type_float8", lambda: ((X,), {"dst_type": "float8"}),
                TypeError, rf"{op}: argument 'dst_type' must be a dtype or one of"),
        BadCall("dst_type_int32", lambda: ((X,), {"dst_type": "int32"}),
                ValueError, rf"{op}: argument 'dst_type' must be"),
        BadCall("int4_h_not_multiple_of_8", lambda: ((np.ones((3, 7), BF16),), {"dst_type": "int4"}),
                ValueError, rf"{op}: argument 'x' must be of last dimension a multiple of 8 for int4 output"),
        BadCall("int4_h_12", lambda: ((np.ones((2, 12), F16),), {"dst_type": "int4"}),
                ValueError, rf"{op}: argument 'x' must be of last dimension a multiple of 8 for int4 output"),
        BadCall("x_nan", lambda: ((NAN_X,), {}),
                ValueError, rf"{op}: argument 'x' must be finite .* NaN at index \(1, 2\)"),
        BadCall("x_inf", lambda: ((INF_H,), {}),
                ValueError, rf"{op}: argument 'x' must be finite .* Inf at index \(2, 0\)"),
        BadCall("x_minus_inf", lambda: ((np.where(np.eye(3, 4, 1, dtype=bool), -np.inf, 1).astype(F16),), {}),
                ValueError, rf"{op}: argument 'x' must be finite .* Inf at index \(0, 1\)"),
        BadCall("smooth_scales_dtype", lambda: ((X,), {"smooth_scales": np.ones(16, F16)}),
                TypeError, rf"{op}: argument 'smooth_scales' must be of dtype bfloat16"),
        BadCall("smooth_scales_bf16_for_fp16", lambda: ((np.ones((2, 8), F16),), {"smooth_scales": np.ones(8, BF16)}),
                TypeError, rf"{op}: argument 'smooth_scales' must be of dtype float16"),
        BadCall("smooth_scales_size", lambda: ((X,), {"smooth_scales": np.ones(15, BF16)}),
                ValueError, rf"{op}: argument 'smooth_scales' must be of shape \[H\] = \[16\] \(without group_index\)"),
        BadCall(
            "smooth_scales_2d_without_groups",
            lambda: ((np.ones((2, 8), F16),), {"smooth_scales": np.ones((2, 8), F16)}),
            ValueError,
            rf"{op}: argument 'smooth_scales' must be of shape \[H\] = \[8\]",
        ),
        BadCall("smooth_scales_nan", lambda: ((X,), {"smooth_scales": np.full(16, np.nan, BF16)}),
                ValueError, rf"{op}: argument 'smooth_scales' must be finite"),
        BadCall(
            "smooth_scales_inf",
            lambda: ((np.ones((3, 4), F16),), {"smooth_scales": np.array([1, 1, np.inf, 1], F16)}),
            ValueError,
            rf"{op}: argument 'smooth_scales' must be finite",
        ),
        BadCall(
            "smoothing_overflows_fp32",
            lambda: ((np.full((2, 8), 3e38, BF16),), {"smooth_scales": np.full(8, 2.0, BF16)}),
            ValueError,
            rf"{op}: argument 'smooth_scales' must be such that x \* smooth_scales stays finite",
            "bf16 3e38 * 2 overflows fp32: a check of the data, done in the op before the row max.",
        ),
        BadCall("group_index_without_smooth", lambda: ((X,), {"group_index": np.array([3], np.int32)}),
                ValueError, rf"{op}: argument 'group_index' must be None unless smooth_scales is given"),
        BadCall("group_index_int64", lambda: ((X,), {"smooth_scales": np.ones((1, 16), BF16),
                                                     "group_index": np.array([3], np.int64)}),
                TypeError, rf"{op}: argument 'group_index' must be of dtype int32"),
        BadCall("group_index_2d", lambda: ((X,), {"smooth_scales": np.ones((1, 16), BF16),
                                                  "group_index": np.array([[3]], np.int32)}),
                ValueError, rf"{op}: argument 'group_index' must be 1-D"),
        BadCall("group_index_1025_groups", lambda: ((X,), {"smooth_scales": np.ones((1025, 16), BF16),
                                                           "group_index": np.full(1025, 3, np.int32)}),
                ValueError, rf"{op}: argument 'group_index' must be of at most 1024 groups"),
        BadCall("group_index_decreasing", lambda: ((X,), {"smooth_scales": np.ones((2, 16), BF16),
                                                          "group_index": np.array([2, 1], np.int32)}),
                ValueError, rf"{op}: argument 'group_index' must be non-decreasing cumulative row ends"),
        BadCall("group_index_total_short", lambda: ((X,), {"smooth_scales": np.ones((2, 16), BF16),
                                                           "group_index": np.array([1, 2], np.int32)}),
                ValueError, rf"{op}: argument 'group_index' must be cumulative row ends whose last value equals "
                            r"the row count 3"),
        BadCall("group_index_total_long", lambda: ((np.ones((2, 8), F16),), {"smooth_scales": np.ones((2, 8), F16),
                                                                            "group_index": np.array([1, 3], np.int32)}),
                ValueError, rf"{op}: argument 'group_index' must be cumulative row ends whose last value equals "
                            r"the row count 2"),
        BadCall("group_index_negative", lambda: ((X,), {"smooth_scales": np.ones((2, 16), BF16),
                                                        "group_index": np.array([-1, 3], np.int32)}),
                ValueError, rf"{op}: argument 'group_index' must be non-decreasing cumulative row ends \(>= 0\)"),
        BadCall(
            "smooth_rows_vs_groups",
            lambda: ((X,), {"smooth_scales": np.ones((2, 16), BF16), "group_index": np.array([3], np.int32)}),
            ValueError,
            rf"{op}: argument 'smooth_scales' must be of shape \[E, H\] = \[1, 16\] \(with group_index\)",
        ),
        BadCall(
            "smooth_rows_vs_no_groups",
            lambda: ((X,), {"smooth_scales": np.ones((2, 16), BF16), "group_index": np.empty(0, np.int32)}),
            ValueError,
            rf"{op}: argument 'smooth_scales' must be of shape \[E, H\] = \[0, 16\] \(with group_index\)",
        ),
        BadCall("missing_x", lambda: ((), {}),
                TypeError, r"missing 1 required positional argument: 'x'"),
        BadCall("unknown_keyword", lambda: ((X,), {"dst": "int8"}),
                TypeError, r"got an unexpected keyword argument 'dst'"),
    ]


# ---------------------------------------------------------------------------------------------
# bench helpers

def bench_int8(rng, *shape):
    """Full-range int8 at a bench shape (one generator call: the bench inputs of a seed stay the same)."""
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def bf16_normal(rng, shape, scale=1.0):
    return (rng.standard_normal(shape).astype(np.float32) * np.float32(scale)).astype(BF16)


def bench_weights(rng, n, k):
    """A random checkpoint weight and its scale at a bench shape."""
    return w8a8.quantize_weight_per_channel(rng.standard_normal((n, k)).astype(np.float32) * np.float32(0.02))[:2]
