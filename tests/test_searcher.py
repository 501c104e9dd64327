"""Coalesced search: concurrent requests share one attention call and get the answers they
would have got alone; repeated queries skip the encoder."""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from conftest import FakeEncoder, index_books
from indexer import loaded_index
from indexer.filters import Filters
from models.keys import LocalKeys, key_dtype_for
from service.config.settings import ServiceSettings
from service.engine.exceptions import IndexEmptyError
from service.engine.query_ranking import Ranking, nearest_cosines
from service.engine.results import SearchResult
from service.engine.searcher import QueryCache, Searcher, unlike
from service.engine.served_index import ServedIndex
from service.engine.startup import build_searcher
from service.engine.tickets import SearchOptions


class RandomEncoder(FakeEncoder):
    """A fixed random unit vector per text: no two books ever tie on a score."""

    name = "random-64"

    def encode(self, texts: list[str]) -> torch.Tensor:
        self.calls += 1
        self.texts_encoded += len(texts)
        seeds = [int(hashlib.blake2b(t.encode(), digest_size=6).hexdigest(), 16) for t in texts]
        rows = [torch.randn(self.dim, generator=torch.Generator().manual_seed(s)) for s in seeds]
        return torch.nn.functional.normalize(torch.stack(rows), dim=-1)


BOOKS = [
    {
        "id": f"b{i:02d}",
        "title": f"Book {i}",
        "authors": [f"Author {i % 5}"],
        "year": 1950 + 3 * i,
        "language": ["eng", "fre"][i % 2],
    }
    for i in range(30)
]
QUERIES = ["neural database", "wizard magic", "desert spice", "history war", "storage"]
OPTIONS = [
    SearchOptions(k=5),
    SearchOptions(k=3, offset=2),
    SearchOptions(k=10, filters=Filters(language="fre")),
    SearchOptions(k=4, filters=Filters(year_min=1980, author="author 2")),
    SearchOptions(k=1, filters=Filters(author="nobody")),
]


def _index_books(engine: Engine, folder: Path) -> str:
    """BOOKS indexed into `engine` with the random encoder; the database URL."""
    return index_books(engine, folder, BOOKS, RandomEncoder())


@pytest.fixture
def searcher(engine: Engine, tmp_path: Path) -> Iterator[Searcher]:
    url = _index_books(engine, tmp_path)
    settings = ServiceSettings(database_url=url, device="cpu", batch_window_ms=200, max_batch=64)
    s = build_searcher(settings, engine=engine, encoder=RandomEncoder())
    s.start()
    yield s
    s.close()


def _same(a: SearchResult, b: SearchResult) -> None:
    assert (a.query, a.matched, a.k, a.offset) == (b.query, b.matched, b.k, b.offset)
    assert [h.book.id for h in a.results] == [h.book.id for h in b.results]
    assert [h.rank for h in a.results] == [h.rank for h in b.results]
    for x, y in zip(a.results, b.results, strict=True):
        assert math.isclose(x.weight, y.weight, rel_tol=1e-5)
        assert math.isclose(x.score, y.score, rel_tol=1e-5, abs_tol=1e-6)


def test_concurrent_searches_are_batched_and_answer_as_alone(searcher: Searcher) -> None:
    async def together() -> list[list[SearchResult]]:
        return await asyncio.gather(
            *(searcher.search([q], o) for q, o in zip(QUERIES, OPTIONS, strict=True))
        )

    batched = asyncio.run(together())
    assert max(searcher.batch_sizes) > 1  # a 200 ms window: they shared an attention call
    for q, o, [response] in zip(QUERIES, OPTIONS, batched, strict=True):
        _same(response, searcher.search_now([q], o)[0])
    assert batched[4][0].matched == 0 and batched[4][0].results == []
    assert all(
        h.book.id
        in {
            "b01",
            "b03",
            "b05",
            "b07",
            "b09",
            "b11",
            "b13",
            "b15",
            "b17",
            "b19",
            "b21",
            "b23",
            "b25",
            "b27",
            "b29",
        }
        for h in batched[2][0].results
    )


def test_max_batch_bounds_a_batch(searcher: Searcher) -> None:
    searcher.line.max_batch = 2

    async def many() -> list[list[SearchResult]]:
        return await asyncio.gather(
            *(searcher.search([f"history {i}"], SearchOptions(k=2)) for i in range(7))
        )

    assert len(asyncio.run(many())) == 7
    assert max(searcher.batch_sizes) <= 2


def test_a_repeated_query_skips_the_encoder(searcher: Searcher) -> None:
    encoder = searcher.encoder
    assert isinstance(encoder, RandomEncoder)
    first = searcher.search_now(["wizard magic", "wizard magic", "history"], SearchOptions())
    assert encoder.texts_encoded == 2  # duplicates within a batch are encoded once
    again = searcher.search_now(["wizard magic"], SearchOptions())
    assert encoder.texts_encoded == 2
    _same(first[0], again[0])


def test_query_cache_evicts_the_least_recently_used() -> None:
    encoder, cache = RandomEncoder(), QueryCache(size=2)
    cache.encode(encoder, ["a", "b"])
    cache.encode(encoder, ["a"])  # a is now the most recent
    cache.encode(encoder, ["c"])  # evicts b
    assert encoder.texts_encoded == 3
    rows = cache.encode(encoder, ["a", "c"])
    assert encoder.texts_encoded == 3
    assert torch.equal(rows, RandomEncoder().encode(["a", "c"]))
    cache.encode(encoder, ["b"])
    assert encoder.texts_encoded == 4


