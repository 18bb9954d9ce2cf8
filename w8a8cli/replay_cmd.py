"""``w8a8 replay``: judge a real Ascend run from its msprobe dump, call by call, against the golden.

    w8a8 replay DUMP [--op OP ...] [--call NAME ...] [--chain] [--layer MODULE] [--checkpoint CKPT]
                     [--inputs DUMP ...] [--platform ascend910_93|ascend910b] [--out DIR] ...
    w8a8 replay CASE.npz          # a single-op case exported earlier (--export-case); needs no dump

DUMP is an msprobe dump path, a step folder, a rank/proc folder or a dump.json. Every dumped call of
a supported torch_npu op is mapped to the golden argument by argument and judged: agree-bitwise,
agree-tolerance, disagree (with the first differing index, the stage and the cause), mistrusted,
missing-data, stats-consistent / stats-inconsistent, crc-match / crc-mismatch (statistics and md5
dumps), not-replayable (and why) — next to what msprobe's own criteria would have said. The report
starts with the first divergence; its single-op case is exported to --case-dir.

Exit status: 0 when no call disagrees and every saved file loaded (calls a statistics/md5 dump saved
no tensors for are counted as not judged, not as failures); 1 when a call disagrees (disagree,
stats-inconsistent, crc-mismatch), or a saved file was refused, unreadable or missing, or the dump
is cut short; 2 for a usage error.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from . import validate

HELP = "replay an msprobe dump of a real run through the golden: per-call verdicts, first divergence, repro"
DESCRIPTION = __doc__


def add_arguments(parser) -> None:
    parser.add_argument("dump", metavar="DUMP|CASE.npz", help="msprobe dump path / step / rank folder / dump.json, "
                                                             "or a case file written by --export-case")
    parser.add_argument("--op", action="append", metavar="OP",
                        help="replay only this op (golden or torch_npu name, repeatable)")
    parser.add_argument("--call", action="append", metavar="NAME",
                        help="replay only calls whose entry name contains NAME (repeatable)")
    parser.add_argument("--rank", action="append", type=validate.integer(0), metavar="R",
                        help="only rank R (>= 0; repeatable)")
    parser.add_argument("--step", action="append", type=validate.integer(0), metavar="N",
                        help="only step N (>= 0; repeatable)")
    parser.add_argument("--chain", action="store_true",
                        help="also replay chained: inputs produced by an earlier call take the golden's output of "
                             "that call (the drift of the whole layer); default: isolated only")
    parser.add_argument("--layer", metavar="MODULE", help="only calls whose construct.json ancestor contains MODULE "
                                                          "(a mix-level dump); with --chain: replay that layer")
    parser.add_argument("--platform", default="ascend910_93", choices=("ascend910_93", "ascend910b"),
                        help="the chip the dump came from (default ascend910_93 = A3 / 910C): the golden applies "
                             "the kernel variant this platform's host tiling selects for each call's shapes")
    parser.add_argument("--numerics", metavar="NAME|JSON",
                        help="judge against another Numerics record: a record's name ('ascend-a2a3', 'ascend-a2') "
                             "or a JSON of fields changed from --platform's record, e.g. "
                             "'{\"variants\": \"fixed\"}' (one kernel's formulas for every shape)")
    parser.add_argument("--tolerances", metavar="FILE", help="tolerance table (TOML); entries for backend "
                                                            "'device-dump' apply (default: the packaged table)")
    parser.add_argument("--exact", action="store_true", help="ignore every tolerance table: bitwise everywhere")
    parser.add_argument("--no-attribution", action="store_true", help="skip stage/cause attribution")
    parser.add_argument("--checkpoint", metavar="CKPT",
                        help="msModelSlim checkpoint: weights the dump lacks (NZ) by module path and shape")
    parser.add_argument("--inputs", action="append", metavar="DUMP",
                        help="another dump whose tensors supply inputs by CRC-32 (external inputs of an md5 dump)")
    parser.add_argument("--export-case", action="append", default=[], metavar="NAME",
                        help="export call NAME as a single-op case (the first divergence is always exported)")
    parser.add_argument("--case-dir", metavar="DIR", help="folder for case files (default OUT/cases; a directory or "
                                                          "creatable, writable)")
    parser.add_argument("--out", default="w8a8-replay", metavar="DIR",
                        help="folder for results.jsonl, report.md, summary.json, report.html and compare.csv (msprobe "
                             "compare's columns, then the project's) (default ./w8a8-replay; "
                             "a directory or creatable, writable)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out: calls already in "
                                                              "results.jsonl are not judged again")
    parser.add_argument("--max-calls", type=validate.integer(1), metavar="K",
                        help="judge at most K replayable calls (>= 1)")
    parser.add_argument("--max-bytes", type=validate.real(0, open_low=True), default=8.0, metavar="GiB",
                        help="memory for golden outputs kept for --chain (a finite number > 0; default 8 GiB)")
    parser.add_argument("--json", action="store_true", help="print summary.json to stdout")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="list every call in the terminal, not only those that do not agree")


def _numerics(text: str | None, platform: str):
    """``--numerics`` as a record: a named Ascend record, or field changes on ``--platform``'s record."""
    import w8a8
    from replay import golden

    if text is None:
        return None
    named = {r.name: r for r in (w8a8.ASCEND, w8a8.ASCEND_A2)}
    if text in named:
        return named[text]
    try:
        changes = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"--numerics: expected one of {sorted(named)} or a JSON object of Numerics fields; "
                         f"got {text!r}") from None
    if not isinstance(changes, dict):
        raise ValueError(f"--numerics: expected a JSON object of Numerics fields; got {text!r}")
    if changes.get("platform", platform) != platform:
        raise ValueError(f"--numerics: field 'platform' is {changes['platform']!r} but --platform is {platform!r}; "
                         f"give the chip once, with --platform")
    try:
        return golden.platform_numerics(platform).replace(**changes)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--numerics: {exc}") from None


