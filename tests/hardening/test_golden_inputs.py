"""Issue 19, the golden's rows: hostile op arguments get a clear refusal before any work.

Rows covered (one test or parametrized test per row, asserting the new outcome):

* ``moe_init_routing_v2(expert_capacity=10**9, drop_pad_mode=1)`` for 6 tokens: a ValueError naming the
  argument, the bytes and the budget, before anything is allocated (and the other argument-sized
  allocations: block sizes, matmul results, NZ padding);
* ``dequantize`` / ``anti_quant`` / ``trans_quant_param`` with a NaN scale, ``quantize`` with scale 0: refused
  under ``nan_policy="raise"``, computed through (IEEE, as before) under ``"ieee"``;
* the NaN policy on **every** registered op: NaN in any float input of a valid call is refused with the
  op's and the argument's name, except where the NaN is moved, not computed on (layout, v1 routing's
  gather, the swizzle) or where the format defines it (OCP MX).
"""

from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, find, settings

import w8a8
from conformance import registry as decls
from w8a8 import ASCEND, _check
from w8a8 import dtypes as _dt
from w8a8 import registry

IEEE = ASCEND.replace(nan_policy="ieee")
GIB = 1 << 30


# -- bounded allocation ---------------------------------------------------------------------------------

def test_routing_capacity_of_a_billion_is_refused_before_allocating():
    # 6 tokens, top-2, 8 experts, C = 10^9: expanded_x would be [8 * 10^9, 16] fp32 plus a 4-byte scale and
    # a 1-byte mask per row: 8e9 * (64 + 5) = 552e9 bytes. The refusal names the argument, the bytes and
    # the budget, and nothing near that size is allocated (traced peak < 1 MiB).
    x = np.ones((6, 16), np.float32)
    ids = np.tile(np.int32([0, 1]), (6, 1))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as info:
            w8a8.moe_init_routing_v2(x, ids, expert_capacity=10**9, drop_pad_mode=1, expert_num=8)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(info.value)
    assert msg.startswith("moe_init_routing_v2: argument 'expert_capacity' must be small enough that expanded_x "
                          "[8000000000, 16]")
    assert "(8000000000,) x 69 B = 552000000000 bytes" in msg
    assert "allocation budget of 4294967296 bytes (4 GiB)" in msg and _check.BUDGET_ENV in msg
    assert peak < 1 << 20


def test_routing_capacity_of_ten_million_is_refused_under_a_smaller_budget(monkeypatch):
    # the 10^7 (1.3 GB with its shapes; here 8 experts, H = 16 bf16: 2.96 GB): within the default
    # 4 GiB, refused under a 1 GiB budget
    x = np.ones((6, 16), _dt.bfloat16)
    ids = np.zeros((6, 2), np.int32)
    kw = dict(expert_capacity=10**7, drop_pad_mode=1, expert_num=8)
    plan = registry.get("moe_init_routing_v2").check(x, ids, **kw)   # the check alone: no allocation
    assert plan.routing.rows == 8 * 10**7
    monkeypatch.setenv(_check.BUDGET_ENV, "1GiB")
    # 8e7 rows * (16 * 2 + 5) B = 2.96e9 B > 2^30
    with pytest.raises(ValueError, match=r"'expert_capacity' .* budget of 1073741824 bytes .*; "
                                         r"got \(80000000,\) x 37 B = 2960000000 bytes"):
        w8a8.moe_init_routing_v2(x, ids, **kw)


