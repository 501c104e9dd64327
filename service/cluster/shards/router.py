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

The engine asks these keys as it asks keys in its own process, and the mixture's threshold loop
(models/mixture.py) only yields what it needs: the walk goes engine → here → models, never up.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from indexer.filters import Filters
from indexer.loaded_index import LoadedIndex
from models.heads import DenseHeads, ScoredHead, TopLists
from models.keys import DenseHeadSpec
from models.local_heads import LocalDenseHeads
from models.shard_merge import SparseScores, check_tiling, merge
from service.cluster.shards.shard import ShardClient, ShardQuery, ShardSweep

logger = logging.getLogger(__name__)


class ShardedDenseHeads:
    """`models.heads.DenseHeads` for one batch's `query`, answered by shards that tile the
    catalog's rows: each of the three operations is one round trip to every shard at once,
    merged exactly (models/shard_merge.py)."""

    def __init__(self, shards: Sequence[ShardClient], query: ShardQuery, *, size: int):
        self.shards, self.query, self.size = list(shards), query, size
        self.scales = [scale for _, scale in query.heads]

    def top(self, k: int) -> tuple[TopLists, Tensor]:
        replies = [s.submit_top(self.query, k) for s in self.shards]
        answers = [r.result() for r in replies]  # [shard][head]
        top: TopLists = []
        lse = []
        for h in range(len(self.scales)):
            att = merge([a[h] for a in answers], k=k)
            top.append((att.indices, att.weights.double(), att.scores.double()))
            lse.append(att.logsumexp.double())
        return top, torch.stack(lse, dim=1)  # (B, Hd)

    def rows(self, rows: Tensor) -> ShardedDenseHeads:
        q = self.query
        at = rows.tolist()
        query = ShardQuery(q.q[..., rows, :], q.heads, [q.filters[r] for r in at])
        return ShardedDenseHeads(self.shards, query, size=self.size)

    def scores(self, cand: Tensor) -> Tensor:
        replies = [s.submit_scores(self.query, cand) for s in self.shards]
        # each candidate is scored by its own shard, 0 elsewhere: the sum is that score exactly
        return torch.stack([r.result() for r in replies]).sum(0)

    def sweep(
        self, pi: Tensor, lse: Tensor, cand: Tensor, scored: Sequence[ScoredHead]
    ) -> tuple[Tensor, Tensor]:
        replies = [
            s.submit_sweep(
                self.query,
                ShardSweep(pi, lse, cand, [SparseScores.of(h, s.start, s.stop) for h in scored]),
            )
            for s in self.shards
        ]
        parts = [r.result() for r in replies]
        scores = torch.stack([p[0] for p in parts]).sum(0)  # (B, C, Hd)
        entropy = torch.stack([p[1] for p in parts]).sum(0)  # (B,) the shards' parts
        return scores, entropy


def by_rows(filters: Sequence[Filters], mask: Tensor | None) -> list[Filters]:
    """`filters`, a filter by name (subject, series, publisher) with the rows the mask keeps
    (`Filters.within`): the shards hold no names to find them by. `mask`: (N,) or (B, N), the
    served index's."""
    out = list(filters)
    for b, f in enumerate(filters):
        if f.by_name and f.within is None and mask is not None:
            kept = mask if mask.dim() == 1 else mask[b]  # (N,)
            out[b] = replace(f, within=tuple(kept.nonzero(as_tuple=True)[0].tolist()))
    return out


class ShardedKeys:
    """The keys of a catalog tiled by `shards`; merges run on the router's CPU."""

    device = torch.device("cpu")

    def __init__(self, shards: Sequence[ShardClient], *, size: int, dim: int):
        check_tiling([(s.start, s.stop) for s in shards], size)
        self.shards = list(shards)
        self.size = size
        self._dim = dim

    @classmethod
    def of(cls, index: LoadedIndex, shards: Sequence[ShardClient]) -> ShardedKeys:
        """The keys of `index` (its books; the keys themselves are the shards')."""
        dim = next(iter(index.keys.values())).shape[1] if index.keys else 0
        logger.info("router over %d books in %d shards", len(index), len(shards))
        return cls(shards, size=len(index), dim=int(dim))

    @property
    def dim(self) -> int:
        return self._dim

    def __str__(self) -> str:
        return f"keys on {len(self.shards)} shards"

    def dense_heads(
        self, q: Tensor, heads: DenseHeadSpec, *, filters: Sequence[Filters], mask: Tensor | None
    ) -> DenseHeads:
        """The shards' answers; none asked when there are no dense heads (the lexical head's
        entropy pass then runs here, over the router's mask)."""
        if not heads:
            return LocalDenseHeads([], size=self.size, mask=mask)
        query = ShardQuery(q.cpu(), list(heads), by_rows(filters, mask))
        return ShardedDenseHeads(self.shards, query, size=self.size)

    def unanswered(self) -> str | None:
        """The first shard that does not answer a ping, why; None when every one does."""
        return next((problem for s in self.shards if (problem := s.ping()) is not None), None)

    def key_rows(self, rows: Sequence[int], fields: Sequence[str]) -> Tensor:
        """From the shards that hold them: each row is in one shard, the others answer 0."""
        index = torch.tensor(list(rows), dtype=torch.long)
        replies = [s.submit_keys(index, list(fields)) for s in self.shards]
        return torch.stack([r.result() for r in replies]).sum(0)
