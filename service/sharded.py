"""Sharded search without the transport: a shard (a `Ranker` over a contiguous slice of the
catalog's rows) and the router's `ShardedRanker` (the books without their keys, asking every
shard and merging their answers exactly, models/sharded.py).

service/ray_serve.py puts shards and router on Ray Serve; `LocalShard` answers in-process, for
tests and benchmarks. Each shard builds its own masks from the filters, so a search sends every
shard its query vectors and filters (bytes), never an (N,) mask.

A search is the single-process one (service/mixer.py): the router holds the books, the filter
columns and the whole catalog's BM25 index (the lexical head needs the global IDF to be exact;
it is sparse and small next to the keys), and the shards hold every field's keys for their rows
and answer the dense heads' three operations (models/mixture.py `DenseHeads`). Round trips to
every shard, all shards at once, per search batch (`ShardClient`):

- 2 in the common case: `submit_top` (each dense head's top k' and log-sum-exp), then
  `submit_sweep` (given the global log-sum-exps and π: the candidates' scores and the shard's
  part of the entropy);
- 2 more per further threshold round (`submit_top` with a larger k', `submit_scores`): 1 of
  792 searches on the shared catalog needed one;
- 1 more (`submit_scores`) when no query of the batch weighs the description head, for its hits'
  description scores; a batch that weighs only the lexical head asks the shards nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Protocol, TypeVar

import torch
from torch import Tensor

from indexer.store import LoadedIndex
from models.attention import Attention
from models.heads import DenseHead, DenseHeads, LocalDenseHeads
from models.sharded import (
    Reply,
    ShardAnswer,
    ShardedDenseHeads,
    SparseScores,
    check_tiling,
    merge,
    split,
)
from service.ranker import RANK_FIELD, Filters, Ranker, lexical_index, per_head

logger = logging.getLogger(__name__)

T = TypeVar("T")
Fields = Sequence[tuple[str, float]]  # a search's dense heads: (field, scale) each


class ShardClient(Protocol):
    """How the router reaches one shard (rows [start, stop) of the catalog). Every `submit_*`
    sends its request and returns at once: `.result()` on the reply waits for the answer.
    `heads` are the dense heads, (field, scale) each, in the order the answers come in."""

    @property
    def start(self) -> int: ...

    @property
    def stop(self) -> int: ...

    def submit_top(
        self, q: Tensor, *, heads: Fields, k: int, filters: Sequence[Filters]
    ) -> Reply[list[ShardAnswer]]: ...

    def submit_scores(self, q: Tensor, *, heads: Fields, cand: Tensor) -> Reply[Tensor]: ...

    def submit_keys(self, rows: Tensor, *, fields: Sequence[str]) -> Reply[Tensor]: ...

    def submit_sweep(
        self,
        q: Tensor,
        *,
        heads: Fields,
        filters: Sequence[Filters],
        pi: Tensor,
        lse: Tensor,
        cand: Tensor,
        scored: list[SparseScores],
    ) -> Reply[tuple[Tensor, Tensor]]: ...


def slice_index(index: LoadedIndex, start: int, stop: int) -> LoadedIndex:
    """Rows [start, stop) of a loaded index (views of its arrays, no copy)."""
    keys = {f: k[start:stop] for f, k in index.keys.items()}
    shared = [f for f, k in index.keys.items() if index.values is k]  # V = a field's keys
    return replace(
        index,
        ids=index.ids[start:stop],
        titles=index.titles[start:stop],
        authors=index.authors[start:stop],
        years=index.years[start:stop],
        languages=index.languages[start:stop],
        keys=keys,
        values=keys[shared[0]] if shared else index.values[start:stop],
    )


class Shard:
    """Shard `shard` of `shards`: rows [start, stop) of the index, answering in global rows and
    on the CPU (what goes back to the router)."""

    def __init__(
        self,
        index: LoadedIndex,
        *,
        shard: int,
        shards: int,
        device: str = "auto",
        key_dtype: str = "auto",
        chunk_size: int | None = None,
    ):
        self.total = len(index)
        self.start, self.stop = split(self.total, shards)[shard]
        self.ranker = Ranker(
            slice_index(index, self.start, self.stop),
            device=device,
            key_dtype=key_dtype,
            chunk_size=chunk_size,
        )
        logger.info(
            "shard %d/%d: rows %d-%d of %d", shard, shards, self.start, self.stop, self.total
        )

    def top(
        self, q: Tensor, *, heads: Fields, k: int, filters: Sequence[Filters]
    ) -> list[ShardAnswer]:
        """Per dense head: this shard's top-k, log-sum-exp and matched count."""
        if len(self.ranker) == 0:
            return [ShardAnswer.empty(q.shape[0]) for _ in heads]
        dense = self._dense(q, heads, mask=self.ranker.batch_mask(filters))
        return [ShardAnswer.of(att, offset=self.start).to("cpu") for att in dense.attend(k)]

    def scores(self, q: Tensor, *, heads: Fields, cand: Tensor) -> Tensor:
        """Raw scores (B, C, Hd) of the candidates (global rows) in this shard, 0 for others."""
        return self._dense(q, heads, mask=None).scores(cand)

    def sweep(
        self,
        q: Tensor,
        *,
        heads: Fields,
        filters: Sequence[Filters],
        pi: Tensor,
        lse: Tensor,
        cand: Tensor,
        scored: list[SparseScores],
    ) -> tuple[Tensor, Tensor]:
        """This shard's candidates' scores (0 for others) and its rows' part of the entropy."""
        dense = self._dense(q, heads, mask=self.ranker.batch_mask(filters))
        return dense.sweep(pi, lse, cand, [s.head() for s in scored])

    def attend(self, q: Tensor, *, k: int, scale: float, filters: Sequence[Filters]) -> ShardAnswer:
        """The description head alone: this shard's top-k, log-sum-exp and matched count."""
        return self.top(q, heads=[(RANK_FIELD, scale)], k=k, filters=filters)[0]

    def keys(self, rows: Tensor, fields: Sequence[str]) -> Tensor:
        """(F, R, d) float32: the keys of the global `rows` this shard holds, 0 for others."""
        out = torch.zeros(len(fields), len(rows), self.ranker.dim)
        here = ((rows >= self.start) & (rows < self.stop)).nonzero(as_tuple=True)[0]
        if len(here):
            local = (rows[here] - self.start).tolist()
            out[:, here] = self.ranker.key_rows(local, fields)
        return out

    def _dense(self, q: Tensor, heads: Fields, *, mask: Tensor | None) -> LocalDenseHeads:
        qs = per_head(q.to(self.ranker.device), len(heads))
        return LocalDenseHeads(
            [
                DenseHead(qs[h], self.ranker.keys_by_field[field], scale)
                for h, (field, scale) in enumerate(heads)
            ],
            size=len(self.ranker),
            mask=mask,
            chunk_size=self.ranker.chunk_size,
            offset=self.start,
        )


