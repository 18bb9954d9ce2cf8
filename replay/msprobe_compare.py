"""msprobe's compare metrics and sheet columns for one output, the device's tensor against the golden's.

``msprobe compare`` writes one row per tensor; a user filters the sheet by its columns. These are the
columns of its "all" (real data) mode, in its order, as mindstudio-probe 26.2.0 names them
(``msprobe/core/common/const.py``: ``CompareConst.COMPARE_RESULT_HEADER`` = ``BASIC_INFO`` +
``ALL_COMPARE_INDEX`` + ``SUMMARY_INFO`` + ``EXTRACT_INDEX``), then ``Accuracy Reached or Not`` (the
column of earlier releases, computed by the same release's ``check_accuracy``), then the project's own.

The metrics follow msprobe's algorithms (``core/compare/algorithm/builtin_algorithm``), NPU = device,
Bench = golden, both as float64:

* inf/NaN at the same positions in both are set to 0 first; at different positions every metric is
  ``Nan`` and ``Err_message`` says so; an empty, scalar or differently shaped/typed pair is not compared.
* Cosine = dot(n, b) / (|n| |b|): 1.0 when both norms are <= float64 eps, ``Nan`` when one is;
  rounded to 6 decimals above 0.9999, else to 12 (``format_value``).
* EucDist = |n - b|_2. MaxAbsErr = max |n - b|.
* relative error = |(n - b) / b| where b != 0, and |(n + eps) - (b + eps)| / (b + eps) where b == 0 (eps
  of float64): MaxRelativeErr its max; One Thousandth / Five Thousandths Err Ratio the share of elements
  with relative error < 0.001 / < 0.005.
* NPU/Bench max, min, mean, l2norm of the tensors as dumped (before the inf/NaN zeroing).
* Accuracy Reached or Not: "No" if Cosine < 0.99 and MaxAbsErr > 0.001, or Cosine < 0.9, or
  MaxAbsErr > 1; else "Yes"; "Unmatched" when the shapes differ.
"""

from __future__ import annotations

import numpy as np

NPU_NAME, BENCH_NAME = "NPU Name", "Bench Name"
COSINE, MAX_ABS_ERR, MAX_RELATIVE_ERR = "Cosine", "MaxAbsErr", "MaxRelativeErr"
ACCURACY, ERROR_MESSAGE = "Accuracy Reached or Not", "Err_message"

BASIC_INFO = [NPU_NAME, BENCH_NAME, "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
              "NPU Requires_grad", "Bench Requires_grad"]
ALL_COMPARE_INDEX = [COSINE, "EucDist", MAX_ABS_ERR, MAX_RELATIVE_ERR, "One Thousandth Err Ratio",
                     "Five Thousandths Err Ratio"]
SUMMARY_INFO = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean",
                "Bench l2norm"]
EXTRACT_INDEX = ["Requires_grad Consistent", "Result", ERROR_MESSAGE]
COMPARE_RESULT_HEADER = BASIC_INFO + ALL_COMPARE_INDEX + SUMMARY_INFO + EXTRACT_INDEX
"""msprobe's "all"-mode sheet header, in its order."""

NAN = "Nan"
_EPS = float(np.finfo(np.float64).eps)


def as_f64(a: np.ndarray) -> np.ndarray:
    """float64 values of a dumped array (bfloat16 / fp8 from ml_dtypes go through float32)."""
    if a.dtype.kind == "V" or a.dtype.name in ("bfloat16",) or a.dtype.name.startswith("float8"):
        return a.astype(np.float32).astype(np.float64)
    return a.astype(np.float64)


def torch_dtype(dtype) -> str:
    """The dtype as msprobe's dump.json writes it (``torch.float16``, ``torch.bfloat16``, ``torch.int8``)."""
    return f"torch.{np.dtype(dtype).name}"


def _num(v: float) -> float:
    return float(f"{v:.12f}")


