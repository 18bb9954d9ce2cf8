"""Expert parallelism in the golden (docs/expert-parallelism.md): the EP layer against the single-process
layer (Claim A), int8 against bf16 dispatch (Claim B), rank-count invariance, where the deployments'
dispatch formulas legitimately differ (Ascend DeepEP normal's amax epsilon, the alltoall strategy's
init_routing formula, the runner's kernel variants), and the MC2 ops against the layer they model.

The claims hold under these conditions, which the tests state: ``ep_dispatch_quant="mc2"``, weights
on the bf16 grid, no smooth scales, zeros compared sign-blind, and ``variants="fixed"`` (so that no op's
kernel depends on how many rows one rank holds).
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings

import w8a8
from conformance import ep_invariants as I
from conformance.ops.moe._ep import mc2_call, mc2_params
from w8a8 import bfloat16
from w8a8.moe.ep_layer import w8a8_moe_ep_args
from w8a8.offline import quantize_weight_per_channel
from w8a8.rounding import to_float

F32 = np.float32
FIXED = w8a8.ASCEND.replace(variants="fixed")
H, IW, E, K = 64, 16, 8, 3


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    from threadpoolctl import threadpool_limits
    with threadpool_limits(1, user_api="blas"):
        yield


def experts(rng, e=E, h=H, i=IW):
    w13, s13, _ = quantize_weight_per_channel(rng.standard_normal((e, 2 * i, h)).astype(F32) * F32(0.05))
    w2, s2, _ = quantize_weight_per_channel(rng.standard_normal((e, h, i)).astype(F32) * F32(0.05))
    return w13, s13, w2, s2


def shared(rng, h=H, i=8):
    out = {}
    for name, (n, k) in {"gate": (i, h), "up": (i, h), "down": (h, i)}.items():
        out[f"{name}_weight"], out[f"{name}_scale"], _ = quantize_weight_per_channel(
            rng.standard_normal((n, k)).astype(F32) * F32(0.05))
    return out


def tokens(rng, t, h=H, scale=1.0):
    return (rng.standard_normal((t, h)) * scale).astype(F32).astype(bfloat16)


def routing(rng, t, e=E, k=K, bf16_grid=True):
    ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32) if t else np.zeros((0, k), np.int32)
    w = rng.uniform(0.05, 1.0, (t, k)).astype(F32)
    return ids, (to_float(w, bfloat16).astype(F32) if bf16_grid else w)


def split(values, r):
    """Contiguous split of the concatenated tokens into r ranks; ranks 1 and r - 2 get none when r >= 4."""
    n = values[0].shape[0]
    cuts = np.linspace(0, n, r + 1).astype(int)
    if r >= 4:
        cuts[2] = cuts[1]
        cuts[r - 1] = cuts[r - 2]
    return [[v[cuts[q]:cuts[q + 1]] for q in range(r)] for v in values]


def layer_args(rng, t=23, r=4, shared_expert=True, numerics=FIXED, **kw):
    h = tokens(rng, t)
    ids, w = routing(rng, t)
    hs, idss, ws = split([h, ids, w], r)
    return w8a8_moe_ep_args(hs, *experts(rng), topk_ids=idss, topk_weights=ws, swiglu_limit=10.0,
                            shared_expert=shared(rng) if shared_expert else None, numerics=numerics, **kw)


@pytest.mark.parametrize("r", [1, 2, 4, 8])
def test_claim_a_ep_int8_equals_prequantized_single_process(r):
    # the int8 EP layer == w8a8_moe_prequantized(*dynamic_quant(concat h)) bit for bit; for r >= 4 two ranks
    # hold no token, and the shared expert and the SwiGLU clamp are on
    a = layer_args(np.random.default_rng(r), r=r)
    assert [t.shape[0] for t in a.hidden].count(0) == (2 if r >= 4 else 0)
    assert I.claim_a(a, FIXED) == []


@pytest.mark.parametrize("r", [1, 2, 4, 8])
def test_claim_b_bf16_dispatch_equals_int8(r):
    assert I.claim_b(layer_args(np.random.default_rng(10 + r), r=r), FIXED) == []


def test_rank_count_invariance():
    a = layer_args(np.random.default_rng(20), t=37, r=2)
    for d in ("int8", "bf16"):
        assert I.rank_count_invariance(dataclasses.replace(a, dispatch=d), FIXED) == []


def test_claim_a_needs_bf16_grid_weights():
    # condition 5: w8a8_moe rounds the weights to bf16, the EP combine multiplies by the fp32 weights; with
    # weights off the bf16 grid the two differ, and ep_combine_weights="bfloat16" makes them agree again
    rng = np.random.default_rng(30)
    h = tokens(rng, 19)
    ids, w = routing(rng, 19, bf16_grid=False)
    (hs, idss, ws), ex = split([h, ids, w], 2), experts(rng)
    a = w8a8_moe_ep_args(hs, *ex, topk_ids=idss, topk_weights=ws, numerics=FIXED)
    assert I.claim_a(a, FIXED) != []
    assert I.claim_a(a, FIXED.replace(ep_combine_weights="bfloat16")) == []


def _tiny_row_call(numerics, scale=1e-6):
    rng = np.random.default_rng(40)
    h = tokens(rng, 6)
    h[2] = tokens(rng, 1, scale=scale)[0]        # amax about 3 * scale < 2^-15 = 3.05e-5
    ids, w = routing(rng, 6)
    (hs, idss, ws) = split([h, ids, w], 2)
    return w8a8_moe_ep_args(hs, *experts(rng), topk_ids=idss, topk_weights=ws, numerics=numerics)


def test_deepep_normal_epsilon_breaks_claim_b_for_tiny_rows():
    # Ascend DeepEP normal quantizes with inv = 127 / (m + 1e-12) on the sender; the runner's on-arrival
    # npu_dynamic_quant uses 127 / m. For m < 2^-15, fp32(m + 1e-12) != m: the scales differ
    deep = FIXED.replace(ep_dispatch_quant="deepep_normal")
    a = _tiny_row_call(deep)
    m = np.float32(np.max(np.abs(a.hidden[0][2].astype(F32))))
    assert m < 2.0 ** -15 and np.float32(m + np.float32(1e-12)) != m
    st = w8a8.w8a8_moe_ep_stages(*_layer_inputs(a), topk_ids=a.topk_ids, topk_weights=a.topk_weights,
                                 dispatch="int8", numerics=deep)
    q, i = next((q, int(i)) for q, src in enumerate(st["src"])     # a received copy of rank 0's token 2
                for i in np.flatnonzero((src[:, 0] == 0) & (src[:, 1] == 2)))
    assert st["payload_scale"][q][i] == np.float32(1) / (np.float32(127) / np.float32(m + np.float32(1e-12)))
    assert st["payload_scale"][q][i] != np.float32(1) / (np.float32(127) / m)
    # at amax ~ 3e-6 the scales are a few fp32 ulps apart and the outputs survive it (pinned on this data);
    # at amax ~ 3e-10 the epsilon is 0.3 % of amax, codes move, and the layer's outputs differ
    assert I.claim_b(a, deep) == []
    assert I.claim_b(_tiny_row_call(deep, scale=1e-10), deep) != []
    assert I.claim_b(_tiny_row_call(FIXED, scale=1e-10), FIXED) == []       # MC2 has no epsilon


def _layer_inputs(a):
    return (a.hidden, a.experts.w13, a.experts.w13_scale, a.experts.w2, a.experts.w2_scale)


def test_deepep_normal_all_zero_token_has_a_finite_scale():
    # 1 / (127 / 1e-12) = 7.874e-15 instead of the MC2 1 / inf = 0; both give codes 0
    deep = FIXED.replace(ep_dispatch_quant="deepep_normal")
    h = [np.zeros((1, 16), bfloat16)]
    st = w8a8.w8a8_moe_ep_stages(h, *experts(np.random.default_rng(0), e=1, h=16, i=4),
                                 topk_ids=[np.zeros((1, 1), np.int32)], topk_weights=[np.ones((1, 1), F32)],
                                 numerics=deep)
    assert st["payload"][0].tolist() == [[0] * 16]
    assert st["payload_scale"][0][0] == np.float32(1) / (np.float32(127) / np.float32(1e-12)) > 0


def test_deepep_normal_dispatch_op_values():
    # the MC2 dispatch op under ep_dispatch_quant="deepep_normal" (conformance case int8_tie_and_zero_row with
    # the epsilon): rank 1's zero row: inv = 127 / 1e-12, codes 0, scale 1 / (127 / 1e-12) (finite);
    # rank 0's [2, 1, 1, ...]: fp32(2 + 1e-12) = 2, so codes [127, 64, ...] (63.5 -> 64) and 1 / 63.5 as in MC2
    x = [np.concatenate([[2.0], np.ones(1023)]).astype(F32).astype(bfloat16)[None], np.zeros((1, 1024), bfloat16)]
    out = w8a8.moe_distribute_dispatch_v2(x, [np.array([[1]], np.int32), np.array([[0]], np.int32)], "ep", 2,
                                          [0, 1], 2, quant_mode=2,
                                          numerics=w8a8.ASCEND.replace(ep_dispatch_quant="deepep_normal"))
    assert out[0][0].tolist() == [[0] * 1024] and out[0][1].tolist() == [[127] + [64] * 1023]
    assert out[1][0][0] == np.float32(1) / (np.float32(127) / np.float32(1e-12))
    assert out[1][1][0] == np.float32(1) / np.float32(63.5)


def test_init_routing_dispatch_equals_single_process_w8a8_moe():
    # Claim C: with the alltoall strategy's init_routing_v2 formula on the sender, the EP layer equals
    # w8a8_moe itself (whose dispatch is moe_init_routing_v2(quant_mode=1)), bit for bit
    rng = np.random.default_rng(50)
    h = tokens(rng, 64, h=512)
    ids, w = routing(rng, 64)
    ex = experts(rng, h=512, i=64)
    hs, idss, ws = split([h, ids, w], 4)
    init = FIXED.replace(ep_dispatch_quant="init_routing")
    y = w8a8.w8a8_moe_ep(hs, *ex, topk_ids=idss, topk_weights=ws, numerics=init)
    ref = w8a8.w8a8_moe(h, *ex, topk_ids=ids, topk_weights=w, numerics=FIXED)
    assert I._concat_equal(y, ref)
    # ... and so it is not the MC2 path: its scales are m / 127, not 1 / (127 / m), one ulp apart on many
    # rows, and here the outputs differ (pinned on this data: Claim B fails for this deployment)
    st8 = w8a8.w8a8_moe_ep_stages(hs, *ex, topk_ids=idss, topk_weights=ws, numerics=init)
    ref_s = np.concatenate([I.reference_quant(x, FIXED)[1] for x in hs])
    got_s = np.concatenate([w8a8.dispatch_quant(x, numerics=FIXED)[1] for x in hs])
    assert 0 < np.count_nonzero(ref_s != got_s) < ref_s.size
    assert st8["sender_quantizer_calls"] == [1, 1, 1, 1]
    assert I.claim_b(w8a8_moe_ep_args(hs, *ex, topk_ids=idss, topk_weights=ws, numerics=init), init) != []


def test_runner_kernel_variant_writes_other_scales_at_dsv4_hidden():
    # Under variants="select" the runner's on-arrival npu_dynamic_quant of 4..384 rows at H = 4096 runs the
    # single-row kernel (key 100), whose scale is amax * fp32(1/127), not the MC2 sender's 1 / (127 / amax):
    # the bf16 fallback's GMM1 scales differ from the int8 path's in the last bit for some rows (codes equal).
    rng = np.random.default_rng(60)
    h = [tokens(rng, 8, h=4096), tokens(rng, 8, h=4096)]
    ids = [routing(rng, 8, e=4, k=2)[0] for _ in h]
    w = [routing(rng, 8, e=4, k=2)[1] for _ in h]
    ex = experts(rng, e=4, h=4096, i=8)
    s8 = w8a8.w8a8_moe_ep_stages(h, *ex, topk_ids=ids, topk_weights=w, dispatch="int8")
    s16 = w8a8.w8a8_moe_ep_stages(h, *ex, topk_ids=ids, topk_weights=w, dispatch="bf16")
    for q in range(2):
        assert np.array_equal(s8["gmm1_x"][q], s16["gmm1_x"][q])
    differ = sum(int(np.count_nonzero(a != b)) for a, b in zip(s8["gmm1_x_scale"], s16["gmm1_x_scale"]))
    assert differ > 0
    f8 = w8a8.w8a8_moe_ep_stages(h, *ex, topk_ids=ids, topk_weights=w, dispatch="bf16", numerics=FIXED)
    assert all(np.array_equal(a, b) for a, b in zip(s8["gmm1_x_scale"], f8["gmm1_x_scale"]))


# -- the MC2 ops against the layer --------------------------------------------------------------------------

def _mc2_inputs(rng, r=4, bs=(3, 5, 1, 4), h=1024):
    x = [tokens(rng, t, h=h) for t in bs]
    ids = [routing(rng, t)[0] for t in bs]
    w = [routing(rng, t)[1] for t in bs]
    return x, ids, w


def test_dispatch_v2_payload_is_the_layers_wire():
    rng = np.random.default_rng(70)
    x, ids, w = _mc2_inputs(rng)
    out = w8a8.moe_distribute_dispatch_v2(x, ids, "ep", 4, [0, 1, 2, 3], E, quant_mode=2, global_bs=20)
    st = w8a8.w8a8_moe_ep_stages(x, *experts(rng, h=1024), topk_ids=ids, topk_weights=w)
    for q in range(4):
        assert np.array_equal(out[0][q], st["payload"][q])
        assert np.array_equal(out[1][q].view(np.uint32), st["payload_scale"][q].view(np.uint32))
        assert np.array_equal(out[2][q].reshape(-1, 3), st["src"][q])
        assert np.array_equal(out[3][q], st["expert_token_nums"][q])
        assert np.array_equal(out[4][q], st["ep_recv_counts"][q])


def test_combine_v2_of_the_layers_expert_rows_is_its_routed_output():
    rng = np.random.default_rng(80)
    x, ids, w = _mc2_inputs(rng)
    st = w8a8.w8a8_moe_ep_stages(x, *experts(rng, h=1024), topk_ids=ids, topk_weights=w)
    out = w8a8.moe_distribute_dispatch_v2(x, ids, "ep", 4, [0, 1, 2, 3], E, quant_mode=2, global_bs=20)
    y = w8a8.moe_distribute_combine_v2(st["gmm2"], ids, out[2], out[4], w, "ep", 4, [0, 1, 2, 3], E, global_bs=20)
    for a, b in zip(y, st["routed"]):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))


def test_entries_in_any_rank_order_give_the_same_rank_results():
    # ep_rank_id names each entry's rank: permuting the entries permutes the per-rank outputs
    rng = np.random.default_rng(90)
    x, ids, _ = _mc2_inputs(rng)
    perm = [2, 0, 3, 1]
    ref = w8a8.moe_distribute_dispatch_v2(x, ids, "ep", 4, [0, 1, 2, 3], E, quant_mode=2, global_bs=20)
    got = w8a8.moe_distribute_dispatch_v2([x[p] for p in perm], [ids[p] for p in perm], "ep", 4, perm, E,
                                          quant_mode=2, global_bs=20)
    for i, p in enumerate(perm):
        for o in range(5):
            assert np.array_equal(got[o][i], ref[o][p])


def test_smooth_scales_quantize_each_copy_with_its_destination_row():
    # quant_mode 2 with scales: copy (r, t, k) carries quant(fp32(x[t]) * scales[e]) (v2 without shared-expert
    # ranks: the tiling resets the default shared_expert_num 1 to 0, the kernel reads row e + 0)
    rng = np.random.default_rng(100)
    x, ids, _ = _mc2_inputs(rng, r=2, bs=(3, 2))
    sc = rng.uniform(0.5, 2.0, (E, 1024)).astype(F32)
    out = w8a8.moe_distribute_dispatch_v2(x, ids, "ep", 2, [0, 1], E, quant_mode=2, scales=sc, global_bs=6)
    for q in range(2):
        for i, (r, t, k) in enumerate(out[2][q].reshape(-1, 3)):
            e = ids[r][t, k]
            xf = (x[r][t].astype(F32) * sc[e])[None]
            codes, s = _quant_f32(xf)
            assert np.array_equal(out[0][q][i], codes[0]) and out[1][q][i] == s[0]


def _quant_f32(xf):
    """The MC2 sender's formula on fp32 rows, written out: inv = 127 / max|x|, q = rint(x * inv), s = 1 / inv."""
    inv = np.float32(127) / np.max(np.abs(xf), axis=1, keepdims=True)
    return np.clip(np.rint(xf * inv), -127, 127).astype(np.int8), (np.float32(1) / inv)[:, 0]


