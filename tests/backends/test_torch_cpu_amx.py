"""torch-cpu's AMX-INT8 path (backends/torch_cpu/csrc/w8a8_cpu.c's ``W8A8_AMX`` section, native.py, packed.py,
runtime.py): what can be verified on any x86 CPU, and the AMX kernel itself where the CPU has AMX.

Pinned on every host: the AMX build compiles (``-mamx-tile -mamx-int8``) and its Linear really is tile code
(``tdpbusd`` / ``tileloadd`` / ``ldtilecfg`` in the disassembly, none in the VNNI build); the AMX packing
against a NumPy re-layout written from the tile definition (``_tile_dpbusd``'s B operand: 16 rows of
k-groups x 16 columns x 4 bytes) on odd shapes, and its compensation; the selection: without
``amx_int8`` / ``amx_tile`` in the flags, with a refused ``arch_prctl`` permission (the real call on a
CPU without AMX, and an injected failure), with ``W8A8_TORCH_CPU_AMX=0`` — each names its reason and
``auto`` falls back to the VNNI (or qlinear / int_mm) path; ``gemm="amx"`` refuses with the reason.

Where the CPU has AMX (``amx_int8`` in /proc/cpuinfo) the AMX Linear also runs against the golden on odd
shapes; elsewhere that test is skipped with the reason.
"""

from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

import w8a8
from backends.testing import assert_bits

torch = pytest.importorskip("torch")

from backends.torch_cpu import TorchCpuBackend, native, packed, runtime  # noqa: E402

pytestmark = pytest.mark.torch
OK, WHY = packed.available()
needs_vnni = pytest.mark.skipif(not OK, reason=f"the fused kernels are not usable here: {WHY}")
AMX_OK, AMX_WHY = packed.amx_available() if OK else (False, WHY)
needs_amx = pytest.mark.skipif(not AMX_OK, reason=f"no usable AMX here: {AMX_WHY}")


