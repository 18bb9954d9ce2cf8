"""Write the dumps the verdict tests read, with msprobe's own writer (run only where msprobe is installed).

    PYTHONPATH=. /work/venvs/msprobe/bin/python tests/replay/make_verdict_fixtures.py [OUT]
                                               # default: tests/replay/samples/verdicts

Needs ``mindstudio-probe`` (26.2.0 was used: it installs on CPU with no torch of its own) and ``torch==2.13.0``
CPU in the same environment, plus this repository importable (``PYTHONPATH=.``) for the golden the stand-ins
call. Not run by the test suite: its outputs are committed under ``samples/verdicts/``.

Another model and other shapes than ``make_fixtures.py``: a three-layer dense model, T = 5 tokens, hidden 64,
projections of 48 columns, and a grouped SwiGLU requant per layer (int32 accumulators of 3 expert groups,
``group_index`` [2, 1, 1]: 4 of the 5 rows are specified, row 4 is unwritten). The stand-ins are registered with
``PrecisionDebugger.register_custom_api(fake, name, "NPU")`` so msprobe names and lays them out as torch_npu
ops. Each calls the w8a8 golden under the Ascend A3 defaults, except the **planted kernels that ignore an
optional input** (the call gives it; the stand-in computes as if it were not given):

=================================  =================  ==========================================
call                               input ignored      its values
=================================  =================  ==========================================
NPU.npu_dynamic_quant.0            smooth_scales      small: uniform 0.995 .. 1.005
NPU.npu_quant_matmul.0             bias (bf16)        small: std 0.01 (outputs ~ 1)
NPU.npu_dequant_swiglu_quant.0     bias (int32)       small: std 3 (accumulators ~ 4e4)
NPU.npu_dynamic_quant.1            smooth_scales      large: uniform 0.1 .. 10
NPU.npu_quant_matmul.1             bias (bf16)        large: std 50
NPU.npu_dequant_swiglu_quant.1     bias (int32)       large: std 3000
=================================  =================  ==========================================

Layer 2 is clean (no optional input). Dumps written (``level: mix``):

* ``planted-tensor/`` — ``task: tensor``: every planted call and its inputs saved.
* ``clean-md5/`` — the same model with **no plant**, ``task: statistics``, ``summary_mode: md5``: nothing
  disagrees; the tensors of most calls are not saved (a statistics dump).
* ``planted-md5/`` — the planted model, ``summary_mode: md5`` (CRCs of the planted outputs differ).
* ``stats-planted/`` — ``task: statistics`` (Max/Min/Mean/Norm only), no plant but one: layer 2's
  ``npu_dynamic_quant`` (no smooth scales) divides amax by 127.5 (``scale_divisor="half_range"``), so its
  dumped scale Max breaks the exact invariant "scale Max = golden scale of max(|x.Max|, |x.Min|)".
* ``list-one-call/`` — ``task: tensor`` with ``"list": ["NPU.npu_dynamic_quant.1.forward"]``: what the
  crc-mismatch hint tells the user to configure; msprobe dumps that call and no other (the test checks it).

Edits after writing, so that no machine path remains: ``proc<pid>`` -> ``rank0``, ``dump_data_dir``
replaced, stack.json's script path -> ``/srv/app/serve.py`` (``make_fixtures._clean``).
"""

from __future__ import annotations

import json
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import w8a8  # noqa: E402
from make_fixtures import _clean, run_msprobe, to_np, to_torch  # noqa: E402
from w8a8 import dtypes as _dt  # noqa: E402

T, H, N, HS, G = 5, 64, 48, 64, 3
GROUP_INDEX = [2, 1, 1]
DROPS = {("dynamic_quant", 0): "smooth_scales", ("quant_matmul", 0): "bias", ("dequant_swiglu_quant", 0): "bias",
         ("dynamic_quant", 1): "smooth_scales", ("quant_matmul", 1): "bias", ("dequant_swiglu_quant", 1): "bias"}
