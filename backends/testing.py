"""Helpers for testing a backend against the golden bit for bit (for this project's tests and for
anyone writing a backend):

    from backends.testing import BitwiseChecker
    check = BitwiseChecker(my_backend)          # the golden under my_backend's declared numerics
    check.same("quant_matmul", x1, x2, scale, output_dtype="bfloat16")   # same bits, or same error
    check.raises(ValueError, "'x2'", "quant_matmul", x1, bad_x2, scale)   # both refuse, identically
    for how, args, kwargs in bad_calls(valid_args, valid_kwargs):         # the error contract, sampled
        check.same("quant_matmul", *args, **kwargs)

"Same" means the same container (tuple / list / None), dtype, shape and bytes — NaN bit patterns
and signed zeros included — or, when the golden refuses the call, the same exception type and
message.
"""

from __future__ import annotations

import numpy as np

from .numpy_backend import NumpyBackend

_RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def outcome(backend, op: str, args: tuple, kwargs: dict):
    """``("ok", result)`` or ``("raise", type, message)``.

    Runs under ``np.errstate(all="ignore")``: a few golden paths let an fp32 overflow warn (which the
    project's suite turns into errors); the comparison is about the values.
    """
    try:
        with np.errstate(all="ignore"):
            return ("ok", backend.call(op, *args, **kwargs))
    except (ValueError, TypeError, OverflowError) as exc:
        return ("raise", type(exc), str(exc))


def _with_nan(v: np.ndarray):
    from w8a8 import dtypes as _dt

    if v.size == 0 or not _dt.is_float(v.dtype) or v.dtype.itemsize < 2:
        return None
    w = v.copy()
    w.reshape(-1)[0] = np.nan
    return w


def bad_calls(args: tuple, kwargs: dict):
    """``(how, args, kwargs)``: a valid call of an op broken one way at a time — each array argument as a
    list, as complex64, with an extra leading dimension, without its last dimension, with a NaN — and
    the call with an unknown keyword. A sample of the golden's refusals (some of them stay valid calls)."""
    slots = [(i, v) for i, v in enumerate(args)] + list(kwargs.items())
    for key, v in slots:
        if not isinstance(v, np.ndarray):
            continue
        for how, new in (("as a list", v.tolist()), ("complex64", v.astype(np.complex64)), ("extra dim", v[None]),
                         ("missing dim", v[..., 0] if v.ndim else None), ("a NaN", _with_nan(v))):
            if new is None:
                continue
            a2, k2 = list(args), dict(kwargs)
            if isinstance(key, int):
                a2[key] = new
            else:
                k2[key] = new
            yield f"{key} {how}", tuple(a2), k2
    yield "unknown keyword", args, {**kwargs, "no_such_argument": 1}


def assert_bits(got, want, what: str = "result", who: str = "backend") -> None:
    """Raise AssertionError unless ``got`` and ``want`` have the same container, dtype, shape and bytes."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{what}: {type(got)} vs {type(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_bits(g, w, f"{what}[{i}]", who)
        return
    if want is None:
        assert got is None, f"{what}: the golden returned None, {who} {type(got).__name__}"
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != golden {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != golden {want.shape}"
    raw = _RAW[got.dtype.itemsize]
    g = np.ascontiguousarray(got).reshape(-1).view(raw)
    w = np.ascontiguousarray(want).reshape(-1).view(raw)
    bad = np.flatnonzero(g != w)
    if bad.size:
        i = bad[0]
        raise AssertionError(f"{what}: {bad.size} of {g.size} elements differ; first at flat index {i}: "
                             f"{who} {got.reshape(-1)[i]!r} (0x{int(g[i]):x}) vs golden "
                             f"{want.reshape(-1)[i]!r} (0x{int(w[i]):x})")


class BitwiseChecker:
    """Compares one backend with the golden run under that backend's declared numerics."""

    def __init__(self, backend):
        self.backend = backend
        self.golden = NumpyBackend(numerics=backend.numerics)

    def same(self, op: str, *args, **kwargs):
        """The backend gives the golden's bits, or raises the golden's exception with its message.
        Returns the result (None when both raised)."""
        want = outcome(self.golden, op, args, kwargs)
        got = outcome(self.backend, op, args, kwargs)
        name = self.backend.name
        if want[0] == "raise":
            assert got[0] == "raise", f"{op}: the golden raised {want[1].__name__}: {want[2]}; {name} returned"
            assert got[1:] == want[1:], (f"{op}:\n {name} {got[1].__name__}: {got[2]}\n"
                                         f" golden {want[1].__name__}: {want[2]}")
            return None
        assert got[0] == "ok", f"{op}: {name} raised {got[1].__name__}: {got[2]}; the golden returned"
        assert_bits(got[1], want[1], op, name)
        return got[1]

    def raises(self, exc: type[Exception], match: str, op: str, *args, **kwargs) -> None:
        """The golden raises ``exc`` with a message matching ``match`` (a regex), and so does the
        backend, with the same message."""
        import re

        want = outcome(self.golden, op, args, kwargs)
        assert want[0] == "raise" and issubclass(want[1], exc) and re.search(match, want[2]), \
            f"{op}: the golden did not raise {exc.__name__} matching {match!r}: {want}"
        self.same(op, *args, **kwargs)


class ArrayFactory:
    """Seeded test arrays: ``i8(*shape)`` full-range int8, ``f32(*shape, lo, hi)`` uniform positive
    float32 (scale-like), ``bf16(*shape)`` standard normal rounded to bf16."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def i8(self, *shape):
        return self.rng.integers(-128, 128, size=shape, dtype=np.int8)

    def f32(self, *shape, lo=0.001, hi=0.02):
        return self.rng.uniform(lo, hi, size=shape).astype(np.float32)

    def bf16(self, *shape):
        import ml_dtypes

        return self.rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)


ADVERSARIAL_KINDS = ("gauss", "outlier", "ties", "zeros", "subnormal")


def adversarial_rows(rng: np.random.Generator, m: int, k: int, kind: str, dtype, *, tie_amax: float = 127.0
                     ) -> np.ndarray:
    """Rows ``[m, k]`` of ``dtype`` of one :data:`ADVERSARIAL_KINDS`: ``gauss`` (a random magnitude), ``outlier``
    (every fifth channel x100), ``ties`` (column 0 = ``tie_amax``, the others j + 0.5: with a unit scale every
    element is an exact .5 tie), ``zeros`` (every other row all zero), ``subnormal`` (bf16 subnormals)."""
    if kind == "ties":
        x = rng.integers(-127, 127, (m, k)).astype(np.float32) + np.float32(0.5)
        x[:, 0] = tie_amax
    elif kind == "zeros":
        x = rng.standard_normal((m, k)).astype(np.float32)
        x[::2] = 0
    elif kind == "subnormal":
        x = rng.integers(-50, 50, (m, k)).astype(np.float32) * np.float32(2.0 ** -133)
    elif kind == "outlier":
        x = rng.standard_normal((m, k)).astype(np.float32)
        x[:, :: max(k // 5, 1)] *= 100
    elif kind == "gauss":
        x = rng.standard_normal((m, k)).astype(np.float32) * np.float32(np.exp(rng.uniform(-3, 3)))
    else:
        raise ValueError(f"adversarial_rows: argument 'kind' must be one of {ADVERSARIAL_KINDS}; got {kind!r}")
    return x.astype(dtype)
