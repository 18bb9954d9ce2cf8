"""torch-cpu's own fused VNNI kernels (backends/torch_cpu/csrc/w8a8_cpu.c, native.py, packed.py) and the
paths that use them: the dynamic / static Linear and the MoE expert chain.

Pinned here: the integer GEMM against int64 NumPy at every tail (K % 4, N % 64, rows % 6) and at the
int32 extremes the compensation argument relies on; the output rounding against the golden's casts
(NumPy / ml_dtypes) on named bit patterns; the Linear paths under the "vnni" and "int_mm" GEMM paths
against the golden (Hypothesis); that the self-test and the load-time probes refuse a planted bug; the
fallbacks (no compiler, no VNNI, an accumulator that may leave int32, a probe that differs); the
thread pool (concurrent callers, a forked child, FTZ/DAZ set by the caller).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import w8a8
from backends.testing import BitwiseChecker, assert_bits

torch = pytest.importorskip("torch")

from backends.torch_cpu import TorchCpuBackend, native, packed  # noqa: E402

pytestmark = pytest.mark.torch
BF16 = np.dtype(ml_dtypes.bfloat16)
OK, WHY = packed.available()
needs_vnni = pytest.mark.skipif(not OK, reason=f"the fused kernels are not usable here: {WHY}")


def _ref_i32(codes: np.ndarray, w_nk: np.ndarray) -> np.ndarray:
    return (codes.astype(np.int64) @ w_nk.astype(np.int64).T).astype(np.int32)


# -- availability -------------------------------------------------------------------------------------------

def test_available_reason_without_vnni(monkeypatch):
    # A CPU without AVX-512 VNNI gets the reason, not a crash (the flags decide before any build).
    monkeypatch.setattr(native, "cpu_flags", lambda: frozenset({"avx2", "fma", "f16c"}))
    native._load.cache_clear()
    try:
        lib, why = native._load()
    finally:
        native._load.cache_clear()
    assert lib is None and "avx512_vnni" in why


def test_available_reason_without_compiler(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "compiler", lambda: None)
    with pytest.raises(native.NativeUnavailable, match="no C compiler"):
        native.build(directory=tmp_path)


def test_build_failure_reports_the_compiler_error(tmp_path):
    with pytest.raises(native.NativeUnavailable, match="failed"):
        native.build(directory=tmp_path, extra_flags=("-DPF_GROUPS=(",))


def test_disabled_by_environment():
    code = ("import os; os.environ['W8A8_TORCH_CPU_NATIVE'] = '0'\n"
            "from backends.torch_cpu import native, runtime\n"
            "print(native.available()[1]); print(runtime.resolve_gemm_path('auto'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert "W8A8_TORCH_CPU_NATIVE=0" in out[0] and out[1] in ("int_mm", "qlinear")


@needs_vnni
def test_cache_key_separates_builds(tmp_path):
    # The same source, flags and CPU reuse the build; other flags get their own file.
    a = native.build(directory=tmp_path)
    assert native.build(directory=tmp_path) == a
    b = native.build(directory=tmp_path, extra_flags=("-DW8A8_PLANTED_BUG",))
    assert a != b and a.exists() and b.exists()


# -- the integer GEMM ---------------------------------------------------------------------------------------

@needs_vnni
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 63, 64, 65, 1025, 4097])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 64, 65, 129])
def test_int32_gemm_every_tail(k, n):
    rng = np.random.default_rng(k * 1000 + n)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    pw = packed.PackedWeight.pack(torch.from_numpy(w))
    for m in (1, 5, 6, 7, 13):
        codes = rng.integers(-128, 128, (m, k), dtype=np.int8)
        codes[0] = -128   # u = 0
        if m > 1:
            codes[1] = 127  # u = 255
        got = packed.run(packed.IN_CODES, torch.from_numpy(codes), pw, torch.int32).numpy()
        np.testing.assert_array_equal(got, _ref_i32(codes, w))


@needs_vnni
def test_int32_gemm_at_the_largest_k_wraps_exactly():
    # K = 2^17 - 1 with -128 weights: 128 * sum(w) = -2147467264 is the largest compensation; codes 127
    # (u = 255) make dot(u, w) = -4.28e9, which wraps in int32, and the difference is still exact
    # (both sides are exact modulo 2^32 and the true value, -2130.9e6, is in range).
    k = packed.MAX_K
    w = np.full((2, k), -128, np.int8)
    w[1, ::2] = 127
    pw = packed.PackedWeight.pack(torch.from_numpy(w))
    codes = np.stack([np.full(k, 127, np.int8), np.full(k, -128, np.int8)])
    got = packed.run(packed.IN_CODES, torch.from_numpy(codes), pw, torch.int32).numpy()
    want = _ref_i32(codes, w)
    assert want[0, 0] == 127 * -128 * k and want[1, 0] == 2147467264
    np.testing.assert_array_equal(got, want)


@needs_vnni
def test_int_bias_is_folded_into_the_compensation():
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (70, 33), dtype=np.int8)
    codes = rng.integers(-128, 128, (9, 33), dtype=np.int8)
    bias = rng.integers(-(1 << 30), 1 << 30, 70).astype(np.int32)
    pw = packed.PackedWeight.pack(torch.from_numpy(w))
    got = packed.run(packed.IN_CODES, torch.from_numpy(codes), pw, torch.int32, comp=pw.comp_with(torch.from_numpy(bias)))
    np.testing.assert_array_equal(got.numpy(), (_ref_i32(codes, w).astype(np.int64) + bias).astype(np.int32))


@needs_vnni
def test_packing_refuses_bad_weights():
    with pytest.raises(ValueError, match="int8"):
        packed.PackedWeight.pack(torch.zeros(3, 4, dtype=torch.int16))
    with pytest.raises(ValueError, match="non-empty"):
        packed.PackedWeight.pack(torch.zeros(3, 0, dtype=torch.int8))


# -- output rounding (the epilogue's last step) --------------------------------------------------------------

@needs_vnni
@pytest.mark.parametrize("out", ["bfloat16", "float16"])
def test_output_rounding_matches_the_golden_casts(out):
    # K = 1, weight 1, code 1: acc = 1, so the output is exactly the rounding of fp32(1) * deq[n] = deq[n].
    # Named: 0x3F808000 is the bf16 tie 1 + 2^-8 -> 0x3F80 (even), 0x3F818000 the tie 1 + 3 * 2^-8 -> 0x3F82;
    # 0x00008000 a subnormal tie -> 0x0000; 0x7F7FFFFF (fp32 max) -> bf16 +Inf 0x7F80; a quiet NaN ->
    # sign | 0x7FC0 in bf16 (ml_dtypes), sign | 0x7E00 | top payload bits in fp16 (NumPy).
    vals = packed.rounding_values()
    n = vals.numel()
    pw = packed.PackedWeight.pack(torch.ones(n, 1, dtype=torch.int8))
    dtype = getattr(torch, out)
    got = packed.run(packed.IN_CODES, torch.ones(1, 1, dtype=torch.int8), pw, dtype, deq=vals)[0]
    with np.errstate(all="ignore"):   # the golden's epilogue: fp32(acc) * deq (quiets signalling NaNs), then the cast
        want = (np.float32(1) * vals.numpy()).astype(BF16 if out == "bfloat16" else np.float16)
    assert_bits(got.view(torch.int16).numpy(), want.view(np.int16), out)
    if out == "bfloat16":
        g = got.view(torch.int16).numpy().view(np.uint16)
        assert list(g[:2]) == [0x3F80, 0x3F82] and g[6] == 0x0000 and g[14] == 0x7F80 and g[18] == 0x7FC0


@needs_vnni
def test_planted_rounding_bug_is_caught_by_the_self_test_and_the_probe():
    # A kernel built to round bf16 ties half up (a one-ulp error on exact ties only) is refused.
    lib = native.load_path(native.build(extra_flags=("-DW8A8_PLANTED_BUG",)))
    with native.use_library(lib):
        assert "rounding" in packed.self_test.__wrapped__()
        from backends.torch_cpu import linear

        w = torch.from_numpy(np.random.default_rng(0).integers(-128, 128, (64, 256), dtype=np.int8))
        layer = linear.load_dynamic(torch.bfloat16, w, torch.full((64,), 1.0, dtype=torch.bfloat16), None, "vnni")
    assert layer.fused is None and "probe" in layer.note


# -- the Linear paths against the golden ---------------------------------------------------------------------

VNNI = TorchCpuBackend(gemm="vnni") if OK else None
INT_MM = TorchCpuBackend(gemm="int_mm")


def _backends():
    return [INT_MM] + ([VNNI] if OK else [])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.sampled_from([1, 2, 6, 7, 13, 17, 64]),
       k=st.sampled_from([1, 3, 4, 17, 64, 65, 130]), n=st.sampled_from([1, 7, 16, 63, 64, 65, 130]),
       dtype=st.sampled_from(["bfloat16", "float16"]), bias=st.booleans(),
       kind=st.sampled_from(["normal", "ties", "tiny", "zeros", "wide"]))
def test_dynamic_linear_matches_the_golden(seed, m, k, n, dtype, bias, kind):
    rng = np.random.default_rng(seed)
    x = _activation(rng, (m, k), dtype, kind)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    ws = (rng.random(n) * 10.0 ** rng.uniform(-5, 1)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    for backend in _backends():
        BitwiseChecker(backend).same("w8a8_dynamic_linear", x, w, ws, bias=b)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.sampled_from([1, 5, 6, 17]), k=st.sampled_from([1, 5, 64, 129]),
       n=st.sampled_from([1, 9, 64, 70]), dtype=st.sampled_from(["bfloat16", "float16"]),
       bias=st.sampled_from(["quant", "float", "none"]), kind=st.sampled_from(["normal", "ties", "wide"]),
       packed_scale=st.booleans())
def test_static_linear_matches_the_golden(seed, m, k, n, dtype, bias, kind, packed_scale):
    rng = np.random.default_rng(seed)
    x = _activation(rng, (m, k), dtype, kind)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    ws = (rng.random(n) * 1e-2 + 1e-4).astype(np.float32)
    s_in, o_in = w8a8.calibrate_activation_per_tensor(x)
    deq, qb = w8a8.static_params(w, ws, s_in, o_in)
    if dtype == "float16" and packed_scale:   # fp16 output: the packed int64 scale, or fp32 (FP19-truncated)
        deq = w8a8.trans_quant_param(deq.astype(np.float32))
    kw = {"input_scale": s_in, "input_offset": o_in, "deq_scale": deq, "quant_bias": qb}
    if bias != "quant":
        kw["quant_bias"] = None
    if bias == "float" and dtype == "bfloat16":
        kw["bias"] = rng.standard_normal(n).astype(np.float32)
    for backend in _backends():
        BitwiseChecker(backend).same("w8a8_static_linear", x, w, **kw)


def _activation(rng, shape, dtype, kind):
    if kind == "ties":  # k + 0.5 with a row max that makes 127 / max exact
        v = rng.integers(-254, 255, shape) / 2.0
        v[:, 0] = 127.0
    elif kind == "tiny":
        v = rng.standard_normal(shape) * 1e-39
    elif kind == "zeros":
        v = np.zeros(shape)
    elif kind == "wide":
        v = rng.standard_normal(shape) * 10.0 ** rng.uniform(-6, 4, shape)
    else:
        v = rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3)
    with np.errstate(over="ignore"):
        out = v.astype(np.float32).astype(BF16 if dtype == "bfloat16" else np.float16)
    return np.where(np.isfinite(out.astype(np.float32)), out, 0).astype(out.dtype)


@needs_vnni
def test_linear_paths_use_the_fused_kernel_where_it_fits():
    from backends.torch_cpu import linear

    rng = np.random.default_rng(2)
    w = torch.from_numpy(rng.integers(-128, 128, (16, 64), dtype=np.int8))
    dyn = linear.load_dynamic(torch.bfloat16, w, torch.ones(16, dtype=torch.bfloat16), None, "vnni")
    assert dyn.fused is not None and dyn.note == ""
    assert linear.load_dynamic(torch.bfloat16, w, torch.ones(16, dtype=torch.bfloat16), None, "int_mm").fused is None
    one = torch.ones(64, dtype=torch.bfloat16)
    deq = torch.ones(16)
    ok = linear.load_static(torch.bfloat16, w, one, one, deq, torch.zeros(16, dtype=torch.int32), "vnni")
    assert ok.fused is not None
    # K * 128 * max|w| + max|quant_bias| past 2^31 - 1: the reference path (which raises the golden's
    # OverflowError where the sum really overflows)
    big = torch.full((16,), (1 << 31) - 1000, dtype=torch.int32)
    far = linear.load_static(torch.bfloat16, w, one, one, deq, big, "vnni")
    assert far.fused is None and "int32" in far.note


@needs_vnni
def test_static_overflow_is_the_golden_error():
    x = np.full((2, 64), 100.0, np.float32).astype(BF16)
    w = np.full((3, 64), 127, np.int8)
    qb = np.array([(1 << 31) - 1, 0, -5], np.int32)
    BitwiseChecker(VNNI).same("w8a8_static_linear", x, w, input_scale=np.float32([1.0]),
                              input_offset=np.float32([0.0]), deq_scale=np.float32([1e-3] * 3), quant_bias=qb)


# -- the thread pool -----------------------------------------------------------------------------------------

@needs_vnni
def test_concurrent_callers_get_their_own_results():
    rng = np.random.default_rng(5)
    ws = [rng.integers(-128, 128, (96, 200), dtype=np.int8) for _ in range(4)]
    xs = [rng.integers(-128, 128, (37, 200), dtype=np.int8) for _ in range(4)]
    pws = [packed.PackedWeight.pack(torch.from_numpy(w)) for w in ws]
    errors = []

    def work(i):
        for _ in range(20):
            got = packed.run(packed.IN_CODES, torch.from_numpy(xs[i]), pws[i], torch.int32).numpy()
            if not np.array_equal(got, _ref_i32(xs[i], ws[i])):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@needs_vnni
def test_forked_child_still_computes():
    # After fork() only the forking thread exists; the pool starts over in the child.
    rng = np.random.default_rng(6)
    w = rng.integers(-128, 128, (130, 70), dtype=np.int8)
    x = rng.integers(-128, 128, (20, 70), dtype=np.int8)
    pw = packed.PackedWeight.pack(torch.from_numpy(w))
    packed.run(packed.IN_CODES, torch.from_numpy(x), pw, torch.int32, n_threads=2)  # the parent's pool exists
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        ok = np.array_equal(packed.run(packed.IN_CODES, torch.from_numpy(x), pw, torch.int32, n_threads=2).numpy(),
                            _ref_i32(x, w))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@needs_vnni
def test_caller_ftz_daz_does_not_change_the_bits():
    # The kernels run with the default MXCSR whatever the caller set: subnormal outputs survive.
    vals = torch.tensor([1e-40, -3e-39, 1e-45, 2.5e-38], dtype=torch.float32)
    pw = packed.PackedWeight.pack(torch.ones(4, 1, dtype=torch.int8))
    want = vals.numpy().astype(BF16).view(np.int16)
    assert torch.set_flush_denormal(True)
    try:
        got = packed.run(packed.IN_CODES, torch.ones(1, 1, dtype=torch.int8), pw, torch.bfloat16, deq=vals)
    finally:
        torch.set_flush_denormal(False)
    np.testing.assert_array_equal(got[0].view(torch.int16).numpy(), want)


# -- the MoE experts -----------------------------------------------------------------------------------------

@needs_vnni
def test_moe_fused_chain_is_probed_and_refused_when_it_differs(monkeypatch):
    from backends.torch_cpu import moe_layer as ml

    monkeypatch.setenv("W8A8_TORCH_CPU_MOE_GEMM", "vnni")
    rng = np.random.default_rng(9)
    e, h, i = 4, 64, 32
    w13 = rng.integers(-128, 128, (e, 2 * i, h), dtype=np.int8)
    w2 = rng.integers(-128, 128, (e, h, i), dtype=np.int8)
    s13 = rng.uniform(1e-3, 2e-3, (e, 2 * i, 1)).astype(np.float32)
    s2 = rng.uniform(1e-3, 2e-3, (e, h, 1)).astype(np.float32)
    x = rng.standard_normal((7, h)).astype(np.float32).astype(BF16)
    ids = np.argsort(-rng.random((7, e)), 1)[:, :2].astype(np.int32)
    wts = rng.uniform(0.1, 1, (7, 2)).astype(np.float32)
    args = (x, w13, s13, w2, s2)
    kwargs = {"topk_ids": ids, "topk_weights": wts}
    prepared = VNNI.prepare("w8a8_moe", *args, **kwargs)
    assert_bits(prepared.finish(prepared.run()), w8a8.w8a8_moe(*args, **kwargs))
    real = ml._fused_chain

    def off_by_one(layer, q, s, tokens, order, runs, out):   # a chain that gets one bf16 bit wrong
        rc = real(layer, q, s, tokens, order, runs, out)
        out.view(torch.int16)[0, 0] ^= 1
        return rc

    monkeypatch.setattr(ml, "_fused_chain", off_by_one)
    refused = VNNI.prepare("w8a8_moe", *args, **kwargs)   # the load-time probe sees the wrong bit
    assert_bits(refused.finish(refused.run()), w8a8.w8a8_moe(*args, **kwargs))   # so the torch chain runs


@needs_vnni
def test_moe_expert_gemm_vnni_path_exact():
    from backends.torch_cpu import moe_experts

    rng = np.random.default_rng(10)
    w = rng.integers(-128, 128, (3, 65, 17), dtype=np.int8)   # [E, K, N]
    experts = moe_experts.ExpertGemm.load(torch.from_numpy(w), layout="ekn", path="vnni")
    assert experts.path == "vnni" and experts.experts == 3
    x = rng.integers(-128, 128, (7, 65), dtype=np.int8)
    for g in range(3):
        want = x.astype(np.int64) @ w[g].astype(np.int64)
        np.testing.assert_array_equal(experts.i32(g, torch.from_numpy(x)).numpy(), want)
        np.testing.assert_array_equal(experts.f32(g, torch.from_numpy(x), threads=False).numpy(),
                                      want.astype(np.float32))


@needs_vnni
@pytest.mark.parametrize("t, e, k", [(7, 1, 1), (16, 2, 2), (13, 3, 3), (17, 1, 1), (100, 1, 1), (200, 4, 2)])
def test_moe_fused_chain_every_row_count(t, e, k, monkeypatch):
    # rows per expert 1..6 (tiles), 7..16 (the small-M kernel), 17..96 (tiles) and past the kernel's
    # 96-row chunks (100, ~100 per expert); the DeepSeek-V4 clamp on the SwiGLU
    monkeypatch.setenv("W8A8_TORCH_CPU_MOE_GEMM", "vnni")
    rng = np.random.default_rng(t * 10 + e)
    h, i = 72, 40   # K and N tails: 72 = 64 + 8, 2I = 80 = 64 + 16
    w13 = rng.integers(-128, 128, (e, 2 * i, h), dtype=np.int8)
    w2 = rng.integers(-128, 128, (e, h, i), dtype=np.int8)
    s13 = rng.uniform(1e-3, 2e-3, (e, 2 * i, 1)).astype(np.float32)
    s2 = rng.uniform(1e-3, 2e-3, (e, h, 1)).astype(np.float32)
    x = (rng.standard_normal((t, h)) * 3).astype(np.float32).astype(BF16)
    ids = np.argsort(-rng.random((t, e)), 1)[:, :k].astype(np.int32)
    wts = rng.uniform(0.1, 1, (t, k)).astype(np.float32)
    for limit in (None, 1.5):
        BitwiseChecker(VNNI).same("w8a8_moe", x, w13, s13, w2, s2, topk_ids=ids, topk_weights=wts, swiglu_limit=limit)


@needs_vnni
def test_exp32_matches_numpy():
    # The SwiGLU's exp: float64 exp of the clamped argument, rounded once to fp32 — the golden's
    # np.exp(float64) -> float32. The kernel's vector exp (~0.5 ulp in float64) must give the same fp32
    # bits: 0 of 2^22 random arguments over the clamp range and at normal scale may differ (2 * 10^8 were
    # checked by hand when it was written, 0 differed), nor the named edge values (NaN stays NaN, +-Inf and
    # beyond the clamp: 0 / Inf, the largest finite result 3.3259769e38 at 88.7, the smallest subnormal).
    lib = native.library()
    rng = np.random.default_rng(11)
    x = np.concatenate([(rng.random(1 << 21) * 193 - 104), rng.standard_normal(1 << 21) * 8]).astype(np.float32)
    x = np.concatenate([x, np.array([np.nan, -np.inf, np.inf, -200, 200, 0, -0.0, 88.7, 88.8, -103.9, -87.3, 1e-30],
                                    np.float32)])
    y = np.empty_like(x)
    lib.w8a8_exp32(x.ctypes.data, y.ctypes.data, x.size)
    with np.errstate(all="ignore"):
        want = np.exp(np.clip(x.astype(np.float64), -104, 89)).astype(np.float32)
    nan = np.isnan(x)
    assert np.isnan(y[nan]).all()
    np.testing.assert_array_equal(y[~nan].view(np.int32), want[~nan].view(np.int32))


@needs_vnni
@pytest.mark.parametrize("k, formula", [(4096, "amax_mul_rcp"), (16400, "reciprocal")])
def test_dynamic_linear_takes_the_kernel_variants_scale(k, formula, monkeypatch):
    # The per-token scale written depends on the kernel the tiling picks for [rows, K] (w8a8.variants):
    # m * fp32(1/127) for the single-row / multi-row / double-buffer kernels (K = 4096), 1 / (127 / m) for
    # the basic kernel (K = 16400 > the multi-row limit 16320, 13 * align16(K) bytes past the UB). The
    # codes are the same. Rows are picked whose two scales differ (by an ulp): the kernel's scales equal
    # the golden quantizer's under each formula, and the Linear hands the kernel the formula of its shape.
    from backends.torch_cpu import kernel_variants

    rng = np.random.default_rng(k)
    rows = []
    while len(rows) < 4:
        v = (rng.standard_normal(k) * 3).astype(np.float32).astype(BF16)
        m = np.abs(v.astype(np.float32)).max()
        if np.float32(1) / (np.float32(127) / m) != m * (np.float32(1) / np.float32(127)):
            rows.append(v)
    x = np.stack(rows)
    assert kernel_variants.dynamic_quant(x.shape, torch.bfloat16).scale_out == formula
    n = 64
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    ws = (rng.random(n) * 1e-3).astype(np.float32)
    pw = packed.PackedWeight.pack(torch.from_numpy(w))
    xt = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    for so in packed.SCALE_OUTS:
        scales = torch.empty(len(rows))
        packed.run(packed.dynamic_kind(torch.bfloat16, so), xt, pw, torch.float32, deq=torch.ones(n), scale_out=scales)
        golden = w8a8.dynamic_quant(x, numerics=w8a8.ASCEND.replace(scale_out=so, variants="fixed"))[1]
        assert_bits(scales.numpy(), golden, f"scale ({so})")
    kinds = []
    real = packed.run
    monkeypatch.setattr(packed, "run", lambda kind, *a, **kw: kinds.append(kind) or real(kind, *a, **kw))
    prepared = VNNI.prepare("w8a8_dynamic_linear", x, w, ws)
    kinds.clear()   # the load's probes ran both formulas
    assert_bits(prepared(), w8a8.w8a8_dynamic_linear(x, w, ws))
    assert kinds == [packed.dynamic_kind(torch.bfloat16, formula)]


@needs_vnni
@pytest.mark.parametrize("limit", [None, 1.5])
def test_moe_requant_matches_dequant_swiglu_quant_under_each_formula(limit):
    # The chain's SwiGLU + per-row requant against the golden's dequant_swiglu_quant (quant_mode=1, no
    # group_index): under the variant the tiling picks for it (ASCEND, "select": the legacy kernel's
    # amax / 127 and o * fp32(1 / s)) and under every fixed combination of the two formulas. Rows: random,
    # all zero (scale 0, codes 0), ties of the clamp, tiny.
    from backends.torch_cpu import moe_layer

    lib = native.library()
    rng = np.random.default_rng(12)
    i = 72
    x = (rng.standard_normal((9, 2 * i)) * 3).astype(np.float32)
    x[1] = 0.0
    x[2, :i] = 1.5
    x[3] *= 1e-30
    x = x.astype(BF16)
    combos = [(None, None)] + [(s, c) for s in ("amax_div", "amax_mul_rcp") for c in ("div_scale", "mul_rcp")]
    for scale_out, codes_mode in combos:
        if scale_out is None:
            numerics, flags = w8a8.ASCEND, moe_layer._requant_flags(x.shape[0])
        else:
            numerics = w8a8.ASCEND.replace(scale_out=scale_out, quant_codes=codes_mode, variants="fixed")
            flags = (moe_layer._REQUANT_SCALE[scale_out], moe_layer._REQUANT_CODES[codes_mode])
        g = np.ascontiguousarray(x.astype(np.float32))
        codes = np.empty((x.shape[0], i), np.int8)
        scales = np.empty(x.shape[0], np.float32)
        assert lib.w8a8_swiglu_quant(g.ctypes.data, x.shape[0], i, limit is not None, limit or 0.0, *flags,
                                     codes.ctypes.data, scales.ctypes.data) == 0
        want_codes, want_scales = w8a8.dequant_swiglu_quant(x, activate_left=True, quant_mode=1, swiglu_limit=limit,
                                                            numerics=numerics)
        assert_bits(codes, want_codes, f"codes {scale_out} {codes_mode}")
        assert_bits(scales, want_scales, f"scales {scale_out} {codes_mode}")
