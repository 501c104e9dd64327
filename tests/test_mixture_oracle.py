"""Search answers against an oracle written here, not the project's ranking code: for each query,
a softmax per head over the whole catalog in float64 numpy, the filters' mask applied, the
mixture Σ_h π_h p_h with the abstaining head's π given to the others (service/engine/mixing.py),
and its top k. The search runs as the service runs it: concurrent requests with their own
filters and heads, batched by the `Searcher`'s worker, over the keys in this process or over
2 and 3 shards (`LocalShard`s: the router's merge without Ray). Comparing a sharded or batched
answer with a single-process or `search_now` one runs the same ranking on both sides; a fault
in it would pass there and fails here."""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from conftest import FakeEncoder
from indexer import loaded_index
from indexer.book_columns import BookColumns
from indexer.filters import Filters
from service.cluster.shards.router import ShardedKeys
from service.cluster.shards.shard import LocalShard, Shard
from service.config.settings import ServiceSettings
from service.engine.results import SearchResult
from service.engine.searcher import Searcher
from service.engine.served_index import ServedIndex
from service.engine.startup import searcher_of
from service.engine.tickets import SearchOptions, Ticket

N, D = 300, 32
WORDS = ["harbour", "lantern", "orchard", "granite", "meadow", "quarry", "thistle", "willow"]


def unit_rows(n: int, *, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    x = g.standard_normal((n, D))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)  # (n, D)


class RandomEncoder(FakeEncoder):
    """A fixed random unit vector per text (no two books tie), and a gate: its first call waits
    until the test's requests are all in the line, so they are answered in one batch."""

    dim = D

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def encode(self, texts: list[str]) -> torch.Tensor:
        assert self.gate.wait(30), "the requests never reached the line"
        return self.vectors(texts)

    @staticmethod
    def vectors(texts: list[str]) -> torch.Tensor:
        """(len(texts), D) float32, ungated: the oracle's queries."""
        seeds = [int(hashlib.blake2b(t.encode(), digest_size=6).hexdigest(), 16) for t in texts]
        rows = [torch.randn(D, generator=torch.Generator().manual_seed(s)) for s in seeds]
        return torch.nn.functional.normalize(torch.stack(rows), dim=-1)


def catalog() -> tuple[loaded_index.LoadedIndex, list[str]]:
    """N books with random title and description keys, years (some missing), languages and
    authors to filter on, and descriptions of WORDS (the lexical head's): no query word is one."""
    authors = [
        ["Ann Smith"] if i % 5 == 0 else ["Cy Smithers", "Di Lee"] if i % 7 == 0 else ["Bo Jones"]
        for i in range(N)
    ]
    books = BookColumns(
        ids=[f"b{i:03d}" for i in range(N)],
        titles=[f"Volume {i}" for i in range(N)],
        authors=authors,
        years=[None if i % 11 == 0 else 1950 + i % 70 for i in range(N)],
        languages=["fr" if i % 3 == 0 else "en" if i % 3 == 1 else None for i in range(N)],
    )
    description = unit_rows(N, seed=2)
    index = loaded_index.LoadedIndex(
        books=books,
        keys={"title": unit_rows(N, seed=1), "description": description},
        values=description,
        model=RandomEncoder.name,
        generation=1,
    )
    descriptions = [" ".join(WORDS[j % 8] for j in range(i, i + 3)) for i in range(N)]
    return index, descriptions


@dataclass(frozen=True)
class Request:
    queries: list[str]
    options: SearchOptions


REQUESTS = [
    Request(["tides of a salt marsh"], SearchOptions(k=10, heads={"description": 1.0})),
    Request(
        ["a clockmaker's apprentice", "letters from the front"],
        SearchOptions(k=8, filters=Filters(year_min=2000), heads={"title": 1.0}),
    ),
    Request(
        ["the quiet engineer"],
        SearchOptions(
            k=5, offset=3, filters=Filters(language="fr"), heads={"title": 0.3, "description": 0.7}
        ),
    ),
    Request(
        ["smugglers and their boats"],
        SearchOptions(
            k=10,
            filters=Filters(author="smith", year_max=1990),
            heads={"title": 0.2, "description": 0.8},
        ),
    ),
    # the lexical head has no term of it in any book: it abstains, the title head gets its π
    Request(
        ["zyxwv qwpfg"],
        SearchOptions(
            k=6,
            filters=Filters(exclude=frozenset({"b007", "b010"})),
            heads={"title": 0.5, "lexical": 0.5},
        ),
    ),
]


def oracle_mask(books: BookColumns, f: Filters) -> np.ndarray:
    """(N,) bool: what the filters keep, as documented (indexer/filters.py)."""
    keep = np.ones(len(books), dtype=bool)
    for i in range(len(books)):
        year, lang = books.years[i], books.languages[i]
        if f.year_min is not None and (year is None or year < f.year_min):
            keep[i] = False
        if f.year_max is not None and (year is None or year > f.year_max):
            keep[i] = False
        if f.language is not None and (lang or "").casefold() != f.language.casefold():
            keep[i] = False
        if f.author is not None and not any(
            f.author.casefold() in a.casefold() for a in books.authors[i]
        ):
            keep[i] = False
        if books.ids[i] in f.exclude:
            keep[i] = False
    return keep


