"""Scheme resolution (checkpoints/schemes.py), on synthetic checkpoints in both namings.

Every rule of the loaders (SGLang ``modelslim.py``, vllm-ascend ``modelslim_config.py``): ``<prefix>.weight`` decides;
FLOAT means unquantized; packed shards must agree; MoE from expert 0 with the (gate, up, down) / (w1, w3, w2) leaf
names; W13 agreement; no static MoE; unknown types reported; DeepSeek-V4 names remapped.
"""

import numpy as np

from checkpoints import Checkpoint, CheckpointWriter, resolve


def modules(path, loader="sglang"):
    res = resolve(Checkpoint.open(path), loader)
    return res, {m.name: m for m in res.modules}


def codes(findings, severity="error"):
    return {f.code for f in findings if f.severity == severity}


def test_methods_per_scheme(kit, naming):
    n = kit.NAMES[naming]
    res, mods = modules(kit.make(naming, overrides=n["static_overrides"]))
    assert not res.findings.errors
    dyn, static, flt = mods[n["dyn"]], mods[n["static"]], mods[n["float"]]
    assert (dyn.scheme, dyn.scheme_class, dyn.method) == (
        "W8A8_DYNAMIC", "ModelSlimW8A8Int8", "NPUW8A8Int8DynamicLinearMethod")
    assert (static.scheme, static.scheme_class, static.method) == (
        "W8A8", "ModelSlimW8A8Int8", "NPUW8A8Int8LinearMethod")
    assert (flt.scheme, flt.method) == ("FLOAT", "UnquantizedLinearMethod")
    moe = mods[n["moe"]]
    assert (moe.kind, moe.scheme, moe.scheme_class, moe.method) == (
        "moe", "W8A8_DYNAMIC", "ModelSlimW8A8Int8MoE", "NPUW8A8Int8MoEMethod")
    assert moe.moe.experts == (0, 1, 2, 3)
    router = mods[n["router"]]
    assert (router.kind, router.scheme) == ("router", "FLOAT")


def test_vllm_ascend_loader_resolves_the_same_schemes(kit, naming):
    path = kit.make(naming, overrides=kit.NAMES[naming]["static_overrides"])
    _, sg = modules(path, "sglang")
    _, vl = modules(path, "vllm-ascend")
    assert {k: m.scheme for k, m in sg.items() if m.kind != "packed"} == \
           {k: m.scheme for k, m in vl.items() if m.kind != "packed"}
    assert vl[kit.NAMES[naming]["dyn"]].method == "AscendW8A8DynamicLinearMethod"


def test_dsv4_names_are_remapped_to_serving_names(kit):
    res, mods = modules(kit.make("v4"))
    assert res.dsv4
    m = mods["layers.1.attn.wq_a"]
    assert m.serving_name == "model.layers.1.self_attn.wq_a"
    moe = mods["layers.1.ffn.experts"]
    assert moe.serving_name == "model.layers.1.mlp.experts"
    # after SGLang's rewrite the experts are gate_proj / up_proj / down_proj (found with the first naming)
    assert moe.moe.naming == ("gate_proj", "up_proj", "down_proj")
    res3, _ = modules(kit.make("v3"))
    assert not res3.dsv4


def test_only_the_weight_entry_decides(kit, naming):
    # Retag the scale tensors of a dynamic Linear: the scheme still comes from .weight (a warning only).
    n = kit.NAMES[naming]

    def mutate(w):
        w.types[n["dyn"] + ".weight_scale"] = "FLOAT"

    res, mods = modules(kit.make(naming, mutate))
    assert mods[n["dyn"]].scheme == "W8A8_DYNAMIC"


def test_packed_module_from_agreeing_shards(kit, naming):
    n = kit.NAMES[naming]
    res, mods = modules(kit.make(naming))
    packed = mods[n["packed_module"]]
    assert packed.kind == "packed" and packed.scheme == "W8A8_DYNAMIC"
    assert [res.native_prefix(p) for p in packed.shards] == list(n["packed"])
    for shard in n["packed"]:
        assert shard not in mods          # the shards are not modules of their own


def test_deepseek_fused_qkv_a_is_packed(kit):
    res, mods = modules(kit.make("v3"))
    m = mods["model.layers.1.self_attn.fused_qkv_a_proj_with_mqa"]
    assert m.kind == "packed" and m.scheme == "W8A8"
    _, vl = modules(kit.make("v3"), "vllm-ascend")
    assert vl["model.layers.1.self_attn.fused_qkv_a_proj"].kind == "packed"


