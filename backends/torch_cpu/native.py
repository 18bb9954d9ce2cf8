"""torch-cpu's own C kernels (``csrc/w8a8_cpu.c``): built at first use, cached, loaded with ctypes.

The kernels (the exact fused W8A8 Linear and MoE expert chain on AVX-512 VNNI, see the C file's
header) are compiled once per source, compiler and CPU with the system C compiler::

    cc -O2 -march=native -ffp-contract=off -fPIC -shared -pthread w8a8_cpu.c -lm

into ``$XDG_CACHE_HOME/w8a8/`` (default ``~/.cache/w8a8/``) under a name that hashes the source, the
compiler's version line, the flags and this CPU's feature flags, so a cache shared between machines
never hands one CPU another's build. The build is written to a temporary file and renamed into
place (two processes building at once both end with a complete library).

:func:`library` returns the loaded library or raises :class:`NativeUnavailable` saying why not: no
AVX-512 VNNI (or BW / VL) in ``/proc/cpuinfo``, no C compiler (``$CC``, ``cc``, ``gcc``, ``clang``),
a failed build (its first error line), an ABI mismatch. ``W8A8_TORCH_CPU_NATIVE=0`` disables it.

The AMX build (:func:`amx_library`) is the same source compiled with ``-DW8A8_AMX -mamx-tile -mamx-int8``
(its AMX-INT8 tile Linear on), loaded only where ``/proc/cpuinfo`` shows ``amx_tile`` and ``amx_int8`` and
the kernel grants the tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); else
:func:`amx_available` says why. ``W8A8_TORCH_CPU_AMX=0`` disables it.
Nothing here proves the kernels exact: :mod:`.packed` runs the load-time probes before any use.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from .runtime import cpu_flags

ABI = 6
SOURCE = Path(__file__).with_name("csrc") / "w8a8_cpu.c"
FLAGS = ("-O2", "-march=native", "-ffp-contract=off", "-fPIC", "-shared", "-pthread")
REQUIRED_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "f16c")
AMX_FLAGS = ("-DW8A8_AMX", "-mamx-tile", "-mamx-int8")   # the AMX build: the same source, its AMX section on
AMX_REQUIRED_FLAGS = ("amx_tile", "amx_int8")
# a test build: the AMX section on, its tile intrinsics emulated in C from the SDM's pseudo-code (no AMX needed)
AMX_EMULATED_FLAGS = ("-DW8A8_AMX", "-DW8A8_AMX_EMULATE")


class NativeUnavailable(RuntimeError):
    """The C kernels cannot be used here (the message says why)."""


def cache_dir() -> Path:
    from ..cache import cache_dir as writable  # a read-only HOME falls back to a per-user temporary folder

    return writable()


def compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    return None


def _version(cc: str) -> str:
    try:
        r = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
        return (r.stdout.splitlines() or [""])[0]
    except (OSError, subprocess.SubprocessError):
        return ""


def build(cc: str | None = None, *, directory: Path | None = None, extra_flags: tuple = ()) -> Path:
    """Compile the kernels (or find the cached build); the path of the shared library. ``extra_flags``:
    for tests (``-DW8A8_PLANTED_BUG`` builds a kernel the probes must refuse)."""
    flags_used = FLAGS + tuple(extra_flags)
    cc = cc or compiler()
    if cc is None:
        raise NativeUnavailable("no C compiler found ($CC, cc, gcc, clang): the fused kernels are built at first use")
    src = SOURCE.read_bytes()
    flags = cpu_flags()
    key = b"\0".join([src, cc.encode(), _version(cc).encode(), " ".join(flags_used).encode(),
                      " ".join(sorted(flags)).encode()])
    out_dir = directory or cache_dir()
    lib = out_dir / f"w8a8_cpu-{hashlib.sha1(key).hexdigest()[:16]}.so"
    from ..cache import trusted

    if trusted(lib):
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        target = Path(tmp) / lib.name
        try:
            r = subprocess.run([cc, *flags_used, "-o", str(target), str(SOURCE), "-lm"], capture_output=True, text=True,
                               timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            raise NativeUnavailable(f"building {SOURCE.name} with {cc} failed: {type(exc).__name__}: {exc}") from exc
        if r.returncode != 0:
            errors = [line for line in r.stderr.splitlines() if "error" in line] or r.stderr.splitlines() or ["?"]
            raise NativeUnavailable(f"building {SOURCE.name} with {cc} failed: {errors[0][:300]}")
        os.replace(target, lib)
    return lib


_I64, _I32, _P, _F = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_float


def _declare(lib) -> None:
    lib.w8a8_abi.restype = _I32
    lib.w8a8_abi.argtypes = []
    lib.w8a8_packed_bytes.restype = _I64
    lib.w8a8_packed_bytes.argtypes = [_I64, _I64]
    lib.w8a8_swiglu_quant.restype = _I32
    lib.w8a8_swiglu_quant.argtypes = [_P, _I64, _I64, _I32, _F, _I32, _I32, _P, _P]
    lib.w8a8_exp32.restype = _I32
    lib.w8a8_exp32.argtypes = [_P, _P, _I64]
    lib.w8a8_advise_huge.restype = _I32
    lib.w8a8_advise_huge.argtypes = [_P, _I64]
    lib.w8a8_pack.restype = _I32
    lib.w8a8_pack.argtypes = [_P, _I64, _I64, _I64, _P, _P, _I32]
    lib.w8a8_linear.restype = _I32
    lib.w8a8_linear.argtypes = [_I32, _P, _I64, _I64, _I64, _P, _P, _P, _P, _I64, _P, _P, _P, _I32, _P, _I64, _P,
                                _I32]
    lib.w8a8_has_amx.restype = _I32
    lib.w8a8_has_amx.argtypes = []
    lib.w8a8_amx_packed_bytes.restype = _I64
    lib.w8a8_amx_packed_bytes.argtypes = [_I64, _I64]
    lib.w8a8_amx_pack.restype = _I32
    lib.w8a8_amx_pack.argtypes = lib.w8a8_pack.argtypes
    lib.w8a8_amx_tile_config.restype = _I32
    lib.w8a8_amx_tile_config.argtypes = [_I64, _P]
    lib.w8a8_amx_plan.restype = _I32
    lib.w8a8_amx_plan.argtypes = [_I64, _I64, _P]
    if hasattr(lib, "w8a8_amx_emulated_faults"):   # the emulated test build (AMX_EMULATED_FLAGS)
        lib.w8a8_amx_emulated_faults.restype = _I32
        lib.w8a8_amx_emulated_faults.argtypes = []
    if lib.w8a8_has_amx():
        lib.w8a8_amx_request.restype = _I32
        lib.w8a8_amx_request.argtypes = []
        lib.w8a8_amx_linear.restype = _I32
        lib.w8a8_amx_linear.argtypes = lib.w8a8_linear.argtypes
    lib.w8a8_moe_experts.restype = _I32
    lib.w8a8_moe_experts.argtypes = [_P, _P, _P, _P, _P, _I64, _I64, _I64, _P, _P, _P, _P, _P, _P, _I32, _F, _I32,
                                     _I32, _P, _I32]


@lru_cache(maxsize=1)
def _load():
    if os.environ.get("W8A8_TORCH_CPU_NATIVE", "1") == "0":
        return None, "disabled by W8A8_TORCH_CPU_NATIVE=0"
    flags = cpu_flags()
    if not flags:
        return None, "no /proc/cpuinfo flags to confirm AVX-512 VNNI"
    missing = [f for f in REQUIRED_FLAGS if f not in flags]
    if missing:
        return None, f"the CPU lacks {', '.join(missing)} (the fused kernels need AVX-512 VNNI, BW and VL)"
    try:
        path = build()
        lib = ctypes.CDLL(str(path))
    except NativeUnavailable as exc:
        return None, str(exc)
    except OSError as exc:
        return None, f"loading the fused kernels failed: {exc}"
    _declare(lib)
    if lib.w8a8_abi() != ABI:
        return None, f"the fused kernels' ABI is {lib.w8a8_abi()}, this module expects {ABI} (stale build?)"
    return lib, ""


def library():
    """The loaded kernels (ctypes library); :class:`NativeUnavailable` with the reason otherwise."""
    if _OVERRIDE:
        return _OVERRIDE[-1]
    lib, why = _load()
    if lib is None:
        raise NativeUnavailable(why)
    return lib


_OVERRIDE: list = []


class use_library:
    """Run the block on another build of the kernels (tests: a planted bug the probes must catch)::

        with native.use_library(native.load_path(native.build(extra_flags=("-DW8A8_PLANTED_BUG",)))):
            ...
    """

    def __init__(self, lib):
        self.lib = lib

    def __enter__(self):
        _OVERRIDE.append(self.lib)
        return self.lib

    def __exit__(self, *exc):
        _OVERRIDE.pop()
        return False


def load_path(path: Path):
    """A built library loaded and declared (no ABI check beyond :func:`_declare`)."""
    lib = ctypes.CDLL(str(path))
    _declare(lib)
    return lib


def available() -> tuple[bool, str]:
    """``(True, "")`` where the kernels build and load here, else ``(False, why)`` (not yet probed)."""
    lib, why = _load()
    return lib is not None, why


# -- the AMX build ---------------------------------------------------------------------------------------

def request_amx(lib) -> int:
    """Ask the kernel for this process's AMX tile state: ``arch_prctl(ARCH_REQ_XCOMP_PERM,
    XFEATURE_XTILEDATA)`` in the AMX build; 0 or ``-errno``."""
    return lib.w8a8_amx_request()


@lru_cache(maxsize=1)
def _load_amx():
    """``(library, "")`` of the AMX build, with the tile state granted, or ``(None, why)``. In order: the
    switch ``W8A8_TORCH_CPU_AMX=0``; the CPU flags (``amx_tile``, ``amx_int8`` and the VNNI build's,
    in ``/proc/cpuinfo``); the build (``-mamx-tile -mamx-int8``); the ABI; the permission call. No tile
    instruction runs before all of them passed."""
    if os.environ.get("W8A8_TORCH_CPU_AMX", "1") == "0":
        return None, "disabled by W8A8_TORCH_CPU_AMX=0"
    flags = cpu_flags()
    missing = [f for f in AMX_REQUIRED_FLAGS + REQUIRED_FLAGS if f not in flags]
    if missing:
        return None, f"the CPU lacks {', '.join(missing)} (/proc/cpuinfo): no AMX-INT8"
    try:
        lib = ctypes.CDLL(str(build(extra_flags=AMX_FLAGS)))
    except NativeUnavailable as exc:
        return None, f"AMX build: {exc}"
    except OSError as exc:
        return None, f"loading the AMX kernels failed: {exc}"
    _declare(lib)
    if lib.w8a8_abi() != ABI or not lib.w8a8_has_amx():
        return None, f"the AMX kernels' ABI is {lib.w8a8_abi()} (AMX: {lib.w8a8_has_amx()}), this module expects {ABI}"
    rc = request_amx(lib)
    if rc != 0:
        return None, (f"arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) refused the AMX tile state: "
                      f"{os.strerror(-rc) if rc < 0 else rc}")
    return lib, ""


def amx_library():
    """The AMX build (ctypes library) with the tile state granted; :class:`NativeUnavailable` otherwise."""
    lib, why = _load_amx()
    if lib is None:
        raise NativeUnavailable(why)
    return lib


def amx_available() -> tuple[bool, str]:
    """``(True, "")`` where the AMX kernels build, load and got the tile state here (not yet probed)."""
    lib, why = _load_amx()
    return lib is not None, why