def _summary(a: np.ndarray) -> list:
    if a.size == 0:
        return [NAN] * 4
    with np.errstate(all="ignore"):
        return [float(a.max()), float(a.min()), float(a.mean()), float(np.linalg.norm(a.ravel()))]


def columns(device: np.ndarray, bench: np.ndarray) -> dict:
    """msprobe's dtype/shape, metric and summary columns (ALL_COMPARE_INDEX, SUMMARY_INFO, ``Accuracy Reached or Not``,
    ``Err_message``) for the device tensor against the golden's (see the module)."""
    device, bench = np.asarray(device), np.asarray(bench)
    n, b = as_f64(device), as_f64(bench)
    out = {"NPU Dtype": torch_dtype(device.dtype), "Bench Dtype": torch_dtype(bench.dtype),
           "NPU Tensor Shape": str(list(device.shape)), "Bench Tensor Shape": str(list(bench.shape))}
    out.update(zip(SUMMARY_INFO, _summary(n) + _summary(b)))
    problem = ("shape of NPU and bench tensor do not match" if n.shape != b.shape else
               "dtype of NPU and bench tensor do not match" if device.dtype != bench.dtype
               else "empty data, cannot compare" if n.size == 0 else
               "scalar data, cannot compare" if n.ndim == 0 else "")
    if problem:
        out.update({k: NAN for k in ALL_COMPARE_INDEX})
        out[ACCURACY] = "Unmatched" if n.shape != b.shape else "No"
        out[ERROR_MESSAGE] = problem
        return out
    n, b = n.ravel().copy(), b.ravel().copy()
    n_bad, b_bad = ~np.isfinite(n), ~np.isfinite(b)
    if n_bad.any() or b_bad.any():
        if not (np.array_equal(np.isnan(n), np.isnan(b)) and np.array_equal(np.isinf(n), np.isinf(b))):
            out.update({k: NAN for k in ALL_COMPARE_INDEX})
            out[ACCURACY] = "No"
            out[ERROR_MESSAGE] = "the positions of inf or nan in NPU and bench tensor do not match"
            return out
        n[n_bad] = 0.0
        b[b_bad] = 0.0
    na, nb = float(np.linalg.norm(n)), float(np.linalg.norm(b))
    message = ""
    if na <= _EPS and nb <= _EPS:
        cos: float | str = 1.0
    elif na <= _EPS or nb <= _EPS:
        cos = NAN
        message = f"cannot compare by Cosine: all the {'NPU' if na <= _EPS else 'bench'} data is zero"
    else:
        cos = _num(float(np.dot(n, b)) / (na * nb))
        cos = round(cos, 6) if cos > 0.9999 else cos
    diff = n - b
    zero = b == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(np.where(zero, (n + _EPS) - (b + _EPS), diff) / np.where(zero, b + _EPS, b))
    max_abs = _num(float(np.max(np.abs(diff))))
    out.update({COSINE: cos, "EucDist": float(np.linalg.norm(diff)), MAX_ABS_ERR: max_abs,
                MAX_RELATIVE_ERR: _num(float(np.max(rel))),
                "One Thousandth Err Ratio": _num(float(np.mean(rel < 0.001))),
                "Five Thousandths Err Ratio": _num(float(np.mean(rel < 0.005))),
                ACCURACY: accuracy(cos, max_abs), ERROR_MESSAGE: message})
    return out


def accuracy(cos, max_abs_err) -> str:
    """msprobe's ``check_accuracy``: "No" when Cosine < 0.99 and MaxAbsErr > 0.001, or Cosine < 0.9, or
    MaxAbsErr > 1; "Yes" otherwise (a cosine that could not be computed is "No")."""
    if not isinstance(cos, float) or not isinstance(max_abs_err, float):
        return "No"
    if cos < 0.99 and max_abs_err > 0.001:
        return "No"
    if cos < 0.9 or max_abs_err > 1:
        return "No"
    return "Yes"
