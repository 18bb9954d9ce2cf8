"""``w8a8 explain OP --shape ... --dtype ... [--platform ...] [--opt KEY=VALUE ...]``: which kernel the
host tiling picks for a call, its tiling key, its numerics in order of operations and their sources.

The selection is :mod:`w8a8.variants` (pure functions of the facts the tiling reads); this module only
turns the command line into those facts and prints the :class:`~w8a8.variants.Variant`.
"""

from __future__ import annotations

import json
import math

import numpy as np

from w8a8 import dtypes
from w8a8.numerics import Numerics

_NO_VALUES = Numerics(nan_policy="ieee")   # stand-ins carry no values to check

HELP = "explain which kernel variant the Ascend host tiling picks for an op call, and what it computes"

DESCRIPTION = """\
Print the kernel variant the host tiling of --platform (default ascend910_93, A3) picks for one call:
the tiling key, the kernel, why it was selected, its arithmetic in order of operations, the Numerics
fields it decides and the source lines (repo:path:lines@commit) of the rule and the formulas.

  w8a8 explain dynamic_quant --shape 16x4096 --dtype bfloat16       # single-row kernel, key 100
  w8a8 explain dynamic_quant --shape 64x20000 --dtype bfloat16      # large-shape kernel, key 6
  w8a8 explain moe_finalize_routing --shape 4096x7168 --dtype bfloat16 --opt k=6 --opt bias=1

What --shape means and which --opt keys exist, per op (defaults in brackets):
"""


def _int(v: str) -> int:
    return int(v)


def _bool(v: str) -> bool:
    if v.lower() in ("1", "true", "yes", "y"):
        return True
    if v.lower() in ("0", "false", "no", "n"):
        return False
    raise ValueError(f"a boolean (1/0, true/false); got {v!r}")


def _shape(v: str) -> tuple[int, ...]:
    return tuple(int(d) for d in v.lower().split("x"))


# op -> (what --shape is, {opt: (parser, default)}, builder(dims, dtype, opts, platform) -> Variant)
def _dynamic_quant(dims, dtype, o, p, asymmetric=False):
    from w8a8.variants import dynamic_quant as v

    _need(dims, 2, "x [..., H] (at least 2 dims)")
    return v.select(math.prod(dims[:-1]), dims[-1], x_dtype=dtype, dst=o["dst"], smooth=o["smooth"],
                    groups=o["groups"] or None, asymmetric=asymmetric, platform=p)


def _swiglu(dims, dtype, o, p):
    from w8a8.variants import swiglu as v

    return v.swiglu(dtype, platform=p)


