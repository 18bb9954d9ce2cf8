"""``quant_matmul`` (npu_quant_matmul): the int8 GEMM with its dequant epilogue, every dtype combination
of the op-plugin docs table / ops-nn ``aclnnQuantMatmulV4.md`` (bf16 / fp16 / int8 / int32 output; fp32, bf16 or
packed int64 scale; optional per-token scale, offset, int32 or float bias)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...declare import BadCall, BenchCase, Case, OpDecl, Stage, declare, outputs
from ...values import float_tensor, int8_tensor, int_tensor, literal as a, positive_scales, rng_for
from .. import _dsv4
from ._common import bench_int8, BF16, I8, MATMUL_FIELDS, S5, W, random_int8

OP = "quant_matmul"

# (output, scale dtype, bias dtype, offset?, pertoken?) rows of the dtype table of :func:`w8a8.quant_matmul`
QMM_COMBOS = (
    ("float16", "int64", None, False, False), ("float16", "int64", "int32", False, False),
    ("float16", "float32", "int32", False, False), ("float16", "float32", None, False, False),
    ("int8", "int64", None, False, False), ("int8", "float32", "int32", True, False),
    ("int8", "int64", "int32", True, False), ("int8", "float32", None, False, False),
    ("bfloat16", "float32", None, False, False), ("bfloat16", "bfloat16", "int32", False, False),
    ("bfloat16", "float32", "float32", False, True), ("bfloat16", "bfloat16", "bfloat16", False, True),
    ("bfloat16", "float32", "int32", False, True), ("bfloat16", "bfloat16", None, False, True),
    ("float16", "float32", None, False, True), ("float16", "float32", "float16", False, True),
    ("float16", "float32", "int32", False, True), ("float16", "float32", "float32", False, True),
    ("int32", "float32", None, False, False), ("int32", "bfloat16", "int32", False, False),
)


@st.composite
def _params(draw):
    combo = draw(st.sampled_from(QMM_COMBOS))
    return {"combo": list(combo), "m": draw(S.size(48, big=())), "k": draw(S.size(96, big=(1025, 4097))),
            "n": draw(S.size(48, big=(1025,))), "batch": draw(st.sampled_from(([], [], [2], [2, 1]))),
            "per_tensor": draw(st.booleans()), "dist_a": draw(S.int8_dist()), "dist_b": draw(S.int8_dist()),
            "seed": draw(S.seed())}


# The scales of a drawn case put its outputs where each output dtype is interesting. A product of two
# uniform int8 values has a standard deviation of about 74 * 74 = 5500 = 128 * 43, and a K-deep sum of
# such products (random signs) about sqrt(K) times that: TYPICAL_ACC(K) is the accumulator's typical size.
INT8_PRODUCT_SIZE = 128 * 40


def _typical_acc(k: int) -> float:
    return max(1.0, float(np.sqrt(k)) * INT8_PRODUCT_SIZE)


FLOAT_OUTPUT_RANGE = (0.2, 5.0)    # bf16 / fp16 outputs of order 1: every mantissa bit of the epilogue shows
INT8_OUTPUT_RANGE = (20.0, 400.0)  # int8 requant codes around and beyond +-127: saturation is exercised
PERTOKEN_RANGE = (1e-3, 1e-1)      # per-token scales; the channel scale grows 100x to keep the product in range
INT32_BIAS = 5000                  # a bias of up to a few thousand accumulator steps
PACKED_OFFSET = 40.0               # int8 requant offsets: shift codes across zero and into saturation


def _quant_matmul_build(p):
    out, scale_dt, bias_dt, offset, pertoken = p["combo"]
    rng = rng_for(p["seed"])
    m, k, n = p["m"], p["k"], p["n"]
    x1 = int8_tensor(rng, tuple(p["batch"]) + (m, k), p["dist_a"])
    x2 = int8_tensor(rng, (k, n), p["dist_b"])
    ns = 1 if p["per_tensor"] else n
    acc = _typical_acc(k)
    lo, hi = FLOAT_OUTPUT_RANGE
    scale32 = positive_scales(rng, (ns,), np.float32, low=lo / acc, high=hi / acc)
    kw = {"output_dtype": out}
    if out == "int8":
        lo, hi = INT8_OUTPUT_RANGE
        scale32 = positive_scales(rng, (ns,), np.float32, low=lo / acc, high=hi / acc)
    if pertoken:
        kw["pertoken_scale"] = positive_scales(rng, (m,), np.float32, low=PERTOKEN_RANGE[0], high=PERTOKEN_RANGE[1])
        scale32 = (scale32 * np.float32(100)).astype(np.float32)
    off = rng.uniform(-PACKED_OFFSET, PACKED_OFFSET, size=(ns,)).astype(np.float32) if offset else None
    if scale_dt == "int64":
        scale = w8a8.trans_quant_param(scale32, off) if off is not None else w8a8.trans_quant_param(scale32)
        off = None if p["seed"] % 2 else off  # the offset comes packed in the scale, and for even seeds also as itself
    else:
        scale = scale32.astype(scale_dt)
    if off is not None:
        kw["offset"] = off
    if bias_dt == "int32":
        kw["bias"] = rng.integers(-INT32_BIAS, INT32_BIAS, size=(n,)).astype(np.int32)
    elif bias_dt is not None:
        kw["bias"] = rng.standard_normal(n).astype(np.float32).astype(bias_dt)
    return (x1, x2, scale), kw


# (output, scale dtypes, bias dtypes, pertoken, offset) per row of that table (A2/A3), plus int32 and the
# default output (None: int8).
BIT_COMBOS = (
    ("float16", ("int64", "uint64", "float32"), (None, "int32"), False, False),
    ("int8", ("int64", "uint64", "float32"), (None, "int32"), False, True),
    ("bfloat16", ("float32", "bfloat16"), (None, "int32", "bfloat16", "float32"), False, False),
    ("bfloat16", ("float32", "bfloat16"), (None, "int32", "bfloat16", "float32"), True, False),
    ("float16", ("float32",), (None, "int32", "float16", "float32"), True, False),
    ("int32", ("float32", "bfloat16"), (None, "int32"), False, False),
    (None, ("int64", "float32"), (None, "int32"), False, True),
)


@st.composite
def _bits_params(draw):
    """Every scale dtype of a row (uint64 packed scales too), [N] / [1] / [1, N] scale shapes, the
    default output, batch dims on either side, small or full-range x1, offsets on .5 ties, and x2 in
    the transposed [N, K] storage that a checkpoint weight has."""
    out, scale_dtypes, bias_dtypes, pertoken, offset = draw(st.sampled_from(BIT_COMBOS))
    return {"out": out, "scale_dtype": draw(st.sampled_from(scale_dtypes)),
            "bias_dtype": draw(st.sampled_from(bias_dtypes)), "pertoken": pertoken,
            "offset": offset and draw(st.booleans()), "offset_shape": draw(st.sampled_from(("n", "1"))),
            "m": draw(st.sampled_from((1, 2, 7, 8, 16, 17, 33))), "k": draw(st.sampled_from((1, 7, 17, 64, 129))),
            "n": draw(st.sampled_from((1, 2, 7, 8, 16, 17, 33))),
            "batches": [list(b) for b in draw(st.sampled_from((((), ()), ((2,), ()), ((3,), (3,)), ((2, 1), (1, 2)),
                                                              ((), (2,)))))],
            "scale_shape": draw(st.sampled_from(("n", "1", "1n"))), "full_x1": draw(st.booleans()),
            "transposed_x2": draw(st.booleans()), "seed": draw(S.seed())}


def _scale(rng, dtype, shape, out):
    """A scale of ``dtype`` (an int64 / uint64 one packed by trans_quant_param, half of them with an
    offset): 10^-4 .. 10^-1 for float outputs, 10^-5 .. 10^-2 for int8 (codes near saturation)."""
    mag = 10.0 ** rng.uniform(-4, -1) if out not in ("int8", None) else 10.0 ** rng.uniform(-5, -2)
    s = (rng.random(shape) * mag + mag / 4).astype(np.float32)
    if dtype in ("int64", "uint64"):
        off = (rng.integers(-300, 300, shape) / 2.0).astype(np.float32) if rng.random() < 0.5 else None
        packed = w8a8.trans_quant_param(s, off)
        return packed.view(np.uint64) if dtype == "uint64" else packed
    return s.astype(BF16) if dtype == "bfloat16" else s


def _bias(rng, dtype, n):
    if dtype == "int32":
        return rng.integers(-(2**20), 2**20, n).astype(np.int32)
    return float_tensor(rng, (n,), w8a8.dtypes.resolve(dtype), "gaussian")


def _bits_build(p):
    rng = rng_for(p["seed"])
    (b1, b2), m, k, n, out = p["batches"], p["m"], p["k"], p["n"], p["out"]
    x1 = int_tensor(rng, tuple(b1) + (m, k), np.int8, full=p["full_x1"])
    x2 = int_tensor(rng, tuple(b2) + (k, n), np.int8)
    if p["transposed_x2"]:
        x2 = np.ascontiguousarray(np.swapaxes(x2, -1, -2)).swapaxes(-1, -2)
    sshape = {"n": (n,), "1": (1,), "1n": (1, n)}[p["scale_shape"]]
    kw = {"output_dtype": out}
    if p["bias_dtype"] is not None:
        kw["bias"] = _bias(rng, p["bias_dtype"], n)
    if p["pertoken"]:
        kw["pertoken_scale"] = (rng.random(m) * 0.05).astype(np.float32)
    if p["offset"]:
        kw["offset"] = (rng.integers(-600, 600, (n,) if p["offset_shape"] == "n" else (1,)) / 2.0).astype(np.float32)
    return (x1, x2, _scale(rng, p["scale_dtype"], sshape, out)), kw


def _build(p):
    return _bits_build(p) if "out" in p else _quant_matmul_build(p)


def _acc_stage(b, a, k, up):
    return b.quant_matmul(a[0], a[1], np.ones(1, np.float32), output_dtype="int32")


# -- named cases --------------------------------------------------------------------------------

_ONE_PLUS = np.array([0x3F801FFF], np.uint32).view(np.float32)  # 1.0009765f
_FP19_SCALE = np.array([0x3C4A5FFF], np.uint32).view(np.float32)  # ~0.0123521, all 13 dropped bits set


def _long_k_cases():
    """K = 1025 / 4097 / 5000 for every row of BIT_COMBOS but the default output, every scale and bias dtype."""
    cases = []
    for k in (1025, 4097, 5000):
        for out, scale_dtypes, bias_dtypes, pertoken, offset in BIT_COMBOS[:-1]:
            for sd in scale_dtypes:
                for bd in bias_dtypes:
                    def build(k=k, out=out, sd=sd, bd=bd, pertoken=pertoken, offset=offset):
                        rng = rng_for(k, 7)
                        x1, x2 = random_int8(rng, 3, k), random_int8(rng, k, 7)
                        kw = {"output_dtype": out}
                        if bd is not None:
                            kw["bias"] = _bias(rng, bd, 7)
                        if pertoken:
                            kw["pertoken_scale"] = (rng.random(3) * 0.05).astype(np.float32)
                        if offset:
                            kw["offset"] = np.float32([-3.5])
                        return (x1, x2, _scale(rng, sd, (7,), out)), kw
                    cases.append(Case(f"long_k_{k}_{out}_pt{int(pertoken)}_{sd}_scale_{bd or 'no'}_bias", build,
                                      why=f"K = {k}: beyond the 1024 / 4096 K tiles, with a {sd} scale and "
                                          f"{bd or 'no'} bias to {out}."))
    return cases


def _odd_large(m, k, n, what):
    def build():
        rng = rng_for(m + k + n)
        x1, x2 = random_int8(rng, m, k), random_int8(rng, k, n)
        s = (rng.random(n) * 1e-3).astype(np.float32)
        if what == "bf16_pertoken":
            return (x1, x2, s), {"pertoken_scale": (rng.random(m) * 0.1).astype(np.float32), "output_dtype": "bfloat16"}
        if what == "int8_packed_offset":
            return (x1, x2, w8a8.trans_quant_param(s, np.float32([-2.5]))), {"output_dtype": "int8"}
        return (x1, x2, s), {"bias": rng.integers(-1000, 1000, n).astype(np.int32), "output_dtype": "float16"}
    return build


def _large_k_pertoken():
    rng = rng_for(3)
    return (random_int8(rng, 2, 70000), random_int8(rng, 70000, 3), np.float32([1e-4] * 3)), \
        {"pertoken_scale": np.float32([0.5, 2.0]), "output_dtype": "bfloat16"}


_OVERFLOW_X1 = np.array([[100, -100]], np.int8)
_OVERFLOW_X2 = np.array([[100, 100], [0, 0]], np.int8)

CASES = [
    Case("fp19_packing_fp16_out",
         lambda: ((a([[10]], np.int8), a([[100]], np.int8), _ONE_PLUS.copy()), {"output_dtype": "float16"}),
         {"y": np.array([[1000.0]], np.float16)},
         "fp32 scale + fp16 output + no pertoken_scale: the torch_npu adapter packs the scale with "
         "trans_quant_param (round_mode 0), truncating 1.0009765 to 1.0, so 1000*1.0 = 1000. With the scale at full "
         "precision it would be 1000.9765 -> fp16 1001."),
    Case("no_fp19_with_pertoken",
         lambda: ((a([[10]], np.int8), a([[100]], np.int8), _ONE_PLUS.copy()),
                  {"pertoken_scale": a([1.0], np.float32), "output_dtype": "float16"}),
         {"y": np.array([[1001.0]], np.float16)},
         "With pertoken_scale the adapter does not pack: 1000 * 1.0009765f = 1000.9765 -> fp16 (ulp 0.5 at 1000) "
         "rounds to 1001."),
    Case("fp19_truncation_shows_in_fp16",
         lambda: ((np.array([[100]], np.int8), np.array([[100]], np.int8), _FP19_SCALE.copy()),
                  {"output_dtype": "float16"}),
         {"y": np.array([[123.4375]], np.float16)},
         "fp32 scale, fp16 output, no pertoken: the scale 0x3C4A5FFF (~0.0123521) is packed to FP19 0x3C4A4000 "
         "(~0.0123444), a relative change of ~6e-4, more than an fp16 ulp: fp16(10000 * s) is 123.4375 with FP19 "
         "and would be 123.5 at full precision."),
    Case("bf16_keeps_the_full_fp32_scale",
         lambda: ((np.array([[100]], np.int8), np.array([[100]], np.int8), _FP19_SCALE.copy()),
                  {"output_dtype": "bfloat16"}),
         {"y": np.array([[np.float32(10000) * _FP19_SCALE[0]]], np.float32).astype(BF16)},
         "bf16 output: no FP19 packing, so y = bf16(fp32(10000 * 0x3C4A5FFF))."),
    Case("int32_bias_before_dequant",
         lambda: ((a([[1]], np.int8), a([[1]], np.int8), a([0.5], BF16)),
                  {"bias": a([3], np.int32), "output_dtype": "bfloat16"}),
         {"y": np.array([[2.0]], np.float32).astype(BF16)},
         "An int32 bias is added to the accumulator inside the cube: (1 + 3) * 0.5 = 2.0. Adding it after the "
         "dequant would give 1*0.5 + 3 = 3.5."),
    Case("int8_requant_9bit",
         lambda: ((a([[15]], np.int8), a([[20]], np.int8), a([1.0], np.float32)),
                  {"offset": a([-200.0], np.float32), "output_dtype": "int8"}),
         {"y": np.array([[55]], np.int8)},
         "acc = 300; s9(300*1.0) clamps to 255; 255 + s9(-200) = 55 -> int8 55. Without the 9-bit steps it would be "
         "300 - 200 = 100."),
    Case("int8_requant_9bit_negative",
         lambda: ((np.array([[-10]], np.int8), np.array([[30]], np.int8), np.float32([1.0])),
                  {"offset": np.float32([200.0]), "output_dtype": "int8"}),
         {"y": np.array([[-56]], np.int8)},
         "acc = -300 (= -10 * 30), deq 1.0: s9(-300) = -256 (9-bit clamp), + s9(200) = -56. A single rounding "
         "without the 9-bit step would give -300 + 200 = -100."),
    Case("int8_packed_offset",
         lambda: ((np.array([[5]], np.int8), np.array([[1]], np.int8),
                   w8a8.trans_quant_param(np.float32([1.0]), np.float32([-3.0]))), {}),
         {"y": np.array([[2]], np.int8)},
         "An int64 scale with the offset -3 packed in it (no offset argument), default int8 output: acc 5 * 1.0 + "
         "(-3) = 2."),
    Case("int8_requant_tie",
         lambda: ((np.array([[5, 1]], np.int8), np.array([[1], [0]], np.int8), np.float32([0.5])),
                  {"output_dtype": "int8"}),
         {"y": np.array([[2]], np.int8)},
         "acc = 5, * 0.5 = 2.5: rint(2.5) = 2 (half to even)."),
    Case("int32_output_ignores_scale",
         lambda: ((a([[-128, -128]], np.int8), a([[-128], [-128]], np.int8), a([0.001], np.float32)),
                  {"output_dtype": "int32"}),
         {"y": np.array([[32768]], np.int32)},
         "int32 output returns the raw accumulator: (-128)*(-128)*2 = 32768, whatever the scale."),
    Case("int32_bias_just_fits",
         lambda: ((np.array([[-1]], np.int8), np.array([[1]], np.int8), np.float32([1.0])),
                  {"bias": np.array([2**31 - 1], np.int32), "output_dtype": "int32"}),
         {"y": np.array([[2**31 - 2]], np.int32)},
         "acc = -1 plus a bias of 2^31 - 1: 2^31 - 2 fits int32 (the +1 accumulator overflows: a bad call)."),
    Case("k_70000_with_pertoken", _large_k_pertoken,
         why="K > 65535 is legal with a float scale and pertoken_scale only; K = 70000 of int8 cannot overflow int32."),
    Case("overflowing_epilogue_bf16",
         lambda: ((_OVERFLOW_X1, _OVERFLOW_X2, np.float32([1e38])),
                  {"pertoken_scale": np.float32([0.0]), "output_dtype": "bfloat16"}),
         {"y": np.array([[0xFFC0, 0xFFC0]], np.uint16).view(BF16)},
         "acc = [10000, 10000]; fp32(acc) * 1e38 overflows to +Inf, then * pertoken 0 = NaN: the x86 default NaN "
         "(sign set, 0xFFC00000), 0xFFC0 in bf16."),
    Case("overflowing_epilogue_fp16",
         lambda: ((_OVERFLOW_X1, _OVERFLOW_X2, np.float32([1e38])),
                  {"pertoken_scale": np.float32([0.0]), "output_dtype": "float16"}),
         why="The same Inf * 0 NaN, rounded to fp16."),
] + [Case(f"odd_dims_{m}x{k}x{n}_{what}", _odd_large(m, k, n, what),
          why=f"M x K x N = {m} x {k} x {n}: one odd dimension beyond 1024 and the others at 1, 7, 17 or 33.")
     for m, k, n in ((1025, 17, 7), (7, 33, 1025), (1, 1025, 1), (17, 5000, 1))
     for what in ("bf16_pertoken", "int8_packed_offset", "fp16_int32_bias")] + _long_k_cases()

def _k_65536(output_dtype, scale):
    return lambda: ((np.ones((1, 65536), np.int8), np.ones((65536, 1), np.int8)),
                    {"output_dtype": output_dtype, "scale": scale})


# K > 65535 is refused whatever the output, unless the scale is a 1-D float scale with pertoken_scale
K_LIMIT = [BadCall(f"k_65536_{name}", _k_65536(out, scale), ValueError, r"quant_matmul: argument 'x1' must be K <= 65535")
           for name, out, scale in (("fp16", "float16", w8a8.trans_quant_param(np.array([0.5], np.float32))),
                                    ("int8", "int8", np.array([0.5], np.float32)),
                                    ("bf16_no_pertoken", "bfloat16", np.array([0.5], np.float32)),
                                    ("int32", "int32", np.array([0.5], np.float32)))]

# the golden tests' fixtures (tests/golden/test_quant_matmul.py)
X1 = np.ones((4, 8), np.int8)
X2 = np.ones((8, 3), np.int8)
F32 = np.ones(3, np.float32)
I64 = w8a8.trans_quant_param(F32)
PT = np.ones(4, np.float32)

BAD_CALLS = [
    BadCall("output_dtype_value", lambda: ((I8, W, S5), {"output_dtype": "float32"}),
            ValueError, r"quant_matmul: argument 'output_dtype' must be None, int8, float16, bfloat16 or int32"),
    BadCall("x1_dtype", lambda: ((I8.astype(np.int32), W, S5), {}),
            TypeError, r"quant_matmul: argument 'x1' must be of dtype int8"),
    BadCall("x1_shape", lambda: ((np.ones(16, np.int8), W, S5), {}),
            ValueError, r"quant_matmul: argument 'x1' must be 2-D to 6-D"),
    BadCall("x1_shape_2", lambda: ((np.ones((1,) * 5 + (3, 16), np.int8), W, S5), {}),
            ValueError, r"quant_matmul: argument 'x1' must be 2-D to 6-D"),
    BadCall("x2_shape", lambda: ((I8, np.ones((15, 5), np.int8), S5), {}),
            ValueError, r"quant_matmul: argument 'x2' must be of shape \[\.\.\., K=16, N\]"),
    BadCall("x2_shape_2", lambda: ((np.ones((2, 3, 16), np.int8), np.ones((4, 16, 5), np.int8), S5), {}),
            ValueError, r"quant_matmul: argument 'x2' must be with batch dims broadcastable to x1's"),
    BadCall("scale_shape", lambda: ((I8, W, S5.astype(np.float16)), {}),
            TypeError, r"quant_matmul: argument 'scale' must be float32, bfloat16, int64 or uint64"),
    BadCall("pertoken_scale_shape", lambda: ((I8, W, S5), {"pertoken_scale": np.ones(3, np.float32)}),
            ValueError, r"quant_matmul: argument 'pertoken_scale' must be None for int8 output"),
    BadCall(
        "pertoken_scale_shape_2",
        lambda: ((I8, W, S5), {"pertoken_scale": np.ones(4, np.float32), "output_dtype": "bfloat16"}),
        ValueError,
        r"quant_matmul: argument 'pertoken_scale' must be of shape",
    ),
    BadCall(
        "pertoken_scale_shape_3",
        lambda: ((I8, W, S5), {"pertoken_scale": np.ones((3, 1), np.float32), "output_dtype": "bfloat16"}),
        ValueError,
        r"quant_matmul: argument 'pertoken_scale' must be 1-D",
    ),
    BadCall("scale_dtype", lambda: ((I8, W, S5.astype(BF16)), {"output_dtype": "float16"}),
            TypeError, r"quant_matmul: argument 'scale' must be of dtype int64, uint64 or float32 for float16 output"),
    BadCall(
        "scale_dtype_2",
        lambda: ((I8, W, S5.astype(BF16)), {"pertoken_scale": np.ones(3, np.float32), "output_dtype": "float16"}),
        TypeError,
        r"quant_matmul: argument 'scale' must be of dtype float32 for float16 output with pertoken_scale",
    ),
    BadCall("x1_shape_3", lambda: ((np.ones((1, 65536), np.int8), np.ones((65536, 1), np.int8), np.float32([1.0])), {}),
            ValueError, r"quant_matmul: argument 'x1' must be K <= 65535"),
    BadCall("scale_shape_2", lambda: ((I8, W, np.ones((2, 5), np.float32)), {"output_dtype": "bfloat16"}),
            ValueError, r"quant_matmul: argument 'scale' must be of shape"),
    BadCall("scale_shape_3", lambda: ((I8, W, np.ones(4, np.float32)), {"output_dtype": "bfloat16"}),
            ValueError, r"quant_matmul: argument 'scale' must be of shape"),
    BadCall("offset_dtype", lambda: ((I8, W, S5), {"offset": np.ones(5, np.float32), "output_dtype": "bfloat16"}),
            ValueError, r"quant_matmul: argument 'offset' must be None unless output_dtype is int8"),
    BadCall("offset_shape", lambda: ((I8, W, S5), {"offset": np.ones(4, np.float32)}),
            ValueError, r"quant_matmul: argument 'offset' must be of shape"),
    BadCall("offset_dtype_2", lambda: ((I8, W, S5), {"offset": np.ones(5, np.float64)}),
            TypeError, r"quant_matmul: argument 'offset' must be of dtype float32"),
    BadCall("bias_dtype", lambda: ((I8, W, S5), {"bias": np.ones(5, np.float32), "output_dtype": "float16"}),
            TypeError, r"quant_matmul: argument 'bias' must be of dtype int32"),
    BadCall("bias_shape", lambda: ((I8, W, S5), {"bias": np.ones(4, np.int32)}),
            ValueError, r"quant_matmul: argument 'bias' must be of shape"),
    BadCall("bias_shape_2", lambda: ((I8, W, S5), {"bias": np.ones((2, 5), np.int32)}),
            ValueError, r"quant_matmul: argument 'bias' must be of shape"),
    BadCall("scale_nonfinite", lambda: ((I8, W, S5 * np.nan), {"output_dtype": "bfloat16"}),
            ValueError, r"quant_matmul: argument 'scale' must be finite"),
    BadCall(
        "pertoken_scale_nonfinite",
        lambda: ((I8, W, S5), {"pertoken_scale": np.float32([1, np.inf, 1]), "output_dtype": "bfloat16"}),
        ValueError,
        r"quant_matmul: argument 'pertoken_scale' must be finite",
    ),
    BadCall(
        "bias_nonfinite",
        lambda: ((I8, W, S5), {"bias": np.full(5, np.inf, np.float32), "output_dtype": "bfloat16"}),
        ValueError,
        r"quant_matmul: argument 'bias' must be finite",
    ),
    BadCall("offset_nonfinite", lambda: ((I8, W, S5), {"offset": np.float32([np.nan])}),
            ValueError, r"quant_matmul: argument 'offset' must be finite"),
    BadCall("output_dtype_dtype", lambda: ((I8, W, S5), {"output_dtype": "nope"}),
            TypeError, r"quant_matmul: argument 'output_dtype' must be a dtype or one of"),
    BadCall("scale_dtype_3", lambda: ((I8, W, w8a8.trans_quant_param(S5)), {"output_dtype": "int32"}),
            TypeError, r"quant_matmul: argument 'scale' must be of dtype float32 or bfloat16 for int32 output"),
    BadCall(
        "x1_shape_4",
        lambda: (
            (np.ones((1, 65536), np.int8), np.ones((65536, 1), np.int8), np.ones((1, 1), np.float32)),
            {"pertoken_scale": np.ones(1, np.float32), "output_dtype": "bfloat16"},
        ),
        ValueError,
        r"quant_matmul: argument 'x1' must be K <= 65535",
    ),
    BadCall(
        "x2_shape_3",
        lambda: (
            (np.ones((1, 2), np.int8), np.ones((2, 65536), np.int8), np.float32([1.0])),
            {"output_dtype": "int32"},
        ),
        ValueError,
        r"quant_matmul: argument 'x2' must be N <= 65535",
    ),
    BadCall("scale_shape_4", lambda: ((X1, X2, F32.astype(np.float16)), dict(output_dtype="bfloat16")),
            TypeError, r"quant_matmul: argument 'scale' must be float32, bfloat16, int64 or uint64"),
    BadCall("scale_shape_5", lambda: ((X1, X2, F32.astype(np.float16)), {}),
            TypeError, r"quant_matmul: argument 'scale' must be float32, bfloat16, int64 or uint64"),
    BadCall("scale_dtype_4", lambda: ((X1, X2, F32.astype(BF16)), dict(output_dtype="float16")),
            TypeError, r"quant_matmul: argument 'scale' must be of dtype int64, uint64 or float32 for float16 output"),
    BadCall("scale_dtype_5", lambda: ((X1, X2, F32.astype(BF16)), dict(output_dtype="int8")),
            TypeError, r"quant_matmul: argument 'scale' must be of dtype int64, uint64 or float32 for int8 output"),
    BadCall("scale_dtype_6", lambda: ((X1, X2, I64), dict(output_dtype="bfloat16")),
            TypeError, r"quant_matmul: argument 'scale' must be of dtype float32 or bfloat16 for bfloat16 output"),
    BadCall(
        "scale_dtype_7",
        lambda: ((X1, X2, I64), dict(output_dtype="float16", pertoken_scale=PT)),
        TypeError,
        r"quant_matmul: argument 'scale' must be of dtype float32 for float16 output with pertoken_scale",
    ),
    BadCall(
        "scale_dtype_8",
        lambda: ((X1, X2, F32.astype(BF16)), dict(output_dtype="float16", pertoken_scale=PT)),
        TypeError,
        r"quant_matmul: argument 'scale' must be of dtype float32 for float16 output with pertoken_scale",
    ),
    BadCall("scale_dtype_9", lambda: ((X1, X2, F32.astype(np.int32)), dict(output_dtype="int32")),
            TypeError, r"quant_matmul: argument 'scale' must be of dtype float32 or bfloat16 for int32 output"),
    BadCall("bias_dtype_2", lambda: ((X1, X2, F32), dict(output_dtype="float16", bias=F32)),
            TypeError, r"quant_matmul: argument 'bias' must be of dtype int32"),
    BadCall("bias_dtype_3", lambda: ((X1, X2, F32), dict(output_dtype="float16", bias=F32.astype(np.float16))),
            TypeError, r"quant_matmul: argument 'bias' must be of dtype int32"),
    BadCall("bias_dtype_4", lambda: ((X1, X2, F32), dict(output_dtype="bfloat16", bias=F32.astype(np.float16))),
            TypeError, r"quant_matmul: argument 'bias' must be of dtype int32, bfloat16 or float32"),
    BadCall(
        "bias_dtype_5",
        lambda: ((X1, X2, F32), dict(output_dtype="float16", pertoken_scale=PT, bias=F32.astype(BF16))),
        TypeError,
        r"quant_matmul: argument 'bias' must be of dtype int32, float16 or float32",
    ),
    BadCall("bias_dtype_6", lambda: ((X1, X2, F32), dict(output_dtype="int8", bias=F32)),
            TypeError, r"quant_matmul: argument 'bias' must be of dtype int32"),
    BadCall("bias_dtype_7", lambda: ((X1, X2, F32), dict(output_dtype="int32", bias=F32)),
            TypeError, r"quant_matmul: argument 'bias' must be of dtype int32"),
    BadCall("bias_dtype_8", lambda: ((X1, X2, F32), dict(bias=F32.astype(np.int64))),
            TypeError, r"quant_matmul: argument 'bias' must be of dtype int32"),
    BadCall("offset_dtype_3", lambda: ((X1, X2, F32), dict(offset=F32.astype(BF16))),
            TypeError, r"quant_matmul: argument 'offset' must be of dtype float32"),
    BadCall(
        "pertoken_scale_dtype",
        lambda: ((X1, X2, F32), dict(output_dtype="bfloat16", pertoken_scale=PT.astype(BF16))),
        TypeError,
        r"quant_matmul: argument 'pertoken_scale' must be of dtype float32",
    ),
    BadCall("x1_dtype_2", lambda: ((X1.astype(np.int32), X2, F32), {}),
            TypeError, r"quant_matmul: argument 'x1' must be of dtype int8"),
    BadCall("x1_dtype_3", lambda: ((X1.astype(np.float16), X2, F32), {}),
            TypeError, r"quant_matmul: argument 'x1' must be of dtype int8"),
    BadCall("x2_dtype", lambda: ((X1, X2.astype(np.uint8), F32), {}),
            TypeError, r"quant_matmul: argument 'x2' must be of dtype int8"),
    BadCall("x1_type", lambda: ((X1.tolist(), X2, F32), {}),
            TypeError, r"quant_matmul: argument 'x1' must be a numpy\.ndarray"),
    BadCall("output_dtype_value_2", lambda: ((X1, X2, F32), dict(output_dtype="float32")),
            ValueError, r"quant_matmul: argument 'output_dtype' must be None, int8, float16, bfloat16 or int32"),
    BadCall("output_dtype_dtype_2", lambda: ((X1, X2, F32), dict(output_dtype="nonsense")),
            TypeError, r"quant_matmul: argument 'output_dtype' must be a dtype or one of"),
    BadCall("pertoken_scale_shape_4", lambda: ((X1, X2, F32), dict(pertoken_scale=PT)),
            ValueError, r"quant_matmul: argument 'pertoken_scale' must be None for int8 output"),
    BadCall("pertoken_scale_shape_5", lambda: ((X1, X2, F32), dict(output_dtype="int32", pertoken_scale=PT)),
            ValueError, r"quant_matmul: argument 'pertoken_scale' must be None for int32 output"),
    BadCall("offset_dtype_4", lambda: ((X1, X2, F32), dict(output_dtype="bfloat16", offset=F32)),
            ValueError, r"quant_matmul: argument 'offset' must be None unless output_dtype is int8"),
    BadCall("offset_dtype_5", lambda: ((X1, X2, F32), dict(output_dtype="float16", offset=F32)),
            ValueError, r"quant_matmul: argument 'offset' must be None unless output_dtype is int8"),
    BadCall("offset_dtype_6", lambda: ((X1, X2, F32), dict(output_dtype="int32", offset=F32)),
            ValueError, r"quant_matmul: argument 'offset' must be None unless output_dtype is int8"),
    BadCall("offset_shape_2", lambda: ((X1, X2, F32), dict(offset=np.ones(2, np.float32))),
            ValueError, r"quant_matmul: argument 'offset' must be of shape"),
    BadCall("offset_shape_3", lambda: ((X1, X2, F32), dict(offset=np.ones((1, 3), np.float32))),
            ValueError, r"quant_matmul: argument 'offset' must be 1-D"),
    BadCall("x1_shape_5", lambda: ((np.ones(8, np.int8), X2, F32), {}),
            ValueError, r"quant_matmul: argument 'x1' must be 2-D to 6-D"),
    BadCall("x1_shape_6", lambda: ((np.ones((1,) * 5 + (4, 8), np.int8), X2, F32), {}),
            ValueError, r"quant_matmul: argument 'x1' must be 2-D to 6-D"),
    BadCall("x2_shape_4", lambda: ((X1, np.ones(8, np.int8), F32), {}),
            ValueError, r"quant_matmul: argument 'x2' must be 2-D to 6-D"),
    BadCall("x2_shape_5", lambda: ((X1, np.ones((9, 3), np.int8), F32), {}),
            ValueError, r"quant_matmul: argument 'x2' must be of shape \[\.\.\., K=8, N\]"),
    BadCall("x2_shape_6", lambda: ((np.ones((2, 4, 8), np.int8), np.ones((3, 8, 3), np.int8), F32), {}),
            ValueError, r"quant_matmul: argument 'x2' must be with batch dims broadcastable to x1's"),
    BadCall("scale_shape_6", lambda: ((X1, X2, np.ones(4, np.float32)), {}),
            ValueError, r"quant_matmul: argument 'scale' must be of shape"),
    BadCall("scale_shape_7", lambda: ((X1, X2, np.ones((2, 3), np.float32)), {}),
            ValueError, r"quant_matmul: argument 'scale' must be of shape"),
    BadCall("scale_shape_8", lambda: ((X1, X2, np.ones((3, 1), np.float32)), {}),
            ValueError, r"quant_matmul: argument 'scale' must be of shape"),
    BadCall("bias_shape_3", lambda: ((X1, X2, F32), dict(bias=np.ones(4, np.int32))),
            ValueError, r"quant_matmul: argument 'bias' must be of shape"),
    BadCall(
        "pertoken_scale_shape_6",
        lambda: ((X1, X2, F32), dict(output_dtype="bfloat16", pertoken_scale=np.ones(5, np.float32))),
        ValueError,
        r"quant_matmul: argument 'pertoken_scale' must be of shape",
    ),
    BadCall(
        "pertoken_scale_shape_7",
        lambda: ((X1, X2, F32), dict(output_dtype="bfloat16", pertoken_scale=np.ones((4, 1), np.float32))),
        ValueError,
        r"quant_matmul: argument 'pertoken_scale' must be 1-D",
    ),
    BadCall(
        "scale_inf",
        lambda: ((X1, X2), dict(scale=np.array([1.0, np.inf, 1.0], np.float32).astype(BF16), output_dtype='bfloat16')),
        ValueError,
        r"quant_matmul: argument 'scale' must be finite",
    ),
    BadCall(
        "pertoken_scale_nan",
        lambda: (
            (X1, X2),
            dict(scale=F32, pertoken_scale=np.array([1, 1, np.nan, 1], np.float32), output_dtype='bfloat16'),
        ),
        ValueError,
        r"quant_matmul: argument 'pertoken_scale' must be finite",
    ),
    BadCall(
        "bias_nan",
        lambda: ((X1, X2), dict(scale=F32, bias=np.array([0, np.nan, 0], np.float32), output_dtype='bfloat16')),
        ValueError,
        r"quant_matmul: argument 'bias' must be finite",
    ),
    BadCall("offset_inf", lambda: ((X1, X2), dict(scale=F32, offset=np.array([0, 0, np.inf], np.float32))),
            ValueError, r"quant_matmul: argument 'offset' must be finite"),
    BadCall(
        "bias_overflows_acc",
        lambda: (
            (np.full((1, 65535), -128, np.int8), np.full((65535, 1), -128, np.int8), np.ones(1, np.float32)),
            dict(bias=np.array([2**30 + 2**29], np.int32), output_dtype='int32'),
        ),
        OverflowError,
        r"quant_matmul: the int32 accumulator overflows at output index",
    ),
    BadCall("int32_bias_overflows", lambda: ((np.array([[1]], np.int8), np.array([[1]], np.int8), np.float32([1.0])),
                                             {"bias": np.array([2**31 - 1], np.int32), "output_dtype": "int32"}),
            OverflowError, r"quant_matmul: the int32 accumulator overflows at output index \(0, 0\) "
                           r"\(exact sum 2147483648\)",
            "acc = 1 plus a bias of 2^31 - 1: the int32 add overflows (exact sum 2^31)."),
    BadCall("int4_x2_with_an_fp32_scale", lambda: ((X1, np.ones((8, 1), np.int32), F32), {"output_dtype": "bfloat16"}),
            TypeError, r"quant_matmul: argument 'scale' must be of dtype int64 or uint64",
            "int32 x2 is the packed-int4 route (A8W4): its scale must be a packed int64 one. A backend without that "
            "route still refuses the call the golden's way: Backend.prepare runs the golden's check first."),
    BadCall("k_70000_without_pertoken", lambda: ((np.ones((2, 70000), np.int8), np.ones((70000, 3), np.int8),
                                                  np.float32([1e-4] * 3)), {"output_dtype": "bfloat16"}),
            ValueError, r"quant_matmul: argument 'x1' must be K <= 65535"),
]



def _bench_inputs(p, rng):
    """The per-token W8A8 GEMM: bf16 output, per-channel scale (bf16 as served, or fp32) x fp32 per-token."""
    from w8a8 import dtypes

    m, k, n = p["m"], p["k"], p["n"]
    scale = rng.uniform(1e-3, 2e-3, n).astype(np.float32).astype(dtypes.resolve(p.get("scale_dtype", "bfloat16")))
    pt = rng.uniform(1e-3, 2e-3, m).astype(np.float32)
    return (bench_int8(rng, m, k), bench_int8(rng, k, n), scale), {"pertoken_scale": pt, "output_dtype": "bfloat16"}


def bench_case(m: int, k: int, n: int, tags=(), scale_dtype: str = "bfloat16") -> BenchCase:
    label = f"M{m}xK{k}xN{n}" + ("" if scale_dtype == "bfloat16" else f"-{scale_dtype}-scale")
    params = {"m": m, "k": k, "n": n} | ({} if scale_dtype == "bfloat16" else {"scale_dtype": scale_dtype})
    return BenchCase(OP, label, params, _bench_inputs, work=2.0 * m * k * n, tags=tags)


declare(OpDecl(
    name=OP, family="dense", params=_params, build=_build, strategies={"bits": _bits_params},
    outputs=outputs(("y", "float")), numerics_fields=MATMUL_FIELDS,
    stages=(Stage("acc", "int", _acc_stage), Stage("y", "float", lambda b, a, k, up: b.quant_matmul(*a, **k))),
    cases=CASES, bad_calls=BAD_CALLS + K_LIMIT,
    bench=lambda full: [bench_case(m, _dsv4.H, 2 * _dsv4.I, _dsv4.tags(m)) for m in _dsv4.token_counts(full)],
    description="int8 GEMM + dequant epilogue, every dtype combination (npu_quant_matmul)"))