@dataclass(frozen=True)
class Expected:
    ids: list[str]
    weights: list[float]
    shares: list[dict[str, float]]  # per hit: head → π_h p_h
    desc_scores: list[float]  # per hit: q·k with the description key
    matched: int
    entropy: float
    pi: dict[str, float]


def oracle(
    index: loaded_index.LoadedIndex,
    q: np.ndarray,
    options: SearchOptions,
    *,
    scales: dict[str, float],
    abstaining: set[str],
) -> Expected:
    """The mixture of the options' dense heads in float64 over the whole catalog: per head
    p_h = softmax(scale_h · q K_hᵀ) over the kept books, π renormalised without the heads in
    `abstaining`, weight = Σ π_h p_h, then the page [offset, offset + k) by weight."""
    assert options.heads is not None
    keep = oracle_mask(index.books, options.filters)
    pi = {h: w for h, w in options.heads.items() if h not in abstaining}
    total = sum(pi.values())
    pi = {h: w / total for h, w in pi.items()}
    q64 = q.astype(np.float64)
    probs = {}
    for h in pi:
        logits = scales[h] * (index.keys[h].astype(np.float64) @ q64)  # (N,)
        logits[~keep] = -np.inf
        e = np.exp(logits - logits[keep].max())
        probs[h] = e / e.sum()  # (N,) 0 off the mask
    weight = sum(pi[h] * probs[h] for h in pi)  # (N,)
    order = [int(i) for i in np.argsort(-weight, kind="stable") if keep[i]]
    page = order[options.offset : options.offset + options.k]
    w = weight[keep]
    desc = index.keys["description"].astype(np.float64) @ q64
    return Expected(
        ids=[index.books.ids[i] for i in page],
        weights=[float(weight[i]) for i in page],
        shares=[{h: float(pi[h] * probs[h][i]) for h in pi} for i in page],
        desc_scores=[float(desc[i]) for i in page],
        matched=int(keep.sum()),
        entropy=float(-(w[w > 0] * np.log(w[w > 0])).sum()),
        pi=pi,
    )


def served(kind: str, index: loaded_index.LoadedIndex, descriptions: list[str]) -> ServedIndex:
    """The index as one process serves it, or as the router does over LocalShards; in chunks
    of 64 keys, so that every head's softmax streams."""
    if kind == "one-process":
        return ServedIndex.local(index, device="cpu", chunk_size=64, descriptions=descriptions)
    shards = int(kind[0])
    clients = [
        LocalShard(Shard(index, shard=s, shards=shards, device="cpu", chunk_size=64))
        for s in range(shards)
    ]
    return ServedIndex(index, ShardedKeys.of(index, clients), descriptions=descriptions)


@pytest.fixture(params=["one-process", "2-shards", "3-shards"])
def searcher(request: pytest.FixtureRequest) -> Iterator[tuple[Searcher, loaded_index.LoadedIndex]]:
    index, descriptions = catalog()
    # the service's settings (their head scales; batches of up to 64 queries)
    s = searcher_of(ServiceSettings(), RandomEncoder(), served(request.param, index, descriptions))
    s.start()
    yield s, index
    s.close()


def test_concurrent_searches_answer_as_the_oracle(
    searcher: tuple[Searcher, loaded_index.LoadedIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    s, index = searcher
    encoder = s.encoder
    assert isinstance(encoder, RandomEncoder)
    queued: list[Ticket] = []
    add = s.line.add

    def counted_add(ticket: Ticket) -> None:
        add(ticket)
        queued.append(ticket)
        if len(queued) == len(REQUESTS):
            encoder.gate.set()

    monkeypatch.setattr(s.line, "add", counted_add)

    async def all_at_once() -> list[list[SearchResult]]:
        return await asyncio.gather(*(s.search(r.queries, r.options) for r in REQUESTS))

    answers = asyncio.run(all_at_once())
    total = sum(len(r.queries) for r in REQUESTS)
    assert list(s.batch_sizes) == [total]  # one batch: (B, N) masks, heads per query
    for request, responses in zip(REQUESTS, answers, strict=True):
        for text, got in zip(request.queries, responses, strict=True):
            q = RandomEncoder.vectors([text])[0].numpy()
            abstaining = {"lexical"} if "lexical" in (request.options.heads or {}) else set()
            want = oracle(index, q, request.options, scales=s.scales, abstaining=abstaining)
            assert got.query == text
            assert got.heads.weights == pytest.approx(want.pi, rel=1e-12)
            assert got.heads.abstained == tuple(sorted(abstaining))
            assert got.matched == want.matched
            assert [h.book.id for h in got.results] == want.ids, text
            assert [h.rank for h in got.results] == [
                request.options.offset + r + 1 for r in range(len(want.ids))
            ]
            assert [h.weight for h in got.results] == pytest.approx(want.weights, rel=1e-5)
            for hit, shares in zip(got.results, want.shares, strict=True):
                assert {h: p.share for h, p in hit.heads.items()} == pytest.approx(
                    shares, rel=1e-5, abs=1e-12
                )
            assert [h.score for h in got.results] == pytest.approx(want.desc_scores, abs=1e-6)
            assert got.entropy is not None
            assert math.isclose(got.entropy, want.entropy, rel_tol=1e-5)