def _dsq(dims, dtype, o, p):
    from w8a8.variants import swiglu as v

    _need(dims, 2, "x [T, 2H]")
    qs = o["quant_scale_dtype"] or None
    return v.dequant_swiglu_quant(x_dtype=dtype, tokens=dims[0], groups=o["groups"] or None,
                                  quant_mode=o["quant_mode"], quant_scale_dtype=qs,
                                  quant_scale_size=(1 if o["scalar"] else dims[1] // 2) if qs else 0,
                                  bias_dtype=o["bias_dtype"] or None, scalar=o["scalar"], platform=p)


def _finalize(dims, dtype, o, p):
    from w8a8.variants import moe as v

    _need(dims, 2, "N x H (tokens x hidden)")
    return v.finalize(dtype=dtype, scale_dtype=o["scale_dtype"] or None, n=dims[0], k=o["k"], h=dims[1],
                      bias=o["bias"], skip1=o["skip1"], skip2=o["skip2"], drop_pad_mode=o["drop_pad_mode"], platform=p)


def _gating(dims, dtype, o, p):
    from w8a8.variants import moe as v

    _need(dims, 2, "N x E (tokens x experts)")
    return v.gating_softmax(e=dims[-1], k=o["k"], dtype=dtype, platform=p)


def _routing(dims, dtype, o, p):
    from w8a8.variants import moe as v

    _need(dims, 2, "N x H (tokens x hidden)")
    e = o["expert_num"]
    return v.init_routing_v2(n=dims[0], k=o["k"], h=dims[1], x_dtype=dtype, quant_mode=o["quant_mode"],
                             scale_shape=o["scale_shape"] or None, offset=o["offset"], start=o["start"],
                             end=o["end"] if o["end"] else e, expert_num=e, count_type=o["count_type"],
                             row_idx_type=o["row_idx_type"], platform=p)


def _qmm(dims, dtype, o, p):
    from w8a8.variants import matmul as v

    _need(dims, 1, "M[xKxN]")
    return v.quant_matmul(m=dims[0], out=dtype, pertoken=o["pertoken"], per_tensor=o["per_tensor"], platform=p)


def _gmm(dims, dtype, o, p):
    from w8a8.variants import matmul as v

    return v.grouped_matmul(out=dtype, pertoken=o["pertoken"], platform=p)


def _wqbmm(dims, dtype, o, p):
    from w8a8.variants import matmul as v

    _need(dims, 3, "M x K x N")
    m, k, n = dims[:3]
    return v.weight_quant_batchmatmul(m=m, k=k, n=n, x_dtype=dtype, weight=o["weight"], trans_b=o["trans_b"],
                                      per=o["per"], group=o["group"] or None, offset=o["offset"],
                                      int64_scale=o["int64_scale"], quant_out=o["quant_out"], platform=p)


def _quantize(dims, dtype, o, p):
    from w8a8.variants import matmul as v

    return v.quantize(div_mode=o["div_mode"], platform=p)


OPS = {
    "dynamic_quant": ("x [..., H] (rows = product of all but the last)",
                      {"dst": (str, "int8"), "smooth": (_bool, False), "groups": (_int, 0)}, _dynamic_quant),
    "dynamic_quant_asymmetric": ("x [..., H]", {"dst": (str, "int8"), "smooth": (_bool, False), "groups": (_int, 0)},
                                 lambda d, t, o, p: _dynamic_quant(d, t, o, p, asymmetric=True)),
    "swiglu": ("x (only the dtype matters)", {}, _swiglu),
    "dequant_swiglu_quant": ("x [T, 2H]; --dtype is x's (int32, bfloat16, float16)",
                             {"groups": (_int, 0), "quant_mode": (_int, 1), "quant_scale_dtype": (str, ""),
                              "bias_dtype": (str, ""), "scalar": (_bool, False)}, _dsq),
    "moe_finalize_routing": ("N x H (tokens x hidden); --dtype is the rows'",
                             {"k": (_int, 1), "bias": (_bool, False), "skip1": (_bool, False), "skip2": (_bool, False),
                              "scale_dtype": (str, ""), "drop_pad_mode": (_int, 0)}, _finalize),
    "moe_gating_top_k_softmax": ("N x E (tokens x experts)", {"k": (_int, 1)}, _gating),
    "moe_init_routing_v2": ("N x H (tokens x hidden)",
                            {"k": (_int, 1), "quant_mode": (_int, -1), "expert_num": (_int, 256), "start": (_int, 0),
                             "end": (_int, 0), "count_type": (_int, 0), "row_idx_type": (_int, 0),
                             "scale_shape": (_shape, ()), "offset": (_bool, False)}, _routing),
    "quant_matmul": ("M[xKxN]; --dtype is the output dtype", {"pertoken": (_bool, True), "per_tensor": (_bool, False)},
                     _qmm),
    "grouped_matmul": ("(ignored); --dtype is the output dtype", {"pertoken": (_bool, True)}, _gmm),
    "weight_quant_batchmatmul": ("M x K x N; --dtype is x's (float16, bfloat16)",
                                 {"weight": (str, "int8"), "per": (str, "channel"), "group": (_int, 0),
                                  "offset": (_bool, False), "trans_b": (_bool, True), "int64_scale": (_bool, False),
                                  "quant_out": (_bool, False)}, _wqbmm),
    "quantize": ("(ignored)", {"div_mode": (_bool, True)}, _quantize),
}

DESCRIPTION += "\n".join(
    f"  {op}: --shape {doc}" + ("; --opt " + ", ".join(f"{k} [{d if d != '' else 'none'}]" for k, (_, d) in opts.items())
                                if opts else "")
    for op, (doc, opts, _) in OPS.items())


class _Usage(ValueError):
    pass


def _need(dims, n, what):
    if len(dims) < n:
        raise _Usage(f"--shape must be {what}; got {'x'.join(map(str, dims))}")


def add_arguments(parser) -> None:
    parser.add_argument("op", choices=sorted(OPS), metavar="OP", help="the op: " + ", ".join(sorted(OPS)))
    parser.add_argument("--shape", required=True, help="dimensions joined by x, e.g. 16x4096 (meaning per op: below)")
    parser.add_argument("--dtype", default="bfloat16",
                        help="float16, bfloat16, float32, int32, int8 (meaning per op: below) [bfloat16]")
    parser.add_argument("--platform", default=None,
                        help="a w8a8.platforms name: ascend910_93 (A3, default) or ascend910b (A2)")
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                        help="an op option (repeatable; keys per op below)")
    parser.add_argument("--serving", choices=("sglang", "vllm-ascend"), default=None,
                        help="also print how that engine composes the op in a layer (w8a8.serving rows)")
    parser.add_argument("--json", action="store_true", help="print the variant as JSON")


