"""Backend naming and repro (``backends.get`` specs, ``backend.spec``) and capabilities (``Backend.declines``,
``backends.capabilities``): a backend is made again from the exact ``--backend`` spec a report prints, and a
call outside what a kernel takes is declined with a reason, never a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import backends
import w8a8
from backends import Accepts, Backend, Capabilities, Unsupported, implements

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "third_party_backend.py"

SMALL_BACKEND = '''
import numpy as np
import w8a8
from backends import Backend, implements


class Tiny(Backend):
    name = "tiny"
    numerics = w8a8.ASCEND

    @implements("int_matmul")
    def _mm(self, a):
        return w8a8.int_matmul(a.a, a.b)
'''


# -- specs --------------------------------------------------------------------------------------------------

def test_a_file_spec_loads_and_keeps_its_spec():
    spec = f"{EXAMPLE}:AmaxScaleBackend"
    b = backends.get(spec)
    assert b.name == "amax-scale" and b.spec == spec
    assert backends.get(spec) is b
    assert b.dynamic_quant(np.ones((2, 8), np.float16))[0].tolist() == [[127] * 8] * 2


def test_a_relative_file_spec_is_kept_as_given(monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = "examples/third_party_backend.py:AmaxScaleBackend"
    assert backends.get(spec).spec == spec


def test_registered_names_are_their_own_spec_and_registered_targets_keep_the_target():
    assert backends.get("numpy").spec == "numpy"
    target = f"{EXAMPLE}:AmaxScaleBackend"
    backends.register("amax-scale-via-register", target)
    try:
        assert backends.get("amax-scale-via-register").spec == target   # what conformance's workers do
    finally:
        backends._registered.pop("amax-scale-via-register", None)
        backends._instances.pop("amax-scale-via-register", None)


@pytest.mark.parametrize("spec, exc, words", [
    ("no/such/file.py:Cls", ImportError, "no file 'no/such/file.py'"),
    (f"{EXAMPLE}:NoSuchClass", AttributeError, "no attribute 'NoSuchClass'"),
    ("no_such_module_xyz:Cls", ImportError, "no_such_module_xyz"),
    (":Cls", ImportError, "expected 'package.module:Class'"),
])
def test_a_bad_spec_says_what_is_missing(spec, exc, words):
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)")):
        backends.get(spec)


def test_module_spec_from_the_current_directory_and_repro_lines_carry_the_spec(tmp_path):
    # the console script does not put the current directory on sys.path; backends.get does, as python -m would.
    # The run uses a worker process (the spec crosses the process boundary) and every repro line names it.
    (tmp_path / "tinymod.py").write_text(SMALL_BACKEND)
    (tmp_path / "tinyfile.py").write_text(SMALL_BACKEND)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for spec in ("tinymod:Tiny", "./tinyfile.py:Tiny"):
        out = tmp_path / ("run-" + spec.split(":")[0].strip("./"))
        proc = subprocess.run(["w8a8", "conformance", "--backend", spec, "--op", "int_matmul", "--profile", "dev",
                               "--workers", "1", "--no-attribution", "--out", str(out)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert records and all(r["repro"].startswith(f"w8a8 conformance --backend {spec} --op int_matmul ")
                               for r in records)


# -- capabilities --------------------------------------------------------------------------------------------

class _Args:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.mark.parametrize("rule, args, reason", [
    (Accepts(dtypes={"x": ("float32",)}), _Args(x=np.ones(2, np.float16)), "x: dtype float32 only; got float16"),
    (Accepts(values={"div_mode": (True,)}), _Args(div_mode=False), "div_mode: True only; got False"),
    (Accepts(absent=("bias",)), _Args(bias=np.ones(3, np.float32)), "bias: not taken by this kernel"),
    (Accepts(per_tensor=("scale",)), _Args(scale=np.ones(3, np.float32)), "scale: per-tensor"),
    (Accepts(ndim={"b": 2}), _Args(b=np.ones((2, 2, 2), np.int8)), "b: exactly 2 dims"),
    (Accepts(max_ndim={"b": 2}), _Args(b=np.ones((2, 2, 2), np.int8)), "b: at most 2 dims"),
    (Accepts(multiple_of={"x.shape[-1]": 32}), _Args(x=np.ones((2, 33))), "x.shape[-1]: a multiple of 32; got 33"),
    (Accepts(at_least={"k": 1}), _Args(k=0), "k: >= 1; got 0"),
    (Accepts(at_most={"params.k": 8}), _Args(params=_Args(k=9)), "params.k: <= 8; got 9"),
    (Accepts(require=(("an even K", lambda a: a.k % 2 == 0),)), _Args(k=3), "needs an even K"),
    (Accepts(never="no CPU kernel"), _Args(), "no CPU kernel"),
])
def test_each_rule_declines_with_a_reason(rule, args, reason):
    assert reason in rule.declines(args)


def test_rules_accept_absent_optional_arguments_and_what_fits():
    rule = Accepts(dtypes={"bias": ("float32",)}, per_tensor=("scale",), multiple_of={"x.shape[-1]": 8},
                   at_least={"x.ndim": 1})
    assert rule.declines(_Args(bias=None, scale=np.ones(1, np.float32), x=np.ones((3, 16)))) is None


def test_a_malformed_rule_name_is_an_error_when_the_rule_is_made():
    with pytest.raises(ValueError, match="cannot read"):
        Accepts(dtypes={"x.shape[": ("float32",)})
    with pytest.raises(TypeError, match="Accepts"):
        Capabilities({"int_matmul": {"dtypes": {}}})


class _Narrow(Backend):
    name = "narrow"
    capabilities = Capabilities({"int_matmul": Accepts(dtypes={"a": ("int8",)}, at_most={"k": 4})})

    @implements("int_matmul")
    def _mm(self, a):
        return w8a8.int_matmul(a.a, a.b)


def test_prepare_declines_after_the_goldens_check():
    b = _Narrow()
    assert b.int_matmul(np.ones((2, 4), np.int8), np.ones((4, 3), np.int8)).tolist() == [[4] * 3] * 2
    with pytest.raises(Unsupported, match="declines int_matmul: k: <= 4; got 5"):
        b.int_matmul(np.ones((2, 5), np.int8), np.ones((5, 3), np.int8))
    with pytest.raises(Unsupported, match="a: dtype int8 only; got uint8"):
        b.int_matmul(np.ones((2, 4), np.uint8), np.ones((4, 3), np.int8))
    # the golden's own refusal comes first, with the golden's exception
    with pytest.raises(ValueError, match="int_matmul"):
        b.int_matmul(np.ones((2, 4), np.int8), np.ones((5, 3), np.int8))
    assert b.info()["capabilities"] == {"int_matmul": ["a: int8", "k <= 4"]}


def test_the_default_declines_nothing():
    class Plain(Backend):
        name = "plain"

    assert Plain().declines("int_matmul", object()) is None
    assert backends.get("numpy").declines("quant_matmul", object()) is None
