"""The ONNX graphs the onnxruntime backends run, and their sessions (CPU EP, cached per graph).

Imports onnx and onnxruntime: imported by the backends' loaders on first use, never at package
import. Every graph has fp32 / fp16 / integer inputs and outputs: bf16 activations are widened to
fp32 at the boundary (exact) and bf16 results leave the graph as ``Cast(Cast(v, bfloat16), float)``
(onnxruntime's RNE cast; the NumPy narrowing of that fp32 value is exact), because the Python
binding cannot pass ml_dtypes arrays. int4 codes travel as int8 / uint8 and are cast inside the
graph. Graph optimizations are disabled: with them on, the per-token graph gives the same bits
(measured), but the point is to run the kernels named here.
"""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as h

__all__ = ["run", "quantize_linear", "dequantize_linear", "blocked_dequantize", "matmul_integer", "dynamic_quant",
           "quant_matmul_float", "qlinear_matmul", "dynamic_linear", "dynamic_quantize_matmul",
           "dynamic_quantize_linear", "matmul_nbits"]

OPSET = 21
ELEM = {"int8": TP.INT8, "uint8": TP.UINT8, "int32": TP.INT32, "int64": TP.INT64, "float32": TP.FLOAT,
        "float16": TP.FLOAT16, "bfloat16": TP.BFLOAT16, "int4": TP.INT4, "uint4": TP.UINT4}
_SESSIONS: dict[tuple, ort.InferenceSession] = {}
_LOCK = threading.Lock()


def _session(key: tuple, nodes, inputs, outputs, threads: int, inits=()) -> ort.InferenceSession:
    with _LOCK:
        sess = _SESSIONS.get((key, threads))
        if sess is None:
            graph = h.make_graph(nodes, key[0], [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                                 [h.make_tensor_value_info(n, t, s) for n, t, s in outputs], initializer=list(inits))
            model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET), h.make_opsetid("com.microsoft", 1)])
            model.ir_version = 10
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.log_severity_level = 3
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            _SESSIONS[(key, threads)] = sess
    return sess


def run(sess: ort.InferenceSession, feeds: dict) -> list[np.ndarray]:
    """``sess.run`` on contiguous arrays (the graph's outputs, in order)."""
    return sess.run(None, {k: np.ascontiguousarray(v) for k, v in feeds.items()})


def _const(name: str, value, elem=TP.FLOAT, dims=()):
    return h.make_tensor(name, elem, list(dims), [value] if not dims else list(value))


def _cast_out(src: str, out: str, name: str = "y") -> list:
    """``src`` (fp32) to the output dtype: one RNE Cast; bf16 comes back as fp32 holding the bf16 value."""
    if out == "float32":
        return [h.make_node("Identity", [src], [name])]
    if out == "bfloat16":
        return [h.make_node("Cast", [src], [name + "_bf16"], to=TP.BFLOAT16),
                h.make_node("Cast", [name + "_bf16"], [name], to=TP.FLOAT)]
    return [h.make_node("Cast", [src], [name], to=ELEM[out])]


def _out_elem(out: str) -> int:
    return TP.FLOAT if out in ("float32", "bfloat16") else ELEM[out]


# -- quantizers -------------------------------------------------------------------------------------

def quantize_linear(out: str, axis: int | None, threads: int) -> ort.InferenceSession:
    """``QuantizeLinear`` (opset 21): x fp32, scale fp32 (scalar, or ``[C]`` along ``axis``), zero point of
    the output dtype (it selects int8 / uint8) -> ``sat(rint(x / s) + z)``."""
    attrs = {} if axis is None else {"axis": axis}
    sdim = [] if axis is None else [None]
    inputs = [("x", TP.FLOAT, None), ("s", TP.FLOAT, sdim), ("z", ELEM[out], sdim)]
    node = h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)
    return _session(("quantize_linear", out, axis), [node], inputs, [("y", ELEM[out], None)], threads)


