"""A seeded fuzzer of the replay ``.pt`` reader (:func:`replay.pt_reader.read_pt`): files written by
``torch.save`` itself (not by us), then mutated 1,000 times (``W8A8_FUZZ_MUTATIONS`` for more) — byte
flips, truncation, a rewritten pickle (huge / negative / wrong-typed sizes, strides and offsets, foreign
globals, code-running reduces), storage members shortened, lengthened, renamed or deflate bombs. The
outcome is an array or one :class:`DumpFormatError` line, never another exception; no mutation runs
code (a planted ``os.system`` would create a marker file); peak RSS stays under :data:`RSS_BOUND_MB`."""

from __future__ import annotations

import collections
import io
import os
import pickle
import random
import resource
import zipfile

import numpy as np
import pytest
import torch

from replay.pt_reader import DumpFormatError, read_pt

MUTATIONS = int(os.environ.get("W8A8_FUZZ_MUTATIONS", "1000"))
RSS_BOUND_MB = 256


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _saved(t: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    torch.save(t, buf)
    return buf.getvalue()


BASES = {
    "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "bf16": torch.linspace(-3, 3, 17).to(torch.bfloat16),
    "int8": torch.arange(-64, 64, dtype=torch.int8).reshape(8, 16)[:, ::3],   # a strided view
    "scalar": torch.tensor(1.5, dtype=torch.float16),
    "empty": torch.zeros(0, 7),
}


def _members(data: bytes) -> list[tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return [(i, zf.read(i)) for i in zf.infolist()]


def _zip(members, compress=None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for info, body in members:
            zf.writestr(info.filename, body, compress_type=compress if compress is not None else info.compress_type)
    return out.getvalue()


class _Reduce:
    """An object whose pickle is ``func(*args)`` (what a hostile file holds)."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


class _Storage:
    def __init__(self, pid):
        self.pid = pid


def _pickle(root, pid) -> bytes:
    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=2)
    p.persistent_id = lambda obj: obj.pid if isinstance(obj, _Storage) else None
    p.dump(root)
    return buf.getvalue()


_HOSTILE_INTS = [-1, 0, 1, 7, 2 ** 31, 2 ** 62, 2 ** 64, 10 ** 5000, True]
_HOSTILE_ANY = [None, "x", 1.5, float("nan"), [], (), {}, ("storage",), b"\x00" * 10]


def _tuple(rng, n):
    return tuple(rng.choice(_HOSTILE_INTS) if rng.random() < 0.5 else rng.randint(0, 9) for _ in range(n))


def _hostile_pickle(rng: random.Random, marker: str, key: str, numel: int) -> bytes:
    storage_kind = rng.choice([torch.FloatStorage, torch.CharStorage, torch.UntypedStorage, torch.BFloat16Storage])
    pid = ("storage", storage_kind, rng.choice([key, "../../x", "/etc/passwd", "missing"]), "cpu",
           rng.choice([numel, 0, numel + 1, 2 ** 40, -5, 10 ** 40]))
    if rng.random() < 0.15:
        pid = rng.choice(_HOSTILE_ANY) if rng.random() < 0.5 else (pid[0], os.system, *pid[2:])
    n = rng.randint(0, 4)
    args = [_Storage(pid), rng.choice([0, 0, 1, -1, 2 ** 62]), _tuple(rng, n), _tuple(rng, n if rng.random() < 0.8
                                                                                       else n + 1),
            False, collections.OrderedDict()]
    if rng.random() < 0.2:
        args[rng.randrange(4)] = rng.choice(_HOSTILE_ANY)
    kind = rng.randrange(8)
    if kind == 0:
        return _pickle(_Reduce(os.system, (f"touch {marker}",)), None)             # runs code if unpickled
    if kind == 1:
        return _pickle(_Reduce(eval, (f"open({marker!r}, 'w')",)), None)
    if kind == 2:
        return _pickle(_Reduce(torch._utils._rebuild_tensor_v2, (_Reduce(os.system, ("true",)), 0, (1,), (1,))),
                       None)
    if kind == 3:
        return _pickle([_Reduce(torch._utils._rebuild_tensor_v2, tuple(args))] * 3, None)
    if kind == 4:
        return _pickle(_Reduce(torch._utils._rebuild_tensor_v3, tuple(args) + (rng.choice([torch.float32, torch.int8,
                                                                                              "float32", None]),)),
                       None)
    return _pickle(_Reduce(torch._utils._rebuild_tensor_v2, tuple(args)), None)


def _mutate(rng: random.Random, data: bytes, marker: str) -> bytes:
    members = _members(data)
    kind = rng.randrange(9)
    if kind == 0:                                   # raw byte flips anywhere
        b = bytearray(data)
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 1:                                   # truncation
        return data[:rng.randrange(len(data))]
    pkl_i = next(i for i, (info, _) in enumerate(members) if info.filename.endswith("/data.pkl"))
    root = members[pkl_i][0].filename[:-len("/data.pkl")]
    stor = [i for i, (info, _) in enumerate(members) if "/data/" in info.filename]
    if kind in (2, 3, 4):                           # a rewritten pickle
        key = members[stor[0]][0].filename.rsplit("/", 1)[1] if stor else "0"
        numel = len(members[stor[0]][1]) if stor else 0
        members[pkl_i] = (members[pkl_i][0], _hostile_pickle(rng, marker, key, numel))
        return _zip(members)
    if kind == 5:                                   # pickle bytes flipped / truncated inside a valid zip
        body = bytearray(members[pkl_i][1])
        if rng.random() < 0.5:
            body = body[:rng.randrange(len(body))]
        else:
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        members[pkl_i] = (members[pkl_i][0], bytes(body))
        return _zip(members)
    if kind == 6 and stor:                          # a storage shortened, lengthened or renamed
        i = rng.choice(stor)
        info, body = members[i]
        choice = rng.randrange(3)
        if choice == 0:
            members[i] = (info, body[:rng.randrange(len(body) + 1)])
        elif choice == 1:
            members[i] = (info, body + b"\x00" * rng.choice([1, 4, 4096]))
        else:
            info = zipfile.ZipInfo(f"{root}/data/{rng.choice(['9', '../evil', ''])}")
            members[i] = (info, body)
        return _zip(members)
    if kind == 7:                                   # the same members deflated (torch stores them)
        return _zip(members, zipfile.ZIP_DEFLATED)
    return _bomb(data)


_BOMBS: dict[bytes, bytes] = {}


def _bomb(data: bytes) -> bytes:
    """``data`` with its storage (or, without one, its byteorder) inflating to 32 MiB of zeros (~32 KB
    deflated): more than any record of these tensors and the reader's 16 MiB leeway (made once per file)."""
    if data not in _BOMBS:
        members = _members(data)
        stor = [i for i, (info, _) in enumerate(members) if "/data/" in info.filename]
        big = next(i for i, (info, _) in enumerate(members) if info.filename.endswith("/byteorder"))
        i = stor[0] if stor else big
        members[i] = (members[i][0], b"\x00" * (32 << 20))
        _BOMBS[data] = _zip(members, zipfile.ZIP_DEFLATED)
    return _BOMBS[data]


def test_pt_reader_reads_what_torch_saves(tmp_path):
    for name, t in BASES.items():
        (tmp_path / f"{name}.pt").write_bytes(_saved(t))
        got = read_pt(tmp_path / f"{name}.pt").array
        want = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
        np.testing.assert_array_equal(np.asarray(got, dtype=want.dtype), want)


def test_pt_reader_fuzz(tmp_path):
    rng = random.Random(2626)
    marker = str(tmp_path / "code-ran")
    bases = {name: _saved(t) for name, t in BASES.items()}
    path = tmp_path / "t.pt"
    start = _rss_mb()
    seen = collections.Counter()
    bomb_bytes = None
    for i in range(MUTATIONS):
        name = rng.choice(sorted(bases))
        data = _mutate(rng, bases[name], marker)
        path.write_bytes(data)
        expect = rng.choice([None, 64, 1 << 20])
        last = (i, name, data)
        try:
            got = read_pt(path, expect_bytes=expect)
            assert isinstance(got.array, np.ndarray)
            seen["array"] += 1
        except DumpFormatError as exc:
            text = str(exc)
            assert "\n" not in text and len(text) < 1000, f"mutation {i}: {text[:2000]!r}"
            seen["refused"] += 1
            if "inflates" in text or "not decompressed" in text:
                bomb_bytes = len(data)
        except Exception as exc:  # noqa: BLE001 - the point: which exceptions come out
            pytest.fail(f"mutation {i} of {name}: {type(exc).__name__}: {str(exc)[:300]}")
        assert not os.path.exists(marker), f"mutation {i} ran code"
    assert seen["array"] and seen["refused"], seen
    assert bomb_bytes is not None          # some bomb was met and refused
    assert _rss_mb() - start < RSS_BOUND_MB
