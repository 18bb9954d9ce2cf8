"""Write the replay test dumps with msprobe's own writer (run only where msprobe is installed).

    python tests/replay/make_fixtures.py [OUT]      # default: tests/replay/samples/made

Needs ``mindstudio-probe`` (msprobe 26.2.0 was used) and ``torch==2.13.0`` CPU in the same environment,
plus this repository (``pip install --no-deps -e .``) for the golden the stand-ins call. Not run by
the test suite: its outputs are committed under ``samples/made/`` and the tests read those.

The ops are CPU stand-ins named like the torch_npu ops (``fake.npu_dynamic_quant`` ...) registered
with ``PrecisionDebugger.register_custom_api(fake, name, "NPU")``, so msprobe names and lays them out
exactly as it does torch_npu ops (``NPU.npu_quant_matmul.0.forward``, ``...kwargs.pertoken_scale.pt``,
nested lists for the grouped matmul). Each stand-in converts torch <-> NumPy (bf16 through an int16
view) and calls the w8a8 golden — under the Ascend defaults, except for three **planted device-like
deviations**, each a :class:`w8a8.Numerics` change applied to one call:

1. ``NPU.npu_moe_init_routing_v2.0`` (layer 0 MoE): the scale of the preceding ``npu_dynamic_quant`` is
   dropped, so ``init_routing_v2(quant_mode=1)`` quantizes again — and with another kernel's rounding
   than the one the A3 host tiling selects for this shape: the selected (column-tiled) kernel computes
   fp32 -> fp16 truncation then half-away; the stand-in computes the record's main-path half-even
   (``variants="fixed"``). Its input has exact ``.5`` ties, where the two formulas differ.
2. ``NPU.npu_dynamic_quant.2`` (layer 1 o_proj): another kernel's scale formula. The A3 tiling selects
   a single-row / double-buffer kernel for these shapes, which writes ``amax * fp32(1/127)``; the
   stand-in writes the basic kernel's ``1 / (127 / amax)`` (``variants="fixed"``).
3. ``NPU.npu_dynamic_quant.3`` (layer 1 shared expert): tie rounding half away from zero
   (``round_mode="half_away"``); its input rows have amax 127 and ``k + 0.5`` values (exact ties).

Every other stand-in computes what the golden computes under :data:`w8a8.ASCEND` (A3, the kernel
variant its host tiling selects for each call). The first version of these dumps (before the golden
modelled kernel variants) planted ``routing_quant_round="trunc_fp16_half_away"`` and
``scale_out="amax_mul_rcp"``: exactly what the selected kernels compute for these shapes, so they are
no deviation any more, and the plants were changed to the non-selected kernels' formulas.

The generator checks that each planted call really differs from the golden's default for its inputs
(it picks the first seed where all three do). Dumps written (``level: mix``, so ``construct.json``
gives each call's module):

* ``planted-tensor-mix/`` — ``task: tensor``. Layer 0's o_proj weight is cast to "NZ" as the serving
  code does: msprobe (since 5ac4b4ea) writes its record with ``data_name`` but saves no file and
  writes null statistics. msprobe cannot see an NZ format on CPU, so this one record is edited after
  writing to exactly that form (file removed, Max/Min/Mean/Norm null). ``checkpoint/`` is the
  msModelSlim checkpoint of that layer (written by this repository's ``CheckpointWriter``) that
  ``--checkpoint`` finds the weight in.
* ``planted-statistics-md5-mix/`` — the same forward, ``task: statistics`` with ``summary_mode: md5``.
* ``raised-mid-step/`` — ``task: tensor``, level L1: ``npu_dynamic_quant``, then an
  ``npu_quant_matmul`` that raises (caught by the script), then ``npu_swiglu``. msprobe records the
  raising call without output and nothing after it.

Edits after writing, so that no machine path remains (as for the bundled samples): ``proc<pid>`` is
renamed ``rank0``; ``dump_data_dir`` is replaced; stack.json's script path becomes
``/srv/app/serve.py``; the JSON is re-serialised with msprobe's ``indent=1``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch

import w8a8
from w8a8 import dtypes as _dt
from w8a8.offline import quantize_weight_per_channel

T, H, E, K_TOP, I = 8, 16, 4, 2, 32
N_OPROJ = 24
PLANTS = {("moe_init_routing_v2", 0): {"variants": "fixed"},
          ("dynamic_quant", 2): {"variants": "fixed"},
          ("dynamic_quant", 3): {"round_mode": "half_away"}}
ROOT = Path(__file__).resolve().parent


# ------------------------------------------------------------------------------------------------
# torch <-> numpy


def to_np(t):
    if t is None:
        return None
    if isinstance(t, (list, tuple)):
        return [to_np(v) for v in t]
    if not isinstance(t, torch.Tensor):
        return t
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_dt.bfloat16).copy()
    return t.numpy().copy()


def to_torch(a):
    if a is None:
        return None
    if isinstance(a, (list, tuple)):
        return [to_torch(v) for v in a]
    a = np.ascontiguousarray(a)
    if a.dtype == _dt.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def dtype_name(d):
    return None if d is None else str(d).replace("torch.", "")


# ------------------------------------------------------------------------------------------------
# stand-ins


class StandIns:
    """Golden-backed stand-ins named like torch_npu ops; one call per op may be planted (PLANTS)."""

    def __init__(self, plants: dict):
        self.plants = plants
        self.counts: dict[str, int] = {}

    def _numerics(self, op: str):
        n = self.counts.get(op, 0)
        self.counts[op] = n + 1
        change = self.plants.get((op, n))
        return w8a8.ASCEND.replace(**change) if change else w8a8.ASCEND

    def module(self):
        fake = types.ModuleType("fake_torch_npu")

        def npu_dynamic_quant(input, *, smooth_scales=None, group_index=None, dst_type=None):
            num = self._numerics("dynamic_quant")
            y, s = w8a8.dynamic_quant(to_np(input), smooth_scales=to_np(smooth_scales), group_index=to_np(group_index),
                                      dst_type="int8", numerics=num)
            return to_torch(y), to_torch(s)

        def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
            num = self._numerics("quant_matmul")
            if x1.shape[-1] != x2.shape[0]:
                raise RuntimeError(f"npu_quant_matmul: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} do not chain")
            y = w8a8.quant_matmul(to_np(x1), to_np(x2), to_np(scale), offset=to_np(offset),
                                  pertoken_scale=to_np(pertoken_scale), bias=to_np(bias),
                                  output_dtype=dtype_name(output_dtype), numerics=num)
            return to_torch(y)

        def npu_grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, per_token_scale=None, group_list=None,
                               split_item=0, group_type=None, group_list_type=0, act_type=0, output_dtype=None):
            num = self._numerics("grouped_matmul")
            y = w8a8.grouped_matmul(to_np(x), to_np(weight), bias=to_np(bias), scale=to_np(scale),
                                    offset=to_np(offset), per_token_scale=to_np(per_token_scale),
                                    group_list=to_np(group_list), group_list_type=group_list_type, act_type=act_type,
                                    output_dtype=dtype_name(output_dtype), split_item=split_item,
                                    group_type=group_type, numerics=num)
            return [to_torch(v) for v in y]

        def npu_swiglu(input, dim=-1):
            return to_torch(w8a8.swiglu(to_np(input), dim, numerics=self._numerics("swiglu")))

        def npu_dequant_swiglu_quant(x, *, weight_scale=None, activation_scale=None, bias=None, quant_scale=None,
                                     quant_offset=None, group_index=None, activate_left=False, quant_mode=0):
            y, s = w8a8.dequant_swiglu_quant(to_np(x), weight_scale=to_np(weight_scale),
                                             activation_scale=to_np(activation_scale), bias=to_np(bias),
                                             quant_scale=to_np(quant_scale), quant_offset=to_np(quant_offset),
                                             group_index=to_np(group_index), activate_left=activate_left,
                                             quant_mode=quant_mode, numerics=self._numerics("dequant_swiglu_quant"))
            return to_torch(y), to_torch(s)

        def npu_moe_gating_top_k_softmax(x, finished=None, k=1):
            out = w8a8.moe_gating_top_k_softmax(to_np(x), to_np(finished), k,
                                                numerics=self._numerics("moe_gating_top_k_softmax"))
            return tuple(to_torch(v) for v in out)

        def npu_moe_init_routing_v2(x, expert_idx, *, scale=None, offset=None, active_num=-1, expert_capacity=-1,
                                    expert_num=-1, drop_pad_mode=0, expert_tokens_num_type=0,
                                    expert_tokens_num_flag=False, quant_mode=0, active_expert_range=None,
                                    row_idx_type=0):
            out = w8a8.moe_init_routing_v2(to_np(x), to_np(expert_idx), scale=to_np(scale), offset=to_np(offset),
                                           active_num=active_num, expert_capacity=expert_capacity,
                                           expert_num=expert_num, drop_pad_mode=drop_pad_mode,
                                           expert_tokens_num_type=expert_tokens_num_type,
                                           expert_tokens_num_flag=expert_tokens_num_flag, quant_mode=quant_mode,
                                           active_expert_range=active_expert_range, row_idx_type=row_idx_type,
                                           numerics=self._numerics("moe_init_routing_v2"))
            return tuple(to_torch(v) for v in out)

        def npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                                     export_for_source_row, drop_pad_mode=0):
            y = w8a8.moe_finalize_routing(*(to_np(v) for v in (expanded_permuted_rows, skip1, skip2, bias, scales,
                                                               expanded_src_to_dst_row, export_for_source_row)),
                                          drop_pad_mode=drop_pad_mode, numerics=self._numerics("moe_finalize_routing"))
            return to_torch(y)

        for fn in (npu_dynamic_quant, npu_quant_matmul, npu_grouped_matmul, npu_swiglu, npu_dequant_swiglu_quant,
                   npu_moe_gating_top_k_softmax, npu_moe_init_routing_v2, npu_moe_finalize_routing):
            setattr(fake, fn.__name__, fn)
        return fake


# ------------------------------------------------------------------------------------------------
# the model


def inputs(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    bf = lambda a: to_torch(np.asarray(a, np.float32).astype(_dt.bfloat16))  # noqa: E731
    ties = np.zeros((T, H), np.float32)
    ties[:, 0] = 127.0                                    # amax 127: inv = 127/127 = 1, codes = x exactly
    ties[:, 1:] = (np.arange(1, H, dtype=np.float32) - 8.0) + 0.5   # -6.5 ... 7.5: exact .5 ties
    ties[::2, 1:] *= -1
    moe_x = (rng.standard_normal((T, H)) * 3).astype(np.float32)
    moe_x[: T // 2] = ties[: T // 2]                      # half the MoE tokens carry exact ties
    w_o0 = rng.standard_normal((N_OPROJ, H)).astype(np.float32) * 0.05
    w_o1 = rng.standard_normal((N_OPROJ, H)).astype(np.float32) * 0.05
    w_sh = rng.standard_normal((N_OPROJ, H)).astype(np.float32) * 0.05
    return {
        "x0": bf(rng.standard_normal((T, H)) * 2), "moe_x": bf(moe_x), "router": bf(rng.standard_normal((T, E))),
        "x2": bf(rng.standard_normal((T, H)) * 2), "tie_x": bf(ties),
        "w_o0": w_o0, "w_o1": w_o1, "w_sh": w_sh,
        "w13": torch.from_numpy(rng.integers(-127, 128, (E, H, 2 * I), dtype=np.int8)),
        "s13": bf(rng.uniform(1e-3, 1e-2, (E, 2 * I))),
        "w2": torch.from_numpy(rng.integers(-127, 128, (E, I, H), dtype=np.int8)),
        "s2": bf(rng.uniform(1e-3, 1e-2, (E, H))),
    }


def serving_linear(w_float: np.ndarray):
    """msModelSlim W8A8_DYNAMIC weight [N, K] int8 + fp32 scale [N, 1] -> the serving layout:
    int8 [K, N] (transposed; NZ on a device) and a bf16 [N] scale (bf16 model)."""
    q, scale, _ = quantize_weight_per_channel(w_float)
    kn = torch.from_numpy(np.ascontiguousarray(q.T))
    s = to_torch(np.asarray(scale, np.float32).reshape(-1).astype(_dt.bfloat16))
    return kn, s


def build_model(fake, data):
    class QuantLinear(torch.nn.Module):
        def __init__(self, w_float):
            super().__init__()
            self.weight, self.weight_scale = serving_linear(w_float)   # plain attributes: not dumped by modules

        def forward(self, x):
            x_q, s = fake.npu_dynamic_quant(x)
            return fake.npu_quant_matmul(x_q, self.weight, self.weight_scale, pertoken_scale=s,
                                         output_dtype=torch.bfloat16)

    class Attention(torch.nn.Module):
        def __init__(self, w):
            super().__init__()
            self.o_proj = QuantLinear(w)

        def forward(self, x):
            return self.o_proj(x)

    class FusedMoE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w13, self.s13, self.w2, self.s2 = data["w13"], data["s13"], data["w2"], data["s2"]

        def forward(self, x, router_logits):
            topk_w, topk_ids, _ = fake.npu_moe_gating_top_k_softmax(router_logits, None, k=K_TOP)
            _x_q, _scale = fake.npu_dynamic_quant(x)    # its scale is dropped below: routing quantizes again
            x_e, row_idx, counts, s_e = fake.npu_moe_init_routing_v2(
                x, topk_ids, active_num=T * K_TOP, expert_num=E, expert_tokens_num_type=1,
                expert_tokens_num_flag=True, active_expert_range=[0, E], quant_mode=1)
            g = fake.npu_grouped_matmul([x_e], [self.w13], scale=[self.s13], per_token_scale=[s_e], group_list=counts,
                                        split_item=2, group_type=0, group_list_type=1, output_dtype=torch.bfloat16)[0]
            a_q, a_s = fake.npu_dequant_swiglu_quant(g, activate_left=True, quant_mode=1)
            o = fake.npu_grouped_matmul([a_q], [self.w2], scale=[self.s2], per_token_scale=[a_s], group_list=counts,
                                        split_item=2, group_type=0, group_list_type=1, output_dtype=torch.bfloat16)[0]
            return fake.npu_moe_finalize_routing(o, None, None, None, topk_w, row_idx, topk_ids, drop_pad_mode=2)

    class MLP(torch.nn.Module):
        def __init__(self, shared_w=None):
            super().__init__()
            self.experts = FusedMoE() if shared_w is None else None
            self.shared_expert = QuantLinear(shared_w) if shared_w is not None else None

        def forward(self, x, router_logits=None):
            return self.experts(x, router_logits) if self.experts is not None else self.shared_expert(x)

    class Layer(torch.nn.Module):
        def __init__(self, w_o, shared_w=None):
            super().__init__()
            self.self_attn = Attention(w_o)
            self.mlp = MLP(shared_w)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Layer(data["w_o0"]), Layer(data["w_o1"], data["w_sh"])])

        def forward(self, x0, moe_x, router, x2, tie_x):
            a0 = self.layers[0].self_attn(x0)
            m0 = self.layers[0].mlp(moe_x, router)
            a1 = self.layers[1].self_attn(x2)
            s1 = self.layers[1].mlp(tie_x)
            return a0, m0, a1, s1

    class CausalLM(torch.nn.Module):      # module paths "model.layers.N...", as in the checkpoint
        def __init__(self):
            super().__init__()
            self.model = Model()

        def forward(self, *args):
            return self.model(*args)

    return CausalLM()


def planted_differs(data) -> bool:
    """True when every planted deviation changes its call's output under the golden's default."""
    m = lambda t: to_np(t)  # noqa: E731
    ids = w8a8.moe_gating_top_k_softmax(m(data["router"]), None, K_TOP)[1]
    kw = dict(active_num=T * K_TOP, expert_num=E, expert_tokens_num_type=1, expert_tokens_num_flag=True,
              active_expert_range=[0, E], quant_mode=1)
    a = w8a8.moe_init_routing_v2(m(data["moe_x"]), ids, **kw)[0]
    b = w8a8.moe_init_routing_v2(m(data["moe_x"]), ids, **kw,
                                 numerics=w8a8.ASCEND.replace(**PLANTS[("moe_init_routing_v2", 0)]))[0]
    s = w8a8.dynamic_quant(m(data["x2"]))[1]
    s2 = w8a8.dynamic_quant(m(data["x2"]), numerics=w8a8.ASCEND.replace(**PLANTS[("dynamic_quant", 2)]))[1]
    c = w8a8.dynamic_quant(m(data["tie_x"]))[0]
    c2 = w8a8.dynamic_quant(m(data["tie_x"]), numerics=w8a8.ASCEND.replace(**PLANTS[("dynamic_quant", 3)]))[0]
    return bool((a != b).any() and (s != s2).any() and (c != c2).any())


# ------------------------------------------------------------------------------------------------
# running msprobe


def run_msprobe(work: Path, config: dict, body) -> Path:
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._instance = None   # a fresh debugger per dump (msprobe keeps a singleton)
    work.mkdir(parents=True, exist_ok=True)
    cfg = {"dump_path": str(work / "out"), "rank": [], "step": [], **config}
    (work / "config.json").write_text(json.dumps(cfg))
    debugger = PrecisionDebugger(config_path=str(work / "config.json"))
    body(debugger, PrecisionDebugger)
    found = sorted((work / "out").glob("step0/*/dump.json"))
    if len(found) != 1:
        raise RuntimeError(f"msprobe wrote {len(found)} dump.json files under {work / 'out'}")
    return found[0].parent


def _clean(folder: Path, dest: Path, *, script: str) -> Path:
    """Copy a msprobe rank folder to ``dest/step0/rank0`` with the machine paths removed."""
    target = dest / "step0" / "rank0"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(folder, target)
    dump = json.loads((target / "dump.json").read_text())
    if dump.get("dump_data_dir"):
        dump["dump_data_dir"] = "/data/msprobe_dump/step0/rank0/dump_tensor_data"
    (target / "dump.json").write_text(json.dumps(dump, indent=1))
    stack_path = target / "stack.json"
    if stack_path.exists():
        site = str(Path(torch.__file__).resolve().parents[1])
        text = stack_path.read_text().replace(script, "/srv/app/serve.py").replace(
            site, "/usr/local/lib/python3.11/site-packages")
        (target / "stack.json").write_text(text)
        json.loads((target / "stack.json").read_text())
    for extra in target.glob("*.log"):
        extra.unlink()
    return target


def make_nz(target: Path, entry: str, index: int) -> None:
    """Turn input ``index`` of ``entry`` into what msprobe writes for a FRACTAL_NZ tensor (module docstring)."""
    path = target / "dump.json"
    dump = json.loads(path.read_text())
    rec = dump["data"][entry]["input_args"][index]
    for key in ("Max", "Min", "Mean", "Norm"):
        rec[key] = None
    rec.pop("md5", None)
    if rec.get("data_name"):
        f = target / "dump_tensor_data" / rec["data_name"]
        if f.exists():
            f.unlink()
    path.write_text(json.dumps(dump, indent=1))


def make_checkpoint(out: Path, data) -> None:
    from checkpoints.writer import CheckpointWriter

    writer = CheckpointWriter("bfloat16")
    writer.add_linear("model.layers.0.self_attn.o_proj", data["w_o0"], "W8A8_DYNAMIC")
    if out.exists():
        shutil.rmtree(out)
    writer.save(out, config={"architectures": ["TinyForCausalLM"], "torch_dtype": "bfloat16",
                             "hidden_size": H, "num_hidden_layers": 2})


def main(out: Path) -> None:
    seed = next(s for s in range(100) if planted_differs(inputs(s)))
    script = str(Path(__file__).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dumps = {}
        for name, config in (
                ("planted-tensor-mix", {"task": "tensor", "level": "mix",
                                        "tensor": {"scope": [], "list": [], "data_mode": ["all"],
                                                   "summary_mode": "statistics"}}),
                ("planted-statistics-md5-mix", {"task": "statistics", "level": "mix",
                                                "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                                               "summary_mode": "md5"}})):
            data = inputs(seed)

            def body(debugger, cls, data=data):
                fake = StandIns(PLANTS).module()
                for op in [n for n in dir(fake) if n.startswith("npu_")]:
                    cls.register_custom_api(fake, op, "NPU")
                model = build_model(fake, data)
                debugger.start(model=model)
                model(data["x0"], data["moe_x"], data["router"], data["x2"], data["tie_x"])
                debugger.stop()
                debugger.step()

            folder = run_msprobe(tmp / name, config, body)
            dumps[name] = _clean(folder, out / name, script=script)
        make_nz(dumps["planted-tensor-mix"], "NPU.npu_quant_matmul.0.forward", 1)
        make_nz(dumps["planted-statistics-md5-mix"], "NPU.npu_quant_matmul.0.forward", 1)
        make_checkpoint(out / "checkpoint", inputs(seed))

        def raising(debugger, cls):
            fake = StandIns({}).module()
            for op in ("npu_dynamic_quant", "npu_quant_matmul", "npu_swiglu"):
                cls.register_custom_api(fake, op, "NPU")
            data = inputs(seed)
            debugger.start()
            x_q, s = fake.npu_dynamic_quant(data["x0"])
            try:
                fake.npu_quant_matmul(x_q, x_q, data["s2"][0], pertoken_scale=s, output_dtype=torch.bfloat16)
            except RuntimeError:
                pass
            fake.npu_swiglu(data["x2"])
            debugger.stop()
            debugger.step()

        folder = run_msprobe(tmp / "raised", {"task": "tensor", "level": "L1",
                                              "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}, raising)
        _clean(folder, out / "raised-mid-step", script=script)
    (out / "GENERATED.json").write_text(json.dumps({
        "generator": "tests/replay/make_fixtures.py", "seed": seed, "planted": {f"{op}.{n}": change for (op, n), change
                                                                              in PLANTS.items()},
        "msprobe": __import__("importlib.metadata").metadata.version("mindstudio-probe"),
        "torch": torch.__version__}, indent=1) + "\n")
    print(f"wrote {out} (seed {seed})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "samples" / "made")
