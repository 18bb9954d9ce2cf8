"""dump.json / stack.json / construct.json and tensor records, read as msprobe writes them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from replay.dump import (DtypeValue, EntryName, MissingTensor, TensorLoader, TensorRecord, Unknown, decode, discover,
                         load_dump, load_json)


def test_real_msprobe_statistics_mix_sample(samples):
    (where,) = discover(samples.mix)
    dump = load_dump(where)
    assert (dump.task, dump.level, dump.framework) == ("statistics", "mix", "pytorch")
    assert len(dump.entries) == 12 and dump.truncated is None and not dump.problems
    names = [e.name.full for e in dump.entries]
    assert names[0] == "Tensor.__add__.0.forward" and names[-1] == "NPU.npu_fusion_attention.0.backward"
    fa = next(e for e in dump.entries if e.name.full == "NPU.npu_fusion_attention.0.forward")
    # construct.json: the flash-attention module, then up the tree to the transformer
    assert fa.module == "module.module.language_model.encoder.layers.0.self_attention.core_attention_flash"
    assert fa.parents[0].endswith("FlashSelfAttention.forward.0")
    rms = next(e for e in dump.entries if e.name.api == "npu_rms_norm")
    assert rms.parents == ["Module.module.module.language_model.encoder.layers.0.input_norm.RMSNorm.forward.0",
                           "Module.module.module.language_model.encoder.layers.0.ParallelTransformerLayer.forward.0",
                           "Module.module.module.language_model.encoder.ParallelTransformer.forward.0"]
    # every tensor record decodes; int64 with Mean/Norm (older msprobe), bool, bf16
    dtypes = {r.torch_dtype for e in dump.entries for r in e.tensors()}
    assert {"torch.bfloat16", "torch.float32", "torch.int64", "torch.bool"} <= dtypes
    assert dump.last_entry_without_output() is None


def test_entry_names():
    n = EntryName.parse("NPU.npu_grouped_matmul.3.forward")
    assert (n.kind, n.prefix, n.api, n.counter, n.direction) == ("api", "NPU", "npu_grouped_matmul", 3, "forward")
    n = EntryName.parse("_C_ascend.npu_dequant_swiglu_quant.0.forward")
    assert (n.prefix, n.api) == ("_C_ascend", "npu_dequant_swiglu_quant")
    n = EntryName.parse("Tensor.__add__.1.backward")
    assert (n.api, n.counter, n.direction) == ("__add__", 1, "backward")
    n = EntryName.parse("Module.model.layers.0.mlp.experts.FusedMoE.forward.0")
    assert n.kind == "module" and n.module_path == "model.layers.0.mlp.experts" and n.counter == 0
    assert EntryName.parse("Module.model.layers.0.parameters_grad.3").kind == "parameters_grad"


def test_records_and_values():
    rec = decode({"type": "torch.Tensor", "dtype": "torch.float8_e4m3fn", "shape": [2, 3], "Max": None, "Min": None,
                  "Mean": None, "Norm": None, "requires_grad": False, "md5": "0000abcd", "data_name": "a.pt"}, "x")
    assert isinstance(rec, TensorRecord) and rec.shape == (2, 3) and rec.dtype.name == "float8_e4m3fn"
    assert rec.md5 == "0000abcd" and rec.data_name == "a.pt" and rec.stats_null
    assert decode({"type": "torch.Tensor", "dtype": "torch.float4_e2m1fn_x2", "shape": [4]}, "x").dtype is None
    assert isinstance(decode({}, "kw.dst_type"), Unknown)
    assert decode({"type": "torch.dtype", "value": "torch.bfloat16"}, "k") == DtypeValue("torch.bfloat16")
    assert decode({"type": "torch.Size", "value": [4, 16]}, "k") == (4, 16)
    assert decode({"type": "slice", "value": [0, 4, None]}, "k") == slice(0, 4, None)
    assert decode([{"type": "int", "value": 3}, None], "k") == [3, None]


def test_discover_every_entry_point(samples):
    base = samples.tensor
    for path in (base, base / "step0", base / "step0" / "rank0", base / "step0" / "rank0" / "dump.json"):
        (d,) = discover(path)
        assert (d.step, d.rank, d.label) == (0, 0, "step0/rank0")
    with pytest.raises(FileNotFoundError):
        discover(base / "nope")


def test_ranks_and_steps_sorted_numerically(tmp_path, samples):
    src = (samples.md5 / "step0/rank0/dump.json").read_text()
    for step, rank in ((10, 2), (2, 10), (2, 3), (10, 0)):
        d = tmp_path / f"step{step}" / f"rank{rank}"
        d.mkdir(parents=True)
        (d / "dump.json").write_text(src)
    assert [(d.step, d.rank) for d in discover(tmp_path)] == [(2, 3), (2, 10), (10, 0), (10, 2)]


def test_nan_and_infinity_tokens(tmp_path):
    p = tmp_path / "dump.json"
    p.write_text('{"task": "statistics", "data": {"NPU.npu_swiglu.0.forward": {"input_args": [{"type": '
                 '"torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": NaN, "Min": -Infinity, '
                 '"Mean": NaN, "Norm": Infinity}], "input_kwargs": {}, "output": []}}}')
    (d,) = discover(tmp_path)
    rec = next(load_dump(d).entries[0].tensors())
    assert np.isnan(rec.max) and rec.min == -np.inf and rec.norm == np.inf


def test_truncated_dump_json_is_read_up_to_the_last_complete_entry(tmp_path, samples, copy_sample):
    dump_dir = copy_sample(samples.tensor) / "step0" / "rank0"
    text = (dump_dir / "dump.json").read_text()
    cut = text.index('"NPU.npu_swiglu.0.forward"') + 200          # inside the swiglu entry
    (dump_dir / "dump.json").write_text(text[:cut])
    result = load_json(dump_dir / "dump.json", partial_key="data")
    assert result.truncated and "4 complete entries" in result.truncated
    dump = load_dump(discover(dump_dir)[0])
    assert [e.name.full for e in dump.entries][-1] == "NPU.npu_grouped_matmul.0.forward"
    assert dump.truncated


def test_stack_json_both_formats(tmp_path, samples):
    d = tmp_path / "step0" / "rank0"
    d.mkdir(parents=True)
    (d / "dump.json").write_text((samples.md5 / "step0/rank0/dump.json").read_text())
    (d / "stack.json").write_text(json.dumps({"NPU.npu_dynamic_quant.0.forward": ["File a.py, line 1"]}))
    dump = load_dump(discover(d)[0])
    assert dump.entries[0].stack == ["File a.py, line 1"]
    indexed = load_dump(discover(samples.md5)[0])
    assert "serve.py" in indexed.entries[0].stack[0]        # {"0": [[names], [lines]]}


def test_unreadable_side_files_are_problems_not_crashes(tmp_path, samples):
    d = tmp_path / "step0" / "rank0"
    d.mkdir(parents=True)
    (d / "dump.json").write_text((samples.md5 / "step0/rank0/dump.json").read_text())
    (d / "construct.json").write_text("{not json")
    dump = load_dump(discover(d)[0])
    assert len(dump.entries) == 8 and any("construct.json" in p for p in dump.problems)


def test_tensor_loader_reasons(samples, copy_sample):
    dump_dir = copy_sample(samples.tensor) / "step0" / "rank0"
    (dump_dir / "dump_tensor_data" / "NPU.npu_swiglu.0.forward.input.0.pt").unlink()
    dump = load_dump(discover(dump_dir)[0])
    loader = TensorLoader(dump.tensor_dir)
    swiglu = next(e for e in dump.entries if e.name.api == "npu_swiglu")
    got = loader.load(next(swiglu.inputs()))
    assert isinstance(got, MissingTensor) and "file absent" in got.reason
    dq = dump.entries[0]
    x = loader.load(dq.args[0])
    assert x.dtype.name == "bfloat16" and x.shape == (4, 16)
    nz = TensorRecord("input_args.1", "torch.Tensor", "torch.int8", np.dtype(np.int8), (16, 8), data_name="w.pt")
    assert "NZ" in loader.load(nz).reason
    stats_only = TensorRecord("x", "torch.Tensor", "torch.int8", np.dtype(np.int8), (4,), max=1, min=0)
    assert "statistics dump" in loader.load(stats_only).reason


def test_md5_field_is_checked_against_the_file(samples, copy_sample):
    dump_dir = copy_sample(samples.tensor) / "step0" / "rank0"
    raw = json.loads((dump_dir / "dump.json").read_text())
    rec = raw["data"]["NPU.npu_dynamic_quant.0.forward"]["input_args"][0]
    loader = TensorLoader(dump_dir / "dump_tensor_data")
    md5 = json.loads((samples.md5 / "step0/rank0/dump.json").read_text())
    good = md5["data"]["NPU.npu_dynamic_quant.0.forward"]["input_args"][0]["md5"]      # 9ff3f7b9
    assert not isinstance(loader.load(decode({**rec, "md5": good}, "input_args.0")), MissingTensor)
    bad = loader.load(decode({**rec, "md5": "00000000"}, "input_args.0"))
    assert isinstance(bad, MissingTensor) and "CRC-32" in bad.reason


def test_dtype_and_shape_must_match_the_record(samples):
    loader = TensorLoader(samples.tensor / "step0/rank0/dump_tensor_data")
    rec = TensorRecord("x", "torch.Tensor", "torch.int8", np.dtype(np.int8), (4, 16),
                       data_name="NPU.npu_dynamic_quant.0.forward.input.0.pt")
    assert "bfloat16" in loader.load(rec).reason
