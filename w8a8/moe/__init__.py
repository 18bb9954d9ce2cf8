"""Grouped MoE ops of the golden (routing, grouped matmul, SwiGLU + requant, finalize, the pipeline).

Ops mirroring torch_npu (hicann/ops-transformer ``gmm/``, ``moe/``; hicann/ops-nn; Ascend/op-plugin):
:func:`moe_gating_top_k_softmax`, :func:`moe_gating_top_k`, :func:`moe_init_routing`, :func:`moe_init_routing_v2`,
:func:`grouped_matmul`, :func:`swiglu`, :func:`dequant_swiglu_quant`, :func:`moe_finalize_routing`.
The serving path (SGLang ``hardware_backend/npu/quantization/moe_methods.py``, ``layers/moe/moe_runner/ascend.py``):
:func:`w8a8_moe`, :func:`w8a8_moe_prequantized` (and their ``*_stages``), :func:`dispatch_quant` (the int8 dispatch
model).

Where the device leaves outputs unwritten, the golden writes zeros and says which elements are
specified: :func:`valid_rows` (grouped_matmul, dequant_swiglu_quant) and
:func:`moe_init_routing_v2_valid`.

Each op's argument checks are its registered check, ``<op>_args`` in its module
(:func:`w8a8.registry.get` ``(op).check``): called by the golden op first and by every backend, so
that a backend rejects exactly what the golden rejects, with the same exception and message. The
layer's parts have their own: :func:`~w8a8.moe.pipeline.expert_weights_args`,
:func:`~w8a8.moe.pipeline.moe_routing_args`, :func:`~w8a8.moe.pipeline.shared_expert_args`, and
:func:`group_segments` checks every group list.

Every module of the package is imported here (which registers its ops) and what it lists in
``__all__`` is exported: a new module needs no edit of this file.
"""

from .. import registry as _registry
from ._common import group_segments, valid_rows

globals().update(_exports := _registry.exports(_registry.import_modules(__name__, __path__)))

__all__: list[str] = ["valid_rows", *_exports]
