"""Cause tables name what the evidence supports: the int8-k1 crash carries its tag and no "worst 0"; the
one-row K = 1 detector fires only where torch._int_mm is wrong (N >= 2), and its words name torch._int_mm.

The bug's own evidence, checked here on the installed PyTorch: ``torch._int_mm`` of a [1, 1] int8 row by a
transposed [N, 1] weight (a [1, N] view with strides (1, 1)) returns values it never wrote for N >= 2 and the
right product for N = 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from conformance import registry
from conformance.detectors import DETECTORS, Context, explain_error
from conformance.reports import grouping
from conformance.results import worst_text

torch = pytest.importorskip("torch")


def test_torch_int_mm_is_right_for_n_1_and_wrong_for_n_above():
    a = torch.full((1, 1), 3, dtype=torch.int8)
    one = torch.full((1, 1), 5, dtype=torch.int8).t()
    assert torch._int_mm(a, one).tolist() == [[15]]
    wide = torch.full((8, 1), 5, dtype=torch.int8).t()
    assert wide.stride() == (1, 1)
    assert any(torch._int_mm(a, wide).tolist() != [[15] * 8] for _ in range(5))


def _detector(name):
    return next(d for d in DETECTORS if d.name == name)


@pytest.mark.parametrize("n, fires", [(1, False), (2, True), (17, True)])
def test_int8_k1_one_row_only_where_int_mm_is_wrong(n, fires):
    spec = registry.get("w8a8_dynamic_linear")
    args = (np.ones((1, 1), np.float16), np.full((n, 1), 127, np.int8), np.full(n, 1e-3, np.float32))
    got = {"y": np.full((1, n), np.inf, np.float16)}
    ctx = Context(spec, args, {}, None, {}, got, {}, {})
    assert bool(_detector("int8-k1-one-row").fn(ctx)) is fires


def test_int8_k1_one_row_words_name_torch_int_mm():
    words = _detector("int8-k1-one-row").words
    assert "torch._int_mm" in words and "oneDNN" in words and "through torchao" in words


def test_int8_k1_error_carries_its_tag_into_failures_by_cause():
    spec = registry.get("dynamic_quant")
    at = explain_error(spec, (np.ones((3, 1), np.float16),), {}, None, "RuntimeError: shape [3, 1] is invalid")
    assert at["cause"].endswith("[int8-k1]")
    rec = {"backend": "torchao", "op": "dynamic_quant", "status": "error", "attribution": at,
           "case_id": "x", "params": {}, "name": "dynamic_quant/rows_of_1", "error": "RuntimeError: ..."}
    (g,) = grouping.groups([rec])
    assert "[int8-k1]" in g.cause
    assert g.as_dict()["worst"] != "0" and "raised" in g.as_dict()["worst"]


def test_worst_of_failures_with_outputs_unchanged():
    rec = {"status": "fail", "outputs": {"y": {"max_ulp": 3}}}
    assert worst_text([rec]) == "3 ULP"
