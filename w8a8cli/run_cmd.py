"""``w8a8 run CKPT --reference FLOAT_DIR``: what the serving path computes for a quantized model, layer by layer.

Runs the whole model twice on the same tokens — the float model (``--reference``, the directory it
was exported from) and the checkpoint with every quantized module on the backend's serving path
(golden ``numpy``, ``torch-cpu``, ``torch-npu``) — and reports: logits rel-L2 and top-1 / top-k
agreement; per quantized module, on the activations it really saw, SQNR, max error, the analytic
error bound and the elements beyond it, saturated static activations, activation outlier channels;
the logits with one layer quantized at a time; MoE routing agreement and its causes; the first
module beyond its bound; whether each backend matched the golden bit for bit on those activations.

Families: Qwen2 / Qwen3 dense, DeepSeek-V3 (MLA + MoE); the float forward is transformers' op for
op (bit-identical in fp32). Float parts (attention core, norms, FLOAT Linears) run in torch on the
CPU in the model dtype; only quantized modules run the backend's kernels.

Tokens: ``--tokens 1,2,3`` (ids; repeat for several sequences) or ``--prompts FILE`` (one prompt a
line, tokenized with the checkpoint's own tokenizer.json through the ``tokenizers`` library). At most
``--max-tokens`` in all (default 512).

Exit status: 0 done; 1 a module's error exceeds its bound or a backend differs from the golden;
2 bad arguments, an unreadable or erroneous checkpoint, or a reference that does not match it.
"""

from __future__ import annotations

import json
import sys

from . import validate

MAX_TOKENS = 4096
"""The most tokens ``--max-tokens`` may allow: every quantized module's input is kept for the analysis."""

HELP = "run a quantized checkpoint end to end against its float model: logits, per-module errors, routing, backends"
DESCRIPTION = __doc__


def add_arguments(parser) -> None:
    parser.add_argument("path", metavar="CKPT", help="checkpoint directory (quant_model_description.json + weights)")
    parser.add_argument("--reference", metavar="FLOAT_DIR", required=True,
                        help="the float model the checkpoint was exported from (config.json + *.safetensors)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompts", metavar="FILE", help="prompts, one a line (tokenized with the checkpoint's tokenizer)")
    src.add_argument("--tokens", metavar="IDS", action="append",
                     help="token ids of one sequence, comma-separated (repeat for more sequences)")
    parser.add_argument("--backend", action="append", metavar="B",
                        help="backend of the quantized modules; more than one: the first runs, every one is compared "
                             "with the golden on the same inputs (default: numpy)")
    parser.add_argument("--layers", default="*", metavar="GLOB",
                        help="quantize only modules (or layers, e.g. 'layers.0') matching GLOB, which must match "
                             "some module; the rest float (default: all)")
    parser.add_argument("--top-k", type=int, default=5, help="k of the top-k agreement (>= 1; default 5)")
    parser.add_argument("--max-tokens", type=int, default=512,
                        help=f"bound on the tokens of all sequences (1..{MAX_TOKENS}; default 512)")
    parser.add_argument("--no-per-layer", action="store_true", help="skip the one-layer-at-a-time runs")
    parser.add_argument("--loader", choices=("sglang", "vllm-ascend"), default="sglang",
                        help="whose loading rules resolve the modules (default: sglang)")
    parser.add_argument("--serving", choices=("sglang", "vllm-ascend"), default="sglang",
                        help="whose composition of the ops the quantized modules follow (w8a8.serving: where "
                             "routed_scaling_factor is applied, the clamps, the router logits' dtype; default: sglang)")
    parser.add_argument("--out", metavar="DIR", help="also write run.json and run.html (with plots) into DIR "
                                                     "(a directory or creatable, writable)")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")


def _sequences(args) -> list[list[int]]:
    if args.tokens:
        seqs = []
        for text in args.tokens:
            try:
                seqs.append([int(t) for t in text.replace(" ", "").split(",") if t != ""])
            except ValueError:
                raise ValueError(f"--tokens must be comma-separated integers; got {text!r}") from None
            if any(t < 0 for t in seqs[-1]):
                raise validate.UsageError("--tokens", "token ids >= 0", repr(text))
        return seqs
    from pathlib import Path

    from modelrun.analysis import encode_prompts

    path = Path(args.prompts)
    if not path.is_file():
        raise ValueError(f"--prompts: {path} is not a file")
    if path.stat().st_size > 1 << 20:
        raise ValueError(f"--prompts: {path} is larger than 1 MiB")
    prompts = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"--prompts: {path} holds no prompt")
    return encode_prompts([args.path, args.reference], prompts)


def check(args) -> None:
    """The numbers, the folders and the prompts file, before anything is read (UsageError)."""
    validate.check_number(args.top_k, "--top-k", kind="int", low=1)
    validate.check_number(args.max_tokens, "--max-tokens", kind="int", low=1, high=MAX_TOKENS)
    validate.in_dir(args.path, "CKPT", "a checkpoint directory")
    validate.in_dir(args.reference, "--reference", "the float model's directory")
    if args.prompts:
        validate.in_file(args.prompts, "--prompts", "a file of prompts")
    if args.out:
        validate.out_dir(args.out)


def check_layers(path: str, glob: str, loader: str) -> None:
    """``--layers`` must select some module of the checkpoint (headers only are read): UsageError naming the
    pattern and a few module names otherwise."""
    from checkpoints import CheckpointError, analyze
    from modelrun.analysis import _select

    if glob == "*":
        return
    try:
        modules = analyze(path, loader=loader, read_data=False).resolution.modules
    except CheckpointError:
        return  # the analysis reports the checkpoint's own errors
    pick = _select(glob)
    if not any(pick(m.name) for m in modules):
        raise validate.no_match(glob, [m.name for m in modules])


def run(args) -> int:
    from checkpoints import CheckpointError
    from modelrun import analysis, report

    check(args)
    try:
        seqs = _sequences(args)
        total = sum(len(s) for s in seqs)
        if total > args.max_tokens:
            raise validate.UsageError("--tokens", f"at most --max-tokens {args.max_tokens} tokens in all", total)
        check_layers(args.path, args.layers, args.loader)
        out = analysis.run(args.path, args.reference, seqs, backends=tuple(args.backend or ["numpy"]),
                           layers=args.layers, top_k=args.top_k, max_tokens=args.max_tokens,
                           per_layer=not args.no_per_layer, loader=args.loader, serving=args.serving)
    except validate.UsageError:
        raise
    except (ValueError, CheckpointError) as exc:
        print(f"w8a8 run: {exc}", file=sys.stderr)
        return 2
    if args.out:
        paths = report.write(out, args.out)
        out["files"] = {k: str(v) for k, v in paths.items()}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print(f"serving composition: {out['serving']} (w8a8.serving; --serving)")
        report.print_report(out)
        if args.out:
            print(f"wrote {out['files']['json']} and {out['files']['html']}")
    bad_backend = any(not b["bitwise"] for b in out["backend_summary"].values())
    return 1 if out["first_exceeding"] is not None or bad_backend else 0
