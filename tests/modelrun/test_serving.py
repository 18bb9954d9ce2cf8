"""The serving executor's pieces against the golden's fused layer, on msModelSlim's tensors, and the
analytic bound of :mod:`modelrun.bounds` as a property (it holds wherever its assumptions do)."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import backends
import w8a8
from checkpoints import Checkpoint
from modelrun.bounds import dense_bound
from w8a8 import dtypes as _dt
from w8a8.offline import calibrate_activation_per_tensor, quantize_weight_per_channel, static_params
from w8a8.rounding import to_float


def test_shared_experts_run_apart_equal_the_fused_layer(data):
    """modelrun runs the shared experts as dense quantized Linears + the backend's swiglu + a bf16 add;
    w8a8_moe's own shared_expert path must give the same bits (so per-module records lose nothing)."""
    ck = Checkpoint.open(data.quant / "dsv3-mix")
    p = "model.layers.1.mlp"
    t = ck.tensor
    e = range(8)
    w13 = np.stack([np.concatenate([t(f"{p}.experts.{i}.gate_proj.weight"), t(f"{p}.experts.{i}.up_proj.weight")]) for i in e])
    s13 = np.stack([np.concatenate([t(f"{p}.experts.{i}.gate_proj.weight_scale"),
                                    t(f"{p}.experts.{i}.up_proj.weight_scale")]) for i in e])
    w2 = np.stack([t(f"{p}.experts.{i}.down_proj.weight") for i in e])
    s2 = np.stack([t(f"{p}.experts.{i}.down_proj.weight_scale") for i in e])
    rng = np.random.default_rng(0)
    x = to_float(rng.standard_normal((13, 64)).astype(np.float32), _dt.bfloat16)
    logits = rng.standard_normal((13, 8)).astype(np.float32)
    route = dict(router_logits=logits, top_k=2, scoring_func="sigmoid", correction_bias=np.zeros(8, np.float32),
                 k_group=1, group_count=2, group_select_mode=1, routed_scaling_factor=2.5)
    sh = {f"{k}_{s}": t(f"{p}.shared_experts.{k}_proj.{'weight' if s == 'weight' else 'weight_scale'}")
          for k in ("gate", "up", "down") for s in ("weight", "scale")}
    fused = w8a8.w8a8_moe(x, w13, s13, w2, s2, shared_expert=sh, **route)
    routed = w8a8.w8a8_moe(x, w13, s13, w2, s2, **route)
    g = w8a8.w8a8_dynamic_linear(x, sh["gate_weight"], sh["gate_scale"])
    u = w8a8.w8a8_dynamic_linear(x, sh["up_weight"], sh["up_scale"])
    shared = w8a8.w8a8_dynamic_linear(w8a8.swiglu(np.concatenate([g, u], axis=-1)), sh["down_weight"], sh["down_scale"])
    apart = to_float(routed.astype(np.float32) + shared.astype(np.float32), _dt.bfloat16)   # torch's bf16 add
    np.testing.assert_array_equal(apart.view(np.uint16), fused.view(np.uint16))


@settings(max_examples=25, deadline=None)
@given(n=st.sampled_from([1, 7, 17]), k=st.sampled_from([1, 7, 64]), m=st.sampled_from([1, 5]),
       dtype=st.sampled_from(["bfloat16", "float16"]), static=st.booleans(), seed=st.integers(0, 2**16))
def test_bound_holds_where_its_assumptions_do(n, k, m, dtype, static, seed):
    rng = np.random.default_rng(seed)
    dt = _dt.resolve(dtype)
    w = to_float((rng.standard_normal((n, k)) * np.exp(rng.normal(0, 0.5, (n, 1)))).astype(np.float32), dt)
    x = to_float((rng.standard_normal((m, k)) * np.exp(rng.normal(0, 0.5, (1, k)))).astype(np.float32), dt)
    b = rng.standard_normal(n).astype(np.float32)
    q, s, _ = quantize_weight_per_channel(w, model_dtype=dtype)
    y_f = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    if static:
        s_in, o_in = calibrate_activation_per_tensor(x, model_dtype=dtype)     # calibrated on x: no saturation
        # the export's own precondition: b / deq fits the model dtype (fp16: 65504), else static_params refuses
        assume(np.all(np.abs(b.astype(np.float64) / (s_in[0] * s.reshape(-1).astype(np.float64))) < 6e4))
        deq, qb = static_params(q, s, s_in, o_in, b, model_dtype=dtype, arithmetic="model")
        tensors = {".weight": q, ".input_scale": s_in, ".input_offset": o_in, ".deq_scale": deq}
        y = w8a8.w8a8_static_linear(x, q, input_scale=s_in, input_offset=o_in, deq_scale=deq, quant_bias=qb)
        bd = dense_bound("W8A8", x, w, b, tensors, dt)
        assert bd.saturated == 0
    else:
        if dtype == "float16":
            b = b.astype(np.float16).astype(np.float32)   # loaded in the model dtype
        y = w8a8.w8a8_dynamic_linear(x, q, s, bias=b)
        bd = dense_bound("W8A8_DYNAMIC", x, w, b, {".weight": q, ".weight_scale": s}, dt)
    err = np.abs(y.astype(np.float32).astype(np.float64) - y_f)
    assert (err <= bd.bound).all(), float((err / bd.bound).max())


def test_torch_cpu_is_available_for_the_backend_checks():
    ok, why = backends.get("torch-cpu").available()
    assert ok, why


def test_fp16_export_of_a_large_bias_overflows():
    """msModelSlim computes b / deq_scale in the model dtype: for fp16 a bias beyond 65504 * deq_scale
    overflows to Inf there (what msModelSlim then writes is not tested here); static_params refuses it."""
    import pytest

    q = np.array([[127]], np.int8)
    s = np.array([[2.0**-10]], np.float32)
    s_in, o_in = np.array([2.0**-9], np.float32), np.array([0.0], np.float32)
    b = np.array([1.0], np.float32)                   # b / deq = 2^19 > 65504
    with pytest.raises(ValueError, match="fits int32"):
        static_params(q, s, s_in, o_in, b, model_dtype="float16", arithmetic="model")
    _, qb = static_params(q, s, s_in, o_in, b, model_dtype="float16")   # fp32 arithmetic: fine
    assert qb.tolist() == [2**19]
