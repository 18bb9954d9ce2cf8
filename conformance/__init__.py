"""conformance — the engine on top of the golden and the backends.

Op registry and declarations, input strategies, the comparison vocabulary, mismatch attribution, the
runner and its reports, tolerance tuning. Its siblings on the same floor: :mod:`bench` (benchmarks),
:mod:`checkpoints` (msModelSlim checkpoints), :mod:`deployment` (estimates); the ``w8a8`` command line
(:mod:`w8a8cli`) sits on top of them all. For kernel tests: :func:`assert_close`.
"""


def assert_close(actual, expected, **kwargs):
    """See :func:`conformance.assertions.assert_close` (imported lazily to keep ``w8a8 --help`` fast)."""
    from .assertions import assert_close as _assert_close

    return _assert_close(actual, expected, **kwargs)


__all__ = ["assert_close"]
