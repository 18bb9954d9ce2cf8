"""DeepSeek-V4 in ``w8a8 run``: a plain-torch forward from the checkpoint's own names.

* :mod:`.config` — ``config.json`` read and checked.
* :mod:`.readings` — the places the references disagree, each a named switch.
* :mod:`.forward` — the forward (hyper-connections, shared-KV attention with sinks, ratio 0 / 4 / 128,
  the lightning indexer, hash + score MoE, MTP).
* :mod:`.weights` — tensors of a model directory.
* :mod:`.serving` — quantized modules on a backend's serving path inside the forward.
* :mod:`.run` — the ``w8a8 run`` analysis for DeepSeek-V4.
"""
