"""A swap moves the previous generation's served index by the diff (service/engine/served_index.py
`follows`): the changed books' names folded, their descriptions and headings read, everything
else moved. What it serves equals, book by book, what a served index built whole from the new
generation serves: authors, principal authors, works, series, subject headings, publishers, the
surnames that are words, the readers' prior and both BM25 indexes. Real SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from conftest import FakeEncoder, index_file, write_jsonl
from indexer import loaded_index
from indexer.filters import Filters
from service.config.settings import ServiceSettings
from service.engine import startup
from service.engine.served_index import ServedIndex

LONG = " It is a long description, long enough to tell one edition of a book from another."
QUERIES = ["jack london", "london", "george eliot", "herbert", "ann newcomer", "books by eliot"]


def _book(book_id: str, title: str, authors: list[str], text: str, **extra: Any) -> dict[str, Any]:
    return {"id": book_id, "title": title, "authors": authors, "description": text, **extra}


def _first() -> list[dict[str, Any]]:
    return [
        _book(
            "dune-1",
            "Dune (Dune Chronicles, #1)",
            ["Frank Herbert"],
            "Desert planet." + LONG,
            subjects=["Science Fiction"],
            ratings_count=100,
            year=1965,
            language="en",
        ),
        _book("dune-2", "Dune Messiah (Dune Chronicles, #2)", ["Frank Herbert"], "The emperor."),
        _book("fang", "White Fang", ["Jack London"], "A wolf-dog in the Yukon."),
        _book("call", "The Call of the Wild", ["Jack London"], "A dog in the Klondike."),
        _book("walk-1", "A Walk", ["Iain Sinclair"], "Walking round London.", language="fr"),
        _book(
            "middle",
            "Middlemarch",
            ["George Eliot"],
            "A provincial town." + LONG,
            subjects=["Classics", "Victorian"],
            ratings_count=50,
            publisher="Blackwood",
        ),
        _book("tales", "Tales", ["Editor A", "George Eliot"], "Stories of the shires."),
        _book(
            "adam",
            "Adam Bede",
            ["George Eliot"],
            "A carpenter.",
            subjects=["Victorian"],
            publishers=["Blackwood", "Harper"],
        ),
    ]


def _second(books: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Changes of every kind a name index holds: a series loses a book and gains one, a new
    edition joins a work, an anthology changes hands, headings and a rating count change, a new
    author comes, and "London" turns from Jack London's name into a word of the catalog: two
    books by others use it, as many as he wrote (at least as many makes a word)."""
    kept = [b for b in books if b["id"] != "dune-2"]
    for b in kept:
        if b["id"] == "tales":
            b["authors"] = ["Editor B"]
        if b["id"] == "dune-1":
            b["subjects"] = ["Science Fiction", "Classics"]
            b["publisher"] = "Chilton; Ace"
        if b["id"] == "adam":
            b["publishers"] = ["Harper"]
        if b["id"] == "fang":
            b["ratings_count"] = 7
            b["year"] = 1906
    return [
        *kept,
        _book("dune-3", "Children of Dune (Dune Chronicles, #3)", ["Frank Herbert"], "The twins."),
        _book("middle-2", "Middlemarch (Penguin Classics)", ["George Eliot"], "Another blurb."),
        _book("walk-2", "Another Walk", ["Iain Sinclair"], "London by the river."),
        _book("walk-3", "A Third Walk", ["Rachel Lichtenstein"], "East End streets."),
        _book("a-first", "Before Them All", ["Ann Newcomer", "GEORGE ELIOT"], "First row now."),
        _book(
            "new", "First Novel", ["Ann Newcomer"], "A debut.", subjects=["Victorian"], year=2020
        ),
    ]


def _served(engine: Engine, *, follows: ServedIndex | None, generation: int) -> ServedIndex:
    placement = startup.LocalPlacement(ServiceSettings(database_url="sqlite://", device="cpu"))
    with Session(engine) as session:
        if follows is None:
            index = startup.load_index(session, model=FakeEncoder.name, generation=generation)
            return startup.build_served(placement, index, session)
        diff = loaded_index.load_diff(
            session=session,
            model=FakeEncoder.name,
            since=follows.generation or 0,
            until=generation,
        )
        host = follows.host_index()
        order = loaded_index.diff_order(host, diff, follows.row_of)
        moved = loaded_index.apply_diff(host, diff, order)
        return startup.build_served(placement, moved, session, follows=(follows, diff, order))