def explain(op: str, shape: str, dtype: str = "bfloat16", platform: str | None = None, opts=()):
    """The :class:`~w8a8.variants.Variant` of ``op`` for a ``--shape`` / ``--dtype`` / ``--opt`` spec
    (ValueError with the reason on a bad spec)."""
    from w8a8 import platforms

    if op not in OPS:
        raise _Usage(f"OP must be one of {sorted(OPS)}; got {op!r}")
    doc, allowed, build = OPS[op]
    try:
        dims = _shape(shape)
    except ValueError:
        raise _Usage(f"--shape must be integers joined by x (e.g. 16x4096); got {shape!r}") from None
    if not dims or any(d < 0 for d in dims):
        raise _Usage(f"--shape must be non-negative integers joined by x; got {shape!r}")
    try:
        dtype = dtypes.name(dtypes.resolve(dtype, arg="dtype", op="explain"))
    except (TypeError, ValueError) as exc:
        raise _Usage(f"--dtype: {exc}") from None
    try:
        plat = platforms.get(platform or platforms.A3.name)
    except ValueError:
        raise _Usage(f"--platform must be one of {list(platforms.names())}; got {platform!r}") from None
    values = {k: d for k, (_, d) in allowed.items()}
    for item in opts:
        key, sep, value = item.partition("=")
        if not sep or key not in allowed:
            raise _Usage(f"--opt for {op} must be KEY=VALUE with KEY in {sorted(allowed) or 'none'}; got {item!r}")
        try:
            values[key] = allowed[key][0](value)
        except ValueError as exc:
            raise _Usage(f"--opt {key}: {exc}") from None
    try:
        variant = build(dims, dtype, values, plat)
    except _Usage:
        raise
    except (TypeError, ValueError):
        argument_check(op, dims, dtype, values)  # the op's own words for a call its tiling cannot take
        raise
    argument_check(op, dims, dtype, values)
    return variant


def _stand_in(shape, dtype) -> np.ndarray:
    """A read-only zero array of ``shape``: one element broadcast, so a shape of 10^12 elements costs nothing."""
    return np.broadcast_to(np.zeros((), dtypes.resolve(dtype)), tuple(shape))


