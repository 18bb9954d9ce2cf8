"""PTQ vs QAT on a long greedy chain: an earlier prototype's experiment, rerun on the project's QAT grid.

A tiny "language model" learns a next-token table (the next token is a fixed random function of the
previous two; V = 64 tokens) with a 2-layer MLP (embedding 32 -> hidden H = 224 -> V). Then:

* fp32 — the trained model;
* PTQ — the same weights quantized after training: INT4 group-wise, G = 32, the golden's symmetric
  ``absmax_sym`` scheme with fp16 scales (``s = amax / 7``, ``q = clamp(rint(w / s), -8, 7)``: the
  seed's ``fake_int4``; ``--int4-scheme gptq_sym`` takes GPTQ's ``s = amax / 7.5`` instead, a finer
  grid that loses less here);
* QAT — fine-tuned for 2000 steps on the fake-quantized forward
  (:func:`backends.torch_cpu.qat.fake_quant`: the golden's grid bit for bit, straight-through
  gradient).

Each is scored on single-step accuracy over all V^2 contexts, and on 200 random starts decoded
greedily for 256 steps: the mean length of the correct prefix, and the share of chains correct all
the way. Optional rows do the same for MXFP4 and NVFP4 (``--formats``).

Run: ``python examples/qat_long_chain.py`` (about 2-3 minutes on 2 cores for the three INT4 rows;
``--formats int4 mxfp4 nvfp4`` adds about a minute and a half per format). The numbers depend on the torch
build and the thread count; the point is the shape: PTQ keeps a single-step accuracy of 90-99 % and
loses long chains (one run here: INT4 85 % of chains correct, NVFP4 15 %, MXFP4 4 %), QAT recovers
them (INT4 100 %, NVFP4 99 %, MXFP4 31 %).
"""

from __future__ import annotations

import argparse
import time

import torch

from backends.torch_cpu.qat import fake_quant

V, H, G, EMB = 64, 224, 32, 32
FORMATS = {
    "int4": {"fmt": "int4", "group_size": G, "scheme": "absmax_sym", "scale_dtype": "float16"},
    "mxfp4": {"fmt": "mxfp4"},
    "nvfp4": {"fmt": "nvfp4"},
}
LABELS = {"int4": "INT4 (G=32, {scheme})", "mxfp4": "MXFP4 (E2M1, E8M0/32)", "nvfp4": "NVFP4 (E2M1, E4M3/16)"}


class Tiny(torch.nn.Module):
    """Embedding of the two context tokens -> ReLU MLP -> logits; ``quant`` fake-quantizes both Linear
    weights (biases and the embedding stay fp32, as in the prototype)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, EMB)
        self.fc1 = torch.nn.Linear(2 * EMB, H)
        self.fc2 = torch.nn.Linear(H, V)

    def forward(self, ctx: torch.Tensor, quant: dict | None = None) -> torch.Tensor:
        h = self.emb(ctx).flatten(1)
        w1, w2 = self.fc1.weight, self.fc2.weight
        if quant is not None:
            w1, w2 = fake_quant(w1, **quant), fake_quant(w2, **quant)
        h = torch.relu(torch.nn.functional.linear(h, w1, self.fc1.bias))
        return torch.nn.functional.linear(h, w2, self.fc2.bias)


def train(model: Tiny, ctx, target, steps: int, lr: float, quant: dict | None = None) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(ctx, quant), target)
        opt.zero_grad()
        loss.backward()
        opt.step()


@torch.no_grad()
def evaluate(model: Tiny, table, ctx, target, quant: dict | None = None, *, starts: int = 200, steps: int = 256):
    """(single-step accuracy, mean correct-prefix length, share of fully correct chains)."""
    acc = (model(ctx, quant).argmax(-1) == target).float().mean().item()
    seq = torch.randint(0, V, (starts, 2), generator=torch.Generator().manual_seed(1))
    ok = torch.ones(starts, dtype=torch.bool)
    length = torch.zeros(starts)
    if quant is not None:  # quantize once for the whole decode (the checkpoint's weights)
        frozen = Tiny()
        frozen.load_state_dict(model.state_dict())
        frozen.fc1.weight.copy_(fake_quant(model.fc1.weight, **quant))
        frozen.fc2.weight.copy_(fake_quant(model.fc2.weight, **quant))
        model, quant = frozen, None
    for _ in range(steps):  # greedy: one wrong token derails the rest of the chain
        nxt = model(seq[:, -2:]).argmax(-1)
        ok &= nxt == table[seq[:, -2], seq[:, -1]]
        length += ok.float()
        seq = torch.cat([seq, nxt[:, None]], 1)
    return acc, length.mean().item(), ok.float().mean().item()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=["int4"], choices=tuple(FORMATS))
    parser.add_argument("--int4-scheme", default="absmax_sym", choices=("absmax_sym", "gptq_sym"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--base-steps", type=int, default=3000)
    parser.add_argument("--qat-steps", type=int, default=2000)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    table = torch.randint(0, V, (V, V))  # the "teacher": next token = table[prev2, prev1]
    ctx = torch.cartesian_prod(torch.arange(V), torch.arange(V))
    target = table[ctx[:, 0], ctx[:, 1]]

    t0 = time.perf_counter()
    base = Tiny()
    train(base, ctx, target, args.base_steps, 3e-3)
    rows = [("fp32", base, None)]
    for name in args.formats:
        quant = FORMATS[name] if name != "int4" else {**FORMATS[name], "scheme": args.int4_scheme}
        qat = Tiny()
        qat.load_state_dict(base.state_dict())
        train(qat, ctx, target, args.qat_steps, 1e-3, quant)
        label = LABELS[name].format(scheme=args.int4_scheme)
        rows += [(f"{label} PTQ", base, quant), (f"{label} QAT", qat, quant)]
    for label, model, quant in rows:
        acc, run, full = evaluate(model, table, ctx, target, quant)
        print(f"{label:32s} single-step accuracy {acc:6.1%}   mean correct prefix {run:5.1f} / 256   "
              f"full chain correct {full:4.0%}")
    print(f"({time.perf_counter() - t0:.0f} s on {args.threads} threads)")


if __name__ == "__main__":
    main()
