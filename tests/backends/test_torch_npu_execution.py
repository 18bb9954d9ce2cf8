"""``torch-npu`` execution against a recording stand-in for torch_npu (CPU torch, no device).

:class:`FakeTorchNpu` implements each torch_npu op by its documented semantics *with the golden*
(``w8a8.<op>`` on the arguments the device op receives), checks the argument rules the torch_npu
2.13.0 meta registrations / adapters enforce, records every call, and — where the device leaves
rows undefined — writes garbage there. So these tests check that the backend

* makes exactly the lowered calls, with the lowered arguments, in order (load steps, a barrier,
  then the timed calls and a barrier inside ``run``);
* transforms arguments without changing the result: the backend's output equals the golden run on
  the original arguments, bit for bit (packed scales, flattened x1 and per-token scales, transposed
  weights, compositions, the whole MoE chain);
* restores the golden's fill where the device leaves rows undefined;
* raises illegal combinations before any device call.

What this cannot check is the device itself: numerics, NZ storage, performance (see the README).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import w8a8  # noqa: E402
from backends.testing import ArrayFactory  # noqa: E402
from backends import torch_common as tc  # noqa: E402
from backends.torch_npu import TorchNpuBackend  # noqa: E402
from backends.torch_npu import execution  # noqa: E402
from backends.torch_npu.execution import Runtime  # noqa: E402
from backends.torch_npu.plan import DType, Group, T  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
ARRAYS = ArrayFactory(99)
RNG = ARRAYS.rng
i8, f32, bf16 = ARRAYS.i8, ARRAYS.f32, ARRAYS.bf16
GARBAGE = 77

_NAMES = {torch.int8: "int8", torch.qint8: "int8", torch.quint8: "uint8", torch.qint32: "int32",
          torch.quint4x2: "int4", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.int32: "int32",
          torch.float32: "float32"}


def host(t):
    return None if t is None else tc.from_torch(t)


def dev(a):
    return tc.to_torch(np.ascontiguousarray(a))


def name_of(dtype):
    assert isinstance(dtype, torch.dtype), f"dtype arguments must be torch dtypes, got {dtype!r}"
    return _NAMES[dtype]


def spoil(array, valid_rows: int):
    """What the device leaves past the valid rows: garbage, not the golden's zeros."""
    out = np.array(array, copy=True)
    out[valid_rows:] = GARBAGE
    return out


