"""This machine's ceilings: the denominators of "% of roofline" in ``w8a8 bench``.

The int8 and fp64 ceilings are measured by a tiny C program (``peak.c``): independent chains of every
int8 dot-product instruction the CPU has (AVX-512 VNNI ``vpdpbusd``; AMX ``TDPBSSD`` where the kernel
grants the tile state), of AMX ``TDPBF16PS`` (bf16) and of 512-bit fp64 FMAs, on every core. ``int8``
is the widest int8 unit; ``int8_vnni`` / ``int8_amx`` / ``bf16_amx`` each unit's own (0: not present),
and :meth:`Peaks.int8_for` picks the one a call's GEMM path ran on. It is compiled once with the system C compiler
(``-O2 -march=native``) into a cache folder. Where no compiler or no AVX-512 is available the
ceilings fall back to the best library kernels (NumPy float64 matmul, ``torch._int_mm``), and the
result says so — a library ceiling is a floor of the real one.

The memory-bandwidth ceilings come from the same program (``peak bw``): a STREAM-like read-only
kernel (every thread sums its own buffer with 64-byte loads, over and over, passes alternating between
one stream on the hardware prefetcher and four streams with software L2 prefetches — on the Zen 4 VM
this was written on the second reads memory at 28-30 GB/s per core against 20-22 for the first; buffers
on transparent huge pages, as torch-cpu's packed weights; the best pass of all threads reading at once) at three working-set sizes taken from this CPU's caches (sysfs): half the
L2 per thread (``bw_l2``), half the last-level cache in total (``bw_llc``: data that fits in cache) and
eight times the last-level cache (``bw_dram``: data that does not). Read-only, because that is what a
GEMM does with its weights (the bytes that bound a small-M Linear or a small-T MoE layer). Without a
compiler they are measured with NumPy sums over the same sizes (a floor, and the result says so).

On an accelerator the denominator is the vendor's peak (:data:`VENDOR_PEAKS`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from conformance.processes import pdeathsig  # the probe binary dies with this process

VENDOR_PEAKS = {
    # dense int8 / fp64 ops per second, vendor datasheets
    "ascend-910c": {"int8": 1.6e15, "fp64": None, "source": "Huawei Ascend 910C (2 dies), INT8 ~1600 TOPS (vendor)"},
    "nvidia-h200": {"int8": 1.979e15, "fp64": 6.7e13, "source": "NVIDIA H200 SXM datasheet: INT8 1979 TOPS dense, FP64 67 TF"},
}


@dataclass
class Peaks:
    int8: float
    fp64: float
    int8_unit: str
    fp64_unit: str
    method: str
    threads: int
    bw_l2: float = 0.0       # bytes/s, read, working set within the L2s
    bw_llc: float = 0.0      # bytes/s, read, working set within the last-level cache ("in cache")
    bw_dram: float = 0.0     # bytes/s, read, working set 8x the last-level cache ("out of cache")
    l2_bytes: int = 0        # the L2 of one core
    llc_bytes: int = 0       # the last-level cache (all cores)
    bw_method: str = "not measured"
    int8_vnni: float = 0.0   # ops/s of each int8 unit measured (int8 is the widest of them)
    int8_amx: float = 0.0
    bf16_amx: float = 0.0    # flop/s, AMX TDPBF16PS (the bf16 matmul peers' unit on AMX hosts)

    UNITS = {"int8_amx": "AMX-INT8", "int8_vnni_avx512": "AVX-512 VNNI"}

    def int8_for(self, gemm: str | None) -> tuple[float, str]:
        """The int8 ceiling of the unit a GEMM path runs on, and that unit's name: ``"amx"`` / ``"qlinear"``
        the AMX tiles, ``"vnni"`` / ``"int_mm"`` AVX-512 VNNI, None (unknown) the widest measured."""
        if gemm in ("amx", "qlinear") and self.int8_amx:
            return self.int8_amx, "AMX-INT8"
        if gemm in ("vnni", "int_mm") and self.int8_vnni:
            return self.int8_vnni, "AVX-512 VNNI"
        return self.int8, self.UNITS.get(self.int8_unit, "")

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def best(self, other: "Peaks") -> "Peaks":
        """Every ceiling the larger of two measurements (a ceiling is the best rate seen: measure at the
        start and at the end of a long run on a shared machine and keep the best)."""
        merged = Peaks(**self.as_dict())
        for key in ("int8", "fp64", "bw_l2", "bw_llc", "bw_dram", "int8_vnni", "int8_amx", "bf16_amx"):
            setattr(merged, key, max(getattr(self, key), getattr(other, key)))
        return merged

    @classmethod
    def from_dict(cls, d: dict) -> "Peaks":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def _cache_dir() -> Path:
    from backends.cache import cache_dir  # a read-only HOME falls back to a per-user temporary folder

    return cache_dir()


def _compile() -> Path | None:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    src = Path(__file__).with_name("peak.c")
    tag = hashlib.sha1(src.read_bytes() + cc.encode()).hexdigest()[:12]
    try:
        exe = _cache_dir() / f"peak-{tag}"
    except OSError:
        return None  # no writable folder at all: the peaks are estimated (the method says so)
    from backends.cache import trusted

    if trusted(exe):
        return exe
    try:
        with tempfile.TemporaryDirectory(dir=exe.parent) as tmp:   # same folder: the rename is atomic
            out = Path(tmp) / "peak"
            r = subprocess.run([cc, "-O2", "-march=native", "-pthread", "-o", str(out), str(src)],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                return None
            os.replace(out, exe)
    except (OSError, subprocess.SubprocessError):
        return None
    return exe


def cache_sizes() -> tuple[int, int]:
    """``(L2 bytes of one core, last-level cache bytes)`` from sysfs (0 where unknown)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes: dict[int, int] = {}
    try:
        for index in sorted(base.glob("index*")):
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes[level] = int(text.rstrip("KMG")) * mult
    except (OSError, ValueError):
        pass
    l2 = sizes.get(2, 0)
    return l2, sizes.get(max(sizes), 0) if sizes else 0


