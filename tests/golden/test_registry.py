"""The golden op registry and the one check contract (w8a8.registry, docs/architecture.md).

For every registered op: its check is ``<op>_args`` with exactly the op's parameters and defaults;
it returns a frozen dataclass named ``<CamelCaseOp>Args`` (an alias where two ops share one) whose
fields are documented; and the op raises exactly what its check raises (type and message) on a
sample of bad calls derived from a valid one: every array argument as a list, as complex64, with an
extra or a missing dimension, with a NaN, and an unknown keyword.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap

import numpy as np
import pytest

import backends
import w8a8
from backends.testing import bad_calls
from w8a8 import bfloat16 as BF16
from w8a8 import registry

f16, f32, i8, i32, i64 = np.float16, np.float32, np.int8, np.int32, np.int64
RNG = np.random.default_rng(12)


def a(shape, dtype, lo=-3, hi=3):
    """Small random data: uniform floats in [lo, hi) rounded to dtype, or integers in [lo, hi)."""
    if np.dtype(dtype).kind in "fV":
        return RNG.uniform(lo, hi, shape).astype(np.float32).astype(dtype)
    return RNG.integers(lo, hi, shape).astype(dtype)


def moe_weights(e=2, h=16, i=8):
    return a((e, 2 * i, h), i8), a((e, 2 * i, 1), f32, 0.01, 0.02), a((e, h, i), i8), a((e, h, 1), f32, 0.01, 0.02)


def ep_dispatch_call(r, h):
    """Positional arguments of a valid MC2 dispatch: R ranks of 2 tokens, E = 2R, K = 2 (rank q's tokens to its
    own experts 2q, 2q + 1 and to the next rank's)."""
    ids = [np.array([[2 * q, 2 * q + 1], [(2 * q + 2) % (2 * r), (2 * q + 3) % (2 * r)]], i32) for q in range(r)]
    return [a((2, h), BF16) for _ in range(r)], ids, "ep", r, list(range(r)), 2 * r


def ep_combine_call(r, h, dispatch):
    args = ep_dispatch_call(r, h)
    out = dispatch(*args)
    return (out[0], args[1], out[2], out[4], [a((2, 2), f32, 0.1, 1) for _ in range(r)], *args[2:]), {}


# One valid call of every op: (args, kwargs). Small, but every array argument the op has a rule for.
VALID = {
    "dynamic_quant": lambda: ((a((3, 16), BF16),), {}),
    "dynamic_quant_asymmetric": lambda: ((a((3, 16), f16),), {}),
    "quantize": lambda: ((a((3, 8), f32), a((8,), f32, 0.5, 1)), dict(dtype="int8", axis=-1)),
    "dequantize": lambda: ((a((3, 8), i8), a((8,), f32, 0.5, 1)), {}),
    "anti_quant": lambda: ((a((3, 8), i8), a((8,), f32, 0.5, 1)), {}),
    "trans_quant_param": lambda: ((a((8,), f32, 0.5, 1),), {}),
    "int_matmul": lambda: ((a((3, 8), i8), a((8, 4), i8)), {}),
    "quant_matmul": lambda: ((a((3, 8), i8), a((8, 4), i8), a((4,), f32, 0.5, 1)), dict(output_dtype="bfloat16")),
    "format_cast_nz": lambda: ((a((17, 33), i8),), {}),
    "nz_to_nd": lambda: ((w8a8.format_cast_nz(a((17, 33), i8)), (17, 33)), {}),
    "w8a8_dynamic_linear": lambda: ((a((3, 16), BF16), a((8, 16), i8), a((8, 1), f32, 0.01, 0.02)), {}),
    "w8a8_static_linear": lambda: ((a((3, 16), BF16), a((8, 16), i8)),
                                   dict(input_scale=np.array([0.02], f32), input_offset=np.array([1.0], f32),
                                        deq_scale=a((8,), f32, 1e-4, 1e-3), quant_bias=a((8,), i32))),
    "moe_gating_top_k_softmax": lambda: ((a((4, 8), f32),), dict(k=2)),
    "moe_gating_top_k": lambda: ((a((4, 8), f32), 2), dict(norm_type=1)),
    "moe_init_routing": lambda: ((a((3, 16), BF16), np.arange(6, dtype=i32).reshape(2, 3).T.copy(),
                                  a((3, 2), i32, 0, 4), 3), {}),
    "moe_init_routing_v2": lambda: ((a((3, 16), BF16), a((3, 2), i32, 0, 4)),
                                    dict(expert_num=4, expert_tokens_num_type=1, expert_tokens_num_flag=True)),
    "grouped_matmul": lambda: ((a((6, 16), i8), a((2, 16, 8), i8)),
                               dict(scale=a((2, 8), f32, 0.01, 0.02).astype(BF16), per_token_scale=a((6,), f32, 0.5, 1),
                                    group_list=np.array([2, 4], i64), group_list_type=1, output_dtype="bfloat16")),
    "swiglu": lambda: ((a((3, 8), f32),), {}),
    "dequant_swiglu_quant": lambda: ((a((3, 16), BF16),), dict(quant_mode=1)),
    "moe_finalize_routing": lambda: ((a((6, 8), f32), None, None, None, a((3, 2), f32), np.arange(6, dtype=i32),
                                      None), {}),
    "w8a8_moe": lambda: ((a((3, 16), BF16), *moe_weights()),
                         dict(topk_ids=a((3, 1), i32, 0, 2), topk_weights=a((3, 1), f32, 0.1, 1))),
    "w8a8_moe_prequantized": lambda: ((a((3, 16), i8), a((3,), f32, 0.01, 0.02), *moe_weights()),
                                      dict(topk_ids=a((3, 1), i32, 0, 2), topk_weights=a((3, 1), f32, 0.1, 1))),
    "moe_distribute_dispatch": lambda: (ep_dispatch_call(8, 7168), dict(quant_mode=2)),
    "moe_distribute_dispatch_v2": lambda: (ep_dispatch_call(2, 1024), dict(quant_mode=2)),
    "moe_distribute_combine": lambda: ep_combine_call(8, 7168, w8a8.moe_distribute_dispatch),
    "moe_distribute_combine_v2": lambda: ep_combine_call(2, 1024, w8a8.moe_distribute_dispatch_v2),
    "w8a8_moe_ep": lambda: (([a((3, 16), BF16), a((0, 16), BF16)], *moe_weights()),
                            dict(topk_ids=[a((3, 1), i32, 0, 2), a((0, 1), i32)],
                                 topk_weights=[a((3, 1), f32, 0.1, 1), a((0, 1), f32)])),
    "int4_group_quantize": lambda: ((a((4, 32), f32),), dict(group_size=16)),
    "int4_group_dequantize": lambda: ((a((4, 32), i8, -8, 8), a((4, 2), f16, 0.1, 1)), {}),
    "weight_quant_batchmatmul": lambda: ((a((3, 16), f16), a((16, 8), i8), a((8,), f16, 0.01, 0.02)), {}),
    "convert_weight_to_int4pack": lambda: ((a((4, 16), i32, -8, 8),), {}),
    "quant_matmul_int4": lambda: ((a((3, 16), i8), w8a8.pack_int4(a((16, 8), i8, -8, 8)),
                                   w8a8.trans_quant_param(a((8,), f32, 0.5, 1))),
                                  dict(offset=np.zeros(8, f32), pertoken_scale=a((3, 1), f32, 0.5, 1),
                                       output_dtype="bfloat16")),
    "w4a8_dynamic_linear": lambda: ((a((3, 16), BF16), a((8, 16), i8, -8, 8), a((8,), f32, 0.01, 0.02)), {}),
    "mx_quantize": lambda: ((a((2, 64), f32),), {}),
    "mx_dequantize": lambda: (w8a8.mx_quantize(a((2, 64), f32)), {}),
    "mx_matmul": lambda: ((*w8a8.mx_quantize(a((2, 64), f32)), *w8a8.mx_quantize(a((3, 64), f32))), {}),
    "nvfp4_quantize": lambda: ((a((2, 32), f32),), dict(per_tensor_scale=np.float32(0.01))),
    "nvfp4_dequantize": lambda: (w8a8.nvfp4_quantize(a((2, 32), f32), per_tensor_scale=np.float32(0.01)),
                                 dict(per_tensor_scale=np.float32(0.01))),
    "nvfp4_matmul": lambda: ((*w8a8.nvfp4_quantize(a((2, 32), f32), global_scale=np.float32(100)),
                              *w8a8.nvfp4_quantize(a((3, 32), f32), global_scale=np.float32(100)), np.float32(1e-4)),
                             {}),
    "swizzle_block_scales": lambda: ((a((3, 5), f32),), {}),
    "fp8_block_quantize": lambda: ((a((4, 32), f32),), dict(block_shape=(2, 16))),
    "per_token_group_quant_fp8": lambda: ((a((4, 32), f32), 16), {}),
    "fp8_block_dequantize": lambda: (w8a8.fp8_block_quantize(a((4, 32), f32), block_shape=(2, 16)),
                                     dict(block_shape=(2, 16))),
    "fp8_block_matmul": lambda: ((*w8a8.per_token_group_quant_fp8(a((2, 32), f32), 16),
                                  *w8a8.fp8_block_quantize(a((3, 32), f32), block_shape=(16, 16))), dict(block_size=16)),
}

OPS = registry.ops()
NAMES = [op.name for op in OPS]


# -- the registry ----------------------------------------------------------------------------------------

def test_every_public_op_is_registered_once_in_its_family():
    assert len(NAMES) == len(set(NAMES)) == 44
    assert set(NAMES) == set(VALID)
    assert {op.family for op in OPS} == set(registry.FAMILIES)
    by_family = [op.name for fam in registry.FAMILIES for op in registry.ops(fam)]
    assert by_family == NAMES                     # ops() lists family by family
    assert "quant_matmul" in registry.names("dense") and "grouped_matmul" in registry.names("moe")
    assert "mx_matmul" in registry.names("lowbit")


def test_everything_that_needs_op_names_derives_from_the_registry():
    assert backends.OPS == backends.ops.OPS == registry.names()
    assert backends.ops.DENSE_OPS + backends.ops.MOE_OPS + backends.ops.LOWBIT_OPS == registry.names()
    assert set(NAMES) <= set(w8a8.__all__)
    for op in OPS:
        assert getattr(w8a8, op.name) is op.fn                      # exported at the top of the golden
        assert op.fn.__module__ == op.module == op.check.__module__
        assert callable(getattr(backends.Backend, op.name))         # every backend's public op method


def test_get_and_ops_name_what_is_known():
    assert registry.get("quant_matmul").fn is w8a8.quant_matmul
    with pytest.raises(KeyError, match="no golden op 'quant_matmull'; known: .*quant_matmul"):
        registry.get("quant_matmull")
    with pytest.raises(ValueError, match="'family'.*'dense', 'moe', 'lowbit'"):
        registry.ops("sparse")


def test_registration_enforces_the_check_contract():
    def fake_op(x, *, k=1):
        return x

    def fake_op_args(x, *, k=2):   # a different default
        return x

    with pytest.raises(TypeError, match="fake_op_args must have exactly the op's parameters"):
        registry.golden_op("dense", check=fake_op_args)(fake_op)

    def misnamed(x, *, k=1):
        return x

    with pytest.raises(TypeError, match="must be named 'fake_op_args'; got 'misnamed'"):
        registry.golden_op("dense", check=misnamed)(fake_op)
    with pytest.raises(ValueError, match="'family'"):
        registry.golden_op("sparse", check=fake_op_args)
    assert "fake_op" not in registry.names()


def test_args_type_name_rule():
    assert registry.args_type_name("quant_matmul") == "QuantMatmulArgs"
    assert registry.args_type_name("w8a8_moe_prequantized") == "W8a8MoePrequantizedArgs"
    assert registry.args_type_name("moe_init_routing_v2") == "MoeInitRoutingV2Args"


# -- the check contract, op by op -----------------------------------------------------------------------

def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _undocumented_fields(cls) -> list[str]:
    """Fields of a dataclass with neither an attribute docstring nor a comment on their line."""
    src = textwrap.dedent(inspect.getsource(cls))
    lines = src.split("\n")
    body = ast.parse(src).body[0].body
    missing = []
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign):
            nxt = body[i + 1] if i + 1 < len(body) else None
            docstring = isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) \
                and isinstance(nxt.value.value, str)
            if not (docstring or "#" in lines[node.lineno - 1]):
                missing.append(node.target.id)
    return missing


