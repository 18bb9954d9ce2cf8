"""Is ``--reference`` the float model this checkpoint was exported from? Names, shapes, distance.

A float reference feeds ``--verify``'s SQNR and ``w8a8 run``'s comparison; a wrong one (another
model, another size, the weights after an anti-outlier or rotation step changed them) must be an
error, not a silent fallback. :func:`check_reference` reports, as findings:

* ``reference-config`` (error): the reference's ``config.json`` disagrees with the checkpoint's on
  ``model_type``, ``hidden_size``, ``num_hidden_layers`` or ``vocab_size``;
* ``reference-missing`` / ``reference-shape`` / ``reference-dtype`` (error): a quantized Linear's
  ``.weight`` is absent from the reference (under its checkpoint or serving name), has another shape,
  or is not a float tensor;
* ``reference-distance`` (error): the checkpoint's dequantized weight ``ŵ`` (``w_q * weight_scale``;
  static, which stores no weight scale: ``w_q * step`` with the codes' own per-channel step,
  :func:`weight_step` — not ``deq_scale / input_scale``, whose precision is judged apart) is not a quantization of
  the reference weight ``W``: a rounding to the nearest int8 step leaves ``|W - ŵ| <= step / 2``
  (plus the model dtype's rounding), so more than :data:`FAR_FRACTION` of the elements farther than
  one step, or a relative L2 distance over :data:`MAX_REL_L2`, means another weight. The distance of
  every checked module is returned (:class:`Distance`) for the report;
* ``deq-scale-precision`` (warning): a static Linear's ``deq_scale`` is more than 2^-10 (relative) from
  ``input_scale * step`` — msModelSlim computes the product in the model dtype, so on an fp16 model a product
  below fp16's smallest normal (6.1e-5) is stored as a subnormal with a few significant bits: the relative
  error, the channels concerned, and the SQNR that error alone leaves the output (:class:`DeqPrecision`).

Distances are computed on at most ``max_modules`` quantized Linears (spread over the layers) so
that a large checkpoint is not read whole; names and shapes are checked for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from w8a8 import dtypes as _dt

from .issues import Findings
from .naming import parse_expert
from .schemes import Resolution
from .validate import decode_deq_scale

MAX_REL_L2 = 0.05
FAR_FRACTION = 0.01
SHOWN = 8
CONFIG_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")


@dataclass
class Distance:
    module: str
    rel_l2: float            # ||W - ŵ|| / ||W||
    far_fraction: float      # elements with |W - ŵ| > one quantization step


def _lookup(ref: dict, res: Resolution, prefix: str):
    for name in (res.native_prefix(prefix) + ".weight", prefix + ".weight"):
        if name in ref:
            return name, ref[name]
    return None, None


def dequantized(res: Resolution, prefix: str, t: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(ŵ [N, K] float64, step [N, 1])`` of quantized Linear ``prefix`` (None if tensors are missing)."""
    tensors = res.linears.get(prefix, {})
    w = np.asarray(res.tensor(tensors[".weight"])).astype(np.float64)
    if t == "W8A8_DYNAMIC" and ".weight_scale" in tensors:
        step = np.asarray(res.tensor(tensors[".weight_scale"])).astype(np.float64).reshape(-1, 1)
    elif t == "W8A8" and ".deq_scale" in tensors and ".input_scale" in tensors:
        deq = decode_deq_scale(res, tensors[".deq_scale"], np.asarray(res.tensor(tensors[".deq_scale"])), Findings())
        if deq is None:
            return None
        s = float(np.asarray(res.tensor(tensors[".input_scale"])).astype(np.float32).reshape(-1)[0])
        step = (deq.astype(np.float64) / s).reshape(-1, 1)
    else:
        return None
    return w * step, step


FP16_MIN_NORMAL = 2.0 ** -14
PRECISION_SHOWN = 2.0 ** -10   # a deq_scale farther than this (relative) from input_scale * weight step is reported


