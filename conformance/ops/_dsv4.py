"""DeepSeek-V4-Flash, the model whose shapes the bench cases use.

hidden H = 4096, moe_intermediate I = 2048, E = 256 routed experts + 1 shared, top-6. Dense Linear
shapes are those of the shared expert (W13: K = H, N = 2I; W2: K = I, N = H); the MoE layer uses the
routed experts. M is the number of tokens: decode M in {1, 16, 64}, prefill M in {512, 4096}. Quick
runs take M = 16 and 512 (and E = 16 for the MoE layer); full runs every M, the real E and a small
scaling grid.
"""

from __future__ import annotations

H, I, E, TOP_K = 4096, 2048, 256, 6
DECODE_M = (1, 16, 64)
PREFILL_M = (512, 4096)
QUICK_M = (16, 512)


def token_counts(full: bool) -> tuple[int, ...]:
    """The M (token counts) of a run: every decode and prefill M in a full run, the quick two otherwise."""
    return DECODE_M + PREFILL_M if full else QUICK_M


def tags(m: int, *extra: str) -> tuple[str, ...]:
    """``("dsv4", "quick"?, *extra)``: "quick" marks the M of the quick set."""
    return ("dsv4",) + (("quick",) if m in QUICK_M else ()) + extra