def test_errors_reach_every_waiting_request(engine: Engine) -> None:
    url = engine.url.render_as_string(hide_password=False)
    s = build_searcher(ServiceSettings(database_url=url), engine=engine, encoder=RandomEncoder())
    s.start()
    try:

        async def two() -> list[object]:
            return await asyncio.gather(
                s.search(["a"], SearchOptions()),
                s.search(["b"], SearchOptions()),
                return_exceptions=True,
            )

        assert all(isinstance(r, IndexEmptyError) for r in asyncio.run(two()))
    finally:
        s.close()


def test_key_dtype_is_half_on_cuda_and_float32_on_cpu() -> None:
    assert key_dtype_for(torch.device("cpu"), "auto") == torch.float32
    assert key_dtype_for(torch.device("cuda"), "auto") == torch.float32  # exact by default
    assert key_dtype_for(torch.device("cpu"), "bfloat16") == torch.bfloat16


def test_the_served_index_streams_the_loaded_keys_without_a_copy(
    engine: Engine, tmp_path: Path
) -> None:
    """The store loads keys column-major, the served index's layout: on the CPU in float32 it
    keeps those very arrays, and its `host_index` (what a generation diff is folded into) views them
    again: one copy of the keys in memory, not two."""
    _index_books(engine, tmp_path)
    with Session(engine) as session:
        index = loaded_index.load_index(session=session, model=RandomEncoder.name)
    served = ServedIndex.local(index, device="cpu")
    host = served.host_index()
    for field, keys in index.keys.items():
        assert isinstance(served.keys, LocalKeys)
        streamed = served.keys.by_field[field]
        assert streamed.T.is_contiguous()  # (d, N) memory: q Kᵀ reads it in order
        assert np.shares_memory(streamed.numpy(), keys)
        assert np.shares_memory(host.keys[field], keys)
        assert np.array_equal(host.keys[field], keys)
    assert host.values is None  # a search returns weights, not weights @ V: no values kept


def test_a_batch_past_the_kept_scores_budget_is_ranked_in_parts_as_alone(
    searcher: Searcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose raw scores would outgrow `KEEP_SCORES` is ranked in parts of at most
    `rows_kept` queries, each part's scores kept (no key is read twice), and every query gets
    the answer it gets alone: its hits, weights, shares and entropy."""
    import models.local_heads
    from models.keys import LocalKeys
    from service.engine.query_ranking import rank_queries

    index = searcher.index
    N = len(index)
    texts = [*QUERIES, "a sixth query", "a seventh"]
    q = searcher.encoder.encode(texts)
    args: dict[str, object] = {"k": 5, "heads": [searcher.heads] * 7, "scales": searcher.scales}
    alone = [
        rank_queries(index, q[b : b + 1], [t], **{**args, "heads": [searcher.heads]})
        for b, t in enumerate(texts)
    ]  # type: ignore[arg-type]
    monkeypatch.setattr(models.local_heads, "KEEP_SCORES", 2 * 3 * N)  # 3 queries of 2 dense heads
    assert models.local_heads.rows_kept(2, N) == 3
    sizes: list[int] = []
    kept: list[bool] = []
    dense_heads = LocalKeys.dense_heads

    def spied(self: LocalKeys, q: torch.Tensor, heads, **kw):  # type: ignore[no-untyped-def]
        out = dense_heads(self, q, heads, **kw)
        sizes.append(q.shape[-2])
        top = out.top

        def top_and_kept(k: int):  # type: ignore[no-untyped-def]
            answer = top(k)
            kept.append(all(s is not None for s in out._scores))
            return answer

        out.top = top_and_kept  # type: ignore[method-assign]
        return out

    monkeypatch.setattr(LocalKeys, "dense_heads", spied)
    together = rank_queries(index, q, texts, **args)  # type: ignore[arg-type]
    assert sizes == [3, 3, 1] and all(kept)
    for got, [want] in zip(together, alone, strict=True):
        assert [h.row for h in got.hits] == [h.row for h in want.hits]
        for x, y in zip(got.hits, want.hits, strict=True):
            assert math.isclose(x.weight, y.weight, rel_tol=1e-6)
            for head, part in x.heads.items():
                assert math.isclose(part.share, y.heads[head].share, rel_tol=1e-6, abs_tol=1e-12)
        assert got.entropy is not None and want.entropy is not None
        assert math.isclose(got.entropy, want.entropy, rel_tol=1e-6)
    monkeypatch.setattr(models.local_heads, "KEEP_SCORES", 2 * 3 * N - 1)  # one short: parts of 2
    sizes.clear()
    rank_queries(index, q, texts, **args)  # type: ignore[arg-type]
    assert sizes == [2, 2, 2, 1]


def test_a_nearest_book_below_the_least_cosine_is_unlike_the_query() -> None:
    """`unlike` at its bound: a nearest book whose cosine equals the least one is a match, one
    the smallest step below it is none; a ranking no dense head weighed in says nothing."""
    ranking = Ranking([], 10, {}, (), None, 1, nearest=0.375)
    assert not unlike(ranking, 0.375)
    assert unlike(ranking, math.nextafter(0.375, 1.0))
    assert not unlike(Ranking([], 10, {}, (), None, 1, nearest=None), 0.99)


def test_a_querys_nearest_book_is_of_the_heads_it_weighs() -> None:
    """In a batch, the mixture holds every head some query weighs: a query that weighs only the
    lexical head has no nearest book (as alone, where no dense head runs), and one that weighs
    only the title head has the title's, not the description's higher one."""
    best = torch.tensor([[0.2, 0.9], [0.3, 0.8], [0.1, -math.inf]], dtype=torch.float64)
    used = [
        {"lexical": 1.0},
        {"title": 1.0, "description": 0.0},
        {"title": 0.5, "description": 0.5},
    ]
    got = nearest_cosines(best, ["title", "description", "lexical"], used)
    assert got == [None, 0.3, 0.1]
    assert nearest_cosines(None, ["title"], used) == [None, None, None]
