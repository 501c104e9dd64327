"""Sharded exact attention: 1, 2 and 3 shards give one index's ids and weights (relative 1e-6)
on the demo catalog embedded with the real model, with and without filters; and a sharded search
(the router's mixture of heads over `LocalShard`s) gives the single-process search's answer: ids,
weights, per-head scores, probabilities and shares, π and entropy."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
import pytest
import torch
from sqlalchemy.orm import Session

from indexer import db, loaded_index, pipeline, store
from indexer.book_columns import BookColumns
from indexer.data import DEMO_CATALOG
from indexer.filters import Filters
from indexer.settings import IndexSettings
from models.attention import Attention, attend
from models.encoder import SentenceTransformerEncoder
from models.heads import ScoredHead
from models.shard_merge import ShardAnswer, SparseScores, merge, shard_bounds
from service.api.search_schemas import PageAndFilters
from service.cluster.shards.router import ShardedKeys
from service.cluster.shards.shard import LocalShard, Shard, ShardQuery, ShardSweep
from service.config.head_weights import BookHeads, parse_heads
from service.config.settings import ServiceSettings
from service.engine import book_ranking
from service.engine.query_ranking import Hit, Ranking, rank_queries
from service.engine.searcher import Searcher
from service.engine.served_index import RANK_FIELD, ServedIndex
from service.engine.startup import searcher_of

pytestmark = pytest.mark.model
QUERIES = ["generative AI", "the history of Rome", "a picture book about a bear", "databases"]
# plus an author's name (the lexical head's strength) and words in no book (it abstains)
# names that the author head answers ("by": his books; "about": the others), and none
SEARCHES = [
    *QUERIES,
    "Kleppmann",
    "books by tolkien",
    "a biography of tolkien",
    "qwertyuiop asdfghjkl",
]
SCALE = 20.0
SCALES = {
    "title": SCALE,
    "description": SCALE,
    "lexical": 1.0,
    "author": 10.0,
    "series": 5.0,
    "subjects": 5.0,
}
DEFAULT_HEADS_TEXT = "title:0.3,description:0.4,lexical:0.3,author:1"
DEFAULT_HEADS = parse_heads(DEFAULT_HEADS_TEXT)


@pytest.fixture(scope="module")
def encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(device="cpu", backend="torch")


@pytest.fixture(scope="module")
def catalog(
    encoder: SentenceTransformerEncoder, tmp_path_factory: pytest.TempPathFactory
) -> tuple[loaded_index.LoadedIndex, list[str | None]]:
    """The demo catalog indexed with the real model into SQLite, loaded as the service does,
    and its descriptions (the lexical head's BM25 reads them)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sharded') / 'attend.db'}"
    engine = db.create_db_engine(url)
    try:
        pipeline.run(
            IndexSettings(database_url=url), engine=engine, encoder=encoder, path=DEMO_CATALOG
        )
        with Session(engine) as session:
            index = loaded_index.load_index(session=session, model=encoder.name)
            descriptions = store.book_descriptions(
                session=session, book_ids=index.ids, generation=index.generation
            )
    finally:
        engine.dispose()
    return index, descriptions


@pytest.fixture(scope="module")
def index(catalog: tuple[loaded_index.LoadedIndex, list[str | None]]) -> loaded_index.LoadedIndex:
    return catalog[0]


def _assert_same(got: Attention, want: Attention) -> None:
    assert torch.equal(got.matched, want.matched)
    assert torch.equal(got.indices, want.indices)
    torch.testing.assert_close(got.weights, want.weights, rtol=1e-6, atol=0.0)
    torch.testing.assert_close(got.scores, want.scores, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got.logsumexp, want.logsumexp, rtol=1e-7, atol=1e-6)
    if want.output is not None:
        assert got.output is not None
        torch.testing.assert_close(got.output, want.output, rtol=1e-5, atol=1e-6)


def _sharded(
    q: torch.Tensor, keys: torch.Tensor, shards: int, mask: torch.Tensor | None, k: int
) -> Attention:
    answers = [
        ShardAnswer.of(
            attend(
                q,
                keys[a:b],
                keys[a:b],
                k=k,
                scale=SCALE,
                mask=None if mask is None else mask[..., a:b],
            ),
            offset=a,
        )
        for a, b in shard_bounds(len(keys), shards)
    ]
    return merge(answers, k=k)


