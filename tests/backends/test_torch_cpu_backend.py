"""What is particular to torch-cpu (backends/torch_cpu): its identity and numerics, the device boundary
(prepare / load / run), its kernel paths (int_mm, the oneDNN qlinear path on AMX, fbgemm's prepacked expert
GEMM) and the load-time probes that choose them, its thread policy, its row blocking and chunking, and
its float helpers (moe_math, the low-bit codec). Conformance to the golden on every op — drawn, named
and error cases — is test_torch_cpu_conformance.py.

Each path is checked bit for bit against the golden run under torch-cpu's numerics
(``backends.testing.BitwiseChecker``: same bytes, or the same exception and message).
"""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import backends
import w8a8
from backends.testing import BitwiseChecker, assert_bits
from conformance.values import float_tensor, int_tensor

torch = pytest.importorskip("torch")

from backends.torch_cpu import TorchCpuBackend  # noqa: E402

pytestmark = pytest.mark.torch

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32
TC = backends.get("torch-cpu")
check = BitwiseChecker(TC)


def i8(rng, *shape):
    return int_tensor(rng, shape, np.int8)


def moe_layer(rng, e, h, i):
    from conformance.ops.moe._common import moe_layer as layer

    return layer(rng, e, h, i)


def topk(rng, t, e, k):
    from conformance.ops.moe._common import topk as choose

    return choose(rng, t, e, k)


# -- identity, numerics, the device boundary -----------------------------------------------------------------

def test_available_under_the_ascend_record():
    # The goal: the default record, reproduced exactly (no differences to declare).
    assert TC.available() == (True, "") and TC.name == "torch-cpu"
    assert TC.numerics == w8a8.ASCEND and TC.info()["numerics_differences"] == {}