def dequantize_linear(codes: str, axis: int | None, with_zp: bool, out: str, threads: int) -> ort.InferenceSession:
    """``DequantizeLinear`` (opset 21) with an fp32 scale (scalar or ``[C]`` along ``axis``) -> fp32, then
    one Cast to ``out``."""
    names = ["q", "s"] + (["z"] if with_zp else [])
    attrs = {} if axis is None else {"axis": axis}
    sdim = [] if axis is None else [None]
    inputs = [("q", ELEM[codes], None), ("s", TP.FLOAT, sdim)] + ([("z", ELEM[codes], sdim)] if with_zp else [])
    nodes = [h.make_node("DequantizeLinear", names, ["v"], **attrs)] + _cast_out("v", out)
    return _session(("dequantize_linear", codes, axis, with_zp, out), nodes, inputs,
                    [("y", _out_elem(out), None)], threads)


def blocked_dequantize(signed: bool, block: int, out: str, threads: int) -> ort.InferenceSession:
    """Blocked ``DequantizeLinear`` along the last axis: int4 codes (signed, no zero point) or uint4 codes with
    a uint4 zero point per block, cast to INT4 / UINT4 inside the graph; scale fp32 ``[..., K/G]``."""
    qt = TP.INT4 if signed else TP.UINT4
    src = TP.INT8 if signed else TP.UINT8
    nodes = [h.make_node("Cast", ["c"], ["q"], to=qt)]
    names = ["q", "s"]
    inputs = [("c", src, None), ("s", TP.FLOAT, None)]
    if not signed:
        nodes.append(h.make_node("Cast", ["zc"], ["z"], to=qt))
        names.append("z")
        inputs.append(("zc", src, None))
    nodes.append(h.make_node("DequantizeLinear", names, ["v"], axis=-1, block_size=block))
    nodes += _cast_out("v", out)
    return _session(("blocked_dequantize", signed, block, out), nodes, inputs, [("y", _out_elem(out), None)], threads)


def dynamic_quant(qmax: int, smooth: bool, threads: int) -> ort.InferenceSession:
    """Per-row symmetric quantization from plain ONNX ops (the golden ``dynamic_quant`` under ``ASCEND``
    with ``scale_out="reciprocal"``)::

        xf [* smooth];  amax = ReduceMax(Abs(xf), axes=-1);  inv = qmax / amax
        q = Cast(Clip(Where(IsNaN(r), 0, r = Round(xf * inv)), -qmax, qmax), int8);  s = 1 / inv
    """
    nodes = [h.make_node("Mul", ["x", "sm"], ["xf"]) if smooth else h.make_node("Identity", ["x"], ["xf"])]
    nodes += _quant_rows("xf", "q", "s")
    inputs = [("x", TP.FLOAT, [None, None])] + ([("sm", TP.FLOAT, [None, None])] if smooth else [])
    inits = _row_consts(qmax)
    return _session(("dynamic_quant", qmax, smooth), nodes, inputs,
                    [("q", TP.INT8, [None, None]), ("s", TP.FLOAT, [None, 1])], threads, inits)


def _row_consts(qmax: int) -> list:
    return [_const("qmax", float(qmax)), _const("nqmax", -float(qmax)), _const("zero", 0.0), _const("one", 1.0),
            _const("c128", 128.0), h.make_tensor("zp128", TP.UINT8, [], [128]),
            h.make_tensor("axes", TP.INT64, [1], [-1])]


def _quant_rows(xf: str, q: str, s: str, shifted: str | None = None) -> list:
    nodes = [h.make_node("Abs", [xf], ["ax"]), h.make_node("ReduceMax", ["ax", "axes"], ["amax"], keepdims=1),
             h.make_node("Div", ["qmax", "amax"], ["inv"]), h.make_node("Mul", [xf, "inv"], ["t"]),
             h.make_node("Round", ["t"], ["r"]), h.make_node("IsNaN", ["r"], ["nan"]),
             h.make_node("Where", ["nan", "zero", "r"], ["r0"]), h.make_node("Clip", ["r0", "nqmax", "qmax"], ["rc"]),
             h.make_node("Cast", ["rc"], [q], to=TP.INT8), h.make_node("Div", ["one", "inv"], [s])]
    if shifted:  # codes + 128 as uint8 (MatMulInteger's fast u8 x s8 path, a_zero_point 128: same accumulator)
        nodes += [h.make_node("Add", ["rc", "c128"], ["rs"]), h.make_node("Cast", ["rs"], [shifted], to=TP.UINT8)]
    return nodes


