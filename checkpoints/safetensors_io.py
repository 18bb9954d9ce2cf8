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

from .safe_files import check_regular, loads_json, open_regular

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

    The project's own parser, which does not rely on the ``safetensors`` package (it checks the same
    things whether or not that is installed). Raises :class:`SafetensorsError` naming the file, the
    tensor, what was expected and what came, for: a path that is not a regular file (a FIFO is refused
    before it is opened, and it is opened non-blocking: :func:`checkpoints.safe_files.open_regular`), a
    symlink loop, a truncated file, a header that is not JSON or nests deeper than
    :data:`checkpoints.safe_files.MAX_JSON_DEPTH`, metadata that is not ``{str: str}``, an entry that is not
    an object, a dtype that is not one of the known strings, a shape that is not a list of integers
    >= 0, ``data_offsets`` that are not two integers ``0 <= begin <= end``, a buffer whose size
    disagrees with dtype x shape, a buffer outside the file, and two buffers that overlap.
    """
    path = Path(path)
    with open_regular(path, "a safetensors weights file", SafetensorsError) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"{path}: not a safetensors file (shorter than the 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER or 8 + n > size:
            raise SafetensorsError(f"{path}: header length {n} exceeds the file ({size} bytes): truncated or not "
                                   "a safetensors file")
        raw = f.read(n)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SafetensorsError(f"{path}: header is not UTF-8 JSON ({exc})") from None
    header = loads_json(text, path, "header", SafetensorsError)
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header must be a JSON object; got {type(header).__name__}")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{path}: __metadata__ must be an object of strings; got {metadata!r:.120}")
    start = 8 + n
    entries: dict[str, TensorEntry] = {}
    for name, info in header.items():
        st, shape, lo, hi = _entry_fields(path, name, info)
        dtype = DTYPES[st]
        expected = math.prod(shape) * dtype.itemsize
        if hi - lo != expected:
            raise SafetensorsError(f"{path}: tensor {name!r}: data_offsets [{lo}, {hi}] hold {hi - lo} bytes; "
                                   f"{st} x {list(shape)} needs {expected}")
        if start + hi > size:
            raise SafetensorsError(f"{path}: tensor {name!r}: data [{lo}, {hi}] lies beyond the end of the file "
                                   f"({size - start} data bytes): truncated file")
        entries[name] = TensorEntry(name, st, dtype, shape, start + lo, expected, path)
    _no_overlap(path, entries)
    return entries, dict(metadata)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _entry_fields(path: Path, name: str, info) -> tuple[str, tuple[int, ...], int, int]:
    """``(dtype string, shape, begin, end)`` of one header entry, every field type- and range-checked."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise SafetensorsError(f"{where}: header entry must be an object with dtype, shape and data_offsets "
                               f"[begin, end]; got {info!r:.120}")
    st, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(st, str) or st not in DTYPES:
        raise SafetensorsError(f"{where}: dtype {st!r:.60} is not supported here: must be one of "
                               f"{', '.join(sorted(DTYPES))}")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise SafetensorsError(f"{where}: shape must be a list of integers >= 0; got {shape!r:.120}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(v) for v in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise SafetensorsError(f"{where}: data_offsets must be two integers [begin, end] with 0 <= begin <= end; "
                               f"got {offsets!r:.120}")
    return st, tuple(shape), offsets[0], offsets[1]


def _no_overlap(path: Path, entries: dict[str, TensorEntry]) -> None:
    """Refuse two non-empty buffers that share bytes (the format's buffers are disjoint)."""
    spans = sorted((e.begin, e.begin + e.nbytes, name) for name, e in entries.items() if e.nbytes)
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise SafetensorsError(f"{path}: tensors {n0!r} and {n1!r} must not overlap; got data "
                                   f"[{b0}, {e0}) and [{b1}, {e1}) (file offsets) sharing {min(e0, e1) - b1} bytes")


def validate_with_safetensors(path: str | os.PathLike) -> None:
    """Open ``path`` once with ``safetensors.safe_open(framework="numpy")`` (skipped when the
    package is not installed); its complaint becomes a :class:`SafetensorsError` naming the file."""
    try:
        from safetensors import safe_open
    except ModuleNotFoundError:
        return
    check_regular(path, "a safetensors weights file", SafetensorsError)  # the library would block on a FIFO
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
        if self._map is None:  # reopened as a regular file: a FIFO swapped in since the header cannot block
            with open_regular(self.path, "a safetensors weights file", SafetensorsError) as f:
                self._map = np.memmap(f, dtype=np.uint8, mode="r")
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