def weight_step(w_ref: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The per-channel step ``[N, 1]`` (float64) of int8 codes ``q [N, K]`` of the float weight ``w_ref``: amax/127
    (msModelSlim's symmetric minmax) when it explains the codes (every code within half a step, with the model
    dtype's rounding), else the least-squares step ``sum(W q) / sum(q^2)`` of each channel. A static W8A8
    checkpoint stores no weight scale: this is the step its deq_scale should be ``input_scale`` times."""
    w = np.asarray(w_ref).astype(np.float32).astype(np.float64)
    qf = np.asarray(q).astype(np.float64)
    step = np.abs(w).max(axis=1, keepdims=True) / 127.0
    with np.errstate(invalid="ignore", divide="ignore"):
        near = np.abs(w - qf * step) <= step * (0.5 + 2.0 ** -7)
        if np.mean(near) >= 1 - FAR_FRACTION:
            return step
        fit = (w * qf).sum(axis=1, keepdims=True) / (qf * qf).sum(axis=1, keepdims=True)
    return np.where(np.isfinite(fit) & (fit > 0), fit, step)


@dataclass
class DeqPrecision:
    """How far a static Linear's stored deq_scale is from ``input_scale * weight step`` (computed in float64)."""

    module: str
    max_rel: float           # max over channels of |deq / (input_scale * step) - 1|
    subnormal: int           # channels whose stored deq_scale is below fp16's smallest normal (2^-14)
    channels: int
    sqnr_limit_db: float     # the SQNR the per-column scale error alone allows (inputs of equal power per channel)
    ideal: np.ndarray        # input_scale * step, fp32 [N]

    def text(self) -> str:
        why = (f"{self.subnormal} of {self.channels} channels below fp16's smallest normal (6.1e-5): "
               "input_scale * weight_scale computed in fp16 and stored as a subnormal, with few significant bits"
               if self.subnormal else "the stored scale is rounded coarsely")
        return (f"deq_scale precision: up to {self.max_rel:.2%} from input_scale * weight step ({why}); every "
                f"output column is scaled by that error, which alone limits the output to {self.sqnr_limit_db:.1f} dB "
                "SQNR")


def deq_precision(res: Resolution, prefix: str, w_ref: np.ndarray) -> DeqPrecision | None:
    """The deq_scale precision of static Linear ``prefix`` against its float weight (None: not static, or exact
    to within :data:`PRECISION_SHOWN`)."""
    tensors = res.linears.get(prefix, {})
    if res.types.get(prefix + ".weight") != "W8A8" or ".deq_scale" not in tensors or ".input_scale" not in tensors:
        return None
    deq = decode_deq_scale(res, tensors[".deq_scale"], np.asarray(res.tensor(tensors[".deq_scale"])), Findings())
    if deq is None:
        return None
    q = np.asarray(res.tensor(tensors[".weight"]))
    s = float(np.asarray(res.tensor(tensors[".input_scale"])).astype(np.float32).reshape(-1)[0])
    ideal = (s * weight_step(w_ref, q)).reshape(-1)
    d = deq.astype(np.float64).reshape(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.abs(d / ideal - 1)
    rel = np.where(np.isfinite(rel), rel, 1.0)
    if not rel.size or float(rel.max()) <= PRECISION_SHOWN:
        return None
    power = (np.asarray(w_ref).astype(np.float64) ** 2).sum(axis=1)
    noise = float((power * rel ** 2).sum())
    limit = 10 * np.log10(float(power.sum()) / noise) if noise > 0 else float("inf")
    return DeqPrecision(res.native_prefix(prefix), float(rel.max()), int(np.count_nonzero(d < FP16_MIN_NORMAL)),
                        int(d.size), float(limit), ideal.astype(np.float32))


def check_reference(res: Resolution, ref: dict, ref_config: dict | None = None, *,
                    max_modules: int = 64) -> tuple[Findings, list[Distance]]:
    """Findings (module docstring) and the distances of the checked modules."""
    found = Findings()
    cfg = res.checkpoint.config or {}
    if ref_config is not None:
        for key in CONFIG_KEYS:
            a, b = cfg.get(key), ref_config.get(key)
            if a is not None and b is not None and a != b:
                found.error("--reference", f"config.json {key} is {b!r}, the checkpoint's is {a!r}: not the model "
                                           "this checkpoint was exported from", "reference-config")
    quantized = [(p, res.types.get(p + ".weight")) for p in sorted(res.linears)
                 if res.types.get(p + ".weight") in ("W8A8", "W8A8_DYNAMIC", "W8A8_MIX")]
    present = []
    bad: dict[str, list[tuple[str, str]]] = {}
    for prefix, t in quantized:
        where = res.native_prefix(prefix)
        name, w = _lookup(ref, res, prefix)
        shape = res.shape(prefix + ".weight")
        if w is None:
            bad.setdefault("reference-missing", []).append(
                (where, f"{t} Linear has no float .weight in the reference (looked for {where}.weight)"))
        elif not _dt.is_float(np.asarray(w).dtype):
            bad.setdefault("reference-dtype", []).append(
                (where, f"the reference's {name} is {_dt.name(np.asarray(w).dtype)}, not a float tensor"))
        elif tuple(np.shape(w)) != tuple(shape or ()):
            bad.setdefault("reference-shape", []).append(
                (where, f"the reference's {name} is {list(np.shape(w))}, the checkpoint's weight {list(shape or ())}"))
        else:
            present.append((prefix, t, w))
    for code, items in bad.items():       # the first few by name, then a count: a wrong model has thousands
        for where, message in items[:SHOWN]:
            found.error(where, message, code)
        if len(items) > SHOWN:
            what = {"reference-missing": "absent from", "reference-dtype": "not float in",
                    "reference-shape": "of another shape in"}[code]
            found.error("--reference", f"... and {len(items) - SHOWN} more quantized Linears {what} the reference", code)
    if quantized and not present and not found.errors:
        found.error("--reference", "no quantized Linear of the checkpoint is in the reference", "reference-missing")
    # spread the distance checks over the layers; of the routed experts, expert 0 of each MoE
    dense = [x for x in present if parse_expert(x[0]) is None]
    experts = [x for x in present if parse_expert(x[0]) is not None]
    picked = dense + [x for x in experts if parse_expert(x[0])[1] in (0,)]
    if len(picked) > max_modules:
        idx = np.linspace(0, len(picked) - 1, max_modules).round().astype(int)
        picked = [picked[i] for i in sorted(set(idx))]
    distances: list[Distance] = []
    far_modules = []
    for prefix, t, w in picked:
        dq = dequantized(res, prefix, t)
        if dq is None:
            continue
        w_hat, step = dq
        wf = np.asarray(w).astype(np.float32).astype(np.float64)
        if t == "W8A8":      # no weight scale stored: judge the codes on their own step, the deq_scale apart
            step = weight_step(wf, np.asarray(res.tensor(res.linears[prefix][".weight"])))
            w_hat = np.asarray(res.tensor(res.linears[prefix][".weight"])).astype(np.float64) * step
            p = deq_precision(res, prefix, wf)
            if p is not None:
                found.warning(res.native_prefix(prefix), p.text(), "deq-scale-precision")
        diff = np.abs(wf - w_hat)
        norm = float(np.linalg.norm(wf))
        rel = float(np.linalg.norm(wf - w_hat) / norm) if norm > 0 else float("inf")
        far = float(np.mean(diff > step * (1 + 2.0**-7)))
        distances.append(Distance(res.native_prefix(prefix), rel, far))
        if rel > MAX_REL_L2 or far > FAR_FRACTION:
            far_modules.append((res.native_prefix(prefix), rel, far))
    if far_modules:
        shown = ", ".join(f"{m} (rel L2 {r:.3g}, {f:.1%} beyond one step)" for m, r, f in far_modules[:4])
        found.error("--reference", f"{len(far_modules)} of {len(distances)} checked Linears are not a quantization "
                                   f"of the reference's weight: {shown}{'...' if len(far_modules) > 4 else ''}. "
                                   "Not the model this checkpoint was exported from (or an anti-outlier / rotation "
                                   "step changed the weights before quantization)", "reference-distance")
    return found, distances
