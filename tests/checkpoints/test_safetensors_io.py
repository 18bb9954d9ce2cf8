"""The safetensors container (checkpoints/safetensors_io.py).

Independent checks: files written here are read back by the ``safetensors`` library itself, and
files the library writes are read here; every dtype round-trips bit for bit (compared as raw
unsigned integers, so NaN payloads and -0.0 count).
"""

import json
import struct

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

from checkpoints.safetensors_io import (DTYPES, MappedFile, SafetensorsError, read_header, write_file)

safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402


def raw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 256, size=(int(np.prod(shape)) * np.dtype(dtype).itemsize,), dtype=np.uint8)
    return bits.view(dtype).reshape(shape)   # every bit pattern, NaNs included


@pytest.mark.parametrize("st_name", sorted(DTYPES))
def test_every_dtype_round_trips_bit_exactly(tmp_path, st_name):
    dtype = DTYPES[st_name]
    tensors = {"a": sample(dtype, (3, 5)), "b.weight": sample(dtype, (7,), 1), "empty": np.zeros((0, 4), dtype)}
    write_file(tmp_path / "x.safetensors", tensors)
    f = MappedFile(tmp_path / "x.safetensors")
    for name, a in tensors.items():
        got = f.tensor(name)
        assert got.dtype == dtype and got.shape == a.shape
        assert np.array_equal(raw(got), raw(a))
        assert f.entries[name].st_dtype == st_name


def test_library_reads_our_files(tmp_path):
    # bf16 1.5 is 0x3FC0; int64 -1 is all ones; the library must agree on names, dtypes, shapes, bytes.
    tensors = {"w": np.array([[1, -2], [3, 127]], np.int8), "s": np.array([1.5, -0.0], ml_dtypes.bfloat16),
               "d": np.array([-1, 2**40], np.int64), "f": np.array([[0.25]], np.float32)}
    write_file(tmp_path / "x.safetensors", tensors, metadata={"format": "pt"})
    with safe_open(str(tmp_path / "x.safetensors"), framework="numpy") as f:
        assert sorted(f.keys()) == sorted(tensors)
        assert f.metadata() == {"format": "pt"}
        for name in ("w", "d", "f"):
            assert np.array_equal(f.get_tensor(name), tensors[name])
        assert f.get_slice("s").get_dtype() == "BF16"
    assert raw(MappedFile(tmp_path / "x.safetensors").tensor("s")).tolist() == [0x3FC0, 0x8000]


def test_we_read_library_files(tmp_path):
    tensors = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([-128, 127], np.int8),
               "c": np.array([7], np.int32)}
    save_file(tensors, str(tmp_path / "lib.safetensors"))
    f = MappedFile(tmp_path / "lib.safetensors")
    for name, a in tensors.items():
        assert np.array_equal(f.tensor(name), a)


def test_layout_header_padded_and_buffers_aligned(tmp_path):
    tensors = {"i8": np.zeros(3, np.int8), "f32": np.zeros(5, np.float32), "i64": np.zeros(2, np.int64),
               "bf16": np.zeros(1, ml_dtypes.bfloat16)}
    write_file(tmp_path / "x.safetensors", tensors)
    data = (tmp_path / "x.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0                                   # padded with spaces to 8 bytes
    header = json.loads(data[8:8 + n])
    offsets = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
    pos = 0
    for (lo, hi), name in offsets:                      # contiguous, no holes, each aligned to its item size
        assert lo == pos and lo % tensors[name].dtype.itemsize == 0
        pos = hi
    assert pos == len(data) - 8 - n


def test_memory_mapped_and_read_only(tmp_path):
    write_file(tmp_path / "x.safetensors", {"a": np.ones((4, 4), np.float32)})
    a = MappedFile(tmp_path / "x.safetensors").tensor("a")
    assert isinstance(a.base, np.memmap) or isinstance(a, np.memmap)
    with pytest.raises(ValueError):
        a[0, 0] = 2


def _corrupt(path, header: dict | bytes, data: bytes = b"") -> None:
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)


@pytest.mark.parametrize("header,data,needle", [
    (b"not json", b"", "header is not readable JSON"),
    ({"a": {"dtype": "I8", "shape": [4], "data_offsets": [0, 3]}}, b"\0" * 4, "needs 4"),
    ({"a": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}}, b"\0" * 2, "beyond the end"),
    ({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, b"\0", "not supported"),
    ({"a": {"dtype": "I8", "shape": [1]}}, b"\0", "data_offsets"),
])
def test_bad_headers_name_the_file(tmp_path, header, data, needle):
    path = tmp_path / "bad.safetensors"
    _corrupt(path, header, data)
    with pytest.raises(SafetensorsError, match=needle) as err:
        read_header(path)
    assert "bad.safetensors" in str(err.value)


def test_truncated_file(tmp_path):
    (tmp_path / "t.safetensors").write_bytes(b"\x10\0\0")
    with pytest.raises(SafetensorsError, match="shorter than the 8-byte"):
        read_header(tmp_path / "t.safetensors")
    (tmp_path / "u.safetensors").write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(SafetensorsError, match="truncated"):
        read_header(tmp_path / "u.safetensors")


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    import checkpoints.safetensors_io as io

    class Boom(Exception):
        pass

    target = tmp_path / "x.safetensors"
    write_file(target, {"old": np.zeros(2, np.int8)})

    def exploding_serialize(tensors, metadata=None):
        head, order = real(tensors, metadata)

        class Order(list):
            def __iter__(self):
                yield order[0]
                raise Boom()
        return head, Order(order)

    real = io.serialize_header
    monkeypatch.setattr(io, "serialize_header", exploding_serialize)
    with pytest.raises(Boom):
        write_file(target, {"new1": np.ones(3, np.int8), "new2": np.ones(3, np.int8)})
    assert list(MappedFile(target).entries) == ["old"]          # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.safetensors"]   # no temp file left


@given(st_name=st.sampled_from(sorted(DTYPES)), shape=st.lists(st.integers(0, 5), min_size=0, max_size=3),
       seed=st.integers(0, 2**31))
def test_round_trip_property(tmp_path_factory, st_name, shape, seed):
    path = tmp_path_factory.mktemp("rt") / "p.safetensors"
    a = sample(DTYPES[st_name], tuple(shape), seed)
    write_file(path, {"t": a})
    got = MappedFile(path).tensor("t")
    assert got.shape == a.shape and np.array_equal(raw(got), raw(a))
