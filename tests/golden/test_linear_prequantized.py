"""The pre-quantized (x_q, scale) input of the W8A8_DYNAMIC Linear (serving row D2).

Source: sgl-project/sglang python/sglang/srt/hardware_backend/npu/quantization/linear_method_npu.py@03108f8a,
NPUW8A8Int8DynamicLinearMethod.apply: a tuple input skips npu_dynamic_quant; output_dtype bf16.
"""

from __future__ import annotations

import numpy as np
import pytest

import w8a8
from w8a8.dtypes import bfloat16

N, K = 17, 33


@pytest.fixture(scope="module")
def lin():
    rng = np.random.default_rng(2)
    return dict(x=(rng.standard_normal((2, 7, K)) * 3).astype(bfloat16),
                w=rng.integers(-127, 128, (N, K)).astype(np.int8),
                s=(rng.random((N, 1)) * 0.01 + 1e-3).astype(np.float32),
                b=rng.standard_normal(N).astype(np.float32))


def test_tuple_of_dynamic_quant_equals_the_float_entry(lin):
    x_q, x_s = w8a8.dynamic_quant(lin["x"].reshape(-1, K))
    y = w8a8.w8a8_dynamic_linear_prequantized(x_q.reshape(2, 7, K), x_s.reshape(2, 7), lin["w"], lin["s"],
                                              bias=lin["b"])
    ref = w8a8.w8a8_dynamic_linear(lin["x"], lin["w"], lin["s"], bias=lin["b"])
    assert y.dtype == bfloat16 and y.shape == (2, 7, N)
    np.testing.assert_array_equal(y.view(np.uint16), ref.view(np.uint16))


def test_hand_case_uses_the_given_scale():
    # K 1, N 1: acc = 3 * 5 = 15; weight scale 0.5 (bf16-exact); given token scale 0.25 (no requant of x_q would
    # give it: dynamic_quant of any x with code 3 has scale |x|/127): y = bf16((15 * 0.5) * 0.25) = 1.875
    y = w8a8.w8a8_dynamic_linear_prequantized(np.array([[3]], np.int8), np.array([0.25], np.float32),
                                              np.array([[5]], np.int8), np.array([[0.5]], np.float32))
    assert y.view(np.uint16).tolist() == [[np.array(1.875, bfloat16).view(np.uint16)]]
    # fp32 weight scale 0.1 is rounded to bf16 0.10009765625 at load (as SGLang registers it):
    # 15 * 0.10009765625 * 0.25 = 0.37536621 -> bf16 0.375
    y = w8a8.w8a8_dynamic_linear_prequantized(np.array([[3]], np.int8), np.array([0.25], np.float32),
                                              np.array([[5]], np.int8), np.array([[0.1]], np.float32))
    assert float(y[0, 0]) == 0.375


@pytest.mark.parametrize("kw, exc, match", [
    (dict(serving="vllm-ascend"), ValueError, r"argument 'serving' must be an engine whose dense Linear takes"),
    (dict(x_q=np.zeros((3, K), np.float32)), TypeError, r"argument 'x_q' must be of dtype int8"),
    (dict(x_scale=np.ones(4, np.float32)), ValueError, r"argument 'x_scale' must be of shape x_q.shape\[:-1\] = \[3\]"),
    (dict(x_scale=np.ones(3, np.float16)), TypeError, r"argument 'x_scale' must be of dtype float32"),
    (dict(x_q=np.zeros((3, K + 1), np.int8)), ValueError, r"argument 'weight' must be of shape \[N, K\] with K = 34"),
    (dict(x_scale=np.array([1, np.nan, 1], np.float32)), ValueError, r"argument 'x_scale'"),
])
def test_bad_input_names_the_argument(lin, kw, exc, match):
    a = dict(x_q=np.zeros((3, K), np.int8), x_scale=np.ones(3, np.float32), weight=lin["w"], weight_scale=lin["s"])
    a.update(kw)
    with pytest.raises(exc, match=r"^w8a8_dynamic_linear_prequantized: " + match):
        w8a8.w8a8_dynamic_linear_prequantized(a.pop("x_q"), a.pop("x_scale"), a.pop("weight"), a.pop("weight_scale"),
                                              **a)
