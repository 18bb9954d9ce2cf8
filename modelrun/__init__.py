"""Whole-model runs of quantized checkpoints: ``w8a8 run``.

* :mod:`.config` — the model families (Qwen2 / Qwen3 dense, DeepSeek-V3 MLA + MoE) from ``config.json``.
* :mod:`.forward` — a plain-torch forward, op for op as transformers computes it (bit-identical in fp32).
* :mod:`.weights` — float model directories and a checkpoint's float tensors.
* :mod:`.serving` — every quantized module on a backend's serving path inside that forward.
* :mod:`.bounds` — the analytic bound of each quantized Linear's error against its float module.
* :mod:`.analysis` — the run: logits agreement, per-module errors on real activations, one layer
  quantized at a time, MoE routing agreement, backends against the golden.
* :mod:`.report` — terminal table, JSON, HTML.
"""
