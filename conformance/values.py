"""Value distributions for generated inputs: deterministic from a seed, named, and aimed at the
places where kernels go wrong.

A case draws its shape and parameters first (Hypothesis shrinks those) and then its data from a
NumPy generator seeded by the case's ``seed`` with one of the named distributions below, so a case
is reproducible from its JSON parameters alone.

Float distributions (``float_tensor``):

* ``gaussian`` — N(0, 1) times a per-case magnitude (log-uniform 1e-3 .. 1e3).
* ``outlier_channels`` — Gaussian with a few channels (last-dim columns) 100x the median: LLM
  activations look like this, and per-token scales are set by those channels.
* ``heavy_tailed`` — Student-t with 2 degrees of freedom.
* ``zero_rows`` — Gaussian with some whole rows set to zero (the ``0 * inf`` path of dynamic quant).
* ``single_huge`` — Gaussian with one element 10^4 times larger.
* ``ties`` — rows whose values land exactly on .5 ties of the per-row quantization
  ``x * 127 / amax``: amax = 127 * 2^e and the others (k + 0.5) * 2^e, all exactly representable
  in bf16/fp16, so rounding mode decides every code.
* ``extremes`` — magnitudes near the dtype's largest finite value.
* ``subnormal`` — magnitudes in the dtype's subnormal range.
* ``nan_inf`` — Gaussian with NaN / +-Inf injected: inputs the golden refuses by default.

Bit-level float distributions (``BIT_DISTRIBUTIONS``; the ``bits`` strategies of the declarations
draw them, the main strategies do not):

* ``bit_patterns`` — random finite bit patterns of the dtype: subnormals, huge values, signed zeros.
* ``fp32_subnormal`` — N(0, 1) * 1e-39: fp32 subnormals and the smallest normals (bf16 keeps them,
  fp16 flushes them to zero).
* ``one_nonzero`` — all zeros but one element in {0, -0, 1.5, -3}.
* ``half_integers`` — k / 2 for k in [-254, 254], times one power of two in [2^-6, 2^5]: integers and
  exact .5 ties in every float dtype.

Integers: ``int8_tensor`` (named distributions) and ``int_tensor`` (any integer dtype, full range
or small values). Literal arrays of documented cases: ``literal``.
"""

from __future__ import annotations

import numpy as np

FLOAT_DISTRIBUTIONS = ("gaussian", "outlier_channels", "heavy_tailed", "zero_rows", "single_huge", "ties",
                       "extremes", "subnormal", "nan_inf")
FINITE_DISTRIBUTIONS = tuple(d for d in FLOAT_DISTRIBUTIONS if d != "nan_inf")
"""The distributions that produce finite inputs (what every op accepts)."""
COMMON_DISTRIBUTIONS = ("gaussian", "outlier_channels", "heavy_tailed", "zero_rows", "single_huge", "ties")
"""Finite and away from the dtype's edges: for ops whose intermediates would overflow otherwise."""

BIT_DISTRIBUTIONS = ("bit_patterns", "fp32_subnormal", "one_nonzero", "half_integers")
"""Distributions aimed at bit-level paths (see the module docstring); finite, every dtype."""

INT8_DISTRIBUTIONS = ("uniform", "small", "extreme_neg", "extreme_pos", "sparse")


def rng_for(seed: int, salt: int = 0) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, salt])


def _finfo(dtype):
    import ml_dtypes

    return ml_dtypes.finfo(dtype) if np.dtype(dtype).kind == "V" else np.finfo(dtype)


