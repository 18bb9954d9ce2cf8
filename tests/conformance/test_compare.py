"""The comparison vocabulary: bitwise, ULP, tie-aware off-by-one, SQNR, mistrusted."""

import math

import numpy as np
import pytest

from conformance.compare import FAIL, MISTRUSTED, PASS, TOLERATED, Tolerance, compare, degenerate, sqnr_db, worst
from w8a8 import bfloat16


def bf(values):
    return np.asarray(values, np.float32).astype(bfloat16)


def test_identical_floats_pass_with_zero_ulp():
    x = bf([1.0, -2.5, 3.0])
    c = compare("y", "float", x, x.copy())
    assert c.verdict == PASS and c.mismatches == 0 and c.max_ulp == 0 and c.sqnr_db == math.inf


def test_one_bf16_ulp_fails_exact_and_is_tolerated_at_one_ulp():
    # 1.0 = 0x3F80; the next bf16 is 0x3F81 = 1.0078125: exactly one ULP apart.
    ref = bf([1.0, 2.0])
    act = np.array([0x3F81, 0x4000], np.uint16).view(bfloat16)
    exact = compare("y", "float", ref, act)
    assert exact.verdict == FAIL and exact.max_ulp == 1 and exact.mismatches == 1 and exact.first_mismatch == [0]
    assert compare("y", "float", ref, act, tolerance=Tolerance(ulp=1)).verdict == TOLERATED


def test_signed_zeros_are_the_same_value():
    c = compare("y", "float", np.array([0.0], np.float32), np.array([-0.0], np.float32))
    assert c.mismatches == 0


def test_nan_where_a_number_was_expected_fails_even_with_a_loose_tolerance():
    c = compare("y", "float", np.array([1.0, 2.0], np.float32), np.array([1.0, np.nan], np.float32),
                tolerance=Tolerance(ulp=10**6))
    assert c.verdict == FAIL and "NaN" in c.note


def test_tie_aware_off_by_one_accepts_only_codes_at_ties():
    ref = np.array([2, 2, 5], np.int8)
    act = np.array([3, 2, 6], np.int8)
    # element 0's pre-rounding value 2.5 is a tie (rounded to even 2, the backend gave 3: accepted);
    # element 2's pre-rounding value 5.2 is not a tie: off by one there is a real bug.
    pre = np.array([2.5, 2.0, 5.2])
    c = compare("q", "int", ref, act, tolerance=Tolerance(tie_off_by_one=True), pre_round=pre)
    assert c.verdict == FAIL and c.tie_accepted == 1
    ok = compare("q", "int", ref[:2], act[:2], tolerance=Tolerance(tie_off_by_one=True), pre_round=pre[:2])
    assert ok.verdict == TOLERATED and ok.tie_accepted == 1
    assert compare("q", "int", ref[:2], act[:2]).verdict == FAIL  # bitwise by default


def test_off_by_two_at_a_tie_is_not_accepted():
    c = compare("q", "int", np.array([2], np.int8), np.array([4], np.int8), tolerance=Tolerance(tie_off_by_one=True),
                pre_round=np.array([2.5]))
    assert c.verdict == FAIL and c.max_code_diff == 2


def test_all_zero_golden_output_is_mistrusted_not_passed():
    z = np.zeros(64, np.float32)
    assert compare("y", "float", z, z.copy()).verdict == MISTRUSTED
    mostly = np.zeros(100, np.int32)
    mostly[3] = 7
    assert compare("y", "int", mostly, mostly.copy()).verdict == MISTRUSTED
    # a constant non-zero output (an all -128 GEMM) is informative
    const = np.full(64, 16384 * 4, np.int32)
    assert compare("y", "int", const, const.copy()).verdict == PASS
    assert degenerate(np.array([0.0, 1.0], np.float32)) is None


def test_shape_or_dtype_mismatch_fails_with_a_note():
    c = compare("y", "float", np.zeros(3, np.float32), np.zeros(4, np.float32))
    assert c.verdict == FAIL and "(3,)" in c.note and "(4,)" in c.note
    c = compare("y", "float", np.zeros(3, np.float32), np.zeros(3, np.float16))
    assert c.verdict == FAIL and "float16" in c.note


def test_mask_excludes_unspecified_elements():
    ref = np.array([[1.0, 2.0], [9.0, 9.0]], np.float32)
    act = np.array([[1.0, 2.0], [0.0, -5.0]], np.float32)
    mask = np.array([[True], [False]])
    assert compare("y", "float", ref, act, mask=mask).verdict == PASS


def test_sqnr_in_db():
    ref = np.ones(100)
    noisy = ref + 0.01
    assert sqnr_db(ref, noisy) == pytest.approx(40.0)
    assert sqnr_db(np.zeros(3), np.ones(3)) == -math.inf


def test_worst_orders_verdicts():
    assert worst([PASS, MISTRUSTED]) == MISTRUSTED
    assert worst([PASS, TOLERATED, MISTRUSTED]) == TOLERATED
    assert worst([TOLERATED, FAIL]) == FAIL
    assert worst([]) == PASS


def test_mismatch_rate_budget():
    ref = np.arange(100, dtype=np.float32)
    act = ref.copy()
    act[0] = 50.0
    assert compare("y", "float", ref, act, tolerance=Tolerance(mismatch_rate=0.02)).verdict == TOLERATED
    assert compare("y", "float", ref, act, tolerance=Tolerance(mismatch_rate=0.0)).verdict == FAIL
