"""conformance — the engine on top of the golden and the backends.

Op registry, input strategies, the comparison vocabulary, mismatch attribution, the runner and its
reports, tolerance tuning, the bench machinery, checkpoint inspection — and the ``w8a8`` command
line (:mod:`conformance.cli`). For kernel tests: :func:`assert_close`.
"""


def assert_close(actual, expected, **kwargs):
    """See :func:`conformance.assertions.assert_close` (imported lazily to keep ``w8a8 --help`` fast)."""
    from .assertions import assert_close as _assert_close

    return _assert_close(actual, expected, **kwargs)


__all__ = ["assert_close"]