def float_tensor(rng: np.random.Generator, shape: tuple[int, ...], dtype, dist: str = "gaussian") -> np.ndarray:
    """A float array of ``shape`` and ``dtype`` (bf16 / fp16 / fp32) drawn from ``dist``."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if dist in BIT_DISTRIBUTIONS:
        return _bit_level(rng, shape, dtype, dist)
    size = int(np.prod(shape)) if shape else 1
    info = _finfo(dtype)
    magnitude = 10.0 ** rng.uniform(-3, 3)
    base = rng.standard_normal(shape) * magnitude
    if dist == "gaussian" or size == 0:
        x = base
    elif dist == "outlier_channels":
        x = base
        if shape and shape[-1] > 1:
            cols = rng.choice(shape[-1], size=max(1, shape[-1] // 16), replace=False)
            x[..., cols] *= 100.0
    elif dist == "heavy_tailed":
        x = rng.standard_t(2, size=shape) * magnitude
    elif dist == "zero_rows":
        x = base
        if len(shape) >= 1:
            rows = x.reshape(-1, shape[-1]) if shape[-1] else x.reshape(-1, 0)
            n = rows.shape[0]
            zero = rng.random(n) < 0.5
            if n:
                zero[rng.integers(n)] = True
            rows[zero] = 0.0
            x = rows.reshape(shape)
    elif dist == "single_huge":
        x = base
        x.flat[rng.integers(size)] = magnitude * 1e4 * rng.choice([-1.0, 1.0])
    elif dist == "ties":
        x = _ties(rng, shape)
    elif dist == "extremes":
        top = float(info.max)
        x = rng.uniform(0.25, 1.0, size=shape) * top * rng.choice([-1.0, 1.0], size=shape)
    elif dist == "subnormal":
        tiny = float(info.smallest_normal)
        sub = float(info.smallest_subnormal)
        x = rng.uniform(sub, tiny, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    elif dist == "nan_inf":
        x = base
        k = max(1, size // 50)
        idx = rng.choice(size, size=min(k, size), replace=False)
        x.flat[idx] = rng.choice([np.nan, np.inf, -np.inf], size=idx.size)
    else:
        raise ValueError(f"float_tensor: argument 'dist' must be one of {FLOAT_DISTRIBUTIONS}; got {dist!r}")
    with np.errstate(over="ignore"):
        x32 = np.clip(x, -float(info.max), float(info.max)).astype(np.float32) if dist != "nan_inf" \
            else x.astype(np.float32)
    return x32.astype(dtype)


def _bit_level(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, dist: str) -> np.ndarray:
    """The ``BIT_DISTRIBUTIONS`` (see the module docstring): finite values of ``dtype``."""
    if dist == "bit_patterns":
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32}[dtype.itemsize]
        raw = rng.integers(0, np.iinfo(width).max, shape, dtype=np.uint64, endpoint=True).astype(width)
        out = raw.view(dtype)
        with np.errstate(invalid="ignore"):
            out[~np.isfinite(out.astype(np.float32))] = 0
        return out
    if dist == "fp32_subnormal":
        v = rng.standard_normal(shape) * 1e-39
    elif dist == "one_nonzero":
        v = np.zeros(shape)
        if v.size:
            v.reshape(-1)[rng.integers(0, v.size)] = rng.choice([0.0, -0.0, 1.5, -3.0])
    else:  # half_integers
        v = (rng.integers(-254, 255, shape) / 2.0) * 2.0 ** int(rng.integers(-6, 6))
    with np.errstate(over="ignore"):
        out = v.astype(np.float32).astype(dtype)
    return np.where(np.isfinite(out.astype(np.float32)), out, 0).astype(dtype)


def _ties(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Rows on exact .5 ties of ``x * 127 / amax`` (see the module docstring)."""
    if not shape or shape[-1] == 0:
        return np.zeros(shape)
    h = shape[-1]
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    e = rng.integers(-8, 4, size=(rows, 1)).astype(np.float64)
    k = rng.integers(-126, 126, size=(rows, h)).astype(np.float64) + 0.5
    x = k * 2.0 ** e
    pos = rng.integers(h, size=rows)
    x[np.arange(rows), pos] = 127.0 * 2.0 ** e[:, 0] * rng.choice([-1.0, 1.0], size=rows)
    return x.reshape(shape)


def int8_tensor(rng: np.random.Generator, shape: tuple[int, ...], dist: str = "uniform") -> np.ndarray:
    """An int8 array: ``uniform`` [-128, 127], ``small`` [-8, 7], ``extreme_neg`` all -128,
    ``extreme_pos`` all 127, ``sparse`` mostly 0."""
    shape = tuple(int(s) for s in shape)
    if dist == "uniform":
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    if dist == "small":
        return rng.integers(-8, 8, size=shape, dtype=np.int8)
    if dist == "extreme_neg":
        return np.full(shape, -128, dtype=np.int8)
    if dist == "extreme_pos":
        return np.full(shape, 127, dtype=np.int8)
    if dist == "sparse":
        x = rng.integers(-128, 128, size=shape, dtype=np.int8)
        x[rng.random(shape) < 0.9] = 0
        return x
    raise ValueError(f"int8_tensor: argument 'dist' must be one of {INT8_DISTRIBUTIONS}; got {dist!r}")


def positive_scales(rng: np.random.Generator, shape: tuple[int, ...], dtype=np.float32, *,
                    low: float = 1e-4, high: float = 1e-1) -> np.ndarray:
    """Log-uniform positive scales with random low mantissa bits (so FP19 / bf16 rounding shows)."""
    v = np.exp(rng.uniform(np.log(low), np.log(high), size=shape)).astype(np.float32)
    return v.astype(dtype)



def int_tensor(rng: np.random.Generator, shape: tuple[int, ...], dtype, *, full: bool = True) -> np.ndarray:
    """An integer array of ``dtype``: its whole range (``full``), or values in [-20, 20] clipped to it."""
    info = np.iinfo(dtype)
    lo, hi = (info.min, info.max) if full else (max(info.min, -20), min(info.max, 20))
    return rng.integers(lo, hi, tuple(int(s) for s in shape), endpoint=True).astype(dtype)


def literal(values, dtype) -> np.ndarray:
    """A documented case's array: ``values`` (exactly representable) as ``dtype``; floats go through
    float32, so a bf16 / fp16 literal is the rounding of its fp32 value."""
    if np.dtype(dtype).kind in "fV":
        return np.asarray(values, dtype=np.float64).astype(np.float32).astype(dtype)
    return np.asarray(values, dtype=dtype)
