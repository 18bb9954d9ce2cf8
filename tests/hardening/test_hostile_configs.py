"""Hostile model configs for ``w8a8 run`` and ``w8a8 inspect --verify``: every one a one-line error naming
the config key, what was expected and what came, before any forward or allocation — and a seeded
config.json fuzzer (1,000 mutations by default, ``W8A8_FUZZ_MUTATIONS`` for more) with a peak-RSS bound.

Before these checks: ``hidden_size`` 10^9 against 64-wide weights allocated gigabytes, ``num_hidden_layers``
10^9 was a KeyError, ``rms_norm_eps`` NaN and ``rope_theta`` 0 / -1 ran the forward into NaN and an error
blaming a Linear's input, ``tie_word_embeddings: "false"`` was read as true, a config.json nested 200,000
levels was a RecursionError."""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
from pathlib import Path

import pytest

from checkpoints import safe_files
from modelrun import config as qcfg
from modelrun import config_shapes
from modelrun.deepseek_v4 import config as dsv4_config
from modelrun.weights import FloatModel
from w8a8cli.main import main

DATA = Path(__file__).resolve().parents[1] / "modelrun" / "data"
DSV4 = Path(__file__).resolve().parents[1] / "modelrun" / "dsv4" / "data" / "float" / "dsv4-bf16"
MUTATIONS = int(os.environ.get("W8A8_FUZZ_MUTATIONS", "1000"))
RSS_BOUND_MB = 256


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture(scope="module")
def floats():
    """{name: (config dict, {tensor: shape})} of the shipped float models (shapes only, nothing copied)."""
    out = {}
    for name in ("qwen2-bf16", "dsv3-bf16"):
        m = FloatModel(DATA / "float" / name)
        out[name] = (m.config, {k: a.shape for k, a in m.arrays.items()})
    return out


def _check(cfg: dict, shapes: dict) -> None:
    config_shapes.check(qcfg.parse(cfg), shapes, "the weights", complete=True)


@pytest.mark.parametrize("model", ["qwen2-bf16", "dsv3-bf16"])
@pytest.mark.parametrize("change,message", [
    ({"hidden_size": 10 ** 9}, "'hidden_size' expected 64 (model.embed_tokens.weight is [256, 64]); got 1000000000"),
    ({"hidden_size": 68}, "'hidden_size' expected 64"),
    ({"vocab_size": 255}, "'vocab_size' expected 256 (model.embed_tokens.weight is [256, 64]); got 255"),
    ({"num_hidden_layers": 10 ** 9}, "'num_hidden_layers' expected 2 (the weights hold layers 0..1); got 1000000000"),
    ({"num_hidden_layers": 1}, "'num_hidden_layers' expected 2"),
    ({"intermediate_size": 127}, "'intermediate_size' expected 128"),
    ({"rms_norm_eps": float("nan")}, "'rms_norm_eps' must be a finite number > 0; got nan"),
    ({"rms_norm_eps": -1e-6}, "'rms_norm_eps' must be a finite number > 0; got -1e-06"),
    ({"rms_norm_eps": 0}, "'rms_norm_eps' must be a finite number > 0; got 0"),
    ({"rope_theta": 0}, "'rope_theta' must be a finite number > 0; got 0"),
    ({"rope_theta": -1}, "'rope_theta' must be a finite number > 0; got -1"),
    ({"rope_theta": float("inf")}, "'rope_theta' must be a finite number > 0; got inf"),
    ({"rope_theta": 10 ** 400}, "'rope_theta' must be a finite number > 0; got 1000000000"),
    ({"rope_theta": True}, "'rope_theta' must be a finite number > 0; got bool True"),
    ({"num_hidden_layers": True}, "'num_hidden_layers' must be a non-negative integer in [0, 2147483647]; got bool True"),
    ({"hidden_size": [64]}, "'hidden_size' must be a non-negative integer in [0, 2147483647]; got list [64]"),
    ({"hidden_size": {"v": 64}}, "'hidden_size' must be a non-negative integer in [0, 2147483647]; got dict"),
    ({"hidden_size": 64.0}, "[0, 2147483647]; got 64.0"),
    ({"hidden_size": 2 ** 63}, "'hidden_size' must be a non-negative integer in [0, 2147483647]; got 9223372036854775808"),
    ({"hidden_size": "6" * 1_000_000}, "got str '6666666666"),
    ({"tie_word_embeddings": "false"}, "'tie_word_embeddings' must be true or false; got str 'false'"),
    ({"architectures": "Qwen2ForCausalLM"}, "'architectures' must be a list of strings; got str"),
    ({"architectures": [["x"]]}, "'architectures' must be a list of strings"),
    ({"torch_dtype": ["bfloat16"]}, "'torch_dtype' must be one of"),
    ({"rope_scaling": {"type": "x" * 100_000}}, "'rope_scaling' dict {'type': 'xxxx"),
])
def test_hostile_value_is_one_line_naming_the_key(floats, model, change, message):
    cfg, shapes = floats[model]
    with pytest.raises(ValueError) as info:
        _check({**cfg, **change}, shapes)
    text = str(info.value)
    assert message in text and "\n" not in text and len(text) < 300, text


