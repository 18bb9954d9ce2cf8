"""Replay of every bundled sample (samples/README.md), with the verdicts their provenance implies.

The constructed samples' outputs are the golden's *as of their writing*. The expected verdict of each
call is derived here from the golden itself, called by hand (not through replay's mapping) on the
dumped inputs: if the golden still reproduces the dumped bits the call must be ``agree-bitwise``,
otherwise ``disagree`` — e.g. once the kernel-variant work models another dynamic_quant scale formula
for these H = 16 shapes, that is a finding, and this test follows it.
"""

from __future__ import annotations

import json
import shutil
import zipfile

import numpy as np
import pytest

import w8a8
from replay.pt_reader import crc32_of, read_pt


def _load(dump_dir, name):
    return read_pt(dump_dir / "dump_tensor_data" / f"{name}.pt").array


def _hand_golden(d, entry: str):
    """The golden call of each NPU entry of the tensor sample, written out from the README's call list."""
    t = lambda suffix: _load(d, f"{entry}.{suffix}")  # noqa: E731
    if entry.startswith("NPU.npu_dynamic_quant"):
        return w8a8.dynamic_quant(t("input.0"), dst_type="int8")
    if entry == "NPU.npu_quant_matmul.0.forward":
        return (w8a8.quant_matmul(t("input.0"), t("input.1"), t("input.2"), pertoken_scale=t("kwargs.pertoken_scale"),
                                  output_dtype="bfloat16"),)
    if entry == "NPU.npu_grouped_matmul.0.forward":
        return (w8a8.grouped_matmul(t("input.0.0"), t("input.1.0"), scale=t("kwargs.scale.0"),
                                    per_token_scale=t("kwargs.per_token_scale.0"), group_list=t("kwargs.group_list"),
                                    split_item=2, group_type=0, group_list_type=1, output_dtype="bfloat16"),)
    if entry == "NPU.npu_grouped_matmul.1.forward":
        return (w8a8.grouped_matmul(t("input.0.0"), t("input.1.0"), group_list=t("kwargs.group_list"), split_item=3,
                                    group_type=0, group_list_type=1, output_dtype="int32"),)
    if entry == "NPU.npu_swiglu.0.forward":
        return (w8a8.swiglu(t("input.0"), -1),)
    if entry == "NPU.npu_dequant_swiglu_quant.0.forward":
        return w8a8.dequant_swiglu_quant(t("input.0"), weight_scale=t("kwargs.weight_scale"),
                                         activation_scale=t("kwargs.activation_scale"),
                                         group_index=t("kwargs.group_index"), activate_left=True, quant_mode=1)
    raise KeyError(entry)


def _expected(d, entry: str, n_out: int) -> str:
    golden = _hand_golden(d, entry)
    files = ["output.0.0"] if "grouped_matmul" in entry else [f"output.{i}" for i in range(n_out)]
    same = all(np.asarray(g).tobytes() == _load(d, f"{entry}.{f}").tobytes() for g, f in zip(golden, files))
    return "agree-bitwise" if same else "disagree"


NPU_ENTRIES = {"NPU.npu_dynamic_quant.0.forward": 2, "NPU.npu_quant_matmul.0.forward": 1,
               "NPU.npu_grouped_matmul.0.forward": 1, "NPU.npu_swiglu.0.forward": 1,
               "NPU.npu_dynamic_quant.1.forward": 2, "NPU.npu_grouped_matmul.1.forward": 1,
               "NPU.npu_dequant_swiglu_quant.0.forward": 2}


def test_tensor_sample_verdicts_follow_the_golden(samples, run_replay):
    d = samples.tensor / "step0" / "rank0"
    by_name, records = run_replay(samples.tensor)
    assert set(NPU_ENTRIES) | {"Tensor.t.0.forward"} == set(by_name)
    for entry, n_out in NPU_ENTRIES.items():
        assert by_name[entry]["verdict"] == _expected(d, entry, n_out), entry
        assert by_name[entry]["status"] in ("pass", "fail")
    t = by_name["Tensor.t.0.forward"]
    assert t["verdict"] == "not-replayable" and t["reason"] == "not a quant op" and t["status"] == "unsupported"
    # dst_type recorded as {} is inferred, and the inference is printed in the record
    assert by_name["NPU.npu_dynamic_quant.1.forward"]["inferred"] == [
        "inferred: dst_type='int8' from output dtype int8 (msprobe recorded dst_type as {})"]
    # the records are conformance records: what `w8a8 compare` reads
    for r in records:
        assert {"op", "backend", "case_id", "status", "schema"} <= set(r)


