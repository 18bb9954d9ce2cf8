"""Weights prepacked for torch-cpu's fused VNNI kernels (:mod:`.native`), the calls, and the probes
that prove them exact before any use.

**What the kernels compute** (``csrc/w8a8_cpu.c``): one pass per row block — the activation rows
quantized to int8 codes (dynamic per-token: the golden's ``quantize_rows`` with ``mul_inv`` /
``reciprocal``; static: ``rint(x * r + o)``; or given codes), the exact int32 GEMM against the packed
weight (``vpdpbusd`` on ``u8 = q + 128`` with the exact compensation ``128 * sum_k w[k, n]``, which
also carries an int32 bias), and the golden's fp32 epilogue ``((fp32(acc) * deq[n]) * token[m]) +
bias[n]`` rounded once to the output dtype — without the int8 / int32 / fp32 intermediates ever
leaving the cache.

**When** (the caller's job, checked in :func:`acc_fits`): only where the exact accumulator (plus an
int32 bias) cannot leave the int32 range, ``K * max|q| * max|w| + max|bias| <= 2^31 - 1`` — the
kernels compute modulo 2^32, which is the exact value exactly then. Everything else stays on the
reference path (chunked ``torch._int_mm``, the golden's OverflowError).

**Proofs before use**, each compared bit for bit with the reference torch path (dynamic_quant /
quantize + ``torch._int_mm`` + the qmatmul epilogue, itself pinned to the golden by the backend tests):

* :func:`self_test`, once per process: small shapes with K and N tails and partial row tiles, every
  input kind (bf16 / fp16 dynamic, bf16 / fp16 static with an int32 bias, int8 codes with per-token
  scales) and output (bf16, fp16, fp32, int32);
* :func:`probe_dynamic` / :func:`probe_static`, once per loaded weight, on rows built to reach the
  extremes (codes of +-127 / -128 driving column 0 to its largest sum, all-zero and subnormal rows,
  whose scales are 0 / codes saturate) — a kernel that disagrees is never used for that weight, and the
  reason is kept (``note``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from . import native
from .arith import I32_MAX, absmax
from .runtime import claim_threads

IN_DYNAMIC = {torch.bfloat16: 0, torch.float16: 1}          # the "reciprocal" per-token scale
IN_DYNAMIC_RCP = {torch.bfloat16: 5, torch.float16: 6}      # the "amax_mul_rcp" one
IN_STATIC = {torch.bfloat16: 2, torch.float16: 3}
IN_CODES = 4
SCALE_OUTS = ("reciprocal", "amax_mul_rcp")


def dynamic_kind(dtype: torch.dtype, scale_out: str) -> int:
    """The kernel's input kind of a dynamic Linear on ``dtype`` rows with the per-token scale formula
    ``scale_out`` (the kernel variant's, :mod:`.kernel_variants`): ``1 / (127 / m)`` or ``m * fp32(1/127)``."""
    if scale_out not in SCALE_OUTS:
        raise ValueError(f"packed: scale_out must be one of {SCALE_OUTS}; got {scale_out!r}")
    return (IN_DYNAMIC if scale_out == "reciprocal" else IN_DYNAMIC_RCP)[dtype]
OUT_KIND = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, torch.int32: 3}
NR = 64
MAX_K = (1 << 17) - 1
_WORKSPACE = 32 << 20   # bytes of int8 activation codes per kernel call (row blocks beyond)


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


def threads() -> int:
    return claim_threads()["torch_threads"]


def acc_fits(k: int, code_absmax: int, w_absmax: int, bias_absmax: int = 0) -> bool:
    """Whether ``|x_q @ w + bias|`` is bounded by int32 (the kernels' modular sums are then exact)."""
    return 0 < k <= MAX_K and k * code_absmax * w_absmax + bias_absmax <= I32_MAX


def wrap_i32(v: torch.Tensor) -> torch.Tensor:
    """int64 values reduced modulo 2^32 into int32 (two's complement)."""
    return (torch.bitwise_and(v + (1 << 31), 0xFFFFFFFF) - (1 << 31)).to(torch.int32)


