"""Make the tiny DeepSeek-V4 test checkpoints with msModelSlim 26.1.0 itself (its own model classes,
its own Flash W8A8 recipe, its own saver) — not with this project's code.

Runs only in a separate environment where msModelSlim is installed (CPU torch)::

    python3 -m venv /work/venvs/msmodelslim
    /work/venvs/msmodelslim/bin/pip install torch==2.13.0
    /work/venvs/msmodelslim/bin/pip install msmodelslim==26.1.0 transformers==4.48.2 tokenizers pyyaml \
        einops easydict==1.13 "pydantic>=2.10.1" "wcmatch>=10.0" "accelerate>=0.28.0" scipy pygtrie requests
    /work/venvs/msmodelslim/bin/python tests/modelrun/dsv4/make_checkpoints.py     # rewrites tests/modelrun/dsv4/data/

(transformers 4.48.2: the version msModelSlim's ``config.ini`` names for its ``deepseek_v4`` adapter; only
its tokenizer loading is used.) What it does:

1. a BPE tokenizer (``tests/modelrun/make_checkpoints.make_tokenizer``, 256 ids);
2. two tiny random float models built from msModelSlim's ``msmodelslim/model/deepseek_v4/model.py``
   classes (``ModelArgs``, ``Transformer``, ``Block``) and ``mtp_quant_module.MTPLayer``, saved as a
   DeepSeek-V4 release is (``data/float/``): native names (``embed``, ``layers.N.attn.wq_a``,
   ``layers.N.ffn.experts.E.w1``, ``hc_head_fn``, ``mtp.0.e_proj``...), bf16 weights, fp32 ``hc_*``,
   ``attn_sink``, ``ape`` and ``ffn.gate.bias``, int32 ``tid2eid``, an HF-style ``config.json``
   (``DeepseekV4ForCausalLM`` keys) and ``model.safetensors.index.json``. Both have 4 layers with
   ``compress_ratios`` ``[0, 4, 128, 4]`` (sliding window only; overlapping compressor + lightning
   indexer; non-overlapping compressor), ``num_hash_layers`` 2 (layers 0-1 route by ``tid2eid``),
   8 routed experts, top-6, one shared expert; ``dsv4-mtp-bf16`` adds the MTP block (``mtp.0``,
   ratio 0). A few norm channels are scaled up so the activations have outlier channels;
3. each quantized by one msModelSlim command line, run through :func:`quant` here so that the
   patches below can be switched on by name (``--patch NAME``)::

       python tests/modelrun/dsv4/make_checkpoints.py --quant --prequant data/prequant/<output> --patch load-config --patch flex-smooth-dtype -- \
           quant --model_type DeepSeek-V4-Flash --model_path data/float/dsv4-bf16 \
           --save_path data/msmodelslim/dsv4-w8a8 --device cpu --config_path <recipe>
       python tests/modelrun/dsv4/make_checkpoints.py --quant --prequant data/prequant/<output> --patch load-config --patch flex-smooth-dtype \
           --patch mtp-cpu-device --patch mtp-head-dtype -- \
           quant --model_type DeepSeek-V4-Flash --model_path data/float/dsv4-mtp-bf16 \
           --save_path data/msmodelslim/dsv4-mtp-w8a8 --device cpu --config_path <recipe>

   ``<recipe>`` is msModelSlim's ``lab_practice/deepseek_v4/deepseek_v4_flash_w8a8.yaml`` (copied
   byte for byte to ``data/recipes/``) with only its ``dataset:`` line pointed at ``data/calib.jsonl``
   (prompts of 130-200 tokens, so the ratio-128 layer's compressor emits entries in calibration).

With ``--prequant DIR`` it also writes ``data/prequant/<output>/``: the float model msModelSlim quantized,
in the checkpoint's names — the checkpoint's FLOAT tensors plus every quantized Linear's weight as it was
when msModelSlim installed its quantizer (after QuaRot and flex-smooth; recorded in-process, nothing
changed). It is the ``--reference`` of ``w8a8 run`` on these checkpoints: QuaRot rotates and flex-smooth
rescales the weights, so the original float model is the same function but not the same weights.

The patches (each small; none changes the arithmetic of a real DeepSeek-V4-Flash run):

* ``load-config``: ``DeepSeekV4ModelAdapter._load_config`` maps only 10 ``config.json`` keys and keeps
  the Flash defaults of ``ModelArgs`` for the rest (vocab, head_dim, rope dim, o_lora_rank, window,
  indexer sizes, hash layers, hc_mult, ...), so a tiny model fails ``load_state_dict``. The patch sets
  the remaining ``ModelArgs`` fields from their ``config.json`` keys after the original ran. For the
  real Flash ``config.json`` the values equal the defaults (YaRN factor aside: the defaults say 4, the
  release config 16 — the patch takes the config's).
* ``flex-smooth-dtype``: flex-smooth's ``attn_norm`` group concatenates the bf16 Linears (``wq_a``,
  ``wkv``, ``indexer.weights_proj``) with the fp32 compressor Linears; ``torch.matmul(bf16, fp32)``
  raises on CPU. The patch casts the concatenated weights to the activation's dtype inside the
  alpha/beta search only (the search picks a smoothing exponent; the scales applied to the weights are
  computed by msModelSlim as before). On an NPU the same matmul promotes instead of raising.
* ``mtp-cpu-device``: ``mtp_preprocess`` moves the MTP input modules to ``'npu'`` and back; the patch
  makes ``Module.to('npu')`` / ``Tensor.to('npu')`` a no-op while it runs (CPU calibration).
* ``mtp-head-dtype``: ``mtp_preprocess`` calls the fp32 ``head`` on bf16 hidden states (on an NPU
  ``F.linear`` promotes; on CPU it raises); the patch casts the head's input to the head's dtype, as
  ``Transformer.forward`` does itself (``self.head(h[:, -1].float())``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RECIPE_NAME = "deepseek_v4_flash_w8a8.yaml"

_spec = importlib.util.spec_from_file_location("modelrun_make_checkpoints", HERE.parent / "make_checkpoints.py")
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)                       # the Qwen / DSV3 maker: its corpus and tokenizer
CORPUS, make_tokenizer = _base.CORPUS, _base.make_tokenizer

# The tiny configuration (config.json keys, HF DeepseekV4Config names).
CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "torch_dtype": "bfloat16",
    "vocab_size": 256, "hidden_size": 64, "moe_intermediate_size": 32, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 16,
    "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 16, "sliding_window": 16,
    "compress_ratios": [0, 4, 128, 4, 0], "compress_rope_theta": 160000.0, "rope_theta": 10000.0,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "index_n_heads": 2, "index_head_dim": 16, "index_topk": 8,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 6, "scoring_func": "sqrtsoftplus",
    "norm_topk_prob": True, "routed_scaling_factor": 1.5, "num_hash_layers": 2, "swiglu_limit": 10.0,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1,
    "num_nextn_predict_layers": 0,
}
MODELS = {"dsv4-bf16": 0, "dsv4-mtp-bf16": 1}          # float model -> MTP layers
RUNS = [  # (float model, output, patches)
    ("dsv4-bf16", "dsv4-w8a8", ["load-config", "flex-smooth-dtype"]),
    ("dsv4-mtp-bf16", "dsv4-mtp-w8a8", ["load-config", "flex-smooth-dtype", "mtp-cpu-device", "mtp-head-dtype"]),
]
FP32_SUFFIXES = ("hc_attn_fn", "hc_ffn_fn", "hc_attn_base", "hc_ffn_base", "hc_attn_scale", "hc_ffn_scale",
                 "hc_head_fn", "hc_head_base", "hc_head_scale", "attn_sink", ".ape", "gate.bias")


def prompts() -> list[str]:
    """Calibration prompts of 130-200 tokens (the ratio-128 compressor emits one entry per 128 tokens)."""
    lines = [ln for ln in CORPUS.splitlines() if ln]
    return [" ".join(lines[i:] + lines[:i]) for i in range(4)]


# -- the float models --------------------------------------------------------------------------------
def model_args(n_mtp: int):
    from msmodelslim.model.deepseek_v4.model import ModelArgs

    c = CONFIG
    rs = c["rope_scaling"]
    return ModelArgs(
        vocab_size=c["vocab_size"], dim=c["hidden_size"], moe_inter_dim=c["moe_intermediate_size"],
        num_hidden_layers=c["num_hidden_layers"], n_hash_layers=c["num_hash_layers"], n_heads=c["num_attention_heads"],
        n_routed_experts=c["n_routed_experts"], n_shared_experts=c["n_shared_experts"],
        n_activated_experts=c["num_experts_per_tok"], score_func=c["scoring_func"],
        route_scale=c["routed_scaling_factor"], swiglu_limit=c["swiglu_limit"], q_lora_rank=c["q_lora_rank"],
        head_dim=c["head_dim"], rope_head_dim=c["qk_rope_head_dim"], norm_eps=c["rms_norm_eps"],
        o_groups=c["o_groups"], o_lora_rank=c["o_lora_rank"], window_size=c["sliding_window"],
        compress_ratios=tuple(1 if r == 0 else r for r in c["compress_ratios"]),
        compress_rope_theta=c["compress_rope_theta"], original_seq_len=rs["original_max_position_embeddings"],
        rope_theta=c["rope_theta"], rope_factor=rs["factor"], beta_fast=rs["beta_fast"], beta_slow=rs["beta_slow"],
        index_n_heads=c["index_n_heads"], index_head_dim=c["index_head_dim"], index_topk=c["index_topk"],
        hc_mult=c["hc_mult"], hc_sinkhorn_iters=c["hc_sinkhorn_iters"], hc_eps=c["hc_eps"], n_mtp_layers=n_mtp)


def _init(name: str, p, g, args) -> None:
    """Random values of a trained model's character for each parameter (msModelSlim's classes leave most
    of them ``torch.empty``)."""
    import torch

    with torch.no_grad():
        if name.endswith("tid2eid"):
            p.copy_(torch.stack([torch.randperm(args.n_routed_experts, generator=g)[:args.n_activated_experts]
                                 for _ in range(p.shape[0])]).to(p.dtype))
        elif "hc_" in name and name.endswith("_fn"):
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
        elif "hc_" in name and name.endswith("_scale"):
            p.copy_(0.5 + torch.rand(p.shape, generator=g))
        elif "hc_" in name and name.endswith("_base"):
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        elif name.endswith("attn_sink") or name.endswith("gate.bias"):
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        elif name.endswith(".ape"):
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        elif name.endswith("norm.weight"):
            w = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            if name.endswith(("attn_norm.weight", "ffn_norm.weight")):
                w[torch.randperm(p.numel(), generator=g)[:2]] *= 6.0      # activation outlier channels
            p.copy_(w)
        elif name.endswith("embed.weight") or name.endswith("tok_emb.weight"):
            p.copy_(torch.randn(p.shape, generator=g))
        else:                                                          # Linear weights
            p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)


def make_float(out: Path, n_mtp: int, seed: int) -> None:
    import torch
    from safetensors.torch import save_file
    from msmodelslim.model.deepseek_v4.model import Block, Transformer
    from msmodelslim.model.deepseek_v4.mtp_quant_module import MTPLayer

    args = model_args(n_mtp)
    torch.set_default_dtype(torch.bfloat16)                  # as DeepSeekV4ModelAdapter.init_model
    model = Transformer(args)
    mtp = []
    for i in range(n_mtp):
        block, extra = Block(args.num_hidden_layers + i, args), MTPLayer(args)
        mtp.append((f"mtp.{i}.", block, extra))
    torch.set_default_dtype(torch.float32)
    g = torch.Generator().manual_seed(seed)
    state = {}
    for prefix, module in [("", model)] + [(p, m) for p, b, e in mtp for m in (b, e)]:
        for name, p in module.named_parameters():
            if prefix and name in ("emb.tok_emb.weight", "head.weight"):
                continue                                      # shared with the main model (get_mtp_layer)
            _init(prefix + name, p, g, args)
            state[prefix + name] = p.detach()
    tensors = {}
    for name, t in state.items():
        if t.dtype in (torch.int32, torch.int64):
            tensors[name] = t.to(torch.int32).contiguous()
        elif name.endswith(FP32_SUFFIXES):
            tensors[name] = t.to(torch.float32).contiguous()
        else:
            tensors[name] = t.to(torch.bfloat16).contiguous()     # the release stores the rest in bf16
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: "model.safetensors" for k in sorted(tensors)}}, indent=1) + "\n")
    cfg = dict(CONFIG, num_nextn_predict_layers=n_mtp)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


# -- the patches -------------------------------------------------------------------------------------
CONFIG_KEYS = {  # ModelArgs field -> config.json key (the ones _get_args_mapping leaves out)
    "vocab_size": "vocab_size", "head_dim": "head_dim", "rope_head_dim": "qk_rope_head_dim",
    "o_lora_rank": "o_lora_rank", "window_size": "sliding_window", "index_n_heads": "index_n_heads",
    "index_head_dim": "index_head_dim", "n_hash_layers": "num_hash_layers", "hc_mult": "hc_mult",
    "hc_sinkhorn_iters": "hc_sinkhorn_iters", "hc_eps": "hc_eps", "norm_eps": "rms_norm_eps",
    "n_activated_experts": "num_experts_per_tok", "n_shared_experts": "n_shared_experts",
    "swiglu_limit": "swiglu_limit", "rope_theta": "rope_theta", "compress_rope_theta": "compress_rope_theta",
    "score_func": "scoring_func",
}
ROPE_KEYS = {"rope_factor": "factor", "original_seq_len": "original_max_position_embeddings",
             "beta_fast": "beta_fast", "beta_slow": "beta_slow"}


def patch_load_config(stack) -> None:
    from msmodelslim.model.deepseek_v4.model_adapter import DeepSeekV4ModelAdapter

    original = DeepSeekV4ModelAdapter._load_config

    def load_config(self, *a, **kw):
        args = original(self, *a, **kw)
        cfg = json.loads((Path(self.model_path) / "config.json").read_text())
        for field, key in CONFIG_KEYS.items():
            if key in cfg:
                setattr(args, field, cfg[key])
        for field, key in ROPE_KEYS.items():
            if key in (cfg.get("rope_scaling") or {}):
                setattr(args, field, cfg["rope_scaling"][key])
        return args

    stack.enter_context(_attr(DeepSeekV4ModelAdapter, "_load_config", load_config))


def patch_flex_smooth_dtype(stack) -> None:
    from msmodelslim.processor.anti_outlier.flex_smooth import alpha_beta_search as abs_

    cls = abs_.FlexSmoothAlphaBetaSearcher
    original = cls.search_alpha_beta

    def search_alpha_beta(self, act, weights, **kw):
        return original(self, act, weights.to(act.dtype), **kw)

    stack.enter_context(_attr(cls, "search_alpha_beta", search_alpha_beta))


def patch_mtp_cpu_device(stack) -> None:
    import torch
    from msmodelslim.model.deepseek_v4.model_adapter import DeepSeekV4ModelAdapter

    original = DeepSeekV4ModelAdapter.mtp_preprocess
    module_to, tensor_to = torch.nn.Module.to, torch.Tensor.to

    def no_npu(fn):
        def to(self, *a, **kw):
            if a and a[0] == "npu":
                return self
            return fn(self, *a, **kw)
        return to

    def mtp_preprocess(self, *a, **kw):
        with _attr(torch.nn.Module, "to", no_npu(module_to)), _attr(torch.Tensor, "to", no_npu(tensor_to)):
            return original(self, *a, **kw)

    stack.enter_context(_attr(DeepSeekV4ModelAdapter, "mtp_preprocess", mtp_preprocess))


def patch_mtp_head_dtype(stack) -> None:
    from msmodelslim.model.deepseek_v4.model_adapter import DeepSeekV4ModelAdapter

    original = DeepSeekV4ModelAdapter.mtp_preprocess

    def mtp_preprocess(self, model, *a, **kw):
        hook = model.head.register_forward_pre_hook(lambda m, inp: (inp[0].to(m.weight.dtype),))
        try:
            return original(self, model, *a, **kw)
        finally:
            hook.remove()

    stack.enter_context(_attr(DeepSeekV4ModelAdapter, "mtp_preprocess", mtp_preprocess))


PATCHES = {"load-config": patch_load_config, "flex-smooth-dtype": patch_flex_smooth_dtype,
           "mtp-cpu-device": patch_mtp_cpu_device, "mtp-head-dtype": patch_mtp_head_dtype}


@contextlib.contextmanager
def _attr(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def record_prequant(stack, recorded: dict) -> None:
    """Record the float weight of every Linear when msModelSlim installs its quantizer — after QuaRot and
    flex-smooth, so the weight msModelSlim itself quantizes (a recording; nothing is changed)."""
    from msmodelslim.processor.quant.linear import LinearQuantProcessor

    original = LinearQuantProcessor._process_linear

    def process_linear(self, full_name, module):
        recorded[full_name + ".weight"] = module.weight.detach().clone()
        return original(self, full_name, module)

    stack.enter_context(_attr(LinearQuantProcessor, "_process_linear", process_linear))


def write_prequant(save: Path, recorded: dict, out: Path) -> None:
    """``out``: a float model in the checkpoint's own names — its FLOAT tensors as saved, plus each quantized
    Linear's weight as msModelSlim had it just before quantizing (:func:`record_prequant`)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    desc = json.loads((save / "quant_model_description.json").read_text())
    tensors = {}
    for f in sorted(save.glob("quant_model_weights-*.safetensors")):
        with safe_open(str(f), "pt") as h:
            for k in h.keys():
                if desc.get(k) == "FLOAT":
                    tensors[k] = h.get_tensor(k)
    for k, w in recorded.items():
        tensors[k] = w.contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(save / name, out / name)


