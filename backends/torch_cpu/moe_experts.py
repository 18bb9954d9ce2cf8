"""The per-expert exact int8 GEMM of the MoE ops (``grouped_matmul`` and the fused W8A8 MoE layer).

torch has no grouped int8 GEMM on the CPU (``torch._grouped_mm`` rejects int8, an int8 ``bmm`` wraps:
measured with torch 2.13.0), so every expert's rows are one GEMM with that expert's weight, in one
Python loop over the non-empty experts. Two exact kernels:

* ``"int_mm"`` — ``torch._int_mm`` (oneDNN ``gemm_api``, :func:`backends.torch_cpu.gemm.int_matmul`) on the
  expert's row-major ``[K, N]`` weight: the int32 accumulator itself.
* ``"fbgemm"`` — the expert's weight prepacked once at load for fbgemm (``quantized::linear_prepack`` on the
  fbgemm engine, per-channel scale 1, zero point 0) and run as
  ``quantized::linear_with_input_q_dq_qweight_dq_output_fp32(x, 1.0, 128, packed)`` with the int8 rows
  passed as floats: fbgemm quantizes them to ``u8 = x + 128`` (exact), accumulates ``u8 x s8`` in int32,
  subtracts ``128 * column sums`` (exact: ``K * 255 * 128 < 2^31`` for every ``K < 65536``) and returns
  ``float(acc) * 1.0 * 1.0`` — exactly ``fp32(acc)``, which is all a float epilogue needs. This holds
  where fbgemm accumulates ``u8 x s8`` products straight into int32 (its AVX512-VNNI ``vpdpbusd`` kernels);
  its AVX2 kernels add product pairs in int16 with saturation (``vpmaddubsw``) and would be wrong. So the
  path is taken only where the CPU reports ``avx512_vnni`` *and* a load-time probe with saturating
  operands (``x = 127`` -> ``u8 255``, weights of one sign at +-127/-128, pairs summing past int16) equals
  ``_int_mm``; otherwise ``int_mm``. Exactness over shapes (K = 1 .. 4096, N = 1 .. 257, 1 .. 64 rows, random
  and extreme operands) is pinned by ``tests/backends/test_torch_cpu_moe.py``.

Measured on this 2-core Zen 4 (AVX512-VNNI, no AMX), 2 threads, 16 experts of ``[4096, 4096]`` int8 streamed
from memory, best of 7 (ms per expert): 6 rows 0.56 (fbgemm) vs 1.42 (``_int_mm``, row-major weight; 3.1
column-major); 12 rows 0.72 vs 1.67; 48 rows 2.17 vs 3.01; 200 rows 8.7 vs 14.6. At DeepSeek-V4-Flash's
6-48 rows per expert the fbgemm kernel streams the weights at ~29 GB/s against ~11 GB/s. Prepacking costs
~80 ms per ``[4096, 4096]`` expert, once, at load.

* ``"vnni"`` — the experts packed for torch-cpu's own VNNI kernel (:class:`.packed.PackedExperts`): the same
  exact ``u8 x s8`` sums with the ``128 * column sum`` compensation, in int32 (so it also gives the int32
  accumulator), and the kernel the fused W8A8 MoE layer runs its whole per-expert chain in
  (:mod:`.moe_layer`). Taken where the kernels build and pass their self-test and a load-time probe of
  expert 0 (the saturating operands above) equals ``_int_mm``.

``W8A8_TORCH_CPU_MOE_GEMM`` = ``auto`` (default: vnni where usable, else fbgemm where proven exact, else
int_mm) / ``int_mm`` / ``fbgemm`` / ``vnni`` (refused with a ValueError where not usable). Outputs that need
the int32 accumulator itself (``int32`` / int8-requant outputs, an int32 bias) use ``int_mm`` or ``vnni``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass, field

import torch

from .gemm import _mm, int_matmul
from .runtime import cpu_flags, gemm_threads

MOE_GEMM_PATHS = ("auto", "int_mm", "fbgemm", "vnni")
_W_ABSMAX = 128   # |int8|: K * 128 * 128 < 2^31 for every K < 65536, so _int_mm never overflows here


def fbgemm_usable() -> tuple[bool, str]:
    """Whether this CPU / torch can run the fbgemm path at all (the probe at load decides the rest)."""
    flags = cpu_flags()
    if flags and "avx512_vnni" not in flags:
        return False, "the CPU has no AVX512-VNNI (fbgemm's int16 pair sums would saturate)"
    if not flags:
        return False, "no /proc/cpuinfo flags to confirm AVX512-VNNI"
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return False, "this torch has no fbgemm quantized engine"
    for name in ("linear_prepack", "linear_with_input_q_dq_qweight_dq_output_fp32"):
        if not hasattr(torch.ops.quantized, name):
            return False, f"this torch has no quantized::{name}"
    if not hasattr(torch, "_make_per_channel_quantized_tensor"):
        return False, "this torch has no quantized tensors (torch._make_per_channel_quantized_tensor)"
    return True, ""


def resolve_path(requested: str | None = None) -> str:
    """``"int_mm"``, ``"fbgemm"`` or ``"vnni"`` for ``requested`` (default: ``$W8A8_TORCH_CPU_MOE_GEMM`` or
    ``auto``)."""
    requested = requested or os.environ.get("W8A8_TORCH_CPU_MOE_GEMM", "auto")
    if requested not in MOE_GEMM_PATHS:
        raise ValueError(f"torch-cpu: W8A8_TORCH_CPU_MOE_GEMM must be one of {MOE_GEMM_PATHS}; got {requested!r}")
    if requested == "int_mm":
        return requested
    if requested in ("vnni", "auto"):
        from .packed import available

        ok, why = available()
        if ok:
            return "vnni"
        if requested == "vnni":
            raise ValueError(f"torch-cpu: the vnni MoE GEMM path is not usable here: {why}")
    ok, why = fbgemm_usable()
    if requested == "fbgemm" and not ok:
        raise ValueError(f"torch-cpu: the fbgemm MoE GEMM path is not usable here: {why}")
    return "fbgemm" if ok else "int_mm"


@contextlib.contextmanager
def path_override(path: str):
    """Load the MoE experts of the calls in this block on ``path`` (sets ``$W8A8_TORCH_CPU_MOE_GEMM``;
    the path is resolved at load, in ``prepare``). For tests and benchmarks."""
    before = os.environ.get("W8A8_TORCH_CPU_MOE_GEMM")
    os.environ["W8A8_TORCH_CPU_MOE_GEMM"] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("W8A8_TORCH_CPU_MOE_GEMM", None)
        else:
            os.environ["W8A8_TORCH_CPU_MOE_GEMM"] = before


def _pack(w_nk: torch.Tensor):
    """fbgemm's prepacked form of an int8 ``[N, K]`` weight (per-channel scale 1, zero point 0)."""
    n = w_nk.shape[0]
    with warnings.catch_warnings():   # the quantized tensor API warns that it is deprecated
        warnings.simplefilter("ignore")
        q = torch._make_per_channel_quantized_tensor(w_nk.contiguous(), torch.ones(n, dtype=torch.float64),
                                                     torch.zeros(n, dtype=torch.int64), 0)
        previous = torch.backends.quantized.engine
        torch.backends.quantized.engine = "fbgemm"
        try:
            return torch.ops.quantized.linear_prepack(q, None)
        finally:
            torch.backends.quantized.engine = previous


