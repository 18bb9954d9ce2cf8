"""The torch-free tensor reader: every storage/rebuild variant bit for bit, hostile files refused."""

from __future__ import annotations

import io
import json
import pickle
import struct
import zipfile
import zlib

import ml_dtypes
import numpy as np
import pytest

from replay.pt_reader import DumpFormatError, crc32_of, interpret_pickle, read_npy, read_pt


def _bits(a: np.ndarray) -> list:
    return a.view({1: np.uint8, 2: np.uint16}[a.dtype.itemsize]).tolist()


def test_pt_variants_decode_bit_identically_to_expected(samples):
    expected = json.loads((samples.pt_variants / "expected.json").read_text())
    assert len(expected) == 7
    for name, want in expected.items():
        t = read_pt(samples.pt_variants / name)
        assert str(t.array.dtype) == want["dtype"], name
        assert list(t.array.shape) == want["shape"], name
        assert t.location == want["storage_location"], name
        assert t.rebuild == want["rebuild"], name
        assert t.archive_root + "/data.pkl" == want["archive_record"], name
        if "values_raw_bits" in want:
            assert _bits(t.array) == want["values_raw_bits"], name
        else:
            assert t.array.tolist() == want["values"], name


def test_npu_format_enum_is_read_not_called(samples):
    # torch_npu 2.7.1: _rebuild_npu_tensor(storage, offset, size, stride, requires_grad, hooks, Format.ND)
    # Format.ND is member 2; it is only read as an integer.
    t = read_pt(samples.pt_variants / "rebuild-npu-tensor.int8.pt")
    assert t.npu_format == 2 and t.array.dtype == np.int8 and t.array.shape == (4, 6)


def test_strided_view_keeps_offset_and_strides(samples):
    # the whole 24-element storage 0..23 is saved; the view starts at 1 with strides (6, 2):
    # rows 1+6i, columns +0 / +2 -> [[1, 3], [7, 9], [13, 15], [19, 21]]
    t = read_pt(samples.pt_variants / "cpu-strided-view.f32.pt")
    assert t.array.tolist() == [[1, 3], [7, 9], [13, 15], [19, 21]]
    assert t.array.flags.c_contiguous


def test_same_as_torch_load_where_torch_can_load(samples):
    torch = pytest.importorskip("torch")
    for path in sorted(samples.pt_variants.glob("*.pt")):
        ours = read_pt(path).array
        try:
            theirs = torch.load(path, weights_only=True, map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - torch refuses torch_npu 2.7.1's rebuild function
            assert "rebuild-npu-tensor" in path.name and "_rebuild_npu_tensor" in str(exc)
            continue
        raw = theirs.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if theirs.numel() else b""
        assert tuple(theirs.shape) == ours.shape, path.name
        assert raw == np.ascontiguousarray(ours).tobytes(), path.name


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int8", "int32", "int64", "bool",
                                   "float8_e4m3fn", "float8_e5m2", "uint8"])
