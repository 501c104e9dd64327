"""Searches, coalesced: concurrent requests share one encoder call and one attention call.

Requests that queue up while a batch is being answered form the next batch; once load is seen
(the last batch had company) a batch also waits up to `window` for more, so a lone request on an
idle service never waits. A batch takes the waiting requests' queries in turn, one each per
round, up to `max_batch`: a request of 64 queries is answered over several batches beside the
others, so it cannot make a single query wait behind it (twenty of them once kept one GET
waiting 19 s in arrival order), and batches stay full. While small requests (a few queries) are
about, batches alternate: the small requests alone, then a batch whose big part is cut to
`batch_budget_ms` of worker time (by the measured cost per query of such batches), the small
requests that came meanwhile on top. A query that arrives during a batch waits for it, so the
big batch's length bounds that wait, and its own batch is not made long by big work: the
encoder's cost is linear in the batch (about 7 ms a query here), so a small request batched
with 7 big queries paid for them. One worker thread encodes the batch's
new query texts (repeated ones come from an LRU cache), runs `attend` once for all of them with a
(B, N) mask built from each request's filters, and hands every request its own page. One
worker also means torch work never competes with itself for the cores.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from models.encoder import Encoder
from service.engine.exceptions import IndexEmptyError
from service.engine.filters import Filters
from service.engine.query_ranking import Ranking, rank_queries
from service.engine.results import HeadsUsed, RankedBook, SearchResult
from service.engine.served_index import RANK_FIELD, ServedIndex

logger = logging.getLogger(__name__)

# "No strong match": match strength (see `match_strength`) under this, or no word of the query in
# any book. Re-checked on benchmarks/relevance.py under the default heads: of 221 labelled and
# subject queries, one is under 0.55 (0.54) and one has no word in the catalog ("regicide"); of
# its six nonsense queries, one is under 0.55 and five have no word in the catalog. The strength
# alone does not separate them (nonsense reaches 0.71: a sentence embedding always finds a
# nearest book), the vocabulary does.
NO_STRONG_MATCH_BELOW = 0.55

SMALL_REQUEST = 4  # queries: a request this small is interactive, and goes first in a batch
SMALL_SEEN_S = 1.0  # small requests count as about this long after the last one arrived
# Fewest queries in a batch the budget cuts: where a batch's fixed cost alone passes the budget
# (a loaded machine), budget / cost per query would shrink batches to 1 and throughput with them;
# 8 queries cost 4.2 ms each here against 3.7 in batches of 64. 4: the encoder's cost is linear
# in the batch (about 7 ms a query at 1, 8 or 64 on a loaded 2-core machine), and a small request
# waits for the batch before it (benchmarks/soak.py).
BUDGET_FLOOR = 4
# Queries per encoder call of a batch with big work while small requests are about; between
# calls the small requests waiting are answered. One query alone costs 3.0 ms here, 4 in one
# call 2.1 ms each, 16 1.9, 64 1.9 (benchmarks/soak.py's machine, idle): 4 is 11% dearer than
# one call for all, and a small request waits for at most one such call. Without small
# requests about, 16 (a first one waits for 16 queries' encoding, not a whole batch's).
ENCODE_CHUNK = 4


def match_strength(top_weight: float, matched: int) -> float:
    """log(top_weight · matched) / log(matched), in [0, 1]: 0 when the top book weighs what a
    uniform distribution gives every book (1/matched), 1 when it has all the weight. On a log
    scale, so one threshold means the same on 180 books and on 5 million."""
    if matched <= 1:
        return 1.0 if matched == 1 else 0.0
    return max(0.0, math.log(max(top_weight * matched, 1e-300)) / math.log(matched))


@dataclass(frozen=True)
class SearchOptions:
    """A search request's paging, filters (the attention mask) and head weights π (None: the
    searcher's default)."""

    k: int = 10
    offset: int = 0
    filters: Filters = field(default_factory=Filters)
    heads: dict[str, float] | None = None


@dataclass
class _Job:
    queries: list[str]
    options: SearchOptions
    future: Future[list[SearchResult]] = field(default_factory=Future)
    taken: int = 0  # queries handed to a batch so far; they are answered in order
    responses: list[SearchResult] = field(default_factory=list)
    # the generation its first queries were answered from: a request answered over several
    # batches is answered from one generation, even if a new one is swapped in meanwhile
    index: ServedIndex | None = None