def _done(value: T) -> Future[T]:
    done: Future[T] = Future()
    done.set_result(value)
    return done


class LocalShard:
    """A `ShardClient` answering in the calling thread."""

    def __init__(self, shard: Shard):
        self.shard = shard
        self.start, self.stop = shard.start, shard.stop

    def submit_top(
        self, q: Tensor, *, heads: Fields, k: int, filters: Sequence[Filters]
    ) -> Future[list[ShardAnswer]]:
        return _done(self.shard.top(q, heads=heads, k=k, filters=filters))

    def submit_scores(self, q: Tensor, *, heads: Fields, cand: Tensor) -> Future[Tensor]:
        return _done(self.shard.scores(q, heads=heads, cand=cand))

    def submit_keys(self, rows: Tensor, *, fields: Sequence[str]) -> Future[Tensor]:
        return _done(self.shard.keys(rows, fields))

    def submit_sweep(
        self,
        q: Tensor,
        *,
        heads: Fields,
        filters: Sequence[Filters],
        pi: Tensor,
        lse: Tensor,
        cand: Tensor,
        scored: list[SparseScores],
    ) -> Future[tuple[Tensor, Tensor]]:
        return _done(
            self.shard.sweep(
                q, heads=heads, filters=filters, pi=pi, lse=lse, cand=cand, scored=scored
            )
        )