@settings(max_examples=8, deadline=None)
@given(p=mc2_params(v2=False))
def test_v1_and_v2_agree_on_the_same_call(p):
    # the same A3 call (H = 7168, R = 8) through v1 and v2: the same rows, scales and counts; v1's sender-side
    # expand_idx and v2's receiver-side triples locate the same rows; both combines give the same tokens
    args, kw = mc2_call(p)
    v1 = w8a8.moe_distribute_dispatch(*args, **kw)
    v2 = w8a8.moe_distribute_dispatch_v2(*args, **kw)          # S = 0: both read smooth row e of an [E, H] tensor
    for o in (0, 1, 3, 4):
        assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(v1[o], v2[o]))
    x, ids, group, r, rank_ids, e = args
    entry = {q: i for i, q in enumerate(rank_ids)}
    for i, q in enumerate(rank_ids):                   # v1: row = ep_send_counts[q][l R + src - 1] + expand_idx
        for row, (src, t, k) in enumerate(v2[2][i].reshape(-1, 3)):
            l, s = ids[entry[src]][t, k] % p["e_loc"], src
            start = 0 if l * r + s == 0 else int(v1[4][i][l * r + s - 1])
            assert start + int(v1[2][entry[src]][t * p["k"] + k]) == row
    rng = np.random.default_rng(p["seed"])
    rows = [to_float(rng.standard_normal(a.shape[:1] + (7168,)).astype(F32), bfloat16) for a in v1[0]]
    w = [rng.uniform(0, 1, i.shape).astype(F32) for i in ids]
    gbs = {"global_bs": kw["global_bs"]}
    y1 = w8a8.moe_distribute_combine(rows, ids, v1[2], v1[4], w, group, r, rank_ids, e, **gbs)
    y2 = w8a8.moe_distribute_combine_v2(rows, ids, v2[2], v2[4], w, group, r, rank_ids, e, **gbs)
    assert all(np.array_equal(a.view(np.uint16), b.view(np.uint16)) for a, b in zip(y1, y2))


