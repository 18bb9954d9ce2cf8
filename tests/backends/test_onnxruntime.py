"""onnxruntime 1.32's real CPU kernels against the golden run under the record each backend declares.

``onnxruntime`` (``NUMERICS``) and ``onnxruntime-dqmm`` (``DQMM_NUMERICS``) must give the golden's bits on every
mapped op — over adversarial data (exact .5 ties, all-zero rows, subnormals, outliers) and odd sizes (1, 7, 17,
1025) — and refuse what the golden refuses with the golden's message (NaN / Inf included: the base class runs
the golden's check before the library sees the call). Each declared field is shown to matter: the golden under
the Ascend record differs on the same inputs. Calls outside what a kernel takes are declined with a reason.
The records are summarised in docs/backends.md.

Skipped (with the reason) where onnxruntime / onnx are not installed: ``pip install -e ".[ort]"``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import backends
import w8a8
from backends import Unsupported
from backends.numpy_backend import NumpyBackend
from backends.testing import ADVERSARIAL_KINDS, BitwiseChecker, adversarial_rows, assert_bits

pytest.importorskip("onnxruntime", reason="the onnxruntime backends need onnxruntime (pip install -e '.[ort]')")
pytest.importorskip("onnx", reason="the onnxruntime backends build graphs with onnx (pip install -e '.[ort]')")

from backends.onnxruntime import DQMM_NUMERICS, NUMERICS  # noqa: E402

BF16 = ml_dtypes.bfloat16
F32 = np.float32
ORT = backends.get("onnxruntime")
DQMM = backends.get("onnxruntime-dqmm")
CHECK = BitwiseChecker(ORT)
CHECK_DQMM = BitwiseChecker(DQMM)
ASCEND_GOLDEN = NumpyBackend(w8a8.ASCEND.replace(variants="fixed"))
RNG = np.random.default_rng(1414)
SIZES = (1, 7, 17, 1025)


def rows(rng, m, k, kind, dtype=BF16):
    return adversarial_rows(rng, m, k, kind, dtype)


KINDS = ADVERSARIAL_KINDS


def test_available_and_named():
    assert ORT.available() == (True, "")
    assert ORT.spec == "onnxruntime" and DQMM.spec == "onnxruntime-dqmm"
    assert set(ORT.ops()) == {"quantize", "dequantize", "int4_group_dequantize", "int_matmul", "dynamic_quant",
                              "quant_matmul", "w8a8_dynamic_linear", "weight_quant_batchmatmul"}
    assert set(DQMM.ops()) == {"w8a8_dynamic_linear", "dynamic_quant_asymmetric"}


def test_the_declared_records():
    assert w8a8.ASCEND.differences(NUMERICS) == {
        "quantize_div": ("mul_rcp", "div"), "zero_point_position": ("before_rounding", "after_rounding"),
        "nan_code": ("zero", "qmin"), "antiquant_dtype": ("input", "float32"), "variants": ("select", "fixed")}
    assert set(w8a8.ASCEND.differences(DQMM_NUMERICS)) == {
        "act_quant", "dynamic_granularity", "asym_range", "asym_zero_point", "asym_degenerate", "quant_codes",
        "zero_point_position", "epilogue_order", "variants"}


# -- QuantizeLinear / DequantizeLinear ----------------------------------------------------------------------

@pytest.mark.parametrize("out", ["int8", "uint8"])
@pytest.mark.parametrize("layout", ["tensor", "axis0", "axis-1"])
@pytest.mark.parametrize("xdt", [F32, np.float16, BF16])
def test_quantize_linear_is_division_with_the_zero_point_after_rounding(out, layout, xdt):
    for k in SIZES:
        x = (RNG.standard_normal((3, k)) * 4).astype(xdt)
        c = {"tensor": 1, "axis0": 3, "axis-1": k}[layout]
        s = RNG.uniform(0.01, 0.1, c).astype(F32)
        z = RNG.integers(-5, 5, c).astype(out) if out == "int8" else RNG.integers(100, 120, c).astype(np.uint8)
        axis = 0 if layout == "axis0" else -1
        CHECK.same("quantize", x, s, z, dtype=out, axis=axis)
        CHECK.same("quantize", x, s, dtype=out, axis=axis)


def test_quantize_ties_decide_the_declared_fields():
    # x / s = 2.5 exactly (s = 2^-2): division + zero point after rounding: rint(2.5) + 1 = 3;
    # the Ascend record (x * fp32(1/s), zero point before rounding): rint(1 + 2.5) = rint(3.5) = 4
    x = np.array([0.625], F32)
    s = np.array([0.25], F32)
    z = np.array([1], np.int8)
    assert ORT.quantize(x, s, z, dtype="int8", axis=0).tolist() == [3]
    assert ASCEND_GOLDEN.quantize(x, s, z, dtype="int8", axis=0).tolist() == [4]
    # division vs reciprocal: s = 7; x = 45.5 -> 45.5 / 7 = 6.5 exactly (a tie, -> 6) while fp32(1/7) =
    # 0.14285715 is above 1/7: 45.5 * 0.14285715 = 6.5000005 -> 7
    x, s = np.array([45.5], F32), np.array([7.0], F32)
    assert ORT.quantize(x, s, dtype="int8", axis=0).tolist() == [6]
    assert ASCEND_GOLDEN.quantize(x, s, dtype="int8", axis=0).tolist() == [7]


def test_quantize_takes_a_float_zero_point_that_rounds_into_range():
    x = RNG.standard_normal((4, 9)).astype(F32)
    CHECK.same("quantize", x, np.full(9, 0.05, F32), np.full(9, 3.0, F32), dtype="int8", axis=1)
    with pytest.raises(Unsupported, match="zero points that round into the output range"):
        ORT.quantize(x, np.full(9, 0.05, F32), np.full(9, 300.0, F32), dtype="int8", axis=1)


def test_quantize_declines_what_quantize_linear_cannot_do():
    x = np.ones((2, 8), F32)
    with pytest.raises(Unsupported, match="div_mode"):
        ORT.quantize(x, np.ones(8, F32), dtype="int8", div_mode=False)
    with pytest.raises(Unsupported, match="int32"):
        ORT.quantize(x, np.ones(8, F32), dtype="int32", axis=1)


def test_nan_is_refused_before_the_library_sees_it():
    # QuantizeLinear would write qmin for NaN (nan_code="qmin"); the golden refuses NaN under nan_policy="raise"
    # and so does the backend, with the golden's message
    x = np.array([[1.0, np.nan]], F32)
    CHECK.raises(ValueError, "'x' must be finite", "quantize", x, np.ones(1, F32), dtype="int8", axis=1)
    CHECK.raises(ValueError, "'x' must be finite", "dynamic_quant", np.array([[1.0, np.inf]], BF16))


@pytest.mark.parametrize("codes", [np.int8, np.uint8, np.int32])
@pytest.mark.parametrize("out", ["float32", "float16", "bfloat16"])
def test_dequantize_linear(codes, out):
    for k in (1, 17):
        y = RNG.integers(0 if codes == np.uint8 else -100, 100, (5, k)).astype(codes)
        s = RNG.uniform(0.01, 2, k).astype(F32)
        CHECK.same("dequantize", y, s, output_dtype=out)
        CHECK.same("dequantize", y, s.astype(BF16), axis=-1, output_dtype=out)
        CHECK.same("dequantize", y, RNG.uniform(0.01, 2, 5).astype(np.float16), axis=None, output_dtype=out)
        if codes != np.int32:
            CHECK.same("dequantize", y, s, RNG.integers(0, 9, k).astype(codes), output_dtype=out)


def test_dequantize_declines_a_zero_point_of_another_dtype():
    y = np.ones((2, 3), np.int8)
    with pytest.raises(Unsupported, match="zero point of y's dtype"):
        ORT.dequantize(y, np.ones(3, F32), np.ones(3, F32))


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("group", [16, 32, 128])
def test_blocked_dequantize_linear_is_int4_group_dequantize(signed, group):
    n, k = 7, 256
    for sdt in (np.float16, BF16, F32):
        if signed:
            codes, zero = RNG.integers(-8, 8, (n, k)).astype(np.int8), None
        else:
            codes, zero = RNG.integers(0, 16, (n, k)).astype(np.uint8), RNG.integers(0, 16, (n, k // group)).astype(np.uint8)
        scale = RNG.uniform(0.001, 0.1, (n, k // group)).astype(sdt)
        for out in ("float32", "bfloat16", "float16"):
            CHECK.same("int4_group_dequantize", codes, scale, zero, output_dtype=out)


# -- MatMulInteger, QLinearMatMul, per-token graphs -------------------------------------------------------

@pytest.mark.parametrize("adt, bdt", [(np.int8, np.int8), (np.uint8, np.int8), (np.int8, np.uint8), (np.uint8, np.uint8)])
def test_matmul_integer_is_exact(adt, bdt):
    for m, k, n in ((1, 1, 1), (7, 17, 1), (3, 1025, 17), (2, 64, 33)):
        for extreme in (False, True):
            lo, hi = (-128, 127) if adt == np.int8 else (0, 255)
            a = (RNG.choice([lo, hi], (2, m, k)) if extreme else RNG.integers(lo, hi + 1, (2, m, k))).astype(adt)
            lo, hi = (-128, 127) if bdt == np.int8 else (0, 255)
            b = (RNG.choice([lo, hi], (k, n)) if extreme else RNG.integers(lo, hi + 1, (k, n))).astype(bdt)
            CHECK.same("int_matmul", a, b)


def test_bug_matmul_integer_k0_returns_a_stale_buffer():
    """onnxruntime 1.32 MatMulInteger with K = 0 does not write its output: after a 64 x 64 x 64 run of 3 * 5
    the [2, 3] result of a K = 0 run holds 3 * 5 * 64 = 960 where the empty sum is 0. The backend keeps the
    library's behaviour; conformance names it (detector k0-stale-output)."""
    from conformance import registry
    from conformance.evaluate import run_case

    ORT.int_matmul(np.full((64, 64), 3, np.int8), np.full((64, 64), 5, np.int8))
    got = ORT.int_matmul(np.zeros((2, 0), np.int8), np.zeros((0, 3), np.int8))
    assert got.shape == (2, 3) and (got == 960).all()
    rec = run_case(registry.get("int_matmul"), {"named": "int_matmul/empty_2x0_0x3"}, ORT, kind="named",
                   name="int_matmul/empty_2x0_0x3")
    assert rec["status"] == "fail" and rec["attribution"]["detectors"] == ["k0-stale-output"]


