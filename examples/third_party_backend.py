"""A third-party backend in one file: pure NumPy, two ops, its own numerics (docs/adding-a-backend.md).

``dynamic_quant`` here returns the scale ``amax * fp32(1/127)`` at every shape (the formula of the
Ascend single-row, multi-row and double-buffer kernels) where the Ascend large-shape and MoE kernels
write ``1 / (127 / amax)``: the two differ in the last bit for some rows. The backend declares it
through its ``Numerics`` record (``scale_out``, and ``variants="fixed"``: one kernel, no shape
dependence), so conformance holds it to the golden run under *that* record, bit for bit. ``int_matmul`` shows a
loader: the operands are converted once, outside the timed call.

The base class does the rest: the golden's argument checks (this file has none, and raises the
golden's errors with the golden's messages — NaN / Inf inputs included, so the kernel never sees
them), the numerics refusal, the capabilities (what the kernel takes: int8 codes only), the device
boundary, timing.

    PYTHONPATH=examples w8a8 conformance --backend third_party_backend:AmaxScaleBackend \\
        --op dynamic_quant --op int_matmul --out /tmp/amax-scale
"""

from __future__ import annotations

import numpy as np

import w8a8
from backends import Accepts, Backend, Capabilities, implements, loads
from w8a8.dynamic_quant import smoothed_rows
from w8a8.intgemm import check_int32

_F64_EXACT = 1 << 53   # every partial sum of the float64 GEMM is an exact integer below this


class AmaxScaleBackend(Backend):
    name = "amax-scale"
    description = "pure NumPy: dynamic_quant returning scale = amax * fp32(1/127); int_matmul in float64"
    device = "cpu"
    compute = "fp32"
    numerics = w8a8.ASCEND.replace(name="amax-scale", variants="fixed", scale_out="amax_mul_rcp")
    capabilities = Capabilities({   # what the kernels take: calls outside are declined (and not drawn)
        "dynamic_quant": Accepts(values={"dst_name": ("int8",)}),       # no int4 packing
        "int_matmul": Accepts(require=(("K * max|a| * max|b| < 2^53 (an exact float64 sum)",
                                        lambda a: a.k * _absmax(a.a) * _absmax(a.b) < _F64_EXACT),)),
    })

    @implements("dynamic_quant")
    def _dynamic_quant(self, a, *, numerics):
        """``a``: :class:`w8a8.dynamic_quant.DynamicQuantArgs`, checked by the golden (its arrays are NumPy:
        ``to_device`` is the identity here); ``numerics``: the record of the call (this backend's)."""
        x = smoothed_rows(a, numerics)     # fp32 [S, H], * smooth_scales: the golden's own data check
        amax = np.abs(x).max(axis=-1, keepdims=True, initial=0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inv = np.float32(127) / amax
            t = x * inv                    # an all-zero row: 0 * inf = NaN -> code 0 (zero_row="zero")
            scale = amax * (np.float32(1) / np.float32(127))
        codes = np.where(np.isnan(t), 0, np.clip(np.rint(t), -127, 127)).astype(np.int8)
        return codes.reshape(a.x.shape), scale[:, 0].reshape(a.x.shape[:-1])

    @loads("int_matmul")
    def _load_int_matmul(self, a):
        """Load time (untimed): both operands to float64 once."""
        return a.a.astype(np.float64), a.b.astype(np.float64), a.op

    @implements("int_matmul")
    def _int_matmul(self, loaded):
        a, b, op = loaded
        total = np.matmul(a, b)            # exact: every partial sum is an integer below 2^53
        check_int32(op, total)             # the golden's OverflowError where the true sum leaves int32
        return total.astype(np.int32)


def _absmax(x: np.ndarray) -> int:
    return int(np.abs(x.astype(np.int64)).max()) if x.size else 0
