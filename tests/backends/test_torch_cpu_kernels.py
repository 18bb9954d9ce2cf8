"""torch-cpu's building blocks (backends/torch_cpu/arith.py, gemm.py, runtime.py) and the torch traps
they exist for.

Each trap is pinned twice: the raw torch behaviour that would break bit-exactness (so a torch upgrade
that fixes or changes it is noticed), and the helper that avoids it, against the golden helper it
reproduces.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

import w8a8
from w8a8 import rounding
from w8a8.trans_quant_param import fp19 as golden_fp19

torch = pytest.importorskip("torch")

from backends.torch_common import from_torch, to_torch  # noqa: E402
from backends.torch_cpu import arith, gemm, runtime  # noqa: E402

pytestmark = pytest.mark.torch
BF16 = np.dtype(ml_dtypes.bfloat16)


def bits_equal(a, b) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def random_f32(rng, n):
    """Random fp32 bit patterns: NaN, +-Inf, subnormals, signed zeros and everything else."""
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


# -- the traps ----------------------------------------------------------------------------------------------

def test_trap_number_divided_by_tensor_is_a_reciprocal_product():
    # 127 / m in torch is m.reciprocal() * 127: two roundings. Find the values where that differs from
    # the IEEE quotient, and show that tensor / tensor (arith.const) is the IEEE quotient everywhere.
    rng = np.random.default_rng(0)
    m = np.abs(random_f32(rng, 200_000))
    m = m[np.isfinite(m) & (m > 0)]
    with np.errstate(all="ignore"):
        want = np.float32(127) / m
    tm = torch.from_numpy(m)
    assert not bits_equal((127.0 / tm).numpy(), want)
    assert bits_equal(torch.div(arith.const(127), tm).numpy(), want)


def test_trap_zero_dim_tensors_do_not_promote():
    x = to_torch(np.array([1.5, 2.25], BF16))
    assert (x * torch.tensor(2.0)).dtype == torch.bfloat16  # a bf16 multiply: rounds to bf16
    assert (x * arith.const(2.0)).dtype == torch.float32


def test_trap_bf16_nan_bits_and_the_fix():
    # fp32 NaNs -> bf16: ml_dtypes writes sign | 0x7FC0; torch's vectorized cast writes 0xFFFF.
    v = np.array([np.nan, -np.nan, 1.0, np.inf] * 8, np.float32)
    v[1::4] = np.array([0xFFC00000], np.uint32).view(np.float32)  # the x86 default NaN (sign set)
    want = v.astype(BF16)
    assert want.view(np.uint16)[:2].tolist() == [0x7FC0, 0xFFC0]
    raw = from_torch(torch.from_numpy(v).to(torch.bfloat16))
    assert not bits_equal(raw, want)
    assert bits_equal(from_torch(arith.to_float(torch.from_numpy(v), torch.bfloat16)), want)


def test_trap_int_mm_degenerate_strides():
    # torch 2.13 CPU _int_mm reads a [1, K] matrix with strides (1, 1) (what .contiguous() keeps) as
    # column-major with a leading dimension of 1, and returns garbage; gemm._canonical copies such views.
    a = torch.tensor([[2], [7], [1]], dtype=torch.int8)
    b = torch.tensor([[3], [5]], dtype=torch.int8).mT  # [1, 2], strides (1, 1)
    want = (a.long() @ b.long()).int()
    assert b.stride() == (1, 1)
    assert torch.equal(gemm._mm(a, b), want)


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (1, 1, 7), (7, 1, 1), (1, 7, 1), (3, 1, 5), (1, 5, 3), (17, 33, 1)])
@pytest.mark.parametrize("a_major, b_major", [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")])
def test_int_mm_every_layout(m, k, n, a_major, b_major):
    g = torch.Generator().manual_seed(m * 100 + k * 10 + n)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=g)
    want = (a.long() @ b.long()).int()
    a = a if a_major == "row" else a.mT.contiguous().mT
    b = b if b_major == "row" else b.mT.contiguous().mT
    assert torch.equal(gemm._mm(a, b), want)
    au = (a.long() + 128).to(torch.uint8)
    assert torch.equal(gemm._mm(au, b), (au.long() @ b.long()).int())
    assert torch.equal(gemm._mm(a, au.mT), (a.long() @ au.mT.long()).int())  # int8 x uint8: (b^T a^T)^T


# -- rounding and casts ---------------------------------------------------------------------------------

@given(seed=st.integers(0, 2**32 - 1), target=st.sampled_from([("int8", -128, 127), ("uint8", 0, 255),
                                                               ("int32", -(2**31), 2**31 - 1), ("int4", -8, 7)]),
       nan_value=st.sampled_from([0, -128]))
def test_to_int_matches_golden(seed, target, nan_value):
    rng = np.random.default_rng(seed)
    name, lo, hi = target
    v = np.concatenate([random_f32(rng, 64), (rng.integers(-600, 600, 64) / 2.0).astype(np.float32),
                        np.float32([2**31, -2**31, 2147483520, np.nan, np.inf, -np.inf, 0.5, -0.5, 1.5])])
    with np.errstate(all="ignore"):
        want = rounding.to_int(v, name, lo=lo, hi=hi, nan_value=nan_value)
    tdtype = torch.int8 if name == "int4" else arith.torch_dtype_of(name)
    got = arith.to_int(torch.from_numpy(v), lo, hi, tdtype, nan_value=nan_value)
    assert bits_equal(got.numpy(), want)


@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(["bfloat16", "float16", "float32"]))
def test_to_float_matches_golden(seed, dtype):
    v = random_f32(np.random.default_rng(seed), 4096)
    with np.errstate(all="ignore"):  # the golden's NaN -> bf16 cast warns ("invalid value")
        want = rounding.to_float(v, dtype)
    got = from_torch(arith.to_float(torch.from_numpy(v), arith.torch_dtype_of(dtype)))
    nan = np.isnan(v)
    # Quiet NaNs (all that arithmetic produces) must match bit for bit; signalling NaN payloads of
    # fp16 may differ (torch's hardware cast quiets them, NumPy keeps them signalling).
    quiet = ~nan | ((v.view(np.uint32) & 0x00400000) != 0)
    assert bits_equal(got[quiet], want[quiet])


# -- int4, FP19, packed quant parameters ----------------------------------------------------------------

@given(seed=st.integers(0, 2**32 - 1), shape=st.sampled_from([(8,), (3, 16), (2, 1, 40), (0, 8), (4, 0)]))
def test_int4_pack_unpack_match_golden(seed, shape):
    codes = np.random.default_rng(seed).integers(-8, 8, shape).astype(np.int8)
    packed = arith.pack_int4(torch.from_numpy(codes))
    assert bits_equal(packed.numpy(), w8a8.pack_int4(codes))
    assert bits_equal(arith.unpack_int4(packed).numpy(), codes)


@given(seed=st.integers(0, 2**32 - 1), round_mode=st.sampled_from([0, 1]))
def test_fp19_matches_golden(seed, round_mode):
    rng = np.random.default_rng(seed)
    specials = np.array([0, 0x80000000, 0x00001000, 0x00003000, 0x007FFFFF, 0x7F7FF000, 0x7F7FFFFF, 0x7F800000,
                         0xFF800000, 0x7FC00000, 0x7F801000, 0x3F801000, 0x3F803000, 0x3F800FFF, 0xBF803000],
                        np.uint32).view(np.float32)
    v = np.concatenate([random_f32(rng, 512), specials])
    assert bits_equal(arith.fp19(torch.from_numpy(v), round_mode).numpy(), golden_fp19(v, round_mode))


@given(seed=st.integers(0, 2**32 - 1))
def test_decode_quant_param_matches_golden(seed):
    rng = np.random.default_rng(seed)
    packed = rng.integers(-(2**63), 2**63 - 1, 256, dtype=np.int64)
    scale, offset = arith.decode_quant_param(torch.from_numpy(packed))
    want_scale, want_offset = w8a8.decode_quant_param(packed)
    assert bits_equal(scale.numpy(), want_scale) and bits_equal(offset.numpy(), want_offset)
    u_scale, u_offset = arith.decode_quant_param(to_torch(packed.view(np.uint64)))
    assert bits_equal(u_scale.numpy(), want_scale) and bits_equal(u_offset.numpy(), want_offset)


# -- exact GEMM routes ------------------------------------------------------------------------------------

def exact(a, b):
    return np.matmul(a.astype(object), b.astype(object))


def test_int_matmul_chunked_int_mm_route():
    # K * 128 * 128 > 2^31 - 1 needs the data bound; with |a| <= 127 it still exceeds -> K-chunks.
    k = 140_000
    rng = np.random.default_rng(0)
    a = rng.integers(-127, 128, (2, k)).astype(np.int8)
    b = rng.integers(-127, 128, (k, 3)).astype(np.int8)
    got = gemm.int_matmul(torch.from_numpy(a), torch.from_numpy(b))
    assert got.dtype == torch.int32 and (got.numpy().astype(object) == exact(a, b)).all()


@given(seed=st.integers(0, 2**32 - 1), k=st.sampled_from([1, 2, 3, 9]),
       dtypes=st.sampled_from([(np.int32, np.int32), (np.int16, np.int32), (np.uint8, np.uint8), (np.int16, np.int16)]))
def test_int_matmul_wide_route_exact_or_overflow(seed, k, dtypes):
    # Products beyond 2^53 (int32 x int32) take int64 GEMM chunks summed as hi/lo limbs: the result
    # is the exact sum whenever it fits int32, OverflowError (naming the exact sum) otherwise.
    rng = np.random.default_rng(seed)
    scale = int(rng.integers(0, 32))
    a = (rng.integers(-2**31, 2**31, (2, k)) >> scale).astype(dtypes[0])
    b = (rng.integers(-2**31, 2**31, (k, 3)) >> scale).astype(dtypes[1])
    if rng.random() < 0.5:  # cancel: a @ b small
        b[-1] = 0
        a[:, 0] = 1
    want = exact(a, b)
    fits = ((want >= -2**31) & (want < 2**31)).all()
    if fits:
        got = gemm.int_matmul(torch.from_numpy(a), torch.from_numpy(b))
        assert (got.numpy().astype(object) == want).all()
    else:
        with pytest.raises(OverflowError, match="exact sum"):
            gemm.int_matmul(torch.from_numpy(a), torch.from_numpy(b))


def test_limb_sum_detects_overflow_across_chunks():
    # Two chunks of 2^62 each: the running int64 sum would wrap to -2^63; the limbs see 2^63.
    parts = [torch.tensor([[2**62]]), torch.tensor([[2**62]])]
    with pytest.raises(OverflowError, match=str(2**63)):
        gemm._limb_sum("t", iter(parts))
    parts = [torch.tensor([[2**62, -5]]), torch.tensor([[-(2**62) + 7, 3]])]
    assert gemm._limb_sum("t", iter(parts)).tolist() == [[7, -2]]


def test_add_int32_overflow_and_fast_path():
    acc = torch.tensor([[2**31 - 10, -(2**31) + 10]], dtype=torch.int32)
    assert gemm.add_int32("t", acc, torch.tensor([9, -10], dtype=torch.int32), 2**31 - 1).tolist() == \
        [[2**31 - 1, -(2**31)]]
    with pytest.raises(OverflowError, match="exact sum 2147483648"):
        gemm.add_int32("t", acc, torch.tensor([10, 0], dtype=torch.int32), 2**31 - 1)
    small = torch.tensor([[5]], dtype=torch.int32)
    assert gemm.add_int32("t", small, torch.tensor([7], dtype=torch.int32), 5).tolist() == [[12]]


# -- runtime: availability, path selection, threads --------------------------------------------------------

def _run(code: str, env: dict | None = None) -> str:
    import os

    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_available_reason_without_torch():
    out = _run("""
        import sys
        sys.modules["torch"] = None  # import torch -> ModuleNotFoundError
        from backends.torch_cpu import TorchCpuBackend
        print(TorchCpuBackend().available())
    """)
    assert out == "(False, \"torch is not installed (pip install 'w8a8[torch]')\")"


def test_available_reason_when_torch_fails_to_import(tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('libhccl.so: cannot open shared object file')\n")
    out = _run(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from backends.torch_cpu import TorchCpuBackend
        print(TorchCpuBackend().available())
    """)
    assert out == "(False, 'import torch failed: ImportError: libhccl.so: cannot open shared object file')"


