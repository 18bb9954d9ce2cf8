"""The figures of README.md and docs/ that a command produces, regenerated from that command.

Every such figure sits in a block between two markers::

    <!-- gen:ID -->
    ... text written by this script ...
    <!-- /gen:ID -->

and is rewritten here by running the block's command(s) afresh (never typed by hand). Times are not
figures of this kind (they depend on the machine and its load) and stay outside the blocks.

    python tools/gen_docs.py                  # rewrite every block whose commands run here (all costs)
    python tools/gen_docs.py --only default-run
    python tools/gen_docs.py --check          # exit 1 and list the blocks whose text differs

Costs: ``fast`` (seconds; checked by the default test run), ``slow`` (tens of seconds on 2 cores;
checked by the test run too, marked slow), ``long`` (minutes, or extras such as onnxruntime / torchao;
checked when ``W8A8_DOCS_LONG=1``). ``tests/docs/test_docs_figures.py`` runs the check.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- gen:{id} -->"
END = "<!-- /gen:{id} -->"


def w8a8_command(args: list[str]) -> list[str]:
    """The argv that runs ``w8a8 ARGS`` with this interpreter (no PATH lookup)."""
    return [sys.executable, "-c", "import sys; from w8a8cli.main import main; sys.exit(main())", *args]


def run_w8a8(args: list[str], cwd: Path, ok_codes=(0, 1)) -> subprocess.CompletedProcess:
    proc = subprocess.run(w8a8_command(args), cwd=cwd, capture_output=True, text=True, timeout=1800)
    if proc.returncode not in ok_codes:
        raise RuntimeError(f"w8a8 {shlex.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc


def _num(n: int) -> str:
    return f"{n:,}"


def _totals(totals: dict) -> str:
    return ", ".join(f"{k} {_num(v)}" for k, v in sorted(totals.items()))


# -- the blocks ------------------------------------------------------------------------------------------

def declared_counts(work: Path) -> str:
    from conformance.registry import bad_calls, named_cases, specs

    return (f"{_num(len(named_cases()))} named cases and {_num(len(bad_calls()))} bad calls over the "
            f"{len(specs())} declared ops")


DEFAULT_RUN = ["conformance", "--out", "default-run"]


def default_run(work: Path) -> str:
    run_w8a8(DEFAULT_RUN, work)
    s = json.loads((work / "default-run" / "summary.json").read_text())
    backends_ = sorted(s["matrix"])
    parts = []
    for b in backends_:
        cells = s["matrix"][b]
        n = sum(v for c in cells.values() for k, v in c.items() if isinstance(v, int) and k != "worst")
        parts.append(f"{_num(n)} cases against `{b}` on the {len(cells)} ops it implements")
    missing = sorted({op for ops in s["meta"]["not_implemented"].values() for op in ops})
    text = (f"`w8a8 {shlex.join(DEFAULT_RUN)}` (profile `{s['meta']['profile']}`, seed {s['meta']['seed']}): "
            + "; ".join(parts) + f" — {_totals(s['totals'])}.")
    if missing:
        text += (f" Not implemented there, so not run: {len(missing)} op(s) ("
                 + ", ".join(f"`{op}`" for op in missing) + ").")
    return text


PLANTED_RUN = ["conformance", "--backend", "conformance.planted:TiesAwayBackend", "--op", "dynamic_quant",
               "--out", "planted-run"]


def planted_run(work: Path) -> str:
    from conformance.reports.grouping import groups
    from conformance.results import ResultsFile

    run_w8a8(PLANTED_RUN, work)
    s = json.loads((work / "planted-run" / "summary.json").read_text())
    found = groups([r for r in ResultsFile(work / "planted-run" / "results.jsonl").records()
                    if r["status"] in ("fail", "error", "crashed", "timeout")])
    g = found[0].as_dict()
    return (f"`w8a8 {shlex.join(PLANTED_RUN)}`: {_totals(s['totals'])}; {len(found)} failure group(s), the "
            f"first: stage `{g['stage']}`, cause: {g['cause']} (worst {g['worst']}). Its repro line:\n\n"
            f"```\n{g['repro']}\n```")


TORCH_DIST_RUN = ["conformance", "--backend", "torch-dist", "--op", "moe_distribute_dispatch", "--op",
                  "moe_distribute_dispatch_v2", "--op", "moe_distribute_combine", "--op",
                  "moe_distribute_combine_v2", "--op", "w8a8_moe_ep", "--workers", "1", "--out", "torch-dist-run"]


def torch_dist_run(work: Path) -> str:
    run_w8a8(TORCH_DIST_RUN, work)
    s = json.loads((work / "torch-dist-run" / "summary.json").read_text())
    n = sum(s["totals"].values())
    return f"`w8a8 {shlex.join(TORCH_DIST_RUN[:-2])}`: {_num(n)} cases, {_totals(s['totals'])}"


FOREIGN = ["onnxruntime", "onnxruntime-dqmm", "torchao"]
FOREIGN_RUN = ["conformance", *[a for b in FOREIGN for a in ("--backend", b)], "--out", "foreign-run"]


def foreign_run(work: Path) -> str:
    run_w8a8(FOREIGN_RUN, work)
    s = json.loads((work / "foreign-run" / "summary.json").read_text())
    n = sum(s["totals"].values())
    lines = [f"`w8a8 {shlex.join(FOREIGN_RUN[:-2])}`: {_num(n)} cases.", ""]
    for b in sorted(s["matrix"]):
        per: dict = {}
        for cell in s["matrix"][b].values():
            for k, v in cell.items():
                if isinstance(v, int) and k != "worst":
                    per[k] = per.get(k, 0) + v
        lines.append(f"* **{b}**: {_totals(per)}")
    return "\n".join(lines)


def foreign_table(work: Path) -> str:
    cmd = [sys.executable, str(ROOT / "examples" / "foreign_numerics_table.py"),
           *[a for b in FOREIGN for a in ("--backend", b)], "--cases", "100"]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=1800, check=True)
    return proc.stdout.strip()


DSV3 = ("tests/modelrun/data/msmodelslim/dsv3-mix", "tests/modelrun/data/float/dsv3-bf16")
BIAS_RUN = ["run", "dsv3-bias", "--reference", DSV3[1], "--prompts", "examples/model_run_prompts.txt", "--backend",
            "numpy", "--backend", "torch-cpu", "--json"]


def dsv3_bias_restored(work: Path) -> str:
    """The DeepSeek-V3 checkpoint with its router correction bias copied back from the float model."""
    restore = [sys.executable, "examples/restore_router_bias.py", DSV3[0], DSV3[1], str(work / "dsv3-bias")]
    subprocess.run(restore, cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    args = [a if a != "dsv3-bias" else str(work / "dsv3-bias") for a in BIAS_RUN]
    d = json.loads(run_w8a8(args, ROOT).stdout)
    (route,) = d["routing"]
    causes = {k: v for k, v in route["causes"].items() if v}
    why = (f"all from {next(iter(causes))}" if len(causes) == 1 else
           ", ".join(f"{v} from {k}" for k, v in causes.items())) if causes else "none"
    moe = next(m for m in d["modules"] if m["kind"] == "moe")
    shown = " ".join(["python examples/restore_router_bias.py", *DSV3, "dsv3-bias"])
    return (f"With the bias copied back from the float model (`{shown}`, then "
            f"`w8a8 {shlex.join(BIAS_RUN[:-1])}`): rel-L2 {d['logits']['rel_l2']:.3f}, {route['changed']} "
            f"tokens changed ({why}), MoE SQNR {moe['sqnr_db']:.1f} dB.")


@dataclass(frozen=True)
class Block:
    id: str
    page: str
    cost: str          # fast | slow | long
    render: Callable[[Path], str]
    needs: tuple = ()  # importable modules the commands need


BLOCKS = [
    Block("declared-counts", "docs/conformance.md", "fast", declared_counts),
    Block("planted-run", "README.md", "fast", planted_run),
    Block("planted-run", "docs/conformance.md", "fast", planted_run),
    Block("default-run", "README.md", "slow", default_run, ("torch",)),
    Block("default-run", "docs/conformance.md", "slow", default_run, ("torch",)),
    Block("dsv3-bias-restored", "docs/model-runs.md", "slow", dsv3_bias_restored, ("torch", "tokenizers")),
    Block("torch-dist-run", "docs/expert-parallelism.md", "long", torch_dist_run, ("torch",)),
    Block("foreign-run", "docs/conformance.md", "long", foreign_run, ("onnxruntime", "torchao")),
    Block("foreign-table", "docs/backends.md", "long", foreign_table, ("onnxruntime", "torchao")),
]


# -- reading and writing the blocks ------------------------------------------------------------------------

def block_text(text: str, block_id: str) -> str | None:
    """The text between the markers of ``block_id`` in ``text`` (stripped), or ``None`` without them."""
    m = re.search(re.escape(BEGIN.format(id=block_id)) + r"\n(.*?)" + re.escape(END.format(id=block_id)),
                  text, flags=re.S)
    return None if m is None else m.group(1).strip()


def replace_block(text: str, block_id: str, body: str) -> str:
    begin, end = BEGIN.format(id=block_id), END.format(id=block_id)
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"no {begin} ... {end} block")
    return text[:i] + begin + "\n" + body.strip() + "\n" + text[j:]


def available(block: Block) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in block.needs)


def render_all(blocks: list[Block], work: Path) -> dict[str, str]:
    """Each distinct block id rendered once (a block may appear on several pages)."""
    out: dict[str, str] = {}
    for b in blocks:
        if b.id not in out:
            out[b.id] = b.render(work)
    return out


def differences(blocks: list[Block], rendered: dict[str, str], root: Path = ROOT) -> list[str]:
    """Where a page's block differs from what its command prints now (one line each)."""
    problems = []
    for b in blocks:
        have = block_text((root / b.page).read_text(), b.id)
        if have is None:
            problems.append(f"{b.page}: no gen:{b.id} block")
        elif have != rendered[b.id].strip():
            problems.append(f"{b.page}: gen:{b.id} differs from its command's output:\n--- page\n{have}\n"
                            f"--- command\n{rendered[b.id].strip()}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", metavar="ID", help="block id (repeatable; default: all)")
    ap.add_argument("--cost", action="append", choices=("fast", "slow", "long"),
                    help="only blocks of this cost (repeatable; default: all)")
    ap.add_argument("--check", action="store_true", help="compare instead of rewriting; exit 1 on a difference")
    args = ap.parse_args(argv)
    blocks = [b for b in BLOCKS if (not args.only or b.id in args.only) and (not args.cost or b.cost in args.cost)]
    skipped = [b for b in blocks if not available(b)]
    for b in skipped:
        print(f"gen_docs: {b.page} gen:{b.id} skipped: needs {', '.join(b.needs)}", file=sys.stderr)
    blocks = [b for b in blocks if b not in skipped]
    with tempfile.TemporaryDirectory(prefix="w8a8-gen-docs-") as tmp:
        rendered = render_all(blocks, Path(tmp))
    if args.check:
        problems = differences(blocks, rendered)
        for p in problems:
            print(p)
        return 1 if problems else 0
    for b in blocks:
        page = ROOT / b.page
        page.write_text(replace_block(page.read_text(), b.id, rendered[b.id]))
        print(f"gen_docs: {b.page} gen:{b.id} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
