"""Every relative link in the README, BENCHMARKS.md and docs/ points at a file that exists, and
every ``#anchor`` at a heading of that file (as GitHub names a heading's anchor: lower case,
punctuation dropped, spaces as hyphens, ``-1``, ``-2`` for repeats)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor on GitHub."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (outside code fences)."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6} (.*)", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(doc: Path) -> list[str]:
    """The relative links of ``doc`` whose file or anchor does not exist."""
    bad = []
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):            # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            bad.append(f"{target}: no such heading in {file.name}")
    return bad


def test_slug_follows_github():
    assert slug("Round 17: exploring, tried (2026-11-28)") == "round-17-exploring-tried-2026-11-28"
    assert slug("The suite — `make test`") == "the-suite--make-test"


def test_a_broken_anchor_is_found(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Top\n\n[ok](#top) [bad](#nowhere) [gone](b.md)\n", encoding="utf-8")
    assert broken_links(doc) == ["#nowhere: no such heading in a.md", "b.md: no such file"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_resolve(doc):
    assert broken_links(doc) == []
