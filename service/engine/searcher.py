"""Searches, coalesced: concurrent requests share one encoder call and one attention call.

One worker thread takes batches from the line of waiting requests (service/engine/batching.py
says which queries go in each), encodes the batch's new query texts (repeated ones come from an
LRU cache), runs `attend` once for all of them with a (B, N) mask built from each request's
filters, and hands every request its own page. The other torch work of a request (a book as the
query, an explanation) runs on the same worker (`call`), in turn with the batches: one worker
means torch never competes with itself for the cores.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import torch

from models.encoder import Encoder
from service.config.head_weights import BookHeads
from service.engine.batching import Slice, WaitingLine
from service.engine.books_like import books_named, like_result, lookup_result
from service.engine.exceptions import IndexEmptyError
from service.engine.facets import facets
from service.engine.isbn_lookup import looked_up
from service.engine.mixing import NO_STRONG_MATCH_BELOW, match_strength
from service.engine.query_ranking import Ranking, rank_queries
from service.engine.results import AuthorNamed, HeadsUsed, RankedBook, SearchResult
from service.engine.served_index import RANK_FIELD, ServedIndex
from service.engine.sorting import SORT_POOL, sorted_hits
from service.engine.tickets import Call, SearchOptions, Ticket

logger = logging.getLogger(__name__)
T = TypeVar("T")


class QueryCache:
    """LRU of query text → embedding (d,), so a repeated query skips the encoder."""

    def __init__(self, size: int):
        self.size = size
        self._vectors: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, encoder: Encoder, texts: list[str]) -> torch.Tensor:
        """(len(texts), d): cached rows as they are, the rest in one encoder call."""
        with self._lock:
            return self._encode(encoder, texts)

    def _encode(self, encoder: Encoder, texts: list[str]) -> torch.Tensor:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            for text, vector in zip(missing, encoder.encode(missing), strict=True):
                self._vectors[text] = vector
        for text in texts:
            self._vectors.move_to_end(text)
        rows = torch.stack([self._vectors[t] for t in texts])  # (B, d)
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)
        return rows


class Searcher:
    """The service's search path: `await search(...)` from the event loop, `search_now` inline."""

    def __init__(
        self,
        encoder: Encoder,
        index: ServedIndex,
        *,
        scales: Mapping[str, float],
        heads: dict[str, float],
        window_ms: float,
        max_batch: int,
        cache_size: int,
        batch_budget_ms: float,
        min_match_cosine: float,
        similar: BookHeads | None = None,
    ):
        """Every value from the service's settings (service/engine/startup.py), which are the
        one place their defaults are declared."""
        self.encoder = encoder
        self.index = index
        self.scales = dict(scales)  # every head's softmax scale
        self.heads = heads  # a search's default π
        self.similar = similar  # a book query's heads, for "books like X" (None: not read)
        self.min_match_cosine = min_match_cosine  # the nearest book below it: no strong match
        self.line = WaitingLine(
            max_batch=max_batch, window_s=window_ms / 1000, batch_budget_s=batch_budget_ms / 1000
        )
        self.cache = QueryCache(cache_size)
        self.batch_sizes: deque[int] = deque(maxlen=1000)  # queries per attention call
        self.batch_counts: Counter[int] = Counter()  # batches answered, by size (metrics)
        self._lent = 0.0  # seconds of small batches answered inside big ones, all told
        self._worker: threading.Thread | None = None

    def start(self) -> None:
        self.line.open()
        self._worker = threading.Thread(target=self._loop, name="attend-searcher", daemon=True)
        self._worker.start()

    def close(self) -> None:
        if self._worker is not None:
            self.line.stop()
            self._worker.join(timeout=30)
            self._worker = None

    async def search(self, queries: list[str], options: SearchOptions) -> list[SearchResult]:
        """Queue the queries for the next batch and wait for their responses."""
        if self._worker is None:
            raise RuntimeError("Searcher.start() was not called")
        ticket = Ticket(queries, options)
        self.line.add(ticket)
        return await asyncio.wrap_future(ticket.future)

    async def call(self, work: Callable[[], T]) -> T:
        """Run `work` (torch work that is no typed search) on the worker and wait for it."""
        if self._worker is None:
            raise RuntimeError("Searcher.start() was not called")
        call = Call(work)
        self.line.call(call)
        result: T = await asyncio.wrap_future(call.future)
        return result

    def search_now(self, queries: list[str], options: SearchOptions) -> list[SearchResult]:
        """Answer in the calling thread, unbatched (the CLI)."""
        ticket = Ticket(queries, options)
        return self._answer([Slice(ticket, 0, len(queries))])[0]

    def _loop(self) -> None:
        busy = False  # did the last batch have company? then more is likely on its way
        while (work := self.line.next_batch(wait=busy)) is not None:
            if isinstance(work, Call):
                work.run()
                continue
            busy = len(work) > 1 or self.line.pending()
            self._run(work)

    def _run(self, batch: list[Slice]) -> None:
        """Answer `batch` and hand each request its responses once it has them all. A batch
        with big work yields to the small requests that arrive while it is encoded
        (`_answer_small`); the time they take is not counted in its cost."""
        big = any(piece.big for piece in batch)  # the batches that the budget sizes
        try:
            t0, lent = time.perf_counter(), self._lent
            answers = self._answer_pinned(batch, between=self._answer_small if big else None)
            if big:
                spent = time.perf_counter() - t0 - (self._lent - lent)
                self.line.measure(spent, sum(len(p.queries) for p in batch))
            for piece, responses in zip(batch, answers, strict=True):
                ticket = piece.ticket
                ticket.responses.extend(responses)
                if len(ticket.responses) == len(ticket.queries) and not ticket.future.done():
                    ticket.future.set_result(ticket.responses)  # done: cancelled (client gone)
        except Exception as e:  # every request in the batch gets the error, none hangs
            self._fail({id(piece.ticket): piece.ticket for piece in batch}.values(), e)

    def _answer_small(self) -> None:
        """Between the encoder calls of a batch with big work: answer the small requests
        waiting now, so one waits for one encoder call of big work, not for a whole batch."""
        if batch := self.line.small_batch():
            t0 = time.perf_counter()
            self._run(batch)
            self._lent += time.perf_counter() - t0

    def _answer_pinned(
        self, batch: list[Slice], *, between: Callable[[], None] | None = None
    ) -> list[list[SearchResult]]:
        """`_answer`, each slice from its request's generation: one call per generation in
        the batch (two only in the batches that straddle a swap)."""
        current = self.index
        groups: dict[int, tuple[ServedIndex, list[int]]] = {}
        for i, piece in enumerate(batch):
            index = current if piece.ticket.index is None else piece.ticket.index
            groups.setdefault(id(index), (index, []))[1].append(i)
        answers: list[list[SearchResult]] = [[] for _ in batch]
        for index, members in groups.values():
            pieces = [batch[i] for i in members]
            answered = self._answer(pieces, index, between=between)
            for i, responses in zip(members, answered, strict=True):
                answers[i] = responses
        for piece in batch:
            if piece.ticket.index is None:
                piece.ticket.index = current
        return answers

    def _fail(self, tickets: Iterable[Ticket], error: Exception) -> None:
        self.line.drop(
            {id(ticket) for ticket in tickets}
        )  # the rest of their queries is not answered
        for ticket in tickets:
            if not ticket.future.done():
                ticket.future.set_exception(error)

    def _answer(
        self,
        tickets: list[Slice],
        index: ServedIndex | None = None,
        *,
        between: Callable[[], None] | None = None,
    ) -> list[list[SearchResult]]:
        if index is None:
            index = self.index  # one generation for the whole batch, even if a swap comes
        if len(index) == 0:
            raise IndexEmptyError()
        texts = [text for ticket in tickets for text in ticket.queries]
        logger.debug("batch of %d queries: %r", len(texts), texts)
        options = [s.ticket.options for s in tickets for _ in s.queries]
        # an ISBN or an id typed: that book (service/engine/isbn_lookup.py)
        named = [looked_up(index.isbns, index.filters.row_of, text) for text in texts]
        like: list[int | None] = [None] * len(texts)
        asking = [i for i, found in enumerate(named) if found is None]
        if self.similar is not None and asking:  # "books like X": X's similar books answer it
            rows = books_named(
                index, [texts[i] for i in asking], lambda xs: self.cache.encode(self.encoder, xs)
            )
            for i, row in zip(asking, rows, strict=True):
                like[i] = row
        typed = [i for i in asking if like[i] is None]
        rankings: dict[int, Ranking] = {}
        if typed:
            q = self._encode([texts[i] for i in typed], between)  # (B, d)
            # a sorted or faceted query ranks its relevant books (SORT_POOL), the others their
            # pages: apart, so that one sort does not make every query of the batch rank a
            # thousand
            for wide in (False, True):
                group = [j for j, i in enumerate(typed) if options[i].wide == wide]
                if not group:
                    continue
                at = [typed[j] for j in group]
                pages = max(options[i].offset + options[i].k for i in at)
                ranked = rank_queries(
                    index,
                    q[group],
                    [texts[i] for i in at],
                    k=max(SORT_POOL, pages) if wide else pages,
                    heads=[options[i].heads or self.heads for i in at],
                    scales=self.scales,
                    filters=[options[i].filters for i in at],
                )
                rankings.update(zip(at, ranked, strict=True))
        self.batch_sizes.append(len(texts))
        self.batch_counts[len(texts)] += 1
        answers = []
        for i, (text, option, row, found) in enumerate(
            zip(texts, options, like, named, strict=True)
        ):
            if found is not None:
                answers.append(
                    lookup_result(
                        index,
                        text,
                        option,
                        found,
                        scales=self.scales,
                        scale=self.scales[RANK_FIELD],
                    )
                )
            elif row is None or self.similar is None:
                answers.append(self._result(index, text, option, rankings[i]))
            else:
                answers.append(like_result(index, text, option, row, self.similar))
        each = iter(answers)
        return [[next(each) for _ in s.queries] for s in tickets]

    def _encode(self, texts: list[str], between: Callable[[], None] | None) -> torch.Tensor:
        """(B, d). With `between`, in encoder calls of `line.encode_chunk()` queries, calling
        `between` after each."""
        if between is None:
            return self.cache.encode(self.encoder, texts)
        chunk = self.line.encode_chunk()
        parts = []
        for start in range(0, len(texts), chunk):
            parts.append(self.cache.encode(self.encoder, texts[start : start + chunk]))
            between()
        return torch.cat(parts)  # (B, d)

    def _result(
        self, index: ServedIndex, text: str, options: SearchOptions, ranking: Ranking
    ) -> SearchResult:
        end = options.offset + options.k
        if options.sort is None:  # by weight: a hit's place is its relevance rank
            pool = [(hit, place) for place, hit in enumerate(ranking.hits, start=1)]
        else:
            pool = sorted_hits(index, ranking.hits, options.sort)
        page = pool[options.offset : end]
        top = ranking.hits[0].weight if ranking.hits else 0.0
        strength = match_strength(top, ranking.matched)
        # the lexical head finding a query's words is not a match by itself: a query the
        # catalog has nothing on ("blockchain smart contracts") still finds "contracts"
        return SearchResult(
            query=text,
            model=index.model,
            scale=self.scales[RANK_FIELD],
            heads=HeadsUsed(ranking.head_weights, ranking.abstained, self.scales),
            entropy=ranking.entropy,
            match_strength=strength,
            no_strong_match=strength < NO_STRONG_MATCH_BELOW
            or not index.lexical.terms(text)
            or (ranking.named is None and unlike(ranking, self.min_match_cosine)),
            nearest=ranking.nearest,
            catalog_size=len(index),
            matched=ranking.matched,
            k=options.k,
            offset=options.offset,
            generation=index.generation,
            author=None
            if ranking.named is None
            else AuthorNamed(ranking.named.name, len(ranking.named.rows), ranking.named.intent),
            results=[
                RankedBook(
                    options.offset + i + 1,
                    index.books.row(hit.row),
                    hit.score,
                    hit.weight,
                    dict(hit.heads),
                    index.named_books(hit.editions),
                    relevance_rank=place,
                )
                for i, (hit, place) in enumerate(page)
            ],
            sort=options.sort,
            sorted_books=None if options.sort is None else len(pool),
            facets=facets(index, ranking.hits, options.facets, options.facet_size)
            if options.facets
            else None,
        )


def unlike(ranking: Ranking, min_cosine: float) -> bool:
    """Whether the nearest book's title or description cosine (over every book the filters
    keep, whatever k) is below `min_cosine`; False where no dense head said."""
    return ranking.nearest is not None and ranking.nearest < min_cosine
