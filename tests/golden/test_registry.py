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
from conformance import registry as declarations
from w8a8 import registry



def valid_call(op: str) -> tuple[tuple, dict]:
    """One valid call of ``op``: its declaration's (conformance/ops/<family>/<op>.py) valid call, the first
    named case (:meth:`conformance.declare.OpDecl.valid_call`). Nothing here lists the ops."""
    return declarations.get(op).valid_call()


OPS = registry.ops()
NAMES = [op.name for op in OPS]


# -- the registry ----------------------------------------------------------------------------------------

def test_every_public_op_is_registered_once_in_its_family():
    assert len(NAMES) == len(set(NAMES))
    assert set(NAMES) == set(declarations.specs())     # every op has its declaration (and a valid call)
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
    args, kwargs = valid_call(op.name)
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
    for how, args, kwargs in [*bad_calls(*valid_call(op.name)), *_rank_bad_calls(*valid_call(op.name))]:
        by_check = _raised(op.args, args, kwargs)
        if by_check is None:   # accepted (e.g. a NaN where NaN is an ordinary value): nothing to compare
            continue
        refused += 1
        assert _raised(op.fn, args, kwargs) == by_check, how
    assert refused >= 3   # at least: a list, an unknown keyword and one more broken array
