"""Dumped torch_npu calls -> golden calls, argument by argument (docs/replay.md)."""

from __future__ import annotations

from replay.dump import DtypeValue, Entry, EntryName, TensorRecord, Unknown, discover, load_dump
from replay.mapping import map_entry

import numpy as np


def _rec(where, dtype, shape, **kw):
    return TensorRecord(where, "torch.Tensor", f"torch.{dtype}", np.dtype(dtype) if dtype != "bfloat16" else
                        np.dtype(__import__("ml_dtypes").bfloat16), tuple(shape), **kw)


def _entry(name, args, kwargs, output):
    return Entry(0, EntryName.parse(name), args, kwargs, output)


def test_every_entry_of_the_tensor_sample(samples):
    dump = load_dump(discover(samples.tensor)[0])
    calls = {e.name.full: map_entry(e) for e in dump.entries}
    assert calls["Tensor.t.0.forward"].skip == "not a quant op"
    dq = calls["NPU.npu_dynamic_quant.1.forward"]
    assert dq.op == "dynamic_quant" and dq.kwargs["dst_type"] == "int8"
    assert dq.inferred == ["inferred: dst_type='int8' from output dtype int8 (msprobe recorded dst_type as {})"]
    qmm = calls["NPU.npu_quant_matmul.0.forward"]
    assert [a.where for a in qmm.args] == ["input_args.0", "input_args.1", "input_args.2"]
    assert qmm.kwargs["output_dtype"] == "bfloat16" and qmm.kwargs["pertoken_scale"].shape == (4,)
    assert qmm.inferred == []      # output_dtype was recorded (key named output_dtype)
    gmm = calls["NPU.npu_grouped_matmul.0.forward"]
    assert [a[0].where for a in gmm.args] == ["input_args.0.0", "input_args.1.0"]
    assert gmm.kwargs["scale"].where == "input_kwargs.scale.0"
    assert (gmm.kwargs["split_item"], gmm.kwargs["group_type"], gmm.kwargs["group_list_type"]) == (2, 0, 1)
    assert [o.where for o in gmm.outputs] == ["output.0.0"]
    assert calls["NPU.npu_grouped_matmul.1.forward"].kwargs["output_dtype"] == "int32"
    dsq = calls["NPU.npu_dequant_swiglu_quant.0.forward"]
    assert dsq.kwargs["activate_left"] is True and dsq.kwargs["quant_mode"] == 1
    assert all(c.replayable for n, c in calls.items() if n.startswith("NPU."))


def test_torch_npu_defaults_are_passed_not_the_goldens():
    # npu_grouped_matmul's split_item defaults to 0 in torch_npu, 3 in the golden
    x, w = _rec("input_args.0.0", "int8", (4, 16)), _rec("input_args.1.0", "int8", (2, 16, 8))
    e = _entry("NPU.npu_grouped_matmul.0.forward", [[x], [w]],
               {"group_list": _rec("input_kwargs.group_list", "int64", (2,)), "group_type": 0},
               [[_rec("output.0.0", "int32", (4, 8))]])
    c = map_entry(e)
    assert c.kwargs["split_item"] == 0 and c.kwargs["act_type"] == 0 and c.kwargs["group_list_type"] == 0
    assert c.kwargs["output_dtype"] == "int32" and "inferred: output_dtype='int32' from output dtype" in c.inferred


def test_not_replayable_reasons():
    x, w = _rec("a", "int8", (4, 16)), _rec("b", "int8", (2, 16, 8))
    out = [[_rec("o", "bfloat16", (4, 8))]]
    no_type = map_entry(_entry("NPU.npu_grouped_matmul.0.forward", [[x], [w]], {"group_list": [2, 2]}, out))
    assert "group_type" in no_type.not_replayable
    lists = map_entry(_entry("NPU.npu_grouped_matmul.0.forward", [[x, x], [w, w]], {"group_type": 0}, out))
    assert "list of 2 tensors" in lists.not_replayable
    anti = map_entry(_entry("NPU.npu_grouped_matmul.0.forward", [[x], [w]],
                            {"group_type": 0, "antiquant_scale": [_rec("s", "float16", (2, 8))]}, out))
    assert "antiquant_scale" in anti.not_replayable
    unknown = map_entry(_entry("NPU.npu_quant_matmul.0.forward", [x, _rec("w", "int8", (16, 8)),
                                                                  _rec("s", "float32", (8,))],
                               {"y_scale": _rec("y", "int64", (8,))}, [_rec("o", "int8", (4, 8))]))
    assert "y_scale" in unknown.not_replayable
    raised = map_entry(_entry("NPU.npu_swiglu.0.forward", [_rec("x", "float32", (2, 8))], {}, None))
    assert "raised" in raised.not_replayable
    mode = map_entry(_entry("NPU.npu_dynamic_quant.0.forward", [_rec("x", "float16", (2, 8))],
                            {"quant_mode": "pertensor"}, [_rec("y", "int8", (2, 8)), _rec("s", "float32", (2,))]))
    assert "pertoken" in mode.not_replayable
    assert map_entry(_entry("NPU.npu_rms_norm.0.forward", [], {}, [])).skip.startswith("not a quant op")
    assert map_entry(_entry("NPU.npu_format_cast.0.forward", [], {}, [])).skip.startswith("not observable")
    assert map_entry(_entry("NPU.npu_swiglu.0.backward", [], {}, [])).skip.startswith("backward")


