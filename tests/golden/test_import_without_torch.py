"""The golden imports and runs with NumPy and ml_dtypes only (the golden imports no torch).

Each check runs in a fresh interpreter: this test process may already have torch loaded by other
tests. ``sys.modules["torch"] = None`` makes every ``import torch`` raise ImportError, as if torch
were not installed.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_import_w8a8_does_not_import_torch():
    r = run("""
        import sys
        import w8a8
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torch_npu", "hypothesis",
                                                                      "backends", "conformance"))
        print("LOADED", heavy)
        assert not heavy, heavy
    """)
    assert r.returncode == 0, r.stdout + r.stderr


def test_golden_runs_with_torch_blocked():
    r = run("""
        import sys
        sys.modules["torch"] = None          # any import torch now raises ImportError
        import numpy as np
        import w8a8
        from w8a8 import bfloat16

        x = np.array([[0.7261, 0.3726, 0.9126], [0.9023, 0.9990, 0.1279]], np.float16)
        y, s = w8a8.dynamic_quant(x)
        assert y.tolist() == [[101, 52, 127], [115, 127, 16]], y

        w = np.array([[1, 2, 3], [-4, 5, -6]], np.int8)              # [N, K]
        acc = w8a8.quant_matmul(y, w.T, np.ones(2, np.float32), output_dtype="int32")
        assert acc.tolist() == (y.astype(np.int64) @ w.T.astype(np.int64)).tolist()
        out = w8a8.quant_matmul(y, w.T, np.ones(2, np.float32), pertoken_scale=s, output_dtype="bfloat16")
        assert out.dtype == bfloat16 and out.shape == (2, 2)

        lin = w8a8.w8a8_dynamic_linear(x.astype(np.float32).astype(bfloat16), w, np.full((2, 1), 0.01, np.float32))
        assert lin.dtype == bfloat16 and lin.shape == (2, 2)
        assert "torch" not in [m.split(".")[0] for m in sys.modules if sys.modules[m] is not None]
        print("OK")
    """)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