def _part(mask: torch.Tensor | None, a: int, b: int) -> torch.Tensor | None:
    return None if mask is None else mask[..., a:b]


def test_split_covers_every_row_once() -> None:
    assert shard_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert shard_bounds(2, 3) == [(0, 0), (0, 1), (1, 2)]
    with pytest.raises(ValueError, match="at least one shard"):
        shard_bounds(10, 0)


@pytest.mark.parametrize("masking", ["none", "shared", "per_query", "one_shard_only"])
def test_shards_give_the_single_index_answer(
    index: loaded_index.LoadedIndex, encoder: SentenceTransformerEncoder, masking: str
) -> None:
    keys = torch.from_numpy(index.keys[RANK_FIELD])  # (N, d)
    q = encoder.encode(QUERIES)  # (B, d)
    N = len(keys)
    years = torch.tensor([y or 0 for y in index.books.years])
    mask = {
        "none": None,
        "shared": years >= 2000,  # (N,)
        "per_query": torch.stack([years >= 2000, years < 1990, years > 0, years >= 2015]),
        "one_shard_only": torch.arange(N) < 20,  # shards 2 and 3 fully masked
    }[masking]
    if mask is not None:
        assert 0 < int(mask.sum()) < mask.numel()
    k = 25
    single = attend(q, keys, keys, k=k, scale=SCALE, mask=mask)
    for shards in (1, 2, 3):
        _assert_same(_sharded(q, keys, shards, mask, k), single)


def test_everything_masked_merges_to_nothing(index: loaded_index.LoadedIndex) -> None:
    keys = torch.from_numpy(index.keys[RANK_FIELD])
    q = keys[:2]
    mask = torch.zeros(len(keys), dtype=torch.bool)
    got = _sharded(q, keys, 3, mask, 5)
    assert torch.all(got.indices == -1) and torch.all(got.weights == 0)
    assert torch.all(torch.isneginf(got.logsumexp)) and got.matched.tolist() == [0, 0]
    assert got.output is not None and torch.all(got.output == 0)


def test_merge_needs_an_answer() -> None:
    with pytest.raises(ValueError, match="at least one"):
        merge([], k=3)


def test_equal_weights_come_in_row_order_whatever_the_shards() -> None:
    keys = torch.nn.functional.normalize(torch.ones(6, 4), dim=-1)  # six equal keys
    keys = torch.cat([keys, -keys[:2]])  # and two far ones
    for shards in (1, 2, 3):
        got = _sharded(keys[:1], keys, shards, None, 6)
        assert got.indices.tolist() == [[0, 1, 2, 3, 4, 5]]
        torch.testing.assert_close(got.weights.sum(), torch.tensor(1.0), rtol=1e-6, atol=0.0)


def test_a_sharded_index_ranks_like_the_served_index(
    index: loaded_index.LoadedIndex, encoder: SentenceTransformerEncoder
) -> None:
    """The description head alone, through the service's ranking: filters become each shard's
    own masks; hits, weights and matched counts are the single process's."""
    q = encoder.encode(QUERIES)
    filters = [Filters(), Filters(year_min=2000), Filters(author="a"), Filters(language="zz")]
    args: dict[str, Any] = {"k": 10, "heads": [{RANK_FIELD: 1.0}] * 4, "scales": SCALES}
    want = rank_queries(ServedIndex.local(index, device="cpu"), q, QUERIES, filters=filters, **args)
    for shards in (1, 2, 3):
        clients = [
            LocalShard(Shard(index, shard=s, shards=shards, device="cpu")) for s in range(shards)
        ]
        got = rank_queries(
            ServedIndex(index, ShardedKeys.of(index, clients)), q, QUERIES, filters=filters, **args
        )
        assert [r.matched for r in got] == [r.matched for r in want]
        assert want[3].matched == 0 and got[3].hits == []
        for g, w in zip(got, want, strict=True):
            assert [h.row for h in g.hits] == [h.row for h in w.hits]
            torch.testing.assert_close(
                torch.tensor([h.weight for h in g.hits]),
                torch.tensor([h.weight for h in w.hits]),
                rtol=1e-6,
                atol=0.0,
            )


