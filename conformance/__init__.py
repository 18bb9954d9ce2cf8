"""conformance — the engine on top of the golden and the backends.

Op registry, input strategies, the comparison vocabulary, mismatch attribution, the runner and its
reports, tolerance tuning, the bench machinery, checkpoint inspection — and the ``w8a8`` command
line (:mod:`conformance.cli`).
"""
