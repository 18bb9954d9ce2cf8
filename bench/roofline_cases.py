"""The bench cases issue 18's targets are measured on that :mod:`bench.cases` / :mod:`bench.moe_cases` lack:

* the dense dynamic Linear at ``2048^3`` (quick and full; the peers run it too, :mod:`bench.peers`);
* the W8A8 MoE layer at DeepSeek-V4-Flash ``T = 256`` with the real ``E = 256`` (full only: 6.4 GB of
  expert weights; ``6 * 256 / 256 = 6`` rows per expert, the regime bound by streaming every expert's
  weights once). The quick set's ``T16xE16xk6`` has the same rows per expert.

Imported by ``w8a8 bench`` (its cases register with :func:`bench.cases.register`); each case carries its
recipe, so the per-backend processes rebuild it without importing this module first.
"""

from __future__ import annotations

from .cases import E, BenchCase, dynamic_linear_case, register
from .moe_cases import moe_layer_case


@register
def roofline_cases(full: bool) -> list[BenchCase]:
    cases = [dynamic_linear_case(2048, 2048, 2048, ("quick", "peers"))]
    if full:
        cases.append(moe_layer_case(256, E, tags=("dsv4", "roofline")))
    return cases