class _BatchShard:
    """A `ShardClient` bound to one search batch's queries, dense heads and filters: the
    `DenseShard` that `models.sharded.ShardedDenseHeads` asks."""

    def __init__(self, client: ShardClient, q: Tensor, heads: Fields, filters: list[Filters]):
        self.client, self.q, self.heads, self.filters = client, q, heads, filters

    @property
    def start(self) -> int:
        return self.client.start

    @property
    def stop(self) -> int:
        return self.client.stop

    def top(self, k: int) -> Reply[list[ShardAnswer]]:
        return self.client.submit_top(self.q, heads=self.heads, k=k, filters=self.filters)

    def scores(self, cand: Tensor) -> Reply[Tensor]:
        return self.client.submit_scores(self.q, heads=self.heads, cand=cand)

    def sweep(
        self, pi: Tensor, lse: Tensor, cand: Tensor, scored: list[SparseScores]
    ) -> Reply[tuple[Tensor, Tensor]]:
        return self.client.submit_sweep(
            self.q,
            heads=self.heads,
            filters=self.filters,
            pi=pi,
            lse=lse,
            cand=cand,
            scored=scored,
        )


class ShardedRanker(Ranker):
    """The router's ranker: the catalog's books (ids, titles, … for the responses), their filter
    columns and BM25 index, without their keys, which the shards hold. A search asks every shard
    at once and merges the answers (module docstring)."""

    def __init__(
        self,
        index: LoadedIndex,
        shards: Sequence[ShardClient],
        *,
        descriptions: Sequence[str | None] | None = None,
    ):
        # No Ranker.__init__: no keys, nothing on a device; the merges run on the CPU.
        self.device = torch.device("cpu")
        self.model = index.model
        self.generation = index.generation
        self.ids = index.ids
        self.titles = index.titles
        self.authors = index.authors
        self.years = index.years
        self.languages = index.languages
        self._rows = {book_id: i for i, book_id in enumerate(index.ids)}
        self.chunk_size = None
        self.shards = list(shards)
        check_tiling([(s.start, s.stop) for s in self.shards], len(self.ids))
        self._dim = int(index.values.shape[1])
        # the whole catalog's BM25 (global IDF), and masks for the lexical head, the candidates
        # and the matched counts; the shards build their own from the same filters
        self.lexical = lexical_index(index, descriptions)
        self._prepare_filters(index)
        logger.info("router over %d books in %d shards", len(self.ids), len(self.shards))

    @property
    def dim(self) -> int:
        return self._dim

    def dense_heads(
        self,
        q: Tensor,
        heads: Sequence[tuple[str, float]],
        *,
        filters: Sequence[Filters],
        mask: Tensor | None,
    ) -> DenseHeads:
        """The shards' answers for the dense heads; none asked when there are none (the lexical
        head's entropy pass then runs here, over the router's mask)."""
        if not heads:
            return LocalDenseHeads([], size=len(self), mask=mask)
        q, heads, filters = q.cpu(), list(heads), list(filters)
        return ShardedDenseHeads(
            [_BatchShard(client, q, heads, filters) for client in self.shards],
            scales=[scale for _, scale in heads],
            size=len(self),
        )

    def key_rows(self, rows: Sequence[int], fields: Sequence[str]) -> Tensor:
        """(F, R, d) float32: the keys of `rows`, from the shards that hold them (each row is in
        one shard, and the others answer 0 for it)."""
        index = torch.tensor(list(rows), dtype=torch.long)
        replies = [s.submit_keys(index, fields=list(fields)) for s in self.shards]
        return torch.stack([r.result() for r in replies]).sum(0)

    def attend(self, q: Tensor, *, k: int, scale: float, filters: Sequence[Filters]) -> Attention:
        q = q.cpu()
        heads = [(RANK_FIELD, scale)]
        replies = [s.submit_top(q, heads=heads, k=k, filters=list(filters)) for s in self.shards]
        return merge([r.result()[0] for r in replies], k=k)
