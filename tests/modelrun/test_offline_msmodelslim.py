"""The offline helpers against checkpoints msModelSlim 26.1.0 wrote itself (``data/``).

Every quantized Linear of every layer of the four checkpoints: the int8 weights and their scales
(W8A8_DYNAMIC), the int8 weights, ``deq_scale`` (fp32 for bf16, int64 bits for fp16) and
``quant_bias`` (static W8A8, the q/k/v float bias folded in), and ``input_scale`` / ``input_offset``
from the activation range msModelSlim's own observer held (``calib_ranges.json``, recorded by
``make_checkpoints.py``). ``model_dtype`` mode must reproduce 100 % of them; the float32 mode does
not (that is the difference the mode exists for).
"""

from __future__ import annotations

import numpy as np
import pytest

from checkpoints import Checkpoint
from checkpoints.safetensors_io import MappedFile
from w8a8 import dtypes as _dt
from w8a8.offline import calibrate_activation_per_tensor, quantize_weight_per_channel, static_params



from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
FLOAT, QUANT = DATA / "float", DATA / "msmodelslim"
CHECKPOINTS = {  # checkpoint -> (the float model it was made from, the model dtype)
    "qwen2-w8a8-dynamic": ("qwen2-bf16", "bfloat16"), "qwen2-w8a8-bf16": ("qwen2-bf16", "bfloat16"),
    "qwen2-w8a8-fp16": ("qwen2-fp16", "float16"), "dsv3-mix": ("dsv3-bf16", "bfloat16")}


def calib_ranges() -> dict:
    import json

    return json.loads((DATA / "calib_ranges.json").read_text())


def _float(name: str) -> dict[str, np.ndarray]:
    f = MappedFile(FLOAT / name / "model.safetensors")
    return {k: np.asarray(f.tensor(k)) for k in f.entries}


def _linears(ck: Checkpoint, scheme: str) -> list[str]:
    return sorted(k[: -len(".weight")] for k, t in ck.description.types.items()
                  if k.endswith(".weight") and t == scheme)


