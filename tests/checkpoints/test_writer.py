"""The synthetic checkpoint writer (checkpoints/writer.py).

The stored tensors are checked against msModelSlim's formulas re-derived here in float64 (msModelSlim
``save/ascendv1.py``, ``ir/api/impl/int_quantization.py``): symmetric per-channel scale ``max|w_row| / 127``, codes
within half a step of ``w / scale``; static ``deq_scale = input_scale * weight_scale``, ``quant_bias = round(b / deq -
input_offset * sum_k w_q)``, int64 deq_scale = the fp32 bits sign-extended.
"""

import json

import numpy as np
import pytest

from checkpoints import Checkpoint, CheckpointWriter, synthetic_checkpoint
from checkpoints.models import tiny_config
from checkpoints.reader import CONFIG, DESCRIPTION, INDEX, WEIGHTS


def weight(n=7, k=17, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, k)) * np.exp(rng.normal(0, 1, (n, 1)))).astype(np.float32)


def test_dynamic_per_channel(tmp_path):
    w = weight()
    cw = CheckpointWriter()
    cw.add_linear("lin", w, "W8A8_DYNAMIC", bias=np.arange(7, dtype=np.float32))
    ck = Checkpoint.open(cw.save(tmp_path / "c"))
    q, s, o = (np.asarray(ck.tensor(f"lin.{x}")) for x in ("weight", "weight_scale", "weight_offset"))
    assert (q.dtype, s.dtype, o.dtype) == (np.int8, np.float32, np.float32)
    assert (q.shape, s.shape, o.shape) == ((7, 17), (7, 1), (7, 1))
    expect_scale = np.abs(w.astype(np.float64)).max(axis=1, keepdims=True) / 127
    assert np.allclose(s, expect_scale, rtol=2e-7, atol=0)
    assert np.all(np.abs(q * s.astype(np.float64) - w) <= s.astype(np.float64) / 2 * (1 + 1e-6))
    assert not o.any()
    assert np.array_equal(np.abs(q).max(axis=1), np.full(7, 127))          # the row max maps to +-127
    assert ck.description.types["lin.bias"] == "FLOAT" and ck.description.types["lin.weight"] == "W8A8_DYNAMIC"


@pytest.mark.parametrize("model_dtype", ["bfloat16", "float16"])
def test_static(tmp_path, model_dtype):
    w = weight(5, 33, 1)
    calib = np.random.default_rng(2).normal(0.5, 2.0, (40, 33)).astype(np.float32)
    b = np.array([0.5, -1.0, 0.0, 2.0, 0.25], np.float32)
    cw = CheckpointWriter(model_dtype)
    cw.add_linear("lin", w, "W8A8", bias=b, calibration=calib, legacy_scales=True)
    ck = Checkpoint.open(cw.save(tmp_path / "c"))
    t = {x: np.asarray(ck.tensor(f"lin.{x}")) for x in
         ("weight", "quant_bias", "input_scale", "input_offset", "deq_scale", "weight_scale")}
    # the float bias is folded into quant_bias (below) and saved as .bias too
    assert np.array_equal(ck.tensor("lin.bias"), b) and ck.description.types["lin.bias"] == "FLOAT"
    lo, hi = min(calib.min(), 0.0), max(calib.max(), 0.0)
    s_x = (hi - lo) / 255
    assert np.isclose(t["input_scale"][0], s_x, rtol=1e-6)
    assert t["input_offset"][0] == np.round(-lo / t["input_scale"][0]) - 128
    deq32 = (t["input_scale"][0] * t["weight_scale"].reshape(-1)).astype(np.float32)
    if model_dtype == "bfloat16":
        assert t["deq_scale"].dtype == np.float32 and np.array_equal(t["deq_scale"], deq32)
    else:   # the fp32 bit pattern, sign-extended to int64 (msModelSlim deqscale2int64)
        assert t["deq_scale"].dtype == np.int64
        assert np.array_equal(t["deq_scale"], deq32.view(np.int32).astype(np.int64))
    qb = b / deq32.astype(np.float64) - t["input_offset"][0] * t["weight"].astype(np.float64).sum(axis=1)
    assert t["quant_bias"].dtype == np.int32
    assert np.all(np.abs(t["quant_bias"] - qb) <= 0.5 + 1e-3)


def test_float_and_mix(tmp_path):
    w = weight(4, 8, 3)
    cw = CheckpointWriter()
    cw.add_linear("f", w, "FLOAT")
    cw.add_linear("m", w, "W8A8_MIX")
    ck = Checkpoint.open(cw.save(tmp_path / "c"))
    f = np.asarray(ck.tensor("f.weight"))
    assert str(f.dtype) == "bfloat16"
    assert np.array_equal(f.astype(np.float32), w.astype("bfloat16").astype(np.float32))   # RNE from fp32
    assert {n.split(".", 1)[1] for n in ck.entries if n.startswith("m.")} == {
        "weight", "quant_bias", "input_scale", "input_offset", "deq_scale", "weight_scale", "weight_offset"}


