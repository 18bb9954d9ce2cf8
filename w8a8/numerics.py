"""The ``Numerics`` record: every arithmetic choice point on which real backends differ.

A backend declares the record it implements; the golden run with that record must reproduce the
backend bit for bit. The defaults are the Ascend A2/A3 kernels as documented in
``spec/ascend-ops.md`` (the section of each field is cited below). Where the vendor behaviour is
not confirmed, the default is the golden's documented choice and the field exists so that a
backend which differs can say so.

Fields
------
round_mode : ``"half_even"`` | ``"half_away"``
    How a float becomes an integer code (quantization, requant). Ascend ``CAST_RINT`` is half to
    even (spec §1.3, §2.1); round-half-away-from-zero is ``CAST_ROUND``, C ``round()``, and the
    microxcaling default.
quant_codes : ``"mul_inv"`` | ``"div_scale"``
    Dynamic per-row quantization. ``"mul_inv"``: ``inv = qmax / amax`` (fp32 division), codes are
    ``round(x * inv)`` — the Ascend kernel (spec §1.3). ``"div_scale"``: codes are
    ``round(x / scale)`` with the scale of ``scale_out`` — the op-plugin goldens and most
    reference code.
scale_out : ``"reciprocal"`` | ``"amax_mul_rcp"`` | ``"amax_div"``
    The per-row scale that dynamic quantization returns: ``1 / inv`` (Ascend main path),
    ``amax * fp32(1/qmax)`` (Ascend double-buffer path), or ``amax / qmax``.
zero_row : ``"zero"`` | ``"int_min"``
    Codes written for an all-zero row, where ``0 * (qmax / 0)`` is NaN before the float->int cast.
    The device's integer for NaN is not confirmed (spec §10.1); the golden writes 0. The scale of
    such a row is 0 either way, so downstream matmuls produce 0.
nan_policy : ``"raise"`` | ``"ieee"``
    NaN/Inf in the input of a quantizer. ``"raise"``: the golden refuses them (ValueError naming
    the argument), since the device behaviour is unspecified. ``"ieee"``: compute through them with
    IEEE fp32 semantics; a NaN code becomes 0 (as ``zero_row``), +-Inf codes saturate.
saturate : bool
    float->int conversions saturate to the integer range (True) or wrap modulo 2^bits (False).
fp19_scale : ``"adapter"`` | ``"never"`` | ``"always"``
    Whether ``quant_matmul`` reduces an fp32 per-channel scale to FP19 (``trans_quant_param``).
    ``"adapter"``: exactly where the torch_npu adapter packs it — fp32 scale, no per-token scale,
    output fp16 or int8 (spec §3.5). ``"always"``/``"never"``: everywhere/nowhere.
fp19_round_mode : 0 | 1
    FP19 packing: 0 truncates the mantissa (the default of ``npu_trans_quant_param``), 1 rounds to
    nearest even (spec §4).
int32_bias : ``"accumulator"`` | ``"after_dequant"``
    Where an int32 bias enters: added to the int32 accumulator before any scaling (the Ascend
    cube, spec §3.4) or, wrongly, converted to float and added after the dequant multiply.
epilogue_order : ``"scale_then_token"`` | ``"token_then_scale"`` | ``"combined"``
    fp32 order of the per-channel and per-token multiplies: ``(acc * scale[n]) * token[m]``
    (Ascend, spec §3.4), ``(acc * token[m]) * scale[n]``, or ``acc * (scale[n] * token[m])``.
requant_clamp9 : bool
    int8 requant output: round-and-clamp to 9 bits after the dequant multiply and after adding the
    offset, then clamp to int8 — the CANN golden's ``s9`` steps (spec §3.4). False rounds once.
transcendental : ``"float64"`` | ``"float32"``
    ``exp`` in SiLU / softmax / sigmoid: evaluated in float64 and rounded to float32 (golden
    default: a correctly rounded fp32 result in all but ~2^-29 of cases, so that two backends that
    both do this agree), or NumPy's float32 ``exp``. Device exp units are approximations; their
    difference is a tolerance matter, not a bitwise one.
routing_quant_round : ``"half_even"`` | ``"trunc_fp16_half_away"``
    ``moe_init_routing_v2`` dynamic quant rounding: RINT on the newer full-row path, or the
    column-tiled path's fp32->fp16 truncation followed by fp16->int8 half-away (spec §7.6).
zero_point_position : ``"after_rounding"`` | ``"before_rounding"``
    ``quantize(div_mode=True)``: ``rint(x / s) + zp`` (torch ``quantize_per_channel``, golden
    choice) or ``rint(x / s + zp)``. Not confirmed for the A2/A3 kernel (spec §2.2, §10.5); the two
    differ at ties even for integer zero points (``rint(0.5) + 1 = 1``, ``rint(1.5) = 2``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

__all__ = ["ASCEND", "Numerics"]

_CHOICES: dict[str, tuple] = {
    "round_mode": ("half_even", "half_away"),
    "quant_codes": ("mul_inv", "div_scale"),
    "scale_out": ("reciprocal", "amax_mul_rcp", "amax_div"),
    "zero_row": ("zero", "int_min"),
    "nan_policy": ("raise", "ieee"),
    "saturate": (True, False),
    "fp19_scale": ("adapter", "never", "always"),
    "fp19_round_mode": (0, 1),
    "int32_bias": ("accumulator", "after_dequant"),
    "epilogue_order": ("scale_then_token", "token_then_scale", "combined"),
    "requant_clamp9": (True, False),
    "transcendental": ("float64", "float32"),
    "routing_quant_round": ("half_even", "trunc_fp16_half_away"),
    "zero_point_position": ("after_rounding", "before_rounding"),
}


@dataclass(frozen=True)
class Numerics:
    """Arithmetic choices of a backend. Defaults: the Ascend A2/A3 kernels (module docstring)."""

    name: str = "ascend-a2a3"
    round_mode: Literal["half_even", "half_away"] = "half_even"
    quant_codes: Literal["mul_inv", "div_scale"] = "mul_inv"
    scale_out: Literal["reciprocal", "amax_mul_rcp", "amax_div"] = "reciprocal"
    zero_row: Literal["zero", "int_min"] = "zero"
    nan_policy: Literal["raise", "ieee"] = "raise"
    saturate: bool = True
    fp19_scale: Literal["adapter", "never", "always"] = "adapter"
    fp19_round_mode: Literal[0, 1] = 0
    int32_bias: Literal["accumulator", "after_dequant"] = "accumulator"
    epilogue_order: Literal["scale_then_token", "token_then_scale", "combined"] = "scale_then_token"
    requant_clamp9: bool = True
    transcendental: Literal["float64", "float32"] = "float64"
    routing_quant_round: Literal["half_even", "trunc_fp16_half_away"] = "half_even"
    zero_point_position: Literal["after_rounding", "before_rounding"] = "after_rounding"

    def __post_init__(self):
        for field, allowed in _CHOICES.items():
            value = getattr(self, field)
            if value not in allowed or type(value) is not type(allowed[0]):
                raise ValueError(f"Numerics: field '{field}' must be one of {allowed}; got {value!r}")

    def replace(self, **changes) -> "Numerics":
        """A copy with some fields changed (``name`` defaults to a description of the change)."""
        if "name" not in changes:
            changes["name"] = self.name + "+" + ",".join(f"{k}={v}" for k, v in changes.items())
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Numerics":
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Numerics.from_dict: unknown fields {sorted(unknown)}")
        return cls(**data)

    def differences(self, other: "Numerics") -> dict[str, tuple]:
        """``{field: (self_value, other_value)}`` for every arithmetic field that differs."""
        return {f: (getattr(self, f), getattr(other, f)) for f in _CHOICES
                if getattr(self, f) != getattr(other, f)}

    @staticmethod
    def choices() -> dict[str, tuple]:
        """Every arithmetic field with its allowed values (the first is the Ascend default)."""
        return dict(_CHOICES)


ASCEND = Numerics()
"""The Ascend A2/A3 (910B / 910C) kernel behaviour: the golden's default."""
