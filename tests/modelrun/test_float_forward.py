"""modelrun's float forward against transformers' own models (4.51.0, the version that made the
msModelSlim fixtures), bit for bit: in fp32 (the issue's requirement) and in the model's dtype.

transformers is a test-only dependency (the ``test`` extra). Its models are built with
``from_config`` + ``load_state_dict`` (``from_pretrained`` needs accelerate in 4.51) and run with
eager attention, which modelrun mirrors (SDPA's fp32 results differ in their last bits).
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the test extra installs transformers==4.51.0")

from modelrun import config as C  # noqa: E402
from modelrun.forward import Model  # noqa: E402
from modelrun.weights import FloatModel  # noqa: E402

TOKENS = [[5, 17, 200, 3, 99, 42, 7, 8, 250, 1, 0, 13], [7], list(range(0, 255, 15))]


def _hf(path, dtype):
    cfg = transformers.AutoConfig.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, attn_implementation="eager").eval()
    fm = FloatModel(path)
    missing, unexpected = model.load_state_dict(fm.torch_tensors(dtype), strict=False)
    assert not missing and not unexpected
    return model, fm


def _assert_same(path, dtype):
    hf, fm = _hf(path, dtype)
    ours = Model(C.parse(fm.config), fm.torch_tensors(dtype))
    with torch.no_grad():
        for seq in TOKENS:
            ids = torch.tensor([seq])
            a = hf(input_ids=ids).logits[0]
            b = ours.forward(ids[0])[0]
            assert a.dtype == b.dtype == dtype
            assert torch.equal(a.view(torch.int16 if dtype != torch.float32 else torch.int32),
                               b.view(torch.int16 if dtype != torch.float32 else torch.int32)), (path, seq)


@pytest.mark.parametrize("name", ["qwen2-bf16", "qwen2-fp16", "dsv3-bf16"])
@pytest.mark.parametrize("dtype", ["float32", "model"])
def test_float_forward_is_transformers_bit_for_bit(data, name, dtype):
    path = data.float / name
    dt = torch.float32 if dtype == "float32" else {"bfloat16": torch.bfloat16, "float16": torch.float16}[
        json.loads((path / "config.json").read_text())["torch_dtype"]]
    _assert_same(path, dt)


def test_qwen3_float_forward(tmp_path):
    """Qwen3 (q_norm / k_norm per head, explicit head_dim, attention_bias): a random tiny model."""
    cfg = transformers.Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=24, attention_bias=True,
                                   max_position_embeddings=64, tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(3)
    model = transformers.Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)
    model.to(torch.bfloat16).save_pretrained(tmp_path, safe_serialization=True)
    _assert_same(tmp_path, torch.float32)
    _assert_same(tmp_path, torch.bfloat16)


def test_unsupported_families_are_refused():
    with pytest.raises(ValueError, match="DeepSeek-V4"):
        C.parse({"model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"]})
    with pytest.raises(ValueError, match="rope_scaling"):
        C.parse({"architectures": ["Qwen2ForCausalLM"], "rope_scaling": {"type": "yarn", "factor": 4}})
    with pytest.raises(ValueError, match="not a family"):
        C.parse({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    with pytest.raises(ValueError, match="'num_key_value_heads'"):
        C.parse({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
                 "num_key_value_heads": 3, "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 8})
