"""This machine's compute ceilings: the denominators of "ratio to peak" in ``w8a8 bench``.

The int8 and fp64 ceilings are measured by a tiny C program (``peak.c``): independent chains of the
widest int8 dot-product instruction the CPU has (AMX ``TDPBSSD``, else AVX-512 VNNI ``vpdpbusd``) and
of 512-bit fp64 FMAs, on every core. It is compiled once with the system C compiler
(``-O2 -march=native``) into a cache folder. Where no compiler or no AVX-512 is available the
ceilings fall back to the best library kernels (NumPy float64 matmul, ``torch._int_mm``), and the
result says so — a library ceiling is a floor of the real one.

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

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "w8a8"


def _compile() -> Path | None:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    src = Path(__file__).with_name("peak.c")
    tag = hashlib.sha1(src.read_bytes() + cc.encode()).hexdigest()[:12]
    exe = _cache_dir() / f"peak-{tag}"
    if exe.exists():
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peak"
        r = subprocess.run([cc, "-O2", "-march=native", "-pthread", "-o", str(out), str(src)],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            return None
        shutil.move(str(out), exe)
    return exe


def measure(threads: int | None = None, iters: int = 20_000_000) -> Peaks:
    """Measure the int8 and fp64 ceilings on ``threads`` threads (default: every core)."""
    threads = threads or os.cpu_count() or 1
    exe = _compile()
    found: dict[str, float] = {}
    if exe is not None:
        r = subprocess.run([str(exe), str(threads), str(iters)], capture_output=True, text=True, timeout=300)
        for line in r.stdout.splitlines():
            name, _, value = line.partition(" ")
            try:
                found[name] = float(value)
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
    return Peaks(int8=float(int8 or 0.0), fp64=float(fp64), int8_unit=int8_unit, fp64_unit=fp64_unit,
                 method=method, threads=threads)


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