def test_matmul_integer_declines_what_could_wrap():
    with pytest.raises(Unsupported, match="wraps on overflow"):
        ORT.int_matmul(np.ones((1, 40000), np.uint8), np.ones((40000, 1), np.uint8))
    with pytest.raises(Unsupported, match="b: exactly 2 dims"):
        ORT.int_matmul(np.ones((2, 1, 4), np.int8), np.ones((2, 4, 3), np.int8))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", [BF16, np.float16])
def test_dynamic_quant_graph_is_the_ascend_reciprocal_kernel(kind, dt):
    for m, k in ((1, 1), (7, 17), (3, 1025), (16, 64)):
        x = rows(RNG, m, k, kind, dt)
        CHECK.same("dynamic_quant", x)
        CHECK.same("dynamic_quant", x.reshape(1, m, k), smooth_scales=RNG.uniform(0.5, 2, k).astype(dt))
        if k % 8 == 0:
            CHECK.same("dynamic_quant", x, dst_type="int4")
    gi = np.array([1, 3, 3, 7], np.int32)
    CHECK.same("dynamic_quant", rows(RNG, 7, 17, kind, dt), smooth_scales=RNG.uniform(0.5, 2, (4, 17)).astype(dt),
               group_index=gi)


def test_dynamic_quant_overflowing_smooth_product_is_the_goldens_error():
    x = np.full((2, 4), 3e38, BF16)       # 3e38 * 16 overflows fp32: the golden's data check, before the graph
    CHECK.raises(ValueError, "smooth_scales", "dynamic_quant", x, smooth_scales=np.full(4, 16, BF16))


