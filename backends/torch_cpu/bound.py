"""torch-cpu's bound calls (:meth:`backends.base.Backend.bind`): weights packed once, then many calls.

Two kinds, by what a call costs next to its load:

* **Dense Linears** (``w8a8_dynamic_linear``, ``w8a8_static_linear``): :class:`DenseBound`. The first
  call with an activation of a given dtype runs the whole :meth:`~backends.base.Backend.prepare`
  chain — the golden's checks on every argument (its exceptions and messages), the loader (the weight
  laid out / prepacked for the GEMM path, the fused kernel's pack and its load-time exactness probe)
  — and keeps the loaded layer for that dtype. Every later call with that dtype checks only what
  depends on the activation (an ``ndarray`` of that dtype, ``x.shape[-1] == K``, finite under
  ``nan_policy="raise"``): the golden's checks on the weights, scale and bias depend on nothing else,
  so they passed once and pass again. On the fused kernels (``vnni`` / ``amx``) the finiteness check costs
  no pass of its own: the kernel flags an Inf / NaN element while quantizing the rows, and the call
  is then rerun on the full path. A call failing the light check takes the full path, which
  raises the golden's own error (or loads a new dtype). Then the device work, as ``Prepared.run``
  does it, and the conversion back.
* **The MoE layer and the grouped matmul** (``w8a8_moe``, ``w8a8_moe_prequantized``,
  ``grouped_matmul``): :class:`MemoBound`. Every call runs ``prepare`` with the golden's checks of
  what changes per call (the activations, the routing arguments, the shared expert's input), but what
  depends on the bound weights only is made once and memoised in the bound object: the weights' own
  check (after a first call passed it, :func:`w8a8.moe.pipeline.experts_checked`; an activation of
  another H gets the full check and its error), the loaded scales, ``ExpertGemm.load`` of each weight
  stack, the fused chain's probe, the shared expert's Linears, and the stage checks on stand-ins per
  ``(T, k, swiglu_limit)``.

Results are those of the direct call, bit for bit (``tests/backends/test_torch_cpu_bind.py``). The
bound arrays are read once: do not modify them while bound. Not thread-safe: one bound object per
thread.
"""

from __future__ import annotations

from contextlib import contextmanager

import ml_dtypes
import numpy as np

from w8a8 import registry

from ..base import Bound, Unsupported
from . import runtime

DENSE = ("w8a8_dynamic_linear", "w8a8_static_linear")
MEMO = ("w8a8_moe", "w8a8_moe_prequantized", "grouped_matmul")


_HALF: dict = {}   # activation dtype -> its torch dtype (bf16, fp16), filled on first use (torch imported then)
_EXPONENT = {np.dtype(np.float16): 0x7C00}   # |bits| >= this: Inf / NaN


def all_finite(x: np.ndarray, scratch: list | None = None) -> bool:
    """Whether every element of ``x`` is finite; bf16 / fp16 on their bits (``|bits| < exponent mask``: one
    integer max over the data, ~20x faster than a float ``isfinite`` on 16 x 4096 bf16 rows). ``scratch``:
    a one-element list holding a reusable int16 buffer (a fresh 128 KiB temporary per call is an mmap and
    its page faults: ~0.1 ms, measured, against a 0.8 ms decode Linear)."""
    if not x.size:
        return True
    limit = 0x7F80 if x.dtype.name == "bfloat16" else _EXPONENT.get(x.dtype)
    if limit is None or not x.dtype.isnative:
        return bool(np.isfinite(x).all())
    bits = np.ascontiguousarray(x).reshape(-1).view(np.int16)
    if scratch is None:
        return int((bits & 0x7FFF).max()) < limit
    if scratch[0] is None or scratch[0].size < bits.size:
        scratch[0] = np.empty(bits.size, np.int16)
    out = scratch[0][:bits.size]
    np.bitwise_and(bits, 0x7FFF, out=out)
    return int(out.max()) < limit