def _deq32(stored: np.ndarray) -> np.ndarray:
    return stored if stored.dtype == np.float32 else (stored.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_model_dtype_mode_reproduces_every_tensor(name):
    float_name, dtype = CHECKPOINTS[name]
    ck = Checkpoint.open(QUANT / name)
    assert _dt.name(ck.model_dtype) == dtype
    ref = _float(float_name)
    ranges = calib_ranges()[name]
    counted = {"weights": 0, "scales": 0, "deq_scale": 0, "quant_bias": 0, "input_scale": 0}
    for prefix in _linears(ck, "W8A8_DYNAMIC"):
        q, s, o = quantize_weight_per_channel(ref[prefix + ".weight"], model_dtype=dtype)
        np.testing.assert_array_equal(q, ck.tensor(prefix + ".weight"), err_msg=prefix)
        np.testing.assert_array_equal(s.view(np.uint32), ck.tensor(prefix + ".weight_scale").view(np.uint32))
        np.testing.assert_array_equal(o, ck.tensor(prefix + ".weight_offset"))
        counted["weights"] += 1
        counted["scales"] += 1
    for prefix in _linears(ck, "W8A8"):
        q, s, _ = quantize_weight_per_channel(ref[prefix + ".weight"], model_dtype=dtype)
        np.testing.assert_array_equal(q, ck.tensor(prefix + ".weight"), err_msg=prefix)
        lo, hi, observed_dtype = ranges[prefix]
        assert observed_dtype == f"torch.{dtype}"
        s_in, o_in = calibrate_activation_per_tensor(np.array([lo, hi], np.float32), model_dtype=dtype)
        assert s_in.view(np.uint32)[0] == ck.tensor(prefix + ".input_scale").view(np.uint32)[0], prefix
        assert o_in[0] == ck.tensor(prefix + ".input_offset")[0], prefix
        stored_s = np.array(ck.tensor(prefix + ".input_scale"))
        stored_o = np.array(ck.tensor(prefix + ".input_offset"))
        bias = ref.get(prefix + ".bias")
        deq, qb = static_params(q, s, stored_s, stored_o, bias, model_dtype=dtype, arithmetic="model")
        stored_deq = np.asarray(ck.tensor(prefix + ".deq_scale"))
        assert deq.dtype == stored_deq.dtype      # fp32 for bf16, int64 (fp32 bits) for fp16
        np.testing.assert_array_equal(deq, stored_deq, err_msg=prefix)
        np.testing.assert_array_equal(qb, ck.tensor(prefix + ".quant_bias"), err_msg=prefix)
        if bias is not None:   # the saver also keeps the float bias, as fp32
            np.testing.assert_array_equal(ck.tensor(prefix + ".bias"), bias.astype(np.float32))
        for key in ("weights", "deq_scale", "quant_bias", "input_scale"):
            counted[key] += 1
    # every layer, not only the first: Qwen2 has 7 Linears x 2 layers, the DeepSeek mix 4 static
    # attention Linears x 2 layers and 3 dense + 8 x 3 expert + 3 shared W8A8_DYNAMIC ones
    expected = {"qwen2-w8a8-dynamic": 14, "qwen2-w8a8-bf16": 14, "qwen2-w8a8-fp16": 14, "dsv3-mix": 38}[name]
    assert counted["weights"] == expected


@pytest.mark.parametrize("name", ["qwen2-w8a8-bf16", "qwen2-w8a8-fp16"])
def test_float32_mode_is_not_msmodelslim_for_16_bit_models(name):
    """The fp32 arithmetic (the default) differs from the checkpoint somewhere: ±1 codes where the
    model-dtype quotient rounds across a .5, and quant_bias entries whose b / deq moved."""
    float_name, dtype = CHECKPOINTS[name]
    ck = Checkpoint.open(QUANT / name)
    ref = _float(float_name)
    code_diff = bias_diff = total = 0
    for prefix in _linears(ck, "W8A8"):
        q32, s32, _ = quantize_weight_per_channel(ref[prefix + ".weight"])
        stored = np.asarray(ck.tensor(prefix + ".weight"))
        code_diff += int(np.count_nonzero(q32 != stored))
        assert np.abs(q32.astype(int) - stored).max() <= 1
        total += stored.size
        _, qb32 = static_params(stored, s32, np.array(ck.tensor(prefix + ".input_scale")),
                                np.array(ck.tensor(prefix + ".input_offset")), ref.get(prefix + ".bias"),
                                model_dtype=dtype)
        bias_diff += int(np.count_nonzero(qb32 != ck.tensor(prefix + ".quant_bias")))
    assert code_diff > 0 and bias_diff > 0, (code_diff, bias_diff, total)


def test_issue_calibration_formula_is_not_the_source_one():
    """The issue quoted ``scale = dt(dt(hi - lo) / 255)``; msModelSlim computes ``dt(hi/255) - dt(lo/255)``
    (``calculate_int_qparam``). On these checkpoints the quoted one misses some input scales."""
    ranges = calib_ranges()
    misses = 0
    for name in ("qwen2-w8a8-bf16", "qwen2-w8a8-fp16", "dsv3-mix"):
        ck = Checkpoint.open(QUANT / name)
        dt = ck.model_dtype
        for prefix, (lo, hi, _) in ranges[name].items():
            lo_t, hi_t = np.array(min(lo, 0.0), dt), np.array(max(hi, 0.0), dt)
            quoted = np.float32((hi_t.astype(np.float32) - lo_t.astype(np.float32)).astype(dt).astype(np.float32)
                                / np.float32(255)).astype(dt).astype(np.float32)
            misses += int(quoted != ck.tensor(prefix + ".input_scale")[0])
    assert misses > 0