@pytest.mark.parametrize("out", ["bfloat16", "float16"])
@pytest.mark.parametrize("bias", [None, "float", "int32"])
def test_quant_matmul_float_outputs(out, bias):
    for m, k, n in ((1, 1, 1), (7, 17, 5), (3, 1025, 17), (2, 64, 33)):
        x1 = RNG.integers(-128, 128, (2, m, k)).astype(np.int8)
        x2 = RNG.integers(-128, 128, (k, n)).astype(np.int8)
        s = RNG.uniform(1e-4, 1e-2, n).astype(F32)
        b = {None: None, "float": RNG.standard_normal(n).astype(F32 if out == "bfloat16" else np.float16),
             "int32": RNG.integers(-1000, 1000, n).astype(np.int32)}[bias]
        pt = RNG.uniform(0.1, 1, m).astype(F32)
        CHECK.same("quant_matmul", x1, x2, s, pertoken_scale=pt, bias=b, output_dtype=out)
        if bias != "float" or out == "bfloat16":
            # without a per-token scale: bf16 at full precision, fp16 through the adapter's FP19 packing
            CHECK.same("quant_matmul", x1, x2, s, bias=b if bias != "float" else b.astype(F32), output_dtype=out)
        if out == "bfloat16":
            CHECK.same("quant_matmul", x1, x2, s.astype(BF16), pertoken_scale=pt, bias=b, output_dtype=out)


