"""The router's side of sharded search: a `KeyStore` whose keys are on the shards.

The router serves a `ServedIndex` like a single process does (service/engine/query_ranking.py):
it holds the books, the filter columns and the whole catalog's BM25 index (the lexical head needs
the global IDF to be exact; it is sparse and small next to the keys), while its `ShardedKeys`
asks every shard at once and merges their answers exactly (models/shard_merge.py). Round trips
to every shard, all shards at once, per search batch:

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

import torch
from torch import Tensor

from indexer.loaded_index import LoadedIndex
from models.heads import DenseHeads, LocalDenseHeads
from models.shard_merge import Reply, ShardAnswer, ShardedDenseHeads, SparseScores, check_tiling
from service.cluster.shard import ShardClient, ShardQuery, ShardSweep
from service.engine.filters import Filters
from service.engine.served_index import DenseHeadSpec, ServedIndex

logger = logging.getLogger(__name__)


class _BatchShard:
    """One shard bound to one search batch's query: the `DenseShard` that
    `models.shard_merge.ShardedDenseHeads` asks."""

    def __init__(self, client: ShardClient, query: ShardQuery):
        self.client, self.query = client, query
        self.start, self.stop = client.start, client.stop

    def top(self, k: int) -> Reply[list[ShardAnswer]]:
        return self.client.submit_top(self.query, k)

    def scores(self, cand: Tensor) -> Reply[Tensor]:
        return self.client.submit_scores(self.query, cand)

    def sweep(
        self, pi: Tensor, lse: Tensor, cand: Tensor, scored: list[SparseScores]
    ) -> Reply[tuple[Tensor, Tensor]]:
        return self.client.submit_sweep(self.query, ShardSweep(pi, lse, cand, scored))


class ShardedKeys:
    """The keys of a catalog tiled by `shards`; merges run on the router's CPU."""

    device = torch.device("cpu")

    def __init__(self, shards: Sequence[ShardClient], *, size: int, dim: int):
        check_tiling([(s.start, s.stop) for s in shards], size)
        self.shards = list(shards)
        self.size = size
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    def dense_heads(
        self, q: Tensor, heads: DenseHeadSpec, *, filters: Sequence[Filters], mask: Tensor | None
    ) -> DenseHeads:
        """The shards' answers; none asked when there are no dense heads (the lexical head's
        entropy pass then runs here, over the router's mask)."""
        if not heads:
            return LocalDenseHeads([], size=self.size, mask=mask)
        query = ShardQuery(q.cpu(), list(heads), list(filters))
        return ShardedDenseHeads(
            [_BatchShard(client, query) for client in self.shards],
            scales=[scale for _, scale in heads],
            size=self.size,
        )

    def key_rows(self, rows: Sequence[int], fields: Sequence[str]) -> Tensor:
        """From the shards that hold them: each row is in one shard, the others answer 0."""
        index = torch.tensor(list(rows), dtype=torch.long)
        replies = [s.submit_keys(index, list(fields)) for s in self.shards]
        return torch.stack([r.result() for r in replies]).sum(0)


def sharded_index(
    index: LoadedIndex,
    shards: Sequence[ShardClient],
    *,
    descriptions: Sequence[str | None] | None = None,
    subjects: Sequence[Sequence[str]] | None = None,
) -> ServedIndex:
    """The router's served index: `index`'s books (its keys are the shards'), over `shards`."""
    dim = next(iter(index.keys.values())).shape[1] if index.keys else 0
    keys = ShardedKeys(shards, size=len(index), dim=int(dim))
    logger.info("router over %d books in %d shards", len(index), len(keys.shards))
    return ServedIndex(index, keys, descriptions=descriptions, subjects=subjects)
