"""Detectors of known library bugs: each names a cause attribution could not otherwise name.

A genuine bug of a library (docs/backends.md lists them) is never declared away: the backend keeps it,
conformance fails the case, and attribution names it through the detector here — a test of the bug's
own pattern on the case, element by element (block by block). A detector *explains* the elements it
matches; :func:`explain` reports the detectors that matched and whether together they explain every
mismatch (then the cause is complete: nothing else differs).

* ``mx-byte0-half`` — torchao 0.18 ``to_mx`` (FLOOR / CEIL / EVEN): a block whose exponent clamps to
  -127 writes scale byte 0 (2^-127) but its elements were divided by 2^-126: codes
  ``cast(clamp(x * 2^126))``, the block decodes at half its value;
* ``mx-rceil-byte0-unscaled`` — torchao RCEIL: byte 0 with the multiplier 1.0: codes ``cast(clamp(x))``;
* ``mx-inf-block-finite-byte`` — a block holding +-Inf gets the finite byte ``255 - emax`` (FLOOR /
  CEIL / EVEN) or 254 (RCEIL) instead of the NaN scale 255;
* ``mx-rceil-fp32-log2`` — torchao RCEIL computes ``ceil(log2(amax / vmax))`` with an fp32 ``log2``:
  next to a power of two the byte is one too small and the block clips;
* ``fp16-epilogue-overflow`` — an epilogue whose first product is rounded to fp16 (torchao's int8
  linear with fp16 models): ``|fp32(acc) * s| > 65504`` there makes the output Inf;
* ``int8-k1-one-row`` — torchao's int8 linear on one row with K = 1 and N >= 2 returns values it never
  wrote (nondeterministic): PyTorch's ``torch._int_mm`` on CPU multiplies by the transposed weight, a
  ``[1, N]`` view with strides ``(1, 1)``, and oneDNN takes its leading dimension from the size-1 stride.
  With N = 1 ``torch._int_mm`` is right (tests/backends/test_torchao.py ``test_bug_int8_k_equals_1``);
* ``nvfp4-zero-tensor`` — an all-zero tensor whose per-tensor scale is 0 (torchao
  ``per_tensor_amax_to_scale``) makes every block scale NaN;
* ``nvfp4-nan-as-1.5`` — torchao's NVFP4 computes ``x·((1/S)/s_b)``: with a per-tensor scale S whose
  fp32 reciprocal overflows (S < 2^-128) every zero element becomes ``0·inf = NaN``, which its
  ``_f32_to_floatx_unpacked`` writes as E2M1 code 3 | sign (±1.5) — a zero input quantized to -1.5;
* ``k0-stale-output`` — an integer GEMM with K = 0 returns an int32 output it never wrote (the sum of no
  terms is 0): onnxruntime 1.32 ``MatMulInteger`` hands back a reused buffer that still holds the previous
  run's results (tests/backends/test_onnxruntime.py ``test_bug_matmul_integer_k0_returns_a_stale_buffer``).

Errors (the backend raised where the golden returned): ``int8-k1`` — torchao's int8 path with K = 1
raises a RuntimeError (a reshape of a 1-wide row); ``mxfp4-mm-n1`` — torchao's emulated MXFP4 mm
with N = 1 fails ``assert b_hp.t().is_contiguous()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

_ELEMS = {"e2m1": (2, 6.0), "e4m3": (8, 448.0), "e5m2": (15, 57344.0)}  # emax, vmax (OCP MX v1.0)


@dataclass(frozen=True)
class Detector:
    name: str
    ops: tuple[str, ...]
    words: str
    fn: Callable  # (ctx) -> {output name: bool mask of the elements it explains} or None


@dataclass
class Context:
    spec: object
    args: tuple
    kwargs: dict
    numerics: object
    ref: dict          # the golden's outputs under the declared record
    got: dict          # the backend's outputs
    mismatch: dict     # output name -> bool mask of differing elements
    stages: dict       # the golden's stage values under the declared record


# ------------------------------------------------------------------------------------------------
# MX

@dataclass
class _Mx:
    x: np.ndarray          # float32 [..., nb, bs]
    elem: str
    bs: int
    mode: str
    ref_scale: np.ndarray  # uint8 [..., nb]
    got_scale: np.ndarray
    got_data: np.ndarray   # bytes [..., nb, per-block]
    emax: int
    vmax: float

    def encode(self, scaled: np.ndarray) -> np.ndarray:
        """The data bytes of fp32 values ``[..., nb, bs]``, saturating, RNE, in the output's layout."""
        from w8a8.lowbit.minifloat import float_to_e2m1, float_to_fp8, pack_fp4

        v = np.clip(scaled, -self.vmax, self.vmax).astype(np.float32)
        if self.elem == "e2m1":
            return pack_fp4(float_to_e2m1(v))
        return float_to_fp8(v, self.elem).view(np.uint8)

    def blocks_equal(self, scaled: np.ndarray) -> np.ndarray:
        return (self.encode(scaled) == self.got_data).all(axis=-1)

    def explained(self, blocks: np.ndarray, ctx: Context) -> dict:
        """Masks of every output element inside the given blocks."""
        data = np.repeat(blocks[..., None], self.got_data.shape[-1], axis=-1).reshape(ctx.got["data"].shape)
        return {"data": data, "scale": blocks.copy()}