def test_quant_matmul_int8_requant_is_qlinear_matmul():
    # QLinearMatMul's sat(rint(acc * s) + zy) equals the golden's 9-bit requant for an integer offset in
    # [-128, 127]; the fp32 scale is FP19-packed at load (the adapter's conversion), an int64 scale decoded
    for m, k, n in ((1, 1, 1), (7, 17, 5), (3, 1025, 17)):
        x1 = RNG.integers(-128, 128, (m, k)).astype(np.int8)
        x2 = RNG.integers(-128, 128, (k, n)).astype(np.int8)
        s = RNG.uniform(1e-4, 1e-2, n).astype(F32)
        for off in (None, np.array([-3.0], F32), np.array([127.0], F32)):
            CHECK.same("quant_matmul", x1, x2, s, offset=off, output_dtype="int8")
        packed = w8a8.trans_quant_param(s, np.full(n, 5.0, F32))
        CHECK.same("quant_matmul", x1, x2, packed, output_dtype="int8")
        CHECK.same("quant_matmul", x1, x2, s, output_dtype="int32", bias=RNG.integers(-9, 9, n).astype(np.int32))


def test_quant_matmul_declines_what_qlinear_matmul_cannot_take():
    x1, x2 = np.ones((2, 4), np.int8), np.ones((4, 3), np.int8)
    with pytest.raises(Unsupported, match="QLinearMatMul"):
        ORT.quant_matmul(x1, x2, np.ones(3, F32), offset=np.array([0.5], F32), output_dtype="int8")
    with pytest.raises(Unsupported, match="QLinearMatMul"):
        ORT.quant_matmul(x1, x2, np.ones(3, F32), offset=np.array([1.0, 2.0, 3.0], F32), output_dtype="int8")


