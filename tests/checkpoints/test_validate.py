"""Bad checkpoints get clear errors (reader.py, validate.py), in both naming schemes.

Each test breaks one thing in an otherwise valid synthetic checkpoint and checks the finding's code,
severity and that the message names the tensor and what was expected.
"""

import json

import ml_dtypes
import numpy as np
import pytest

from checkpoints import Checkpoint, CheckpointError, analyze
from checkpoints.reader import DESCRIPTION, INDEX


def findings(path, **kw):
    return analyze(path, **kw).findings


def by_code(found, code):
    return [f for f in found if f.code == code]


def test_valid_checkpoints_have_no_errors(kit, naming):
    found = findings(kit.make(naming, overrides=kit.NAMES[naming]["static_overrides"]))
    assert not found.errors, [str(f) for f in found.errors]


def test_description_missing(kit, naming):
    path = kit.make(naming)
    (path / DESCRIPTION).unlink()
    with pytest.raises(CheckpointError, match="quant_model_description.json is missing"):
        Checkpoint.open(path)


@pytest.mark.parametrize("content,needle", [("{not json", "not readable JSON"), ("[1, 2]", "must be a JSON object")])
def test_description_unreadable(kit, content, needle):
    path = kit.make("v4")
    (path / DESCRIPTION).write_text(content)
    with pytest.raises(CheckpointError, match=needle):
        Checkpoint.open(path)


