"""Make a tiny fp16 Qwen3 and its static W8A8 checkpoint with msModelSlim 26.1.0 itself.

Runs only where msModelSlim is installed, in a separate environment (never the project's own)::

    python -m venv /work/venvs/msmodelslim-v && /work/venvs/msmodelslim-v/bin/pip install torch==2.13.0
    /work/venvs/msmodelslim-v/bin/pip install msmodelslim==26.1.0        # brings transformers 4.51.0
    /work/venvs/msmodelslim-v/bin/python tests/checkpoints/make_fp16_static.py   # rewrites data/fp16-static/

What it writes under ``tests/checkpoints/data/fp16-static/``:

1. ``float/``: a random ``Qwen3ForCausalLM`` (hidden 64, 2 layers, 4 heads / 2 KV heads, head_dim 16,
   intermediate 96) saved by ``save_pretrained`` in **fp16**, with a **slow tokenizer only**: ``vocab.json`` +
   ``merges.txt`` of a byte-level BPE trained with the ``tokenizers`` library on :data:`CORPUS` (and a
   ``tokenizer_config.json`` naming ``Qwen2Tokenizer``, as Qwen2/Qwen3 ship it) — no ``tokenizer.json``. With transformers' initialisation (std 0.02) every
   per-channel weight scale (amax/127, ~6e-4) times the input scale (~3e-2, ~1e-3 into down_proj) falls below
   fp16's smallest normal (2^-14 = 6.1e-5): msModelSlim computes ``deq_scale = input_scale * weight_scale`` in
   the model dtype, so every deq_scale is an fp16 **subnormal** (a multiple of 2^-24), down_proj's with 3-4
   significant bits only;
2. ``w8a8/``: ``msmodelslim quant --model_type default --model_path float --save_path w8a8 --device cpu
   --config_path <recipe>`` with a modelslim_v1 ``linear_quant`` recipe (per-tensor asymmetric minmax
   activations, per-channel symmetric minmax weights, no anti-outlier step), calibrated on :data:`PROMPTS`;
3. ``prompts.txt``: the prompts ``w8a8 inspect --verify --prompts`` reads for real activations, and
   ``prompt_ids.json``: their ids by transformers' ``AutoTokenizer`` on the slow files (an encoder this project
   did not write, for the tokenizer test).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "data" / "fp16-static"
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Quantization maps floating point values to eight bit integers and back again.",
    "A static scale is calibrated once on a few prompts; a dynamic one is measured on every token.",
    "Question: how many trees are in the grove after the workers plant six more? Answer: twenty one.",
    "Numbers like 3.14159, 2.71828 and 1.41421 appear in many texts about mathematics.",
]
PROMPTS = CORPUS[:3] + ["The lazy dog sleeps while the quick fox counts eight bit integers."]
RECIPE = {
    "apiversion": "modelslim_v1",
    "metadata": {"config_id": "tiny-qwen3-fp16-w8a8", "score": 50, "verified_model_types": [],
                 "label": {"w_bit": 8, "a_bit": 8, "is_sparse": False, "kv_cache": False}},
    "spec": {"process": [{"type": "linear_quant",
                          "qconfig": {"act": {"scope": "per_tensor", "dtype": "int8", "symmetric": False,
                                              "method": "minmax"},
                                      "weight": {"scope": "per_channel", "dtype": "int8", "symmetric": True,
                                                 "method": "minmax"}},
                          "include": ["*"]}],
             "dataset": "calib.jsonl", "save": [{"type": "ascendv1_saver", "part_file_size": 4}]},
}


def make_tokenizer(out: Path) -> None:
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(CORPUS * 4, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"])
    out.mkdir(parents=True, exist_ok=True)
    tok.save_model(str(out))                                  # vocab.json + merges.txt, the slow files
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|endoftext|>",
        "unk_token": None, "pad_token": "<|endoftext|>", "model_max_length": 2048,
        "add_prefix_space": False}, indent=1))


def make_qwen3(out: Path, vocab: int) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(24)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                      tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, torch_dtype="float16")
    model = Qwen3ForCausalLM(cfg).to(torch.float16)
    model.save_pretrained(out, safe_serialization=True)


def write_prompt_ids(floats: Path) -> None:
    """The ids of PROMPTS and CORPUS by transformers' slow tokenizers on vocab.json + merges.txt: Qwen2Tokenizer
    (what the folder names) and GPT2Tokenizer (the other byte-level family)."""
    from transformers import GPT2Tokenizer, Qwen2Tokenizer

    texts = PROMPTS + CORPUS
    out = {"texts": texts}
    for cls in (Qwen2Tokenizer, GPT2Tokenizer):
        tok = cls(str(floats / "vocab.json"), str(floats / "merges.txt"))
        out[cls.__name__] = [tok(p)["input_ids"] for p in texts]
    (OUT / "prompt_ids.json").write_text(json.dumps(out) + "\n")


def main() -> int:
    import yaml

    if OUT.exists():
        shutil.rmtree(OUT)
    floats = OUT / "float"
    make_tokenizer(floats)
    vocab = len(json.loads((floats / "vocab.json").read_text()))
    make_qwen3(floats, vocab)
    (OUT / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    write_prompt_ids(floats)
    work = Path(tempfile.mkdtemp(prefix="make_fp16_static-"))
    calib = work / "calib.jsonl"
    calib.write_text("".join(json.dumps({"inputs_pretokenized": p}) + "\n" for p in PROMPTS))
    recipe = work / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(dict(RECIPE, spec=dict(RECIPE["spec"], dataset=str(calib))), sort_keys=False))
    argv = ["quant", "--model_type", "default", "--model_path", str(floats), "--save_path", str(OUT / "w8a8"),
            "--device", "cpu", "--config_path", str(recipe)]
    print("+ msmodelslim", " ".join(argv), flush=True)
    subprocess.run([str(Path(sys.executable).with_name("msmodelslim")), *argv], check=True)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
