"""``quant_matmul`` (npu_quant_matmul; w8a8/quant_matmul.py) — ops-nn ``matmul/quant_batch_matmul_v3/``.

Every dtype combination of the dtype table is checked against an independent recomputation of the
epilogue formula (``quant_batch_matmul_v3_pertoken.h``, ``qbmmv3_kernel_golden.py``) done here: the accumulator as an
int64 ``np.matmul``; the epilogue in float64 with one rounding to float32 after every fp32 operation (exactly fp32
arithmetic for +, * of fp32 values: products are exact in float64 and the double rounding of a sum is innocuous since
53 >= 2*24 + 2); the final cast by an explicit round-to-nearest-even on the bits (bf16) or NumPy's IEEE cast (fp16);
FP19 as the mask ``bits & 0xFFFFE000`` (``trans_quant_param_v2.h``); the requant ``s9`` steps with ``np.rint``.
"""

import zlib

import numpy as np
import pytest
from hypothesis import given, strategies as st

from w8a8 import ASCEND, bfloat16, quant_matmul, quant_matmul_stages, trans_quant_param
from w8a8.quant_matmul import quant_matmul_args

# ---------------------------------------------------------------- the reference


def rn32(v):
    return np.asarray(v, np.float64).astype(np.float32).astype(np.float64)


