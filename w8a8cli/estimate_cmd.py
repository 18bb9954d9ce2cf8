"""``w8a8 estimate``: weight bytes, devices, nodes and the decode lower bound of a model per format.

For each format (BF16, FP8 128x128 blocks, INT8 per-channel, INT4 groups of
32, MXFP4, NVFP4) the weight bytes including scales, the minimum number of devices with a share of
memory reserved for KV cache and activations, the 8-device nodes that makes, and the time to read
one token's weights at a given parallel degree. The model comes as parameter counts (--total,
--active) or as a DeepSeek-V3/V4-style config.json (--config). See deployment/estimate.py for the
formulas and the sources of the built-in device numbers.

Example: w8a8 estimate --total 1e12 --active 32e9 --device h200
"""

from __future__ import annotations

import json
import sys

from . import validate

HELP = "deployment calculator: weight bytes, devices, nodes and decode lower bound per low-bit format"
DESCRIPTION = __doc__


def add_arguments(parser) -> None:
    from deployment.estimate import DEVICES, FORMAT_NAMES

    model = parser.add_argument_group("model (counts or a config)")
    model.add_argument("--total", type=float, help="total parameters (> 0), e.g. 1e12")
    model.add_argument("--active", type=float,
                       help="parameters read per token (> 0, <= --total), e.g. 32e9")
    model.add_argument("--config", metavar="CONFIG_JSON",
                       help="a DeepSeek-V3/V4-style config.json (or a preset: deepseek-v3, deepseek-v4-flash): "
                            "counts and exact per-tensor scale bytes")
    model.add_argument("--include-mtp", action="store_true", help="with --config: count MTP (next-n) layers too")
    dev = parser.add_argument_group("device")
    dev.add_argument("--device", help=f"built-in device: {', '.join(DEVICES)} (default h200; without --device, "
                                      "--memory and --bandwidth describe a custom device)")
    dev.add_argument("--memory", type=float, metavar="GB",
                     help="device memory in GB (1e9 bytes, > 0); with --device it overrides the built-in value")
    dev.add_argument("--bandwidth", type=float, metavar="TB/s",
                     help="memory bandwidth in TB/s (1e12 bytes/s, > 0)")
    parser.add_argument("--reserve", type=float, default=0.3,
                        help="fraction of device memory kept for KV cache and activations, in [0, 1) (default 0.3)")
    parser.add_argument("--parallel", type=int, default=8,
                        help="devices reading the weights in decode (>= 1; default 8)")
    parser.add_argument("--per-node", type=int, default=8, help="devices per node (>= 1; default 8)")
    parser.add_argument("--row-length", type=int, default=4096,
                        help="K for the INT8 per-channel scale overhead with --total (>= 1; default 4096)")
    parser.add_argument("--formats", default=",".join(FORMAT_NAMES),
                        help=f"comma-separated subset of {','.join(FORMAT_NAMES)} (default: all)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of {format, weight_bytes, devices, nodes, decode_ms}")


def check(args) -> None:
    """``--config`` that exists must be a readable regular file (a FIFO would block; a missing one is the
    library's "cannot read"). The numbers and their relations (finite, > 0, active <= total, reserve in
    [0, 1)) are checked by :mod:`deployment.estimate` before anything is computed."""
    import os

    from checkpoints.models import PRESETS

    if args.config is not None and args.config not in PRESETS and os.path.lexists(args.config):
        validate.in_file(args.config, "--config", f"a config.json or a preset ({', '.join(PRESETS)})")


def run(args) -> int:
    from deployment.estimate import estimate, get_device, model_from_config, model_from_counts

    check(args)

    try:
        if args.config is not None:
            if args.total is not None or args.active is not None:
                raise ValueError("estimate: give either --config or --total/--active, not both")
            model = model_from_config(args.config, include_mtp=args.include_mtp)
        else:
            if args.include_mtp:
                raise ValueError("estimate: --include-mtp needs --config")
            if args.total is None or args.active is None:
                raise ValueError("estimate: give --total and --active (parameter counts), or --config")
            model = model_from_counts(args.total, args.active)
        name = args.device
        if name is None and args.memory is None and args.bandwidth is None:
            name = "h200"
        device = get_device(name, memory_gb=args.memory, bandwidth_tbs=args.bandwidth)
        formats = [f.strip() for f in args.formats.split(",") if f.strip()]
        rows = estimate(model, device, formats=formats, reserve=args.reserve, parallel=args.parallel,
                        devices_per_node=args.per_node, row_length=args.row_length)
    except ValueError as exc:
        print(f"w8a8 {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([r.as_json() for r in rows], indent=2))
        return 0
    head = (f"model: {model.total:.4g} parameters, {model.active:.4g} active ({model.source}); device: {device.name}, "
            f"{device.memory / 1e9:g} GB, {device.bandwidth / 1e12:g} TB/s; reserve {args.reserve:.0%} for KV and "
            f"activations; decode over {args.parallel} devices")
    cols = ("format", "bytes/param", "weights", "devices", f"{args.per_node}-device nodes", "decode >= ms/token")
    table = [(r.format + f"  ({r.label})", f"{r.weight_bytes / model.total:.4f}", f"{r.weight_bytes / 1e12:.2f} TB",
              str(r.devices), str(r.nodes), f"{r.decode_ms:.2f}") for r in rows]
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table
    except ModuleNotFoundError:
        print(head)
        print(" | ".join(cols))
        for row in table:
            print(" | ".join(row))
        return 0
    t = Table(title=escape(head), title_justify="left")
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i == 0 else "right")
    for row in table:
        t.add_row(*(escape(c) for c in row))
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(t)
    return 0
