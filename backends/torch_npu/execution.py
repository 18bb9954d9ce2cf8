"""Execution of a lowered :class:`~backends.torch_npu.plan.Plan` on torch_npu.

Needs torch and torch_npu (given through a :class:`Runtime`, never imported here at module level),
and a device: nothing in this module runs on a machine without an Ascend NPU, except through a
runtime whose ``torch_npu`` is a stand-in (the tests use a recording fake on the CPU).

* :func:`load` runs the plan's load steps once (transposes, ``npu_format_cast(w, 29)`` with
  ``torch_npu.npu.config.allow_internal_format = True``, ``npu_trans_quant_param``), then waits for
  the device so that none of it leaks into a timed run;
* :func:`run` makes the timed calls in order and returns the output tensors (the caller synchronizes);
* :func:`read_back` copies the outputs to the host (raw FRACTAL_NZ storage for ``format_cast_nz``)
  and applies the plan's host-side steps (:meth:`Plan.finish`).

Function names: ``torch_npu.<fn>`` -> ``getattr(torch_npu, fn)``; ``torch.<fn>`` -> ``getattr(torch, fn)``;
``Tensor.<method>`` -> the method of the first argument. :class:`~backends.torch_npu.plan.T` arguments
are the named device tensors, :class:`~backends.torch_npu.plan.DType` arguments ``torch.<name>``.
"""

from __future__ import annotations

import functools

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import torch_common
from .plan import Call, DType, Group, Plan, T


@dataclass
class Runtime:
    """What execution needs: the torch and torch_npu modules, the device, a device barrier, and (expert
    parallelism) the HCCL communicator names of the rank's groups (:class:`~.plan.Group`)."""

    torch: Any
    torch_npu: Any
    device: str = "npu:0"
    synchronize: Callable[[], None] | None = None
    groups: dict[str, str] = field(default_factory=dict)

    def sync(self) -> None:
        (self.synchronize or self.torch.npu.synchronize)()


def connect(torch, torch_npu, device_index: int = 0) -> Runtime:
    """The runtime of NPU ``device_index`` (sets it as the current device)."""
    device = f"npu:{int(device_index)}"
    torch.npu.set_device(device)
    return Runtime(torch, torch_npu, device, torch.npu.synchronize)


def resolve(rt: Runtime, value, env: dict):
    """A plan argument as the device call takes it."""
    if isinstance(value, T):
        return env[value.name]
    if isinstance(value, DType):
        return getattr(rt.torch, value.name)
    if isinstance(value, Group):
        if value.name not in rt.groups:
            raise RuntimeError(f"torch-npu execution: the plan needs the HCCL group {value.name!r}; this runtime "
                               f"has {sorted(rt.groups)} (an EP plan runs in a rank process: execution_ep)")
        return rt.groups[value.name]
    if isinstance(value, list):
        return [resolve(rt, v, env) for v in value]
    if isinstance(value, tuple):
        return tuple(resolve(rt, v, env) for v in value)
    if isinstance(value, dict):
        return {k: resolve(rt, v, env) for k, v in value.items()}
    return value


def function(rt: Runtime, fn: str) -> Callable:
    """The callable behind a plan function name."""
    module, _, name = fn.partition(".")
    if module == "torch_npu":
        return getattr(rt.torch_npu, name)
    if module == "torch":   # dotted names too: torch.nn.functional.softplus, torch.ops._C_ascend.<op>
        return functools.reduce(getattr, name.split("."), rt.torch)
    if module == "Tensor":
        return lambda first, *args, **kwargs: getattr(first, name)(*args, **kwargs)
    raise ValueError(f"torch-npu execution: unknown function namespace in {fn!r}")


def execute(rt: Runtime, calls: list[Call], env: dict) -> dict:
    """Run ``calls`` in order on a copy of ``env``; return the environment with their outputs bound."""
    env = dict(env)
    for call in calls:
        result = function(rt, call.fn)(*resolve(rt, call.args, env), **resolve(rt, call.kwargs, env))
        if call.pick is not None:
            result = result[call.pick]
        if len(call.out) == 1:
            env[call.out[0]] = result
        else:
            for name, value in zip(call.out, result, strict=True):
                env[name] = value
    return env


def load(rt: Runtime, plan: Plan, env: dict) -> dict:
    """The plan's load steps (once, untimed), then a device barrier."""
    if plan.needs_internal_format():
        rt.torch_npu.npu.config.allow_internal_format = True
    env = execute(rt, plan.load, env)
    if plan.load:
        rt.sync()
    return env


def run(rt: Runtime, plan: Plan, env: dict) -> tuple:
    """The timed calls; returns the output tensors (asynchronous: synchronize before reading them)."""
    env = execute(rt, plan.calls, env)
    return tuple(env[name] for name in plan.outputs)


def nz_storage(rt: Runtime, tensor, shape: tuple[int, ...]) -> np.ndarray:
    """The raw FRACTAL_NZ storage of ``tensor`` as an array of ``shape`` (``tensor.cpu()`` would convert it
    back to ND). Through ``untyped_storage().cpu()``, which torch_npu patches to copy the storage bytes
    (``torch_npu/utils/storage.py``) — inferred from the sources, not confirmed on a device."""
    torch = rt.torch
    host = tensor.untyped_storage().cpu()
    raw = torch.empty(0, dtype=torch.uint8).set_(host)
    dtype = torch_common.numpy_dtype(tensor.dtype)
    count = math.prod(shape)
    flat = raw.numpy().view(np.uint8)[: count * dtype.itemsize].view(dtype)
    if flat.size != count:
        raise RuntimeError(f"torch-npu: NZ storage of {flat.size} elements, expected {count} for {shape}")
    return flat.reshape(shape).copy()


def read_back(rt: Runtime, plan: Plan, outputs: tuple):
    """Copy the outputs to the host and apply the plan's host-side steps."""
    arrays = []
    for name, tensor in zip(plan.outputs, outputs, strict=True):
        if name in plan.readback:
            arrays.append(nz_storage(rt, tensor, plan.readback[name]))
        else:
            arrays.append(torch_common.from_torch(tensor))
    return plan.finish(arrays)
