"""Benchmark cases: the ops at the shapes that matter, read from the op declarations.

Each op's declaration (``conformance/ops/<family>/<op>.py``) lists its bench cases
(:class:`conformance.declare.BenchCase`: DeepSeek-V4-Flash shapes, tags, useful work, compute unit);
this module only collects them. A case is data plus a module-level builder, so it travels whole to the
per-backend worker process (:mod:`bench.runner`).
"""

from __future__ import annotations

from conformance.declare import BenchCase

__all__ = ["BenchCase", "all_cases"]


def all_cases(full: bool) -> list[BenchCase]:
    """Every declared bench case of a full run (``full``) or of the quick set, in op order, one per name."""
    from conformance.registry import specs

    seen, out = set(), []
    for decl in specs().values():
        for c in decl.bench_cases(full):
            if c.name not in seen:
                seen.add(c.name)
                out.append(c)
    return out
