"""Sharded search without the transport: a shard (a `Ranker` over a contiguous slice of the
catalog's rows) and the router's `ShardedRanker` (the books without their keys, asking every
shard and merging their answers exactly, models/sharded.py).

service/ray_serve.py puts shards and router on Ray Serve; `LocalShard` answers in-process, for
tests and benchmarks. Each shard builds its own masks from the filters, so a search sends every
shard its query vectors and filters (bytes), never an (N,) mask.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Protocol

import torch
from torch import Tensor

from indexer.store import LoadedIndex
from models.attention import Attention
from models.sharded import ShardAnswer, merge, split
from service.ranker import Filters, Ranker

logger = logging.getLogger(__name__)


class ShardReply(Protocol):
    def result(self) -> ShardAnswer: ...


class ShardClient(Protocol):
    """How the router reaches one shard; `submit` must not wait for the answer."""

    def submit(
        self, q: Tensor, *, k: int, scale: float, filters: Sequence[Filters]
    ) -> ShardReply: ...


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
    """Shard `shard` of `shards`: rows [start, stop) of the index, answering in global rows."""

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

    def attend(self, q: Tensor, *, k: int, scale: float, filters: Sequence[Filters]) -> ShardAnswer:
        """This shard's top-k (global rows), log-sum-exp and matched count, on the CPU."""
        if len(self.ranker) == 0:
            return ShardAnswer.empty(q.shape[0])
        att = self.ranker.attend(q, k=k, scale=scale, filters=filters)
        return ShardAnswer.of(att, offset=self.start).to("cpu")


class LocalShard:
    """A `ShardClient` answering in the calling thread."""

    def __init__(self, shard: Shard):
        self.shard = shard

    def submit(
        self, q: Tensor, *, k: int, scale: float, filters: Sequence[Filters]
    ) -> Future[ShardAnswer]:
        done: Future[ShardAnswer] = Future()
        done.set_result(self.shard.attend(q, k=k, scale=scale, filters=filters))
        return done


class ShardedRanker(Ranker):
    """The router's ranker: the catalog's books (ids, titles, … for the responses) without their
    keys, which the shards hold. A search asks every shard at once and merges the answers."""

    holds_keys = False  # searches rank with the description head alone (service/searcher.py)

    def __init__(self, index: LoadedIndex, shards: Sequence[ShardClient]):
        # No Ranker.__init__: nothing goes on a device here; the merge runs on the CPU.
        self.device = torch.device("cpu")
        self.model = index.model
        self.generation = index.generation
        self.ids = index.ids
        self.titles = index.titles
        self.authors = index.authors
        self.years = index.years
        self.languages = index.languages
        self.shards = list(shards)
        self._dim = int(index.values.shape[1])
        logger.info("router over %d books in %d shards", len(self.ids), len(self.shards))

    @property
    def dim(self) -> int:
        return self._dim

    def attend(self, q: Tensor, *, k: int, scale: float, filters: Sequence[Filters]) -> Attention:
        q = q.cpu()
        replies = [s.submit(q, k=k, scale=scale, filters=list(filters)) for s in self.shards]
        return merge([r.result() for r in replies], k=k)
