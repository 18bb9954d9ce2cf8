"""The repro line printed for every divergence runs: ``--export-case`` gets the call's NAME.

Before, a non-first divergence printed ``w8a8 replay DUMP --call NAME --export-case`` (no NAME after the
flag): argparse exits 2 on it.
"""

from __future__ import annotations

import shlex

import w8a8cli.main as cli


def test_every_repro_line_runs_and_exports_its_case(samples, run_replay, tmp_path):
    by_name, _ = run_replay(samples.planted)
    lines = [r["repro"] for r in by_name.values() if r.get("verdict") == "disagree"]
    later = [line for line in lines if not line.endswith(".npz")]     # the first divergence's is the case file
    assert later, "the planted dump has divergences after the first"
    line = later[0]
    words = shlex.split(line)
    assert words[:2] == ["w8a8", "replay"]
    out = tmp_path / "again"
    rc = cli.main(words[1:] + ["--out", str(out)])
    assert rc == 1                                   # the call still disagrees; 2 would be a usage error
    name = words[words.index("--call") + 1]
    assert list((out / "cases").glob(f"*{name}.npz"))


def test_repro_line_carries_platform_and_record():
    from replay import golden
    from replay.runner import Options, repro_line

    opts = Options(platform="ascend910b", numerics=golden.platform_numerics("ascend910b").replace(variants="fixed"))
    line = repro_line("w8a8 replay '/data/my dump'", "NPU.npu_dynamic_quant.2.forward", opts)
    words = shlex.split(line)
    assert words[2] == "/data/my dump"
    assert words[words.index("--export-case") + 1] == "NPU.npu_dynamic_quant.2.forward"
    assert words[words.index("--platform") + 1] == "ascend910b"
    assert words[words.index("--numerics") + 1] == '{"variants": "fixed"}'
