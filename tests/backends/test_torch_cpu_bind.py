"""``Backend.bind``: weights bound once, many calls (backends/base.py ``Bound``, backends/torch_cpu/bound.py).

Pinned here: the bound call equals the direct call and the golden bit for bit on odd row counts (1, 7, 17,
1025), zero rows and 3-D activations, for the dynamic and static Linears (both activation dtypes), the MoE
layer and the grouped matmul, on torch-cpu and on the base class's default (numpy); torch-cpu packs and
probes a Linear's weight once per activation dtype (counted), the MoE / grouped matmul memoise their
weights' packing; a bad activation gets the golden's own error, the same as the direct call's (wrong K,
wrong dtype, NaN); bind refuses what prepare refuses before the checks.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import backends
import w8a8
from backends.base import Bound, Unsupported
from backends.testing import assert_bits

torch = pytest.importorskip("torch")

from backends.torch_cpu import bound as tc_bound, linear  # noqa: E402

pytestmark = pytest.mark.torch
BF16 = np.dtype(ml_dtypes.bfloat16)
K, N = 260, 70   # K % 4 and N % 64 tails


@pytest.fixture(scope="module")
def tcpu():
    return backends.get("torch-cpu")


def _dyn(rng, n=N, k=K):
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    s = (rng.random(n, dtype=np.float32) * 1e-2 + 1e-4).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return w, s, b


def _x(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)])
def test_dynamic_linear_bound_equals_direct_and_golden(tcpu, dtype):
    rng = np.random.default_rng(1)
    w, s, b = _dyn(rng)
    lin = tcpu.bind("w8a8_dynamic_linear", w, s, bias=b.astype(dtype))
    for shape in ((1, K), (7, K), (17, K), (1025, K), (0, K), (3, 5, K), (K,)):
        x = _x(rng, shape, dtype)
        want = w8a8.w8a8_dynamic_linear(x, w, s, bias=b.astype(dtype))
        got = lin(x)
        assert_bits(got, want)
        assert_bits(tcpu.w8a8_dynamic_linear(x, w, s, bias=b.astype(dtype)), got)
    assert lin.gemm_path(dtype) in ("vnni", "qlinear", "int_mm")


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)])
def test_static_linear_bound_equals_direct_and_golden(tcpu, dtype):
    rng = np.random.default_rng(2)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    kw = dict(input_scale=np.array([0.02], np.float32), input_offset=np.array([3.0], np.float32),
              deq_scale=(rng.random(N) * 1e-3).astype(np.float32) if dtype == BF16
              else (rng.random(N) * 1e-3).astype(np.float32).view(np.int32).astype(np.int64),
              quant_bias=rng.integers(-5000, 5000, N).astype(np.int32))
    lin = tcpu.bind("w8a8_static_linear", w, **kw)
    for m in (1, 7, 17, 1025, 0):
        x = _x(rng, (m, K), dtype)
        want = w8a8.w8a8_static_linear(x, w, **kw)
        assert_bits(lin(x), want)
        assert_bits(tcpu.w8a8_static_linear(x, w, **kw), want)


def test_a_linear_is_packed_and_probed_once_per_activation_dtype(tcpu, monkeypatch):
    loads = []
    real = linear.load_dynamic
    monkeypatch.setattr(linear, "load_dynamic", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    rng = np.random.default_rng(3)
    w, s, _ = _dyn(rng)
    lin = tcpu.bind("w8a8_dynamic_linear", w, s)
    for m in (1, 7, 17):
        lin(_x(rng, (m, K), BF16))
    assert loads == [torch.bfloat16]
    lin(_x(rng, (4, K), np.float16))            # a new dtype: one more load (its scale is loaded per dtype)
    lin(_x(rng, (5, K), BF16))
    assert loads == [torch.bfloat16, torch.float16]
    tcpu.w8a8_dynamic_linear(_x(rng, (2, K), BF16), w, s)   # the direct call loads every time
    assert len(loads) == 3


@pytest.mark.parametrize("bad", ["k", "dtype", "nan", "inf", "list"])
def test_a_bad_activation_gets_the_goldens_error(tcpu, bad):
    rng = np.random.default_rng(4)
    w, s, _ = _dyn(rng)
    lin = tcpu.bind("w8a8_dynamic_linear", w, s)
    lin(_x(rng, (3, K), BF16))                  # loaded: later calls take the light check
    x = _x(rng, (3, K), BF16)
    if bad == "k":
        x = x[:, :-1]
    elif bad == "dtype":
        x = x.astype(np.float32)
    elif bad == "nan":
        x[2, 7] = np.nan
    elif bad == "inf":
        x[1, 0] = -np.inf
    else:
        x = x.tolist()
    with pytest.raises((ValueError, TypeError)) as golden:
        w8a8.w8a8_dynamic_linear(x, w, s)
    with pytest.raises(type(golden.value)) as got:
        lin(x)
    assert str(got.value) == str(golden.value)


def test_all_finite_on_the_bits():
    rng = np.random.default_rng(5)
    for dtype in (BF16, np.dtype(np.float16), np.dtype(np.float32)):
        x = _x(rng, (4, 33), dtype)
        assert tc_bound.all_finite(x) and tc_bound.all_finite(x[:0])
        big = np.array([ml_dtypes.finfo(dtype).max, -ml_dtypes.finfo(dtype).max], dtype)  # finite extremes
        assert tc_bound.all_finite(big)
        for v in (np.inf, -np.inf, np.nan):
            y = x.copy()
            y[3, 32] = v
            assert not tc_bound.all_finite(y)
            assert not tc_bound.all_finite(y[:, ::2][:, -1:])   # non-contiguous views too


def test_moe_layer_bound_equals_golden_and_memoises_the_experts(tcpu):
    rng = np.random.default_rng(6)
    e, h, i, k = 4, 96, 64, 2
    w13 = rng.integers(-128, 128, (e, 2 * i, h), dtype=np.int8)
    s13 = (rng.random((e, 2 * i)) * 1e-3).astype(np.float32)
    w2 = rng.integers(-128, 128, (e, h, i), dtype=np.int8)
    s2 = (rng.random((e, h)) * 1e-3).astype(np.float32)
    moe = tcpu.bind("w8a8_moe", w13, s13, w2, s2, top_k=k)
    for t in (1, 7, 17, 0):
        x = _x(rng, (t, h), BF16)
        logits = rng.standard_normal((t, e)).astype(np.float32)
        want = w8a8.w8a8_moe(x, w13, s13, w2, s2, top_k=k, router_logits=logits)
        assert_bits(moe(x, router_logits=logits), want)
        assert_bits(tcpu.w8a8_moe(x, w13, s13, w2, s2, top_k=k, router_logits=logits), want)
    assert {"w13", "w2"} <= set(moe.memo)
    w13_gemm = moe.memo["w13"]
    moe(_x(rng, (3, h), BF16), router_logits=rng.standard_normal((3, e)).astype(np.float32))
    assert moe.memo["w13"] is w13_gemm


def test_grouped_matmul_bound_equals_golden(tcpu):
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, (3, K, 40), dtype=np.int8)
    sc = (rng.random((3, 40)) * 1e-3).astype(np.float32)
    gmm = tcpu.bind("grouped_matmul", w, scale=sc, output_dtype="float16", group_list_type=1)
    for counts in ((1, 0, 6), (0, 0, 0), (17, 1, 7)):
        m = sum(counts)
        x = rng.integers(-128, 128, (m, K), dtype=np.int8)
        pt = rng.random(m).astype(np.float32)
        gl = np.array(counts, np.int64)
        want = w8a8.grouped_matmul(x, w, scale=sc, output_dtype="float16", group_list_type=1, group_list=gl,
                                   per_token_scale=pt)
        assert_bits(gmm(x, group_list=gl, per_token_scale=pt), want)
    assert set(gmm.memo) == {"experts", "scale"}


def test_the_default_bind_prepares_every_call():
    numpy_backend = backends.get("numpy")
    rng = np.random.default_rng(8)
    w, s, b = _dyn(rng)
    lin = numpy_backend.bind("w8a8_dynamic_linear", w, s, bias=b.astype(BF16))
    assert type(lin) is Bound and "w8a8_dynamic_linear" in repr(lin)
    for m in (1, 7, 0):
        x = _x(rng, (m, K), BF16)
        assert_bits(lin(x), w8a8.w8a8_dynamic_linear(x, w, s, bias=b.astype(BF16)))
    prepared = lin.prepare(_x(rng, (2, K), BF16))
    assert prepared.op == "w8a8_dynamic_linear"


def test_bind_refuses_what_prepare_refuses_before_the_checks(tcpu):
    with pytest.raises(Unsupported, match="no golden op"):
        tcpu.bind("no_such_op", 1)
    with pytest.raises(Unsupported, match="does not implement op 'w8a8_dynamic_linear'"):
        _Empty().bind("w8a8_dynamic_linear", np.zeros((2, 2), np.int8))


class _Empty(backends.base.Backend):
    name = "empty"


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)])
def test_the_fused_kernel_flags_a_non_finite_activation_while_quantizing(dtype):
    """The bound call's finiteness check on the vnni path is the kernel's flag (no NumPy pass): every
    element is seen, the K % 16 tail lane included; the finite extremes (bf16 0x7F7F, fp16 65504) and
    subnormals are not flagged; without ``check_finite`` the call returns (the golden's NaN -> 0 codes)."""
    from backends.torch_cpu import native, packed

    if not native.available()[0]:
        pytest.skip(native.available()[1])
    rng = np.random.default_rng(6)
    k = 17   # one full 16-lane vector and a 1-lane tail
    w = torch.from_numpy(rng.integers(-128, 128, (5, k), dtype=np.int8))
    pw = packed.PackedWeight.pack(w, "vnni")
    tdt = torch.bfloat16 if dtype == BF16 else torch.float16
    recip, offset = torch.full((k,), 0.5), torch.zeros(k)
    kinds = {"dynamic": packed.dynamic_kind(tdt, "reciprocal"), "static": packed.IN_STATIC[tdt]}
    extremes = np.array([ml_dtypes.finfo(dtype).max, -ml_dtypes.finfo(dtype).max,
                         ml_dtypes.finfo(dtype).smallest_subnormal], dtype)

    def run(x, kind):
        xt = torch.from_numpy(x.view(np.int16).copy()).view(tdt)
        return packed.run(kinds[kind], xt, pw, torch.float32, deq=torch.ones(5), recip=recip, offset=offset,
                          check_finite=True)

    for kind in kinds:
        x = _x(rng, (3, k), dtype)
        x[0, :3] = extremes
        run(x, kind)                               # finite: no flag
        for row, col in ((0, 0), (2, 16), (1, 9)):   # first lane, the tail lane, a middle one
            for v in (np.nan, np.inf, -np.inf):
                y = x.copy()
                y[row, col] = v
                with pytest.raises(packed.NonFinite):
                    run(y, kind)
                xt = torch.from_numpy(y.view(np.int16).copy()).view(tdt)
                packed.run(kinds[kind], xt, pw, torch.float32, deq=torch.ones(5), recip=recip, offset=offset)


def _moe_weights(rng, e=4, h=96, i=64):
    return (rng.integers(-128, 128, (e, 2 * i, h), dtype=np.int8), (rng.random((e, 2 * i, 1)) * 1e-3).astype(np.float32),
            rng.integers(-128, 128, (e, h, i), dtype=np.int8), (rng.random((e, h, 1)) * 1e-3).astype(np.float32))


def test_a_bound_moe_checks_its_weights_once_and_the_routing_every_call(tcpu, monkeypatch):
    """Routing arguments, T and the routing mode change per call: the result is the golden's bit for bit, the
    weights' check ran once, the stage checks once per (T, k), and what changes is still checked (the
    golden's error for bad logits, a NaN hidden state, another H)."""
    from w8a8.moe import pipeline

    calls = []
    real = pipeline.expert_weights_args
    monkeypatch.setattr(pipeline, "expert_weights_args", lambda *a: calls.append(a[1]) or real(*a))
    rng = np.random.default_rng(7)
    e, h, k = 4, 96, 2
    w = _moe_weights(rng, e, h)
    moe = tcpu.bind("w8a8_moe", *w, top_k=k, scoring_func="sigmoid")
    for t in (1, 7, 17, 7, 0):
        x = _x(rng, (t, h), BF16)
        logits = rng.standard_normal((t, e)).astype(np.float32)
        assert_bits(moe(x, router_logits=logits),
                    w8a8.w8a8_moe(x, *w, top_k=k, scoring_func="sigmoid", router_logits=logits))
    golden_calls = 5
    assert len(calls) == 1 + 1 + golden_calls   # the first call's check, the memo's, the golden's own
    assert sum(isinstance(key, tuple) and key[0] == "routed_checks" for key in moe.memo) == 4   # T 1, 7, 17, 0
    ids = rng.integers(0, e, (5, k)).astype(np.int32)
    wts = rng.random((5, k)).astype(np.float32)
    x = _x(rng, (5, h), BF16)
    ids_moe = tcpu.bind("w8a8_moe", *w)
    for _ in range(2):
        assert_bits(ids_moe(x, topk_ids=ids, topk_weights=wts), w8a8.w8a8_moe(x, *w, topk_ids=ids, topk_weights=wts))
    bad_x = x.copy()
    bad_x[4, 95] = np.nan
    for bad in (dict(x=x, router_logits=np.zeros((4, e), np.float32)), dict(x=bad_x, router_logits=np.zeros((5, e),
                np.float32)), dict(x=_x(rng, (5, h + 4), BF16), router_logits=np.zeros((5, e), np.float32))):
        xb = bad.pop("x")
        with pytest.raises((ValueError, TypeError)) as golden:
            w8a8.w8a8_moe(xb, *w, top_k=k, scoring_func="sigmoid", **bad)
        with pytest.raises(type(golden.value)) as got:
            moe(xb, **bad)
        assert str(got.value) == str(golden.value)


def test_experts_checked_applies_to_the_same_objects_only():
    from w8a8.moe import pipeline

    rng = np.random.default_rng(8)
    w = _moe_weights(rng)
    experts = pipeline.expert_weights_args("w8a8_moe", 96, *w)
    x = _x(rng, (3, 96), BF16)
    logits = rng.standard_normal((3, 4)).astype(np.float32)
    bad = (w[0][:, :, :90],) + w[1:]            # another object with a wrong H: still checked
    with pipeline.experts_checked(w, experts):
        assert_bits(w8a8.w8a8_moe(x, *w, top_k=2, router_logits=logits), w8a8.w8a8_moe(x, *w, top_k=2,
                                                                                      router_logits=logits))
        with pytest.raises(ValueError, match="w13"):
            w8a8.w8a8_moe(x, *bad, top_k=2, router_logits=logits)
        with pytest.raises(ValueError, match="w13"):      # the same objects, another H: checked, refused
            w8a8.w8a8_moe(_x(rng, (3, 100), BF16), *w, top_k=2, router_logits=logits)
