"""Issue 33: `attend search`'s table says why there is no strong match, without contradicting
its own header: one book matched by `--author` has match strength 1.00, so a query of no
catalog word is flagged for that, not for a strength "under 0.55". In-process, the fake
encoder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import FakeEncoder, write_jsonl
from service.commands.cli import main

BOOKS: list[dict[str, object]] = [
    {"id": "dune", "title": "Dune", "authors": ["Frank Herbert"], "description": "Spice."},
    {"id": "emma", "title": "Emma", "authors": ["Jane Austen"], "description": "A matchmaker."},
    {"id": "hobbit", "title": "The Hobbit", "authors": ["J. R. R. Tolkien"]},
]


@pytest.fixture
def indexed(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """BOOKS indexed with the fake encoder into the database `attend search --here` reads."""
    monkeypatch.setenv("ATTEND_DATABASE_URL", database_url)
    monkeypatch.setattr("service.engine.startup.build_encoder", lambda settings: FakeEncoder())
    monkeypatch.setattr(
        "service.commands.index_commands.index_encoder", lambda settings: FakeEncoder()
    )
    assert main(["index", str(write_jsonl(tmp_path / "books.jsonl", BOOKS))]) == 0
    capsys.readouterr()


@pytest.mark.usefixtures("indexed")
def test_no_strong_match_names_its_cause(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "qwertyuiop", "--author", "herbert", "--here"]) == 0
    header, flag, *_ = capsys.readouterr().out.splitlines()
    assert "1 of 3 books matched" in header and header.endswith("match strength 1.00")
    assert (
        flag
        == "no strong match: no word of the query occurs in any book, so these are weak answers"
    )


@pytest.mark.usefixtures("indexed")
def test_no_strong_match_for_a_far_nearest_book_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A word of the query is in a book ("spice"), so "no word occurs" would be false: the
    nearest book is far from the query (the fake encoder's cosine of eight words sharing one
    with the book's), and the table says that, with the cosine."""
    assert main(["search", "spice trade routes over the deep desert sands", "--here"]) == 0
    header, flag, *_ = capsys.readouterr().out.splitlines()
    assert "lexical" in header, header
    cosine = re.fullmatch(
        r"no strong match: no book is close to it \(the nearest book's cosine is (0\.\d\d)\), "
        r"so these are weak answers",
        flag,
    )
    assert cosine is not None, flag
    assert float(cosine[1]) < 0.4
