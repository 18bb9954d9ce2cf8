"""The op declarations (conformance/ops/<family>/<op>.py) and their vocabulary: one declaration per
golden op, discovered; named cases and bad calls that hold on the golden itself; declarations checked
when they register; tolerance-table keys checked against them; the error and named kinds of run_case."""

import re

import numpy as np
import pytest

import backends
from conformance import registry
from conformance.declare import BadCall, Case, OpDecl, declare, outputs
from conformance.evaluate import run_case
from conformance.tolerances import Entry, ToleranceTable, packaged_path

GOLDEN = backends.get("numpy")


def test_the_declared_ops_are_the_goldens_ops():
    declared = registry.specs()
    assert set(declared) == set(registry.golden_op_names())
    assert list(declared) == list(registry.golden_op_names())  # listed in the golden's order
    for name, decl in declared.items():
        assert decl.name == name and decl.family in ("dense", "moe", "lowbit")


def test_one_file_per_op_discovered_in_sorted_order():
    modules = registry.declaration_modules()
    assert modules == sorted(modules)
    leaves = {m.rsplit(".", 1)[-1] for m in modules}
    assert leaves == set(registry.golden_op_names())  # the file is named after its op
    assert all(m.split(".")[2] in ("dense", "moe", "lowbit") for m in modules)
    for m in modules:
        op = m.rsplit(".", 1)[-1]
        assert registry.get(op).family == m.split(".")[2]


def test_every_op_declares_named_cases_and_bad_calls():
    for name, decl in registry.specs().items():
        assert decl.bad_calls, f"{name} declares no bad calls"
        assert all(b.op == name and b.key == f"{name}/{b.name}" for b in decl.bad_calls)
        assert all(c.op == name for c in decl.cases)
        assert decl.cases, f"{name} declares no named case"  # its first is the op's valid call


@pytest.mark.parametrize("key", [c.key for c in registry.named_cases() if c.expected])
def test_named_case_values_hold_on_the_golden(key):
    # the documented values, hand-derived, against the golden itself (bit for bit)
    case = registry.named_case(key)
    decl = registry.get(case.op)
    args, kwargs = case.build()
    with np.errstate(all="ignore"):
        got = decl.as_outputs(GOLDEN.call(case.op, *args, **kwargs))
    for name, want in case.expected.items():
        want = np.asarray(want)
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, (name, got[name].dtype, got[name].shape)
        assert np.array_equal(got[name].view(f"u{want.dtype.itemsize}"), want.view(f"u{want.dtype.itemsize}")), name


@pytest.mark.parametrize("key", [b.key for b in registry.bad_calls()])
def test_bad_calls_hold_on_the_golden(key):
    bad = registry.bad_call(key)
    args, kwargs = bad.build()
    with pytest.raises(bad.raises) as info, np.errstate(all="ignore"):
        GOLDEN.call(bad.op, *args, **kwargs)
    assert re.search(bad.match, str(info.value)), (str(info.value), bad.match)


def _decl(**changes):
    base = dict(name="dynamic_quant", family="dense", params=lambda: None, build=lambda p: ((), {}),
                outputs=outputs(("y", "int")), cases=[Case("valid", lambda: ((), {}))])
    return OpDecl(**(base | changes))


@pytest.mark.parametrize("changes, message", [
    (dict(cases=[]), "declares no named case; its first named case is the op's valid call"),
    (dict(outputs=outputs(("y", "codes"))), "output 'y' has kind 'codes'"),
    (dict(outputs=outputs(("y", "int"), ("y", "scale"))), "duplicate output names"),
    (dict(cases=[Case("a", lambda: ((), {})), Case("a", lambda: ((), {}))]), r"duplicate case names \['a'\]"),
    (dict(cases=[Case("a", lambda: ((), {}), {"z": np.zeros(1)})]), r"case 'a' expects unknown output\(s\) \['z'\]"),
    (dict(bad_calls=[BadCall("b", lambda: ((), {}), KeyError, "x")]), "must raise ValueError, TypeError or OverflowError"),
    (dict(bad_calls=[BadCall("b", lambda: ((), {}), ValueError, "(")]), "invalid 'match' regex"),
])
def test_a_malformed_declaration_is_refused_naming_what_is_wrong(changes, message):
    with pytest.raises(ValueError, match=message):
        declare(_decl(**changes))


def test_an_op_declared_twice_is_an_error():
    with pytest.raises(ValueError, match="'dynamic_quant' is declared twice"):
        declare(_decl())
    assert registry.get("dynamic_quant").family == "dense" and registry.get("dynamic_quant").cases


def test_the_packaged_tolerance_table_names_declared_ops_and_outputs():
    table = ToleranceTable.load(packaged_path())
    assert table.entries() and table.validate() is table


