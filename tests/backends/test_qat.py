"""The QAT grid (backends/torch_cpu/qat.py): forward = the golden's dequantize(quantize(w)) bit for bit,
backward = the upstream gradient unchanged (straight-through, no clipping mask)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

import w8a8

torch = pytest.importorskip("torch")

from backends.torch_common import from_torch, to_torch  # noqa: E402
from backends.torch_cpu.qat import FORMATS, FakeQuantLinear, fake_quant, quantizer_for  # noqa: E402

pytestmark = pytest.mark.torch

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"float32": np.dtype(np.float32), "bfloat16": BF16, "float16": np.dtype(np.float16)}


def golden_fake_quant(w: np.ndarray, fmt: str, **opts) -> np.ndarray:
    """dequantize(quantize(w)) with the golden's public ops, output in w's dtype."""
    out = w.dtype
    if fmt == "int4":
        q, s, z = w8a8.int4_group_quantize(w, opts.get("group_size", 128), scheme=opts.get("scheme", "gptq_sym"),
                                           scale_dtype=opts.get("scale_dtype", "float16"))
        return w8a8.int4_group_dequantize(q, s, z, output_dtype=out)
    if fmt == "int8":
        q, s, _ = w8a8.quantize_weight_per_channel(w)
        return w8a8.dequantize(q, s[..., 0], axis=-2, output_dtype=out) if w.ndim == 2 else np.stack(
            [w8a8.dequantize(q[e], s[e, :, 0], axis=-2, output_dtype=out) for e in range(w.shape[0])])
    if fmt in ("mxfp4", "mxfp8"):
        elem = "e2m1" if fmt == "mxfp4" else opts.get("elem_dtype", "e4m3")
        kw = {"elem_dtype": elem, "block_size": opts.get("block_size", 32)}
        d, s = w8a8.mx_quantize(w, scale_mode=opts.get("scale_mode", "floor"), **kw)
        return w8a8.mx_dequantize(d, s, output_dtype=out, **kw)
    if fmt == "nvfp4":
        t = w8a8.nvfp4_per_tensor_scale(np.abs(w.astype(np.float32)).max(initial=0))
        d, s = w8a8.nvfp4_quantize(w, per_tensor_scale=t)
        return w8a8.nvfp4_dequantize(d, s, per_tensor_scale=t, output_dtype=out)
    assert fmt == "fp8_block"
    bs = opts.get("block_shape", (128, 128))
    q, s = w8a8.fp8_block_quantize(w, block_shape=bs, scale_fmt=opts.get("scale_fmt"))
    return w8a8.fp8_block_dequantize(q, s, block_shape=bs, output_dtype=out)


def assert_bits(got: torch.Tensor, want: np.ndarray):
    g = from_torch(got)
    assert g.dtype == want.dtype and g.shape == want.shape
    diff = np.flatnonzero(np.ascontiguousarray(g).view(np.uint8) != np.ascontiguousarray(want).view(np.uint8))
    assert diff.size == 0, f"{diff.size} bytes differ, first at byte {diff[0]}"


# each format with a few option sets; K multiples of 32 (MX) / 16 (NVFP4) / the INT4 group
CASES = [
    ("int4", {"group_size": 32}), ("int4", {"group_size": 32, "scheme": "absmax_sym", "scale_dtype": "float32"}),
    ("int4", {"group_size": 64, "scheme": "asym", "scale_dtype": "bfloat16"}), ("int4", {"group_size": -1}),
    ("int8", {}),
    ("mxfp4", {}), ("mxfp4", {"scale_mode": "rceil"}), ("mxfp8", {}),
    ("mxfp8", {"elem_dtype": "e5m2", "scale_mode": "even"}),
    ("nvfp4", {}),
    ("fp8_block", {}), ("fp8_block", {"block_shape": (16, 32), "scale_fmt": "ue8m0"}),
]


@pytest.mark.parametrize("fmt, opts", CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 7, 17, 33]), k64=st.integers(1, 3),
       dtype=st.sampled_from(list(DTYPES)), dist=st.sampled_from(["normal", "outlier", "zero_rows", "ties"]),
       experts=st.booleans())
def test_forward_is_the_golden_grid(fmt, opts, seed, n, k64, dtype, dist, experts):
    rng = np.random.default_rng(seed)
    shape = ((2,) if experts else ()) + (n, 64 * k64)
    w = rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 1)
    if dist == "outlier":
        w[..., rng.integers(0, shape[-1])] *= 100
    elif dist == "zero_rows":
        w[..., ::2, :] = 0
    elif dist == "ties":  # multiples of a power of two: many exact ties on every grid
        w = rng.integers(-64, 65, shape) * 2.0 ** -4
    w = w.astype(np.float32).astype(DTYPES[dtype])
    want = golden_fake_quant(w, fmt, **opts)
    param = to_torch(w).clone().requires_grad_(True)
    got = fake_quant(param, fmt, **opts)
    assert got.requires_grad and got.dtype == param.dtype
    assert_bits(got.detach(), want)


@pytest.mark.parametrize("fmt, opts", CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
def test_gradient_is_the_upstream_gradient(fmt, opts):
    # Straight-through: d fake_quant(w) / d w is the identity, bit for bit, also at the saturated
    # block maxima (GPTQ's 7.5 -> 7, MX FLOOR's (6, 8) -> 6) and on all-zero rows: no mask.
    rng = np.random.default_rng(1)
    w = torch.from_numpy((rng.standard_normal((9, 128)) * 0.1).astype(np.float32))
    w[0] = 0
    w[1, :32] = torch.tensor([7.5, 6.5] + [1.0] * 30)  # MX FLOOR clips 7.5 and 6.5 to 6
    w.requires_grad_(True)
    upstream = torch.from_numpy(rng.standard_normal((9, 128)).astype(np.float32))
    fake_quant(w, fmt, **opts).backward(upstream)
    assert torch.equal(w.grad, upstream)
    # through a loss as well: the gradient of sum(fq(w) * c) is c
    w.grad = None
    (fake_quant(w, fmt, **opts) * 3.0).sum().backward()
    assert torch.equal(w.grad, torch.full_like(w, 3.0))


def test_bf16_weight_gradient_keeps_dtype():
    w = torch.randn(4, 64, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(4, 64, dtype=torch.bfloat16)
    fake_quant(w, "mxfp4").backward(g)
    assert w.grad.dtype == torch.bfloat16 and torch.equal(w.grad, g)


def test_absmax_sym_is_the_seeds_fake_int4():
    # The seed's recipe, written independently: s = amax / 7 (fp32), q = clamp(round(w / s), -8, 7) * s.
    # The golden's "absmax_sym" with fp32 scales is exactly that (no all-zero group here).
    g = torch.Generator().manual_seed(0)
    w = torch.randn(224, 64, generator=g) * 0.2
    grp = w.view(224, -1, 32)
    s = grp.abs().amax(-1, keepdim=True) / 7
    seed = ((grp / s).round().clamp(-8, 7) * s).view_as(w)
    got = fake_quant(w, "int4", group_size=32, scheme="absmax_sym", scale_dtype="float32")
    assert torch.equal(got, seed)


def test_int4_values_on_the_grid():
    # gptq_sym, G = 8: amax 3.75 -> s = 0.5; w / s = 7.5 -> 7 (clipped), -7.5 -> -8, 0.5 -> 0 (tie to even),
    # 1.5 -> 2, 2.5 -> 2, 0 -> 0, -1 -> -1, 4 -> 4; times s.
    w = torch.tensor([[3.75, -3.75, 0.25, 0.75, 1.25, 0.0, -0.5, 2.0]])
    assert fake_quant(w, "int4", group_size=8).tolist() == [[3.5, -4.0, 0.0, 1.0, 1.0, 0.0, -0.5, 2.0]]


def test_fake_quant_linear():
    torch.manual_seed(0)
    layer = FakeQuantLinear(64, 8, fmt="nvfp4")
    x = torch.randn(5, 64)
    y = layer(x)
    want = torch.nn.functional.linear(x, fake_quant(layer.weight, "nvfp4"), layer.bias)
    assert torch.equal(y, want)
    assert torch.equal(layer(x, quant=False), torch.nn.functional.linear(x, layer.weight, layer.bias))
    g = torch.randn(5, 8)
    y.backward(g)
    assert torch.allclose(layer.weight.grad, g.T @ x)  # STE: as if the layer were unquantized
    assert "nvfp4" in repr(layer)


def test_bad_arguments():
    w = torch.zeros(4, 64)
    with pytest.raises(ValueError, match="'fmt' must be one of"):
        fake_quant(w, "int3")
    with pytest.raises(TypeError, match="argument 'block_size' must be an option of fmt='int4'"):
        fake_quant(w, "int4", block_size=32)
    with pytest.raises(TypeError, match="argument 'weight' must be a torch.Tensor"):
        fake_quant(np.zeros((4, 64), np.float32), "int8")
    with pytest.raises(TypeError, match="argument 'weight' must be a float32, bfloat16 or float16 tensor"):
        fake_quant(w.double(), "int8")
    # the golden's own checks and messages
    with pytest.raises(ValueError, match="int4_group_quantize: argument 'group_size' must be a positive divisor"):
        fake_quant(w, "int4", group_size=48)
    with pytest.raises(ValueError, match="mx_quantize: argument 'x' must be of last dimension a multiple of"):
        fake_quant(torch.zeros(4, 48), "mxfp4")
    with pytest.raises(ValueError, match="nvfp4_quantize: argument 'x' must be finite"):
        fake_quant(torch.full((2, 16), float("nan")), "nvfp4")
    with pytest.raises(ValueError, match="quantize_weight_per_channel: argument 'w' must be finite"):
        fake_quant(torch.full((2, 16), float("inf")), "int8")
    with pytest.raises(ValueError, match="'weight' must be of a non-empty last dimension"):
        fake_quant(torch.zeros(2, 0), "int8")
    with pytest.raises(ValueError, match="fp8_block_quantize: argument 'scale_fmt'"):
        fake_quant(w, "fp8_block", scale_fmt="e8")
    with pytest.raises(TypeError, match="an option of fmt='nvfp4'"):
        FakeQuantLinear(64, 8, fmt="nvfp4", group_size=32)


def test_formats_table_matches_the_forward():
    for fmt, defaults in FORMATS.items():
        quantizer_for(fmt, **defaults)  # every documented option is accepted