def test_constructed_sample_scales_come_from_the_basic_kernel_formula(samples, run_replay):
    """The finding the kernel-variant work makes on the bundled tensor sample.

    Its stand-ins called the golden of their day, which wrote every dynamic_quant scale as
    1 / fp32(127 / amax) (the basic kernel's formula). The A3 host tiling runs the double-buffer kernel
    (tiling key 2) for these small bf16 inputs (4 and 16 rows, H = 16 and 32), which writes
    amax * fp32(1/127). Derived here by hand from the dumped inputs, without the golden: the dumped scales
    are the basic kernel's, some differ from the selected kernel's, and replay says so with the right
    stage and cause. Every other call of the sample agrees bit for bit."""
    d = samples.tensor / "step0" / "rank0"
    by_name, _ = run_replay(samples.tensor)
    one_127 = np.float32(1) / np.float32(127)
    for entry in ("NPU.npu_dynamic_quant.0.forward", "NPU.npu_dynamic_quant.1.forward"):
        x = _load(d, f"{entry}.input.0").astype(np.float32)
        amax = np.abs(x.reshape(-1, x.shape[-1])).max(axis=1)
        dumped = _load(d, f"{entry}.output.1").reshape(-1)
        basic = np.float32(1) / (np.float32(127) / amax)
        selected = amax * one_127
        assert dumped.tobytes() == basic.tobytes(), entry
        assert (selected != basic).any(), entry
        assert w8a8.variants.select("dynamic_quant", _load(d, f"{entry}.input.0")).label == \
            "dynamic_quant/double-buffer[2]"
        r = by_name[entry]
        assert r["verdict"] == "disagree" and r["first_mismatch"]["output"] == "scale"
        at = r["attribution"]
        assert at["first_stage"] == "scale" and at["reproduced"] and at["numerics_change"] == {"variants": "fixed"}
        assert "dynamic_quant/double-buffer[2]" in at["cause"]
    others = set(NPU_ENTRIES) - {"NPU.npu_dynamic_quant.0.forward", "NPU.npu_dynamic_quant.1.forward"}
    assert {by_name[n]["verdict"] for n in others} == {"agree-bitwise"}


def test_deleted_pt_file_gives_missing_data(samples, copy_sample, run_replay):
    dump = copy_sample(samples.tensor)
    (dump / "step0/rank0/dump_tensor_data/NPU.npu_quant_matmul.0.forward.input.2.pt").unlink()
    by_name, _ = run_replay(dump)
    r = by_name["NPU.npu_quant_matmul.0.forward"]
    assert r["verdict"] == "missing-data" and r["status"] == "error"
    assert any("input_args.2" in m and "file absent" in m for m in r["missing"])
    assert by_name["NPU.npu_swiglu.0.forward"]["verdict"] != "missing-data"      # the run went on


def _rewrite_member(path, new_bytes: bytes) -> None:
    """Replace the storage of a .pt file as if the device had produced these bytes (zip CRC updated)."""
    with zipfile.ZipFile(path) as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        for info, data in members:
            z.writestr(info, new_bytes if info.filename.endswith("/data/0") else data)


def test_one_flipped_int8_code_gives_disagree_with_its_index(samples, copy_sample, run_replay):
    dump = copy_sample(samples.tensor)
    f = dump / "step0/rank0/dump_tensor_data/NPU.npu_dynamic_quant.0.forward.output.0.pt"
    y = read_pt(f).array.copy()
    # row 2, column 5: a code strictly inside (-127, 127), so the file's Max/Min stay what msprobe wrote
    assert -126 <= y[2, 5] <= 126
    y[2, 5] += 1
    _rewrite_member(f, y.tobytes())
    by_name, _ = run_replay(dump)
    r = by_name["NPU.npu_dynamic_quant.0.forward"]
    assert r["verdict"] == "disagree"
    assert r["first_mismatch"] == {"output": "y", "index": [2, 5]}
    assert r["outputs"]["y"]["mismatches"] == 1 and r["outputs"]["y"]["max_code_diff"] == 1
    assert r["msprobe"]["verdict"] == "pass" and r["stricter"]          # msprobe passes any +-1 code
    assert "attribution" in r and r["case"].endswith(".npz")