def _check_weights(op: str, w: torch.Tensor, layout: str) -> None:
    if w.dtype != torch.int8 or w.ndim != len(layout.split(",")) or 0 in w.shape or w.shape[-1] > MAX_K:
        raise ValueError(f"{op}: an int8 {layout} weight, non-empty, with K <= {MAX_K}; got {w.dtype} "
                         f"{tuple(w.shape)}")


_HUGE = 2 << 20


def _buffer(nbytes: int) -> torch.Tensor:
    """An int8 buffer for packed weights: 2 MiB-aligned and advised to transparent huge pages (before its
    first touch), where it is large enough to hold one. The weights are streamed: with 4 KiB pages every
    4 KiB costs a TLB walk and stops the hardware prefetcher (measured: 6- and 16-row GEMMs over eight
    4096^2 weights from memory, 8-14 % faster on huge pages)."""
    if nbytes < _HUGE:
        return torch.empty(nbytes, dtype=torch.int8)
    base = torch.empty(nbytes + _HUGE, dtype=torch.int8)
    off = (-base.data_ptr()) % _HUGE
    data = base[off:off + nbytes]   # the view keeps the whole allocation alive
    native.library().w8a8_advise_huge(data.data_ptr(), (nbytes // _HUGE) * _HUGE)
    return data


LAYOUTS = ("vnni", "amx")


def packed_bytes(n: int, k: int, layout: str = "vnni") -> int:
    """Bytes of an ``[N, K]`` weight packed in ``layout``: panels of 64 columns, K padded to 4 (``"vnni"``)
    or to 64 (``"amx"``: every 16 x 64-byte block a B tile of ``_tile_dpbusd``; see the C file)."""
    lib = native.library()
    return (lib.w8a8_amx_packed_bytes if layout == "amx" else lib.w8a8_packed_bytes)(n, k)


def _pack_into(w_nk: torch.Tensor, data: torch.Tensor, comp: torch.Tensor, layout: str = "vnni") -> None:
    """Pack one int8 ``[N, K]`` weight into ``data`` / ``comp`` (views of the right sizes) in ``layout``
    (the packing is plain C in every build: the AMX layout is made and tested on any CPU)."""
    w = w_nk.contiguous()
    n, k = w.shape
    lib = native.library()
    pack = lib.w8a8_amx_pack if layout == "amx" else lib.w8a8_pack
    rc = pack(w.data_ptr(), n, k, k, data.data_ptr(), comp.data_ptr(), threads())
    if rc != 0:
        raise RuntimeError(f"{layout} pack failed ({rc}) for a weight of shape {tuple(w.shape)}")


@dataclass
class PackedWeight:
    """An int8 weight ``[K, N]`` (given as the checkpoint's ``[N, K]``) packed for the kernels.

    ``data``: the panels (see the C file); ``comp``: int32 ``[panels * 64]`` = ``128 * column sums``;
    ``absmax``: ``max|w|``; ``layout``: ``"vnni"`` (run by the VNNI kernels) or ``"amx"`` (K padded to 64,
    run by the AMX tile kernel, :func:`run`)."""

    data: torch.Tensor
    comp: torch.Tensor
    n: int
    k: int
    absmax: int
    layout: str = "vnni"

    @classmethod
    def pack(cls, w_nk: torch.Tensor, layout: str = "vnni") -> "PackedWeight":
        _check_weights("PackedWeight.pack", w_nk, "[N, K]")
        if layout not in LAYOUTS:
            raise ValueError(f"PackedWeight.pack: layout must be one of {LAYOUTS}; got {layout!r}")
        n, k = w_nk.shape
        data = _buffer(packed_bytes(n, k, layout))
        comp = torch.empty(-(-n // NR) * NR, dtype=torch.int32)
        _pack_into(w_nk, data, comp, layout)
        return cls(data=data, comp=comp, n=n, k=k, absmax=absmax(w_nk), layout=layout)

    def comp_with(self, int_bias: torch.Tensor | None) -> torch.Tensor:
        """The compensation with an int32 bias folded in (``acc + bias = dot - (comp - bias)``), mod 2^32."""
        if int_bias is None:
            return self.comp
        c = self.comp.to(torch.int64)
        c[:self.n] -= int_bias.to(torch.int64)
        return wrap_i32(c)


@dataclass
class PackedExperts:
    """A stack of int8 expert weights ``[E, K, N]`` (given as the checkpoint's ``[E, N, K]``), each packed as
    :class:`PackedWeight`, one after the other in ``data``; ``comp`` int32 ``[E, panels * 64]``."""

    data: torch.Tensor
    comp: torch.Tensor
    e: int
    n: int
    k: int

    @classmethod
    def pack(cls, w_enk: torch.Tensor) -> "PackedExperts":
        _check_weights("PackedExperts.pack", w_enk, "[E, N, K]")
        e, n, k = w_enk.shape
        per = native.library().w8a8_packed_bytes(n, k)
        data = _buffer(e * per)
        comp = torch.empty(e, -(-n // NR) * NR, dtype=torch.int32)
        for g in range(e):
            _pack_into(w_enk[g], data[g * per:(g + 1) * per], comp[g])
        return cls(data=data, comp=comp, e=e, n=n, k=k)

    @property
    def per_expert(self) -> int:
        return self.data.numel() // self.e

    def expert(self, g: int) -> PackedWeight:
        per = self.per_expert
        return PackedWeight(data=self.data[g * per:(g + 1) * per], comp=self.comp[g], n=self.n, k=self.k, absmax=128)


def run(kind: int, x2: torch.Tensor, w: PackedWeight, out_dtype: torch.dtype, *, deq: torch.Tensor | None = None,
        comp: torch.Tensor | None = None, pertoken: torch.Tensor | None = None, fbias: torch.Tensor | None = None,
        recip: torch.Tensor | None = None, offset: torch.Tensor | None = None, scale_out: torch.Tensor | None = None,
        out: torch.Tensor | None = None, n_threads: int | None = None, check_finite: bool = False) -> torch.Tensor:
    """The fused Linear on 2-D rows ``x2 [M, K]`` (see the module docstring); ``[M, N]`` of ``out_dtype``.

    ``kind``: :func:`dynamic_kind` / :data:`IN_STATIC` of x's dtype, or :data:`IN_CODES` (int8 ``x2``).
    ``deq`` fp32 ``[N]`` (unused for int32 output); ``comp`` defaults to the weight's (no int32 bias);
    ``pertoken`` fp32 ``[M]`` for ``IN_CODES``; ``fbias`` fp32 ``[N]``; ``recip`` / ``offset`` fp32 ``[K]`` for
    the static kinds; ``scale_out`` fp32 ``[M]`` receives the dynamic per-token scales; ``n_threads``: the
    kernel's threads (default: torch's thread count at first use, :func:`threads`). ``check_finite``: raise
    :class:`NonFinite` when a bf16 / fp16 element of ``x2`` is Inf / NaN (the kernel flags it while quantizing:
    no extra pass; without it such rows give the codes of the golden's NaN -> 0 / saturation)."""
    kernel = native.amx_library().w8a8_amx_linear if w.layout == "amx" else native.library().w8a8_linear
    m, k = x2.shape
    n_threads = threads() if n_threads is None else n_threads
    if k != w.k:
        raise ValueError(f"packed.run: x2 of K = {w.k}; got {tuple(x2.shape)}")
    x2 = x2.contiguous()
    y = out if out is not None else torch.empty(m, w.n, dtype=out_dtype)
    comp = w.comp if comp is None else comp
    step = max(64, _WORKSPACE // max(k, 1))
    for r0 in range(0, m, step):
        r1 = min(m, r0 + step)
        rows = x2[r0:r1]
        rc = kernel(kind, rows.data_ptr(), r1 - r0, k, k, _ptr(recip), _ptr(offset), w.data.data_ptr(),
                             comp.data_ptr(), w.n, _ptr(deq),
                             None if pertoken is None else pertoken[r0:r1].data_ptr(), _ptr(fbias),
                             OUT_KIND[out_dtype], y[r0:r1].data_ptr(), w.n,
                             None if scale_out is None else scale_out[r0:r1].data_ptr(), n_threads)
        if rc < 0:
            raise RuntimeError(f"{w.layout} linear failed ({rc}): kind {kind}, rows {tuple(rows.shape)}, N {w.n}")
        if rc == 1 and check_finite:
            raise NonFinite(f"{w.layout} linear: an input element of rows {r0}..{r1 - 1} is not finite")
    return y


class NonFinite(ValueError):
    """:func:`run` with ``check_finite`` met an Inf / NaN input element (the caller reruns the checked path,
    which raises the golden's error naming it)."""


# -- the reference the probes compare with -------------------------------------------------------------------

def _reference_dynamic(x2, w_nk, deq, fbias, out_dtype, scale_out):
    from .gemm import Int8Weight
    from .qmatmul import epilogue
    from .quant import dynamic_quant

    x_q, s = dynamic_quant(x2, scale_out=scale_out)
    acc = torch._int_mm(x_q, Int8Weight(kn=w_nk.mT, absmax=absmax(w_nk)).kn.contiguous())
    return epilogue(acc.to(torch.float32), deq, None, None, s, fbias, out_dtype, I32_MAX + 1)


def _reference_static(x2, w_nk, recip, offset, deq, int_bias, fbias, out_dtype):
    from .qmatmul import epilogue
    from .quant import quantize

    x_q = quantize(x2, recip.to(x2.dtype), offset.to(x2.dtype), dtype="int8", div_mode=False)
    acc = torch._int_mm(x_q, w_nk.mT.contiguous()).to(torch.int64)
    if int_bias is not None:
        acc = acc + int_bias.to(torch.int64)
    return epilogue(acc.to(torch.float32), deq, None, None, None, fbias, out_dtype, I32_MAX + 1)


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        width = {2: torch.int16, 4: torch.int32}[a.element_size()]
        return torch.equal(a.contiguous().view(width), b.contiguous().view(width))
    return torch.equal(a, b)


def probe_rows(w_nk: torch.Tensor, dtype: torch.dtype, rows: int = 8) -> torch.Tensor:
    """Activation rows ``[rows, K]`` of ``dtype`` that reach the kernels' extremes for ``w_nk [N, K]``:
    random normal; all-zero (scale 0, codes 0); ``+-3 sign(w[0])`` (every code +-127 with column 0's
    largest sum); a row of subnormal-scale values (``127 / max`` overflows to Inf: codes saturate); one
    large value among small ones (codes mostly 0, ties); a wide-range row."""
    k = w_nk.shape[1]
    gen = torch.Generator().manual_seed(18)
    x = torch.randn(max(rows, 8), k, generator=gen)
    x[1] = 0.0
    sign = torch.where(w_nk[0] < 0, -1.0, 1.0)
    x[2] = 3.0 * sign
    x[3] = -3.0 * sign
    tiny = 1e-39 if dtype == torch.bfloat16 else 6e-8
    x[4] = torch.randn(k, generator=gen) * tiny
    x[5] = torch.randn(k, generator=gen) * 1e-3
    x[5, k // 2] = 1.0
    x[6] = torch.randn(k, generator=gen) * torch.logspace(-4, 4, k)
    # exact ties: max 127 makes 127 / max = 1, so x * inv = x lands on k + 0.5 (half to even, not up / away)
    x[7] = (torch.arange(k) % 253 - 126).to(torch.float32) + 0.5
    x[7, 0] = 127.0
    return x[:rows].to(dtype)


def probe_dynamic(w: PackedWeight, w_nk: torch.Tensor, deq: torch.Tensor, fbias, x_dtype, out_dtype) -> str:
    """``""`` if the fused dynamic Linear equals the reference on :func:`probe_rows` under both per-token
    scale formulas (which one a call takes depends on its row count), else why not."""
    x = probe_rows(w_nk, x_dtype)
    for scale_out in SCALE_OUTS:
        got = run(dynamic_kind(x_dtype, scale_out), x, w, out_dtype, deq=deq, fbias=fbias)
        if not _bits_equal(got, _reference_dynamic(x, w_nk, deq, fbias, out_dtype, scale_out)):
            return f"{w.layout}: the load-time probe ({scale_out} scale) differed from the reference path"
    return ""


def probe_static(w: PackedWeight, w_nk, recip, offset, deq, int_bias, fbias, x_dtype, out_dtype) -> str:
    x = probe_rows(w_nk, x_dtype)
    got = run(IN_STATIC[x_dtype], x, w, out_dtype, deq=deq, comp=w.comp_with(int_bias), fbias=fbias, recip=recip,
              offset=offset)
    want = _reference_static(x, w_nk, recip, offset, deq, int_bias, fbias, out_dtype)
    return "" if _bits_equal(got, want) else f"{w.layout}: the load-time probe differed from the reference path"


def rounding_values() -> torch.Tensor:
    """fp32 values for the output rounding check: bf16 / fp16 ties to even and to odd, values just off the
    ties, subnormals of both, signed zeros, the largest finite values and their overflow, Inf, NaN."""
    bits = [0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0xBF808000, 0xBF818000,   # bf16 ties / near
            0x00008000, 0x00018000, 0x00000001, 0x807FFFFF, 0x00000000, 0x80000000,    # subnormals, zeros
            0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,    # near max, Inf
            0x7FC00000, 0xFFC00000, 0x7FC12345,                                        # NaN (quiet)
            0x3F801000, 0x3F803000, 0x3F801001, 0x477FEFFF, 0x477FF000, 0x477FE000,    # fp16 ties, max
            0x33800000, 0x33C00000, 0x337FFFFF, 0x38800000, 0x387FC000, 0x387FE000]    # fp16 subnormals
    gen = torch.Generator().manual_seed(3)
    rand = torch.randint(0, 1 << 32, (2048,), dtype=torch.int64, generator=gen)
    allbits = torch.cat([torch.tensor(bits, dtype=torch.int64), rand])
    return wrap_i32(allbits).view(torch.float32)


def _rounding_check(layout: str = "vnni") -> str:
    """The kernels' fp32 -> bf16 / fp16 rounding against NumPy / ml_dtypes (the golden's casts) on
    :func:`rounding_values`: K = 1, weight 1, code 1, so ``v = fp32(1) * deq[n] = deq[n]``."""
    import ml_dtypes
    import numpy as np

    vals = rounding_values()
    n = vals.numel()
    w = PackedWeight.pack(torch.ones(n, 1, dtype=torch.int8), layout)
    one = torch.ones(1, 1, dtype=torch.int8)
    with np.errstate(all="ignore"):
        v = np.float32(1) * vals.numpy()
        for out, np_dtype in ((torch.bfloat16, ml_dtypes.bfloat16), (torch.float16, np.float16)):
            got = run(IN_CODES, one, w, out, deq=vals)[0].view(torch.int16).numpy()
            want = v.astype(np_dtype).view(np.int16)
            nan = np.isnan(v)
            if not (np.array_equal(got[~nan], want[~nan]) and np.array_equal(got[nan], want[nan])):
                bad = int(np.flatnonzero(got != want)[0])
                return (f"{layout} self-test: fp32 -> {out} rounding of {int(vals.view(torch.int32)[bad]) & 0xFFFFFFFF:#010x} "
                        f"gave {int(got[bad]) & 0xFFFF:#06x}, the golden {int(want[bad]) & 0xFFFF:#06x}")
    return ""


@lru_cache(maxsize=None)
def self_test(layout: str = "vnni") -> str:
    """Run every kernel variant of ``layout``'s kernels on small odd shapes against the reference; ``""`` or
    the first failure. The shapes cover K and N tails, partial row tiles, and (``(40, 200, 70)``) more
    than one 32-row AMX block and 64-wide k-block."""
    why = _rounding_check(layout)
    if why:
        return why
    gen = torch.Generator().manual_seed(1)
    for m, k, n in ((7, 37, 67), (13, 129, 130), (1, 4, 1), (40, 200, 70)):
        w_nk = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=gen)
        w = PackedWeight.pack(w_nk, layout)
        deq = torch.rand(n, generator=gen) * 1e-2 + 1e-4
        fbias = torch.randn(n, generator=gen)
        codes = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=gen)
        acc = run(IN_CODES, codes, w, torch.int32)
        if not torch.equal(acc, torch._int_mm(codes, w_nk.mT.contiguous())):
            return f"{layout} self-test: int32 GEMM differs from torch._int_mm at M={m} K={k} N={n}"
        pt = torch.rand(m, generator=gen) + 0.5
        got = run(IN_CODES, codes, w, torch.float32, deq=deq, pertoken=pt, fbias=fbias)
        want = acc.to(torch.float32).mul_(deq).mul_(pt[:, None]).add_(fbias)
        if not _bits_equal(got, want):
            return f"{layout} self-test: int8-codes fp32 epilogue differs at M={m} K={k} N={n}"
        for x_dtype, out, bias in ((torch.bfloat16, torch.bfloat16, fbias), (torch.float16, torch.float16, None),
                                   (torch.bfloat16, torch.float32, None)):
            x = torch.cat([probe_rows(w_nk, x_dtype), torch.randn(m, k, generator=gen).to(x_dtype)])
            for scale_out in SCALE_OUTS:
                got = run(dynamic_kind(x_dtype, scale_out), x, w, out, deq=deq, fbias=bias)
                if not _bits_equal(got, _reference_dynamic(x, w_nk, deq, bias, out, scale_out)):
                    return f"{layout} self-test: dynamic {x_dtype} -> {out} ({scale_out}) differs at K={k} N={n}"
            ib = torch.randint(-1000, 1000, (n,), dtype=torch.int32, generator=gen)
            ints = torch.randint(-140, 140, (m, k), generator=gen).to(x_dtype)   # x + 0.5: exact ties
            for recip, offset, xs in ((torch.rand(k, generator=gen) * 200.0,
                                       torch.randint(-9, 9, (k,), generator=gen).to(torch.float32), x),
                                      (torch.ones(k), torch.full((k,), 0.5), ints)):
                recip, offset = recip.to(x_dtype).to(torch.float32), offset.to(x_dtype).to(torch.float32)
                got = run(IN_STATIC[x_dtype], xs, w, out, deq=deq, comp=w.comp_with(ib), recip=recip, offset=offset)
                if not _bits_equal(got, _reference_static(xs, w_nk, recip, offset, deq, ib, None, out)):
                    return f"{layout} self-test: static {x_dtype} -> {out} differs at K={k} N={n}"
    return ""


@lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """``(True, "")`` where the kernels build, load and pass :func:`self_test` here; else ``(False, why)``."""
    ok, why = native.available()
    if not ok:
        return False, why
    try:
        why = self_test()
    except (RuntimeError, ValueError) as exc:
        why = f"vnni self-test failed: {type(exc).__name__}: {exc}"
    return (not why), why


@lru_cache(maxsize=1)
def amx_available() -> tuple[bool, str]:
    """``(True, "")`` where the VNNI kernels are usable (:func:`available`: the AMX Linear shares their
    quantization and epilogue), the AMX build loads with the tile state granted (:func:`.native.amx_available`)
    and its Linear passes :func:`self_test`; else ``(False, why)``. Only then does any AMX kernel run for a
    weight, and each weight still passes its load-time probe first."""
    ok, why = available()
    if not ok:
        return False, f"amx: needs the VNNI kernels: {why}"
    ok, why = native.amx_available()
    if not ok:
        return False, why
    try:
        why = self_test("amx")
    except (RuntimeError, ValueError) as exc:
        why = f"amx self-test failed: {type(exc).__name__}: {exc}"
    return (not why), why
