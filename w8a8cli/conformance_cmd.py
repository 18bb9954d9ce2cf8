"""``w8a8 conformance``: every available backend against the golden on every op.

Exit status: 0 when every judged case agrees with the golden (pass / tolerated; mistrusted and
unsupported cases are reported but do not fail the run), 1 when any case fails, errors, crashes or
times out — and 1 when nothing verified what was asked: no case was judged, or an op named with
``--op`` is implemented by none of the backends run (the report says which backends do not implement
which ops; ops some backends lack in a run of all ops are listed, not failed), 2 for bad usage (unknown op or backend, an unavailable backend asked for by name, a bad
argument: every one is checked before any work starts, see ``check``). ``--last-failed`` runs again only
the cases that failed in the previous run in ``--out`` (exit 0 and a line saying so when none did; exit
2 when there is no previous run there, or its plan or results cannot be read).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from conformance.reports.console import esc

from . import executor_args, validate

HELP = "run backends against the golden on every op; write .jsonl/.md/.xml/.html reports"
DESCRIPTION = __doc__


def add_arguments(parser) -> None:
    parser.add_argument("--backend", action="append", metavar="NAME",
                        help="backend to test (repeatable): a registered name (see 'w8a8 backends') or "
                             "'package.module:Class'. Default: every available backend except the golden itself")
    parser.add_argument("--op", action="append", metavar="OP", help="op to test (repeatable; default: all)")
    parser.add_argument("--profile", choices=("dev", "ci", "thorough"), default="ci",
                        help="how many drawn cases per op: dev 8, ci 100 (default), thorough 1000")
    parser.add_argument("--seed", type=validate.integer(0), default=0, help="seed of the case draw (>= 0; default 0)")
    parser.add_argument("--out", default="w8a8-conformance", metavar="DIR",
                        help="folder for results.jsonl, report.md, report.xml, summary.json, report.html "
                             "(default ./w8a8-conformance; a directory or creatable, writable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out (its saved plan.json): cases already in results.jsonl "
                             "are not run again")
    parser.add_argument("--last-failed", action="store_true",
                        help="run again only the cases that failed (fail, error, crashed, timeout, leak) in the "
                             "previous run in --out, read from its plan.json and results.jsonl; --backend and --op "
                             "narrow them further; the earlier results are kept as results-<time>.jsonl")
    parser.add_argument("--case", metavar="JSON",
                        help="run one case (the JSON parameters a report's repro line gives) in this process and print "
                             "the full comparison; an object of the op's keys, inputs of at most 1 GiB")
    parser.add_argument("--workers", type=validate.integer(0), default=min(2, os.cpu_count() or 1),
                        help="worker processes, 0 .. the number of cores (default: min(2, cores)); 0 runs in this "
                             "process, without isolation")
    parser.add_argument("--force-workers", action="store_true", help="allow --workers beyond the number of cores")
    parser.add_argument("--timeout", type=validate.real(0, open_low=True), default=120.0,
                        help="seconds per backend call, a finite number > 0 (default 120)")
    parser.add_argument("--no-attribution", action="store_true", help="skip mismatch attribution (faster)")
    parser.add_argument("--leak-budget", type=validate.real(0), default=256.0, metavar="MIB",
                        help="resident memory a worker may keep after one case before the case is recorded 'leak' "
                             "and the worker replaced, a finite number >= 0 (default 256; 0 turns the watch off)")
    parser.add_argument("--tolerances", metavar="PATH",
                        help="TOML tolerance table, read and checked before the run (default: the packaged table, "
                             "conformance/data/tolerances.toml; ops without an entry are compared bitwise)")
    parser.add_argument("--exact", action="store_true", help="ignore every tolerance table: bitwise everywhere")
    parser.add_argument("--list-ops", action="store_true", help="list the ops with their descriptions and exit")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print the full agreement matrix (every op), not only the ops that did not pass")
    executor_args.add_arguments(parser)


def _select_backends(requested: list[str] | None, remote: bool = False) -> tuple[list[str], dict[str, str], str | None]:
    """(backend names, registrations for worker processes of 'module:Class' backends, problem).

    ``remote`` (``--executor ray``): a backend named is planned from its declaration (ops, capabilities,
    numerics) and need not be available on this machine — the executor asks the cluster's nodes
    (:func:`_start_executor`); it must still be loadable here."""
    import backends

    if requested:
        chosen, registrations = [], {}
        for name in requested:
            try:
                b = backends.get(name)
            except (KeyError, ImportError, AttributeError) as exc:
                return [], {}, f"unknown backend {name!r}: {exc}"
            ok, reason = (True, "") if remote else b.available()
            if not ok:
                return [], {}, f"backend {b.name!r} is not available here: {reason}"
            if ":" in name:
                registrations[b.name] = name
            chosen.append(b.name)
        return chosen, registrations, None
    names = [b.name for b in backends.available() if b.name != "numpy"]
    return (names or ["numpy"]), {}, None


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for pkg in ("w8a8", "numpy", "ml_dtypes", "torch", "torch_npu", "hypothesis"):
        try:
            parts.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            pass
    return ", ".join(parts)


def _meta(args, names: list[str], skipped: dict) -> dict:
    import backends

    info = {}
    for name in names:
        b = backends.get(name)
        info[b.name] = {"numerics": b.numerics.name,
                        "numerics_differences": {k: list(v) for k, v in
                                                 __import__("w8a8").ASCEND.differences(b.numerics).items()}}
        gemm = _gemm_info(b)
        if gemm:
            info[b.name]["gemm"] = gemm
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(["w8a8"] + sys.argv[1:]),
            "profile": args.profile, "seed": args.seed,
            "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
                       f"{platform.system()} {platform.release()}".replace("  ", " "),
            "versions": _versions(), "backends": info, "not_implemented": skipped,
            "tolerances": _tolerance_path(args) or "none (bitwise)"}


def _gemm_info(backend) -> dict | None:
    """The ISA and int8 GEMM path a backend reports (torch-cpu's ``info()["gemm"]``), None where it reports none."""
    try:
        return backend.info().get("gemm")
    except Exception:  # noqa: BLE001 - the run goes on without it
        return None


def _tolerance_path(args) -> str | None:
    if args.exact:
        return None
    if args.tolerances:
        return str(Path(args.tolerances).resolve())
    from conformance.tolerances import packaged_path

    path = packaged_path()
    return str(path) if path.is_file() else None


def _tolerance_problem(args) -> str | None:
    """Why the tolerance table cannot be used (unreadable, or an entry naming an undeclared op or output)."""
    path = _tolerance_path(args)
    if not path:
        return None
    from conformance.tolerances import ToleranceTable

    try:
        ToleranceTable.load(path)
    except (ValueError, OSError) as exc:
        return str(exc)
    return None


def check(args) -> None:
    """Every argument, before any work starts: a :class:`~w8a8cli.validate.UsageError` for the first bad one
    (numbers were checked while parsing). ``--case`` is parsed, checked against the op's parameters and its
    inputs' size measured (:mod:`conformance.case_check`); the parameters are kept in ``args.case_params``."""
    from conformance.registry import specs

    validate.workers(args.workers, force=args.force_workers)
    executor_args.check(args)
    validate.choice_list(args.op, specs(), "--op", "an op of 'w8a8 conformance --list-ops'")
    if args.tolerances and not args.exact:
        validate.tolerance_table(args.tolerances)
    args.case_params = None
    if args.case is not None:
        args.case_params = _case_params(args)
    else:
        validate.out_dir(args.out)


def _case_params(args) -> dict:
    from conformance.case_check import CaseError, check_case
    from conformance.registry import get

    if not args.op or len(args.op) != 1:
        raise validate.UsageError("--op", "exactly one --op with --case", f"{len(args.op or [])}")
    try:
        params = json.loads(args.case)
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested beyond Python's stack
        raise validate.UsageError("--case", "a JSON object of the op's parameters", f"invalid JSON ({exc})") from None
    try:
        check_case(get(args.op[0]), params)
    except CaseError as exc:
        raise validate.UsageError("--case", exc.expected, exc.got) from None
    return params


def _run_single(args, names: list[str]) -> int:
    import backends

    from conformance.evaluate import BAD_STATUSES, run_case
    from conformance.registry import get

    params = args.case_params
    worst = 0
    for name in names:
        path = _tolerance_path(args)
        from conformance.tolerances import ToleranceTable

        backend = backends.get(name)
        record = run_case(get(args.op[0]), params, backend, attribute_failures=not args.no_attribution,
                          tolerance=ToleranceTable.load(path) if path else None)
        evidence = _evidence(get(args.op[0]), params, backend, record)
        if evidence:
            record["evidence"] = evidence
        print(json.dumps(record, indent=2, default=str))
        if evidence:
            from conformance.evidence import render

            print(f"{record['status']}: the first mismatches of {backend.name} against the golden "
                  f"(index, golden, backend, pre-rounding, the inputs there):")
            print(render(evidence))
        if record["status"] in BAD_STATUSES:
            worst = 1
    return worst


def _evidence(spec, params, backend, record) -> list[dict]:
    """The values at the first mismatches of a judged case (:mod:`conformance.evidence`); best effort."""
    from conformance.evidence import mismatch_evidence

    try:
        return mismatch_evidence(spec, params, backend, record)
    except Exception as exc:  # noqa: BLE001 - the verdict stands without its evidence
        return [{"output": "?", "note": f"no evidence: {type(exc).__name__}: {exc}"}]


def run(args) -> int:
    from conformance.registry import specs

    if args.list_ops:
        for name, spec in sorted(specs().items()):
            print(f"{name:28s} [{spec.family}] {spec.description}")
        return 0
    check(args)
    rerun = None
    if args.last_failed:
        rerun, status = _last_failed(args)
        if rerun is None:
            return status
    if args.resume and not args.case:
        problem = _adopt_plan(args)
        if problem:
            print(f"w8a8 conformance: {problem}", file=sys.stderr)
            return 2
    names, registrations, problem = _select_backends(args.backend, remote=args.executor == "ray" and not args.case)
    if problem:
        raise validate.UsageError.relay("--backend", problem)
    problem = _tolerance_problem(args)
    if problem:
        print(f"w8a8 conformance: {problem}", file=sys.stderr)
        return 2
    if args.case:
        return _run_single(args, names)

    from conformance.outlock import OutLock, OutLocked
    from conformance.runner import RunOptions, WorkerPool

    options = RunOptions(workers=args.workers, timeout=args.timeout, attribute=not args.no_attribution,
                         registrations=registrations, tolerances=_tolerance_path(args),
                         leak_budget_mb=args.leak_budget)
    lock = OutLock(args.out)
    try:
        lock.acquire()
    except (OutLocked, OSError) as exc:
        print(f"w8a8 conformance: {exc}", file=sys.stderr)
        return 2
    executor = executor_args.make(args, args.workers or os.cpu_count() or 1)
    pool = WorkerPool(options) if options.workers > 0 and executor is None else None  # startup overlaps the planning
    try:
        if executor is not None:
            problem = _start_executor(executor, names, registrations)
            if problem:
                print(f"w8a8 conformance: {problem}", file=sys.stderr)
                return 2
        return _plan_and_run(args, names, options, pool, executor, rerun)
    finally:
        if pool is not None:
            pool.close()
        if executor is not None:
            executor.close()
        lock.release()


def _start_executor(executor, names: list[str], registrations: dict) -> str | None:
    """Connect the Ray executor and ask its nodes what they offer; the problem when a backend of the run is
    on no node (every node's reason named)."""
    try:
        executor.start(names, registrations)
    except Exception as exc:  # noqa: BLE001 - Ray's connection errors are many kinds
        return f"--executor ray: cannot start or join Ray ({type(exc).__name__}: {exc})"
    if not executor.nodes:
        return "--executor ray: the Ray cluster has no node with a CPU that answered"
    for name, hosts in executor.offered().items():
        if not hosts:
            why = "; ".join(f"{n.host}: {n.backends.get(name, [False, '?'])[1]}" for n in executor.nodes.values())
            return f"--backend: {name!r} is available on no node of the Ray cluster ({why})"
    return None


def _given_flags(args) -> tuple[dict, set[str]]:
    """The plan-defining flags of this command line (:mod:`conformance.resume`), and which were given."""
    from conformance.resume import plan_flags

    names = [_resolved_name(spec) for spec in args.backend] if args.backend else \
        [b.name for b in __import__("backends").available() if b.name != "numpy"] or ["numpy"]
    flags = plan_flags(backends=names, backend_specs=args.backend, ops=args.op, profile=args.profile, seed=args.seed,
                       tolerances=_tolerance_path(args))
    explicit = {flag for flag, given in (("backends", args.backend), ("ops", args.op),
                                         ("profile", args.profile != "ci"), ("seed", args.seed != 0),
                                         ("tolerances", args.tolerances or args.exact)) if given}
    return flags, explicit


def _resolved_name(spec: str) -> str:
    import backends

    try:
        return backends.get(spec).name
    except (KeyError, ImportError, AttributeError):
        return spec


def _adopt_plan(args) -> str | None:
    """On ``--resume``: take the saved plan's flags into ``args`` (saying which defaults it replaces), or
    return the conflict line when a given flag contradicts the plan."""
    from rich.console import Console

    from conformance.resume import reconcile
    from conformance.runner import load_plan

    from conformance.stateio import StateError, regular

    plan_path = Path(args.out) / "plan.json"
    try:
        if not regular(plan_path, "saved plan"):
            return None
        _, saved = load_plan(plan_path)
    except StateError as exc:
        return f"--resume: {exc}"
    console = Console(stderr=True)
    if "flags" not in saved:
        console.print(f"[yellow]{esc(plan_path)} records no flags (an older run): resuming with the flags given[/]")
        return None
    given, explicit = _given_flags(args)
    result = reconcile(saved["flags"], given, explicit)
    if result.conflict:
        return result.conflict
    for note in result.notes:
        console.print(f"[dim]{esc(note)}[/]")
    flags = result.flags
    args.backend = flags.get("backend_specs") or flags["backends"]
    args.op, args.profile, args.seed = flags["ops"], flags["profile"], flags["seed"]
    args.tolerances, args.exact = flags["tolerances"], flags["tolerances"] is None
    return None

def _last_failed(args):
    """``--last-failed``: (the previous run's failed cases, narrowed by --backend/--op, 0) with ``args`` set to
    that run's backends, profile, seed and tolerance table (a --tolerances/--exact given wins); or
    (None, exit status) after saying why there is nothing to run."""
    from conformance.last_failed import describe, failed_tasks
    from conformance.stateio import StateError

    if args.resume or args.case is not None:
        raise validate.UsageError("--last-failed", "a new run of the previous run's failures, without "
                                  "--resume or --case", "--resume" if args.resume else "--case")
    try:
        found = failed_tasks(args.out)
    except StateError as exc:
        print(f"w8a8 conformance: --last-failed: {exc}", file=sys.stderr)
        return None, 2
    if args.backend:
        wanted = {_resolved_name(b) for b in args.backend}
        found.tasks = [t for t in found.tasks if t.backend in wanted]
    if args.op:
        found.tasks = [t for t in found.tasks if t.op in args.op]
    print(describe(found), file=sys.stderr)
    if not found.tasks:
        print("w8a8 conformance: --last-failed: no failed case to run again"
              + (" with this --backend/--op" if args.backend or args.op else ""), file=sys.stderr)
        return None, 0
    flags = found.flags
    in_tasks = {t.backend for t in found.tasks}
    specs = [s for s in (flags.get("backend_specs") or flags.get("backends") or [])
             if _resolved_name(s) in in_tasks]
    args.backend = specs or sorted(in_tasks)
    args.op = sorted({t.op for t in found.tasks})
    args.profile = flags.get("profile", args.profile)
    args.seed = flags.get("seed", args.seed)
    if "tolerances" in flags and not (args.tolerances or args.exact):
        args.tolerances, args.exact = flags["tolerances"], flags["tolerances"] is None
    return found, 0


def _plan_and_run(args, names, options, pool, executor=None, rerun=None) -> int:
    import functools

    from rich.console import Console

    from conformance import reports
    from conformance.results import ResultsFile
    from conformance.runner import load_plan, plan, save_plan
    from conformance.runner import run as run_tasks
    from conformance.stateio import StateError

    console = Console(stderr=True)
    out = Path(args.out)
    plan_path = out / "plan.json"
    if args.resume and plan_path.exists():
        try:
            tasks, saved = load_plan(plan_path, names)
        except StateError as exc:
            print(f"w8a8 conformance: --resume: {exc}", file=sys.stderr)
            return 2
        skipped = saved.get("not_implemented", {})
        outside = saved.get("outside", {})
        console.print(f"[dim]resuming the plan saved in {esc(plan_path)}[/]")
    elif rerun is not None:
        tasks, skipped, outside = rerun.tasks, {}, {}
    else:
        try:
            outside: dict = {}  # per backend and op: the draws outside its capabilities (conformance.drawing)
            tasks, skipped = plan(names, args.op, profile=args.profile, seed=args.seed, draw_stats=outside)
        except KeyError as exc:
            print(f"w8a8 conformance: {exc.args[0]}", file=sys.stderr)
            return 2
        if args.op:   # ops asked for by name are judged even where no tested backend implements them
            tasks += _golden_self_check(names, skipped, args.seed)
    out.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out / "results.jsonl")
    if results.path.exists() and not args.resume:
        archived = out / f"results-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
        results.path.rename(archived)
        console.print(f"[dim]earlier results kept as {esc(archived)}[/]")
    if not (args.resume and plan_path.exists()):
        from conformance.resume import plan_flags

        flags = plan_flags(backends=names, backend_specs=args.backend, ops=args.op, profile=args.profile,
                           seed=args.seed, tolerances=_tolerance_path(args))
        save_plan(plan_path, tasks, {"not_implemented": skipped, "profile": args.profile, "seed": args.seed,
                                     "outside": outside, "flags": flags})
    for name, ops in skipped.items():
        if ops:
            console.print(f"{name} does not implement {', '.join(ops)}: reported, not run", markup=False)
    orphans = _implemented_by_none(names, skipped) if args.op else []
    if orphans:
        console.print(f"implemented by no backend tested: {', '.join(orphans)}; their named cases and bad calls are "
                      f"judged on the golden (numpy) alone", markup=False)
    if "numpy" in names and len(names) == 1 and not args.backend:
        console.print("[yellow]no backend other than the golden is available: running the golden against itself "
                      "(a self-check of the named cases and error contract)[/]")
    where = f"{args.workers} worker(s)" if executor is None else \
        f"Ray, {len(executor.nodes)} node(s), {sum(n.cpus for n in executor.nodes.values())} CPU(s)"
    console.print(f"w8a8 conformance: {len(tasks)} cases, backends {esc(', '.join(names))}, profile {args.profile}, {where}")
    t0 = time.perf_counter()
    if executor is None:
        stats = _run_with_progress(console, tasks, results, options, args.resume,
                                   functools.partial(run_tasks, pool=pool))
    else:
        from conformance.executors.progress import run_with_progress

        todo = len(tasks) - len(results.done_keys() & {t.key for t in tasks}) if args.resume else len(tasks)
        stats = run_with_progress(console, todo, lambda on_result: run_tasks(
            tasks, results, options, resume=args.resume, on_result=on_result, executor=executor))
    elapsed = time.perf_counter() - t0
    wanted = {t.key for t in tasks}
    records = [r for r in results.records() if (r["backend"], r["case_id"]) in wanted]
    meta = _meta(args, names, skipped)
    meta["ops_asked"] = list(args.op or [])
    meta["backends_asked"] = list(args.backend or [])
    meta["elapsed_s"] = round(elapsed, 1)
    meta["outside"] = outside
    if executor is not None:
        meta["executor"] = stats.get("executor", executor.report())
    paths = reports.write_all(out, records, meta)
    from conformance.reports import terminal

    summary = terminal.print_summary(records, meta, verbose=getattr(args, "verbose", False))
    console.print(f"ran {stats['ran']} case(s) ({stats['skipped_done']} already done) in {elapsed:.1f} s")
    if executor is not None:
        _print_nodes(console, stats)
    console.print("reports: " + ", ".join(str(p) for p in [results.path, *paths.values()]), soft_wrap=True,
                  markup=False, highlight=False)
    return summary["exit_status"]