def _reference_amx_layout(w_nk: np.ndarray) -> np.ndarray:
    """The AMX packing from its definition: for each 64-column panel p, each 16-column block j and each
    64-wide k-block b, one B tile T[16][64] with T[g][4 c + i] = W[k = 64 b + 4 g + i][n = 64 p + 16 j + c]
    (0 past K or N), tiles ordered (p, j, b)."""
    n, k = w_nk.shape
    panels, kb = -(-n // 64), -(-k // 64)
    w_kn = np.zeros((kb * 64, panels * 64), np.int8)
    w_kn[:k, :n] = w_nk.T
    out = []
    for p in range(panels):
        for j in range(4):
            cols = w_kn[:, 64 * p + 16 * j: 64 * p + 16 * j + 16]          # [K64, 16]
            for b in range(kb):
                blk = cols[64 * b: 64 * b + 64]                              # [64 k, 16 c]
                tile = blk.reshape(16, 4, 16).transpose(0, 2, 1).reshape(16, 64)   # [g][c][i]
                out.append(tile)
    return np.concatenate([t.reshape(-1) for t in out])


@needs_vnni
@pytest.mark.parametrize("n,k", [(1, 1), (7, 17), (17, 64), (65, 130), (130, 1025), (64, 0)])
def test_amx_packing_is_the_tile_layout(n, k):
    rng = np.random.default_rng(n * 1000 + k)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    if k == 0:
        with pytest.raises(ValueError, match="non-empty"):
            packed.PackedWeight.pack(torch.from_numpy(w), "amx")
        return
    pw = packed.PackedWeight.pack(torch.from_numpy(w), "amx")
    want = _reference_amx_layout(w)
    assert pw.layout == "amx" and pw.data.numel() == want.size == packed.packed_bytes(n, k, "amx")
    assert np.array_equal(pw.data.numpy(), want)
    comp = np.zeros(-(-n // 64) * 64, np.int64)
    comp[:n] = 128 * w.astype(np.int64).sum(axis=1)
    assert np.array_equal(pw.comp.numpy(), comp.astype(np.int32))


@needs_vnni
def test_the_vnni_packing_is_the_amx_one_with_k_padded_to_4():
    # The two layouts differ only in K's padding: equal where K is a multiple of 64.
    w = torch.randint(-128, 128, (70, 128), dtype=torch.int8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(packed.PackedWeight.pack(w, "vnni").data, packed.PackedWeight.pack(w, "amx").data)
    with pytest.raises(ValueError, match="layout"):
        packed.PackedWeight.pack(w, "tiles")


@pytest.mark.skipif(shutil.which("objdump") is None or native.compiler() is None, reason="needs cc and objdump")
def test_the_amx_build_compiles_to_tile_code(tmp_path):
    amx = native.build(directory=tmp_path, extra_flags=native.AMX_FLAGS)
    plain = native.build(directory=tmp_path)
    dis = {p: subprocess.run(["objdump", "-d", str(p)], capture_output=True, text=True, check=True).stdout
           for p in (amx, plain)}
    for insn in ("tdpbusd", "tileloadd", "ldtilecfg", "tilestored", "tilerelease"):
        assert insn in dis[amx], insn
        assert insn not in dis[plain], insn


def _reload(monkeypatch, flags=None, request=None):
    if flags is not None:
        monkeypatch.setattr(native, "cpu_flags", lambda: frozenset(flags))
    if request is not None:
        monkeypatch.setattr(native, "request_amx", request)
    native._load_amx.cache_clear()
    packed.amx_available.cache_clear()


@pytest.fixture
def fresh_amx():
    yield
    native._load_amx.cache_clear()
    packed.amx_available.cache_clear()


@needs_vnni
def test_without_amx_flags_the_reason_names_them(monkeypatch, fresh_amx):
    flags = native.cpu_flags() - {"amx_int8", "amx_tile", "amx_bf16"}
    _reload(monkeypatch, flags)
    ok, why = packed.amx_available()
    assert not ok and "amx_tile" in why and "amx_int8" in why
    assert runtime.resolve_gemm_path("auto") in ("vnni", "qlinear")
    with pytest.raises(ValueError, match="gemm='amx' is not usable here: .*amx_int8"):
        runtime.resolve_gemm_path("amx")


@needs_vnni
def test_a_refused_permission_falls_back_to_vnni(monkeypatch, fresh_amx):
    calls = []
    _reload(monkeypatch, native.cpu_flags() | {"amx_int8", "amx_tile"},
            lambda lib: calls.append(lib) or -1)   # -EPERM
    ok, why = packed.amx_available()
    assert not ok and "ARCH_REQ_XCOMP_PERM" in why and "Operation not permitted" in why and len(calls) == 1
    b = TorchCpuBackend()
    assert b.gemm_path != "amx"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 96)).astype(ml_dtypes.bfloat16)
    w = rng.integers(-128, 128, (33, 96), dtype=np.int8)
    s = (rng.random(33) * 1e-2).astype(np.float32)
    lin = b.bind("w8a8_dynamic_linear", w, s)
    assert_bits(lin(x), w8a8.w8a8_dynamic_linear(x, w, s))
    assert lin.gemm_path(x.dtype) == b.gemm_path


@needs_vnni
@pytest.mark.skipif("amx_int8" in native.cpu_flags(), reason="this CPU has AMX: the permission call may succeed")
def test_the_real_permission_call_is_refused_on_a_cpu_without_amx(monkeypatch, fresh_amx):
    # The flags injected, the build and the arch_prctl call real: a kernel without AMX state refuses it,
    # and nothing executes a tile instruction.
    _reload(monkeypatch, native.cpu_flags() | {"amx_int8", "amx_tile"})
    ok, why = native.amx_available()
    assert not ok and "ARCH_REQ_XCOMP_PERM" in why, why
    assert not packed.amx_available()[0]
    assert runtime.resolve_gemm_path("auto") != "amx"


@needs_vnni
def test_the_switch_disables_amx(monkeypatch, fresh_amx):
    monkeypatch.setenv("W8A8_TORCH_CPU_AMX", "0")
    _reload(monkeypatch, native.cpu_flags() | {"amx_int8", "amx_tile"})
    assert native.amx_available() == (False, "disabled by W8A8_TORCH_CPU_AMX=0")


@needs_amx
@pytest.mark.parametrize("m", [1, 7, 17, 33, 1025, 0])
def test_the_amx_linear_is_the_golden(m):
    b = TorchCpuBackend(gemm="amx")
    rng = np.random.default_rng(m)
    for dtype in (ml_dtypes.bfloat16, np.float16):
        x = rng.standard_normal((m, 200)).astype(np.float32).astype(dtype)
        w = rng.integers(-128, 128, (70, 200), dtype=np.int8)
        s = (rng.random(70) * 1e-2).astype(np.float32)
        lin = b.bind("w8a8_dynamic_linear", w, s)
        assert_bits(lin(x), w8a8.w8a8_dynamic_linear(x, w, s))
        assert lin.gemm_path(x.dtype) == "amx"


# -- the ISA, the GEMM path of each call and the unit that bounds it -------------------------------------------

def test_isa_names_the_units_from_the_flags():
    spr = frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"})
    assert runtime.isa(spr) == "AMX-INT8, AMX-BF16, AVX-512 VNNI, AVX-512 BF16, AVX-512F, AVX2"
    assert runtime.isa(frozenset({"avx2", "fma"})) == "AVX2"
    assert runtime.isa(frozenset()) == "unknown"


@needs_vnni
def test_backend_info_and_notes_name_the_path_each_call_took():
    b = TorchCpuBackend()
    info = b.info()["gemm"]
    assert info["path"] == b.gemm_path and info["paths"]["int_mm"] == ""
    assert (info["paths"]["amx"] == "") == AMX_OK
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 64)).astype(ml_dtypes.bfloat16)
    w = rng.integers(-128, 128, (16, 64), dtype=np.int8)
    s = np.full(16, 1e-3, np.float32)
    assert b.prepare("w8a8_dynamic_linear", x, w, s).notes["gemm"] == b.gemm_path
    assert TorchCpuBackend(gemm="int_mm").prepare("w8a8_dynamic_linear", x, w, s).notes["gemm"] == "int_mm"


