"""Can torch_npu run here? A precise answer without breaking the process (the torch_npu
wheel's ``torch_npu/_init/registry/registry_manager.py::_cann_package_check``; docs/backends.md).

:func:`probe` checks, in this order, and stops at the first failure:

1. torch is installed (``importlib.util.find_spec``; nothing is imported);
2. torch_npu is installed (``find_spec`` again — a CPU-only environment stops here and never imports
   torch_npu);
3. the CANN environment torch_npu checks (``ASCEND_HOME_PATH`` with its ``runtime/`` and
   ``compiler/`` subdirectories, ``ASCEND_OPP_PATH``), then ``import torch`` and ``import torch_npu``:
   an import failing on a CANN library (``libhccl.so``, ``libascendcl.so``...) or with the CANN
   environment incomplete is "CANN missing", reported with the problems found and the import's own
   error text;
4. any other import failure, reported as it is, with the ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` advice
   (once torch_npu is installed, torch's backend autoload makes even ``import torch`` fail with it);
5. an NPU device is visible (``torch.npu.is_available()`` and ``torch.npu.device_count() > 0``).

The imports go through ``importlib.import_module`` (looked up when the probe runs, so tests can
substitute it), and every check can be given fakes: ``environ``, ``find_spec``, ``import_module``,
``isdir``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

INSTALL = "pip install 'w8a8[npu]' on a machine with the CANN toolkit installed and sourced"
SOURCE_CANN = ("install the CANN toolkit and the Ascend 910C (ascend910_93) kernels package, then "
               "`source /usr/local/Ascend/ascend-toolkit/set_env.sh` (newer layout: "
               "`source /usr/local/Ascend/cann/set_env.sh`) before starting Python")
AUTOLOAD = ("set TORCH_DEVICE_BACKEND_AUTOLOAD=0 so that `import torch` does not load torch_npu, then run "
            "`python -c 'import torch_npu'` to see the full error")
CANN_LIBRARIES = ("libhccl.so", "libascendcl.so", "libacl_op_compiler.so", "libge_runner.so", "libgraph.so",
                  "libruntime.so", "libascend_hal.so")


@dataclass(frozen=True)
class Probe:
    """The result: ``ok``, the reason when not, and the imported modules when ok."""

    ok: bool
    reason: str
    torch: Any = None
    torch_npu: Any = None

    def as_tuple(self) -> tuple[bool, str]:
        return self.ok, self.reason


def cann_environment_problems(environ=None, isdir=None) -> list[str]:
    """What is wrong with the CANN environment variables torch_npu checks (empty when nothing is)."""
    environ = os.environ if environ is None else environ
    isdir = os.path.isdir if isdir is None else isdir
    problems = []
    home = environ.get("ASCEND_HOME_PATH")
    if not home:
        problems.append("ASCEND_HOME_PATH is not set")
    elif not isdir(home):
        problems.append(f"ASCEND_HOME_PATH={home} does not exist")
    else:
        for sub in ("runtime", "compiler"):
            if not isdir(os.path.join(home, sub)):
                problems.append(f"ASCEND_HOME_PATH={home} has no {sub}/ subdirectory (CANN {sub} package missing)")
    opp = environ.get("ASCEND_OPP_PATH")
    if not opp:
        problems.append("ASCEND_OPP_PATH is not set")
    elif not isdir(opp):
        problems.append(f"ASCEND_OPP_PATH={opp} does not exist")
    return problems


def error_text(exc: BaseException) -> str:
    """``Type: message`` of an exception and of its causes (torch's autoload wraps the ImportError)."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return " <- caused by ".join(parts)


def probe(*, environ=None, find_spec=None, import_module=None, isdir=None) -> Probe:
    """Whether torch_npu can run here, and why not (module docstring)."""
    environ = os.environ if environ is None else environ
    find_spec = importlib.util.find_spec if find_spec is None else find_spec
    import_module = importlib.import_module if import_module is None else import_module
    if find_spec("torch") is None:
        return Probe(False, f"torch is not installed (the torch-npu backend needs torch and torch_npu: {INSTALL})")
    if find_spec("torch_npu") is None:
        return Probe(False, f"torch_npu is not installed: {INSTALL}. Never install it into a CPU-only "
                            "environment: without CANN it makes `import torch` itself fail")
    problems = cann_environment_problems(environ, isdir)
    stage = "import torch"
    try:
        torch = import_module("torch")
        stage = "import torch_npu"
        torch_npu = import_module("torch_npu")
    except Exception as exc:  # noqa: BLE001 - torch_npu raises plain Exception for a bad CANN path
        text = error_text(exc)
        autoload = " (torch's backend autoload imported torch_npu)" if stage == "import torch" else ""
        if any(lib in text for lib in CANN_LIBRARIES) or problems:
            found = "; ".join(problems) if problems else "the CANN environment variables are set"
            return Probe(False, f"CANN is missing or not sourced: {found}; `{stage}` failed{autoload} with "
                                f"{text}. To fix: {SOURCE_CANN}")
        return Probe(False, f"`{stage}` failed{autoload} with {text}. To investigate: {AUTOLOAD}")
    try:
        npu = torch.npu
        if not npu.is_available():
            return Probe(False, "torch_npu imported but no NPU device is available (torch.npu.is_available() is "
                                "False): check the driver with `npu-smi info` and ASCEND_RT_VISIBLE_DEVICES")
        count = int(npu.device_count())
    except Exception as exc:  # noqa: BLE001
        return Probe(False, f"torch_npu imported but querying the NPU failed with {error_text(exc)}")
    if count <= 0:
        return Probe(False, "torch_npu imported but torch.npu.device_count() is 0: check the driver with "
                            "`npu-smi info` and ASCEND_RT_VISIBLE_DEVICES")
    return Probe(True, "", torch, torch_npu)
