"""Every figure between ``gen`` markers in README.md and docs/ is what its command prints now
(tools/gen_docs.py), and a changed figure is caught.

Costs: the ``fast`` blocks are checked in the default run, the ``slow`` ones (a full default conformance
run) are marked slow, the ``long`` ones (torch-dist, the foreign backends) are checked only with
W8A8_DOCS_LONG=1. Regenerate with ``python tools/gen_docs.py``.
"""

from __future__ import annotations

import re
import shutil

import pytest

from .conftest import LONG, ROOT


@pytest.fixture(scope="module")
def rendered_fast(gen_docs, tmp_path_factory):
    blocks = [b for b in gen_docs.BLOCKS if b.cost == "fast"]
    return blocks, gen_docs.render_all(blocks, tmp_path_factory.mktemp("gen-fast"))


def test_every_marker_has_a_generator_and_every_generator_a_marker(gen_docs, docblocks):
    known = {(b.page, b.id) for b in gen_docs.BLOCKS}
    for page in docblocks.pages():
        text = (ROOT / page).read_text()
        for block_id in re.findall(r"<!-- gen:([\w-]+) -->", text):
            assert (page, block_id) in known, f"{page}: gen:{block_id} has no generator in tools/gen_docs.py"
            assert f"<!-- /gen:{block_id} -->" in text, f"{page}: gen:{block_id} is not closed"
    for page, block_id in known:
        assert f"<!-- gen:{block_id} -->" in (ROOT / page).read_text(), f"{page} lacks its gen:{block_id} block"


def test_fast_figures_match_their_commands(gen_docs, rendered_fast):
    blocks, rendered = rendered_fast
    assert gen_docs.differences(blocks, rendered) == []


def test_a_planted_change_of_a_readme_figure_fails(gen_docs, rendered_fast, tmp_path):
    blocks, rendered = rendered_fast
    root = tmp_path / "copy"
    (root / "docs").mkdir(parents=True)
    for b in blocks:
        shutil.copy(ROOT / b.page, root / b.page)
    readme = (root / "README.md").read_text()
    body = gen_docs.block_text(readme, "planted-run")
    m = re.search(r"pass (\d+)", body)
    assert m, body
    planted = body.replace(m.group(0), f"pass {int(m.group(1)) + 1}", 1)
    (root / "README.md").write_text(gen_docs.replace_block(readme, "planted-run", planted))
    problems = gen_docs.differences(blocks, rendered, root=root)
    assert len(problems) == 1 and problems[0].startswith("README.md: gen:planted-run differs"), problems


@pytest.mark.slow
def test_slow_figures_match_their_commands(gen_docs, tmp_path):
    blocks = [b for b in gen_docs.BLOCKS if b.cost == "slow" and gen_docs.available(b)]
    assert gen_docs.differences(blocks, gen_docs.render_all(blocks, tmp_path)) == []


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="minutes, and the ort/torchao extras: set W8A8_DOCS_LONG=1")
def test_long_figures_match_their_commands(gen_docs, tmp_path):
    blocks = [b for b in gen_docs.BLOCKS if b.cost == "long" and gen_docs.available(b)]
    assert gen_docs.differences(blocks, gen_docs.render_all(blocks, tmp_path)) == []