def test_the_roofline_names_the_unit_of_the_calls_gemm_path():
    from bench import peak, report
    from conformance.ops.dense.w8a8_dynamic_linear import bench_case
    from bench.timing import stats

    peaks = peak.Peaks(8e12, 1.1e11, "int8_amx", "fp64_fma_avx512", "test", 2, bw_l2=2e11, bw_llc=2e11,
                       bw_dram=4e10, l2_bytes=2 << 20, llc_bytes=300 << 20, int8_vnni=1.3e12, int8_amx=8e12)
    case = bench_case(2048, 2048, 2048)
    recs = [{"backend": "torch-cpu", "case": case.name, "op": case.op, "params": case.params, "work": case.work,
             "unit": case.unit, "status": "ok", "verified": True, "stats": stats([10e-3]), "gemm": g}
            for g in ("amx", "vnni", None)]
    report.annotate(recs, peaks)
    amx, vnni, unknown = (r["roofline"] for r in recs)
    assert amx["unit"] == "AMX-INT8" and amx["pct"] == pytest.approx(case.work / 8e12 / 10e-3)
    assert vnni["unit"] == "AVX-512 VNNI" and vnni["pct"] == pytest.approx(case.work / 1.3e12 / 10e-3)
    assert amx["label"].startswith("int8-bound (AMX-INT8) at") and unknown["unit"] == "AMX-INT8"  # the widest
    assert recs[0]["peak_kind"] == "int8 (AMX-INT8)"


# -- the decode item's plan and tile configuration (plain C, every build) ----------------------------------------

@needs_vnni
@pytest.mark.parametrize("m,n,plan", [(1, 1, (0, 1, 1)), (7, 70, (0, 2, 7)), (16, 64, (0, 1, 16)),
                                      (17, 64, (1, 1, 32)), (32, 130, (1, 3, 32)), (33, 65, (1, 4, 64)),
                                      (1025, 4096, (1, 64 * 33, 1056))])
