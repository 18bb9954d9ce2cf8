"""The first mismatch of a masked output is reported at its index in the output, not in the masked array.

A dequant_swiglu_quant call with group_index [3, 2] over 8 tokens specifies rows 0..4 only (rows 5..7 are
not written by the kernel). One code changed at y[2, 5] must be reported at [2, 5]: the flattened index into
y[mask] would be 2 * 64 + 5 = 133.
"""

from __future__ import annotations

import numpy as np

import w8a8
from conformance import registry
from conformance.compare import compare


def _call():
    rng = np.random.default_rng(24)
    x = rng.integers(-40000, 40000, (8, 128)).astype(np.int32)
    kw = {"weight_scale": rng.uniform(1e-4, 1e-3, (2, 128)).astype(np.float32),
          "activation_scale": rng.uniform(1e-3, 1e-2, (8,)).astype(np.float32),
          "group_index": np.array([3, 2], np.int64), "quant_mode": 1, "activate_left": True}
    return (x,), kw


def test_conformance_compare_reports_the_index_in_the_output():
    args, kw = _call()
    y, _ = w8a8.dequant_swiglu_quant(*args, **kw)
    masks = registry.get("dequant_swiglu_quant").mask(args, kw)
    dev = y.copy()
    dev[2, 5] = np.int8(dev[2, 5] + (1 if dev[2, 5] < 127 else -1))
    dev[6, 0] = np.int8(dev[6, 0] ^ 1)                  # an unwritten row: ignored
    comp = compare("y", "int", y, dev, mask=masks["y"])
    assert comp.mismatches == 1
    assert comp.first_mismatch == [2, 5]


def test_replay_compare_reports_the_index_in_the_output():
    from replay import engine

    args, kw = _call()
    y, _ = w8a8.dequant_swiglu_quant(*args, **kw)
    masks = engine.masks("dequant_swiglu_quant", args, kw)
    dev = y.copy()
    dev[4, 63] = np.int8(dev[4, 63] + (1 if dev[4, 63] < 127 else -1))
    comp = engine.compare_output("dequant_swiglu_quant", "y", "int", y, dev, mask=masks["y"])
    assert comp["first_mismatch"] == [4, 63]       # flat into y[mask]: 4 * 64 + 63 = 319


def test_unmasked_output_index_unchanged():
    a = np.zeros((3, 4), np.float32) + 1
    b = a.copy()
    b[1, 2] = 2
    assert compare("y", "float", a, b).first_mismatch == [1, 2]
