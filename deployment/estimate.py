"""Deployment calculator: weight bytes per format, devices and nodes needed, decode lower bound.

The calculation of the note "超大 MoE 的低比特推理" (low-bit inference of very large MoE), generalised::

    weight_bytes = sum over weights of the format's bytes (data + scales)
                 = total_params * bytes_per_param               (from --total / --active)
    devices      = ceil(weight_bytes / (device_memory * (1 - reserve)))      reserve: KV cache + activations
    nodes        = ceil(devices / devices_per_node)
    decode_ms    = active_bytes / (parallel * device_bandwidth) * 1e3
                   (every device of the parallel group reads its share of the weights a token touches
                   once per decode step: a lower bound, ignoring KV reads, compute and communication)

Formats (bytes per parameter, including scales; the nominal value for ``--total``):

=======  ================================================  =====================
BF16     bfloat16                                          2
FP8      E4M3, one fp32 scale per 128x128 block            1 + 4 / 128^2
INT8     per-channel, one fp32 scale per output row of K   1 + 4 / K
INT4     one bf16 scale per group of 32                    0.5 + 2 / 32
MXFP4    E2M1, one E8M0 scale per 32                       0.5 + 1 / 32
NVFP4    E2M1, one E4M3 scale per 16                       0.5 + 1 / 16
=======  ================================================  =====================

With ``--total`` the per-channel INT8 overhead needs a row length: ``row_length`` (default 4096,
the hidden size of DeepSeek-V4-Flash). With ``--config`` every weight is counted with its real
shape: block and group counts are rounded up per matrix (``ceil(N/128) * ceil(K/128)`` FP8 scales,
``N * ceil(K/G)`` group scales, ``N`` per-channel scales; a 1-D tensor is one row), and NVFP4 adds
its one fp32 per-tensor scale. Index buffers (DeepSeek-V4's ``tid2eid``) are not parameters and are
left out. Every parameter is stored in the format (norms and embeddings included), as in the note.

Parameter counts from a config (DeepSeek-V3/V4-style MoE; the tensor list of
:mod:`checkpoints.models`, shapes listed there)::

    total  = embedding + lm_head + final norm + per layer (attention + norms + MLP or MoE)
             MoE layer = router [E, H] (+ bias) + E routed experts x 3*H*I + shared experts 3*H*I*n_shared
    active = total - embedding - routed experts + per MoE layer k routed experts (k = num_experts_per_tok)

The embedding is not active (a token reads one row of it); MTP (next-n) layers are left out of
both unless ``include_mtp`` — DeepSeek's "671B total, 37B activated" for V3 counts the same way.

``devices`` rounds up with a relative guard of 1e-12 (a few float64 rounding steps), so that a quotient
like 6.000000000000001 caused by binary rounding (``1 - 0.3`` is not 0.7) is not counted as 7 devices.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Format:
    name: str
    label: str
    data_bytes: float                 # bytes per element of the payload
    scale_bytes: float = 0.0          # bytes per scale
    block: tuple[int, int] | None = None   # (rows, cols) covered by one scale; (1, 0) = one per row
    tensor_scale_bytes: float = 0.0   # one extra scale per tensor (NVFP4's fp32 global scale)

    def bytes_per_param(self, row_length: int = 4096) -> float:
        """Nominal bytes per parameter (what the note's table uses)."""
        if self.block is None:
            return self.data_bytes
        rows, cols = self.block
        per = rows * (cols or row_length)
        return self.data_bytes + self.scale_bytes / per

    def tensor_bytes(self, shape: tuple[int, ...]) -> float:
        """Exact bytes of one tensor of ``shape`` (blocks rounded up; 1-D = one row)."""
        shape = tuple(shape)
        if len(shape) == 0:
            shape = (1, 1)
        elif len(shape) == 1:
            shape = (1,) + shape
        lead = math.prod(shape[:-2])
        n, k = shape[-2], shape[-1]
        total = lead * n * k * self.data_bytes
        if self.block is not None:
            rows, cols = self.block
            scales = lead * math.ceil(n / rows) * (1 if cols == 0 else math.ceil(k / cols))
            total += scales * self.scale_bytes + self.tensor_scale_bytes
        return total


FORMATS: tuple[Format, ...] = (
    Format("BF16", "bfloat16", 2.0),
    Format("FP8", "FP8 E4M3, fp32 scale per 128x128 block", 1.0, 4.0, (128, 128)),
    Format("INT8", "INT8, fp32 scale per output channel", 1.0, 4.0, (1, 0)),
    Format("INT4", "INT4, bf16 scale per 32", 0.5, 2.0, (1, 32)),
    Format("MXFP4", "MXFP4 E2M1, E8M0 scale per 32", 0.5, 1.0, (1, 32)),
    Format("NVFP4", "NVFP4 E2M1, E4M3 scale per 16", 0.5, 1.0, (1, 16), 4.0),
)
FORMAT_NAMES = tuple(f.name for f in FORMATS)


@dataclass(frozen=True)
class Device:
    name: str
    memory: float          # bytes (decimal GB * 1e9)
    bandwidth: float       # bytes / s (decimal TB/s * 1e12)
    source: str = ""


DEVICES: dict[str, Device] = {
    # NVIDIA H200 (SXM): 141 GB HBM3e, 4.8 TB/s — NVIDIA H200 Tensor Core GPU product page / datasheet;
    # the note uses the same two numbers.
    "h200": Device("H200", 141e9, 4.8e12, "NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s"),
    # NVIDIA H100 SXM5: 80 GB HBM3, 3.35 TB/s — NVIDIA H100 Tensor Core GPU datasheet (SXM column).
    "h100": Device("H100", 80e9, 3.35e12, "NVIDIA H100 datasheet (SXM): 80 GB HBM3, 3.35 TB/s"),
    # NVIDIA B200 (HGX / DGX B200): DGX B200 datasheet lists 1,440 GB total GPU memory and 64 TB/s HBM3e
    # bandwidth for 8 GPUs, i.e. 180 GB and 8 TB/s per GPU.
    "b200": Device("B200", 180e9, 8.0e12, "NVIDIA DGX B200 datasheet: 1,440 GB / 64 TB/s over 8 GPUs"),
    # Huawei Ascend 910C: 128 GB HBM, 3.2 TB/s per package — as reported for the CloudMatrix384
    # supernode (Huawei's "Serving Large Language Models on Huawei CloudMatrix384", arXiv 2506.12708;
    # 384 NPUs ~ 48 TB HBM), and DigiTimes via TechPowerUp (910C: 3,200 GB/s). Vendor datasheet
    # figures for the A3 cards are not published in the same form: treat as approximate.
    "910c": Device("Ascend 910C", 128e9, 3.2e12, "CloudMatrix384 reports: 128 GB HBM, 3.2 TB/s per 910C"),
}
_DEVICE_ALIASES = {"ascend910c": "910c", "ascend-910c": "910c", "ascend_910c": "910c", "a3": "910c"}


def get_device(name: str | None = None, *, memory_gb: float | None = None,
               bandwidth_tbs: float | None = None) -> Device:
    """A built-in device (``name``), with its memory (GB) / bandwidth (TB/s) optionally overridden, or a
    custom one from both values. ValueError names the argument on bad input."""
    base = None
    if name is not None:
        key = name.strip().lower().replace(" ", "")
        key = _DEVICE_ALIASES.get(key, key)
        if key not in DEVICES:
            raise ValueError(f"estimate: argument 'device' must be one of {', '.join(DEVICES)} (or give --memory "
                             f"and --bandwidth); got {name!r}")
        base = DEVICES[key]
    elif memory_gb is None or bandwidth_tbs is None:
        raise ValueError("estimate: give a device name, or both 'memory' (GB) and 'bandwidth' (TB/s) for a "
                         "custom device")
    memory = base.memory if memory_gb is None else _positive("memory", memory_gb) * 1e9
    bandwidth = base.bandwidth if bandwidth_tbs is None else _positive("bandwidth", bandwidth_tbs) * 1e12
    if base is None:
        return Device("custom", memory, bandwidth, "user values")
    if memory_gb is None and bandwidth_tbs is None:
        return base
    return Device(base.name + " (custom)", memory, bandwidth, "user values over " + base.source)


def _positive(arg: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"estimate: argument '{arg}' must be a positive finite number; got {value!r}")
    return float(value)


def _ceil(x: float) -> int:
    n = math.ceil(x)
    if n >= 1 and x - (n - 1) <= 1e-12 * max(x, 1.0):
        n -= 1
    return max(n, 0)


@dataclass(frozen=True)
class ModelSize:
    """What the calculation needs about a model: parameter counts, and optionally its tensors."""

    total: float
    active: float
    tensors: tuple = ()                 # ((shape, active_fraction), ...) when derived from a config
    source: str = ""

    def weight_bytes(self, fmt: Format, row_length: int) -> tuple[float, float]:
        """(all weights, the weights one token reads) in ``fmt``, bytes."""
        if not self.tensors:
            b = fmt.bytes_per_param(row_length)
            return self.total * b, self.active * b
        total = active = 0.0
        for shape, frac in self.tensors:
            nbytes = fmt.tensor_bytes(shape)
            total += nbytes
            active += nbytes * frac
        return total, active


# No model has an exa-parameter; a count above this is a typo, and its byte and device counts overflow
# (1e308 parameters is an infinite number of bytes).
MAX_PARAMETERS = 1e18


def model_from_counts(total, active) -> ModelSize:
    total = _positive("total", total)
    active = _positive("active", active)
    for name, value in (("total", total), ("active", active)):
        if value > MAX_PARAMETERS:
            raise ValueError(f"estimate: argument '{name}' must be at most {MAX_PARAMETERS:g} parameters; "
                             f"got {value:g}")
    if active > total:
        raise ValueError(f"estimate: argument 'active' ({active:g}) must not exceed 'total' ({total:g})")
    return ModelSize(total, active, source="given counts")


def model_from_config(config, *, include_mtp: bool = False) -> ModelSize:
    """Parameter counts and tensor shapes of a DeepSeek-V3/V4-style config: a dict, a path to a
    config.json, or a preset name of :data:`checkpoints.models.PRESETS`."""
    from checkpoints.models import model_tensors

    from checkpoints.models import PRESETS

    if isinstance(config, str) and config in PRESETS:
        config = PRESETS[config]
    elif isinstance(config, (str, Path)):
        path = Path(config)
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"estimate: argument 'config': cannot read {path} as JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"estimate: argument 'config' must be a JSON object; got {type(config).__name__}")
    specs = [t for t in model_tensors(config) if not t.integer and (include_mtp or not t.mtp)]
    k = config.get("num_experts_per_tok", config.get("n_activated_experts"))
    n_exp = config.get("n_routed_experts")
    if not isinstance(k, int) or not isinstance(n_exp, int) or not 0 < k <= n_exp:
        raise ValueError(f"estimate: config needs num_experts_per_tok (k) and n_routed_experts (E) with 0 < k <= E; "
                         f"got k={k!r}, E={n_exp!r}")
    frac = {"expert": k / n_exp, "embedding": 0.0}
    tensors = tuple((t.shape, frac.get(t.role, 1.0)) for t in specs)
    total = float(sum(t.numel for t in specs))
    active = float(sum(t.numel * frac.get(t.role, 1.0) for t in specs))
    return ModelSize(total, active, tensors, source=f"config ({config.get('model_type', '?')})")


@dataclass(frozen=True)
class Row:
    format: str
    label: str
    weight_bytes: float
    active_bytes: float
    devices: int
    nodes: int
    decode_ms: float

    def as_json(self) -> dict:
        return {"format": self.format, "weight_bytes": self.weight_bytes, "devices": self.devices,
                "nodes": self.nodes, "decode_ms": self.decode_ms}


def estimate(model: ModelSize, device: Device, *, formats=FORMAT_NAMES, reserve: float = 0.3, parallel: int = 8,
             devices_per_node: int = 8, row_length: int = 4096) -> list[Row]:
    """One :class:`Row` per format (see the module docstring for the formulas)."""
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not 0 <= reserve < 1:
        raise ValueError(f"estimate: argument 'reserve' must be a fraction in [0, 1); got {reserve!r}")
    for arg, value in (("parallel", parallel), ("devices_per_node", devices_per_node), ("row_length", row_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"estimate: argument '{arg}' must be a positive integer; got {value!r}")
    by_name = {f.name.lower(): f for f in FORMATS}
    chosen = []
    for name in formats:
        if str(name).lower() not in by_name:
            raise ValueError(f"estimate: argument 'formats': unknown format {name!r}; known: {', '.join(FORMAT_NAMES)}")
        chosen.append(by_name[str(name).lower()])
    usable = device.memory * (1 - reserve)
    rows = []
    for fmt in chosen:
        w, a = model.weight_bytes(fmt, row_length)
        devices = _ceil(w / usable)
        rows.append(Row(fmt.name, fmt.label, w, a, devices, _ceil(devices / devices_per_node),
                        a / (parallel * device.bandwidth) * 1e3))
    return rows
