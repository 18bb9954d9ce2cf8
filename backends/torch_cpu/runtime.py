"""torch on this CPU: availability, the int8 GEMM path, and the thread policy.

Nothing here imports torch at module import time; :func:`torch_module` does, once.

**Path selection** (docs/performance-amx.md): the fastest exact int8 GEMM of torch on the CPU
depends on the instruction set.

* ``"qlinear"`` — ``torch.ops.onednn.qlinear_prepack`` + ``qlinear_pointwise`` with weights packed
  once at load time. oneDNN runs it on AMX-INT8 tiles (1.2-4 TOPS on a 2-core Emerald Rapids), but
  without AMX it falls back to a reference kernel (92 s for one 2048^3 GEMM on an AVX-512 Zen 4).
  It returns ``fp32(acc)`` (not the int32 accumulator), so it can only feed float epilogues.
* ``"int_mm"`` — ``torch._int_mm`` (oneDNN ``gemm_api``, AVX-512 VNNI): the exact int32 accumulator,
  0.8-1.5 TOPS, no prepack.
* ``"vnni"`` — torch-cpu's own fused kernels (:mod:`.native`, :mod:`.packed`): the Linear paths'
  quantization, an exact u8 x s8 ``vpdpbusd`` GEMM on weights prepacked at load and the fp32 epilogue
  in one pass over each row block. Built at first use with the system C compiler; used only after a
  self-test and a per-weight load-time probe equal the reference path bit for bit. The int8 GEMM ops
  (``quant_matmul``, ``int_matmul``) stay on ``torch._int_mm``.

* ``"amx"`` — the same fused Linear with its integer GEMM on AMX-INT8 tiles (``_tile_dpbusd``, exact
  int32 accumulation; weights prepacked in the tile layout): the AMX build of the same C source, used
  only where ``/proc/cpuinfo`` shows ``amx_tile`` / ``amx_int8``, the kernel grants the tile state
  (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``) and its self-test and each weight's
  load-time probe equal the reference path (:func:`amx_status` says why not). The MoE expert chain and
  the int8 GEMM ops stay on their own paths.

``auto`` picks ``"amx"`` where :func:`amx_status` passes, else ``"qlinear"`` where the CPU reports AMX-INT8 (``amx_int8`` in ``/proc/cpuinfo``
and ``torch.cpu._is_amx_tile_supported()``), else ``"vnni"`` where those kernels build and pass their
self-test (AVX-512 VNNI and a C compiler: :func:`vnni_status` says why not), else ``"int_mm"``.
``W8A8_TORCH_CPU_GEMM`` (``auto`` / ``int_mm`` / ``qlinear`` / ``vnni`` / ``amx``) overrides the default of
:class:`~backends.torch_cpu.TorchCpuBackend`.

**Thread policy**, two parts, both measured on this 2-core Zen 4 shared with other jobs:

1. *BLAS pools.* NumPy's OpenBLAS threads and torch's OpenMP threads fight over the cores when both
   pools are active in one process: after a call each pool keeps its workers spinning for a while,
   and the other pool's next kernel runs on what is left. A torch ``[256 x 2048] x [2048 x 2048]``
   dynamic W8A8 linear alternating with two 384^3 NumPy float32 matmuls took a median 18-96 ms
   against 3.2-4.6 ms alone; capping OpenBLAS at one thread *around each torch call* only got it to
   11-13 ms (the already spinning workers keep spinning); capping the process's BLAS pools at one
   thread for good gave 3.5-3.8 ms (no slowdown) while the NumPy matmuls went from a 1.2 ms best
   (2 threads, alone) to a steady 2.2 ms; ``torch.set_num_threads(1)`` instead gave 6.2-6.7 ms. So
   on its first use the backend caps the BLAS pools of the process (OpenBLAS, MKL, BLIS —
   threadpoolctl's ``"blas"`` API) at one thread, once and for the life of the process.
   ``W8A8_TORCH_CPU_THREADS=keep`` leaves them alone.
2. *torch threads per stage.* The GEMMs run on all of torch's threads (``torch.get_num_threads()``
   on first use: :func:`gemm_threads`). The memory-bound elementwise stages (casts, row max,
   quantize, epilogue) run on :func:`op_threads`: one thread where torch has at most 4, else all.
   Each of those ops is a ~0.1-1.5 ms OpenMP region on 2048^2 elements; when another process holds
   one of the two cores, every region waits a scheduler time slice for its second thread: the
   2048^3 dynamic linear took a median 140 ms with every stage on 2 threads against 67 ms with the
   elementwise stages on one (the bf16 matmul anchor: 87 ms). On idle cores the single thread
   costs ~4 ms per call (stages 8.8 ms vs ~4.5 ms, next to a 21 ms GEMM).
   ``W8A8_TORCH_CPU_ELEMENTWISE_THREADS`` (a count or ``all``) overrides it.
"""

