"""``w8a8 compare RUN_A RUN_B``: what changed between two conformance runs (:mod:`conformance.reports.rundiff`)."""

from __future__ import annotations

import json
import sys

from . import validate

HELP = "the difference between two conformance runs: changed verdicts, new causes, distance shifts"

DESCRIPTION = """\
Compare two conformance runs case by case — another library version, another CANN, another kernel
build, another declared Numerics record — and list the cases whose verdict changed (regressions first,
each with its repro line), the failure causes only one run has, and per op the shift of the worst
distance to the golden.

  w8a8 conformance --backend onnxruntime --out run-old ...   # (with the old version)
  w8a8 conformance --backend onnxruntime --out run-new ...   # (with the new version)
  w8a8 compare run-old run-new

RUN is a results.jsonl or the --out folder holding one. The backends compared are the one both runs
have, or each run's only one, or the ones named (--backend-a / --backend-b: e.g. two backends of one run,
or a backend against a saved results file).

Exit status: 0 when no case went from a good verdict (pass, tolerated, refused, mistrusted) to a bad one
(fail, error, crashed, timeout), 1 when some did, 2 for bad usage (a missing run, an unknown backend).
"""


def add_arguments(p) -> None:
    p.add_argument("run_a", metavar="RUN_A", help="the earlier run: results.jsonl or its --out folder")
    p.add_argument("run_b", metavar="RUN_B", help="the later run: results.jsonl or its --out folder")
    p.add_argument("--backend-a", metavar="NAME", help="the backend of RUN_A to compare (its record's name)")
    p.add_argument("--backend-b", metavar="NAME", help="the backend of RUN_B to compare")
    p.add_argument("--json", action="store_true", help="print the difference as JSON")
    p.add_argument("--limit", type=validate.integer(0), default=20,
                   help="changed cases listed in the text report (>= 0; default 20)")


def run(args) -> int:
    from conformance.reports import rundiff

    try:
        d = rundiff.diff(rundiff.load(args.run_a), rundiff.load(args.run_b), args.backend_a, args.backend_b)
    except (FileNotFoundError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(json.dumps(d, indent=2) if args.json else rundiff.render(d, limit=args.limit), end="" if not args.json
          else "\n")
    return 1 if d["regressions"] else 0