@pytest.mark.parametrize("field", ["ep_dispatch_quant", "ep_combine_weights"])
def test_ep_numerics_fields_are_named_documented_and_default_to_the_kernels(field):
    with pytest.raises(ValueError, match=field):
        w8a8.Numerics(**{field: "nonsense"})
    doc = w8a8.numerics.__doc__
    assert f"{field} : " in doc and all(f'"{v}"' in doc for v in w8a8.Numerics.choices()[field])
    assert getattr(w8a8.ASCEND, field) == {"ep_dispatch_quant": "mc2", "ep_combine_weights": "float32"}[field]


@settings(max_examples=15, deadline=None)
@given(p=mc2_params())
def test_dispatch_matches_the_op_plugin_test_construction(p):
    # op-plugin's test_moe_distribute_dispatch builds the expected expand_x by concatenating every rank's x in
    # rank order, sorting the copies stably by expert (npu_moe_init_routing) and slicing the result per rank
    # (op-plugin test_moe_distribute_dispatch.py): an independent derivation of the canonical (expert, source rank, f)
    # order
    p = {**p, "quant": 0, "mask": "none", "perm": False, "ent": 1}   # counts, not prefix sums
    args, kw = mc2_call(p)
    x, ids, _, r, _, e = args
    out = w8a8.moe_distribute_dispatch_v2(*args, **kw)
    rows, _, counts, _ = w8a8.moe_init_routing_v2(
        np.concatenate(x), np.concatenate(ids), active_num=sum(p["bs"]) * p["k"], expert_num=e,
        expert_tokens_num_type=1, expert_tokens_num_flag=True, active_expert_range=[0, e])
    ends = np.cumsum(counts.reshape(r, p["e_loc"]).sum(axis=1))
    for q in range(r):
        want = rows[(ends[q - 1] if q else 0):ends[q]]
        assert np.array_equal(out[0][q].view(np.uint16), want.view(np.uint16))
        assert np.array_equal(out[3][q], counts[q * p["e_loc"]:(q + 1) * p["e_loc"]])


