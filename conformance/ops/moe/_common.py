"""What the MoE declarations share: routing shapes and expert ids, group lists, logits, random expert
weights in the checkpoint layout, the layer's strategy and builder, the fixtures of the bad calls, and
the bench helpers."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8

from ... import strategies as S
from ...values import float_tensor, rng_for

BF16 = np.dtype(w8a8.bfloat16)
F32 = np.float32
MOE_FIELDS = ("round_mode", "quant_codes", "scale_out", "transcendental", "routing_quant_round", "epilogue_order",
              "fp19_scale")


def bf16(values) -> np.ndarray:
    return np.asarray(values, F32).astype(BF16)


def i8(rng, *shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


@st.composite
def routing_shape(draw, max_tokens=24, max_experts=12):
    """Tokens, experts, top-k and a routing pattern (empty experts / all to one / top-k = E / random)."""
    e = draw(st.integers(2, max_experts))
    pattern = draw(st.sampled_from(("random", "random", "skewed", "one_expert", "topk_all")))
    k = e if pattern == "topk_all" else draw(st.integers(1, min(e, 6)))
    if pattern == "one_expert":
        k = 1
    return {"t": draw(S.size(max_tokens, big=())), "e": e, "k": k, "pattern": pattern}


def expert_ids(rng, t, e, k, pattern) -> np.ndarray:
    """int32 [t, k], distinct ids per token."""
    if pattern == "one_expert":
        return np.full((t, 1), rng.integers(e), np.int32)
    if pattern == "topk_all":
        return np.stack([rng.permutation(e) for _ in range(t)]).astype(np.int32) if t else np.zeros((0, e), np.int32)
    weights = np.ones(e) if pattern == "random" else np.exp(-np.arange(e, dtype=np.float64))  # skewed: empty tails
    out = np.empty((t, k), np.int32)
    for i in range(t):
        out[i] = rng.choice(e, size=k, replace=False, p=weights / weights.sum())
    return out


def topk(rng, t, e, k):
    """Distinct expert ids per token (int32 [t, k]) and fp32 weights in [0.05, 1)."""
    ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32) if t else np.zeros((0, k), np.int32)
    return ids, rng.uniform(0.05, 1.0, size=(t, k)).astype(F32)


def logits(p, dtype=None):
    x = float_tensor(rng_for(p["seed"]), (p["t"], p["e"]), dtype or p["dtype"], p["dist"])
    return np.clip(x.astype(np.float32), -60, 60).astype(x.dtype)


def counts(rng, m, e, partial, empty) -> np.ndarray:
    """Rows per group: ``m`` rows (or a random part of them) over ``e`` groups, one forced empty."""
    total = int(rng.integers(0, m + 1)) if partial else m
    cuts = np.sort(rng.integers(0, total + 1, size=e - 1)) if e > 1 else np.zeros(0, np.int64)
    c = np.diff(np.concatenate([[0], cuts, [total]])).astype(np.int64)
    if empty and e > 1:
        j = int(rng.integers(e))
        c[(j + 1) % e] += c[j]
        c[j] = 0
    return c


def group_list(c, list_type) -> np.ndarray:
    """The counts ``c`` as a group list of type 0 (cumulative ends), 1 (counts) or 2 ([id, count] pairs)."""
    if list_type == 0:
        return np.cumsum(c).astype(np.int64)
    if list_type == 1:
        return c.astype(np.int64)
    nz = np.flatnonzero(c)
    return np.stack([nz, c[nz]], axis=1).astype(np.int64) if nz.size else np.zeros((1, 2), np.int64)


def moe_layer(rng, e, h, i, scale=0.05):
    """Random checkpoint-layout experts (int8 per-channel): W13 [E, 2I, H], W2 [E, H, I] and their scales."""
    w13, s13, _ = w8a8.quantize_weight_per_channel(rng.standard_normal((e, 2 * i, h)).astype(F32) * F32(scale))
    w2, s2, _ = w8a8.quantize_weight_per_channel(rng.standard_normal((e, h, i)).astype(F32) * F32(scale))
    return w13, s13, w2, s2


def shared_expert(rng, h, i, scale=0.05):
    """A random shared expert (gate, up, down Linear weights and scales)."""
    out = {}
    for name, (n, k) in {"gate": (i, h), "up": (i, h), "down": (h, i)}.items():
        w, s, _ = w8a8.quantize_weight_per_channel(rng.standard_normal((n, k)).astype(F32) * F32(scale))
        out[f"{name}_weight"], out[f"{name}_scale"] = w, s
    return out


# ---------------------------------------------------------------------------------------------
# the W8A8 MoE layer (both entry points)

@st.composite
def moe_params(draw):
    r = draw(routing_shape(max_tokens=16, max_experts=8))
    return {**r, "h": draw(st.sampled_from((16, 32, 48, 64))), "i": draw(st.sampled_from((8, 16, 32))),
            "routing": draw(st.sampled_from(("ids", "softmax", "sqrtsoftplus"))),
            "limit": draw(st.sampled_from((None, 10.0, 0.5))), "shared": draw(st.booleans()),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


@st.composite
def moe_odd_params(draw):
    """Odd layer sizes (H = 1, 7, 33; I = 1, 9), a single expert, random top-k with empty experts, weight
    scales from 0.01 to 3 (activations large enough for the SwiGLU clamp and the requant to matter)."""
    e = draw(st.integers(1, 9))
    return {"t": draw(st.sampled_from((1, 2, 7, 17))), "e": e, "k": draw(st.integers(1, e)),
            "h": draw(st.sampled_from((1, 7, 16, 33))), "i": draw(st.sampled_from((1, 4, 9))),
            "shared": draw(st.booleans()), "limit": draw(st.sampled_from((None, 0.25, 7.0))),
            "scale": draw(st.sampled_from((0.01, 0.3, 3.0))), "seed": draw(S.seed())}


def _moe_kwargs(p, rng):
    t, e, k = p["t"], p["e"], p["k"]
    kw = {"swiglu_limit": p["limit"]}
    if p["routing"] == "ids":
        ids = expert_ids(rng, t, e, k, p["pattern"])
        kw.update(topk_ids=ids, topk_weights=rng.uniform(0.05, 1.0, size=ids.shape).astype(np.float32))
    else:
        e_eff = max(e, 3) if p["routing"] == "sqrtsoftplus" else e
        kw.update(router_logits=float_tensor(rng, (t, e), "float32", "gaussian"), top_k=min(k, e_eff),
                  scoring_func=p["routing"])
        if p["routing"] == "sqrtsoftplus":
            kw.update(correction_bias=(rng.standard_normal(e) * 0.1).astype(np.float32), routed_scaling_factor=1.5)
    if p["shared"]:
        kw["shared_expert"] = shared_expert(rng, p["h"], p["i"])
    return kw


def _moe_odd_build(p):
    rng = rng_for(p["seed"])
    t, e, h, i, scale = p["t"], p["e"], p["h"], p["i"], p["scale"]
    w = moe_layer(rng, e, h, i, scale=scale)
    hidden = (rng.standard_normal((t, h)) * scale * 10).astype(F32).astype(BF16)
    ids, wts = topk(rng, t, e, p["k"])
    kw = {"topk_ids": ids, "topk_weights": wts, "swiglu_limit": p["limit"]}
    if p["shared"]:
        kw["shared_expert"] = shared_expert(rng, h, i + 3)
    return (hidden, *w), kw


def moe_build(p):
    """The layer's inputs: ``(hidden, w13, w13_scale, w2, w2_scale), kwargs``."""
    if "scale" in p:
        return _moe_odd_build(p)
    rng = rng_for(p["seed"])
    e = p["e"] if p["routing"] != "sqrtsoftplus" else max(p["e"], 3)
    p = {**p, "e": e}
    hidden = float_tensor(rng, (p["t"], p["h"]), "bfloat16", p["dist"])
    w13, s13, w2, s2 = moe_layer(rng, e, p["h"], p["i"])
    return (hidden, w13, s13, w2, s2), _moe_kwargs(p, rng)


