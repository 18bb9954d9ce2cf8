"""``w8a8 bench``: the backends timed side by side on real model shapes (DeepSeek-V4-Flash), with
throughput, the ratio to the fastest backend and to this machine's measured peak, peak memory, and
transfers reported apart. A time is shown only where the backend's output agreed with the golden on
the same inputs in this run ("unverified" otherwise), and each case's roofline (the bytes it must move and
the ops it must run against the measured bandwidth and compute ceilings: "bandwidth-bound (DRAM) at 76%",
"int8-bound at 71%"). ``--peers`` adds torch-cpu's dynamic Linear timed round-robin, in one process,
with its CPU peers (onnxruntime, torchao, torch bf16, the bare int8 GEMMs). ``--json`` writes pytest-benchmark's schema
(``pytest-benchmark compare PATH``); ``--out`` adds plots (throughput vs M, the scaling study) and an
HTML page. ``--fail-above RATIO --baseline PATH`` fails the run when a case is slower than RATIO times
its median in a saved run (a ``--json`` file or pytest-benchmark's own saved JSON).

Exit status: 0 when every case ran and was verified (and, with ``--fail-above``, none is slower than
RATIO times the baseline); 1 when a case failed, crashed, timed out or is unverified, or a case is slower
than RATIO times the baseline, or no case matched the baseline; 2 for bad usage (an unknown backend or
op, a baseline that cannot be read)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from . import validate

HELP = "time the backends side by side on DeepSeek-V4-Flash shapes (verified results only)"
DESCRIPTION = __doc__


def add_arguments(parser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="the quick set: decode M=16 and prefill M=512, MoE at reduced expert count (minutes)")
    parser.add_argument("--backend", action="append", metavar="NAME",
                        help="backend to time (repeatable; default: every available backend)")
    parser.add_argument("--op", action="append", metavar="OP", help="op to time (repeatable; default: all)")
    parser.add_argument("--json", metavar="PATH", help="write the results in pytest-benchmark's JSON schema "
                                                       "(a writable file path)")
    parser.add_argument("--out", metavar="DIR", help="write plots (PNG) and bench-report.html into DIR "
                                                     "(a directory or creatable, writable)")
    parser.add_argument("--max-time", type=validate.real(0, open_low=True), default=2.0,
                        help="seconds of timed rounds per case, a finite number > 0 (default 2)")
    parser.add_argument("--min-rounds", type=validate.integer(1), default=3,
                        help="minimum timed rounds per case, >= 1 (default 3)")
    parser.add_argument("--no-peak", action="store_true", help="skip the peak micro-benchmark")
    parser.add_argument("--timeout", type=validate.real(0, open_low=True), default=600.0,
                        help="seconds one case may take on a backend before its process is killed and the case "
                             "recorded 'timeout', a finite number > 0 (default 600)")
    parser.add_argument("--peers", action="store_true",
                        help="also time torch-cpu's w8a8_dynamic_linear round-robin with its CPU peers (onnxruntime, "
                             "torchao, torch bf16 matmul, the int8 GEMMs alone) in one process (extra 'bench')")
    parser.add_argument("--baseline", metavar="PATH",
                        help="a saved run to compare with: the JSON 'w8a8 bench --json' wrote, or pytest-benchmark's "
                             "own saved JSON (with --fail-above)")
    parser.add_argument("--fail-above", type=validate.real(1.0), metavar="RATIO",
                        help="exit 1 when a case's median is more than RATIO times its median in --baseline "
                             "(a finite number >= 1, e.g. 1.25 for 25 %% slower), or when no case is in the baseline")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="every column in the terminal (throughput, roofline, peak memory, transfers): a wide table")
    parser.add_argument("--list", action="store_true",
                        help="list the cases (from the op declarations) with their tags and work, then exit")


def check(args) -> None:
    """The output paths, before any timing (:class:`~w8a8cli.validate.UsageError`); numbers are checked
    while parsing, the op names against the bench cases in :func:`run`."""
    if args.json:
        validate.out_file(args.json, "--json")
    if args.out:
        validate.out_dir(args.out)
    if (args.fail_above is None) != (args.baseline is None):
        raise validate.UsageError("--fail-above" if args.baseline else "--baseline",
                                  "--fail-above RATIO and --baseline PATH together",
                                  "--baseline alone" if args.baseline else "--fail-above alone")
    args.baseline_medians = None
    if args.baseline:
        from bench.regression import load_baseline
        from conformance.stateio import StateError

        validate.in_file(args.baseline, "--baseline", "a saved bench run (JSON)")
        try:
            args.baseline_medians = load_baseline(args.baseline)
        except StateError as exc:
            raise validate.UsageError.relay("--baseline", str(exc)) from None


def run(args) -> int:
    check(args)
    import backends
    from rich.console import Console

    from bench.cases import all_cases

    console = Console(stderr=True)
    names = args.backend or [b.name for b in backends.available()]
    registrations = {}
    for i, name in enumerate(names):
        try:
            b = backends.get(name)
        except (KeyError, ImportError, AttributeError) as exc:
            print(f"w8a8 bench: unknown backend {name!r}: {exc}", file=sys.stderr)
            return 2
        ok, reason = b.available()
        if not ok:
            print(f"w8a8 bench: backend {b.name!r} is not available here: {reason}", file=sys.stderr)
            return 2
        if ":" in name:
            registrations[b.name] = name
        names[i] = b.name
    full = not args.quick
    cases = [c for c in all_cases(full) if (full or "quick" in c.tags) and (not args.op or c.op in args.op)]
    if args.op:
        known = {c.op for c in all_cases(full)}
        unknown = [op for op in args.op if op not in known]
        if unknown:
            print(f"w8a8 bench: no benchmark cases for op(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
                  file=sys.stderr)
            return 2
    if args.list:
        for c in cases:
            print(f"{c.name:56s} {c.work:12.4g} {c.unit:4s} {','.join(c.tags)}" + (f" compute={c.compute}" if c.compute else ""))
        return 0
    from conformance.outlock import OutLock, OutLocked

    lock = OutLock(args.out) if args.out else None  # one bench per --out: two would overwrite each other's report
    try:
        if lock is not None:
            lock.acquire()
    except (OutLocked, OSError) as exc:
        print(f"w8a8 bench: {exc}", file=sys.stderr)
        return 2
    previous = _stop_on_sigterm()
    try:
        return _bench(args, console, names, cases, full, registrations)
    except _Terminated:
        print("w8a8 bench: stopped by SIGTERM; no result written (workers stopped, temporary files removed)",
              file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if lock is not None:
            lock.release()


class _Terminated(BaseException):
    """SIGTERM during a bench: unwinds like Ctrl-C, so every ``finally`` runs (workers killed, the temporary
    folder and .npz outputs removed, the --out lock released); results are written atomically at the end
    only, so none is half-written."""


def _stop_on_sigterm():
    """Turn SIGTERM into :class:`_Terminated` (main thread only); the previous handler, or None."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise _Terminated()

    return signal.signal(signal.SIGTERM, handler)


