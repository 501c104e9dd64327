"""The search worker's fair share (issue 16, finding 7): big batches of queries cannot make a
single query wait behind them, batches stay full, and every answer is the one given alone."""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from sqlalchemy import Engine

from conftest import FakeEncoder, index_books
from service.config.settings import ServiceSettings
from service.engine.batching import BUDGET_FLOOR, SMALL_REQUEST, WaitingLine
from service.engine.results import SearchResult
from service.engine.searcher import Searcher
from service.engine.startup import build_searcher
from service.engine.tickets import SearchOptions, Ticket

BOOKS: list[dict[str, object]] = [
    {"id": f"b{i:03d}", "title": f"Book {i} of the {w} kind", "description": f"{w} story {i}"}
    for i, w in enumerate(["wizard", "desert", "history", "space", "garden"] * 20)
]
BIG, BIG_REQUESTS = 64, 20


class RandomEncoder(FakeEncoder):
    """A fixed random unit vector per text: no two books tie on a score, so "the same answer"
    means the same order here (ties are tests/test_ties.py's business). With a `gate`, each call
    first waits for it: the worker's first batch is held until the test's requests are all in
    the line, so no assertion depends on how fast this thread queues them (no sleeps)."""

    gate: threading.Event | None = None

    def encode(self, texts: list[str]) -> torch.Tensor:
        if self.gate is not None:
            assert self.gate.wait(30), "the requests never reached the line"
        seeds = [int(hashlib.blake2b(t.encode(), digest_size=6).hexdigest(), 16) for t in texts]
        rows = [torch.randn(self.dim, generator=torch.Generator().manual_seed(s)) for s in seeds]
        return torch.nn.functional.normalize(torch.stack(rows), dim=-1)


def arrived(
    s: Searcher, monkeypatch: pytest.MonkeyPatch, count: int, *, small: bool = False
) -> threading.Event:
    """An event set once `count` requests (small ones only, with `small`) are in `s`'s line."""
    event, seen, add = threading.Event(), 0, s.line.add

    def counted_add(ticket: Ticket) -> None:
        nonlocal seen
        add(ticket)
        if not small or len(ticket.queries) <= SMALL_REQUEST:
            seen += 1
            if seen >= count:
                event.set()

    monkeypatch.setattr(s.line, "add", counted_add)
    return event


@pytest.fixture
def searcher(engine: Engine, tmp_path: Path) -> Iterator[Searcher]:
    url = index_books(engine, tmp_path, BOOKS, RandomEncoder())
    settings = ServiceSettings(database_url=url, device="cpu", batch_window_ms=2, max_batch=64)
    s = build_searcher(settings, engine=engine, encoder=RandomEncoder())
    s.line.batch_budget_s = 0  # turns alone here; the budget has its own test below
    s.start()
    yield s
    s.close()