def _mx(ctx: Context) -> _Mx | None:
    from w8a8 import registry

    try:
        a = registry.get("mx_quantize").args(*ctx.args, **ctx.kwargs)
    except Exception:  # noqa: BLE001
        return None
    got_data, got_scale, ref_scale = ctx.got.get("data"), ctx.got.get("scale"), ctx.ref.get("scale")
    if got_data is None or got_scale is None or ref_scale is None or a.block_size < 2 or a.block_size % 2:
        return None
    emax, vmax = _ELEMS[a.elem_name]
    x = a.x.astype(np.float32)
    nb = x.shape[-1] // a.block_size
    per = a.block_size // 2 if a.elem_name == "e2m1" else a.block_size
    raw = np.ascontiguousarray(got_data).view(np.uint8)
    if raw.shape[-1] != nb * per or np.asarray(got_scale).shape != np.asarray(ref_scale).shape:
        return None
    return _Mx(x=x.reshape(x.shape[:-1] + (nb, a.block_size)), elem=a.elem_name, bs=a.block_size, mode=a.scale_mode,
               ref_scale=np.asarray(ref_scale).view(np.uint8), got_scale=np.asarray(got_scale).view(np.uint8),
               got_data=raw.reshape(raw.shape[:-1] + (nb, per)), emax=emax, vmax=vmax)


def _mx_byte0_half(ctx: Context):
    m = _mx(ctx)
    if m is None or m.mode == "rceil":
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        blocks = (m.got_scale == 0) & (m.ref_scale == 0) & m.blocks_equal(m.x * np.float32(2.0 ** 126))
    return m.explained(blocks, ctx)


def _mx_rceil_byte0(ctx: Context):
    m = _mx(ctx)
    if m is None or m.mode != "rceil":
        return None
    blocks = (m.got_scale == 0) & m.blocks_equal(m.x)
    return m.explained(blocks, ctx)


def _mx_inf_block(ctx: Context):
    m = _mx(ctx)
    if m is None:
        return None
    has_inf = np.isinf(m.x).any(axis=-1) & ~np.isnan(m.x).any(axis=-1)
    byte = 254 if m.mode == "rceil" else 255 - m.emax
    return m.explained(has_inf & (m.got_scale == byte), ctx)


def _mx_rceil_log2(ctx: Context):
    m = _mx(ctx)
    if m is None or m.mode != "rceil":
        return None
    with np.errstate(all="ignore"):
        amax = np.abs(m.x).max(axis=-1)
        d = (amax / np.float32(m.vmax)).astype(np.float32)
        fp32_log2 = np.ceil(np.log2(d)).astype(np.float32)
        byte = np.clip(np.nan_to_num(fp32_log2, nan=0, posinf=127, neginf=-127), -127, 127).astype(np.int64) + 127
        scaled = m.x * np.exp2(127.0 - m.got_scale.astype(np.float64))[..., None].astype(np.float32)
    blocks = (m.got_scale.astype(np.int64) == m.ref_scale.astype(np.int64) - 1) & (m.got_scale == byte) & \
        np.isfinite(amax) & (amax > 0) & m.blocks_equal(scaled)
    return m.explained(blocks, ctx)


# ------------------------------------------------------------------------------------------------
# epilogues and NVFP4

def _fp16_overflow(ctx: Context):
    from .attribution import golden_stages_fn

    y_ref, y_got = ctx.ref.get("y"), ctx.got.get("y")
    if y_ref is None or y_got is None or np.asarray(y_got).dtype != np.float16:
        return None
    fn = golden_stages_fn(ctx.spec.name)
    if fn is None:
        return None
    try:
        with np.errstate(all="ignore"):
            st = fn(*ctx.args, **ctx.kwargs, numerics=ctx.numerics)
    except Exception:  # noqa: BLE001
        return None
    acc = st.get("acc")
    token = st.get("x_scale") if "x_scale" in st else ctx.kwargs.get("pertoken_scale")
    scale = st.get("weight_scale") if "weight_scale" in st else st.get("scale")
    if acc is None or token is None:
        return None
    a = np.asarray(acc, np.float32)
    t = np.asarray(token, np.float32).reshape(-1)[..., None] if np.ndim(token) else np.float32(token)
    order = ctx.numerics.epilogue_order
    with np.errstate(all="ignore"):
        if order == "token_then_scale":
            first = a * t
        elif scale is None:
            return None
        else:
            s = np.asarray(scale).astype(np.float32).reshape(-1)
            first = a * s if order == "scale_then_token" else a * (s * t)
        over = np.abs(first) > np.float32(np.finfo(np.float16).max)
    got = np.asarray(y_got)
    if over.size != got.size:
        return None
    explained = np.isinf(got) & np.isfinite(np.asarray(y_ref).astype(np.float32)) & over.reshape(got.shape)
    return {"y": explained}


