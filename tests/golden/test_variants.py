"""Kernel variants (w8a8/variants): the host tiling's selection rules, pinned at their thresholds, and
the dynamic_quant scale of each kernel.

Every expected key below is derived by hand from the ops-nn / ops-transformer host tiling (commits in
w8a8/platforms.py) with UB = 196608 B: the rule and the arithmetic are written next to each case. The
op-specific numerics of the other variants are pinned next to their ops (test_quantize.py,
moe/test_swiglu.py, moe/test_finalize.py, moe/test_gating.py, moe/test_routing.py,
lowbit/test_weight_quant_batchmatmul.py, test_quant_matmul.py).
"""

import numpy as np
import pytest

import w8a8
from w8a8 import ASCEND, ASCEND_A2, Numerics, bfloat16, platforms, variants
from w8a8.variants import dynamic_quant as vdq
from w8a8.variants import moe as vmoe

A3 = platforms.A3


def dq_key(rows, h, *, dtype="bfloat16", dst="int8", smooth=False, groups=None, asym=False, platform=A3):
    return vdq.select(rows, h, x_dtype=dtype, dst=dst, smooth=smooth, groups=groups, asymmetric=asym,
                      platform=platform).key


# ----------------------------------------------------------------------------- dynamic_quant selection

# SetSpecialTilingForDs (dynamic_quant_tiling.cpp:518-575): no group_index, int8, symmetric,
# H in {4096, 5120, 10240} and 4 <= rows <= 384 -> key 100; otherwise these H take the multi-row
# kernel (128 <= H <= 16320, H % 8 == 0) -> key 10.
@pytest.mark.parametrize("h", [4096, 5120, 10240])
@pytest.mark.parametrize("rows, key", [(1, 10), (3, 10), (4, 100), (384, 100), (385, 10)])
def test_single_row_kernel_at_the_deepseek_hidden_sizes(rows, h, key):
    assert dq_key(rows, h) == key
    assert dq_key(rows, h, dtype="float16") == key
    assert dq_key(rows, h, smooth=True) == key            # smooth scales are allowed in key 100


@pytest.mark.parametrize("h", [4095, 4104, 4224, 7168])
def test_single_row_kernel_needs_the_exact_hidden_size(h):
    # 4104, 4224, 7168: multiple of 8 in [128, 16320] -> multi-row; 4095 (H % 8 != 0) -> double buffer
    # (13 * align16(4095) = 53248 B < 195584 B) -> key 2 (bf16)
    assert dq_key(16, h) == (2 if h % 8 else 10)


# CheckMultiRowPreconditions (577-606): L = (196608 - 1024 - 3392) = 192192; without smooth
# floor(192192 / 11 / 64) * 64 = 17472 -> min(17472, 255 * 64 = 16320) = 16320; with smooth
# floor(192192 / 15 / 64) * 64 = 12800.
def test_multi_row_limits():
    assert vdq.multi_row_limit(False, 196608) == 16320
    assert vdq.multi_row_limit(True, 196608) == 12800


# The remaining keys (CalculateMaxUbSizePerRow 474-502, SetTilingData 430-468), U = 196608 - 1024 =
# 195584 B, Ha = align16(H):
#   H = 120, 127: below 128 -> 13 * 128 = 1664 < U -> double buffer 2 (bf16) / 3 (fp16)
#   H = 16328 > 16320: Ha = 16336; 11 Ha = 179696 <= U (one row fits), 13 Ha = 212368 >= U -> basic 0 / 1
#   H = 15036 (H % 8 = 4): Ha = 15040; 13 Ha = 195520 < U -> 2;   15044: Ha = 15056, 195728 >= U -> 0
#   H = 17772: Ha = 17776; 11 Ha = 195536 < U -> 0;   17780: Ha = 17792, 11 Ha = 195712 > U -> large 6
#   H = 20000: Ha = 20000; 11 Ha = 220000 > U -> 6
@pytest.mark.parametrize("h, bf16_key, fp16_key", [
    (120, 2, 3), (127, 2, 3), (128, 10, 10), (16320, 10, 10), (16328, 0, 1),
    (15036, 2, 3), (15044, 0, 1), (17772, 0, 1), (17780, 6, 6), (20000, 6, 6)])
