"""``w8a8 bench --fail-above RATIO --baseline PATH``: exit 1 and the slower cases named when a median is
more than RATIO times the saved run's; 0 when none is; 1 when nothing matched; 2 for an unreadable baseline
or one flag without the other. The baseline is this run's own ``--json`` output with its medians scaled."""

from __future__ import annotations

import json

import pytest

from w8a8cli.main import main

BENCH = ["bench", "--quick", "--op", "dynamic_quant", "--backend", "numpy", "--no-peak", "--max-time", "0.01",
         "--min-rounds", "1"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "base.json"
    assert main(BENCH + ["--json", str(path)]) == 0
    return json.loads(path.read_text())


def _baseline(tmp_path, saved, scale: dict[str, float], rename: bool = False):
    data = json.loads(json.dumps(saved))
    for b in data["benchmarks"]:
        b["stats"]["median"] *= scale.get(b["name"], 1000.0)  # 1000x slower then: far from any threshold
        if rename:
            b["name"] += "-other"
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_case_slower_than_the_ratio_fails_the_run_and_is_named(tmp_path, saved, capsys):
    slow = saved["benchmarks"][0]["name"]
    base = _baseline(tmp_path, saved, {slow: 1e-3})   # then 1000x faster: now far above 1.25x
    capsys.readouterr()
    assert main(BENCH + ["--baseline", base, "--fail-above", "1.25"]) == 1
    err = capsys.readouterr().err
    assert f"--fail-above 1.25: 1 of {len(saved['benchmarks'])} case(s) slower than 1.25x the baseline:" in err
    assert f"  {slow}: " in err


def test_no_case_above_the_ratio_passes_and_a_baseline_with_no_case_of_this_run_fails(tmp_path, saved, capsys):
    capsys.readouterr()
    assert main(BENCH + ["--baseline", _baseline(tmp_path, saved, {}), "--fail-above", "1"]) == 0
    assert "none slower than 1x the baseline" in capsys.readouterr().err
    assert main(BENCH + ["--baseline", _baseline(tmp_path, saved, {}, rename=True), "--fail-above", "2"]) == 1
    assert "no case of this run is in the baseline" in capsys.readouterr().err


@pytest.mark.parametrize("content, args, says", [
    ('{"benchmarks": [{"name": "x", "stats": {"median": -1}}]}', ["--fail-above", "2"],
     "benchmark 0 of the baseline has no string 'name' and positive finite 'stats.median'"),
    ('{"records": []}', ["--fail-above", "2"], "the baseline is not pytest-benchmark JSON"),
    ('{"benchmarks": []}', [], "--fail-above: expected --fail-above RATIO and --baseline PATH together, got --baseline alone"),
])
def test_bad_baselines_and_ratios_are_usage_errors(tmp_path, capsys, content, args, says):
    cmd = BENCH + args
    if content is not None:
        (tmp_path / "b.json").write_text(content)
        cmd += ["--baseline", str(tmp_path / "b.json")]
    assert main(cmd) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err


def test_a_ratio_below_1_is_refused_while_parsing(capsys):
    with pytest.raises(SystemExit) as stop:
        main(BENCH + ["--fail-above", "0.99"])
    assert stop.value.code == 2
    assert "--fail-above: expected a finite number >= 1.0, got '0.99'" in capsys.readouterr().err
