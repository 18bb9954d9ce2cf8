"""``w8a8 inspect DIR``: what the serving code does with every module of an AscendV1 checkpoint.

Per layer and module: the scheme from ``quant_model_description.json``, the quantization method,
the op family (and the ACLNN entry it reaches), the shapes before and after load, the weight layout
after load (FRACTAL_NZ, or ND and why), the scale dtypes after load, the static parameters, and
warnings; for every MoE layer, the expert-parallel dispatch path of the serving launch described by
the launch options (``--moe-a2a-backend``, ``--deepep-mode``, ``--env NAME=VALUE``... for SGLang;
``--enable-expert-parallel``, ``--moe-comm``... for vllm-ascend): per phase, whether the INT8 wire path
is taken or W13 quantizes on arrival, and the rule that decided it; then totals (bytes per quant type,
Linears on the ND fallback) and every finding (errors, warnings, information). ``--verify`` runs the selected layers' real weights through a backend against
the golden: on the float model's real activations when ``--reference`` and ``--prompts`` (or
``--token-ids``) are given, otherwise on synthetic inputs — and it says which.

Exit status: 0 fine; 1 the checkpoint has errors (or --verify found a mismatch); 2 unreadable
checkpoint or bad arguments.
"""

from __future__ import annotations

import json
import sys

from . import validate

MAX_VERIFY_TOKENS = 4096
"""The most activation rows ``--verify`` may build per module (``--tokens``)."""

HELP = "inspect an msModelSlim W8A8 checkpoint: per-module scheme, kernel path, layout; --verify against the golden"
DESCRIPTION = __doc__


def add_arguments(parser) -> None:
    parser.add_argument("path", metavar="DIR", help="checkpoint directory (quant_model_description.json + weights)")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    parser.add_argument("--loader", choices=("sglang", "vllm-ascend"), default="sglang",
                        help="whose loading rules to apply (default: sglang)")
    parser.add_argument("--serving", choices=("sglang", "vllm-ascend"), default=None,
                        help="whose composition of the ops the findings judge (w8a8.serving; default: --loader's "
                             "engine; its launch options are the serving launch's)")
    parser.add_argument("--headers-only", action="store_true",
                        help="read no tensor data: skip value checks and scale-rounding statistics")
    parser.add_argument("--trace", metavar="GLOB", help="print the full execution chain of the matching modules")
    parser.add_argument("--recipe", metavar="NAME|FILE",
                        help="compare the description with a recipe's prediction (built-ins: "
                             "deepseek_v4_flash_w8a8, deepseek_v3_2_w8a8; or a JSON / YAML file)")
    parser.add_argument("--verify", action="store_true",
                        help="run the selected layers' real weights through --backend against the golden")
    parser.add_argument("--backend", default="numpy", help="backend for --verify (default: numpy, a self-check)")
    parser.add_argument("--layers", default="*", metavar="GLOB",
                        help="--verify only modules (or layers, e.g. 'layers.0') matching GLOB, which must match "
                             "some module (default: all)")
    parser.add_argument("--tokens", type=int, default=16,
                        help=f"--verify activation rows (1..{MAX_VERIFY_TOKENS}; default 16)")
    parser.add_argument("--seed", type=validate.integer(0), default=0, help="--verify activation seed (>= 0; default 0)")
    parser.add_argument("--reference", metavar="DIR",
                        help="--verify: the float model (safetensors, checkpoint names) for the SQNR reference, checked "
                             "against the checkpoint (names, shapes, distance); default: the dequantized weights. "
                             "DeepSeek-V4: also the original float model its hc_*_fn are checked against, through "
                             "the saved QuaRot rotation")
    from checkpoints import dispatch as d

    launch = parser.add_argument_group("serving launch (the EP dispatch path of the MoE layers; "
                                       "spec/expert-parallel.md)")
    launch.add_argument("--soc", choices=d.SOCS, default="a3", help="Ascend SoC (default a3 = 910C)")
    launch.add_argument("--moe-a2a-backend", choices=d.A2A_BACKENDS, default="none",
                        help="SGLang --moe-a2a-backend (default none: no EP exchange)")
    launch.add_argument("--deepep-mode", choices=d.DEEPEP_MODES, default="auto",
                        help="SGLang --deepep-mode (default auto: normal on prefill batches, low_latency on decode)")
    launch.add_argument("--deepep-dispatcher-output-dtype", choices=d.DISPATCHER_DTYPES, default="auto",
                        help="SGLang --deepep-dispatcher-output-dtype (default auto)")
    launch.add_argument("--sglang-revision", choices=d.SGLANG_REVISIONS, default="current",
                        help="which SGLang DeepEP dtype rules apply (pr22316: low-latency ignores "
                             "SGLANG_DEEPEP_BF16_DISPATCH; 454e84da: env-only; default current)")
    launch.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help=f"an environment variable of the launch ({', '.join(d.ENV_NAMES)}); repeat for more")
    launch.add_argument("--enable-expert-parallel", action="store_true", help="vllm-ascend --enable-expert-parallel")
    launch.add_argument("--ep-size", type=int, default=None, help="vllm-ascend: the EP group size")
    launch.add_argument("--moe-comm", choices=d.VLLM_COMMS, default="auto",
                        help="vllm-ascend MoE comm method (default auto: as select_moe_comm_method)")
    launch.add_argument("--enable-fused-mc2", action="store_true",
                        help="vllm-ascend additional_config enable_fused_mc2")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--prompts", metavar="FILE",
                     help="--verify with --reference: run the float model on these prompts (one a line) and verify "
                          "every module on the activations it saw (needs a model family `w8a8 run` supports)")
    src.add_argument("--token-ids", metavar="IDS", action="append",
                     help="as --prompts, with token ids (comma-separated; repeat for more sequences)")