STATS_PLANT = {("dynamic_quant", 2): {"scale_divisor": "half_range"}}
ROOT = Path(__file__).resolve().parent


class StandIns:
    """Golden-backed stand-ins; ``drops`` names the optional input a call ignores, ``changes`` a Numerics change."""

    def __init__(self, drops: dict, changes: dict | None = None):
        self.drops, self.changes, self.counts = drops, changes or {}, {}

    def _plan(self, op: str):
        n = self.counts.get(op, 0)
        self.counts[op] = n + 1
        change = self.changes.get((op, n))
        return self.drops.get((op, n)), (w8a8.ASCEND.replace(**change) if change else w8a8.ASCEND)

    def module(self):
        fake = types.ModuleType("fake_torch_npu")

        def npu_dynamic_quant(input, *, smooth_scales=None, group_index=None, dst_type=None):
            drop, num = self._plan("dynamic_quant")
            kw = {"smooth_scales": to_np(smooth_scales), "group_index": to_np(group_index)}
            if drop:
                kw[drop] = None
            y, s = w8a8.dynamic_quant(to_np(input), dst_type="int8", numerics=num, **kw)
            return to_torch(y), to_torch(s)

        def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
            drop, num = self._plan("quant_matmul")
            kw = {"offset": to_np(offset), "pertoken_scale": to_np(pertoken_scale), "bias": to_np(bias)}
            if drop:
                kw[drop] = None
            y = w8a8.quant_matmul(to_np(x1), to_np(x2), to_np(scale), numerics=num,
                                  output_dtype=str(output_dtype).replace("torch.", ""), **kw)
            return to_torch(y)

        def npu_dequant_swiglu_quant(x, *, weight_scale=None, activation_scale=None, bias=None, quant_scale=None,
                                     quant_offset=None, group_index=None, activate_left=False, quant_mode=0):
            drop, num = self._plan("dequant_swiglu_quant")
            kw = {"weight_scale": to_np(weight_scale), "activation_scale": to_np(activation_scale),
                  "bias": to_np(bias), "quant_scale": to_np(quant_scale), "quant_offset": to_np(quant_offset),
                  "group_index": to_np(group_index)}
            if drop:
                kw[drop] = None
            y, s = w8a8.dequant_swiglu_quant(to_np(x), activate_left=activate_left, quant_mode=quant_mode,
                                             numerics=num, **kw)
            return to_torch(y), to_torch(s)

        for fn in (npu_dynamic_quant, npu_quant_matmul, npu_dequant_swiglu_quant):
            setattr(fake, fn.__name__, fn)
        return fake


