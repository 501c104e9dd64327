"""Issue 16 (a fair share for single GETs): the served index stays out of the cycle collector's
way. Its objects are frozen (gc.freeze) while it serves, so full collections under load do not
walk them, and a retired generation is freed by reference counting alone, since a frozen cycle
would never be. Real databases, the real lifespan and watcher."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, index_books
from indexer.filters import Filters
from service.api.main import create_app
from service.config.settings import ServiceSettings
from service.engine.searcher import Searcher
from service.engine.startup import build_searcher
from service.engine.tickets import SearchOptions

BOOKS: list[dict[str, object]] = [
    {
        "id": f"b{i}",
        "title": f"Dragons of the river, part {i}",
        "description": f"A dragon by a river, the {i}th tale.",
        "authors": [f"Author {i % 3}"],
        "year": 1990 + i,
        "language": ["eng", "fre"][i % 2],
    }
    for i in range(12)
]
# a filtered, two-head search: fills the mask cache and the lexical head's state
OPTIONS = SearchOptions(
    k=3, filters=Filters(language="eng", author="author 1"), heads={"description": 1, "lexical": 1}
)


@contextmanager
def _collector_off() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _searcher(engine: Engine, url: str) -> Searcher:
    settings = ServiceSettings(database_url=url, device="cpu")
    return build_searcher(settings, engine=engine, encoder=FakeEncoder())


def test_a_retired_generation_is_freed_by_reference_counting(
    engine: Engine, tmp_path: Path
) -> None:
    """FilterColumns cached its masks with functools.lru_cache over its own bound method, a
    cycle: with the collector off (as it is for frozen objects) the columns of every retired
    generation stayed."""
    url = index_books(engine, tmp_path, BOOKS)
    searcher = _searcher(engine, url)
    (result,) = searcher.search_now(["dragon river"], OPTIONS)
    assert result.results  # the filters and both heads ran
    served = searcher.index
    parts = [served, served.books, served.filters, served.lexical, served.keys]
    refs = [weakref.ref(part) for part in parts]
    successor = _searcher(engine, url).index
    with _collector_off():
        del parts, served
        searcher.index = successor  # the swap
        alive = [type(ref()).__name__ for ref in refs if ref() is not None]
    assert alive == []


def test_the_served_generation_is_frozen_and_the_next_one_too(
    engine: Engine, tmp_path: Path
) -> None:
    """While it serves, the index's objects are in the permanent generation (gc.get_objects
    lists the collected generations only); after a swap the new one's are; after shutdown
    nothing is frozen."""
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        first = client.app.state.searcher.index  # type: ignore[attr-defined]
        assert gc.get_freeze_count() > 0
        assert not _tracked(first.books.ids)
        (tmp_path / "again").mkdir()
        index_books(engine, tmp_path / "again", [*BOOKS, {"id": "new", "title": "Castles"}])
        state = client.app.state  # type: ignore[attr-defined]
        state.watcher.check()  # on PostgreSQL its notification may have swapped already
        deadline = time.monotonic() + 30
        while state.searcher.index is first and time.monotonic() < deadline:
            time.sleep(0.05)
        second = state.searcher.index
        assert second is not first and "new" in second.books.ids
        assert not _tracked(second.books.ids)
        r = client.get("/search", params={"q": "castles", "k": 1})
        assert r.status_code == 200 and r.json()["results"][0]["id"] == "new"
    assert gc.get_freeze_count() == 0
    assert _tracked(second.books.ids)


def _tracked(obj: object) -> bool:
    """Whether `obj` is in one of the collector's generations (not frozen)."""
    return any(o is obj for o in gc.get_objects())
