"""Sharded exact attention: 1, 2 and 3 shards give one index's ids and weights (relative 1e-6)
on the demo catalog embedded with the real model, with and without filters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from sqlalchemy.orm import Session

from indexer import db, pipeline, store
from indexer.data import DEMO_CATALOG
from indexer.settings import IndexSettings
from models.attention import Attention, attend
from models.encoder import SentenceTransformerEncoder
from models.sharded import ShardAnswer, attend_shard, merge, split
from service.ranker import RANK_FIELD, Filters, Ranker
from service.sharded import LocalShard, Shard, ShardedRanker

pytestmark = pytest.mark.model
QUERIES = ["generative AI", "the history of Rome", "a picture book about a bear", "databases"]
SCALE = 20.0


@pytest.fixture(scope="module")
def encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(device="cpu", backend="torch")


@pytest.fixture(scope="module")
def index(
    encoder: SentenceTransformerEncoder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[store.LoadedIndex]:
    """The demo catalog indexed with the real model into SQLite, loaded as the service does."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sharded') / 'attend.db'}"
    engine = db.create_db_engine(url)
    pipeline.run(IndexSettings(database_url=url), engine=engine, encoder=encoder, path=DEMO_CATALOG)
    with Session(engine) as session:
        yield store.load_index(session=session, model=encoder.name)
    engine.dispose()


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
        attend_shard(
            q,
            keys[a:b],
            keys[a:b],
            offset=a,
            k=k,
            scale=SCALE,
            mask=None if mask is None else mask[..., a:b],
        )
        for a, b in split(len(keys), shards)
    ]
    return merge(answers, k=k)


def test_split_covers_every_row_once() -> None:
    assert split(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert split(2, 3) == [(0, 0), (0, 1), (1, 2)]
    with pytest.raises(ValueError, match="at least one shard"):
        split(10, 0)


@pytest.mark.parametrize("masking", ["none", "shared", "per_query", "one_shard_only"])
def test_shards_give_the_single_index_answer(
    index: store.LoadedIndex, encoder: SentenceTransformerEncoder, masking: str
) -> None:
    keys = torch.from_numpy(index.keys[RANK_FIELD])  # (N, d)
    q = encoder.encode(QUERIES)  # (B, d)
    N = len(keys)
    years = torch.tensor([y or 0 for y in index.years])
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


def test_everything_masked_merges_to_nothing(index: store.LoadedIndex) -> None:
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


def test_sharded_ranker_ranks_like_the_ranker(
    index: store.LoadedIndex, encoder: SentenceTransformerEncoder
) -> None:
    """The service path: filters become each shard's own masks; hits, weights and matched
    counts are the single Ranker's."""
    q = encoder.encode(QUERIES)
    filters = [Filters(), Filters(year_min=2000), Filters(author="a"), Filters(language="zz")]
    want = Ranker(index, device="cpu").rank(q, k=10, scale=SCALE, filters=filters)
    for shards in (1, 2, 3):
        clients = [
            LocalShard(Shard(index, shard=s, shards=shards, device="cpu")) for s in range(shards)
        ]
        got = ShardedRanker(index, clients).rank(q, k=10, scale=SCALE, filters=filters)
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


def test_a_shard_with_no_rows_answers_nothing(index: store.LoadedIndex) -> None:
    tiny = Shard(index, shard=0, shards=len(index) + 1, device="cpu")  # rows [0, 0)
    assert len(tiny.ranker) == 0
    answer: ShardAnswer = tiny.attend(
        torch.from_numpy(index.keys[RANK_FIELD][:2]), k=3, scale=SCALE, filters=[Filters()] * 2
    )
    assert answer.indices.shape == (2, 0) and torch.all(torch.isneginf(answer.logsumexp))
