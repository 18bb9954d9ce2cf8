"""``torch-cpu``: the dense W8A8 ops in PyTorch on the CPU, bit-identical to the golden.

Numerics: :data:`w8a8.ASCEND`, the default record, reproduced exactly (the traps of torch that would
break it, and their fixes, are listed in :mod:`backends.torch_cpu.arith`). The golden run with the
same record is this backend's bitwise reference: ``tests/backends/test_torch_cpu_dense.py``.

Layers of a call (see :mod:`backends.base`):

1. ``prepare`` checks the NumPy arguments exactly as the golden does (:mod:`.checks`: same
   exceptions, same messages) and applies the BLAS thread cap once per process (:mod:`.runtime`);
2. ``to_device``: zero-copy ``torch.from_numpy`` views (bf16 through an int16 view);
3. ``load``: the serving stack's once-per-weight work — the int8 weight laid out for the GEMM
   (column-major ``[K, N]`` for ``torch._int_mm``, or prepacked for ``onednn.qlinear_pointwise``
   on AMX-INT8 machines), ``max|w|``, the Linear paths' scales and biases in the model dtype;
4. ``_<op>``: the device work in torch (:mod:`.quant`, :mod:`.gemm`, :mod:`.qmatmul`,
   :mod:`.layout`, :mod:`.linear`); ``Prepared.run`` runs it with the elementwise stages on
   ``runtime.op_threads()`` and the GEMMs on all of torch's threads (measurements in :mod:`.runtime`).

The int8 GEMM path (``gemm=``): ``"auto"`` (default, or ``$W8A8_TORCH_CPU_GEMM``) takes
``"qlinear"`` only where the CPU has AMX-INT8 and ``"int_mm"`` everywhere else (the qlinear
reference kernel without AMX is ~4000x slower: 92 s for 2048^3 on a Zen 4).

This module imports no torch: the submodules that do are imported on first use.
"""

from __future__ import annotations

import importlib

from w8a8.numerics import ASCEND, Numerics

from ..base import Backend, Prepared, Unsupported
from ..ops import OPS
from . import runtime
from .lowbit_ops import LowbitOps
from .moe_ops import MoeOps

_LOADED_WEIGHTS = {"quant_matmul", "w8a8_dynamic_linear", "w8a8_static_linear"}


