"""``onnxruntime`` and ``onnxruntime-dqmm``: onnxruntime's CPU kernels judged against the golden.

Nothing here re-implements arithmetic: every op is one onnxruntime kernel, or a graph of ONNX ops a user
builds, run by an ``InferenceSession`` (:mod:`.graphs`). What the backend does in NumPy is what a
serving stack does around the library: exact widenings (bf16 / fp16 activations and bf16 scales to fp32,
which the kernels take), layout (transposes, int4 packing, the uint8 <-> int8 shift of a code by 128),
the golden's load-time conversions (the weight scale and bias of ``w8a8_dynamic_linear`` as loaded,
``quant_matmul``'s FP19 scale where the torch_npu adapter packs it: :func:`w8a8.quant_matmul.effective_scale`)
and the golden's data checks (``x * smooth_scales`` overflowing).

Each backend declares the :class:`~w8a8.numerics.Numerics` it implements (docs/backends.md,
verified against onnxruntime 1.32.0 on an AVX-512 VNNI CPU: ``tests/backends/test_onnxruntime.py``):

* ``onnxruntime`` (:data:`NUMERICS`) — the Ascend record with ``variants="fixed"``, ``QuantizeLinear``'s
  division with the zero point added after rounding and its NaN code (``qmin``; unreachable while the
  golden's ``nan_policy="raise"`` refuses NaN before the call), and ``MatMulNBits``'s fp32 weight
  (``antiquant_dtype="float32"``).
* ``onnxruntime-dqmm`` (:data:`DQMM_NUMERICS`) — ``DynamicQuantizeMatMul`` as ``w8a8_dynamic_linear``
  and ``DynamicQuantizeLinear`` as ``dynamic_quant_asymmetric``: one asymmetric uint8 scale and
  integer zero point for the whole activation, its range through 0, ``x / s`` codes, scale 1 for an
  all-zero tensor, the ``acc * (s_a * s_w)`` epilogue.

What each kernel takes is declared (:attr:`OnnxruntimeBackend.capabilities`): a call outside it is
declined, and conformance does not draw it. This package imports neither onnx nor onnxruntime until a
call is prepared.
"""

from __future__ import annotations

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.numerics import ASCEND, Numerics

from ..base import Backend, implements, loads
from ..capabilities import Accepts, Capabilities

__all__ = ["OnnxruntimeBackend", "OnnxruntimeDqmmBackend", "NUMERICS", "DQMM_NUMERICS"]

VERIFIED_VERSION = "1.32.0"

NUMERICS = ASCEND.replace(name="onnxruntime-1.32", variants="fixed", quantize_div="div",
                          zero_point_position="after_rounding", nan_code="qmin", antiquant_dtype="float32")
"""The record of ``onnxruntime`` (module docstring)."""

DQMM_NUMERICS = ASCEND.replace(name="onnxruntime-1.32-dqmm", variants="fixed", act_quant="asymmetric",
                               dynamic_granularity="per_tensor", asym_range="through_zero",
                               asym_zero_point="integer", asym_degenerate="one", quant_codes="div_scale",
                               zero_point_position="after_rounding", epilogue_order="combined")
"""The record of ``onnxruntime-dqmm`` (module docstring)."""

_I32_MAX = 2 ** 31 - 1
_U8_SHIFT_K = _I32_MAX // (255 * 128)   # the u8 x s8 path sums (q + 128) * w before the zero-point correction


def _bound(dtype) -> int:
    lo, hi = _dt.int_range(dtype)
    return max(abs(lo), abs(hi))


def _no_int_matmul_overflow(a) -> bool:
    return a.k * _bound(a.a.dtype) * _bound(a.b.dtype) <= _I32_MAX


def _zero_points_fit_the_output(a) -> bool:
    """QuantizeLinear's zero point has the output dtype: a zero point of another dtype is taken where it
    rounds (``rint``, as the golden's ``zero_point_position="after_rounding"`` rounds it) into that range."""
    if a.zero_points is None or a.zero_points.dtype == np.dtype(a.out):
        return True
    lo, hi = _dt.int_range(a.out)
    z = np.rint(a.zero_points.astype(np.float64))
    return bool(((z >= lo) & (z <= hi)).all())


