"""A batch must not change an answer (issue 16, finding 8): books tied on weight come out in
catalog-row order, alone or batched with any other queries. Real SQLite and PostgreSQL, the
fake encoder, whose bag-of-words vectors tie exactly for books with the same words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from conftest import FakeEncoder, index_books
from service.config.settings import ServiceSettings
from service.engine.results import SearchResult
from service.engine.searcher import Searcher
from service.engine.startup import build_searcher
from service.engine.tickets import SearchOptions

# Ten groups of twelve books with the same title and description: twelve-way exact ties
BOOKS: list[dict[str, object]] = [
    {"id": f"g{g}-{i:02d}", "title": f"{w} chronicles", "description": f"a tale of {w} and more"}
    for i in range(12)
    for g, w in enumerate(
        [
            "wizard",
            "desert",
            "ocean",
            "garden",
            "castle",
            "engine",
            "forest",
            "violin",
            "comet",
            "river",
        ]
    )
]
QUERIES = ["wizard chronicles", "a tale of the desert", "ocean river forest", "castle"]
OTHERS = [f"{w} {n}" for n in range(60) for w in ["comet", "violin engine"]]


@pytest.fixture
def searcher(engine: Engine, tmp_path: Path) -> Iterator[Searcher]:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(database_url=url, device="cpu")
    s = build_searcher(settings, engine=engine, encoder=FakeEncoder())
    yield s


def _order(r: SearchResult) -> list[str]:
    return [h.book.id for h in r.results]


@pytest.mark.parametrize("k", [5, 20])
def test_ties_come_out_in_row_order_alone_or_batched(searcher: Searcher, k: int) -> None:
    options = SearchOptions(k=k)
    rows = {book_id: row for row, book_id in enumerate(searcher.index.books.ids)}
    for q in QUERIES:
        alone = searcher.search_now([q], options)[0]
        assert alone.results
        # equal weights: ascending catalog row
        for a, b in zip(alone.results, alone.results[1:], strict=False):
            if a.weight == b.weight:
                assert rows[a.book.id] < rows[b.book.id], (q, a.book.id, b.book.id)
        for size in (2, 7, 64):
            batch = [*OTHERS[: size - 1], q]
            batched = searcher.search_now(batch, options)[-1]
            assert _order(batched) == _order(alone), (q, size)