# -- integer matmuls --------------------------------------------------------------------------------

def matmul_integer(a: str, b: str, threads: int) -> ort.InferenceSession:
    """``MatMulInteger`` of int8 / uint8 operands (no zero points): exact int32."""
    return _session(("matmul_integer", a, b), [h.make_node("MatMulInteger", ["a", "b"], ["y"])],
                    [("a", ELEM[a], None), ("b", ELEM[b], [None, None])], [("y", TP.INT32, None)], threads)


def quant_matmul_float(pertoken: bool, int_bias: bool, float_bias: bool, out: str, threads: int
                       ) -> ort.InferenceSession:
    """``quant_matmul`` with a float (or int32) output: ``MatMulInteger`` [+ int32 bias in the accumulator],
    then ``((fp32(acc) * deq[n]) * pertoken[m]) + bias[n]`` in fp32 (Ascend's order) and one Cast."""
    nodes = [h.make_node("MatMulInteger", ["a", "b"], ["acc0"])]
    nodes.append(h.make_node("Add", ["acc0", "ib"], ["acc"]) if int_bias else h.make_node("Identity", ["acc0"], ["acc"]))
    inputs = [("a", TP.INT8, None), ("b", TP.INT8, [None, None])] + ([("ib", TP.INT32, [None])] if int_bias else [])
    if out == "int32":
        return _session(("quant_matmul_int32", int_bias), nodes + [h.make_node("Identity", ["acc"], ["y"])], inputs,
                        [("y", TP.INT32, None)], threads)
    nodes += [h.make_node("Cast", ["acc"], ["accf"], to=TP.FLOAT), h.make_node("Mul", ["accf", "deq"], ["v1"])]
    inputs.append(("deq", TP.FLOAT, [None]))
    last = "v1"
    if pertoken:
        nodes.append(h.make_node("Mul", ["v1", "pt"], ["v2"]))
        inputs.append(("pt", TP.FLOAT, [None, 1]))
        last = "v2"
    if float_bias:
        nodes.append(h.make_node("Add", [last, "fb"], ["v3"]))
        inputs.append(("fb", TP.FLOAT, [None]))
        last = "v3"
    nodes += _cast_out(last, out)
    return _session(("quant_matmul_float", pertoken, int_bias, float_bias, out), nodes, inputs,
                    [("y", _out_elem(out), None)], threads)


def qlinear_matmul(threads: int) -> ort.InferenceSession:
    """``QLinearMatMul`` int8: ``sat(rint(fp32(acc) * fp32((sa * sb[n]) / sy)) + zy)`` with ``sa = sy = 1``,
    zero input zero points, ``sb`` the per-channel dequant scale and ``zy`` the requant offset."""
    inputs = [("a", TP.INT8, None), ("b", TP.INT8, [None, None]), ("sb", TP.FLOAT, [None]), ("zb", TP.INT8, [None]),
              ("zy", TP.INT8, [])]
    inits = [_const("sa", 1.0), _const("sy", 1.0), h.make_tensor("za", TP.INT8, [], [0])]
    node = h.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    return _session(("qlinear_matmul",), [node], inputs, [("y", TP.INT8, None)], threads, inits)


def dynamic_linear(float_bias: bool, out: str, threads: int) -> ort.InferenceSession:
    """The per-token W8A8 Linear a user builds from ONNX ops (the uint8-shifted form)::

        x_q, s_tok = dynamic_quant rows (as :func:`dynamic_quant`, qmax 127)
        acc = MatMulInteger(x_q + 128 as uint8, W [K, N], a_zero_point 128)
        y = Cast(((fp32(acc) * s_w[n]) * s_tok[m]) + b[n], out)
    """
    nodes = _quant_rows("x", "q", "s", shifted="qu")
    nodes += [h.make_node("MatMulInteger", ["qu", "w", "zp128"], ["acc"]),
              h.make_node("Cast", ["acc"], ["accf"], to=TP.FLOAT), h.make_node("Mul", ["accf", "sw"], ["v1"]),
              h.make_node("Mul", ["v1", "s"], ["v2"])]
    inputs = [("x", TP.FLOAT, [None, None]), ("w", TP.INT8, [None, None]), ("sw", TP.FLOAT, [None])]
    last = "v2"
    if float_bias:
        nodes.append(h.make_node("Add", ["v2", "fb"], ["v3"]))
        inputs.append(("fb", TP.FLOAT, [None]))
        last = "v3"
    nodes += _cast_out(last, out)
    return _session(("dynamic_linear", float_bias, out), nodes, inputs,
                    [("y", _out_elem(out), [None, None]), ("q", TP.INT8, [None, None]), ("s", TP.FLOAT, [None, 1])],
                    threads, _row_consts(127))


