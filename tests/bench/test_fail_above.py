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


def test_no_case_above_the_ratio_passes_and_a_baseline_with_no_case_of_this_run_fails():
    from bench.regression import judge

    records = [{"op": "dynamic_quant", "backend": "numpy", "label": "M16xH4096", "status": "ok",
                "stats": {"median": 2e-3}}, {"op": "dynamic_quant", "backend": "numpy", "label": "M7", "status": "error"}]
    ok = judge(records, {"test_dynamic_quant[numpy-M16xH4096]": 1e-3, "test_other[x-y]": 1.0}, 2.0)
    assert not ok.failed and ok.lines() == [
        "--fail-above 2: 1 case(s) compared, none slower than 2x the baseline (worst 2.00x, "
        "test_dynamic_quant[numpy-M16xH4096]) (0 case(s) not in the baseline, 1 baseline case(s) not run)"]
    just_above = judge(records, {"test_dynamic_quant[numpy-M16xH4096]": 1e-3 - 1e-9}, 2.0)
    assert just_above.failed and just_above.regressions[0][0] == "test_dynamic_quant[numpy-M16xH4096]"
    none = judge(records, {"test_other[x-y]": 1.0}, 2.0)
    assert none.failed and "no case of this run is in the baseline" in none.lines()[0]


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