def test_md5_sample_chained_with_the_tensor_samples_inputs_is_crc_match(samples, run_replay):
    by_name, _ = run_replay(samples.md5, chain=True, inputs=[samples.tensor])
    md5 = json.loads((samples.md5 / "step0/rank0/dump.json").read_text())["data"]
    d = samples.tensor / "step0" / "rank0"
    for entry, n_out in NPU_ENTRIES.items():
        golden = _hand_golden(d, entry)
        outs = md5[entry]["output"]
        outs = outs[0] if isinstance(outs[0], list) else outs
        want = "crc-match" if all(crc32_of(np.asarray(g)) == o["md5"] for g, o in zip(golden, outs)) else "crc-mismatch"
        assert by_name[entry]["verdict"] == want, entry
    assert by_name["NPU.npu_quant_matmul.0.forward"]["verdict"] == "crc-match"
    # its x1 came from the golden's dynamic_quant (a chain link), its x2 through --inputs (after Tensor.t)
    src = by_name["NPU.npu_quant_matmul.0.forward"]["chain"]["inputs"]
    assert src["input_args.0"].startswith("chain: golden output y of NPU.npu_dynamic_quant.0.forward")
    assert src["input_args.1"].startswith("--inputs")


def test_md5_sample_alone_checks_the_statistics_invariants(samples, run_replay):
    """The statistics-only sample was written around a golden that knew one dynamic_quant kernel. Its
    4 x 16 bf16 input selects the double-buffer kernel (key 2) on A3, which writes amax * fp32(1/127):
    the dumped scale Max disagrees with it by one fp32 ULP — found from the statistics alone."""
    by_name, _ = run_replay(samples.md5)
    dq = by_name["NPU.npu_dynamic_quant.0.forward"]
    assert dq["verdict"] == "stats-inconsistent"
    checks = {c["check"]: c for c in dq["invariants"]}
    scale = checks["scale Max = golden scale of amax = max(|x.Max|, |x.Min|)"]
    # x.Max = 3.40625 is the row amax. Basic kernel: 1 / fp32(127 / 3.40625) = 0.026820864528417587 (the
    # dumped Max); double-buffer kernel: 3.40625 * fp32(1/127) = 0.026820866391062737, one ULP above
    assert not scale["ok"]
    assert "device 0.026820864528417587" in scale["detail"] and "golden 0.026820866391062737" in scale["detail"]
    assert checks["|y| <= 127"]["ok"]
    assert by_name["NPU.npu_swiglu.0.forward"]["verdict"] == "missing-data"   # nothing to check without inputs


def test_md5_sample_is_consistent_under_the_fixed_kernel_record(samples, run_replay):
    """Under the record the sample's stand-ins computed (one kernel for every shape) the same invariant
    holds exactly: the finding above is the kernel variant and nothing else."""
    by_name, _ = run_replay(samples.md5, numerics=w8a8.ASCEND.replace(variants="fixed"))
    dq = by_name["NPU.npu_dynamic_quant.0.forward"]
    assert dq["verdict"] == "stats-consistent"
    scale = next(c for c in dq["invariants"] if c["check"].startswith("scale Max"))
    assert scale["ok"] and "golden 0.026820864528417587" in scale["detail"]


def test_real_msprobe_dump_is_read_and_nothing_is_replayable(samples, run_replay):
    by_name, records = run_replay(samples.mix)
    assert len(by_name) == 12
    assert all(r["verdict"] == "not-replayable" for r in by_name.values())
    assert by_name["NPU.npu_rms_norm.0.forward"]["reason"] == "not a quant op (no golden for torch_npu.npu_rms_norm)"
    assert by_name["NPU.npu_fusion_attention.0.backward"]["reason"].startswith("backward")
    assert by_name["NPU.npu_fusion_attention.0.forward"]["module"].endswith("core_attention_flash")
    assert not any(r.get("kind") == "replay-dump" for r in records)


def test_truncated_dump_json_is_reported_and_the_rest_judged(samples, copy_sample, run_replay):
    dump = copy_sample(samples.tensor)
    p = dump / "step0/rank0/dump.json"
    text = p.read_text()
    p.write_text(text[: text.index('"NPU.npu_dynamic_quant.1.forward"') + 50])
    by_name, records = run_replay(dump)
    (problem,) = [r for r in records if r["name"] == "dump.json"]
    assert problem["verdict"] == "missing-data" and "truncated" in problem["note"]
    assert by_name["NPU.npu_swiglu.0.forward"]["verdict"] == "agree-bitwise"
    assert "NPU.npu_dynamic_quant.1.forward" not in by_name


def test_op_that_raised_mid_step(samples, run_replay):
    by_name, records = run_replay(samples.raised)
    # msprobe recorded the raising npu_quant_matmul without output and the npu_swiglu after it not at all
    assert list(by_name) == ["NPU.npu_dynamic_quant.0.forward", "NPU.npu_quant_matmul.0.forward"]
    assert "raised" in by_name["NPU.npu_quant_matmul.0.forward"]["reason"]
    (step,) = [r for r in records if r.get("kind") == "replay-dump"]
    assert step["verdict"] == "missing-data" and "silently truncated" in step["note"]