def prequantized(args, kwargs):
    """The layer's inputs for ``w8a8_moe_prequantized``: hidden arrives as its INT8 dispatch (int8 tokens
    + per-token scale); the shared expert, if any, still needs the bf16 hidden states."""
    x_q, x_s = w8a8.dispatch_quant(args[0])
    if kwargs.get("shared_expert") is not None:
        kwargs = {**kwargs, "shared_input": args[0]}
    return (x_q, x_s, *args[1:]), kwargs


# ---------------------------------------------------------------------------------------------
# named layer inputs shared by both entry points

# hidden rows [127, 0] and [0, 127]: dispatch scale 127/127 = 1.0, codes [127, 0] / [0, 127].
HAND_HIDDEN = bf16([[127, 0], [0, 127]])
HAND_IDS = np.array([[2, 0], [0, 2]], np.int32)            # expert 1 gets no token
HAND_WEIGHTS = np.array([[0.5, 0.25], [0.75, 0.25]], F32)  # exact in bf16
# W13 [E, 2I, H] with I = 1: row 0 gate, row 1 up. Expert 0: gate [1, 1], up [1, 1]; expert 2: gate [1, 1],
# up [1, -1]. Gate scale 1.0, up scale 2^-7 (bf16-exact).
HAND_W13 = np.array([[[1, 1], [1, 1]], [[7, 7], [7, 7]], [[1, 1], [1, -1]]], np.int8)
HAND_S13 = np.array([[[1.0], [2.0 ** -7]]] * 3, F32)
HAND_W2 = np.array([[[1], [2]], [[5], [5]], [[-1], [1]]], np.int8)   # [E, H, I]
HAND_S2 = np.full((3, 2, 1), 2.0 ** -7, F32)
HAND_Y = bf16([[-0.24609375, 0.984375], [0.984375, 1.234375]])
HAND_WHY = (
    "2 tokens, 3 experts, top-2, expert 1 empty. Every (token, expert) pair: gate = 127 * 1.0 = 127, up = +-127 * "
    "2^-7 = +-0.9921875 (bf16-exact). silu(127) = 127 / (1 + exp(-127)) = 127 (exp(-127) is 0 in fp32), so o = "
    "+-126.0078125 (exact). Requant: s2 = 126.0078125 * fp32(1/127) = 0.9921875, code = rint(o / s2) = +-127. GMM2: "
    "127 * w2 * 2^-7 * 0.9921875 = 16129 * w2 / 16384, rounded to bf16: w2 = 1 -> 0.984375 (252/256); w2 = 2 -> "
    "1.96875. Expert 0 gives [0.984375, 1.96875] for both tokens; expert 2 gives [-0.984375, 0.984375] for token 0 "
    "and [0.984375, -0.984375] for token 1. Finalize, slot by slot in fp32: token 0 = 0.5 * e2 + 0.25 * e0 = "
    "[-0.24609375, 0.984375]; token 1 = 0.75 * e0 + 0.25 * e2 = [0.984375, 1.23046875], and 1.23046875 = 157.5 / 128 "
    "is a bf16 tie: to even -> 158 / 128 = 1.234375.")


