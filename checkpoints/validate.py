"""The tensors every checkpoint Linear must carry for its type, and the checks on their values.

What msModelSlim's AscendV1 saver writes per Linear (msModelSlim ``save/ascendv1.py``), N = out, K = in:

=================  ==========================================================================
FLOAT              ``.weight`` float [N, K]; optional ``.bias`` [N]
W8A8_DYNAMIC       ``.weight`` int8 [N, K]; ``.weight_scale`` / ``.weight_offset`` fp32 [N, 1]
                   ([N, K/G] per group, G = ``group_size``), offset all zeros; optional ``.bias``
W8A8 (static)      ``.weight`` int8 [N, K]; ``.quant_bias`` int32 [N]; ``.input_scale`` /
                   ``.input_offset`` fp32 [1]; ``.deq_scale`` [N], fp32 for a bf16 model and int64
                   (the fp32 bits, msModelSlim ``deqscale2int64``) otherwise; legacy (v0) files
                   also carry ``.weight_scale`` / ``.weight_offset`` [N, 1]
W8A8_MIX           the static set plus ``.weight_scale`` / ``.weight_offset``
=================  ==========================================================================

A float ``.bias`` is tagged ``FLOAT``; every other tensor carries the Linear's type.

Severity: a dtype or shape the loader cannot take (an int8 weight stored as float, a [N] scale
where the loader registers [N, 1], an fp32 ``deq_scale`` in an fp16 model, whose int64 parameter
would truncate it) is an error; a float dtype the loader converts on copy (a bf16
``weight_scale``) is a warning.

Value checks (``read_data``) use the export formulas of :mod:`w8a8.offline`, in msModelSlim's
model-dtype arithmetic or in float32 (the legacy tool's; either is consistent): ``deq_scale`` must
be ``input_scale * weight_scale`` bit for bit where both exist; with a stored ``.bias``, ``quant_bias``
must be ``rint(b / deq_scale - input_offset * sum_k w)`` of *that* bias (a warning otherwise: the
serving static method adds ``quant_bias`` and ignores ``.bias``); without one, a ``quant_bias`` other
than ``rint(-input_offset * sum_k w)`` means a float bias was folded in (information).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.offline import static_params, static_quant_bias
from w8a8.trans_quant_param import FLAG

from .issues import Findings
from .schemes import MODELLED_TYPES, Resolution

F32 = np.dtype(np.float32)
FLOATS = (_dt.bfloat16, _dt.float16, F32)


@dataclass(frozen=True)
class Expect:
    dtypes: tuple                 # what msModelSlim writes
    shape: tuple | None           # None: any 2-D shape (FLOAT weights)
    required: bool = True
    loadable: tuple = ()          # other dtypes the loader converts on copy (warning, not error)
    tag: str | None = None        # expected description type (None: the weight's)
    why: str = ""


def expectations(t: str, n: int, k: int, *, model_dtype, group_size: int = 0) -> dict[str, Expect]:
    """The tensors of one Linear of type ``t`` with weight [n, k], by suffix."""
    bias = Expect(FLOATS, (n,), required=False, tag="FLOAT")
    if t == "FLOAT":
        return {".weight": Expect(FLOATS, None), ".bias": bias}
    scale_shape = (n, k // group_size) if group_size and k % group_size == 0 else (n, 1)
    out = {".weight": Expect((_dt.int8,), (n, k)), ".bias": bias}
    dyn = {".weight_scale": Expect((F32,), scale_shape, loadable=(_dt.bfloat16, _dt.float16)),
           ".weight_offset": Expect((F32,), scale_shape, loadable=(_dt.bfloat16, _dt.float16))}
    if t == "W8A8_DYNAMIC":
        return {**out, **dyn}
    if model_dtype is None:
        deq = Expect((F32, _dt.int64), (n,), why="config.json gives no torch_dtype: fp32 (bf16 model) or int64")
    elif np.dtype(model_dtype) == _dt.bfloat16:
        deq = Expect((F32,), (n,), why="the model is bfloat16: the loader registers deq_scale as float32")
    else:
        deq = Expect((_dt.int64,), (n,), why=f"the model is {_dt.name(model_dtype)}: the loader registers "
                                             "deq_scale as int64")
    static = {".quant_bias": Expect((_dt.int32,), (n,)),
              ".input_scale": Expect((F32,), (1,), loadable=(_dt.bfloat16, _dt.float16)),
              ".input_offset": Expect((F32,), (1,), loadable=(_dt.bfloat16, _dt.float16, _dt.int8)),
              ".deq_scale": deq}
    if t == "W8A8":
        optional = {s: Expect(e.dtypes, e.shape, required=False, loadable=e.loadable) for s, e in dyn.items()}
        return {**out, **static, **optional}
    if t == "W8A8_MIX":
        return {**out, **static, **dyn}
    return {}


def check_linear(res: Resolution, prefix: str, findings: Findings, *, read_data: bool = True) -> None:
    """Check the tensors of checkpoint Linear ``prefix`` (serving name) against its type."""
    tensors = res.linears.get(prefix, {})
    t = res.types.get(prefix + ".weight")
    shape = res.shape(prefix + ".weight")
    where = res.native_prefix(prefix)
    if t is None or shape is None or len(shape) != 2:
        return
    if t not in MODELLED_TYPES:
        return
    n, k = shape
    errors_before = len(findings.errors)
    exp = expectations(t, n, k, model_dtype=res.checkpoint.model_dtype,
                       group_size=res.checkpoint.description.group_size)
    for suffix, e in exp.items():
        name = tensors.get(suffix)
        if name is None:
            if e.required:
                findings.error(where, f"{t} Linear lacks {suffix} ({_want(e)})", "missing-tensor")
            continue
        entry = res.entry(name)
        tag = res.types.get(name)
        want_tag = e.tag or t
        if tag is not None and tag != want_tag:
            findings.warning(res.native(name), f"tagged {tag}; the tensors of a {t} Linear carry {want_tag} "
                                               "(loaders read .weight's entry only)", "tag-mismatch")
        if entry is None:  # described but not stored (the tensor-set check reports the entry itself)
            if e.required:
                findings.error(where, f"{t} Linear lacks {suffix} in the weights ({_want(e)})", "missing-tensor")
            continue
        if entry.dtype not in e.dtypes:
            msg = f"{t} Linear: dtype must be {_dt_names(e.dtypes)}{' (' + e.why + ')' if e.why else ''}; " \
                  f"got {_dt.name(entry.dtype)}"
            if entry.dtype in e.loadable:
                findings.warning(res.native(name), msg + " (the loader converts it on copy)", "dtype")
            else:
                findings.error(res.native(name), msg, "dtype")
        if e.shape is not None and entry.shape != e.shape:
            findings.error(res.native(name), f"{t} Linear with weight [{n}, {k}]: shape must be {list(e.shape)}; "
                                             f"got {list(entry.shape)}", "shape")
    for suffix, name in tensors.items():
        if suffix not in exp:
            findings.warning(res.native(name), f"unexpected for a {t} Linear (expected "
                                               f"{', '.join(exp)}): the loader registers no such parameter",
                             "unexpected-tensor")
    if read_data and len(findings.errors) == errors_before:
        _check_values(res, prefix, t, tensors, findings)


def _check_values(res: Resolution, prefix: str, t: str, tensors: dict[str, str], findings: Findings) -> None:
    get = res.tensor
    if t in ("W8A8_DYNAMIC", "W8A8_MIX") or (t == "W8A8" and ".weight_scale" in tensors):
        if ".weight_offset" in tensors:
            off = np.asarray(get(tensors[".weight_offset"])).astype(np.float32)
            nz = int(np.count_nonzero(off))
            if nz:
                findings.warning(res.native(tensors[".weight_offset"]),
                                 f"{nz} of {off.size} offsets are non-zero: the serving path is symmetric and "
                                 "ignores weight_offset, so those channels dequantize differently than exported",
                                 "nonzero-offset")
        if ".weight_scale" in tensors:
            ws = np.asarray(get(tensors[".weight_scale"])).astype(np.float32)
            bad = int(np.count_nonzero(~np.isfinite(ws) | (ws <= 0)))
            if bad:
                findings.warning(res.native(tensors[".weight_scale"]),
                                 f"{bad} of {ws.size} scales are not finite and positive", "bad-scale")
    if t not in ("W8A8", "W8A8_MIX"):
        return
    s_in = np.asarray(get(tensors[".input_scale"])).astype(np.float32).reshape(1)
    o_in = np.asarray(get(tensors[".input_offset"])).astype(np.float32).reshape(1)
    if not (np.isfinite(s_in[0]) and s_in[0] > 0):
        findings.error(res.native(tensors[".input_scale"]), f"must be finite and positive; got {s_in[0]!r}",
                       "bad-input-scale")
        return
    if not (np.isfinite(o_in[0]) and o_in[0] == np.rint(o_in[0]) and -128 <= o_in[0] <= 127):
        findings.error(res.native(tensors[".input_offset"]), "must be an integer in [-128, 127] (msModelSlim "
                                                             f"rounds it; vllm-ascend stores it as int8); got {o_in[0]!r}",
                       "bad-input-offset")
        return
    deq = np.asarray(get(tensors[".deq_scale"]))
    deq32 = decode_deq_scale(res, tensors[".deq_scale"], deq, findings)
    if deq32 is None:
        return
    weight = np.asarray(get(tensors[".weight"]))
    n = weight.shape[0]
    mdt = res.checkpoint.model_dtype
    # msModelSlim (modelslim_v1) computes in the model dtype (w8a8.offline, arithmetic="model"); the fp32
    # formulas are the legacy tool's / an fp32 model's. A value is consistent when either reproduces it.
    arithmetics = ([("the model dtype", mdt, "model")] if mdt is not None and mdt != np.float32 else []) + \
        [("float32", mdt if mdt is not None else _dt.bfloat16, "float32")]
    if ".weight_scale" in tensors:
        ws = np.asarray(get(tensors[".weight_scale"])).astype(np.float32).reshape(n)
        expected = {label: _deq32(static_params(weight, ws, s_in, o_in, None, model_dtype=dt, arithmetic=a)[0])
                    for label, dt, a in arithmetics}
        diffs = {label: e.view(np.uint32) != deq32.view(np.uint32) for label, e in expected.items()}
        if not any(not d.any() for d in diffs.values()):
            label = min(diffs, key=lambda k: int(diffs[k].sum()))      # report the closer formula
            e, diff = expected[label], diffs[label]
            rel = float(np.max(np.abs(deq32[diff].astype(np.float64) / e[diff] - 1)))
            findings.error(res.native(tensors[".deq_scale"]),
                           f"{int(diff.sum())} of {n} values differ from input_scale * weight_scale computed in "
                           f"{' or in '.join(expected)} (closest: {label}, max relative difference {rel:.3g})",
                           "deq-mismatch")
    qb = np.asarray(get(tensors[".quant_bias"])).astype(np.int64)
    bias = np.asarray(get(tensors[".bias"])).astype(np.float32) if ".bias" in tensors else None
    zero = int(np.count_nonzero(deq32 == 0))
    if zero:   # an fp16 product input_scale * weight_scale below 2^-24 flushed to 0: those columns output 0
        findings.error(res.native(tensors[".deq_scale"]),
                       f"{zero} of {n} deq_scale values are 0 (input_scale * weight_scale underflowed the model "
                       "dtype): those output columns are 0 whatever the input; quant_bias cannot be checked",
                       "deq-zero")
        return
    expected_qb = {label: static_quant_bias(weight, deq32, o_in, bias, model_dtype=dt, arithmetic=a).astype(np.int64)
                   for label, dt, a in arithmetics}
    implied = (qb + o_in[0].astype(np.float64) * weight.astype(np.float64).sum(axis=1)) * deq32
    if bias is not None:
        if not any((e == qb).all() for e in expected_qb.values()):
            e = next(iter(expected_qb.values()))
            bad = qb != e
            # the serving static method adds quant_bias only: a contradicting .bias is silently ignored
            findings.warning(res.native(tensors[".bias"]),
                             f"contradicts quant_bias: {int(bad.sum())} of {n} quant_bias values are not "
                             "rint(b / deq_scale - input_offset * sum_k w) of this .bias (the bias quant_bias implies "
                             f"differs from it by up to {float(np.max(np.abs(implied - bias))):.4g}); SGLang's static "
                             "method adds quant_bias and ignores .bias, so the exported model's bias is not the one "
                             "stored", "bias-contradicts-quant-bias")
        else:
            findings.info(res.native(tensors[".quant_bias"]), "folds the stored .bias (consistent with it: "
                                                              "SGLang's static method adds quant_bias only)",
                          "folded-bias")
        return
    folded = qb != next(iter(expected_qb.values()))
    if folded.any():
        findings.info(res.native(tensors[".quant_bias"]),
                      f"{int(folded.sum())} of {n} values differ from rint(-input_offset * sum_k w): a float bias is "
                      f"folded in (implied |b| up to {float(np.max(np.abs(implied))):.4g}) and no .bias is stored",
                      "folded-bias")


def _deq32(deq: np.ndarray) -> np.ndarray:
    return deq if deq.dtype == np.float32 else (deq.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


def decode_deq_scale(res: Resolution, name: str, deq: np.ndarray, findings: Findings) -> np.ndarray | None:
    """The fp32 values of a stored ``deq_scale``: fp32 as is; int64 as msModelSlim's raw fp32 bits
    (sign-extended). An int64 with the ``npu_trans_quant_param`` flag (bit 46) is decoded from its
    low 32 bits with a warning; any other int64 pattern is an error (None returned)."""
    if deq.dtype == F32:
        vals = deq.astype(np.float32)
    else:
        raw = deq.astype(np.int64)
        low = (raw & 0xFFFFFFFF).astype(np.uint32)
        sign_ext = low.view(np.int32).astype(np.int64)
        flagged = (raw.view(np.uint64) & FLAG) != 0
        if (raw == sign_ext).all():
            pass
        elif flagged.all():
            findings.warning(res.native(name), "int64 values carry npu_trans_quant_param's flag (bit 46): "
                                               "msModelSlim writes the raw fp32 bits (deqscale2int64)",
                             "deq-trans-quant-param")
        else:
            findings.error(res.native(name), "int64 values are neither sign-extended fp32 bit patterns "
                                             "(msModelSlim) nor npu_trans_quant_param words", "deq-encoding")
            return None
        vals = low.view(np.float32)
    bad = ~np.isfinite(vals) | (vals <= 0)
    if bad.any():
        findings.warning(res.native(name), f"{int(bad.sum())} of {vals.size} values are not finite and positive",
                         "bad-deq-scale")
    return vals


def _dt_names(dtypes) -> str:
    return " or ".join(_dt.name(d) for d in dtypes)


def _want(e: Expect) -> str:
    return _dt_names(e.dtypes) + (f" {list(e.shape)}" if e.shape else "")


def validate(res: Resolution, *, read_data: bool = True) -> Findings:
    """Tensor-set, per-Linear dtype/shape and (optionally) value checks of every Linear in ``res``."""
    found = Findings()
    found.extend(res.checkpoint.tensor_set_findings())
    for prefix in res.linears:
        check_linear(res, prefix, found, read_data=read_data)
    return found
