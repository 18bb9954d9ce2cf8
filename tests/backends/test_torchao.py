"""torchao 0.18's real CPU code against the golden run under the record ``torchao`` declares, and its bugs.

Every mapped op gives the golden's bits under ``backends.torchao.NUMERICS`` on ordinary and adversarial data
(exact ties at 127.5, zero rows, subnormals, odd sizes), and each declared field is shown to matter. torchao's
genuine bugs are **not** declared: each has a named detector below that reproduces it on the real library,
asserts that the golden under the declared record disagrees (so ``w8a8 conformance`` reports a failure) and
that the disagreement is exactly the bug's signature (docs/backends.md):

* MX byte-0 blocks quantized with 2^-126 (FLOOR / CEIL / EVEN) — ``test_bug_mx_byte0_blocks_use_2_pow_minus_126``
* MX RCEIL byte-0 blocks multiplied by 1.0 — ``test_bug_mx_rceil_byte0_multiplies_by_one``
* MX blocks holding Inf get a finite scale byte — ``test_bug_mx_inf_block_gets_a_finite_byte``
* MX RCEIL's fp32 ``log2``: a byte one too small next to powers of two — ``test_bug_mx_rceil_log2_in_fp32``
* the fp16 int8 linear's intermediate overflowing to Inf — ``test_bug_fp16_intermediate_overflow``
* the int8 path with K = 1 (RuntimeError, or wrong values read from unwritten memory) — ``test_bug_int8_k_equals_1``
* the emulated MXFP4 mm with N = 1 (AssertionError) — ``test_bug_mxfp4_mm_n_equals_1``
* NVFP4's per-tensor scale of an all-zero tensor (0, then NaN block scales) — ``test_bug_nvfp4_all_zero_tensor``

Skipped (with the reason) where torchao is not installed: ``pip install -e ".[torchao]"``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import backends
import w8a8
from backends import Unsupported
from backends.numpy_backend import NumpyBackend
from backends.testing import ADVERSARIAL_KINDS, BitwiseChecker, adversarial_rows

pytest.importorskip("torch", reason="the torchao backend needs torch (pip install -e '.[torchao]')")
pytest.importorskip("torchao", reason="the torchao backend needs torchao 0.18 (pip install -e '.[torchao]')")

from backends.torchao import NUMERICS  # noqa: E402

pytestmark = pytest.mark.torch

BF16 = ml_dtypes.bfloat16
F32 = np.float32
TA = backends.get("torchao")
CHECK = BitwiseChecker(TA)
GOLDEN = NumpyBackend(NUMERICS)
ASCEND_GOLDEN = NumpyBackend(w8a8.ASCEND.replace(variants="fixed"))
RNG = np.random.default_rng(2025)
E4M3 = {"emax": 8, "vmax": 448.0}


def _k():
    from backends.torchao import kernels
    return kernels


def rows(rng, m, k, kind, dtype=BF16):
    return adversarial_rows(rng, m, k, kind, dtype, tie_amax=127.5)


KINDS = ADVERSARIAL_KINDS


def test_available_and_the_declared_record():
    assert TA.available() == (True, "")
    assert set(TA.ops()) == {"dynamic_quant", "w8a8_dynamic_linear", "mx_quantize", "mx_dequantize", "mx_matmul",
                             "nvfp4_quantize", "nvfp4_dequantize"}
    assert w8a8.ASCEND.differences(NUMERICS) == {
        "scale_divisor": ("qmax", "half_range"), "scale_dtype": ("float32", "input"),
        "scale_floor": ("none", "max_f32_eps"), "quant_codes": ("mul_inv", "mul_rcp"),
        "scale_out": ("reciprocal", "amax_div"), "code_range": ("symmetric", "full"),
        "epilogue_order": ("scale_then_token", "token_then_scale"), "epilogue_intermediate": ("float32", "output"),
        "nvfp4_codes": ("div_total", "mul_rcp_chain"), "variants": ("select", "fixed")}


# -- int8: Int8Tensor.from_hp and the dynamic linear ---------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dt", [BF16, np.float16])
def test_int8_tensor_from_hp_is_dynamic_quant_under_the_record(kind, dt):
    for m, k in ((1, 2), (7, 17), (3, 1025), (16, 64)):
        x = rows(RNG, m, k, kind, dt)
        CHECK.same("dynamic_quant", x)
        CHECK.same("dynamic_quant", x.reshape(1, m, k))
        if k % 8 == 0:
            CHECK.same("dynamic_quant", x, dst_type="int4")


def test_the_record_fields_decide_the_codes_and_the_scale():
    # amax 127.5: torchao s = bf16(127.5 / 127.5) = 1, -127.5 -> -128 (kept: [-128, 127]); Ascend clamps to -127
    # and writes s = 1 / (127 / 127.5)
    x = np.array([[127.5, -127.5, 1.5, 2.5]], BF16)
    y, s = TA.dynamic_quant(x)
    assert y.tolist() == [[127, -128, 2, 2]] and s.tolist() == [1.0]
    y2, s2 = ASCEND_GOLDEN.dynamic_quant(x)
    assert y2.tolist() == [[127, -127, 1, 2]] and s2[0] != 1.0
    # an all-zero row: torchao's eps floor 2^-23 (the golden's default writes scale 0)
    assert TA.dynamic_quant(np.zeros((1, 4), BF16))[1].tolist() == [2.0 ** -23]


@pytest.mark.parametrize("kind", KINDS)
def test_int8_dynamic_linear_bf16(kind):
    for lead, k, n in (((1,), 2, 1), ((7,), 17, 5), ((3,), 1025, 17), ((2, 8), 64, 33)):
        x = rows(RNG, int(np.prod(lead)), k, kind).reshape(lead + (k,))
        w = RNG.integers(-128, 128, (n, k)).astype(np.int8)
        ws = np.exp(RNG.uniform(-8, -3, n)).astype(F32)
        CHECK.same("w8a8_dynamic_linear", x, w, ws)
        CHECK.same("w8a8_dynamic_linear", x, w, ws, bias=RNG.standard_normal(n).astype(F32))


def test_int8_dynamic_linear_fp16_where_nothing_overflows():
    for lead, k, n in (((1,), 2, 1), ((7,), 17, 5), ((16,), 64, 33)):
        x = (RNG.standard_normal(lead + (k,)) * 0.1).astype(np.float16)
        w = RNG.integers(-128, 128, (n, k)).astype(np.int8)
        ws = np.exp(RNG.uniform(-8, -3, n)).astype(F32)
        CHECK.same("w8a8_dynamic_linear", x, w, ws, bias=RNG.standard_normal(n).astype(np.float16))


def test_int8_linear_epilogue_rounds_the_token_product():
    # the same inputs differ from the golden under the record without epilogue_intermediate="output"
    x = rows(RNG, 16, 64, "gauss")
    w = RNG.integers(-128, 128, (32, 64)).astype(np.int8)
    ws = np.exp(RNG.uniform(-8, -3, 32)).astype(F32)
    y = TA.w8a8_dynamic_linear(x, w, ws)
    other = NumpyBackend(NUMERICS.replace(epilogue_intermediate="float32")).w8a8_dynamic_linear(x, w, ws)
    assert not np.array_equal(y.view(np.uint16), other.view(np.uint16))


def test_dynamic_quant_declines_smooth_scales():
    with pytest.raises(Unsupported, match="smooth_scales"):
        TA.dynamic_quant(np.ones((2, 4), BF16), smooth_scales=np.ones(4, BF16))


# -- MX -------------------------------------------------------------------------------------------------------

def _mx_data(rng, m, k, dtype):
    scale = F32(2.0) ** rng.integers(-20, 20, (m, k // 32, 1)).astype(F32)
    x = (rng.standard_normal((m, k // 32, 32)).astype(F32) * scale).reshape(m, k)
    x.reshape(m, -1, 32)[:, ::3] = 0 if k >= 96 else x.reshape(m, -1, 32)[:, ::3]
    return x.astype(dtype)


@pytest.mark.parametrize("elem", ["e2m1", "e4m3", "e5m2"])
@pytest.mark.parametrize("mode", ["floor", "ceil", "even", "rceil"])
@pytest.mark.parametrize("dt", [F32, BF16])
def test_to_mx_is_mx_quantize_on_normal_blocks(elem, mode, dt):
    for m, k in ((1, 32), (7, 96), (17, 256)):
        x = _mx_data(RNG, m, k, dt)
        data, scale = CHECK.same("mx_quantize", x, elem_dtype=elem, scale_mode=mode)
        for out in ("float32", "bfloat16"):
            CHECK.same("mx_dequantize", data, scale, elem_dtype=elem, output_dtype=out)


def test_mx_declines_fp16():
    with pytest.raises(Unsupported, match="bfloat16 / float32"):
        TA.mx_quantize(np.ones((1, 32), np.float16))
    d, s = w8a8.mx_quantize(np.ones((1, 32), F32))
    with pytest.raises(Unsupported, match="out"):
        TA.mx_dequantize(d, s, output_dtype="float16")


@pytest.mark.parametrize("elem", ["e2m1", "e4m3", "e5m2"])
def test_emulated_mx_mm_within_fp32_summation(elem):
    # the emulated mm dequantizes both operands exactly and runs an aten mm (fp32 accumulation, not modelled):
    # |y - golden| <= ulp_out(golden) + K 2^-24 sum |a||b|
    for m, k, n in ((1, 32, 2), (7, 96, 17), (16, 256, 40)):
        a, b = _mx_data(RNG, m, k, F32), _mx_data(RNG, n, k, F32)
        ad, as_ = w8a8.mx_quantize(a, elem_dtype=elem)
        bd, bs = w8a8.mx_quantize(b, elem_dtype=elem)
        ah = w8a8.mx_dequantize(ad, as_, elem_dtype=elem).astype(np.float64)
        bh = w8a8.mx_dequantize(bd, bs, elem_dtype=elem).astype(np.float64)
        gamma = k * 2.0 ** -24 * (np.abs(ah) @ np.abs(bh).T)
        for out, odt in (("bfloat16", BF16), ("float32", F32)):
            y = TA.mx_matmul(ad, as_, bd, bs, elem_dtype=elem, output_dtype=out).astype(np.float64)
            want = GOLDEN.mx_matmul(ad, as_, bd, bs, elem_dtype=elem, output_dtype=out)
            ulp = np.spacing(np.abs(want.astype(F32))).astype(np.float64)
            if odt == BF16:
                ulp = ulp * 2.0 ** 16
            assert (np.abs(y - want.astype(np.float64)) <= ulp + gamma).all()


def test_bug_mx_byte0_blocks_use_2_pow_minus_126():
    # E4M3, FLOOR: amax = 1.5 * 2^-120 -> floor(log2) - emax = -128 -> clamped to -127 -> byte 0 (2^-127). The golden
    # multiplies by 2^127 (1.5 * 2^-120 * 2^127 = 192, an E4M3 value); torchao divides by max(2^-127, 2^-126):
    # 1.5 * 2^6 = 96 -> the block decodes to half its value. Detector: byte 0 and codes == cast(x * 2^126).
    for mode in ("floor", "ceil", "even"):
        x = np.zeros((1, 32), F32)
        x[0, :4] = np.array([1.5, -1.0, 0.75, 0.5], F32) * F32(2.0 ** -120)
        d, s = TA.mx_quantize(x, elem_dtype="e4m3", scale_mode=mode)
        gd, gs = GOLDEN.mx_quantize(x, elem_dtype="e4m3", scale_mode=mode)
        assert s.tolist() == gs.tolist() == [[0]]
        assert np.array_equal(d, (x * F32(2.0 ** 126)).astype(ml_dtypes.float8_e4m3fn))      # the bug's signature
        assert np.array_equal(gd, (x * F32(2.0 ** 127)).astype(ml_dtypes.float8_e4m3fn))
        back = w8a8.mx_dequantize(d, s, elem_dtype="e4m3")
        assert np.array_equal(back, x / 2)                                                   # half its value


def test_bug_mx_rceil_byte0_multiplies_by_one():
    # RCEIL, E4M3: amax = 2^-130 -> ceil(log2(2^-130 / 448)) = -138 -> clamped -127 -> byte 0; torchao multiplies by
    # 1.0 (not 2^127): every code cast(x) = +-0. The golden: 2^-130 * 2^127 = 0.125 -> E4M3 0x20.
    x = np.zeros((1, 32), F32)
    x[0, 0], x[0, 1] = F32(2.0 ** -130), F32(-(2.0 ** -131))
    d, s = TA.mx_quantize(x, elem_dtype="e4m3", scale_mode="rceil")
    gd, gs = GOLDEN.mx_quantize(x, elem_dtype="e4m3", scale_mode="rceil")
    assert s.tolist() == gs.tolist() == [[0]]
    assert not d.astype(F32).any()                                      # the bug's signature: codes == cast(x) = 0
    assert gd.astype(F32)[0, :2].tolist() == [0.125, -0.0625]


@pytest.mark.parametrize("mode, byte", [("floor", 255 - 8), ("rceil", 254)])
def test_bug_mx_inf_block_gets_a_finite_byte(mode, byte):
    # a block holding +Inf: torchao writes 255 - emax (E4M3: 247) or 254 (RCEIL); the golden writes the E8M0 NaN 255
    x = np.ones((1, 64), F32)
    x[0, 3] = np.inf
    d, s = TA.mx_quantize(x, elem_dtype="e4m3", scale_mode=mode)
    gd, gs = GOLDEN.mx_quantize(x, elem_dtype="e4m3", scale_mode=mode)
    assert s[0, 0] == byte and gs[0, 0] == 255
    assert s[0, 1] == gs[0, 1]                                           # the finite block is unaffected


def test_bug_mx_rceil_log2_in_fp32():
    # amax = the fp32 just above vmax * 2^k (k <= -5 or k >= 4): amax / vmax = 2^k (1 + 2^-23), whose exact
    # ceiling is k + 1, but its fp32 log2 rounds to k -> torchao's byte is one too small and the block clips.
    # Detector: byte == exact - 1 == ceil(np.log2(np.float32(amax / vmax))) + 127.
    bad = 0
    for k in (-20, -9, -5, 4, 7, 15):
        x = np.zeros((1, 32), F32)
        amax = F32(F32(448.0 * 2.0 ** k) * F32(1 + 2.0 ** -23))
        x[0, 0] = amax
        _, s = TA.mx_quantize(x, elem_dtype="e4m3", scale_mode="rceil")
        _, gs = GOLDEN.mx_quantize(x, elem_dtype="e4m3", scale_mode="rceil")
        assert gs[0, 0] == k + 1 + 127                                   # the exact ceiling: never clips
        fp32_log2 = int(np.ceil(np.log2(np.float32(amax / F32(448))))) + 127
        assert s[0, 0] == fp32_log2
        bad += int(s[0, 0] == gs[0, 0] - 1)
    assert bad == 6


def test_bug_fp16_intermediate_overflow():
    # fp16 model, K = 4096, x = 1 (s_x ~ 1 / 127.5, codes 127), weight codes 127 with scale 0.01 / 127:
    # y = 4096 * 127 * 127 * s_x * 0.01 / 127 ~ 40.8; torchao rounds acc * s_x = 4096 * 127 * 127 / 127.5 ~ 518,000
    # to fp16 first -> Inf, then * s_w = Inf. The golden
    # (the rounding declared, the overflow not) gives the finite value; conformance reports the Infs.
    x = np.ones((2, 4096), np.float16)
    w = np.full((4, 4096), 127, np.int8)
    ws = np.full(4, 0.01 / 127, F32)
    y = TA.w8a8_dynamic_linear(x, w, ws)
    want = GOLDEN.w8a8_dynamic_linear(x, w, ws)
    assert np.isinf(y).all() and np.isfinite(want).all()
    assert abs(float(want[0, 0]) - 40.8) < 0.05


def test_bug_int8_k_equals_1():
    # Int8Tensor / choose_qparams_affine with PerRow on K = 1 (block [1, 1]): several rows raise RuntimeError
    # (a reshape of the scale), one row returns wrong outputs. torchao's own quantize_ of an
    # nn.Linear(1, N) fails the same way on its weight (so it is not this backend's construction).
    import torch
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    from torchao.quantization.granularity import PerRow

    x = np.ones((3, 1), BF16)
    with pytest.raises(RuntimeError, match="invalid for input of size 1"):
        TA.dynamic_quant(x)
    assert GOLDEN.dynamic_quant(x)[0].tolist() == [[127]] * 3
    w = np.full((4, 1), 127, np.int8)
    ws = np.full(4, 1e-3, F32)
    # one row: wrong values that change from call to call (Inf, 0.044, 0.129 ... where the golden's is 0.1265):
    # torchao reads memory it did not write
    x1 = np.ones((1, 1), np.float16)
    want = GOLDEN.w8a8_dynamic_linear(x1, w, ws)
    assert np.isfinite(want).all() and abs(float(want[0, 0]) - 0.1265) < 1e-3
    assert any(not np.array_equal(TA.w8a8_dynamic_linear(x1, w, ws), want) for _ in range(3))
    lin = torch.nn.Linear(1, 4, bias=False, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="invalid for input of size 1"):   # the weight [4, 1] already
        quantize_(lin, Int8DynamicActivationInt8WeightConfig(granularity=PerRow()))


def test_bug_mxfp4_mm_n_equals_1():
    a = w8a8.mx_quantize(RNG.standard_normal((4, 64)).astype(F32))
    b = w8a8.mx_quantize(RNG.standard_normal((1, 64)).astype(F32))
    GOLDEN.mx_matmul(*a, *b, output_dtype="bfloat16")                    # the golden computes it
    with pytest.raises(AssertionError):
        TA.mx_matmul(*a, *b, output_dtype="bfloat16")
    b8 = w8a8.mx_quantize(RNG.standard_normal((1, 64)).astype(F32), elem_dtype="e4m3")
    a8 = w8a8.mx_quantize(RNG.standard_normal((4, 64)).astype(F32), elem_dtype="e4m3")
    TA.mx_matmul(*a8, *b8, elem_dtype="e4m3", output_dtype="bfloat16")   # MXFP8 with N = 1 works


def test_bug_nvfp4_all_zero_tensor():
    # torchao's per_tensor_amax_to_scale(0) = 0 and nvfp4_quantize with S = 0 divides 0 / 0: every block scale NaN.
    # The golden's helper returns S = 1 for an all-zero tensor (every code 0).
    import torch
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

    s = per_tensor_amax_to_scale(torch.tensor(0.0))
    assert float(s) == 0.0 and float(w8a8.nvfp4_per_tensor_scale(0.0)) == 1.0
    scale, _ = nvfp4_quantize(torch.zeros(2, 32), 16, s)
    assert torch.isnan(scale.to(torch.float32)).all()          # E4M3 NaN bytes (0x7F / 0xFF: 0 / 0 is -NaN on x86)


# -- NVFP4 ------------------------------------------------------------------------------------------------

def test_nvfp4_code_order_is_torchaos_chain():
    # the golden test's tie (tests/golden/test_open_numerics.py): S = 3, block [2.8125, 0.5859375, 0...] ->
    # x / (S * s_b) = 1.25 exactly (-> 1.0, byte 0x27) but x * ((1/S) / s_b) = 1.2500001 (-> 1.5, byte 0x37)
    x = np.zeros((1, 16), F32)
    x[0, :2] = [2.8125, 0.5859375]
    data, scale = CHECK.same("nvfp4_quantize", x, per_tensor_scale=F32(3))
    assert data[0, 0] == 0x37 and scale.view(np.uint8).tolist() == [[0x22]]
    assert ASCEND_GOLDEN.nvfp4_quantize(x, per_tensor_scale=F32(3))[0][0, 0] == 0x27


@pytest.mark.parametrize("dt", [F32, BF16])
def test_nvfp4_quantize_and_dequantize(dt):
    for m, k in ((1, 16), (7, 64), (17, 1024)):
        x = (RNG.standard_normal((m, k)) * np.exp(RNG.uniform(-5, 5))).astype(dt)
        x[:, ::37] *= 50
        s = w8a8.nvfp4_per_tensor_scale(np.abs(x.astype(F32)).max())
        data, scale = CHECK.same("nvfp4_quantize", x, per_tensor_scale=s)
        CHECK.same("nvfp4_quantize", x.reshape(1, m, k), per_tensor_scale=s)
        for out in ("float32", "bfloat16"):
            CHECK.same("nvfp4_dequantize", data, scale, per_tensor_scale=s, output_dtype=out)


def test_nvfp4_declines_the_global_scale_convention():
    with pytest.raises(Unsupported, match="per_tensor_scale"):
        TA.nvfp4_quantize(np.ones((1, 16), F32), global_scale=F32(2))


# -- the conformance run reports the bugs as failures ------------------------------------------------------------

@pytest.mark.parametrize("op, params, status", [
    # drawn cases of the packaged strategies that hit a bug (the K = 1 one, the fp16 overflow, a byte-0 block)
    ("w8a8_dynamic_linear", {"lead": [2, 1], "k": 1, "n": 1025, "dtype": "bfloat16", "bias": True,
                             "dist": "outlier_channels", "seed": 16000}, "error"),
    ("w8a8_dynamic_linear", {"lead": [16], "k": 7, "n": 16, "dtype": "float16", "bias": True, "dist": "ties",
                             "seed": 1517}, "fail"),
])
def test_conformance_reports_the_bugs(op, params, status):
    from conformance.evaluate import run_case
    from conformance.registry import get

    record = run_case(get(op), params, TA, attribute_failures=False)
    assert record["status"] == status
    assert record["repro"].startswith("w8a8 conformance --backend torchao ")
