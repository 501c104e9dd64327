"""SQL goes only through bound parameters: injection-shaped queries, ids and filters are plain
text to the API (SQLite and PostgreSQL). An injection would show as a dropped or emptied table, an
id that matches a book it does not name, or a filter that matches everything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, inspect, text

from conftest import serve_books

INJECTIONS = [
    "'; DROP TABLE books; --",
    "' OR '1'='1",
    "' OR 1=1 --",
    '" OR ""="',
    "1; DELETE FROM book_vectors",
    "'; DROP TABLE book_versions; --",
    "1; DELETE FROM vectors",
    "x' UNION SELECT id, title FROM books --",
    "%' OR title LIKE '%",
    "\\'; SELECT pg_sleep(5); --",
    "'); UPDATE books SET title = 'pwned'; --",
    "’ OR ‘1’=‘1",
]
# A book whose id and title are themselves injection-shaped must round-trip unchanged.
TRICKY = {
    "id": "x'); DROP TABLE books; --",
    "title": "Robert'); DROP TABLE students; -- and other tables",
    "authors": ["O'Brien", "' OR '1'='1"],
    "year": 2001,
    "language": "en'--",
}
# the author filters that keep the tricky book: its author as written, and values whose words
# are words of it, punctuation aside
AUTHOR_OF_TRICKY = {"' OR '1'='1", "' OR 1=1 --", '" OR ""="', "’ OR ‘1’=‘1"}
BOOKS = [
    TRICKY,
    {"id": "plain", "title": "A plain book", "authors": ["Ann Author"], "year": 1999},
    {"id": "other", "title": "Another book", "authors": ["Bob Writer"], "year": 2010},
]


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    with serve_books(engine, tmp_path, BOOKS) as c:
        yield c


def _database_is_intact(engine: Engine) -> None:
    tables = {"generations", "book_versions", "version_vectors", "vectors"}
    assert tables <= set(inspect(engine).get_table_names())
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM book_versions")) == len(BOOKS)
        assert conn.scalar(text("SELECT count(*) FROM version_vectors")) == 3 * len(BOOKS)
        assert conn.scalar(text("SELECT count(*) FROM vectors")) > 0
        titles = set(conn.scalars(text("SELECT title FROM book_versions")))
    assert titles == {b["title"] for b in BOOKS}


def test_injection_shaped_queries_are_searched_as_text(client: TestClient, engine: Engine) -> None:
    for q in INJECTIONS:
        r = client.get("/search", params={"q": q, "k": 10})
        assert r.status_code == 200, (q, r.text)
        body = r.json()
        assert body["query"] == q and body["matched"] == len(BOOKS)
        assert len(body["results"]) == len(BOOKS)
    r = client.post("/search", json={"queries": INJECTIONS, "k": 2})
    assert [x["query"] for x in r.json()["responses"]] == INJECTIONS
    _database_is_intact(engine)


def test_injection_shaped_ids_match_no_book(client: TestClient, engine: Engine) -> None:
    for book_id in INJECTIONS:
        r = client.get(f"/books/{book_id}")
        assert r.status_code == 404, (book_id, r.text)
        assert r.json() == {"detail": f"no book with id {book_id!r}"}
    _database_is_intact(engine)


def test_injection_shaped_filters_match_only_what_they_say(
    client: TestClient, engine: Engine
) -> None:
    for value in INJECTIONS:
        for name in ("author", "language"):
            r = client.get("/search", params={"q": "book", name: value})
            assert r.status_code == 200, (name, value, r.text)
            # only the tricky book has an author named "' OR '1'='1": the value as written, or
            # its words, punctuation aside ("or 1 1", "or": indexer/filters.py)
            named = name == "author" and value in AUTHOR_OF_TRICKY
            hits = {h["id"] for h in r.json()["results"]}
            assert hits == ({TRICKY["id"]} if named else set()), (name, value)
    _database_is_intact(engine)


def test_an_injection_shaped_book_round_trips(client: TestClient, engine: Engine) -> None:
    r = client.get(f"/books/{TRICKY['id']}")
    assert r.status_code == 200
    book = r.json()
    assert (book["id"], book["title"], book["authors"], book["language"]) == (
        TRICKY["id"],
        TRICKY["title"],
        TRICKY["authors"],
        TRICKY["language"],
    )
    by_author = client.get("/search", params={"q": "book", "author": "o'brien"}).json()
    assert [h["id"] for h in by_author["results"]] == [TRICKY["id"]]
    _database_is_intact(engine)
