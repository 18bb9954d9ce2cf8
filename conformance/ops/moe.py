"""Registry entries of the grouped-MoE ops: gating, routing (v1, v2), grouped matmul, SwiGLU (+ requant),
finalize, and the whole W8A8 MoE layer (plus its pre-quantized INT8-dispatch entry point).

Strategies cover empty experts, every token to one expert, top-k = E, capacity drops and partial
group lists. Rows the device leaves unwritten (past a group-list total, past the routed rows) are
masked out of every comparison (``w8a8.valid_rows``, ``w8a8.moe_init_routing_v2_valid``).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import w8a8
from w8a8 import dtypes as _dt

from .. import corpus
from .. import strategies as S
from ..registry import OpSpec, Output, Stage, register
from ..values import float_tensor, int8_tensor, positive_scales, rng_for

MOE_FIELDS = ("round_mode", "quant_codes", "scale_out", "transcendental", "routing_quant_round", "epilogue_order",
              "fp19_scale")


def _out(*pairs) -> tuple[Output, ...]:
    return tuple(Output(n, k) for n, k in pairs)


@st.composite
def _routing_shape(draw, max_tokens=24, max_experts=12):
    """Tokens, experts, top-k and a routing pattern (empty experts / all to one / top-k = E / random)."""
    e = draw(st.integers(2, max_experts))
    pattern = draw(st.sampled_from(("random", "random", "skewed", "one_expert", "topk_all")))
    k = e if pattern == "topk_all" else draw(st.integers(1, min(e, 6)))
    if pattern == "one_expert":
        k = 1
    return {"t": draw(S.size(max_tokens, big=())), "e": e, "k": k, "pattern": pattern}


def _expert_ids(rng, t, e, k, pattern) -> np.ndarray:
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


# ---------------------------------------------------------------------------------------------
# gating

@st.composite
def _gating_softmax_params(draw):
    r = draw(_routing_shape())
    return {**r, "dtype": draw(st.sampled_from(("float32", "float16", "bfloat16"))),
            "finished": draw(st.booleans()), "dist": draw(S.float_dist(allow_nan=False, edges=False)),
            "seed": draw(S.seed())}


def _logits(p, dtype=None):
    x = float_tensor(rng_for(p["seed"]), (p["t"], p["e"]), dtype or p["dtype"], p["dist"])
    return np.clip(x.astype(np.float32), -60, 60).astype(x.dtype)


def _gating_softmax_build(p):
    kw = {"k": p["k"]}
    if p["finished"]:
        kw["finished"] = rng_for(p["seed"], 1).random(p["t"]) < 0.3
    return (_logits(p),), kw


register(OpSpec(
    name="moe_gating_top_k_softmax", family="moe", params=_gating_softmax_params, build=_gating_softmax_build,
    outputs=_out(("y", "float"), ("expert_idx", "int"), ("row_idx", "int")), numerics_fields=("transcendental",),
    description="softmax top-k routing, no renormalisation (npu_moe_gating_top_k_softmax)"))


@st.composite
def _gating_params(draw):
    group_count = draw(st.sampled_from((1, 1, 2, 4)))
    per_group = draw(st.integers(3, 8))
    e = group_count * per_group
    k_group = draw(st.integers(1, group_count))
    k = draw(st.integers(1, min(per_group * k_group, 8)))
    return {"t": draw(S.size(24, big=())), "e": e, "k": k, "k_group": k_group, "group_count": group_count,
            "group_select_mode": draw(st.sampled_from((0, 1))), "norm_type": draw(st.sampled_from((0, 1, 2))),
            "bias": draw(st.booleans()), "scaling": draw(st.sampled_from((1.0, 1.5, 2.5))),
            "dtype": draw(st.sampled_from(("float32", "bfloat16", "float16"))),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def _gating_build(p):
    kw = {"k_group": p["k_group"], "group_count": p["group_count"], "group_select_mode": p["group_select_mode"],
          "norm_type": p["norm_type"], "routed_scaling_factor": p["scaling"]}
    x = _logits(p)
    if p["bias"]:  # the bias has x's dtype
        kw["bias"] = (rng_for(p["seed"], 2).standard_normal(p["e"]) * 0.1).astype(np.float32).astype(x.dtype)
    return (x, p["k"]), kw


register(OpSpec(
    name="moe_gating_top_k", family="moe", params=_gating_params, build=_gating_build,
    outputs=_out(("y", "float"), ("expert_idx", "int"), ("norm_out", "float")), numerics_fields=("transcendental",),
    description="grouped top-k routing: softmax / sigmoid / sqrt-softplus, bias for selection (npu_moe_gating_top_k)"))


# ---------------------------------------------------------------------------------------------
# routing

@st.composite
def _routing_v1_params(draw):
    r = draw(_routing_shape())
    return {**r, "h": draw(S.size(64, big=())), "active": draw(st.sampled_from(("all", "some"))),
            "seed": draw(S.seed())}


def _routing_v1_build(p):
    rng = rng_for(p["seed"])
    t, k = p["t"], p["k"]
    ids = _expert_ids(rng, t, p["e"], k, p["pattern"])
    k = ids.shape[1]
    x = float_tensor(rng, (t, p["h"]), "bfloat16", "gaussian")
    row_idx = np.arange(t * k, dtype=np.int32).reshape(k, t).T.copy()
    active = t if p["active"] == "all" else max(0, t // 2)
    return (x, row_idx, ids, active), {}


register(OpSpec(
    name="moe_init_routing", family="moe", params=_routing_v1_params, build=_routing_v1_build,
    outputs=_out(("expanded_x", "float"), ("expanded_row_idx", "int"), ("expanded_expert_idx", "int")),
    description="v1 token permutation with column-major row ids (npu_moe_init_routing)"))


@st.composite
def _routing_v2_params(draw):
    r = draw(_routing_shape())
    quant = draw(st.sampled_from((-1, -1, 1, "gather")))
    drop_pad = draw(st.sampled_from((0, 0, 0, 1)))
    return {**r, "h": draw(S.size(64, big=())), "quant_mode": quant, "drop_pad_mode": drop_pad,
            "capacity": draw(st.integers(1, 6)), "tokens_type": draw(st.sampled_from((0, 1, 2))),
            "flag": draw(st.booleans()), "range": draw(st.sampled_from(("all", "all", "sub"))),
            "row_idx_type": 0 if drop_pad else draw(st.sampled_from((0, 1))),
            "active_num": draw(st.sampled_from((-1, -1, "half"))), "smooth": draw(st.booleans()),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def _routing_v2_build(p):
    rng = rng_for(p["seed"])
    t, e = p["t"], p["e"]
    ids = _expert_ids(rng, t, e, p["k"], p["pattern"])
    k = ids.shape[1]
    kw = {"expert_num": e, "expert_tokens_num_type": p["tokens_type"], "expert_tokens_num_flag": p["flag"],
          "row_idx_type": p["row_idx_type"], "drop_pad_mode": p["drop_pad_mode"],
          "active_num": t * k // 2 if p["active_num"] == "half" and not p["drop_pad_mode"] else -1,
          "active_expert_range": [0, e] if p["range"] == "all" else [1, max(2, e - 1)]}
    if p["drop_pad_mode"]:
        kw["expert_capacity"] = p["capacity"]
        kw["active_expert_range"] = [0, e]
    if p["quant_mode"] == "gather":
        x, s = w8a8.dispatch_quant(float_tensor(rng, (t, p["h"]), "bfloat16", p["dist"]))
        kw.update(quant_mode=-1, scale=s)
    else:
        x = float_tensor(rng, (t, p["h"]), "bfloat16", p["dist"])
        kw["quant_mode"] = p["quant_mode"]
        if p["quant_mode"] == 1 and p["smooth"]:
            lo, hi = kw["active_expert_range"]
            kw["scale"] = positive_scales(rng, (hi - lo, p["h"]), np.float32, low=0.5, high=2.0)
    return (x, ids), kw


def _routing_v2_mask(args, kwargs):
    masks = w8a8.moe_init_routing_v2_valid(*args, **kwargs)
    return dict(zip(("expanded_x", "expanded_row_idx", "expert_tokens", "expanded_scale"), masks))


register(OpSpec(
    name="moe_init_routing_v2", family="moe", params=_routing_v2_params, build=_routing_v2_build,
    outputs=_out(("expanded_x", "float"), ("expanded_row_idx", "int"), ("expert_tokens", "int"),
                 ("expanded_scale", "scale")),
    numerics_fields=("routing_quant_round", "round_mode"), mask=_routing_v2_mask,
    description="v2 routing: stable sort, token-major ids, active range, counts, dynamic quant, drop/pad"))


# ---------------------------------------------------------------------------------------------
# grouped matmul

# (output, scale dtype, per-token scale?)
GMM_COMBOS = (("bfloat16", "bfloat16", True), ("bfloat16", "bfloat16", False), ("float16", "float32", True),
              ("float16", "float32", False), ("int32", None, False))


@st.composite
def _gmm_params(draw):
    e = draw(st.integers(1, 6))
    return {"combo": list(draw(st.sampled_from(GMM_COMBOS))), "e": e, "m": draw(S.size(40, big=())),
            "k": draw(S.size(96, big=(1025,))), "n": draw(S.size(48, big=())),
            "list_type": draw(st.sampled_from((0, 1, 2))), "partial": draw(st.booleans()),
            "bias": draw(st.booleans()), "empty": draw(st.booleans()), "seed": draw(S.seed())}


def _counts(rng, m, e, partial, empty) -> np.ndarray:
    total = int(rng.integers(0, m + 1)) if partial else m
    cuts = np.sort(rng.integers(0, total + 1, size=e - 1)) if e > 1 else np.zeros(0, np.int64)
    counts = np.diff(np.concatenate([[0], cuts, [total]])).astype(np.int64)
    if empty and e > 1:
        j = int(rng.integers(e))
        counts[(j + 1) % e] += counts[j]
        counts[j] = 0
    return counts


def _group_list(counts, list_type) -> np.ndarray:
    if list_type == 0:
        return np.cumsum(counts).astype(np.int64)
    if list_type == 1:
        return counts.astype(np.int64)
    nz = np.flatnonzero(counts)
    return np.stack([nz, counts[nz]], axis=1).astype(np.int64) if nz.size else np.zeros((1, 2), np.int64)


def _gmm_build(p):
    out, scale_dt, pertoken = p["combo"]
    rng = rng_for(p["seed"])
    m, k, n, e = p["m"], p["k"], p["n"], p["e"]
    counts = _counts(rng, m, e, p["partial"], p["empty"])
    x = int8_tensor(rng, (m, k))
    w = int8_tensor(rng, (e, k, n))
    kw = {"group_list": _group_list(counts, p["list_type"]), "group_list_type": p["list_type"], "output_dtype": out}
    acc_mag = max(1.0, float(np.sqrt(k)) * 128 * 40)
    if scale_dt is not None:
        s = positive_scales(rng, (e, n), np.float32, low=0.2 / acc_mag, high=5.0 / acc_mag)
        if pertoken:
            s = (s * np.float32(100)).astype(np.float32)
            kw["per_token_scale"] = positive_scales(rng, (m,), np.float32, low=1e-3, high=1e-1)
        kw["scale"] = s.astype(scale_dt)
    if p["bias"]:
        kw["bias"] = rng.integers(-3000, 3000, size=(e, n)).astype(np.int32)
    return (x, w), kw


def _gmm_mask(args, kwargs):
    return {"y": w8a8.valid_rows(kwargs["group_list"], args[0].shape[0],
                                 group_list_type=kwargs["group_list_type"])[:, None]}


register(OpSpec(
    name="grouped_matmul", family="moe", params=_gmm_params, build=_gmm_build, outputs=_out(("y", "float")),
    numerics_fields=("epilogue_order", "fp19_scale", "int32_bias"), mask=_gmm_mask,
    stages=(Stage("acc", "int", lambda b, a, k, up: b.grouped_matmul(
        *a, group_list=k["group_list"], group_list_type=k["group_list_type"], output_dtype="int32")),
            Stage("y", "float", lambda b, a, k, up: b.grouped_matmul(*a, **k))),
    description="single-tensor int8 grouped matmul along M (npu_grouped_matmul, group_type 0)"))


# ---------------------------------------------------------------------------------------------
# SwiGLU

@st.composite
def _swiglu_params(draw):
    return {"lead": draw(S.lead_shape(24)), "h": draw(S.size(64, big=(1025,))),
            "dtype": draw(st.sampled_from(("float32", "float16", "bfloat16"))),
            "dim_first": draw(st.booleans()), "dist": draw(S.float_dist(allow_nan=False, edges=False)),
            "seed": draw(S.seed())}


def _swiglu_build(p):
    x = float_tensor(rng_for(p["seed"]), tuple(p["lead"]) + (2 * p["h"],), p["dtype"], p["dist"])
    x = np.clip(x.astype(np.float32), -80, 80).astype(x.dtype)
    if p["dim_first"] and len(p["lead"]) >= 1:
        return (np.ascontiguousarray(np.moveaxis(x, -1, 0)),), {"dim": 0}
    return (x,), {}


register(OpSpec(
    name="swiglu", family="moe", params=_swiglu_params, build=_swiglu_build, outputs=_out(("y", "float")),
    numerics_fields=("transcendental",), description="silu(first half) * second half (npu_swiglu)"))


@st.composite
def _dsq_params(draw):
    mode = draw(st.sampled_from(("int32_grouped", "int32", "bf16")))
    return {"mode": mode, "t": draw(S.size(32, big=())), "h": draw(st.sampled_from((64, 128, 192))) if
            mode == "int32_grouped" else draw(S.size(64, big=())), "groups": draw(st.integers(1, 4)),
            "partial": draw(st.booleans()), "activate_left": draw(st.booleans()),
            "quant_mode": draw(st.sampled_from((1, 1, 0))) if mode == "int32" else 1,
            "limit": draw(st.sampled_from((None, None, 1.0, 10.0))), "seed": draw(S.seed())}


def _dsq_build(p):
    rng = rng_for(p["seed"])
    t, h = p["t"], p["h"]
    kw = {"activate_left": p["activate_left"], "quant_mode": p["quant_mode"], "swiglu_limit": p["limit"]}
    if p["mode"] == "bf16":
        x = float_tensor(rng, (t, 2 * h), "bfloat16", "gaussian")
        return (x,), kw
    x = rng.integers(-40000, 40000, size=(t, 2 * h)).astype(np.int32)
    kw["activation_scale"] = positive_scales(rng, (t,), np.float32, low=1e-3, high=1e-2)
    if p["mode"] == "int32_grouped":
        counts = _counts(rng, t, p["groups"], p["partial"], False)
        kw["weight_scale"] = positive_scales(rng, (p["groups"], 2 * h), np.float32, low=1e-4, high=1e-3)
        kw["group_index"] = counts
    else:
        kw["weight_scale"] = positive_scales(rng, (1, 2 * h), np.float32, low=1e-4, high=1e-3)
        if p["quant_mode"] == 0:
            kw["quant_scale"] = positive_scales(rng, (1, h), np.float32, low=1e-2, high=1e-1)
            kw["quant_offset"] = rng.uniform(-5, 5, size=(1, h)).astype(np.float32)
    return (x,), kw


def _dsq_mask(args, kwargs):
    gi = kwargs.get("group_index")
    if gi is None:
        return {}
    rows = w8a8.valid_rows(gi, args[0].shape[0], group_list_type=1)
    return {"y": rows[:, None], "scale": rows}


register(OpSpec(
    name="dequant_swiglu_quant", family="moe", params=_dsq_params, build=_dsq_build,
    outputs=_out(("y", "int"), ("scale", "scale")), numerics_fields=("transcendental", "round_mode", "scale_out"),
    mask=_dsq_mask, description="dequant + SwiGLU (+ DeepSeek-V4 clamp) + requant (npu_dequant_swiglu_quant)"))


# ---------------------------------------------------------------------------------------------
# finalize

@st.composite
def _finalize_params(draw):
    r = draw(_routing_shape())
    return {**r, "h": draw(S.size(48, big=())), "mode": draw(st.sampled_from((0, 1, 2, 3))),
            "skips": draw(st.sampled_from((0, 1, 2))), "bias": draw(st.booleans()),
            "dtype": draw(st.sampled_from(("bfloat16", "float16", "float32"))), "seed": draw(S.seed())}


def _finalize_build(p):
    rng = rng_for(p["seed"])
    t, e, h = p["t"], p["e"], p["h"]
    ids = _expert_ids(rng, t, e, p["k"], p["pattern"])
    k = ids.shape[1]
    dt = np.dtype(_dt.resolve(p["dtype"]))
    rows = float_tensor(rng, (t * k, h), dt, "gaussian")
    # a random bijection route -> row; the op reads it column-major (j*T + t) in modes 0/1 and row-major
    # (t*k + j) in modes 2/3 — the same array, interpreted by the layout under test
    idx = rng.permutation(t * k).astype(np.int32)
    if p["mode"] in (1, 3) and t * k:
        idx[rng.random(t * k) < 0.2] = -1  # dropped routes
    skip1 = float_tensor(rng, (t, h), dt, "gaussian") if p["skips"] >= 1 else None
    skip2 = float_tensor(rng, (t, h), dt, "gaussian") if p["skips"] == 2 else None
    bias = float_tensor(rng, (e, h), dt, "gaussian") if p["bias"] else None
    scales = rng.uniform(0.0, 1.0, size=(t, k)).astype(np.float32).astype(dt)
    return (rows, skip1, skip2, bias, scales, idx, ids), {"drop_pad_mode": p["mode"]}


register(OpSpec(
    name="moe_finalize_routing", family="moe", params=_finalize_params, build=_finalize_build,
    outputs=_out(("y", "float")), description="weighted un-permute of expert rows (npu_moe_finalize_routing)"))


# ---------------------------------------------------------------------------------------------
# the W8A8 MoE layer

@st.composite
def _moe_params(draw):
    r = draw(_routing_shape(max_tokens=16, max_experts=8))
    return {**r, "h": draw(st.sampled_from((16, 32, 48, 64))), "i": draw(st.sampled_from((8, 16, 32))),
            "routing": draw(st.sampled_from(("ids", "softmax", "sqrtsoftplus"))),
            "limit": draw(st.sampled_from((None, 10.0, 0.5))), "shared": draw(st.booleans()),
            "dist": draw(S.float_dist(allow_nan=False, edges=False)), "seed": draw(S.seed())}


def _moe_weights(rng, e, h, i):
    w13f = rng.standard_normal((e, 2 * i, h)).astype(np.float32) * np.float32(0.05)
    w2f = rng.standard_normal((e, h, i)).astype(np.float32) * np.float32(0.05)
    w13, s13, _ = w8a8.quantize_weight_per_channel(w13f)
    w2, s2, _ = w8a8.quantize_weight_per_channel(w2f)
    return w13, s13, w2, s2


def _shared(rng, h, i):
    out = {}
    for name, (n, k) in {"gate": (i, h), "up": (i, h), "down": (h, i)}.items():
        w, s, _ = w8a8.quantize_weight_per_channel(rng.standard_normal((n, k)).astype(np.float32) * np.float32(0.05))
        out[f"{name}_weight"], out[f"{name}_scale"] = w, s
    return out


def _moe_kwargs(p, rng):
    t, e, k = p["t"], p["e"], p["k"]
    kw = {"swiglu_limit": p["limit"]}
    if p["routing"] == "ids":
        ids = _expert_ids(rng, t, e, k, p["pattern"])
        kw.update(topk_ids=ids, topk_weights=rng.uniform(0.05, 1.0, size=ids.shape).astype(np.float32))
    else:
        e_eff = max(e, 3) if p["routing"] == "sqrtsoftplus" else e
        kw.update(router_logits=float_tensor(rng, (t, e), "float32", "gaussian"), top_k=min(k, e_eff),
                  scoring_func=p["routing"])
        if p["routing"] == "sqrtsoftplus":
            kw.update(correction_bias=(rng.standard_normal(e) * 0.1).astype(np.float32), routed_scaling_factor=1.5)
    if p["shared"]:
        kw["shared_expert"] = _shared(rng, p["h"], p["i"])
    return kw


def _moe_build(p):
    rng = rng_for(p["seed"])
    e = p["e"] if p["routing"] != "sqrtsoftplus" else max(p["e"], 3)
    p = {**p, "e": e}
    hidden = float_tensor(rng, (p["t"], p["h"]), "bfloat16", p["dist"])
    w13, s13, w2, s2 = _moe_weights(rng, e, p["h"], p["i"])
    return (hidden, w13, s13, w2, s2), _moe_kwargs(p, rng)


def _moe_stage(name):
    def fn(b, a, k, up):
        st_ = w8a8.w8a8_moe_stages(*a, **k)  # the golden's upstream values of each stage
        t = a[0].shape[0]
        e = a[1].shape[0]
        if name == "dispatch":
            return b.moe_init_routing_v2(a[0], st_["topk_ids"], active_num=st_["topk_ids"].size, expert_num=e,
                                         expert_tokens_num_type=1, expert_tokens_num_flag=True,
                                         active_expert_range=[0, e], quant_mode=1)[0]
        w13_kn = np.ascontiguousarray(np.swapaxes(a[1], 1, 2))
        w2_kn = np.ascontiguousarray(np.swapaxes(a[3], 1, 2))
        counts = st_["expert_tokens"]
        if name == "gmm1":
            return b.grouped_matmul(st_["expanded_x"], w13_kn, scale=st_["w13_scale"],
                                    per_token_scale=st_["expanded_scale"], group_list=counts, group_list_type=1,
                                    output_dtype="bfloat16")
        if name == "swiglu_quant":
            return b.dequant_swiglu_quant(st_["gmm1"], quant_mode=1, activate_left=True,
                                          swiglu_limit=k.get("swiglu_limit"))[0]
        if name == "gmm2":
            return b.grouped_matmul(st_["act_q"], w2_kn, scale=st_["w2_scale"], per_token_scale=st_["act_scale"],
                                    group_list=counts, group_list_type=1, output_dtype="bfloat16")
        assert t >= 0
        return b.w8a8_moe(*a, **k)
    return fn


MOE_STAGES = tuple(Stage(n, kind, _moe_stage(n)) for n, kind in
                   (("dispatch", "int"), ("gmm1", "float"), ("swiglu_quant", "int"), ("gmm2", "float"),
                    ("y", "float")))

register(OpSpec(
    name="w8a8_moe", family="moe", params=_moe_params, build=_moe_build, outputs=_out(("y", "float")),
    numerics_fields=MOE_FIELDS, stages=MOE_STAGES,
    description="the W8A8 MoE layer: routing -> init_routing_v2 quant -> GMM -> SwiGLU+requant -> GMM -> finalize"))


def _moe_pre_build(p):
    (hidden, w13, s13, w2, s2), kw = _moe_build(p)
    x_q, x_s = w8a8.dispatch_quant(hidden)
    if "shared_expert" in kw:
        kw["shared_input"] = hidden
    return (x_q, x_s, w13, s13, w2, s2), kw


register(OpSpec(
    name="w8a8_moe_prequantized", family="moe", params=_moe_params, build=_moe_pre_build,
    outputs=_out(("y", "float")), numerics_fields=MOE_FIELDS,
    description="the MoE layer fed an INT8 dispatch (int8 tokens + per-token scale): no second quantization"))


# ---------------------------------------------------------------------------------------------
# named cases: 2 tokens, 3 experts, top-2, expert 1 empty (hand-derived)

_IDS = np.array([[2, 0], [0, 2]], np.int32)  # token 0 -> experts 2, 0; token 1 -> experts 0, 2; expert 1 empty
_X2 = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32).astype(w8a8.bfloat16)

corpus.case("moe_init_routing_v2", "two_tokens_three_experts_top2",
            lambda: ((_X2, _IDS), {"expert_num": 3, "expert_tokens_num_type": 1, "expert_tokens_num_flag": True,
                                   "active_expert_range": [0, 3], "quant_mode": -1}),
            {"expanded_x": np.array([[1, 2], [3, 4], [1, 2], [3, 4]], np.float32).astype(w8a8.bfloat16),
             "expanded_row_idx": np.array([2, 0, 1, 3], np.int32),
             "expert_tokens": np.array([2, 0, 2], np.int64)},
            "Flat ids t*k+j: 0->e2, 1->e0, 2->e0, 3->e2. A stable sort by expert gives positions: id1 (e0), id2 (e0), "
            "id0 (e2), id3 (e2), so expanded_x rows are tokens 0,1,0,1 and the gather map expanded_row_idx[id] = "
            "position is [2, 0, 1, 3]; counts per expert [2, 0, 2].")

corpus.case("moe_init_routing", "v1_two_tokens_three_experts_top2",
            lambda: ((_X2, np.array([[0, 2], [1, 3]], np.int32), _IDS, 2), {}),
            {"expanded_x": np.array([[1, 2], [3, 4], [1, 2], [3, 4]], np.float32).astype(w8a8.bfloat16),
             "expanded_row_idx": np.array([2, 1, 0, 3], np.int32),
             "expanded_expert_idx": np.array([0, 0, 2, 2], np.int32)},
            "v1 row ids are column-major: row_idx[t, j] = j*N + t = [[0, 2], [1, 3]]. The flattened experts "
            "[2, 0, 0, 2] sort stably to entries 1, 2, 0, 3 (experts 0, 0, 2, 2), whose row ids are 2, 1, 0, 3; "
            "expanded_row_idx[row id] = position gives [2, 1, 0, 3], and expanded_x takes token row_id % N: "
            "tokens 0, 1, 0, 1.")