@pytest.mark.parametrize("budget, refused", [(444, False), (443, True)])
def test_routing_budget_threshold(monkeypatch, budget, refused):
    # 4 experts x C = 3 -> 12 rows of H = 8 fp32 (32 B) + 5 B = 37 B: 444 bytes exactly; the budget is inclusive
    monkeypatch.setenv(_check.BUDGET_ENV, str(budget))
    x = np.ones((6, 8), np.float32)
    ids = np.zeros((6, 1), np.int32)
    call = lambda: w8a8.moe_init_routing_v2(x, ids, expert_capacity=3, drop_pad_mode=1, expert_num=4)  # noqa: E731
    if refused:
        with pytest.raises(ValueError, match=r"got \(12,\) x 37 B = 444 bytes"):
            call()
    else:
        expanded_x = call()[0]
        assert expanded_x.shape == (4, 3, 8)     # [expert_num, C, H]; expert 0 keeps 3 of its 6 tokens
        assert expanded_x[0].tolist() == [[1.0] * 8] * 3 and not expanded_x[1:].any()


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1.5GiB", "4 PB"])
def test_budget_variable_must_be_a_positive_size(monkeypatch, value):
    monkeypatch.setenv(_check.BUDGET_ENV, value)
    with pytest.raises(ValueError, match=rf"environment variable {_check.BUDGET_ENV} must be a positive number of "
                                         rf"bytes .*; got '{re.escape(value)}'"):
        w8a8.int_matmul(np.ones((2, 3), np.int8), np.ones((3, 4), np.int8))


@pytest.mark.parametrize("value, expected", [("4096", 4096), ("512MiB", 512 << 20), ("2 gib", 2 << 30),
                                             ("1GB", 10**9), ("", 4 << 30)])
def test_budget_variable_units(monkeypatch, value, expected):
    monkeypatch.setenv(_check.BUDGET_ENV, value)
    assert _check.allocation_budget() == expected
    assert _check.allocation_budget(7) == 7               # an explicit budget wins over the variable


BUDGET_CALLS = {
    # op: (call, the argument named, the shape x itemsize it would allocate)
    "int_matmul": (lambda: w8a8.int_matmul(np.zeros((1 << 16, 0), np.int8), np.zeros((0, 1 << 15), np.int8)),
                   "b", "(65536, 32768) x 4 B"),
    "quant_matmul": (lambda: w8a8.quant_matmul(np.zeros((1 << 16, 0), np.int8), np.zeros((0, 1 << 15), np.int8),
                                               np.ones(1 << 15, np.float32), output_dtype="bfloat16"),
                     "x2", "(65536, 32768) x 4 B"),
    "fp8_block_quantize": (lambda: w8a8.fp8_block_quantize(np.ones((1, 1), np.float32), block_shape=(10**6, 10**6)),
                           "block_shape", "(1000000, 1000000) x 4 B"),
    "per_token_group_quant_fp8": (lambda: w8a8.per_token_group_quant_fp8(np.ones((3, 5), np.float32), 10**10),
                                  "group_size", "(3, 1, 10000000000) x 4 B"),
    "format_cast_nz": (lambda: w8a8.format_cast_nz(np.broadcast_to(np.zeros((), np.int8), (1 << 24, 1, 1))),
                       "w", "(16777216, 1, 1, 16, 32) x 1 B"),
}


@pytest.mark.parametrize("op", sorted(BUDGET_CALLS))
def test_argument_sized_allocations_are_budgeted(op):
    # inputs of a few bytes (zero-size operands, a broadcast view, a 1x1 weight) whose arguments ask for GiBs
    call, arg, what = BUDGET_CALLS[op]
    with pytest.raises(ValueError) as info:
        call()
    msg = str(info.value)
    assert msg.startswith(f"{op}: argument '{arg}' must be small enough that ")
    assert f"got {what} = " in msg and "budget of 4294967296 bytes" in msg


# -- the NaN / scale-0 policy on the ops the issue names -----------------------------------------------

NAN_CALLS = {
    "dequantize": (lambda n, s: w8a8.dequantize(np.int8([[1, 0, -3]]), s, numerics=n), "scale"),
    "anti_quant": (lambda n, s: w8a8.anti_quant(np.int8([[1, 0, -3]]), s, numerics=n), "scale"),
    "trans_quant_param": (lambda n, s: w8a8.trans_quant_param(s, numerics=n), "scale"),
}