def routing_pattern_inputs(pattern: str, shared: bool, limit):
    """17 tokens, 5 experts, H = 32, I = 16: every token to expert 3 (one group of 17 rows, four empty), top-k
    = E (every expert for every token), or random top-2 over experts 0-2 (3 and 4 empty)."""
    rng = np.random.default_rng(7)
    t, e, h, i = 17, 5, 32, 16
    w = moe_layer(rng, e, h, i)
    hidden = (rng.standard_normal((t, h)) * 2).astype(F32).astype(BF16)
    if pattern == "one_expert":
        ids, wts = np.full((t, 1), 3, np.int32), np.ones((t, 1), F32)
    elif pattern == "topk_is_e":
        ids, wts = topk(rng, t, e, e)
    else:
        ids, wts = topk(rng, t, e - 2, 2)
    kw = dict(topk_ids=ids, topk_weights=wts, swiglu_limit=limit)
    if shared:
        kw["shared_expert"] = shared_expert(rng, h, 24)
    return (hidden, *w), kw


ROUTERS = {"softmax": {}, "softmax_renormalize": {"renormalize": True}, "sigmoid": {"routed_scaling_factor": 2.5},
           "sqrtsoftplus_grouped": {"routed_scaling_factor": 1.5, "k_group": 2, "group_count": 4,
                                    "group_select_mode": 1}}


