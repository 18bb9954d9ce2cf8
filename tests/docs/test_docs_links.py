"""README is the front page: it links every documentation page, and every relative link of README.md and
docs/*.md leads to a file of the repository — except the pages listed in ``PENDING`` (written on branches
not merged yet), which may be linked before they land. A page listed as pending that exists is an error
too, so the list cannot go stale."""

from __future__ import annotations

import re

from .conftest import ROOT

PENDING: set[str] = set()

REQUIRED = {"docs/deepseek-v4.md", "docs/serving-compositions.md", "docs/distributed.md",
            "docs/performance-amx.md", "docs/adding-an-op.md", "docs/adding-a-backend.md",
            "docs/architecture.md"}

_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _targets(page):
    text = (ROOT / page).read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)   # code blocks hold no links
    for target in _LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        yield (ROOT / page).parent.joinpath(target).resolve().relative_to(ROOT).as_posix()


def test_readme_links_every_page():
    linked = set(_targets("README.md"))
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert REQUIRED - linked == set(), f"README.md does not link {sorted(REQUIRED - linked)}"
    assert pages - linked == set(), f"README.md does not link {sorted(pages - linked)}"


def test_every_relative_link_resolves():
    broken = []
    for page in ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]:
        for target in _targets(page):
            if not (ROOT / target).exists() and target not in PENDING:
                broken.append(f"{page} -> {target}")
    assert broken == []


def test_pending_pages_are_still_missing():
    landed = sorted(p for p in PENDING if (ROOT / p).exists())
    assert landed == [], f"{landed} exist now: remove them from PENDING in {__file__.rsplit('/', 1)[-1]}"