def test_quantize_dtype_inferred_from_the_output():
    x = _rec("x", "float16", (4, 64))
    s = _rec("s", "float16", (64,))
    int4 = map_entry(_entry("NPU.npu_quantize.0.forward", [x, s, None, Unknown("input_args.3"), -1, False], {},
                            [_rec("y", "int32", (4, 8))]))
    assert int4.kwargs == {"dtype": "int4", "axis": -1, "div_mode": False}
    assert int4.inferred == ["inferred: dtype='int4' from output dtype int32"]
    int32 = map_entry(_entry("NPU.npu_quantize.0.forward", [x, s, None, Unknown("input_args.3"), -1, False], {},
                             [_rec("y", "int32", (4, 64))]))
    assert int32.kwargs["dtype"] == "int32"
    named = map_entry(_entry("NPU.npu_quantize.0.forward", [x, s, None], {"dtype": DtypeValue("torch.qint8")},
                             [_rec("y", "int8", (4, 64))]))
    assert named.kwargs["dtype"] == "int8" and named.inferred == []


def test_finalize_routing_k_inferred_without_scales():
    rows = _rec("r", "bfloat16", (12, 16))
    idx = _rec("i", "int32", (12,))
    c = map_entry(_entry("NPU.npu_moe_finalize_routing.0.forward", [rows, None, None, None, None, idx, None, 0], {},
                         [_rec("y", "bfloat16", (4, 16))]))
    assert c.kwargs == {"drop_pad_mode": 0, "k": 3} and c.args[4] is None
    assert "inferred: k=3" in c.inferred[0]


def test_init_routing_v2_ambiguous_quant_mode_default():
    c = map_entry(_entry("NPU.npu_moe_init_routing_v2.0.forward", [_rec("x", "bfloat16", (4, 16)),
                                                                   _rec("e", "int32", (4, 2))],
                         {"active_num": 8}, [_rec(f"o{i}", "int32", (8,)) for i in range(4)]))
    assert [label for label, _ in c.alternatives] == ["quant_mode=-1 (torch_npu 26.x default)",
                                                      "quant_mode=0 (torch_npu 7.x default)"]
    assert any("ambiguous default" in n for n in c.notes)


def test_c_ascend_prefix_is_replayed():
    c = map_entry(_entry("_C_ascend.npu_dequant_swiglu_quant.0.forward", [_rec("x", "int32", (4, 16))],
                         {"swiglu_mode": 1}, [_rec("y", "int8", (4, 8)), _rec("s", "float32", (4,))]))
    assert c.op == "dequant_swiglu_quant" and "swiglu_mode" in c.not_replayable


def test_the_op_map_is_the_goldens_mirrors():
    # replay's torch_npu -> golden map is read from @golden_op(mirrors=...), for the calls replay has a rule for
    from w8a8 import registry
    from replay.mapping import QUANT_OPS, RULES, golden_of

    assert set(QUANT_OPS) == set(RULES)
    for api, op in QUANT_OPS.items():
        assert registry.get(op).mirrors == f"torch_npu.{api}"
    assert golden_of("npu_quant_matmul") == "quant_matmul"     # not the int4 path that mirrors it too
    assert golden_of("npu_rms_norm") is None


def test_a_mirrored_op_without_a_replay_rule_is_not_replayable_naming_its_golden():
    from replay.mapping import QUANT_OPS
    from w8a8 import registry

    unruled = [op for op in registry.ops() if op.mirrors.startswith("torch_npu.")
               and op.mirrors.split(".", 1)[1] not in QUANT_OPS and op.name != "format_cast_nz"]
    assert unruled, "every mirrored op has a replay rule: pick another example"
    op = unruled[0]
    api = op.mirrors.split(".", 1)[1]
    call = map_entry(_entry(f"NPU.{api}.0.forward", [], {}, []))
    assert call.op == op.name and not call.replayable
    assert call.not_replayable == f"replay has no argument mapping for torch_npu.{api} (its golden is w8a8.{op.name})"