def test_basic_double_buffer_and_large_shape_thresholds(h, bf16_key, fp16_key):
    assert dq_key(64, h) == bf16_key
    assert dq_key(64, h, dtype="float16") == fp16_key


# With smooth scales: multi-row up to 12800; then 17 Ha (one row) and 19 Ha (double buffer):
#   12800 -> 10; 12808: Ha = 12816, 17 Ha = 217872 > U -> 6 (large: Ha >= 11520 gives 17 Ha > U)
#   10284: Ha = 10288, 19 Ha = 195472 < U -> 2;  10292: Ha = 10304, 195776 >= U -> 0
#   11500: Ha = 11504, 17 Ha = 195568 <= U -> 0;  11508: Ha = 11520, 195840 > U -> 6
@pytest.mark.parametrize("h, key", [(12800, 10), (12808, 6), (10284, 2), (10292, 0), (11500, 0), (11508, 6)])
def test_smooth_scale_thresholds(h, key):
    assert dq_key(64, h, smooth=True) == key


# MoE (smooth + group_index of E = 8 groups): one row = align8(8) * 4 + 17 Ha; never key 100 / 10:
#   4096 -> 32 + 69632 -> 7;  11488 -> 32 + 195296 = 195328 <= U -> 7;  11504 -> 32 + 195568 > U -> 8
@pytest.mark.parametrize("h, key", [(4096, 7), (11488, 7), (11504, 8)])
def test_moe_group_index_thresholds(h, key):
    assert dq_key(16, h, smooth=True, groups=8) == key


def test_int4_never_takes_the_single_row_kernel():
    # key 100 is int8 only: int4 at [16, 4096] runs multi-row; 120 -> 2; 16328 -> basic; 17792 -> large
    assert [dq_key(16, h, dst="int4") for h in (4096, 128, 120, 16328, 17792)] == [10, 10, 2, 0, 6]


def test_asymmetric_takes_neither_single_nor_multi_row():
    # 4096: 13 * 4096 = 53248 < U -> 2; 15056: 195728 >= U -> 0; 17792: 11 * 17792 > U -> 6
    assert [dq_key(16, h, asym=True) for h in (4096, 15056, 17792)] == [2, 0, 6]
    v = vdq.select(16, 4096, x_dtype="bfloat16", asymmetric=True, platform=A3)
    assert v.decides == {}      # GetScaleAndOffset in every kernel: no variant dependence


def test_a2_and_a3_select_alike():
    # The tiling reads only UB (196608 on both) and the core count (which spreads rows, not arithmetic).
    for rows, h in ((16, 4096), (385, 4096), (64, 20000), (64, 15044), (2, 127)):
        assert dq_key(rows, h) == dq_key(rows, h, platform=platforms.A2)


# ----------------------------------------------------------------------------- dynamic_quant scale bits

# amax = 1.125 (bf16 exact). fp32(1/127) = 0x3C010204 = 8454660 * 2^-30.
#   amax * fp32(1/127) = 9 * 8454660 / 8 * 2^-30 = 9511492.5 * 2^-30: a tie in the binade [2^-7, 2^-6)
#   (ulp 2^-30) -> even 9511492 -> 0x3C112244.
#   1 / (127 / amax): 127 / 1.125 = 112.888... -> fp32 112.88888549804688 (ulp 2^-17, rounded down);
#   2^30 / 112.88888549804688 = 9511492.78 -> 9511493 -> 0x3C112245.
# The codes are the same in every kernel: rint(x * (127 / 1.125)) = 127 for x = 1.125.
AMAX_ROW = np.array([1.125, 0.5, -0.25, 0.0])


