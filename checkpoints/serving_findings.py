"""Where a serving engine's composition of a checkpoint's MoE layers is likely wrong or refused.

:func:`findings` reads the resolved checkpoint (:func:`checkpoints.resolve`) against one
:class:`w8a8.serving.Serving` record and returns the findings ``w8a8 inspect --serving`` adds, each
naming the engine's source (``file@commit``) it rests on:

* row M10, SGLang: a MoE whose W13 (expert 0's gate / up) is ``W8A8_DYNAMIC`` and whose W2 (down) is
  ``FLOAT`` or ``W8A8`` — SGLang's ``get_moe_scheme`` builds the W8A8_DYNAMIC MoE scheme for the grouped
  weight and has no W2 scheme for the other type: an error (the checkpoint does not load as described).
* row M1, SGLang: a quantized MoE of a model whose ``config.json`` sets ``swiglu_limit`` (DeepSeek-V4):
  the ascend_tp path builds its fused SwiGLU-quant without the limit, so the routed experts run
  unclamped while the model was trained with the clamp — a warning (likely an engine bug).

vllm-ascend's record gives neither finding (its fused MoE takes ``swiglu_limit``; its scheme table is
the loader's, which ``checkpoints.resolve`` already applies).
"""

from __future__ import annotations

from .issues import Findings

__all__ = ["findings"]

UNMATCHED_W2 = ("FLOAT", "W8A8")
"""The W2 types SGLang refuses beside a W8A8_DYNAMIC W13 (row M10)."""


def findings(resolution, serving) -> Findings:
    """The M10 / M1 findings of ``resolution`` under ``serving`` (a record or its name), in module order."""
    import w8a8

    sv = w8a8.serving.get(serving)
    out = Findings()
    cfg = resolution.checkpoint.config or {}
    limit = cfg.get("swiglu_limit")
    for m in resolution.modules:
        if m.kind != "moe" or m.moe is None:
            continue
        w13, w2 = m.moe.w13_scheme, m.moe.w2_scheme
        if sv.moe_scheme.value == "sglang" and w13 == "W8A8_DYNAMIC" and w2 in UNMATCHED_W2:
            out.error(m.name, f"W13 W8A8_DYNAMIC with W2 {w2}: SGLang builds the W8A8_DYNAMIC MoE scheme and has "
                              f"no {w2} W2 beside it, so the layer does not load as described (row M10; "
                              f"{sv.moe_scheme.source})", "serving-moe-w2-scheme")
        if sv.routed_clamp.value == "none" and limit is not None and w13 == "W8A8_DYNAMIC":
            out.warning(m.name, f"config.json swiglu_limit={limit}, but {sv.name}'s routed experts run unclamped on "
                                f"this path (row M1; {sv.routed_clamp.source}): likely an engine bug; the shared "
                                "expert is clamped", "serving-routed-unclamped")
    return out
