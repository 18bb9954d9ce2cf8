"""Hypothesis building blocks for op parameters: sizes with the odd values kernels get wrong,
value distributions, seeds.

Sizes favour 1, 7, 17 and occasionally 1025 (and K beyond 4096 for GEMMs), because those are where
tiling, vector tails and exactness bounds break. Everything drawn here is a plain JSON value, so
a case is its parameter dict.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .values import COMMON_DISTRIBUTIONS, FINITE_DISTRIBUTIONS, FLOAT_DISTRIBUTIONS, INT8_DISTRIBUTIONS

ODD = (1, 7, 17)


def size(max_value: int = 64, *, big: tuple[int, ...] = (1025,), allow_zero: bool = False):
    """A dimension: mostly small (odd sizes first), sometimes one of ``big``."""
    low = 0 if allow_zero else 1
    parts = [st.sampled_from(ODD), st.integers(low, max_value)]
    if big:
        parts.append(st.sampled_from(big))
    if allow_zero:
        parts.insert(0, st.just(0))
    return st.one_of(*parts)


def multiple_of(m: int, max_multiple: int = 16, *, big: tuple[int, ...] = ()):
    parts = [st.integers(1, max_multiple).map(lambda k: k * m)]
    if big:
        parts.append(st.sampled_from(big))
    return st.one_of(*parts)


def seed():
    return st.integers(0, 2**32 - 1)


def float_dist(*, allow_nan: bool = True, edges: bool = True):
    """A float value distribution name. ``edges=False`` keeps away from dtype extremes/subnormals."""
    if not edges:
        return st.sampled_from(COMMON_DISTRIBUTIONS)
    return st.sampled_from(FLOAT_DISTRIBUTIONS if allow_nan else FINITE_DISTRIBUTIONS)


def int8_dist():
    return st.sampled_from(INT8_DISTRIBUTIONS)


def half_dtype():
    return st.sampled_from(("bfloat16", "float16"))


def lead_shape(max_rows: int = 48):
    """Leading (token) dims of an activation: [] | [M] | [B, M]."""
    return st.one_of(st.tuples(size(max_rows, big=())).map(list),
                     st.tuples(st.integers(1, 3), size(16, big=())).map(list))


def bit_dist():
    """A bit-level float distribution (:data:`conformance.values.BIT_DISTRIBUTIONS`) or plain gaussian."""
    from .values import BIT_DISTRIBUTIONS

    return st.sampled_from(("gaussian",) + BIT_DISTRIBUTIONS)