@dataclass
class _Slice:
    """Queries [start, stop) of one job, answered in one batch."""

    job: _Job
    start: int
    stop: int

    @property
    def queries(self) -> list[str]:
        return self.job.queries[self.start : self.stop]


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
        window_ms: float = 2.0,
        max_batch: int = 64,
        cache_size: int = 4096,
        heads: dict[str, float] | None = None,
        batch_budget_ms: float = 50.0,
    ):
        self.encoder = encoder
        self.index = index
        self.scales = dict(scales)  # every head's softmax scale
        self.heads = heads or {"description": 1.0}
        self.window = window_ms / 1000
        self.max_batch = max_batch
        self.cache = QueryCache(cache_size)
        self.batch_sizes: deque[int] = deque(maxlen=1000)  # queries per attention call
        self.batch_counts: Counter[int] = Counter()  # batches answered, by size (metrics)
        self._waiting: deque[_Job] = deque()  # jobs with queries not yet in a batch, in turn
        self.batch_budget_s = batch_budget_ms / 1000  # 0: batches sized by max_batch alone
        self._cost: float | None = None  # seconds per query of recent batches (EWMA)
        self._small_seen = -math.inf  # when the last small request arrived (monotonic)
        self._small_next = False  # the last batch held big work: small requests alone next
        self._lent = 0.0  # seconds of small batches answered inside big ones, all told
        self.small_seen_s = SMALL_SEEN_S
        self._changed = threading.Condition()  # a job arrived, or close() was called
        self._stopping = False
        self._worker: threading.Thread | None = None

    def start(self) -> None:
        self._stopping = False
        self._worker = threading.Thread(target=self._loop, name="attend-searcher", daemon=True)
        self._worker.start()

    def close(self) -> None:
        if self._worker is not None:
            with self._changed:
                self._stopping = True
                self._changed.notify()
            self._worker.join(timeout=30)
            self._worker = None

    async def search(self, queries: list[str], options: SearchOptions) -> list[SearchResult]:
        """Queue the queries for the next batch and wait for their responses."""
        if self._worker is None:
            raise RuntimeError("Searcher.start() was not called")
        job = _Job(queries, options)
        with self._changed:
            self._waiting.append(job)
            if len(queries) <= SMALL_REQUEST:
                self._small_seen = time.monotonic()
            self._changed.notify()
        return await asyncio.wrap_future(job.future)

    def search_now(self, queries: list[str], options: SearchOptions) -> list[SearchResult]:
        """Answer in the calling thread, unbatched (the CLI)."""
        job = _Job(queries, options)
        return self._answer([_Slice(job, 0, len(queries))])[0]

    def _loop(self) -> None:
        busy = False  # did the last batch have company? then more is likely on its way
        while (batch := self._collect(wait=busy)) is not None:
            busy = len(batch) > 1 or bool(self._waiting)
            self._run(batch)

    def _run(self, batch: list[_Slice]) -> None:
        """Answer `batch` and hand each request its responses once it has them all. A batch
        with big work yields to the small requests that arrive while it is encoded
        (`_answer_small`); the time they take is not counted in its cost."""
        big = any(_big(piece) for piece in batch)  # the batches that the budget sizes
        try:
            t0, lent = time.perf_counter(), self._lent
            answers = self._answer_pinned(batch, between=self._answer_small if big else None)
            if big:
                spent = time.perf_counter() - t0 - (self._lent - lent)
                self._measure(spent, sum(len(p.queries) for p in batch))
            for piece, responses in zip(batch, answers, strict=True):
                job = piece.job
                job.responses.extend(responses)
                if len(job.responses) == len(job.queries) and not job.future.done():
                    job.future.set_result(job.responses)  # done: cancelled (client gone)
        except Exception as e:  # every request in the batch gets the error, none hangs
            self._fail({id(piece.job): piece.job for piece in batch}.values(), e)

    def _answer_small(self) -> None:
        """Between the encoder calls of a batch with big work: answer the small requests
        waiting now, so one waits for one encoder call of big work, not for a whole batch."""
        with self._changed:
            batch = self._take_small()
        if batch:
            t0 = time.perf_counter()
            self._run(batch)
            self._lent += time.perf_counter() - t0

    def _answer_pinned(
        self, batch: list[_Slice], *, between: Callable[[], None] | None = None
    ) -> list[list[SearchResult]]:
        """`_answer`, each slice from its request's generation: one call per generation in
        the batch (two only in the batches that straddle a swap)."""
        current = self.index
        groups: dict[int, tuple[ServedIndex, list[int]]] = {}
        for i, piece in enumerate(batch):
            index = current if piece.job.index is None else piece.job.index
            groups.setdefault(id(index), (index, []))[1].append(i)
        answers: list[list[SearchResult]] = [[] for _ in batch]
        for index, members in groups.values():
            pieces = [batch[i] for i in members]
            answered = self._answer(pieces, index, between=between)
            for i, responses in zip(members, answered, strict=True):
                answers[i] = responses
        for piece in batch:
            if piece.job.index is None:
                piece.job.index = current
        return answers

    def _measure(self, seconds: float, queries: int) -> None:
        """Fold a batch's time into the running cost per query (an EWMA). Per query, not per
        batch: the size it gives, budget / cost, settles where a batch takes the budget, since
        a smaller batch's fixed cost raises its cost per query."""
        cost = seconds / max(queries, 1)
        self._cost = cost if self._cost is None else 0.8 * self._cost + 0.2 * cost

    def _limit(self) -> int:
        """Most queries in the next batch: `max_batch`, or while small requests are about and
        a big one waits too, what fits `batch_budget_s` at the measured cost (at least
        BUDGET_FLOOR)."""
        if self.batch_budget_s <= 0 or self._cost is None:
            return self.max_batch
        if time.monotonic() - self._small_seen > self.small_seen_s:
            return self.max_batch
        if all(_left(job) <= SMALL_REQUEST for job in self._waiting):
            return self.max_batch  # small requests only: a full batch serves them best
        fits = int(self.batch_budget_s / self._cost)
        return min(self.max_batch, max(BUDGET_FLOOR, fits))

    def _fail(self, jobs: Iterable[_Job], error: Exception) -> None:
        failed = {id(job) for job in jobs}
        with self._changed:  # the rest of a failed job's queries are not answered
            self._waiting = deque(job for job in self._waiting if id(job) not in failed)
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(error)

    def _collect(self, *, wait: bool) -> list[_Slice] | None:
        """The next batch, once a job waits (None once close() is called): when `wait`, after
        up to `window` for more to arrive, unless the waiting jobs fill a batch already."""
        with self._changed:
            while not self._waiting and not self._stopping:
                self._changed.wait()
            if self._stopping:
                return None
            deadline = time.monotonic() + (self.window if wait else 0.0)
            while (left := deadline - time.monotonic()) > 0 and self._unbatched() < self.max_batch:
                self._changed.wait(timeout=left)
                if self._stopping:
                    return None
            return self._take()

    def _unbatched(self) -> int:
        return sum(len(job.queries) - job.taken for job in self._waiting)

    def _take_small(self) -> list[_Slice]:
        """The waiting small requests, whole, in turn, up to `max_batch` queries (under the
        lock). Small from the start, untouched: the last queries of a big request may be in
        the very batch this one interrupts, and a request's answers are in its order."""
        self._waiting = deque(job for job in self._waiting if not job.future.cancelled())
        batch: list[_Slice] = []
        size = 0
        for job in self._waiting:
            n = len(job.queries)
            if job.taken == 0 and n <= SMALL_REQUEST and size + n <= self.max_batch:
                batch.append(_Slice(job, 0, n))
                size += n
                job.taken = n
        if batch:
            self._waiting = deque(job for job in self._waiting if _left(job) > 0)
        return batch

    def _take(self) -> list[_Slice]:
        """Up to `_limit()` queries from the waiting jobs, one from each in turn, small
        requests first; a job with queries left over goes to the back of the line. Called
        under the lock."""
        self._waiting = deque(job for job in self._waiting if not job.future.cancelled())
        small = [job for job in self._waiting if _left(job) <= SMALL_REQUEST]
        # after a batch that held big work, small requests alone (a batch of a few queries,
        # short), then big work again with the small requests that came meanwhile in front
        alone = self._small_next and self.batch_budget_s > 0 and 0 < len(small) < len(self._waiting)
        limit = self.max_batch if alone else self._limit()
        if not alone and limit < self.max_batch:  # the budget is the big work's: small ones
            limit = min(self.max_batch, limit + sum(_left(job) for job in small))  # come on top
        # the smallest requests first in each round (a stable sort: in turn among equals)
        turn = small if alone else sorted(self._waiting, key=lambda j: _left(j) > SMALL_REQUEST)
        counts: dict[int, int] = {}
        order: list[_Job] = []
        size, progressed = 0, True
        while size < limit and progressed:
            progressed = False
            for job in turn:
                if size == limit:
                    break
                if job.taken + counts.get(id(job), 0) < len(job.queries):
                    if id(job) not in counts:
                        order.append(job)
                    counts[id(job)] = counts.get(id(job), 0) + 1
                    size += 1
                    progressed = True
        batch = []
        for job in order:
            batch.append(_Slice(job, job.taken, job.taken + counts[id(job)]))
            job.taken += counts[id(job)]
        self._small_next = any(_big(piece) for piece in batch)
        unfinished = [job for job in order if job.taken < len(job.queries)]
        untouched = [job for job in self._waiting if id(job) not in counts]
        self._waiting = deque(untouched + unfinished)
        return batch

    def _answer(
        self,
        jobs: list[_Slice],
        index: ServedIndex | None = None,
        *,
        between: Callable[[], None] | None = None,
    ) -> list[list[SearchResult]]:
        if index is None:
            index = self.index  # one generation for the whole batch, even if a swap comes
        if len(index) == 0:
            raise IndexEmptyError()
        texts = [text for job in jobs for text in job.queries]
        logger.debug("batch of %d queries: %r", len(texts), texts)
        q = self._encode(texts, between)  # (B, d)
        filters = [s.job.options.filters for s in jobs for _ in s.queries]
        heads = [s.job.options.heads or self.heads for s in jobs for _ in s.queries]
        k = max(s.job.options.offset + s.job.options.k for s in jobs)
        rankings = iter(
            rank_queries(
                index,
                q,
                texts,
                k=k,
                heads=heads,
                scales=self.scales,
                filters=filters,
            )
        )
        self.batch_sizes.append(len(texts))
        self.batch_counts[len(texts)] += 1
        return [
            [self._result(index, t, s.job.options, next(rankings)) for t in s.queries] for s in jobs
        ]

    def _encode(self, texts: list[str], between: Callable[[], None] | None) -> torch.Tensor:
        """(B, d). With `between`, in encoder calls of ENCODE_CHUNK queries while small requests
        are about (else 4 × that), calling `between` after each."""
        if between is None:
            return self.cache.encode(self.encoder, texts)
        about = time.monotonic() - self._small_seen <= self.small_seen_s
        chunk = ENCODE_CHUNK if about else 4 * ENCODE_CHUNK
        parts = []
        for start in range(0, len(texts), chunk):
            parts.append(self.cache.encode(self.encoder, texts[start : start + chunk]))
            between()
        return torch.cat(parts)  # (B, d)

    def _result(
        self, index: ServedIndex, text: str, options: SearchOptions, ranking: Ranking
    ) -> SearchResult:
        page = ranking.hits[options.offset : options.offset + options.k]
        top = ranking.hits[0].weight if ranking.hits else 0.0
        strength = match_strength(top, ranking.matched)
        return SearchResult(
            query=text,
            model=index.model,
            scale=self.scales[RANK_FIELD],
            heads=HeadsUsed(ranking.head_weights, ranking.abstained, self.scales),
            entropy=ranking.entropy,
            match_strength=strength,
            no_strong_match=strength < NO_STRONG_MATCH_BELOW or not index.lexical.terms(text),
            catalog_size=len(index),
            matched=ranking.matched,
            k=options.k,
            offset=options.offset,
            generation=index.generation,
            results=[
                RankedBook(
                    options.offset + i + 1,
                    index.books.row(hit.row),
                    hit.score,
                    hit.weight,
                    hit.heads,
                )
                for i, hit in enumerate(page)
            ],
        )


def _left(job: _Job) -> int:
    """Queries of `job` not yet in a batch."""
    return len(job.queries) - job.taken


def _big(piece: _Slice) -> bool:
    """Whether `piece` is part of more work than a small request (its queries and those after
    it in its request)."""
    return len(piece.job.queries) - piece.start > SMALL_REQUEST
