"""Numbers that overflow are refused up front, naming the argument: group lists summed in Python integers
(an int64 sum wraps), parameter counts whose byte counts are infinite, an infinite collective timeout."""

from __future__ import annotations

import numpy as np
import pytest

import w8a8
from w8a8.moe._common import group_segments


@pytest.mark.parametrize("group_list_type, group_list", [
    (1, np.array([2**62] * 4, np.int64)),                     # sums to 2**64: 0 in int64
    (2, np.array([[0, 2**62], [1, 2**62], [0, 2**62], [1, 2**62]], np.int64)),
    (1, np.array([2**63 - 1, 1], np.int64)),                  # wraps to -2**63
])
def test_group_counts_whose_int64_sum_wraps_are_refused(group_list_type, group_list):
    with pytest.raises(ValueError, match=r"group_list.*row total <= the row count 8.*total \d{19,}"):
        group_segments("grouped_matmul", group_list, group_list_type, 8, 4 if group_list_type == 2 else len(group_list))


def test_grouped_matmul_refuses_a_wrapping_group_list():
    x = np.ones((8, 4), np.int8)
    w = np.ones((4, 4, 3), np.int8)
    with pytest.raises(ValueError, match="group_list"):
        w8a8.grouped_matmul(x, w, group_list=np.array([2**62] * 4, np.int64), group_list_type=1,
                            output_dtype="int32")


def test_counts_at_the_row_total_still_pass():
    segs = group_segments("grouped_matmul", np.array([3, 0, 5], np.int64), 1, 8, 3)
    assert segs == [(0, 0, 3), (1, 3, 3), (2, 3, 8)]


def test_estimate_refuses_counts_whose_bytes_overflow(capsys):
    import w8a8cli.main as cli

    rc = cli.main(["estimate", "--total", "1e308", "--active", "1e300", "--device", "h200"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "'total' must be at most 1e+18" in err[0], err


@pytest.mark.parametrize("raw", ["inf", "nan", "0", "1e9"])
def test_torch_dist_timeout_must_be_finite_and_bounded(monkeypatch, raw):
    from backends.torch_dist.pool import collective_timeout

    monkeypatch.setenv("W8A8_TORCH_DIST_TIMEOUT", raw)
    with pytest.raises(ValueError, match=r"W8A8_TORCH_DIST_TIMEOUT must be a number of seconds in \(0, 604800\]"):
        collective_timeout()


def test_torch_dist_timeout_default_and_finite_values(monkeypatch):
    from backends.torch_dist.pool import collective_timeout

    monkeypatch.delenv("W8A8_TORCH_DIST_TIMEOUT", raising=False)
    assert collective_timeout() == 300.0
    monkeypatch.setenv("W8A8_TORCH_DIST_TIMEOUT", "604800")
    assert collective_timeout() == 604800.0