def test_unknown_dtype_and_bad_json_values_never_crash(samples, copy_sample, run_replay):
    dump = copy_sample(samples.tensor)
    p = dump / "step0/rank0/dump.json"
    raw = json.loads(p.read_text())
    raw["data"]["NPU.npu_swiglu.0.forward"]["input_args"][0]["dtype"] = "torch.float4_e2m1fn_x2"
    raw["data"]["NPU.npu_dynamic_quant.0.forward"]["input_args"][0]["shape"] = "oops"
    raw["data"]["NPU.npu_not_an_op.0.forward"] = {"input_args": [], "input_kwargs": {}, "output": []}
    p.write_text(json.dumps(raw))
    by_name, _ = run_replay(dump)
    assert by_name["NPU.npu_swiglu.0.forward"]["verdict"] == "missing-data"
    assert by_name["NPU.npu_dynamic_quant.0.forward"]["verdict"] == "missing-data"
    assert by_name["NPU.npu_not_an_op.0.forward"]["verdict"] == "not-replayable"


def test_never_writes_inside_the_dump(samples, copy_sample, run_replay):
    dump = copy_sample(samples.tensor)
    before = sorted((p.relative_to(dump), p.stat().st_mtime_ns) for p in dump.rglob("*"))
    run_replay(dump, chain=True)
    assert sorted((p.relative_to(dump), p.stat().st_mtime_ns) for p in dump.rglob("*")) == before


def test_deterministic_results(samples, run_replay):
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("duration_s", "case", "repro", "repro_python")}  # noqa: E731
                        for r in rs]
    _, a = run_replay(samples.tensor, chain=True)
    _, b = run_replay(samples.tensor, chain=True)
    assert strip(a) == strip(b)


def test_no_torch_needed(samples, tmp_path):
    """The reader and the replay never import torch (checked in a fresh interpreter)."""
    import subprocess
    import sys

    code = ("import sys; from replay.runner import Options, replay_dump; from replay.engine import ResultsFile; "
            f"replay_dump({str(samples.tensor)!r}, Options(), ResultsFile({str(tmp_path / 'r.jsonl')!r})); "
            "print('torch' in sys.modules, 'torch_npu' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_legacy_npy_tensor_files(samples, copy_sample, run_replay):
    """``.npy`` tensor files (MindSpore / legacy dumps) are read with allow_pickle=False."""
    dump = copy_sample(samples.tensor)
    data = dump / "step0/rank0/dump_tensor_data"
    p = dump / "step0/rank0/dump.json"
    raw = json.loads(p.read_text())
    rec = raw["data"]["NPU.npu_swiglu.0.forward"]["input_args"][0]
    # legacy ATT: bf16 saved as fp32 (exact), named .npy
    np.save(data / "swiglu_in.npy", read_pt(data / rec["data_name"]).array.astype(np.float32))
    rec["data_name"] = "swiglu_in.npy"
    p.write_text(json.dumps(raw))
    by_name, _ = run_replay(dump)
    assert by_name["NPU.npu_swiglu.0.forward"]["verdict"] == "agree-bitwise"
    shutil.rmtree(dump)


def test_statistics_of_outputs_against_the_golden(samples, copy_sample, run_replay):
    """Inputs saved, outputs only as statistics (a statistics task with tensor_list on the inputs):
    Max/Min are compared exactly, Mean/Norm within their bound; one altered Max is caught."""
    dump = copy_sample(samples.tensor)
    p = dump / "step0/rank0/dump.json"
    raw = json.loads(p.read_text())
    for name, body in raw["data"].items():
        outs = body["output"][0] if isinstance(body["output"][0], list) else body["output"]
        for o in outs:
            (dump / "step0/rank0/dump_tensor_data" / o.pop("data_name")).unlink()
    swiglu = raw["data"]["NPU.npu_swiglu.0.forward"]["output"][0]
    swiglu["Max"] = swiglu["Max"] * 1.01
    p.write_text(json.dumps(raw))
    by_name, _ = run_replay(dump)
    qmm = by_name["NPU.npu_quant_matmul.0.forward"]
    assert qmm["verdict"] == "stats-consistent"
    stats = {c["stat"]: c for c in qmm["outputs"]["y"]["statistics"]}
    assert stats["Max"]["rule"] == "exact" and stats["Max"]["ok"] and set(stats) == {"Max", "Min", "Mean", "Norm"}
    bad = by_name["NPU.npu_swiglu.0.forward"]
    assert bad["verdict"] == "stats-inconsistent" and bad["status"] == "fail"
    assert not next(c for c in bad["outputs"]["y"]["statistics"] if c["stat"] == "Max")["ok"]
    assert bad["msprobe"]["criterion"].startswith("statistics mode")