def run(args) -> int:
    from checkpoints import CheckpointError, analyze
    from checkpoints.recipes import checkpoint_linear_types, diff, load_recipe
    from checkpoints.verify import verify

    validate.check_number(args.tokens, "--tokens", kind="int", low=1, high=MAX_VERIFY_TOKENS)
    if args.reference:
        validate.in_dir(args.reference, "--reference", "the float model's directory")
    if args.prompts:
        validate.in_file(args.prompts, "--prompts", "a file of prompts")
    if args.serving is not None and args.serving != args.loader:
        print(f"w8a8 inspect: --serving {args.serving} needs --loader {args.serving} (the engine loads and composes "
              "the modules)", file=sys.stderr)
        return 2
    try:
        launch = launch_config(args)
    except ValueError as exc:
        print(f"w8a8 inspect: {exc}", file=sys.stderr)
        return 2
    try:
        report = analyze(args.path, loader=args.loader, read_data=not args.headers_only, launch=launch)
    except CheckpointError as exc:
        print(f"w8a8 inspect: {exc}", file=sys.stderr)
        return 2
    out = report.as_dict()
    from w8a8 import serving as _sv

    out["serving"] = {row: {"value": r.value, "source": r.source}
                      for row, r in _sv.get(args.serving or args.loader).rows().items()}
    status = 0 if report.ok else 1
    if report.resolution.dsv4 and not args.headers_only:     # hc_* dtypes; with --reference, against QuaRot
        from checkpoints import dsv4_rotation

        ref = _reference_arrays(args.reference) if args.reference else None
        hc_found, hc_rows = dsv4_rotation.check(report.resolution, ref) if ref is not None else \
            (dsv4_rotation.dtype_findings(report.resolution), [])
        out["dsv4_hc"] = {"rows": hc_rows, "findings": [f.as_dict() for f in hc_found]}
        report.findings.extend(hc_found)
        status = max(status, 1 if hc_found.errors else 0)
    if args.recipe:
        try:
            recipe = load_recipe(args.recipe)
        except ValueError as exc:
            print(f"w8a8 inspect: {exc}", file=sys.stderr)
            return 2
        mismatches = diff(recipe, checkpoint_linear_types(report.resolution.checkpoint))
        out["recipe"] = {"name": recipe.name, "mismatches": [m.__dict__ for m in mismatches]}
    if args.verify:
        activations, why = None, "no --reference with --prompts / --token-ids"
        if (args.prompts or args.token_ids) and not args.reference:
            print("w8a8 inspect: --prompts / --token-ids need --reference (the float model to run)", file=sys.stderr)
            return 2
        from checkpoints.verify import select

        if not select(report.resolution, args.layers):
            raise validate.no_match(args.layers, [m.name for m in report.resolution.modules])
        try:
            if args.reference and (args.prompts or args.token_ids):
                from modelrun.capture import MAX_TOKENS as CAPTURE_TOKENS
                from modelrun.capture import capture

                from .run_cmd import _sequences

                seqs = _sequences(_Seqs(args.path, args.reference, args.prompts, args.token_ids))
                total = sum(len(s) for s in seqs)
                if total > CAPTURE_TOKENS:   # the float run keeps every module's input; inspect has no flag for it
                    raise validate.UsageError("--prompts / --token-ids", f"at most {CAPTURE_TOKENS} tokens in all "
                                              "(every module's input is kept)", total)
                activations = capture(args.reference, seqs)
            results = verify(report.resolution, backend=args.backend, layers=args.layers, tokens=args.tokens,
                             seed=args.seed, reference=args.reference, error_modules=report.modules_with_errors(),
                             activations=activations)
        except validate.UsageError:
            raise
        except ValueError as exc:
            print(f"w8a8 inspect: {exc}", file=sys.stderr)
            return 2
        out["verify"] = {"backend": args.backend, "results": [r.as_dict() for r in results],
                         "inputs": (f"real activations of the float model {args.reference} ({activations.tokens} "
                                    "tokens)") if activations is not None else f"synthetic ({why})"}
        if any(r.status == "fail" for r in results):
            status = 1
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return status
    _print(report, out, args)
    return status