def _implemented_by_none(names: list[str], skipped: dict[str, list[str]]) -> list[str]:
    """The wanted ops that none of the backends ``names`` implements (in the plan's order)."""
    if not names:
        return []
    first = skipped.get(names[0], [])
    return [op for op in first if all(op in skipped.get(n, []) for n in names)]


def _golden_self_check(names: list[str], skipped: dict[str, list[str]], seed: int) -> list:
    """For the ops no tested backend implements: the golden's own run of their named cases and bad calls (the
    declaration checked against the golden: documented values, declared errors), so that such an op is still
    judged rather than run 0 cases."""
    from conformance.runner import plan

    orphans = _implemented_by_none(names, skipped)
    if not orphans or "numpy" in names:
        return []
    tasks, _ = plan(["numpy"], orphans, profile="dev", seed=seed)
    return [t for t in tasks if t.kind in ("named", "error")]


def _run_with_progress(console, tasks, results, options, resume, run_tasks) -> dict:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    counts: dict[str, int] = {}
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        bar = progress.add_task("cases", total=len(tasks))

        def on_result(record):
            counts[record["status"]] = counts.get(record["status"], 0) + 1
            progress.update(bar, advance=1, description=" ".join(f"{k} {v}" for k, v in sorted(counts.items())))

        stats = run_tasks(tasks, results, options, resume=resume, on_result=on_result)
        progress.update(bar, completed=len(tasks))
    return stats


def _print_nodes(console, stats: dict) -> None:
    """Per Ray node: its CPUs, the batches and cases it ran, the batches lost there, the backends it lacks."""
    info = stats.get("executor") or {}
    for node in info.get("nodes", []):
        lacks = [f"{b} ({why})" for b, why in node["backends"].items() if why != "available"]
        console.print(f"  node {node['host']} {node['node_id'][:8]}: {node['cpus']} CPU(s), {node['batches']} batch(es), "
                      f"{node['cases']} case(s), {node['lost_batches']} lost" + ("" if node["alive"] else ", gone")
                      + (f"; cannot run {', '.join(lacks)}" if lacks else ""))
    if info.get("retried_batches") or info.get("duplicates_dropped"):
        console.print(f"  {info.get('retried_batches', 0)} batch(es) sent again, "
                      f"{info.get('duplicates_dropped', 0)} duplicate record(s) dropped")
    if stats.get("not_run"):
        console.print(f"[yellow]{stats['not_run']} case(s) not run: no live node offers "
                      f"{', '.join(stats['not_run_backends'])} (run again with --resume once one joins)[/]")