def router_inputs(name: str):
    """13 tokens, 8 experts, top-3 chosen by the layer's router (``scoring_func``), with a shared expert."""
    scoring = name.split("_")[0]
    rng = np.random.default_rng(11)
    t, e, h, i = 13, 8, 32, 16
    w = moe_layer(rng, e, h, i)
    hidden = rng.standard_normal((t, h)).astype(F32).astype(BF16)
    logits_ = rng.standard_normal((t, e)).astype(F32)
    kw = dict(ROUTERS[name])
    if scoring != "softmax":
        kw["correction_bias"] = (rng.standard_normal(e) * 0.1).astype(F32)
    se = shared_expert(rng, h, 8)
    return (hidden, *w), dict(router_logits=logits_, top_k=3, scoring_func=scoring, shared_expert=se) | kw


# ---------------------------------------------------------------------------------------------
# fixtures of the bad calls (drawn in this order from one generator, as the old torch-cpu test did)

_R = np.random.default_rng(1)
W4 = moe_layer(_R, 4, 16, 8)                 # 4 experts, H = 16, I = 8
HID = _R.standard_normal((3, 16)).astype(F32).astype(BF16)
IDS = np.array([[0, 1], [2, 3], [1, 2]], np.int32)
WTS = np.full((3, 2), 0.5, F32)
MOE_KW = dict(topk_ids=IDS, topk_weights=WTS)
SH = shared_expert(_R, 16, 8)
GMM_X, GMM_W = i8(_R, 6, 16), i8(_R, 3, 16, 8)
del _R


def with_(tensors, **changes):
    """``tensors`` with ``w<index>=value`` replaced (``with_(W4, w2=...)`` swaps the W2 weight)."""
    out = list(tensors)
    for index, value in changes.items():
        out[int(index[1:])] = value
    return tuple(out)


def _scale(value, e=4, rows=16, at=(1, 3, 0)):
    s = np.full((e, rows, 1), 0.01, F32)
    s[at] = value
    return s