@pytest.mark.parametrize("op", sorted(NAN_CALLS))
@pytest.mark.parametrize("bad, kind", [(np.nan, "NaN"), (-np.inf, "Inf")])
def test_nonfinite_scale_refused_under_raise(op, bad, kind):
    call, arg = NAN_CALLS[op]
    s = np.float32([2.0, bad, 0.5])
    with pytest.raises(ValueError, match=rf"^{op}: argument '{arg}' must be finite \(.*nan_policy='ieee'.*\); "
                                         rf"got {kind} at index \(1,\)$"):
        call(ASCEND, s)


def test_nonfinite_scale_computed_through_under_ieee():
    # the old results, now only on request: (y - 0) * s in fp32 -> [2, NaN, -1.5]; anti_quant rounds to fp16;
    # trans_quant_param keeps the NaN's exponent 255 (0x7FC00000 & 0xFFFFE000) with the flag bit 46
    s = np.float32([2.0, np.nan, 0.5])
    y = np.int8([[1, 0, -3]])
    d = w8a8.dequantize(y, s, numerics=IEEE)
    assert d[0, 0] == 2.0 and np.isnan(d[0, 1]) and d[0, 2] == -1.5
    a = w8a8.anti_quant(y, s, numerics=IEEE)
    assert a.dtype == np.float16 and a[0, 0] == 2.0 and np.isnan(a[0, 1]) and a[0, 2] == -1.5
    assert w8a8.trans_quant_param(s, numerics=IEEE).view(np.uint64).tolist()[1] == (1 << 46) | 0x7FC00000


def test_quantize_zero_scale_refused_where_it_divides():
    # div_mode=True computes x * (1 / s): s = 0 gave +-127 (x / 0 = +-Inf saturated) and 0 for 0 / 0 = NaN
    x = np.float32([[1.0, -1.0, 0.0]])
    with pytest.raises(ValueError, match=r"^quantize: argument 'scales' must be non-zero \(the op divides by it; "
                                         r".*\); got 0 at index \(0,\)$"):
        w8a8.quantize(x, np.float32([0.0]), axis=0)
    # under "ieee" the IEEE result, as before: +Inf -> 127, -Inf -> -128, NaN -> code 0
    assert w8a8.quantize(x, np.float32([0.0]), axis=0, numerics=IEEE).tolist() == [[127, -128, 0]]
    # div_mode=False multiplies (AscendQuantV3): a zero scale is a valid all-offset result, not refused
    assert w8a8.quantize(x, np.float32([0.0]), np.float32([2.0]), axis=-1, div_mode=False).tolist() == [[2, 2, 2]]


def test_dequant_swiglu_quant_zero_group_scale_refused():
    # static per-channel quant_scale divides (o / s); the [1] scalar's zero is static_zero_scale's (1 / 0 -> 1)
    x = np.int32([[200, 0, 3, 5]])
    kw = dict(weight_scale=np.ones(4, np.float32), activate_left=True, quant_mode=0)
    with pytest.raises(ValueError, match=r"^dequant_swiglu_quant: argument 'quant_scale' must be non-zero .*"
                                         r"got 0 at index \(1,\)$"):
        w8a8.dequant_swiglu_quant(x, quant_scale=np.float32([1.0, 0.0]), **kw)
    y, _ = w8a8.dequant_swiglu_quant(x, quant_scale=np.float32([0.0]), **kw)   # the scalar: treated as 1
    assert y.dtype == np.int8


# -- the NaN policy on every registered op --------------------------------------------------------------