def _fail(msg: str) -> int:
    print(f"w8a8 replay: {msg}", file=sys.stderr)
    return 2


def check(args) -> None:
    """The files and folders, before any dump is read (UsageError); numbers are checked while parsing."""
    if args.tolerances and not args.exact:
        validate.tolerance_table(args.tolerances)
    if args.checkpoint:
        validate.in_dir(args.checkpoint, "--checkpoint", "a checkpoint directory")
    if Path(args.dump).suffix != ".npz":
        validate.out_dir(args.out)
    if args.case_dir:
        validate.out_dir(args.case_dir, "--case-dir")


def run(args) -> int:
    try:
        numerics = _numerics(args.numerics, args.platform)
    except ValueError as exc:
        return _fail(str(exc))
    if args.exact and args.tolerances:
        return _fail("--exact and --tolerances exclude each other")
    check(args)
    path = Path(args.dump)
    if path.suffix == ".npz":
        return _run_case(path, args, numerics)
    if not path.exists():
        return _fail(f"DUMP {path}: no such file or folder")
    from rich.console import Console

    from replay import engine, runner

    console = Console(stderr=True)
    try:
        table = engine.load_tolerances(args.tolerances, args.exact)
    except (OSError, ValueError) as exc:
        return _fail(f"--tolerances: {exc}")
    checkpoint = None
    if args.checkpoint:
        from checkpoints.issues import CheckpointError
        from replay.weights import CheckpointWeights

        try:
            checkpoint = CheckpointWeights(args.checkpoint)
        except (CheckpointError, OSError) as exc:
            return _fail(f"--checkpoint: {exc}")
    for extra in args.inputs or []:
        if not Path(extra).exists():
            return _fail(f"--inputs {extra}: no such file or folder")
    out = Path(args.out)
    options = runner.Options(ops=args.op, calls=args.call, layer=args.layer, chain=args.chain, platform=args.platform,
                             numerics=numerics, tolerances=table, attribute=not args.no_attribution,
                             checkpoint=checkpoint, inputs=args.inputs or [], max_calls=args.max_calls,
                             max_bytes=int(args.max_bytes * (1 << 30)), export_case=args.export_case,
                             case_dir=Path(args.case_dir) if args.case_dir else out / "cases",
                             ranks=args.rank, steps=args.step)
    try:
        dirs = runner.plan(path, options)
    except FileNotFoundError as exc:
        return _fail(str(exc))
    if not dirs:
        return _fail(f"{path}: no dump folder matches --rank/--step")
    from conformance.outlock import OutLock, OutLocked

    lock = OutLock(out)  # one run per --out: two would append to one results.jsonl
    try:
        lock.acquire()
    except (OutLocked, OSError) as exc:
        return _fail(str(exc))
    try:
        return _replay_locked(console, path, out, options, args, numerics, table)
    finally:
        lock.release()


def _replay_locked(console, path, out, options, args, numerics, table) -> int:
    from conformance.reports.console import esc
    from replay import engine
    from replay.reports import write_all

    out.mkdir(parents=True, exist_ok=True)
    results = engine.ResultsFile(out / "results.jsonl")
    if results.path.exists() and not args.resume:
        archived = out / f"results-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
        results.path.rename(archived)
        console.print(f"[dim]earlier results kept as {esc(archived)}[/]")
    stats = _run_with_progress(console, path, options, results, args.resume)
    records = [r for r in results.records() if r.get("backend") == engine.BACKEND]
    from replay import golden

    meta = {"dump": str(path), "platform": args.platform, "numerics": golden.declared_numerics(
                args.platform, numerics).name, "mode": "isolated + chained" if args.chain else "isolated",
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(["w8a8"] + sys.argv[1:]),
            "tolerances": "none (bitwise)" if table is None else table.source,
            "checkpoint": args.checkpoint or "none",
            "variants": "the kernel variant the platform's host tiling selects per call (see each call's "
                        "'variant')" if golden.declared_numerics(args.platform, numerics).variants == "select"
                        else "one fixed kernel's formulas for every call (variants='fixed')"}
    summary, paths = write_all(out, records, meta)
    from replay import compare_csv

    paths["csv"] = compare_csv.write(out / "compare.csv", records)
    _print(console, summary, verbose=args.verbose)
    console.print(f"{stats['entries']} entries in {stats['dumps']} dump folder(s); {stats['written']} results written"
                  f" ({stats['skipped_done']} already done)")
    console.print("reports: " + ", ".join(str(p) for p in [results.path, *paths.values()]), soft_wrap=True,
                  markup=False, highlight=False)
    if args.json:
        print(paths["json"].read_text())
    return summary["exit_status"]