from __future__ import annotations

import importlib
import os
from functools import lru_cache

GEMM_PATHS = ("auto", "int_mm", "qlinear", "vnni", "amx")
INSTALL_HINT = "pip install 'w8a8[torch]'"
MIN_TORCH = (2, 2)  # torch._int_mm on the CPU


def torch_module():
    """The ``torch`` module (imported on first use)."""
    import torch

    return torch


@lru_cache(maxsize=1)
def availability() -> tuple[bool, str]:
    """``(True, "")`` when torch imports and has the CPU int8 kernels this backend needs."""
    try:
        torch = importlib.import_module("torch")
    except ModuleNotFoundError as exc:
        if exc.name == "torch":
            return False, f"torch is not installed ({INSTALL_HINT})"
        return False, f"import torch failed: {type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - e.g. torch_npu autoload without CANN: say exactly why
        first = str(exc).splitlines()[0] if str(exc) else ""
        return False, f"import torch failed: {type(exc).__name__}: {first}"
    version = getattr(torch, "__version__", "?")
    try:
        major, minor = (int(p) for p in version.split("+")[0].split(".")[:2])
    except ValueError:
        major, minor = MIN_TORCH
    if (major, minor) < MIN_TORCH:
        return False, f"torch {version} is too old: torch._int_mm on the CPU needs torch >= 2.2 ({INSTALL_HINT})"
    if not hasattr(torch, "_int_mm"):
        return False, f"torch {version} has no torch._int_mm (the exact int8 GEMM this backend uses)"
    return True, ""


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of ``/proc/cpuinfo`` (empty where there is none, e.g. macOS)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@lru_cache(maxsize=1)
def has_amx_int8() -> bool:
    """AMX-INT8 usable by oneDNN: the CPU flag, torch's own check and the kernel's permission."""
    torch = torch_module()
    flags = cpu_flags()
    if flags and "amx_int8" not in flags:
        return False
    cpu = getattr(torch, "cpu", None)
    supported = getattr(cpu, "_is_amx_tile_supported", None)
    if supported is None or not supported():
        return False
    init = getattr(cpu, "_init_amx", None)  # Linux: arch_prctl(ARCH_REQ_XCOMP_PERM) for the tiles
    return bool(init()) if init is not None else True


def has_qlinear() -> bool:
    torch = torch_module()
    return hasattr(torch.ops, "onednn") and hasattr(torch.ops.onednn, "qlinear_pointwise") \
        and torch.backends.mkldnn.is_available()


def vnni_status() -> tuple[bool, str]:
    """Whether torch-cpu's fused VNNI kernels are usable here: ``(True, "")`` or ``(False, why)``."""
    from .packed import available  # the kernels' module sits above this one (imported on use)

    return available()


_ISA = (("amx_int8", "AMX-INT8"), ("amx_bf16", "AMX-BF16"), ("avx512_vnni", "AVX-512 VNNI"),
        ("avx512_bf16", "AVX-512 BF16"), ("avx512f", "AVX-512F"), ("avx_vnni", "AVX-VNNI"), ("avx2", "AVX2"))


def isa(flags: frozenset[str] | None = None) -> str:
    """The int8 / bf16 instruction sets of this CPU that torch-cpu's paths care about, from ``/proc/cpuinfo``
    (``"AVX-512 VNNI, AVX-512 BF16, AVX-512F, AVX2"`` on a Zen 4), or ``"unknown"`` without flags."""
    flags = cpu_flags() if flags is None else flags
    found = [name for flag, name in _ISA if flag in flags]
    return ", ".join(found) if flags else "unknown"


def gemm_paths() -> dict[str, str]:
    """Every GEMM path of the dense Linears: ``""`` where usable here, else why not (the selection's own
    reasons); ``int_mm`` is always usable."""
    out = {}
    for path, status in (("amx", amx_status), ("vnni", vnni_status)):
        ok, why = status()
        out[path] = "" if ok else why
    out["qlinear"] = "" if has_amx_int8() and has_qlinear() else (
        "oneDNN's qlinear without AMX-INT8 runs a reference kernel (~4000x slower): not used" if has_qlinear()
        else "this torch has no torch.ops.onednn.qlinear_pointwise")
    out["int_mm"] = ""
    return out