def test_the_amx_plan_takes_the_decode_item_up_to_16_rows(m, n, plan):
    """(item kind: 0 decode = every row x one 64-column panel, 1 = 32 rows x one panel; items; rows of the code
    buffer): 1..16 rows are one A tile (no padding), from 17 rows the 32-row item on a buffer rounded to 32."""
    out = np.zeros(3, np.int64)
    assert native.library().w8a8_amx_plan(m, n, out.ctypes.data) == 0
    assert tuple(out) == plan
    assert native.library().w8a8_amx_plan(0, n, out.ctypes.data) == -1


@needs_vnni
@pytest.mark.parametrize("m", [1, 7, 16, 17, 1025])
def test_the_amx_tile_configuration(m):
    """LDTILECFG's 64-byte operand (Intel SDM): palette 1, byte 1 start_row 0, bytes 16..47 colsb of tmm0..15
    (uint16), bytes 48..63 rows. Decode (m <= 16): tmm0-4 (C, A) m rows, tmm5-7 (B) 16 rows; else all 16;
    every used tile 64 bytes wide (16 int32 / 64 codes), tiles 8-15 unused (0)."""
    cfg = np.zeros(64, np.uint8)
    assert native.library().w8a8_amx_tile_config(m, cfg.ctypes.data) == 0
    assert cfg[0] == 1 and not cfg[1:16].any()
    colsb, rows = cfg[16:48].view(np.uint16), cfg[48:64]
    assert list(colsb) == [64] * 8 + [0] * 8
    decode = m <= 16
    assert list(rows) == [m if decode else 16] * 5 + [16] * 3 + [0] * 8


# -- the AMX kernels on emulated tile instructions (any x86 CPU with the VNNI kernels) ---------------------------

@pytest.fixture(scope="module")
def emulated_amx():
    """The AMX build with its tile intrinsics emulated in C from the SDM's pseudo-code (-DW8A8_AMX_EMULATE):
    the kernels' own tiling, strides, configurations and epilogue run; only TDPBUSD & co. are software."""
    if not OK:
        pytest.skip(WHY)
    return native.load_path(native.build(extra_flags=native.AMX_EMULATED_FLAGS))


@needs_vnni
def test_the_amx_kernels_pass_their_self_test_on_emulated_tiles(emulated_amx, monkeypatch):
    monkeypatch.setattr(native, "amx_library", lambda: emulated_amx)
    assert emulated_amx.w8a8_abi() == native.ABI and emulated_amx.w8a8_amx_request() == 0
    assert packed.self_test("amx") == ""
    assert emulated_amx.w8a8_amx_emulated_faults() == 0   # no tile shape rule broken (#UD on hardware)


@needs_vnni
@pytest.mark.parametrize("m", [1, 7, 16, 17, 33])
def test_the_amx_linear_on_emulated_tiles_is_the_golden(emulated_amx, monkeypatch, m):
    """Decode (m <= 16, one A tile of m rows) and the 32-row item, through the load (packing + its probe) and
    the bound call, both activation dtypes, K and N tails (K = 200: four 64-byte k-blocks, the last padded)."""
    from backends.torch_cpu import linear

    monkeypatch.setattr(native, "amx_library", lambda: emulated_amx)
    rng = np.random.default_rng(m)
    w = rng.integers(-128, 128, (70, 200), dtype=np.int8)
    s = (rng.random(70) * 1e-2).astype(np.float32)
    for dtype, tdt in ((ml_dtypes.bfloat16, torch.bfloat16), (np.float16, torch.float16)):
        x = rng.standard_normal((m, 200)).astype(np.float32).astype(dtype)
        layer = linear.load_dynamic(tdt, torch.from_numpy(w), torch.from_numpy(s).to(tdt if tdt == torch.bfloat16
                                                                                     else torch.float32), None, "amx")
        assert linear.path_taken(layer) == "amx", layer.note
        xt = torch.from_numpy(x.view(np.int16).copy()).view(tdt)
        got = linear.w8a8_dynamic_linear(xt, layer)
        assert_bits(got.view(torch.int16).numpy().view(dtype), w8a8.w8a8_dynamic_linear(x, w, s))
    assert emulated_amx.w8a8_amx_emulated_faults() == 0