def test_description_globals_and_config(tmp_path):
    cw = CheckpointWriter()
    cw.add_linear("a", weight(), "W8A8_DYNAMIC")
    cw.add_linear("b", weight(), "W8A8")
    cw.add_tensor("norm.weight", np.ones(17, np.float32))
    path = cw.save(tmp_path / "c", config={"torch_dtype": "bfloat16", "quantization_config": {"x": 1}})
    desc = json.loads((path / DESCRIPTION).read_text())
    # W8A8 ranks above W8A8_DYNAMIC in msModelSlim's priority list
    assert (desc["version"], desc["model_quant_type"], desc["group_size"]) == ("1.0.0", "W8A8", 0)
    assert desc["norm.weight"] == "FLOAT"
    assert "quantization_config" not in json.loads((path / CONFIG).read_text())   # the saver removes it


def test_sharded_with_index(tmp_path):
    cfg = tiny_config("v4", layers=1, experts=4, hidden=64, moe_inter=32, vocab=64)
    single = Checkpoint.open(synthetic_checkpoint(tmp_path / "one", cfg))
    sharded = Checkpoint.open(synthetic_checkpoint(tmp_path / "many", cfg, shard_bytes=20_000))
    assert len(single.files) == 1 and len(sharded.files) > 3
    index = json.loads((tmp_path / "many" / INDEX).read_text())
    assert set(index["weight_map"]) == set(single.entries)
    assert index["metadata"]["total_size"] == sum(e.nbytes for e in single.entries.values())
    n = len(sharded.files)
    assert sorted(sharded.files) == [f"quant_model_weights-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    for name in single.entries:      # same bytes either way
        a, b = np.asarray(single.tensor(name)), np.asarray(sharded.tensor(name))
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    for f in sharded.files.values():  # no shard over the limit unless one tensor alone is larger
        sizes = [e.nbytes for e in f.entries.values()]
        assert sum(sizes) <= 20_000 or len(sizes) == 1
    assert not (tmp_path / "many" / WEIGHTS).exists()


def test_atomic_save(tmp_path, monkeypatch):
    import checkpoints.writer as writer_mod

    cw = CheckpointWriter()
    cw.add_linear("a", weight(), "W8A8_DYNAMIC")
    cw.add_linear("b", weight(), "W8A8_DYNAMIC")
    target = cw.save(tmp_path / "c")
    with pytest.raises(FileExistsError):
        cw.save(target)

    calls = []
    real = writer_mod.write_file

    def failing(path, tensors, metadata=None):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        real(path, tensors, metadata)

    monkeypatch.setattr(writer_mod, "write_file", failing)
    with pytest.raises(OSError, match="disk full"):
        cw.save(tmp_path / "d", shard_bytes=100)               # dies after the first shard
    assert not (tmp_path / "d").exists()
    with pytest.raises(OSError, match="disk full"):
        calls.clear()
        cw.save(target, shard_bytes=100, overwrite=True)       # the old checkpoint survives a failed overwrite
    assert Checkpoint.open(target).entries.keys() == {"a.weight", "a.weight_scale", "a.weight_offset",
                                                      "b.weight", "b.weight_scale", "b.weight_offset"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no temporary directories left
    monkeypatch.setattr(writer_mod, "write_file", real)
    cw2 = CheckpointWriter()
    cw2.add_linear("z", weight(), "FLOAT")
    cw2.save(target, overwrite=True)
    assert set(Checkpoint.open(target).entries) == {"z.weight"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_bad_arguments():
    cw = CheckpointWriter()
    with pytest.raises(ValueError, match="'scheme'"):
        cw.add_linear("a", weight(), "W4A4_MXFP4")
    with pytest.raises(ValueError, match="'weight'"):
        cw.add_linear("a", np.ones(3, np.float32), "W8A8_DYNAMIC")
    with pytest.raises(ValueError, match="'bias'"):
        cw.add_linear("a", weight(), "W8A8_DYNAMIC", bias=np.ones(3, np.float32))
    cw.add_linear("a", weight(), "W8A8_DYNAMIC")
    with pytest.raises(ValueError, match="added twice"):
        cw.add_linear("a", weight(), "W8A8_DYNAMIC")
    with pytest.raises(ValueError, match="'model_dtype'"):
        CheckpointWriter("int8")
    with pytest.raises(ValueError, match="'shard_bytes'"):
        cw.save("/tmp/never-written-w8a8", shard_bytes=0)


def test_both_namings_written(tmp_path):
    v3 = Checkpoint.open(synthetic_checkpoint(tmp_path / "v3", tiny_config("v3", experts=2, hidden=64, moe_inter=32,
                                                                            vocab=64)))
    v4 = Checkpoint.open(synthetic_checkpoint(tmp_path / "v4", tiny_config("v4", experts=2, hidden=64, moe_inter=32,
                                                                            vocab=64)))
    assert "model.layers.1.mlp.experts.1.gate_proj.weight" in v3.entries
    assert v3.description.types["model.layers.1.mlp.experts.1.gate_proj.weight_scale"] == "W8A8_DYNAMIC"
    assert "layers.1.ffn.experts.1.w1.weight" in v4.entries
    assert v4.description.types["hc_head_fn"] == "FLOAT"
    assert v4.description.types["layers.1.ffn.experts.1.w2.weight_offset"] == "W8A8_DYNAMIC"
