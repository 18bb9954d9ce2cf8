"""``torch-npu``: Ascend 910C (Atlas A3) through torch_npu.

Two halves (docs/backends.md):

* **lowering** (:mod:`.lowering`, :mod:`.lowering_moe`, :mod:`.plan`): the golden's checked
  arguments -> the exact torch_npu calls, load steps and constraints; pure Python + NumPy, tested
  anywhere. :meth:`TorchNpuBackend.lower` returns the plan of a call without touching a device.
  Every lowered op is registered with the backend (one loader: lower, transfer, load steps; one
  implementation: the plan's timed calls); the golden's check runs first, in
  :meth:`backends.base.Backend.prepare`.
* **execution** (:mod:`.execution`, :mod:`.environment`): imports torch / torch_npu on first use
  (never when this package is imported), runs the plan's load steps once outside the timed
  region and its calls inside it.

Importing this package imports neither torch nor torch_npu. ``available()`` says precisely why
the backend cannot run (:func:`.environment.probe`: torch missing, torch_npu missing, CANN missing
with the import's own error, another import failure, no NPU device) and caches the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from w8a8 import dtypes as _dt
from w8a8.numerics import ASCEND

from ..base import Backend, Unsupported, implements, loads
from ._lower_common import Options
from .lowering import EP_LOWERINGS, LOWERINGS, UNSUPPORTED, lower
from .plan import ConstraintError, ConstraintTypeError, EpPlan, Plan

__all__ = ["TorchNpuBackend", "Plan", "EpPlan", "ConstraintError", "ConstraintTypeError", "LOWERINGS",
           "EP_LOWERINGS", "UNSUPPORTED"]

# Dtype arguments the device takes, per op (a value outside raises in lowering anyway; this answers
# ``supports`` without arrays).
_DTYPE_SUPPORT: dict[str, dict[str, tuple[str, ...]]] = {
    "quant_matmul": {"output_dtype": ("int8", "float16", "bfloat16", "int32")},
    "grouped_matmul": {"output_dtype": ("int8", "float16", "bfloat16", "int32")},
    "dequantize": {"output_dtype": ("float16", "bfloat16")},
    "anti_quant": {"dst_dtype": ("float16", "bfloat16"), "src_dtype": ("int8", "int4")},
    "dynamic_quant": {"dst_type": ("int8", "int4")},
    "dynamic_quant_asymmetric": {"dst_type": ("int8", "int4")},
    "quantize": {"dtype": ("int8", "uint8", "int32", "int4")},
    "w8a8_dynamic_linear": {"x": ("bfloat16", "float16")},
    "w8a8_static_linear": {"x": ("bfloat16", "float16")},
}


class TorchNpuBackend(Backend):
    """Ascend 910C through torch_npu (see the package docstring).

    Parameters
    ----------
    weight_format : ``"auto"`` (SGLang's NZ rule, ND fallback with its reason), ``"ND"`` or ``"NZ"``
        (:class:`~backends.torch_npu._lower_common.Options`).
    device_index : the NPU to run on (``npu:<index>``).
    runtime : an :class:`~backends.torch_npu.execution.Runtime` to use instead of probing the
        environment (tests pass a recording stand-in for torch_npu).
    ep_launcher : what runs an EP plan's rank plans (``run(plans) -> per-rank results``); default: an
        :class:`~backends.torch_npu.execution_ep.HcclLauncher` over the visible NPUs (tests pass a
        :class:`~backends.torch_npu.execution_ep.ThreadLauncher` on the recording stand-in).

    Numerics
    --------
    Declares :data:`w8a8.ASCEND`, the record the golden's defaults describe: this is the device it
    describes. None of its fields is confirmed on hardware from this repository; each is inferred
    from sources (hicann/ops-nn kernels, Ascend/op-plugin adapters; docs/golden.md). By kernel source: ``round_mode``
    (CAST_RINT), ``quant_codes`` (``127 / amax`` then multiply), ``int32_bias`` (in the cube), ``epilogue_order``. By
    adapter
    source: ``fp19_scale="adapter"`` and ``fp19_round_mode=0`` (the lowering packs explicitly where the
    adapter would). Path-dependent in the kernel sources: ``scale_out`` (``1/inv`` on the main path,
    ``amax * (1/127)`` on the double-buffer path, within 1 ulp) and ``routing_quant_round`` (RINT on
    the full-row path, truncate-to-fp16 then half-away on the column-tiled one). From goldens only:
    ``requant_clamp9``, ``saturate``. Not confirmed anywhere: ``zero_row`` (the integer the device
    writes for NaN), ``zero_point_position`` (``quantize(div_mode=True)``). ``nan_policy="raise"`` and
    ``transcendental="float64"`` are golden conventions: the device computes through NaN, and its exp
    units are approximations (a tolerance, not a bitwise matter).
    """

    name = "torch-npu"
    description = ("Ascend 910C (Atlas A3) via torch_npu: lowering to the exact torch_npu calls (pure, tested "
                   "anywhere) + execution on the NPU")
    device = "npu"
    numerics = ASCEND

    def __init__(self, weight_format: str = "auto", device_index: int = 0, runtime=None, ep_launcher=None):
        self.options = Options(weight_format)
        self.device_index = int(device_index)
        self._runtime = runtime
        self._ep_launcher = ep_launcher
        self._probe = None

    # -- identity ---------------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """``(True, "")`` or ``(False, precise reason)``; probed once, then cached."""
        if self._runtime is not None or self._ep_launcher is not None:
            return True, ""
        if self._probe is None:
            from .environment import probe

            self._probe = probe()
        return self._probe.as_tuple()

    def supports(self, op: str, **dtypes) -> bool:
        if op not in self.ops():
            return False
        for arg, value in dtypes.items():
            allowed = _DTYPE_SUPPORT.get(op, {}).get(arg)
            if allowed is not None and value is not None and _dt.name(value) not in allowed:
                return False
        return True

    def info(self) -> dict:
        info = super().info()
        info["unsupported_ops"] = dict(UNSUPPORTED)
        info["weight_format"] = self.options.weight_format
        return info

    # -- lowering -----------------------------------------------------------------------------------
    def lower(self, op: str, *args, **kwargs) -> Plan:
        """The torch_npu plan of ``op`` on golden-style arguments (no device needed)."""
        kwargs.pop("numerics", None)
        return lower(op, *args, options=self.options, **kwargs)

    # -- the boundary ----------------------------------------------------------------------------------
    def runtime(self):
        """The execution runtime (imports torch_npu on first use); Unsupported with the reason if none."""
        if self._runtime is None:
            ok, reason = self.available()
            if not ok:
                raise Unsupported(f"torch-npu: {reason}")
            from .execution import connect

            self._runtime = connect(self._probe.torch, self._probe.torch_npu, self.device_index)
        return self._runtime

    def ep_launcher(self):
        """What runs an EP plan's rank plans: the one given, else one process per rank over HCCL."""
        if self._ep_launcher is None:
            ok, reason = self.available()
            if not ok:
                raise Unsupported(f"torch-npu: {reason}")
            from .execution_ep import HcclLauncher

            self._ep_launcher = HcclLauncher(int(self._probe.torch.npu.device_count()))
        return self._ep_launcher

    def to_device(self, array):
        from .. import torch_common

        return torch_common.to_torch(array, device=self.runtime().device)

    def from_device(self, value):
        from .. import torch_common
        from . import execution

        if isinstance(value, PlanResult):
            return execution.read_back(self.runtime(), value.plan, value.outputs)
        if isinstance(value, EpResult):
            return value.plan.finish(value.per_rank)
        return torch_common.from_torch(value)

    def _is_device_array(self, value) -> bool:
        from .. import torch_common

        return isinstance(value, (PlanResult, EpResult)) or torch_common.is_tensor(value)

    def synchronize(self) -> None:
        """Wait for the device (an EP plan's rank processes have finished when their launcher returns)."""
        if self._runtime is not None or self._ep_launcher is None:
            self.runtime().sync()

    # -- the ops: one lowering per op, the plan loaded untimed, its calls timed -------------------------
    @loads(*LOWERINGS)
    def _load_plan(self, a, *, op: str):
        """Lower the golden's checked Args (raising before any device call), transfer the plan's inputs and
        run its load steps: ``(plan, env)``."""
        from . import execution

        plan = LOWERINGS[op](a, self.options)
        rt = self.runtime()
        env = self.transfer({name: inp.array for name, inp in plan.inputs.items()})
        return plan, execution.load(rt, plan, env)

    @implements(*LOWERINGS)
    def _run_plan(self, loaded):
        """The device work: the plan's timed torch_npu calls (read back by :meth:`from_device`)."""
        from . import execution

        plan, env = loaded
        return PlanResult(plan, execution.run(self.runtime(), plan, env))

    @loads(*EP_LOWERINGS)
    def _load_ep_plan(self, a, *, op: str):
        """Lower an EP op (raising before any device call); each rank process transfers its own inputs."""
        return EP_LOWERINGS[op](a, self.options)

    @implements(*EP_LOWERINGS)
    def _run_ep_plan(self, plan):
        """The ranks' plans, run by the launcher (their timed calls, each rank in its own process)."""
        return EpResult(plan, self.ep_launcher().run(plan.ranks))

    def notes(self, op: str, loaded) -> dict:
        return {"plan": loaded if isinstance(loaded, EpPlan) else loaded[0]}


@dataclass
class PlanResult:
    """The device outputs of a plan's calls, read back on the host by the plan (fixups, reshapes)."""

    plan: Plan
    outputs: object


@dataclass
class EpResult:
    """The finished per-rank results of an EP plan (rank order), put in the golden's form by the plan."""

    plan: EpPlan
    per_rank: list