@pytest.mark.parametrize("check", [CHECK, CHECK_DQMM], ids=["per-token-graph", "dynamic-quantize-matmul"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", [BF16, np.float16])
def test_w8a8_dynamic_linear_under_the_declared_record(check, kind, dt):
    # onnxruntime: the per-token graph of ONNX ops (the Ascend record, fixed); onnxruntime-dqmm: the fused
    # DynamicQuantizeMatMul under its own record
    for lead, k, n in (((1,), 1, 1), ((7,), 17, 5), ((3,), 1025, 17), ((2, 8), 64, 33)):
        x = rows(RNG, int(np.prod(lead)), k, kind, dt).reshape(lead + (k,))
        w = RNG.integers(-128, 128, (n, k)).astype(np.int8)
        ws = np.exp(RNG.uniform(-8, -3, n)).astype(F32)
        check.same("w8a8_dynamic_linear", x, w, ws)
        check.same("w8a8_dynamic_linear", x, w, ws, bias=RNG.standard_normal(n).astype(F32))


def test_the_loaded_weight_scale_is_what_the_graph_multiplies_by():
    # x = 1 (bf16): inv = 127, codes 127, s_tok = 1 / 127; acc = 4 * 127 * 127 = 64516. The loaded scale is
    # bf16(1/3) = 0.333984375: y = bf16((64516 * 0.333984375) * fp32(1/127)) = bf16(169.66) = 170 (bf16 spacing 1
    # in [128, 256)). With the checkpoint's fp32 1/3: 169.33 -> 169 — what a backend skipping the load conversion
    # would write.
    x = np.ones((1, 4), BF16)
    w = np.full((1, 4), 127, np.int8)
    y = CHECK.same("w8a8_dynamic_linear", x, w, np.array([1 / 3], F32))
    assert y.astype(F32).tolist() == [[170.0]]
    unloaded = ((F32(64516) * F32(1 / 3)) * (F32(1) / F32(127))).astype(BF16)
    assert float(unloaded) == 169.0


# -- MatMulNBits ---------------------------------------------------------------------------------------------

def _wqbmm_case(rng, m, k, n, int4, group, offset, bias):
    """``((x, w, scale), kwargs, w_hat)``: a W4A16 / W8A16 call and its fp32 dequantized weight ``[K, N]``."""
    codes = rng.integers(-8, 8, (k, n)) if int4 else rng.integers(-128, 128, (k, n))
    w = w8a8.convert_weight_to_int4pack(codes.astype(np.int32)) if int4 else codes.astype(np.int8)
    shape = (k // group, n) if group else (n,)
    scale = rng.uniform(1e-3, 2e-2, shape).astype(np.float16)
    kw = {"antiquant_group_size": group}
    off = np.zeros(shape, np.float16)
    if offset:
        kw["antiquant_offset"] = off = rng.integers(-4, 4, shape).astype(np.float16)
    if bias:
        kw["bias"] = rng.standard_normal(n).astype(np.float16)
    rows = (lambda v: np.repeat(v.astype(F32), group, axis=0)) if group else (lambda v: v.astype(F32)[None, :])
    w_hat = (codes.astype(F32) + rows(off)) * rows(scale)
    x = rng.standard_normal((m, k)).astype(np.float16)
    return (x, w, scale), kw, w_hat


def test_matmul_nbits_dequantizes_the_weight_in_fp32():
    # one-hot rows of x read the dequantized weight back exactly (every other product is 0): MatMulNBits'
    # w_hat is fp32((w + offset) * scale) — the golden under antiquant_dtype="float32"; under the Ascend record
    # (w_hat rounded to fp16) it differs
    k, n = 64, 8
    (x, w, s), kw, _ = _wqbmm_case(np.random.default_rng(3), 1, k, n, True, 32, True, False)
    eye = np.eye(k, dtype=np.float16) * np.float16(5)
    y = CHECK.same("weight_quant_batchmatmul", eye, w, s, **kw)
    other = ASCEND_GOLDEN.weight_quant_batchmatmul(eye, w, s, **kw)
    assert not np.array_equal(y, other)


@pytest.mark.parametrize("int4", [True, False])
@pytest.mark.parametrize("group", [0, 32, 64])
def test_matmul_nbits_matches_within_fp32_summation(int4, group):
    # the golden sums exactly and rounds once; MatMulNBits sums in fp32 (an SGEMM: not modelled).
    # Bound per element: |y - golden| <= ulp_fp16(golden) + K * 2^-24 * sum_k |x_k| |w_hat_kn| (fp32 summation)
    rng = np.random.default_rng(7 + group + int4)
    golden = NumpyBackend(ORT.numerics)
    total = differ = 0
    for m, k, n in ((1, 64, 8), (7, 128, 24), (16, 256, 40)):
        for offset in (False, True):
            args, kw, w_hat = _wqbmm_case(rng, m, k, n, int4, group, offset, bias=True)
            y, want = ORT.weight_quant_batchmatmul(*args, **kw), golden.weight_quant_batchmatmul(*args, **kw)
            gamma = k * 2.0 ** -24 * (np.abs(args[0].astype(np.float64)) @ np.abs(w_hat.astype(np.float64)))
            ulp = np.spacing(np.abs(want.astype(np.float16))).astype(np.float64)
            assert (np.abs(y.astype(np.float64) - want) <= ulp + gamma).all()
            total, differ = total + y.size, differ + int((y != want).sum())
    assert differ <= total * 0.02     # measured: well under 1 % of the elements differ at all


def test_matmul_nbits_declines_bf16_and_odd_blocks():
    (x, w, s), kw, _ = _wqbmm_case(np.random.default_rng(0), 2, 96, 8, True, 0, False, False)
    with pytest.raises(Unsupported, match="power of two"):
        ORT.weight_quant_batchmatmul(x, w, s, **kw)      # per-channel over K = 96: no block of 96
    with pytest.raises(Unsupported, match="x: dtype float16 only; got bfloat16"):
        ORT.weight_quant_batchmatmul(x.astype(BF16), w, s.astype(BF16), **kw)


# -- DynamicQuantizeMatMul / DynamicQuantizeLinear -------------------------------------------------------------

def test_dynamic_quantize_matmul_is_not_the_ascend_linear():
    x = rows(RNG, 8, 64, "outlier")
    w = RNG.integers(-128, 128, (16, 64)).astype(np.int8)
    ws = np.full(16, 0.01, F32)
    assert not np.array_equal(DQMM.w8a8_dynamic_linear(x, w, ws), ASCEND_GOLDEN.w8a8_dynamic_linear(x, w, ws))


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_quantize_linear_is_per_tensor_asymmetric(kind):
    for m, k in ((1, 1), (7, 17), (3, 1025)):
        x = rows(RNG, m, k, kind)
        y, s, o = CHECK_DQMM.same("dynamic_quant_asymmetric", x)
        assert (s == s.reshape(-1)[0]).all() and (o == np.rint(o)).all()
        CHECK_DQMM.same("dynamic_quant_asymmetric", x, smooth_scales=RNG.uniform(0.5, 2, k).astype(BF16))


def test_dynamic_quantize_linear_all_zero_tensor_has_scale_one():
    # DynamicQuantizeLinear: hi == lo == 0 -> scale 1, zero point 0 (uint8) = -128 (int8): asym_degenerate="one"
    y, s, o = DQMM.dynamic_quant_asymmetric(np.zeros((2, 5), BF16))
    assert s.tolist() == [1.0, 1.0] and o.tolist() == [-128.0, -128.0] and (y == -128).all()


def test_capabilities_are_listed_for_w8a8_backends():
    info = ORT.info()
    assert info["capabilities"]["weight_quant_batchmatmul"]
    assert info["library"].startswith("onnxruntime 1.32")


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(1, 70), n=st.integers(1, 9), seed=st.integers(0, 2 ** 32 - 1),
       dt=st.sampled_from([BF16, np.float16]))
def test_property_per_token_graph(m, k, n, seed, dt):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * np.exp(rng.uniform(-6, 6))).astype(dt)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    ws = np.exp(rng.uniform(-9, -2, n)).astype(F32)
    for check in (CHECK, CHECK_DQMM):
        got = check.same("w8a8_dynamic_linear", x, w, ws)
        assert_bits(got, NumpyBackend(check.backend.numerics).w8a8_dynamic_linear(x, w, ws))