def test_a_single_query_is_not_kept_behind_big_batches(
    searcher: Searcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(searcher.encoder, RandomEncoder)
    searcher.encoder.gate = arrived(searcher, monkeypatch, BIG_REQUESTS + 1)
    finished: list[str] = []  # the order requests were answered in
    lock = threading.Lock()

    async def one(name: str, queries: list[str]) -> list[SearchResult]:
        responses = await searcher.search(queries, SearchOptions(k=5))
        with lock:
            finished.append(name)
        return responses

    async def load() -> list[list[SearchResult]]:
        big = [
            one(f"big{r}", [f"{w} tale {r} {i}" for i, w in enumerate(["wizard", "space"] * 32)])
            for r in range(BIG_REQUESTS)
        ]
        return await asyncio.gather(*big, one("single", ["a desert history"]))

    *bigs, [single] = asyncio.run(load())

    # In arrival order the single query came last; in turns it shares the next batch.
    assert finished.index("single") < BIG_REQUESTS // 2, finished
    # Batches stayed full: 20 × 64 + 1 queries in 21 batches of 64, give or take the first.
    total = BIG * BIG_REQUESTS + 1
    assert len(searcher.batch_sizes) <= math.ceil(total / 64) + 2, list(searcher.batch_sizes)
    assert sum(searcher.batch_sizes) == total
    # Each request got its own answers, in its order, as if it had come alone.
    assert [r.query for r in bigs[3]] == [
        f"{w} tale 3 {i}" for i, w in enumerate(["wizard", "space"] * 32)
    ]
    for response in [single, bigs[0][0], bigs[7][63], bigs[19][31]]:
        alone = searcher.search_now([response.query], SearchOptions(k=5))[0]
        assert [h.book.id for h in response.results] == [h.book.id for h in alone.results]
        assert [h.weight for h in response.results] == pytest.approx(
            [h.weight for h in alone.results], rel=1e-5
        )


def test_big_requests_waiting_together_take_turns_batch_by_batch() -> None:
    """Two big requests in the line share every batch, a query each per round (4 + 4 of 8),
    so neither waits for the other to finish: the line alone, no worker, no clock."""
    line = WaitingLine(max_batch=8, window_s=0.0, batch_budget_s=0.0)
    a = Ticket([f"a{i}" for i in range(16)], SearchOptions())
    b = Ticket([f"b{i}" for i in range(12)], SearchOptions())
    line.add(a)
    line.add(b)
    name = {id(a): "a", id(b): "b"}
    batches = []
    while line.pending():
        batch = line.next_batch(wait=False)
        assert batch is not None
        batches.append({name[id(piece.ticket)]: (piece.start, piece.stop) for piece in batch})
    assert batches == [
        {"a": (0, 4), "b": (0, 4)},
        {"a": (4, 8), "b": (4, 8)},
        {"a": (8, 12), "b": (8, 12)},  # b's last queries, beside a's
        {"a": (12, 16)},
    ]


class SlowEncoder(RandomEncoder):
    """1 ms a text: a batch's cost grows with its size, as the real encoder's does."""

    def encode(self, texts: list[str]) -> torch.Tensor:
        time.sleep(0.001 * len(texts))
        return super().encode(texts)


def test_while_small_requests_are_about_a_batch_keeps_to_the_budget(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = index_books(engine, tmp_path, BOOKS, RandomEncoder())
    settings = ServiceSettings(database_url=url, device="cpu", batch_window_ms=2, max_batch=64)
    encoder = SlowEncoder()
    s = build_searcher(settings, engine=engine, encoder=encoder)
    s.line.batch_budget_s = 0.016  # 16 ms: at ≥ 1 ms a query, at most 16 queries a batch
    s.line.small_seen_s = 600  # the small requests stay "about" however slow the machine is
    encoder.gate = arrived(s, monkeypatch, 3 + 4)  # the big requests and the singles
    s.start()
    try:

        async def load(singles: int) -> list[str]:
            finished: list[str] = []

            async def one(name: str, queries: list[str]) -> None:
                await s.search(queries, SearchOptions(k=3))
                finished.append(name)

            await asyncio.gather(
                *(one(f"big{r}", [f"tale {r} {i}" for i in range(BIG)]) for r in range(3)),
                *(one(f"single{i}", [f"a story {i}"]) for i in range(singles)),
            )
            return finished

        finished = asyncio.run(load(singles=4))
        mixed = list(s.batch_sizes)
        assert sum(mixed) == 3 * BIG + 4
        # the first batch has no measured cost yet; from then on each keeps to the budget,
        # but for the last, what is left (the small requests waiting come on top of the
        # budget's big work); a batch of small requests alone follows one with big work
        assert all(BUDGET_FLOOR <= n <= 16 + 4 or n <= SMALL_REQUEST for n in mixed[1:-1]), mixed
        assert all(name.startswith("single") for name in finished[:4]), finished

        s.line.small_seen_s = 0  # no small request about any more
        s.batch_sizes.clear()
        asyncio.run(load(singles=0))
        assert list(s.batch_sizes) == [64, 64, 64]  # big requests alone: full batches
    finally:
        s.close()


class SignallingEncoder(SlowEncoder):
    """Sets `started` once it is encoding a text of a big request, then (through `gate`) waits
    for the single query to be in the line: it arrives during the big batch's first encoder
    call however slowly the test's thread runs (it once had to within ~48 ms of a sleep)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()

    def encode(self, texts: list[str]) -> torch.Tensor:
        if any(t.startswith("tale") for t in texts):
            self.started.set()
        return super().encode(texts)  # waits for the gate: the single query in the line


def test_a_single_query_is_answered_between_a_big_batch_s_encoder_calls(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single query that arrives while a 64-query batch is encoded waited for the whole
    batch; it is now answered after the encoder call under way, and the big request's answers
    are those it gets alone."""
    url = index_books(engine, tmp_path, BOOKS, RandomEncoder())
    settings = ServiceSettings(database_url=url, device="cpu", max_batch=64)
    encoder = SignallingEncoder()
    s = build_searcher(settings, engine=engine, encoder=encoder)
    encoder.gate = arrived(s, monkeypatch, 1, small=True)
    s.start()
    try:

        async def load() -> tuple[list[str], list[SearchResult]]:
            finished: list[str] = []

            async def one(name: str, queries: list[str]) -> list[SearchResult]:
                responses = await s.search(queries, SearchOptions(k=3))
                finished.append(name)
                return responses

            big = asyncio.create_task(one("big", [f"tale {i}" for i in range(BIG)]))
            await asyncio.to_thread(encoder.started.wait, 10)
            await one("single", ["a desert story"])
            return finished, await big

        finished, big = asyncio.run(load())
        assert finished == ["single", "big"]
        assert list(s.batch_sizes) == [1, BIG]  # answered inside the big batch
        assert [r.query for r in big] == [f"tale {i}" for i in range(BIG)]
        for response in big[::9]:
            alone = s.search_now([response.query], SearchOptions(k=3))[0]
            assert [h.book.id for h in response.results] == [h.book.id for h in alone.results]
    finally:
        s.close()


class SwappingEncoder(RandomEncoder):
    """Calls `swap` as it encodes each batch: a new generation swapped in while a batch is
    answered, as the reloader may (the batch itself already holds its generation)."""

    swap: Callable[[], object] = staticmethod(lambda: None)

    def encode(self, texts: list[str]) -> torch.Tensor:
        self.swap()
        return super().encode(texts)


def test_a_request_answered_over_several_batches_is_one_generation(
    engine: Engine, tmp_path: Path
) -> None:
    """A big request is sliced across batches; a generation swapped in between its slices
    must not answer the rest of it (each request: one generation)."""
    url = index_books(engine, tmp_path, BOOKS, RandomEncoder())
    settings = ServiceSettings(database_url=url, device="cpu", max_batch=8)
    encoder = SwappingEncoder()
    s = build_searcher(settings, engine=engine, encoder=encoder)
    older = s.index.generation
    extra: dict[str, object] = {"id": "new", "title": "A new book", "description": "new"}
    index_books(engine, tmp_path, [*BOOKS, extra], RandomEncoder())
    newer = build_searcher(settings, engine=engine, encoder=RandomEncoder()).index
    assert newer.generation != older
    encoder.swap = lambda: setattr(s, "index", newer)
    s.start()
    try:
        big = asyncio.run(s.search([f"tale {i}" for i in range(64)], SearchOptions(k=3)))
        assert len(s.batch_sizes) == 8  # 64 queries in batches of 8: seven swaps on the way
        assert {r.generation for r in big} == {older}
        assert {r.catalog_size for r in big} == {len(BOOKS)}
        [later] = asyncio.run(s.search(["tale"], SearchOptions(k=3)))
        assert (later.generation, later.catalog_size) == (newer.generation, len(BOOKS) + 1)
    finally:
        s.close()