def _rows(m, h):
    x = np.zeros((m, h), np.float32)
    x[:, :4] = AMAX_ROW
    return x.astype(bfloat16)


def test_decode_shape_writes_amax_times_fp32_reciprocal():
    x = _rows(16, 4096)                       # key 100: dynamic_quant_single_row.h:147
    assert variants.select("dynamic_quant", x).label == "dynamic_quant/single-row[100]"
    y, s = w8a8.dynamic_quant(x)
    assert s.view(np.uint32).tolist() == [0x3C112244] * 16
    assert y[0, :4].tolist() == [127, 56, -28, 0]          # 0.5 * 112.888885 = 56.44 -> 56; -28.22 -> -28


def test_large_shape_writes_the_reciprocal_of_inv():
    x = _rows(64, 20000)                      # key 6: dynamic_quant_large_shape_opt.h:78-79
    assert variants.select("dynamic_quant", x).label == "dynamic_quant/large-shape[6]"
    y, s = w8a8.dynamic_quant(x)
    assert s.view(np.uint32).tolist() == [0x3C112245] * 64
    assert y[0, :4].tolist() == [127, 56, -28, 0]


@pytest.mark.parametrize("rows, h, bits", [(3, 4096, 0x3C112244),      # multi-row (key 10)
                                           (385, 7168, 0x3C112244),    # multi-row
                                           (16, 120, 0x3C112244),      # double buffer (key 2)
                                           (16, 16328, 0x3C112245)])   # basic (key 0): 1 / inv
def test_scale_formula_follows_the_kernel(rows, h, bits):
    _, s = w8a8.dynamic_quant(_rows(rows, h))
    assert set(s.view(np.uint32).tolist()) == {bits}


def test_smooth_scales_and_group_index():
    # smooth = 1 keeps amax = 1.125. [16, 4096] with smooth: key 100 (amax * fp32(1/127));
    # with group_index (MoE, key 7: dynamic_quant_moe.h:198-204): 1 / inv.
    x = _rows(16, 4096)
    _, s = w8a8.dynamic_quant(x, smooth_scales=np.ones(4096, bfloat16))
    assert set(s.view(np.uint32).tolist()) == {0x3C112244}
    gi = np.array([6, 16], np.int32)
    assert variants.select("dynamic_quant", x, smooth_scales=np.ones((2, 4096), bfloat16), group_index=gi).key == 7
    _, s = w8a8.dynamic_quant(x, smooth_scales=np.ones((2, 4096), bfloat16), group_index=gi)
    assert set(s.view(np.uint32).tolist()) == {0x3C112245}


# int4, amax = 1.015625 = 65/64. fp32(1/7) = 0x3E124925 = 9586981 * 2^-26.
#   amax * fp32(1/7) = 65 * 9586981 / 64 * 2^-26 = 9736777.58 * 2^-26 -> 9736778 = 0x3E14924A
#   1 / (7 / amax): 7 * 64 / 65 = 6.8923077 -> fp32 6.892307758331299; 2^26 / that = 9736777.46 -> 0x3E149249
def test_int4_scale_per_kernel():
    x = np.zeros((16, 4096), np.float32)
    x[:, 0] = 1.015625
    _, s = w8a8.dynamic_quant(x.astype(bfloat16), dst_type="int4")          # multi-row: 1/7.0f constant
    assert set(s.view(np.uint32).tolist()) == {0x3E14924A}
    x = np.zeros((16, 16328), np.float32)
    x[:, 0] = 1.015625
    _, s = w8a8.dynamic_quant(x.astype(bfloat16), dst_type="int4")          # basic: 1 / inv
    assert set(s.view(np.uint32).tolist()) == {0x3E149249}


