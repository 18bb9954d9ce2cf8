"""The derived bound of w8a8_dynamic_linear holds and is tight.

The bound (conformance.bounds.dynamic_linear_bound, docs/tolerances.md) covers two correct
implementations that differ in tie rounding, the per-token scale formula, the fp32 epilogue order
and the final rounding. The "other implementation" here is the golden under a Numerics record that
changes all of those at once.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import w8a8
from conformance.bounds import BF16_SCALE_REL, FP19_TRUNC_REL, dynamic_linear_bound
from conformance.values import float_tensor
from w8a8.trans_quant_param import fp19_truncate

ROWS = 1000  # per-token quantization makes every row an independent case
VARIANT = w8a8.ASCEND.replace(round_mode="half_away", epilogue_order="token_then_scale", scale_out="amax_mul_rcp")


def _case(seed, k, n, dist, dtype):
    rng = np.random.default_rng(seed)
    x = float_tensor(rng, (ROWS, k), dtype, dist)
    wq, ws, _ = w8a8.quantize_weight_per_channel(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
    a = w8a8.w8a8_dynamic_linear(x, wq, ws).astype(np.float64)
    b = w8a8.w8a8_dynamic_linear(x, wq, ws, numerics=VARIANT).astype(np.float64)
    bound, tie_term, ulp_term = dynamic_linear_bound(x, wq, ws, terms=True)
    return np.abs(a - b), bound, tie_term > 2 * ulp_term


@settings(max_examples=100, deadline=None)  # 100 examples x 1000 rows = 10^5 cases
@given(seed=st.integers(0, 2**32 - 1), k=st.sampled_from([1, 7, 8, 17, 64, 130]), n=st.sampled_from([1, 5, 16]),
       dist=st.sampled_from(["ties", "gaussian", "outlier_channels", "heavy_tailed", "zero_rows", "single_huge"]),
       dtype=st.sampled_from(["bfloat16", "float16"]))
def test_bound_holds_on_1e5_random_rows(seed, k, n, dist, dtype):
    diff, bound, _ = _case(seed, k, n, dist, dtype)
    assert np.all(diff <= bound), f"max excess {np.max(diff - bound)}"


def test_bound_is_tight_within_2x_over_1e5_rows():
    worst, worst_tie, rows = 0.0, 0.0, 0
    for i in range(100):
        dist = ("ties", "gaussian", "outlier_channels", "heavy_tailed")[i % 4]
        diff, bound, tie_dominated = _case(i, (8, 16, 64, 128)[i % 4], 8, dist, "bfloat16")
        rows += diff.shape[0]
        ratio = diff / bound
        worst = max(worst, float(ratio.max()))
        if tie_dominated.any():  # elements whose bound is mostly the tie-propagation term
            worst_tie = max(worst_tie, float(ratio[tie_dominated].max()))
    assert rows == 100_000
    assert 0.5 <= worst <= 1.0, worst
    assert 0.5 <= worst_tie <= 1.0, worst_tie  # the tie term itself is attained, not only the ULP term


def test_scale_rounding_bounds_are_attained():
    # bf16 rounding of an fp32 scale: worst relative change just below 2^-8 (e.g. 1 + 2^-8 - 2^-23 -> 1)
    s = np.array([1 + 2**-8 - 2**-23, 1 + 2**-8 + 2**-23], np.float32)
    rel = np.abs(s.astype(w8a8.bfloat16).astype(np.float64) - s) / s
    assert rel.max() <= BF16_SCALE_REL and rel.max() > 0.99 * BF16_SCALE_REL / (1 + 2**-8)
    # FP19 truncation: 0x3F801FFF loses its 13 low mantissa bits, just under 2^-10 relative
    t = np.array([0x3F801FFF], np.uint32).view(np.float32)
    rel = (t - fp19_truncate(t)) / t
    assert rel[0] < FP19_TRUNC_REL and rel[0] > 0.99 * FP19_TRUNC_REL
