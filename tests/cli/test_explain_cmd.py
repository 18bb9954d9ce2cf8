"""``w8a8 explain``: the variant the platform selects, its tiling key, its numerics in order, its sources."""

import json

import pytest

from w8a8cli.main import main


def _explain(capsys, *argv):
    rc = main(["explain", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_decode_and_prefill_shapes_get_different_kernels(capsys):
    rc, decode, _ = _explain(capsys, "dynamic_quant", "--shape", "16x4096", "--dtype", "bfloat16")
    assert rc == 0
    assert "dynamic_quant/single-row[100]" in decode
    assert "scale = m * fp32(1/127)" in decode and "scale_out='amax_mul_rcp'" in decode
    assert "quant/dynamic_quant/op_kernel/dynamic_quant_single_row.h:147@e5c3fa93" in decode
    assert "SetSpecialTilingForDs" in decode and "4 <= rows = 16 <= 384" in decode
    rc, large, _ = _explain(capsys, "dynamic_quant", "--shape", "64x20000", "--dtype", "bfloat16")
    assert rc == 0
    assert "dynamic_quant/large-shape[6]" in large
    assert "scale = 1 / inv" in large and "scale_out='reciprocal'" in large
    assert "dynamic_quant_large_shape_opt.h:78-79@e5c3fa93" in large
    # numerics in order of operations: the steps are numbered
    assert decode.index("1. xf = fp32(x)") < decode.index("3. inv = 127 / m") < decode.index("5. scale")


def test_platform_and_options(capsys):
    rc, out, _ = _explain(capsys, "dynamic_quant", "--shape", "16x4096", "--platform", "ascend910b")
    assert rc == 0 and "(ascend910b)" in out and "[100]" in out
    rc, out, _ = _explain(capsys, "dynamic_quant", "--shape", "16x4096", "--opt", "smooth=1", "--opt", "groups=8")
    assert rc == 0 and "dynamic_quant/moe[7]" in out
    rc, out, _ = _explain(capsys, "moe_finalize_routing", "--shape", "4096x7168", "--opt", "k=6", "--opt", "bias=1")
    assert rc == 0 and "cut-h" in out
    rc, out, _ = _explain(capsys, "weight_quant_batchmatmul", "--shape", "16x4096x4096", "--dtype", "float16")
    assert rc == 0 and "/msd" in out and "NOT MODELLED" in out
    rc, out, _ = _explain(capsys, "swiglu", "--shape", "2x8", "--dtype", "float32")
    assert rc == 0 and "swiglu_order='rcp_mul'" in out


def test_json(capsys):
    rc, out, _ = _explain(capsys, "moe_gating_top_k_softmax", "--shape", "4x9", "--dtype", "float16", "--opt", "k=2",
                          "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["name"] == "e-k-full-load" and d["decides"] == {"gating_precision": "fp16"}
    assert d["platform"] == "ascend910_93" and d["sources"]


@pytest.mark.parametrize("argv, needle", [
    (["dynamic_quant", "--shape", "16"], "--shape must be x"),
    (["dynamic_quant", "--shape", "16xabc"], "--shape must be integers"),
    (["dynamic_quant", "--shape", "16x8", "--platform", "ascend910c"], "--platform"),
    (["dynamic_quant", "--shape", "16x8", "--opt", "k=2"], "--opt for dynamic_quant"),
    (["dynamic_quant", "--shape", "16x8", "--opt", "smooth=maybe"], "--opt smooth"),
    (["dynamic_quant", "--shape", "16x8", "--dtype", "float17"], "--dtype"),
])
def test_bad_arguments(capsys, argv, needle):
    rc, _, err = _explain(capsys, *argv)
    assert rc == 2 and needle in err


def test_unknown_op_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit):
        main(["explain", "dynamic_quantize", "--shape", "2x8"])


@pytest.mark.parametrize("argv, needle", [
    (["dynamic_quant", "--shape", "16x4095", "--opt", "dst=int4"],
     "dynamic_quant: argument 'x' must be of last dimension a multiple of 8 for int4 output"),
    (["dynamic_quant", "--shape", "16x4096", "--dtype", "int8"], "dynamic_quant: argument 'x' must be of dtype float16"),
    (["dynamic_quant", "--shape", "16x4096", "--opt", "smooth=1", "--opt", "groups=1025"],
     "argument 'group_index' must be of at most 1024 groups"),
    (["dynamic_quant_asymmetric", "--shape", "2x3x4x5x6x7x8x9x10", "--dtype", "float16"],
     "dynamic_quant_asymmetric: argument 'x' must be 2-D to 8-D"),
    (["moe_gating_top_k_softmax", "--shape", "16x8", "--opt", "k=9"],
     "moe_gating_top_k_softmax: argument 'k' must be in [1, 8]; got 9"),
    (["swiglu", "--shape", "16x7"], "swiglu: argument 'x' must be of even size along dim -1"),
])
def test_a_call_the_op_refuses_is_explained_as_refused(capsys, argv, needle):
    """Before: explain described a kernel for each of these calls, which the op itself refuses."""
    rc, out, err = _explain(capsys, *argv)
    assert rc == 2 and not out and "the op refuses this call" in err and needle in err, err
    assert len(err.strip().splitlines()) == 1


def test_the_argument_check_is_reported_and_costs_nothing_for_huge_shapes(capsys):
    rc, out, _ = _explain(capsys, "dynamic_quant", "--shape", "1000000000x100000", "--json")  # 10^14 elements
    assert rc == 0 and json.loads(out)["argument_check"].startswith("passed")
    rc, out, _ = _explain(capsys, "quantize", "--shape", "8x8")
    assert rc == 0 and "argument check: not run" in out
