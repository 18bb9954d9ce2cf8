"""torch-cpu computes the kernel variant the A3 tiling picks, bit for bit as the golden does, on both
sides of every selection threshold (w8a8/variants; tests/golden/test_variants.py pins the rules).

Each case also checks that the golden's result at that shape really is the variant's (the selected
kernel's name), so that a threshold that moved would show here, and that the two sides of a threshold
differ where the kernels' arithmetic differs (the data is chosen to make them differ).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import backends
import w8a8
from backends.testing import BitwiseChecker

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

BF16 = np.dtype(ml_dtypes.bfloat16)
F32, F16 = np.float32, np.float16
TC = backends.get("torch-cpu")
CHECK = BitwiseChecker(TC)
FIXED = w8a8.ASCEND.replace(variants="fixed")


def _x(rows, h, dtype=BF16, seed=0):
    return (np.random.default_rng(seed).standard_normal((rows, h)) * 3).astype(F32).astype(dtype)


def _label(op, *args, **kwargs):
    return w8a8.variants.select(op, *args, **kwargs).label


# ----------------------------------------------------------------------------- dynamic_quant

@pytest.mark.parametrize("rows, h, key", [
    (3, 4096, 10), (4, 4096, 100), (384, 5120, 100), (385, 5120, 10), (16, 10240, 100), (16, 10248, 10),
    (8, 127, 2), (8, 128, 10), (8, 16320, 10), (8, 16328, 0), (8, 15036, 2), (8, 15044, 0),
    (2, 17772, 0), (2, 17780, 6)])
def test_dynamic_quant_keys(rows, h, key):
    x = _x(rows, h)
    assert w8a8.variants.select("dynamic_quant", x).key == key
    _, s = CHECK.same("dynamic_quant", x)
    # keys 100, 10, 2, 3 write amax * fp32(1/127); keys 0, 1, 6 write 1 / (127 / amax)
    m = np.abs(x.astype(F32)).max(axis=1)
    want = m * (F32(1) / F32(127)) if key in (100, 10, 2, 3) else F32(1) / (F32(127) / m)
    np.testing.assert_array_equal(s.view(np.uint32), want.astype(F32).view(np.uint32))


@pytest.mark.parametrize("h, key", [(12800, 10), (12808, 6), (10284, 2), (10292, 0)])
def test_dynamic_quant_smooth_keys(h, key):
    x = _x(4, h)
    smooth = (np.random.default_rng(1).random(h) + 0.5).astype(F32).astype(BF16)
    assert w8a8.variants.select("dynamic_quant", x, smooth_scales=smooth).key == key
    CHECK.same("dynamic_quant", x, smooth_scales=smooth)


@pytest.mark.parametrize("h, key", [(4096, 7), (11504, 8)])
def test_dynamic_quant_moe_and_int4(h, key):
    x = _x(6, h)
    gi = np.array([2, 2, 6], np.int32)
    smooth = np.ones((3, h), BF16)
    assert w8a8.variants.select("dynamic_quant", x, smooth_scales=smooth, group_index=gi).key == key
    CHECK.same("dynamic_quant", x, smooth_scales=smooth, group_index=gi)
    for hh in (120, 128, 16328):
        CHECK.same("dynamic_quant", _x(5, hh), dst_type="int4")


@pytest.mark.parametrize("rows", [1, 3, 4, 384, 385])
def test_dynamic_linear_uses_the_whole_activation_shape(rows):
    # torch-cpu runs the Linear in row blocks; the scale formula must be the one of the whole [M, K]
    k, n = 4096, 48
    rng = np.random.default_rng(rows)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    ws = (rng.random((n, 1)) * 1e-3).astype(F32)
    x = _x(rows, k, seed=rows)
    CHECK.same("w8a8_dynamic_linear", x, w, ws)
    st = w8a8.dynamic_linear_stages(x, w, ws)
    assert st["variants"]["dynamic_quant"].key == (100 if 4 <= rows <= 384 else 10)


# ----------------------------------------------------------------------------- quantize, swiglu

def test_quantize_divide_mode():
    x = np.array([[45.5, 1.0, 3.0, -45.5]], F32)           # 45.5 / 7: reciprocal 7, division 6
    for zp in (None, np.array([1], np.int8)):
        CHECK.same("quantize", x, np.array([7.0], F32), zp, axis=0)
    rng = np.random.default_rng(3)
    s = (rng.random(9) * 0.2 + 0.01).astype(F32)
    xs = ((rng.integers(-100, 100, (33, 9)) + 0.5) * s).astype(F32)
    CHECK.same("quantize", xs, s, rng.integers(-5, 5, 9).astype(np.int32), axis=1, dtype="int32")


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_swiglu_order_per_dtype(dtype):
    x = _x(17, 2 * 33, dtype)
    y = CHECK.same("swiglu", x)
    if dtype == F32:  # the fp32 kernel's ((1/(1+e)) * a) * b differs from a / (1+e) * b on some elements
        assert (y != w8a8.swiglu(x, numerics=FIXED)).any()


# ----------------------------------------------------------------------------- dequant_swiglu_quant

def test_dequant_swiglu_quant_legacy_and_group():
    h = 64
    x = _x(40, 2 * h)
    assert _label("dequant_swiglu_quant", x, activate_left=True, quant_mode=1).startswith("dequant_swiglu_quant/legacy")
    CHECK.same("dequant_swiglu_quant", x, activate_left=True, quant_mode=1)
    for counts in ([1, 39], [0] * 31 + [1] * 9, [1] * 32 + [0] * 8):     # G = 2, 40 (cut-group at >= 32)
        gi = np.array(counts, np.int64)
        CHECK.same("dequant_swiglu_quant", x, group_index=gi, activate_left=True, quant_mode=1)
    xi = np.random.default_rng(4).integers(-3000, 3000, (40, 2 * h)).astype(np.int32)
    gi = np.array([10, 0, 30], np.int64)
    ws = (np.random.default_rng(5).random((3, 2 * h)) * 1e-3).astype(F32)
    bias = np.random.default_rng(6).integers(-500, 500, (3, 2 * h)).astype(np.int32)
    CHECK.same("dequant_swiglu_quant", xi, weight_scale=ws, bias=bias, group_index=gi, activate_left=True,
               quant_mode=1)
    CHECK.same("dequant_swiglu_quant", xi, weight_scale=ws[0], bias=bias[0], quant_mode=1)
    for s0 in (0.0, 1.5):    # the legacy static kernel's unguarded 1 / s
        CHECK.same("dequant_swiglu_quant", xi, weight_scale=ws[0], quant_mode=0, quant_scale=np.array([s0], F32),
                   quant_offset=np.array([0.25], F32))
    with pytest.raises(OverflowError):
        w8a8.dequant_swiglu_quant(np.full((1, 128), 2**31 - 1, np.int32), weight_scale=np.ones((1, 128), F32),
                                  bias=np.ones((1, 128), np.int32), group_index=np.array([1], np.int64), quant_mode=1)
    CHECK.same("dequant_swiglu_quant", np.full((2, 128), 2**31 - 1, np.int32), weight_scale=np.ones((2, 128), F32),
               bias=np.concatenate([np.zeros((1, 128), np.int32), np.ones((1, 128), np.int32)]),
               group_index=np.array([1, 1], np.int64), quant_mode=1)


# ----------------------------------------------------------------------------- finalize, gating, routing

@pytest.mark.parametrize("dtype, h, k, name", [(F16, 7, 4, "all-bias"), (BF16, 7, 6, "all-bias"),
                                               (F32, 8192, 3, "cut-h"), (F32, 4096, 3, "all-bias"),
                                               (F32, 8192, 2, "cut-h-k2")])
def test_finalize_templates(dtype, h, k, name):
    rng = np.random.default_rng(h + k)
    n, e = 5, 3
    rows = (rng.standard_normal((n * k, h)) * 4).astype(F32).astype(dtype)
    bias = (rng.standard_normal((e, h))).astype(F32).astype(dtype)
    scales = rng.random((n, k)).astype(F32).astype(dtype)
    idx = rng.permutation(n * k).astype(np.int32)
    idx[[1, 4]] = -1                                     # dropped slots (drop/pad mode 3)
    experts = rng.integers(0, e, (n, k)).astype(np.int32)
    skip = (rng.standard_normal((n, h))).astype(F32).astype(dtype)
    args = (rows, skip, None, bias, scales, idx, experts)
    assert w8a8.variants.select("moe_finalize_routing", *args, drop_pad_mode=3).name == name
    CHECK.same("moe_finalize_routing", *args, drop_pad_mode=3)
    CHECK.same("moe_finalize_routing", rows, None, None, None, scales, idx, None, drop_pad_mode=3)


@pytest.mark.parametrize("e, k", [(7, 7), (8, 8), (8, 9), (9, 2), (255, 8), (256, 8), (256, 9), (1032, 8)])
@pytest.mark.parametrize("dtype", [F16, BF16, F32])
def test_gating_templates(e, k, dtype):
    rng = np.random.default_rng(e * 10 + k)
    x = (rng.standard_normal((6, e)) * 1e-3).astype(F32).astype(dtype)      # near-ties: fp16 ranks differ
    x[0] = 0
    x[0, e // 2] = 2.0 ** -20
    CHECK.same("moe_gating_top_k_softmax", x, k=min(k, e))


@pytest.mark.parametrize("n, k", [(760, 8), (761, 8), (384, 8), (383, 8)])
def test_routing_sort_variants(n, k):
    ids = np.random.default_rng(n).integers(0, 256, (n, k)).astype(np.int32)
    x = _x(n, 8)
    for kw in (dict(expert_num=256, row_idx_type=1),
               dict(expert_num=256, active_expert_range=[0, 32], expert_tokens_num_type=1, row_idx_type=1),
               dict(expert_num=256, quant_mode=1, expert_tokens_num_type=1, expert_tokens_num_flag=True)):
        CHECK.same("moe_init_routing_v2", x, ids, **kw)


def test_routing_quant_full_load_and_gather():
    x = np.zeros((1, 7168), F32)
    x[0, :3] = [127, 62.5, -0.5]
    ids = np.arange(8, dtype=np.int32)[None, :]
    kw = dict(scale=np.ones((256, 7168), F32), expert_num=256, active_expert_range=[0, 256],
              expert_tokens_num_type=2, expert_tokens_num_flag=True, quant_mode=1)
    for xx, ii in ((x.astype(BF16), ids), (np.concatenate([x, x]).astype(BF16), np.concatenate([ids, ids]))):
        CHECK.same("moe_init_routing_v2", xx, ii, **kw)


def test_moe_layer_follows_the_variants():
    # the fused layer: init_routing_v2's gather-kernel rounding and the legacy dequant_swiglu_quant formula
    rng = np.random.default_rng(7)
    t, h, i, e, k = 9, 64, 32, 4, 2
    hidden = rng.standard_normal((t, h)).astype(F32).astype(BF16)
    w13 = rng.integers(-128, 128, (e, 2 * i, h)).astype(np.int8)
    s13 = (rng.random((e, 2 * i, 1)) * 1e-2).astype(F32)
    w2 = rng.integers(-128, 128, (e, h, i)).astype(np.int8)
    s2 = (rng.random((e, h, 1)) * 1e-2).astype(F32)
    logits = rng.standard_normal((t, e)).astype(F32)
    CHECK.same("w8a8_moe", hidden, w13, s13, w2, s2, top_k=k, router_logits=logits)
    st = w8a8.w8a8_moe_stages(hidden, w13, s13, w2, s2, top_k=k, router_logits=logits)
    assert st["variants"]["dequant_swiglu_quant"].name == "legacy-dynamic"
    assert st["variants"]["moe_init_routing_v2"].decides == {"routing_quant_round": "trunc_fp16_half_away"}


# ----------------------------------------------------------------------------- weight_quant_batchmatmul

@pytest.mark.parametrize("dtype", [F16, BF16])
def test_weight_quant_batchmatmul_antiquant_precision(dtype):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 40)).astype(F32).astype(dtype)
    w = rng.integers(-128, 128, (40, 24)).astype(np.int8)
    s = (rng.random(24) * 0.1 + 0.01).astype(F32).astype(dtype)
    o = (rng.standard_normal(24) * 0.37).astype(F32).astype(dtype)      # non-integer offsets
    assert w8a8.variants.select("weight_quant_batchmatmul", x, w, s, o).decides == {
        "antiquant_precision": "x_dtype" if dtype == F16 else "fp32"}
    y = CHECK.same("weight_quant_batchmatmul", x, w, s, o)
    if dtype == F16:
        assert (y != w8a8.weight_quant_batchmatmul(x, w, s, o, numerics=FIXED)).any()
