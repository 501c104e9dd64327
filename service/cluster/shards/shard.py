"""A shard without its transport: a contiguous slice of the catalog's rows, with every field's
keys and the filter columns of those rows, answering the dense heads' three operations
(models/heads.py `DenseHeads`) in global rows and on the CPU (what goes back to the router).

Each shard builds its own masks from the filters, so a query travels as a `ShardQuery` (its
vectors, dense heads and filters: bytes, never an (N,) mask). `LocalShard` answers in the calling
thread (tests, benchmarks); service/cluster/shards/deployments.py puts shards on Ray Serve. The
router that asks them is service/cluster/shards/router.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import torch
from torch import Tensor

from indexer.filters import FilterColumns, Filters
from indexer.loaded_index import LoadedIndex
from models.device import pick_device
from models.keys import LocalKeys
from models.shard_merge import ShardAnswer, SparseScores, shard_bounds

logger = logging.getLogger(__name__)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class ShardsOutOfStepError(RuntimeError):
    """A shard holds another version of the index than the router (a re-index in between)."""


class ShardTimeoutError(RuntimeError):
    """A shard did not answer within ATTEND_SHARD_TIMEOUT_S (stopped, frozen, overloaded)."""


class Reply(Protocol[T_co]):
    """A request on its way to a shard: `result()` waits for the answer (a `Future` is one)."""

    def result(self) -> T_co: ...


@dataclass(frozen=True)
class ShardQuery:
    """What every shard is asked about, for one search batch: queries q, (B, d) or (Hd, B, d)
    one block per dense head, the dense heads as (field, scale), and each query's filters."""

    q: Tensor
    heads: list[tuple[str, float]]
    filters: list[Filters]


@dataclass(frozen=True)
class ShardSweep:
    """The sweep's request (models/heads.py `DenseHeads.sweep`): head weights π and global
    log-sum-exps (B, Hd + Hs), the candidates (B, C) in global rows, and the scored heads'
    scores on the shard's rows."""

    pi: Tensor
    lse: Tensor
    cand: Tensor
    scored: list[SparseScores]


class ShardClient(Protocol):
    """How the router reaches one shard (rows [start, stop) of the catalog). Every `submit_*`
    sends its request and returns at once: `.result()` on the reply waits for the answer."""

    @property
    def start(self) -> int: ...

    @property
    def stop(self) -> int: ...

    def submit_top(self, query: ShardQuery, k: int) -> Reply[list[ShardAnswer]]: ...

    def submit_scores(self, query: ShardQuery, cand: Tensor) -> Reply[Tensor]: ...

    def submit_sweep(
        self, query: ShardQuery, sweep: ShardSweep
    ) -> Reply[tuple[Tensor, Tensor]]: ...

    def submit_keys(self, rows: Tensor, fields: Sequence[str]) -> Reply[Tensor]: ...

    def ping(self) -> str | None:
        """Why the shard does not answer now, or None (it answered)."""
        ...


def slice_index(index: LoadedIndex, start: int, stop: int) -> LoadedIndex:
    """Rows [start, stop) of a loaded index (views of its key arrays, no copy; no values)."""
    keys = {f: k[start:stop] for f, k in index.keys.items()}
    return replace(index, books=index.books.slice(start, stop), keys=keys, values=None)


class Shard:
    """Shard `shard` of `shards`: rows [start, stop) of the index."""

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
        self.start, self.stop = shard_bounds(self.total, shards)[shard]
        part = slice_index(index, self.start, self.stop)
        where = pick_device(device)
        self.keys = LocalKeys(
            part.keys, device=where, key_dtype=key_dtype, chunk_size=chunk_size, offset=self.start
        )
        self.filters = FilterColumns(part.books, device=where, offset=self.start)
        logger.info(
            "shard %d/%d: rows %d-%d of %d", shard, shards, self.start, self.stop, self.total
        )

    def __len__(self) -> int:
        return self.stop - self.start

    def top(self, query: ShardQuery, k: int) -> list[ShardAnswer]:
        """Per dense head: this shard's top-k, log-sum-exp and matched count."""
        if len(self) == 0:
            return [ShardAnswer.empty(query.q.shape[-2]) for _ in query.heads]
        dense = self.keys.dense_heads(
            query.q, query.heads, mask=self.filters.batch_mask(query.filters)
        )
        return [ShardAnswer.of(att, offset=self.start).to("cpu") for att in dense.attend_heads(k)]

    def scores(self, query: ShardQuery, cand: Tensor) -> Tensor:
        """Raw scores (B, C, Hd) of the candidates (global rows) in this shard, 0 for others."""
        return self.keys.dense_heads(query.q, query.heads, mask=None).scores(cand)

    def sweep(self, query: ShardQuery, sweep: ShardSweep) -> tuple[Tensor, Tensor]:
        """This shard's candidates' scores (0 for others) and its rows' part of the entropy."""
        dense = self.keys.dense_heads(
            query.q, query.heads, mask=self.filters.batch_mask(query.filters)
        )
        return dense.sweep(sweep.pi, sweep.lse, sweep.cand, [s.head() for s in sweep.scored])

    def keys_of(self, rows: Tensor, fields: Sequence[str]) -> Tensor:
        """(F, R, d) float32: the keys of the global `rows` this shard holds, 0 for others."""
        out = torch.zeros(len(fields), len(rows), self.keys.dim)
        here = ((rows >= self.start) & (rows < self.stop)).nonzero(as_tuple=True)[0]
        if len(here):
            out[:, here] = self.keys.key_rows(rows[here].tolist(), fields)
        return out


def _done(value: T) -> Future[T]:
    done: Future[T] = Future()
    done.set_result(value)
    return done


class LocalShard:
    """A `ShardClient` answering in the calling thread."""

    def __init__(self, shard: Shard):
        self.shard = shard
        self.start, self.stop = shard.start, shard.stop

    def submit_top(self, query: ShardQuery, k: int) -> Future[list[ShardAnswer]]:
        return _done(self.shard.top(query, k))

    def submit_scores(self, query: ShardQuery, cand: Tensor) -> Future[Tensor]:
        return _done(self.shard.scores(query, cand))

    def submit_sweep(self, query: ShardQuery, sweep: ShardSweep) -> Future[tuple[Tensor, Tensor]]:
        return _done(self.shard.sweep(query, sweep))

    def submit_keys(self, rows: Tensor, fields: Sequence[str]) -> Future[Tensor]:
        return _done(self.shard.keys_of(rows, fields))

    def ping(self) -> str | None:
        return None  # it answers in this thread
