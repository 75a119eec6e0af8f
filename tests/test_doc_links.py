"""The README and docs/ hold together: docs/index.md links every page, and every relative link
points to a file that exists (and to a heading of it, when it names one)."""

from __future__ import annotations

import re
from pathlib import Path

import docpages
import pytest

_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def _relative_links(page: Path):
    for number, target in docpages.links(page):
        if not _EXTERNAL.match(target):
            yield number, target


@pytest.mark.parametrize("page", docpages.pages(), ids=lambda p: p.name)
def test_every_relative_link_points_to_a_file_and_heading(page):
    broken = []
    for number, target in _relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.name}:{number}: {target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in docpages.anchors(file):
            broken.append(f"{page.name}:{number}: {target}: no heading #{anchor} in {file.name}")
    assert not broken, "\n".join(broken)


def test_the_index_links_every_page():
    index = docpages.DOCS / "index.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for _, t in _relative_links(index)}
    pages = {p.resolve() for p in docpages.DOCS.glob("*.md")} - {index.resolve()}
    missing = sorted(p.name for p in pages - linked)
    assert not missing, f"docs/index.md does not link {missing}"


def test_the_readme_is_a_front_page():
    # The README says what btfgen is and points to docs/; the reference lives there.
    lines = (docpages.ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 190, f"README.md has {len(lines)} lines; move the detail to docs/"
    assert any("docs/index.md" in line for line in lines)