@pytest.mark.parametrize("change,message", [
    ({"kv_lora_rank": 31}, "'kv_lora_rank' + qk_rope_head_dim expected 40"),
    ({"n_routed_experts": 16}, "'n_routed_experts' expected 8 (model.layers.1.mlp.gate.weight is [8, 64]); got 16"),
    ({"moe_intermediate_size": 33}, "'moe_intermediate_size' expected 32"),
    ({"num_experts_per_tok": 9}, "'num_experts_per_tok' must be at most the experts of the kept groups (4); got 9"),
    ({"topk_group": 3}, "'topk_group' must be at most n_group (2); got 3"),
    ({"n_group": 8}, "'n_group' must leave at least 2 of the 8 n_routed_experts per group"),
    ({"qk_rope_head_dim": 0}, "'qk_rope_head_dim' must be an integer in [2, 2147483647]; got 0"),
    ({"first_k_dense_replace": 5}, "'first_k_dense_replace' must be at most num_hidden_layers (2); got 5"),
    ({"q_lora_rank": "32"}, "'q_lora_rank' must be a non-negative integer"),
    ({"norm_topk_prob": 1}, "'norm_topk_prob' must be true or false; got int 1"),
])
def test_deepseek_v3_keys_against_the_weights(floats, change, message):
    cfg, shapes = floats["dsv3-bf16"]
    with pytest.raises(ValueError) as info:
        _check({**cfg, **change}, shapes)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_missing_tensor_named_before_the_forward(floats):
    cfg, shapes = floats["qwen2-bf16"]
    shapes = {k: v for k, v in shapes.items() if k != "model.layers.1.mlp.up_proj.weight"}
    with pytest.raises(ValueError, match="no tensor model.layers.1.mlp.up_proj.weight, which config.json's qwen2"):
        _check(cfg, shapes)


def test_the_shipped_configs_pass(floats):
    for cfg, shapes in floats.values():
        _check(cfg, shapes)


@pytest.mark.parametrize("change,message", [
    ({"rms_norm_eps": float("nan")}, "'rms_norm_eps' must be a finite float, got nan"),
    ({"rms_norm_eps": -1.0}, "'rms_norm_eps' must be > 0, got -1.0"),
    ({"rope_theta": 0}, "'rope_theta' must be > 0, got 0.0"),
    ({"compress_rope_theta": -1}, "'compress_rope_theta' must be > 0, got -1.0"),
    ({"hc_eps": float("inf")}, "'hc_eps' must be a finite float, got inf"),
    ({"num_hidden_layers": 10 ** 12}, "'num_hidden_layers' must be int (at most 2147483647), got 1000000000000"),
    ({"rope_scaling": [1]}, "'rope_scaling' must be yarn (or absent), got list [1]"),
    ({"rope_scaling": {"type": "yarn", "factor": "16"}}, "'rope_scaling.factor' must be a finite float, got str '16'"),
    ({"rope_scaling": {"type": "yarn"}}, "'rope_scaling.factor' is missing"),
    ({"torch_dtype": {}}, "'torch_dtype' must be bfloat16 / float16 / float32, got dict {}"),
])
def test_deepseek_v4_values(change, message):
    cfg = json.loads((DSV4 / "config.json").read_text())
    with pytest.raises(ValueError) as info:
        dsv4_config.parse({**cfg, **change})
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def _dsv4_shapes() -> dict:
    from checkpoints.safetensors_io import MappedFile

    return {k: e.shape for k, e in MappedFile(DSV4 / "model.safetensors").entries.items()}


def test_deepseek_v4_shapes():
    cfg = json.loads((DSV4 / "config.json").read_text())
    shapes = _dsv4_shapes()
    config_shapes.check_dsv4(dsv4_config.parse(cfg), shapes)
    for change, message in [({"hidden_size": 10 ** 9}, "'hidden_size' expected 64 (embed.weight is [256, 64])"),
                            ({"num_hidden_layers": 5, "compress_ratios": [0] * 6}, "'num_hidden_layers' expected 4"),
                            ({"n_routed_experts": 4, "num_experts_per_tok": 2}, "'n_routed_experts' expected 8")]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            config_shapes.check_dsv4(dsv4_config.parse({**cfg, **change}), shapes)


def _alter(path: Path, **change) -> None:
    p = path / "config.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), **change}))


