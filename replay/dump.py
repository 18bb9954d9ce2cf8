"""An msprobe PyTorch dump, read without torch (msprobe: Ascend/msprobe @ 8ff00da3,
``python/msprobe/core/dump/``, ``json_writer.py``).

* :func:`discover` finds every ``step*/rank*|proc*/dump.json`` under a dump path, a step folder, a
  rank folder or a ``dump.json`` itself, sorted numerically by step, then rank.
* :func:`load_dump` parses ``dump.json`` (``NaN`` / ``Infinity`` tokens accepted; a file cut short by
  a killed run is parsed up to its last complete entry and marked truncated), ``stack.json`` (both of
  msprobe's formats) and ``construct.json`` (``{node: parent}``), keeping the entries in call order.
* :class:`Entry` is one dumped call with its parsed name; :class:`TensorRecord` one tensor record with
  every field msprobe writes; :func:`decode` turns an argument record into Python values with
  tensors left as records.
* :class:`TensorLoader` turns a record into an array from ``dump_tensor_data/``, or a
  :class:`MissingTensor` saying why not (file absent, NZ tensor that msprobe no longer saves,
  truncated or refused file, CRC different from the ``md5`` field, dtype or shape different from
  the record). It never raises for a bad file, and never writes inside the dump.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .pt_reader import DumpFormatError, checksum_like, read_tensor_file
from .torch_dtypes import numpy_dtype

MAX_JSON_BYTES = 256 << 20
"""A dump.json (stack.json, construct.json) larger than this is refused, naming the limit: parsed, JSON
takes several times its size in memory."""
MAX_JSON_DEPTH = 100
"""The deepest nesting of a dump's JSON files accepted (msprobe's records nest under 10 levels)."""
MAX_TENSOR_BYTES = 1 << 40
"""A tensor record claiming more bytes than this (1 TiB) is absurd: its shape is refused."""

TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter", "torch.distributed.tensor.DTensor",
                "torch._subclasses.fake_tensor.FakeTensor", "torch_npu.HiFloat8Tensor", "numpy.ndarray")


# ------------------------------------------------------------------------------------------------
# discovery


@dataclass(frozen=True)
class DumpDir:
    """One ``step{N}/rank{R}`` (or ``proc{PID}``) folder holding a dump.json."""

    path: Path
    step: int | None
    rank: int | None
    rank_label: str

    @property
    def label(self) -> str:
        step = "step?" if self.step is None else f"step{self.step}"
        return f"{step}/{self.rank_label}"


def _number(name: str, prefix: str) -> int | None:
    m = re.fullmatch(prefix + r"(\d+)", name)
    return int(m.group(1)) if m else None


def _dump_dir(folder: Path) -> DumpDir:
    return DumpDir(folder, _number(folder.parent.name, "step"), _number(folder.name, "rank"), folder.name)


def discover(path) -> list[DumpDir]:
    """Every dump folder under ``path`` (see module docstring); raises FileNotFoundError if none."""
    path = Path(path)
    if path.is_file():
        if path.name != "dump.json":
            raise FileNotFoundError(f"{path}: expected a dump.json, a rank/proc folder, a step folder or a dump path")
        return [_dump_dir(path.parent)]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if (path / "dump.json").is_file():
        return [_dump_dir(path)]
    found = sorted({p.parent for p in path.glob("dump.json")} | {p.parent for p in path.glob("*/dump.json")} |
                   {p.parent for p in path.glob("*/*/dump.json")})
    if not found:
        raise FileNotFoundError(f"{path}: no dump.json in it, in its rank*/proc* folders or in step*/rank*/")
    dirs = [_dump_dir(p) for p in found]

    def key(d: DumpDir):
        proc = _number(d.path.name, "proc")
        return (d.step if d.step is not None else -1, d.rank if d.rank is not None else 1 << 40,
                proc if proc is not None else 1 << 41, str(d.path))

    return sorted(dirs, key=key)


# ------------------------------------------------------------------------------------------------
# JSON


@dataclass
class JsonResult:
    value: object
    truncated: str | None = None   # why and where the text stopped being valid JSON, None if it is whole
    duplicates: list = field(default_factory=list)  # keys given twice in one object (the last one kept)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _members(text: str, i: int, decoder: json.JSONDecoder, on_value):
    """Parse ``"key": value`` pairs of the object whose ``{`` is at ``i``; call ``on_value(key, start)``
    which returns (value, end). Stops at the first member that does not parse; returns (dict, error)."""
    out: dict = {}
    i = _skip_ws(text, i + 1)
    if i < len(text) and text[i] == "}":
        return out, None
    while True:
        i = _skip_ws(text, i)
        try:
            key, i = decoder.raw_decode(text, i)
        except ValueError as exc:
            return out, f"at character {i}: {exc.msg if hasattr(exc, 'msg') else exc}"
        i = _skip_ws(text, i)
        if i >= len(text) or text[i] != ":":
            return out, f"at character {i}: expected ':' after key {key!r}"
        i = _skip_ws(text, i + 1)
        try:
            value, i, err = on_value(key, i)
        except ValueError as exc:
            return out, f"in the value of {key!r} at character {i}: {getattr(exc, 'msg', exc)}"
        out[key] = value
        if err:
            return out, err
        i = _skip_ws(text, i)
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        if i < len(text) and text[i] == "}":
            return out, None
        return out, f"at character {i}: the file ends inside the object (after {key!r})"


def load_json(path, *, partial_key: str | None = None) -> JsonResult:
    """Parse a JSON file, accepting ``NaN`` / ``Infinity`` / ``-Infinity``.

    If the text is not valid JSON and ``partial_key`` names a top-level object (``"data"`` of a
    dump.json), the file is parsed member by member up to the last complete entry of that object
    and ``truncated`` says where it stopped. Raises ValueError for anything else that does not parse.
    """
    from conformance.stateio import StateError, json_depth, read_bytes

    path = Path(path)
    try:
        raw = read_bytes(path, MAX_JSON_BYTES, path.name)  # a regular file (never a FIFO), bounded in size
    except StateError as exc:
        raise ValueError(str(exc)) from None
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{path}: JSON nested {depth:,} levels deep, over the limit of {MAX_JSON_DEPTH}")
    text = raw.decode("utf-8", errors="replace")
    del raw
    duplicates: list[str] = []

    def pairs(items):
        out = dict(items)
        if len(out) != len(items):
            seen: set = set()
            duplicates.extend(k for k, _ in items if k in seen or seen.add(k))
        return out

    try:
        return JsonResult(json.loads(text, object_pairs_hook=pairs), duplicates=duplicates)
    except MemoryError:
        raise ValueError(f"{path}: {len(text):,} bytes of JSON do not fit in memory (the limit is "
                         f"{MAX_JSON_BYTES:,} bytes; split the dump or raise the memory limit)") from None
    except (ValueError, RecursionError) as exc:
        first_error = str(exc)
    if partial_key is None:
        raise ValueError(f"{path}: not valid JSON ({first_error})")
    decoder = json.JSONDecoder()
    start = _skip_ws(text, 0)
    if start >= len(text) or text[start] != "{":
        raise ValueError(f"{path}: not valid JSON and not an object ({first_error})")
    inner_error: list[str] = []

    def value_of(key, i):
        if key == partial_key and i < len(text) and text[i] == "{":
            entries, err = _members(text, i, decoder, lambda k, j: (*decoder.raw_decode(text, j), None))
            if err:
                inner_error.append(f"{partial_key!r} cut after {len(entries)} complete entries ({err})")
                return entries, len(text), "stop"
            value, end = decoder.raw_decode(text, i)   # it parsed entry by entry, so it is whole
            return value, end, None
        value, end = decoder.raw_decode(text, i)
        return value, end, None

    doc, err = _members(text, start, decoder, value_of)
    reason = inner_error[0] if inner_error else (err or first_error)
    return JsonResult(doc, truncated=f"{path.name} truncated: {reason}")


# ------------------------------------------------------------------------------------------------
# names, records


@dataclass(frozen=True)
class EntryName:
    """A parsed msprobe entry name (msprobe ``core/dump/hook_manager.py``)."""

    full: str
    kind: str              # "api" | "module" | "parameters_grad" | "other"
    prefix: str            # NPU, Tensor, Torch, Functional, Distributed, _C_ascend, Module, ...
    api: str               # npu_quant_matmul, __add__, or the module path + class for modules
    counter: int | None
    direction: str         # forward | backward | ""

    @classmethod
    def parse(cls, name: str) -> "EntryName":
        parts = name.split(".")
        if parts[0] == "Module":
            if "parameters_grad" in parts:
                return cls(name, "parameters_grad", "Module", ".".join(parts[1:]), None, "backward")
            if len(parts) >= 4 and parts[-2] in ("forward", "backward") and parts[-1].isdigit():
                return cls(name, "module", "Module", ".".join(parts[1:-2]), int(parts[-1]), parts[-2])
            return cls(name, "other", "Module", ".".join(parts[1:]), None, "")
        if len(parts) >= 4 and parts[-1] in ("forward", "backward") and parts[-2].isdigit():
            return cls(name, "api", parts[0], ".".join(parts[1:-2]), int(parts[-2]), parts[-1])
        return cls(name, "other", parts[0], ".".join(parts[1:]), None, "")

    @property
    def module_path(self) -> str | None:
        """For a module entry: its dotted path without the class name (``model.layers.0.mlp``)."""
        if self.kind != "module":
            return None
        path, _, _cls = self.api.rpartition(".")
        return path or None


@dataclass
class TensorRecord:
    """One tensor record of dump.json, every field msprobe writes (msprobe
    ``pytorch_processor.py::_analyze_tensor``, ``json_writer.py::update_data``)."""

    where: str                     # argument path, e.g. "input_args.1", "input_kwargs.scale.0", "output.0"
    type: str
    torch_dtype: str
    dtype: np.dtype | None         # None when the dtype has no NumPy equivalent (fp4, HiFloat8, ...)
    shape: tuple[int, ...]
    max: object = None
    min: object = None
    mean: object = None
    norm: object = None
    requires_grad: bool | None = None
    md5: str | None = None
    data_name: str | None = None
    raw: dict = field(default_factory=dict, repr=False)
    problem: str | None = None    # what was wrong with the record as written (its shape or statistics)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def stats_null(self) -> bool:
        return self.max is None and self.min is None

    def describe(self) -> str:
        return f"{self.torch_dtype.replace('torch.', '')}{list(self.shape)}"


def is_tensor_record(value) -> bool:
    return isinstance(value, dict) and "dtype" in value and "shape" in value and \
        (value.get("type") in TENSOR_TYPES or str(value.get("type", "")).endswith("Tensor"))


def _stat(v):
    """A statistic as recorded: a number (NaN/Inf kept), else None (a string, a bool, a list is no statistic)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def tensor_record(value: dict, where: str) -> TensorRecord:
    shape = value.get("shape")
    problem = None
    if isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        shape = tuple(shape)
    else:
        problem = f"{where}: shape {shape!r:.60} is not a list of non-negative integers"
        shape = ()
    tdt = str(value.get("dtype"))
    dtype = numpy_dtype(tdt)
    if shape and math.prod(shape) * (dtype.itemsize if dtype is not None else 1) > MAX_TENSOR_BYTES:
        problem = f"{where}: shape {list(shape)} claims more than {MAX_TENSOR_BYTES:,} bytes; not replayed"
        shape = ()
    stats = {k: _stat(value.get(k)) for k in ("Max", "Min", "Mean", "Norm")}
    bad = [k for k in stats if value.get(k) is not None and stats[k] is None]
    if bad and problem is None:
        problem = f"{where}: statistic(s) {', '.join(bad)} are not numbers; ignored"
    return TensorRecord(where=where, type=str(value.get("type")), torch_dtype=tdt, dtype=dtype, shape=shape,
                        max=stats["Max"], min=stats["Min"], mean=stats["Mean"], norm=stats["Norm"],
                        requires_grad=value.get("requires_grad"), md5=value.get("md5") if isinstance(
                            value.get("md5"), str) else None,
                        data_name=value.get("data_name"), raw=value, problem=problem)


class Unknown:
    """A value msprobe recorded as ``{}`` (a ``torch.dtype`` outside a key named dtype/output_dtype)."""

    def __init__(self, where: str):
        self.where = where

    def __repr__(self) -> str:
        return f"Unknown({self.where})"


@dataclass(frozen=True)
class DtypeValue:
    """A recorded ``torch.dtype`` / ``torch.device`` value (``{"type": "torch.dtype", "value": ...}``)."""

    value: str

    @property
    def name(self) -> str:
        return self.value.replace("torch.", "")


def decode(value, where: str):
    """An argument record -> Python: tensors stay :class:`TensorRecord`, ``{}`` is :class:`Unknown`,
    ``{"type": T, "value": v}`` is ``v`` (torch.Size a tuple, a dtype a :class:`DtypeValue`),
    ``null`` is None, lists and dicts recurse."""
    if value is None:
        return None
    if isinstance(value, list):
        return [decode(v, f"{where}.{i}") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if is_tensor_record(value):
            return tensor_record(value, where)
        if not value:
            return Unknown(where)
        if "type" in value and "value" in value and len(value) <= 3:
            t, v = value["type"], value["value"]
            if t in ("torch.dtype", "torch.device"):
                return DtypeValue(str(v))
            if t == "torch.Size":
                return tuple(v)
            if t == "slice":
                return slice(*v)
            if t == "ellipsis":
                return Ellipsis
            return v
        return {k: decode(v, f"{where}.{k}") for k, v in value.items()}
    return value


def iter_tensors(value):
    """Every :class:`TensorRecord` inside a decoded value, depth first."""
    if isinstance(value, TensorRecord):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from iter_tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from iter_tensors(v)


@dataclass
class Entry:
    """One dumped call, in call order (``index``)."""

    index: int
    name: EntryName
    args: list
    kwargs: dict
    output: list | None            # None: no ``output`` key (data_mode excluded it, or the call raised)
    raw: dict = field(repr=False, default_factory=dict)
    parents: list[str] = field(default_factory=list)   # construct.json ancestors, nearest first
    stack: list[str] = field(default_factory=list)

    @property
    def module(self) -> str | None:
        """The nearest construct.json ancestor that is a module (its dotted path), if any."""
        for p in self.parents:
            n = EntryName.parse(p)
            if n.kind == "module" and n.module_path:
                return n.module_path
        return None

    def tensors(self):
        yield from iter_tensors(self.args)
        yield from iter_tensors(self.kwargs)
        yield from iter_tensors(self.output or [])

    def inputs(self):
        yield from iter_tensors(self.args)
        yield from iter_tensors(self.kwargs)


@dataclass
class Dump:
    """One rank/step of a dump: header, entries in call order, stacks and the construct tree."""

    where: DumpDir
    task: str | None
    level: str | None
    framework: str | None
    entries: list[Entry]
    construct: dict[str, str | None]
    truncated: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def tensor_dir(self) -> Path:
        return self.where.path / "dump_tensor_data"

    def last_entry_without_output(self) -> Entry | None:
        """The last forward API entry lacking ``output``: after a raise msprobe records nothing more in
        that thread, so this may mark a silently truncated step."""
        for e in reversed(self.entries):
            if e.name.kind == "api" and e.name.direction == "forward":
                return e if e.output is None else None
        return None


def _stack_map(data) -> dict[str, list[str]]:
    """stack.json in either format: ``{name: [lines]}`` or ``{"i": [[names], [lines]]}``."""
    out: dict[str, list[str]] = {}
    if not isinstance(data, dict):
        return out
    for key, value in data.items():
        if isinstance(value, list) and len(value) == 2 and isinstance(value[0], list) and isinstance(value[1], list):
            for name in value[0]:
                out[str(name)] = [str(x) for x in value[1]]
        elif isinstance(value, list):
            out[str(key)] = [str(x) for x in value]
        elif isinstance(value, str):
            out[str(key)] = [value]
    return out


def ancestors(construct: dict, name: str, limit: int = 256) -> list[str]:
    """construct.json parents of ``name``, nearest first (cycles and over-deep chains cut)."""
    out, seen = [], {name}
    node = construct.get(name)
    while node and node not in seen and len(out) < limit:
        out.append(node)
        seen.add(node)
        node = construct.get(node)
    return out


def load_dump(where: DumpDir) -> Dump:
    """Parse one dump folder (never raises for its content; problems are listed on the result)."""
    problems: list[str] = []
    path = where.path / "dump.json"
    try:
        result = load_json(path, partial_key="data")
    except (ValueError, OSError) as exc:
        return Dump(where, None, None, None, [], {}, problems=[f"dump.json unreadable: {exc}"])
    doc = result.value if isinstance(result.value, dict) else {}
    data_keys = set(doc.get("data") or {}) if isinstance(doc.get("data"), dict) else set()
    for name in dict.fromkeys(result.duplicates):
        if name in data_keys:
            problems.append(f"dump.json names the entry {name} twice: only its last record is replayed")
    data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
    if not isinstance(doc.get("data"), dict):
        problems.append("dump.json has no \"data\" object")
    construct: dict = {}
    stacks: dict[str, list[str]] = {}
    for fname, target in (("construct.json", "construct"), ("stack.json", "stack")):
        p = where.path / fname
        if not p.exists():
            continue
        try:
            value = load_json(p).value
        except (ValueError, OSError) as exc:
            problems.append(f"{fname} unreadable: {exc}")
            continue
        if target == "construct":
            construct = {str(k): (str(v) if v else None) for k, v in value.items()} if isinstance(value, dict) else {}
        else:
            stacks = _stack_map(value)
    entries = []
    for i, (name, body) in enumerate(data.items()):
        body = body if isinstance(body, dict) else {}
        parsed = EntryName.parse(str(name))
        if parsed.direction == "backward":
            args = decode(body.get("input", []), "input")
            kwargs = {}
        else:
            args = decode(body.get("input_args", []), "input_args")
            kwargs = decode(body.get("input_kwargs", {}), "input_kwargs")
        output = decode(body["output"], "output") if "output" in body else None
        entries.append(Entry(i, parsed, args if isinstance(args, list) else [args],
                             kwargs if isinstance(kwargs, dict) else {},
                             output if output is None or isinstance(output, list) else [output], raw=body,
                             parents=ancestors(construct, str(name)), stack=stacks.get(str(name), [])))
    return Dump(where, doc.get("task"), doc.get("level"), doc.get("framework"), entries, construct,
                truncated=result.truncated, problems=problems)


# ------------------------------------------------------------------------------------------------
# tensors


@dataclass(frozen=True)
class MissingTensor:
    """A tensor the replay needs and cannot have, with the reason."""

    record: TensorRecord
    reason: str

    def describe(self) -> str:
        return f"{self.record.where} {self.record.describe()}: {self.reason}"


NZ_REASON = ("NZ (statistics null): msprobe since 5ac4b4ea (2026-06) saves no FRACTAL_NZ tensor; "
             "give the weights with --checkpoint")


class TensorLoader:
    """Arrays for the tensor records of one dump folder (see module docstring)."""

    def __init__(self, tensor_dir: Path):
        self.tensor_dir = Path(tensor_dir)

    def reason_absent(self, rec: TensorRecord) -> str:
        if rec.data_name is None:
            return "not saved (statistics dump: no data_name)" if rec.numel else "empty tensor (nothing saved)"
        if rec.stats_null and rec.numel:
            return NZ_REASON
        return f"file absent: {rec.data_name} is not in dump_tensor_data/"

    def load(self, rec: TensorRecord) -> np.ndarray | MissingTensor:
        if rec.problem:
            return MissingTensor(rec, rec.problem)
        if rec.data_name is not None:
            from checkpoints.safe_files import inside

            try:  # the checkpoint reader's rules: relative, no '..', symlinks resolved inside, a regular file
                inside(self.tensor_dir, rec.data_name, "dump.json", "data_name")
            except ValueError as exc:
                if "does not exist" not in str(exc):
                    return MissingTensor(rec, f"refused: {exc}")
        if rec.data_name is None or not (self.tensor_dir / rec.data_name).is_file():
            if rec.numel == 0 and rec.dtype is not None:
                return np.empty(rec.shape, rec.dtype)
            return MissingTensor(rec, self.reason_absent(rec))
        if rec.dtype is None:
            return MissingTensor(rec, f"dtype {rec.torch_dtype} has no NumPy equivalent: not replayed")
        path = self.tensor_dir / rec.data_name
        try:
            decoded = read_tensor_file(path, expect_bytes=rec.numel * rec.dtype.itemsize)
        except DumpFormatError as exc:
            return MissingTensor(rec, f"refused: {exc.reason}")
        except OSError as exc:
            return MissingTensor(rec, f"unreadable: {exc}")
        array = decoded.array
        if array.dtype != rec.dtype:
            if decoded.rebuild == "npy" and rec.dtype.kind == "V" and array.dtype == np.float32:
                array = array.astype(rec.dtype)   # legacy ATT: bf16 saved as fp32 (exact), cast back
            else:
                return MissingTensor(rec, f"file holds {array.dtype} but dump.json says {rec.torch_dtype}")
        if rec.shape != tuple(array.shape) and not (rec.shape == () and array.size == 1):
            return MissingTensor(rec, f"file holds shape {list(array.shape)} but dump.json says {list(rec.shape)}")
        got = checksum_like(rec.md5, array) if rec.md5 else None
        if got is not None and got != rec.md5.lower():
            return MissingTensor(rec, f"CRC-32/xor checksum of the file's data is {got}, dump.json's md5 is "
                                      f"{rec.md5}: the file does not hold what msprobe saw")
        return array.reshape(rec.shape)


def stats_note(rec: TensorRecord, array: np.ndarray) -> str | None:
    """A note when a loaded array's exact Max/Min differ from the record's (the file changed after
    msprobe computed them); None when they agree or cannot be checked."""
    if array.size == 0 or rec.max is None or rec.min is None or array.dtype.kind not in "biuf" and array.dtype.kind != "V":
        return None
    try:
        a = array.astype(np.float64) if array.dtype.kind in "fV" else array
        mx, mn = a.max(), a.min()
    except (TypeError, ValueError):
        return None
    if isinstance(rec.max, bool):
        return None
    try:
        same = float(mx) == float(rec.max) and float(mn) == float(rec.min)
    except (TypeError, ValueError):
        return None
    if same or (math.isnan(float(mx)) and isinstance(rec.max, float) and math.isnan(rec.max)):
        return None
    return f"{rec.where}: the file's Max/Min ({mx}, {mn}) differ from dump.json's ({rec.max}, {rec.min})"