def test_not_a_directory(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        Checkpoint.open(tmp_path / "nothing")


def test_no_weights(kit):
    path = kit.make("v3")
    (path / "quant_model_weights.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        Checkpoint.open(path)


def test_description_entry_not_a_string(kit, naming):
    n = kit.NAMES[naming]
    path = kit.make(naming)
    desc = json.loads((path / DESCRIPTION).read_text())
    desc[n["dyn"] + ".weight"] = ["W8A8_DYNAMIC"]
    (path / DESCRIPTION).write_text(json.dumps(desc))
    err = by_code(findings(path), "bad-description-entry")
    assert len(err) == 1 and err[0].where == n["dyn"] + ".weight" and "quant-type string" in err[0].message


def test_tensor_in_description_but_not_in_weights(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        del w.tensors[n["dyn"] + ".weight_offset"]          # the description entry stays

    found = findings(kit.make(naming, mutate))
    err = by_code(found, "missing-in-weights")
    assert [f.where for f in err] == [n["dyn"] + ".weight_offset"]
    assert "W8A8_DYNAMIC" in err[0].message
    assert by_code(found, "missing-tensor")        # and the Linear lacks a required tensor


def test_tensor_in_weights_but_not_in_description(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        del w.types[n["router"] + ".weight"]

    err = by_code(findings(kit.make(naming, mutate)), "missing-in-description")
    assert [f.where for f in err] == [n["router"] + ".weight"]


def test_weight_of_wrong_dtype(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):   # an int8 weight stored as bf16: the loader's int8 parameter cannot take it
        w.tensors[n["dyn"] + ".weight"] = w.tensors[n["dyn"] + ".weight"].astype(ml_dtypes.bfloat16)

    err = by_code(findings(kit.make(naming, mutate)), "dtype")
    assert [(f.severity, f.where) for f in err] == [("error", n["dyn"] + ".weight")]
    assert "must be int8" in err[0].message and "got bfloat16" in err[0].message


def test_scale_of_convertible_dtype_is_a_warning(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        w.tensors[n["dyn"] + ".weight_scale"] = w.tensors[n["dyn"] + ".weight_scale"].astype(ml_dtypes.bfloat16)

    found = findings(kit.make(naming, mutate))
    warn = by_code(found, "dtype")
    assert [(f.severity, f.where) for f in warn] == [("warning", n["dyn"] + ".weight_scale")]
    assert not found.errors


def test_scale_of_wrong_shape(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):   # [N] where the loader registers [N, 1]
        w.tensors[n["dyn"] + ".weight_scale"] = w.tensors[n["dyn"] + ".weight_scale"].reshape(-1)

    err = by_code(findings(kit.make(naming, mutate)), "shape")
    rows = kit.base_writer(naming).tensors[n["dyn"] + ".weight"].shape[0]
    assert len(err) == 1 and f"shape must be [{rows}, 1]" in err[0].message


def test_unexpected_tensor(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        w._put(n["dyn"] + ".deq_scale", np.ones(4, np.float32), "W8A8_DYNAMIC")

    warn = by_code(findings(kit.make(naming, mutate)), "unexpected-tensor")
    assert [f.where for f in warn] == [n["dyn"] + ".deq_scale"]


def test_tag_disagreeing_with_weight(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        w.types[n["dyn"] + ".weight_offset"] = "W8A8"

    warn = by_code(findings(kit.make(naming, mutate)), "tag-mismatch")
    assert [f.where for f in warn] == [n["dyn"] + ".weight_offset"]


def test_nonzero_weight_offset(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        off = w.tensors[n["dyn"] + ".weight_offset"].copy()
        off[:3] = 1.0
        w.tensors[n["dyn"] + ".weight_offset"] = off

    warn = by_code(findings(kit.make(naming, mutate)), "nonzero-offset")
    assert len(warn) == 1 and warn[0].message.startswith("3 of")


# -- static W8A8 ----------------------------------------------------------------------------------

def _static(kit, naming, mutate=None, **kw):
    n = kit.NAMES[naming]
    return kit.make(naming, mutate, overrides=n["static_overrides"], **kw), n["static"]


def test_deq_scale_dtype_must_follow_the_model_dtype(kit, naming):
    # bf16 model: fp32 deq_scale. Declaring the model fp16 makes the same file wrong: the loader's
    # int64 parameter would truncate fp32 values.
    cfg = kit.small_config(naming, dtype="float16")
    path, static = _static(kit, naming, config=cfg)
    err = [f for f in by_code(findings(path), "dtype") if f.where == static + ".deq_scale"]
    assert len(err) == 1 and err[0].severity == "error" and "must be int64" in err[0].message


def test_int64_deq_scale_in_a_bf16_model(kit, naming):
    def mutate(w):
        w.tensors[static + ".deq_scale"] = w.tensors[static + ".deq_scale"].view(np.int32).astype(np.int64)

    static = kit.NAMES[naming]["static"]
    path, _ = _static(kit, naming, mutate)
    err = [f for f in by_code(findings(path), "dtype") if f.where == static + ".deq_scale"]
    assert len(err) == 1 and "must be float32" in err[0].message


def test_deq_scale_consistent_with_legacy_weight_scale(kit, naming):
    static = kit.NAMES[naming]["static"]

    def legacy(w):
        kit.requantize(w, static, "W8A8", legacy_scales=True)

    path, _ = _static(kit, naming, legacy)
    assert not findings(path).errors

    def broken(w):
        legacy(w)
        deq = w.tensors[static + ".deq_scale"].copy()
        deq[1] = np.nextafter(deq[1], np.float32(1))       # one ULP off input_scale * weight_scale
        w.tensors[static + ".deq_scale"] = deq

    path, _ = _static(kit, naming, broken)
    err = by_code(findings(path), "deq-mismatch")
    assert len(err) == 1 and err[0].message.startswith("1 of")


def test_folded_float_bias_is_information(kit, naming):
    static = kit.NAMES[naming]["static"]

    def with_bias(w):
        n = w.tensors[static + ".weight"].shape[0]
        kit.requantize(w, static, "W8A8", bias=np.linspace(-1, 1, n).astype(np.float32))

    path, _ = _static(kit, naming, with_bias)
    found = findings(path)
    info = by_code(found, "folded-bias")
    assert len(info) == 1 and info[0].severity == "info" and not found.errors


def test_input_offset_must_be_an_int8_integer(kit, naming):
    static = kit.NAMES[naming]["static"]

    def mutate(w):
        w.tensors[static + ".input_offset"] = np.array([2.5], np.float32)

    path, _ = _static(kit, naming, mutate)
    err = by_code(findings(path), "bad-input-offset")
    assert len(err) == 1 and "integer in [-128, 127]" in err[0].message


def test_input_scale_must_be_positive(kit, naming):
    static = kit.NAMES[naming]["static"]

    def mutate(w):
        w.tensors[static + ".input_scale"] = np.array([0.0], np.float32)

    path, _ = _static(kit, naming, mutate)
    assert by_code(findings(path), "bad-input-scale")


def test_int64_deq_scale_encodings(kit, naming):
    # fp16 model: msModelSlim writes the fp32 bits sign-extended to int64. The npu_trans_quant_param
    # encoding (flag bit 46) is accepted with a warning; anything else is an error.
    static = kit.NAMES[naming]["static"]
    path, _ = _static(kit, naming, dtype="float16")
    assert not findings(path).errors

    def flagged(w):
        w.tensors[static + ".deq_scale"] = w.tensors[static + ".deq_scale"] | np.int64(1 << 46)

    path, _ = _static(kit, naming, flagged, dtype="float16")
    assert [f.where for f in by_code(findings(path), "deq-trans-quant-param")] == [static + ".deq_scale"]

    def garbage(w):
        w.tensors[static + ".deq_scale"] = w.tensors[static + ".deq_scale"] | np.int64(1 << 50)

    path, _ = _static(kit, naming, garbage, dtype="float16")
    assert [f.where for f in by_code(findings(path), "deq-encoding")] == [static + ".deq_scale"]


# -- files ----------------------------------------------------------------------------------------

def test_index_naming_a_missing_shard(kit, naming):
    path = kit.make(naming, shard_bytes=40_000)
    shards = sorted(path.glob("quant_model_weights-*.safetensors"))
    assert len(shards) > 1
    shards[-1].unlink()
    with pytest.raises(CheckpointError, match="does not exist"):
        Checkpoint.open(path)


def test_index_disagreeing_with_shards(kit, naming):
    path = kit.make(naming, shard_bytes=40_000)
    index = json.loads((path / INDEX).read_text())
    name, shard = next(iter(index["weight_map"].items()))
    other = next(s for s in index["weight_map"].values() if s != shard)
    index["weight_map"][name] = other
    (path / INDEX).write_text(json.dumps(index))
    err = by_code(Checkpoint.open(path).findings, "index-mismatch")
    assert {f.where for f in err} == {name}        # listed in the wrong shard, and held by one it does not name


def test_model_quant_type_checked(kit, naming):
    path = kit.make(naming)
    desc = json.loads((path / DESCRIPTION).read_text())
    desc["model_quant_type"] = "W4A4_MXFP4"
    (path / DESCRIPTION).write_text(json.dumps(desc))
    warn = by_code(findings(path), "model-quant-type")
    assert len(warn) == 1 and "'W8A8" in warn[0].message


def test_missing_config_is_a_warning(kit, naming):
    path = kit.make(naming)
    (path / "config.json").unlink()
    found = findings(path)
    assert by_code(found, "no-config") and not found.errors


def test_raise_for_errors_lists_every_error(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        del w.types[n["router"] + ".weight"]
        kit.retag(w, n["dyn"], "W9A9")

    found = findings(kit.make(naming, mutate))
    with pytest.raises(CheckpointError) as err:
        found.raise_for_errors()
    assert len(err.value.issues) == len(found.errors) >= 2
    assert "W9A9" in str(err.value) and n["router"] + ".weight" in str(err.value)