def _check_dynamic_quant(dims, dtype, o, asymmetric=False):
    from w8a8.dynamic_quant import dynamic_quant_args, dynamic_quant_asymmetric_args

    rows, h, groups = math.prod(dims[:-1]), dims[-1], o["groups"]
    smooth = gi = None
    if o["smooth"]:
        smooth = _stand_in((groups, h) if groups else (h,), dtype)
        if groups:
            gi = np.minimum(np.arange(1, groups + 1, dtype=np.int64) * max(rows // max(groups, 1), 1), rows)
            gi[-1] = rows
            gi = gi.astype(np.int32) if rows < 2 ** 31 else gi
    check = dynamic_quant_asymmetric_args if asymmetric else dynamic_quant_args
    check(_stand_in(dims, dtype), smooth_scales=smooth, group_index=gi, dst_type=o["dst"], numerics=_NO_VALUES)


def _check_gating(dims, dtype, o):
    from w8a8.moe.gating import moe_gating_top_k_softmax_args

    moe_gating_top_k_softmax_args(_stand_in(dims, dtype), k=o["k"], numerics=_NO_VALUES)


def _check_swiglu(dims, dtype, o):
    from w8a8.moe.swiglu import swiglu_args

    swiglu_args(_stand_in(dims, dtype), numerics=_NO_VALUES)


ARG_CHECKS = {
    "dynamic_quant": _check_dynamic_quant,
    "dynamic_quant_asymmetric": lambda d, t, o: _check_dynamic_quant(d, t, o, asymmetric=True),
    "moe_gating_top_k_softmax": _check_gating,
    "swiglu": _check_swiglu,
}
"""The ops whose own argument check ``explain`` runs on the described call (on zero stand-ins of its
shapes, values unchecked: ``nan_policy="ieee"``); the others' checks need tensors ``--shape`` does not
describe (index lists, group lists, scales), so their explanation says it was not run."""


def argument_check(op: str, dims, dtype: str, opts: dict) -> bool:
    """Run ``op``'s own argument check on the described call (:data:`ARG_CHECKS`): True when it ran and
    passed, False when ``op`` has none here; the op's TypeError / ValueError as a usage error."""
    check = ARG_CHECKS.get(op)
    if check is None:
        return False
    try:
        check(dims, dtype, opts)
    except (TypeError, ValueError) as exc:
        raise _Usage(f"the op refuses this call, so there is no kernel to explain: {exc}") from None
    return True


_OP_ROWS = {"dynamic_quant": ("D2",), "dynamic_quant_asymmetric": ("D2",), "quantize": ("D4",),
            "quant_matmul": ("D2", "D4"), "swiglu": ("M5", "M6"), "dequant_swiglu_quant": ("M1",),
            "moe_finalize_routing": ("M2", "M7"), "moe_gating_top_k_softmax": ("M2", "M3", "M4"),
            "moe_init_routing_v2": ("M8", "M9"), "grouped_matmul": ("M8", "M9"), "weight_quant_batchmatmul": ()}


def serving_rows(op: str, engine: str) -> dict:
    """The :mod:`w8a8.serving` rows of ``engine`` that say what happens around ``op`` in a layer."""
    from w8a8 import serving as _sv

    rec = _sv.get(engine)
    return {row: {"field": _sv.ROWS[row], "value": getattr(rec, _sv.ROWS[row]).value,
                  "source": getattr(rec, _sv.ROWS[row]).source} for row in _OP_ROWS.get(op, ())}


def run(args) -> int:
    import sys

    try:
        v = explain(args.op, args.shape, args.dtype, args.platform, args.opt)
    except _Usage as exc:
        print(f"w8a8 explain: error: {exc}", file=sys.stderr)
        return 2
    rows = serving_rows(args.op, args.serving) if getattr(args, "serving", None) else {}
    checked = ("passed (the op's own argument check on this call's shapes, dtype and options)"
               if args.op in ARG_CHECKS else "not run (the op's check needs tensors --shape does not describe)")
    if args.json:
        print(json.dumps({**v.as_dict(), "argument_check": checked, **({"serving": rows} if rows else {})},
                         indent=2, default=str))
        return 0
    print(v.describe())
    print(f"  argument check: {checked}")
    if v.decides:
        print("  (the golden applies these under Numerics.variants='select'; variants='fixed' ignores them)")
    if rows:
        print(f"  composition in a layer ({args.serving}):")
        for row, r in rows.items():
            print(f"    {row} {r['field']} = {r['value']}  [{r['source']}]")
    return 0