def test_about_a_quarter_of_decode_scales_differ_from_the_old_formula():
    # The measurement: on random activations the two formulas differ in the last bit for a
    # large minority of rows (10-34 %); both are within one ulp of each other.
    x = np.random.default_rng(0).standard_normal((384, 4096)).astype(bfloat16)
    _, s = w8a8.dynamic_quant(x)
    _, old = w8a8.dynamic_quant(x, numerics=ASCEND.replace(variants="fixed"))
    diff = s.view(np.uint32).astype(np.int64) - old.view(np.uint32).astype(np.int64)
    assert set(np.unique(diff).tolist()) <= {-1, 0, 1}
    assert 0.05 < np.mean(diff != 0) < 0.5


# ----------------------------------------------------------------------------- the Numerics policy

def test_fixed_ignores_the_shape():
    x = _rows(16, 4096)
    fixed = ASCEND.replace(variants="fixed")
    assert set(w8a8.dynamic_quant(x, numerics=fixed)[1].view(np.uint32).tolist()) == {0x3C112245}


def test_a_field_the_record_changes_is_never_overridden():
    x = _rows(16, 4096)
    div = ASCEND.replace(scale_out="amax_div")   # 1.125 / 127 = 9511492.53 * 2^-30 -> 0x3C112245 (also)
    v = variants.select("dynamic_quant", x, numerics=div)
    assert v.numerics(div).scale_out == "amax_div"
    assert variants.select("dynamic_quant", x).numerics(ASCEND).scale_out == "amax_mul_rcp"


def test_the_resolved_record_reproduces_the_call():
    x = _rows(16, 4096)
    resolved = variants.select("dynamic_quant", x).numerics(ASCEND)
    assert resolved.variants == "fixed" and resolved.scale_out == "amax_mul_rcp"
    for a, b in zip(w8a8.dynamic_quant(x), w8a8.dynamic_quant(x, numerics=resolved)):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def test_platform_records():
    assert ASCEND.platform_record is platforms.A3 and ASCEND_A2.platform_record is platforms.A2
    assert (platforms.A3.ub_bytes, platforms.A3.vector_cores, platforms.A2.vector_cores) == (196608, 48, 40)
    with pytest.raises(ValueError, match="'platform'"):
        Numerics(platform="ascend910c")
    with pytest.raises(ValueError, match="'variants'"):
        Numerics(variants="auto")
    with pytest.raises(ValueError, match="redefine"):
        platforms.register(platforms.A3.replace(ub_bytes=1))
    with pytest.raises(ValueError, match="'ub_bytes'"):
        platforms.A3.replace(ub_bytes=0)
    assert Numerics.from_dict(ASCEND_A2.as_dict()) == ASCEND_A2


def test_select_checks_like_the_op():
    with pytest.raises(ValueError, match="'op'"):
        variants.select("dynamic_quantize", np.zeros((2, 8), bfloat16))
    with pytest.raises(TypeError, match="'x'"):
        variants.select("dynamic_quant", np.zeros((2, 8), np.float32))
    with pytest.raises(TypeError, match="'numerics'"):
        variants.select("dynamic_quant", np.zeros((2, 8), bfloat16), numerics="ascend")


def test_every_variant_cites_its_source():
    x = _rows(16, 4096)
    for v in (variants.select("dynamic_quant", x), variants.select("swiglu", np.zeros((2, 8), np.float32)),
              variants.select("quantize", np.zeros((2, 8), np.float32), np.ones(8, np.float32))):
        assert v.sources and all("@" in s and ":" in s for s in v.sources)
        assert v.label in v.describe() and v.platform in v.describe()
        assert v.as_dict()["label"] == v.label


# ----------------------------------------------------------------------------- other selectors' thresholds

# npu_moe_gating_top_k_softmax perf template (tiling_perf.cpp:118-124): (E <= 1024 and E % 8 == 0 and
# k <= 8) or E < 8; then E-K full-load for E <= 98304, else K full-load.
@pytest.mark.parametrize("e, k, name", [(7, 7, "perf"), (8, 8, "perf"), (8, 9, "e-k-full-load"),
                                        (255, 6, "e-k-full-load"), (256, 8, "perf"), (256, 9, "e-k-full-load"),
                                        (1024, 8, "perf"), (1032, 8, "e-k-full-load"),
                                        (98312, 8, "k-full-load")])