def _nvfp4_zero(ctx: Context):
    x = ctx.args[0] if ctx.args else ctx.kwargs.get("x")
    scale = ctx.got.get("block_scale")
    if x is None or scale is None:
        return None
    xf = np.asarray(x).astype(np.float32)
    if xf.size == 0 or np.abs(xf).max() != 0:
        return None
    raw = np.ascontiguousarray(scale).view(np.uint8)
    nan = (raw & 0x7F) == 0x7F
    return {"block_scale": nan, "data": np.ones(np.asarray(ctx.got["data"]).shape, bool) if nan.all() else
            np.zeros(np.asarray(ctx.got["data"]).shape, bool)}


def _int8_k1_one_row(ctx: Context):
    from w8a8 import registry

    try:
        a = registry.get(ctx.spec.name).args(*ctx.args, **ctx.kwargs)
    except Exception:  # noqa: BLE001
        return None
    x = np.asarray(a.x)
    n = getattr(getattr(a, "params", None), "n", None)
    if x.ndim < 1 or x.shape[-1] != 1 or x.size != 1 or ctx.got.get("y") is None or n is None or n < 2:
        return None      # N = 1: torch._int_mm computes the [1, 1] x [1, 1] product right
    return {"y": np.ones(np.shape(ctx.got["y"]), bool)}


def _nvfp4_nan_as_1_5(ctx: Context):
    x = ctx.args[0] if ctx.args else ctx.kwargs.get("x")
    s = ctx.kwargs.get("per_tensor_scale")
    got, ref = ctx.got.get("data"), ctx.ref.get("data")
    if x is None or s is None or got is None or ref is None:
        return None
    with np.errstate(over="ignore", divide="ignore"):
        if np.isfinite(np.float32(1) / np.float32(s)):
            return None
    zero = np.asarray(x).astype(np.float32) == 0
    g, r = np.asarray(got, np.uint8), np.asarray(ref, np.uint8)
    if zero.shape[:-1] != g.shape[:-1] or zero.shape[-1] != 2 * g.shape[-1]:
        return None
    nibbles = [(g & 0xF, r & 0xF, zero[..., 0::2]), (g >> 4, r >> 4, zero[..., 1::2])]  # packed LSB first
    ok = np.ones(g.shape, bool)
    for gn, rn, z in nibbles:
        ok &= (gn == rn) | (z & ((gn & 0x7) == 3))
    return {"data": ok}


def _k0_stale_output(ctx: Context):
    a = ctx.args[0] if ctx.args else ctx.kwargs.get("a")
    ref, got = ctx.ref.get("acc"), ctx.got.get("acc")
    if a is None or ref is None or got is None or np.shape(a)[-1] != 0 or np.shape(got) != np.shape(ref):
        return None
    return {"acc": np.asarray(got) != 0}