@pytest.mark.parametrize("change,message", [
    ({"hidden_size": 10 ** 9}, "'hidden_size' expected 64"),
    ({"rms_norm_eps": float("nan")}, "'rms_norm_eps' must be a finite number > 0; got nan"),
    ({"num_hidden_layers": 10 ** 9}, "'num_hidden_layers' expected 2"),
])
def test_w8a8_run_refuses_in_one_line(tmp_path, capsys, change, message):
    """Both the checkpoint's and the reference's config altered alike, so the reference check cannot catch it."""
    ck, ref = tmp_path / "ck", tmp_path / "ref"
    shutil.copytree(DATA / "msmodelslim" / "qwen2-w8a8-dynamic", ck)
    shutil.copytree(DATA / "float" / "qwen2-bf16", ref)
    _alter(ck, **change)
    _alter(ref, **change)
    rc = main(["run", str(ck), "--reference", str(ref), "--tokens", "1,2,3", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and message in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_inspect_verify_reference_config_refused(tmp_path, capsys):
    ref = tmp_path / "ref"
    shutil.copytree(DATA / "float" / "qwen2-bf16", ref)
    _alter(ref, rope_theta=-1)
    (tmp_path / "p.txt").write_text("hello world\n")
    rc = main(["inspect", str(DATA / "msmodelslim" / "qwen2-w8a8-dynamic"), "--verify", "--reference", str(ref),
               "--prompts", str(tmp_path / "p.txt")])
    out = capsys.readouterr()
    assert rc != 0 and "'rope_theta' must be a finite number > 0; got -1" in out.err + out.out, out


def test_deeply_nested_reference_config(tmp_path):
    ref = tmp_path / "ref"
    shutil.copytree(DATA / "float" / "qwen2-bf16", ref)
    (ref / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="config.json must be JSON nested at most 64 levels deep; got 200000"):
        FloatModel(ref)


# -- the config.json fuzzer ------------------------------------------------------------------------------

_VALUES = [0, 1, -1, 7, 2 ** 31, 2 ** 63, 10 ** 30, 1e308, -0.0, float("nan"), float("inf"), float("-inf"), None, True,
           False, "", "64", "x" * 10_000, [], [64], {}, {"a": [1, {"b": 2}]}, "\u202e\x00"]


def _mutate(rng: random.Random, cfg: dict):
    """One mutation of a config dict: a value swapped (type, huge, NaN, nested), a key dropped, the whole
    document replaced, or the text truncated / nested / given a duplicate key (returned as bytes)."""
    kind = rng.randrange(10)
    out = dict(cfg)
    if kind <= 5:
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(list(out))
            out[key] = rng.choice(_VALUES) if rng.random() < 0.8 else json.loads("[" * 60 + "]" * 60)
        return out
    if kind == 6:
        out.pop(rng.choice(list(out)))
        return out
    text = json.dumps(cfg).encode()
    if kind == 7:
        return text[:rng.randrange(len(text))]
    if kind == 8:
        return text[:-1] + b', "hidden_size": 7}'          # a duplicate key (the last one wins in json)
    return rng.choice([b"[" * 100_000 + b"]" * 100_000, b"5", b"null", b"\xff\xfe", b'"' + b"a" * 50_000 + b'"'])


def _one_line(exc: BaseException) -> bool:
    return isinstance(exc, ValueError) and "\n" not in str(exc) and len(str(exc)) < 1000


def test_config_json_fuzz(tmp_path, floats):
    """Mutated config.json files through the reader, the parser and the shape check of every family:
    a clean config or a one-line ValueError, never another exception; a sample of the accepted ones runs
    the float forward (inspect --verify's capture) to the end."""
    from modelrun.capture import capture

    rng = random.Random(2026)
    dsv4 = json.loads((DSV4 / "config.json").read_text())
    dsv4_shapes = None
    refs = {}
    for name in floats:
        refs[name] = tmp_path / name
        shutil.copytree(DATA / "float" / name, refs[name])
    start = _rss_mb()
    outcomes = {"clean": 0, "error": 0, "forward": 0}
    for i in range(MUTATIONS):
        name = ("qwen2-bf16", "dsv3-bf16", "dsv4")[i % 3]
        base = dsv4 if name == "dsv4" else floats[name][0]
        mutated = _mutate(rng, base)
        try:
            if name == "dsv4":
                if isinstance(mutated, bytes):      # the checkpoint reader's JSON rules (size, depth, UTF-8)
                    mutated = safe_files.loads_json(mutated, "config.json", "config.json")
                dsv4_shapes = dsv4_shapes or _dsv4_shapes()
                config_shapes.check_dsv4(dsv4_config.parse(mutated), dsv4_shapes)
            else:
                path = refs[name] / "config.json"
                path.write_bytes(mutated if isinstance(mutated, bytes) else json.dumps(mutated).encode())
                model = FloatModel(refs[name])
                config_shapes.check(qcfg.parse(model.config), floats[name][1], "the weights", complete=True)
                if outcomes["forward"] < 3 and isinstance(mutated, dict):
                    capture(refs[name], [[1, 2, 3]])
                    outcomes["forward"] += 1
            outcomes["clean"] += 1
        except Exception as exc:  # noqa: BLE001 - the point: which exceptions come out
            assert _one_line(exc), f"mutation {i} of {name}: {type(exc).__name__}: {str(exc)[:500]}"
            outcomes["error"] += 1
    assert outcomes["clean"] and outcomes["error"] and outcomes["forward"], outcomes
    assert _rss_mb() - start < RSS_BOUND_MB
