"""Shared pieces of the pytest-benchmark suites. (The --backend option comes from the w8a8 pytest
plugin, conformance.pytest_plugin.)"""

import pytest


@pytest.fixture(scope="module")
def bench_report(request):
    """Register ``write(terminalreporter)`` callables: after the module's benchmarks they run with
    output capture suspended, to print the module's own summary (ratios measured in this run)."""
    writers = []
    yield writers.append
    rep = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if rep is None or capture is None:
        return
    with capture.global_and_fixture_disabled():  # teardown output is captured otherwise
        for write in writers:
            write(rep)
