"""The tolerance table: per backend, op, output and output dtype, what a comparison accepts — with
the provenance of each number.

A TOML file of ``[[entry]]`` tables::

    [[entry]]
    backend = "torch-cpu"        # the backend under test it was tuned for; "*" = any backend
    against = "numpy"            # the reference it was measured against
    op = "quant_matmul"
    output = "y"
    dtype = "bfloat16"           # dtype of that output; "*" = any
    ulp = 0                      # max ULP distance (floats) / max code difference (ints)
    mismatch_rate = 0.0          # fraction of elements allowed beyond it
    tie_off_by_one = false       # ints: +-1 accepted at .5 ties of the pre-rounding value
    atol = 0.0
    rtol = 0.0
    basis = "measured"           # "measured" (w8a8 tune) or "analytic" (conformance.bounds)
    samples = 400                # cases behind a measured entry
    max_observed = 0             # the worst distance seen in those cases
    bound = "bitwise: equal numerics"
    numerics = "ascend-a2a3"     # the backend's declared numerics when it was tuned
    versions = "..."
    date = "2026-11-30"

Lookup order for (backend, op, output, dtype): the backend's own entry, then ``backend = "*"``;
``dtype = "*"`` matches any dtype. No entry means bitwise. The packaged table
(``conformance/data/tolerances.toml``) is what ``w8a8 conformance`` reads by default.

The keys derive from the op declarations: a table read from a file is validated against them
(:meth:`ToleranceTable.validate`), so an entry naming an op or an output that no declaration has is
an error that names the entry — not a tolerance silently never looked up.

Every value is checked when a table is read (:func:`check_entry`, before any entry is built): ``ulp``,
``samples`` integers >= 0; ``mismatch_rate`` in [0, 1]; ``atol``, ``rtol``, ``tie_eps`` finite and
>= 0; ``max_observed`` >= 0; ``tie_off_by_one`` a boolean; the names and texts strings. The only other
keys an entry may have are the statistics ``w8a8 tune`` records (:data:`STATISTIC_KEYS`); the only
top-level tables are ``meta`` and ``entry``. A violation is a ValueError naming the entry, the key,
what was expected and what came — a negative ULP or a rate of 2 is refused, never accepted.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .compare import Tolerance
from .results import write_atomic

TOLERANCE_FIELDS = {f.name for f in dataclasses.fields(Tolerance)}

STATISTIC_KEYS = ("p50", "p99", "max_abs", "max_rel", "elements", "target")
"""Keys besides :class:`Entry`'s fields that an entry may carry: the statistics ``w8a8 tune`` records."""

_TEXT_KEYS = ("backend", "op", "output", "dtype", "against", "basis", "bound", "numerics", "versions", "date", "notes")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int_ge0(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _finite_ge0(v) -> bool:
    return _is_number(v) and math.isfinite(v) and v >= 0


# key -> (what it must be, test)
_VALUE_CHECKS = {
    "ulp": ("an integer >= 0", _int_ge0),
    "samples": ("an integer >= 0", _int_ge0),
    "mismatch_rate": ("a number in [0, 1]", lambda v: _is_number(v) and 0 <= v <= 1),
    "atol": ("a finite number >= 0", _finite_ge0),
    "rtol": ("a finite number >= 0", _finite_ge0),
    "tie_eps": ("a finite number >= 0", _finite_ge0),
    "max_observed": ("a number >= 0", lambda v: _is_number(v) and v >= 0),
    "tie_off_by_one": ("true or false", lambda v: isinstance(v, bool)),
    **{k: ("a number", lambda v: _is_number(v) and not math.isnan(v)) for k in STATISTIC_KEYS},
    **{k: ("a string", lambda v: isinstance(v, str)) for k in _TEXT_KEYS},
}
# what a tail-fitted entry records (conformance.tail_fit): the draws and their seeds, the fit, the target's support
_VALUE_CHECKS.update({
    **{k: ("an integer >= 0", _int_ge0) for k in ("draws", "fit_draws", "fit_exceedances", "fit_need")},
    **{k: ("a number", lambda v: _is_number(v) and not math.isnan(v))
       for k in ("fit_threshold", "fit_xi", "fit_sigma", "fit_u_target", "fit_u_upper")},
    "fit_supported": ("true or false", lambda v: isinstance(v, bool)),
    "seeds": ("a list of integers >= 0", lambda v: isinstance(v, list) and all(_int_ge0(x) for x in v)),
    # the command lines that drew the samples (those of merged sample sets first) and wrote the entry
    "commands": ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
})


def check_entry(raw, index: int, source: str) -> None:
    """Raise ValueError unless the raw table ``raw`` (entry number ``index`` of ``source``) is a valid
    entry: the required keys, known keys only, every value of its type and range (module docstring)."""
    where = f"tolerance table {source}: entry {index}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a table ([[entry]]), got {type(raw).__name__} {raw!r}")
    named = "/".join(str(raw.get(k, "*" if k == "dtype" else "?")) for k in ("backend", "op", "output", "dtype"))
    where += f" ({named})"
    missing = [k for k in ("backend", "op", "output") if k not in raw]
    if missing:
        raise ValueError(f"{where}: lacks {', '.join(missing)}")
    for key, value in raw.items():
        if key not in _VALUE_CHECKS:
            raise ValueError(f"{where}: key {key!r}: expected one of {', '.join(sorted(_VALUE_CHECKS))}, "
                             f"got an unknown key")
        expected, ok = _VALUE_CHECKS[key]
        if not ok(value):
            raise ValueError(f"{where}: {key}: expected {expected}, got {value!r}")


