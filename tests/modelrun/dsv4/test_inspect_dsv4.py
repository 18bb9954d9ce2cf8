"""``w8a8 inspect`` on the DeepSeek-V4 checkpoints msModelSlim 26.1.0 wrote with its own Flash W8A8 recipe
(``data/msmodelslim/``, made by ``make_checkpoints.py``; the recipe is msModelSlim's file, byte for byte).

* every module's scheme, read from the description and resolved as SGLang does, against the recipe: one
  test per glob of its include / exclude lists (each glob must select modules, and each selected module
  must have the scheme the recipe's step gives it);
* the SGLang names after its DeepSeek-V4 remap;
* FLOAT modules labelled with their stored dtype (the saver writes the compressor projections and the
  head in fp32);
* the hyper-connection tensors against the QuaRot rotation the saver wrote: every ``hc_*_fn`` rotated
  except ``mtp.0.hc_head_fn`` (msModelSlim's rotate map lists ``hc_head_fn`` only globally) — an error
  finding, and its mixes far off on the rotated stream.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from checkpoints import analyze, dsv4_rotation
from checkpoints.recipes import checkpoint_linear_types, diff, load_recipe
from w8a8cli.main import main

DATA = Path(__file__).parent / "data"
CKPTS = ["dsv4-w8a8", "dsv4-mtp-w8a8"]
RECIPE = DATA / "recipes" / "deepseek_v4_flash_w8a8.yaml"


@pytest.fixture(scope="module", params=CKPTS)
def report(request):
    return analyze(DATA / "msmodelslim" / request.param)


def _globs():
    rec = load_recipe(str(RECIPE))
    out = []
    for stage in rec.stages:
        for rule in stage:
            out += [(g, "include", rule) for g in rule.include] + [(g, "exclude", rule) for g in rule.exclude]
    return out


GLOBS = _globs()


def test_the_recipe_is_msmodelslims_own():
    import yaml

    data = yaml.safe_load(RECIPE.read_text())
    assert data["metadata"]["config_id"] == "deepseek_v4_flash_w8a8"
    assert [s["type"] for s in data["spec"]["process"]] == ["quarot", "flex_smooth_quant", "linear_quant",
                                                            "linear_quant"]
    assert len(GLOBS) == 10          # *attn* minus 7, *ffn* minus *gate


def test_no_module_differs_from_the_recipe(report):
    types = checkpoint_linear_types(report.resolution.checkpoint)
    assert diff(load_recipe(str(RECIPE)), types) == []
    assert report.ok, [str(f) for f in report.findings.errors]


@pytest.mark.parametrize("glob,kind,rule", GLOBS, ids=[f"{k}:{g}" for g, k, _ in GLOBS])
def test_each_glob(report, glob, kind, rule):
    schemes = {r.module.name: r.module.scheme for r in report.modules}
    linears = checkpoint_linear_types(report.resolution.checkpoint)
    hit = sorted(m for m in linears if fnmatchcase(m, glob))
    assert hit, f"{glob} selects no module"
    for m in hit:
        expected = "W8A8_DYNAMIC" if kind == "include" and rule.takes(m) else "FLOAT" if kind == "exclude" else None
        if expected is None:        # an include glob's module that an exclude glob of the step takes back
            assert any(fnmatchcase(m, g) for g in rule.exclude) and linears[m] == "FLOAT"
            continue
        assert linears[m] == expected, m
        resolved = schemes.get(_resolved_name(m))
        assert resolved == expected, (m, resolved)


def _resolved_name(m: str) -> str:
    """The module inspect reports for Linear ``m``: routed experts as one MoE, shared w1 + w3 packed."""
    if ".experts." in m and ".shared_experts." not in m:
        return m.split(".experts.")[0] + ".experts"
    if ".shared_experts." in m and m.endswith((".w1", ".w3")):
        return m.rsplit(".", 1)[0] + ".gate_up_proj"
    return m


def test_sglang_names_after_the_remap(report):
    serving = {r.module.name: r.module.serving_name for r in report.modules}
    assert serving["layers.1.attn.compressor.wkv"] == "model.layers.1.self_attn.compressor.wkv"
    assert serving["layers.1.attn.indexer.wq_b"] == "model.layers.1.self_attn.indexer.wq_b"
    assert serving["layers.0.ffn.experts"] == "model.layers.0.mlp.experts"
    assert serving["head"] == "lm_head"


def test_float_modules_labelled_with_their_stored_dtype(report):
    fam = {r.module.name: r.op_family for r in report.modules}
    assert fam["layers.1.attn.compressor.wkv"] == "matmul (float32)"     # the saver wrote fp32
    assert fam["head"] == "matmul (float32)"
    assert fam["layers.1.attn.wo_a"] == "matmul (bfloat16)"


def _ref(name):
    from w8a8cli.inspect_cmd import _reference_arrays

    return _reference_arrays(DATA / "float" / name)


def test_hc_fn_against_the_quarot_rotation():
    rep = analyze(DATA / "msmodelslim" / "dsv4-mtp-w8a8")
    found, rows = dsv4_rotation.check(rep.resolution, _ref("dsv4-mtp-bf16"))
    status = {r["tensor"]: r["status"] for r in rows}
    assert len(status) == 2 * 5 + 2            # hc_attn_fn / hc_ffn_fn of 4 layers + MTP, two hc_head_fn
    assert {n for n, s in status.items() if s != "rotated"} == {"mtp.0.hc_head_fn"}
    assert status["mtp.0.hc_head_fn"] == "unrotated"
    by = {r["tensor"]: r for r in rows}
    assert by["mtp.0.hc_head_fn"]["mixes_error"] > 0.5
    assert max(r["mixes_error"] for n, r in by.items() if n != "mtp.0.hc_head_fn") < 1e-3
    assert [(f.where, f.code) for f in found.errors] == [("mtp.0.hc_head_fn", "hc-unrotated")]
    assert {f.where for f in found if f.code == "hc-dtype"} == {"mtp.0.hc_head_fn", "mtp.0.hc_head_base",
                                                               "mtp.0.hc_head_scale"}


def test_no_mtp_no_finding():
    rep = analyze(DATA / "msmodelslim" / "dsv4-w8a8")
    found, rows = dsv4_rotation.check(rep.resolution, _ref("dsv4-bf16"))
    assert rows and all(r["status"] == "rotated" for r in rows) and not found


def test_cli_reports_the_unrotated_mtp_head(capsys):
    rc = main(["inspect", str(DATA / "msmodelslim" / "dsv4-mtp-w8a8"), "--reference",
               str(DATA / "float" / "dsv4-mtp-bf16"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert [f["where"] for f in out["dsv4_hc"]["findings"] if f["severity"] == "error"] == ["mtp.0.hc_head_fn"]
