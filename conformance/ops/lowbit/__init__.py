"""Declarations of the low-bit formats (INT4 group, W4A16, W4A8, MX, NVFP4, FP8 block).

Codes, packed words and E8M0 scale bytes compare bitwise; fp8 elements and block scales compare in
ULP of their format (bitwise by default); dequantized values and matmul outputs in ULP of their
output dtype.
"""