def test_disagreeing_packed_shards_are_an_error(kit, naming):
    n = kit.NAMES[naming]
    first, second = n["packed"]

    def mutate(w):
        kit.requantize(w, second, "FLOAT")

    res, mods = modules(kit.make(naming, mutate))
    m = mods[n["packed_module"]]
    assert m.scheme == "MIXED"
    errs = [f for f in res.findings.errors if f.code == "packed-disagree"]
    assert len(errs) == 1
    leaf1, leaf2 = first.rsplit(".", 1)[1], second.rsplit(".", 1)[1]
    assert f"{leaf1}=W8A8_DYNAMIC" in errs[0].message and f"{leaf2}=FLOAT" in errs[0].message


def test_float_linear_is_unquantized(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        kit.requantize(w, n["dyn"], "FLOAT")

    res, mods = modules(kit.make(naming, mutate))
    assert (mods[n["dyn"]].scheme, mods[n["dyn"]].method) == ("FLOAT", "UnquantizedLinearMethod")
    assert not res.findings.errors


def _retag_expert(w, kit, naming, e, proj, new):
    n = kit.NAMES[naming]
    kit.requantize(w, n["expert"].format(e=e, p=proj), new)


def test_moe_scheme_comes_from_expert_zero(kit, naming):
    # Expert 0 FLOAT, the others W8A8_DYNAMIC: the loader sees FLOAT for the whole layer, and the
    # other experts disagree with it -> error.
    n = kit.NAMES[naming]

    def mutate(w):
        for p in n["projs"]:
            _retag_expert(w, kit, naming, 0, p, "FLOAT")

    res, mods = modules(kit.make(naming, mutate))
    assert mods[n["moe"]].scheme == "FLOAT"
    assert "moe-expert-inconsistent" in codes(mods[n["moe"]].findings)


def test_other_expert_disagreeing_is_an_error(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        _retag_expert(w, kit, naming, 3, n["projs"][0], "FLOAT")

    res, mods = modules(kit.make(naming, mutate))
    moe = mods[n["moe"]]
    assert moe.scheme == "W8A8_DYNAMIC"
    err = [f for f in moe.findings.errors if f.code == "moe-expert-inconsistent"]
    assert len(err) == 1 and n["expert"].format(e=3, p=n["projs"][0]) + "=FLOAT" in err[0].message


def test_w13_disagreement_is_an_error(kit, naming):
    n = kit.NAMES[naming]
    up = n["projs"][1]

    def mutate(w):
        for e in range(4):
            _retag_expert(w, kit, naming, e, up, "FLOAT")

    res, mods = modules(kit.make(naming, mutate))
    moe = mods[n["moe"]]
    assert moe.scheme == "MIXED"
    assert "moe-w13-disagree" in codes(moe.findings)


def test_w2_differing_from_w13_as_each_engine_resolves_it(kit, naming):
    # SGLang (modelslim.py@07ee8929::get_moe_scheme) builds w13 and w2 schemes separately: a FLOAT down projection
    # with W8A8_DYNAMIC gate/up has no MoE scheme -> ValueError; vllm-ascend's loader: a warning here
    n = kit.NAMES[naming]
    down = n["projs"][2]

    def mutate(w):
        for e in range(4):
            _retag_expert(w, kit, naming, e, down, "FLOAT")

    path = kit.make(naming, mutate)
    res, mods = modules(path)
    moe = mods[n["moe"]]
    assert moe.scheme == "W8A8_DYNAMIC" and moe.moe.w2_scheme == "FLOAT"
    assert "moe-w2-unsupported" in codes(moe.findings)
    assert any("modelslim.py@07ee8929::get_moe_scheme" in f.message for f in moe.findings.errors)
    _, mods_va = modules(path, "vllm-ascend")
    assert "moe-w2-differs" in codes(mods_va[n["moe"]].findings, "warning")
    assert not mods_va[n["moe"]].findings.errors


def test_moe_naming_from_up_and_down_without_gate(kit, naming):
    # SGLang needs expert 0's gate *or* up entry plus its down entry
    n = kit.NAMES[naming]
    gate = n["projs"][0]

    def mutate(w):
        del w.types[f"{n['moe']}.0.{gate}.weight"]

    res, mods = modules(kit.make(naming, mutate))
    moe = mods[n["moe"]]
    assert "moe-no-expert0" not in codes(moe.findings) and moe.scheme == "W8A8_DYNAMIC"


def test_static_w8a8_experts_are_an_error(kit, naming):
    n = kit.NAMES[naming]
    glob = "*.experts.*"
    res, mods = modules(kit.make(naming, overrides={glob: "W8A8"}))
    moe = mods[n["moe"]]
    assert moe.scheme == "W8A8" and moe.method is None
    err = [f for f in moe.findings.errors if f.code == "static-moe"]
    assert len(err) == 1 and "no serving path" in err[0].message


def test_unknown_type_is_reported_not_guessed(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        kit.retag(w, n["dyn"], "W9A9_TURBO")

    res, mods = modules(kit.make(naming, mutate))
    m = mods[n["dyn"]]
    assert m.method is None and m.scheme == "W9A9_TURBO"
    err = [f for f in res.findings.errors if f.code == "unknown-type"]
    assert len(err) == 1 and "unknown quant type 'W9A9_TURBO'" in err[0].message


def test_unknown_expert_type(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        for e in range(4):
            for p in n["projs"]:
                kit.retag(w, n["expert"].format(e=e, p=p), "W3A3")

    res, mods = modules(kit.make(naming, mutate))
    assert "unknown-type" in codes(mods[n["moe"]].findings)


def test_known_type_without_sglang_linear_scheme(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        kit.retag(w, n["dyn"], "W8A16")

    res, mods = modules(kit.make(naming, mutate))
    assert "no-linear-scheme" in codes(mods[n["dyn"]].findings)
    _, vl = modules(kit.make(naming, mutate), "vllm-ascend")
    assert not vl[n["dyn"]].findings.errors          # not checked for vllm-ascend: a note
    assert any("not modelled" in note for note in vl[n["dyn"]].notes)


def test_quantized_router_is_flagged(kit, naming):
    n = kit.NAMES[naming]
    res, mods = modules(kit.make(naming, overrides={"*.gate": "W8A8_DYNAMIC"}))
    assert "quantized-router" in codes(mods[n["router"]].findings, "warning")


def test_w1_w3_w2_expert_naming_without_dsv4_rewrite(tmp_path):
    # A Mixtral / MiniMax-style checkpoint keeps w1/w2/w3 under HF names: the second naming applies.
    w = CheckpointWriter()
    rng = np.random.default_rng(0)
    for e in range(3):
        for p, shape in (("w1", (32, 64)), ("w3", (32, 64)), ("w2", (64, 32))):
            w.add_linear(f"model.layers.0.block_sparse_moe.experts.{e}.{p}",
                         rng.standard_normal(shape).astype(np.float32), "W8A8_DYNAMIC")
    path = w.save(tmp_path / "mixtral", config={"torch_dtype": "bfloat16"})
    res, mods = modules(path)
    moe = mods["model.layers.0.block_sparse_moe.experts"]
    assert moe.moe.naming == ("w1", "w3", "w2") and moe.scheme == "W8A8_DYNAMIC"
    assert not res.findings.errors


def test_expert_gaps_and_missing_projections(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        for name in [k for k in w.tensors if k.startswith(n["moe"] + ".2.")]:
            del w.tensors[name], w.types[name]                       # expert 2 gone entirely
        for name in [k for k in w.tensors if k.startswith(n["expert"].format(e=3, p=n["projs"][2]) + ".")]:
            del w.tensors[name], w.types[name]                       # expert 3 lacks its down projection

    res, mods = modules(kit.make(naming, mutate))
    c = codes(mods[n["moe"]].findings)
    assert {"moe-expert-gap", "moe-expert-missing"} <= c


def test_no_expert_zero(kit, naming):
    n = kit.NAMES[naming]

    def mutate(w):
        for name in [k for k in w.tensors if k.startswith(n["moe"] + ".0.")]:
            del w.tensors[name], w.types[name]

    res, mods = modules(kit.make(naming, mutate))
    assert "moe-no-expert0" in codes(mods[n["moe"]].findings)


def test_sglang_ascend_tp_runs_dsv4_routed_experts_unclamped_finding(kit):
    # serving row M1: SGLang's ascend_tp path (no --moe-a2a-backend) never applies swiglu_limit to the routed
    # experts; inspect says so for a DeepSeek-V4 checkpoint, with the source line; vllm-ascend clamps them
    from checkpoints import analyze
    from checkpoints.dispatch import LaunchConfig

    path = kit.make("v4", config={**kit.small_config("v4"), "swiglu_limit": 10.0})
    rep = analyze(path, read_data=False)
    hits = [f for f in rep.findings if f.code == "sglang-routed-unclamped"]
    assert hits and hits[0].severity == "warning" and "ascend.py@0dd459f6" in hits[0].message
    assert not [f for f in analyze(path, loader="vllm-ascend", read_data=False).findings
                if f.code == "sglang-routed-unclamped"]
    deepep = analyze(path, read_data=False, launch=LaunchConfig(engine="sglang", moe_a2a_backend="deepep"))
    assert not [f for f in deepep.findings if f.code == "sglang-routed-unclamped"]
    config = {k: v for k, v in kit.small_config("v4").items() if k != "swiglu_limit"}
    plain = analyze(kit.make("v4", config=config), read_data=False)     # no swiglu_limit: nothing to clamp
    assert not [f for f in plain.findings if f.code == "sglang-routed-unclamped"]
