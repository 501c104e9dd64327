"""Issue 33: README.md links to docs/*.md, and they to each other and to the repository's files;
every relative link and every `#anchor` must lead somewhere (a moved section is not a dead
link)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.DOTALL)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of the file's headings: lower case, punctuation dropped, spaces '-'."""
    found = set()
    for line in _without_code(path.read_text(encoding="utf-8")).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            found.add(re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-"))
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_relative_link_leads_somewhere(document: Path) -> None:
    dead = []
    for target in LINK.findall(_without_code(document.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http:, mailto:
        file, _, anchor = target.partition("#")
        path = (document.parent / file).resolve() if file else document
        unknown = bool(anchor) and path.suffix == ".md" and anchor not in anchors(path)
        if not path.exists() or unknown:
            dead.append(target)
    assert dead == []
