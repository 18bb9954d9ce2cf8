"""Findings about a checkpoint, and the error that carries them.

A finding is an :class:`Issue`: ``error`` (the serving code would refuse the checkpoint, or load
something other than what the description says), ``warning`` (it loads, but something deserves a
look: an ND fallback, a tag that disagrees with its ``.weight``, a value the loader ignores), or
``info``. Every message names the tensor or module and says what was expected and what came.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Issue:
    severity: str       # "error" | "warning" | "info"
    where: str          # a tensor, module or file name ("" for the checkpoint as a whole)
    message: str
    code: str = ""      # a stable identifier of the rule, e.g. "missing-in-weights"

    def __str__(self) -> str:
        loc = f"{self.where}: " if self.where else ""
        return f"[{self.severity}] {loc}{self.message}"

    def as_dict(self) -> dict:
        return asdict(self)


class CheckpointError(ValueError):
    """A checkpoint the serving code would not load as described. ``issues`` holds every error found."""

    def __init__(self, message: str, issues: list[Issue] | None = None):
        super().__init__(message)
        self.issues = list(issues or [])

    @classmethod
    def from_issues(cls, issues: list[Issue], what: str = "checkpoint") -> "CheckpointError":
        errors = [i for i in issues if i.severity == "error"]
        shown = "\n  ".join(str(i) for i in errors[:20])
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        return cls(f"{what}: {len(errors)} error(s):\n  {shown}{more}", errors)


class Findings(list):
    """A list of :class:`Issue` with helpers to add and query them."""

    def error(self, where: str, message: str, code: str = "") -> None:
        self.append(Issue("error", where, message, code))

    def warning(self, where: str, message: str, code: str = "") -> None:
        self.append(Issue("warning", where, message, code))

    def info(self, where: str, message: str, code: str = "") -> None:
        self.append(Issue("info", where, message, code))

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self if i.severity == "error"]

    def raise_for_errors(self, what: str = "checkpoint") -> None:
        if self.errors:
            raise CheckpointError.from_issues(list(self), what)