def _by_book(served: ServedIndex) -> dict[str, tuple[Any, ...]]:
    """Each book's names and what is made of them, by id (rows may differ in order)."""
    ids, names = served.books.ids, served.names
    out = {}
    for r in range(len(served)):
        out[ids[r]] = (
            served.books.row(r),
            names.rows.authors[r],
            [names.written(key) for key in names.rows.authors[r]],
            names.rows.series[r],
            names.rows.subjects[r],
            names.rows.publishers[r],
            [
                names.rows.written[k]
                for k in (*names.rows.subjects[r], *names.rows.series[r], *names.rows.publishers[r])
            ],
            tuple(names.rows.work_keys[r].tolist()),
            names.principal[r],
            {ids[m] for m in names.author_mates(r)},
            {ids[m] for m in names.series_mates(r)},
            {ids[m]: v for m, v in names.subject_mates(r).items()},
            {ids[m] for m in names.works.editions(r)},
            None if served.readers is None else float(served.readers[r]),
            dict(zip(ids, served.like_this.scores([r])[0].tolist(), strict=True)),
        )
    return out


FILTERS = [
    Filters(year_min=1900),
    Filters(year_max=1950, language="en"),
    Filters(language="fr"),
    Filters(author="eliot"),
    Filters(author="editor b"),
    Filters(author="george-eliot"),  # by its words only: moved and changed rows alike
    Filters(author="ANN-NEWCOMER"),
    Filters(publisher="harper"),
    Filters(publisher="Blackwood", subject="victorian"),
]


def _answers(served: ServedIndex) -> list[Any]:
    ids, names = served.books.ids, served.names
    assert all(served.row_of(book) == r for r, book in enumerate(ids))
    kept = [served.filters.mask(f) for f in FILTERS]
    lexical = served.lexical.scores(QUERIES)
    found = []
    for q, scores in zip(QUERIES, lexical, strict=True):
        named = names.recognise(q, served.lexical.knows, served.lexical.holding)
        who = None if named is None else (named.name, {ids[r] for r in named.rows}, named.intent)
        found.append((q, who, dict(zip(ids, scores.tolist(), strict=True))))
    for f, mask in zip(FILTERS, kept, strict=True):
        assert mask is not None
        found.append((f, {book for book, keep in zip(ids, mask.tolist(), strict=True) if keep}))
    return found


def test_a_swap_moves_the_names_as_a_whole_build_makes_them(engine: Engine, tmp_path: Path) -> None:
    books = _first()
    index_file(engine, write_jsonl(tmp_path / "first.jsonl", books))
    first = _served(engine, follows=None, generation=1)
    assert first.names.recognise("london", first.lexical.knows) is not None  # a name here
    first.filters.author_words()  # made before the swap, so that the swap moves them
    index_file(engine, write_jsonl(tmp_path / "second.jsonl", _second(books)))
    swapped = _served(engine, follows=first, generation=2)
    whole = _served(engine, follows=None, generation=2)
    assert _by_book(swapped) == _by_book(whole)
    assert _answers(swapped) == _answers(whole)
    # what the changes were meant to move, so that equal is not equally empty
    row = swapped.row_of
    assert {"middle", "middle-2"} == {
        swapped.books.ids[r] for r in [row("middle"), *swapped.names.works.editions(row("middle"))]
    }
    dune = swapped.names.series_mates(row("dune-1"))
    assert [swapped.books.ids[r] for r in dune] == ["dune-3"]
    assert swapped.names.recognise("london", swapped.lexical.knows) is None  # now a word
    assert swapped.names.recognise("ann newcomer", swapped.lexical.knows) is not None
    eliot = swapped.names.recognise("george eliot", swapped.lexical.knows)
    assert eliot is not None and eliot.name == "GEORGE ELIOT"  # as the first row writes it
    assert swapped.names.author_mates(row("tales")) == []  # Eliot's no more
    assert np.isnan(swapped.rating_counts[row("call")])
    assert swapped.rating_counts[row("fang")] == 7
    harper = swapped.filters.mask(Filters(publisher="Harper"))
    assert harper is not None
    assert [swapped.books.ids[r] for r in harper.nonzero().flatten().tolist()] == ["adam"]
    assert swapped.names.rows.publishers[row("dune-1")] == ("chilton", "ace")
    by_1900 = swapped.filters.mask(Filters(year_min=1900))
    assert by_1900 is not None and by_1900[row("fang")] and not by_1900[row("call")]


@pytest.mark.parametrize("removed", ["dune-1", "middle"])
def test_a_swap_that_only_removes_books(engine: Engine, tmp_path: Path, removed: str) -> None:
    books = _first()
    index_file(engine, write_jsonl(tmp_path / "first.jsonl", books))
    first = _served(engine, follows=None, generation=1)
    rest = [b for b in books if b["id"] != removed]
    index_file(engine, write_jsonl(tmp_path / "second.jsonl", rest), allow_mass_delete=True)
    swapped = _served(engine, follows=first, generation=2)
    assert swapped.row_of(removed) is None
    assert _by_book(swapped) == _by_book(_served(engine, follows=None, generation=2))