class EpWorld:
    """The HCCL group of the fake's MC2 ops: R rank threads meet at a barrier, each deposits its own
    arguments, one of them computes the golden op on all of them, and every rank keeps its own entry."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self.barrier = threading.Barrier(ranks, action=self._compute, timeout=600)
        self.slots: list = [None] * ranks
        self.op = self.result = None

    def name(self, rank: int) -> str:
        return f"hccl_comm_ep_rank{rank}"

    def _compute(self):
        self.result = self.op(list(self.slots))

    def collective(self, rank: int, value, op):
        """``op(values of every rank)``, computed once when the last rank arrives; returns its result."""
        self.slots[rank] = value
        self.op = op
        self.barrier.wait()
        result = self.result
        self.barrier.wait()          # nobody deposits the next call's value before all have read this one
        return result


def capacity_rows(bs: int, k: int, ranks: int, experts: int, global_bs: int) -> int:
    """The 2.13.0 meta's A = global_bs_real * min(E_loc, K) (no shared-expert ranks)."""
    return (global_bs or bs * ranks) * min(experts // ranks, k)


def device_rows(value: np.ndarray, rows: int) -> np.ndarray:
    """A golden per-rank output as the device returns it: ``rows`` long, garbage past the valid part."""
    out = np.full((rows,) + value.shape[1:], GARBAGE, value.dtype)
    out[: value.shape[0]] = value
    return out


class NzTensor(torch.Tensor):
    """What ``npu_format_cast(t, 29)`` returns on the device: the logical shape and values stay ND, the storage
    holds the FRACTAL_NZ bytes (the golden's :func:`w8a8.format_cast_nz`), which ``untyped_storage()`` gives."""

    nz = None

    def untyped_storage(self):
        return super().untyped_storage() if self.nz is None else self.nz.untyped_storage()


class FakeTorchNpu:
    """torch_npu on the CPU: records calls, checks the documented argument rules, computes with the golden.
    With a ``world`` it is one rank of an HCCL group: its MC2 EP ops check the rank's own arguments, meet
    the other ranks (:class:`EpWorld`) and return device-shaped outputs (capacity rows, garbage past the
    valid ones)."""

    def __init__(self, events: list, rank: int = 0, world: EpWorld | None = None):
        self.events = events
        self.calls = []
        self.rank, self.world = rank, world
        self.npu = SimpleNamespace(config=SimpleNamespace(allow_internal_format=False))

    # -- the MC2 expert-parallel ops (the torch_npu 2.13.0 schema, keywords after x, ids)
    def _rank_checks(self, group_ep, ep_world_size, ep_rank_id, tp_world_size, group_tp):
        assert self.world is not None, "an MC2 op outside an HCCL group"
        assert group_ep == self.world.name(self.rank), ("group_ep must be the rank's HCCL comm name", group_ep)
        assert ep_world_size == self.world.ranks and ep_rank_id == self.rank
        assert group_tp == (group_ep if tp_world_size else ""), "group_tp: '' or the same group with tp 1"

    def _dispatch(self, v2, x, expert_ids, group_ep, ep_world_size, ep_rank_id, moe_expert_num, *, scales=None,
                  x_active_mask=None, expert_scales=None, group_tp="", tp_world_size=0, tp_rank_id=0,
                  expert_shard_type=0, shared_expert_num=1, shared_expert_rank_num=0, quant_mode=0, global_bs=0,
                  expert_token_nums_type=1, comm_alg=None, **rest):
        self._rank_checks(group_ep, ep_world_size, ep_rank_id, tp_world_size, group_tp)
        assert not rest, rest
        mine = dict(x=host(x), expert_ids=host(expert_ids), mask=host(x_active_mask), es=host(expert_scales))
        kw = dict(scales=host(scales), group_tp=group_tp, tp_world_size=tp_world_size, tp_rank_id=tp_rank_id,
                  expert_shard_type=expert_shard_type, shared_expert_num=shared_expert_num,
                  shared_expert_rank_num=shared_expert_rank_num, quant_mode=quant_mode, global_bs=global_bs,
                  expert_token_nums_type=expert_token_nums_type)
        if v2:
            kw["comm_alg"] = comm_alg
        fn = w8a8.moe_distribute_dispatch_v2 if v2 else w8a8.moe_distribute_dispatch

        def golden(every):
            lists = {}
            if x_active_mask is not None:
                lists["x_active_mask"] = [e["mask"] for e in every]
            if expert_scales is not None:
                lists["expert_scales"] = [e["es"] for e in every]
            return fn([e["x"] for e in every], [e["expert_ids"] for e in every], group_ep, ep_world_size,
                      list(range(ep_world_size)), moe_expert_num, **kw, **lists)

        outs = self.world.collective(self.rank, mine, golden)
        ex, ds, idx, etn, recv, tpr, es = (o[self.rank] for o in outs)
        bs, k = expert_ids.shape
        a = capacity_rows(bs, k, ep_world_size, moe_expert_num, global_bs)
        device = (device_rows(ex, a), device_rows(ds, a),                      # the meta: [A, H], [A]
                  device_rows(idx, max(bs * k, a * 128)) if v2 else idx,       # v2 assist info, v1 expand_idx
                  etn, recv, device_rows(tpr, tp_world_size),
                  device_rows(es, a) if expert_scales is not None else es)
        name = "npu_moe_distribute_dispatch_v2" if v2 else "npu_moe_distribute_dispatch"
        kwargs = dict(kw, group_ep=group_ep, ep_world_size=ep_world_size, ep_rank_id=ep_rank_id,
                      moe_expert_num=moe_expert_num, scales=scales, x_active_mask=x_active_mask,
                      expert_scales=expert_scales)
        return self._done(name, (x, expert_ids), kwargs, tuple(dev(o) for o in device))

    def npu_moe_distribute_dispatch(self, x, expert_ids, **kw):
        return self._dispatch(False, x, expert_ids, **kw)

    def npu_moe_distribute_dispatch_v2(self, x, expert_ids, **kw):
        return self._dispatch(True, x, expert_ids, **kw)

    def _combine(self, v2, expand_x, expert_ids, index, ep_send_counts, expert_scales, *, group_ep, ep_world_size,
                 ep_rank_id, moe_expert_num, x_active_mask=None, shared_expert_x=None, expand_scales=None, group_tp="",
                 tp_world_size=0,
                 tp_rank_id=0, expert_shard_type=0, shared_expert_num=1, shared_expert_rank_num=0, global_bs=0,
                 comm_quant_mode=0, comm_alg=None, **rest):
        self._rank_checks(group_ep, ep_world_size, ep_rank_id, tp_world_size, group_tp)
        assert not rest, rest
        bs, k = expert_ids.shape
        a = capacity_rows(bs, k, ep_world_size, moe_expert_num, global_bs)
        assert expand_x.shape[0] == a, ("expand_x must have the dispatch's capacity rows", expand_x.shape, a)
        if v2:
            assert index.shape == (max(bs * k, a * 128),), "assist_info_for_combine: the dispatch's shape"
        mine = dict(x=host(expand_x), ids=host(expert_ids), index=host(index), cnt=host(ep_send_counts),
                    w=host(expert_scales), mask=host(x_active_mask), shared=host(shared_expert_x),
                    es=host(expand_scales))
        kw = dict(group_tp=group_tp, tp_world_size=tp_world_size, tp_rank_id=tp_rank_id,
                  expert_shard_type=expert_shard_type, shared_expert_num=shared_expert_num,
                  shared_expert_rank_num=shared_expert_rank_num, global_bs=global_bs, comm_quant_mode=comm_quant_mode)
        if v2:
            kw["comm_alg"] = comm_alg
        fn = w8a8.moe_distribute_combine_v2 if v2 else w8a8.moe_distribute_combine

        def golden(every):
            lists = {}
            for name, key, given in (("x_active_mask", "mask", x_active_mask), ("shared_expert_x", "shared",
                                                                                 shared_expert_x),
                                     ("expand_scales", "es", expand_scales)):
                if given is not None:
                    lists[name] = [e[key] for e in every]
            return fn(*([e[n] for e in every] for n in ("x", "ids", "index", "cnt", "w")), group_ep, ep_world_size,
                      list(range(ep_world_size)), moe_expert_num, **kw, **lists)

        y = self.world.collective(self.rank, mine, golden)[self.rank]
        name = "npu_moe_distribute_combine_v2" if v2 else "npu_moe_distribute_combine"
        kwargs = dict(kw, group_ep=group_ep, ep_world_size=ep_world_size, ep_rank_id=ep_rank_id,
                      moe_expert_num=moe_expert_num, x_active_mask=x_active_mask, shared_expert_x=shared_expert_x,
                      expand_scales=expand_scales)
        return self._done(name, (expand_x, expert_ids, index, ep_send_counts, expert_scales), kwargs, dev(y))

    def npu_moe_distribute_combine(self, expand_x, expert_ids, expand_idx, ep_send_counts, expert_scales, **kw):
        return self._combine(False, expand_x, expert_ids, expand_idx, ep_send_counts, expert_scales, **kw)

    def npu_moe_distribute_combine_v2(self, expand_x, expert_ids, assist_info_for_combine, ep_send_counts,
                                      expert_scales, **kw):
        return self._combine(True, expand_x, expert_ids, assist_info_for_combine, ep_send_counts, expert_scales, **kw)

    def _done(self, name, args, kwargs, result):
        self.calls.append((name, args, kwargs, result))
        self.events.append(name)
        return result

    def npu_format_cast(self, t, acl_format):
        assert acl_format == 29 and self.npu.config.allow_internal_format, "NZ needs allow_internal_format"
        out = t.clone().as_subclass(NzTensor)   # the logical (ND) values, and the NZ bytes as its storage
        out.nz = dev(w8a8.format_cast_nz(host(t)).reshape(-1))
        return self._done("npu_format_cast", (t, acl_format), {}, out)

    def npu_trans_quant_param(self, scale, offset=None, round_mode=0):
        assert scale.dim() == 1 or (scale.dim() == 2 and scale.shape[0] == 1), "meta: (t,) or (1, n) only"
        out = dev(w8a8.trans_quant_param(host(scale), host(offset), round_mode=round_mode))
        return self._done("npu_trans_quant_param", (scale, offset), {"round_mode": round_mode}, out)

    def npu_quant_matmul(self, x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
        out = name_of(output_dtype)
        assert scale.dim() == 1, "meta: the scale dim num must be 1"
        if pertoken_scale is not None:
            assert pertoken_scale.dim() == 1 and x1.dim() == 2, "1-D pertoken of a 2-D x1 (vllm-ascend #3257)"
        assert not (scale.dtype == torch.float32 and pertoken_scale is None and out in ("float16", "int8")), \
            "an fp32 scale for fp16/int8 output must come packed (graph mode rejects it)"
        y = w8a8.quant_matmul(host(x1), host(x2), host(scale), offset=host(offset),
                              pertoken_scale=host(pertoken_scale), bias=host(bias), output_dtype=out)
        kw = dict(offset=offset, pertoken_scale=pertoken_scale, bias=bias, output_dtype=output_dtype)
        return self._done("npu_quant_matmul", (x1, x2, scale), kw, dev(y))

    def npu_dynamic_quant(self, x, *, smooth_scales=None, group_index=None, dst_type=None):
        y, s = w8a8.dynamic_quant(host(x), smooth_scales=host(smooth_scales), group_index=host(group_index),
                                  dst_type=name_of(dst_type))
        kw = dict(smooth_scales=smooth_scales, group_index=group_index, dst_type=dst_type)
        return self._done("npu_dynamic_quant", (x,), kw, (dev(y), dev(s)))

    def npu_dynamic_quant_asymmetric(self, x, *, smooth_scales=None, group_index=None, dst_type=None):
        outs = w8a8.dynamic_quant_asymmetric(host(x), smooth_scales=host(smooth_scales), group_index=host(group_index),
                                             dst_type=name_of(dst_type))
        kw = dict(smooth_scales=smooth_scales, group_index=group_index, dst_type=dst_type)
        return self._done("npu_dynamic_quant_asymmetric", (x,), kw, tuple(dev(o) for o in outs))

    def npu_quantize(self, x, scales, zero_points, dtype, axis=1, div_mode=True):
        y = w8a8.quantize(host(x), host(scales), host(zero_points), dtype=name_of(dtype), axis=axis, div_mode=div_mode)
        return self._done("npu_quantize", (x, scales, zero_points, dtype, axis, div_mode), {}, dev(y))

    def npu_anti_quant(self, x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
        assert offset is None or offset.shape == scale.shape, "offset must have the scale's shape"
        y = w8a8.anti_quant(host(x), host(scale), offset=host(offset), dst_dtype=name_of(dst_dtype),
                            src_dtype=name_of(src_dtype))
        return self._done("npu_anti_quant", (x, scale), dict(offset=offset, dst_dtype=dst_dtype,
                                                             src_dtype=src_dtype), dev(y))

    def npu_grouped_matmul(self, x, weight, *, bias=None, scale=None, per_token_scale=None, group_list=None,
                           split_item=0, group_type=None, group_list_type=0, act_type=0, output_dtype=None):
        assert group_type is not None, "Requires manual passing group_type, current is None"
        assert isinstance(x, list) and isinstance(weight, list) and split_item in (2, 3)
        one = lambda v: None if v is None else host(v[0])  # noqa: E731
        y = w8a8.grouped_matmul(host(x[0]), host(weight[0]), bias=one(bias), scale=one(scale),
                                per_token_scale=one(per_token_scale), group_list=host(group_list),
                                group_list_type=group_list_type, act_type=act_type, output_dtype=name_of(output_dtype),
                                split_item=split_item, group_type=group_type)
        valid = int(w8a8.valid_rows(host(group_list), y.shape[0], group_list_type=group_list_type).sum())
        kw = dict(bias=bias, scale=scale, per_token_scale=per_token_scale, group_list=group_list, split_item=split_item,
                  group_type=group_type, group_list_type=group_list_type, act_type=act_type, output_dtype=output_dtype)
        return self._done("npu_grouped_matmul", (x, weight), kw, [dev(spoil(y, valid))])

    def npu_moe_init_routing_v2(self, x, expert_idx, *, scale=None, offset=None, active_num=-1, expert_capacity=-1,
                                expert_num=-1, drop_pad_mode=0, expert_tokens_num_type=0,
                                expert_tokens_num_flag=False, quant_mode=-1, active_expert_range=(),
                                row_idx_type=0):
        assert len(active_expert_range) == 2, "an empty range is the adapter's static-vector pitfall"
        assert expert_tokens_num_flag is True and expert_tokens_num_type in (1, 2) and quant_mode in (-1, 1)
        args = dict(scale=host(scale), offset=host(offset), active_num=active_num, expert_capacity=expert_capacity,
                    expert_num=expert_num, drop_pad_mode=drop_pad_mode, expert_tokens_num_type=expert_tokens_num_type,
                    expert_tokens_num_flag=True, quant_mode=quant_mode, active_expert_range=list(active_expert_range),
                    row_idx_type=row_idx_type)
        outs = w8a8.moe_init_routing_v2(host(x), host(expert_idx), **args)
        masks = w8a8.moe_init_routing_v2_valid(host(x), host(expert_idx), **args)
        spoiled = []
        for value, mask in zip(outs, masks, strict=True):
            value = np.array(value, copy=True)
            value[~mask] = GARBAGE
            spoiled.append(dev(value))
        return self._done("npu_moe_init_routing_v2", (x, expert_idx), args, tuple(spoiled))

    def npu_dequant_swiglu_quant(self, x, *, weight_scale=None, activation_scale=None, bias=None, quant_scale=None,
                                 quant_offset=None, group_index=None, activate_left=False, quant_mode=0):
        y, s = w8a8.dequant_swiglu_quant(host(x), weight_scale=host(weight_scale),
                                         activation_scale=host(activation_scale), bias=host(bias),
                                         quant_scale=host(quant_scale), quant_offset=host(quant_offset),
                                         group_index=host(group_index), activate_left=activate_left,
                                         quant_mode=quant_mode)
        valid = y.shape[0] if group_index is None else int(host(group_index).sum())
        kw = dict(activate_left=activate_left, quant_mode=quant_mode)
        return self._done("npu_dequant_swiglu_quant", (x,), kw, (dev(spoil(y, valid)), dev(spoil(s, valid))))

    def npu_moe_finalize_routing(self, rows, skip1, skip2, bias, scales, idx, experts, drop_pad_mode=0, k=1):
        y = w8a8.moe_finalize_routing(host(rows), host(skip1), host(skip2), host(bias), host(scales), host(idx),
                                      host(experts), drop_pad_mode=drop_pad_mode, k=k)
        return self._done("npu_moe_finalize_routing", (rows, skip1, skip2, bias, scales, idx, experts),
                          dict(drop_pad_mode=drop_pad_mode, k=k), dev(y))

    def npu_moe_gating_top_k_softmax(self, x, finished=None, k=1):
        outs = w8a8.moe_gating_top_k_softmax(host(x), host(finished), k)
        return self._done("npu_moe_gating_top_k_softmax", (x,), dict(k=k), tuple(dev(o) for o in outs))

    def npu_moe_gating_top_k(self, x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
                             group_select_mode=0, renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0,
                             eps=1e-20):
        kw = dict(bias=bias, input_ids=input_ids, tid2eid=tid2eid, k_group=k_group, group_count=group_count,
                  group_select_mode=group_select_mode, renorm=renorm, norm_type=norm_type, out_flag=out_flag,
                  routed_scaling_factor=routed_scaling_factor, eps=eps)
        outs = w8a8.moe_gating_top_k(host(x), k, **{n: host(v) if isinstance(v, torch.Tensor) else v
                                                   for n, v in kw.items()})
        return self._done("npu_moe_gating_top_k", (x, k), kw, tuple(dev(o) for o in outs))

    def npu_moe_init_routing(self, x, row_idx, expert_idx, active_num):
        outs = w8a8.moe_init_routing(host(x), host(row_idx), host(expert_idx), active_num)
        return self._done("npu_moe_init_routing", (x, row_idx, expert_idx, active_num), {},
                          tuple(dev(o) for o in outs))

    def npu_swiglu(self, x, dim=-1):
        return self._done("npu_swiglu", (x,), dict(dim=dim), dev(w8a8.swiglu(host(x), dim)))


@pytest.fixture
def env():
    events = []
    fake = FakeTorchNpu(events)
    rt = Runtime(torch=torch, torch_npu=fake, device="cpu", synchronize=lambda: events.append("synchronize"))
    return SimpleNamespace(events=events, fake=fake, backend=TorchNpuBackend(runtime=rt), rt=rt)




def same(a, b):
    """Bitwise equality of two arrays (bf16 through an integer view)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    if a.dtype == BF16:
        a, b = a.view(np.int16), b.view(np.int16)
    np.testing.assert_array_equal(a, b)


def assert_calls_match(plan, recorded, groups=None):
    """The fake saw exactly the plan's torch_npu calls (load, then run), in order, with the plan's arguments:
    inputs by value, earlier torch_npu outputs by identity, dtypes as torch dtypes, HCCL groups as the
    runtime's communicator names (``groups``), scalars as they are."""
    expected = [c for c in plan.load + plan.calls if c.fn.startswith("torch_npu.")]
    assert [r[0] for r in recorded] == [c.fn.split(".", 1)[1] for c in expected]
    produced = {}

    def check(want, got):
        if isinstance(want, T):
            if want.name in plan.inputs:
                same(host(got), plan.inputs[want.name].array)
            elif want.name in produced:
                assert got is produced[want.name], want.name
            else:
                assert isinstance(got, torch.Tensor), want.name   # made by a torch / Tensor step
        elif isinstance(want, DType):
            assert got is getattr(torch, want.name)
        elif isinstance(want, Group):
            assert got == groups[want.name], (want, got)
        elif isinstance(want, (list, tuple)):
            assert len(want) == len(got)
            for w, g in zip(want, got, strict=True):
                check(w, g)
        else:
            assert got == want, (want, got)

    for call, (_, args, kwargs, result) in zip(expected, recorded, strict=True):
        check(call.args, args)
        for key, value in call.kwargs.items():
            check(value, kwargs[key])
        if call.pick is not None:
            result = result[call.pick]
        if len(call.out) == 1:
            produced[call.out[0]] = result
        else:
            produced.update(zip(call.out, result, strict=True))


# -- the call sequence ----------------------------------------------------------------------------------
def test_load_then_barrier_then_timed_calls_then_barrier(env):
    x1, x2, s = i8(4, 64), i8(64, 64), f32(64)
    prep = env.backend.prepare("quant_matmul", x1, x2, s, output_dtype="float16")
    assert env.events == ["npu_format_cast", "npu_trans_quant_param", "synchronize"]   # load, outside the timing
    assert env.fake.npu.config.allow_internal_format is True
    env.events.clear()
    out = prep.run()
    assert env.events == ["npu_quant_matmul", "synchronize"]                            # synchronize inside run
    env.events.clear()
    y = prep.finish(out)
    assert env.events == []
    same(y, w8a8.quant_matmul(x1, x2, s, output_dtype="float16"))
    assert_calls_match(prep.notes["plan"], env.fake.calls)


def test_run_is_repeatable(env):
    # Benchmarks call run() many times on one prepared call: the loaded weights are reused.
    x1, x2, s = i8(3, 32), i8(32, 32), f32(32)
    prep = env.backend.prepare("quant_matmul", x1, x2, s, output_dtype="bfloat16")
    first, second = prep.finish(prep.run()), prep.finish(prep.run())
    same(first, second)
    assert [c[0] for c in env.fake.calls] == ["npu_format_cast", "npu_quant_matmul", "npu_quant_matmul"]


def test_no_nz_leaves_the_internal_format_option_alone(env):
    env.backend.quant_matmul(i8(3, 32), i8(32, 40), f32(40), output_dtype="bfloat16")
    assert env.fake.npu.config.allow_internal_format is False


def test_illegal_combinations_raise_before_any_device_call(env):
    x1, x2 = i8(4, 64), i8(64, 32)
    with pytest.raises(TypeError, match="'scale'"):
        env.backend.quant_matmul(x1, x2, f32(32).astype(np.float16), output_dtype="float16")
    with pytest.raises(TypeError, match="'output_dtype'"):
        env.backend.grouped_matmul(x1, i8(2, 64, 32), scale=f32(2, 32), group_list=np.array([2, 2], np.int64),
                                   group_list_type=1, output_dtype="bfloat16")
    with pytest.raises(ValueError, match="'swiglu_limit'"):
        env.backend.dequant_swiglu_quant(bf16(4, 128), activate_left=True, quant_mode=1, swiglu_limit=10.0)
    assert env.events == [] and env.fake.calls == []


def test_other_numerics_are_refused(env):
    with pytest.raises(Exception, match="implements numerics"):
        env.backend.quant_matmul(i8(2, 16), i8(16, 32), f32(32), output_dtype="bfloat16",
                                 numerics=w8a8.ASCEND.replace(round_mode="half_away"))


def test_to_device_keeps_bf16_bits(env):
    a = bf16(3, 5)
    t = env.backend.to_device(a)
    assert t.dtype == torch.bfloat16
    same(env.backend.from_device(t), a)


# -- dense ops: the backend's result is the golden's -------------------------------------------------------------
@pytest.mark.parametrize("case", ["fp16_packed", "int8_offset", "bf16_pertoken_3d", "fp16_pertoken", "int32",
                                  "unaligned_bias"])
def test_quant_matmul_end_to_end(env, case):
    x1, x2 = i8(5, 64), i8(64, 64)
    kw = dict(output_dtype="float16")
    scale = f32(64)
    if case == "int8_offset":
        kw = dict(output_dtype="int8", offset=np.array([2.5], np.float32))
        scale = f32(64, lo=0.0001, hi=0.0005)
    elif case == "bf16_pertoken_3d":
        x1, kw = i8(2, 3, 64), dict(output_dtype="bfloat16", pertoken_scale=f32(3))
    elif case == "fp16_pertoken":
        kw = dict(output_dtype="float16", pertoken_scale=f32(5))
    elif case == "int32":
        kw = dict(output_dtype="int32", bias=RNG.integers(-9, 9, 64).astype(np.int32))
    elif case == "unaligned_bias":
        x2, scale = i8(64, 17), f32(17)
        kw = dict(output_dtype="bfloat16", bias=f32(17))
    y = env.backend.quant_matmul(x1, x2, scale, **kw)
    same(y, w8a8.quant_matmul(x1, x2, scale, **kw))
    assert_calls_match(env.backend.lower("quant_matmul", x1, x2, scale, **kw), env.fake.calls)


def test_dynamic_linear_end_to_end(env):
    x, w, ws, b = bf16(2, 3, 64), i8(96, 64), f32(96, 1), f32(96)
    y = env.backend.w8a8_dynamic_linear(x, w, ws, bias=b)
    same(y, w8a8.w8a8_dynamic_linear(x, w, ws, bias=b))
    assert [c[0] for c in env.fake.calls] == ["npu_format_cast", "npu_dynamic_quant", "npu_quant_matmul"]
    assert_calls_match(env.backend.lower("w8a8_dynamic_linear", x, w, ws, bias=b), env.fake.calls)


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_static_linear_end_to_end(env, dtype):
    x = RNG.standard_normal((7, 64)).astype(np.float32).astype(dtype)
    w = i8(32, 64)
    kw = dict(input_scale=np.array([0.02], np.float32), input_offset=np.array([-3.0], np.float32),
              deq_scale=f32(32, lo=1e-4, hi=1e-3), quant_bias=RNG.integers(-500, 500, 32).astype(np.int32))
    same(env.backend.w8a8_static_linear(x, w, **kw), w8a8.w8a8_static_linear(x, w, **kw))
    assert_calls_match(env.backend.lower("w8a8_static_linear", x, w, **kw), env.fake.calls)


def test_small_ops_end_to_end(env):
    x = bf16(3, 5, 16)
    y, s = env.backend.dynamic_quant(x)
    wy, ws = w8a8.dynamic_quant(x)
    same(y, wy)
    same(s, ws)
    xs, sc = bf16(4, 16), bf16(16)
    same(env.backend.quantize(xs, sc, None, dtype="int8", axis=-1, div_mode=False),
         w8a8.quantize(xs, sc, None, dtype="int8", axis=-1, div_mode=False))
    a, b = i8(5, 33), i8(33, 7)
    same(env.backend.int_matmul(a, b), w8a8.int_matmul(a, b))
    q, qs, zp = i8(4, 8), f32(8, lo=0.1, hi=2.0), np.array([3.0], np.float32)
    same(env.backend.dequantize(q, qs, zp, axis=-1, output_dtype="bfloat16"),
         w8a8.dequantize(q, qs, zp, axis=-1, output_dtype="bfloat16"))
    scale = f32(3, 5)
    same(env.backend.trans_quant_param(scale), w8a8.trans_quant_param(scale))


def test_asymmetric_quant_and_gating_end_to_end(env):
    x = bf16(4, 16)
    for g, w_ in zip(env.backend.dynamic_quant_asymmetric(x), w8a8.dynamic_quant_asymmetric(x), strict=True):
        same(g, w_)
    logits, bias = f32(5, 16, lo=-2, hi=2), f32(16)
    kw = dict(bias=bias, k_group=2, group_count=4, norm_type=1, out_flag=True, routed_scaling_factor=2.5)
    for g, w_ in zip(env.backend.moe_gating_top_k(logits, 3, **kw), w8a8.moe_gating_top_k(logits, 3, **kw),
                     strict=True):
        same(g, w_)
    n, k, x = 3, 2, bf16(3, 8)
    row_idx = np.arange(n * k, dtype=np.int32).reshape(k, n).T.copy()      # gating's column-major j*N + t
    ids = RNG.integers(0, 4, (n, k)).astype(np.int32)
    for g, w_ in zip(env.backend.moe_init_routing(x, row_idx, ids, 2), w8a8.moe_init_routing(x, row_idx, ids, 2),
                     strict=True):
        same(g, w_)


def test_nz_storage_readback_reads_the_raw_bytes(env):
    # execution.nz_storage views the storage bytes of an NZ tensor (the device keeps the logical shape ND):
    # here a CPU tensor holding the golden NZ bytes stands in for it.
    w = bf16(17, 40)
    storage = w8a8.format_cast_nz(w)
    got = execution.nz_storage(env.rt, dev(storage.reshape(-1)), storage.shape)
    same(got, storage)


# -- MoE -----------------------------------------------------------------------------------------------------------
def test_grouped_matmul_end_to_end_with_undefined_rows(env):
    x, w, s, pt = i8(10, 64), i8(3, 64, 32), f32(3, 32).astype(BF16), f32(10)
    gl = np.array([4, 0, 5], np.int64)            # 9 of 10 rows grouped: row 9 is garbage on the device
    kw = dict(scale=s, per_token_scale=pt, group_list=gl, group_list_type=1, output_dtype="bfloat16")
    y = env.backend.grouped_matmul(x, w, **kw)
    same(y, w8a8.grouped_matmul(x, w, **kw))      # the golden's zero row is restored on the host
    raw = tc.from_torch(env.fake.calls[-1][3][0])
    assert (raw[9].astype(np.float32) == GARBAGE).all()   # the fake did spoil it


def test_routing_v2_end_to_end_with_partial_range(env):
    x, ids = bf16(4, 16), np.array([[0, 1], [2, 3], [1, 1], [3, 0]], np.int32)
    kw = dict(expert_num=4, expert_tokens_num_type=0, expert_tokens_num_flag=True, quant_mode=1,
              active_expert_range=[1, 3], row_idx_type=1)
    got = env.backend.moe_init_routing_v2(x, ids, **kw)
    want = w8a8.moe_init_routing_v2(x, ids, **kw)
    for g, w_ in zip(got, want, strict=True):
        same(g, w_)


def test_dequant_swiglu_quant_end_to_end(env):
    x = RNG.integers(-3000, 3000, (6, 128)).astype(np.int32)
    kw = dict(weight_scale=f32(2, 128), activation_scale=f32(6), group_index=np.array([2, 3], np.int64),
              activate_left=True, quant_mode=1)
    for g, w_ in zip(env.backend.dequant_swiglu_quant(x, **kw), w8a8.dequant_swiglu_quant(x, **kw), strict=True):
        same(g, w_)


def moe_case(t=5, k=2, e=4, h=64, i=32):
    return dict(hidden=bf16(t, h), w13=i8(e, 2 * i, h), w13_scale=f32(e, 2 * i, 1, lo=1e-3, hi=4e-3),
                w2=i8(e, h, i), w2_scale=f32(e, h, 1, lo=1e-3, hi=4e-3))


def test_w8a8_moe_end_to_end(env):
    case = moe_case()
    route = dict(topk_ids=RNG.integers(0, 4, (5, 2)).astype(np.int32), topk_weights=f32(5, 2, lo=0.1, hi=0.9))
    y = env.backend.w8a8_moe(**case, **route)
    same(y, w8a8.w8a8_moe(**case, **route))
    assert [c[0] for c in env.fake.calls] == [
        "npu_format_cast", "npu_format_cast", "npu_moe_init_routing_v2", "npu_grouped_matmul",
        "npu_dequant_swiglu_quant", "npu_grouped_matmul", "npu_moe_finalize_routing"]
    assert env.fake.calls[-1][2]["drop_pad_mode"] == 2
    assert_calls_match(env.backend.lower("w8a8_moe", **case, **route), env.fake.calls)


def test_w8a8_moe_with_router_and_shared_expert_end_to_end(env):
    case = moe_case(t=3, e=4, h=64, i=32)
    shared = {"gate_weight": i8(32, 64), "gate_scale": f32(32, 1), "up_weight": i8(32, 64), "up_scale": f32(32, 1),
              "down_weight": i8(64, 32), "down_scale": f32(64, 1)}
    kw = dict(top_k=2, router_logits=bf16(3, 4), shared_expert=shared)
    same(env.backend.w8a8_moe(**case, **kw), w8a8.w8a8_moe(**case, **kw))


def test_w8a8_moe_prequantized_end_to_end(env):
    case = moe_case()
    x_q, x_scale = w8a8.dispatch_quant(case.pop("hidden"))
    route = dict(topk_ids=RNG.integers(0, 4, (5, 2)).astype(np.int32), topk_weights=f32(5, 2, lo=0.1, hi=0.9))
    same(env.backend.w8a8_moe_prequantized(x_q, x_scale, **case, **route),
         w8a8.w8a8_moe_prequantized(x_q, x_scale, **case, **route))


# -- expert parallelism: the MC2 ops per rank, the EP layer ----------------------------------------------------------
@pytest.fixture
def ep():
    return ep_backend()


def ep_backend():
    """A backend whose EP plans run as R threads, each rank with its own recording fake in one EpWorld."""
    from backends.torch_npu.execution_ep import ThreadLauncher

    state = SimpleNamespace(fakes={}, events={}, world=None)

    def runtime_of(rank, ranks):
        if state.world is None or state.world.ranks != ranks:
            state.world = EpWorld(ranks)
            state.fakes.clear()
            state.events.clear()
        events = state.events.setdefault(rank, [])
        fake = state.fakes.setdefault(rank, FakeTorchNpu(events, rank, state.world))
        return Runtime(torch=torch, torch_npu=fake, device="cpu", synchronize=lambda: events.append("synchronize"),
                       groups={"ep": state.world.name(rank)})

    state.backend = TorchNpuBackend(ep_launcher=ThreadLauncher(runtime_of))
    state.calls = lambda q: [c[0] for c in state.fakes[q].calls]
    return state


def ep_tokens(bs, h, k, e, seed=0):
    """Per-rank bf16 tokens and K distinct expert ids per row (a permutation's first K)."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((t, h)).astype(np.float32).astype(BF16) for t in bs]
    ids = [np.argsort(rng.random((t, e)), axis=1)[:, :k].astype(np.int32) for t in bs]
    return xs, ids


def same_lists(got, want):
    assert len(got) == len(want)
    for g_, w_ in zip(got, want, strict=True):
        if isinstance(w_, list):
            same_lists(g_, w_)
        else:
            same(g_, w_)


@pytest.mark.parametrize("quant_mode", [2, 0])
def test_dispatch_v2_per_rank_calls_and_valid_rows(ep, quant_mode):
    # R = 2, E = 4 (E_loc 2), K = 2, H = 1024 (v2's minimum on A3), uneven BS 3 / 1 -> global_bs = 3 * 2;
    # entries in reverse rank order (ep_rank_id [1, 0]): every output list follows the entries
    xs, ids = ep_tokens([3, 1], 1024, 2, 4)
    args = (xs, ids, "ep_group", 2, [1, 0], 4)
    kw = dict(quant_mode=quant_mode, global_bs=6)
    got = ep.backend.moe_distribute_dispatch_v2(*args, **kw)
    same_lists(got, w8a8.moe_distribute_dispatch_v2(*args, **kw))
    plan = ep.backend.lower("moe_distribute_dispatch_v2", *args, **kw)
    for q in range(2):
        assert ep.events[q] == ["npu_moe_distribute_dispatch_v2", "synchronize"]    # no load steps
        assert_calls_match(plan.ranks[q], ep.fakes[q].calls, {"ep": ep.world.name(q)})
        call = ep.fakes[q].calls[0][2]
        assert (call["ep_rank_id"], call["quant_mode"], call["global_bs"]) == (q, quant_mode, 6)


def test_dispatch_v1_and_combine_v1_end_to_end(ep):
    # v1 on A3: H = 7168 only, R in {8, 16, ...}: 8 ranks of 1 token, E = 8, K = 2
    xs, ids = ep_tokens([1] * 8, 7168, 2, 8, seed=1)
    args = (xs, ids, "ep_group", 8, list(range(8)), 8)
    d = ep.backend.moe_distribute_dispatch(*args, quant_mode=2)
    want = w8a8.moe_distribute_dispatch(*args, quant_mode=2)
    same_lists(d, want)
    rows = [x.astype(np.float32).astype(BF16) for x in want[0]]            # stand-in expert outputs
    w = [RNG.random((1, 2)).astype(np.float32) for _ in range(8)]
    cargs = (rows, ids, want[2], want[4], w, "ep_group", 8, list(range(8)), 8)
    same_lists(ep.backend.moe_distribute_combine(*cargs), w8a8.moe_distribute_combine(*cargs))
    assert ep.calls(3) == ["npu_moe_distribute_dispatch", "npu_moe_distribute_combine"]   # rank 3, in order


def test_combine_v2_pads_to_the_dispatch_shapes(ep):
    xs, ids = ep_tokens([4, 4], 1024, 3, 6, seed=2)
    d = w8a8.moe_distribute_dispatch_v2(xs, ids, "ep_group", 2, [0, 1], 6)
    y = [RNG.standard_normal((r.shape[0], 1024)).astype(np.float32).astype(BF16) for r in d[0]]
    w = [RNG.random((4, 3)).astype(np.float32) for _ in range(2)]
    args = (y, ids, d[2], d[4], w, "ep_group", 2, [0, 1], 6)
    got = ep.backend.moe_distribute_combine_v2(*args)
    same_lists(got, w8a8.moe_distribute_combine_v2(*args))     # the fake asserted the capacity shapes


def ep_layer_case(bs=(3, 5), h=1024, i=32, e=4, k=2, seed=3):
    xs, ids = ep_tokens(list(bs), h, k, e, seed)
    rng = np.random.default_rng(seed)
    wts = [rng.random((t, k)).astype(np.float32).astype(BF16).astype(np.float32) for t in bs]
    weights = dict(w13=rng.integers(-127, 128, (e, 2 * i, h), dtype=np.int8),
                   w13_scale=rng.uniform(1e-4, 4e-4, (e, 2 * i, 1)).astype(np.float32),
                   w2=rng.integers(-127, 128, (e, h, i), dtype=np.int8),
                   w2_scale=rng.uniform(1e-3, 4e-3, (e, h, 1)).astype(np.float32))
    return dict(hidden=xs, **weights, topk_ids=ids, topk_weights=wts)


def test_w8a8_moe_ep_int8_hands_the_received_scale_to_w13(ep):
    case = ep_layer_case()
    same_lists(ep.backend.w8a8_moe_ep(**case), w8a8.w8a8_moe_ep(**case))
    plan = ep.backend.lower("w8a8_moe_ep", **case)
    for q in range(2):
        assert ep.calls(q) == ["npu_format_cast", "npu_format_cast", "npu_moe_distribute_dispatch_v2",
                               "npu_grouped_matmul", "npu_dequant_swiglu_quant", "npu_grouped_matmul",
                               "npu_moe_distribute_combine_v2"]             # no npu_dynamic_quant at all
        calls = {c[0]: c for c in reversed(ep.fakes[q].calls)}               # the first call of each name
        dispatched = calls["npu_moe_distribute_dispatch_v2"][3]
        gmm1 = calls["npu_grouped_matmul"]
        assert gmm1[1][0][0] is dispatched[0]                                # x: the received int8 rows
        assert gmm1[2]["per_token_scale"][0] is dispatched[1]                # the received dynamic_scales
        assert gmm1[2]["group_list"] is dispatched[3] and gmm1[2]["group_list_type"] == 1
        assert calls["npu_moe_distribute_dispatch_v2"][2]["quant_mode"] == 2
        assert_calls_match(plan.ranks[q], ep.fakes[q].calls, {"ep": ep.world.name(q)})


def test_w8a8_moe_ep_bf16_quantizes_once_on_arrival(ep):
    case = ep_layer_case(seed=4)
    got = ep.backend.w8a8_moe_ep(**case, dispatch="bf16")
    same_lists(got, w8a8.w8a8_moe_ep(**case, dispatch="bf16"))
    same_lists(got, w8a8.w8a8_moe_ep(**case))                                # Claim B: equal to the int8 path
    for q in range(2):
        names = ep.calls(q)
        assert names.count("npu_dynamic_quant") == 1
        assert names.index("npu_dynamic_quant") == names.index("npu_moe_distribute_dispatch_v2") + 1
        calls = {c[0]: c for c in reversed(ep.fakes[q].calls)}
        dispatched, quant = calls["npu_moe_distribute_dispatch_v2"], calls["npu_dynamic_quant"]
        assert dispatched[2]["quant_mode"] == 0 and quant[1][0] is dispatched[3][0]
        gmm1 = calls["npu_grouped_matmul"]
        assert gmm1[1][0][0] is quant[3][0] and gmm1[2]["per_token_scale"][0] is quant[3][1]


def test_w8a8_moe_ep_shared_expert_on_the_source_rank(ep):
    case = ep_layer_case(seed=5)
    rng = np.random.default_rng(5)
    shared = {"gate_weight": rng.integers(-127, 128, (32, 1024), dtype=np.int8),
              "gate_scale": rng.uniform(1e-4, 4e-4, (32, 1)).astype(np.float32),
              "up_weight": rng.integers(-127, 128, (32, 1024), dtype=np.int8),
              "up_scale": rng.uniform(1e-4, 4e-4, (32, 1)).astype(np.float32),
              "down_weight": rng.integers(-127, 128, (1024, 32), dtype=np.int8),
              "down_scale": rng.uniform(1e-3, 4e-3, (1024, 1)).astype(np.float32)}
    same_lists(ep.backend.w8a8_moe_ep(**case, shared_expert=shared), w8a8.w8a8_moe_ep(**case, shared_expert=shared))
    assert ep.calls(0).count("npu_quant_matmul") == 3 and ep.calls(0).count("npu_dynamic_quant") == 3


@pytest.mark.parametrize("change, arg", [
    (dict(bs=(3, 0)), "BS"),        # a rank with 0 tokens: MC2 needs BS in (0, 512]
    (dict(h=64), "H"),              # H in [1024, 8192] on A3 (v2)
])
def test_w8a8_moe_ep_device_constraints_refused_before_the_device(ep, change, arg):
    from backends.torch_npu.plan import ConstraintError

    case = ep_layer_case(**change)
    w8a8.w8a8_moe_ep(**case)                                 # the golden layer computes it
    with pytest.raises(ConstraintError, match=f"npu_moe_distribute_dispatch_v2.*{arg}"):
        ep.backend.w8a8_moe_ep(**case)
    assert ep.fakes == {}                                     # no rank ever started


def test_one_rank_is_not_an_mc2_group(ep):
    from backends.torch_npu.plan import ConstraintError

    case = ep_layer_case(bs=(3,), e=2)
    with pytest.raises(ConstraintError, match="ep_world_size"):
        ep.backend.w8a8_moe_ep(**case)


def test_dispatch_golden_errors_come_first(ep):
    xs, ids = ep_tokens([2, 2], 1024, 2, 4)
    with pytest.raises(ValueError, match="'ep_world_size'"):
        ep.backend.moe_distribute_dispatch_v2(xs, ids, "ep_group", 4, [0, 1], 4)
    with pytest.raises(ValueError, match="'quant_mode'"):
        ep.backend.moe_distribute_dispatch_v2(xs, ids, "ep_group", 2, [0, 1], 4, quant_mode=1)
    assert ep.fakes == {}


def test_hccl_rank_joins_the_group_and_names_it(monkeypatch):
    # No device here: torch.npu, torch_npu and torch.distributed are stand-ins that record what a rank process
    # does (execution_ep.hccl_rank), in order; the rank's plan itself is not run (run_rank is replaced).
    import queue
    import sys

    import torch.distributed as dist

    from backends.torch_npu import execution_ep

    seen = []
    backend = SimpleNamespace(get_hccl_comm_name=lambda rank: seen.append(("comm name of", rank)) or f"comm{rank}")
    pg = SimpleNamespace(_get_backend=lambda device: seen.append(("backend", str(device))) or backend)
    monkeypatch.setattr(torch, "npu", SimpleNamespace(set_device=lambda d: seen.append(("set_device", d)),
                                                      synchronize=lambda: None), raising=False)
    monkeypatch.setitem(sys.modules, "torch_npu", SimpleNamespace())
    monkeypatch.setattr(torch, "device", lambda name: f"torch.device({name!r})")   # "npu" exists with torch_npu only
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: seen.append(("init", backend, kw)))
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_group", lambda: pg)
    monkeypatch.setattr(dist, "barrier", lambda: seen.append("barrier"))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: seen.append("destroy"))
    monkeypatch.setattr(execution_ep, "run_rank", lambda rt, plan: seen.append(("run", rt.device, rt.groups, plan))
                        or ["result"])
    q = queue.SimpleQueue()
    execution_ep.hccl_rank(1, ["plan0", "plan1"], [4, 6], 29500, q)
    assert seen == [("set_device", 6),
                    ("init", "hccl", {"init_method": "tcp://127.0.0.1:29500", "rank": 1, "world_size": 2}),
                    ("backend", "torch.device('npu')"), ("comm name of", 1), ("run", "npu:6", {"ep": "comm1"}, "plan1"),
                    "barrier", "destroy"]
    assert q.get() == (1, ["result"], None)
    monkeypatch.setattr(execution_ep, "run_rank", lambda rt, plan: 1 / 0)
    execution_ep.hccl_rank(0, ["plan0", "plan1"], [4, 6], 29500, q)
    assert q.get() == (0, None, "ZeroDivisionError: division by zero") and seen[-1] == "destroy"


def test_hccl_launcher_needs_one_npu_per_rank():
    from backends.base import Unsupported
    from backends.torch_npu.execution_ep import HcclLauncher

    with pytest.raises(Unsupported, match="needs 4 NPUs"):
        HcclLauncher(device_count=2).run([None] * 4)
    with pytest.raises(Unsupported, match="needs 2 NPUs"):
        HcclLauncher(device_count=8, devices=[0]).run([None] * 2)


# -- the EP ops' declared cases through the per-rank plans and the fake (conformance.suite, strict) ------------------
def _ranked_ops():
    from conformance import registry

    return [op for op in registry.specs() if registry.get(op).ranked]


def _ranked(kind):
    from conformance import registry

    fn = registry.named_cases if kind == "named" else registry.bad_calls
    return [c.key for op in _ranked_ops() for c in fn(op)]


def test_the_ranked_ops_are_the_ep_lowerings():
    from backends.torch_npu import EP_LOWERINGS

    assert sorted(_ranked_ops()) == sorted(EP_LOWERINGS)


@pytest.mark.parametrize("key", _ranked("named"))
def test_ep_named_cases(ep, key):
    # A case the device cannot take (the A3 MC2 limits on the layer's tiny hand-derived cases: H = 2, R = 1;
    # a numerics record other than the one the backend declares) is Unsupported: the non-strict run skips it
    # with the reason. Every other case must then pass strictly (every output's bytes, nothing unsupported).
    from conformance.suite import check_named

    check_named(ep.backend, key)
    check_named(ep.backend, key, strict=True)


@pytest.mark.parametrize("key", _ranked("bad"))
def test_ep_bad_calls(ep, key):
    from conformance.suite import check_error

    check_error(ep.backend, key, strict=True)
    assert ep.fakes == {}                              # refused before any rank started


@pytest.mark.parametrize("op", ["moe_distribute_dispatch", "moe_distribute_dispatch_v2", "moe_distribute_combine",
                                "moe_distribute_combine_v2"])
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_ep_drawn_cases(op, data):
    # conformance's own draws of the MC2 ops (rank counts, uneven BS, masks, smooth scales...), strictly, through
    # fresh per-rank fakes. (The layer's draws are below the MC2 limits, H < 1024: its cases are the tests above.)
    from conformance import registry
    from conformance.suite import check_drawn

    params = data.draw(registry.get(op).params(), label="params")
    check_drawn(ep_backend().backend, op, params, strict=True)


def test_thread_launcher_reports_the_failing_rank(monkeypatch):
    # rank 1 fails before the collective; rank 0's barrier breaks: the error raised is rank 1's own
    from backends.torch_npu import execution_ep

    barrier = threading.Barrier(2)

    def run_rank(rt, plan):
        if plan == "bad":
            barrier.abort()
            raise ValueError("rank 1's own error")
        barrier.wait()

    monkeypatch.setattr(execution_ep, "run_rank", run_rank)
    with pytest.raises(ValueError, match="rank 1's own error"):
        execution_ep.ThreadLauncher(lambda q, r: None).run(["good", "bad"])


# -- the fake's op surface is the lowering's: every lowered op runs its declared cases through the fake ----------
def _lowered_ops():
    from backends.torch_npu import lowering

    return sorted(lowering.LOWERINGS)


def _fresh_env():
    events = []
    fake = FakeTorchNpu(events)
    rt = Runtime(torch=torch, torch_npu=fake, device="cpu", synchronize=lambda: events.append("synchronize"))
    return SimpleNamespace(events=events, fake=fake, backend=TorchNpuBackend(runtime=rt))


@pytest.mark.parametrize("op", _lowered_ops())
def test_every_lowering_runs_its_named_cases_through_the_fake(op):
    # A new lowering is tested here without editing this file: its plan's torch_npu calls must all exist on the
    # fake (a lowering with no fake call fails, naming the call), and its named cases must agree strictly with the
    # golden through the fake. A case the device cannot take (a documented constraint) is skipped; at least one of
    # the op's first cases must reach the fake.
    from conformance import registry
    from conformance.evaluate import BAD_STATUSES, run_case
    from backends.base import Unsupported

    ran = 0
    for case in registry.named_cases(op)[:4]:
        e = _fresh_env()
        args, kwargs = case.build()
        try:
            plan = e.backend.lower(op, *args, **kwargs)
        except Unsupported:
            continue
        called = [c.fn.split(".", 1)[1] for c in plan.load + plan.calls if c.fn.startswith("torch_npu.")]
        missing = sorted({fn for fn in called if not callable(getattr(FakeTorchNpu, fn, None))})
        assert not missing, f"{op}: the lowering calls torch_npu.{missing} that the recording fake does not have"
        record = run_case(registry.get(op), {"named": case.key}, e.backend, strict=True)
        if record["status"] == "unsupported":
            continue
        assert record["status"] not in BAD_STATUSES, (case.key, record)
        assert [c[0] for c in e.fake.calls] == called      # what ran is the plan's calls, through the fake
        ran += 1
    assert ran, f"none of {op}'s first named cases reaches the fake"
