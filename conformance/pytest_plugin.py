"""pytest plugin (entry point ``pytest11: w8a8``): run the conformance suite from pytest.

    pytest --pyargs conformance.suite --backend torch-cpu          # the suite against a backend
    pytest --pyargs conformance.suite --backend my_pkg.kernels:MyBackend --conformance-op quant_matmul
    pytest ... --hypothesis-profile thorough                      # dev / ci / thorough

Per op it runs its drawn cases (one test per strategy of the declaration), its named cases and its
error cases (:mod:`conformance.suite`).

Options: ``--backend NAME`` (repeatable; default: every available backend except the golden),
``--conformance-op OP`` (repeatable; default: every op). Hypothesis profiles ``dev``, ``ci``,
``thorough`` are registered on import. A failing case is shrunk by Hypothesis; its message carries
the attribution and the ``w8a8 conformance --case`` repro line, and Hypothesis prints the
``@reproduce_failure`` blob.

The plugin only adds options and fixtures; it imports nothing heavy until a suite test runs, so it
is harmless in any pytest run of an environment where w8a8 is installed.
"""

from __future__ import annotations

try:  # register the profiles before Hypothesis's own plugin reads --hypothesis-profile
    from .profiles import register as _register_profiles

    _register_profiles()
except ImportError:  # hypothesis not installed: the suite cannot run, the plugin stays inert
    pass


def pytest_addoption(parser):
    group = parser.getgroup("w8a8", "w8a8 conformance suite")
    group.addoption("--backend", action="append", default=[], metavar="NAME",
                    help="backend to run the conformance suite against (repeatable; a registered name or "
                         "'package.module:Class'; default: every available backend except the golden)")
    group.addoption("--conformance-op", action="append", default=[], metavar="OP",
                    help="op of the conformance suite to run (repeatable; default: all)")


def pytest_configure(config):
    config.addinivalue_line("markers", "conformance: a conformance-suite test (backend x op)")


def selected_backends(config) -> list[str]:
    import backends

    requested = config.getoption("--backend") or []
    if requested:
        return requested
    names = [b.name for b in backends.available() if b.name != "numpy"]
    return names or ["numpy"]


def selected_ops(config) -> list[str]:
    from .registry import specs

    return config.getoption("--conformance-op") or sorted(specs())


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
