"""What the parent side (:mod:`.ops`) and the rank processes (:mod:`.tasks`) share, without torch."""

from __future__ import annotations

KEEP = 4   # loaded weight sets kept per rank (oldest dropped first)
PLANTS = ("quantizes_twice", "drops_scale_requantizes_with_routing_formula", "combine_bf16_weights", "arrival_order")
"""Deliberate bugs :func:`.tasks.moe_ep` can run with (``TorchDistBackend.plant``; tests only), the mistakes of
:mod:`conformance.ep_planted` made in the real exchange: the runner handed dequantized rows without their
scale (it quantizes a second time); the sender dropping the int8 path and the runner re-quantizing with the
``moe_init_routing_v2`` formula; a combine rounding the weights to bf16; a receiver keeping the arrival
order (no sort by local expert)."""


__all__ = ["KEEP", "PLANTS"]