def _bench(args, console, names, cases, full, registrations) -> int:
    from bench import peers as bench_peers
    from bench import report
    from bench.peak import Peaks, measure
    from bench.runner import run as run_bench
    from conformance.results import write_atomic

    from conformance.reports.console import esc

    from .conformance_cmd import _versions

    t0 = time.perf_counter()
    peaks = Peaks(0.0, 0.0, "not measured", "not measured", "skipped (--no-peak)", os.cpu_count() or 1) \
        if args.no_peak else measure()
    console.print(f"w8a8 bench: {len(cases)} cases x {len(names)} backend(s) ({esc(', '.join(names))}); peaks: int8 "
                  f"{peaks.int8 / 1e12:.2f} TOPS, fp64 {peaks.fp64 / 1e9:.0f} GFLOP/s ({peaks.method})")

    def on_record(r):
        state = r.get("status")
        if state == "ok":
            console.print(f"  {esc(r['backend']):>10s} {esc(r['case']):<48s} {r['stats']['median'] * 1e3:9.2f} ms", highlight=False)
        else:
            console.print(f"  {esc(r['backend']):>10s} {esc(r['case']):<48s} {esc(state)}: {esc((r.get('note') or '')[:60])}",
                          highlight=False)

    records = run_bench(names, cases, full=full, registrations=registrations, timeout=args.timeout,
                        timing={"max_time": args.max_time, "min_rounds": args.min_rounds}, on_record=on_record)
    if args.peers and (not args.op or "w8a8_dynamic_linear" in args.op):
        records += bench_peers.run_peers(bench_peers.peer_case_list(full), on_record=on_record, timeout=args.timeout,
                                         timing={"max_time": 2 * args.max_time, "min_rounds": max(7, args.min_rounds)})
    if not args.no_peak:   # again at the end: a ceiling is the best rate seen (a busy machine only lowers one)
        peaks = peaks.best(measure())
    report.annotate(records, peaks)
    report.print_table(records, peaks, console=console, verbose=args.verbose)
    paths = sorted({p for r in records if (p := report.gemm_path(r))})
    if paths:
        console.print(f"GEMM: the int8 GEMM path each case took ({', '.join(paths)}); this CPU: {esc(_isa())}",
                      soft_wrap=True, highlight=False)
    meta = {"command": " ".join(["w8a8"] + sys.argv[1:]), "cpus": os.cpu_count(), "peaks": peaks.as_dict(),
            "versions": _versions(), "max_time": args.max_time, "min_rounds": args.min_rounds,
            "machine": f"{os.uname().machine}, {os.cpu_count()} cores", "isa": _isa()}
    if args.json:
        write_atomic(args.json, json.dumps(report.pytest_benchmark_json(records, meta), indent=1, default=str))
        console.print(f"wrote {esc(args.json)}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        from conformance import plots

        fits = report.scaling_fits(records)
        tvm = report.throughput_vs_m(records)
        if tvm is not None:   # no verified case with several M: no empty figure
            write_atomic(out / "throughput-vs-m.png", plots.png_bytes(tvm))
        if fits:
            write_atomic(out / "scaling.png", plots.png_bytes(report.scaling_plot(fits)))
        write_atomic(out / "bench-report.html", report.render_html(records, peaks, fits, meta))
        write_atomic(out / "bench.json", json.dumps({"meta": meta, "records": [{k: v for k, v in r.items() if k != "data"}
                                                                               for r in records], "scaling": fits},
                                                    indent=1, default=str))
        console.print(f"plots and bench-report.html in {esc(out)}")
    bad = [r for r in records if r.get("status") in ("error", "crashed", "timeout") or (r.get("status") == "ok" and not r.get("verified")
                                                                           and not bench_peers.expected_unverified(r))]
    console.print(f"done in {time.perf_counter() - t0:.0f} s; {len(bad)} case(s) failed or unverified")
    slower = False
    if args.baseline_medians is not None:
        from bench.regression import judge

        verdict = judge(records, args.baseline_medians, args.fail_above)
        for line in verdict.lines():
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        slower = verdict.failed
    return 1 if bad or slower else 0


def _isa() -> str:
    """The CPU's int8 / bf16 instruction sets (``/proc/cpuinfo``), recorded with the ceilings."""
    from backends.torch_cpu.runtime import isa

    return isa()
