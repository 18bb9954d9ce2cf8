"""The :class:`Variant` record and how a variant turns a :class:`~w8a8.numerics.Numerics` into the one an op uses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..numerics import Numerics
from ..platforms import NN_COMMIT, OPP_COMMIT, TF_COMMIT, Platform

_REPOS = {"nn": ("hicann/ops-nn", NN_COMMIT), "tf": ("hicann/ops-transformer", TF_COMMIT),
          "opp": ("Ascend/op-plugin", OPP_COMMIT)}


def src(repo: str, path: str, lines: str | int | None = None) -> str:
    """A source citation ``"hicann/ops-nn:quant/x.h:147@e5c3fa93"`` (repo tag ``"nn"``, ``"tf"`` or ``"opp"``)."""
    name, commit = _REPOS[repo]
    where = path if lines is None else f"{path}:{lines}"
    return f"{name}:{where}@{commit[:8]}"


@dataclass(frozen=True)
class Variant:
    """The kernel the host tiling selects for one op call, and the numerics it computes.

    ``delta`` holds the :class:`~w8a8.numerics.Numerics` fields this kernel decides (field, value);
    :meth:`numerics` applies them. ``steps`` is the kernel's arithmetic in order of operations (with the
    dtype of each intermediate), ``sources`` the source lines (``repo:path:lines@commit``) the selection
    rule and the formulas come from. ``modelled`` is False where the golden cannot compute this
    kernel's arithmetic (a different algorithm, or a kernel the source does not show): the golden then
    computes the formula named in ``notes``, and only a device can tell the difference.
    """

    op: str
    name: str
    key: int | str | None
    """The host tiling key (``SetTilingKey``), or None where the op has no key of its own."""
    kernel: str
    """The kernel class and file."""
    platform: str
    rule: str
    """Why this kernel: the condition of the host tiling that held, in its order."""
    delta: tuple[tuple[str, object], ...] = ()
    steps: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    modelled: bool = True
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        known = Numerics.choices()
        for field, value in self.delta:
            if field not in known or value not in known[field]:
                raise ValueError(f"Variant {self.op}/{self.name}: delta field {field!r}={value!r} is not a "
                                 "Numerics choice")

    @property
    def decides(self) -> dict:
        """``{field: value}`` of the Numerics fields this kernel decides."""
        return dict(self.delta)

    @property
    def label(self) -> str:
        """``"dynamic_quant/single-row[100]"``: op, variant name and tiling key."""
        key = "" if self.key is None else f"[{self.key}]"
        return f"{self.op}/{self.name}{key}"

    def numerics(self, base: Numerics) -> Numerics:
        """The record the op computes with: ``base`` itself under ``variants="fixed"``; otherwise ``base``
        with this kernel's choices for every field it decides and ``base`` leaves at its default.

        The result has ``variants="fixed"``: re-running the op with it reproduces the call exactly (what
        attribution does), whatever the shape."""
        if base.variants == "fixed":
            return base
        defaults = Numerics.defaults()
        changes = {f: v for f, v in self.delta if getattr(base, f) == defaults[f] and getattr(base, f) != v}
        return dataclasses.replace(base, variants="fixed", **changes)

    def describe(self) -> str:
        """A multi-line human description: the variant, its key, its numerics in order and its sources."""
        lines = [f"{self.label}  ({self.platform})", f"  kernel: {self.kernel}", f"  selected because: {self.rule}"]
        if self.delta:
            lines.append("  numerics: " + ", ".join(f"{f}={v!r}" for f, v in self.delta))
        else:
            lines.append("  numerics: the record's defaults (this kernel decides no field)")
        if self.steps:
            lines.append("  in order of operations:")
            lines += [f"    {i}. {s}" for i, s in enumerate(self.steps, 1)]
        if not self.modelled:
            lines.append("  NOT MODELLED by the golden:")
        for n in self.notes:
            lines.append(f"  note: {n}")
        if self.sources:
            lines.append("  sources:")
            lines += [f"    {s}" for s in self.sources]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"op": self.op, "name": self.name, "key": self.key, "label": self.label, "kernel": self.kernel,
                "platform": self.platform, "rule": self.rule, "decides": self.decides, "steps": list(self.steps),
                "sources": list(self.sources), "modelled": self.modelled, "notes": list(self.notes)}


def platform_of(numerics_or_platform) -> Platform:
    """A :class:`~w8a8.platforms.Platform` from a Numerics record, a platform name or a Platform."""
    from .. import platforms

    if isinstance(numerics_or_platform, Numerics):
        return numerics_or_platform.platform_record
    if isinstance(numerics_or_platform, Platform):
        return numerics_or_platform
    return platforms.get(numerics_or_platform)


def align(value: int, to: int) -> int:
    """``value`` rounded up to a multiple of ``to``."""
    return -(-value // to) * to
