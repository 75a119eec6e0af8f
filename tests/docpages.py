"""Reading the README and docs/*.md as the tests need them: links, headings, marked blocks.

Markdown is read line by line; lines inside fenced code blocks are code, not links or headings.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    """The README and every page of docs/."""
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append((number, line))
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in the page's prose, inline code left out."""
    found = []
    for number, line in prose_lines(path):
        for target in _LINK.findall(re.sub(r"`[^`]*`", "", line)):
            found.append((number, target))
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(2)) for _, line in prose_lines(path) if (m := _HEADING.match(line))}


def marked_blocks(path: Path, marker: str) -> list[tuple[int, str]]:
    """(line number, text) of each fenced block that follows a `<!-- marker -->` line."""
    lines = path.read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != f"<!-- {marker} -->":
            continue
        start = i + 1
        assert _FENCE.match(lines[start]), f"{path.name}:{start + 1}: no code block after {line}"
        end = next(j for j in range(start + 1, len(lines)) if _FENCE.match(lines[j]))
        blocks.append((start + 1, "\n".join(lines[start + 1:end]) + "\n"))
    return blocks
