"""Declarations of the dense W8A8 ops: quantizers, trans_quant_param, the GEMMs, the NZ layout, the two
Linear paths."""
