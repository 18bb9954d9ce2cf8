"""The chips whose host tiling the golden mirrors: the platform numbers the kernel-variant rules read.

The CANN host tiling (op_host) picks a kernel from shapes, dtypes, optional inputs and a few platform
numbers: the unified-buffer (UB) size, the vector (AIV) and cube (AIC) core counts. A2 (``ascend910b``)
and A3 (``ascend910_93``, the 910C) run the same ``DAV_2201`` kernels and tiling classes; none of the
tiling code the variants of :mod:`w8a8.variants` read branches on A2 vs A3, so the platforms differ
only in these numbers (docs/kernel-variants.md).

Where the numbers come from (all **not confirmed on a device**: the runtime reads them from
``GetCoreMemSize(UB)`` / ``GetCoreNumAiv()``):

* ``ub_bytes = 196608``: ops-nn UT platform config "Ascend910B", NpuArch 2201, ``"UB_SIZE": 196608``
  (``quant/dynamic_quant/tests/ut/op_host/test_dynamic_quant_tiling.cpp`` @ ``e5c3fa93``).
* A2 ``vector_cores = 40``, ``ai_cores = 20``: the same UT config's ``"CORE_NUM": 40`` (an Ascend910B3 /
  B4-class part; the QBMM knowledge-base file names give 24 AI cores for 910B1/B2, 20 for B3/B4).
* A3 ``vector_cores = 48``, ``ai_cores = 24``: ops-nn
  ``matmul/quant_batch_matmul_v3/op_host/config/ascend910_93/Ascend910_93{81,82,91,92}_24_AiCore_*`` (24 AI
  cores, two vector cores each on DAV_2201).

Vector-core count changes only how rows are spread over cores for every op here except
``moe_finalize_routing`` (its all-bias UB budget holds ``ceil(N / cores)`` index rows) and the
``weight_quant_batchmatmul`` MSD-group N limit; the spread never changes a row's arithmetic.

``qbmm_pertoken_opt_max_m`` is the largest M for which ``npu_quant_matmul`` with a per-token scale runs
its decode ("opt") kernel (epilogue ``acc * (scale * token)``). The threshold ``M <= baseM`` comes from
a closed TBE tiling (ops-nn ``quant_batch_matmul_v3_tiling.cpp:669-694`` @ ``e5c3fa93``): it is **not
derivable from public source**, so it is None here (the golden keeps the basic/TBE epilogue). A user
who reads it from a device's tiling log registers a platform with it (:func:`register`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

NN_COMMIT = "e5c3fa9327ea95ba26d06227e746923580d10921"
"""hicann/ops-nn commit the rules were read from (2026-08-22)."""
TF_COMMIT = "c29bc1069d3252c641e2aa059ec88f392d3f05ac"
"""hicann/ops-transformer commit the rules were read from (2025-11-15)."""
OPP_COMMIT = "517f2e7d0f202f38b76310706cb977ca2388ad21"
"""Ascend/op-plugin commit the torch_npu dispatch was read from (2026-08-21)."""


@dataclass(frozen=True)
class Platform:
    """One chip's numbers as the host tiling reads them (module docstring)."""

    name: str
    """The SoC name the tiling uses, e.g. ``"ascend910_93"``; the value of :attr:`Numerics.platform`."""
    description: str
    vector_cores: int
    """``GetCoreNumAiv()``."""
    ai_cores: int
    """``GetCoreNumAic()`` (cube cores)."""
    ub_bytes: int
    """``GetCoreMemSize(UB)``."""
    qbmm_pertoken_opt_max_m: int | None = None
    """Largest M that runs the QBMM per-token opt kernel, or None (unknown: never selected)."""
    sources: tuple[str, ...] = (f"hicann/ops-nn@{NN_COMMIT}", f"hicann/ops-transformer@{TF_COMMIT}",
                                f"Ascend/op-plugin@{OPP_COMMIT}")
    """The repositories and commits the variant rules of this platform were read from."""

    def __post_init__(self):
        for field in ("vector_cores", "ai_cores", "ub_bytes"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Platform: field '{field}' must be a positive int; got {value!r}")
        m = self.qbmm_pertoken_opt_max_m
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 0):
            raise ValueError(f"Platform: field 'qbmm_pertoken_opt_max_m' must be None or an int >= 0; got {m!r}")

    def replace(self, **changes) -> "Platform":
        return dataclasses.replace(self, **changes)


A3 = Platform(name="ascend910_93", description="Ascend A3 (910C, ascend910_93): 24 AIC / 48 AIV, UB 192 KiB",
              vector_cores=48, ai_cores=24, ub_bytes=196608)
A2 = Platform(name="ascend910b", description="Ascend A2 (910B, ascend910b): 20 AIC / 40 AIV, UB 192 KiB",
              vector_cores=40, ai_cores=20, ub_bytes=196608)

_REGISTRY: dict[str, Platform] = {A3.name: A3, A2.name: A2}


def get(name: str) -> Platform:
    """The registered platform of that name (ValueError naming the known ones otherwise)."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"platform: argument 'name' must be one of {sorted(_REGISTRY)}; got {name!r}") from None


def names() -> tuple[str, ...]:
    """Registered platform names, the default (A3) first."""
    return tuple(_REGISTRY)


def register(platform: Platform) -> Platform:
    """Add (or replace) a platform record, e.g. one with a measured ``qbmm_pertoken_opt_max_m``.

    The two built-in records cannot be replaced (their numbers are what the tests pin)."""
    if not isinstance(platform, Platform):
        raise TypeError("register: argument 'platform' must be a w8a8.platforms.Platform; "
                        f"got {type(platform).__name__}")
    if platform.name in (A2.name, A3.name) and platform != _REGISTRY[platform.name]:
        raise ValueError(f"register: argument 'platform' must not redefine the built-in {platform.name!r}; "
                         "register it under another name")
    _REGISTRY[platform.name] = platform
    return platform