def test_a_shard_with_no_rows_answers_nothing(index: loaded_index.LoadedIndex) -> None:
    tiny = Shard(index, shard=0, shards=len(index) + 1, device="cpu")  # rows [0, 0)
    assert len(tiny) == 0
    q = torch.from_numpy(index.keys[RANK_FIELD][:2])
    (answer,) = tiny.top(ShardQuery(q, [(RANK_FIELD, SCALE)], [Filters()] * 2), 3)
    assert answer.indices.shape == (2, 0) and torch.all(torch.isneginf(answer.logsumexp))


def test_a_shard_with_no_rows_adds_nothing_to_a_mixture(index: loaded_index.LoadedIndex) -> None:
    tiny = Shard(index, shard=0, shards=len(index) + 1, device="cpu")  # rows [0, 0)
    q = torch.from_numpy(index.keys[RANK_FIELD][:2])
    query = ShardQuery(q, [("title", SCALE), (RANK_FIELD, SCALE)], [Filters()] * 2)
    cand = torch.tensor([[0, 5, -1], [3, 4, 7]])
    zeros = torch.zeros(2, 3, 2, dtype=torch.float64)
    assert torch.equal(tiny.scores(query, cand), zeros)
    pi, lse = torch.full((2, 2), 0.5, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64)
    scores, entropy = tiny.sweep(query, ShardSweep(pi, lse, cand, []))
    assert torch.equal(scores, zeros)
    assert torch.equal(entropy, torch.zeros(2, dtype=torch.float64))


def test_shards_must_tile_the_catalog(index: loaded_index.LoadedIndex) -> None:
    shard = LocalShard(Shard(index, shard=0, shards=2, device="cpu"))
    with pytest.raises(ValueError, match="do not tile"):
        ShardedKeys.of(index, [shard])


def test_sparse_scores_rebuild_a_shards_slice() -> None:
    scores = torch.tensor(
        [
            [-math.inf, 2.5, -math.inf, -math.inf, 1.0, -math.inf],  # a query with terms
            [0.0, 0.0, 3.0, 0.0, 0.0, 0.0],  # an abstaining row: 0 but outside the mask
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],  # anything else: exact, only not sparse
        ]
    )
    head = ScoredHead(scores, 1.5)
    for start, stop in [(0, 6), (1, 4), (4, 6), (3, 3)]:
        part = SparseScores.of(head, start, stop)
        assert part.values.numel() <= 2 + 1 + (stop - start)
        rebuilt = part.head()
        assert rebuilt.scale == 1.5 and torch.equal(rebuilt.scores, scores[:, start:stop])


def _searcher(encoder: SentenceTransformerEncoder, index: ServedIndex) -> Searcher:
    settings = ServiceSettings(
        head_scales=",".join(f"{h}:{v}" for h, v in SCALES.items()),
        heads=DEFAULT_HEADS_TEXT,
    )
    return searcher_of(settings, encoder, index)


def _router(catalog: tuple[loaded_index.LoadedIndex, list[str | None]], shards: int) -> ServedIndex:
    index, descriptions = catalog
    clients = [
        LocalShard(Shard(index, shard=s, shards=shards, device="cpu")) for s in range(shards)
    ]
    return ServedIndex(index, ShardedKeys.of(index, clients), descriptions=descriptions)


@pytest.fixture(scope="module")
def single(catalog: tuple[loaded_index.LoadedIndex, list[str | None]]) -> ServedIndex:
    index, descriptions = catalog
    return ServedIndex.local(index, device="cpu", descriptions=descriptions)


@pytest.fixture(scope="module", params=[2, 3], ids=["2-shards", "3-shards"])
def sharded(
    request: pytest.FixtureRequest, catalog: tuple[loaded_index.LoadedIndex, list[str | None]]
) -> ServedIndex:
    return _router(catalog, request.param)


