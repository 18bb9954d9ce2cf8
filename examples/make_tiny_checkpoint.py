"""Write a small synthetic msModelSlim W8A8 checkpoint to try ``w8a8 inspect`` without a 300 GB download.

Usage::

    python examples/make_tiny_checkpoint.py OUT_DIR [--naming v4|v3] [--layers 2] [--experts 8]
        [--hidden 256] [--moe-inter 128] [--mtp 0] [--dtype bfloat16] [--shard-mb N] [--reference DIR]
    w8a8 inspect OUT_DIR
    w8a8 inspect OUT_DIR --verify [--reference DIR]

``--naming v4`` writes DeepSeek-V4 native names (``layers.{L}.ffn.experts.{e}.w1``) quantized with the
DeepSeek-V4-Flash W8A8 recipe; ``--naming v3`` writes DeepSeek-V3 HF names
(``model.layers.{L}.mlp.experts.{e}.gate_proj``) with static W8A8 attention and dynamic MLP / MoE.
Weights are random; the quantization follows msModelSlim's export formulas (w8a8.offline).
"""

from __future__ import annotations

import argparse
import sys

from checkpoints import synthetic_checkpoint, tiny_config


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="output directory (must not exist unless --overwrite)")
    p.add_argument("--naming", choices=("v4", "v3"), default="v4")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--moe-inter", type=int, default=128)
    p.add_argument("--mtp", type=int, default=0, help="multi-token-prediction layers")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16",
                   help="model dtype (float16 writes static deq_scale as int64)")
    p.add_argument("--shard-mb", type=float, help="cut the weights into shards of at most this many MB")
    p.add_argument("--reference", help="also write the float weights here (for --verify --reference)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    config = tiny_config(args.naming, layers=args.layers, experts=args.experts, hidden=args.hidden,
                         moe_inter=args.moe_inter, mtp=args.mtp, dtype=args.dtype)
    shard = int(args.shard_mb * 1e6) if args.shard_mb else None
    try:
        path = synthetic_checkpoint(args.out, config, seed=args.seed, shard_bytes=shard,
                                    reference_dir=args.reference, overwrite=args.overwrite)
    except (FileExistsError, ValueError) as exc:
        print(f"make_tiny_checkpoint: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({args.naming} names); now: w8a8 inspect {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
