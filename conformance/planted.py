"""Backends with planted bugs: proof that conformance catches and attributes real mistakes.

Each is a small, independent NumPy implementation of ``dynamic_quant``, ``quant_matmul`` and
``w8a8_dynamic_linear`` (written here, not by re-running the golden with another ``Numerics``),
which declares the Ascend numerics without shape-dependent kernel variants (``variants="fixed"``: one
kernel per op, the main-path formulas) but gets one thing wrong, the way kernels do. Like any backend
it gets the golden's checked arguments (:meth:`backends.base.Backend.prepare` runs the golden's check):
its own code is the arithmetic only.

* ``TiesAwayBackend`` — rounds .5 ties away from zero (``floor(|x| + 0.5)``) instead of to even;
* ``DivideScaleBackend`` — computes the scale as ``amax / 127`` and divides ``x / scale``
  instead of multiplying by ``127 / amax``;
* ``Fp19EverywhereBackend`` — truncates every fp32 scale to FP19, also on the per-token / bf16
  path where torch_npu keeps it at full precision;
* ``BiasAfterDequantBackend`` — adds an int32 bias after the dequant multiply instead of to the
  int32 accumulator.

Foreign-style kernels (the mistakes of kernels written for other libraries' numerics):

* ``HalfRangeBf16ScaleBackend`` — the torchao / compressed-tensors int8 quantizer in a backend that
  declares the Ascend record: ``s = bf16(amax / 127.5)``, codes ``rint(x * fp32(1 / s))`` in [-128, 127];
* ``MxFloorOnlyBackend`` — an ``mx_quantize`` that ignores ``scale_mode`` and always computes FLOOR;
* ``MxByte0HalfBackend`` — FLOOR MX with torchao's byte-0 bug (elements divided by 2^-126 under byte 0):
  the ``mx-byte0-half`` detector must name it;
* ``FusedActQuantBackend`` — a correct ``dynamic_quant``, but a fused ``w8a8_dynamic_linear`` whose own
  activation quant divides (``scale = amax / 127``, codes ``rint(x / scale)``): attribution must find the
  activation stage of the fused kernel, not read the (correct) sibling op.

Use one as ``w8a8 conformance --backend conformance.planted:TiesAwayBackend``.
"""

from __future__ import annotations

import numpy as np

from backends.base import Backend, Unsupported, implements
from w8a8 import ASCEND
from w8a8 import dtypes as _dt


