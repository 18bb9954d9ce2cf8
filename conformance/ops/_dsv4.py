"""DeepSeek-V4-Flash, the model whose shapes the bench cases use.

hidden H = 4096, moe_intermediate I = 2048, E = 256 routed experts + 1 shared, top-6. Dense Linear
shapes are those of the shared expert (W13: K = H, N = 2I; W2: K = I, N = H) and of the quantized
attention projections (:data:`ATTN_PROJ`); the MoE layer uses the routed experts. M is the number of tokens: decode M in {1, 16, 64}, prefill M in {512, 4096}. Quick
runs take M = 16 and 512 (and E = 16 for the MoE layer); full runs every M, the real E and a small
scaling grid.
"""

from __future__ import annotations

H, I, E, TOP_K = 4096, 2048, 256, 6
# The W8A8_DYNAMIC attention projections of the Flash W8A8 recipe, (K, N): attn.wq_a, attn.wq_b (64 heads x
# 512), attn.wkv (one 512-wide K = V head), attn.indexer.wq_b (64 indexer heads x 128). The compressor
# projections stay FLOAT (an fp32 / bf16 matmul: no quantized op of the backends to time).
ATTN_PROJ = {"wq_a": (H, 1024), "wq_b": (1024, 64 * 512), "wkv": (H, 512), "indexer.wq_b": (1024, 64 * 128)}
DECODE_M = (1, 16, 64)
PREFILL_M = (512, 4096)
QUICK_M = (16, 512)


def token_counts(full: bool) -> tuple[int, ...]:
    """The M (token counts) of a run: every decode and prefill M in a full run, the quick two otherwise."""
    return DECODE_M + PREFILL_M if full else QUICK_M


def tags(m: int, *extra: str) -> tuple[str, ...]:
    """``("dsv4", "quick"?, *extra)``: "quick" marks the M of the quick set."""
    return ("dsv4",) + (("quick",) if m in QUICK_M else ()) + extra
