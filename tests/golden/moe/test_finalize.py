"""moe_finalize_routing: the four index layouts pinned by hand, accumulation order, properties, bad input.

Hand case (the routing of test_routing.py): 2 tokens, K = 2, 3 experts, expert_idx = [[2, 0], [0, 2]].
Expert-sorted rows R = [t0's e0 row, t1's e0 row, t0's e2 row, t1's e2 row] = [[1], [2], [3], [4]].
  token 0 = s00 * (R[2] + b[2]) + s01 * (R[0] + b[0]);  token 1 = s10 * (R[1] + b[0]) + s11 * (R[3] + b[2])
With scales [[0.5, 0.25], [2, 1]] and no bias: token 0 = 1.5 + 0.25 = 1.75; token 1 = 4 + 4 = 8.
With bias [[100], [0], [1000]]: token 0 = 0.5*1003 + 0.25*101 = 526.75; token 1 = 2*102 + 1*1004 = 1208.
Skips [[10], [20]] and [[1], [1]] add 11 and 21.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import w8a8
from w8a8 import bfloat16

F32 = np.float32
R = np.array([[1], [2], [3], [4]], F32)
SC = np.array([[0.5, 0.25], [2, 1]], F32)
IDS = np.array([[2, 0], [0, 2]], np.int32)
BIAS = np.array([[100], [0], [1000]], F32)
SKIP1 = np.array([[10], [20]], F32)
SKIP2 = np.array([[1], [1]], F32)
ROW_MAJOR = np.array([2, 0, 1, 3], np.int32)      # v2 gather index: entry t*K + j
COL_MAJOR = np.array([2, 1, 0, 3], np.int32)      # v1 index: entry j*N + t


@pytest.mark.parametrize("mode, idx", [(2, ROW_MAJOR), (0, COL_MAJOR)])
def test_dropless_layouts(mode, idx):
    out = w8a8.moe_finalize_routing(R, None, None, None, SC, idx, IDS, drop_pad_mode=mode)
    np.testing.assert_array_equal(out, [[1.75], [8]])
    out = w8a8.moe_finalize_routing(R, SKIP1, SKIP2, BIAS, SC, idx, IDS, drop_pad_mode=mode)
    np.testing.assert_array_equal(out, [[537.75], [1229]])


def test_layouts_are_not_interchangeable():
    # the row-major index read as column-major pairs token 0 with rows 2 and 1: 0.5*3 + 0.25*2 = 2
    out = w8a8.moe_finalize_routing(R, None, None, None, SC, ROW_MAJOR, IDS, drop_pad_mode=0)
    np.testing.assert_array_equal(out[0], [2.0])


# Drop/pad with capacity 1 (test_routing.test_v2_drop_pad_capacity_one): rows [E=3, C=1, H=1] =
# [[t0's e0 row = 1], [empty = 0], [t0's e2 row = 3]]; token 1's slots are dropped (-1).
PADDED = np.array([[[1]], [[0]], [[3]]], F32)
PAD_ROW_MAJOR = np.array([2, 0, -1, -1], np.int32)
PAD_COL_MAJOR = np.array([2, -1, 0, -1], np.int32)    # entry j*N + t of the same map


@pytest.mark.parametrize("mode, idx", [(3, PAD_ROW_MAJOR), (1, PAD_COL_MAJOR)])
def test_drop_pad_layouts(mode, idx):
    # token 0 = 0.5 * 3 + 0.25 * 1 = 1.75; token 1: both slots dropped -> 0 (+ skips: 21)
    out = w8a8.moe_finalize_routing(PADDED, None, None, None, SC, idx, IDS, drop_pad_mode=mode)
    np.testing.assert_array_equal(out, [[1.75], [0]])
    out = w8a8.moe_finalize_routing(PADDED, SKIP1, SKIP2, None, SC, idx, IDS, drop_pad_mode=mode)
    np.testing.assert_array_equal(out, [[12.75], [21]])
    # With a bias: H = 1, K = 2 runs the all-bias template, which skips a dropped slot entirely, bias
    # included (ops-transformer moe_finalize_routing_v2_fp_db_all_bias.h:441-472 @ c29bc106: the bias
    # Add and the scale Muls sit in the branch of a valid row): token 1 = 0. (The old golden added the
    # bias of the generic cut-H template, token 1 = 2 * 100 + 1 * 1000 = 1200:
    # test_cut_h_template_applies_the_dropped_slot_bias.)
    assert w8a8.variants.select("moe_finalize_routing", PADDED, None, None, BIAS, SC, idx, IDS,
                                drop_pad_mode=mode).name == "all-bias"
    out = w8a8.moe_finalize_routing(PADDED, None, None, BIAS, SC, idx, IDS, drop_pad_mode=mode)
    np.testing.assert_array_equal(out, [[526.75], [0]])


def test_no_scales_uses_k():
    # scales None: weights 1, K = k = 2 -> token 0 = 3 + 1, token 1 = 2 + 4
    out = w8a8.moe_finalize_routing(R, None, None, None, None, ROW_MAJOR, None, drop_pad_mode=2, k=2)
    np.testing.assert_array_equal(out, [[4], [6]])


def test_bf16_rows_with_fp32_scales_round_once():
    # fp32 sum of 1.0 * 1 + 2^-9 * 1 = 1.001953125 then one bf16 rounding (spacing 2^-7): 1.0
    rows = np.array([[1], [1]], F32).astype(bfloat16)
    sc = np.array([[1.0, 2.0 ** -9]], F32)
    out = w8a8.moe_finalize_routing(rows, None, None, None, sc, np.array([0, 1], np.int32), None, drop_pad_mode=2)
    assert out.dtype == bfloat16
    np.testing.assert_array_equal(out.astype(F32), [[1.0]])
    # three slots of 2^-8 each on top of 1: fp32 accumulates 1 + 3 * 2^-8 = 1.01171875 -> bf16 1.015625
    # (rounding per slot in bf16 would give 1.0 + 2^-8 -> 1.0 three times)
    rows3 = np.array([[1], [2.0 ** -8], [2.0 ** -8], [2.0 ** -8]], F32).astype(bfloat16)
    out3 = w8a8.moe_finalize_routing(rows3, None, None, None, np.ones((1, 4), F32), np.arange(4, dtype=np.int32),
                                     None, drop_pad_mode=2)
    np.testing.assert_array_equal(out3.astype(F32), [[1.015625]])


def test_accumulation_order_is_slot_order():
    # fp32: (2^24 + 1) + 1 vs 2^24 + (1 + 1): slots in order give 2^24 (each +1 is lost to rounding
    # ties-to-even), the skip is the starting value.
    rows = np.array([[1.0], [1.0]], F32)
    out = w8a8.moe_finalize_routing(rows, np.array([[2.0 ** 24]], F32), None, None, np.ones((1, 2), F32),
                                    np.array([0, 1], np.int32), None, drop_pad_mode=2)
    np.testing.assert_array_equal(out, [[2.0 ** 24]])


@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 5), st.data())
def test_modes_agree_after_transposing_the_index(n, k, h, data):
    rows = data.draw(hnp.arrays(F32, (n * k, h), elements=st.integers(-64, 64).map(float)))
    perm = data.draw(st.permutations(range(n * k)))
    row_major = np.array(perm, np.int32)
    col_major = row_major.reshape(n, k).T.reshape(-1)
    sc = data.draw(hnp.arrays(F32, (n, k), elements=st.sampled_from([0.25, 0.5, 1.0, 2.0])))
    a = w8a8.moe_finalize_routing(rows, None, None, None, sc, row_major, None, drop_pad_mode=2)
    b = w8a8.moe_finalize_routing(rows, None, None, None, sc, col_major, None, drop_pad_mode=0)
    c = w8a8.moe_finalize_routing(rows.reshape(n * k, 1, h), None, None, None, sc, row_major, None, drop_pad_mode=3)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    expect = (rows[row_major.reshape(n, k)].astype(np.float64) * sc[..., None]).sum(1)
    np.testing.assert_array_equal(a, expect.astype(F32))   # small integers x powers of two: exact


@pytest.mark.parametrize("call, exc, arg", [
    (lambda: w8a8.moe_finalize_routing(R.astype(np.int32), None, None, None, SC, ROW_MAJOR, IDS, drop_pad_mode=2),
     TypeError, "expanded_permuted_rows"),
    (lambda: w8a8.moe_finalize_routing(PADDED, None, None, None, SC, ROW_MAJOR, IDS, drop_pad_mode=2),
     ValueError, "expanded_permuted_rows"),
    (lambda: w8a8.moe_finalize_routing(R, None, None, None, SC, ROW_MAJOR, IDS, drop_pad_mode=4),
     ValueError, "drop_pad_mode"),
    (lambda: w8a8.moe_finalize_routing(R, None, None, None, SC, ROW_MAJOR.astype(np.int64), IDS, drop_pad_mode=2),
     TypeError, "expanded_src_to_dst_row"),
    (lambda: w8a8.moe_finalize_routing(R, None, None, None, SC, PAD_ROW_MAJOR, IDS, drop_pad_mode=2),
     ValueError, "expanded_src_to_dst_row"),                   # -1 only in drop/pad modes
    (lambda: w8a8.moe_finalize_routing(R, None, None, None, SC, np.array([0, 1, 2, 4], np.int32), IDS,
                                       drop_pad_mode=2), ValueError, "expanded_src_to_dst_row"),
    (lambda: w8a8.moe_finalize_routing(R, None, None, None, SC, ROW_MAJOR[:3], IDS, drop_pad_mode=2),
     ValueError, "expanded_src_to_dst_row"),
    (lambda: w8a8.moe_finalize_routing(R, None, None, None, SC.astype(np.float16), ROW_MAJOR, IDS, drop_pad_mode=2),
     TypeError, "scales"),
    (lambda: w8a8.moe_finalize_routing(R, None, SKIP2, None, SC, ROW_MAJOR, IDS, drop_pad_mode=2),
     ValueError, "skip1"),
    (lambda: w8a8.moe_finalize_routing(R, SKIP1[:1], None, None, SC, ROW_MAJOR, IDS, drop_pad_mode=2),
     ValueError, "skip1"),
    (lambda: w8a8.moe_finalize_routing(R, SKIP1.astype(np.float16), None, None, SC, ROW_MAJOR, IDS,
                                       drop_pad_mode=2), TypeError, "skip1"),
    (lambda: w8a8.moe_finalize_routing(R, None, None, BIAS, SC, ROW_MAJOR, None, drop_pad_mode=2),
     ValueError, "export_for_source_row"),
    (lambda: w8a8.moe_finalize_routing(R, None, None, BIAS[:2], SC, ROW_MAJOR, IDS, drop_pad_mode=2),
     ValueError, "export_for_source_row"),                     # expert 2 has no bias row
    (lambda: w8a8.moe_finalize_routing(R, None, None, np.zeros((3, 2), F32), SC, ROW_MAJOR, IDS, drop_pad_mode=2),
     ValueError, "bias"),
    (lambda: w8a8.moe_finalize_routing(R, None, None, None, None, ROW_MAJOR, None, drop_pad_mode=2, k=3),
     ValueError, "k"),
    (lambda: w8a8.moe_finalize_routing(R, None, None, None, np.array([[np.nan, 1], [1, 1]], F32), ROW_MAJOR, IDS,
                                       drop_pad_mode=2), ValueError, "scales"),
])
def test_bad_input(call, exc, arg):
    with pytest.raises(exc, match=f"'{arg}'"):
        call()


# ----------------------------------------------------------------------------- kernel variants

def test_fp16_rows_round_after_every_add():
    # fp16 rows run the Fp* templates with T = half (ops-transformer moe_finalize_routing_v2.cpp @ c29bc106):
    # every Add / Muls rounds to fp16 (ops-transformer moe_finalize_routing_v2_bf16*.h). 1 + 2^-11 is a tie at fp16
    # spacing 2^-10 -> even 1.0, three times: 1.0. The old golden summed in fp32, 1 + 3 * 2^-11 = 1 + 1.5 * 2^-10, a
    # tie between 1 + 2^-10 (odd) and 1 + 2^-9 -> 1.001953125.
    rows = np.array([[1], [2.0 ** -11], [2.0 ** -11], [2.0 ** -11]], np.float16)
    args = (rows, None, None, None, np.ones((1, 4), np.float16), np.arange(4, dtype=np.int32), None)
    assert w8a8.variants.select("moe_finalize_routing", *args, drop_pad_mode=2).decides["finalize_precision"] == "io_dtype"
    np.testing.assert_array_equal(w8a8.moe_finalize_routing(*args, drop_pad_mode=2).astype(F32), [[1.0]])
    fixed = w8a8.ASCEND.replace(variants="fixed")
    np.testing.assert_array_equal(w8a8.moe_finalize_routing(*args, drop_pad_mode=2, numerics=fixed).astype(F32),
                                  [[1.001953125]])
    # the weight is an fp16 scalar and each product rounds: (1 + 2^-10) * (1 + 2^-10) = 1 + 2^-9 + 2^-20
    # -> fp16 1 + 2^-9 (the 2^-20 is below half an ulp)
    one = np.array([[1 + 2.0 ** -10]], np.float16)
    out = w8a8.moe_finalize_routing(one, None, None, None, one, np.zeros(1, np.int32), None, drop_pad_mode=2)
    assert out.astype(F32).tolist() == [[1 + 2.0 ** -9]]


def test_cut_h_template_applies_the_dropped_slot_bias():
    # fp32 rows with a bias, K = 3: H = 8192 fits neither the all-bias budget (32 aH + indices > 195584 B)
    # nor the load-H one (28 aH > 195584 B): the generic cut-H template (moe_finalize_routing_v2_fp_cuth.h:
    # 397-437) zero-fills a dropped row and still adds its bias: token 0 = 1 * (1 + 100) + 2 * (0 + 1000)
    # + 3 * (1 + 100) = 2404. At H = 4096 the all-bias template skips the slot: 404.
    for h, name, want in ((8192, "cut-h", 2404.0), (4096, "all-bias", 404.0)):
        rows = np.ones((4, h), F32)
        bias = np.stack([np.full(h, 100, F32), np.full(h, 1000, F32)])
        args = (rows, None, None, bias, np.array([[1, 2, 3]], F32), np.array([0, -1, 1], np.int32),
                np.array([[0, 1, 0]], np.int32))
        assert w8a8.variants.select("moe_finalize_routing", *args, drop_pad_mode=3).name == name
        out = w8a8.moe_finalize_routing(*args, drop_pad_mode=3)
        assert set(out[0].tolist()) == {want}


def test_v1_bf16_cast_half_away():
    # finalize_out_round="half_away" (CAST_ROUND, the V1 kernels): 1 + 2^-8 is a bf16 tie (spacing 2^-7)
    # -> away 1 + 2^-7; RINT (V2) -> even 1.0
    rows = np.array([[1.0], [2.0 ** -8]], F32).astype(bfloat16)
    sc = np.array([[1.0, 1.0]], F32)
    args = (rows, None, None, None, sc, np.array([0, 1], np.int32), None)
    assert w8a8.moe_finalize_routing(*args, drop_pad_mode=2).astype(F32).tolist() == [[1.0]]
    away = w8a8.ASCEND.replace(finalize_out_round="half_away")
    assert w8a8.moe_finalize_routing(*args, drop_pad_mode=2, numerics=away).astype(F32).tolist() == [[1 + 2.0 ** -7]]
