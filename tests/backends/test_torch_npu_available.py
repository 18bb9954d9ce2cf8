"""``torch-npu`` availability: the precise reason, in the documented order, without importing torch_npu.

The fakes reproduce what the torch_npu wheel does (``_check_npu_import``, ``registry_manager.py``): without CANN,
``import torch_npu`` fails with
``ImportError: libhccl.so: cannot open shared object file: No such file or directory``; with the wheel installed,
torch's backend autoload makes ``import torch`` fail with a RuntimeError caused by it; torch_npu checks
ASCEND_HOME_PATH (with runtime/ and compiler/) and ASCEND_OPP_PATH.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import backends
from backends.base import Unsupported
from backends.torch_npu import TorchNpuBackend, environment
from backends.torch_npu.environment import cann_environment_problems, probe

LIBHCCL = "libhccl.so: cannot open shared object file: No such file or directory"


def spec_of(*installed):
    return lambda name: SimpleNamespace(name=name) if name in installed else None


def fake_torch(available=True, count=1):
    return SimpleNamespace(npu=SimpleNamespace(is_available=lambda: available, device_count=lambda: count))


def importer(modules: dict):
    """import_module stand-in: a module object, or an exception to raise."""
    def import_module(name):
        value = modules[name]
        if isinstance(value, BaseException):
            raise value
        return value
    return import_module


@pytest.fixture
def cann_home(tmp_path):
    """A complete fake CANN layout: ASCEND_HOME_PATH with runtime/ and compiler/, and ASCEND_OPP_PATH."""
    for sub in ("runtime", "compiler", "opp"):
        (tmp_path / sub).mkdir()
    return {"ASCEND_HOME_PATH": str(tmp_path), "ASCEND_OPP_PATH": str(tmp_path / "opp")}


def test_here_the_backend_says_torch_npu_is_missing_without_importing_it():
    # A fresh interpreter: importing backends and asking must import neither torch_npu nor torch.
    code = ("import sys, backends; ok, reason = backends.get('torch-npu').available(); "
            "print(ok); print(reason); print('torch_npu' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "False"
    assert out[1].startswith("torch_npu is not installed: pip install 'w8a8[npu]' on a machine with the CANN toolkit")
    assert out[2] == "False False"


def test_registry_instance_reports_the_same_reason():
    ok, reason = backends.get("torch-npu").available()
    assert not ok and "torch_npu is not installed" in reason


def test_torch_missing_comes_first():
    ok, reason = probe(find_spec=spec_of(), environ={}).as_tuple()
    assert not ok and reason.startswith("torch is not installed") and "w8a8[npu]" in reason


def test_torch_npu_missing_comes_second():
    called = []
    ok, reason = probe(find_spec=spec_of("torch"), import_module=lambda n: called.append(n), environ={}).as_tuple()
    assert not ok and reason.startswith("torch_npu is not installed: pip install 'w8a8[npu]'")
    assert called == []      # nothing imported


def test_cann_missing_reports_the_environment_and_the_import_error():
    modules = {"torch": fake_torch(), "torch_npu": ImportError(LIBHCCL)}
    ok, reason = probe(find_spec=spec_of("torch", "torch_npu"), import_module=importer(modules), environ={}).as_tuple()
    assert not ok
    assert reason.startswith("CANN is missing or not sourced: ASCEND_HOME_PATH is not set; ASCEND_OPP_PATH is not set;")
    assert f"`import torch_npu` failed with ImportError: {LIBHCCL}" in reason
    assert "set_env.sh" in reason


def test_cann_missing_through_the_patched_importlib(monkeypatch):
    # The probe looks importlib.import_module up when it runs, so patching it is enough.
    def fake_import(name, package=None):
        if name == "torch_npu":
            raise ImportError(LIBHCCL)
        return fake_torch()
    monkeypatch.setattr(importlib, "import_module", fake_import)
    ok, reason = probe(find_spec=spec_of("torch", "torch_npu"), environ={}).as_tuple()
    assert not ok and LIBHCCL in reason and "ASCEND_HOME_PATH is not set" in reason


def test_cann_missing_when_torch_autoload_fails(monkeypatch):
    # With the wheel installed, `import torch` itself fails: RuntimeError caused by the ImportError.
    try:
        try:
            raise ImportError(LIBHCCL)
        except ImportError as cause:
            raise RuntimeError("Failed to load the backend extension: torch_npu. You can disable extension "
                               "auto-loading with TORCH_DEVICE_BACKEND_AUTOLOAD=0.") from cause
    except RuntimeError as exc:
        error = exc
    ok, reason = probe(find_spec=spec_of("torch", "torch_npu"), import_module=importer({"torch": error}),
                       environ={}).as_tuple()
    assert not ok and reason.startswith("CANN is missing")
    assert "`import torch` failed (torch's backend autoload imported torch_npu)" in reason
    assert f"caused by ImportError: {LIBHCCL}" in reason


def test_cann_subdirectory_missing_is_named(tmp_path):
    (tmp_path / "runtime").mkdir()
    (tmp_path / "opp").mkdir()
    env = {"ASCEND_HOME_PATH": str(tmp_path), "ASCEND_OPP_PATH": str(tmp_path / "opp")}
    assert cann_environment_problems(env) == [
        f"ASCEND_HOME_PATH={tmp_path} has no compiler/ subdirectory (CANN compiler package missing)"]
    modules = {"torch": fake_torch(), "torch_npu": ImportError(LIBHCCL)}
    ok, reason = probe(find_spec=spec_of("torch", "torch_npu"), import_module=importer(modules), environ=env).as_tuple()
    assert not ok and "has no compiler/ subdirectory" in reason and LIBHCCL in reason


def test_environment_paths_that_do_not_exist(tmp_path):
    env = {"ASCEND_HOME_PATH": str(tmp_path / "nope"), "ASCEND_OPP_PATH": str(tmp_path / "nope2")}
    assert cann_environment_problems(env) == [f"ASCEND_HOME_PATH={tmp_path / 'nope'} does not exist",
                                              f"ASCEND_OPP_PATH={tmp_path / 'nope2'} does not exist"]


def test_libhccl_missing_with_a_complete_environment_is_still_cann(cann_home):
    # The variables are set, but the libraries are not on LD_LIBRARY_PATH (set_env.sh not sourced here).
    assert cann_environment_problems(cann_home) == []
    modules = {"torch": fake_torch(), "torch_npu": ImportError(LIBHCCL)}
    ok, reason = probe(find_spec=spec_of("torch", "torch_npu"), import_module=importer(modules),
                       environ=cann_home).as_tuple()
    assert not ok and "CANN is missing or not sourced: the CANN environment variables are set" in reason


def test_other_import_failure_is_reported_with_the_autoload_advice(cann_home):
    err = ImportError("/usr/lib/python3/torch_npu/_C.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")
    modules = {"torch": fake_torch(), "torch_npu": err}
    ok, reason = probe(find_spec=spec_of("torch", "torch_npu"), import_module=importer(modules),
                       environ=cann_home).as_tuple()
    assert not ok
    assert reason.startswith(f"`import torch_npu` failed with ImportError: {err}")
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in reason and "CANN" not in reason.split("To investigate")[0]


def test_a_plain_exception_from_torch_npus_cann_check(cann_home):
    # torch_npu raises a bare Exception for a bad ASCEND_HOME_PATH; it must not escape the probe.
    modules = {"torch": fake_torch(), "torch_npu": Exception("ASCEND_OPP_PATH environment variable is not set.")}
    ok, reason = probe(find_spec=spec_of("torch", "torch_npu"), import_module=importer(modules),
                       environ={"ASCEND_HOME_PATH": cann_home["ASCEND_HOME_PATH"]}).as_tuple()
    assert not ok and reason.startswith("CANN is missing or not sourced: ASCEND_OPP_PATH is not set")


@pytest.mark.parametrize("torch_mod, expected", [
    (fake_torch(available=False), "torch.npu.is_available() is False"),
    (fake_torch(count=0), "torch.npu.device_count() is 0"),
])
def test_no_device_comes_last(cann_home, torch_mod, expected):
    modules = {"torch": torch_mod, "torch_npu": SimpleNamespace()}
    ok, reason = probe(find_spec=spec_of("torch", "torch_npu"), import_module=importer(modules),
                       environ=cann_home).as_tuple()
    assert not ok and expected in reason and "npu-smi info" in reason


def test_available_when_everything_is_there(cann_home):
    npu_mod = SimpleNamespace()
    result = probe(find_spec=spec_of("torch", "torch_npu"),
                   import_module=importer({"torch": fake_torch(), "torch_npu": npu_mod}), environ=cann_home)
    assert result.as_tuple() == (True, "") and result.torch_npu is npu_mod


def test_the_backend_probes_once(monkeypatch):
    calls = []

    def counting_probe():
        calls.append(1)
        return environment.Probe(False, "no")
    monkeypatch.setattr(environment, "probe", counting_probe)
    backend = TorchNpuBackend()
    assert backend.available() == (False, "no") and backend.available() == (False, "no")
    assert len(calls) == 1


def test_an_unavailable_backend_refuses_with_the_reason_and_still_lowers(monkeypatch):
    monkeypatch.setattr(environment, "probe", lambda: environment.Probe(False, "CANN is missing: test"))
    backend = TorchNpuBackend()
    x1, x2 = np.zeros((2, 16), np.int8), np.zeros((16, 32), np.int8)
    with pytest.raises(TypeError, match="'scale'.*161002"):          # bad input: the golden's error, no device
        backend.lower("quant_matmul", x1, x2, np.ones(32, np.float16), output_dtype="bfloat16")
    with pytest.raises(Unsupported, match="torch-npu' is not available: CANN is missing: test"):
        backend.quant_matmul(x1, x2, np.ones(32, np.float32), output_dtype="bfloat16")
    assert backend.info()["reason"] == "CANN is missing: test"
