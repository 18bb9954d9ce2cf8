"""Backends with planted bugs: proof that conformance catches and attributes real mistakes.

Each is a small, independent NumPy implementation of ``dynamic_quant``, ``quant_matmul`` and
``w8a8_dynamic_linear`` (written here, not by re-running the golden with another ``Numerics``),
which declares the Ascend numerics but gets one thing wrong, the way kernels do:

* ``TiesAwayBackend`` — rounds .5 ties away from zero (``floor(|x| + 0.5)``) instead of to even;
* ``DivideScaleBackend`` — computes the scale as ``amax / 127`` and divides ``x / scale``
  instead of multiplying by ``127 / amax``;
* ``Fp19EverywhereBackend`` — truncates every fp32 scale to FP19, also on the per-token / bf16
  path where torch_npu keeps it at full precision;
* ``BiasAfterDequantBackend`` — adds an int32 bias after the dequant multiply instead of to the
  int32 accumulator.

Use one as ``w8a8 conformance --backend conformance.planted:TiesAwayBackend``.
"""

from __future__ import annotations

import numpy as np

from backends.base import Backend
from w8a8 import dtypes as _dt


class _PlantedBase(Backend):
    device = "cpu"
    bug = ""

    @property
    def description(self):  # type: ignore[override]
        return f"planted bug: {self.bug}"

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

    def _dynamic_quant(self, x, *, smooth_scales=None, group_index=None, dst_type="int8"):
        if smooth_scales is not None or group_index is not None or dst_type not in ("int8", None):
            from backends.base import Unsupported
            raise Unsupported(f"{self.name}: plain int8 dynamic_quant only")
        if x.dtype not in (_dt.bfloat16, _dt.float16):
            raise TypeError(f"dynamic_quant: argument 'x' must be float16 or bfloat16; got {x.dtype}")
        if not np.isfinite(x.astype(np.float32)).all():
            raise ValueError("dynamic_quant: argument 'x' must be finite")
        xf = x.astype(np.float32).reshape(int(np.prod(x.shape[:-1])), x.shape[-1])
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

    def _quant_matmul(self, x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
        out = _dt.name(_dt.resolve(output_dtype or "int8"))
        if out not in ("bfloat16", "float16", "int32"):
            from backends.base import Unsupported
            raise Unsupported(f"{self.name}: output {out} not implemented")
        if x1.dtype != np.int8 or x2.dtype != np.int8:
            raise TypeError("quant_matmul: argument 'x1' must be int8")
        if x1.shape[-1] != x2.shape[-2]:
            raise ValueError("quant_matmul: argument 'x2' must match K of x1")
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

    def _w8a8_dynamic_linear(self, x, weight, weight_scale, *, bias=None):
        n, k = weight.shape
        ws = weight_scale.reshape(n).astype(_dt.bfloat16 if x.dtype == _dt.bfloat16 else np.float32)
        xq, s = self._dynamic_quant(x.reshape(-1, k))
        b = None if bias is None else bias.reshape(n).astype(x.dtype)
        y = self._quant_matmul(xq, weight.T, ws, pertoken_scale=s, bias=b, output_dtype=_dt.name(x.dtype))
        return y.reshape(x.shape[:-1] + (n,))


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


PLANTED = {cls.name: f"conformance.planted:{cls.__name__}" for cls in
           (TiesAwayBackend, DivideScaleBackend, Fp19EverywhereBackend, BiasAfterDequantBackend)}


class SegfaultBackend(_PlantedBase):
    """Dies with SIGSEGV on dynamic_quant inputs with an odd row count: the runner must record
    ``crashed`` for those cases and carry on with a fresh worker."""

    name = "planted-segfault"
    bug = "segfaults on odd row counts"

    def _dynamic_quant(self, x, **kwargs):
        if int(np.prod(x.shape[:-1])) % 2:
            import ctypes

            ctypes.string_at(0)  # a real segmentation fault
        return super()._dynamic_quant(x, **kwargs)


class HangingBackend(_PlantedBase):
    """Never returns from dynamic_quant on rows wider than 64: the runner's timeout must fire."""

    name = "planted-hang"
    bug = "hangs on wide rows"

    def _dynamic_quant(self, x, **kwargs):
        if x.shape[-1] > 64:
            import time

            time.sleep(3600)
        return super()._dynamic_quant(x, **kwargs)
