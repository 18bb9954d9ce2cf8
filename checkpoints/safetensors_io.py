"""The safetensors container: header parsing, memory-mapped reads, atomic writes.

Format (https://github.com/huggingface/safetensors, "Format")::

    8 bytes      N, little-endian uint64: the header length
    N bytes      UTF-8 JSON: {name: {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
                              "__metadata__": {str: str}}   (optional metadata)
    rest         the data section; offsets are relative to its start, buffers are contiguous,
                 non-overlapping and cover the whole section

Reading. The header is parsed here (the offsets are needed for memory mapping), and the data of a
tensor is a read-only :class:`numpy.memmap` view of the file, reinterpreted with the dtype of the
header. This is bit-exact for every dtype, including the ones NumPy does not know natively (bf16
and the fp8 formats, through ml_dtypes) — safetensors' own NumPy path decodes bf16 only in recent
versions and the fp8 formats not at all — and it reads nothing until a tensor's bytes are touched.
When the ``safetensors`` package is installed, :func:`validate_with_safetensors` opens each file
once with ``safe_open(framework="numpy")`` as an independent check of the header (the library's
own validation: overlapping or out-of-range buffers, bad JSON); it is not needed for reading.

Writing. :func:`write_file` serializes in the library's layout — the header padded with spaces to
a multiple of 8 bytes, tensors ordered by decreasing item size then by name (so each buffer starts
aligned to its item size), no holes — through a temporary file renamed into place, so an
interrupted write never leaves a truncated file behind.
"""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from w8a8 import dtypes as _dt

DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
    "U16": np.dtype(np.uint16), "I16": np.dtype(np.int16),
    "U32": np.dtype(np.uint32), "I32": np.dtype(np.int32),
    "U64": np.dtype(np.uint64), "I64": np.dtype(np.int64),
    "F16": np.dtype(np.float16), "BF16": _dt.bfloat16,
    "F32": np.dtype(np.float32), "F64": np.dtype(np.float64),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn), "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
}
"""safetensors dtype string -> NumPy dtype (little-endian storage)."""

ST_NAMES: dict[np.dtype, str] = {v: k for k, v in DTYPES.items()}
"""NumPy dtype -> safetensors dtype string."""

_MAX_HEADER = 100 * 1024 * 1024  # the library's own limit


class SafetensorsError(ValueError):
    """A file that is not a valid safetensors container (the message names the file and why)."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file, from its header (no data read)."""

    name: str
    st_dtype: str
    dtype: np.dtype
    shape: tuple[int, ...]
    begin: int          # absolute byte offset in the file
    nbytes: int
    path: Path

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def st_dtype_name(dtype) -> str:
    """The safetensors dtype string of a NumPy dtype (TypeError for one the format lacks)."""
    dt = np.dtype(dtype)
    if dt not in ST_NAMES:
        raise TypeError(f"safetensors: dtype {dt} has no safetensors equivalent; known: {sorted(DTYPES)}")
    return ST_NAMES[dt]


def read_header(path: str | os.PathLike) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    """Parse the header of ``path``: ``({name: TensorEntry}, metadata)``.

    Raises :class:`SafetensorsError` naming the file for a truncated file, a header that is not
    JSON, an unknown dtype, a buffer whose size disagrees with dtype x shape, or a buffer outside
    the file.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"{path}: not a safetensors file (shorter than the 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER or 8 + n > size:
            raise SafetensorsError(f"{path}: header length {n} exceeds the file ({size} bytes): truncated or not "
                                   "a safetensors file")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(f"{path}: header is not UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header must be a JSON object; got {type(header).__name__}")
    metadata = header.pop("__metadata__", None) or {}
    start = 8 + n
    entries: dict[str, TensorEntry] = {}
    for name, info in header.items():
        try:
            st, shape, (lo, hi) = info["dtype"], tuple(int(d) for d in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor {name!r}: header entry must have dtype, shape and "
                                   f"data_offsets [begin, end]; got {info!r}") from None
        if st not in DTYPES:
            raise SafetensorsError(f"{path}: tensor {name!r}: dtype {st!r} is not supported here "
                                   f"(known: {', '.join(sorted(DTYPES))})")
        dtype = DTYPES[st]
        expected = math.prod(shape) * dtype.itemsize
        if hi - lo != expected or lo < 0:
            raise SafetensorsError(f"{path}: tensor {name!r}: data_offsets [{lo}, {hi}] hold {hi - lo} bytes; "
                                   f"{st} x {list(shape)} needs {expected}")
        if start + hi > size:
            raise SafetensorsError(f"{path}: tensor {name!r}: data [{lo}, {hi}] lies beyond the end of the file "
                                   f"({size - start} data bytes): truncated file")
        entries[name] = TensorEntry(name, st, dtype, shape, start + lo, expected, path)
    return entries, {str(k): str(v) for k, v in metadata.items()}


def validate_with_safetensors(path: str | os.PathLike) -> None:
    """Open ``path`` once with ``safetensors.safe_open(framework="numpy")`` (skipped when the
    package is not installed); its complaint becomes a :class:`SafetensorsError` naming the file."""
    try:
        from safetensors import safe_open
    except ModuleNotFoundError:
        return
    try:
        with safe_open(str(path), framework="numpy") as f:
            f.keys()
    except Exception as exc:  # noqa: BLE001 - the library raises its own (Rust) error types
        raise SafetensorsError(f"{path}: rejected by safetensors: {exc}") from None


class MappedFile:
    """A safetensors file opened for lazy, memory-mapped reads."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.entries, self.metadata = read_header(self.path)
        self._map: np.memmap | None = None

    def tensor(self, name: str) -> np.ndarray:
        """A read-only view of tensor ``name`` (bytes reinterpreted with the header's dtype)."""
        e = self.entries[name]
        if e.nbytes == 0:
            return np.zeros(e.shape, e.dtype)
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        raw = self._map[e.begin:e.begin + e.nbytes]
        return raw.view(e.dtype).reshape(e.shape)


def _ordered(tensors: dict[str, np.ndarray]) -> list[str]:
    return sorted(tensors, key=lambda k: (-np.asarray(tensors[k]).dtype.itemsize, k))


def serialize_header(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> tuple[bytes, list[str]]:
    """The 8-byte length plus the padded JSON header for ``tensors``, and the write order."""
    order = _ordered(tensors)
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name in order:
        a = np.asarray(tensors[name])
        n = a.size * a.dtype.itemsize
        header[name] = {"dtype": st_dtype_name(a.dtype), "shape": list(a.shape), "data_offsets": [offset, offset + n]}
        offset += n
    body = json.dumps(header, separators=(",", ":")).encode("utf-8")
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body, order


def atomic_write_bytes(path: str | os.PathLike, chunks) -> None:
    """Write the byte chunks to ``path`` through a temporary file in the same folder, fsync'ed and
    renamed into place (``os.replace``): readers see the old file or the whole new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_file(path: str | os.PathLike, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (name -> array of a dtype in :data:`DTYPES`) as a safetensors file, atomically."""
    head, order = serialize_header(tensors, metadata)

    def chunks():
        yield head
        for name in order:
            a = np.ascontiguousarray(tensors[name])
            if a.dtype.byteorder == ">":
                a = a.astype(a.dtype.newbyteorder("<"))
            yield a.reshape(-1).view(np.uint8) if a.size else b""

    atomic_write_bytes(path, chunks())