def test_import_does_not_import_torch():
    code = ("import sys, backends; b = backends.get('torch-cpu'); "
            "assert 'torch' not in sys.modules, 'imported torch'; print(b.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "torch-cpu"


@pytest.mark.parametrize("op, args, field", [
    ("dynamic_quant", lambda: (np.ones((2, 8), BF16),), "half_away"),
    ("swiglu", lambda: (np.ones((2, 4), F32),), "transcendental"),
    ("w4a8_dynamic_linear", lambda: (np.ones((2, 32), BF16), np.ones((8, 32), np.int8), np.ones(8, F32)), "half_away"),
])
def test_other_numerics_are_unsupported(op, args, field):
    change = {"half_away": {"round_mode": "half_away"}, "transcendental": {"transcendental": "float32"}}[field]
    with pytest.raises(backends.Unsupported, match=field):
        TC.call(op, *args(), numerics=w8a8.ASCEND.replace(**change))
    assert_bits(TC.call(op, *args(), numerics=w8a8.ASCEND), getattr(w8a8, op)(*args()), who="torch-cpu")


def test_what_it_cannot_run_is_unsupported():
    with pytest.raises(backends.Unsupported, match="does not implement op 'no_such_op'"):
        TC.call("no_such_op", np.ones((2, 4), F32))
    # int32 x2 is the golden's packed-int4 route of quant_matmul (A8W4 / A4W4): quant_matmul_int4's, not this op's
    # (a valid A8W4 call: the golden's checks run first, so an invalid one gets the golden's error)
    with pytest.raises(backends.Unsupported, match="int4"):
        TC.call("quant_matmul", np.ones((3, 16), np.int8), np.ones((16, 1), np.int32),
                w8a8.trans_quant_param(np.ones(8, np.float32)), offset=np.zeros(8, np.float32),
                pertoken_scale=np.ones((3, 1), np.float32), output_dtype="bfloat16")
    for op in ("format_cast_nz", "swizzle_block_scales"):  # 16-byte elements
        with pytest.raises(backends.Unsupported):
            TC.call(op, np.zeros((4, 4), np.complex128))


def test_prepare_times_device_work_only():
    rng = np.random.default_rng(0)
    x = float_tensor(rng, (5, 64), BF16)
    w, ws = i8(rng, 9, 64), (rng.random(9) * 0.01).astype(F32)
    prepared = TC.prepare("w8a8_dynamic_linear", x, w, ws)
    out = prepared.run()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    want = w8a8.w8a8_dynamic_linear(x, w, ws)
    assert_bits(prepared.finish(out), want)
    assert_bits(prepared(), want)  # re-runnable
    assert prepared.notes["gemm"] == TC.gemm_path


def test_prepare_loads_the_moe_layer_once_and_reruns():
    rng = np.random.default_rng(8)
    w = moe_layer(rng, 6, 32, 16)
    hidden = rng.standard_normal((9, 32)).astype(F32).astype(BF16)
    ids, wts = topk(rng, 9, 6, 2)
    prepared = TC.prepare("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts)
    out = prepared.run()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    want = w8a8.w8a8_moe(hidden, *w, topk_ids=ids, topk_weights=wts)
    assert_bits(prepared.finish(out), want)
    assert_bits(prepared(), want)   # re-runnable on the loaded weights


def test_inputs_are_not_modified_and_read_only_inputs_work():
    rng = np.random.default_rng(1)
    x = float_tensor(rng, (4, 16), np.float32)
    before = x.copy()
    check.same("quantize", x, np.float32([0.5]), None, dtype="int8", axis=-1, div_mode=False)
    check.same("dynamic_quant", x.astype(BF16))
    assert np.array_equal(x, before)
    check.same("dynamic_quant", np.broadcast_to(np.float16(1.5), (3, 8)))  # a read-only view
    w = moe_layer(rng, 4, 16, 8)
    hidden = rng.standard_normal((5, 16)).astype(F32).astype(BF16)
    ids, wts = topk(rng, 5, 4, 2)
    kept = [a.copy() for a in (hidden,) + w + (ids, wts)]
    check.same("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts, swiglu_limit=1.0)
    for a, b in zip((hidden,) + w + (ids, wts), kept):
        assert_bits(a, b)


def test_int_matmul_names_the_calling_op():
    # The golden's keyword ``op`` (the op named in errors) reaches torch-cpu's checks and overflow errors.
    # (Backend.call cannot take it: its own first parameter is called ``op``.)
    a, b = np.ones((3, 16), np.int8), np.ones((15, 5), np.int8)
    with pytest.raises(ValueError) as want:
        w8a8.int_matmul(a, b, op="my_gemm")
    with pytest.raises(ValueError) as got:
        TC.int_matmul(a, b, op="my_gemm")
    assert str(got.value) == str(want.value) and str(got.value).startswith("my_gemm: ")
    big = np.full((1, 2), 2**31 - 1, np.int32)
    with pytest.raises(OverflowError, match="^my_gemm: the int32 accumulator overflows"):
        TC.int_matmul(big, np.ones((2, 1), np.int32), op="my_gemm")


def test_the_moe_validators_are_public_and_importable():
    # The golden's MoE argument checks, shared with torch-cpu and the torch-npu lowering.
    for op in w8a8.registry.ops("moe"):
        assert callable(op.check) and op.check.__name__ == f"{op.name}_args", op.name


# -- the dense GEMM paths ------------------------------------------------------------------------------------

def test_gemm_path_follows_amx():
    from backends.torch_cpu import runtime

    amx = runtime.has_amx_int8() and runtime.has_qlinear()
    assert TC.gemm_path == ("qlinear" if amx else "vnni" if runtime.vnni_status()[0] else "int_mm")
    with pytest.raises(ValueError, match="'gemm'"):
        TorchCpuBackend(gemm="fast")


@pytest.fixture(scope="module")
def qlinear_backend():
    # forced: the reference kernel is slow without AMX, so shapes stay tiny
    from backends.torch_cpu import runtime

    if not runtime.has_qlinear():
        pytest.skip("this torch has no onednn.qlinear_pointwise")
    return TorchCpuBackend(gemm="qlinear")


def test_qlinear_path_bit_identical(qlinear_backend):
    rng = np.random.default_rng(5)
    x = float_tensor(rng, (5, 40), BF16)
    w, ws, b = i8(rng, 9, 40), (rng.random(9) * 1e-2).astype(F32), float_tensor(rng, (9,), BF16)
    prepared = qlinear_backend.prepare("w8a8_dynamic_linear", x, w, ws, bias=b)
    assert prepared.notes["gemm"] == "qlinear"
    assert_bits(prepared(), w8a8.w8a8_dynamic_linear(x, w, ws, bias=b))
    x1, x2 = i8(rng, 2, 3, 40), i8(rng, 40, 9)
    for kw in ({"output_dtype": "bfloat16"}, {"output_dtype": "float16"},
               {"output_dtype": "bfloat16", "pertoken_scale": np.float32([0.5, 2, 3])},
               {"output_dtype": "int8", "offset": np.float32([1.5])}):
        a1 = x1 if "pertoken_scale" not in kw else x1[0]
        got = qlinear_backend.call("quant_matmul", a1, x2, ws, **kw)
        assert_bits(got, w8a8.quant_matmul(a1, x2, ws, **kw), str(kw))


def test_qlinear_weight_is_prepacked_and_probed(qlinear_backend):
    from backends.torch_cpu.gemm import Int8Weight

    w = torch.randint(-128, 128, (40, 9), dtype=torch.int8)
    loaded = Int8Weight.load(w, "qlinear")
    assert loaded.packed is not None and loaded.note == ""
    assert loaded.absmax == max(-int(w.min()), int(w.max()))  # max |w| (int8 abs would wrap -128)
    assert Int8Weight.load(w, "int_mm").packed is None


def test_linear_row_blocks(monkeypatch):
    # The Linear paths run in row blocks (bit-identical: every stage is row-wise). Force 64-row blocks.
    from backends.torch_cpu import linear

    monkeypatch.setattr(linear, "_BLOCK_BYTES", 1)
    rng = np.random.default_rng(11)
    x = float_tensor(rng, (3, 67, 24), BF16, "outlier_channels")  # 201 rows -> blocks of 64, 64, 64, 9
    w, ws = i8(rng, 19, 24), (rng.random(19) * 1e-2).astype(F32)
    check.same("w8a8_dynamic_linear", x, w, ws, bias=float_tensor(rng, (19,), BF16))
    kw = dict(input_scale=np.float32([0.02]), input_offset=np.float32([3]), deq_scale=ws)
    check.same("w8a8_static_linear", x, w, quant_bias=rng.integers(-999, 999, 19).astype(np.int32), **kw)
    # A quant_bias that can overflow int32 keeps one block, so the OverflowError names the golden's index.
    qb = np.zeros(19, np.int32)
    qb[5] = 2**31 - 1
    xs = np.zeros((201, 24), BF16)
    xs[150] = 1.0  # offset 0: row 150 -> x_q = rint(1 / 0.02) = 50, the rest 0: acc + qb overflows at (150, 5) only
    kw["input_offset"] = np.float32([0])
    check.raises(OverflowError, r"output index \(150, 5\)", "w8a8_static_linear", xs, np.ones((19, 24), np.int8),
                 quant_bias=qb, **kw)


# -- the MoE expert GEMM paths and the thread policy -----------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
def test_layer_many_tokens_across_workers_and_finalize_blocks(threads):
    # 75 tokens: three finalize blocks of 32 (the last partial), experts dealt to two worker threads
    # (or run one after the other with one torch thread); the result must not depend on either.
    from backends.torch_cpu import moe_layer as ml
    from conformance.ops.moe._common import shared_expert

    rng = np.random.default_rng(21)
    w = moe_layer(rng, 9, 32, 16)
    hidden = rng.standard_normal((75, 32)).astype(F32).astype(BF16)
    ids, wts = topk(rng, 75, 9, 3)
    previous = torch.get_num_threads()
    claimed = ml.claim_threads()["torch_threads"]
    try:
        torch.set_num_threads(threads)
        ml.claim_threads()["torch_threads"] = threads
        check.same("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts, shared_expert=shared_expert(rng, 32, 8))
    finally:
        ml.claim_threads()["torch_threads"] = claimed
        torch.set_num_threads(previous)


def _loaded_layer(w, hidden, ids, wts):
    from backends.torch_cpu import moe_layer as ml

    return ml.load(w8a8.registry.get("w8a8_moe").check(hidden, *w, topk_ids=ids, topk_weights=wts), TC.transfer,
                   TC.gemm_path)[1]


@pytest.mark.parametrize("path", ["int_mm", "fbgemm", "vnni"])
def test_loaded_layer_and_both_gemm_paths(path, monkeypatch):
    from backends.torch_cpu import moe_experts, packed

    if path == "fbgemm" and not moe_experts.fbgemm_usable()[0]:
        pytest.skip(moe_experts.fbgemm_usable()[1])
    if path == "vnni" and not packed.available()[0]:
        pytest.skip(packed.available()[1])
    monkeypatch.setenv("W8A8_TORCH_CPU_MOE_GEMM", path)
    rng = np.random.default_rng(8)
    w = moe_layer(rng, 3, 32, 16)
    hidden = rng.standard_normal((5, 32)).astype(F32).astype(BF16)
    ids, wts = topk(rng, 5, 3, 2)
    layer = _loaded_layer(w, hidden, ids, wts)
    assert layer.w13.path == path and layer.w2.path == path and layer.deferred is None
    assert layer.s13.dtype == torch.bfloat16 and layer.s13f.dtype == torch.float32
    if path == "int_mm":   # [E, H, 2I]: each expert's [K, N] row-major, the layout _int_mm streams best
        assert layer.w13.kn.shape == (3, 32, 32) and layer.w13.kn[1].is_contiguous()
        assert torch.equal(layer.w13.kn[1], torch.from_numpy(w[0][1].T.copy()))
    elif path == "fbgemm":
        assert len(layer.w13.packed) == 3 and layer.w13.kn is None
    else:
        assert layer.w13.vnni.e == 3 and layer.w13.kn is None
    check.same("w8a8_moe", hidden, *w, topk_ids=ids, topk_weights=wts)
    check.same("grouped_matmul", i8(rng, 9, 33), i8(rng, 3, 33, 7), scale=rng.uniform(0, 1, (3, 7)).astype(BF16),
               group_list=np.array([4, 0, 5], np.int64), group_list_type=1, output_dtype="bfloat16")


def test_moe_gemm_path_selection(monkeypatch):
    from backends.torch_cpu import moe_experts

    monkeypatch.setenv("W8A8_TORCH_CPU_MOE_GEMM", "fast")
    with pytest.raises(ValueError, match="W8A8_TORCH_CPU_MOE_GEMM"):
        moe_experts.resolve_path()
    monkeypatch.setenv("W8A8_TORCH_CPU_MOE_GEMM", "auto")
    from backends.torch_cpu import packed

    fallback = "fbgemm" if moe_experts.fbgemm_usable()[0] else "int_mm"
    assert moe_experts.resolve_path() == ("vnni" if packed.available()[0] else fallback)
    assert moe_experts.resolve_path("int_mm") == "int_mm"


def test_fbgemm_falls_back_to_int_mm_when_the_probe_fails(monkeypatch):
    # A kernel that is not proven exact at load is not used: the experts go to _int_mm, with the reason.
    from backends.torch_cpu import moe_experts

    if not moe_experts.fbgemm_usable()[0]:
        pytest.skip(moe_experts.fbgemm_usable()[1])
    monkeypatch.setattr(moe_experts, "_probe", lambda w, packed: False)
    experts = moe_experts.ExpertGemm.load(torch.from_numpy(i8(np.random.default_rng(0), 2, 16, 8)), layout="ekn",
                                          path="fbgemm")
    assert experts.path == "int_mm" and "probe" in experts.note and experts.kn.shape == (2, 16, 8)


@pytest.mark.parametrize("k", [1, 2, 7, 64, 1025, 4096])
@pytest.mark.parametrize("n", [1, 3, 17, 257])
def test_fbgemm_expert_gemm_is_exact(k, n):
    # fp32(acc) from fbgemm equals the exact int64 product rounded to fp32 on random and on saturating
    # operands (u8 255 x s8 127: an int16 pair sum would saturate; only the VNNI kernel is exact).
    from backends.torch_cpu import moe_experts

    if not moe_experts.fbgemm_usable()[0]:
        pytest.skip(moe_experts.fbgemm_usable()[1])
    rng = np.random.default_rng(k * 1000 + n)
    w = np.stack([i8(rng, k, n), np.full((k, n), 127, np.int8), np.full((k, n), -128, np.int8)])   # [E, K, N]
    experts = moe_experts.ExpertGemm.load(torch.from_numpy(w), layout="ekn", path="fbgemm")
    assert experts.path == "fbgemm", experts.note
    for m in (1, 5, 17, 64):
        for x in (i8(rng, m, k), np.full((m, k), 127, np.int8), np.full((m, k), -128, np.int8)):
            for g in range(3):
                want = (x.astype(np.int64) @ w[g].astype(np.int64)).astype(F32)
                assert_bits(experts.f32(g, torch.from_numpy(x)).numpy(), want, f"k={k} n={n} m={m} expert {g}")


# -- float helpers: MoE math, the low-bit codec, chunked FP8 GEMMs -----------------------------------------------

def test_f64_to_f16_rounds_once():
    # 1 + 2^-11 + 2^-40 is just above the fp16 midpoint between 1 and 1 + 2^-10: one rounding gives
    # 1 + 2^-10 (1.0009765625); through fp32 it first becomes 1 + 2^-11 exactly (a tie) -> 1.0 (even).
    from backends.torch_cpu.moe_math import f64_to_f16

    v = torch.tensor([1 + 2 ** -11 + 2 ** -40, -(1 + 2 ** -11 + 2 ** -40), 1 + 2 ** -11, 65520.0, 1e-8, 3.0],
                     dtype=torch.float64)
    got = f64_to_f16(v).numpy()
    with np.errstate(over="ignore"):
        assert_bits(got, v.numpy().astype(np.float16))
    assert got[0] == np.float16(1.0009765625) and got[2] == np.float16(1.0) and np.isinf(got[3])


def test_sqrt_is_the_correctly_rounded_one():
    # torch's float32 sqrt is a vector approximation (differs from IEEE for ~16% of arguments here).
    from backends.torch_cpu.moe_math import sqrt32

    x = np.random.default_rng(0).uniform(0, 10, 100_000).astype(F32)
    assert_bits(sqrt32(torch.from_numpy(x)).numpy(), np.sqrt(x))


def test_decode_tables_are_built_once_and_equal_torch_casts():
    from backends.torch_cpu import lowbit_codec as codec

    assert codec.tables() is codec.tables()
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        by_table = codec.decode_fp8(codes.view(dtype))
        by_cast = codes.view(dtype).to(torch.float32)
        nan = torch.isnan(by_cast)
        assert torch.equal(torch.isnan(by_table), nan)
        assert torch.equal(by_table[~nan].view(torch.int32), by_cast[~nan].view(torch.int32))


def test_encoders_match_the_golden_on_random_bit_patterns():
    # 200k random fp32 bit patterns (NaNs of both signs, Inf, subnormals, huge values) plus every
    # E2M1 midpoint and its fp32 neighbours.
    from backends.torch_cpu import lowbit_codec as codec
    from w8a8.lowbit.minifloat import float_to_e2m1, float_to_fp8

    rng = np.random.default_rng(7)
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], F32)
    x = np.concatenate([rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        mids, -mids, np.nextafter(mids, np.float32(9)), np.nextafter(mids, np.float32(-9))])
    t = torch.from_numpy(x)
    with np.errstate(all="ignore"):
        assert np.array_equal(codec.encode_e2m1(t).numpy(), float_to_e2m1(x))
        for name in ("e4m3", "e5m2"):
            assert np.array_equal(codec.encode_fp8(t, name).view(torch.uint8).numpy(),
                                  float_to_fp8(x, name).view(np.uint8)), name


def test_fp8_block_matmul_in_chunks(monkeypatch):
    # the batched K-block GEMMs in chunks of 3 K blocks give the unchunked (and the golden's) bits
    from backends.torch_cpu import lowbit_fp

    rng = np.random.default_rng(9)
    aq, as_ = w8a8.per_token_group_quant_fp8(rng.standard_normal((5, 1000)).astype(F32))
    wq, ws = w8a8.fp8_block_quantize(rng.standard_normal((131, 1000)).astype(F32))
    want = w8a8.fp8_block_matmul(aq, as_, wq, ws)
    monkeypatch.setattr(lowbit_fp, "_GEMM_CHUNK", 5 * 131 * 3)
    assert_bits(TC.call("fp8_block_matmul", aq, as_, wq, ws), want)
