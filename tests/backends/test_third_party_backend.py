"""A backend in one file (examples/third_party_backend.py) gets the golden's checks and error contract.

The example imports only NumPy, the golden and the ``backends`` base package — no other backend's
code — and has no argument checks of its own. Loaded straight from its file, it must refuse every
bad call the golden refuses, with the golden's exception and message; compute the golden's bits
under the numerics it declares (which are not the Ascend record); and pass a ``w8a8 conformance``
run of its ops as ``module:Class``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import w8a8
from backends import Unsupported
from backends.testing import BitwiseChecker, bad_calls

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILE = EXAMPLES / "third_party_backend.py"


def _load():
    spec = importlib.util.spec_from_file_location("third_party_backend", FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = _load()
BACKEND = EXAMPLE.AmaxScaleBackend()
CHECK = BitwiseChecker(BACKEND)   # the golden under the backend's own numerics
RNG = np.random.default_rng(5)
VALID = {
    "dynamic_quant": ((RNG.standard_normal((5, 32)).astype(w8a8.bfloat16),), {}),
    "int_matmul": ((RNG.integers(-128, 128, (3, 2, 40), dtype=np.int8),
                    RNG.integers(-128, 128, (40, 6), dtype=np.int8)), {}),
}


def test_one_short_file_that_imports_no_other_backend():
    assert len(FILE.read_text().splitlines()) < 100
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import third_party_backend as t; "
             "t.AmaxScaleBackend().dynamic_quant(__import__('numpy').ones((2, 8), 'float16')); "
             "print(sorted(m for m in sys.modules if m.startswith('backends') or m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", probe, str(EXAMPLES)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.replace("'", '"')) == ["backends", "backends.base", "backends.capabilities", "backends.ops"]
    assert BACKEND.ops() == ("dynamic_quant", "int_matmul")
    assert w8a8.ASCEND.differences(BACKEND.numerics) == {"scale_out": ("reciprocal", "amax_mul_rcp"),
                                                         "variants": ("select", "fixed")}


@pytest.mark.parametrize("op", sorted(VALID))
def test_the_goldens_refusals_with_the_goldens_messages(op):
    args, kwargs = VALID[op]
    CHECK.same(op, *args, **kwargs)
    refused = 0
    for how, bad_args, bad_kwargs in bad_calls(args, kwargs):
        refused += CHECK.same(op, *bad_args, **bad_kwargs) is None   # None: both raised, identically
    assert refused >= 4
    CHECK.raises(ValueError, "'x' must be finite", "dynamic_quant", np.array([[1.0, np.inf]], np.float16))
    CHECK.raises(OverflowError, "int32 accumulator overflows", "int_matmul", np.full((1, 4), 2 ** 30, np.int32),
                 np.full((4, 1), 2, np.int32))


def test_its_numerics_is_the_record_it_is_held_to():
    # amax = 2.25: 1 / (127 / 2.25) = 0.017716536f (Ascend's main path) but 2.25 * fp32(1/127) = 0.017716534f.
    x = np.array([[2.25, 1.125, -0.5, 0.0], [0.0] * 4], np.float16)
    y, scale = CHECK.same("dynamic_quant", x)
    main_path = w8a8.dynamic_quant(x, numerics=w8a8.ASCEND.replace(variants="fixed"))[1][0]
    assert scale[0] == np.float32(2.25) * (np.float32(1) / np.float32(127)) != main_path
    assert y.tolist() == w8a8.dynamic_quant(x)[0].tolist() and scale[1] == 0   # codes: 127 / amax either way
    smooth = np.array([2.0, 1.0, 1.0, 0.5], np.float16)
    CHECK.same("dynamic_quant", x, smooth_scales=smooth)
    with pytest.raises(Unsupported, match="dst_name: .int8. only; got .int4."):
        BACKEND.dynamic_quant(np.ones((2, 8), np.float16), dst_type="int4")


def test_a_conformance_run_of_its_ops_passes(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "w8a8cli.main", "conformance", "--backend", "third_party_backend:AmaxScaleBackend",
           "--op", "dynamic_quant", "--op", "int_matmul", "--profile", "dev", "--workers", "1", "--out", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    statuses = {json.loads(line)["status"] for line in (tmp_path / "results.jsonl").read_text().splitlines()}
    assert "pass" in statuses and "refused" in statuses and not statuses & {"fail", "error", "crashed"}
