"""Every relative link in README.md, docs/*.md and bench/*.md reaches a file that exists,
and its #anchor a heading of that file (GitHub's heading slugs), so a newcomer never
clicks into nothing after a document moves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "bench").glob("*.md")]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> list[str]:
    """The lines of a Markdown text outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the headings of a Markdown file (repeats get -1, -2, …)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path.read_text(encoding="utf-8")):
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading is None:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(document: Path) -> list[str]:
    """The relative links of a document whose file or anchor does not exist."""
    broken = []
    for line in prose(document.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if target.startswith(EXTERNAL):
                continue
            file_part, _, anchor = target.partition("#")
            path = (document.parent / file_part).resolve() if file_part else document
            if not path.exists():
                broken.append(f"{target}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    """Each relative link of the document names an existing file and heading."""
    assert broken_links(document) == []


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    """A link to a file that is not there, or to a heading that is not, is reported."""
    (tmp_path / "other.md").write_text("# Other\n\n## Wrapping a command: `run`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#wrapping-a-command-run) [gone](gone.md) [bad](other.md#nowhere)\n"
        "```\n[in code](ignored.md)\n```\n[web](https://example.com)\n"
    )
    assert broken_links(page) == ["gone.md: no such file", "other.md#nowhere: no such heading"]
