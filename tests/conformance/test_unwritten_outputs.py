"""Outputs the device never writes are not compared: dynamic_quant with H = 0.

aclnnDynamicQuant / V2 return before launching any kernel when x is empty (ops-nn
quant/dynamic_quant/op_host/op_api/aclnn_dynamic_quant.cpp:368 @ e5c3fa93), so a [3, 0] input leaves the
[3] scale (and offset) as torch_npu allocated them: whatever a backend writes there is right."""

from __future__ import annotations

import numpy as np
import pytest

from backends.numpy_backend import NumpyBackend
from conformance import registry
from conformance.evaluate import run_case


class _GarbageScaleBackend(NumpyBackend):
    """The golden, except that the per-row outputs of an empty-hidden call hold leftover memory."""

    name = "garbage-scale"

    def call(self, op, *args, **kwargs):
        out = super().call(op, *args, **kwargs)
        if args[0].shape[-1] == 0:
            out = (out[0],) + tuple(np.full_like(o, 12345.0) for o in out[1:])
        return out


@pytest.mark.parametrize("op", ["dynamic_quant", "dynamic_quant_asymmetric"])
def test_scale_of_an_empty_hidden_is_unspecified(op):
    spec = registry.get(op)
    args, kwargs = (np.zeros((3, 0), np.float16),), {}
    assert spec.mask(args, kwargs) and not any(m.any() for m in spec.mask(args, kwargs).values())
    rec = run_case(spec, {"named": f"{op}/empty_hidden"}, _GarbageScaleBackend(), kind="named",
                   name=f"{op}/empty_hidden")
    assert rec["status"] == "pass", rec
    # a non-empty hidden is compared in full: no mask
    assert spec.mask((np.zeros((3, 8), np.float16),), {}) == {}