class _PlantedBase(Backend):
    device = "cpu"
    bug = ""
    # One kernel per op (the dynamic_quant scale 1 / inv whatever the shape): the record these backends
    # implement, bugs aside. The golden under it computes the same fixed formulas (w8a8.variants).
    numerics = ASCEND.replace(name="ascend-a2a3-fixed", variants="fixed")

    @property
    def description(self):  # type: ignore[override]
        return f"planted bug: {self.bug}"

    def declines(self, op, a):
        """What these small kernels do not take (conformance does not draw it)."""
        if op == "dynamic_quant" and (a.smooth_scales is not None or a.group_index is not None or a.dst_name != "int8"):
            return "plain int8 dynamic_quant only (no smooth_scales, no group_index, no int4)"
        if op == "quant_matmul" and (_dt.name(a.out) not in ("bfloat16", "float16", "int32") or a.int4 is not None):
            return f"bfloat16 / float16 / int32 output with int8 weights only; got {_dt.name(a.out)}" + \
                (" with int4 weights" if a.int4 is not None else "")
        return None

    # -- quantization ------------------------------------------------------------------------
    def _round(self, t: np.ndarray) -> np.ndarray:
        return np.rint(t)

    def _row_quant(self, xf: np.ndarray, qmax: int) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = np.abs(xf).max(axis=-1, keepdims=True, initial=np.float32(0))  # an empty row: amax 0
            inv = np.float32(qmax) / m
            q = self._round(xf * inv)
            scale = np.float32(1) / inv
        q = np.where(np.isnan(q), 0, np.clip(q, -qmax, qmax))
        return q.astype(np.int8), scale[..., 0].astype(np.float32)

    @implements("dynamic_quant")
    def _dynamic_quant(self, a):
        if a.smooth_scales is not None or a.group_index is not None or a.dst_name != "int8":
            raise Unsupported(f"{self.name}: plain int8 dynamic_quant only")
        return self._int8_rows(a.x)

    def _int8_rows(self, x):
        xf = x.astype(np.float32).reshape(int(np.prod(x.shape[:-1])), x.shape[-1])  # H = 0 too
        q, s = self._row_quant(xf, 127)
        return q.reshape(x.shape), s.reshape(x.shape[:-1])

    # -- matmul --------------------------------------------------------------------------------
    def _scale_value(self, scale: np.ndarray, out: str, has_token: bool) -> np.ndarray:
        s = scale.reshape(-1)
        if s.dtype == np.int64:
            return (s.view(np.uint64) & np.uint64(0xFFFFE000)).astype(np.uint32).view(np.float32)
        sf = s.astype(np.float32)
        if s.dtype == np.float32 and not has_token and out in ("float16", "int8"):
            sf = (sf.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
        return sf

    def _add_bias_in_acc(self) -> bool:
        return True

    @implements("quant_matmul")
    def _quant_matmul(self, a):
        out = _dt.name(a.out)
        if out not in ("bfloat16", "float16", "int32") or a.int4 is not None:
            raise Unsupported(f"{self.name}: output {out} / int4 weights not implemented")
        return self._matmul(a.x1, a.x2, a.scale, a.pertoken_scale, a.bias, out)

    def _matmul(self, x1, x2, scale, pertoken_scale, bias, out: str):
        acc = np.matmul(x1.astype(np.float64), x2.astype(np.float64)).astype(np.int64)
        int_bias = bias is not None and bias.dtype == np.int32
        if int_bias and (self._add_bias_in_acc() or out == "int32"):
            acc = acc + bias.astype(np.int64)
        if out == "int32":
            return acc.astype(np.int32)
        v = acc.astype(np.float32) * self._scale_value(scale, out, pertoken_scale is not None)
        if pertoken_scale is not None:
            v = v * pertoken_scale.astype(np.float32)[:, None]
        if bias is not None and (not int_bias or not self._add_bias_in_acc()):
            v = v + bias.astype(np.float32)
        return v.astype(np.float32).astype(_dt.resolve(out))

    @implements("w8a8_dynamic_linear")
    def _w8a8_dynamic_linear(self, a):
        x, p = a.x, a.params   # the parameters as the golden loads them (scale and bias in the model dtype)
        xq, s = self._int8_rows(x.reshape(-1, p.k))
        y = self._matmul(xq, p.weight.T, p.weight_scale, s, p.bias, _dt.name(x.dtype))
        return y.reshape(x.shape[:-1] + (p.n,))


class TiesAwayBackend(_PlantedBase):
    name = "planted-ties-away"
    bug = "rounds .5 ties away from zero"

    def _round(self, t):
        t64 = t.astype(np.float64)
        return (np.sign(t64) * np.floor(np.abs(t64) + 0.5)).astype(t.dtype)


class DivideScaleBackend(_PlantedBase):
    name = "planted-divide-scale"
    bug = "scale = amax/127, codes = x/scale"

    def _row_quant(self, xf, qmax):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = np.abs(xf).max(axis=-1, keepdims=True, initial=np.float32(0))
            scale = m / np.float32(qmax)
            q = np.rint(xf / scale)
        q = np.where(np.isnan(q), 0, np.clip(q, -qmax, qmax))
        return q.astype(np.int8), scale[..., 0].astype(np.float32)


class Fp19EverywhereBackend(_PlantedBase):
    name = "planted-fp19-everywhere"
    bug = "truncates every fp32 scale to FP19"

    def _scale_value(self, scale, out, has_token):
        s = scale.reshape(-1)
        if s.dtype == np.float32:
            return (s.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
        return super()._scale_value(scale, out, has_token)


class BiasAfterDequantBackend(_PlantedBase):
    name = "planted-bias-after-dequant"
    bug = "adds the int32 bias after dequant"

    def _add_bias_in_acc(self):
        return False


class HalfRangeBf16ScaleBackend(_PlantedBase):
    name = "planted-half-range-bf16-scale"
    bug = "int8 scale = bf16(amax / 127.5), codes rint(x * fp32(1/s)) in [-128, 127] (torchao style)"

    def _row_quant(self, xf, qmax):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = np.abs(xf).max(axis=-1, keepdims=True, initial=np.float32(0))
            half_range = np.float32((qmax - (-qmax - 1)) / 2)                            # 127.5
            scale = (m / half_range).astype(_dt.bfloat16).astype(np.float32)             # computed on a bf16 tensor
            q = np.rint(xf * (np.float32(1) / scale))
        q = np.where(np.isnan(q), 0, np.clip(q, -qmax - 1, qmax))
        return q.astype(np.int8), scale[..., 0].astype(np.float32)


class FusedActQuantBackend(_PlantedBase):
    name = "planted-fused-act-quant"
    bug = "fused w8a8_dynamic_linear quantizes x as x / (amax / 127); its dynamic_quant is right"

    @implements("w8a8_dynamic_linear")
    def _w8a8_dynamic_linear(self, a):
        x, p = a.x, a.params
        # the fused kernel's own activation quant is DivideScaleBackend's; dynamic_quant keeps the right one
        xq, s = DivideScaleBackend._row_quant(self, x.reshape(-1, p.k).astype(np.float32), 127)
        y = self._matmul(xq, p.weight.T, p.weight_scale, s, p.bias, _dt.name(x.dtype))
        return y.reshape(x.shape[:-1] + (p.n,))


_MX_ELEMS = {"e2m1": (2, 6.0, _dt.float4_e2m1fn), "e4m3": (8, 448.0, _dt.float8_e4m3fn),
             "e5m2": (15, 57344.0, _dt.float8_e5m2)}


class MxFloorOnlyBackend(_PlantedBase):
    """OCP MX v1.0 quantization written from the OCP MX v1.0 FLOOR rule — and only that rule."""

    name = "planted-mx-floor-only"
    bug = "mx_quantize ignores scale_mode (always FLOOR)"

    @implements("mx_quantize")
    def _mx_quantize(self, a):
        emax, vmax, elem = _MX_ELEMS[a.elem_name]
        bs = a.block_size
        x = a.x.astype(np.float32)
        blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // bs, bs))
        with np.errstate(invalid="ignore", over="ignore"):
            amax = np.abs(blocks).max(axis=-1, initial=np.float32(0))
            finite = np.isfinite(amax)
            _, exp = np.frexp(np.where(finite, amax, 1).astype(np.float64))   # amax = m * 2^exp, m in [0.5, 1)
            shared = np.where(amax > 0, exp - 1, -127).astype(np.int64) - emax  # floor(log2 amax) - emax
            byte = np.clip(shared, -127, 127) + 127
            scaled = blocks * self._multiplier(byte)[..., None].astype(np.float32)  # exact powers of two
            scaled = np.where(finite[..., None], np.clip(scaled, -vmax, vmax), 0).reshape(x.shape)
        scale = np.where(finite, byte, 255).astype(np.uint8)
        codes = scaled.astype(elem)
        if a.elem_name == "e2m1":
            nibbles = codes.view(np.uint8) & 0x0F
            return (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8), scale
        return codes, scale

    @staticmethod
    def _multiplier(byte: np.ndarray) -> np.ndarray:
        """What the block's elements are multiplied by: 1 / 2^(byte - 127)."""
        return np.exp2(127.0 - byte)


class MxByte0HalfBackend(MxFloorOnlyBackend):
    """FLOOR MX with torchao 0.18's byte-0 bug (docs/backends.md): the scale is clamped to 2^-126 while
    byte 0 (2^-127) is written, so such a block decodes at half its value. Judge it on FLOOR cases."""

    name = "planted-mx-byte0-half"
    bug = "mx_quantize FLOOR: byte-0 blocks divided by 2^-126 (torchao to_mx)"

    @staticmethod
    def _multiplier(byte: np.ndarray) -> np.ndarray:
        return np.exp2(127.0 - np.maximum(byte, 1))


PLANTED = {cls.name: f"conformance.planted:{cls.__name__}" for cls in
           (TiesAwayBackend, DivideScaleBackend, Fp19EverywhereBackend, BiasAfterDequantBackend,
            HalfRangeBf16ScaleBackend, FusedActQuantBackend, MxFloorOnlyBackend, MxByte0HalfBackend)}


class SegfaultBackend(_PlantedBase):
    """Dies with SIGSEGV on dynamic_quant inputs with an odd row count: the runner must record
    ``crashed`` for those cases and carry on with a fresh worker."""

    name = "planted-segfault"
    bug = "segfaults on odd row counts"

    def _dynamic_quant(self, a):
        if int(np.prod(a.x.shape[:-1])) % 2:
            import ctypes

            ctypes.string_at(0)  # a real segmentation fault
        return super()._dynamic_quant(a)


class HangingBackend(_PlantedBase):
    """Never returns from dynamic_quant on rows wider than 64: the runner's timeout must fire."""

    name = "planted-hang"
    bug = "hangs on wide rows"

    def _dynamic_quant(self, a):
        if a.x.shape[-1] > 64:
            import time

            time.sleep(3600)
        return super()._dynamic_quant(a)
