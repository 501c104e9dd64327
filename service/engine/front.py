"""The engine's front: everything the API asks of the engine, each request pinned to one
generation.

Every call reads the served index once, when it starts, and answers from it to the end: a swap
in the middle of a request (service/engine/reloader.py) is seen by the next one, never half by
this one. The torch work of a request (a search, a book as the query, an explanation) runs on the
searcher's one worker (service/engine/searcher.py), searches batched, the rest in turn with them,
so torch never competes with itself for the cores; the database reads (a book by id) run in a
thread of their own, at the generation being served, so a search hit always resolves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from indexer import db, store
from indexer.book_columns import BookFields
from service.config.head_weights import BookHeads, recommend_heads
from service.engine import book_ranking
from service.engine.database_errors import Reporter
from service.engine.exceptions import BookNotFoundError, NotReadyError
from service.engine.explainer import BookExplanation, Explainer
from service.engine.results import BookRecord, Recommendations, SearchResult, SimilarBooks
from service.engine.searcher import Searcher
from service.engine.served_index import ServedIndex
from service.engine.suggestions import SuggestionIndexes, Suggestions
from service.engine.tickets import SearchOptions


class Front:
    """Search, similar books, recommendations, explanations and book reads over the served
    index. `book_heads`: the default heads of a book as the query, `taste_heads` those of two
    or more liked books asking together (parsed once, at start; the book heads if None)."""

    def __init__(
        self,
        *,
        searcher: Searcher,
        explainer: Explainer,
        database: Engine,
        book_heads: BookHeads,
        taste_heads: BookHeads | None = None,
    ):
        self.searcher = searcher
        self.explainer = explainer
        self.database = database
        self.book_heads = book_heads
        self.taste_heads = taste_heads or book_heads
        self.suggestions = SuggestionIndexes()

    @property
    def index(self) -> ServedIndex:
        """The generation answering now (a request reads it once, at its start)."""
        return self.searcher.index

    async def suggest(self, query: str, k: int) -> Suggestions:
        """Titles and authors completing `query` (service/engine/suggestions.py), in a thread:
        no torch, and the first request of a generation makes its word indexes."""
        index = self.index

        def answer() -> Suggestions:
            suggester = self.suggestions.of(index)
            return Suggestions(query, [], []) if suggester is None else suggester.suggest(query, k)

        return await asyncio.to_thread(answer)

    async def search(self, queries: list[str], options: SearchOptions) -> list[SearchResult]:
        return await self.searcher.search(queries, options)  # its batch pins the generation

    async def similar(
        self, book_id: str, *, k: int, heads: dict[str, float] | None
    ) -> SimilarBooks:
        index, asked = self.index, self._heads(heads)
        return await self.searcher.call(
            lambda: book_ranking.similar(index, book_id, k=k, heads=asked)
        )

    async def recommend(
        self,
        liked: list[str],
        disliked: list[str],
        *,
        k: int,
        heads: dict[str, float] | None,
        own_authors: int = book_ranking.OWN_AUTHORS,
    ) -> Recommendations:
        default = recommend_heads(self.book_heads, self.taste_heads, len(dict.fromkeys(liked)))
        index, asked = self.index, self._heads(heads, default)
        return await self.searcher.call(
            lambda: book_ranking.recommend(
                index, liked, disliked, k=k, heads=asked, own_authors=own_authors
            )
        )

    async def explain(self, book_id: str, query: str) -> BookExplanation:
        index = self.index  # one generation for the book and its boilerplate, whatever swaps
        book = await self._book(book_id, index.generation)
        boilerplate = index.boilerplate
        return await self.searcher.call(
            lambda: self.explainer.explain(
                book_id=book.book.id,
                query=query,
                title=book.book.title,
                description=book.description,
                boilerplate=boilerplate,
            )
        )

    async def book(self, book_id: str) -> BookRecord:
        """The book as the served generation holds it; BookNotFoundError if it does not."""
        return await self._book(book_id, self.index.generation)

    async def _book(self, book_id: str, generation: int | None) -> BookRecord:
        book = await asyncio.to_thread(self._read_book, book_id, generation)
        if book is None:
            raise BookNotFoundError(book_id)
        return book

    def _read_book(self, book_id: str, generation: int | None) -> BookRecord | None:
        if generation is None:  # nothing served: no book is found, whatever the database holds
            return None
        with database_answers(), Session(self.database) as session:
            b = store.get_book(session=session, book_id=book_id, generation=generation)
            if b is None:
                return None
            fields = BookFields(b.id, b.title, b.authors, b.year, b.language)
            return BookRecord(fields, b.description, b.extra)

    def _heads(self, heads: dict[str, float] | None, default: BookHeads | None = None) -> BookHeads:
        """The request's head weights (without them: `default`, else ATTEND_SIMILAR_HEADS) with
        the service's scales."""
        default = default or self.book_heads
        if not heads:
            return default
        return BookHeads(heads, default.scales, default.fusion, default.readers, default.diversity)


@contextmanager
def database_answers() -> Iterator[None]:
    """A database that fails under a request (down, deleted, truncated, overwritten) is a 503
    that says so, not a 500: /readyz says the same and the orchestrator routes around it."""
    try:
        yield
    except (SQLAlchemyError, db.DatabaseGoneError) as e:
        # the driver's text to the log (every request's: the request log has each), not out
        raise NotReadyError(Reporter("a request's database read", quiet_s=0)(e)) from e