def _dequantize_zero_point_ok(a) -> bool:
    if a.zero_point is None:
        return True
    return a.y.dtype != np.int32 and a.zero_point.dtype == a.y.dtype


def _qmm_accumulator_fits(a) -> bool:
    bias = int(np.abs(a.bias.astype(np.int64)).max()) if a.int_bias and a.bias.size else 0
    return a.k * 128 * 128 + bias <= _I32_MAX


def _requant_offset(a):
    """The requant offset of an int8-output call as one int8 ``zy``, or None where QLinearMatMul cannot take it."""
    if a.offset is not None:
        off = a.offset.astype(np.float32)
    elif a.scale.dtype in (np.int64, np.uint64):
        from w8a8.trans_quant_param import decode_quant_param
        off = decode_quant_param(a.scale)[1]
    else:
        return 0
    if off is None:
        return 0
    off = np.asarray(off, np.float32).reshape(-1)
    if not off.size or not (off == off[0]).all() or off[0] != np.rint(off[0]) or not -128 <= off[0] <= 127:
        return None
    return int(off[0])


def _int8_out_is_qlinear(a) -> bool:
    return a.out != _dt.int8 or (a.bias is None and _requant_offset(a) is not None)


def _nbits_bits(a) -> int:
    return 4 if a.layout in ("int4_n", "int4_k") else 8


def _nbits_block(a) -> int | None:
    """MatMulNBits' block_size for the call: the group G, or K for a per-channel / per-tensor scale; None
    where it is not a power of two >= 16 dividing K."""
    k = a.x.shape[1]
    g = k if a.group is None else a.group
    return g if g >= 16 and g & (g - 1) == 0 and k % g == 0 else None


def _nbits_offset(a) -> bool:
    if a.offset is None:
        return True
    o = a.offset.astype(np.float32)
    zmax = 15 if _nbits_bits(a) == 4 else 255
    z = (zmax + 1) // 2 - o
    return bool(((o == np.rint(o)) & (z >= 0) & (z <= zmax)).all())


CAPABILITIES = Capabilities({
    # QuantizeLinear: the divide kernel (div_mode=True); int8 / uint8 out (no int32); zero point of the output dtype
    "quantize": Accepts(values={"div_mode": (True,), "out_name": ("int8", "uint8")},
                        require=(("zero points that round into the output range (QuantizeLinear's y_zero_point "
                                  "has the output dtype)", _zero_points_fit_the_output),)),
    # DequantizeLinear: int8 / uint8 / int32 codes, a zero point of the codes' dtype (none for int32)
    "dequantize": Accepts(require=(("a zero point of y's dtype, none for int32 codes (DequantizeLinear)",
                                    _dequantize_zero_point_ok),)),
    "int4_group_dequantize": Accepts(at_least={"codes.shape[-1]": 1}),
    # MatMulInteger: int8 / uint8, B 2-D, no int32 overflow (it would wrap where the golden raises)
    "int_matmul": Accepts(dtypes={"a": ("int8", "uint8"), "b": ("int8", "uint8")}, ndim={"b": 2},
                          require=(("K * max|a| * max|b| < 2^31 (MatMulInteger wraps on overflow)",
                                    _no_int_matmul_overflow),)),
    "dynamic_quant": Accepts(at_least={"rows": 1, "h": 1}),
    "quant_matmul": Accepts(absent=("int4",), ndim={"x2": 2}, at_least={"m": 1},
                            require=(("K * 2^14 + max|bias| < 2^31 (the int32 accumulator cannot overflow)",
                                      _qmm_accumulator_fits),
                                     ("int8 output without a bias and with one integer offset in [-128, 127] "
                                      "(QLinearMatMul's y_zero_point)", _int8_out_is_qlinear))),
    "w8a8_dynamic_linear": Accepts(at_least={"quant.rows": 1}, at_most={"params.k": _U8_SHIFT_K}),
    # MatMulNBits: fp16 activations (no bf16 CPU kernel), 4- or 8-bit weights, block a power of two >= 16
    "weight_quant_batchmatmul": Accepts(
        dtypes={"x": ("float16",)}, values={"packed": (False,)}, absent=("quant_scale", "quant_offset"),
        require=(("a block (the group G, or K for a per-channel scale) that is a power of two >= 16 dividing K "
                  "(MatMulNBits block_size)", lambda a: _nbits_block(a) is not None),
                 ("an integer antiquant offset with 2^(bits-1) - offset in the unsigned code range (MatMulNBits' "
                  "zero point)", _nbits_offset))),
})

