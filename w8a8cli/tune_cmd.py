"""``w8a8 tune``: measure backend A against B over the conformance strategies and recommend, per op
and output dtype, the tightest tolerance at a target false-failure probability — next to the
analytic bound. ``--write`` merges the recommendations into a TOML tolerance table (the packaged
one is what ``w8a8 conformance`` reads by default)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import executor_args, validate

HELP = "recommend tolerances from measured error distributions (and write the tolerance table)"
DESCRIPTION = __doc__


def add_arguments(parser) -> None:
    parser.add_argument("--backend", required=True, metavar="A", help="the backend whose tolerances are tuned")
    parser.add_argument("--against", default="numpy", metavar="B", help="the reference backend (default: numpy, "
                                                                        "the golden under A's declared numerics: "
                                                                        "what w8a8 conformance judges A against)")
    parser.add_argument("--op", action="append", metavar="OP", help="op to tune (repeatable; default: every op A "
                                                                    "implements)")
    parser.add_argument("--samples", type=validate.integer(1), default=200, help="drawn cases per op (>= 1; default 200)")
    parser.add_argument("--seed", type=validate.integer(0), default=0, help="seed of the draw (>= 0; default 0)")
    parser.add_argument("--target", "--target-false-rate", dest="target", type=validate.real(0, open_low=True),
                        default=1e-6,
                        help="target false-failure probability per test, in (0, 1) (default 1e-6)")
    write_help = ("merge the recommendations into this TOML tolerance table (checked before measuring: writable, and "
                  "a valid table if it exists)")
    parser.add_argument("--write", metavar="PATH", help=write_help)
    parser.add_argument("--out", metavar="DIR", help="write plots (PNG) and tune-report.html/.json into DIR "
                                                     "(a directory or creatable, writable)")
    parser.add_argument("--json", action="store_true", help="print the recommendations as JSON")
    parser.add_argument("--max-samples", type=validate.integer(1), metavar="N",
                        help="keep drawing rounds of --samples cases per op (each with the next seed) until the tail fit "
                             "of every output supports the target, or N cases per op are drawn (default: one round)")
    parser.add_argument("--samples-in", action="append", metavar="PATH",
                        help="merge a sample set an earlier 'w8a8 tune --samples-out' wrote (repeatable; its seeds must "
                             "differ from this run's)")
    parser.add_argument("--samples-out", metavar="PATH", help="write the merged sample set (JSON) for a later run to merge")
    parser.add_argument("--workers", type=validate.integer(1), default=2,
                        help="with --executor ray and no --ray-address: the CPUs of the local Ray (default 2)")
    executor_args.add_arguments(parser)


def check(args) -> None:
    """Every argument before any measuring (:class:`~w8a8cli.validate.UsageError`): the op names, the
    target, ``--write`` (a writable file; an existing one must be a valid table: it is merged into) and
    ``--out``."""
    from conformance.registry import specs

    if not args.target < 1:
        raise validate.UsageError("--target", "a probability in (0, 1)", repr(args.target))
    validate.choice_list(args.op, specs(), "--op", "an op of 'w8a8 conformance --list-ops'")
    if args.write:
        validate.out_file(args.write, "--write")
        if Path(args.write).exists():
            validate.tolerance_table(args.write, "--write")
    if args.out:
        validate.out_dir(args.out)
    for path in args.samples_in or ():
        validate.in_file(path, "--samples-in")
    if args.samples_out:
        validate.out_file(args.samples_out, "--samples-out")
    executor_args.check(args)
    if args.max_samples is not None and args.max_samples < args.samples:
        raise validate.UsageError("--max-samples", f"at least --samples ({args.samples})", args.max_samples)


def _sweep_with_progress(console, a, b, ops, samples, seed) -> dict:
    """One local round of :func:`conformance.tuning.sweep` under a rich progress bar (on stderr; not drawn
    when it is no terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from conformance.reports.console import esc
    from conformance.tuning import sweep

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        bar = progress.add_task("cases", total=len(ops) * samples)

        def on_case(op):
            progress.update(bar, advance=1, description=esc(op))

        stats = sweep(a, b, ops, samples, seed, on_case=on_case)
        progress.update(bar, completed=len(ops) * samples, description="cases")
    return stats


def _draw(console, a, b, ops, args) -> dict:
    """The sample sets: those of ``--samples-in`` merged, then rounds of ``--samples`` draws per op (seeds
    ``--seed``, ``--seed + 1`` ...) until every output's tail fit supports the target or ``--max-samples``."""
    from conformance.tail_fit import fit
    from conformance.tuning import load_samples, merge_stats

    stats: dict = {}
    for path in args.samples_in or ():
        try:
            more, meta = load_samples(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise validate.UsageError("--samples-in", "a sample set written by 'w8a8 tune --samples-out'",
                                      f"{path} ({type(exc).__name__}: {exc})") from None
        if meta.get("backend") not in (None, a.name) or meta.get("against") not in (None, b.name):
            raise validate.UsageError("--samples-in", f"samples of {a.name} against {b.name}",
                                      f"{meta.get('backend')} against {meta.get('against')} ({path})")
        try:
            merge_stats(stats, {k: v for k, v in more.items() if k[0] in ops})
        except ValueError as exc:
            raise validate.UsageError.relay("--samples-in", str(exc)) from None
    limit = args.max_samples or args.samples
    seed, drawn = args.seed, 0
    executor = executor_args.make(args, args.workers)
    if executor is not None:
        executor.start(sorted({a.name, b.name}))
    try:
        while drawn < limit:
            try:
                if executor is None:
                    merge_stats(stats, _sweep_with_progress(console, a, b, ops, args.samples, seed))
                    seeds = 1
                else:  # one round per CPU of the cluster at once, each its own seed
                    from conformance.executors.ray_tune import sweep_rounds

                    cpus = sum(n.cpus for n in executor.nodes.values())
                    seeds = max(1, min(cpus, -(-(limit - drawn) // args.samples)))
                    merge_stats(stats, sweep_rounds(executor, a, b, ops, args.samples, list(range(seed, seed + seeds))))
            except ValueError as exc:
                raise validate.UsageError.relay("--seed", str(exc)) from None
            drawn += args.samples * seeds
            seed += seeds
            short = [k for k, s in stats.items() if max(s.per_case_max, default=0) > 0
                     and not fit(s.per_case_max, args.target).supported]
            console.print(f"[dim]{drawn} draws per op: " + (f"{len(short)} output(s) whose tail does not yet support "
                                                            f"p = {args.target:g}" if short else
                                                            "every tail fit supports the target") + "[/]")
            if not short:
                break
    finally:
        if executor is not None:
            executor.close()
    if args.samples_out:
        from conformance.tuning import save_samples

        save_samples(args.samples_out, stats, {"backend": a.name, "against": b.name, "numerics": a.numerics.name})
    return stats


def run(args) -> int:
    check(args)
    import backends
    from rich.console import Console
    from rich.table import Table

    from conformance import plots
    from conformance.registry import specs
    from conformance.tolerances import ToleranceTable
    from conformance.tuning import recommend
    from .conformance_cmd import _versions

    from conformance.reports.console import esc

    console = Console(stderr=True)
    try:
        a, b = backends.get(args.backend), backends.get(args.against)
    except (KeyError, ImportError, AttributeError) as exc:
        print(f"w8a8 tune: {exc}", file=sys.stderr)
        return 2
    for x in (a, b):
        ok, reason = x.available()
        if not ok:
            print(f"w8a8 tune: backend {x.name!r} is not available here: {reason}", file=sys.stderr)
            return 2
    if b.name == "numpy" and b.numerics != a.numerics:
        from backends.numpy_backend import NumpyBackend

        b = NumpyBackend(a.numerics)   # what conformance compares A with: the golden under A's declared record
    ops = args.op or [op for op in sorted(specs()) if op in a.ops() and op in b.ops()]
    console.print(f"w8a8 tune: {esc(a.name)} against {esc(b.name)}, {len(ops)} op(s), {args.samples} cases each")
    stats = _draw(console, a, b, ops, args)
    entries = recommend(stats, target=args.target, backend=a.name, against=b.name,
                        numerics_equal=(a.numerics == b.numerics), numerics=a.numerics.name, versions=_versions(),
                        library_order=a.float_sum_order == "library")
    if args.json:
        print(json.dumps([e.as_dict() for e in entries], indent=2, default=str))
    table = Table(title=f"recommended tolerances: {esc(a.name)} vs {esc(b.name)} under {esc(b.numerics.name)} (target p = {args.target:g} per test)")
    for col in ("op", "output", "dtype", "cases", "worst", "p99", "recommended", "bound"):
        table.add_column(col, overflow="fold")
    for e in entries:
        table.add_row(*(esc(v) for v in (e.op, e.output, e.dtype, e.samples, e.max_observed, f"{e.extra['p99']:g}",
                                         e.describe(), e.bound)))
    (console if args.json else Console()).print(table)   # --json: stdout holds the JSON alone
    if args.write:
        path = Path(args.write)
        current = ToleranceTable.load(path) if path.exists() else ToleranceTable()
        for e in entries:
            current.put(e)
        current.meta.update({"description": "w8a8 tolerance table (see conformance.tolerances)"})
        current.save(path)
        console.print(f"wrote {len(entries)} entries to {esc(path)}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        # the PNGs hold the panels the HTML page draws (two or more distance bins; a distance that varies with K)
        drawn, _ = plots.split_by_bins({k: {"": dict(v.histogram)} for k, v in stats.items()})
        for name, fig in (("distance-histograms.png", plots.distance_histograms(stats, drawn)),
                          ("error-vs-k.png", plots.error_vs_k(stats))):
            if fig is not None:
                (out / name).write_bytes(plots.png_bytes(fig))
        from conformance.reports.html import render_tune
        from conformance.results import write_atomic

        write_atomic(out / "tune-report.html", render_tune(stats, entries, {"backend": a.name, "against": b.name,
                                                                             "samples": args.samples,
                                                                             "target": args.target}))
        write_atomic(out / "tune.json", json.dumps([e.as_dict() for e in entries], indent=2, default=str))
        console.print(f"plots and report in {esc(out)}")
    bad = [e for e in entries if "EXCEEDS THE ANALYTIC BOUND" in e.notes or "REFUSED" in e.notes]
    return 1 if bad else 0