def _reference_arrays(path) -> dict:
    """The float arrays (native names) of a reference model directory, safetensors only."""
    from modelrun.deepseek_v4.weights import load_dir

    return {k: v.float().numpy() for k, v in load_dir(path).items() if v.is_floating_point()}


def _print_dispatch(report, summary) -> None:
    """The EP dispatch path of each distinct MoE scheme, with the rules that decided it."""
    seen = {}
    for r in report.modules:
        if r.dispatch and r.module.scheme not in seen:
            seen[r.module.scheme] = r.dispatch
    if not seen:
        return
    launch = summary["launch"]
    opts = ", ".join(f"{k}={v}" for k, v in launch.items() if k != "engine" and v not in ({}, None))
    print(f"\nEP dispatch ({launch['engine']}: {opts}):")
    for scheme, paths in seen.items():
        print(f"  MoE experts {scheme}:")
        for p in paths:
            verdict = ("INT8 wire path" if p.int8_wire else "W13 quantizes on arrival" if p.w13_quantizes
                       else f"quantized at {p.quantized_at}")
            print(f"    {p.phase}: {verdict} -- {p.transport}; wire {p.wire}; formula: {p.formula}")
            if p.golden != "-":
                print(f"      golden: {p.golden}")
            for why in p.reasons:
                print(f"      because {why}")
            for w in p.warnings:
                print(f"      WARNING {w}")


def launch_config(args):
    """The :class:`~checkpoints.dispatch.LaunchConfig` of the launch options (ValueError naming the option)."""
    from checkpoints.dispatch import LaunchConfig

    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--env takes NAME=VALUE; got {item!r}")
        env[name] = value
    try:
        return LaunchConfig(engine=args.loader, soc=args.soc, moe_a2a_backend=args.moe_a2a_backend,
                            deepep_mode=args.deepep_mode, dispatcher_output_dtype=args.deepep_dispatcher_output_dtype,
                            sglang_revision=args.sglang_revision, env=env,
                            enable_expert_parallel=args.enable_expert_parallel, ep_size=args.ep_size,
                            moe_comm=args.moe_comm, enable_fused_mc2=args.enable_fused_mc2)
    except ValueError as exc:
        raise ValueError(str(exc).replace("LaunchConfig: argument 'env'", "--env")
                         .replace("LaunchConfig: argument 'ep_size'", "--ep-size")) from None


class _Seqs:
    """The two input arguments of ``w8a8 run``, for its parser of token sequences."""

    def __init__(self, path, reference, prompts, token_ids):
        self.path, self.reference, self.prompts, self.tokens = path, reference, prompts, token_ids


