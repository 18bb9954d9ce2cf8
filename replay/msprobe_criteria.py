"""What msprobe's own criteria would say about a device output, with the golden's output as the bench
(msprobe ``docs/en/accuracy_compare/pytorch_accuracy_compare_instruct.md``, ``compare/compare.py``), so a
report can show where the golden is stricter (docs/replay.md).

* ``acc_check`` (``compare/compare.py``, ``precision_standard``): int outputs of the ops in
  ``quantization_api_list`` (``npu_dynamic_quant``, ...) pass when the max abs error is <= 1; other
  int / bool outputs need binary equality; float outputs take the first-pass rule: error if cosine
  <= 0.99; pass if max abs err < 0.001; fp16/bf16: error if >= 1 % of elements have RE >= 1 %, pass
  if < 0.1 % have RE >= 0.1 %, else warning; fp32: error if >= 0.1 % have RE >= 0.1 %, warning if
  >= 0.01 % have RE >= 0.01 %, else pass.
* ``md5`` mode: CRC equal (pass) or not (error).
* statistics mode ``-da``: "different" when any of Max/Min/Mean/Norm differs by more than 50 %
  relative.

msprobe's ``acc_check`` has CPU bench functions only for a few torch_npu ops (``npu_swiglu``,
``npu_moe_gating_top_k_softmax``, ...); for the quant ops it cannot judge at all. ``natively`` says
which, so the report can say "msprobe would not have judged this call".
"""

from __future__ import annotations

import numpy as np

from .msprobe_compare import as_f64, columns

QUANTIZATION_API_LIST = {"npu_dynamic_quant", "npu_rms_norm_dynamic_quant", "npu_quant_lightning_indexer"}
BENCH_FUNCTIONS = {"npu_swiglu", "npu_moe_gating_top_k_softmax", "npu_rms_norm", "npu_fusion_attention",
                   "npu_rotary_mul", "npu_confusion_transpose", "npu_scaled_masked_softmax", "npu_silu",
                   "npu_apply_adam_w", "npu_mish"}
"""torch_npu ops with a CPU bench function in msprobe (``bench_functions/fusion_operator_config.yaml``)."""

PASS, WARNING, ERROR = "pass", "warning", "error"
_RANK = {PASS: 0, WARNING: 1, ERROR: 2}


def judge_output(api: str, device: np.ndarray, bench: np.ndarray) -> tuple[str, str]:
    """msprobe's verdict on one output and the rule that gave it."""
    if device.shape != bench.shape or device.dtype != bench.dtype:
        return ERROR, "shape or dtype differs"
    if device.size == 0:
        return PASS, "empty"
    if device.dtype.kind in "iub":
        diff = np.abs(device.astype(np.int64) - bench.astype(np.int64))
        worst = int(diff.max())
        if api in QUANTIZATION_API_LIST:
            return (PASS if worst <= 1 else ERROR), f"quantization_api_list: max abs error {worst} (pass if <= 1)"
        n = int(np.count_nonzero(diff))
        return (PASS if n == 0 else ERROR), f"binary consistency: {n} mismatches"
    d, b = as_f64(device).ravel(), as_f64(bench).ravel()
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        finite = np.isfinite(d) & np.isfinite(b)
        if not np.array_equal(np.isnan(d), np.isnan(b)) or not np.array_equal(np.isinf(d), np.isinf(b)):
            return ERROR, "inf/nan where the bench has none (or the reverse)"
        d, b = d[finite], b[finite]
        if d.size == 0:
            return PASS, "no finite values"
        nd, nb = np.linalg.norm(d), np.linalg.norm(b)
        cos = 1.0 if nd == 0 and nb == 0 else float(np.dot(d, b) / (nd * nb)) if nd and nb else 0.0
        abs_err = np.abs(d - b)
        max_abs = float(abs_err.max())
        rel = abs_err / np.where(b == 0, np.inf, np.abs(b))
    if cos <= 0.99:
        return ERROR, f"cosine {cos:.6f} <= 0.99"
    if max_abs < 1e-3:
        return PASS, f"max abs err {max_abs:.3g} < 0.001"
    if device.dtype.itemsize <= 2:
        if np.mean(rel >= 1e-2) >= 1e-2:
            return ERROR, f"{np.mean(rel >= 1e-2):.2%} of elements with RE >= 1% (error if >= 1%)"
        if np.mean(rel >= 1e-3) < 1e-3:
            return PASS, f"{np.mean(rel >= 1e-3):.3%} of elements with RE >= 0.1% (pass if < 0.1%)"
        return WARNING, f"{np.mean(rel >= 1e-3):.3%} of elements with RE >= 0.1%"
    if np.mean(rel >= 1e-3) >= 1e-3:
        return ERROR, f"{np.mean(rel >= 1e-3):.3%} of elements with RE >= 0.1% (fp32: error if >= 0.1%)"
    if np.mean(rel >= 1e-4) >= 1e-4:
        return WARNING, f"{np.mean(rel >= 1e-4):.4%} of elements with RE >= 0.01%"
    return PASS, "fp32 error shares below the thresholds"


def judge_call(api: str, pairs: dict) -> dict:
    """``pairs``: output name -> (device array, golden array). msprobe's worst verdict and per output."""
    per = {}
    for name, (dev, ref) in pairs.items():
        per[name] = dict(zip(("verdict", "rule"), judge_output(api, dev, ref)))
        per[name]["columns"] = columns(dev, ref)  # msprobe compare's sheet columns (the CSV export)
    verdict = max((p["verdict"] for p in per.values()), key=_RANK.__getitem__, default=PASS)
    return {"verdict": verdict, "outputs": per, "natively": api in BENCH_FUNCTIONS,
            "criterion": "acc_check standards, the golden as bench"}


def judge_crc(pairs: dict) -> dict:
    """md5 mode: ``pairs`` output name -> (device md5, golden CRC)."""
    per = {n: {"verdict": PASS if a == b else ERROR, "rule": f"md5 {a} vs {b}"} for n, (a, b) in pairs.items()}
    verdict = max((p["verdict"] for p in per.values()), key=_RANK.__getitem__, default=PASS)
    return {"verdict": verdict, "outputs": per, "natively": False, "criterion": "md5 mode: CRC equal or not"}


def judge_stats(pairs: dict) -> dict:
    """statistics mode ``-da``: ``pairs`` output name -> ({Max, Min, Mean, Norm} device, golden)."""
    per = {}
    for name, (dev, ref) in pairs.items():
        worst = 0.0
        for key in ("Max", "Min", "Mean", "Norm"):
            a, b = dev.get(key), ref.get(key)
            if a is None or b is None or isinstance(a, bool):
                continue
            a, b = float(a), float(b)
            rel = 0.0 if a == b else (abs(a - b) / abs(b) if b else float("inf"))
            worst = max(worst, rel)
        per[name] = {"verdict": ERROR if worst > 0.5 else PASS, "rule": f"max statistic relative error {worst:.3g} "
                                                                         "(different if > 50 %)"}
    verdict = max((p["verdict"] for p in per.values()), key=_RANK.__getitem__, default=PASS)
    return {"verdict": verdict, "outputs": per, "natively": False, "criterion": "statistics mode -da (50 %)"}
