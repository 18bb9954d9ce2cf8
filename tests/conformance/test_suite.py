"""The shipped conformance suite, run against every available backend (here: torch-cpu, or the golden
itself when torch is absent): ``python -m pytest tests/conformance/test_suite.py --backend NAME``."""

from conformance.suite import test_backend_agrees_with_golden, test_named_case  # noqa: F401