class DenseBound(Bound):
    """A dense W8A8 Linear bound on torch-cpu (module docstring)."""

    def __init__(self, backend, op, args, kwargs):
        super().__init__(backend, op, args, kwargs)
        call_kwargs = dict(kwargs)
        self._numerics = backend._numerics_for(call_kwargs.pop("numerics", None))
        self._call_kwargs = call_kwargs
        self._golden = registry.get(op)
        self._impl = getattr(backend, backend._implementation(op))
        from . import linear, packed

        self._nonfinite = packed.NonFinite
        self._torch = packed.torch
        if not _HALF:
            _HALF.update({np.dtype(ml_dtypes.bfloat16): packed.torch.bfloat16,
                          np.dtype(np.float16): packed.torch.float16})
        self._linear = linear.w8a8_dynamic_linear if op == "w8a8_dynamic_linear" else linear.w8a8_static_linear
        self._checks_finite = linear.fused_checks_finite
        self._layers: dict = {}   # activation dtype -> the loaded layer
        self._scratch: list = [None]   # all_finite's buffer

    def layer(self, dtype):
        """The loaded layer for activations of ``dtype`` (after a first call with one), else None."""
        return self._layers.get(np.dtype(dtype))

    def gemm_path(self, dtype) -> str | None:
        """The GEMM path calls with ``dtype`` activations take (after a first such call), else None."""
        from .linear import path_taken

        layer = self.layer(dtype)
        return None if layer is None else path_taken(layer)

    def _first(self, x):
        """The full chain on ``x``: the golden's checks, the loader (kept for x's dtype), the run."""
        b = self.backend
        checked = b.checked_args(self._golden, (x,) + self.args, self._call_kwargs, self._numerics)
        reason = b.declines(self.op, checked)
        if reason:
            raise Unsupported(f"backend '{b.name}' declines {self.op}: {reason}")
        runtime.claim_threads()
        loaded, _, _ = b._load(self.op, checked, self._numerics)
        self._layers[np.dtype(checked.x.dtype)] = loaded[1]
        return self._run(loaded)

    def _run(self, loaded):
        with runtime.op_threads():
            y = self._impl(loaded)
        return self.backend.from_device(y)

    def __call__(self, *activations, **per_call):
        if len(activations) != 1 or per_call:
            return super().__call__(*activations, **per_call)
        x = activations[0]
        layer = self._layers.get(x.dtype) if type(x) is np.ndarray else None
        if layer is None or x.ndim == 0 or x.shape[-1] != layer.weight.shape[0]:
            return self._first(x)
        check = self._numerics.nan_policy == "raise"
        if check and not self._checks_finite(layer) and not all_finite(x, self._scratch):
            return self._first(x)   # raises the golden's error, naming the first non-finite position
        try:
            with runtime.op_threads():
                y = self._linear(self._in(x), layer, check)
        except self._nonfinite:   # the fused kernel met an Inf / NaN while quantizing: the golden's error
            return self._first(x)
        return self._out(y, x.dtype)

    def _in(self, x: np.ndarray):
        """``backend.to_device(x)``'s tensor (the same memory, the same bits), the common case in two calls: a
        C-contiguous writable bf16 / fp16 array seen as int16, then as the torch dtype (to_device's generic
        path costs a few µs more per call: dtype look-ups, a contiguity copy check)."""
        view = _HALF.get(x.dtype)
        if view is None or not (x.flags.c_contiguous and x.flags.writeable):
            return self.backend.to_device(x)
        return self._torch.from_numpy(x.view(np.int16)).view(view)

    def _out(self, y, dtype: np.dtype) -> np.ndarray:
        """``backend.from_device(y)`` for the Linear's output (the activation's dtype), as :meth:`_in`."""
        if _HALF.get(dtype) is not y.dtype or not y.is_contiguous():
            return self.backend.from_device(y)
        return y.view(self._torch.int16).numpy().view(dtype)


class MemoBound(Bound):
    """The MoE layer / grouped matmul bound on torch-cpu: the full prepare per call, the weights' packing
    memoised (module docstring)."""

    def __init__(self, backend, op, args, kwargs):
        super().__init__(backend, op, args, kwargs)
        self.memo: dict = {}
        self._weights = _moe_weights(op, self.args, self.kwargs)

    def prepare(self, *activations, **per_call):
        with memo_scope(self.backend, self.memo):
            experts = self.memo.get("experts_checked")
            if self._weights is None or experts is None:
                prepared = super().prepare(*activations, **per_call)
                if self._weights is not None:   # the call passed the weights' check: later calls take it
                    from w8a8.moe.pipeline import expert_weights_args

                    h = np.shape(self._weights[0])[-1]   # the H the checked call had (it passed: H of w13)
                    self.memo["experts_checked"] = expert_weights_args(self.op, h, *self._weights)
                return prepared
            from w8a8.moe.pipeline import experts_checked

            with experts_checked(self._weights, experts):
                return super().prepare(*activations, **per_call)


_MOE_WEIGHTS = ("w13", "w13_scale", "w2", "w2_scale")


def _moe_weights(op: str, args: tuple, kwargs: dict) -> tuple | None:
    """The bound ``(w13, w13_scale, w2, w2_scale)`` of a MoE layer (positional after the activations, or by
    name), else None (the grouped matmul, or weights passed per call: checked every call)."""
    if op not in ("w8a8_moe", "w8a8_moe_prequantized"):
        return None
    found = list(args[:4]) + [kwargs.get(name) for name in _MOE_WEIGHTS[len(args[:4]):]]
    return tuple(found) if all(v is not None for v in found) else None


@contextmanager
def memo_scope(backend, memo: dict):
    """``backend.bind_memo`` is ``memo`` for the block (the loaders read it)."""
    previous = backend.bind_memo
    backend.bind_memo = memo
    try:
        yield
    finally:
        backend.bind_memo = previous


def memoised(memo: dict | None, key, make):
    """``memo[key]``, made by ``make()`` on first use; ``make()`` itself where there is no memo."""
    if memo is None:
        return make()
    if key not in memo:
        memo[key] = make()
    return memo[key]


def bind(backend, op: str, args: tuple, kwargs: dict) -> Bound:
    if op in DENSE:
        return DenseBound(backend, op, args, kwargs)
    if op in MEMO:
        return MemoBound(backend, op, args, kwargs)
    return Bound(backend, op, args, kwargs)