def amx_status() -> tuple[bool, str]:
    """Whether torch-cpu's own AMX-INT8 tile kernels are usable here: ``(True, "")`` or ``(False, why)``
    (the CPU flags, the build, the ``arch_prctl`` permission, the self-test: :func:`.packed.amx_available`)."""
    from .packed import amx_available

    return amx_available()


def resolve_gemm_path(requested: str | None = None) -> str:
    """``"int_mm"``, ``"qlinear"``, ``"vnni"`` or ``"amx"`` for ``requested`` (default:
    ``$W8A8_TORCH_CPU_GEMM`` or ``auto``)."""
    requested = requested or os.environ.get("W8A8_TORCH_CPU_GEMM", "auto")
    if requested not in GEMM_PATHS:
        raise ValueError(f"torch-cpu: argument 'gemm' must be one of {GEMM_PATHS}; got {requested!r}")
    if requested == "auto":
        if amx_status()[0]:
            return "amx"
        if has_amx_int8() and has_qlinear():
            return "qlinear"
        return "vnni" if vnni_status()[0] else "int_mm"
    if requested == "amx":
        ok, why = amx_status()
        if not ok:
            raise ValueError(f"torch-cpu: gemm='amx' is not usable here: {why}")
        return requested
    if requested == "vnni":
        ok, why = vnni_status()
        if not ok:
            raise ValueError(f"torch-cpu: gemm='vnni' is not usable here: {why}")
        return requested
    if requested == "qlinear" and not has_qlinear():
        raise ValueError("torch-cpu: gemm='qlinear' needs torch.ops.onednn.qlinear_pointwise (a torch "
                         "build with oneDNN); this torch has none")
    return requested


# -- threads ------------------------------------------------------------------------------------

_claimed: list = []


def thread_policy() -> str:
    """``"cap_blas"`` (default) or ``"keep"`` (``$W8A8_TORCH_CPU_THREADS``)."""
    policy = os.environ.get("W8A8_TORCH_CPU_THREADS", "cap_blas")
    if policy not in ("cap_blas", "keep"):
        raise ValueError(f"W8A8_TORCH_CPU_THREADS must be 'cap_blas' or 'keep'; got {policy!r}")
    return policy


def claim_threads() -> dict:
    """Apply the thread policy once per process (see the module docstring); return what it did.

    Returns ``{"policy", "blas_before": [(library, threads)], "torch_threads", "elementwise_threads"}``.
    Idempotent: later calls return the first call's record. Without threadpoolctl nothing is capped.
    """
    if _claimed:
        return _claimed[0]
    policy = thread_policy()
    full = torch_module().get_num_threads()
    record = {"policy": policy, "blas_before": [], "torch_threads": full,
              "elementwise_threads": _elementwise_threads(full)}
    if policy == "cap_blas":
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            record["policy"] = "keep (threadpoolctl is not installed)"
        else:
            blas = ThreadpoolController().select(user_api="blas")
            record["blas_before"] = [(lib.internal_api, lib.num_threads) for lib in blas.lib_controllers]
            record["limiter"] = blas.limit(limits=1)  # kept: restore_original_limits() undoes it
    _claimed.append(record)
    return record


def _elementwise_threads(full: int) -> int:
    """Threads for the memory-bound stages: ``$W8A8_TORCH_CPU_ELEMENTWISE_THREADS`` (an integer, or
    ``all``), default 1 where torch has at most 4 threads, else all of them."""
    value = os.environ.get("W8A8_TORCH_CPU_ELEMENTWISE_THREADS", "")
    if value == "all":
        return full
    if value:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"W8A8_TORCH_CPU_ELEMENTWISE_THREADS must be a positive integer or 'all'; got {value!r}")
        return min(n, full)
    return 1 if full <= 4 else full


class _torch_threads:
    """Set torch's intra-op thread count for a block, restore it after (no-op when unchanged)."""

    def __init__(self, key: str):
        self.key = key

    def __enter__(self):
        torch = torch_module()
        want = claim_threads()[self.key]
        self.prev = torch.get_num_threads()
        if want != self.prev:
            torch.set_num_threads(want)
        return self

    def __exit__(self, *exc):
        torch = torch_module()
        if torch.get_num_threads() != self.prev:
            torch.set_num_threads(self.prev)
        return False


def op_threads() -> _torch_threads:
    """The thread count of an op's body: the elementwise one (its GEMMs raise it, :func:`gemm_threads`)."""
    return _torch_threads("elementwise_threads")


def gemm_threads() -> _torch_threads:
    """All of torch's threads (as found on first use) for a GEMM."""
    return _torch_threads("torch_threads")