DQMM_CAPABILITIES = Capabilities({
    "dynamic_quant_asymmetric": Accepts(values={"dst_name": ("int8",)}, at_least={"rows": 1, "h": 1}),
    "w8a8_dynamic_linear": Accepts(at_least={"quant.rows": 1}, at_most={"params.k": _U8_SHIFT_K}),
})


class _OrtBackend(Backend):
    """What both onnxruntime backends share: availability, threads, the boundary conversions."""

    device = "cpu"
    compute = "int8"
    in_default_runs = False   # judged when named: `w8a8 conformance --backend onnxruntime`
    float_sum_order = "library"  # MatMulNBits sums fp32 in its own blocked order

    def __init__(self, threads: int = 1):
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"{type(self).__name__}: argument 'threads' must be an int >= 1; got {threads!r}")
        self.threads = threads

    def available(self) -> tuple[bool, str]:
        try:
            import onnx  # noqa: F401
            import onnxruntime
        except Exception as exc:  # noqa: BLE001 - any import failure is a reason, never a crash
            return False, (f"import onnxruntime / onnx failed: {type(exc).__name__}: {exc} "
                           f"(pip install 'w8a8[ort]', onnxruntime=={VERIFIED_VERSION})")
        if "CPUExecutionProvider" not in onnxruntime.get_available_providers():
            return False, "onnxruntime has no CPUExecutionProvider"
        return True, ""

    def info(self) -> dict:
        info = super().info()
        try:
            import onnxruntime
            info["library"] = f"onnxruntime {onnxruntime.__version__} (numerics verified with {VERIFIED_VERSION})"
        except Exception:  # noqa: BLE001
            info["library"] = "onnxruntime not importable"
        return info

    @staticmethod
    def _graphs():
        from . import graphs
        return graphs

    @staticmethod
    def _f32(x: np.ndarray) -> np.ndarray:
        """An exact widening to fp32 (bf16 / fp16 / fp32 values; integers as they are)."""
        return np.ascontiguousarray(x, dtype=np.float32)

    def _rows_feeds(self, a, numerics, op: str) -> dict:
        """A dynamic quantizer's rows as fp32 (exact) and its smooth scales as the row each token uses, after
        the golden's data check of ``x * smooth_scales`` (the golden's ValueError where it overflows)."""
        from w8a8.dynamic_quant import smoothed_rows

        feeds = {"x": self._f32(a.x.reshape(a.rows, a.h))}
        if a.smooth_scales is not None:
            smoothed_rows(a, numerics, op=op)   # the data check only: the multiply runs in the graph
            sm = self._f32(a.smooth_scales)
            feeds["sm"] = sm.reshape(1, a.h) if a.row_groups is None else np.ascontiguousarray(sm[a.row_groups])
        return feeds

    def _linear_feeds(self, a, x_name: str) -> dict:
        """A W8A8_DYNAMIC Linear's load step as a serving stack does it: the weight transposed to ``[K, N]``,
        the weight scale and bias **as the golden loaded them** (a bf16-rounded scale for a bf16 model: part of
        the op's contract) widened to fp32 — never the checkpoint's fp32 scale."""
        p = a.params
        feeds = {x_name: self._f32(a.x.reshape(-1, p.k)), "w": np.ascontiguousarray(p.weight.T),
                 "sw": self._f32(p.weight_scale)}
        if p.bias is not None:
            feeds["fb"] = self._f32(p.bias)
        return feeds

    def _linear_out(self, y: np.ndarray, a) -> np.ndarray:
        return self._narrow(y.reshape(a.x.shape[:-1] + (a.params.n,)), a.x.dtype)

    @staticmethod
    def _narrow(y: np.ndarray, out) -> np.ndarray:
        """A graph result to the op's output dtype: bf16 results are fp32 holding bf16 values (exact)."""
        out = np.dtype(out)
        return y.astype(out) if out == _dt.bfloat16 else y


