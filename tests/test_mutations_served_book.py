"""GET /books/{id} answers from the served generation, not the database's active one (issue 31,
item 6: with service/engine/front.py reading the book at the active generation, `get_book`
without `generation=`, a re-index that the service has not swapped in yet showed through and
every test still passed). The service here never swaps (generation_poll_s=0): a search hit must
resolve to the book as the search saw it. On SQLite only: on PostgreSQL a switch is also
notified (service/engine/notify.py) and followed at once, so the window between the database's
switch and the service's is too short to hold open from a test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, index_books
from indexer import db
from service.api.main import create_app
from service.config.settings import ServiceSettings

BOOKS: list[dict[str, object]] = [
    {"id": f"b{i}", "title": f"Book {i}", "description": f"a tale of {w}"}
    for i, w in enumerate(["wizards", "the sea", "deserts", "gardens"])
]


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = db.create_db_engine(f"sqlite:///{tmp_path / 'attend.db'}")
    db.upgrade(engine)
    yield engine
    engine.dispose()


def test_a_book_is_read_at_the_generation_the_searches_answer_from(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    engine = sqlite_engine
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        served = client.app.state.searcher.index.generation  # type: ignore[attr-defined]
        (tmp_path / "next").mkdir()
        revised = [{**b, "title": "Book 1, revised"} if b["id"] == "b1" else b for b in BOOKS]
        new = {"id": "new", "title": "New", "description": "a tale of wizards"}
        index_books(engine, tmp_path / "next", [*revised[1:], new])  # b0 out, "new" in
        assert client.app.state.searcher.index.generation == served  # type: ignore[attr-defined]

        assert client.get("/books/b1").json()["title"] == "Book 1"
        assert client.get("/books/b0").status_code == 200  # still served, though not active
        assert client.get("/books/new").status_code == 404  # active, not yet served
        hits = client.get("/search", params={"q": "wizards", "k": 4}).json()["results"]
        for hit in hits:  # every hit resolves, as the search saw it
            assert client.get(f"/books/{hit['id']}").json()["title"] == hit["title"]