def bandwidth_sizes(threads: int, l2: int, llc: int) -> dict[str, int]:
    """Bytes per thread of the three bandwidth working sets (see the module docstring)."""
    l2 = l2 or (1 << 20)
    llc = llc or (32 << 20)
    return {"bw_l2": max(64 << 10, l2 // 2), "bw_llc": max(256 << 10, llc // 2 // threads),
            "bw_dram": max(64 << 20, 8 * llc // threads)}


def measure_bandwidth(threads: int | None = None, seconds: float = 0.4) -> dict:
    """The read-bandwidth ceilings (bytes/s) at the three working sets, on ``threads`` threads."""
    threads = threads or os.cpu_count() or 1
    l2, llc = cache_sizes()
    sizes = bandwidth_sizes(threads, l2, llc)
    exe = _compile()
    out = {"l2_bytes": l2, "llc_bytes": llc}
    if exe is not None:
        for name, size in sizes.items():
            r = subprocess.run([str(exe), "bw", str(threads), str(size), str(seconds)], capture_output=True, text=True,
                               timeout=120, preexec_fn=pdeathsig)
            for line in r.stdout.splitlines():
                key, _, value = line.partition(" ")
                if key == "bw_read":
                    out[name] = float(value)
        if all(name in out for name in sizes):
            out["bw_method"] = (f"C read kernel (peak.c bw), {threads} threads, per-thread buffers "
                                + ", ".join(f"{k[3:]} {v >> 10} KiB" for k, v in sizes.items()))
            return out
    import numpy as np

    for name, size in sizes.items():   # one thread: a floor
        a = np.ones(size // 8)
        a.sum()
        t0 = time.perf_counter()
        a.sum()
        out[name] = a.nbytes / (time.perf_counter() - t0)
    out["bw_method"] = "numpy sum, one thread (no C compiler: a floor of the real ceilings)"
    return out


def dram_bandwidth(threads: int | None = None, seconds: float = 0.2) -> float:
    """The out-of-cache read bandwidth alone (bytes/s; 0.0 without a compiler): a probe quick enough to
    interleave with the timed rounds of a bandwidth-bound case, on a machine whose memory bandwidth
    changes from minute to minute (a VM sharing its host's memory channels)."""
    threads = threads or os.cpu_count() or 1
    exe = _compile()
    if exe is None:
        return 0.0
    size = bandwidth_sizes(threads, *cache_sizes())["bw_dram"]
    r = subprocess.run([str(exe), "bw", str(threads), str(size), str(seconds)], capture_output=True, text=True,
                       timeout=120, preexec_fn=pdeathsig)
    for line in r.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "bw_read":
            return float(value)
    return 0.0


def measure(threads: int | None = None, iters: int = 10_000_000, bandwidth: bool = True, repeats: int = 5) -> Peaks:
    """Measure the int8 and fp64 ceilings (and the bandwidth ones) on ``threads`` threads (default:
    every core): the best of ``repeats`` runs of ``iters`` iterations each."""
    threads = threads or os.cpu_count() or 1
    exe = _compile()
    found: dict[str, float] = {}
    if exe is not None:
        for _ in range(repeats):   # a ceiling is the best rate seen: a busy machine only lowers a run
            r = subprocess.run([str(exe), str(threads), str(iters)], capture_output=True, text=True, timeout=300,
                               preexec_fn=pdeathsig)
            for line in r.stdout.splitlines():
                name, _, value = line.partition(" ")
                try:
                    found[name] = max(found.get(name, 0.0), float(value))
                except ValueError:
                    continue
    int8_unit = "int8_amx" if "int8_amx" in found else ("int8_vnni_avx512" if "int8_vnni_avx512" in found else None)
    fp64_unit = "fp64_fma_avx512" if "fp64_fma_avx512" in found else None
    method = "C microbenchmark (peak.c)"
    int8 = found.get(int8_unit) if int8_unit else None
    fp64 = found.get(fp64_unit) if fp64_unit else None
    if int8 is None or fp64 is None:
        lib_int8, lib_fp64 = _library_peaks()
        if int8 is None:
            int8, int8_unit = lib_int8, "library: torch._int_mm 2048^3" if lib_int8 else "unknown"
        if fp64 is None:
            fp64, fp64_unit = lib_fp64, "library: numpy float64 matmul 2048^3"
        method = "mixed: C microbenchmark where available, library kernels elsewhere (a floor of the real ceiling)"
    peaks = Peaks(int8=float(int8 or 0.0), fp64=float(fp64), int8_unit=int8_unit, fp64_unit=fp64_unit,
                  method=method, threads=threads, int8_vnni=found.get("int8_vnni_avx512", 0.0),
                  int8_amx=found.get("int8_amx", 0.0), bf16_amx=found.get("bf16_amx", 0.0))
    if bandwidth:
        for key, value in measure_bandwidth(threads).items():
            setattr(peaks, key, value)
    return peaks


def _library_peaks() -> tuple[float | None, float]:
    import numpy as np

    n = 2048
    a = np.random.default_rng(0).standard_normal((n, n))
    a @ a
    t0 = time.perf_counter()
    a @ a
    fp64 = 2 * n**3 / (time.perf_counter() - t0)
    try:
        import torch
    except ImportError:
        return None, fp64
    x = torch.randint(-128, 127, (n, n), dtype=torch.int8)
    torch._int_mm(x, x)
    t0 = time.perf_counter()
    torch._int_mm(x, x)
    return 2 * n**3 / (time.perf_counter() - t0), fp64
