"""pytest plugin (entry point ``pytest11: w8a8``): run the conformance suite from pytest.

    pytest --pyargs conformance.suite --w8a8-backend torch-cpu          # the suite against a backend
    pytest --pyargs conformance.suite --w8a8-backend my_pkg.kernels:MyBackend --w8a8-op quant_matmul
    pytest ... --hypothesis-profile thorough                      # dev / ci / thorough

Per op it runs its drawn cases (one test per strategy of the declaration), its named cases and its
error cases (:mod:`conformance.suite`).

Options: ``--w8a8-backend NAME`` (repeatable; default: every available backend except the golden),
``--w8a8-op OP`` (repeatable; default: every op), ``--w8a8-reproduce BLOB`` (replay
the failing example Hypothesis printed). Hypothesis profiles ``dev``, ``ci``, ``thorough`` are
registered on import. The suite's drawn tests run under the profile ``--hypothesis-profile`` (or
``HYPOTHESIS_PROFILE``) names, else under the one the user's conftest loaded, else ``ci`` — always
without a deadline (a backend's first call may compile kernels; time is not what is judged), from
any directory, without the repository's conftest (:func:`suite_settings`).

A failing case is shrunk by Hypothesis; its message carries the attribution and the
``w8a8 conformance --case`` repro line, and the report adds a section with the command that replays
Hypothesis's ``@reproduce_failure`` blob from the user's own checkout (the test lives in the
installed package, where a decorator cannot be added)::

    pytest --pyargs conformance.suite --w8a8-backend B --w8a8-op OP -k 'TEST[ID]' --w8a8-reproduce BLOB

The plugin only adds options and fixtures; it imports nothing heavy until a suite test runs, so it
is harmless in any pytest run of an environment where w8a8 is installed.
"""

from __future__ import annotations

import os
import re

import pytest

DEFAULT_PROFILE = "ci"

try:  # register the profiles before Hypothesis's own plugin reads --hypothesis-profile
    from .profiles import register as _register_profiles

    _register_profiles()
except ImportError:  # hypothesis not installed: the suite cannot run, the plugin stays inert
    pass


def pytest_addoption(parser):
    group = parser.getgroup("w8a8", "w8a8 conformance suite")
    group.addoption("--w8a8-backend", action="append", default=[], metavar="NAME",
                    help="backend to run the conformance suite against (repeatable; a registered name or "
                         "'package.module:Class'; default: every available backend except the golden)")
    group.addoption("--w8a8-op", action="append", default=[], metavar="OP",
                    help="op of the conformance suite to run (repeatable; default: all)")
    group.addoption("--w8a8-reproduce", default=None, metavar="BLOB",
                    help="replay a failing drawn example: the blob of the @reproduce_failure line Hypothesis printed "
                         "(select its test with -k)")


def suite_settings(config):
    """The Hypothesis settings of the suite's drawn tests: the profile named by ``--hypothesis-profile`` or
    ``HYPOTHESIS_PROFILE``, else the one loaded (a conftest's), else :data:`DEFAULT_PROFILE` when only
    Hypothesis's own ``default`` is loaded — with no deadline and the reproduce blob printed."""
    from hypothesis import settings

    named = config.getoption("--hypothesis-profile", default=None) or os.environ.get("HYPOTHESIS_PROFILE")
    if named:
        base = settings.get_profile(named)
    elif getattr(settings, "_current_profile", "default") == "default":
        base = settings.get_profile(DEFAULT_PROFILE)
    else:
        base = settings.default
    return settings(base, deadline=None, print_blob=True)


def reproduce_blob(config) -> bytes | None:
    """The ``--w8a8-reproduce`` blob as bytes: the bare blob, ``b'...'`` or the whole printed line."""
    text = config.getoption("--w8a8-reproduce", default=None)
    if not text:
        return None
    m = re.search(r"b'([^']+)'", text)
    return (m.group(1) if m else text.strip()).encode()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed conformance test whose output carries Hypothesis's blob gets the command that replays it."""
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call" or not rep.failed or item.get_closest_marker("conformance") is None:
        return
    m = re.search(r"@reproduce_failure\('[^']+', b'([^']+)'\)", str(rep.longrepr))
    params = getattr(getattr(item, "callspec", None), "params", {})
    if m and "conformance_backend" in params:
        op = params.get("conformance_drawn", ("",))[0]
        rep.sections.append(("w8a8: reproduce from your checkout",
                             f"pytest --pyargs conformance.suite --w8a8-backend {params['conformance_backend']} "
                             f"--w8a8-op {op} -k '{item.name}' --w8a8-reproduce {m.group(1)}"))