def inputs(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    bf = lambda a: to_torch(np.asarray(a, np.float32).astype(_dt.bfloat16))  # noqa: E731
    layers = []
    for smooth, bias_std, acc_bias_std in (((0.995, 1.005), 0.01, 3.0), ((0.1, 10.0), 50.0, 3000.0),
                                           (None, None, None)):
        w = rng.integers(-127, 128, (H, N), dtype=np.int8)
        layers.append({
            "x": bf(rng.standard_normal((T, H)) * 2),
            "smooth": None if smooth is None else bf(rng.uniform(*smooth, H)),
            "w": torch.from_numpy(w), "w_scale": torch.from_numpy(rng.uniform(2e-4, 8e-4, N).astype(np.float32)),
            "bias": None if bias_std is None else bf(rng.standard_normal(N) * bias_std),
            "acc": torch.from_numpy(rng.integers(-40000, 40000, (T, 2 * HS)).astype(np.int32)),
            "acc_ws": torch.from_numpy(rng.uniform(1e-4, 1e-3, (G, 2 * HS)).astype(np.float32)),
            "acc_as": torch.from_numpy(rng.uniform(1e-3, 1e-2, T).astype(np.float32)),
            "acc_bias": None if acc_bias_std is None else torch.from_numpy(
                np.rint(rng.standard_normal((G, 2 * HS)) * acc_bias_std).astype(np.int32)),
        })
    return {"layers": layers, "group_index": torch.tensor(GROUP_INDEX, dtype=torch.int64)}


def build_model(fake, data):
    class Proj(torch.nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, x):
            p = self.p
            kw = {} if p["smooth"] is None else {"smooth_scales": p["smooth"]}
            x_q, s = fake.npu_dynamic_quant(x, **kw)
            kw = {} if p["bias"] is None else {"bias": p["bias"]}
            return fake.npu_quant_matmul(x_q, p["w"], p["w_scale"], pertoken_scale=s, output_dtype=torch.bfloat16,
                                         **kw)

    class Experts(torch.nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, acc):
            p = self.p
            kw = {} if p["acc_bias"] is None else {"bias": p["acc_bias"]}
            return fake.npu_dequant_swiglu_quant(acc, weight_scale=p["acc_ws"], activation_scale=p["acc_as"],
                                                 group_index=data["group_index"], activate_left=True, quant_mode=1,
                                                 **kw)

    class Layer(torch.nn.Module):
        def __init__(self, p):
            super().__init__()
            self.self_attn = torch.nn.Module()
            self.self_attn.qkv_proj = Proj(p)
            self.mlp = torch.nn.Module()
            self.mlp.experts = Experts(p)

        def forward(self, p):
            return self.self_attn.qkv_proj(p["x"]), self.mlp.experts(p["acc"])

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Layer(p) for p in data["layers"]])

        def forward(self):
            return [layer(p) for layer, p in zip(self.layers, data["layers"])]

    class CausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Model()

        def forward(self):
            return self.model()

    return CausalLM()


def dump(tmp: Path, out: Path, name: str, config: dict, drops: dict, changes: dict | None, seed: int) -> Path:
    data = inputs(seed)

    def body(debugger, cls):
        fake = StandIns(drops, changes).module()
        for op in ("npu_dynamic_quant", "npu_quant_matmul", "npu_dequant_swiglu_quant"):
            cls.register_custom_api(fake, op, "NPU")
        model = build_model(fake, data)
        debugger.start(model=model)
        model()
        debugger.stop()
        debugger.step()

    folder = run_msprobe(tmp / name, config, body)
    return _clean(folder, out / name, script=str(Path(__file__).resolve()))


def main(out: Path) -> None:
    seed = 24
    tensor = {"task": "tensor", "level": "mix", "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    md5 = {"task": "statistics", "level": "mix",
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "md5"}}
    statistics = {"task": "statistics", "level": "mix",
                  "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    one = {"task": "tensor", "level": "mix",
           "tensor": {"scope": [], "list": ["NPU.npu_dynamic_quant.1.forward"], "data_mode": ["all"]}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dump(tmp, out, "planted-tensor", tensor, DROPS, None, seed)
        dump(tmp, out, "clean-md5", md5, {}, None, seed)
        dump(tmp, out, "planted-md5", md5, DROPS, None, seed)
        dump(tmp, out, "stats-planted", statistics, {}, STATS_PLANT, seed)
        dump(tmp, out, "list-one-call", one, DROPS, None, seed)
    (out / "GENERATED.json").write_text(json.dumps({
        "generator": "tests/replay/make_verdict_fixtures.py", "seed": seed,
        "command": "PYTHONPATH=. /work/venvs/msprobe/bin/python tests/replay/make_verdict_fixtures.py",
        "optional_input_ignored": {f"{op}.{n}": inp for (op, n), inp in DROPS.items()},
        "stats_planted": {f"{op}.{n}": c for (op, n), c in STATS_PLANT.items()},
        "msprobe": __import__("importlib.metadata").metadata.version("mindstudio-probe"),
        "torch": torch.__version__}, indent=1) + "\n")
    print(f"wrote {out} (seed {seed})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "samples" / "verdicts")