def test_init_routing_formula_refuses_what_its_quantizer_never_sees():
    """'init_routing' models npu_moe_init_routing_v2(quant_mode=1) on the bf16 rows it gathers: smoothed (fp32)
    rows or an fp16 x would need an extra rounding to bf16 that deployment never does, so they are refused
    naming 'numerics'; the same bf16 call without smooth scales runs."""
    rng = np.random.default_rng(101)
    x, ids, _ = _mc2_inputs(rng, r=2, bs=(3, 2))
    num = w8a8.ASCEND.replace(ep_dispatch_quant="init_routing")
    sc = rng.uniform(0.5, 2.0, (E, 1024)).astype(F32)
    with pytest.raises(ValueError, match="argument 'numerics' must be ep_dispatch_quant 'mc2' or 'deepep_normal'.*"
                                         "with x bfloat16 and smooth scales"):
        w8a8.moe_distribute_dispatch_v2(x, ids, "ep", 2, [0, 1], E, quant_mode=2, scales=sc, global_bs=6,
                                        numerics=num)
    x16 = [v.astype(np.float16) for v in x]
    with pytest.raises(ValueError, match="'init_routing' with x float16"):
        w8a8.moe_distribute_dispatch_v2(x16, ids, "ep", 2, [0, 1], E, quant_mode=2, global_bs=6, numerics=num)
    out = w8a8.moe_distribute_dispatch_v2(x, ids, "ep", 2, [0, 1], E, quant_mode=2, global_bs=6, numerics=num)
    assert sum(len(v) for v in out[0]) == 5 * K