@pytest.mark.parametrize("shape", [(), (1,), (7,), (17, 3), (0, 4), (1025,)])
def test_torch_save_round_trip(tmp_path, dtype, shape):
    """Files written by torch.save itself, every dtype msprobe dumps, odd sizes, 0-d and empty."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(hash((dtype, shape)) & 0xFFFF)
    t = (torch.randn(shape, generator=g) * 50).to(getattr(torch, dtype)) if dtype != "bool" else \
        torch.randn(shape, generator=g) > 0
    path = tmp_path / "t.pt"
    torch.save(t.clone().contiguous(), path)
    a = read_pt(path).array
    assert a.shape == tuple(shape)
    raw = t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    assert np.ascontiguousarray(a).tobytes() == raw
    want_dtype = {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
                  "float8_e5m2": ml_dtypes.float8_e5m2}.get(dtype, dtype)
    assert a.dtype == np.dtype(want_dtype)


def test_torch_saved_transposed_view(tmp_path):
    torch = pytest.importorskip("torch")
    base = torch.arange(12, dtype=torch.int8).reshape(3, 4)
    torch.save(base.t(), tmp_path / "t.pt")          # a view: the storage plus strides (1, 4)
    assert read_pt(tmp_path / "t.pt").array.tolist() == base.t().tolist()


# ------------------------------------------------------------------------------------------------
# hostile files: built here, never shipped


def _archive(path, pkl: bytes, *, data: bytes = b"", root: str = "archive", extra: dict | None = None):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(f"{root}/data.pkl", pkl)
        z.writestr(f"{root}/byteorder", "little")
        z.writestr(f"{root}/data/0", data)
        for name, content in (extra or {}).items():
            z.writestr(name, content)
    return path


class _Call:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def test_pickle_calling_os_system_is_refused_without_side_effect(tmp_path):
    import os

    marker = tmp_path / "pwned"
    pkl = pickle.dumps(_Call(os.system, f"touch {marker}"), protocol=2)
    path = _archive(tmp_path / "evil.pt", pkl)
    with pytest.raises(DumpFormatError) as info:
        read_pt(path)
    msg = str(info.value)
    assert "evil.pt" in msg and "GLOBAL" in msg and ("os.system" in msg or "posix.system" in msg)
    assert not marker.exists()


def test_reduce_of_an_arbitrary_global_is_refused(tmp_path):
    import builtins

    pkl = pickle.dumps(_Call(builtins.eval, "__import__('os').getcwd()"), protocol=4)  # STACK_GLOBAL in protocol 4
    with pytest.raises(DumpFormatError, match=r"builtins\.eval"):
        read_pt(_archive(tmp_path / "eval.pt", pkl))


@pytest.mark.parametrize("opcode, pkl", [
    ("BUILD", b"\x80\x02ccollections\nOrderedDict\n)R}b."),          # OrderedDict() then BUILD with a dict
    ("INST", b"(icollections\nOrderedDict\n."),
    ("NEWOBJ", b"\x80\x02ccollections\nOrderedDict\n)\x81."),
    ("EXT1", b"\x80\x02\x82\x01."),
])
def test_object_building_opcodes_are_refused(tmp_path, opcode, pkl):
    with pytest.raises(DumpFormatError, match=opcode):
        read_pt(_archive(tmp_path / "op.pt", pkl))


def test_calling_a_storage_or_dtype_token_is_refused():
    # torch.FloatStorage() called through REDUCE: a storage name is only data, never callable
    with pytest.raises(DumpFormatError, match="FloatStorage"):
        interpret_pickle(b"\x80\x02ctorch\nFloatStorage\n)R.")


def test_root_that_is_not_a_tensor_is_refused(tmp_path):
    with pytest.raises(DumpFormatError, match="not a rebuilt tensor"):
        read_pt(_archive(tmp_path / "dict.pt", pickle.dumps({"a": 1}, protocol=2)))


def _v2_pickle(numel: int, size, stride, offset=0, storage="FloatStorage") -> bytes:
    # the opcodes torch.save writes for _rebuild_tensor_v2 (see pt-variants/cpu-strided-view.f32.pt)
    def tup(xs):
        return b"(" + b"".join(b"K" + bytes([x]) for x in xs) + b"t"
    return (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\n" + storage.encode() +
            b"\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK" + bytes([numel]) + b"tQK" + bytes([offset]) + tup(size) +
            tup(stride) + b"\x89ccollections\nOrderedDict\n)RtR.")


def test_hand_built_v2_pickle_reads(tmp_path):
    data = np.arange(6, dtype=np.float32).tobytes()
    t = read_pt(_archive(tmp_path / "ok.pt", _v2_pickle(6, (2, 3), (3, 1)), data=data))
    assert t.array.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_view_outside_its_storage_is_refused(tmp_path):
    data = np.arange(6, dtype=np.float32).tobytes()
    with pytest.raises(DumpFormatError, match="past the storage"):
        read_pt(_archive(tmp_path / "oob.pt", _v2_pickle(6, (2, 3), (4, 1)), data=data))   # last = 4 + 2 = 6 >= 6


def test_storage_shorter_than_its_numel_is_refused(tmp_path):
    data = np.arange(5, dtype=np.float32).tobytes()
    with pytest.raises(DumpFormatError, match="truncated or altered"):
        read_pt(_archive(tmp_path / "short.pt", _v2_pickle(6, (6,), (1,)), data=data))


def test_big_endian_files_are_refused(tmp_path):
    path = tmp_path / "be.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a/data.pkl", _v2_pickle(1, (1,), (1,)))
        z.writestr("a/byteorder", "big")
        z.writestr("a/data/0", b"\0\0\0\0")
    with pytest.raises(DumpFormatError, match="byteorder"):
        read_pt(path)


def test_member_escaping_the_archive_is_refused(tmp_path):
    path = _archive(tmp_path / "dots.pt", _v2_pickle(1, (1,), (1,)), data=b"\0" * 4, extra={"a/../../x": b""})
    with pytest.raises(DumpFormatError, match="escapes"):
        read_pt(path)


def test_oversized_pickle_is_refused(tmp_path):
    with pytest.raises(DumpFormatError, match="data.pkl is"):
        read_pt(_archive(tmp_path / "big.pt", b"\x80\x02" + b"N0" * (1 << 19) + b"N."))


def test_truncated_file_is_refused(samples, tmp_path):
    src = (samples.tensor / "step0/rank0/dump_tensor_data/NPU.npu_swiglu.0.forward.input.0.pt").read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(src[: len(src) // 2])
    with pytest.raises(DumpFormatError):
        read_pt(cut)


def test_altered_storage_bytes_fail_the_zip_crc(samples, tmp_path):
    raw = bytearray((samples.pt_variants / "cpu-strided-view.f32.pt").read_bytes())
    member = zipfile.ZipFile(io.BytesIO(bytes(raw))).getinfo("plain.strided/data/0")
    name_len, extra_len = struct.unpack("<HH", bytes(raw[member.header_offset + 26: member.header_offset + 30]))
    start = member.header_offset + 30 + name_len + extra_len      # torch pads the local header for alignment
    raw[start] ^= 0x01
    path = tmp_path / "flipped.pt"
    path.write_bytes(bytes(raw))
    with pytest.raises(DumpFormatError, match="CRC-32"):
        read_pt(path)


def test_npy_without_pickle(tmp_path):
    np.save(tmp_path / "ok.npy", np.arange(5, dtype=np.int8))
    assert read_npy(tmp_path / "ok.npy").tolist() == [0, 1, 2, 3, 4]
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DumpFormatError, match="obj.npy"):
        read_npy(tmp_path / "obj.npy")


def test_crc32_is_msprobes_md5_field():
    a = np.arange(-8, 8, dtype=np.int8).reshape(4, 4)
    assert crc32_of(a) == f"{zlib.crc32(a.tobytes()):08x}"
    assert crc32_of(a.T) == f"{zlib.crc32(np.ascontiguousarray(a.T).tobytes()):08x}"   # C-contiguous bytes


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_pickle_bytes_only_ever_give_dump_format_error(data):
    """Fuzz: whatever the bytes, the interpreter returns data or raises DumpFormatError; nothing else runs."""
    try:
        interpret_pickle(b"\x80\x02" + data)
    except DumpFormatError:
        pass


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
def test_saved_views_of_any_layout(tmp_path_factory, dims, data):
    """torch.save of a permuted / sliced view (storage + offset + strides) decodes to the view's values."""
    torch = pytest.importorskip("torch")
    base = torch.arange(int(np.prod(dims)) * 2, dtype=torch.float32).reshape(*dims[:-1], dims[-1] * 2)
    perm = data.draw(st.permutations(range(len(dims))))
    view = base[..., data.draw(st.integers(0, 1))::2].permute(*perm)
    path = tmp_path_factory.mktemp("v") / "v.pt"
    torch.save(view, path)
    assert read_pt(path).array.tolist() == view.tolist()


@pytest.mark.parametrize("pkl", [
    b"\x80\x02(](tK\x01d.",            # DICT with a list as key
    b"\x80\x02}(]K\x01u.",             # SETITEMS with a list as key
    b"\x80\x02((]tK\x01d.",            # a tuple holding a list as key
])
def test_unhashable_keys_are_format_errors(pkl):
    with pytest.raises(DumpFormatError, match="key"):
        interpret_pickle(pkl)


def test_xor_checksum_is_msprobes_xor_mode():
    from replay.pt_reader import checksum_like, xor64_of

    a = np.arange(11, dtype=np.uint8)          # 8 bytes + 3 bytes zero-padded to a second word
    words = np.frombuffer(a.tobytes() + b"\0" * 5, dtype="<u8")
    assert xor64_of(a) == f"0x{int(words[0] ^ words[1]):016x}"
    assert checksum_like("0x" + "0" * 16, a) == xor64_of(a) and checksum_like("9ff3f7b9", a) == crc32_of(a)
    assert checksum_like("not a checksum", a) is None