def _print(report, out, args) -> None:
    from fnmatch import fnmatchcase

    from checkpoints.inspect import human_bytes

    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table
    except ModuleNotFoundError:  # base install: plain text
        Console = None
    s = out["summary"]
    head = (f"{s['checkpoint']}: {s['tensors']} tensors in {s['files']} file(s), {human_bytes(out['totals']['bytes'])}; "
            f"model_quant_type {s['model_quant_type']}, model dtype {s['model_dtype']}, {s['naming']} names, "
            f"{s['loader']} rules")
    rows = []
    for r in report.modules:
        m = r.module
        notes = "; ".join(list(m.notes) + r.warnings + ([f"ND: {r.nd_reason}"] if r.nd_reason else []))
        scales = r.scales + (f"\nstatic: {r.static}" if r.static not in ("-", "") else "")
        family = f"{m.method or '-'}\n{r.op_family}" + "".join(f"\ndispatch {p.summary()}" for p in r.dispatch)
        rows.append((m.layer, m.name + ("" if m.kind == "linear" else f" ({m.kind})"), m.scheme or "-", family,
                     f"{r.checkpoint_shape} -> {r.loaded}", scales, notes))
    t = out["totals"]
    totals = [f"{k}: {human_bytes(v)}" for k, v in t["bytes_by_type"].items()]
    totals.append(f"Linears on the ND fallback: {t['linears_nd_fallback']}"
                  + (f" ({', '.join(t['linears_nd_fallback_names'][:6])}{'...' if t['linears_nd_fallback'] > 6 else ''})"
                     if t["linears_nd_fallback"] else ""))
    if t["moe_nd_fallback"]:
        totals.append(f"MoE layers with an ND expert weight: {t['moe_nd_fallback']}")
    totals.append("modules: " + ", ".join(f"{k} x{v}" for k, v in t["modules_by_kind_and_scheme"].items()))
    order = {"error": 0, "warning": 1, "info": 2}
    findings = [str(f) for f in sorted(report.findings, key=lambda f: order.get(f.severity, 3))]
    if Console is None:
        print(head)
        last = None
        for row in rows:
            if row[0] != last:
                print(f"-- {row[0]}")
                last = row[0]
            print("  " + " | ".join(c.replace("\n", " / ") for c in row[1:]))
        print("totals: " + "; ".join(totals))
    else:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)
        console.print(escape(head))
        table = Table(show_lines=False, title="modules", title_justify="left")
        for col in ("module", "scheme", "method / op family", "weight: checkpoint -> after load",
                    "scales after load / static parameters", "notes / warnings"):
            table.add_column(col, overflow="fold")
        last = None
        for row in rows:
            if row[0] != last:
                if last is not None:
                    table.add_section()
                table.add_row(f"[bold]{escape(row[0])}[/]")
                last = row[0]
            table.add_row(*(escape(c) for c in row[1:]))
        console.print(table)
        console.print("[bold]totals[/]: " + escape("; ".join(totals)))
    _print_dispatch(report, s)
    if findings:
        n_warn = sum(f.severity == "warning" for f in report.findings)
        print(f"findings ({len(report.findings.errors)} errors, {n_warn} warnings, "
              f"{len(findings) - len(report.findings.errors) - n_warn} information):")
        for line in findings[:60]:
            print("  " + line)
        if len(findings) > 60:
            print(f"  ... and {len(findings) - 60} more (--json for all)")
    if args.trace:
        for r in report.modules:
            if fnmatchcase(r.module.name, args.trace) or fnmatchcase(r.module.serving_name, args.trace):
                print(f"\n{r.module.name}  [{r.module.serving_name}]")
                for step in r.chain:
                    print(f"  -> {step}")
    if "recipe" in out:
        rec = out["recipe"]
        print(f"\nrecipe {rec['name']}: {len(rec['mismatches'])} module(s) differ from its prediction")
        for mm in rec["mismatches"][:40]:
            print(f"  {mm['module']}: recipe {mm['predicted']}, checkpoint {mm['actual']}")
    if "verify" in out:
        v = out["verify"]
        res = v["results"]
        print(f"\nverify on backend {v['backend']} ({len(res)} modules): "
              f"{sum(r['status'] == 'pass' for r in res)} pass, {sum(r['status'] == 'fail' for r in res)} fail, "
              f"{sum(r['status'] == 'skip' for r in res)} skipped; inputs: {v['inputs']}")
        synthetic = [r["module"] for r in res if r.get("inputs", "").startswith("synthetic") and r["status"] != "skip"]
        if synthetic and not v["inputs"].startswith("synthetic"):
            print(f"  {len(synthetic)} module(s) fell back to synthetic inputs (not captured): {', '.join(synthetic[:6])}")
        for r in res:
            sq = "-" if r["sqnr_db"] is None else f"{r['sqnr_db']:.1f} dB vs {r['reference']}"
            agree = "-" if r["max_ulp"] is None else f"{r['equal']}/{r['elements']} bitwise, max {r['max_ulp']} ULP"
            print(f"  {r['status']:4}  {r['module']} ({r['scheme']}): {agree}; SQNR {sq} on {r.get('inputs', '?')}"
                  + (f"; {r['message']}" if r["message"] else ""))
            if r.get("deq_scale_precision"):
                print(f"        {r['deq_scale_precision']}")
