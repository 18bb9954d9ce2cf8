"""Read a tensor file of a dump without torch and without executing anything (docs/replay.md).

``torch.save`` writes a zip archive: ``<root>/data.pkl`` (a pickle naming a rebuild function and a
storage), ``<root>/data/<key>`` (the raw storage bytes), ``<root>/byteorder``. The pickle is **not
unpickled**: :func:`read_pt` interprets its opcodes itself, with a stack machine that knows only
the opcodes a tensor pickle uses and only these globals, each an inert name:

* rebuild functions: ``torch._utils._rebuild_tensor_v2``, ``torch._utils._rebuild_tensor_v3`` (dtype
  from its 7th argument), ``torch_npu.utils.storage._rebuild_npu_tensor`` (torch_npu 2.7.1 / 2.8.0;
  its 7th argument is a ``torch_npu.npu._format.Format`` member);
* storages: ``torch.<X>Storage`` (typed: ``numel`` counts elements), ``torch.storage.UntypedStorage``
  / ``torch.UntypedStorage`` (``numel`` counts bytes);
* dtypes: ``torch.<dtype>`` (for v3); ``collections.OrderedDict`` (the backward hooks, always empty).

Anything else — another global (``os.system``, ``builtins.eval``), an opcode that builds objects
(``BUILD``, ``INST``, ``OBJ``, ``NEWOBJ``, ``EXT*``), a call of something that is not a rebuild
token, a root that is not a rebuilt tensor, a view outside its storage — raises
:class:`DumpFormatError` naming the file, the opcode and its byte position. Nothing is imported,
called or evaluated. bf16 and fp8 come back as :mod:`ml_dtypes` arrays; the storage location
(``cpu``, ``npu:0``, ``cuda:1``) is reported, never acted on.

Storage bytes are memory-mapped when the zip member is stored uncompressed (what torch writes),
so a large tensor costs no copy until it is used; the member's zip CRC-32 is verified while
reading. ``.npy`` files go through ``np.load(allow_pickle=False)``.
"""

from __future__ import annotations

import io
import math
import os
import pickletools
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

MAX_PICKLE_BYTES = 1 << 20
"""``data.pkl`` larger than this is refused: a tensor's pickle is a few hundred bytes."""

TYPED_STORAGES: dict[str, np.dtype] = {
    "FloatStorage": np.dtype(np.float32), "DoubleStorage": np.dtype(np.float64),
    "HalfStorage": np.dtype(np.float16), "BFloat16Storage": np.dtype(ml_dtypes.bfloat16),
    "CharStorage": np.dtype(np.int8), "ByteStorage": np.dtype(np.uint8),
    "ShortStorage": np.dtype(np.int16), "IntStorage": np.dtype(np.int32),
    "LongStorage": np.dtype(np.int64), "BoolStorage": np.dtype(np.bool_),
    "ComplexFloatStorage": np.dtype(np.complex64), "ComplexDoubleStorage": np.dtype(np.complex128),
}
"""``torch.<X>Storage`` -> element dtype (typed storages: ``numel`` counts elements)."""

TORCH_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32), "float": np.dtype(np.float32), "float64": np.dtype(np.float64),
    "double": np.dtype(np.float64), "float16": np.dtype(np.float16), "half": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16), "int8": np.dtype(np.int8), "uint8": np.dtype(np.uint8),
    "int16": np.dtype(np.int16), "short": np.dtype(np.int16), "int32": np.dtype(np.int32),
    "int": np.dtype(np.int32), "int64": np.dtype(np.int64), "long": np.dtype(np.int64),
    "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_), "complex64": np.dtype(np.complex64), "complex128": np.dtype(np.complex128),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz), "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
}
"""``torch.<dtype>`` globals accepted as the dtype argument of ``_rebuild_tensor_v3``."""

REBUILDS = {"torch._utils._rebuild_tensor_v2": "_rebuild_tensor_v2",
            "torch._utils._rebuild_tensor_v3": "_rebuild_tensor_v3",
            "torch_npu.utils.storage._rebuild_npu_tensor": "_rebuild_npu_tensor"}
