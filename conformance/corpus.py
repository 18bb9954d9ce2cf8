"""Named semantic cases: small inputs with documented expected outputs, each explaining its bits.

A corpus case is run like a drawn one (its parameters are ``{"corpus": "<op>/<name>"}``), and in
addition both the golden and the backend are checked against the expected values written here —
derived by hand from the vendor documentation, not from the golden. Op families add their cases
with :func:`case`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from w8a8 import dtypes as _dt

BF16 = _dt.bfloat16


@dataclass(frozen=True)
class NamedCase:
    op: str
    name: str
    build: Callable[[], tuple[tuple, dict]]
    expected: dict
    why: str

    @property
    def key(self) -> str:
        return f"{self.op}/{self.name}"


_CASES: dict[str, NamedCase] = {}


def case(op: str, name: str, build: Callable[[], tuple[tuple, dict]], expected: dict, why: str) -> NamedCase:
    c = NamedCase(op, name, build, expected, why)
    _CASES[c.key] = c
    return c


def cases(op: str | None = None) -> list[NamedCase]:
    _load()
    return [c for c in _CASES.values() if op is None or c.op == op]


def get(key: str) -> NamedCase:
    _load()
    if key not in _CASES:
        raise KeyError(f"no corpus case {key!r}; known: {', '.join(sorted(_CASES))}")
    return _CASES[key]


_loaded = False


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from .registry import specs

        specs()  # op families register their corpus cases when they load


def a(values, dtype) -> np.ndarray:
    return np.asarray(np.asarray(values, dtype=np.float64).astype(np.float32), dtype=np.float32).astype(dtype) \
        if np.dtype(dtype).kind in "fV" else np.asarray(values, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# dynamic_quant

case("dynamic_quant", "doc_example_1",
     lambda: ((a([[0.7261, 0.3726, 0.9126], [0.9023, 0.9990, 0.1279], [0.8628, 0.6240, 0.9028]], np.float16),), {}),
     {"y": np.array([[101, 52, 127], [115, 127, 16], [121, 88, 127]], np.int8)},
     "Device output printed in the torch_npu npu_dynamic_quant doc (op-plugin docs/context/"
     "torch_npu-npu_dynamic_quant.md, example 1). Row 0: 127/0.9126 = 139.16..; 0.7261 * that = 101.04 -> 101.")

case("dynamic_quant", "doc_example_2_smooth",
     lambda: ((a([[0.6680, 0.9492, 0.0845], [0.1924, 0.5278, 0.1484], [0.6631, 0.9497, 0.0957]], np.float16),),
              {"smooth_scales": a([0.8042, 0.0884, 0.8901], np.float16)}),
     {"y": np.array([[127, 20, 18], [127, 38, 108], [127, 20, 20]], np.int8)},
     "Device output of the doc's smooth_scales example: x is multiplied by smooth in fp32 before the row max "
     "(row 0: 0.668*0.8042 = 0.537 is the max, so it maps to 127).")

case("dynamic_quant", "ties_half_even",
     lambda: ((a([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]], BF16),), {}),
     {"y": np.array([[127, 0, 2, 2, 0, -2, -2, 4]], np.int8), "scale": np.array([1.0], np.float32)},
     "amax = 127, so inv = 127/127 = 1.0 exactly and every x*inv is the exact tie k+0.5: half-to-even "
     "(CAST_RINT) gives 0.5->0, 1.5->2, 2.5->2, 3.5->4 and their negatives; half-away would give 1, 2, 3, 4. "
     "scale = 1/inv = 1.0.")

case("dynamic_quant", "reciprocal_vs_divide",
     lambda: ((a([[2.25, 1.125]], BF16),), {}),
     {"y": np.array([[127, 64]], np.int8)},
     "inv = 127/2.25 = 56.444443f; 1.125*inv = 63.5f exactly, a tie that rounds to even 64. The divide form "
     "1.125/(2.25/127) = 63.499996f rounds to 63: this pins the kernel's multiply-by-reciprocal order.")

case("dynamic_quant", "all_zero_row",
     lambda: ((a([[0.0] * 8, [1.0, -2.0, 0, 0, 0, 0, 0, 0.5]], np.float16),), {}),
     {"y": np.array([[0] * 8, [64, -127, 0, 0, 0, 0, 0, 32]], np.int8), "scale": np.array([0.0, 2.0 / 127],
                                                                                          np.float32)},
     "Row 0: amax = 0, inv = 127/0 = inf, 0*inf = NaN; the golden writes code 0 (the device's NaN->int is not "
     "confirmed) and scale 1/inf = 0. Row 1: inv = 63.5f; 1*63.5 = 63.5 -> 64 (even), 0.5*63.5 = 31.75 -> 32; "
     "scale = 1/63.5f = 0.015748031f (= 2/127 in fp32).")

case("dynamic_quant", "int4_packing",
     lambda: ((a([[7, -7, 1, -1, 2, -2, 3, -3]], np.float16),), {"dst_type": "int4"}),
     {"y": np.array([[np.uint32(0xD3E2F197).view(np.int32)]], np.int32)},
     "int4: qmax = 7 and amax = 7, so inv = 1 and the codes are the values. Packed LSB first into one int32: "
     "nibbles 7, 9(-7), 1, F(-1), 2, E(-2), 3, D(-3) from bit 0 up = 0xD3E2F197.")

# ---------------------------------------------------------------------------------------------
# trans_quant_param

case("trans_quant_param", "one", lambda: ((a([1.0], np.float32),), {}),
     {"packed": np.array([0x0000_4000_3F80_0000], np.int64)},
     "1.0f = 0x3F800000 (low mantissa bits already zero) | bit 46 (0x4000_0000_0000) flag.")

case("trans_quant_param", "one_offset_minus_3", lambda: ((a([1.0], np.float32), a([-3.0], np.float32)), {}),
     {"packed": np.array([0x0000_7FA0_3F80_0000], np.int64)},
     "offset -3 -> 9-bit two's complement 0x1FD, << 37 = 0x3FA0_0000_0000; | flag | 0x3F800000.")

case("trans_quant_param", "fp19_truncation", lambda: ((a([1.0009765], np.float32),), {}),
     {"packed": np.array([0x0000_4000_3F80_0000], np.int64)},
     "1.0009765f = 0x3F801FFF: its mantissa bits 0..12 are all set and truncation (round_mode 0) clears them "
     "to 1.0: the largest possible FP19 error, just under 2^-10 relative.")

case("trans_quant_param", "fp19_round_even_carry", lambda: ((a([1.0009765], np.float32),), {"round_mode": 1}),
     {"packed": np.array([0x0000_4000_3F80_2000], np.int64)},
     "round_mode 1: the dropped bits 0x1FFF exceed half (0x1000), so the kept mantissa rounds up by 0x2000: "
     "0x3F802000 = 1.0009766f.")

case("trans_quant_param", "offset_ties", lambda: ((a([1.0, 1.0], np.float32), a([2.5, 3.5], np.float32)), {}),
     {"packed": np.array([0x0000_4000_3F80_0000 | (2 << 37), 0x0000_4000_3F80_0000 | (4 << 37)], np.int64)},
     "Offsets round half to even before packing: 2.5 -> 2, 3.5 -> 4.")

# ---------------------------------------------------------------------------------------------
# quant_matmul

_ONE_PLUS = np.array([0x3F801FFF], np.uint32).view(np.float32)  # 1.0009765f


case("quant_matmul", "fp19_packing_fp16_out",
     lambda: ((a([[10]], np.int8), a([[100]], np.int8), _ONE_PLUS.copy()), {"output_dtype": "float16"}),
     {"y": np.array([[1000.0]], np.float16)},
     "fp32 scale + fp16 output + no pertoken_scale: the torch_npu adapter packs the scale with "
     "trans_quant_param (round_mode 0), truncating 1.0009765 to 1.0, so 1000*1.0 = 1000. With the scale at full "
     "precision it would be 1000.9765 -> fp16 1001.")

case("quant_matmul", "no_fp19_with_pertoken",
     lambda: ((a([[10]], np.int8), a([[100]], np.int8), _ONE_PLUS.copy()),
              {"pertoken_scale": a([1.0], np.float32), "output_dtype": "float16"}),
     {"y": np.array([[1001.0]], np.float16)},
     "With pertoken_scale the adapter does not pack: 1000 * 1.0009765f = 1000.9765 -> fp16 (ulp 0.5 at 1000) "
     "rounds to 1001.")

case("quant_matmul", "int32_bias_before_dequant",
     lambda: ((a([[1]], np.int8), a([[1]], np.int8), a([0.5], BF16)),
              {"bias": a([3], np.int32), "output_dtype": "bfloat16"}),
     {"y": np.array([[2.0]], np.float32).astype(BF16)},
     "An int32 bias is added to the accumulator inside the cube: (1 + 3) * 0.5 = 2.0. Adding it after the "
     "dequant would give 1*0.5 + 3 = 3.5.")

case("quant_matmul", "int8_requant_9bit",
     lambda: ((a([[15]], np.int8), a([[20]], np.int8), a([1.0], np.float32)),
              {"offset": a([-200.0], np.float32), "output_dtype": "int8"}),
     {"y": np.array([[55]], np.int8)},
     "acc = 300; s9(300*1.0) clamps to 255; 255 + s9(-200) = 55 -> int8 55. Without the 9-bit steps it would be "
     "300 - 200 = 100.")

case("quant_matmul", "int32_output_ignores_scale",
     lambda: ((a([[-128, -128]], np.int8), a([[-128], [-128]], np.int8), a([0.001], np.float32)),
              {"output_dtype": "int32"}),
     {"y": np.array([[32768]], np.int32)},
     "int32 output returns the raw accumulator: (-128)*(-128)*2 = 32768, whatever the scale.")


def _nz_expected():
    w = (np.arange(17 * 33).reshape(17, 33) % 251 - 125).astype(np.int8)
    out = np.zeros((2, 2, 16, 32), np.int8)  # ceil(33/32) = 2 column blocks, ceil(17/16) = 2 row blocks
    for r in range(17):
        for c in range(33):
            out[c // 32, r // 16, r % 16, c % 32] = w[r, c]
    return w, out


case("format_cast_nz", "int8_17x33_positions", lambda: ((_nz_expected()[0],), {}),
     {"w_nz": _nz_expected()[1]},
     "int8 C0 = 32: element (r, c) of a [17, 33] weight lives at [c//32, r//16, r%16, c%32] of a [2, 2, 16, 32] "
     "storage; everything else is zero padding. Expected built element by element from that rule.")
