"""Searches, coalesced: concurrent requests share one encoder call and one attention call.

Requests that queue up while a batch is being answered form the next batch; once load is seen
(the last batch had company) a batch also waits up to `window` for more, so a lone request on an
idle service never waits. One worker thread encodes the batch's new query texts (repeated ones
come from an LRU cache), runs `attend` once for all of them with a (B, N) mask built from each
request's filters, and hands every request its own page. One worker also means torch work never
competes with itself for the cores.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from models.encoder import Encoder
from service.errors import IndexEmptyError
from service.heads import LEXICAL, parse_heads
from service.mixer import MixedRanking, rank_heads
from service.ranker import Filters, Ranker
from service.schemas import HeadInfo, HeadShare, SearchHit, SearchOptions, SearchResponse

logger = logging.getLogger(__name__)

# "No strong match": match strength (see `match_strength`) under this. Chosen on
# benchmarks/relevance.py: every labelled query of the shared catalog is above it (lowest 0.59),
# four of its six nonsense queries below.
NO_STRONG_MATCH_BELOW = 0.55


def match_strength(top_weight: float, matched: int) -> float:
    """log(top_weight · matched) / log(matched), in [0, 1]: 0 when the top book weighs what a
    uniform distribution gives every book (1/matched), 1 when it has all the weight. On a log
    scale, so one threshold means the same on 180 books and on 5 million."""
    if matched <= 1:
        return 1.0 if matched == 1 else 0.0
    return max(0.0, math.log(max(top_weight * matched, 1e-300)) / math.log(matched))


@dataclass
class _Job:
    queries: list[str]
    options: SearchOptions
    future: Future[list[SearchResponse]] = field(default_factory=Future)


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
        ranker: Ranker,
        *,
        scale: float,
        window_ms: float = 2.0,
        max_batch: int = 64,
        cache_size: int = 4096,
        heads: dict[str, float] | None = None,
        lexical_scale: float = 1.0,
    ):
        self.encoder = encoder
        self.ranker = ranker
        self.scale = scale
        self.heads = heads or {"description": 1.0}
        self.lexical_scale = lexical_scale
        self.window = window_ms / 1000
        self.max_batch = max_batch
        self.cache = QueryCache(cache_size)
        self.batch_sizes: deque[int] = deque(maxlen=1000)  # queries per attention call
        self.on_batch: Callable[[int], None] | None = None  # told each batch's size (metrics)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._worker: threading.Thread | None = None

    def start(self) -> None:
        self._worker = threading.Thread(target=self._loop, name="attend-searcher", daemon=True)
        self._worker.start()

    def close(self) -> None:
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join(timeout=30)
            self._worker = None

    async def search(self, queries: list[str], options: SearchOptions) -> list[SearchResponse]:
        """Queue the queries for the next batch and wait for their responses."""
        if self._worker is None:
            raise RuntimeError("Searcher.start() was not called")
        job = _Job(queries, options)
        self._jobs.put(job)
        return await asyncio.wrap_future(job.future)

    def search_now(self, queries: list[str], options: SearchOptions) -> list[SearchResponse]:
        """Answer in the calling thread, unbatched (the CLI)."""
        return self._answer([_Job(queries, options)])[0]

    def _loop(self) -> None:
        busy = False  # did the last batch have company? then more is likely on its way
        while (first := self._jobs.get()) is not None:
            batch, stop = self._collect(first, wait=busy)
            busy = len(batch) > 1
            try:
                for job, responses in zip(batch, self._answer(batch), strict=True):
                    job.future.set_result(responses)
            except Exception as e:  # every waiting request gets the error, none hangs
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(e)
            if stop:
                break

    def _collect(self, first: _Job, *, wait: bool) -> tuple[list[_Job], bool]:
        """`first` and the jobs queued behind it, plus, when `wait`, those arriving within the
        window; up to `max_batch` queries. Also says whether the stop sentinel was met."""
        batch, size = [first], len(first.queries)
        deadline = time.monotonic() + (self.window if wait else 0.0)
        while size < self.max_batch:
            try:
                job = self._jobs.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                return batch, True
            batch.append(job)
            size += len(job.queries)
        return batch, False

    def _answer(self, jobs: list[_Job]) -> list[list[SearchResponse]]:
        ranker = self.ranker  # one generation for the whole batch, even if a swap comes
        if len(ranker) == 0:
            raise IndexEmptyError()
        texts = [text for job in jobs for text in job.queries]
        logger.debug("batch of %d queries: %r", len(texts), texts)
        q = self.cache.encode(self.encoder, texts)  # (B, d)
        filters = [_filters(job.options) for job in jobs for _ in job.queries]
        heads = [self._heads(job.options) for job in jobs for _ in job.queries]
        k = max(job.options.offset + job.options.k for job in jobs)
        rankings = iter(
            rank_heads(
                ranker,
                q,
                texts,
                k=k,
                heads=heads,
                scale=self.scale,
                lexical_scale=self.lexical_scale,
                filters=filters,
            )
        )
        self.batch_sizes.append(len(texts))
        if self.on_batch is not None:
            self.on_batch(len(texts))
        return [
            [self._response(ranker, t, job.options, next(rankings)) for t in job.queries]
            for job in jobs
        ]

    def _heads(self, options: SearchOptions) -> dict[str, float]:
        return parse_heads(options.heads) if options.heads else self.heads

    def _response(
        self, ranker: Ranker, text: str, options: SearchOptions, ranking: MixedRanking
    ) -> SearchResponse:
        page = ranking.hits[options.offset : options.offset + options.k]
        top = ranking.hits[0].weight if ranking.hits else 0.0
        return SearchResponse(
            query=text,
            model=ranker.model,
            scale=self.scale,
            heads={
                h: HeadInfo(weight=w, scale=self.lexical_scale if h == LEXICAL else self.scale)
                for h, w in ranking.head_weights.items()
            },
            entropy=ranking.entropy,
            match_strength=(strength := match_strength(top, ranking.matched)),
            no_strong_match=strength < NO_STRONG_MATCH_BELOW,
            catalog_size=len(ranker),
            matched=ranking.matched,
            k=options.k,
            offset=options.offset,
            generation=ranker.generation,
            results=[
                SearchHit(
                    rank=options.offset + i + 1,
                    id=ranker.ids[hit.row],
                    title=ranker.titles[hit.row],
                    authors=ranker.authors[hit.row],
                    year=ranker.years[hit.row],
                    language=ranker.languages[hit.row],
                    score=hit.score,
                    weight=hit.weight,
                    heads={
                        h: HeadShare(score=p.score, probability=p.probability, share=p.share)
                        for h, p in hit.heads.items()
                    },
                )
                for i, hit in enumerate(page)
            ],
        )


def _filters(options: SearchOptions) -> Filters:
    return Filters(options.author, options.year_min, options.year_max, options.language)