UNTYPED = {"torch.storage.UntypedStorage", "torch.UntypedStorage"}
ORDERED_DICT = "collections.OrderedDict"
NPU_FORMAT = "torch_npu.npu._format.Format"

_DATA_OPS = {
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE", "BINGET", "LONG_BINGET", "GET",
    "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_LIST", "LIST", "APPEND", "APPENDS",
    "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
    "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE",
    "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
}
_CALL_OPS = {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BINPERSID", "PERSID"}


class DumpFormatError(ValueError):
    """A file of a dump that cannot be read as what it claims to be (per file; never aborts a run)."""

    def __init__(self, path, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{path}: {reason}")


@dataclass(frozen=True)
class _Global:
    """An inert name produced by GLOBAL / STACK_GLOBAL (never imported)."""

    qualname: str


@dataclass(frozen=True)
class _Call:
    """What a REDUCE of an allowed token produced: the token and its arguments (nothing was called)."""

    func: _Global
    args: tuple


@dataclass(frozen=True)
class _StorageRef:
    kind: _Global
    key: str
    location: str
    numel: int


class _Mark:
    pass


@dataclass
class PtTensor:
    """A decoded tensor file: the array and what the file said about it."""

    array: np.ndarray
    rebuild: str
    location: str
    archive_root: str
    requires_grad: bool = False
    npu_format: int | None = None
    notes: list[str] = field(default_factory=list)


def _allowed_global(name: str) -> bool:
    if name in REBUILDS or name in UNTYPED or name in (ORDERED_DICT, NPU_FORMAT):
        return True
    module, _, attr = name.rpartition(".")
    return module == "torch" and (attr in TYPED_STORAGES or attr in TORCH_DTYPES)


def interpret_pickle(data: bytes, path="data.pkl"):
    """Evaluate a tensor pickle on a private stack machine (module docstring); return its root value."""
    if len(data) > MAX_PICKLE_BYTES:
        raise DumpFormatError(path, f"data.pkl is {len(data)} bytes; a tensor pickle is at most {MAX_PICKLE_BYTES}")
    stack: list = []
    memo: dict = {}

    def pop_mark() -> list:
        for i in range(len(stack) - 1, -1, -1):
            if isinstance(stack[i], _Mark):
                items = stack[i + 1:]
                del stack[i:]
                return items
        raise DumpFormatError(path, "malformed pickle: no MARK on the stack")

    try:
        ops = list(pickletools.genops(io.BytesIO(data)))
    except Exception as exc:  # noqa: BLE001 - any parse failure of a hostile or truncated pickle
        raise DumpFormatError(path, f"data.pkl is not a valid pickle ({type(exc).__name__}: {exc})") from None
    try:
        for op, arg, pos in ops:
            name = op.name
            where = f"opcode {name} at byte {pos}"
            if name not in _DATA_OPS and name not in _CALL_OPS:
                raise DumpFormatError(path, f"{where} is not allowed in a tensor file (it builds or calls objects)")
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                if len(stack) != 1:
                    raise DumpFormatError(path, f"{where}: the stack holds {len(stack)} values, not one")
                return stack[0]
            if name in ("GLOBAL", "STACK_GLOBAL"):
                if name == "GLOBAL":
                    module, _, attr = str(arg).partition(" ")
                else:
                    attr, module = stack.pop(), stack.pop()
                    if not isinstance(module, str) or not isinstance(attr, str):
                        raise DumpFormatError(path, f"{where}: module and name must be strings")
                qual = f"{module}.{attr}"
                if not _allowed_global(qual):
                    raise DumpFormatError(path, f"{where} names global {_short(qual)}, which is not a tensor rebuild "
                                                "function, storage or dtype: refused (nothing was imported or run)")
                stack.append(_Global(qual))
            elif name == "REDUCE":
                args, func = stack.pop(), stack.pop()
                if not isinstance(func, _Global) or not isinstance(args, tuple):
                    raise DumpFormatError(path, f"{where} calls {type(func).__name__}, not an allowed token")
                if func.qualname == ORDERED_DICT:
                    if args:
                        raise DumpFormatError(path, f"{where}: OrderedDict with arguments")
                    stack.append({})
                elif func.qualname in REBUILDS or func.qualname == NPU_FORMAT:
                    stack.append(_Call(func, args))
                else:
                    raise DumpFormatError(path, f"{where} calls {_short(func.qualname)}, which only names a storage or dtype")
            elif name in ("BINPERSID", "PERSID"):
                pid = stack.pop() if name == "BINPERSID" else arg
                stack.append(_storage_ref(pid, path, where))
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                if arg not in memo:
                    raise DumpFormatError(path, f"{where}: memo key {arg} was never stored")
                stack.append(memo[arg])
            elif name == "MARK":
                stack.append(_Mark())
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(stack[-1])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name == "TUPLE":
                stack.append(tuple(pop_mark()))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                items = tuple(stack[-n:])
                del stack[-n:]
                stack.append(items)
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "LIST":
                stack.append(pop_mark())
            elif name == "APPEND":
                value = stack.pop()
                _as(stack[-1], list, path, where).append(value)
            elif name == "APPENDS":
                items = pop_mark()
                _as(stack[-1], list, path, where).extend(items)
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "DICT":
                items = pop_mark()
                stack.append({_key(k, path, where): v for k, v in zip(items[::2], items[1::2])})
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                _as(stack[-1], dict, path, where)[_key(key, path, where)] = value
            elif name == "SETITEMS":
                items = pop_mark()
                target = _as(stack[-1], dict, path, where)
                for k, v in zip(items[::2], items[1::2]):
                    target[_key(k, path, where)] = v
            elif name == "NONE":
                stack.append(None)
            elif name == "NEWTRUE":
                stack.append(True)
            elif name == "NEWFALSE":
                stack.append(False)
            else:  # numbers, strings, bytes: genops already decoded the argument
                stack.append(arg)
    except IndexError:
        raise DumpFormatError(path, "malformed pickle: stack underflow") from None
    raise DumpFormatError(path, "data.pkl has no STOP opcode (truncated?)")


def _as(value, kind, path, where):
    if not isinstance(value, kind):
        raise DumpFormatError(path, f"{where} applied to {type(value).__name__}, expected {kind.__name__}")
    return value


def _key(key, path, where):
    if not isinstance(key, (str, int, float, bool, type(None), tuple, bytes)):
        raise DumpFormatError(path, f"{where}: non-data dict key {type(key).__name__}")
    try:
        hash(key)
    except TypeError:
        raise DumpFormatError(path, f"{where}: unhashable dict key") from None
    return key


_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, struct.error, NotImplementedError)
"""What zipfile raises on a damaged archive (UnicodeDecodeError for a bad UTF-8 name is a ValueError;
NotImplementedError for an unknown compression method; OSError for a seek a damaged directory sends outside the file)."""

INT64 = 1 << 63
"""Sizes, strides, offsets and numels at or beyond this are refused (torch stores them as int64)."""


def _short(value, width: int = 80) -> str:
    """``repr(value)`` cut to ``width`` characters; safe for ints of 5,000 digits and deep nesting."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__} too large to print>"
    return text[:width]


def _storage_ref(pid, path, where) -> _StorageRef:
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
        raise DumpFormatError(path, f"{where}: persistent id {_short(pid, 80)} is not ('storage', type, key, location, numel)")
    _, kind, key, location, numel = pid
    if not isinstance(kind, _Global) or not (kind.qualname in UNTYPED or kind.qualname.rpartition(".")[2] in TYPED_STORAGES):
        raise DumpFormatError(path, f"{where}: storage type {_short(kind, 80)} is not a torch storage")
    if not isinstance(key, str) or not isinstance(location, str) or not isinstance(numel, int) or not 0 <= numel < INT64:
        raise DumpFormatError(path, f"{where}: storage key/location/numel of wrong types: {_short(pid, 120)}")
    return _StorageRef(kind, key, location, numel)


def _ints(value, what, path) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise DumpFormatError(path, f"tensor {what} must be a tuple of ints; got {_short(value, 80)}")
    if any(not -INT64 <= v < INT64 for v in value):
        raise DumpFormatError(path, f"tensor {what} {_short(value, 80)} holds a value beyond int64")
    return value


def _member_array(zf: zipfile.ZipFile, file_path: Path, info: zipfile.ZipInfo, dtype: np.dtype, count: int,
                  path) -> np.ndarray:
    """``count`` elements of ``dtype`` from a zip member: memory-mapped when stored, zip CRC verified."""
    nbytes = count * dtype.itemsize
    if info.file_size != nbytes:
        raise DumpFormatError(path, f"storage {info.filename} holds {info.file_size} bytes; its declared numel needs "
                                    f"{nbytes} (truncated or altered file)")
    if nbytes == 0:
        return np.empty(0, dtype)
    if info.compress_type == zipfile.ZIP_STORED and info.flag_bits & 0x1 == 0:
        if not 0 <= info.header_offset < os.path.getsize(file_path):
            raise DumpFormatError(path, f"zip directory places {info.filename} at {info.header_offset}, outside the file")
        with open(file_path, "rb") as f:
            f.seek(info.header_offset)
            header = f.read(30)
            if len(header) != 30 or header[:4] != b"PK\x03\x04":
                raise DumpFormatError(path, f"zip local header of {info.filename} is damaged")
            name_len, extra_len = struct.unpack("<HH", header[26:30])
        start = info.header_offset + 30 + name_len + extra_len
        if start + nbytes > os.path.getsize(file_path):
            raise DumpFormatError(path, f"storage {info.filename} runs past the end of the file (truncated)")
        mm = np.memmap(file_path, dtype=np.uint8, mode="r", offset=start, shape=(nbytes,))
        crc = 0
        for i in range(0, nbytes, 1 << 24):
            crc = zlib.crc32(mm[i:i + (1 << 24)], crc)
        if crc != info.CRC:
            raise DumpFormatError(path, f"storage {info.filename}: zip CRC-32 {crc:08x} != recorded {info.CRC:08x} "
                                        "(the bytes were altered or truncated)")
        return mm.view(dtype)
    if nbytes > MAX_TENSOR_BYTES:
        raise DumpFormatError(path, f"storage {info.filename} is compressed and declares {nbytes:,} bytes, more than "
                                    f"{MAX_TENSOR_BYTES:,} (not decompressed)")
    buf = bytearray(nbytes)  # inflated in bounded chunks: a stream longer than declared stops at once
    try:
        with zf.open(info) as f:
            f._left = nbytes + 1  # noqa: SLF001 - read one byte past the declared size to see a lie
            got = 0
            while got < nbytes:
                chunk = f.read(min(1 << 24, nbytes - got))
                if not chunk:
                    break
                buf[got:got + len(chunk)] = chunk
                got += len(chunk)
            extra = f.read(1) if got == nbytes else b""
    except _ZIP_ERRORS as exc:
        raise DumpFormatError(path, f"storage {info.filename} unreadable: {exc}") from None
    if got != nbytes or extra:
        raise DumpFormatError(path, f"storage {info.filename} inflates to "
                                    f"{'more' if extra else f'{got:,}'} bytes, not the {nbytes:,} its zip entry declares")
    return np.frombuffer(buf, dtype=dtype)


MAX_TENSOR_BYTES = 4 << 30
"""Without a record to compare with, a compressed storage or a decoded view larger than this is refused
before anything is inflated or allocated (an uncompressed storage is memory-mapped, never copied)."""

SMALL_STORAGE = 16 << 20
"""A storage up to this size is decoded even when it is larger than its record says (the dtype/shape
comparison afterwards then names the difference precisely); a larger one is refused before inflating."""


def read_pt(path, expect_bytes: int | None = None) -> PtTensor:
    """Decode one ``.pt`` tensor file (module docstring). Raises :class:`DumpFormatError`. ``expect_bytes``:
    what the dump record says the tensor holds; a storage larger than that is refused before anything is
    decompressed."""
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise
    except _ZIP_ERRORS as exc:
        raise DumpFormatError(path, f"not a torch zip archive ({exc}); legacy (non-zip) torch.save files are "
                                    "not read") from None
    with zf:
        infos = {i.filename: i for i in zf.infolist()}
        for name in infos:
            if ".." in name.split("/") or name.startswith("/"):
                raise DumpFormatError(path, f"archive member name {_short(name)} escapes the archive")
            if infos[name].flag_bits & 0x1:
                raise DumpFormatError(path, f"archive member {_short(name)} is encrypted (torch.save never encrypts)")
        pkls = [n for n in infos if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkls) != 1:
            raise DumpFormatError(path, f"expected exactly one <root>/data.pkl, found {len(pkls)}")
        root = pkls[0][: -len("/data.pkl")]
        order = infos.get(f"{root}/byteorder")
        if order is not None:
            if order.file_size > 16:
                raise DumpFormatError(path, f"byteorder is {order.file_size:,} bytes; 'little' is 6 (not decompressed)")
            try:
                value = zf.read(order).decode("ascii", "replace").strip()
            except _ZIP_ERRORS as exc:
                raise DumpFormatError(path, f"byteorder unreadable: {exc}") from None
            if value != "little":
                raise DumpFormatError(path, f"byteorder is {value!r}; only little-endian files are read")
        pkl_info = infos[pkls[0]]
        if pkl_info.file_size > MAX_PICKLE_BYTES:
            raise DumpFormatError(path, f"data.pkl is {pkl_info.file_size} bytes (limit {MAX_PICKLE_BYTES})")
        try:
            pkl = zf.read(pkl_info)
        except _ZIP_ERRORS as exc:
            raise DumpFormatError(path, f"data.pkl unreadable: {exc}") from None
        value = interpret_pickle(pkl, path)
        if not isinstance(value, _Call) or value.func.qualname not in REBUILDS:
            raise DumpFormatError(path, f"the pickle's root is {type(value).__name__}, not a rebuilt tensor")
        return _rebuild(value, zf, infos, root, path, expect_bytes)


def _rebuild(call: _Call, zf, infos, root, path, expect_bytes: int | None = None) -> PtTensor:
    rebuild = REBUILDS[call.func.qualname]
    args = call.args
    if len(args) < 4:
        raise DumpFormatError(path, f"{rebuild} takes (storage, offset, size, stride, ...); got {len(args)} arguments")
    storage, offset, size, stride = args[:4]
    if not isinstance(storage, _StorageRef):
        raise DumpFormatError(path, f"{rebuild}: first argument is not a storage")
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < INT64:
        raise DumpFormatError(path, f"{rebuild}: storage offset {_short(offset)} is not a non-negative int64")
    size, stride = _ints(size, "size", path), _ints(stride, "stride", path)
    if len(size) != len(stride) or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise DumpFormatError(path, f"{rebuild}: size {size} and stride {stride} do not describe a view")
    untyped = storage.kind.qualname in UNTYPED
    npu_format = None
    notes = []
    if rebuild == "_rebuild_tensor_v3":
        if len(args) < 7 or not isinstance(args[6], _Global) or args[6].qualname.rpartition(".")[2] not in TORCH_DTYPES:
            raise DumpFormatError(path, "_rebuild_tensor_v3 needs a torch dtype as its 7th argument")
        dtype = TORCH_DTYPES[args[6].qualname.rpartition(".")[2]]
    else:
        if untyped:
            raise DumpFormatError(path, f"{rebuild} with an UntypedStorage has no dtype")
        dtype = TYPED_STORAGES[storage.kind.qualname.rpartition(".")[2]]
    if rebuild == "_rebuild_npu_tensor" and len(args) >= 7:
        fmt = args[6]
        if isinstance(fmt, _Call) and fmt.func.qualname == NPU_FORMAT and len(fmt.args) == 1:
            npu_format = fmt.args[0]
            if npu_format not in (0, 2):  # NCHW / ND: plain row-major storage
                notes.append(f"torch_npu format {npu_format} (not ND): the bytes are in that layout")
        elif fmt is not None:
            raise DumpFormatError(path, "_rebuild_npu_tensor: 7th argument is not a torch_npu Format member")
    if untyped:
        if storage.numel % dtype.itemsize:
            raise DumpFormatError(path, f"untyped storage of {storage.numel} bytes is not a whole number of "
                                        f"{dtype.name} elements")
        count = storage.numel // dtype.itemsize
    else:
        count = storage.numel
    numel = math.prod(size)
    if numel and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= count:
        raise DumpFormatError(path, f"view (offset {offset}, size {size}, stride {stride}) reaches past the "
                                    f"storage of {count} elements")
    if expect_bytes is not None and count * dtype.itemsize > max(expect_bytes, SMALL_STORAGE):
        raise DumpFormatError(path, f"its storage holds {count * dtype.itemsize:,} bytes, more than the "
                                    f"{expect_bytes:,} its dump.json record describes (not decompressed)")
    limit = MAX_TENSOR_BYTES if expect_bytes is None else max(expect_bytes, SMALL_STORAGE)
    if numel * dtype.itemsize > limit:     # a stride-0 view claiming more than its storage
        raise DumpFormatError(path, f"its view {size} of {dtype.name} is {numel * dtype.itemsize:,} bytes, more than "
                                    f"{limit:,} ({'the record' if expect_bytes is not None else 'the reader limit'})")
    member = f"{root}/data/{storage.key}"
    info = infos.get(member)
    if info is None:
        raise DumpFormatError(path, f"storage member {member} is missing from the archive")
    flat = _member_array(zf, Path(path), info, dtype, count, path)
    if numel == 0:
        array = np.empty(size, dtype)
    elif offset == 0 and numel == count and stride == _contiguous_strides(size):
        array = flat.reshape(size)
    else:
        item = dtype.itemsize
        view = np.lib.stride_tricks.as_strided(flat[offset:], shape=size, strides=tuple(s * item for s in stride))
        array = np.ascontiguousarray(view)
    requires_grad = bool(args[4]) if len(args) > 4 and isinstance(args[4], bool) else False
    return PtTensor(array, rebuild, storage.location, root, requires_grad, npu_format, notes)


def _contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(size):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def read_npy(path) -> np.ndarray:
    """A ``.npy`` file, memory-mapped, with ``allow_pickle=False`` (object arrays are refused)."""
    try:
        loaded = np.load(path, allow_pickle=False, mmap_mode="r")
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise DumpFormatError(path, f"not a readable .npy file ({exc})") from None
    if not isinstance(loaded, np.ndarray):   # np.load opens a zip (a .npz, or a .pt renamed) as an archive
        loaded.close()
        raise DumpFormatError(path, "not a .npy file: a zip archive (an .npz, or a .pt saved under a .npy name)")
    return loaded


def read_tensor_file(path, expect_bytes: int | None = None) -> PtTensor:
    """``.pt`` or ``.npy`` by suffix (``expect_bytes``: see :func:`read_pt`)."""
    path = Path(path)
    if path.suffix == ".npy":
        return PtTensor(read_npy(path), "npy", "cpu", "")
    return read_pt(path, expect_bytes)


def crc32_of(array: np.ndarray) -> str:
    """msprobe's ``md5`` field: ``f"{zlib.crc32(bytes):08x}"`` of the C-contiguous little-endian bytes."""
    a = np.ascontiguousarray(array)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    flat = a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)
    crc = 0
    for i in range(0, flat.size, 1 << 24):
        crc = zlib.crc32(flat[i:i + (1 << 24)], crc)
    return f"{crc:08x}"


def xor64_of(array: np.ndarray) -> str:
    """msprobe's ``xor`` summary mode: ``"0x%016x"`` of the XOR of every little-endian 64-bit word of the
    C-contiguous bytes, the last word zero-padded (``pytorch/xor_checksum``)."""
    a = np.ascontiguousarray(array)
    flat = a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)
    acc = np.uint64(0)
    whole = flat.size // 8 * 8
    for i in range(0, whole, 1 << 24):
        acc ^= np.bitwise_xor.reduce(flat[i:min(i + (1 << 24), whole)].view("<u8"), initial=np.uint64(0))
    if whole < flat.size:
        tail = np.zeros(8, np.uint8)
        tail[: flat.size - whole] = flat[whole:]
        acc ^= tail.view("<u8")[0]
    return f"0x{int(acc):016x}"


def checksum_like(field: str, array: np.ndarray) -> str | None:
    """The checksum of ``array`` in the format of a dumped ``md5`` field (CRC-32 or xor64), None if unknown."""
    f = field.strip().lower()
    if len(f) == 8 and all(c in "0123456789abcdef" for c in f):
        return crc32_of(array)
    if f.startswith("0x") and len(f) == 18:
        return xor64_of(array)
    return None