def _records(value):
    """The golden's dataclass records in a checked result (the Args and the records nested in it)."""
    if dataclasses.is_dataclass(value) and type(value).__module__.startswith("w8a8."):
        yield type(value)
        for f in dataclasses.fields(value):
            yield from _records(getattr(value, f.name))


@pytest.mark.parametrize("op", OPS, ids=NAMES)
def test_check_name_signature_and_result(op):
    assert op.check.__name__ == f"{op.name}_args"
    assert _params(op.check) == _params(op.fn)
    assert op.takes_numerics == ("numerics" in inspect.signature(op.fn).parameters)
    args, kwargs = VALID[op.name]()
    checked = op.check(*args, **kwargs)
    cls = type(checked)
    declared = getattr(__import__(op.module, fromlist=["_"]), op.args_type_name)   # <CamelCaseOp>Args
    assert isinstance(checked, declared) and cls.__name__.endswith("Args")
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(checked, dataclasses.fields(cls)[0].name, None)
    for record in set(_records(checked)):
        assert _undocumented_fields(record) == [], record.__name__
    op.fn(*args, **kwargs)   # the valid call is valid for the op too


def _raised(fn, args, kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception is the result compared
        return type(exc), str(exc)
    return None


def _rank_bad_calls(args: tuple, kwargs: dict):
    """The breakages of :func:`backends.testing.bad_calls` applied to rank 0's array of every per-rank list
    argument (the expert-parallel ops take one array per simulated rank)."""
    slots = list(enumerate(args)) + list(kwargs.items())
    for key, v in slots:
        if not (isinstance(v, list) and v and all(isinstance(e, np.ndarray) for e in v)):
            continue
        for how, (new,), _ in bad_calls((v[0],), {}):
            if how.startswith("0 "):
                a2, k2 = list(args), dict(kwargs)
                if isinstance(key, int):
                    a2[key] = [new, *v[1:]]
                else:
                    k2[key] = [new, *v[1:]]
                yield f"{key}[0] {how[2:]}", tuple(a2), k2


@pytest.mark.parametrize("op", OPS, ids=NAMES)
def test_the_op_raises_exactly_what_its_check_raises(op):
    refused = 0
    for how, args, kwargs in [*bad_calls(*VALID[op.name]()), *_rank_bad_calls(*VALID[op.name]())]:
        by_check = _raised(op.args, args, kwargs)
        if by_check is None:   # accepted (e.g. a NaN where NaN is an ordinary value): nothing to compare
            continue
        refused += 1
        assert _raised(op.fn, args, kwargs) == by_check, how
    assert refused >= 3   # at least: a list, an unknown keyword and one more broken array
