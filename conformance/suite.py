"""The conformance suite as pytest tests (see :mod:`conformance.pytest_plugin` for the options).

Every op x backend, from the op's declaration (:mod:`conformance.declare`):

* **drawn** (``test_backend_agrees_with_golden``, one test per op and strategy): Hypothesis draws the
  op's parameters, the case runs on the backend and on the golden (under the backend's declared
  numerics), and every output must agree bit for bit (or within the tolerance table, when one
  applies);
* **named** (``test_named_case``): each named case must match its documented values on the golden
  and on the backend;
* **error** (``test_error_case``): each bad call must raise the declared exception with a message
  matching the declared pattern, on the golden and on the backend.

A backend's own test file runs the same checks with :func:`check_drawn`, :func:`check_named` and
:func:`check_error`, usually with ``strict=True`` (see :mod:`conformance.evaluate`).
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


def _check(backend, op: str, params: dict, *, strict: bool, why: str = "") -> dict:
    from .evaluate import BAD_STATUSES, run_case
    from .registry import get

    record = run_case(get(op), params, backend, strict=strict)
    if record["status"] == "unsupported":
        pytest.skip(record.get("note", "unsupported"))
    assert record["status"] not in BAD_STATUSES, _format(record) + (f"\n  why: {why}" if why else "")
    return record


def check_drawn(backend, op: str, params: dict, *, strict: bool = False) -> dict:
    """Run one drawn case of ``op`` on ``backend``; fail the test unless it agrees with the golden."""
    return _check(backend, op, params, strict=strict)


def check_named(backend, key: str, *, strict: bool = False) -> dict:
    """Run the named case ``"<op>/<name>"``: golden and backend must give its documented values."""
    from .registry import named_case

    case = named_case(key)
    return _check(backend, case.op, {"named": key}, strict=strict, why=case.why)


def check_error(backend, key: str, *, strict: bool = False) -> dict:
    """Run the bad call ``"<op>/<name>"``: golden and backend must raise the declared error."""
    from .registry import bad_call

    bad = bad_call(key)
    return _check(backend, bad.op, {"error": key}, strict=strict, why=bad.why)


def _backend(name: str):
    import backends

    b = backends.get(name)
    ok, reason = b.available()
    if not ok:
        pytest.skip(f"backend {name} is not available: {reason}")
    return b


def _implemented(backend, op: str) -> None:
    if op not in backend.ops():
        pytest.skip(f"{backend.name} does not implement {op}")


def _statistics_for(item):
    """Hypothesis's statistics of the ``@given`` test run inside a suite test, kept on the pytest item where
    Hypothesis's own plugin looks for them (``--hypothesis-show-statistics`` prints them; it collects them
    itself only for a test function that is ``@given`` at collection, which the suite's are not: their
    strategy depends on the op and backend fixtures)."""
    import contextlib

    try:
        from hypothesis.statistics import collector, describe_statistics
    except ImportError:   # a Hypothesis without this module: no statistics, the test runs the same
        return contextlib.nullcontext()

    def note(stats):
        stats["nodeid"] = item.nodeid
        item.hypothesis_statistics = describe_statistics(stats)

    return collector.with_value(note)


@pytest.mark.conformance
def test_backend_agrees_with_golden(conformance_backend, conformance_drawn, pytestconfig, request):
    """Drawn inside what the backend takes (:mod:`conformance.drawing`): a draw it declines is rejected
    (Hypothesis draws another); an op it declines every draw of is skipped, saying so. Settings:
    :func:`conformance.pytest_plugin.suite_settings` (no deadline; ``ci`` unless a profile is chosen)."""
    from hypothesis import HealthCheck, __version__, assume, given, reproduce_failure, settings
    from hypothesis.errors import Unsatisfiable

    from .drawing import can_decline, declined
    from .pytest_plugin import reproduce_blob, suite_settings
    from .registry import get

    op, strategy = conformance_drawn
    backend = _backend(conformance_backend)
    _implemented(backend, op)
    spec = get(op)
    filtering = can_decline(backend)
    reasons: list[str] = []

    @settings(suite_settings(pytestconfig), suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(spec.all_strategies()[strategy]())
    def check(params):
        if filtering:
            reason = declined(backend, spec, lambda: spec.build(params))
            if reason:
                reasons.append(reason)
            assume(not reason)
        check_drawn(backend, op, params)

    blob = reproduce_blob(pytestconfig)
    if blob is not None:
        check = reproduce_failure(__version__, blob)(check)

    try:
        with _statistics_for(request.node):
            check()
    except Unsatisfiable:
        pytest.skip(f"{backend.name} declines every draw of {op} ({strategy}): "
                    f"{reasons[0] if reasons else 'outside its capabilities'}")


@pytest.mark.conformance
def test_named_case(conformance_backend, conformance_named_case):
    from .drawing import can_decline, declined
    from .registry import get, named_case

    backend = _backend(conformance_backend)
    op = conformance_named_case.split("/")[0]
    _implemented(backend, op)
    if can_decline(backend):
        reason = declined(backend, get(op), named_case(conformance_named_case).build)
        if reason:
            pytest.skip(f"outside {backend.name}'s capabilities: {reason}")
    check_named(backend, conformance_named_case)


@pytest.mark.conformance
def test_error_case(conformance_backend, conformance_error_case):
    backend = _backend(conformance_backend)
    _implemented(backend, conformance_error_case.split("/")[0])
    check_error(backend, conformance_error_case)