MOVED_OR_FORMAT_DEFINED = {
    # (op, argument): why NaN is accepted there
    ("format_cast_nz", "w"): "layout: the values are moved bit for bit, not computed on",
    ("nz_to_nd", "w_nz"): "layout: moved bit for bit",
    ("moe_init_routing", "x"): "v1 routing only gathers rows of x",
    ("swizzle_block_scales", "scale"): "a permutation of the scale bytes",
    ("mx_quantize", "x"): "OCP MX v1.0: a block holding NaN gets the NaN scale (0xFF), documented in w8a8.lowbit.mx",
    ("mx_dequantize", "data"): "OCP MX: an element's NaN code decodes to NaN",
    ("mx_matmul", "a_data"): "OCP MX: NaN elements propagate",
    ("mx_matmul", "b_data"): "OCP MX: NaN elements propagate",
}


def _is_float_array(v) -> bool:
    return isinstance(v, np.ndarray) and v.size and _dt.is_float(v.dtype)


def _float_value(v):
    """``v`` itself when it is a non-empty float array; for the per-rank lists of the expert-parallel ops,
    the first rank's non-empty float array (its index in the list); else None."""
    if _is_float_array(v):
        return v, None
    if isinstance(v, list):
        return next(((x, j) for j, x in enumerate(v) if _is_float_array(x)), None) or (None, None)
    return None, None


def _float_inputs(args, kwargs, names):
    for i, v in enumerate(args):
        if _float_value(v)[0] is not None:
            yield names[i], i, None
    for k, v in kwargs.items():
        if _float_value(v)[0] is not None:
            yield k, None, k


def _a_valid_call(name):
    """The smallest drawn call of the op's declaration that the golden runs and that has a float input."""
    decl, op = decls.get(name), registry.get(name)

    def usable(params):
        try:
            args, kwargs = decl.build(params)
            with np.errstate(all="ignore"):
                op.fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - a draw the op refuses is simply not used
            return False
        return any(True for _ in _float_inputs(args, kwargs, list(op.signature.parameters)))

    params = find(decl.params(), usable, settings=settings(database=None, max_examples=300, deadline=None,
                                                           suppress_health_check=list(HealthCheck)))
    return decl.build(params)


OPS_WITH_FLOAT_INPUTS = [n for n in registry.names() if n not in ("int_matmul", "convert_weight_to_int4pack")]


def test_every_op_is_audited():
    # the two left out take integers only (int_matmul: int8..int32 operands; convert_weight_to_int4pack: int32)
    for name in ("int_matmul", "convert_weight_to_int4pack"):
        params = registry.get(name).signature.parameters
        assert not any(p for p in params if "scale" in p or p in ("x", "bias"))
    assert len(OPS_WITH_FLOAT_INPUTS) == len(registry.names()) - 2


@pytest.mark.parametrize("name", OPS_WITH_FLOAT_INPUTS)
def test_nan_in_any_float_input_is_refused_naming_op_and_argument(name):
    op = registry.get(name)
    args, kwargs = _a_valid_call(name)
    names = list(op.signature.parameters)
    checked = 0
    for arg, i, key in _float_inputs(args, kwargs, names):
        given = args[i] if key is None else kwargs[key]
        array, rank = _float_value(given)
        value = array.copy()
        value.reshape(-1)[0] = np.nan
        if rank is not None:                      # a per-rank list: NaN in one rank's tensor
            value = [value if j == rank else x for j, x in enumerate(given)]
        a2, k2 = list(args), dict(kwargs)
        if key is None:
            a2[i] = value
        else:
            k2[key] = value
        if (name, arg) in MOVED_OR_FORMAT_DEFINED:
            with np.errstate(all="ignore"):
                op.fn(*a2, **k2)                 # accepted: documented above
            continue
        with pytest.raises(ValueError) as info, np.errstate(all="ignore"):
            op.fn(*a2, **k2)
        msg = str(info.value)
        # the op's own argument, or (serving paths that refuse at a stage) the stage's op and argument
        assert f"argument '{arg}' must be finite" in msg or ": argument '" in msg and "must be finite" in msg, msg
        assert re.search(r"got (NaN at index|nan)", msg), msg
        checked += 1
    assert checked or all((name, a) in MOVED_OR_FORMAT_DEFINED for a, _, _ in _float_inputs(args, kwargs, names))