def layer_error_inputs():
    """Layer inputs the golden refuses between or inside its stages, in the golden's order: argument
    errors the golden meets only in the ops it runs (after routing), data errors on intermediates (an
    Inf from GMM1's fp32 epilogue, the requant scale, GMM2's output, the bf16 routing weights), and
    which comes first when two are present. Each is ``name -> (args, kwargs)`` of ``w8a8_moe``."""
    w13, s13, w2, s2 = W4
    big = np.full((3, 16), 3e38, F32).astype(BF16)   # GMM1's fp32 epilogue overflows -> Inf in its bf16 output
    big_w = (np.full_like(w13, 127), np.ones((4, 16, 1), F32), w2, s2)
    sh = SH
    return {
        "gmm1_scale_nan": ((HID, w13, _scale(np.nan), w2, s2), MOE_KW),
        "dsq_limit": ((HID,) + W4, MOE_KW | {"swiglu_limit": -1.0}),
        "gmm2_scale_inf_in_bf16": ((HID, w13, s13, w2, _scale(3.4e38, rows=16)), MOE_KW),
        "finalize_k0": ((HID,) + W4, {"topk_ids": np.zeros((3, 0), np.int32), "topk_weights": np.zeros((3, 0), F32)}),
        "shared_gate_k": ((HID,) + W4, MOE_KW | {"shared_expert": sh | {"gate_weight": sh["gate_weight"][:, :8]}}),
        "shared_up_scale": ((HID,) + W4, MOE_KW | {"shared_expert": sh | {"up_scale": sh["up_scale"][:4]}}),
        "shared_gate_up_mismatch": ((HID,) + W4, MOE_KW | {"shared_expert": sh | {
            "up_weight": sh["up_weight"][:4], "up_scale": sh["up_scale"][:4]}}),
        "shared_down_k": ((HID,) + W4, MOE_KW | {"shared_expert": sh | {"down_weight": sh["down_weight"][:, :4]}}),
        "shared_down_scale_inf": ((HID,) + W4, MOE_KW | {"shared_expert": sh | {
            "down_scale": np.full_like(sh["down_scale"], 3.4e38)}}),
        "shared_down_n": ((HID,) + W4, MOE_KW | {"shared_expert": sh | {
            "down_weight": sh["down_weight"][:8], "down_scale": sh["down_scale"][:8]}}),
        "gmm1_inf": ((big,) + big_w, MOE_KW),
        "requant_scale_inf": ((np.full((3, 16), 1e30, F32).astype(BF16),) + W4, MOE_KW),
        "gmm2_out_inf": ((HID, w13, s13, w2, np.full((4, 16, 1), 3e38, F32)), MOE_KW),
        # only expert 2 / 3 overflows: the first bad element is inside its group (the index has an offset)
        "gmm2_out_inf_in_expert_2": ((HID, w13, s13, w2, _scale(3e38, at=(2, slice(None), 0))), MOE_KW),
        "gmm1_inf_in_expert_3": ((HID, w13, _scale(3e38, at=(3, slice(None), 0)), w2, s2), MOE_KW),
        "routing_weight_inf_in_bf16": ((HID,) + W4, {"topk_ids": IDS, "topk_weights": np.full((3, 2), 3.4e38, F32)}),
        "dsq_limit_before_gmm2_scale": ((HID, w13, s13, w2, _scale(np.nan)), MOE_KW | {"swiglu_limit": 0.0}),
        "gmm1_inf_before_gmm2_scale": ((big, big_w[0], big_w[1], w2, _scale(np.nan)), MOE_KW),
        "gmm1_inf_before_shared": ((big,) + big_w, MOE_KW | {"shared_expert": sh | {
            "gate_weight": sh["gate_weight"][:4]}}),
        "gmm2_scale_before_shared": ((HID, w13, s13, w2, _scale(np.inf)), MOE_KW | {"shared_expert": sh | {
            "gate_weight": sh["gate_weight"][:, :8]}}),
    }


def shared_data_error_inputs():
    """The shared expert's data errors in order: the routed experts get tiny scales so that huge hidden
    states stay finite through them; the shared expert sees the huge values: g, u finite but silu(g) * u
    overflows fp32 -> an Inf in the bf16 activation a, which the down Linear's dynamic_quant refuses
    *before* quant_matmul checks the down scale (Inf once rounded to bf16); with a finite a, that scale
    error; with g itself Inf, swiglu's. ``name -> (args, kwargs)`` of ``w8a8_moe``."""
    rng = np.random.default_rng(12)
    h, i = 16, 8
    sh = shared_expert(rng, h, i)
    tiny = (W4[0], np.full((4, 16, 1), 1e-20, F32), W4[2], np.full((4, 16, 1), 1e-10, F32))
    huge = np.full((3, h), 1e30, F32).astype(BF16)
    big = sh | {"gate_weight": np.full((i, h), 127, np.int8), "up_weight": np.full((i, h), 127, np.int8),
                "gate_scale": np.full((i, 1), 1e-3, F32), "up_scale": np.full((i, 1), 1e-3, F32)}
    bad_down = {"down_scale": np.full((h, 1), 3.4e38, F32)}
    cases = {"activation_inf": (huge, tiny, big), "activation_inf_before_down_scale": (huge, tiny, big | bad_down),
             "down_scale": (HID, W4, sh | bad_down),
             "gate_inf": (huge, tiny, big | {"gate_scale": np.full((i, 1), 3e37, F32)})}
    return {name: ((hidden, *w), MOE_KW | {"shared_expert": se}) for name, (hidden, w, se) in cases.items()}