def fp19_mask(s32):
    return (np.asarray(s32, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def bf16_rne(v32):
    u = np.asarray(v32, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(bfloat16)


def cast(v64, out):
    v32 = np.asarray(v64, np.float64).astype(np.float32)
    if out == "bfloat16":
        return bf16_rne(v32)
    with np.errstate(over="ignore"):
        return v32.astype(np.float16)


def s9(v):
    return np.clip(np.rint(v), -256, 255)


def ref_qmm(x1, x2, out, scale64=None, pertoken=None, int_bias=None, float_bias=None, offset=None,
            order="scale_then_token", bias_where="accumulator"):
    """The epilogue: acc (+ int32 bias) -> fp32 * scale[n] (* pertoken[m]) (+ float bias) -> cast / requant."""
    acc = np.matmul(x1.astype(np.int64), x2.astype(np.int64))
    if int_bias is not None and bias_where == "accumulator":
        acc = acc + int_bias.astype(np.int64)
    if out == "int32":
        return acc.astype(np.int32)
    v = rn32(acc.astype(np.float64))                    # float(acc): exact below 2^24, else RNE
    if out == "int8":
        v = rn32(v * scale64)
        if int_bias is not None and bias_where == "after_dequant":
            v = rn32(v + int_bias)
        o = 0.0 if offset is None else s9(offset)
        return np.clip(s9(s9(v) + o), -128, 127).astype(np.int8)
    if pertoken is None:
        v = rn32(v * scale64)
    elif order == "scale_then_token":
        v = rn32(rn32(v * scale64) * pertoken[:, None])
    elif order == "token_then_scale":
        v = rn32(rn32(v * pertoken[:, None]) * scale64)
    else:
        v = rn32(v * rn32(scale64 * pertoken[:, None]))
    if int_bias is not None and bias_where == "after_dequant":
        v = rn32(v + int_bias)
    if float_bias is not None:
        v = rn32(v + float_bias)
    return cast(v, out)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def f64(a):
    return np.asarray(a).astype(np.float32).astype(np.float64)


# ---------------------------------------------------------------- the dtype table: every legal combination

# (output, scale kind, allowed bias kinds, pertoken, offset allowed)
TABLE = [
    ("float16", "int64", ("none", "int32"), False, False),
    ("float16", "uint64", ("none", "int32"), False, False),
    ("float16", "float32", ("none", "int32"), False, False),
    ("int8", "int64", ("none", "int32"), False, True),
    ("int8", "float32", ("none", "int32"), False, True),
    ("bfloat16", "float32", ("none", "int32", "bfloat16", "float32"), False, False),
    ("bfloat16", "bfloat16", ("none", "int32", "bfloat16", "float32"), False, False),
    ("bfloat16", "float32", ("none", "int32", "bfloat16", "float32"), True, False),
    ("bfloat16", "bfloat16", ("none", "int32", "bfloat16", "float32"), True, False),
    ("float16", "float32", ("none", "int32", "float16", "float32"), True, False),
    ("int32", "float32", ("none", "int32"), False, False),
    ("int32", "bfloat16", ("none", "int32"), False, False),
]
CASES = [(out, sk, bk, pt, off) for out, sk, bks, pt, offs in TABLE for bk in bks
         for off in ((False, True) if offs else (False,))]


def make_case(rng, out, scale_kind, bias_kind, pertoken, with_offset, m=7, k=33, n=17, batch1=(), batch2=()):
    x1 = rng.integers(-128, 128, batch1 + (m, k)).astype(np.int8)
    x2 = rng.integers(-128, 128, batch2 + (k, n)).astype(np.int8)
    s32 = (rng.random(n) * 0.009 + 0.001).astype(np.float32)
    o32 = (rng.integers(-40, 40, n) + 0.5 * rng.integers(0, 2, n)).astype(np.float32)   # ties included
    kw, ref = {}, {}
    # the fp32 scale the epilogue must use
    if scale_kind in ("int64", "uint64"):
        packed = trans_quant_param(s32, o32 if with_offset else None)
        kw["scale"] = packed if scale_kind == "int64" else packed.view(np.uint64)
        ref["scale64"] = f64(fp19_mask(s32))            # decoded: FP19 value (truncated)
        if with_offset:
            ref["offset"] = np.rint(f64(o32))            # ... and its 9-bit offset
    elif scale_kind == "bfloat16":
        kw["scale"] = s32.astype(bfloat16)
        ref["scale64"] = f64(kw["scale"])
    else:
        kw["scale"] = s32
        adapter_packs = not pertoken and out in ("float16", "int8")  # QuantMatmulKernelNpuOpApi.cpp
        ref["scale64"] = f64(fp19_mask(s32)) if adapter_packs else f64(s32)
        if with_offset:
            kw["offset"] = o32
            ref["offset"] = f64(o32)
    if pertoken:
        kw["pertoken_scale"] = (rng.random(m) * 0.02 + 0.001).astype(np.float32)
        ref["pertoken"] = f64(kw["pertoken_scale"])
    if bias_kind == "int32":
        kw["bias"] = rng.integers(-3000, 3000, n).astype(np.int32)
        ref["int_bias"] = kw["bias"]
    elif bias_kind != "none":
        kw["bias"] = (rng.standard_normal(n) * 4).astype(bias_kind)
        ref["float_bias"] = f64(kw["bias"])
    return x1, x2, kw, ref


@pytest.mark.parametrize("out, scale_kind, bias_kind, pertoken, with_offset", CASES)
def test_every_legal_combination_matches_the_formula(out, scale_kind, bias_kind, pertoken, with_offset):
    rng = np.random.default_rng(zlib.crc32(repr((out, scale_kind, bias_kind, pertoken, with_offset)).encode()))
    x1, x2, kw, ref = make_case(rng, out, scale_kind, bias_kind, pertoken, with_offset)
    y = quant_matmul(x1, x2, output_dtype=out, **kw)
    want = ref_qmm(x1, x2, out, **ref)
    assert same_bits(y, want)
    if out == "int8":  # the scales are chosen so that requant saturates somewhere
        assert y.min() == -128 or y.max() == 127


def test_output_dtype_none_is_int8():
    rng = np.random.default_rng(0)
    x1, x2, kw, ref = make_case(rng, "int8", "float32", "none", False, False)
    assert same_bits(quant_matmul(x1, x2, **kw), ref_qmm(x1, x2, "int8", **ref))


# ---------------------------------------------------------------- FP19: exactly where the adapter packs

# 0x3C001FFF = 2^-7 * (1 + 8191 * 2^-23): its FP19 truncation is exactly 2^-7 = 0x3C000000, a
# relative change of ~9.8e-4, one to two fp16 ulps of the result.
S_WIDE = np.array([0x3C001FFF], np.uint32).view(np.float32)


def _fp19_operands():
    x1 = np.arange(-128, 128, 3, dtype=np.int8).reshape(-1, 1)   # acc = x1 * 127
    x2 = np.full((1, 1), 127, np.int8)
    return x1, x2


@pytest.mark.parametrize("out, pertoken, packs", [
    ("float16", False, True),    # fp32 scale, no pertoken, fp16 out: the adapter calls trans_quant_param
    ("int8", False, True),       # ... int8 out too
    ("bfloat16", False, False),  # bf16 out: full-precision fp32 scale
    ("bfloat16", True, False),   # per-token paths: full precision ("Mix path, no truncation")
    ("float16", True, False),
])
def test_fp19_packing_exactly_where_the_adapter_applies_it(out, pertoken, packs):
    x1, x2 = _fp19_operands()
    kw = {"pertoken_scale": np.ones(x1.shape[0], np.float32)} if pertoken else {}
    st_ = quant_matmul_stages(x1, x2, S_WIDE, output_dtype=out, **kw)
    used = 0x3C000000 if packs else 0x3C001FFF
    assert st_["scale"].view(np.uint32).tolist() == [used]
    pt = f64(kw["pertoken_scale"]) if pertoken else None
    want = ref_qmm(x1, x2, out, scale64=f64(st_["scale"]), pertoken=pt)
    other = ref_qmm(x1, x2, out, scale64=f64(np.array([used ^ 0x1FFF], np.uint32).view(np.float32)), pertoken=pt)
    assert same_bits(st_["y"], want)
    if out == "float16":   # fp16 resolves the difference: some outputs must differ between the two scales
        assert not same_bits(st_["y"], other)


def test_fp19_numerics_switches():
    x1, x2 = _fp19_operands()
    never = quant_matmul_stages(x1, x2, S_WIDE, output_dtype="float16", numerics=ASCEND.replace(fp19_scale="never"))
    assert never["scale"].view(np.uint32).tolist() == [0x3C001FFF]
    always = quant_matmul_stages(x1, x2, S_WIDE, output_dtype="bfloat16", numerics=ASCEND.replace(fp19_scale="always"))
    assert always["scale"].view(np.uint32).tolist() == [0x3C000000]
    # round_mode 1: low 13 bits 0x1FFF > 0x1000 -> round up to 0x3C002000
    rne = quant_matmul_stages(x1, x2, S_WIDE, output_dtype="float16", numerics=ASCEND.replace(fp19_round_mode=1))
    assert rne["scale"].view(np.uint32).tolist() == [0x3C002000]
    assert same_bits(rne["y"], ref_qmm(x1, x2, "float16", scale64=f64(rne["scale"])))
    # a bf16 scale is never FP19-packed (only fp32 is)
    b = quant_matmul_stages(x1, x2, S_WIDE.astype(bfloat16), output_dtype="bfloat16")
    assert b["scale"].tolist() == [float(S_WIDE.astype(bfloat16)[0])]


def test_packed_scale_and_its_offset_bits():
    x1 = np.array([[20], [-20], [3], [1]], np.int8)
    x2 = np.array([[20, 1]], np.int8)                       # acc = [[400, 20], [-400, -20], [60, 3], [20, 1]]
    s = np.array([1.0, 0.5], np.float32)
    packed = trans_quant_param(s, np.array([-200.0, 2.5], np.float32))   # offsets -200 and 2 (2.5 -> even)
    # int8 out, offset None: the packed offset bits apply. Column 0: s9(400) = 255, 255 - 200 = 55;
    # s9(-400) = -256, -256 - 200 = -456 -> s9 -256 -> -128; 60 - 200 = -140 -> -128; 20 - 200 = -180 -> -128.
    # Column 1 (scale 0.5, offset 2): 10 + 2 = 12; -10 + 2 = -8; 1.5 -> 2, + 2 = 4; 0.5 -> 0, + 2 = 2.
    y = quant_matmul(x1, x2, packed)
    assert y.tolist() == [[55, 12], [-128, -8], [-128, 4], [-128, 2]]
    # an explicit offset wins over the packed bits
    y = quant_matmul(x1, x2, packed, offset=np.array([0.0, 0.0], np.float32))
    assert y.tolist() == [[127, 10], [-128, -10], [60, 2], [20, 0]]
    # fp16 output ignores the offset bits: plain acc * FP19(scale)
    y = quant_matmul(x1, x2, packed, output_dtype="float16")
    assert y.tolist() == [[400.0, 10.0], [-400.0, -10.0], [60.0, 1.5], [20.0, 0.5]]


def test_int8_requant_s9_steps():
    x1 = np.array([[20], [-20], [21]], np.int8)
    x2 = np.array([[20, 1]], np.int8)                       # acc = [[400, 20], [-400, -20], [420, 21]]
    scale = np.array([1.0, 0.5], np.float32)
    off = np.array([-200.0, 2.5], np.float32)
    # clamp9: s9(400) = 255 -> 255 - 200 = 55 (a single rounding would give 200 -> 127);
    # s9(-400) = -256 -> -456 -> -256 -> -128; s9(420) = 255 -> 55.
    # col 1: 10 + s9(2.5) = 10 + 2 = 12; -10 + 2 = -8; s9(10.5) = 10 (even) + 2 = 12
    y = quant_matmul(x1, x2, scale, offset=off)
    assert y.tolist() == [[55, 12], [-128, -8], [55, 12]]
    # one rounding at the end (requant_clamp9=False): 400 - 200 = 200 -> 127, 10 + 2.5 = 12.5 -> 12,
    # -10 + 2.5 = -7.5 -> -8, 420 - 200 = 220 -> 127, 10.5 + 2.5 = 13 -> 13
    y = quant_matmul(x1, x2, scale, offset=off, numerics=ASCEND.replace(requant_clamp9=False))
    assert y.tolist() == [[127, 12], [-128, -8], [127, 13]]


def test_int32_bias_enters_the_accumulator():
    x1 = np.array([[1, 2]], np.int8)
    x2 = np.array([[1], [1]], np.int8)                      # acc = 3
    bias = np.array([2], np.int32)
    s = np.array([0.5], np.float32)
    # before scaling: (3 + 2) * 0.5 = 2.5; the wrong order would give 3 * 0.5 + 2 = 3.5
    assert quant_matmul(x1, x2, s, bias=bias, output_dtype="bfloat16").tolist() == [[2.5]]
    after = ASCEND.replace(int32_bias="after_dequant")
    assert quant_matmul(x1, x2, s, bias=bias, output_dtype="bfloat16", numerics=after).tolist() == [[3.5]]
    pt = np.array([4.0], np.float32)
    assert quant_matmul(x1, x2, s, bias=bias, pertoken_scale=pt, output_dtype="float16").tolist() == [[10.0]]
    # int8 requant: (3 + 2) * 0.5 = 2.5 -> s9 -> 2 (even)
    assert quant_matmul(x1, x2, s, bias=bias).tolist() == [[2]]
    # int32 output: acc + bias, and the raw stage acc has no bias
    st_ = quant_matmul_stages(x1, x2, s, bias=bias, output_dtype="int32")
    assert st_["y"].tolist() == [[5]] and st_["acc"].tolist() == [[3]] and st_["scale"] is None


def test_float_bias_after_dequant():
    x1 = np.array([[3]], np.int8)
    x2 = np.array([[1]], np.int8)
    s = np.array([0.5], np.float32)
    b = np.array([0.25], np.float32)
    assert quant_matmul(x1, x2, s, bias=b, output_dtype="bfloat16").tolist() == [[1.75]]
    b16 = np.array([0.25], np.float16)
    assert quant_matmul(x1, x2, s, bias=b16, pertoken_scale=np.array([2.0], np.float32),
                        output_dtype="float16").tolist() == [[3.25]]   # 3 * 0.5 * 2 + 0.25


def test_int32_output_ignores_the_scale():
    rng = np.random.default_rng(4)
    x1 = rng.integers(-128, 128, (5, 40)).astype(np.int8)
    x2 = rng.integers(-128, 128, (40, 6)).astype(np.int8)
    want = np.matmul(x1.astype(np.int64), x2.astype(np.int64))
    for scale in (np.ones(6, np.float32), np.full(6, 1e-3, np.float32), np.full(1, 7.0, np.float32).astype(bfloat16)):
        y = quant_matmul(x1, x2, scale, output_dtype="int32")
        assert y.dtype == np.int32 and np.array_equal(y, want)


def test_epilogue_orders():
    # per-channel first, then per-token: (acc * s[n]) * t[m]; the two other orders round differently
    rng = np.random.default_rng(5)
    x1 = rng.integers(-128, 128, (17, 64)).astype(np.int8)
    x2 = rng.integers(-128, 128, (64, 17)).astype(np.int8)
    s = (rng.random(17) * 0.01).astype(np.float32)
    t = (rng.random(17) * 0.01).astype(np.float32)
    outs = {}
    for order in ("scale_then_token", "token_then_scale", "combined"):
        n = ASCEND.replace(epilogue_order=order)
        y = quant_matmul(x1, x2, s, pertoken_scale=t, output_dtype="float16", numerics=n)
        assert same_bits(y, ref_qmm(x1, x2, "float16", scale64=f64(s), pertoken=f64(t), order=order))
        outs[order] = y
    assert same_bits(quant_matmul(x1, x2, s, pertoken_scale=t, output_dtype="float16"), outs["scale_then_token"])


def test_epilogue_order_is_visible_in_fp16():
    # acc = 27 * 35 = 945, s = 0x3C1065B0, t = 0x3BBC351C (found by search): the fp32 results of
    # (acc * s) * t and of the two other orders differ by an ulp that survives the fp16 rounding:
    # 0.04785 (Ascend order) vs 0.04782 for both (acc * t) * s and acc * (s * t).
    x1, x2 = np.array([[27]], np.int8), np.array([[35]], np.int8)
    s = np.array([0x3C1065B0], np.uint32).view(np.float32)
    t = np.array([0x3BBC351C], np.uint32).view(np.float32)
    ys = {order: quant_matmul(x1, x2, s, pertoken_scale=t, output_dtype="float16",
                              numerics=ASCEND.replace(epilogue_order=order))
          for order in ("scale_then_token", "token_then_scale", "combined")}
    for order, y in ys.items():
        assert same_bits(y, ref_qmm(x1, x2, "float16", scale64=f64(s), pertoken=f64(t), order=order))
    assert ys["scale_then_token"].view(np.uint16)[0, 0] == ys["token_then_scale"].view(np.uint16)[0, 0] + 1
    assert same_bits(ys["token_then_scale"], ys["combined"])


def test_pertoken_opt_kernel_needs_a_measured_platform_limit():
    # The decode ("opt") kernel computes acc * (t[m] * s[n]) (quant_batch_matmul_v3_pertoken_opt.h:507-586
    # @ e5c3fa93) where M <= baseM of the closed TBE tiling (quant_batch_matmul_v3_tiling.cpp:669-694): not
    # derivable from public source, so A3 keeps the basic / TBE order; a platform record carrying a
    # measured limit selects the opt kernel at M <= limit. Data of test_epilogue_order_is_visible_in_fp16.
    from w8a8 import Numerics, platforms, variants

    x1, x2 = np.array([[27]], np.int8), np.array([[35]], np.int8)
    s = np.array([0x3C1065B0], np.uint32).view(np.float32)
    t = np.array([0x3BBC351C], np.uint32).view(np.float32)
    assert variants.select("quant_matmul", x1, x2, s, pertoken_scale=t, output_dtype="float16").name == "pertoken-basic"
    platforms.register(platforms.A3.replace(name="test-a3-opt-m1", qbmm_pertoken_opt_max_m=1))
    opt = Numerics(platform="test-a3-opt-m1")
    assert variants.select("quant_matmul", x1, x2, s, pertoken_scale=t, output_dtype="float16",
                           numerics=opt).name == "pertoken-opt"
    y = quant_matmul(x1, x2, s, pertoken_scale=t, output_dtype="float16", numerics=opt)
    combined = quant_matmul(x1, x2, s, pertoken_scale=t, output_dtype="float16",
                            numerics=ASCEND.replace(epilogue_order="combined"))
    assert same_bits(y, combined)
    assert not same_bits(y, quant_matmul(x1, x2, s, pertoken_scale=t, output_dtype="float16"))
    x1b = np.array([[27], [27]], np.int8)       # M = 2 > 1: the basic order again
    assert variants.select("quant_matmul", x1b, x2, s, pertoken_scale=np.repeat(t, 2), output_dtype="float16",
                           numerics=opt).name == "pertoken-basic"


@pytest.mark.parametrize("b1, b2", [((2,), ()), ((), (3,)), ((2, 1), (3,)), ((2, 3), (1, 3)), ((1,), (4,))])
def test_batch_broadcasting(b1, b2):
    rng = np.random.default_rng(6)
    for out, sk, bk, pt in (("bfloat16", "float32", "int32", True), ("float16", "int64", "int32", False),
                            ("int8", "float32", "none", False), ("int32", "float32", "int32", False),
                            ("float16", "float32", "float16", True)):
        x1, x2, kw, ref = make_case(rng, out, sk, bk, pt, False, m=5, k=19, n=9, batch1=b1, batch2=b2)
        y = quant_matmul(x1, x2, output_dtype=out, **kw)
        assert y.shape == np.broadcast_shapes(b1, b2) + (5, 9)
        # pertoken (M,) applies to every batch
        assert same_bits(y, ref_qmm(x1, x2, out, **ref))


def test_non_contiguous_operands():
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, (9, 40)).astype(np.int8)    # [N, K] storage
    x = rng.integers(-128, 128, (12, 80)).astype(np.int8)
    x1 = x[::2, ::2]                                        # strided [6, 40]
    s = (rng.random(9) * 0.01).astype(np.float32)
    pt = (rng.random(12) * 0.01).astype(np.float32)[::2]
    y = quant_matmul(x1, w.T, s, pertoken_scale=pt, output_dtype="bfloat16")
    y2 = quant_matmul(np.ascontiguousarray(x1), np.ascontiguousarray(w.T), s, pertoken_scale=pt.copy(),
                      output_dtype="bfloat16")
    assert same_bits(y, y2)
    assert same_bits(y, ref_qmm(x1, w.T, "bfloat16", scale64=f64(s), pertoken=f64(pt)))


def test_k_limit():
    k = 65536
    x1 = np.ones((1, k), np.int8)
    x2 = np.ones((k, 1), np.int8)
    s = np.array([0.5], np.float32)
    for kw in ({"output_dtype": "float16", "scale": trans_quant_param(s)},
               {"output_dtype": "int8", "scale": s},
               {"output_dtype": "bfloat16", "scale": s},              # float scale but no pertoken
               {"output_dtype": "int32", "scale": s}):
        with pytest.raises(ValueError, match="'x1'.*65535"):
            quant_matmul(x1, x2, **kw)
    # float scale + pertoken may exceed it: 65536 * 0.5 * 1
    pt = np.ones(1, np.float32)
    assert quant_matmul(x1, x2, s, pertoken_scale=pt, output_dtype="bfloat16").tolist() == [[32768.0]]
    assert quant_matmul(x1, x2, s, pertoken_scale=pt, output_dtype="float16").tolist() == [[32768.0]]
    assert quant_matmul(x1[:, 1:], x2[1:], s, output_dtype="int32").tolist() == [[65535]]   # K = 65535 is fine


# ---------------------------------------------------------------- illegal combinations and bad input

X1 = np.ones((4, 8), np.int8)
X2 = np.ones((8, 3), np.int8)
F32 = np.ones(3, np.float32)
I64 = trans_quant_param(F32)
PT = np.ones(4, np.float32)


@pytest.mark.parametrize("args, kwargs, exc, arg", [
    # dtypes -> TypeError
    ((X1, X2, F32.astype(np.float16)), dict(output_dtype="bfloat16"), TypeError, "'scale'"),   # 161002
    ((X1, X2, F32.astype(np.float16)), {}, TypeError, "'scale'"),
    ((X1, X2, F32.astype(bfloat16)), dict(output_dtype="float16"), TypeError, "'scale'"),
    ((X1, X2, F32.astype(bfloat16)), dict(output_dtype="int8"), TypeError, "'scale'"),
    ((X1, X2, I64), dict(output_dtype="bfloat16"), TypeError, "'scale'"),
    ((X1, X2, I64), dict(output_dtype="float16", pertoken_scale=PT), TypeError, "'scale'"),
    ((X1, X2, F32.astype(bfloat16)), dict(output_dtype="float16", pertoken_scale=PT), TypeError, "'scale'"),
    ((X1, X2, F32.astype(np.int32)), dict(output_dtype="int32"), TypeError, "'scale'"),
    ((X1, X2, F32), dict(output_dtype="float16", bias=F32), TypeError, "'bias'"),        # fp16 w/o pertoken: int32 only
    ((X1, X2, F32), dict(output_dtype="float16", bias=F32.astype(np.float16)), TypeError, "'bias'"),
    ((X1, X2, F32), dict(output_dtype="bfloat16", bias=F32.astype(np.float16)), TypeError, "'bias'"),
    ((X1, X2, F32), dict(output_dtype="float16", pertoken_scale=PT, bias=F32.astype(bfloat16)), TypeError, "'bias'"),
    ((X1, X2, F32), dict(output_dtype="int8", bias=F32), TypeError, "'bias'"),
    ((X1, X2, F32), dict(output_dtype="int32", bias=F32), TypeError, "'bias'"),
    ((X1, X2, F32), dict(bias=F32.astype(np.int64)), TypeError, "'bias'"),
    ((X1, X2, F32), dict(offset=F32.astype(bfloat16)), TypeError, "'offset'"),
    ((X1, X2, F32), dict(output_dtype="bfloat16", pertoken_scale=PT.astype(bfloat16)), TypeError, "'pertoken_scale'"),
    ((X1.astype(np.int32), X2, F32), {}, TypeError, "'x1'"),
    ((X1.astype(np.float16), X2, F32), {}, TypeError, "'x1'"),
    ((X1, X2.astype(np.uint8), F32), {}, TypeError, "'x2'"),
    ((X1.tolist(), X2, F32), {}, TypeError, "'x1'"),
    ((X1, X2, F32), dict(output_dtype="float32"), ValueError, "'output_dtype'"),
    ((X1, X2, F32), dict(output_dtype="nonsense"), TypeError, "'output_dtype'"),
    # forbidden / required arguments, shapes -> ValueError
    ((X1, X2, F32), dict(pertoken_scale=PT), ValueError, "'pertoken_scale'"),                 # int8 out
    ((X1, X2, F32), dict(output_dtype="int32", pertoken_scale=PT), ValueError, "'pertoken_scale'"),
    ((X1, X2, F32), dict(output_dtype="bfloat16", offset=F32), ValueError, "'offset'"),
    ((X1, X2, F32), dict(output_dtype="float16", offset=F32), ValueError, "'offset'"),
    ((X1, X2, F32), dict(output_dtype="int32", offset=F32), ValueError, "'offset'"),
    ((X1, X2, F32), dict(offset=np.ones(2, np.float32)), ValueError, "'offset'"),
    ((X1, X2, F32), dict(offset=np.ones((1, 3), np.float32)), ValueError, "'offset'"),
    ((np.ones(8, np.int8), X2, F32), {}, ValueError, "'x1'"),
    ((np.ones((1,) * 5 + (4, 8), np.int8), X2, F32), {}, ValueError, "'x1'"),
    ((X1, np.ones(8, np.int8), F32), {}, ValueError, "'x2'"),
    ((X1, np.ones((9, 3), np.int8), F32), {}, ValueError, "'x2'"),                            # K mismatch
    ((np.ones((2, 4, 8), np.int8), np.ones((3, 8, 3), np.int8), F32), {}, ValueError, "'x2'"),  # batch
    ((X1, X2, np.ones(4, np.float32)), {}, ValueError, "'scale'"),
    ((X1, X2, np.ones((2, 3), np.float32)), {}, ValueError, "'scale'"),
    ((X1, X2, np.ones((3, 1), np.float32)), {}, ValueError, "'scale'"),
    ((X1, X2, F32), dict(bias=np.ones(4, np.int32)), ValueError, "'bias'"),
    ((X1, X2, F32), dict(output_dtype="bfloat16", pertoken_scale=np.ones(5, np.float32)), ValueError, "'pertoken_scale'"),
    ((X1, X2, F32), dict(output_dtype="bfloat16", pertoken_scale=np.ones((4, 1), np.float32)), ValueError, "'pertoken_scale'"),
])
def test_illegal_calls_name_the_argument(args, kwargs, exc, arg):
    with pytest.raises(exc) as e:
        quant_matmul(*args, **kwargs)
    assert arg in str(e.value) and str(e.value).startswith("quant_matmul: ")


def test_legal_shape_variants():
    # scale (1,) and (1, N); bias (1, N) int32
    y1 = quant_matmul(X1, X2, np.array([0.5], np.float32), output_dtype="bfloat16")
    y2 = quant_matmul(X1, X2, np.full((1, 3), 0.5, np.float32), output_dtype="bfloat16")
    assert same_bits(y1, y2) and y1.tolist() == [[4.0] * 3] * 4
    y3 = quant_matmul(X1, X2, F32, bias=np.ones((1, 3), np.int32), output_dtype="int32")
    assert y3.tolist() == [[9] * 3] * 4


def test_args_normalize_without_copies():
    # quant_matmul_args: the checks of quant_matmul, whose result backends build on. Row scale / bias
    # (1, N) become (N,) views of the caller's arrays; the derived facts are the call's.
    x1 = np.ones((2, 4, 8), np.int8)
    scale = np.full((1, 3), 0.5, np.float32)
    bias = np.ones((1, 3), np.int32)
    a = quant_matmul_args(x1, X2, scale, bias=bias, output_dtype="bfloat16")
    assert (a.m, a.k, a.n, a.batch, a.out_shape) == (4, 8, 3, (2,), (2, 4, 3))
    assert a.out == bfloat16 and a.scale.shape == (3,) and a.bias.shape == (3,)
    assert np.shares_memory(a.scale, scale) and np.shares_memory(a.bias, bias) and a.x1 is x1
    assert a.int_bias and a.bias_kind == "int32" and not a.packed_scale and a.offset is None
    b = quant_matmul_args(X1, X2, trans_quant_param(F32), offset=np.zeros(1, np.float32))
    assert b.out == np.int8 and b.packed_scale and b.bias_kind is None
    # int4 weights (int32 words) take the op's A8W4 route: its checks (an A8W4 scale is packed int64),
    # with the op's own error; a valid call carries the route's arguments in `int4`
    with pytest.raises(TypeError, match="'scale'.*int64") as checked:
        quant_matmul_args(X1, np.ones((8, 1), np.int32), F32, output_dtype="bfloat16")
    with pytest.raises(TypeError) as op:
        quant_matmul(X1, np.ones((8, 1), np.int32), F32, output_dtype="bfloat16")
    assert str(op.value) == str(checked.value)
    c = quant_matmul_args(X1, np.ones((8, 1), np.int32), trans_quant_param(np.ones(8, np.float32)),
                          offset=np.zeros(8, np.float32), pertoken_scale=np.ones((4, 1), np.float32),
                          output_dtype="bfloat16")
    assert c.int4.mode == "a8w4" and (c.m, c.k, c.n, c.batch) == (4, 8, 8, ()) and a.int4 is None


@pytest.mark.parametrize("arg, kwargs", [
    ("scale", dict(scale=np.array([1.0, np.nan, 1.0], np.float32), output_dtype="bfloat16")),
    ("scale", dict(scale=np.array([1.0, np.inf, 1.0], np.float32).astype(bfloat16), output_dtype="bfloat16")),
    ("pertoken_scale", dict(scale=F32, pertoken_scale=np.array([1, 1, np.nan, 1], np.float32), output_dtype="bfloat16")),
    ("bias", dict(scale=F32, bias=np.array([0, np.nan, 0], np.float32), output_dtype="bfloat16")),
    ("offset", dict(scale=F32, offset=np.array([0, 0, np.inf], np.float32))),
])
def test_nan_inf_parameters_raise(arg, kwargs):
    with pytest.raises(ValueError, match=f"'{arg}'.*(NaN|Inf) at index"):
        quant_matmul(X1, X2, **kwargs)


def test_accumulator_overflow_raises():
    k = 65535
    x1 = np.full((1, k), -128, np.int8)
    x2 = np.full((k, 1), -128, np.int8)            # 65535 * 16384 = 1073725440 fits int32 ...
    with pytest.raises(OverflowError):             # ... plus a bias of 2^30 + 2^29 does not
        quant_matmul(x1, x2, np.ones(1, np.float32), bias=np.array([2**30 + 2**29], np.int32), output_dtype="int32")


# ---------------------------------------------------------------- property

@given(st.sampled_from(CASES), st.sampled_from([1, 7, 17]), st.sampled_from([1, 7, 17, 1025]),
       st.sampled_from([1, 7, 17]), st.integers(0, 2**32 - 1))
def test_random_combinations_match_the_formula(case, m, k, n, seed):
    out, sk, bk, pt, off = case
    x1, x2, kw, ref = make_case(np.random.default_rng(seed), out, sk, bk, pt, off, m=m, k=k, n=n)
    assert same_bits(quant_matmul(x1, x2, output_dtype=out, **kw), ref_qmm(x1, x2, out, **ref))
