"""INT4 packing layouts against hand-packed words (w8a8.lowbit.packing)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from w8a8 import pack_int4
from w8a8.lowbit import (convert_weight_to_int4pack, from_uint4b8, pack_gptq_qzeros, pack_int4_awq,
                         pack_int4_compressed_tensors, pack_int4_gptq, pack_int4_moe_wna16, pack_int4_msmodelslim,
                         pack_nibbles, to_uint4b8, unpack_gptq_qzeros, unpack_int4_awq,
                         unpack_int4_compressed_tensors, unpack_int4_gptq, unpack_int4_moe_wna16,
                         unpack_int4_msmodelslim, unpack_nibbles)


def words(*hexes):
    """int32 words from their hex spelling (the bit pattern, read as two's complement)."""
    return np.array(hexes, np.uint32).view(np.int32)


def test_gptq_qweight_along_k_in_order():
    # weight [N=2, K=8]; word [k//8, n] holds k = 0..7 from bit 0 up
    u = np.array([[1, 2, 3, 4, 5, 6, 7, 8],
                  [0xF, 0, 0, 0, 0, 0, 0, 0xA]], np.uint8)
    qweight = pack_int4_gptq(u)
    # column n=0: nibbles 1..8 from bit 0 -> 0x87654321; n=1: F at bits 0-3, A at bits 28-31
    np.testing.assert_array_equal(qweight, words(0x87654321, 0xA000000F).reshape(1, 2))
    np.testing.assert_array_equal(unpack_int4_gptq(qweight), u)


def test_gptq_qzeros_v1_stores_z_minus_one():
    z = np.full((8, 1), 8, np.uint8)  # the symmetric zero point 8 for N = 8 columns, one group
    # v1 stores 8 - 1 = 7 in every nibble, gptq_v2 the true 8
    np.testing.assert_array_equal(pack_gptq_qzeros(z), words(0x77777777).reshape(1, 1))
    np.testing.assert_array_equal(pack_gptq_qzeros(z, checkpoint_format="gptq_v2"), words(0x88888888).reshape(1, 1))
    z = np.arange(8, dtype=np.uint8).reshape(8, 1)
    # v1: z - 1 mod 16 = F, 0, 1, ..., 6 for n = 0..7 (along N, in order) -> 0x6543210F
    packed = pack_gptq_qzeros(z)
    np.testing.assert_array_equal(packed, words(0x6543210F).reshape(1, 1))
    np.testing.assert_array_equal(unpack_gptq_qzeros(packed), z)


def test_awq_interleaved_along_n():
    u = np.arange(1, 9, dtype=np.uint8).reshape(1, 8)  # column c holds c + 1
    # slot i holds column [0, 2, 4, 6, 1, 3, 5, 7][i]: slots = 1, 3, 5, 7, 2, 4, 6, 8 -> 0x86427531
    qweight = pack_int4_awq(u)
    np.testing.assert_array_equal(qweight, words(0x86427531).reshape(1, 1))
    np.testing.assert_array_equal(unpack_int4_awq(qweight), u)
    # reading column c at bits 4 * [0, 4, 1, 5, 2, 6, 3, 7][c] (vLLM's AWQ reverse order) agrees
    shifts = 4 * np.array([0, 4, 1, 5, 2, 6, 3, 7], np.uint32)
    np.testing.assert_array_equal((qweight.view(np.uint32)[0, 0] >> shifts) & 0xF, u[0])


def test_compressed_tensors_offset_binary_along_k_with_padding():
    q = np.array([[-7, -6, -5, -4, -3, -2, -1, 0, 1, 2]], np.int8)  # K = 10 signed codes
    u = to_uint4b8(q)  # stored as q + 8: 1, 2, ..., 10
    packed = pack_int4_compressed_tensors(u)
    # first word: 1..8 -> 0x87654321; second: 9, 0xA, then six zero pad nibbles -> 0x000000A9
    np.testing.assert_array_equal(packed, words(0x87654321, 0x000000A9).reshape(1, 2))
    np.testing.assert_array_equal(from_uint4b8(unpack_int4_compressed_tensors(packed, 10)), q)


def test_compressed_tensors_zero_point_along_dim0():
    z = np.arange(1, 10, dtype=np.uint8).reshape(9, 1)  # N = 9 zero points, G = 1
    # weight_zero_point [ceil(9/8), 1]: 1..8 -> 0x87654321, then 9 and padding -> 0x00000009
    packed = pack_int4_compressed_tensors(z, axis=0)
    np.testing.assert_array_equal(packed, words(0x87654321, 0x00000009).reshape(2, 1))
    np.testing.assert_array_equal(unpack_int4_compressed_tensors(packed, 9, axis=0), z)


def test_moe_wna16_bytes_low_nibble_even_k():
    u = np.array([[[1, 2, 3, 4]]], np.uint8)  # [E=1, N=1, K=4]
    packed = pack_int4_moe_wna16(u)
    np.testing.assert_array_equal(packed, [[[0x21, 0x43]]])  # byte k//2, even k in the low nibble
    np.testing.assert_array_equal(unpack_int4_moe_wna16(packed), u)
    # the same bytes are what a GPTQ int32 word is when viewed as little-endian uint8
    # (vLLM's loader: transpose qweight, then view int32 as uint8)
    gptq = pack_int4_gptq(np.arange(8, dtype=np.uint8).reshape(1, 8))  # 0x76543210
    wna16 = pack_int4_moe_wna16(np.arange(8, dtype=np.uint8).reshape(1, 8))  # [0x10, 0x32, 0x54, 0x76]
    np.testing.assert_array_equal(gptq.T.copy().view(np.uint8), wna16)


def test_msmodelslim_pairs_along_n():
    codes = np.array([[1], [-1], [7], [-8]], np.int8)  # [N=4, K=1]
    packed = pack_int4_msmodelslim(codes)
    # rows (0, 1) -> 0xF1 (1 low, -1 = F high) = -15 as int8; rows (2, 3) -> 0x87 (7 low, -8 = 8 high) = -121
    np.testing.assert_array_equal(packed, np.array([[-15], [-121]], np.int8))
    np.testing.assert_array_equal(unpack_int4_msmodelslim(packed), codes)
    # transposed and viewed as int32 it is the Ascend LSB-first layout along N
    codes8 = np.array([[1], [-1], [2], [-2], [3], [-3], [4], [-4]], np.int8)
    as_words = pack_int4_msmodelslim(codes8).T.copy().view(np.int32)
    np.testing.assert_array_equal(as_words, pack_int4(codes8.T))


def test_ascend_convert_weight_to_int4pack():
    w = np.array([[1, -1, 2, -2, 3, -3, 4, -4]], np.int32)
    # two's complement nibbles 1, F, 2, E, 3, D, 4, C from bit 0 -> 0xC4D3E2F1
    np.testing.assert_array_equal(convert_weight_to_int4pack(w), words(0xC4D3E2F1).reshape(1, 1))


def test_uint4b8_differs_from_twos_complement_in_the_top_bit_only():
    q = np.arange(-8, 8, dtype=np.int8)
    np.testing.assert_array_equal(to_uint4b8(q), (q & 0xF).astype(np.uint8) ^ 0x8)


layouts = st.sampled_from(["int32", "uint8"])


@given(st.data())
def test_pack_nibbles_round_trip_any_axis_and_order(data):
    container = data.draw(layouts)
    per = 8 if container == "int32" else 2
    shape = data.draw(st.tuples(st.integers(1, 3), st.integers(0, 3).map(lambda n: per * n)))
    u = data.draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, 15)))
    order = data.draw(st.permutations(range(per)))
    packed = pack_nibbles(u, axis=1, container=container, order=order)
    assert packed.shape == (shape[0], shape[1] // per)
    np.testing.assert_array_equal(unpack_nibbles(packed, axis=1, order=order), u)


def test_bad_inputs_name_the_argument():
    with pytest.raises(TypeError, match="'nibbles'.*to_uint4b8"):
        pack_int4_gptq(np.zeros((2, 8), np.int8))
    with pytest.raises(ValueError, match="'nibbles'.*0, 15"):
        pack_int4_gptq(np.full((2, 8), 16, np.uint8))
    with pytest.raises(ValueError, match="'nibbles'.*multiple of 8"):
        pack_int4_gptq(np.zeros((2, 7), np.uint8))
    with pytest.raises(ValueError, match="'checkpoint_format'"):
        pack_gptq_qzeros(np.zeros((8, 1), np.uint8), checkpoint_format="gptq_v3")
    with pytest.raises(ValueError, match="'order'"):
        pack_nibbles(np.zeros(8, np.uint8), order=[0, 0, 1, 2, 3, 4, 5, 6])
    with pytest.raises(ValueError, match="'container'"):
        pack_nibbles(np.zeros(8, np.uint8), container="int16")
    with pytest.raises(ValueError, match="'size'"):
        unpack_int4_compressed_tensors(np.zeros((1, 2), np.int32), 17)
    with pytest.raises(ValueError, match="'weight'.*-8, 7"):
        convert_weight_to_int4pack(np.full((1, 8), 8, np.int32))
    with pytest.raises(ValueError, match="'weight'.*multiple of 8"):
        convert_weight_to_int4pack(np.zeros((1, 4), np.int32))
    with pytest.raises(ValueError, match="'q'"):
        to_uint4b8(np.array([9], np.int8))