def _mod(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def _tdtype(name: str):
    return _mod("arith").torch_dtype_of(name)


class TorchCpuBackend(MoeOps, LowbitOps, Backend):
    """PyTorch on the CPU (see the module docstring). ``gemm``: ``"auto"``, ``"int_mm"`` or ``"qlinear"``."""

    name = "torch-cpu"
    description = ("PyTorch on the CPU: torch._int_mm int8 GEMM (prepacked oneDNN qlinear on AMX-INT8), "
                   "fp32 epilogues bit-identical to the golden")
    device = "cpu"
    numerics: Numerics = ASCEND

    def __init__(self, gemm: str | None = None):
        if gemm is not None and gemm not in runtime.GEMM_PATHS:
            raise ValueError(f"TorchCpuBackend: argument 'gemm' must be one of {runtime.GEMM_PATHS}; got {gemm!r}")
        self._gemm_request = gemm
        self._gemm: str | None = None

    # -- identity ---------------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        return runtime.availability()

    def ops(self) -> tuple[str, ...]:
        return tuple(op for op in OPS if callable(getattr(self, "_" + op, None)))

    @property
    def gemm_path(self) -> str:
        """The int8 GEMM path in use: ``"int_mm"`` or ``"qlinear"`` (resolved on first use)."""
        if self._gemm is None:
            self._gemm = runtime.resolve_gemm_path(self._gemm_request)
        return self._gemm

    def info(self) -> dict:
        info = super().info()
        if info["available"]:
            info["gemm_path"] = self.gemm_path
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

        return from_torch(value)

    def _is_device_array(self, value) -> bool:
        from ..torch_common import is_tensor

        return is_tensor(value)

    def call(self, op: str, /, *args, **kwargs):
        return self.prepare(op, *args, **kwargs)()

    def prepare(self, op: str, /, *args, **kwargs) -> Prepared:
        """Check the arguments as the golden does, then convert, load, and hand back the device work."""
        if op not in self.ops():
            return super().prepare(op, *args, **kwargs)  # raises Unsupported
        ok, reason = self.available()
        if not ok:
            raise Unsupported(f"backend '{self.name}' is not available: {reason}")
        numerics = kwargs.pop("numerics", None)
        if numerics is not None and numerics != self.numerics:
            raise Unsupported(f"backend '{self.name}' implements numerics '{self.numerics.name}' only; "
                              f"got {numerics.differences(self.numerics) or numerics.name}")
        threads = runtime.claim_threads()
        own_check = getattr(self, "_check_" + op, None)  # ops of the MoE / low-bit mixins
        dargs, dkw = own_check(args, kwargs) if own_check else _mod("checks").check(op, args, kwargs)
        view_as = dkw.pop("_view_as", None)
        prepared = super().prepare(op, *dargs, **dkw)
        if view_as is not None:  # layout ops ran on raw integers of the element width
            finish = prepared.finish
            prepared.finish = lambda out: finish(out).view(view_as)
        run = prepared.run

        def run_with_threads():  # elementwise stages on runtime.op_threads(), GEMMs on all threads
            with runtime.op_threads():
                return run()

        prepared.run = run_with_threads
        prepared.notes.update(gemm=self.gemm_path if op in _LOADED_WEIGHTS else None, threads=threads["policy"],
                              torch_threads=threads["torch_threads"],
                              elementwise_threads=threads["elementwise_threads"])
        return prepared

    def load(self, op: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        own_load = getattr(self, "_load_" + op, None)  # ops of the MoE / low-bit mixins
        if own_load is not None:
            return own_load(args, kwargs)
        if op == "quant_matmul":
            x1, x2, scale = args
            return (x1, _mod("gemm").Int8Weight.load(x2, self.gemm_path), scale), kwargs
        if op == "w8a8_dynamic_linear":
            x, weight, weight_scale = args
            layer = _mod("linear").load_dynamic(x.dtype, weight, weight_scale, kwargs["bias"], self.gemm_path)
            return (x, layer), {}
        if op == "w8a8_static_linear":
            x, weight = args
            layer = _mod("linear").load_static(x.dtype, weight, kwargs["input_scale_reciprocal"],
                                               kwargs["input_offset"], kwargs["deq_scale"], kwargs["bias"],
                                               self.gemm_path)
            return (x, layer), {}
        return args, kwargs

    # -- the ops (device space: torch tensors in, torch tensors out) -------------------------------
    def _dynamic_quant(self, x, *, smooth_scales=None, group_index=None, dst_type="int8"):
        return _mod("quant").dynamic_quant(x, smooth_scales=smooth_scales, group_index=group_index, dst_type=dst_type)

    def _dynamic_quant_asymmetric(self, x, *, smooth_scales=None, group_index=None, dst_type="int8"):
        return _mod("quant").dynamic_quant_asymmetric(x, smooth_scales=smooth_scales, group_index=group_index,
                                                      dst_type=dst_type)

    def _quantize(self, x, scales, zero_points=None, *, dtype="int8", div_mode=True):
        return _mod("quant").quantize(x, scales, zero_points, dtype=dtype, div_mode=div_mode)

    def _dequantize(self, y, scale, zero_point=None, *, output_dtype="float32"):
        return _mod("quant").dequantize(y, scale, zero_point, output_dtype=_tdtype(output_dtype))

    def _anti_quant(self, x, scale, *, offset=None, dst_dtype="float16", src_dtype="int8"):
        return _mod("quant").anti_quant(x, scale, offset=offset, dst_dtype=_tdtype(dst_dtype), src_dtype=src_dtype)

    def _trans_quant_param(self, scale, offset=None, *, round_mode=0):
        return _mod("arith").trans_quant_param(scale, offset, round_mode=round_mode)

    def _int_matmul(self, a, b, *, name="int_matmul"):
        # ``name``: the golden's ``op`` argument (the op named in errors), renamed here because
        # ``Backend.prepare`` takes the op name as its first argument.
        return _mod("gemm").int_matmul(a, b, op=name)

    def _quant_matmul(self, x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype="int8"):
        return _mod("qmatmul").quant_matmul(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias,
                                            output_dtype=_tdtype(output_dtype))

    def _format_cast_nz(self, w, *, c0):
        return _mod("layout").format_cast_nz(w, c0=c0)

    def _nz_to_nd(self, w_nz, shape):
        return _mod("layout").nz_to_nd(w_nz, shape)

    def _w8a8_dynamic_linear(self, x, layer):
        return _mod("linear").w8a8_dynamic_linear(x, layer)

    def _w8a8_static_linear(self, x, layer):
        return _mod("linear").w8a8_static_linear(x, layer)


__all__ = ["TorchCpuBackend"]