def _close(got: Any, want: Any, path: str = "") -> None:
    """Equal, floats to a relative 1e-6 (raw scores: also 1e-7 absolute, fp32 dot products;
    match strength, a log ratio that is 0 for a uniform answer: 1e-9; the entropy, a sum over
    every book of terms from fp32 products, 0 for a peaked answer up to rounding: 1e-5 nats, as
    tests/test_ray_serve.py)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), path
        for key in want:
            _close(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{path}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        tolerances = {".score": 1e-7, ".match_strength": 1e-9, ".entropy": 1e-5}
        absolute = tolerances.get(path[path.rfind(".") :], 0.0)
        assert math.isclose(got, want, rel_tol=1e-6, abs_tol=absolute), (path, got, want)
    else:
        assert got == want, (path, got, want)


@pytest.mark.parametrize(
    "heads", [None, "title:1", "lexical:1", "description:1", "title:0.5,lexical:0.5"]
)
@pytest.mark.parametrize(
    "filters",
    [{}, {"author": "a"}, {"year_min": 2000}, {"year_max": 1990, "language": "en"}],
    ids=["no-filter", "author", "year-min", "year-max-language"],
)
def test_sharded_search_answers_like_one_process(
    encoder: SentenceTransformerEncoder,
    single: ServedIndex,
    sharded: ServedIndex,
    heads: str | None,
    filters: dict[str, Any],
) -> None:
    """Through `Searcher.search_now`, as the service answers: the same responses, field by
    field, with the default heads, one head, and two; with and without filters."""
    options = PageAndFilters(k=10, offset=2, heads=heads, **filters).options()
    want = _searcher(encoder, single).search_now(SEARCHES, options)
    got = _searcher(encoder, sharded).search_now(SEARCHES, options)
    for g, w in zip(got, want, strict=True):
        assert g.entropy is not None
        assert [h.book.id for h in g.results] == [h.book.id for h in w.results], g.query
        _close(asdict(g), asdict(w))
    assert any(r.results for r in want)
    if heads is None and not filters:  # the lexical head answers, or abstains without a word
        assert "lexical" in want[4].heads.weights and "lexical" in want[-1].heads.abstained
        assert want[-3].author is not None and want[-3].author.intent == "by"  # books by tolkien
        assert want[-2].author is not None and want[-2].author.intent == "about"


def _hit(hit: Hit) -> dict[str, Any]:
    heads = {name: vars(part) for name, part in hit.heads.items()}
    return {"weight": hit.weight, "score": hit.score, "heads": heads}


def _same_rankings(got: list[Ranking], want: list[Ranking]) -> None:
    assert [r.matched for r in got] == [r.matched for r in want]
    assert [r.rounds for r in got] == [r.rounds for r in want]
    for g, w in zip(got, want, strict=True):
        assert g.head_weights == w.head_weights
        assert [h.row for h in g.hits] == [h.row for h in w.hits]
        _close([_hit(h) for h in g.hits], [_hit(h) for h in w.hits])
        assert g.entropy is not None and w.entropy is not None
        assert math.isclose(g.entropy, w.entropy, rel_tol=1e-6)


def test_sharded_ranking_with_heads_and_filters_per_query(
    encoder: SentenceTransformerEncoder, single: ServedIndex, sharded: ServedIndex
) -> None:
    """One batch whose queries each have their own heads and filters ((B, N) masks)."""
    texts = [*QUERIES[:4], "Kleppmann", "qwertyuiop asdfghjkl", "books by tolkien", "tolkien"]
    q = encoder.encode(texts)
    heads = [
        DEFAULT_HEADS,
        parse_heads("title:1"),
        parse_heads("lexical:1"),
        parse_heads("description:0.5,lexical:0.5"),
        parse_heads("title:0.2,description:0.8"),
        parse_heads("lexical:1"),  # abstains: no evidence, no results
        parse_heads("author:1"),  # Tolkien's books alone
        DEFAULT_HEADS,
    ]
    filters = [
        Filters(),
        Filters(year_min=2000),
        Filters(author="a"),
        Filters(language="zz"),  # nothing left
        Filters(year_max=2015),
        Filters(),
        Filters(),
        Filters(year_max=1950),  # The Hobbit, not The Fellowship of the Ring
    ]
    args: dict[str, Any] = {"k": 20, "heads": heads, "scales": SCALES}
    want = rank_queries(single, q, texts, filters=filters, **args)
    got = rank_queries(sharded, q, texts, filters=filters, **args)
    _same_rankings(got, want)
    assert want[3].matched == 0 and got[3].hits == []
    assert want[5].hits == [] and want[5].abstained == ("lexical",) and not want[5].head_weights
    assert want[6].head_weights == {"author": 1.0}  # the 2 books of his, then weight 0
    assert [single.books.authors[h.row] for h in want[6].hits[:2]] == [["J. R. R. Tolkien"]] * 2
    assert math.isclose(sum(h.weight for h in want[6].hits[:2]), 1.0, rel_tol=1e-9)


def _disagreeing_index(n: int = 2000) -> loaded_index.LoadedIndex:
    """Title and description keys whose scores against q = e₁ are two flat lists with disjoint
    tops (as in tests/test_mixture.py): the threshold needs more than one round."""
    a, b = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    a[:1000] = torch.linspace(1.0, 0.99, 1000)
    b[1000:] = torch.linspace(0.9995, 0.9895, 1000)
    a[1500] = b[500] = 0.995  # books good in both heads

    def keys(s: torch.Tensor) -> np.ndarray:
        k = torch.zeros(n, 4, dtype=torch.float64)
        k[:, 0], k[:, 1] = s, (1 - s**2).sqrt()  # unit length, q·k = s
        return k.float().numpy()

    description = keys(b)
    books = BookColumns(
        ids=[f"book-{i}" for i in range(n)],
        titles=[f"Book {i}" for i in range(n)],
        authors=[[f"Author {i % 7}"] for i in range(n)],
        years=[1990 + i % 30 for i in range(n)],
        languages=["en"] * n,
    )
    return loaded_index.LoadedIndex(
        books=books,
        keys={"title": keys(a), RANK_FIELD: description},
        values=description,
        model="crafted",
        generation=1,
    )


@pytest.mark.parametrize("shards", [2, 3])
def test_sharded_threshold_rounds_give_the_single_answer(shards: int) -> None:
    """More than one threshold round: the shards' top k' again and the candidates' scores."""
    index = _disagreeing_index()
    single = ServedIndex.local(index, device="cpu")
    router = _router((index, [None] * len(index)), shards)
    q = torch.tensor([[1.0, 0.0, 0.0, 0.0]] * 3)
    texts = ["book", "author 3", "nothing here"]
    heads = [parse_heads("title:0.5,description:0.5")] * 2 + [parse_heads("title:1")]
    filters = [Filters(), Filters(year_min=2000), Filters(author="author 3")]
    args: dict[str, Any] = {"k": 5, "heads": heads, "scales": SCALES}
    want = rank_queries(single, q, texts, filters=filters, **args)
    got = rank_queries(router, q, texts, filters=filters, **args)
    assert want[0].rounds > 1
    assert {h.row for h in want[0].hits[:2]} == {500, 1500}
    _same_rankings(got, want)


