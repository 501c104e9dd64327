"""Issue 47 item 3: a language is one language however the catalog codes it. A library's MARC
says `fre`, a shop's CSV `fr`, Goodreads `en-US`: the language filter and the index's
statistics read each as the language it names (langcodes), on both databases, while the book
keeps the code it came with."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from conftest import serve_books
from indexer.index_stats import index_stats
from indexer.languages import language_key

BOOKS: list[dict[str, object]] = [
    {"id": "a", "title": "Dune", "language": "eng"},
    {"id": "b", "title": "Emma", "language": "en-US"},
    {"id": "c", "title": "Candide", "language": "fre"},  # MARC's (ISO 639-2/B)
    {"id": "d", "title": "Germinal", "language": "fr"},
    {"id": "e", "title": "Faust", "language": "ger"},
    {"id": "f", "title": "Kim", "language": "English"},  # a name, no code
    {"id": "g", "title": "Ulysses"},
]


@pytest.mark.parametrize(
    ("asked", "found"),
    [
        ("en", {"a", "b"}),
        ("eng", {"a", "b"}),
        ("EN-gb", {"a", "b"}),
        ("fra", {"c", "d"}),
        ("fre", {"c", "d"}),
        ("deu", {"e"}),
        ("english", {"f"}),
        ("es", set()),
    ],
)
def test_the_language_filter_reads_every_form_of_a_code(
    engine: Engine, tmp_path: Path, asked: str, found: set[str]
) -> None:
    with serve_books(engine, tmp_path, BOOKS) as client:
        r = client.get("/search", params={"q": "a book", "k": 10, "language": asked})
        assert r.status_code == 200, r.text
        assert {h["id"] for h in r.json()["results"]} == found
        assert client.get("/books/c").json()["language"] == "fre"  # shown as the catalog wrote


def test_stats_count_one_language_once(engine: Engine, tmp_path: Path) -> None:
    with serve_books(engine, tmp_path, BOOKS):
        pass
    with Session(engine) as session:
        stats = index_stats(session=session)
    assert stats.languages == {"en": 2, "fr": 2, "de": 1, "english": 1}


def test_a_key_for_each_form() -> None:
    assert [language_key(c) for c in ("fr-CA", "FRA", "zh-Hant", "x-klingon", "", None)] == [
        "fr",
        "fr",
        "zh",
        "x-klingon",
        "",
        "",
    ]
