"""Make the tiny test checkpoints with msModelSlim 26.1.0 itself (not with this project's writer).

Runs only where msModelSlim is installed — in a separate environment, never in the project's own::

    python -m venv /tmp/mslim && /tmp/mslim/bin/pip install torch==2.13.0 msmodelslim==26.1.0 \
        transformers==4.51.0 tokenizers pyyaml
    /tmp/mslim/bin/python tests/modelrun/make_checkpoints.py            # rewrites tests/modelrun/data/

(check that ``pip install`` kept torch 2.13.0). What it does, in order:

1. a BPE tokenizer (the ``tokenizers`` library, Metaspace pre-tokenizer, trained on :data:`CORPUS`, 256
   ids including ``<|endoftext|>`` and ``<|extra_0|>``, which msModelSlim's Qwen2 adapter sets as eos /
   pad, and ``<unk>`` for characters outside the corpus);
2. three tiny random float models with transformers' own classes, saved with ``save_pretrained``
   (``data/float/``): Qwen2 in bf16 and in fp16 (hidden 64, 2 layers, 4 heads / 2 KV heads, q/k/v
   biases), and a DeepSeek-V3 model (``DeepseekV3ForCausalLM``: MLA, a dense first layer, then 8
   routed experts in 2 groups, top-2 of 1 group, one shared expert, a non-zero
   ``e_score_correction_bias``). A few norm channels are scaled up so the activations have outlier
   channels, as trained LLMs do;
3. the quantized checkpoints (``data/msmodelslim/``), each by one msModelSlim command line::

       msmodelslim quant --model_type Qwen2-7B --model_path data/float/qwen2-bf16 \
           --save_path data/msmodelslim/qwen2-w8a8-dynamic --device cpu \
           --config_path data/recipes/qwen2-w8a8-dynamic.yaml
       msmodelslim quant --model_type Qwen2-7B --model_path data/float/qwen2-bf16 \
           --save_path data/msmodelslim/qwen2-w8a8-bf16 --device cpu --config_path data/recipes/qwen2-w8a8.yaml
       msmodelslim quant --model_type Qwen2-7B --model_path data/float/qwen2-fp16 \
           --save_path data/msmodelslim/qwen2-w8a8-fp16 --device cpu --config_path data/recipes/qwen2-w8a8.yaml
       msmodelslim quant --model_type default --model_path data/float/dsv3-bf16 \
           --save_path data/msmodelslim/dsv3-mix --device cpu --config_path data/recipes/dsv3-mix.yaml

   The recipes are modelslim_v1 ``linear_quant`` steps in the structure of msModelSlim's
   ``lab_practice`` files (``default/default-w8a8.yaml``, ``qwq/qwq-32b-w8a8.yaml``,
   ``deepseek_v3_2/deepseek_w8a8.yaml``) without their anti-outlier steps (which fold scales into the
   float weights, so the exported int8 weights could not be compared with a quantization of the saved
   float model). Calibration: ``data/calib.jsonl`` (8 prompts);
4. ``data/calib_ranges.json``: for every static Linear, the final min / max of msModelSlim's own
   activation observer (recorded in-process when msModelSlim deploys the Linear, see
   :func:`quant_recording_ranges`; msModelSlim runs in this process for that, with the same
   arguments as the command lines above), so that the tests can check the calibration formula on
   every layer, not only on the first layer's q/k/v (whose input a float forward reproduces).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

CORPUS = """\
The quick brown fox jumps over the lazy dog. A tiny model reads a tiny text and answers a question.
Question: There are 15 trees in the grove. Grove workers will plant trees today. How many trees?
Let's think step by step. There are 15 trees originally, then there were 21 trees after planting.
So there must have been 21 - 15 = 6. The answer is 6.
Quantization maps floating point values to eight bit integers with a scale and an offset.
The scale is the largest magnitude divided by 127; the offset moves the zero point.
Attention, experts, routers and shared experts: a mixture of experts sends each token to a few experts.
Deep learning models run on accelerators; the numerics of each kernel decide the result, bit for bit.
"""

PROMPTS = [
    "Question: There are 15 trees in the grove. How many trees did the workers plant today?",
    "The quick brown fox jumps over the lazy dog.",
    "Quantization maps floating point values to eight bit integers.",
    "A mixture of experts sends each token to a few experts.",
    "Let's think step by step. The answer is 6.",
    "Deep learning models run on accelerators.",
    "The scale is the largest magnitude divided by 127.",
    "Attention, routers and shared experts decide the result, bit for bit.",
]

SPECIAL = ["<|endoftext|>", "<|extra_0|>", "<unk>"]
VOCAB = 256

DYNAMIC = {"act": {"scope": "per_token", "dtype": "int8", "symmetric": True, "method": "minmax"},
           "weight": {"scope": "per_channel", "dtype": "int8", "symmetric": True, "method": "minmax"}}
STATIC = {"act": {"scope": "per_tensor", "dtype": "int8", "symmetric": False, "method": "minmax"},
          "weight": {"scope": "per_channel", "dtype": "int8", "symmetric": True, "method": "minmax"}}


def recipe(config_id: str, steps: list[dict]) -> dict:
    return {"apiversion": "modelslim_v1",
            "metadata": {"config_id": config_id, "score": 50, "verified_model_types": [],
                         "label": {"w_bit": 8, "a_bit": 8, "is_sparse": False, "kv_cache": False}},
            "spec": {"process": steps, "dataset": "calib.jsonl",
                     "save": [{"type": "ascendv1_saver", "part_file_size": 4}]}}


RECIPES = {
    "qwen2-w8a8-dynamic": recipe("tiny-qwen2-w8a8-dynamic", [
        {"type": "linear_quant", "qconfig": DYNAMIC, "include": ["*"]}]),
    "qwen2-w8a8": recipe("tiny-qwen2-w8a8", [
        {"type": "linear_quant", "qconfig": STATIC, "include": ["*"]}]),
    "dsv3-mix": recipe("tiny-deepseek-w8a8-mix", [
        {"type": "linear_quant", "qconfig": STATIC, "include": ["*self_attn*"], "exclude": ["*kv_b_proj"]},
        {"type": "linear_quant", "qconfig": DYNAMIC, "include": ["*mlp*"], "exclude": ["*gate"]}]),
}

RUNS = [  # (model_type, float model, recipe, output)
    ("Qwen2-7B", "qwen2-bf16", "qwen2-w8a8-dynamic", "qwen2-w8a8-dynamic"),
    ("Qwen2-7B", "qwen2-bf16", "qwen2-w8a8", "qwen2-w8a8-bf16"),
    ("Qwen2-7B", "qwen2-fp16", "qwen2-w8a8", "qwen2-w8a8-fp16"),
    ("default", "dsv3-bf16", "dsv3-mix", "dsv3-mix"),
]


def make_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False)
    tok.train_from_iterator(CORPUS.splitlines() + PROMPTS, trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "pad_token": "<|extra_0|>",
        "model_max_length": 512, "unk_token": "<unk>", "clean_up_tokenization_spaces": False}, indent=2) + "\n")


def _outliers(model, generator) -> None:
    """Scale a few norm channels up (x8 / x4): trained LLMs have such activation outlier channels."""
    import torch

    with torch.no_grad():
        for layer in model.model.layers:
            for norm, factor in ((layer.input_layernorm, 8.0), (layer.post_attention_layernorm, 4.0)):
                idx = torch.randperm(norm.weight.numel(), generator=generator)[:2]
                norm.weight[idx] *= factor


def make_qwen2(out: Path, dtype) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      initializer_range=0.08, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=0, torch_dtype=dtype)
    torch.manual_seed(17)
    model = Qwen2ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(17)
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.1, generator=g)
    _outliers(model, g)
    model.to(dtype).save_pretrained(out, safe_serialization=True)


def make_dsv3(out: Path) -> None:
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    cfg = DeepseekV3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                           num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=8, n_shared_experts=1,
                           num_experts_per_tok=2, n_group=2, topk_group=1, routed_scaling_factor=2.5,
                           norm_topk_prob=True, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32,
                           kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                           max_position_embeddings=512, initializer_range=0.08, rms_norm_eps=1e-6,
                           rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=None, eos_token_id=0,
                           torch_dtype=torch.bfloat16)
    torch.manual_seed(18)
    model = DeepseekV3ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(18)
    with torch.no_grad():
        for layer in model.model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None and hasattr(gate, "e_score_correction_bias"):
                gate.e_score_correction_bias.normal_(0.0, 0.1, generator=g)
    _outliers(model, g)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)


def quant_recording_ranges(argv: list[str], ranges_out: Path) -> int:
    """Run ``msmodelslim quant ARGV`` in this process, recording for every Linear with a static
    (per-tensor) activation quantizer the min / max its observer holds when msModelSlim deploys it —
    the range msModelSlim itself computed the ``input_scale`` / ``input_offset`` from (during
    calibration msModelSlim fake-quantizes every Linear it has already visited, so deeper layers
    see the quantized model's activations; a float forward does not reproduce them)."""
    import torch
    from msmodelslim.cli.__main__ import main as cli_main
    from msmodelslim.core.quantizer.linear import LinearQuantizer
    from msmodelslim.processor.quant.linear import LinearQuantProcessor

    ranges: dict[str, list[float]] = {}
    deploy = LinearQuantProcessor._deploy

    def recording_deploy(self, prefix, module):
        for name, sub in module.named_modules(prefix=prefix):
            observer = getattr(getattr(sub, "input_quantizer", None), "minmax_observer", None)
            if isinstance(sub, LinearQuantizer) and sub.config.act is not None and \
                    str(sub.config.act.scope).lower().endswith("per_tensor") and observer is not None:
                lo, hi = observer.get_min_max()
                ranges[name] = [float(lo.to(torch.float32)), float(hi.to(torch.float32)), str(lo.dtype)]
        return deploy(self, prefix, module)

    LinearQuantProcessor._deploy = recording_deploy
    sys.argv = ["msmodelslim"] + argv
    try:
        rc = cli_main()
    except SystemExit as exc:
        rc = exc.code
    ranges_out.write_text(json.dumps(ranges))
    return int(rc or 0)


def main() -> int:
    import torch
    import yaml

    if importlib.util.find_spec("msmodelslim") is None:
        print("msmodelslim is not installed here (see this file's docstring)", file=sys.stderr)
        return 2
    if DATA.exists():
        shutil.rmtree(DATA)
    (DATA / "recipes").mkdir(parents=True)
    (DATA / "calib.jsonl").write_text("".join(json.dumps({"inputs_pretokenized": p}) + "\n" for p in PROMPTS))
    for name, data in RECIPES.items():
        (DATA / "recipes" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    tok_dir = DATA / "tokenizer"
    make_tokenizer(tok_dir)
    floats = DATA / "float"
    make_qwen2(floats / "qwen2-bf16", torch.bfloat16)
    make_qwen2(floats / "qwen2-fp16", torch.float16)
    make_dsv3(floats / "dsv3-bf16")
    for d in floats.iterdir():
        for f in tok_dir.iterdir():
            shutil.copy(f, d / f.name)
    ranges = {}
    work = Path(tempfile.mkdtemp(prefix="make_checkpoints-"))
    for model_type, src, rec, out in RUNS:
        save = DATA / "msmodelslim" / out
        run_recipe = work / f"{rec}.yaml"       # the committed recipe with the calibration file's absolute path
        data = dict(RECIPES[rec], spec=dict(RECIPES[rec]["spec"], dataset=str(DATA / "calib.jsonl")))
        run_recipe.write_text(yaml.safe_dump(data, sort_keys=False))
        argv = ["quant", "--model_type", model_type, "--model_path", str(floats / src),
                "--save_path", str(save), "--device", "cpu", "--config_path", str(run_recipe)]
        print("+ msmodelslim", " ".join(argv), flush=True)
        got = work / f"{out}.ranges.json"
        subprocess.run([sys.executable, __file__, "--quant-recording-ranges", str(got), *argv], check=True)
        ranges[out] = json.loads(got.read_text())
    (DATA / "calib_ranges.json").write_text(json.dumps(ranges, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(tok_dir)                    # every float model and checkpoint holds a copy
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--quant-recording-ranges":
        sys.exit(quant_recording_ranges(sys.argv[3:], Path(sys.argv[2])))
    sys.exit(main())