DETECTORS: tuple[Detector, ...] = (
    Detector("mx-byte0-half", ("mx_quantize",),
             "torchao to_mx bug: a block whose exponent clamps to -127 writes scale byte 0 (2^-127) but its elements "
             "are divided by 2^-126 (the block decodes at half its value)", _mx_byte0_half),
    Detector("mx-rceil-byte0-unscaled", ("mx_quantize",),
             "torchao RCEIL bug: scale byte 0 with the multiplier 1.0 instead of 2^127 (the elements are not scaled)",
             _mx_rceil_byte0),
    Detector("mx-inf-block-finite-byte", ("mx_quantize",),
             "torchao to_mx bug: a block holding Inf gets a finite scale byte (255 - emax, or 254 under RCEIL) instead "
             "of the NaN scale 255", _mx_inf_block),
    Detector("mx-rceil-fp32-log2", ("mx_quantize",),
             "torchao RCEIL bug: ceil(log2(amax/vmax)) in fp32 gives a byte one too small next to a power of two "
             "(the block clips, which RCEIL must never do)", _mx_rceil_log2),
    Detector("fp16-epilogue-overflow", ("w8a8_dynamic_linear", "quant_matmul"),
             "fp16 intermediate overflow: the epilogue's first product fp32(acc)*scale exceeds 65504 and is rounded "
             "to fp16 Inf before the second scale (torchao's int8 linear with fp16 models)", _fp16_overflow),
    Detector("int8-k1-one-row", ("w8a8_dynamic_linear",),
             "int8 linear with K = 1, one row and N >= 2 returns values read from memory it did not write: "
             "PyTorch's torch._int_mm on CPU (oneDNN reads the leading dimension of the transposed [1, N] weight "
             "from its size-1 stride), reached through torchao 0.18's int8 linear; the values change from call to "
             "call", _int8_k1_one_row),
    Detector("nvfp4-zero-tensor", ("nvfp4_quantize",),
             "NVFP4 all-zero tensor: a per-tensor scale of 0 makes every block scale NaN (0/0; torchao "
             "per_tensor_amax_to_scale)", _nvfp4_zero),
    Detector("nvfp4-nan-as-1.5", ("nvfp4_quantize",),
             "torchao NVFP4: with a per-tensor scale whose fp32 reciprocal overflows, x*((1/S)/s_b) makes every zero "
             "element 0*inf = NaN, written as E2M1 code 3 | sign (+-1.5): a zero quantized to -1.5",
             _nvfp4_nan_as_1_5),
    Detector("k0-stale-output", ("int_matmul",),
             "integer GEMM with K = 0 returns values it never wrote instead of zeros (onnxruntime 1.32 MatMulInteger "
             "reuses an output buffer: the previous run's results come back)", _k0_stale_output),
)


def explain(spec, args, kwargs, numerics, ref: dict, got: dict, masks: dict, stages: dict) -> dict | None:
    """The detectors that match this failing case: ``{"causes", "names", "complete", "stage"}``, or None."""
    from .attribution import mismatch_mask

    mismatch = {}
    for name, value in got.items():
        r = ref.get(name)
        if r is None or value is None:
            continue
        m = mismatch_mask(r, np.asarray(value), masks.get(name))
        if m is not None:
            mismatch[name] = m
    if not any(m.any() for m in mismatch.values()):
        return None
    ctx = Context(spec, args, kwargs, numerics, ref, got, mismatch, stages)
    covered = {n: np.zeros_like(m) for n, m in mismatch.items()}
    causes, names, counts = [], [], {}
    for d in DETECTORS:
        if spec.name not in d.ops:
            continue
        try:
            with np.errstate(all="ignore"):
                hit = d.fn(ctx)
        except Exception:  # noqa: BLE001 - a detector that cannot read the case does not match
            hit = None
        if not hit:
            continue
        count = 0
        for n, m in hit.items():
            if n in mismatch and np.shape(m) == mismatch[n].shape:
                useful = np.asarray(m, bool) & mismatch[n]
                covered[n] |= useful
                count += int(useful.sum())
        if count:
            causes.append(f"{d.words} [{d.name}]")  # no counts: cases with the same bug group together
            names.append(d.name)
            counts[d.name] = count
    if not names:
        return None
    complete = all((covered[n] | ~m).all() for n, m in mismatch.items())
    return {"causes": causes, "names": names, "complete": complete, "stage": None, "explained": counts}


def _last_dim(spec, args, kwargs) -> int | None:
    from w8a8 import registry

    try:
        a = registry.get(spec.name).args(*args, **kwargs)
    except Exception:  # noqa: BLE001
        return None
    x = getattr(a, "x", None)
    return None if x is None or not np.ndim(x) else int(np.shape(x)[-1])


def explain_error(spec, args, kwargs, backend, exc_text: str) -> dict | None:
    """A detector's cause for a backend that raised where the golden returned, or None."""
    if spec.name in ("dynamic_quant", "w8a8_dynamic_linear") and exc_text.startswith("RuntimeError") and \
            _last_dim(spec, args, kwargs) == 1:
        return {"cause": "int8 path with K = 1 fails (torchao 0.18 Int8Tensor: RuntimeError reshaping a 1-wide "
                         "row; a crash, not numerics) [int8-k1]", "detectors": ["int8-k1"], "kind": "library bug",
                "reproduced": False, "explained": "the backend raised on the detector's condition (K = 1)",
                "first_stage": None}
    if spec.name == "mx_matmul" and exc_text.startswith("AssertionError"):
        from w8a8 import registry

        try:
            a = registry.get("mx_matmul").args(*args, **kwargs)
        except Exception:  # noqa: BLE001
            return None
        if a.b_elem_name == "e2m1" and a.b_data.shape[0] == 1:
            return {"cause": "torchao emulated MXFP4 mm with N = 1 fails assert b_hp.t().is_contiguous() (a crash, "
                             "not numerics) [mxfp4-mm-n1]", "detectors": ["mxfp4-mm-n1"], "kind": "library bug",
                    "reproduced": False, "explained": "the backend raised on the detector's condition (N = 1)",
                    "first_stage": None}
    return None