# what the golden raises for each of them, with the op's own name where the layer names itself
LAYER_ERRORS = {
    "gmm1_scale_nan": r"grouped_matmul: argument 'scale' must be finite",
    "dsq_limit": r"{op}: argument 'swiglu_limit' must be None or a finite float > 0",
    "gmm2_scale_inf_in_bf16": r"grouped_matmul: argument 'scale' must be finite",
    "finalize_k0": r"moe_finalize_routing: argument 'scales' must be of shape \[N, K\] with K >= 1",
    "shared_gate_k": r"w8a8_dynamic_linear: argument 'x' must be of last dimension K = 8",
    "shared_up_scale": r"w8a8_dynamic_linear: argument 'weight_scale' must be of shape \[8\] or \[8, 1\]",
    "shared_gate_up_mismatch": r"{op}: argument 'shared_expert' must be gate and up weights of the same shape",
    "shared_down_k": r"w8a8_dynamic_linear: argument 'x' must be of last dimension K = 4",
    "shared_down_scale_inf": r"quant_matmul: argument 'scale' must be finite",
    "shared_down_n": r"{op}: argument 'shared_expert' must be a down projection to \[T, H\] =",
    "gmm1_inf": r"dequant_swiglu_quant: argument 'x' must be finite",
    "requant_scale_inf": r"grouped_matmul: argument 'per_token_scale' must be finite",
    "gmm2_out_inf": r"moe_finalize_routing: argument 'expanded_permuted_rows' must be finite",
    "gmm2_out_inf_in_expert_2": r"moe_finalize_routing: argument 'expanded_permuted_rows' must be finite",
    "gmm1_inf_in_expert_3": r"dequant_swiglu_quant: argument 'x' must be finite",
    "routing_weight_inf_in_bf16": r"moe_finalize_routing: argument 'scales' must be finite",
    "dsq_limit_before_gmm2_scale": r"{op}: argument 'swiglu_limit' must be None or a finite float > 0",
    "gmm1_inf_before_gmm2_scale": r"dequant_swiglu_quant: argument 'x' must be finite",
    "gmm1_inf_before_shared": r"dequant_swiglu_quant: argument 'x' must be finite",
    "gmm2_scale_before_shared": r"grouped_matmul: argument 'scale' must be finite",
    "activation_inf": r"w8a8_dynamic_linear: argument 'x' must be finite",
    "activation_inf_before_down_scale": r"w8a8_dynamic_linear: argument 'x' must be finite",
    "down_scale": r"quant_matmul: argument 'scale' must be finite",
    "gate_inf": r"swiglu: argument 'x' must be finite",
}


def layer_bad_calls(op: str) -> list:
    """The layer's error inputs as bad calls of ``op`` (``w8a8_moe``, or ``w8a8_moe_prequantized`` fed the
    INT8 dispatch of the same hidden states): the same errors, in the same order."""
    from ...declare import BadCall

    inputs = {**layer_error_inputs(), **shared_data_error_inputs()}

    def build(name):
        def make():
            args, kwargs = inputs[name]
            return prequantized(args, kwargs) if op == "w8a8_moe_prequantized" else (args, kwargs)
        return make

    return [BadCall(f"stage_{name}", build(name), ValueError, regex.replace("{op}", op),
                    "an error the golden meets between or inside the layer's stages (its order is pinned)")
            for name, regex in LAYER_ERRORS.items()]


# ---------------------------------------------------------------------------------------------
# bench helpers

def bench_routing(rng, t, e, k):
    """Random top-k routing (top-k of uniform random scores per token): every expert gets about t*k/e rows."""
    scores = rng.random((t, e))
    return np.argsort(-scores, axis=1)[:, :k].astype(np.int32), rng.uniform(0.05, 1, (t, k)).astype(np.float32)


def bench_experts(rng, e, h, i):
    w13 = rng.integers(-128, 128, size=(e, 2 * i, h), dtype=np.int8)
    w2 = rng.integers(-128, 128, size=(e, h, i), dtype=np.int8)
    s13 = rng.uniform(1e-3, 2e-3, size=(e, 2 * i, 1)).astype(np.float32)
    s2 = rng.uniform(1e-3, 2e-3, size=(e, h, 1)).astype(np.float32)
    return w13, s13, w2, s2


def bench_experts_count(full: bool) -> int:
    """E of the MoE bench: the real 256 in a full run (6.4 GB of int8 expert weights, built once per
    backend process), 16 in the quick set (same H, I and top-k)."""
    from .. import _dsv4

    return _dsv4.E if full else 16
