"""torch-cpu against the golden: the conformance suite, strictly, on every op torch-cpu implements.

Every op's declaration (conformance/ops/<family>/<op>.py) drives three kinds of test:

* **drawn** — one Hypothesis test per strategy of the declaration (its main strategy and the others
  it declares: bit patterns, odd layouts, activations, ...);
* **named** — every named case: the documented values, on the golden and on torch-cpu;
* **error** — every bad call: the declared exception and message, on the golden and on torch-cpu.

``strict=True`` (conformance.evaluate): the golden runs under torch-cpu's declared numerics
(:data:`w8a8.ASCEND`) and every output must have its dtype, shape and *bytes* — NaN payloads and signed
zeros included, and the rows a mask leaves unspecified (torch-cpu writes the golden's fill there) — a
refusal must carry the golden's exact message, and nothing may be ``unsupported``.

An op torch-cpu does not implement (a newly declared op, or an expert-parallel op: those run on simulated
ranks, the torch.distributed backend's) is ``Unsupported`` with the base class's reason, and its tests are
skipped saying "torch-cpu does not implement <op>" — never failed: adding an op is its golden and its
declaration (docs/adding-an-op.md). What is particular to torch-cpu (its kernel paths, probes, thread
policy, device boundary) is test_torch_cpu_backend.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

import backends
from conformance import registry
from conformance.suite import check_drawn, check_error, check_named

torch = pytest.importorskip("torch")

from backends.torch_cpu.moe_experts import path_override  # noqa: E402 (imports torch)

pytestmark = pytest.mark.torch

TC = backends.get("torch-cpu")
OPS = list(registry.specs())
DRAWN = [(op, s) for op in OPS for s in registry.get(op).all_strategies()]
GEMM_OPS = ("grouped_matmul", "w8a8_moe", "w8a8_moe_prequantized")


def implemented(op: str) -> None:
    """Skip (with the backend's own reason) when torch-cpu does not implement ``op``."""
    if op not in TC.ops():
        with pytest.raises(backends.Unsupported, match=f"does not implement op '{op}'") as refusal:
            TC.prepare(op)
        pytest.skip(f"torch-cpu does not implement {op}: {refusal.value}")


@pytest.mark.parametrize("op", [op for op in OPS if op not in TC.ops()])
def test_an_op_torch_cpu_lacks_is_unsupported_with_its_reason(op):
    # today: the expert-parallel ops; tomorrow also any op declared before torch-cpu implements it
    with pytest.raises(backends.Unsupported, match=f"^backend 'torch-cpu' does not implement op '{op}'$"):
        TC.prepare(op)


@pytest.mark.parametrize("op, strategy", DRAWN, ids=[op if s == "main" else f"{op}:{s}" for op, s in DRAWN])
@given(data=st.data())
def test_drawn(op, strategy, data):
    implemented(op)
    params = data.draw(registry.get(op).all_strategies()[strategy](), label="params")
    check_drawn(TC, op, params, strict=True)


@pytest.mark.parametrize("op", GEMM_OPS)
@given(data=st.data())
def test_drawn_on_the_int_mm_expert_gemm(op, data):
    # "auto" (test_drawn) is fbgemm's prepacked GEMM on AVX512-VNNI CPUs, int_mm elsewhere: force int_mm too
    params = data.draw(registry.get(op).params(), label="params")
    with path_override("int_mm"):
        check_drawn(TC, op, params, strict=True)


@pytest.mark.parametrize("key", [c.key for op in OPS for c in registry.named_cases(op)])
def test_named(key):
    implemented(key.split("/")[0])
    check_named(TC, key, strict=True)


@pytest.mark.parametrize("key", [b.key for op in OPS for b in registry.bad_calls(op)])
def test_error(key):
    implemented(key.split("/")[0])
    check_error(TC, key, strict=True)