def dynamic_quantize_matmul(float_bias: bool, out: str, threads: int) -> ort.InferenceSession:
    """``DynamicQuantizeMatMul`` (com.microsoft): A fp32, B int8 ``[K, N]``, ``b_scale [N]`` fp32 -> fp32,
    then one Cast to ``out``."""
    names = ["a", "w", "sw", ""] + (["fb"] if float_bias else [])
    inputs = [("a", TP.FLOAT, [None, None]), ("w", TP.INT8, [None, None]), ("sw", TP.FLOAT, [None])]
    if float_bias:
        inputs.append(("fb", TP.FLOAT, [None]))
    else:
        names = names[:3]
    nodes = [h.make_node("DynamicQuantizeMatMul", names, ["v"], domain="com.microsoft")] + _cast_out("v", out)
    return _session(("dynamic_quantize_matmul", float_bias, out), nodes, inputs, [("y", _out_elem(out), None)],
                    threads)


def dynamic_quantize_linear(smooth: bool, threads: int) -> ort.InferenceSession:
    """``DynamicQuantizeLinear`` (uint8, one scale and zero point for the whole tensor)."""
    nodes = [h.make_node("Mul", ["x", "sm"], ["xf"]) if smooth else h.make_node("Identity", ["x"], ["xf"]),
             h.make_node("DynamicQuantizeLinear", ["xf"], ["y", "s", "z"])]
    inputs = [("x", TP.FLOAT, [None, None])] + ([("sm", TP.FLOAT, [None, None])] if smooth else [])
    return _session(("dynamic_quantize_linear", smooth), nodes, inputs,
                    [("y", TP.UINT8, [None, None]), ("s", TP.FLOAT, []), ("z", TP.UINT8, [])], threads)


def matmul_nbits(k: int, n: int, block: int, bits: int, with_zp: bool, with_bias: bool, threads: int
                 ) -> ort.InferenceSession:
    """``MatMulNBits`` (com.microsoft, accuracy_level 0): A fp16 ``[M, K]``, B uint8 ``[N, K/block,
    block * bits / 8]`` (4 bits: element 2j in the low nibble), scales fp16 ``[N, K/block]``, zero points
    uint8 ``[N, ceil(K/block / 2)]`` (4 bits, packed) or ``[N, K/block]`` (8 bits), bias fp16 ``[N]`` -> fp16
    ``[M, N]``. The weight is dequantized in fp32 and multiplied by an fp32 SGEMM."""
    kb = k // block
    names = ["a", "b", "s", "z" if with_zp else ""] + (["", "bias"] if with_bias else [])
    while names and names[-1] == "":
        names.pop()
    inputs = [("a", TP.FLOAT16, [None, k]), ("b", TP.UINT8, [n, kb, block * bits // 8]), ("s", TP.FLOAT16, [n, kb])]
    if with_zp:
        inputs.append(("z", TP.UINT8, [n, -(-kb // 2) if bits == 4 else kb]))
    if with_bias:
        inputs.append(("bias", TP.FLOAT16, [n]))
    node = h.make_node("MatMulNBits", names, ["y"], domain="com.microsoft", K=k, N=n, bits=bits, block_size=block,
                       accuracy_level=0)
    return _session(("matmul_nbits", k, n, block, bits, with_zp, with_bias), [node], inputs,
                    [("y", TP.FLOAT16, [None, n])], threads)
