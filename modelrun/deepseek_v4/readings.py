"""Where the DeepSeek-V4 references disagree, each a named switch of :class:`Readings`.

The sources (read, not run, except transformers and msModelSlim, which were run):

* **official** — DeepSeek's ``inference/model.py`` + ``kernel.py`` (DeepSeek-V4-Flash on the HF Hub), as
  copied near-verbatim by msModelSlim 26.1.0 ``msmodelslim/model/deepseek_v4/model.py`` (TileLang kernels
  replaced by torch reference functions) and by third-party copies;
* **msmodelslim** — that copy where it departs from the official code (its ``MoE.__init__``:
  ``self.shared_experts = Expert(args.dim, args.moe_inter_dim)`` "no swiglu_limit for shared experts";
  its torch ``hc_split_sinkhorn``: ``pre`` without ``+ eps``, 20 x (row, col) normalisations);
* **hf** — transformers 5.8.1 ``models/deepseek_v4/modeling_deepseek_v4.py`` (``DeepseekV4HyperConnection``,
  ``DeepseekV4MLP`` — the shared expert, no clamp —, ``DeepseekV4Experts`` — weight after ``down_proj`` —,
  ``DeepseekV4TopKRouter`` — ``F.linear`` in the model dtype, ``+ 1e-20`` —, ``DeepseekV4Indexer`` — no
  Hadamard rotation —, the compressors in the model dtype, eager attention in the model dtype);
* **sglang** / **vllm-ascend** (serving; read): the shared expert clamped (``DeepseekV2MLP`` with
  ``swiglu_limit`` / ``SiluAndMulWithClamp``), router logits in bf16 on NPU (SGLang) or fp32 (vllm-ascend
  ``model.py:383``), ``routed_scaling_factor`` applied to the MoE output, not the weights.

:data:`OFFICIAL` is the default. :data:`HF` is what the float test compares bit for bit with
transformers in fp32. :data:`MSMODELSLIM` is the calibration model of the checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

CHOICES = {
    # switch: {reading: sources}
    "shared_expert_clamp": {True: "official, sglang, vllm-ascend", False: "msmodelslim, hf 5.8.1"},
    "router_logits": {"fp32": "official, msmodelslim, vllm-ascend", "model": "hf, sglang (NPU: bf16 F.linear)"},
    "route_scale_at": {"weights": "official, msmodelslim, hf", "output": "sglang, vllm-ascend"},
    "router_topk": {"official": "sorted top-k, w / sum w (official, msmodelslim)",
                    "hf": "topk(sorted=False), w / (sum w + 1e-20) (hf)"},
    "expert_math": {"official": "fp32 SwiGLU, x routing weight before w2 (official, msmodelslim)",
                    "hf": "model-dtype SwiGLU, x routing weight after w2 (hf)"},
    "sinkhorn": {"official": "pre = sigmoid + eps; col, then (iters-1) x (row, col) (official kernel.py, hf)",
                 "msmodelslim": "pre = sigmoid; iters x (row, col) (msmodelslim's torch hc_split_sinkhorn)"},
    "hc_norm": {"mixes": "rsqrt(mean x^2) applied to the mixes (official, msmodelslim)",
                "input": "the flattened streams normalised before the fn matmul (hf)"},
    "rms_norm": {"official": "(w_fp32 * x_fp32) cast once (official, msmodelslim)",
                 "hf": "w * x.to(dtype) (hf)"},
    "compressor_dtype": {"fp32": "compressor projections and softmax pooling in fp32 (official, msmodelslim)",
                         "model": "in the model dtype (hf)"},
    "indexer": {"official": "Hadamard-rotated q and keys, scores in the model dtype (official, msmodelslim)",
                "hf": "no rotation, scores in fp32 (hf)"},
    "attention_dtype": {"fp32": "scores, softmax with sink and the weighted sum in fp32 (official sparse_attn)",
                        "model": "eager attention in the model dtype (hf)"},
    "rope": {"official": "fp32 cos / sin, complex product (official, msmodelslim)",
             "hf": "cos / sin cast to the model dtype, x*cos + rotate_half(x)*sin in fp32 (hf)"},
}


@dataclass(frozen=True)
class Readings:
    """One choice per disagreement (see :data:`CHOICES` for the readings and their sources)."""

    shared_expert_clamp: bool = True
    router_logits: str = "fp32"
    route_scale_at: str = "weights"
    router_topk: str = "official"
    expert_math: str = "official"
    sinkhorn: str = "official"
    hc_norm: str = "mixes"
    rms_norm: str = "official"
    compressor_dtype: str = "fp32"
    indexer: str = "official"
    attention_dtype: str = "fp32"
    rope: str = "official"

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if v not in CHOICES[f.name]:
                raise ValueError(f"Readings.{f.name}: expected one of {list(CHOICES[f.name])}, got {v!r}")

    def with_(self, **kw) -> "Readings":
        return replace(self, **kw)

    def differs(self, other: "Readings") -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)}


OFFICIAL = Readings()
HF = Readings(shared_expert_clamp=False, router_logits="model", router_topk="hf", expert_math="hf",
              hc_norm="input", rms_norm="hf", compressor_dtype="model", indexer="hf", attention_dtype="model",
              rope="hf")
MSMODELSLIM = OFFICIAL.with_(shared_expert_clamp=False, sinkhorn="msmodelslim")
PRESETS = {"official": OFFICIAL, "hf": HF, "msmodelslim": MSMODELSLIM}

# The single-switch variants ``w8a8 run`` reports the effect of (each against OFFICIAL).
TOGGLES = {
    "shared_expert_clamp": False, "router_logits": "model", "route_scale_at": "output",
    "sinkhorn": "msmodelslim", "compressor_dtype": "model", "indexer": "hf", "attention_dtype": "model",
}