BOOK_HEADS = [
    None,  # the service's default (ATTEND_SIMILAR_HEADS)
    "title:1",
    "description:1",
    "lexical:1",
    "title:0.3,description:0.3,lexical:0.4",
    "author:1,series:1",  # the scored heads over the shards' description keys alone
]


@pytest.mark.parametrize("heads", BOOK_HEADS)
def test_sharded_similar_and_recommend_answer_like_one_process(
    single: ServedIndex, sharded: ServedIndex, heads: str | None
) -> None:
    """Books as the queries: the liked books' keys come from the shards that hold them, and the
    sharded answer is the single process's, hit for hit and share for share."""
    default = ServiceSettings().similar
    book_heads = BookHeads(parse_heads(heads), default.scales) if heads else default
    ids = single.books.ids
    for book_id in (ids[0], ids[len(ids) // 2], ids[-1]):  # rows in every shard
        want = book_ranking.similar(single, book_id, k=8, heads=book_heads)
        got = book_ranking.similar(sharded, book_id, k=8, heads=book_heads)
        assert [h.book.id for h in got.results] == [h.book.id for h in want.results]
        _close(asdict(got), asdict(want))
    liked, disliked = [ids[1], ids[-2], ids[len(ids) // 3]], [ids[len(ids) // 2 + 1]]
    want_r = book_ranking.recommend(single, liked, disliked, k=8, heads=book_heads)
    got_r = book_ranking.recommend(sharded, liked, disliked, k=8, heads=book_heads)
    assert [h.book.id for h in got_r.results] == [h.book.id for h in want_r.results]
    _close(asdict(got_r), asdict(want_r))
    for hit in want_r.results:
        assert math.isclose(sum(b.share for b in hit.because), 1.0, rel_tol=1e-9)
        assert {hit.book.id}.isdisjoint(liked + disliked)