def quant(patches: list[str], argv: list[str], prequant: Path | None = None) -> int:
    """``msmodelslim ARGV`` in this process with the named patches on; with ``prequant``, also the float
    model msModelSlim quantized (:func:`write_prequant`)."""
    from msmodelslim.cli.__main__ import main as cli_main

    unknown = [p for p in patches if p not in PATCHES]
    if unknown:
        raise SystemExit(f"--patch: unknown {unknown}; expected some of {sorted(PATCHES)}")
    recorded: dict = {}
    rc = 0
    with contextlib.ExitStack() as stack:
        for p in patches:
            PATCHES[p](stack)
        if prequant is not None:
            record_prequant(stack, recorded)
        sys.argv = ["msmodelslim"] + argv
        try:
            cli_main()
        except SystemExit as exc:
            rc = int(exc.code or 0)
    if rc == 0 and prequant is not None:
        write_prequant(Path(argv[argv.index("--save_path") + 1]), recorded, prequant)
    return rc


def main() -> int:
    import msmodelslim

    if DATA.exists():
        shutil.rmtree(DATA)
    (DATA / "recipes").mkdir(parents=True)
    src_recipe = Path(msmodelslim.__file__).parent / "lab_practice" / "deepseek_v4" / RECIPE_NAME
    shutil.copy(src_recipe, DATA / "recipes" / RECIPE_NAME)
    (DATA / "calib.jsonl").write_text("".join(json.dumps({"inputs_pretokenized": p}) + "\n" for p in prompts()))
    tok = DATA / "tokenizer"
    make_tokenizer(tok)
    for i, (name, n_mtp) in enumerate(MODELS.items()):
        make_float(DATA / "float" / name, n_mtp, seed=100 + i)
        for f in tok.iterdir():
            shutil.copy(f, DATA / "float" / name / f.name)
    work = Path(tempfile.mkdtemp(prefix="make_dsv4-"))
    text = src_recipe.read_text()
    assert "dataset: mix_calib.jsonl" in text
    run_recipe = work / RECIPE_NAME
    run_recipe.write_text(text.replace("dataset: mix_calib.jsonl", f"dataset: {DATA / 'calib.jsonl'}"))
    for src, out, patches in RUNS:
        argv = ["quant", "--model_type", "DeepSeek-V4-Flash", "--model_path", str(DATA / "float" / src),
                "--save_path", str(DATA / "msmodelslim" / out), "--device", "cpu", "--config_path", str(run_recipe)]
        cmd = [sys.executable, __file__, "--quant", "--prequant", str(DATA / "prequant" / out)] + \
            [a for p in patches for a in ("--patch", p)] + ["--"] + argv
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(tok)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--quant":
        rest = sys.argv[2:]
        sep = rest.index("--")
        names = [rest[i + 1] for i in range(0, sep, 2) if rest[i] == "--patch"]
        pre = [Path(rest[i + 1]) for i in range(0, sep, 2) if rest[i] == "--prequant"]
        sys.exit(quant(names, rest[sep + 1:], pre[0] if pre else None))
    if importlib.util.find_spec("msmodelslim") is None:
        print("msmodelslim is not installed here (see this file's docstring)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