def _fbgemm_f32(x: torch.Tensor, packed) -> torch.Tensor:
    return torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(x.to(torch.float32), 1.0, 128, packed)


def _probe_rows(w_nk: torch.Tensor) -> torch.Tensor:
    """int8 rows that saturate an int16 pair sum (255 * 127 * 2 > 32767) and drive channel 0 to its extremes."""
    k = w_nk.shape[1]
    rows = [torch.full((k,), 127, dtype=torch.int8), torch.full((k,), -128, dtype=torch.int8),
            torch.where(w_nk[0] < 0, -128, 127).to(torch.int8),   # drives channel 0 to its largest sum
            torch.where(w_nk[0] < 0, 127, -128).to(torch.int8)]
    return torch.stack(rows)


def _probe(w_nk: torch.Tensor, packed) -> bool:
    """fbgemm equals ``_int_mm`` on :func:`_probe_rows`."""
    x = _probe_rows(w_nk)
    return torch.equal(_fbgemm_f32(x, packed), torch._int_mm(x, w_nk.t().contiguous()).to(torch.float32))


@dataclass
class ExpertGemm:
    """An int8 expert weight stack loaded for the per-expert GEMM (see the module docstring).

    ``kn``: int8 ``[E, K, N]`` row-major per expert (the ``int_mm`` path); ``packed``: fbgemm's packed
    weights, one per expert (the ``fbgemm`` path); ``vnni``: the :class:`.packed.PackedExperts` (the
    ``vnni`` path); ``note``: why the path is what it is."""

    path: str
    k: int
    n: int
    kn: torch.Tensor | None = None
    packed: list = field(default_factory=list)
    note: str = ""
    vnni: object = None   # packed.PackedExperts (the "vnni" path)

    @classmethod
    def load(cls, w: torch.Tensor, *, layout: str, path: str = "auto") -> "ExpertGemm":
        """``w``: int8 ``[E, K, N]`` (``layout="ekn"``) or the checkpoint's ``[E, N, K]`` (``"enk"``)."""
        enk = w if layout == "enk" else w.transpose(1, 2)
        e, n, k = enk.shape
        path = resolve_path(None if path == "auto" else path)
        note = ""
        if path in ("fbgemm", "vnni") and (e == 0 or n == 0 or k == 0):
            path, note = "int_mm", f"{path}: empty dimensions"
        if path == "vnni":
            experts, note = _vnni_load(enk)
            if experts is not None:
                return cls(path="vnni", k=k, n=n, vnni=experts)
            path = "int_mm"
        if path == "fbgemm":
            try:
                packed = [_pack(enk[g]) for g in range(e)]
                exact = _probe(enk[0].contiguous(), packed[0])
            except RuntimeError as exc:   # a torch whose quantized ops refuse this weight or call
                packed, exact = [], False
                note = f"fbgemm failed at load ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]})"
            if exact:
                return cls(path="fbgemm", k=k, n=n, packed=packed)
            note = note or "fbgemm: the load-time probe differed from torch._int_mm (a saturating kernel?)"
            path = "int_mm"
        return cls(path="int_mm", k=k, n=n, kn=enk.transpose(1, 2).contiguous(), note=note)

    @property
    def experts(self) -> int:
        if self.vnni is not None:
            return self.vnni.e
        return self.kn.shape[0] if self.kn is not None else len(self.packed)

    def f32(self, g: int, x: torch.Tensor, *, threads: bool = True) -> torch.Tensor:
        """``fp32(x @ W[g])`` exactly (a new fp32 tensor), ``x`` int8 ``[rows, K]``. ``threads``: on all of
        torch's threads (:func:`~.runtime.gemm_threads`); False: on the current count, changing nothing
        global (for worker threads that each run experts single-threaded)."""
        if self.path == "int_mm":
            return self.i32(g, x, threads=threads).to(torch.float32)
        if self.path == "vnni":
            return _vnni_run(self, g, x, torch.float32, threads)
        if not threads:
            return _fbgemm_f32(x, self.packed[g])
        with gemm_threads():
            return _fbgemm_f32(x, self.packed[g])

    def i32(self, g: int, x: torch.Tensor, op: str = "grouped_matmul", *, threads: bool = True) -> torch.Tensor:
        """The int32 accumulator ``x @ W[g]`` (the ``int_mm`` and ``vnni`` paths); ``threads`` as :meth:`f32`."""
        if self.path == "vnni":
            return _vnni_run(self, g, x, torch.int32, threads)
        if threads:
            return int_matmul(x, self.kn[g], op=op, b_absmax=_W_ABSMAX)
        if 0 in x.shape or self.n == 0:
            return torch.zeros(x.shape[0], self.n, dtype=torch.int32)
        return _mm(x, self.kn[g])   # one piece: K * 128 * 128 < 2^31


