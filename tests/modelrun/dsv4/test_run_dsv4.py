"""``w8a8 run`` on the DeepSeek-V4 checkpoints msModelSlim 26.1.0 wrote (``data/msmodelslim/``), against the
float model it quantized (``data/prequant/``: its FLOAT tensors plus each Linear's weight as msModelSlim
held it after QuaRot and flex-smooth, recorded in-process by ``make_checkpoints.py``).

* the CLI with ``--backend numpy --backend torch-cpu`` on a 162-token prompt: exit 0, no module beyond
  its analytic bound, torch-cpu bit for bit with the golden on every quantized module, every attention
  variant present (the ratio-128 layer has an entry), hash and score layers both routed;
* the report's layer-0 figures (SQNR and max error of ``attn.wq_a``, ``attn.wkv``, ``attn.wq_b``)
  computed again here without ``modelrun``: the embedding, the first hyper-connection collapse, the
  RMSNorms written out in plain torch from the official code's formulas, the quantized Linears by the
  golden ``w8a8.w8a8_dynamic_linear`` on the checkpoint's tensors, the float reference from the
  safetensors files, SQNR in float64.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

import w8a8
from w8a8 import dtypes as _dt
from w8a8cli.main import main

DATA = Path(__file__).parent / "data"
CKPT, REF = DATA / "msmodelslim" / "dsv4-mtp-w8a8", DATA / "prequant" / "dsv4-mtp-w8a8"
PROMPTS = DATA / "prompts.txt"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["run", str(CKPT), "--reference", str(REF), "--prompts", str(PROMPTS), "--backend", "numpy",
                   "--backend", "torch-cpu", "--json"])
    return rc, json.loads(buf.getvalue())


@pytest.mark.slow
def test_run_exit_0_within_bounds_and_bitwise(report):
    rc, out = report
    assert rc == 0
    assert out["family"] == "deepseek_v4" and out["tokens"] >= 128
    assert out["first_exceeding"] is None
    lin = [m for m in out["modules"] if m["kind"] == "linear"]
    assert len(lin) == 5 * 3 + 2 * 1 + 5 * 2          # wq_a, wq_b, wkv per block, 2 indexers, shared gate_up + w2
    assert all(m["exceed"] == 0 and float(m["worst_ratio"]) < 1 for m in lin)
    assert len([m for m in out["modules"] if m["kind"] == "moe"]) == 5
    assert all(m["backends"]["torch-cpu"]["bitwise"] for m in out["modules"])
    assert out["backend_summary"]["torch-cpu"]["bitwise"]
    assert 0 < out["logits"]["rel_l2"] < 0.2 and out["logits"]["top1"] > 0.8
    d = out["dsv4"]
    variants = {a["layer"]: (a["ratio"], a["entries"]) for a in d["attention"]}
    n = out["tokens"]
    assert variants == {"layers.0.attn": (0, 0), "layers.1.attn": (4, n // 4), "layers.2.attn": (128, n // 128),
                        "layers.3.attn": (4, n // 4), "mtp.0.attn": (0, 0)}
    assert d["routing"]["hash"]["layers"] == ["layers.0.ffn.experts", "layers.1.ffn.experts"]
    assert d["routing"]["hash"]["changed"] == 0                      # tid2eid fixes the experts
    assert d["routing"]["score"]["tokens"] == 3 * n
    assert [s["layer"] for s in d["streams"]] == ["layers.0", "layers.1", "layers.2", "layers.3", "mtp.0"]
    assert d["mtp_logits"] is not None
    assert {r["reading"].split(" ")[0] for r in d["readings_effect"]} >= {"shared_expert_clamp", "router_logits",
                                                                          "route_scale_at", "sinkhorn", "preset"}
    assert out["per_layer"][0] == {"layer": None, "rel_l2": 0.0, "top1": 1.0, "topk": 1.0, "k": 5,
                                   "positions": n}


# -- the independent computation ----------------------------------------------------------------------
def _bf16(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(_dt.bfloat16)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The official RMSNorm: fp32, ``(w * x * rsqrt(mean x^2 + eps))`` cast once."""
    xf = x.float()
    return (w.float() * (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps))).to(x.dtype)


def _figures(y: np.ndarray, x: np.ndarray, w_ref: np.ndarray) -> tuple[float, float]:
    ref = x.astype(np.float32).astype(np.float64) @ w_ref.astype(np.float32).astype(np.float64).T
    yf = y.astype(np.float32).astype(np.float64)
    return 10 * np.log10(np.sum(ref ** 2) / np.sum((yf - ref) ** 2)), float(np.abs(yf - ref).max())


@pytest.mark.slow
def test_layer0_figures_reproduced_without_modelrun(report):
    from tokenizers import Tokenizer

    _, out = report
    cfg = json.loads((CKPT / "config.json").read_text())
    ck = {}
    for f in CKPT.glob("quant_model_weights-*.safetensors"):
        ck.update(load_file(str(f)))
    ref = load_file(str(REF / "model.safetensors"))
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16) \
        if a.dtype == _dt.bfloat16 else torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    ids = Tokenizer.from_file(str(CKPT / "tokenizer.json")).encode(PROMPTS.read_text().strip()).ids
    eps, hc = cfg["rms_norm_eps"], cfg["hc_mult"]
    emb = t(ck["embed.weight"])[torch.tensor(ids)]                              # [S, D] bf16
    streams = emb[:, None, :].expand(-1, hc, -1)                               # [S, hc, D]
    xf = streams.reshape(len(ids), -1).float()
    fn, base, scale = (t(ck[f"layers.0.hc_attn_{k}"]).float() for k in ("fn", "base", "scale"))
    mixes = (xf @ fn.T) * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    pre = torch.sigmoid(mixes[:, :hc] * scale[0] + base[:hc]) + cfg["hc_eps"]
    x = (pre[:, :, None] * streams.float()).sum(1).to(torch.bfloat16)
    x = _rms(x, t(ck["layers.0.attn_norm.weight"]), eps)
    xn = _bf16(x)
    rows = {m["name"]: m for m in out["modules"]}
    got = {}
    for name in ("layers.0.attn.wq_a", "layers.0.attn.wkv"):
        y = w8a8.w8a8_dynamic_linear(xn, ck[name + ".weight"], ck[name + ".weight_scale"])
        got[name] = (y, _figures(y, xn, ref[name + ".weight"]))
    q_res = _bf16(_rms(t(got["layers.0.attn.wq_a"][0]), t(ck["layers.0.attn.q_norm.weight"]), eps))
    name = "layers.0.attn.wq_b"
    y = w8a8.w8a8_dynamic_linear(q_res, ck[name + ".weight"], ck[name + ".weight_scale"])
    got[name] = (y, _figures(y, q_res, ref[name + ".weight"]))
    for name, (_, (sqnr, maxerr)) in got.items():
        assert rows[name]["tokens"] == len(ids)
        assert rows[name]["sqnr_db"] == pytest.approx(sqnr, rel=1e-12), name
        assert rows[name]["max_error"] == pytest.approx(maxerr, rel=1e-12), name