def test_a_tolerance_entry_for_an_unknown_op_or_output_is_an_error_naming_it(tmp_path):
    bad = ToleranceTable([Entry("*", "quant_matmul", "y"), Entry("*", "quant_matmul", "codes", "int8"),
                          Entry("torch-cpu", "no_such_op", "y")])
    with pytest.raises(ValueError) as info:
        bad.validate()
    msg = str(info.value)
    assert "('*', 'quant_matmul', 'codes', 'int8') names output 'codes' of quant_matmul, whose outputs are y" in msg
    assert "('torch-cpu', 'no_such_op', 'y', '*') names op 'no_such_op', which no declaration has" in msg
    assert "'quant_matmul', 'y', '*') names" not in msg
    path = tmp_path / "t.toml"
    bad.save(path)
    with pytest.raises(ValueError, match="no_such_op"):
        ToleranceTable.load(path)
    assert len(ToleranceTable.load(path, validate=False).entries()) == 3


# -- the error and named kinds of run_case ------------------------------------------------------------

def test_an_error_case_passes_when_both_raise_the_declared_error():
    r = run_case(registry.get("quant_matmul"), {"error": "quant_matmul/x1_dtype"}, GOLDEN)
    assert r["kind"] == "error" and r["status"] == "pass" and r["name"] == "quant_matmul/x1_dtype"
    assert "TypeError: quant_matmul: argument 'x1'" in r["note"]


def test_a_backend_that_accepts_a_bad_call_fails_it():
    # Backend.prepare gives every backend the golden's argument checks; a data check the op makes itself
    # (the int32 accumulator plus bias overflowing) is the backend's: the planted ones add in int64
    bug = backends.get("conformance.planted:TiesAwayBackend")
    r = run_case(registry.get("quant_matmul"), {"error": "quant_matmul/int32_bias_overflows"}, bug)
    assert r["status"] == "fail" and r["note"].startswith("backend returned; OverflowError matching"), r
    assert run_case(registry.get("quant_matmul"), {"error": "quant_matmul/x1_dtype"}, bug)["status"] == "pass"


def test_documented_values_are_checked_under_the_record_they_hold_under():
    # zero_and_subnormal_rows documents the double-buffer kernel's scale (variants="select"); the planted
    # backends declare variants="fixed", under which the golden gives the basic kernels' 0: no mismatch
    bug = backends.get("conformance.planted:TiesAwayBackend")
    r = run_case(registry.get("dynamic_quant"), {"named": "dynamic_quant/zero_and_subnormal_rows"}, bug)
    assert r["status"] == "pass" and "the documented values hold under ascend-a2a3, not under" in r["note"], r
    # where the fixed record gives the documented values too, they are checked: the planted tie bug shows
    r = run_case(registry.get("dynamic_quant"), {"named": "dynamic_quant/ties_half_even"}, bug)
    assert r["status"] == "fail" and r["expected_mismatch"][0].startswith("backend differs from the documented y")


def test_a_wrong_declaration_is_reported_as_such(monkeypatch):
    decl = registry.get("quant_matmul")
    wrong = BadCall("wrong", lambda: ((np.ones((2, 3), np.int8), np.ones((3, 2), np.int8), np.ones(2, np.float32)),
                                      {"output_dtype": "bfloat16"}), ValueError, "anything", op="quant_matmul")
    monkeypatch.setattr(decl, "bad_calls", tuple(decl.bad_calls) + (wrong,))
    r = run_case(decl, {"error": "quant_matmul/wrong"}, GOLDEN)
    assert r["status"] == "fail" and r["note"].startswith("the declaration is wrong: the golden returned"), r


def test_a_named_case_checks_the_documented_values_on_both_sides(monkeypatch):
    decl = registry.get("trans_quant_param")
    case = registry.named_case("trans_quant_param/one")
    assert run_case(decl, {"named": case.key}, GOLDEN)["status"] == "pass"
    lie = Case("lie", case.build, {"packed": np.array([0x3F80_0000], np.int64)}, "a wrong expectation", op=decl.name)
    monkeypatch.setattr(decl, "cases", tuple(decl.cases) + (lie,))
    r = run_case(decl, {"named": "trans_quant_param/lie"}, GOLDEN)
    assert r["status"] == "fail" and len(r["expected_mismatch"]) == 2
    assert r["expected_mismatch"][0].startswith("golden differs from the documented packed: 1 of 1 elements differ")


def test_the_command_refuses_a_table_naming_an_undeclared_output(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "t.toml"
    path.write_text('[[entry]]\nbackend = "*"\nop = "quant_matmul"\noutput = "codes"\n')
    out = subprocess.run([sys.executable, "-m", "w8a8cli.main", "conformance", "--tolerances", str(path), "--op",
                          "trans_quant_param", "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "names output 'codes' of quant_matmul, whose outputs are y" in out.stderr
