"""``w8a8 bench --fail-above RATIO --baseline PATH``: a run's times against a saved run's, for CI.

The baseline is a saved run in pytest-benchmark's JSON schema: what ``w8a8 bench --json PATH`` writes,
or a file pytest-benchmark saved itself (``--benchmark-save`` / ``--benchmark-autosave``). A case is
matched by its pytest-benchmark ``name`` (``test_<op>[<backend>-<shape>]``, the peers run with
``_peers``); its slowdown is this run's median over the baseline's median. Cases present on one side
only are counted, not judged. The run fails (exit status 1) when a matched case's slowdown is above
RATIO, or when no case matched at all (a guard that compared nothing would pass silently).

A baseline that is not a regular file, too large, not JSON, or has no ``benchmarks`` list of objects
with a string ``name`` and a positive finite ``stats.median`` is one :class:`StateError` line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from conformance.stateio import StateError, read_json

BASELINE_BYTES = 256 << 20


def benchmark_name(r: dict) -> str:
    """The pytest-benchmark name of a bench record (as :func:`bench.report.pytest_benchmark_json` writes it)."""
    peers = r.get("group") == "peers"
    return f"test_{r['op']}{'_peers' if peers else ''}[{r['backend']}-{r['label']}]"


def load_baseline(path) -> dict[str, float]:
    """name -> median seconds of a saved run (see the module)."""
    data = read_json(path, limit=BASELINE_BYTES, what="baseline")
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise StateError(path, "the baseline is not pytest-benchmark JSON (no 'benchmarks' list); give a file "
                               "written by 'w8a8 bench --json' or pytest-benchmark's --benchmark-save")
    medians = {}
    for i, b in enumerate(data["benchmarks"]):
        median = (b.get("stats") or {}).get("median") if isinstance(b, dict) else None
        if not isinstance(b, dict) or not isinstance(b.get("name"), str) or isinstance(median, bool) \
                or not isinstance(median, (int, float)) or not math.isfinite(median) or median <= 0:
            raise StateError(path, f"benchmark {i} of the baseline has no string 'name' and positive finite "
                                   f"'stats.median'")
        medians[b["name"]] = float(median)
    return medians


@dataclass
class Verdict:
    """The matched cases (name, median now, median then, slowdown), worst first, and the ones above."""

    ratio: float
    matched: list = field(default_factory=list)
    regressions: list = field(default_factory=list)
    only_here: int = 0
    only_there: int = 0

    @property
    def failed(self) -> bool:
        return bool(self.regressions) or not self.matched

    def lines(self) -> list[str]:
        """What the terminal says: one line, then each regression on its own line."""
        head = f"--fail-above {self.ratio:g}: "
        if not self.matched:
            return [head + f"no case of this run is in the baseline ({self.only_here} here, {self.only_there} "
                           "there): nothing compared, failing"]
        worst = self.matched[0]
        side = f" ({self.only_here} case(s) not in the baseline, {self.only_there} baseline case(s) not run)" \
            if self.only_here or self.only_there else ""
        if not self.regressions:
            return [head + f"{len(self.matched)} case(s) compared, none slower than {self.ratio:g}x the baseline "
                           f"(worst {worst[3]:.2f}x, {worst[0]}){side}"]
        return [head + f"{len(self.regressions)} of {len(self.matched)} case(s) slower than {self.ratio:g}x the "
                       f"baseline{side}:"] + [
            f"  {name}: {now * 1e3:.3f} ms vs {then * 1e3:.3f} ms = {slow:.2f}x"
            for name, now, then, slow in self.regressions]


def judge(records: list[dict], baseline: dict[str, float], ratio: float) -> Verdict:
    """This run's ok records against the baseline medians (see the module)."""
    now = {benchmark_name(r): r["stats"]["median"] for r in records if r.get("status") == "ok"}
    v = Verdict(ratio)
    for name, median in now.items():
        if name in baseline:
            v.matched.append((name, median, baseline[name], median / baseline[name]))
    v.matched.sort(key=lambda m: -m[3])
    v.regressions = [m for m in v.matched if m[3] > ratio]
    v.only_here = len(set(now) - set(baseline))
    v.only_there = len(set(baseline) - set(now))
    return v
