"""The conformance suite as pytest tests (see :mod:`conformance.pytest_plugin` for the options).

Every op x backend: Hypothesis draws the op's parameters, the case runs on the backend and on the
golden (under the backend's declared numerics), and every output must agree bit for bit (or within
the tolerance table, when one applies). Every named corpus case must also match its documented
values on the backend.
"""

from __future__ import annotations

import pytest


def _format(record: dict) -> str:
    lines = [f"{record['backend']} / {record['op']}: {record['status']} — {record.get('note') or ''}"]
    for name, comp in (record.get("outputs") or {}).items():
        if comp.get("verdict") == "fail":
            lines.append(f"  output {name}: {comp.get('note')} (first mismatch at {comp.get('first_mismatch')})")
    for line in record.get("expected_mismatch") or []:
        lines.append("  " + line)
    at = record.get("attribution") or {}
    if at:
        lines.append(f"  first diverging stage: {at.get('first_stage')}; likely cause: {at.get('cause')}")
    lines.append(f"  repro: {record.get('repro')}")
    return "\n".join(lines)


def _backend(name: str):
    import backends

    b = backends.get(name)
    ok, reason = b.available()
    if not ok:
        pytest.skip(f"backend {name} is not available: {reason}")
    return b


@pytest.mark.conformance
def test_backend_agrees_with_golden(conformance_backend, conformance_op):
    from hypothesis import given

    from .evaluate import BAD_STATUSES, run_case
    from .registry import get

    backend = _backend(conformance_backend)
    spec = get(conformance_op)
    if conformance_op not in backend.ops():
        pytest.skip(f"{backend.name} does not implement {conformance_op}")

    @given(spec.params())
    def check(params):
        record = run_case(spec, params, backend)
        assert record["status"] not in BAD_STATUSES, _format(record)

    check()


@pytest.mark.conformance
def test_named_case(conformance_backend, conformance_named_case):
    from . import corpus
    from .evaluate import BAD_STATUSES, run_case
    from .registry import get

    backend = _backend(conformance_backend)
    named = corpus.get(conformance_named_case)
    if named.op not in backend.ops():
        pytest.skip(f"{backend.name} does not implement {named.op}")
    record = run_case(get(named.op), {"corpus": named.key}, backend)
    if record["status"] == "unsupported":
        pytest.skip(record.get("note", "unsupported"))
    assert record["status"] not in BAD_STATUSES, _format(record) + "\n  why: " + named.why
