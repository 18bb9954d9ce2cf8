"""Map a dumped torch_npu call to the golden call, argument by argument (docs/replay.md).

:func:`map_entry` takes an :class:`~replay.dump.Entry` and returns a :class:`MappedCall`: the golden
op, its positional and keyword arguments (tensors still as :class:`~replay.dump.TensorRecord`, resolved
to arrays later), the dumped outputs in the golden's return order, every inferred argument as a line
``inferred: dst_type from output dtype int8``, and — when the call cannot be replayed — why.

Rules (torch_npu schemas, names in ``input_args`` order; the golden's defaults are never relied on
where torch_npu's differ — those are passed explicitly):

* a positional argument takes its name from the op's schema; keyword names are the schema's;
* a dtype recorded as ``{}`` (msprobe drops a ``torch.dtype`` outside keys named ``dtype`` /
  ``output_dtype``) is inferred from the output dtype where a rule exists, else not replayable;
* tensor lists of length 1 (the grouped matmul) are unwrapped; longer lists are not modelled;
* an argument the golden does not model, when set to a non-default value, makes the call not
  replayable (named); a few tuning-only arguments are ignored (named in the notes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .dump import DtypeValue, Entry, TensorRecord, Unknown

REPLAY_PREFIXES = ("NPU", "_C_ascend")



def golden_of(api: str) -> str | None:
    """The golden op that mirrors ``torch_npu.<api>`` (its ``@golden_op(mirrors=...)``), or None.

    Where several golden ops mirror one torch_npu op (``npu_quant_matmul``: :func:`w8a8.quant_matmul`
    and the int4 path :func:`w8a8.quant_matmul_int4`), the one named like it (``npu_`` dropped) is the
    op a dumped call maps to."""
    from w8a8 import registry

    mirrors = [op.name for op in registry.ops() if op.mirrors == f"torch_npu.{api}"]
    if api.removeprefix("npu_") in mirrors:
        return api.removeprefix("npu_")
    return mirrors[0] if len(mirrors) == 1 else None


NOT_OBSERVABLE = {"npu_format_cast": "its FRACTAL_NZ output is never saved by msprobe",
                  "npu_format_cast_": "its FRACTAL_NZ output is never saved by msprobe"}

POSITIONAL: dict[str, tuple[str, ...]] = {
    "npu_dynamic_quant": ("input",), "npu_dynamic_quant_asymmetric": ("input",),
    "npu_quant_matmul": ("x1", "x2", "scale"),
    "npu_trans_quant_param": ("scale", "offset", "round_mode"),
    "npu_grouped_matmul": ("x", "weight"),
    "npu_swiglu": ("input", "dim"),
    "npu_dequant_swiglu_quant": ("x",),
    "npu_moe_gating_top_k": ("x", "k"),
    "npu_moe_gating_top_k_softmax": ("x", "finished", "k"),
    "npu_moe_init_routing": ("x", "row_idx", "expert_idx", "active_num"),
    "npu_moe_init_routing_v2": ("x", "expert_idx"),
    "npu_moe_finalize_routing": ("expanded_permuted_rows", "skip1", "skip2", "bias", "scales",
                                 "expanded_src_to_dst_row", "export_for_source_row", "drop_pad_mode"),
    "npu_quantize": ("input", "scales", "zero_points", "dtype", "axis", "div_mode"),
    "npu_anti_quant": ("x", "scale"),
    "npu_weight_quant_batchmatmul": ("x", "weight", "antiquant_scale", "antiquant_offset", "quant_scale",
                                     "quant_offset", "bias", "antiquant_group_size", "inner_precise"),
    "npu_convert_weight_to_int4pack": ("weight", "inner_k_tiles"),
}

QUANT_DTYPE_NAMES = {"qint8": "int8", "quint8": "uint8", "qint32": "int32", "quint4x2": "int4",
                     "int8": "int8", "uint8": "uint8", "int32": "int32"}


class NotReplayable(Exception):
    """The call cannot be replayed; the message says why (becomes the verdict's reason)."""


@dataclass
class MappedCall:
    """A dumped call mapped to the golden (module docstring)."""

    entry: Entry
    op: str | None
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    outputs: list = field(default_factory=list)       # dumped output records (or None), golden return order
    inferred: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skip: str | None = None                           # not replayed: why (not a quant op, backward, ...)
    not_replayable: str | None = None                 # a quant op that cannot be replayed: why
    alternatives: list[tuple[str, dict]] = field(default_factory=list)  # (label, kwargs override) to try

    @property
    def replayable(self) -> bool:
        return self.op is not None and self.skip is None and self.not_replayable is None


def _flat_outputs(output: list | None) -> list:
    """msprobe's ``output`` list, with the grouped matmul's nested ``[[y]]`` flattened one level."""
    out = []
    for v in output or []:
        if isinstance(v, list):
            out.extend(v)
        else:
            out.append(v)
    return out


def _gather(entry: Entry, api: str) -> dict:
    """Positional and keyword arguments by schema name (positional first; a keyword never overwrites)."""
    names = POSITIONAL.get(api, ())
    values: dict = {}
    for i, value in enumerate(entry.args):
        if i >= len(names):
            raise NotReplayable(f"{len(entry.args)} positional arguments; the torch_npu schema of {api} has "
                                f"{len(names)} ({', '.join(names)})")
        values[names[i]] = value
    for key, value in entry.kwargs.items():
        if key in values:
            raise NotReplayable(f"argument {key!r} given both positionally and by keyword")
        values[key] = value
    return values


def _dtype_name(value, *, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, DtypeValue):
        return value.name
    if isinstance(value, str):
        return value.replace("torch.", "")
    raise NotReplayable(f"argument {what!r} recorded as {value!r}")


def _one(values: dict, name: str, *, tensor_list: bool = False):
    v = values.get(name)
    if tensor_list and isinstance(v, list):
        if len(v) == 0:
            return None
        if len(v) != 1:
            raise NotReplayable(f"argument {name!r} is a list of {len(v)} tensors; the golden models the "
                                "single-tensor form (one x, one weight, one y)")
        return v[0]
    return v


def _require_default(values: dict, name: str, defaults: tuple = (None,)) -> None:
    v = values.get(name)
    if isinstance(v, list) and not v:
        v = None
    if v not in defaults and not (isinstance(v, Unknown)):
        raise NotReplayable(f"argument {name!r} = {_show(v)} is not modelled by the golden")


def _show(v) -> str:
    if isinstance(v, TensorRecord):
        return f"tensor {v.describe()}"
    if isinstance(v, list):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return repr(v)


def _int(values: dict, name: str, default):
    v = values.get(name, default)
    if v is None:
        return default
    if isinstance(v, Unknown):
        raise NotReplayable(f"argument {name!r} was lost by msprobe (recorded as {{}})")
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise NotReplayable(f"argument {name!r} = {_show(v)} is not an int")
    return v


def _int_list(value):
    """A list of int records (``group_list`` of the ``.List`` overload) -> a NumPy int64 array."""
    import numpy as np

    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return np.asarray(value, dtype=np.int64)
    return value


def _out_dtype(rec, index: int = 0) -> str | None:
    if isinstance(rec, TensorRecord) and rec.dtype is not None:
        from w8a8 import dtypes as _dt

        return _dt.name(rec.dtype)
    return None


def _dtype_arg(call: MappedCall, value, outs: list, arg: str) -> str | None:
    """A dtype argument: the recorded ``torch.dtype``, else the first output's dtype (noted as inferred)."""
    if isinstance(value, DtypeValue):
        return value.name
    out = _out_dtype(outs[0]) if outs else None
    if out is None:
        raise NotReplayable(f"{arg} lost and the output record has no dtype")
    why = " (recorded as {})" if isinstance(value, Unknown) else " (recorded as an int)" if value is not None else ""
    call.inferred.append(f"inferred: {arg}={out!r} from output dtype{why}")
    return out


def _check_unknown(values: dict, known: set[str], ignored: set[str], call: MappedCall) -> None:
    for key, value in values.items():
        if key in known:
            continue
        if key in ignored:
            if value not in (None, [], {}):
                call.notes.append(f"argument {key!r} ignored (tuning only)")
            continue
        if value is None or (isinstance(value, list) and not value):
            continue
        raise NotReplayable(f"argument {key!r} = {_show(value)} is not modelled by the golden")


# ------------------------------------------------------------------------------------------------
# per-op rules


def _dynamic_quant(call: MappedCall, v: dict, outs: list, asym: bool) -> None:
    if v.get("quant_mode") not in (None, "pertoken"):
        raise NotReplayable(f"quant_mode={v['quant_mode']!r}: only 'pertoken' is modelled")
    if v.get("dst_type_max") not in (None, 0, 0.0):
        raise NotReplayable(f"dst_type_max={v['dst_type_max']!r}: only 0 is modelled")
    dst = v.get("dst_type")
    y = _out_dtype(outs[0]) if outs else None
    if isinstance(dst, DtypeValue):
        dst_name = QUANT_DTYPE_NAMES.get(dst.name, dst.name)
        if dst_name == "int32":
            dst_name = "int4"
    else:
        if y not in ("int8", "int32"):
            if dst is None and y is None:
                dst_name = "int8"
            else:
                raise NotReplayable(f"dst_type lost and the output dtype ({y}) gives no rule")
        else:
            dst_name = "int8" if y == "int8" else "int4"
        if isinstance(dst, Unknown) or (dst is None and y == "int32"):
            call.inferred.append(f"inferred: dst_type={dst_name!r} from output dtype {y}"
                                 + (" (msprobe recorded dst_type as {})" if isinstance(dst, Unknown) else ""))
    call.args = [v.get("input")]
    call.kwargs = {"smooth_scales": v.get("smooth_scales"), "group_index": v.get("group_index"), "dst_type": dst_name}
    _check_unknown(v, {"input", "smooth_scales", "group_index", "dst_type", "quant_mode", "dst_type_max"}, set(), call)


def _quant_matmul(call: MappedCall, v: dict, outs: list) -> None:
    for name in ("x1_dtype", "x2_dtype", "scale_dtype", "pertoken_scale_dtype", "group_sizes", "y_scale"):
        _require_default(v, name)
    out = _dtype_arg(call, v.get("output_dtype"), outs, "output_dtype")
    call.args = [v.get("x1"), v.get("x2"), v.get("scale")]
    call.kwargs = {"offset": v.get("offset"), "pertoken_scale": v.get("pertoken_scale"), "bias": v.get("bias"),
                   "output_dtype": out}
    _check_unknown(v, {"x1", "x2", "scale", "offset", "pertoken_scale", "bias", "output_dtype", "x1_dtype",
                       "x2_dtype", "scale_dtype", "pertoken_scale_dtype", "group_sizes", "y_scale"}, set(), call)


def _grouped_matmul(call: MappedCall, v: dict, outs: list) -> None:
    for name in ("antiquant_scale", "antiquant_offset", "activation_input", "activation_quant_scale",
                 "activation_quant_offset", "x_dtype", "weight_dtype", "scale_dtype", "per_token_scale_dtype"):
        _require_default(v, name)
    if v.get("group_type") is None:
        raise NotReplayable("group_type not passed: torch_npu requires it (the call would have raised)")
    x, w = _one(v, "x", tensor_list=True), _one(v, "weight", tensor_list=True)
    out = _dtype_arg(call, v.get("output_dtype"), outs, "output_dtype")
    group_list = _int_list(v.get("group_list"))
    call.args = [[x], [w]]
    call.kwargs = {"bias": _one(v, "bias", tensor_list=True), "scale": _one(v, "scale", tensor_list=True),
                   "offset": _one(v, "offset", tensor_list=True),
                   "per_token_scale": _one(v, "per_token_scale", tensor_list=True), "group_list": group_list,
                   "group_list_type": _int(v, "group_list_type", 0), "act_type": _int(v, "act_type", 0),
                   "output_dtype": out, "split_item": _int(v, "split_item", 0),
                   "group_type": _int(v, "group_type", 0)}
    _check_unknown(v, set(call.kwargs) | {"x", "weight", "antiquant_scale", "antiquant_offset", "activation_input",
                                          "activation_quant_scale", "activation_quant_offset", "x_dtype",
                                          "weight_dtype", "scale_dtype", "per_token_scale_dtype"},
                   {"tuning_config"}, call)


def _dequant_swiglu_quant(call: MappedCall, v: dict, outs: list) -> None:
    if _int(v, "swiglu_mode", 0) != 0:
        raise NotReplayable(f"swiglu_mode={v['swiglu_mode']}: only 0 is modelled")
    dst = v.get("dst_type")
    if dst is not None and not isinstance(dst, Unknown):
        name = dst.name if isinstance(dst, DtypeValue) else dst
        if name not in ("int8", 1, None):   # an int code: 1 is c10 ScalarType Char (int8)
            raise NotReplayable(f"dst_type={name!r}: only int8 is modelled")
    if v.get("round_mode") not in (None, "rint", 0):
        raise NotReplayable(f"round_mode={v['round_mode']!r}: only rint is modelled")
    if v.get("activate_dim") not in (None, -1):
        raise NotReplayable(f"activate_dim={v['activate_dim']!r}: only the last dim is modelled")
    call.args = [v.get("x")]
    call.kwargs = {k: v.get(k) for k in ("weight_scale", "activation_scale", "bias", "quant_scale", "quant_offset",
                                         "group_index")}
    call.kwargs["group_index"] = _int_list(call.kwargs["group_index"])
    call.kwargs["activate_left"] = bool(v.get("activate_left", False))
    call.kwargs["quant_mode"] = _int(v, "quant_mode", 0)
    _check_unknown(v, set(call.kwargs) | {"x", "swiglu_mode", "dst_type", "round_mode", "activate_dim"},
                   {"clamp_limit", "glu_alpha", "glu_bias"}, call)


def _moe_init_routing_v2(call: MappedCall, v: dict, outs: list) -> None:
    aer = v.get("active_expert_range")
    if isinstance(aer, list) and not aer:
        aer = None
    call.args = [v.get("x"), v.get("expert_idx")]
    call.kwargs = {"scale": v.get("scale"), "offset": v.get("offset"), "active_num": _int(v, "active_num", -1),
                   "expert_capacity": _int(v, "expert_capacity", -1), "expert_num": _int(v, "expert_num", -1),
                   "drop_pad_mode": _int(v, "drop_pad_mode", 0),
                   "expert_tokens_num_type": _int(v, "expert_tokens_num_type", 0),
                   "expert_tokens_num_flag": bool(v.get("expert_tokens_num_flag", False)),
                   "active_expert_range": aer, "row_idx_type": _int(v, "row_idx_type", 0)}
    if "quant_mode" in v and v["quant_mode"] is not None:
        call.kwargs["quant_mode"] = _int(v, "quant_mode", -1)
    else:
        call.kwargs["quant_mode"] = -1
        call.alternatives = [("quant_mode=-1 (torch_npu 26.x default)", {"quant_mode": -1}),
                             ("quant_mode=0 (torch_npu 7.x default)", {"quant_mode": 0})]
        call.notes.append("ambiguous default: quant_mode was not passed and its default depends on the torch_npu "
                          "version (0 in 7.x, -1 in 26.x); both are run")
    _check_unknown(v, set(call.kwargs) | {"x", "expert_idx"}, set(), call)


def _moe_finalize_routing(call: MappedCall, v: dict, outs: list) -> None:
    names = POSITIONAL["npu_moe_finalize_routing"][:7]
    call.args = [v.get(n) for n in names]
    call.kwargs = {"drop_pad_mode": _int(v, "drop_pad_mode", 0)}
    if v.get("scales") is None:
        rows = v.get("expanded_src_to_dst_row")
        y = outs[0] if outs else None
        if isinstance(rows, TensorRecord) and isinstance(y, TensorRecord) and y.shape and y.shape[0]:
            k = rows.numel // y.shape[0]
            call.kwargs["k"] = k
            call.inferred.append(f"inferred: k={k} from expanded_src_to_dst_row numel / output rows (scales is None)")
    _check_unknown(v, set(names) | {"drop_pad_mode"}, set(), call)


def _quantize(call: MappedCall, v: dict, outs: list) -> None:
    dt = v.get("dtype")
    x = v.get("input")
    if isinstance(dt, DtypeValue):
        name = QUANT_DTYPE_NAMES.get(dt.name)
        if name is None:
            raise NotReplayable(f"dtype={dt.value}: not a quantized dtype the golden models")
    else:
        y = outs[0] if outs else None
        yd = _out_dtype(y)
        if yd in ("int8", "uint8"):
            name = yd
        elif yd == "int32" and isinstance(x, TensorRecord) and isinstance(y, TensorRecord) and y.shape and x.shape:
            name = "int4" if y.shape[-1] * 8 == x.shape[-1] else "int32"
        else:
            raise NotReplayable("dtype lost by msprobe (recorded as {}) and the output dtype gives no rule")
        call.inferred.append(f"inferred: dtype={name!r} from output dtype {yd}")
    call.args = [x, v.get("scales"), v.get("zero_points")]
    call.kwargs = {"dtype": name, "axis": _int(v, "axis", 1), "div_mode": bool(v.get("div_mode", True))}
    _check_unknown(v, {"input", "scales", "zero_points", "dtype", "axis", "div_mode"}, set(), call)


def _anti_quant(call: MappedCall, v: dict, outs: list) -> None:
    x = v.get("x")
    dst_name = _dtype_arg(call, v.get("dst_dtype"), outs, "dst_dtype")
    src = v.get("src_dtype")
    if isinstance(src, DtypeValue):
        src_name = QUANT_DTYPE_NAMES.get(src.name, src.name)
    else:
        src_name = "int4" if isinstance(x, TensorRecord) and x.torch_dtype == "torch.int32" else "int8"
        if isinstance(src, Unknown):
            call.inferred.append(f"inferred: src_dtype={src_name!r} from the dtype of x")
    call.args = [x, v.get("scale")]
    call.kwargs = {"offset": v.get("offset"), "dst_dtype": dst_name, "src_dtype": src_name}
    _check_unknown(v, {"x", "scale", "offset", "dst_dtype", "src_dtype"}, set(), call)


def _plain(names: tuple[str, ...], kw_defaults: dict):
    """An op whose arguments pass through: positional ``names``, keywords with torch_npu's defaults."""

    def rule(call: MappedCall, v: dict, outs: list) -> None:
        call.args = [_int_list(v.get(n)) if n == "group_index" else v.get(n) for n in names]
        call.kwargs = {}
        for key, default in kw_defaults.items():
            value = v.get(key, default)
            if isinstance(value, Unknown):
                raise NotReplayable(f"argument {key!r} was lost by msprobe (recorded as {{}})")
            call.kwargs[key] = default if value is None and default is not None else value
        _check_unknown(v, set(names) | set(kw_defaults), set(), call)

    return rule


RULES = {
    "npu_dynamic_quant": lambda c, v, o: _dynamic_quant(c, v, o, asym=False),
    "npu_dynamic_quant_asymmetric": lambda c, v, o: _dynamic_quant(c, v, o, asym=True),
    "npu_quant_matmul": _quant_matmul,
    "npu_trans_quant_param": _plain(("scale", "offset"), {"round_mode": 0}),
    "npu_grouped_matmul": _grouped_matmul,
    "npu_swiglu": _plain(("input", "dim"), {}),
    "npu_dequant_swiglu_quant": _dequant_swiglu_quant,
    "npu_moe_gating_top_k": _plain(("x", "k"), {"bias": None, "k_group": 1, "group_count": 1, "group_select_mode": 0,
                                                "renorm": 0, "norm_type": 0, "out_flag": False,
                                                "routed_scaling_factor": 1.0, "eps": 1e-20}),
    "npu_moe_gating_top_k_softmax": _plain(("x", "finished", "k"), {}),
    "npu_moe_init_routing": _plain(("x", "row_idx", "expert_idx", "active_num"), {}),
    "npu_moe_init_routing_v2": _moe_init_routing_v2,
    "npu_moe_finalize_routing": _moe_finalize_routing,
    "npu_quantize": _quantize,
    "npu_anti_quant": _anti_quant,
    "npu_weight_quant_batchmatmul": _plain(POSITIONAL["npu_weight_quant_batchmatmul"][:7],
                                           {"antiquant_group_size": 0, "inner_precise": 0}),
    "npu_convert_weight_to_int4pack": _plain(("weight",), {"inner_k_tiles": 0}),
}


QUANT_OPS = {api: golden_of(api) for api in RULES}
"""torch_npu op -> golden op, for every op that replay judges: the ops with an argument mapping (:data:`RULES`),
each mapped to the golden op that declares it mirrors it."""
_UNMAPPED = [api for api, op in QUANT_OPS.items() if op is None]
if _UNMAPPED:
    raise ImportError(f"replay.mapping: no golden op mirrors {_UNMAPPED} (@golden_op(mirrors=...))")


def map_entry(entry: Entry) -> MappedCall:
    """The golden call of one dumped entry, or why it is skipped / not replayable (module docstring)."""
    n = entry.name
    call = MappedCall(entry, None)
    if n.kind == "module":
        call.skip = "module (a container of the calls it made)"
        return call
    if n.kind != "api":
        call.skip = "not an API call entry"
        return call
    if n.direction != "forward":
        call.skip = "backward (replay judges forward calls)"
        return call
    if n.prefix not in REPLAY_PREFIXES:
        call.skip = "not a quant op"
        return call
    if n.api in NOT_OBSERVABLE:
        call.skip = f"not observable: {NOT_OBSERVABLE[n.api]}"
        return call
    if n.api not in QUANT_OPS:
        golden = golden_of(n.api)
        if golden is None:
            call.skip = f"not a quant op (no golden for torch_npu.{n.api})"
        else:
            call.op = golden
            call.not_replayable = (f"replay has no argument mapping for torch_npu.{n.api} (its golden is "
                                   f"w8a8.{golden})")
        return call
    call.op = QUANT_OPS[n.api]
    if entry.output is None:
        call.not_replayable = ("no output recorded: the call raised (msprobe then records nothing more in this "
                               "thread until the next step) or data_mode excluded outputs")
    try:
        values = _gather(entry, n.api)
        outs = _flat_outputs(entry.output)
        call.outputs = outs
        RULES[n.api](call, values, outs)
    except NotReplayable as exc:
        call.not_replayable = call.not_replayable or str(exc)
    return call
