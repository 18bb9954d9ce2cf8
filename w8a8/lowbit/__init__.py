"""Low-bit formats of the golden (INT4 group-wise, W4A8, MXFP4/MXFP8, NVFP4, FP8 block)."""

__all__: list[str] = []
