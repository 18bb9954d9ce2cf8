"""``compare.csv``: replay's per-tensor sheet in msprobe compare's columns, then the project's.

The column names and order are mindstudio-probe 26.2.0's (``msprobe/core/common/const.py``,
``CompareConst.COMPARE_RESULT_HEADER`` for the "all" mode), typed here from that file, not from our module;
the metric values of the fixed pair below are what that release's own algorithms
(``core/compare/algorithm/builtin_algorithm/alg_*.compare`` and ``check_accuracy``) returned for it."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from replay import compare_csv
from replay.msprobe_compare import columns
from w8a8cli.main import main

MSPROBE_26_2_0_HEADER = [
    "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
    "NPU Requires_grad", "Bench Requires_grad", "Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
    "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "NPU max", "NPU min", "NPU mean", "NPU l2norm",
    "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Requires_grad Consistent", "Result", "Err_message"]

BENCH = np.array([[0.0, 1.0, -2.0, 4.0], [0.5, -0.25, 8.0, 3.0]], np.float32)
NPU = np.array([[0.001, 1.002, -2.0, 4.5], [0.5, -0.25, 8.01, 3.0]], np.float32)
MSPROBE_SAYS = {"Cosine": 0.998965581422, "EucDist": 0.5001049934511632, "MaxAbsErr": 0.5,
                "MaxRelativeErr": 4503599841280.0,  # the bench's 0 gets float64 eps added: 0.001 / 2.2e-16
                "One Thousandth Err Ratio": 0.5, "Five Thousandths Err Ratio": 0.75,
                "Accuracy Reached or Not": "Yes"}


@pytest.fixture(scope="module")
def sheet(tmp_path_factory):
    from tests.replay.conftest import _S

    out = tmp_path_factory.mktemp("csv") / "r"
    assert main(["replay", str(_S / "constructed-w8a8-tensor-L1"), "--out", str(out), "--no-attribution"]) == 1
    raw = (out / "compare.csv").read_bytes()
    assert raw.startswith("\ufeff".encode())
    with open(out / "compare.csv", newline="", encoding="utf-8-sig") as f:
        return list(csv.reader(f))


def test_the_sheet_starts_with_msprobes_columns_in_its_order(sheet):
    header = sheet[0]
    assert header[:len(MSPROBE_26_2_0_HEADER)] == MSPROBE_26_2_0_HEADER
    assert header[len(MSPROBE_26_2_0_HEADER)] == "Accuracy Reached or Not"
    assert header[len(MSPROBE_26_2_0_HEADER) + 1:] == compare_csv.OWN_COLUMNS


def test_a_disagreeing_scale_is_a_row_with_msprobes_metrics_and_the_golden_verdict(sheet):
    rows = [dict(zip(sheet[0], r)) for r in sheet[1:]]
    scale = next(r for r in rows if r["NPU Name"] == "NPU.npu_dynamic_quant.0.forward.output.1")
    assert scale["w8a8 output"] == "scale" and scale["w8a8 output verdict"] == "disagree"
    assert scale["NPU Dtype"] == "torch.float32" and scale["NPU Tensor Shape"] == "[4]"
    assert float(scale["Cosine"]) == 1.0 and 0 < float(scale["MaxAbsErr"]) < 1e-6
    assert scale["Accuracy Reached or Not"] == "Yes"  # msprobe's criteria pass what the golden does not
    assert scale["w8a8 max distance"] == "1 ULP" and scale["w8a8 first mismatch"] == "[1]"
    assert all(len(r) == len(sheet[0]) for r in sheet[1:])


def test_the_metrics_are_msprobes_own_for_a_fixed_pair():
    got = columns(NPU, BENCH)
    for key, want in MSPROBE_SAYS.items():
        assert got[key] == (pytest.approx(want, rel=1e-12) if isinstance(want, float) else want), key


def test_inf_at_different_places_is_nan_with_a_message_and_a_formula_cell_is_quoted():
    npu, bench = BENCH.copy(), BENCH.copy()
    npu[0, 0] = np.inf
    got = columns(npu, bench)
    assert got["Cosine"] == "Nan" and "inf or nan" in got["Err_message"]
    text = compare_csv.text([{"name": "=HYPERLINK(1)", "verdict": "missing-data", "note": "-1 rows"}])
    assert "'=HYPERLINK(1)" in text and "'-1 rows" in text


def test_agrees_with_the_installed_msprobe_on_random_pairs():
    """Where mindstudio-probe is installed (not in CI): its algorithms against ours on drawn pairs."""
    pytest.importorskip("msprobe.core.compare.algorithm.builtin_algorithm.alg_cosine_similarity")
    import importlib

    from msprobe.core.compare.multiprocessing_compute import check_accuracy

    names = {"cosine_similarity": "Cosine", "euclidean_distance": "EucDist", "max_absolute_error": "MaxAbsErr",
             "max_relative_error": "MaxRelativeErr", "one_thousand_error": "One Thousandth Err Ratio",
             "five_thousand_error": "Five Thousandths Err Ratio"}
    rng = np.random.default_rng(7)
    for dtype in (np.float16, np.float32):
        b = rng.standard_normal((7, 17)).astype(dtype)
        n = b + (rng.standard_normal(b.shape) * 1e-2).astype(dtype)
        mine = columns(n, b)
        for mod, col in names.items():
            theirs, _ = importlib.import_module(
                f"msprobe.core.compare.algorithm.builtin_algorithm.alg_{mod}").compare(
                n.reshape(-1).astype(float), b.reshape(-1).astype(float))
            assert float(mine[col]) == pytest.approx(float(theirs), rel=1e-12), col
        assert mine["Accuracy Reached or Not"] == check_accuracy(mine["Cosine"], mine["MaxAbsErr"])
