"""Hypothesis profiles shared by the project's tests, the pytest plugin and ``w8a8 conformance``.

* ``dev``: quick feedback while editing (few examples, no deadline).
* ``ci``: what CI runs (the default for ``pytest``): enough examples to find shape and rounding
  edge cases, bounded so the whole suite stays within the CI budget.
* ``thorough``: a long local campaign.

Select with ``--hypothesis-profile NAME`` (pytest) or ``HYPOTHESIS_PROFILE=NAME``.
"""

from __future__ import annotations

PROFILES = {
    "dev": {"max_examples": 10},
    "ci": {"max_examples": 40},
    "thorough": {"max_examples": 500},
}


def register() -> None:
    """Register the three profiles with Hypothesis (idempotent)."""
    from hypothesis import HealthCheck, settings

    common = dict(deadline=None, database=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    for name, values in PROFILES.items():
        settings.register_profile(name, **common, **values)
