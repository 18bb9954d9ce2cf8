"""moe_init_routing (v1), moe_init_routing_v2, dispatch_quant: hand-checked layouts, quantization, properties.

The hand case: 2 tokens (x0 = [1, 1], x1 = [2, 2]), 3 experts, top-2, expert_idx = [[2, 0], [0, 2]]
so expert 1 is empty. Token-major flat ids (v2): 0 = (t0, slot0) -> e2, 1 = (t0, slot1) -> e0,
2 = (t1, slot0) -> e0, 3 = (t1, slot1) -> e2. A stable sort by expert gives flat order [1, 2, 0, 3]
(expert 0 rows first, token 0 before token 1), i.e. expanded rows [x0, x1, x0, x1].
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import w8a8
from w8a8 import ASCEND, bfloat16

F32 = np.float32
X = np.array([[1, 1], [2, 2]], F32)
IDX = np.array([[2, 0], [0, 2]], np.int32)


# ----------------------------------------------------------------------------- v1

def test_v1_hand_layout():
    # v1 row ids are column-major: row_idx[t, j] = j*N + t = [[0, 2], [1, 3]].
    # Sorting the row-major flattening [2, 0, 0, 2] stably: order [1, 2, 0, 3]; dst_to_src =
    # row_idx.flat[order] = [2, 1, 0, 3]; expanded_row_idx[dst_to_src] = [0, 1, 2, 3] ->
    # expanded_row_idx = [2, 1, 0, 3]; expanded_x = x[[2, 1, 0, 3] % 2] = [x0, x1, x0, x1].
    ex, eri, eei = w8a8.moe_init_routing(X, np.array([[0, 2], [1, 3]], np.int32), IDX, 2)
    np.testing.assert_array_equal(eri, [2, 1, 0, 3])
    np.testing.assert_array_equal(eei, [0, 0, 2, 2])
    np.testing.assert_array_equal(ex, [[1, 1], [2, 2], [1, 1], [2, 2]])
    # active_num = 1 keeps min(1, N) * K = 2 rows
    ex1, eri1, _ = w8a8.moe_init_routing(X, np.array([[0, 2], [1, 3]], np.int32), IDX, 1)
    np.testing.assert_array_equal(ex1, [[1, 1], [2, 2]])
    np.testing.assert_array_equal(eri1, eri)


# ----------------------------------------------------------------------------- v2 layouts and counts

def test_v2_hand_gather_and_scatter_indices():
    # gather (row_idx_type 0): expanded_row_idx[flat id] = dst: flat 1 -> 0, 2 -> 1, 0 -> 2, 3 -> 3
    ex, eri, counts, scale = w8a8.moe_init_routing_v2(X, IDX, expert_num=3, expert_tokens_num_type=1,
                                                      expert_tokens_num_flag=True)
    np.testing.assert_array_equal(eri, [2, 0, 1, 3])           # differs from v1's [2, 1, 0, 3]
    np.testing.assert_array_equal(ex, [[1, 1], [2, 2], [1, 1], [2, 2]])
    np.testing.assert_array_equal(counts, [2, 0, 2])           # expert 1 empty
    assert counts.dtype == np.int64 and scale.shape == (4,) and scale.dtype == np.float32
    # scatter (row_idx_type 1): expanded_row_idx[dst] = flat id = the sort order itself
    _, eri1, _, _ = w8a8.moe_init_routing_v2(X, IDX, expert_num=3, row_idx_type=1)
    np.testing.assert_array_equal(eri1, [1, 2, 0, 3])


@pytest.mark.parametrize("num_type, expected", [
    (0, [2, 2, 4]),                          # cumsum of [2, 0, 2]
    (1, [2, 0, 2]),                          # counts
    (2, [[0, 2], [2, 2], [0, 0]]),           # (expert, count) for non-empty experts, then (0, 0)
])
def test_v2_expert_token_outputs(num_type, expected):
    _, _, out, _ = w8a8.moe_init_routing_v2(X, IDX, expert_num=3, expert_tokens_num_type=num_type,
                                            expert_tokens_num_flag=True)
    np.testing.assert_array_equal(out, expected)
    _, _, none, _ = w8a8.moe_init_routing_v2(X, IDX, expert_num=3, expert_tokens_num_type=num_type)
    assert none.shape == (0,) and none.dtype == np.int64      # flag False: no count output


def test_v2_active_expert_range_drops_outside_ids():
    # range [0, 2): only expert 0 is local (flat ids 1, 2); e2 pairs are dropped (-1).
    ex, eri, counts, _ = w8a8.moe_init_routing_v2(X, IDX, expert_num=3, active_expert_range=[0, 2],
                                                  expert_tokens_num_type=1, expert_tokens_num_flag=True)
    np.testing.assert_array_equal(eri, [-1, 0, 1, -1])
    np.testing.assert_array_equal(ex[:2], [[1, 1], [2, 2]])
    np.testing.assert_array_equal(ex[2:], 0)                   # unspecified rows: golden zeros
    np.testing.assert_array_equal(counts, [2, 0])              # experts 0, 1
    # range [1, 3): ids below the range (expert 0) sort last; experts 1, 2 -> flat 0 (t0) and 3 (t1)
    ex, eri, counts, _ = w8a8.moe_init_routing_v2(X, IDX, expert_num=3, active_expert_range=[1, 3],
                                                  expert_tokens_num_type=1, expert_tokens_num_flag=True)
    np.testing.assert_array_equal(eri, [0, -1, -1, 1])
    np.testing.assert_array_equal(ex[:2], [[1, 1], [2, 2]])
    np.testing.assert_array_equal(counts, [0, 2])
    # row_idx_type 1: the sort kernels write all N*K sorted source ids (ops-transformer
    # moe_init_routing_v3/op_kernel/moe_v3_sort_one_core.h:52-112 @ c29bc106: key -id for ids >= start,
    # MIN_FP32 below, descending sort with indices, the whole index list copied out): the active flat
    # ids 0, 3 (experts 2, 2), then the ids below the range 1, 2 (expert 0), in stable order.
    _, eri1, _, _ = w8a8.moe_init_routing_v2(X, IDX, expert_num=3, active_expert_range=[1, 3], row_idx_type=1)
    np.testing.assert_array_equal(eri1, [0, 3, 1, 2])
    masks = w8a8.moe_init_routing_v2_valid(X, IDX, expert_num=3, active_expert_range=[1, 3], row_idx_type=1)
    np.testing.assert_array_equal(masks[0][:, 0], [True, True, False, False])
    np.testing.assert_array_equal(masks[1], [True, True, True, True])


def test_v2_active_num_limits_rows_not_indices():
    ex, eri, _, _ = w8a8.moe_init_routing_v2(X, IDX, expert_num=3, active_num=3)
    assert ex.shape == (3, 2)
    np.testing.assert_array_equal(eri, [2, 0, 1, 3])


def test_v2_drop_pad_capacity_one():
    # C = 1: expert 0 keeps its first token (flat 1, t0) in slot 0*1 + 0 = 0; expert 2 keeps flat 0
    # (t0) in slot 2*1 + 0 = 2; flat 2 and 3 (token 1) are dropped; slot 1 (expert 1) is zero.
    ex, eri, counts, _ = w8a8.moe_init_routing_v2(X, IDX, expert_num=3, drop_pad_mode=1, expert_capacity=1,
                                                  expert_tokens_num_type=1, expert_tokens_num_flag=True)
    assert ex.shape == (3, 1, 2)
    np.testing.assert_array_equal(ex[:, 0], [[1, 1], [0, 0], [1, 1]])
    np.testing.assert_array_equal(eri, [2, 0, -1, -1])
    np.testing.assert_array_equal(counts, [2, 0, 2])           # counts before the capacity drop


def test_v2_quant_per_token_scale_is_gathered_for_int8_x():
    # quant_mode -1 with an int8 x and a per-token scale: rows and scales both follow the sort.
    xq = np.array([[1, -1], [5, 7]], np.int8)
    s = np.array([0.25, 3.0], F32)
    ex, _, _, es = w8a8.moe_init_routing_v2(xq, IDX, expert_num=3, scale=s)
    np.testing.assert_array_equal(ex, [[1, -1], [5, 7], [1, -1], [5, 7]])
    np.testing.assert_array_equal(es, [0.25, 3.0, 0.25, 3.0])


XQ = np.array([[127, -62.5], [-4, 1]], F32).astype(bfloat16)


def test_v2_dynamic_quant_hand():
    # Every shape but the DeepSeek-V3 full-load one runs the gather kernel MoeGatherOutDynamicQuant
    # (ops-transformer moe_init_routing_v3/op_kernel/moe_v3_gather_dynamic_quant.h:126-138 @ c29bc106):
    # s = rowmax / 127.0f; t = x / s (Div); fp32 -> fp16 CAST_TRUNC; fp16 -> int8 CAST_ROUND (half away).
    # token 0 [127, -62.5]: scale = 127/127 = 1; t exact in fp16; codes 127, ROUND(-62.5) = -63 (away)
    # token 1 [-4, 1]: scale = 4/127; codes -127 and 1/(4/127) = 31.75 (exact in fp16) -> 32
    ex, _, _, es = w8a8.moe_init_routing_v2(XQ, IDX, expert_num=3, quant_mode=1)
    assert ex.dtype == np.int8
    assert w8a8.variants.select("moe_init_routing_v2", XQ, IDX, expert_num=3, quant_mode=1).decides == {
        "routing_quant_round": "trunc_fp16_half_away"}
    np.testing.assert_array_equal(ex, [[127, -63], [-127, 32], [127, -63], [-127, 32]])
    np.testing.assert_array_equal(es, [1.0, F32(4) / F32(127), 1.0, F32(4) / F32(127)])
    # the full-load kernel's rounding (CAST_ODD to fp16 then CAST_RINT = one RNE): RINT(-62.5) = -62
    fixed = ASCEND.replace(variants="fixed")
    ex2, _, _, _ = w8a8.moe_init_routing_v2(XQ, IDX, expert_num=3, quant_mode=1, numerics=fixed)
    np.testing.assert_array_equal(ex2[0], [127, -62])


def test_v2_dynamic_quant_trunc_half_away_path():
    # the gather kernel: fp32 -> fp16 toward zero, then half away: -62.5 -> -63
    num = ASCEND.replace(routing_quant_round="trunc_fp16_half_away")
    ex, _, _, _ = w8a8.moe_init_routing_v2(XQ, IDX, expert_num=3, quant_mode=1, numerics=num)
    np.testing.assert_array_equal(ex[0], [127, -63])
    # the truncation matters: t = 0.49999 (scale 1) is within 1e-5 of 0.5, so fp16 round-to-nearest
    # would give 0.5 and half-away 1; toward zero it is 0.49976 (fp16 spacing 2^-12 there) -> 0.
    x = np.array([[127, 0.49999]], F32)   # rowmax 127: scale 1, t = x exactly
    ex2, _, _, _ = w8a8.moe_init_routing_v2(x, np.array([[0]], np.int32), expert_num=1, quant_mode=1, numerics=num)
    np.testing.assert_array_equal(ex2, [[127, 0]])


def test_v2_dynamic_quant_smooth_scale_per_expert():
    # smooth rows [2, 1] for expert 0 and [1, 1] for expert 2 (range [0, 3): rows 0..2)
    smooth = np.array([[2, 1], [9, 9], [1, 1]], F32)
    ex, _, _, es = w8a8.moe_init_routing_v2(np.array([[63.5, -127]], F32), np.array([[0, 2]], np.int32),
                                            expert_num=3, quant_mode=1, scale=smooth)
    # expert 0: [127, -127] -> scale 1, codes [127, -127]; expert 2: [63.5, -127] -> codes [RINT(63.5)=64, -127]
    np.testing.assert_array_equal(ex, [[127, -127], [64, -127]])
    np.testing.assert_array_equal(es, [1, 1])


def test_v2_static_quant_fp16_math():
    # fp16: 127 * 0.5 + 1 = 64.5 -> 64; -62.5 * 0.5 + 1 = -30.25 -> -30; -4 * .5 + 1 = -1; 1 * .5 + 1 = 1.5 -> 2
    ex, _, _, es = w8a8.moe_init_routing_v2(XQ, IDX, expert_num=3, quant_mode=0, scale=np.array([0.5], F32),
                                            offset=np.array([1.0], F32))
    np.testing.assert_array_equal(ex, [[64, -30], [-1, 2], [64, -30], [-1, 2]])
    assert es.shape == (0,)
    # fp16 rounding of the product: 1000.3 -> fp16 1000.5 (spacing 0.5); * 0.1 (fp16 0.099975586)
    # = 100.0255... -> fp16 100.0 ; + 0 -> 100
    ex, _, _, _ = w8a8.moe_init_routing_v2(np.array([[1000.3]], F32), np.array([[0]], np.int32), expert_num=1,
                                           quant_mode=0, scale=np.array([0.1], F32))
    np.testing.assert_array_equal(ex, [[100]])


def test_v2_zero_row_quantizes_to_zero():
    ex, _, _, es = w8a8.moe_init_routing_v2(np.zeros((1, 4), F32), np.array([[0]], np.int32), expert_num=1,
                                            quant_mode=1)
    np.testing.assert_array_equal(ex, 0)
    np.testing.assert_array_equal(es, 0)


def test_dispatch_quant_matches_routing_quant():
    rng = np.random.default_rng(3)
    h = rng.standard_normal((7, 33)).astype(F32).astype(bfloat16)
    ids = rng.integers(0, 5, (7, 3)).astype(np.int32)
    q, s = w8a8.dispatch_quant(h)
    a = w8a8.moe_init_routing_v2(h, ids, expert_num=5, quant_mode=1)
    b = w8a8.moe_init_routing_v2(q, ids, expert_num=5, quant_mode=-1, scale=s)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[3], b[3])
    np.testing.assert_array_equal(a[1], b[1])


# ----------------------------------------------------------------------------- properties

@st.composite
def routing_case(draw):
    n = draw(st.integers(1, 9))
    k = draw(st.integers(1, 4))
    e = draw(st.integers(1, 6))
    ids = draw(hnp.arrays(np.int32, (n, k), elements=st.integers(0, e - 1)))
    x = draw(hnp.arrays(F32, (n, 3), elements=st.integers(-8, 8).map(float)))
    return x, ids, e


@given(routing_case())
def test_v1_v2_layouts_are_transposes(case):
    x, ids, e = case
    n, k = ids.shape
    row_idx = (np.arange(k)[None, :] * n + np.arange(n)[:, None]).astype(np.int32)
    ex1, eri1, _ = w8a8.moe_init_routing(x, row_idx, ids, n)
    ex2, eri2, _, _ = w8a8.moe_init_routing_v2(x, ids, expert_num=e)
    np.testing.assert_array_equal(ex1, ex2)
    # v1 entry j*N + t == v2 entry t*K + j
    np.testing.assert_array_equal(eri1.reshape(k, n).T, eri2.reshape(n, k))


@given(routing_case(), st.data())
def test_v2_routing_round_trip_and_counts(case, data):
    x, ids, e = case
    n, k = ids.shape
    start = data.draw(st.integers(0, e - 1))
    end = data.draw(st.integers(start + 1, e))
    ex, eri, counts, _ = w8a8.moe_init_routing_v2(x, ids, expert_num=e, active_expert_range=[start, end],
                                                  expert_tokens_num_type=1, expert_tokens_num_flag=True)
    active = (ids >= start) & (ids < end)
    assert counts.sum() == active.sum()
    np.testing.assert_array_equal(counts, np.bincount(ids[active] - start, minlength=end - start))
    # every routed pair points to a row holding its token; rows are grouped by expert, ascending
    flat = eri.reshape(n, k)
    assert ((flat >= 0) == active).all()
    for t, j in zip(*np.nonzero(active)):
        np.testing.assert_array_equal(ex[flat[t, j]], x[t])
    # a fake expert (row * (id + 1)) then finalize with power-of-two weights: exact token sums
    expert_of_row = np.empty(ex.shape[0], np.int64)
    expert_of_row[flat[active]] = ids[active]
    avail = int(active.sum())
    rows = ex.copy()
    rows[:avail] *= (expert_of_row[:avail] + 1)[:, None]
    w = (2.0 ** -np.arange(k, dtype=F32))[None, :].repeat(n, 0)
    out = w8a8.moe_finalize_routing(rows, None, None, None, w, eri, ids, drop_pad_mode=3)
    expect = (x[:, None, :].astype(np.float64) * ((ids + 1) * active * w)[:, :, None]).sum(1)
    np.testing.assert_array_equal(out, expect.astype(F32))
    _, _, cum, _ = w8a8.moe_init_routing_v2(x, ids, expert_num=e, active_expert_range=[start, end],
                                            expert_tokens_num_type=0, expert_tokens_num_flag=True)
    np.testing.assert_array_equal(cum, np.cumsum(counts))


# ----------------------------------------------------------------------------- bad input

def _v2(**kw):
    args = dict(expert_num=3)
    args.update(kw)
    x = args.pop("x", X)
    ids = args.pop("ids", IDX)
    return lambda: w8a8.moe_init_routing_v2(x, ids, **args)


@pytest.mark.parametrize("call, exc, arg", [
    (lambda: w8a8.moe_init_routing(X.astype(np.int8), np.array([[0, 2], [1, 3]], np.int32), IDX, 2), TypeError, "x"),
    (lambda: w8a8.moe_init_routing(X, np.array([[0, 2], [1, 1]], np.int32), IDX, 2), ValueError, "row_idx"),
    (lambda: w8a8.moe_init_routing(X, np.array([[0, 2], [1, 3]], np.int64), IDX, 2), TypeError, "row_idx"),
    (lambda: w8a8.moe_init_routing(X, np.array([[0, 2], [1, 3]], np.int32), IDX[:, :1], 2), ValueError, "expert_idx"),
    (lambda: w8a8.moe_init_routing(X, np.array([[0, 2], [1, 3]], np.int32), IDX, -1), ValueError, "active_num"),
    (_v2(ids=IDX.astype(np.int64)), TypeError, "expert_idx"),
    (_v2(ids=IDX[:1]), ValueError, "expert_idx"),
    (_v2(expert_num=-1), ValueError, "expert_num"),
    (_v2(active_expert_range=[2, 1]), ValueError, "active_expert_range"),
    (_v2(active_expert_range=[0, 4]), ValueError, "active_expert_range"),
    (_v2(active_expert_range=[0]), ValueError, "active_expert_range"),
    (_v2(drop_pad_mode=2), ValueError, "drop_pad_mode"),
    (_v2(drop_pad_mode=1), ValueError, "expert_capacity"),
    (_v2(drop_pad_mode=1, expert_capacity=2, row_idx_type=1), ValueError, "row_idx_type"),
    (_v2(expert_tokens_num_type=3), ValueError, "expert_tokens_num_type"),
    (_v2(expert_tokens_num_flag=1), TypeError, "expert_tokens_num_flag"),
    (_v2(expert_num=-1, active_expert_range=[0, 3], expert_tokens_num_type=2, expert_tokens_num_flag=True),
     ValueError, "expert_num"),
    (_v2(quant_mode=2), ValueError, "quant_mode"),
    (_v2(x=X.astype(np.int8), quant_mode=1), TypeError, "x"),
    (_v2(quant_mode=0), ValueError, "scale"),
    (_v2(quant_mode=0, scale=np.ones(2, F32)), ValueError, "scale"),
    (_v2(quant_mode=0, scale=np.ones(1, F32), offset=np.ones(2, F32)), ValueError, "offset"),
    (_v2(offset=np.ones(1, F32)), ValueError, "offset"),
    (_v2(scale=np.ones(3, F32)), ValueError, "scale"),
    (_v2(scale=np.ones(2, np.float16)), TypeError, "scale"),
    (_v2(quant_mode=1, scale=np.ones((2, 2), F32)), ValueError, "scale"),
    (_v2(x=np.array([[np.inf, 0], [0, 0]], F32)), ValueError, "x"),
    (_v2(active_num=-2), ValueError, "active_num"),
    (_v2(expert_capacity=-2), ValueError, "expert_capacity"),
    (_v2(expert_num=0), ValueError, "expert_num"),
    (_v2(numerics={}), TypeError, "numerics"),
    (lambda: w8a8.dispatch_quant(np.zeros((2, 2), np.int8)), TypeError, "hidden"),
    (lambda: w8a8.moe_init_routing_v2_valid(X, IDX, expert_num=3, row_idx_type=2), ValueError, "row_idx_type"),
])
def test_bad_input(call, exc, arg):
    with pytest.raises(exc, match=f"'{arg}'"):
        call()


# ----------------------------------------------------------------------------- kernel variants

def test_gather_sort_perf_kernel_leaves_scatter_entries_unwritten():
    # quant_mode -1, row_idx_type 1, count type 1, expert_num 256, a range of <= 32 experts, 384 <= N <=
    # 8192 and k = 8 run MoeSortActualExpert (ops-transformer moe_init_routing_v3_tiling.cpp:500-517,
    # 556-571 @ c29bc106), which writes only the active entries of the scatter index
    # (moe_v3_sort_actual_expert.h:270-279); N = 383 runs the one-core sort, which writes all N*K.
    rng = np.random.default_rng(2)
    for n, full in ((384, False), (383, True)):
        ids = rng.integers(0, 256, (n, 8)).astype(np.int32)
        x = np.zeros((n, 8), bfloat16)
        kw = dict(expert_num=256, active_expert_range=[0, 32], expert_tokens_num_type=1, row_idx_type=1)
        v = w8a8.variants.select("moe_init_routing_v2", x, ids, **kw)
        assert v.key == (1001000 if full else 1201000)
        _, eri, _, _ = w8a8.moe_init_routing_v2(x, ids, **kw)
        mask = w8a8.moe_init_routing_v2_valid(x, ids, **kw)[1]
        active = int(((ids >= 0) & (ids < 32)).sum())
        assert mask.all() == full and mask.sum() == (n * 8 if full else active)
        # the golden writes the whole stable permutation either way
        np.testing.assert_array_equal(np.sort(eri), np.arange(n * 8))


def test_full_load_perf_shape_rounds_half_even():
    # The DeepSeek-V3 decode shape (x [1, 7168] bf16, expert_idx [1, 8], smooth scale [256, 7168], range
    # [0, 256), key-value counts, quant_mode 1) runs MoeV3FullLoad (tiling key 2000000): fp32 -> fp16
    # CAST_ODD then fp16 -> int8 CAST_RINT = one RNE (moe_v3_full_load.h:194-200). x = [127, 62.5, ...]
    # (scale 1): RINT(62.5) = 62; the gather kernel's half away would give 63.
    x = np.zeros((1, 7168), F32)
    x[0, :2] = [127, 62.5]
    x = x.astype(bfloat16)
    ids = np.arange(8, dtype=np.int32)[None, :]
    kw = dict(scale=np.ones((256, 7168), F32), expert_num=256, active_expert_range=[0, 256],
              expert_tokens_num_type=2, expert_tokens_num_flag=True, quant_mode=1)
    assert w8a8.variants.select("moe_init_routing_v2", x, ids, **kw).label == "moe_init_routing_v2/full-load-perf[2000000]"
    ex, _, _, _ = w8a8.moe_init_routing_v2(x, ids, **kw)
    assert ex[0, :2].tolist() == [127, 62]
    ex2, _, _, _ = w8a8.moe_init_routing_v2(np.concatenate([x, x]), np.concatenate([ids, ids]), **kw)
    assert ex2[0, :2].tolist() == [127, 63]       # [2, 7168]: the gather kernel