def test_gating_templates(e, k, name):
    assert vmoe.gating_softmax(e=e, k=k, dtype="float16", platform=A3).name == name


# moe_init_routing_v2 sort: one core while N*K <= sortLoopMaxElement =
# floor((196608 - 48 * 32) / 32 / 32) * 32 = 6080 (A3; A2's 40 cores give 6080 too).
def test_routing_sort_modes():
    assert vmoe.sort_loop_max_element(48, 196608) == vmoe.sort_loop_max_element(40, 196608) == 6080

    def key(n, k, **kw):
        facts = dict(n=n, k=k, h=16, x_dtype="bfloat16", quant_mode=-1, scale_shape=None, offset=False, start=0,
                     end=256, expert_num=256, count_type=0, row_idx_type=0)
        return vmoe.init_routing_v2(**{**facts, **kw}, platform=A3).key
    assert key(760, 8) == 1000000 and key(761, 8) == 1100000        # 6080 vs 6088 pairs
    assert key(1013, 6, quant_mode=1) == 1020000 and key(1014, 6, quant_mode=1) == 1120000
    # the gather-sort perf variant: quant -1, scatter, counts, 256 experts, range <= 32, 384 <= N <= 8192, k 8
    gs = dict(row_idx_type=1, count_type=1, end=32)
    assert key(384, 8, **gs) == 1201000 and key(383, 8, **gs) == 1001000
    assert key(8192, 8, **gs) == 1301000 and key(8193, 8, **gs) == 1101000
    assert key(384, 9, **gs) == 1001000 and key(384, 8, **{**gs, "end": 33}) == 1001000   # 3456, 3072 <= 6080


# moe_finalize_routing (membase tiling, 48 cores, UB - 1024 = 195584 B), bf16 with bias, no skip, K = 6:
# all-bias needs (195584 - 12 aH - 8 * 6 * 4 ...) per token row; bf16 aH = align16(H):
#   A = (aH + aH) * 2 * 2 * 3 = 24 aH, per row S = (3 aH + aH) * 2 = 8 aH: H = 4096 fits; H = 7168:
#   195584 - 172032 - 192 = 23360 < 8 * 7168 + 32 + 32 -> not all-bias; load-H needs 24 aH + ... too -> cut-H.
@pytest.mark.parametrize("h, k, name", [(4096, 6, "all-bias"), (7168, 6, "cut-h"), (7168, 2, "cut-h-k2"),
                                        (7168, 4, "cut-h-k4"), (4096, 257, "big-k")])
def test_finalize_templates(h, k, name):
    v = vmoe.finalize(dtype="bfloat16", scale_dtype="bfloat16", n=64, k=k, h=h, bias=True, skip1=False,
                      skip2=False, drop_pad_mode=2, platform=A3)
    assert v.name == name
    assert v.decides["dropped_slot_bias"] == "skip"          # every bf16 template guards the bias add


def test_label_names_the_modelled_kernel_for_records():
    x = np.zeros((16, 4096), w8a8.bfloat16)
    assert w8a8.variants.label("dynamic_quant", (x,), {}, w8a8.ASCEND) == "dynamic_quant/single-row[100]"
    assert w8a8.variants.label("dynamic_quant", (x,), {}, w8a8.ASCEND.replace(variants="fixed")) == "fixed"
    assert w8a8.variants.label("trans_quant_param", (np.ones(2, np.float32),), {}, w8a8.ASCEND) is None  # one kernel
    assert w8a8.variants.label("dynamic_quant", (np.zeros(3, np.int8),), {}, w8a8.ASCEND) is None       # refused