QUIET_VERDICTS = ("agree-bitwise", "agree-tolerance", "crc-match", "stats-consistent")


def _print(console, summary: dict, verbose: bool = False) -> None:
    from rich.table import Table

    from conformance.reports.console import esc, print_command

    t = Table(title="w8a8 replay: quant calls", title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("call", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("msprobe", no_wrap=True)
    hidden, notes = 0, []
    for dump, rs in summary["timeline"].items():
        first = summary["first_divergence"].get(dump)
        for r in rs:
            if not verbose and r is not first and r["verdict"] in QUIET_VERDICTS:
                hidden += 1
                continue
            style = "bold red" if r is first else ("red" if r["verdict"] in ("disagree", "crc-mismatch",
                                                                             "stats-inconsistent") else None)
            t.add_row(str(r["params"]["index"]), esc(r["name"]), esc(r["verdict"]),
                      esc((r.get("msprobe") or {}).get("verdict", "-")), style=style)
            note = r.get("note") or r.get("reason")
            if note and r["verdict"] not in QUIET_VERDICTS:
                notes.append(f"  #{r['params']['index']}: {esc(note)}")
    if t.row_count:
        console.print(t)
        for line in notes:
            console.print(line, highlight=False)
    if hidden:
        console.print(f"{hidden} call(s) agree with the golden (every call with -v, in report.md and report.html)",
                      highlight=False)
    if not summary["quant_calls"]:
        console.print("[yellow]no call of a supported quant op in this dump: nothing to judge[/]")
    from rich.markup import escape

    from replay.reports import headline

    console.print(f"result: {escape(headline(summary))} (exit status {summary['exit_status']})")
    for dump, r in summary["first_divergence"].items():
        note = f" — {esc(r['note'])}" if r.get("note") else ""
        console.print(f"[bold]first divergence[/] {esc(dump)}: {esc(r['name'])}{note}")
        if r.get("repro"):
            print_command(console, r["repro"], indent="  ")
        if r.get("repro_python"):
            print_command(console, r["repro_python"], label="the same in Python:", indent="  ")


def _run_with_progress(console, path, options, results, resume) -> dict:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from replay.runner import replay_dump

    counts: dict[str, int] = {}
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        state = {"task": None}

        def on_dump(dump):
            state["task"] = progress.add_task(dump.where.label, total=len(dump.entries))

        def on_call(record, entry):
            if record is not None:
                counts[record["verdict"]] = counts.get(record["verdict"], 0) + 1
            progress.update(state["task"], advance=1,
                            description=" ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "reading")

        return replay_dump(path, options, results, resume=resume, on_call=on_call, on_dump=on_dump,
                           repro_base=f"w8a8 replay {path}")


def check_case_file(path: Path) -> None:
    """A case file is a regular file, a zip archive (.npz), and its members unpack to at most
    :data:`conformance.case_check.CASE_BYTES` (the sizes its directory declares, which unpacking enforces)."""
    import zipfile

    from conformance import case_check

    validate.in_file(str(path), "CASE", "a .npz case file written by --export-case")
    try:
        with zipfile.ZipFile(path) as z:
            total = sum(info.file_size for info in z.infolist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise validate.UsageError("CASE", "a .npz case file written by --export-case", f"{str(path)!r}: not a readable .npz case ({exc})") \
            from None
    if total > case_check.CASE_BYTES:
        raise validate.UsageError("CASE", f"a case of at most {case_check.CASE_BYTES / (1 << 30):g} GiB unpacked",
                                  f"{total / (1 << 30):.3g} GiB")


def _run_case(path: Path, args, numerics) -> int:
    from replay import engine
    from replay.case import load_case, python_snippet
    from replay.runner import Options, replay_case

    if not path.is_file():
        return _fail(f"CASE {path}: no such file")
    check_case_file(path)
    try:
        case = load_case(path)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        table = engine.load_tolerances(args.tolerances, args.exact)
    except (OSError, ValueError) as exc:
        return _fail(f"--tolerances: {exc}")
    if numerics is None and case.meta.get("numerics"):
        import w8a8

        numerics = w8a8.Numerics.from_dict(case.meta["numerics"])
    record = replay_case(case, Options(platform=case.meta.get("platform") or args.platform, numerics=numerics,
                                       tolerances=table, attribute=not args.no_attribution))
    print(json.dumps({k: record.get(k) for k in ("name", "op", "verdict", "first_mismatch", "attribution", "outputs",
                                                 "note")}, indent=2, default=str))
    print(f"{case.entry}: {record['verdict']}", file=sys.stderr)
    print(python_snippet(path, case.op, case.meta.get("numerics")), file=sys.stderr)
    return 1 if record["verdict"] in ("disagree", "missing-data") else 0
