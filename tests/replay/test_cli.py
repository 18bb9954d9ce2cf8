"""``w8a8 replay``: exit statuses, reports, resume, cases, usage errors."""

from __future__ import annotations

import json

import pytest

from w8a8cli.main import main


def test_tensor_sample_exits_1_on_its_kernel_variant_finding_with_every_report(samples, tmp_path, capsys):
    """The bundled tensor sample: its two dynamic_quant scales are the basic kernel's, where A3 selects the
    double-buffer kernel (test_replay_samples derives it by hand): exit 1, everything else bitwise."""
    out = tmp_path / "r"
    assert main(["replay", str(samples.tensor), "--out", str(out), "--json"]) == 1
    for name in ("results.jsonl", "report.md", "report.html", "summary.json", "report.xml"):
        assert (out / name).is_file(), name
    summary = json.loads(capsys.readouterr().out)
    assert not summary["ok"] and summary["exit_status"] == 1
    assert summary["counts"] == {"agree-bitwise": 5, "disagree": 2, "not-replayable": 1}
    assert summary["per_op"]["dynamic_quant"] == {"disagree": 2}
    assert summary["first_divergence"]["step0/rank0"]["name"] == "NPU.npu_dynamic_quant.0.forward"
    assert summary["meta"]["platform"] == "ascend910_93" and summary["meta"]["numerics"] == "ascend-a2a3"
    html = (out / "report.html").read_text()
    assert "id='timeline'" in html and html.count("class='call") == 7
    md = (out / "report.md").read_text()
    assert "inferred: dst_type='int8'" in md and "| `NPU.npu_swiglu.0.forward` |" in md
    assert "kernel: dynamic_quant/double-buffer[2]" in md and "kernel: swiglu/" in md
    records = {r["name"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert records["NPU.npu_dynamic_quant.0.forward"]["variant"] == "dynamic_quant/double-buffer[2]"
    assert "variant" not in records["NPU.npu_grouped_matmul.1.forward"] or \
        records["NPU.npu_grouped_matmul.1.forward"]["variant"].startswith("grouped_matmul/")


def test_platform_reaches_the_golden(samples, tmp_path, capsys):
    """--platform ascend910b judges under the A2 record (same kernels and thresholds for these shapes)."""
    assert main(["replay", str(samples.tensor), "--out", str(tmp_path / "r"), "--json",
                 "--platform", "ascend910b"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["meta"]["numerics"] == "ascend-a2" and summary["counts"]["disagree"] == 2


def test_planted_dump_exits_1_and_highlights_the_first_divergence(samples, tmp_path):
    out = tmp_path / "r"
    assert main(["replay", str(samples.planted), "--out", str(out), "--checkpoint", str(samples.checkpoint)]) == 1
    summary = json.loads((out / "summary.json").read_text())
    first = summary["first_divergence"]["step0/rank0"]
    html = (out / "report.html").read_text()
    assert "id='first-divergence'" in html and "call first" in html and first["name"] in html
    assert (out / "cases").is_dir() and first["repro"].startswith("w8a8 replay ")
    assert "## First divergence" in (out / "report.md").read_text()


def test_missing_file_exits_1(samples, copy_sample, tmp_path):
    dump = copy_sample(samples.tensor)
    (dump / "step0/rank0/dump_tensor_data/NPU.npu_swiglu.0.forward.output.0.pt").unlink()
    assert main(["replay", str(dump), "--out", str(tmp_path / "r")]) == 1


def test_nothing_to_judge_exits_0(samples, tmp_path, capsys):
    assert main(["replay", str(samples.mix), "--out", str(tmp_path / "r")]) == 0
    assert "nothing to judge" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["DOES_NOT_EXIST"], "no such file"),
    (["{tensor}", "--numerics", "{not json"], "--numerics"),
    (["{tensor}", "--numerics", '{"scale_out": "nonsense"}'], "scale_out"),
    (["{tensor}", "--numerics", '{"platform": "ascend910b"}'], "give the chip once"),
    (["{tensor}", "--exact", "--tolerances", "x.toml"], "exclude"),
    (["{tensor}", "--checkpoint", "{tensor}"], "--checkpoint"),
    (["{tensor}", "--step", "7"], "no dump folder"),
    (["{tmp}/missing.npz"], "no such file"),
])
def test_usage_errors_exit_2(samples, tmp_path, capsys, argv, message):
    argv = [a.replace("{tensor}", str(samples.tensor)).replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["replay", *argv, "--out", str(tmp_path / "r")]) == 2
    assert message in capsys.readouterr().err


def test_not_a_case_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"not a zip")
    assert main(["replay", str(bad)]) == 2
    assert "not a readable .npz case" in capsys.readouterr().err


def test_resume_continues_without_duplicates(samples, tmp_path):
    out = tmp_path / "r"
    assert main(["replay", str(samples.tensor), "--out", str(out)]) == 1     # the sample's finding
    lines = (out / "results.jsonl").read_text().splitlines(keepends=True)
    # an interrupted run: three complete records and a torn fourth line
    (out / "results.jsonl").write_text("".join(lines[:3]) + lines[3][:20])
    assert main(["replay", str(samples.tensor), "--out", str(out), "--resume"]) == 1
    again = [json.loads(x)["case_id"] for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(again) == sorted(json.loads(x)["case_id"] for x in lines) and len(set(again)) == len(again)
    # without --resume the old results are kept aside, not appended to
    assert main(["replay", str(samples.tensor), "--out", str(out)]) == 1
    assert len(list(out.glob("results-*.jsonl"))) == 1


def test_numerics_override_reaches_the_golden(samples, tmp_path):
    """With the planted kernel choice declared (one fixed kernel), the planted call agrees."""
    out = tmp_path / "r"
    main(["replay", str(samples.planted), "--out", str(out), "--op", "dynamic_quant", "--numerics",
          '{"variants": "fixed"}'])
    records = {r["name"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())
               if r.get("kind") == "replay"}
    assert records["NPU.npu_dynamic_quant.2.forward"]["verdict"] == "agree-bitwise"
    assert records["NPU.npu_dynamic_quant.2.forward"]["numerics"].endswith("variants=fixed")
    # the unplanted calls were computed by the selected kernels: under the fixed record they disagree
    assert records["NPU.npu_dynamic_quant.0.forward"]["verdict"] == "disagree"
    assert set(records) == {f"NPU.npu_dynamic_quant.{i}.forward" for i in range(4)}


def test_export_case_of_a_named_call_and_replay_it(samples, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["replay", str(samples.tensor), "--out", str(out), "--export-case",
                 "NPU.npu_grouped_matmul.0.forward"]) == 1     # the sample's dynamic_quant finding
    (case,) = (out / "cases").glob("*NPU.npu_grouped_matmul.0.forward.npz")
    capsys.readouterr()
    assert main(["replay", str(case)]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "agree-bitwise"


def test_max_calls(samples, tmp_path):
    out = tmp_path / "r"
    main(["replay", str(samples.tensor), "--out", str(out), "--max-calls", "2"])
    judged = [r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())
              if r["verdict"] != "not-replayable"]
    assert len(judged) == 2


def test_listed_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "replay" in capsys.readouterr().out


def test_report_says_when_a_checkpoint_match_rests_on_path_and_shape(samples, tmp_path):
    out = tmp_path / "r"
    main(["replay", str(samples.planted), "--out", str(out), "--checkpoint", str(samples.checkpoint)])
    md = (out / "report.md").read_text()
    assert "input_args.1: from checkpoint model.layers.0.self_attn.o_proj.weight" in md
    assert "rests on module path 'model.layers.0.self_attn.o_proj' and shape only" in md
