"""``torch-cpu``: every golden op in PyTorch on the CPU, bit-identical to the golden.

Numerics: :data:`w8a8.ASCEND`, the default record, reproduced exactly (the traps of torch that would
break it, and their fixes, are listed in :mod:`backends.torch_cpu.arith`). The golden run with the
same record is this backend's bitwise reference: ``tests/backends/test_torch_cpu_dense.py``.

Layers of a call (the one mechanism of :meth:`backends.base.Backend.prepare`):

1. the golden's argument checks (same exceptions, same messages), run by the base class;
2. each op's registered loader (:mod:`.dense_ops`, :mod:`.moe_ops`, :mod:`.lowbit_ops`): the checked
   Args mapped to the device functions' arguments, moved with zero-copy ``torch.from_numpy`` views
   (bf16 through an int16 view), and the serving stack's once-per-weight work — the int8 weight laid
   out for the GEMM (column-major ``[K, N]`` for ``torch._int_mm``, or prepacked for
   ``onednn.qlinear_pointwise`` on AMX-INT8 machines), ``max|w|``, the Linear paths' scales and
   biases in the model dtype;
3. each op's registered implementation: the device work in torch (:mod:`.quant`, :mod:`.gemm`,
   :mod:`.qmatmul`, :mod:`.layout`, :mod:`.linear`, ...); ``Prepared.run`` runs it with the
   elementwise stages on ``runtime.op_threads()`` and the GEMMs on all of torch's threads, the BLAS
   thread cap applied once per process (measurements in :mod:`.runtime`).

The int8 GEMM path (``gemm=``): ``"auto"`` (default, or ``$W8A8_TORCH_CPU_GEMM``) takes ``"amx"``
(torch-cpu's own AMX-INT8 tile kernels) where the CPU has AMX and they pass their checks, else
``"qlinear"`` where the CPU has AMX-INT8, else ``"vnni"`` where the fused AVX-512 VNNI kernels work,
else ``"int_mm"`` (the qlinear reference kernel without AMX is ~4000x slower: 92 s for 2048^3 on a
Zen 4); :mod:`.runtime` has the rules.

Weights packed once: :meth:`TorchCpuBackend.bind` (:mod:`.bound`). A direct op call
(``backend.w8a8_dynamic_linear(x, w, s)``) checks, packs and probes the weight on every call — tens to hundreds of
milliseconds for a 4096 x 4096 weight, against ~1 ms for the call itself at M = 16.

This module imports no torch: the submodules that do are imported on first use.
"""

from __future__ import annotations

from w8a8.numerics import ASCEND, Numerics

from ..base import Backend, Prepared
from . import runtime
from .dense_ops import Bits, DenseOps
from .lowbit_ops import LowbitOps
from .moe_ops import MoeOps

_LOADED_WEIGHTS = {"quant_matmul", "w8a8_dynamic_linear", "w8a8_static_linear"}


class TorchCpuBackend(DenseOps, MoeOps, LowbitOps, Backend):
    """PyTorch on the CPU (see the module docstring). ``gemm``: ``"auto"``, ``"int_mm"`` or ``"qlinear"``."""

    name = "torch-cpu"
    description = ("PyTorch on the CPU: torch._int_mm int8 GEMM (prepacked oneDNN qlinear on AMX-INT8; "
                   "fused AVX-512 VNNI kernels on the 'vnni' path), fp32 epilogues bit-identical to the golden")
    device = "cpu"
    numerics: Numerics = ASCEND

    bind_memo: dict | None = None  # while a bound MoE / grouped-matmul call loads: its memo (.bound)

    def __init__(self, gemm: str | None = None):
        if gemm is not None and gemm not in runtime.GEMM_PATHS:
            raise ValueError(f"TorchCpuBackend: argument 'gemm' must be one of {runtime.GEMM_PATHS}; got {gemm!r}")
        self._gemm_request = gemm
        self._gemm: str | None = None

    # -- identity ---------------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        return runtime.availability()

    @property
    def gemm_path(self) -> str:
        """The int8 GEMM path of the dense Linears: ``"amx"``, ``"vnni"``, ``"qlinear"`` or ``"int_mm"``
        (resolved on first use; a Linear whose load-time probe fails falls back: ``Prepared.notes["gemm"]`` /
        ``Bound.gemm_path`` say what a call took)."""
        if self._gemm is None:
            self._gemm = runtime.resolve_gemm_path(self._gemm_request)
        return self._gemm

    def info(self) -> dict:
        info = super().info()
        if info["available"]:
            info["gemm_path"] = self.gemm_path
            info["gemm"] = {"isa": runtime.isa(), "path": self.gemm_path, "paths": runtime.gemm_paths()}
            info["thread_policy"] = runtime.thread_policy()
        return info

    # -- the boundary -----------------------------------------------------------------------------
    def to_device(self, array):
        from ..torch_common import to_torch

        if not array.flags.writeable:  # torch.from_numpy warns on read-only memory: copy (untimed)
            array = array.copy()
        return to_torch(array)

    def from_device(self, value):
        from ..torch_common import from_torch

        if isinstance(value, Bits):  # a layout op's raw integers, read back as their dtype
            return from_torch(value.tensor).view(value.dtype)
        return from_torch(value)

    def _is_device_array(self, value) -> bool:
        from ..torch_common import is_tensor

        return isinstance(value, Bits) or is_tensor(value)

    # -- weights packed once -----------------------------------------------------------------------
    def bind(self, op: str, /, *args, **kwargs):
        """:meth:`Backend.bind`: the dense Linears pack and probe their weight once per activation dtype,
        the MoE layer and the grouped matmul memoise their weights' packing (:mod:`.bound`)."""
        super().bind(op, *args, **kwargs)
        from .bound import bind

        return bind(self, op, args, kwargs)

    def notes(self, op: str, loaded) -> dict:
        """The GEMM path the call takes (``"amx"``, ``"vnni"``, ``"qlinear"``, ``"int_mm"``; the Linears' own, after
        their load-time probes)."""
        if op in ("w8a8_dynamic_linear", "w8a8_static_linear"):
            from .linear import path_taken

            return {"gemm": path_taken(loaded[1])}
        return {}

    # -- the thread policy of a call ----------------------------------------------------------------
    def prepare(self, op: str, /, *args, **kwargs) -> Prepared:
        """:meth:`Backend.prepare`, the device work run under the thread policy (:mod:`.runtime`)."""
        prepared = super().prepare(op, *args, **kwargs)
        threads = runtime.claim_threads()
        run = prepared.run

        def run_with_threads():  # elementwise stages on runtime.op_threads(), GEMMs on all threads
            with runtime.op_threads():
                return run()

        prepared.run = run_with_threads
        gemm = prepared.notes.get("gemm") or (self.gemm_path if op in _LOADED_WEIGHTS else None)
        prepared.notes.update(gemm=gemm, threads=threads["policy"],
                              torch_threads=threads["torch_threads"],
                              elementwise_threads=threads["elementwise_threads"])
        return prepared


__all__ = ["TorchCpuBackend"]
