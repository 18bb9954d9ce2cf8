"""Grouped MoE ops of the golden (routing, grouped matmul, SwiGLU + requant, finalize, the pipeline)."""

__all__: list[str] = []