def pytest_configure(config):
    config.addinivalue_line("markers", "conformance: a conformance-suite test (backend x op)")
    check_options(config)


def check_options(config) -> None:
    """``--w8a8-backend`` and ``--w8a8-op`` name something that exists (checked only when given):
    ``pytest.UsageError`` (one line, exit 4) instead of a KeyError in every test."""
    requested = config.getoption("--w8a8-backend", default=None) or []
    if requested:
        import backends

        for name in requested:
            try:
                backends.get(name)
            except (KeyError, ImportError, AttributeError) as exc:
                raise pytest.UsageError(f"--w8a8-backend: expected a backend name (see 'w8a8 backends') or "
                                        f"'package.module:Class', got {name!r} ({exc})") from None
    ops = config.getoption("--w8a8-op", default=None) or []
    if ops:
        from .registry import specs

        unknown = [op for op in ops if op not in specs()]
        if unknown:
            raise pytest.UsageError(f"--w8a8-op: expected an op of 'w8a8 conformance --list-ops', "
                                    f"got {unknown[0]!r}")


def selected_backends(config) -> list[str]:
    import backends

    requested = config.getoption("--w8a8-backend") or []
    if requested:
        return requested
    names = [b.name for b in backends.available() if b.name != "numpy"]
    return names or ["numpy"]


def selected_ops(config) -> list[str]:
    from .registry import specs

    return config.getoption("--w8a8-op") or sorted(specs())


def pytest_generate_tests(metafunc):
    if "conformance_backend" in metafunc.fixturenames:
        metafunc.parametrize("conformance_backend", selected_backends(metafunc.config))
    if "conformance_op" in metafunc.fixturenames:
        metafunc.parametrize("conformance_op", selected_ops(metafunc.config))
    if "conformance_drawn" in metafunc.fixturenames:  # (op, strategy): every strategy of every op
        from .registry import get

        pairs = [(op, s) for op in selected_ops(metafunc.config) for s in get(op).all_strategies()]
        metafunc.parametrize("conformance_drawn", pairs, ids=[op if s == "main" else f"{op}:{s}" for op, s in pairs])
    if "conformance_named_case" in metafunc.fixturenames or "conformance_error_case" in metafunc.fixturenames:
        from .registry import bad_calls, named_cases

        ops = set(selected_ops(metafunc.config))
        if "conformance_named_case" in metafunc.fixturenames:
            metafunc.parametrize("conformance_named_case", [c.key for c in named_cases() if c.op in ops])
        if "conformance_error_case" in metafunc.fixturenames:
            metafunc.parametrize("conformance_error_case", [b.key for b in bad_calls() if b.op in ops])


def _item_backend_and_op(item) -> tuple[str, str] | None:
    """(backend, op) of a suite test, from its parameters; ``None`` for any other test."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "conformance_backend" not in params:
        return None
    if "conformance_drawn" in params:
        op = params["conformance_drawn"][0]
    elif "conformance_op" in params:
        op = params["conformance_op"]
    else:
        key = params.get("conformance_named_case") or params.get("conformance_error_case")
        if not key:
            return None
        op = key.split("/", 1)[0]
    return params["conformance_backend"], op


def pytest_collection_modifyitems(config, items):
    """A suite test of an op the backend does not implement is deselected, not skipped: it was never a
    test of that backend. (A backend that is not available stays collected and skips, saying why.)"""
    implemented: dict = {}
    keep, dropped = [], []
    for item in items:
        pair = _item_backend_and_op(item)
        if pair is not None:
            name, op = pair
            if name not in implemented:
                implemented[name] = _implemented_ops(name)
            if implemented[name] is not None and op not in implemented[name]:
                dropped.append(item)
                continue
        keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _implemented_ops(name: str):
    """The ops backend ``name`` implements, or ``None`` when it cannot be asked (not available)."""
    import backends

    try:
        b = backends.get(name)
        ok, _ = b.available()
    except Exception:   # an unloadable backend: its tests stay and skip with the reason
        return None
    return set(b.ops()) if ok else None