class OnnxruntimeBackend(_OrtBackend):
    """onnxruntime 1.32 CPU kernels: QuantizeLinear / DequantizeLinear (blocked too), MatMulInteger,
    QLinearMatMul, MatMulNBits, and the per-token W8A8 graph built from plain ONNX ops."""

    name = "onnxruntime"
    description = ("onnxruntime CPU EP: QuantizeLinear, DequantizeLinear (blocked int4), MatMulInteger, QLinearMatMul, "
                   "MatMulNBits (W4A16), per-token W8A8 graphs of ONNX ops")
    numerics: Numerics = NUMERICS
    capabilities = CAPABILITIES

    # -- quantizers -------------------------------------------------------------------------------
    @loads("quantize")
    def _load_quantize(self, a):
        """QuantizeLinear on fp32 x (fp16 / bf16 widened: onnxruntime computes fp16 in fp32 anyway)."""
        s = a.scales_b.astype(np.float32).reshape(-1)
        # without a zero point QuantizeLinear writes uint8: a zero point 0 of the output dtype selects it
        z = np.zeros(1, a.out) if a.zero_points_b is None else a.zero_points_b.reshape(-1)
        if z.dtype != np.dtype(a.out):   # the load conversion to y_zero_point's dtype (exact: range checked)
            z = np.rint(z.astype(np.float64)).astype(a.out)
        per_axis = s.size > 1 or z.size > 1
        if per_axis:
            c = a.x.shape[a.channel_axis]
            s, z = np.broadcast_to(s, (c,)), np.broadcast_to(z, (c,))
        else:
            s, z = s.reshape(()), z.reshape(())
        sess = self._graphs().quantize_linear(a.out_name, a.channel_axis if per_axis else None, self.threads)
        return sess, {"x": self._f32(a.x), "s": s, "z": z}

    @implements("quantize")
    def _quantize(self, loaded):
        sess, feeds = loaded
        return self._graphs().run(sess, feeds)[0]

    @loads("dequantize")
    def _load_dequantize(self, a):
        y, shape = a.y, a.y.shape
        if a.axis is None:      # per-row scales y.shape[:-1]: rows of a 2-D view, per-axis along axis 0
            y = y.reshape(-1, shape[-1]) if y.ndim else y
            s = a.scale.astype(np.float32).reshape(-1)
            z = None if a.zero_point is None else a.zero_point.reshape(-1)
            axis = 0
        else:
            s = a.scale_b.astype(np.float32).reshape(-1)
            z = None if a.zero_point_b is None else a.zero_point_b.reshape(-1)
            axis = a.axis
            if s.size > 1 or (z is not None and z.size > 1):
                c = y.shape[axis]
                s = np.broadcast_to(s, (c,))
                z = None if z is None else np.broadcast_to(z, (c,))
            else:
                s, z, axis = s.reshape(()), None if z is None else z.reshape(()), None
        sess = self._graphs().dequantize_linear(_dt.name(y.dtype), axis, z is not None, _dt.name(a.out), self.threads)
        feeds = {"q": y, "s": s}
        if z is not None:
            feeds["z"] = z
        return sess, feeds, shape, a.out

    @implements("dequantize")
    def _dequantize(self, loaded):
        sess, feeds, shape, out = loaded
        return self._narrow(self._graphs().run(sess, feeds)[0].reshape(shape), out)

    @loads("int4_group_dequantize")
    def _load_int4_group_dequantize(self, a):
        k, groups = a.codes.shape[-1], a.scale.shape[-1]
        signed = a.codes.dtype == np.int8
        sess = self._graphs().blocked_dequantize(signed, k // groups, _dt.name(a.out), self.threads)
        feeds = {"c": a.codes, "s": self._f32(a.scale)}
        if not signed:
            feeds["zc"] = a.zero
        return sess, feeds, a.out

    @implements("int4_group_dequantize")
    def _int4_group_dequantize(self, loaded):
        sess, feeds, out = loaded
        return self._narrow(self._graphs().run(sess, feeds)[0], out)

    @loads("dynamic_quant")
    def _load_dynamic_quant(self, a, *, numerics):
        feeds = self._rows_feeds(a, numerics, "dynamic_quant")
        return self._graphs().dynamic_quant(a.qmax, "sm" in feeds, self.threads), feeds, a

    @implements("dynamic_quant")
    def _dynamic_quant(self, loaded):
        from w8a8.int4 import pack_int4

        sess, feeds, a = loaded
        q, s = self._graphs().run(sess, feeds)
        q = q.reshape(a.x.shape)
        return (pack_int4(q) if a.dst_name == "int4" else q), s.reshape(a.x.shape[:-1])

    # -- matmuls ------------------------------------------------------------------------------------
    @loads("int_matmul")
    def _load_int_matmul(self, a):
        sess = self._graphs().matmul_integer(_dt.name(a.a.dtype), _dt.name(a.b.dtype), self.threads)
        return sess, {"a": a.a, "b": a.b}

    @implements("int_matmul")
    def _int_matmul(self, loaded):
        sess, feeds = loaded
        return self._graphs().run(sess, feeds)[0]

    @loads("quant_matmul")
    def _load_quant_matmul(self, a, *, numerics):
        """The load conversions of the call: the effective fp32 scale (FP19 where the adapter packs it, a
        packed int64 decoded), biases and the per-token scale widened to fp32."""
        from w8a8.quant_matmul import effective_scale

        g = self._graphs()
        if a.out == _dt.int32:
            sess = g.quant_matmul_float(False, a.int_bias, False, "int32", self.threads)
            feeds = {"a": a.x1, "b": a.x2}
            if a.int_bias:
                feeds["ib"] = a.bias
            return sess, feeds, a
        deq, _ = effective_scale(a.scale, a.out, a.pertoken_scale is not None, numerics)
        deq = np.ascontiguousarray(np.broadcast_to(deq.astype(np.float32), (a.n,)))
        if a.out == _dt.int8:
            zy = np.asarray(_requant_offset(a), np.int8)
            return g.qlinear_matmul(self.threads), {"a": a.x1, "b": a.x2, "sb": deq, "zb": np.zeros(a.n, np.int8),
                                                    "zy": zy}, a
        float_bias = a.bias is not None and not a.int_bias
        sess = g.quant_matmul_float(a.pertoken_scale is not None, a.int_bias, float_bias, _dt.name(a.out), self.threads)
        feeds = {"a": a.x1, "b": a.x2, "deq": deq}
        if a.int_bias:
            feeds["ib"] = a.bias
        if float_bias:
            feeds["fb"] = self._f32(a.bias)
        if a.pertoken_scale is not None:
            feeds["pt"] = a.pertoken_scale.reshape(-1, 1)
        return sess, feeds, a

    @implements("quant_matmul")
    def _quant_matmul(self, loaded):
        sess, feeds, a = loaded
        y = self._graphs().run(sess, feeds)[0]
        y = np.broadcast_to(y, a.batch + (a.m, a.n)) if y.shape[:-2] != a.batch else y
        return self._narrow(np.ascontiguousarray(y), a.out)

    @loads("w8a8_dynamic_linear")
    def _load_dynamic_linear(self, a):
        sess = self._graphs().dynamic_linear(a.params.bias is not None, _dt.name(a.x.dtype), self.threads)
        return sess, self._linear_feeds(a, "x"), a

    @implements("w8a8_dynamic_linear")
    def _dynamic_linear(self, loaded):
        sess, feeds, a = loaded
        return self._linear_out(self._graphs().run(sess, feeds)[0], a)

    @loads("weight_quant_batchmatmul")
    def _load_wqbmm(self, a):
        """MatMulNBits' weight layout from the golden's weight: signed codes + 2^(bits-1) as unsigned codes,
        ``[N, K/bs, bs * bits / 8]`` (int4: element 2j in the low nibble); scales ``[N, K/bs]`` (a per-channel
        or per-tensor scale is one block of K); zero points ``2^(bits-1) - offset`` (int4: packed in pairs)."""
        from w8a8.int4 import unpack_int4

        k, n, bits, bs = a.x.shape[1], a.n, _nbits_bits(a), _nbits_block(a)
        if a.layout == "int8":
            codes = a.weight.T
        elif a.layout == "int4_n":
            codes = unpack_int4(a.weight).T
        else:
            codes = unpack_int4(np.ascontiguousarray(a.weight.T))
        half = 1 << (bits - 1)
        q = (codes.astype(np.int16) + half).astype(np.uint8).reshape(n, k // bs, bs)
        b = q[..., 0::2] | (q[..., 1::2] << 4) if bits == 4 else q
        scale = np.broadcast_to(a.scale, (k // bs if a.group else 1, n)).T      # [N, K/bs]
        feeds = {"a": a.x, "b": np.ascontiguousarray(b), "s": np.ascontiguousarray(scale)}
        if a.offset is not None:
            z = (half - np.broadcast_to(a.offset, (scale.shape[1], n)).astype(np.float32)).astype(np.uint8).T
            if bits == 4:
                if z.shape[1] % 2:
                    z = np.concatenate([z, np.zeros((n, 1), np.uint8)], axis=1)
                z = z[:, 0::2] | (z[:, 1::2] << 4)
            feeds["z"] = np.ascontiguousarray(z)
        if a.bias is not None:
            feeds["bias"] = np.ascontiguousarray(np.broadcast_to(a.bias.reshape(-1), (n,)))
        return self._graphs().matmul_nbits(k, n, bs, bits, a.offset is not None, a.bias is not None,
                                           self.threads), feeds

    @implements("weight_quant_batchmatmul")
    def _wqbmm(self, loaded):
        sess, feeds = loaded
        return self._graphs().run(sess, feeds)[0]


class OnnxruntimeDqmmBackend(_OrtBackend):
    """onnxruntime's fused ``DynamicQuantizeMatMul`` as ``w8a8_dynamic_linear`` and its activation quantizer
    ``DynamicQuantizeLinear`` as ``dynamic_quant_asymmetric`` (per-tensor uint8, integer zero point)."""

    name = "onnxruntime-dqmm"
    description = ("onnxruntime CPU EP: DynamicQuantizeMatMul (com.microsoft) as w8a8_dynamic_linear, "
                   "DynamicQuantizeLinear as dynamic_quant_asymmetric")
    numerics: Numerics = DQMM_NUMERICS
    capabilities = DQMM_CAPABILITIES

    @loads("w8a8_dynamic_linear")
    def _load_dynamic_linear(self, a):
        sess = self._graphs().dynamic_quantize_matmul(a.params.bias is not None, _dt.name(a.x.dtype), self.threads)
        return sess, self._linear_feeds(a, "a"), a

    @implements("w8a8_dynamic_linear")
    def _dynamic_linear(self, loaded):
        sess, feeds, a = loaded
        return self._linear_out(self._graphs().run(sess, feeds)[0], a)

    @loads("dynamic_quant_asymmetric")
    def _load_dql(self, a, *, numerics):
        feeds = self._rows_feeds(a, numerics, "dynamic_quant_asymmetric")
        return self._graphs().dynamic_quantize_linear("sm" in feeds, self.threads), feeds, a

    @implements("dynamic_quant_asymmetric")
    def _dql(self, loaded):
        """uint8 codes and zero point minus 128 (exact): the int8 codes and offset of the golden's op."""
        sess, feeds, a = loaded
        y, s, z = self._graphs().run(sess, feeds)
        lead = a.x.shape[:-1]
        codes = (y.astype(np.int16) - 128).astype(np.int8).reshape(a.x.shape)
        return (codes, np.full(lead, s, np.float32), np.full(lead, np.float32(int(z) - 128), np.float32))
