"""Declarations of the grouped-MoE ops: gating, routing (v1, v2), grouped matmul, SwiGLU (+ requant),
finalize, and the whole W8A8 MoE layer (plus its pre-quantized INT8-dispatch entry point).

Strategies cover empty experts, every token to one expert, top-k = E, capacity drops and partial
group lists. Rows the device leaves unwritten (past a group-list total, past the routed rows) are
masked out of every comparison (``w8a8.valid_rows``, ``w8a8.moe_init_routing_v2_valid``).
"""