@dataclass
class Entry:
    backend: str
    op: str
    output: str
    dtype: str = "*"
    against: str = "numpy"
    ulp: int = 0
    mismatch_rate: float = 0.0
    tie_off_by_one: bool = False
    tie_eps: float = 1e-3
    atol: float = 0.0
    rtol: float = 0.0
    basis: str = "measured"
    samples: int = 0
    max_observed: int = 0
    bound: str = ""
    numerics: str = ""
    versions: str = ""
    date: str = ""
    notes: str = ""
    extra: dict = field(default_factory=dict)

    def tolerance(self) -> Tolerance:
        return Tolerance(ulp=int(self.ulp), tie_off_by_one=bool(self.tie_off_by_one), tie_eps=float(self.tie_eps),
                         mismatch_rate=float(self.mismatch_rate), atol=float(self.atol), rtol=float(self.rtol))

    def describe(self) -> str:
        """The tolerance in words: ``bitwise``, ``+-1 at ties`` or ``<= n ULP`` (+ rate, atol / rtol)."""
        text = "+-1 at ties" if self.tie_off_by_one else ("bitwise" if self.ulp == 0 else f"<= {self.ulp} ULP")
        if self.mismatch_rate:
            text += f", {self.mismatch_rate:g} of elements beyond"
        if self.atol or self.rtol:
            text += f", or atol {self.atol:g} + rtol {self.rtol:g}"
        return text

    def key(self) -> tuple[str, str, str, str]:
        return self.backend, self.op, self.output, self.dtype

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        return {k: v for k, v in d.items() if v is not None}


class ToleranceTable:
    """Entries keyed by (backend, op, output, dtype), with the lookup order of the module docstring."""

    def __init__(self, entries: list[Entry] | None = None, meta: dict | None = None, source: str = "(memory)"):
        self.meta = dict(meta or {})
        self.source = source
        self._entries: dict[tuple[str, str, str, str], Entry] = {}
        for e in entries or []:
            self.put(e)

    def put(self, entry: Entry) -> None:
        self._entries[entry.key()] = entry

    def entries(self) -> list[Entry]:
        return sorted(self._entries.values(), key=lambda e: e.key())

    def find(self, backend: str, op: str, output: str, dtype: str) -> Entry | None:
        for b in (backend, "*"):
            for d in (dtype, "*"):
                e = self._entries.get((b, op, output, d))
                if e is not None:
                    return e
        return None

    def lookup(self, backend: str, op: str, output: str, dtype: str) -> Tolerance:
        e = self.find(backend, op, output, dtype)
        return e.tolerance() if e else Tolerance()

    # -- files --------------------------------------------------------------------------------
    def validate(self, declarations: dict | None = None) -> "ToleranceTable":
        """Check every entry's (op, output) against the op declarations (default: the registry's).

        Raises ValueError naming each entry whose op is not declared, or whose output is not one of
        that op's outputs. Returns the table.
        """
        if declarations is None:
            from .registry import specs

            declarations = specs()
        problems = []
        for e in self.entries():
            decl = declarations.get(e.op)
            if decl is None:
                problems.append(f"entry {e.key()} names op {e.op!r}, which no declaration has")
            elif e.output not in decl.output_names():
                problems.append(f"entry {e.key()} names output {e.output!r} of {e.op}, whose outputs are "
                                f"{', '.join(decl.output_names())}")
        if problems:
            raise ValueError(f"tolerance table {self.source}: " + "; ".join(problems))
        return self

    @classmethod
    def load(cls, path: str | Path, *, validate: bool = True) -> "ToleranceTable":
        """Read a TOML table; every value is checked (:func:`check_entry`), and with ``validate`` every
        entry's op and output against the declarations. ValueError naming the problem (a missing file:
        OSError)."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"tolerance table {path}: not valid TOML: {exc}") from None
        return cls.from_dict(data, source=str(path), validate=validate)

    @classmethod
    def from_dict(cls, data: dict, source: str = "(dict)", *, validate: bool = False) -> "ToleranceTable":
        """The table of a parsed TOML document: ``meta`` (a table) and ``entry`` (an array of tables), each
        entry checked by :func:`check_entry`. ValueError naming the entry, key, expectation and value."""
        known = {f.name for f in dataclasses.fields(Entry)} - {"extra"}
        strangers = sorted(set(data) - {"meta", "entry"})
        if strangers:
            raise ValueError(f"tolerance table {source}: top-level key {strangers[0]!r}: expected 'meta' or "
                             f"'entry', got an unknown key")
        if not isinstance(data.get("meta", {}), dict) or not isinstance(data.get("entry", []), list):
            raise ValueError(f"tolerance table {source}: expected 'meta' a table and 'entry' an array of tables "
                             f"([[entry]]), got {type(data.get('meta')).__name__} and "
                             f"{type(data.get('entry')).__name__}")
        entries = []
        for i, raw in enumerate(data.get("entry", [])):
            check_entry(raw, i, source)
            entries.append(Entry(**{k: v for k, v in raw.items() if k in known},
                                 extra={k: v for k, v in raw.items() if k not in known}))
        table = cls(entries, data.get("meta", {}), source)
        return table.validate() if validate else table

    def to_toml(self) -> str:
        import tomli_w

        return tomli_w.dumps({"meta": self.meta, "entry": [e.as_dict() for e in self.entries()]})

    def save(self, path: str | Path) -> None:
        write_atomic(path, self.to_toml())

    @classmethod
    def packaged(cls) -> "ToleranceTable":
        ref = resources.files("conformance") / "data" / "tolerances.toml"
        if not ref.is_file():
            return cls(source="(none packaged)")
        return cls.from_dict(tomllib.loads(ref.read_text(encoding="utf-8")), source=str(ref), validate=True)


def packaged_path() -> Path:
    return Path(str(resources.files("conformance") / "data" / "tolerances.toml"))
