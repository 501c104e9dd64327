"""Issue 48 item 5: what a reader types to name a book. An ISBN-10 or ISBN-13 in the search box
(with or without hyphens, `ISBN` before it) answers that book, whether the catalog holds it as
the id or in its metadata, in any of its ISBN fields; a book's id answers it too; any other
query is searched. On both databases, after a swap and from the served form a restart reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, index_books, serve_books
from service.api.main import create_app
from service.config.settings import ServiceSettings
from service.engine.isbn_lookup import isbn13

BOOKS: list[dict[str, object]] = [
    {"id": "9780441172719", "title": "Dune", "authors": ["Frank Herbert"], "year": 1965},
    {"id": "gr-5907", "title": "The Hobbit", "year": 1937, "ISBN13": "978-0-261-10221-7"},
    {"id": "OL10000135M", "title": "Emma", "year": 1815, "isbns": ["0141439580", "9780141439587"]},
    {"id": "mort", "title": "Mort", "year": 1987, "isbn": "0552131067", "language": "en"},
]


@pytest.mark.parametrize(
    ("typed", "number"),
    [
        ("0-441-17271-7", 9780441172719),
        ("0441172717", 9780441172719),
        ("ISBN 978-0-441-17271-9", 9780441172719),
        ("isbn-10: 0 441 17271 7", 9780441172719),
        ("080442957X", 9780804429573),  # an X check digit
        ("979-10-90636-07-1", 9791090636071),
        ("0-441-17271-8", None),  # its check digit off by one
        ("978-0-441-17271-8", None),
        ("977-0-441-17271-9", None),  # no book prefix
        ("dune", None),
        ("1984", None),
    ],
)
def test_what_readers_type_is_one_isbn_13(typed: str, number: int | None) -> None:
    assert isbn13(typed) == number


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> TestClient:
    with serve_books(engine, tmp_path, BOOKS) as c:
        yield c


def _search(client: TestClient, q: str, **params: object) -> dict[str, object]:
    r = client.get("/search", params={"q": q, **params})
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


@pytest.mark.parametrize(
    ("typed", "found"),
    [
        ("0-441-17271-7", "9780441172719"),  # the id, typed as its ISBN-10
        ("0261102214", "gr-5907"),  # metadata `ISBN13`, typed as its ISBN-10
        ("978-0-14-143958-7", "OL10000135M"),  # the second of `isbns`
        ("0 552 13106 7", "mort"),
    ],
)
def test_an_isbn_typed_answers_its_book_alone(client: TestClient, typed: str, found: str) -> None:
    body = _search(client, typed)
    assert body["lookup"] == "isbn"
    assert [(h["id"], h["weight"], h["rank"]) for h in body["results"]] == [(found, 1.0, 1)]  # type: ignore[index, union-attr]
    assert (body["matched"], body["entropy"], body["no_strong_match"]) == (1, 0.0, False)


def test_an_id_typed_answers_its_book_and_a_word_is_searched(client: TestClient) -> None:
    body = _search(client, "OL10000135M")
    assert body["lookup"] == "id"
    assert [h["id"] for h in body["results"]] == ["OL10000135M"]  # type: ignore[union-attr]
    for query in ("mort", "emma 1815", "0-441-17271-8"):  # a word, words, a bad check digit
        body = _search(client, query)
        assert body["lookup"] is None and len(body["results"]) == 4, query  # type: ignore[arg-type]


def test_a_lookup_keeps_the_filters_and_the_page(client: TestClient) -> None:
    assert _search(client, "0441172717", year_max=1900)["results"] == []
    assert _search(client, "0441172717", year_max=1900)["matched"] == 0
    assert _search(client, "0441172717", offset=1)["results"] == []
    assert _search(client, "0552131067", language="eng")["results"][0]["id"] == "mort"  # type: ignore[index]
    r = client.post("/search", json={"queries": ["0441172717", "mort"], "k": 2})
    first, second = r.json()["responses"]
    assert (first["lookup"], second["lookup"]) == ("isbn", None)
    assert [h["id"] for h in first["results"]] == ["9780441172719"]


def test_a_swapped_and_a_restarted_index_find_the_new_isbn(engine: Engine, tmp_path: Path) -> None:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(
        database_url=url, device="cpu", generation_poll_s=0, served_dir=str(tmp_path / "forms")
    )
    added = {"id": "sourcery", "title": "Sourcery", "isbn": "978-0-552-13107-0"}
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        assert _search(client, "9780552131070")["lookup"] is None
        index_books(engine, tmp_path, [*BOOKS, added])
        client.app.state.watcher.check()  # type: ignore[attr-defined]  # (or its thread did)
        assert client.get("/healthz").json()["catalog_size"] == 5
        assert _search(client, "0552131075")["results"][0]["id"] == "sourcery"  # type: ignore[index]
        assert _search(client, "0261102214")["results"][0]["id"] == "gr-5907"  # type: ignore[index]
    with TestClient(create_app(settings, encoder=FakeEncoder())) as restarted:  # the form's
        assert _search(restarted, "0552131075")["results"][0]["id"] == "sourcery"  # type: ignore[index]
        body = json.dumps(_search(restarted, "OL10000135M"))
        assert '"lookup": "id"' in body