def _vnni_load(enk: torch.Tensor):
    """``(PackedExperts, "")``, or ``(None, why)`` where packing fails or the probe of expert 0 differs."""
    from . import packed

    try:
        experts = packed.PackedExperts.pack(enk)
        w0 = enk[0].contiguous()
        x = _probe_rows(w0)
        got = packed.run(packed.IN_CODES, x, experts.expert(0), torch.int32)
        exact = torch.equal(got, torch._int_mm(x, w0.t().contiguous()))
    except (RuntimeError, ValueError) as exc:
        return None, f"vnni failed at load ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]})"
    return (experts, "") if exact else (None, "vnni: the load-time probe differed from torch._int_mm")


_ONES: dict = {}


def _vnni_run(w: ExpertGemm, g: int, x: torch.Tensor, out: torch.dtype, threads: bool) -> torch.Tensor:
    """Expert ``g``'s exact ``x @ W[g]``: int32, or ``fp32(acc)`` (the epilogue ``fp32(acc) * 1.0``)."""
    from . import packed

    if 0 in x.shape:
        return torch.zeros(x.shape[0], w.n, dtype=out)
    ones = _ONES.get(w.n)
    if ones is None:
        ones = _ONES.setdefault(w.n, torch.ones(w.n, dtype=torch.float32))
    return packed.run(packed.IN_CODES, x, w.vnni.expert(g), out, deq=ones, n_threads=None if threads else 1)
