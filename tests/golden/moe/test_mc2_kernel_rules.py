"""Three rules of the A3 MC2 kernels the expert-parallel golden follows (hicann/ops-transformer @ c29bc106,
Ascend/op-plugin @ 517f2e7d), each with hand-derived values:

1. ``moe_distribute_dispatch_v2`` without shared-expert ranks smooths expert e with scale row e: the tiling
   resets the default ``shared_expert_num = 1`` to 0 (``moe_distribute_dispatch_v2_tiling.cpp``
   CheckAndSetExpertInfo), checks ``scales.dim0 == sharedExpertNum + moeExpertNum`` (CheckTensorShape) and the
   kernel reads row ``dstExpertId + sharedExpertNum_`` (``moe_distribute_dispatch_v2.h`` QuantProcess).
2. ``shared_expert_num`` 2 - 4 without shared-expert ranks is refused (torch_npu
   ``MoeDistributeDispatchV2KernelOpApi.cpp``: only (1, 0), (0, 0) or a divisor of the shared ranks; the
   tiling's CheckSharedAttrs).
3. ``moe_distribute_combine_v2`` with ``x_active_mask`` writes only the active tokens
   (``moe_distribute_combine_v2.h`` LocalWindowCopy over ``activeMaskBsCnt_`` tokens): the other rows are
   unspecified, so a backend leaving garbage there passes.
"""

from __future__ import annotations

import numpy as np
import pytest

import w8a8
from backends.numpy_backend import NumpyBackend
from conformance import registry
from conformance.evaluate import run_case
from w8a8.dtypes import bfloat16

F32 = np.float32


def _issue_example(scales):
    """R 2, E 2, H 1024: rank 0's token [2, 1, 1, ...] to expert 1, rank 1's token [1, ...] to expert 0."""
    x = [np.concatenate([[2.0], np.ones(1023)]).astype(F32).astype(bfloat16)[None],
         np.ones((1, 1024), F32).astype(bfloat16)]
    ids = [np.array([[1]], np.int32), np.array([[0]], np.int32)]
    return w8a8.moe_distribute_dispatch_v2(x, ids, "ep", 2, [0, 1], 2, scales=scales, quant_mode=2)


def test_smooth_row_of_expert_e_is_row_e_without_shared_ranks():
    # scales[1] = [1, 0.5, 1, ...]: rank 1 receives [2, 0.5, 1, ...]; m = 2, inv = 63.5;
    # 2 * 63.5 = 127, 0.5 * 63.5 = 31.75 -> 32, 1 * 63.5 = 63.5 -> 64 (half to even). The old row e + 1
    # would have given 0.25 * 63.5 = 15.875 -> 16 from a third row, which the tiling refuses.
    sc = np.ones((2, 1024), F32)
    sc[1, 1] = 0.5
    expand_x, scale = _issue_example(sc)[:2]
    assert expand_x[1][0, :3].tolist() == [127, 32, 64]
    assert scale[1][0] == F32(1) / F32(63.5)
    # rank 0 receives rank 1's ones for expert 0, smoothed by row 0 (ones): codes 127 everywhere
    assert np.all(expand_x[0] == 127)


def test_smooth_scales_with_a_shared_row_are_refused_without_shared_ranks():
    with pytest.raises(ValueError, match=r"moe_distribute_dispatch_v2: argument 'scales' must be of shape "
                                         r"\[E \+ 0, H\] = \[2, 1024\] \(v2 without shared-expert ranks"):
        _issue_example(np.ones((3, 1024), F32))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_shared_expert_num_2_to_4_without_shared_ranks_is_refused(n):
    x = [np.ones((1, 1024), bfloat16)] * 2
    ids = [np.array([[1]], np.int32), np.array([[0]], np.int32)]
    for op in (w8a8.moe_distribute_dispatch_v2, lambda *a, **k: w8a8.moe_distribute_combine_v2(
            x, ids, [np.array([1, 0, 0], np.int32)] * 2, [np.array([1, 1], np.int32)] * 2,
            [np.ones((1, 1), F32)] * 2, *a[2:], **k)):
        with pytest.raises(ValueError, match=rf"argument 'shared_expert_num' must be 0 or 1 \(the default\) with "
                                             rf"shared_expert_rank_num = 0 .*; got {n}"):
            op(x, ids, "ep", 2, [0, 1], 2, shared_expert_num=n)
    for n_ok in (0, 1):                                           # torch_npu's (0, 0) and (1, 0)
        w8a8.moe_distribute_dispatch_v2(x, ids, "ep", 2, [0, 1], 2, shared_expert_num=n_ok)


class _GarbageInactiveRows(NumpyBackend):
    """The golden combine_v2, with NaN bits left in the rows of tokens that have no active copy (what an
    uninitialised device buffer may hold); ``rows="active"`` corrupts an active token instead."""

    name = "garbage-inactive-rows"
    rows = "inactive"

    def call(self, op, *args, **kwargs):
        out = super().call(op, *args, **kwargs)
        if op != "moe_distribute_combine_v2" or kwargs.get("x_active_mask") is None:
            return out
        ys = [np.array(y) for y in out]
        for y, m in zip(ys, kwargs["x_active_mask"]):
            written = np.asarray(m).reshape(m.shape[0], -1).any(axis=1)
            target = ~written if self.rows == "inactive" else written & (np.cumsum(written) == 1)
            y[target] = np.full(y.shape[1], np.nan, F32).astype(y.dtype)
        return ys


class _GarbageActiveRow(_GarbageInactiveRows):
    name = "garbage-active-row"
    rows = "active"


def test_combine_v2_backend_writing_garbage_in_inactive_rows_passes():
    key = "moe_distribute_combine_v2/inactive_tokens_unwritten"
    spec = registry.get("moe_distribute_combine_v2")
    args, kwargs = registry.named_case(key).build()
    assert spec.mask(args, kwargs)["y"][:, 0].tolist() == [True, True, False, True, True, False]
    assert run_case(spec, {"named": key}, _GarbageInactiveRows(), kind="named", name=key)["status"] == "pass"
    # the mask hides the unwritten rows only: garbage in a written row fails
    assert run_case(spec, {"named": key}, _GarbageActiveRow(), kind="named", name=key)["status"] == "fail"
    assert run_case(spec, {"named": key}, NumpyBackend(), kind="named", name=key)["status"] == "pass"


def test_combine_v2_without_a_mask_compares_every_row():
    spec = registry.get("moe_distribute_combine_v2")
    args, kwargs = registry.named_case("moe_distribute_combine_v2/two_ranks_identity_experts").build()
    assert spec.mask(args, kwargs) == {}
