"""Ascend int4 packing (w8a8/int4.py): 8 signed nibbles per int32, least significant first.

Layout (op-plugin ``test_npu_dynamic_quant.py::convert_int4_to_int8``): element 8j + i of the last dim sits in bits [4i, 4i + 3] of
word j, as 4-bit two's complement; as little-endian bytes, element 2i is the low nibble of byte i.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from w8a8 import pack_int4, unpack_int4


def _u32(word):
    return int(np.array(word, np.int32).view(np.uint32))


@pytest.mark.parametrize("codes, word", [
    # 1, -1, 2, -2, 3, -3, 4, -4 -> nibbles 1, F, 2, E, 3, D, 4, C from bit 0 up -> 0xC4D3E2F1
    ([1, -1, 2, -2, 3, -3, 4, -4], 0xC4D3E2F1),
    ([0, 1, 2, 3, 4, 5, 6, 7], 0x76543210),
    ([-8] * 8, 0x88888888),          # -8 = 0b1000
    ([7] * 8, 0x77777777),
    ([-1] + [0] * 7, 0x0000000F),    # element 0 is the lowest nibble
    ([0] * 7 + [-1], 0xF0000000),    # element 7 the highest
])
def test_known_words(codes, word):
    w = pack_int4(np.array([codes], np.int8))
    assert w.dtype == np.int32 and w.shape == (1, 1)
    assert _u32(w[0, 0]) == word
    assert unpack_int4(w).tolist() == [codes]


def test_word_as_int32_and_bytes():
    w = pack_int4(np.array([1, -1, 2, -2, 3, -3, 4, -4], np.int8))
    assert w.tolist() == [0xC4D3E2F1 - 2**32]          # -992746767 as a signed int32
    b = w.view(np.uint8)                               # little-endian bytes F1 E2 D3 C4
    assert b.tolist() == [0xF1, 0xE2, 0xD3, 0xC4]
    assert (b[0] & 0xF, b[0] >> 4) == (0x1, 0xF)       # element 0 low nibble, element 1 high nibble


def test_multi_dim_and_uint32_words():
    codes = np.arange(2 * 3 * 16).reshape(2, 3, 16) % 16 - 8
    w = pack_int4(codes.astype(np.int64))
    assert w.shape == (2, 3, 2)
    assert np.array_equal(unpack_int4(w), codes)
    assert np.array_equal(unpack_int4(w.view(np.uint32)), codes)
    assert unpack_int4(w).dtype == np.int8
    assert pack_int4(np.zeros((3, 0), np.int8)).shape == (3, 0)


def test_non_contiguous_inputs():
    codes = (np.arange(16 * 4).reshape(16, 4) % 16 - 8).astype(np.int8)
    view = codes.T                                    # [4, 16], non-contiguous
    assert np.array_equal(pack_int4(view), pack_int4(np.ascontiguousarray(view)))
    w = pack_int4(np.ascontiguousarray(view))
    assert np.array_equal(unpack_int4(w[:, ::-1]), unpack_int4(np.ascontiguousarray(w[:, ::-1])))


def test_errors():
    with pytest.raises(ValueError, match="'codes'.*multiple of 8"):
        pack_int4(np.zeros((2, 12), np.int8))
    with pytest.raises(ValueError, match=r"'codes'.*\[-8, 7\]"):
        pack_int4(np.array([0] * 7 + [8], np.int8))
    with pytest.raises(ValueError, match="'codes'"):
        pack_int4(np.array([-9] + [0] * 7, np.int32))
    with pytest.raises(TypeError, match="'codes'"):
        pack_int4(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="'codes'"):
        pack_int4(np.zeros((), np.int8))
    with pytest.raises(TypeError, match="'words'"):
        unpack_int4(np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="'words'"):
        unpack_int4([1, 2])


@given(hnp.arrays(np.int8, st.tuples(st.integers(0, 4), st.integers(0, 5).map(lambda n: 8 * n)),
                  elements=st.integers(-8, 7)))
def test_round_trip(codes):
    w = pack_int4(codes)
    assert w.shape == codes.shape[:-1] + (codes.shape[-1] // 8,)
    assert np.array_equal(unpack_int4(w), codes)
    # every nibble, read back from the word by shifting, is the code (independent decode)
    u = w.view(np.uint32).astype(np.int64)
    for i in range(8):
        nib = (u >> (4 * i)) & 0xF
        assert np.array_equal(np.where(nib >= 8, nib - 16, nib), codes[..., i::8])


@given(hnp.arrays(np.int32, st.integers(0, 6)))
def test_unpack_pack_round_trip(words):
    assert np.array_equal(pack_int4(unpack_int4(words)), words)