def test_stage_threads():
    # Inside an op: the elementwise thread count; inside its GEMM: all of torch's threads; after: as before.
    seen = {}
    record = runtime.claim_threads()
    before = torch.get_num_threads()
    real_mm = torch._int_mm

    def spy(a, b):
        seen["gemm"] = torch.get_num_threads()
        return real_mm(a, b)

    with runtime.op_threads():
        seen["op"] = torch.get_num_threads()
        torch._int_mm = spy
        try:
            gemm.int_matmul(torch.ones(3, 4, dtype=torch.int8), torch.ones(4, 5, dtype=torch.int8))
        finally:
            torch._int_mm = real_mm
        seen["after_gemm"] = torch.get_num_threads()
    assert seen == {"op": record["elementwise_threads"], "gemm": record["torch_threads"],
                    "after_gemm": record["elementwise_threads"]}
    assert torch.get_num_threads() == before


def test_gemm_path_env_override():
    assert runtime.resolve_gemm_path("int_mm") == "int_mm"
    out = _run("from backends.torch_cpu import TorchCpuBackend; print(TorchCpuBackend().gemm_path)",
               {"W8A8_TORCH_CPU_GEMM": "int_mm"})
    assert out == "int_mm"
    with pytest.raises(ValueError, match="'gemm'"):
        runtime.resolve_gemm_path("amx4")


