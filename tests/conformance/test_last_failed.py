"""``w8a8 conformance --last-failed``: only the previous run's failing cases run again, read from its saved
plan and results; a folder with no run, or a damaged plan, is one line and exit status 2."""

from __future__ import annotations

import json

import pytest

from w8a8cli.main import main

TIES = "conformance.planted:TiesAwayBackend"  # rounds .5 ties away from zero: fails dynamic_quant's tie cases


def _keys(path):
    return [(r["backend"], r["case_id"], r["status"]) for r in map(json.loads, path.read_text().splitlines())]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lf") / "o"
    rc = main(["conformance", "--backend", TIES, "--op", "dynamic_quant", "--profile", "dev", "--workers", "0",
               "--out", str(out)])
    assert rc == 1
    return out, _keys(out / "results.jsonl")


def test_only_the_failed_cases_run_again_and_the_earlier_results_are_kept(first_run, capsys):
    out, before = first_run
    failed = sorted((b, c) for b, c, s in before if s == "fail")
    assert 0 < len(failed) < len(before)
    capsys.readouterr()
    rc = main(["conformance", "--last-failed", "--workers", "0", "--out", str(out)])
    err = capsys.readouterr().err
    after = _keys(out / "results.jsonl")
    assert rc == 1  # the planted bug is still there
    assert sorted((b, c) for b, c, _ in after) == failed
    assert f"rerunning {len(failed)} of {len(before)} judged case(s) of the previous run ({len(failed)} fail)" in err
    archived = list(out.glob("results-*.jsonl"))
    assert len(archived) == 1 and _keys(archived[0]) == before
    # narrowed to an op with no failure: nothing to run, and that is not an error
    rc = main(["conformance", "--last-failed", "--op", "quant_matmul", "--workers", "0", "--out", str(out)])
    assert rc == 0 and "no failed case to run again with this --backend/--op" in capsys.readouterr().err


@pytest.mark.parametrize("plan, says", [
    (None, "no previous run here (no saved plan)"),
    ('{"tasks": [', "the saved plan cannot be read: not valid JSON"),
    ('{"tasks": []}', "the previous run recorded no results (no results.jsonl)"),
    ('{"tasks": [7]}', "task 0 of the saved plan is not an object (int); start a new run without --last-failed"),
])
def test_no_previous_run_or_a_damaged_plan_is_one_line(tmp_path, capsys, plan, says):
    if plan is not None:
        (tmp_path / "plan.json").write_text(plan)
    rc = main(["conformance", "--last-failed", "--workers", "0", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "results.jsonl").exists()


def test_last_failed_with_resume_is_a_usage_error(tmp_path, capsys):
    rc = main(["conformance", "--last-failed", "--resume", "--out", str(tmp_path)])
    assert rc == 2 and "--last-failed" in capsys.readouterr().err