@pytest.mark.parametrize("policy", ["cap_blas", "keep"])
def test_thread_policy(policy):
    # Measured reason in runtime.py: after the first torch-cpu call, the process's BLAS pools run one
    # thread (cap_blas, the default) or keep their count (keep); torch keeps its thread count.
    out = _run("""
        import json, numpy as np, torch
        from threadpoolctl import threadpool_info
        import backends
        before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        torch_before = torch.get_num_threads()
        prepared = backends.get("torch-cpu").prepare("dynamic_quant", np.ones((2, 8), np.float16))
        prepared.run()
        after = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        print(json.dumps({"before": before, "after": after, "torch": [torch_before, torch.get_num_threads()],
                          "notes": prepared.notes}))
    """, {"W8A8_TORCH_CPU_THREADS": policy})
    rec = json.loads(out)
    assert rec["torch"][0] == rec["torch"][1]  # restored after the op
    assert rec["notes"]["torch_threads"] == rec["torch"][0]
    assert rec["notes"]["elementwise_threads"] == (1 if rec["torch"][0] <= 4 else rec["torch"][0])
    if not rec["before"]:
        pytest.skip("no BLAS pool visible to threadpoolctl")
    assert rec["after"] == ([1] * len(rec["before"]) if policy == "cap_blas" else rec["before"])
